import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/device/**", "node_modules/**"],
    testTimeout: 120_000,
    hookTimeout: 300_000,
    pool: "forks",
    // Worker threads the SDK starts from its sources (src/grammar/grammar-worker.ts) load outside
    // vitest's module runner, through Node's loader: these hooks let it run TypeScript.
    execArgv: ["--import", "./test/child-loader.mjs"],
  },
});
