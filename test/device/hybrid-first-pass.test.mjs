// GPU machine: a model whose experts are split between the GPU and the CPU runs its first pass
// in a process, a few rows from position 0 that the CPU serves between the GPU's layers, to the
// end, with the whole-GPU model's logits within the bar. The GPU waits for the host between
// layers there, so a kernel the driver loaded only at its first launch (CUDA's lazy module
// loading) would hang that pass where a layer launches kernels no earlier layer did (the
// hybrid Qwens' gated attention after three DeltaNet layers): bloomery asks for eager loading,
// and a model with experts on the CPU refuses an environment that asks for lazy loading, by name.
// Each first pass runs in a child process of its own. Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { assertWithinBar, compare, fixtures, skip, split } from "./helpers.mjs";
import { agreementBar, walkTokens } from "../distributions.mjs";
import { loadModel } from "../../dist/index.js";

const { dir, fixture } = fixtures("hybrid-first-pass");
const child = fileURLToPath(new globalThis.URL("./hybrid-first-pass.mjs", import.meta.url));

/** The child's run of `path` with `plan` over `tokens`: its exit status, stderr and logits. */
function firstPass(path, plan, tokens, env = {}) {
  const planFile = join(dir, "plan.json");
  const tokensFile = join(dir, "tokens.json");
  const out = join(dir, "first-pass.f32");
  writeFileSync(planFile, JSON.stringify(plan));
  writeFileSync(tokensFile, JSON.stringify(tokens));
  const run = spawnSync(process.execPath, [child, path, planFile, tokensFile, out], {
    env: { ...process.env, ...env },
    encoding: "utf8",
    timeout: 60_000,
  });
  if (run.status !== 0) return { status: run.status, signal: run.signal, stderr: run.stderr };
  const bytes = readFileSync(out);
  return { status: 0, logits: new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4) };
}

for (const preset of ["tiny-qwen35moe", "tiny-qwen3next", "tiny-qwen3moe"]) {
  test(`${preset}: a hybrid model's first pass of a few rows ends, with the whole-GPU logits`, { skip }, async () => {
    const path = fixture(preset, "F32");
    const whole = await loadModel(path, { gpu: "auto", contextSize: 1024 });
    try {
      const plan = split(whole.plan, (e) => e % 2 === 0);
      const vocab = whole.info.vocabSize;
      // 8 rows: the mat-vec kernels, the CPU serving every layer (too few rows to stream experts).
      const tokens = walkTokens(whole.info.bosToken, vocab, 8);
      const expected = await whole.createSession().evaluate(tokens, { logits: "all" });
      const hybrid = firstPass(path, plan, tokens);
      assert.equal(hybrid.status, 0, `the child ended with ${hybrid.status ?? hybrid.signal}: ${hybrid.stderr}`);
      const agreement = compare(expected, hybrid.logits, vocab);
      console.log(`${preset}: ${JSON.stringify(agreement)}`);
      assertWithinBar({ hybrid: agreement }, agreementBar(1, 0));
    } finally {
      whole.dispose();
    }
  });
}

test("experts on the CPU under CUDA_MODULE_LOADING=LAZY are refused by name", { skip }, async () => {
  const path = fixture("tiny-qwen35moe", "F32");
  const whole = await loadModel(path, { gpu: "auto", contextSize: 1024 });
  const plan = split(whole.plan, (e) => e % 2 === 0);
  whole.dispose();
  const lazy = firstPass(path, plan, [1, 2, 3], { CUDA_MODULE_LOADING: "LAZY" });
  assert.equal(lazy.status, 3, `the child ended with ${lazy.status ?? lazy.signal}: ${lazy.stderr}`);
  assert.match(lazy.stderr, /^UNSUPPORTED_FEATURE: .*CUDA_MODULE_LOADING is LAZY/);
});
