import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    exclude: ["test/device/**", "node_modules/**"],
    testTimeout: 120_000,
    hookTimeout: 300_000,
    pool: "forks",
  },
});
