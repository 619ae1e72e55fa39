// Disk-tier benchmark (run on the GPU machine): every routed expert off the GPU, and a hostRam of
// 4, 8 and 16 GiB, so the experts beyond it are paged from the model file (O_DIRECT) into a RAM
// arena of that size. Per arena: prompt tok/s at P = 512 (one pass whose rows the CPU runs,
// reading nearly every expert of each layer), then decode tok/s of one stream after a warm-up,
// the arena's hit rate over the decode steps, the bytes read and the time passes waited for reads.
// Per phase also the share of the paged experts' routed calls the arena served from RAM (1 - the
// disk calls of model.stats().residency over those calls), against an LRU arena of as many slots
// simulated on the same routing trace (model.traceRouting(), from load on).
// Each run stops decoding after DECODE_SECONDS, so the whole benchmark stays near 4 minutes.
// Writes JSON to $OUT (or the working directory).
// --routing <trace.json.gz>: the passes route as a recorded trace did (bench/residency.mjs says
// why); --host-shares 0.25,0.5: arenas holding those shares of the routed experts' bytes instead
// of 4, 8 and 16 GiB.
//   node dist/synth-cli.js qwen3-30b-a3b /root/q.gguf && node bench/disk.mjs /root/q.gguf
//   node bench/disk.mjs /root/q.gguf --routing bench/traces/<trace>.json.gz --host-shares 0.25,0.5
import { writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { getSystemInfo, loadModel, modelFootprint, planOffload } from "../dist/index.js";
import { argmax, secondsSince, spreadTokens, takeOption } from "./measure.mjs";
import { readTrace, replayTrace } from "./routing-trace.mjs";

const args = process.argv.slice(2);
const option = (name) => takeOption(args, name);
const routing = option("--routing");
const hostShares = option("--host-shares")?.split(",").map(Number);
const trace = routing ? readTrace(routing) : undefined;
const path = args[0] ?? "/root/q.gguf";
const CONTEXT = 4096;
const ARENAS_GIB = [4, 8, 16];
const WARMUP_STEPS = 8;
const DECODE_STEPS = 64;
const DECODE_SECONDS = 35;
const GIB = 1024 ** 3;

const delta = (after, before) =>
  Object.fromEntries(
    Object.keys(after).map((k) => [k, typeof after[k] === "number" ? after[k] - before[k] : after[k]]),
  );
const hitRate = (d) => (d.hits + d.misses > 0 ? d.hits / (d.hits + d.misses) : 0);

// The paged experts' routed calls in `steps` of a routing trace.
function pagedCalls(steps, experts, plan) {
  let calls = 0;
  for (const step of steps) {
    plan.layers.forEach((layer, l) => {
      for (const e of layer.disk ?? []) calls += step[l * experts + e];
    });
  }
  return calls;
}

// An LRU arena of `slots` experts shared by all layers, replaying trace steps from `cache` (a Map
// of resident keys, least recent first; updated): per step, layer after layer, the paged experts
// routed to are leased at once, those resident hit and become the most recent, then each miss
// evicts the least recently used. Returns the calls whose expert was resident.
function lruArenaHits(steps, experts, plan, slots, cache) {
  let hits = 0;
  for (const step of steps) {
    plan.layers.forEach((layer, l) => {
      const missed = [];
      for (const e of layer.disk ?? []) {
        const calls = step[l * experts + e];
        if (calls === 0) continue;
        const key = l * experts + e;
        if (cache.has(key)) {
          hits += calls;
          cache.delete(key);
          cache.set(key, true);
        } else {
          missed.push(key);
        }
      }
      for (const key of missed) {
        if (cache.size >= slots) cache.delete(cache.keys().next().value);
        cache.set(key, true);
      }
    });
  }
  return hits;
}

async function measure(hostRamGib, footprint) {
  const hostRam = Math.floor(hostRamGib * GIB);
  const dense = footprint.denseBytes + footprint.kvBytes + footprint.workspaceBytes;
  const plan = planOffload(footprint, { gpu: dense, hostRam });
  const loadStart = process.hrtime.bigint();
  const model = await loadModel(path, { gpu: "auto", contextSize: CONTEXT, hostRam, plan });
  const loadSeconds = secondsSince(loadStart);
  if (trace) replayTrace(model, trace);
  const vocab = model.info.vocabSize;
  const { experts } = model.info;
  const recording = model.traceRouting();
  const session = model.createSession();

  const beforePrompt = model.stats().disk;
  const residencyBeforePrompt = model.stats().residency;
  const promptStart = process.hrtime.bigint();
  let logits = await session.evaluate(spreadTokens(512, vocab));
  const prompt512 = 512 / secondsSince(promptStart);
  const promptDisk = delta(model.stats().disk, beforePrompt);
  const promptResidency = delta(model.stats().residency, residencyBeforePrompt);

  const promptSteps = model.stats().residency.steps - residencyBeforePrompt.steps;
  for (let i = 0; i < WARMUP_STEPS; ++i) logits = await session.evaluate([argmax(logits)]);
  const beforeDecode = model.stats().disk;
  const residencyBeforeDecode = model.stats().residency;
  const decodeStart = process.hrtime.bigint();
  let steps = 0;
  while (steps < DECODE_STEPS && secondsSince(decodeStart) < DECODE_SECONDS) {
    logits = await session.evaluate([argmax(logits)]);
    ++steps;
  }
  const decode = steps / secondsSince(decodeStart);
  const decodeDisk = delta(model.stats().disk, beforeDecode);
  const decodeResidency = delta(model.stats().residency, residencyBeforeDecode);
  const { steps: traced } = recording.stop();
  const live = model.plan;
  const offload = model.stats().offload;
  model.dispose();

  // The trace holds the prompt's steps, the warm-up's, then the decode steps.
  const promptTrace = traced.slice(0, promptSteps);
  const warmupTrace = traced.slice(promptSteps, promptSteps + WARMUP_STEPS);
  const decodeTrace = traced.slice(promptSteps + WARMUP_STEPS);
  const lru = new Map();
  const slots = live.arena.slots;
  const promptPaged = pagedCalls(promptTrace, experts, live);
  const promptLruHits = lruArenaHits(promptTrace, experts, live, slots, lru);
  lruArenaHits(warmupTrace, experts, live, slots, lru);
  const decodePaged = pagedCalls(decodeTrace, experts, live);
  const decodeLruHits = lruArenaHits(decodeTrace, experts, live, slots, lru);
  const share = (part, whole) => (whole > 0 ? part / whole : 0);

  const figures = {
    hostRamGib,
    loadSeconds,
    arena: live.arena,
    pagedExperts: live.layers.reduce((n, l) => n + (l.disk ?? []).length, 0),
    gpuExperts: live.layers.reduce((n, l) => n + l.gpu.length, 0),
    planBytes: live.bytes,
    directIo: decodeDisk.directIo,
    prompt512TokensPerSecond: prompt512,
    prompt512: {
      hitRate: hitRate(promptDisk),
      misses: promptDisk.misses,
      gigabytesRead: promptDisk.bytesRead / 1e9,
      readGigabytesPerSecond: promptDisk.bytesRead / 1e9 / (512 / prompt512),
      waitSeconds: promptDisk.waitSeconds,
      readAhead: promptDisk.readAhead,
      pagedCalls: promptPaged,
      diskCalls: promptResidency.diskCalls,
      callRamRate: share(promptPaged - promptResidency.diskCalls, promptPaged),
      lruCallRamRate: share(promptLruHits, promptPaged),
    },
    decodeTokensPerSecond: decode,
    decodeSteps: steps,
    decode: {
      hitRate: hitRate(decodeDisk),
      hits: decodeDisk.hits,
      misses: decodeDisk.misses,
      missesPerToken: decodeDisk.misses / steps,
      megabytesReadPerToken: decodeDisk.bytesRead / 1e6 / steps,
      waitMsPerToken: (decodeDisk.waitSeconds / steps) * 1e3,
      pagedCalls: decodePaged,
      diskCalls: decodeResidency.diskCalls,
      callRamRate: share(decodePaged - decodeResidency.diskCalls, decodePaged),
      lruCallRamRate: share(decodeLruHits, decodePaged),
    },
    offloadSinceLoad: offload,
  };
  console.log(
    `hostRam ${hostRamGib} GiB (${live.arena.slots} slots for ${figures.pagedExperts} paged experts, directIo ` +
      `${figures.directIo}): prompt 512 ${prompt512.toFixed(1)} tok/s (hit rate ${figures.prompt512.hitRate.toFixed(3)}, ` +
      `${figures.prompt512.gigabytesRead.toFixed(1)} GB read), decode ${decode.toFixed(2)} tok/s over ${steps} steps ` +
      `(hit rate ${figures.decode.hitRate.toFixed(3)}, ${figures.decode.megabytesReadPerToken.toFixed(0)} MB/token); ` +
      `calls from RAM: prompt ${figures.prompt512.callRamRate.toFixed(3)} (LRU ${figures.prompt512.lruCallRamRate.toFixed(3)}), ` +
      `decode ${figures.decode.callRamRate.toFixed(3)} (LRU ${figures.decode.lruCallRamRate.toFixed(3)})`,
  );
  return figures;
}

const footprint = await modelFootprint(path, { contextSize: CONTEXT });
const runs = {};
const expertGib = (footprint.expertBytes.reduce((a, b) => a + b, 0) * footprint.experts) / GIB;
if (hostShares) {
  for (const share of hostShares) {
    if (!(share > 0 && share < 1)) throw new Error(`--host-shares takes fractions between 0 and 1, not ${share}`);
    runs[`hostRam-${share}-of-experts`] = await measure(share * expertGib, footprint);
  }
} else {
  for (const gib of ARENAS_GIB) runs[`hostRam-${gib}gib`] = await measure(gib, footprint);
}

const result = {
  command: `node bench/disk.mjs ${process.argv.slice(2).join(" ")}`,
  routing: trace ? { trace: basename(routing), model: trace.model } : "the file's routers",
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, preset: "qwen3-30b-a3b synthetic", contextSize: CONTEXT },
  footprint: { ...footprint, expertBytes: footprint.expertBytes[0] },
  note:
    "every routed expert off the GPU; the CPU runs them from a RAM arena of hostRam, reading misses from the model " +
    "file. Prompt passes of 512 rows hand their rows to the CPU (no PCIe streaming with a disk tier).",
  runs,
};
const out = join(process.env.OUT ?? ".", "disk-bench.json");
writeFileSync(out, JSON.stringify(result, null, 2));
console.log(`wrote ${out}`);
