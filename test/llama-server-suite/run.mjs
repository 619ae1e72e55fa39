#!/usr/bin/env node
// Runs llama.cpp's own server test suite (tools/server/tests, pytest) against bloomery-serve: see README.md.
//   node test/llama-server-suite/run.mjs [--ci] [pytest arguments]     (npm run test:llama-suite -- ...)
// --ci runs CI_FILES, the files CI runs (.ci/run); without it, every file of SUITE_FILES (or the unit/ files given).
// The suite is read from the llama.cpp git bundle that node-llama-cpp ships, at the commit pinned below; the
// server is dist/serve-cli.js (npm run build first); Python and pytest are Debian's (.ci/run installs them).
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The llama.cpp commit node-llama-cpp 3.21.1 builds (its llama/gitRelease.bundle's HEAD). */
export const SUITE_COMMIT = "80fb11ac73e66d89eae2c6a91d8a77428fa733ed";

/** The suite's files bloomery-serve is held to (issue 21); the others test llama-server's router, MCP, vision, ... */
export const SUITE_FILES = [
  "test_basic",
  "test_chat_completion",
  "test_completion",
  "test_compat_anthropic",
  "test_compat_oai_responses",
  "test_ctx_shift",
  "test_embedding",
  "test_ignore_eos",
  "test_infill",
  "test_metrics",
  "test_rerank",
  "test_security",
  "test_slot_save",
  "test_speculative",
  "test_template",
  "test_tokenize",
  "test_tool_call",
  "test_stream",
].map((name) => `unit/${name}.py`);

/**
 * The files CI runs (--ci): all but test_compat_anthropic and test_completion, which take 6 of the suite's 13
 * minutes on a busy two-core machine and whose requests test/server-anthropic.test.ts and
 * test/server-native.test.ts also make; `npm run test:llama-suite` runs them all.
 */
export const CI_FILES = SUITE_FILES.filter(
  (file) => file !== "unit/test_compat_anthropic.py" && file !== "unit/test_completion.py",
);

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, "../..");
const work = join(here, ".work");
const python = process.env.BLOOMERY_PYTHON ?? "/usr/bin/python3";

/** The suite's tests folder (and the chat templates it reads from ../../../models/templates), extracted once. */
function extractSuite() {
  const tree = join(work, `llama.cpp-${SUITE_COMMIT.slice(0, 12)}`);
  if (existsSync(join(tree, "tools/server/tests/utils.py"))) return tree;
  const bundle = join(root, "node_modules/node-llama-cpp/llama/gitRelease.bundle");
  if (!existsSync(bundle)) throw new Error(`${bundle} is missing: run npm ci`);
  mkdirSync(work, { recursive: true });
  const clone = mkdtempSync(join(work, "clone-"));
  const partial = `${tree}.partial`;
  try {
    execFileSync("git", ["clone", "--quiet", "--no-checkout", bundle, clone], { stdio: "inherit" });
    rmSync(partial, { recursive: true, force: true });
    mkdirSync(partial, { recursive: true });
    const archive = execFileSync(
      "git",
      ["-C", clone, "archive", "--format=tar", SUITE_COMMIT, "tools/server/tests", "models/templates", "LICENSE"],
      { maxBuffer: 256 * 1024 ** 2 },
    );
    execFileSync("tar", ["-x", "-C", partial], { input: archive });
    renameSync(partial, tree);
  } finally {
    rmSync(clone, { recursive: true, force: true });
  }
  return tree;
}

/** The test models, written once: what each of the suite's presets runs on (see bloomery_suite.py). */
function writeModels() {
  const models = join(work, "models");
  mkdirSync(models, { recursive: true });
  const synthetic = (preset) => {
    const path = join(models, `${preset}.gguf`);
    if (!existsSync(path)) {
      execFileSync("node", [join(root, "dist/synth-cli.js"), preset, path, "--seed", "21"], { stdio: "inherit" });
    }
    return path;
  };
  const defaultModel = join(root, "models/bloomery-tiny-moe-Q8_0.gguf");
  return {
    default: defaultModel,
    infill: synthetic("tiny-qwen3moe-fim"),
    embedding: synthetic("tiny-qwen3-embedding"),
    reranker: synthetic("tiny-qwen3-reranker"),
    // A model that writes until n_predict, as TinyStories does (expected.py's WRITES_ON).
    writes_on: synthetic("tiny-qwen3moe-8k"),
  };
}

function main() {
  if (!existsSync(join(root, "dist/serve-cli.js"))) throw new Error("dist/serve-cli.js is missing: npm run build");
  const tree = extractSuite();
  const models = writeModels();
  const server = join(work, "bin/llama-server");
  mkdirSync(dirname(server), { recursive: true });
  writeFileSync(server, `#!/bin/sh\nexec node ${JSON.stringify(join(root, "dist/serve-cli.js"))} "$@"\n`);
  chmodSync(server, 0o755);

  const paths = [here];
  if (spawnSync(python, ["-c", "import openai"]).status !== 0) {
    console.log("llama-server-suite: the openai Python package is missing: using shim/openai (see its docstring)");
    paths.push(join(here, "shim"));
  }
  const ci = process.argv.includes("--ci");
  const args = process.argv.slice(2).filter((a) => a !== "--ci");
  const selection = args.some((a) => a.startsWith("unit/")) ? [] : ci ? CI_FILES : SUITE_FILES;
  const pytest = spawnSync(
    python,
    [
      "-m",
      "pytest",
      "-p",
      "bloomery_suite",
      "-p",
      "no:cacheprovider",
      "-m",
      "not slow",
      "-rfEX",
      ...selection,
      ...args,
    ],
    {
      cwd: join(tree, "tools/server/tests"),
      stdio: "inherit",
      env: {
        ...process.env,
        PYTHONPATH: [...paths, process.env.PYTHONPATH].filter(Boolean).join(":"),
        LLAMA_SERVER_BIN_PATH: server,
        BLOOMERY_SUITE_MODELS: JSON.stringify(models),
      },
    },
  );
  process.exit(pytest.status ?? 1);
}

main();
