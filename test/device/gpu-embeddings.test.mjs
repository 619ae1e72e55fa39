// GPU machine: embeddings and reranking on the GPU give the CPU path's vectors and scores, whole
// on the card and with every routed expert on the CPU (hybrid passes), for each pooling; inputs
// from one token to one longer than a GPU pass (2,048 rows: two passes), several in one pass. The
// GPU's hidden states differ from the CPU's by the rounding of other sums (gpu-vs-cpu.test.mjs),
// so the bar is the cosine llama.cpp's embeddings are held to (>= 0.999), per pooled vector and
// per token vector. Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fixtures, skip, split } from "./helpers.mjs";
import { loadModel } from "../../dist/index.js";

const { fixture } = fixtures("embeddings");
const CONTEXT = 4096;
const BAR = 0.999;

function cosine(a, b) {
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  return dot / Math.sqrt(na * nb);
}

/** Inputs of 1, 5, 40 and 2,500 token ids and a text, spread over the vocabulary. */
function inputsOf(vocab) {
  const ids = (count, seed) => Array.from({ length: count }, (_, i) => (i * 7919 + seed * 131) % vocab);
  return [ids(1, 1), ids(5, 2), ids(40, 3), ids(2500, 4), "The ferry leaves at seven."];
}

async function expectSameEmbeddings(cpu, gpu, what) {
  const inputs = inputsOf(cpu.info.vocabSize);
  for (const pooling of ["mean", "cls", "last", "none"]) {
    const want = await cpu.embed(inputs, { pooling, normalize: false });
    const got = await gpu.embed(inputs, { pooling, normalize: false });
    assert.equal(got.length, want.length);
    let worst = 1;
    for (const [i, w] of want.entries()) {
      assert.equal(got[i].tokenCount, w.tokenCount, `${what} ${pooling} input ${i}: token count`);
      worst = Math.min(worst, cosine(got[i].vector, w.vector));
      if (pooling === "none") {
        assert.equal(got[i].tokenVectors.length, w.tokenVectors.length);
        for (const [t, v] of w.tokenVectors.entries()) worst = Math.min(worst, cosine(got[i].tokenVectors[t], v));
      }
    }
    console.log(`${what} ${pooling}: worst cosine ${worst}`);
    assert.ok(worst >= BAR, `${what} ${pooling}: cosine ${worst} < ${BAR}`);
  }
}

for (const [preset, type] of [
  ["tiny-qwen3-embedding", "Q8_0"],
  ["tiny-qwen3-embedding", "F16"],
  ["tiny-qwen3moe", "Q4_K"],
]) {
  test(`${preset} ${type}: GPU embeddings are the CPU's`, { skip }, async () => {
    const path = fixture(preset, type);
    const cpu = await loadModel(path, { gpu: false, contextSize: CONTEXT });
    const gpu = await loadModel(path, { gpu: "auto", contextSize: CONTEXT });
    try {
      assert.equal(gpu.info.gpu, true);
      assert.ok(
        gpu.plan.layers.every((l) => l.host.length === 0),
        "the whole fixture is on the card",
      );
      await expectSameEmbeddings(cpu, gpu, `${preset} ${type} whole`);
      if (gpu.info.experts > 0) {
        const hybrid = await loadModel(path, {
          gpu: "auto",
          contextSize: CONTEXT,
          plan: split(gpu.plan, () => false),
        });
        try {
          await expectSameEmbeddings(cpu, hybrid, `${preset} ${type} every expert on the CPU`);
          assert.ok(hybrid.stats().offload.cpuExpertSeconds > 0, "the CPU ran experts");
        } finally {
          hybrid.dispose();
        }
      }
    } finally {
      gpu.dispose();
      cpu.dispose();
    }
  });
}

// A score is the rank head's projection of one hidden vector. With F16 weights both sides compute
// nearly the same sums, so scores agree to 1e-3. With Q8_0 weights each side rounds activations to
// int8 codes, and a code that rounds the other way on one side carries on through the later layers
// (gpu-vs-cpu.test.mjs: the same noise parts the CPU's own scalar and SIMD orders); the vectors stay
// within the cosine bar above, and the scores within 1e-2 (of 1 or the score, the larger).
for (const [type, bar] of [
  ["F16", 1e-3],
  ["Q8_0", 1e-2],
]) {
  test(`tiny-qwen3-reranker ${type}: GPU scores are the CPU's`, { skip }, async () => {
    const path = fixture("tiny-qwen3-reranker", type);
    const cpu = await loadModel(path, { gpu: false, contextSize: CONTEXT });
    const gpu = await loadModel(path, { gpu: "auto", contextSize: CONTEXT });
    try {
      const documents = [
        "A lighthouse stands on the island.",
        "Trains leave hourly.",
        "Le phare est blanc.",
        "x",
        "The island's lighthouse was built in 1870 and guides ships past the reef.",
        "Bread rises faster in a warm kitchen.",
      ];
      const want = await cpu.rank("Which island has a lighthouse?", documents);
      const got = await gpu.rank("Which island has a lighthouse?", documents);
      for (const [i, w] of want.entries()) {
        assert.equal(got[i].index, w.index);
        assert.ok(
          Math.abs(got[i].score - w.score) <= bar * Math.max(1, Math.abs(w.score)),
          `document ${i}: GPU score ${got[i].score} vs CPU ${w.score}`,
        );
      }
    } finally {
      gpu.dispose();
      cpu.dispose();
    }
  });
}
