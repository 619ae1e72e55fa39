// Disk-tier benchmark (run on the GPU machine): every routed expert off the GPU, and a hostRam of
// 4, 8 and 16 GiB, so the experts beyond it are paged from the model file (O_DIRECT) into a RAM
// arena of that size. Per arena: prompt tok/s at P = 512 (one pass whose rows the CPU runs,
// reading nearly every expert of each layer), then decode tok/s of one stream after a warm-up,
// the arena's hit rate over the decode steps, the bytes read and the time passes waited for reads.
// Each run stops decoding after DECODE_SECONDS, so the whole benchmark stays near 4 minutes.
// Writes JSON to $OUT (or the working directory).
//   node dist/synth-cli.js qwen3-30b-a3b /root/q.gguf && node bench/disk.mjs /root/q.gguf
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel, modelFootprint, planOffload } from "../dist/index.js";
import { argmax, secondsSince, spreadTokens } from "./measure.mjs";

const path = process.argv[2] ?? "/root/q.gguf";
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

async function measure(hostRamGib, footprint) {
  const hostRam = hostRamGib * GIB;
  const dense = footprint.denseBytes + footprint.kvBytes + footprint.workspaceBytes;
  const plan = planOffload(footprint, { gpu: dense, hostRam });
  const loadStart = process.hrtime.bigint();
  const model = await loadModel(path, { gpu: "auto", contextSize: CONTEXT, hostRam, plan });
  const loadSeconds = secondsSince(loadStart);
  const vocab = model.info.vocabSize;
  const session = model.createSession();

  const beforePrompt = model.stats().disk;
  const promptStart = process.hrtime.bigint();
  let logits = await session.evaluate(spreadTokens(512, vocab));
  const prompt512 = 512 / secondsSince(promptStart);
  const promptDisk = delta(model.stats().disk, beforePrompt);

  for (let i = 0; i < WARMUP_STEPS; ++i) logits = await session.evaluate([argmax(logits)]);
  const beforeDecode = model.stats().disk;
  const decodeStart = process.hrtime.bigint();
  let steps = 0;
  while (steps < DECODE_STEPS && secondsSince(decodeStart) < DECODE_SECONDS) {
    logits = await session.evaluate([argmax(logits)]);
    ++steps;
  }
  const decode = steps / secondsSince(decodeStart);
  const decodeDisk = delta(model.stats().disk, beforeDecode);
  const live = model.plan;
  const offload = model.stats().offload;
  model.dispose();

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
    },
    offloadSinceLoad: offload,
  };
  console.log(
    `hostRam ${hostRamGib} GiB (${live.arena.slots} slots for ${figures.pagedExperts} paged experts, directIo ` +
      `${figures.directIo}): prompt 512 ${prompt512.toFixed(1)} tok/s (hit rate ${figures.prompt512.hitRate.toFixed(3)}, ` +
      `${figures.prompt512.gigabytesRead.toFixed(1)} GB read), decode ${decode.toFixed(2)} tok/s over ${steps} steps ` +
      `(hit rate ${figures.decode.hitRate.toFixed(3)}, ${figures.decode.megabytesReadPerToken.toFixed(0)} MB/token)`,
  );
  return figures;
}

const footprint = await modelFootprint(path, { contextSize: CONTEXT });
const runs = {};
for (const gib of ARENAS_GIB) runs[`hostRam-${gib}gib`] = await measure(gib, footprint);

const result = {
  command: `node bench/disk.mjs ${path}`,
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
