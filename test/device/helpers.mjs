// What the GPU machine's tests share: whether a GPU is here, tiny fixtures written by
// bloomery-synth into a private temporary folder, and comparing rows of logits.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { sameTop } from "../distributions.mjs";
import { getSystemInfo, loadModel } from "../../dist/index.js";

export const hasGpu = existsSync("/dev/nvidiactl");
/** node:test's skip option: a reason where no NVIDIA device exists. */
export const skip = !hasGpu && "no NVIDIA device on this machine";

const synthCli = fileURLToPath(new globalThis.URL("../../dist/synth-cli.js", import.meta.url));
const cpuLogitsCli = fileURLToPath(new globalThis.URL("./cpu-logits.mjs", import.meta.url));

/**
 * A fixture maker writing into a new temporary folder named after `label`; also returns that folder.
 * `type` is left out for presets with a fixed mix of types.
 */
export function fixtures(label) {
  const dir = hasGpu ? mkdtempSync(join(tmpdir(), `bloomery-${label}-`)) : "";
  const fixture = (preset, type) => {
    const path = join(dir, `${preset}-${type ?? "mix"}.gguf`);
    if (!existsSync(path))
      execFileSync(process.execPath, [synthCli, preset, path, ...(type ? ["--type", type] : [])], { stdio: "ignore" });
    return path;
  };
  return { dir, fixture };
}

/**
 * The CPU path's logits for `tokens` (one prompt) of the model at `path`, its kernels capped at
 * instruction set `isa` (BLOOMERY_CPU_ISA: "scalar", "avx2", "avx512"), computed in a child process
 * since the cap holds for a whole process. `dir` takes the files that pass between them.
 */
export function cpuLogits(path, tokens, { isa, contextSize, dir }) {
  const tokensFile = join(dir, "cpu-logits-tokens.json");
  const out = join(dir, "cpu-logits.f32");
  writeFileSync(tokensFile, JSON.stringify(tokens));
  execFileSync(process.execPath, [cpuLogitsCli, path, tokensFile, out, String(contextSize)], {
    env: { ...process.env, BLOOMERY_CPU_ISA: isa },
  });
  const bytes = readFileSync(out);
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}

function logSoftmax(row) {
  let max = -Infinity;
  for (const x of row) max = Math.max(max, x);
  let sum = 0;
  for (const x of row) sum += Math.exp(x - max);
  const log = Math.log(sum) + max;
  return Float64Array.from(row, (x) => x - log);
}

function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; ++i) if (row[i] > row[best]) best = i;
  return best;
}

/**
 * Top-1 agreement (ties as ../distributions.mjs counts them), mean KL(reference || candidate) over rows of
 * `vocab` logits, and the widest top-1 miss: how far below its own best the reference puts the
 * candidate's best, in nats.
 */
export function compare(reference, candidate, vocab) {
  let agree = 0;
  let kl = 0;
  let widestMiss = 0;
  const rows = reference.length / vocab;
  for (let r = 0; r < rows; ++r) {
    const p = logSoftmax(reference.subarray(r * vocab, (r + 1) * vocab));
    const q = logSoftmax(candidate.subarray(r * vocab, (r + 1) * vocab));
    const best = argmax(p);
    const candidateBest = argmax(q);
    if (sameTop(Math.exp(p[best]), Math.exp(p[candidateBest]))) agree += 1;
    else widestMiss = Math.max(widestMiss, p[best] - p[candidateBest]);
    for (let i = 0; i < vocab; ++i) kl += Math.exp(p[i]) * (p[i] - q[i]);
  }
  return { top1: agree / rows, kl: kl / rows, widestMiss };
}

/**
 * How far two correct evaluations of `tokens` (one prompt) on the model at `path` part: the widest
 * of compare's figures (lowest top-1, highest KL, widest miss) over every pair among the CPU path's
 * orders of the sums, measured in this run: `simd` (its default kernels' logits), its scalar
 * kernels', and on a host whose tier is AVX-512 its AVX2 kernels'. Each pair alone can understate
 * the noise: on tiny-deepseek4 F16 (an H200's AVX-512 host) scalar vs AVX-512 agree to top-1 0.996
 * where AVX2 vs AVX-512 agree to 0.984.
 */
export function cpuFloor(path, tokens, simd, vocab, { contextSize, dir }) {
  const orders = [simd, cpuLogits(path, tokens, { isa: "scalar", contextSize, dir })];
  if (getSystemInfo().cpu.simdTier === "avx512")
    orders.push(cpuLogits(path, tokens, { isa: "avx2", contextSize, dir }));
  const floor = { top1: 1, kl: 0, widestMiss: 0 };
  for (let a = 0; a < orders.length; ++a) {
    for (let b = a + 1; b < orders.length; ++b) {
      const pair = compare(orders[a], orders[b], vocab);
      floor.top1 = Math.min(floor.top1, pair.top1);
      floor.kl = Math.max(floor.kl, pair.kl);
      floor.widestMiss = Math.max(floor.widestMiss, pair.widestMiss);
    }
  }
  return floor;
}

/**
 * The widest top-1 miss (compare's widestMiss, in nats) a run whose sums round differently from
 * the reference's may show on the model at `path`: 0.1, or, where two correct evaluations already
 * part more, twice their widest miss (cpuFloor's, as gpu-vs-cpu's floor). A near-tie that flips
 * moves little under dense attention; under a sparse one it swaps a position a top-k reads (and
 * GLM-5's shared layers read it again), so its misses reach further on both sides alike.
 */
