// GPU machine: sessions running at once share one GPU pass per step (engine/gpu_forward.h: the
// rows of every sequence in one pass, a decode step of k sequences as one CUDA graph), and each
// gets what it gets alone: 1, 2, 3 and 4 sessions generating greedily give exactly each one's
// single-stream tokens, and the same log-probabilities bit for bit (these fixtures' greedy
// tokens hardly depend on the context, their log-probabilities do), on MoE and dense fixtures
// and on a hybrid model (routed experts split between the GPU and the CPU); prompts evaluated in
// shared passes give their single-stream logits bit for bit. Skips where no NVIDIA device exists.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { fixtures, skip, split } from "./helpers.mjs";
import { loadModel } from "../../dist/index.js";

const { fixture } = fixtures("gpu-batch");
const STREAMS = 4;
const CONTEXT = 256;
// Per session: its prompt's length and the tokens it generates. Different lengths put the
// sequences at different positions, and sessions ending at different steps change the set of
// sequences the decode graphs run (a graph is re-captured for a new set of the same count). The
// prompts together stay under 16 rows (StreamChoice's floor), so a hybrid model hands every
// pass's rows to the CPU (a pass that streams copies the host experts to the GPU instead, whose
// sums round differently: see gpu_forward.h). The runs are long enough for the GPU's fast steps
// to overlap once the last session joins.
const RUNS = [
  { seed: 1, prompt: 4, maxTokens: 120 },
  { seed: 2, prompt: 6, maxTokens: 72 },
  { seed: 3, prompt: 2, maxTokens: 99 },
  { seed: 4, prompt: 3, maxTokens: 51 },
];

function tokensOf(count, seed, vocab) {
  return Array.from({ length: count }, (_, i) => (i * 7919 + seed * 104729 + 13) % vocab);
}

function generate(model, session, run) {
  // No end-of-sequence token: every session runs to maxTokens, so the steps are as planned.
  const options = { maxTokens: run.maxTokens, logprobs: 4, logitBias: { [model.info.eosToken]: -Infinity } };
  return session.generate(tokensOf(run.prompt, run.seed, model.info.vocabSize), options).result;
}

/** Passes, and sequences over all of them, since `before` (a model.stats()). */
function passesSince(model, before) {
  const after = model.stats();
  const sequences = after.meanSequencesPerPass * after.passes - before.meanSequencesPerPass * before.passes;
  return { passes: after.passes - before.passes, sequences: Math.round(sequences) };
}

/** Waits (at most 5 s) until the model has decoded `count` more tokens than at `before`. */
async function decodedSince(model, before, count) {
  for (let waited = 0; waited < 5000; ++waited) {
    if (model.stats().decodeTokens - before.decodeTokens >= count) return;
    await sleep(1);
  }
}

async function alone(model, runs) {
  const results = [];
  for (const run of runs) {
    const session = model.createSession();
    results.push(await generate(model, session, run));
    session.dispose();
  }
  return results;
}

// The first k runs at once. The last of them (for k > 1) joins once the others have decoded a
// few tokens, so that some passes mix its prompt rows with their decode rows.
async function together(model, k, runs) {
  const before = model.stats();
  const sessions = runs.slice(0, k).map(() => model.createSession());
  const results = [];
  for (let i = 0; i < k - 1; ++i) results.push(generate(model, sessions[i], runs[i]));
  if (k > 1) await decodedSince(model, before, 4 * (k - 1));
  results.push(generate(model, sessions[k - 1], runs[k - 1]));
  const got = await Promise.all(results);
  for (const session of sessions) session.dispose();
  const { passes, sequences } = passesSince(model, before);
  return { results: got, perPass: sequences / passes };
}

/** The index of the first generated token whose token or log-probabilities differ between two runs, or -1. */
function firstDifference(a, b) {
  for (let i = 0; i < Math.max(a.tokens.length, b.tokens.length); ++i) {
    if (a.tokens[i] !== b.tokens[i] || JSON.stringify(a.logprobs[i]) !== JSON.stringify(b.logprobs[i])) return i;
  }
  return -1;
}

