import { defineConfig } from "tsup";

// The library is built once, as CommonJS (`require`, which Electron apps still use); `import`
// reaches that same build through the ES module entry tools/build/esm-entry.mjs writes after this,
// so both share one copy of every class (no dual-package hazard). The command-line tools are ESM.

export default defineConfig([
  {
    entry: { index: "src/index.ts" },
    format: ["cjs"],
    dts: true,
    shims: true,
    sourcemap: true,
    clean: true,
    target: "node20",
    outDir: "dist",
  },
  {
    // The grammar worker's thread (src/grammar/grammar-async.ts), a file of its own beside the
    // library, which starts it.
    entry: { "grammar-worker": "src/grammar/grammar-worker.ts" },
    format: ["cjs"],
    sourcemap: true,
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
      "train-nextn-export": "tools/train/nextn-export-cli.ts",
    },
    format: ["esm"],
    shims: true,
    sourcemap: true,
    target: "node20",
    outDir: "dist",
    banner: { js: "#!/usr/bin/env node" },
  },
]);
