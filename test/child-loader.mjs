// Runs the TypeScript sources in a plain child process (`node --import ./test/child-loader.mjs x.ts`), for the
// tests that must watch a process crash or hang from outside, and in the worker threads the SDK starts from its
// sources in vitest's processes (vitest.config.ts); see child-loader-hooks.mjs.
import { register } from "node:module";

register("./child-loader-hooks.mjs", import.meta.url);