async function expectBatchedAsAlone(model, what, runs = RUNS) {
  assert.ok(model.info.gpu, `${what}: on the GPU`);
  assert.ok(model.info.parallel >= runs.length, `${what}: parallel ${model.info.parallel}`);
  const reference = await alone(model, runs);
  for (let k = 1; k <= runs.length; ++k) {
    const { results, perPass } = await together(model, k, runs);
    console.log(`${what}, ${k} sessions at once: ${perPass.toFixed(2)} sequences per pass`);
    if (k > 1) assert.ok(perPass > 1.2, `${what}, ${k} sessions: few shared passes (${perPass} sequences per pass)`);
    for (let i = 0; i < k; ++i) {
      const where = `${what}, ${k} sessions: session ${i} (first difference at token ${firstDifference(results[i], reference[i])})`;
      assert.deepEqual(results[i].tokens, reference[i].tokens, `${where}'s tokens differ from its run alone`);
      assert.deepEqual(
        results[i].logprobs,
        reference[i].logprobs,
        `${where}'s log-probabilities differ from its run alone`,
      );
    }
  }
}

for (const [preset, type] of [
  ["tiny-qwen3moe", "Q4_K"],
  ["tiny-qwen3moe", "Q8_0"],
  ["tiny-qwen3", "Q4_K"],
  ["tiny-llama", "Q6_K"],
  ["tiny-glm4moe", "Q8_0"],
  ["tiny-deepseek2", "Q4_K"],
  ["tiny-deepseek32", "Q4_K"],
  ["tiny-glm-dsa", "Q8_0"],
  ["tiny-deepseek4", "Q8_0"],
  ["tiny-gpt-oss", "Q8_0"],
  ["tiny-mimo2", "Q4_K"],
]) {
  test(`${preset} ${type}: sessions decoded together give their single-stream tokens`, { skip }, async () => {
    const model = await loadModel(fixture(preset, type), { gpu: "auto", parallel: STREAMS, contextSize: CONTEXT });
    try {
      await expectBatchedAsAlone(model, `${preset} ${type}`);
    } finally {
      model.dispose();
    }
  });
}

// Prompts of cuda::kMmqMinRows rows or more take the tiled products, whose sums for a row round
// unlike the mat-vecs': a pass mixing them with decode rows would give those rows other floats
// than their decode steps alone. gpu_forward runs each kernel family in passes of its own. No
// prompt-state cache: a prompt restored from it evaluates only its last row, in other kernels than
// its whole evaluation (GenerateOptions.reusePrefix). The first run outlasts the others by far: a
// tiny model decodes a step in well under a millisecond, and the event loop may let it run dozens
// of steps before the last session's prompt is queued (with 96 tokens it sometimes ended with
// little left to share: 1.19 sequences per pass).
const LONG_RUNS = [
  { seed: 1, prompt: 4, maxTokens: 192 },
  { seed: 2, prompt: 100, maxTokens: 64 },
  { seed: 3, prompt: 70, maxTokens: 48 },
  { seed: 4, prompt: 300, maxTokens: 40 },
];
for (const [preset, type] of [
  ["tiny-qwen3moe", "Q4_K"],
  ["tiny-qwen3", "Q4_K"],
  ["tiny-gpt-oss", "Q4_K"],
]) {
  test(`${preset} ${type}: sessions joined by tiled prompts give their single-stream tokens`, { skip }, async () => {
    const model = await loadModel(fixture(preset, type), {
      gpu: "auto",
      parallel: STREAMS,
      contextSize: 512,
      cacheRam: 0,
    });
    try {
      await expectBatchedAsAlone(model, `${preset} ${type}, tiled prompts`, LONG_RUNS);
    } finally {
      model.dispose();
    }
  });
}