export async function missBound(path, tokens, { contextSize, dir }) {
  const cpu = await loadModel(path, { gpu: false, contextSize });
  try {
    const session = cpu.createSession();
    const simd = await session.evaluate(tokens, { logits: "all" });
    session.dispose();
    return Math.max(0.1, 2 * cpuFloor(path, tokens, simd, cpu.info.vocabSize, { contextSize, dir }).widestMiss);
  } finally {
    cpu.dispose();
  }
}

/** The logits of `input` decoded one token at a time in a session of `model`'s own, as one array of rows. */
export async function decodeAll(model, input) {
  const session = model.createSession();
  const rows = [];
  for (const t of input) rows.push(await session.evaluate([t]));
  session.dispose();
  const out = new Float32Array(rows.length * rows[0].length);
  rows.forEach((r, i) => out.set(r, i * r.length));
  return out;
}

/** Asserts that each named comparison (compare's { top1, kl }) meets `bar` (agreementBar's). */
export function assertWithinBar(comparisons, bar) {
  for (const [what, m] of Object.entries(comparisons)) {
    assert.ok(m.top1 >= bar.top1, `${what}: top-1 agreement ${m.top1} (bar ${bar.top1})`);
    assert.ok(m.kl <= bar.kl, `${what}: mean KL ${m.kl} (bar ${bar.kl})`);
  }
}

/** The result of `model` generating after `prompt` with `options`, in a session of its own. */
export async function generated(model, prompt, options) {
  const session = model.createSession();
  try {
    return await session.generate(prompt, options).result;
  } finally {
    session.dispose();
  }
}

/**
 * A session of `model` that evaluated `prompt`: its fork, its state saved in memory and to `file`, each restored
 * into a new session, give exactly the logits the session gives for `probe`; returns those logits and the state
 * saved in memory.
 */
export async function expectExactStateRoundTrips(model, prompt, probe, file) {
  const original = model.createSession();
  await original.evaluate(prompt);
  const state = await original.save();
  await original.save(file);
  const fork = await original.fork();
  const expected = await original.evaluate(probe, { logits: "all" });
  assert.deepEqual(await fork.evaluate(probe, { logits: "all" }), expected, "fork");
  const restored = model.createSession();
  await restored.restore(state);
  assert.deepEqual(await restored.evaluate(probe, { logits: "all" }), expected, "restore from memory");
  const fromFile = model.createSession();
  await fromFile.restore(file);
  assert.equal(fromFile.position, prompt.length);
  assert.deepEqual(await fromFile.evaluate(probe, { logits: "all" }), expected, "restore from a file");
  for (const session of [original, fork, restored, fromFile]) session.dispose();
  return { expected, state };
}

/** `length` greedy tokens of `model` after `prompt`, in a session of their own. */
export async function greedyTokens(model, prompt, length) {
  const session = model.createSession();
  const { tokens } = await session.generate(prompt, { maxTokens: length }).result;
  session.dispose();
  return tokens;
}

/**
 * Greedy tokens of `candidate` against `reference` (model objects) after `prompt`, `length` of
 * them: equal, or equal up to the first step where the reference's own logits put the two
 * choices within a tie (../distributions.mjs) or within `floorMargin` nats (the widest top-1 gap
 * two correct evaluations of the fixture already flip), after which they may go their own ways.
 * Returns { tokens, tieAt } (tieAt -1: no tie was needed); throws when they part wider.
 */
export async function sameGreedy(reference, candidate, prompt, length, floorMargin = 0) {
  const ours = await greedyTokens(reference, prompt, length);
  const theirs = await greedyTokens(candidate, prompt, length);
  const parted = ours.findIndex((t, i) => t !== theirs[i]);
  if (parted < 0 && ours.length === theirs.length) return { tokens: ours, tieAt: -1 };
  // Equal as far as the shorter goes: it stopped there at the end of sequence.
  const at = parted < 0 ? Math.min(ours.length, theirs.length) : parted;
  const session = reference.createSession();
  const p = logSoftmax(await session.evaluate([...prompt, ...ours.slice(0, at)]));
  session.dispose();
  const [mine, other] = [ours[at] ?? reference.info.eosToken, theirs[at] ?? reference.info.eosToken];
  if (!sameTop(Math.exp(p[mine]), Math.exp(p[other])) && p[mine] - p[other] > floorMargin) {
    const gap = (p[mine] - p[other]).toFixed(4);
    throw new Error(
      `greedy tokens part at step ${at} by ${gap} nats, beyond a tie: ${JSON.stringify({ ours, theirs })}`,
    );
  }
  return { tokens: ours, tieAt: at };
}

/** `plan` (a model's live plan) with each layer's routed experts split by `onGpu(expert)`: the others on the CPU. */
export function split(plan, onGpu) {
  const edited = JSON.parse(JSON.stringify(plan));
  for (const layer of edited.layers) {
    const all = [...layer.gpu, ...layer.host].sort((a, b) => a - b);
    layer.gpu = all.filter(onGpu);
    layer.host = all.filter((e) => !onGpu(e));
    layer.reason = "test split";
  }
  return edited;
}
