// Prompt-state cache benchmark (run on the GPU machine; runs anywhere): the first token of a
// 4,000-token prompt evaluated whole, against the first token of a prompt that shares 3,900 of its
// tokens with that one's state in the prompt-state cache (a new session: the state is restored
// from the cache, then 100 tokens evaluated), and of a third prompt with the same 3,900 tokens in
// the session that evaluated the first (no restore: what its 100 tokens cost alone). Times are from
// generate() to its first token, as a user sees them; each round uses prompts of its own.
// Writes JSON to $OUT (or the working directory).
//   node bench/prompt-cache.mjs /root/q.gguf [--rounds 4] [--placement whole|cpu] [--prompt 4000]
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel } from "../dist/index.js";
import { secondsSince, takeOption } from "./measure.mjs";

const args = process.argv.slice(2);
const ROUNDS = Number(takeOption(args, "--rounds", "4"));
const PLACEMENT = takeOption(args, "--placement", "whole");
const path = args[0] ?? "/root/q.gguf";
const PROMPT = Number(takeOption(args, "--prompt", "4000"));
const SHARED = PROMPT - 100;

const model = await loadModel(path, {
  gpu: PLACEMENT === "whole" ? "auto" : false,
  contextSize: PROMPT + 64,
  cacheRam: "8GiB",
});
const vocab = model.info.vocabSize;
// Round r's tokens: spread over the vocabulary as the synthetic models' tokens are, and apart from
// every other round's (no prefix of one round's prompt is another's).
const tokens = (length, salt) => Array.from({ length }, (_, i) => (i * 7919 + 11 + salt * 104729) % vocab);

/** Milliseconds from generate() to its first token, and the run's timings. */
async function firstToken(session, prompt) {
  const start = process.hrtime.bigint();
  const run = session.generate(prompt, { maxTokens: 1 });
  const iterator = run[Symbol.asyncIterator]();
  await iterator.next();
  const ms = secondsSince(start) * 1e3;
  while (!(await iterator.next()).done);
  const { timings } = await run.result;
  return { ms, promptMs: timings.promptMs, cached: timings.cachedPromptTokens, hit: timings.promptCacheHit };
}

const warm = model.createSession();
await firstToken(warm, tokens(PROMPT, 1000000)); // kernels loaded, the pass's shapes seen once
await firstToken(model.createSession(), [...tokens(SHARED, 1000000), ...tokens(PROMPT - SHARED, 1000001)]);

const rounds = [];
for (let r = 0; r < ROUNDS; ++r) {
  const first = tokens(PROMPT, 3 * r);
  const second = [...first.slice(0, SHARED), ...tokens(PROMPT - SHARED, 3 * r + 1)];
  const third = [...first.slice(0, SHARED), ...tokens(PROMPT - SHARED, 3 * r + 2)];
  const owner = model.createSession();
  const full = await firstToken(owner, first);
  const restored = await firstToken(model.createSession(), second);
  const kept = await firstToken(owner, third);
  if (restored.cached !== SHARED || !restored.hit || kept.cached !== SHARED || kept.hit) {
    throw new Error(`round ${r}: the shared prefix was not reused (${JSON.stringify({ restored, kept })})`);
  }
  rounds.push({ full, restored, kept });
  console.log(
    `round ${r}: full ${full.ms.toFixed(1)} ms, restored from the cache ${restored.ms.toFixed(1)} ms ` +
      `(${(full.ms / restored.ms).toFixed(2)}x), kept in the session ${kept.ms.toFixed(1)} ms`,
  );
}
model.dispose();

const median = (values) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
const fullMs = median(rounds.map((r) => r.full.ms));
const restoredMs = median(rounds.map((r) => r.restored.ms));
const keptMs = median(rounds.map((r) => r.kept.ms));
const result = {
  command: `node bench/prompt-cache.mjs ${path} --rounds ${ROUNDS} --placement ${PLACEMENT} --prompt ${PROMPT}`,
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, preset: "qwen3-30b-a3b synthetic", placement: PLACEMENT },
  settings: { prompt: PROMPT, shared: SHARED, rounds: ROUNDS },
  figures: {
    fullFirstTokenMs: fullMs,
    restoredFirstTokenMs: restoredMs,
    keptFirstTokenMs: keptMs,
    fullOverRestored: fullMs / restoredMs,
    restoreMs: restoredMs - keptMs,
  },
  rounds,
};
const out = join(process.env.OUT ?? ".", `prompt-cache-${PLACEMENT}.json`);
writeFileSync(out, JSON.stringify(result, null, 2));
console.log(
  `first token (medians of ${ROUNDS}): full ${fullMs.toFixed(1)} ms, restored ${restoredMs.toFixed(1)} ms ` +
    `(${result.figures.fullOverRestored.toFixed(2)}x sooner; goal 10x), kept ${keptMs.toFixed(1)} ms; wrote ${out}`,
);
