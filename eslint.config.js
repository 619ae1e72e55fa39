import js from "@eslint/js";
import tseslint from "typescript-eslint";

export default tseslint.config(
  {
    ignores: [
      "dist/**",
      "build/**",
      "docs/api/**",
      "node_modules/**",
      "prebuilds/**",
      ".device/**",
      "build-arm64/**",
      ".peer/**",
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: "readonly", console: "readonly", Buffer: "readonly", fetch: "readonly" } },
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_" }],
    },
  },
  {
    // bloomery-serve's web page runs in the browser.
    files: ["examples/server/webui/**/*.js"],
    languageOptions: {
      globals: Object.fromEntries(
        ["document", "localStorage", "fetch", "performance", "setTimeout", "TextDecoderStream", "AbortController"].map(
          (name) => [name, "readonly"],
        ),
      ),
    },
  },
);
