// GPU parallel-streams benchmark (run on the GPU machine): total decode tok/s of 1, 2, 4 and 8
// sessions generating at once, the whole model on the card, where every decode step is one
// batched pass (one CUDA graph) over all the streams' rows. One model loaded with parallel 8;
// each session gets its own prompt of `prompt` tokens and generates `decode` greedy tokens
// (end-of-sequence banned, so every stream runs to the end). The figure is the model's own
// count: decode rows over the wall time of the passes that ran them (model.stats() before and
// after), so prompts are left out; each stream count keeps its best round. Writes JSON to $OUT
// (or the working directory), like bench/gpu.mjs. With --peer, ik_llama.cpp's llama-batched-bench
// runs the same stream counts, prompt and decode lengths on the same file after ours, and each
// count prints its ratio. ../shared/device/peer builds llama-bench alone: pack examples/batched-bench
// too (and add_subdirectory(batched-bench) to examples/CMakeLists.txt), build the target
// llama-batched-bench beside it; the build may still run beside ours, which waits for build.done.
//   node dist/synth-cli.js qwen3-30b-a3b /root/q.gguf   (once)
//   node bench/gpu-parallel.mjs /root/q.gguf [--prompt 64 --decode 256 --rounds 2 --peer]
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { performance } from "node:perf_hooks";
import { getSystemInfo, loadModel, readGgufInfo } from "../dist/index.js";
import { fastestRounds } from "./measure.mjs";
import { IK_BATCHED_BENCH, ikBatchedRun, peerBuilt } from "./peer.mjs";

const STREAMS = [1, 2, 4, 8];

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    prompt: { type: "string", default: "64" },
    decode: { type: "string", default: "256" },
    rounds: { type: "string", default: "2" },
    peer: { type: "boolean", default: false },
  },
});
const path = positionals[0] ?? "/root/q.gguf";
const settings = { prompt: Number(values.prompt), decode: Number(values.decode), rounds: Number(values.rounds) };
const architecture = (await readGgufInfo(path)).summary.architecture;

/** Stream `stream`'s prompt: deterministic tokens away from the special ones. */
function promptTokens(stream, count, vocab) {
  return Array.from({ length: count }, (_, i) => 256 + ((i * 7919 + stream * 104729 + 11) % (vocab - 512)));
}

/** `streams` sessions generating at once; the decode rate from the model's counters. */
async function runStreams(model, streams) {
  const options = { maxTokens: settings.decode, logitBias: { [model.info.eosToken]: -Infinity } };
  const sessions = Array.from({ length: streams }, () => model.createSession());
  const before = model.stats();
  const started = performance.now();
  const results = await Promise.all(
    sessions.map(
      (session, s) => session.generate(promptTokens(s, settings.prompt, model.info.vocabSize), options).result,
    ),
  );
  const seconds = (performance.now() - started) / 1000;
  const after = model.stats();
  for (const session of sessions) session.dispose();
  const generated = results.reduce((n, r) => n + r.tokens.length, 0);
  if (generated !== streams * settings.decode)
    throw new Error(`expected ${streams * settings.decode} tokens, got ${generated}`);
  const decodeTokens = after.decodeTokens - before.decodeTokens;
  const decodeSeconds = after.decodeSeconds - before.decodeSeconds;
  const passes = after.passes - before.passes;
  const sequenceRows = after.meanSequencesPerPass * after.passes - before.meanSequencesPerPass * before.passes;
  return {
    streams,
    decodeTokens,
    decodeSeconds,
    decodeTokensPerSecond: decodeTokens / decodeSeconds,
    perStreamTokensPerSecond: decodeTokens / decodeSeconds / streams,
    endToEndTokensPerSecond: generated / seconds,
    passes,
    meanSequencesPerPass: sequenceRows / passes,
  };
}

const loadStart = performance.now();
const model = await loadModel(path, {
  gpu: "auto",
  parallel: Math.max(...STREAMS),
  contextSize: settings.prompt + settings.decode + 16,
  cacheRam: 0, // every round repeats its prompts: evaluate them each time
});
const loadSeconds = (performance.now() - loadStart) / 1000;
for (const streams of STREAMS) await runStreams(model, streams); // warm-up: kernels loaded, graphs captured
const rounds = [];
for (let round = 0; round < settings.rounds; round++) {
  for (const streams of STREAMS) rounds.push(await runStreams(model, streams));
}
model.dispose();

const best = fastestRounds(rounds, STREAMS);
const one = best[0].decodeTokensPerSecond;
let peer;
if (values.peer) {
  await peerBuilt();
  if (!existsSync(IK_BATCHED_BENCH))
    throw new Error(`--peer: ${IK_BATCHED_BENCH} is not built (see this file's header)`);
  peer = { name: "ik_llama.cpp llama-batched-bench", ...ikBatchedRun(path, { ...settings, streams: STREAMS }) };
  if (peer.figures.error) throw new Error(`--peer: ${peer.command} failed: ${peer.figures.error}`);
}
const peerRate = (streams) => peer?.figures[`decodeTokensPerSecond${streams}`];
const result = {
  command: `node bench/gpu-parallel.mjs ${process.argv.slice(2).join(" ")}`.trim(),
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, architecture, contextSize: settings.prompt + settings.decode + 16 },
  settings,
  figures: {
    loadSeconds,
    ...Object.fromEntries(best.map((r) => [`decodeTokensPerSecond${r.streams}`, r.decodeTokensPerSecond])),
  },
  best,
  rounds,
  ratios: {
    ...Object.fromEntries(best.map((r) => [`vsOneStream${r.streams}`, r.decodeTokensPerSecond / one])),
    ...(peer
      ? Object.fromEntries(best.map((r) => [`vsPeer${r.streams}`, r.decodeTokensPerSecond / peerRate(r.streams)]))
      : {}),
  },
  peer,
};
const out = join(process.env.OUT ?? ".", "gpu-parallel-bench.json");
writeFileSync(out, JSON.stringify(result, null, 2));
console.log(
  "streams  decode t/s (total)  per stream  vs 1 stream  sequences/pass  end-to-end t/s" +
    (peer ? "    peer t/s  vs peer" : ""),
);
for (const r of best) {
  const versus = peer
    ? `  ${peerRate(r.streams).toFixed(1).padStart(10)}  ${result.ratios[`vsPeer${r.streams}`].toFixed(2).padStart(6)}x`
    : "";
  console.log(
    `${String(r.streams).padStart(7)}  ${r.decodeTokensPerSecond.toFixed(1).padStart(18)}  ` +
      `${r.perStreamTokensPerSecond.toFixed(1).padStart(10)}  ${(r.decodeTokensPerSecond / one).toFixed(2).padStart(10)}x  ` +
      `${r.meanSequencesPerPass.toFixed(2).padStart(14)}  ${r.endToEndTokensPerSecond.toFixed(1).padStart(14)}${versus}`,
  );
}
console.log(peer ? `peer: ${peer.command}; wrote ${out}` : `no peer (--peer runs ik_llama.cpp's); wrote ${out}`);
