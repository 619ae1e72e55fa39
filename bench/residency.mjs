// Adaptive residency benchmark (run on the GPU machine): qwen3-30b-a3b synthetic (its routers
// make some experts popular) with a GPU budget that holds 25 % of the routed experts, the rest
// run by the CPU from host RAM. In one run: residency "static" (the planner's placement) and
// "adaptive" (hot host experts swapped into the GPU slots of cold ones between steps), each
// after a 512-token prompt with 256 greedy decode steps: decode tok/s, the GPU hit rate (share
// of routed expert calls the GPU served) during decode, and the hit rate an LRU cache of the
// same slots per layer, starting from the same placement, reaches on the same routing trace
// (recorded with model.traceRouting()). The peer: ik_llama.cpp with a static layer split
// (../shared/BASELINES.md: 52.0 tok/s with the experts of 8 of 48 layers on the card, ~17 % of
// them, so less expert memory than this budget's 25 %; no 25 % figure was measured).
// Writes JSON to $OUT (or the working directory).
// --routing <trace.json.gz>: the passes take their routing from a recorded trace (bench/traces/,
// bench/routing-trace.mjs; the model's benchmark-only REPLAY_ROUTING door, uniform gating), so the
// file's experts move as the trace's model's did; --share <fraction>: the GPU holds that share of
// the routed experts (default 0.25).
//   node bench/residency.mjs /root/q.gguf [--routing bench/traces/<trace>.json.gz] [--share 0.125]
import { writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { getSystemInfo, loadModel, modelFootprint } from "../dist/index.js";
import { argmax, secondsSince } from "./measure.mjs";
import { readTrace } from "./routing-trace.mjs";

const args = process.argv.slice(2);
const option = (name) => {
  const at = args.indexOf(name);
  return at >= 0 ? args.splice(at, 2)[1] : undefined;
};
const routing = option("--routing");
const GPU_SHARE = Number(option("--share") ?? "0.25");
const path = args[0] ?? "/root/q.gguf";
const CONTEXT = 4096;
const PROMPT = 512;
const DECODE_STEPS = 256;
const REPLAY_ROUTING = Symbol.for("bloomery.bench.replayRouting");
const trace = routing ? readTrace(routing) : undefined;
const PEER = {
  name: "ik_llama.cpp (experts of 40 of 48 layers on the CPU, ~17 % of experts on the card)",
  decode: 52.0,
};

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
  if (trace) {
    const { experts, expertsUsed } = model.info;
    if (trace.model.experts !== experts || trace.model.expertsUsed !== expertsUsed) {
      throw new Error(
        `${routing} routes ${trace.model.expertsUsed} of ${trace.model.experts} experts, the model ${expertsUsed} of ${experts}`,
      );
    }
    model[REPLAY_ROUTING]({ layers: Int32Array.from(trace.model.moeLayers), ids: Int32Array.from(trace.choices) });
  }
  const session = model.createSession();
  let moved = 0;
  model.on("residency", (event) => (moved += event.moves.length));
  const trace = model.traceRouting();
  const promptStart = process.hrtime.bigint();
  let logits = await session.evaluate(Array.from({ length: PROMPT }, (_, i) => (i * 7919 + 11) % vocab));
  const promptSeconds = secondsSince(promptStart);
  const before = model.stats().residency;
  const decodeStart = process.hrtime.bigint();
  for (let i = 0; i < DECODE_STEPS; ++i) logits = await session.evaluate([argmax(logits)]);
  const decode = DECODE_STEPS / secondsSince(decodeStart);
  const after = model.stats().residency;
  const recorded = trace.stop();
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
const budget = fixed + Math.ceil(GPU_SHARE * footprint.experts) * perRound;
const runs = { static: await measure("static", budget), adaptive: await measure("adaptive", budget) };
const ratios = {
  adaptiveVsStatic: runs.adaptive.decodeTokensPerSecond / runs.static.decodeTokensPerSecond,
  adaptiveVsPeer: runs.adaptive.decodeTokensPerSecond / PEER.decode,
  staticVsPeer: runs.static.decodeTokensPerSecond / PEER.decode,
};
console.log(
  `decode: adaptive ${runs.adaptive.decodeTokensPerSecond.toFixed(1)} tok/s, static ` +
    `${runs.static.decodeTokensPerSecond.toFixed(1)} (${ratios.adaptiveVsStatic.toFixed(2)}x); ` +
    `${ratios.adaptiveVsPeer.toFixed(2)}x ${PEER.name}; GPU hit rate in decode ` +
    `${runs.adaptive.decodeGpuHitRate.toFixed(3)} (adaptive) vs ${runs.static.decodeGpuHitRate.toFixed(3)} (static) ` +
    `vs ${runs.adaptive.lruDecodeHitRate.toFixed(3)} (LRU of the same slots, same trace)`,
);

const result = {
  command: `node bench/residency.mjs ${process.argv.slice(2).join(" ")}`,
  routing: trace
    ? { trace: basename(routing), model: trace.model, statistics: trace.statistics }
    : "the file's routers",
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, preset: "qwen3-30b-a3b synthetic", contextSize: CONTEXT },
  gpuBudget: budget,
  gpuShareOfExperts: GPU_SHARE,
  prompt: PROMPT,
  decodeSteps: DECODE_STEPS,
  peer: PEER,
  runs,
  ratios,
};
const out = join(process.env.OUT ?? ".", "residency-bench.json");
writeFileSync(out, JSON.stringify(result, null, 2));
console.log(`wrote ${out}`);
