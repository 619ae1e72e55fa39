// Adaptive residency benchmark (run on the GPU machine): qwen3-30b-a3b synthetic with a GPU budget
// that holds a share of the routed experts (--shares, default 0.25), the rest run by the CPU from
// host RAM. In one run, for each share: residency "static" (the planner's placement) and "adaptive"
// (hot host experts swapped into the GPU slots of cold ones between steps), each after a 512-token
// prompt with 256 greedy decode steps: decode tok/s, the GPU hit rate (share of routed expert calls
// the GPU served) during decode, and the hit rate an LRU cache of the same slots per layer, starting
// from the same placement, reaches on the same routing trace (recorded with model.traceRouting(),
// simulated: no LRU policy runs); and the peer, ik_llama.cpp's llama-bench (bench/peer.mjs), with the
// same GPU memory: the experts of as many whole layers as it holds on the GPU, the others' with -ot
// on the CPU (its decode reads every token's experts wherever they sit, so its cost does not follow
// which experts are called; it runs the file's own routing).
// --routing <trace.json.gz>: our passes take their routing from a recorded trace (bench/traces/,
// bench/routing-trace.mjs; the model's benchmark-only REPLAY_ROUTING door, uniform gating), so the
// file's experts move as the trace's model's did (the file's own routers send ~97 % of calls to a
// quarter of the experts). Writes JSON to $OUT (or the working directory).
// --decode-steps N (default 256): longer decode, for a steadier rate (256 steps are a few seconds).
//   node bench/residency.mjs /root/q.gguf [--routing bench/traces/<trace>.json.gz] [--shares 0.125,0.25,0.5]
//        [--decode-steps 1024]
import { writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { getSystemInfo, loadModel, modelFootprint } from "../dist/index.js";
import { argmax, secondsSince, takeOption } from "./measure.mjs";
import { ikLayerSplit, ikRun, peerBuilt } from "./peer.mjs";
import { readTrace, replayTrace } from "./routing-trace.mjs";

const args = process.argv.slice(2);
const option = (name) => takeOption(args, name);
const routing = option("--routing");
const SHARES = (option("--shares") ?? "0.25").split(",").map(Number);
const DECODE_STEPS = Number(option("--decode-steps") ?? "256");
const path = args[0] ?? "/root/q.gguf";
const CONTEXT = 4096;
const PROMPT = 512;
if (!(Number.isInteger(DECODE_STEPS) && DECODE_STEPS > 0 && PROMPT + DECODE_STEPS <= CONTEXT)) {
  throw new Error(`--decode-steps takes a positive integer up to ${CONTEXT - PROMPT}`);
}
const trace = routing ? readTrace(routing) : undefined;
// Per layer an LRU of the plan's GPU slot count, holding the plan's GPU experts first; each
// step's calls hit when their expert is cached at the step's start, then the step's experts
// (in id order) become the most recent.
function lruHitRate(trace, plan) {
  const { layers, experts, steps } = trace;
  let hits = 0;
  let calls = 0;
  for (let l = 0; l < layers; ++l) {
    const capacity = plan.layers[l].gpu.length;
    const cache = new Map(plan.layers[l].gpu.map((e, i) => [e, i - capacity]));
    steps.forEach((step, t) => {
      const used = [];
      for (let e = 0; e < experts; ++e) {
        const n = step[l * experts + e];
        if (n === 0) continue;
        calls += n;
        if (cache.has(e)) hits += n;
        used.push(e);
      }
      for (const e of used) {
        cache.delete(e);
        if (cache.size >= capacity) {
          let oldest;
          for (const [k, at] of cache) if (oldest === undefined || at < cache.get(oldest)) oldest = k;
          cache.delete(oldest);
        }
        if (capacity > 0) cache.set(e, t);
      }
    });
  }
  return calls > 0 ? hits / calls : 0;
}

async function measure(residency, budget) {
  const model = await loadModel(path, { gpu: { budget }, contextSize: CONTEXT, residency });
  const vocab = model.info.vocabSize;
  if (trace) replayTrace(model, trace);
  const session = model.createSession();
  let moved = 0;
  model.on("residency", (event) => (moved += event.moves.length));
  const recording = model.traceRouting();
  const promptStart = process.hrtime.bigint();
  let logits = await session.evaluate(Array.from({ length: PROMPT }, (_, i) => (i * 7919 + 11) % vocab));
  const promptSeconds = secondsSince(promptStart);
  const before = model.stats().residency;
  const decodeStart = process.hrtime.bigint();
  for (let i = 0; i < DECODE_STEPS; ++i) logits = await session.evaluate([argmax(logits)]);
  const decode = DECODE_STEPS / secondsSince(decodeStart);
  const after = model.stats().residency;
  const recorded = recording.stop();
  const decodeTrace = { ...recorded, steps: recorded.steps.slice(recorded.steps.length - DECODE_STEPS) };
  const plan = model.plan;
  model.dispose();
  const gpuCalls = after.gpuCalls - before.gpuCalls;
  const hostCalls = after.hostCalls - before.hostCalls;
  const figures = {
    decodeTokensPerSecond: decode,
    promptTokensPerSecond: PROMPT / promptSeconds,
    decodeGpuHitRate: gpuCalls / (gpuCalls + hostCalls),
    overallGpuHitRate: after.gpuHitRate,
    lruDecodeHitRate: lruHitRate(decodeTrace, plan),
    lruOverallHitRate: lruHitRate(recorded, plan),
    moves: after.moves,
    movesInEvents: moved,
    steps: after.steps,
    gpuExperts: plan.layers.reduce((n, l) => n + l.gpu.length, 0),
    hostExperts: plan.layers.reduce((n, l) => n + l.host.length, 0),
  };
  console.log(`${residency}: ${JSON.stringify(figures)}`);
  return figures;
}

const footprint = await modelFootprint(path, { contextSize: CONTEXT });
const fixed = footprint.denseBytes + footprint.kvBytes + footprint.workspaceBytes + footprint.streamBytes;
const perRound = footprint.expertBytes.reduce((a, b) => a + b, 0);
const built = await peerBuilt();
const rows = [];
for (const share of SHARES) {
  if (!(share > 0 && share < 1)) throw new Error(`--shares takes fractions between 0 and 1, not ${share}`);
  const budget = fixed + Math.ceil(share * footprint.experts) * perRound;
  const runs = { static: await measure("static", budget), adaptive: await measure("adaptive", budget) };
  const split = ikLayerSplit(footprint, budget);
  const peer = built
    ? { ...ikRun(path, [...split.args, "-p", "0", "-n", "128", "-r", "2"]), gpuLayers: split.gpuLayers }
    : { error: "ik_llama.cpp's llama-bench is not built (../shared/device/peer/build.sh)" };
  const peerDecode = peer.figures?.tg128;
  const ratios = {
    adaptiveVsStatic: runs.adaptive.decodeTokensPerSecond / runs.static.decodeTokensPerSecond,
    adaptiveVsPeer: peerDecode ? runs.adaptive.decodeTokensPerSecond / peerDecode : null,
    staticVsPeer: peerDecode ? runs.static.decodeTokensPerSecond / peerDecode : null,
  };
  console.log(
    `share ${share}: decode adaptive ${runs.adaptive.decodeTokensPerSecond.toFixed(1)} tok/s, static ` +
      `${runs.static.decodeTokensPerSecond.toFixed(1)} (${ratios.adaptiveVsStatic.toFixed(2)}x), ik ${peerDecode} ` +
      `(experts of ${split.gpuLayers} of ${split.moeLayers} layers on the GPU); GPU hit rate in decode ` +
      `${runs.adaptive.decodeGpuHitRate.toFixed(3)} (adaptive) vs ${runs.static.decodeGpuHitRate.toFixed(3)} (static) ` +
      `vs ${runs.adaptive.lruDecodeHitRate.toFixed(3)} (LRU of the same slots, same trace)`,
  );
  rows.push({ share, gpuBudget: budget, runs, peer, ratios });
}

const statistics = trace && { ...trace.statistics, perLayer: undefined };
const result = {
  command: `node bench/residency.mjs ${process.argv.slice(2).join(" ")}`,
  routing: trace ? { trace: basename(routing), model: trace.model, statistics } : "the file's routers",
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, preset: "qwen3-30b-a3b synthetic", contextSize: CONTEXT },
  prompt: PROMPT,
  decodeSteps: DECODE_STEPS,
  rows,
};
const out = join(process.env.OUT ?? ".", "residency-bench.json");
writeFileSync(out, JSON.stringify(result, null, 2));
console.log(`wrote ${out}`);
