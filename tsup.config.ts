import { defineConfig } from "tsup";

// The library is built twice (ESM for `import`, CJS for `require`, which Electron apps
// still use); the command-line tools once, as ESM.
export default defineConfig([
  {
    entry: { index: "src/index.ts" },
    format: ["esm", "cjs"],
    dts: true,
    shims: true,
    sourcemap: true,
    clean: true,
    target: "node20",
    outDir: "dist",
  },
  {
    entry: {
      "synth-cli": "tools/synth/cli.ts",
      "inspect-cli": "tools/inspect/cli.ts",
      "chat-cli": "tools/chat/cli.ts",
      "serve-cli": "examples/server/cli.ts",
      "train-export": "tools/train/export-cli.ts",
    },
    format: ["esm"],
    shims: true,
    sourcemap: true,
    target: "node20",
    outDir: "dist",
    banner: { js: "#!/usr/bin/env node" },
  },
]);
