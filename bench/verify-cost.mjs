// What drafts can gain on a model and placement (issue 20's GPU rows; runs anywhere): the cost of a
// pass of k rows (k = 1..8, what verifying k - 1 drafted tokens costs) after a context of --depth
// tokens, against a plain decode step (a CUDA graph's on the GPU, which a pass of several rows is
// not); then decode with n-gram drafts against decode without on a repetitive prompt (a passage of
// 64 tokens written out 8 times: the greedy continuation of a synthetic model often loops, and
// the drafts follow the loop), the same tokens both ways, rounds alternating, each way's best
// round kept. Passes are timed by the engine (model.stats(): the passes' own seconds), not the
// client. Writes JSON to $OUT (or the working directory).
//   node bench/verify-cost.mjs /root/q.gguf [--placement whole|cpu-experts|cpu] [--depth 512] [--rounds 3]
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel, modelFootprint } from "../dist/index.js";
import { cpuExpertsPlan, spreadTokens, takeOption } from "./measure.mjs";

const args = process.argv.slice(2);
const PLACEMENT = takeOption(args, "--placement", "whole");
const DEPTH = Number(takeOption(args, "--depth", "512"));
const ROUNDS = Number(takeOption(args, "--rounds", "3"));
const [path] = args;
if (!path || !["whole", "cpu-experts", "cpu"].includes(PLACEMENT)) {
  throw new Error("usage: node bench/verify-cost.mjs <model.gguf> [--placement whole|cpu-experts|cpu] [--depth D]");
}
const MAX_ROWS = 8;
const PASSES = 8; // passes of each width per round
const DECODE = 128;
const REPETITIVE = 8 * 64;
// The passes' session holds the depth and every pass's rows; the decode runs, a prompt and DECODE tokens.
const CONTEXT = Math.max(DEPTH + (ROUNDS * PASSES * MAX_ROWS * (MAX_ROWS + 1)) / 2, REPETITIVE) + DECODE + 16;

async function options() {
  if (PLACEMENT === "cpu") return { gpu: false };
  if (PLACEMENT === "whole") return { gpu: "auto" };
  return { gpu: "auto", plan: cpuExpertsPlan(await modelFootprint(path, { contextSize: CONTEXT })) };
}

const model = await loadModel(path, { contextSize: CONTEXT, cacheRam: 0, ...(await options()) });
const vocab = model.info.vocabSize;
const ban = { [model.info.eosToken]: -Infinity };

/** The engine's seconds of what `run` evaluates or generates (model.stats() around it). */
async function engineSeconds(run) {
  const before = model.stats();
  await run();
  const after = model.stats();
  return {
    seconds: after.promptSeconds + after.decodeSeconds - before.promptSeconds - before.decodeSeconds,
    decodeSeconds: after.decodeSeconds - before.decodeSeconds,
  };
}

// Passes of k rows after the context, k = 1..MAX_ROWS in turn each round; each width's fastest round.
const session = model.createSession();
await session.evaluate(spreadTokens(DEPTH, vocab));
const passMs = Array(MAX_ROWS + 1).fill(Infinity);
let salt = 0;
for (let round = 0; round < ROUNDS; ++round) {
  for (let k = 1; k <= MAX_ROWS; ++k) {
    let seconds = 0;
    for (let i = 0; i < PASSES; ++i) {
      const rows = Array.from({ length: k }, (_, j) => (salt++ * 104729 + j * 7919 + 5) % vocab);
      seconds += (await engineSeconds(() => session.evaluate(rows))).seconds;
    }
    passMs[k] = Math.min(passMs[k], (seconds / PASSES) * 1e3);
  }
}
session.dispose();

/** Greedy tokens after `prompt` and the engine's decode figures, with `draft`. */
async function decode(prompt, draft) {
  const s = model.createSession();
  let result;
  const figures = await engineSeconds(async () => {
    result = await s.generate(prompt, { maxTokens: DECODE, logitBias: ban, draft }).result;
  });
  s.dispose();
  // Tokens after the first (which the prompt's pass gives) over the decode passes' seconds: drafted
  // rows that were not kept count as time, not as tokens.
  return {
    tokens: result.tokens,
    decodeTokensPerSecond: (result.tokens.length - 1) / figures.decodeSeconds,
    draftTokens: result.timings.draftTokens ?? 0,
    draftAccepted: result.timings.draftAccepted ?? 0,
  };
}

// A decode step as generation takes it (a graph on the GPU): plain decode after the same depth.
const plainStep = await decode(spreadTokens(DEPTH, vocab), false);
const stepMs = 1e3 / plainStep.decodeTokensPerSecond;

const passage = spreadTokens(64, vocab).map((t, i) => (t + 31 * i) % vocab);
const repetitive = Array.from({ length: REPETITIVE / passage.length }, () => passage).flat();
const ngram = { source: "ngram" };
let none, drafted;
for (let round = 0; round < ROUNDS; ++round) {
  const a = await decode(repetitive, false);
  const b = await decode(repetitive, ngram);
  if (JSON.stringify(a.tokens) !== JSON.stringify(b.tokens)) throw new Error("n-gram drafts changed the tokens");
  if (!none || a.decodeTokensPerSecond > none.decodeTokensPerSecond) none = a;
  if (!drafted || b.decodeTokensPerSecond > drafted.decodeTokensPerSecond) drafted = b;
}
model.dispose();

const result = {
  command: `node bench/verify-cost.mjs ${path} --placement ${PLACEMENT} --depth ${DEPTH} --rounds ${ROUNDS}`,
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, architecture: model.info.architecture },
  placement: PLACEMENT,
  depth: DEPTH,
  decodeStepMs: stepMs,
  passMs: Object.fromEntries(passMs.slice(1).map((ms, i) => [i + 1, ms])),
  passOverStep: Object.fromEntries(passMs.slice(1).map((ms, i) => [i + 1, ms / stepMs])),
  ngram: {
    noneTokensPerSecond: none.decodeTokensPerSecond,
    draftTokensPerSecond: drafted.decodeTokensPerSecond,
    ratio: drafted.decodeTokensPerSecond / none.decodeTokensPerSecond,
    drafted: drafted.draftTokens,
    kept: drafted.draftAccepted,
  },
};
console.log(
  `decode step ${stepMs.toFixed(2)} ms; passes of 1..${MAX_ROWS} rows: ` +
    passMs
      .slice(1)
      .map((ms) => ms.toFixed(2))
      .join(", ") +
    ` ms; n-gram drafts on a repetitive prompt ${result.ngram.ratio.toFixed(2)}x ` +
    `(${drafted.draftAccepted} of ${drafted.draftTokens} drafted kept)`,
);
const out = join(process.env.OUT ?? ".", `verify-cost-${model.info.architecture}-${PLACEMENT}.json`);
writeFileSync(out, JSON.stringify(result, null, 2));
console.log(`wrote ${out}`);