// More sequences in a pass than one launch of the heads writes to their caches (cuda/ops.h's
// kMaxKvSegments, 8): the pass's heads go out in two launches.
test("tiny-qwen3 Q4_K: ten sessions decoded together give their single-stream tokens", { skip }, async () => {
  const runs = Array.from({ length: 10 }, (_, i) => ({ seed: 20 + i, prompt: 2 + (i % 3), maxTokens: 32 }));
  const model = await loadModel(fixture("tiny-qwen3", "Q4_K"), { gpu: "auto", parallel: 10, contextSize: CONTEXT });
  try {
    const reference = [];
    for (const run of runs) {
      const session = model.createSession();
      reference.push((await generate(model, session, run)).tokens);
      session.dispose();
    }
    const before = model.stats();
    const sessions = runs.map(() => model.createSession());
    const got = await Promise.all(runs.map((run, i) => generate(model, sessions[i], run)));
    for (const session of sessions) session.dispose();
    const { passes, sequences } = passesSince(model, before);
    const widest = model.stats().widestPass;
    console.log(`ten sessions at once: ${(sequences / passes).toFixed(2)} sequences per pass, ${widest} at most`);
    // How many steps join each pass depends on the host's load (the suite runs its files side by
    // side); one pass of more than 8 takes the two-launch path.
    assert.equal(before.widestPass, 1);
    assert.ok(widest > 8, `a pass of more than 8 sequences (${sequences} in ${passes} passes, ${widest} at most)`);
    for (const [i, result] of got.entries()) assert.deepEqual(result.tokens, reference[i], `session ${i}'s tokens`);
  } finally {
    model.dispose();
  }
});

test("tiny-qwen3moe Q4_K hybrid: sessions decoded together give their single-stream tokens", { skip }, async () => {
  const path = fixture("tiny-qwen3moe", "Q4_K");
  const whole = await loadModel(path, { gpu: "auto", contextSize: CONTEXT });
  const plan = split(whole.plan, (e) => e % 2 === 0);
  whole.dispose();
  // Static residency: adaptive moves experts between the GPU and the CPU from run to run, and their
  // dots round differently.
  const model = await loadModel(path, {
    gpu: "auto",
    parallel: STREAMS,
    contextSize: CONTEXT,
    plan,
    residency: "static",
  });
  try {
    assert.ok(model.plan.layers.every((l) => l.host.length > 0 && l.gpu.length > 0));
    await expectBatchedAsAlone(model, "hybrid, odd experts on the CPU");
    const offload = model.stats().offload;
    assert.ok(offload.passes > 0 && offload.cpuExpertSeconds > 0, "the CPU ran experts");
    assert.equal(offload.streamedPasses, 0, "no pass copied the host experts to the GPU");
  } finally {
    model.dispose();
  }
});

test(
  "prompts evaluated in passes shared with other sessions give their logits alone, bit for bit",
  { skip },
  async () => {
    const model = await loadModel(fixture("tiny-qwen3moe", "Q4_K"), {
      gpu: "auto",
      parallel: STREAMS,
      contextSize: CONTEXT,
    });
    try {
      const tokens = (count, seed) => tokensOf(count, seed, model.info.vocabSize);
      // Every row's logits, the last row's, and every row's again: the pass returns rows of some
      // sequences and not of others.
      const inputs = [
        { tokens: tokens(20, 1), logits: "all" },
        { tokens: tokens(7, 2), logits: "last" },
        { tokens: tokens(3, 3), logits: "all" },
      ];
      const reference = [];
      for (const input of inputs) {
        const session = model.createSession();
        reference.push(await session.evaluate(input.tokens, { logits: input.logits }));
        session.dispose();
      }
      // A generation keeps the scheduler stepping; the evaluations submitted meanwhile join its passes.
      const before = model.stats();
      const background = model.createSession();
      const running = generate(model, background, { seed: 9, prompt: 6, maxTokens: 64 });
      await decodedSince(model, before, 2);
      const sessions = inputs.map(() => model.createSession());
      const got = await Promise.all(
        inputs.map((input, i) => sessions[i].evaluate(input.tokens, { logits: input.logits })),
      );
      await running;
      const { passes, sequences } = passesSince(model, before);
      console.log(`evaluations beside a generation: ${sequences} sequences in ${passes} passes`);
      assert.ok(sequences > passes, "the evaluations shared passes with the generation");
      for (const [i, input] of inputs.entries()) {
        assert.deepEqual(got[i], reference[i], `${input.tokens.length} tokens, logits "${input.logits}"`);
      }
    } finally {
      model.dispose();
    }
  },
);
