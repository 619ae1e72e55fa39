// Runs the TypeScript sources in a plain child process (`node --import ./test/child-loader.mjs x.ts`), for the
// tests that must watch a process crash or hang from outside (see child-loader-hooks.mjs).
import { register } from "node:module";

register("./child-loader-hooks.mjs", import.meta.url);
