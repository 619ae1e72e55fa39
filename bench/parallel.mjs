// Parallel streams benchmark: total decode tokens per second of 1, 2 and 4 sessions generating
// at once on the CPU, in one run on one loaded model, and the ratios against one stream.
//
//   npm run bench:parallel [-- --threads N --prompt 32 --decode 64 --rounds 2 --model FILE]
//
// Plain ESM over the built package (dist/ and the addon). The model is the qwen3moe-2b preset
// bench/cpu.mjs uses (written once under the temp directory), loaded with parallel 4. Each
// round runs the stream counts one after another: every session gets its own prompt of
// `prompt` tokens and generates `decode` greedy tokens (end-of-sequence banned, so every stream
// runs to the end). The figure is the model's own count: decode rows over the wall time of the
// passes that ran them (model.stats(), compared before and after); the end-to-end rate (all
// generated tokens over the wall time from the first request to the last token, prompts
// included) is printed beside it. Each stream count keeps its best round. Writes
// bench/results/<date>-parallel.json, with the machine's load average before and after.
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism, loadavg } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { benchModel } from "./model-file.mjs";
import { fastestRounds } from "./measure.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const PRESET = "qwen3moe-2b";
const STREAMS = [1, 2, 4];

const { values } = parseArgs({
  options: {
    model: { type: "string" },
    threads: { type: "string" },
    prompt: { type: "string", default: "32" },
    decode: { type: "string", default: "64" },
    rounds: { type: "string", default: "2" },
  },
});
const settings = {
  threads: Number(values.threads ?? availableParallelism()),
  prompt: Number(values.prompt),
  decode: Number(values.decode),
  rounds: Number(values.rounds),
};

/** Deterministic prompt tokens for stream `stream`, away from the special tokens. */
function promptTokens(stream, count) {
  const tokens = [];
  let state = (0x2545f491 + stream * 0x9e3779b9) >>> 0;
  while (tokens.length < count) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    tokens.push(256 + (state % 20_000));
  }
  return tokens;
}

/** `streams` sessions generating at once; the decode rate from the model's counters. */
async function runStreams(model, streams) {
  const options = { maxTokens: settings.decode, logitBias: { [model.info.eosToken]: -Infinity } };
  const before = model.stats();
  const started = performance.now();
  const results = await Promise.all(
    Array.from(
      { length: streams },
      (_, s) => model.createSession().generate(promptTokens(s, settings.prompt), options).result,
    ),
  );
  const seconds = (performance.now() - started) / 1000;
  const after = model.stats();
  const decodeTokens = after.decodeTokens - before.decodeTokens;
  const decodeSeconds = after.decodeSeconds - before.decodeSeconds;
  const generated = results.reduce((n, r) => n + r.tokens.length, 0);
  if (generated !== streams * settings.decode)
    throw new Error(`expected ${streams * settings.decode} tokens, got ${generated}`);
  return {
    streams,
    decodeTokens,
    decodeSeconds,
    decodeTokensPerSecond: decodeTokens / decodeSeconds,
    endToEndTokensPerSecond: generated / seconds,
    passes: after.passes - before.passes,
  };
}

async function main() {
  const modelPath = values.model ?? benchModel(PRESET);
  // Other processes on the machine take CPU time from the passes: the report records how busy it was.
  const loadBefore = loadavg();
  const { loadModel, getSystemInfo } = await import(join(root, "dist/index.js"));
  const model = await loadModel(modelPath, {
    gpu: false,
    threads: settings.threads,
    parallel: Math.max(...STREAMS),
    contextSize: settings.prompt + settings.decode + 16,
    // Every round repeats its prompts: without the prompt-state cache each one is evaluated, as in
    // the recorded results.
    cacheRam: 0,
  });
  await runStreams(model, 1); // warm-up: page the weights in
  const rounds = [];
  for (let round = 0; round < settings.rounds; round++) {
    for (const streams of STREAMS) rounds.push(await runStreams(model, streams));
  }
  model.dispose();

  const best = fastestRounds(rounds, STREAMS);
  const one = best[0];
  const ratios = Object.fromEntries(best.map((r) => [r.streams, r.decodeTokensPerSecond / one.decodeTokensPerSecond]));
  const fmt = (x, width = 9) => x.toFixed(2).padStart(width);
  console.log(
    `${PRESET}, ${settings.threads} threads, prompts of ${settings.prompt}, ${settings.decode} tokens a stream`,
  );
  console.log(`streams  decode t/s  vs 1 stream  end-to-end t/s  decode rows/pass`);
  for (const r of best) {
    console.log(
      `${String(r.streams).padStart(7)}  ${fmt(r.decodeTokensPerSecond, 10)}  ${fmt(ratios[r.streams], 10)}x  ${fmt(r.endToEndTokensPerSecond, 14)}  ${fmt(r.decodeTokens / r.passes)}`,
    );
  }

  const date = new Date().toISOString();
  const report = {
    command: `node bench/parallel.mjs ${process.argv.slice(2).join(" ")}`.trim(),
    date,
    machine: getSystemInfo(),
    loadAverage: { before: loadBefore, after: loadavg() },
    model: { preset: PRESET, path: modelPath },
    settings,
    best,
    rounds,
    ratios,
  };
  const dir = join(root, "bench/results");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${date.slice(0, 10)}-parallel.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`wrote ${file}`);
}

await main();
