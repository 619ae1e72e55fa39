// Hybrid benchmark (run on the GPU machine): routed experts split between the GPU and the
// CPU, against ik_llama.cpp's figures on the same machine and model (../shared/BASELINES.md):
//   cpu-experts  every routed expert on the CPU (ik_llama.cpp -ot exps=CPU -fmoe 1 -t 16)
//   budget-8gib  the whole model in a GPU budget of 8 GiB (ik_llama.cpp: 8 of 48 layers' experts on the card)
// Decode tok/s of one stream (greedy generate() as a user streams it, first token to last; and
// the evaluate-one-token loop with argmax in JavaScript that this bench measured before), prompt
// tok/s at P = 512 and 4096 (passes of 512 rows, which copy the host experts to the GPU over
// PCIe), and per decode step: wall time, GPU busy (wall less the GPU's waits for the CPU), CPU
// expert time and their overlap.
// Writes JSON to $OUT (or the working directory).
//   node bench/hybrid.mjs /root/q.gguf
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel, modelFootprint, planOffload } from "../dist/index.js";
import { argmax, promptRate, secondsSince, spreadTokens, streamedDecodeRate } from "./measure.mjs";

const path = process.argv[2] ?? "/root/q.gguf";
const CONTEXT = 8192;
const DECODE_STEPS = 128;
const PEERS = {
  "cpu-experts": { name: "ik_llama.cpp (-ot exps=CPU -fmoe 1 -t 16)", decode: 45.6, prompt512: 1186, prompt4096: 1799 },
  "budget-8gib": { name: "ik_llama.cpp (experts of 40 of 48 layers on the CPU)", decode: 52.0, prompt512: 1309 },
};

const delta = (after, before) => Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - before[k]]));

async function measure(name, options) {
  const loadStart = process.hrtime.bigint();
  const model = await loadModel(path, { contextSize: CONTEXT, ...options });
  const loadSeconds = secondsSince(loadStart);
  const vocab = model.info.vocabSize;
  const session = model.createSession();
  await promptRate(session, 64, vocab);
  const prompt512 = Math.max(await promptRate(session, 512, vocab), await promptRate(session, 512, vocab));
  const promptStats = model.stats().offload;
  const prompt4096 = await promptRate(session, 4096, vocab);
  const prompt4096Offload = model.stats().offload;
  const prompt4096Stats = delta(prompt4096Offload, promptStats);

  session.reset();
  let logits = await session.evaluate(spreadTokens(64, vocab));
  logits = await session.evaluate([argmax(logits)]); // captures the decode graph
  const decodeStart = process.hrtime.bigint();
  for (let i = 0; i < DECODE_STEPS; ++i) logits = await session.evaluate([argmax(logits)]);
  const decodeEvaluate = DECODE_STEPS / secondsSince(decodeStart);

  // Greedy generation; the step figures from the first token on.
  let before;
  const decode = await streamedDecodeRate(model, session, DECODE_STEPS, {}, () => {
    before = model.stats().offload;
  });
  const d = delta(model.stats().offload, before);
  const plan = model.plan;
  model.dispose();

  const perStepMs = (s) => (s / d.passes) * 1e3;
  const figures = {
    loadSeconds,
    gpuExperts: plan.layers.reduce((n, l) => n + l.gpu.length, 0),
    hostExperts: plan.layers.reduce((n, l) => n + l.host.length, 0),
    planBytes: plan.bytes,
    decodeTokensPerSecond: decode,
    decodeEvaluateTokensPerSecond: decodeEvaluate,
    decodeSteps: DECODE_STEPS,
    prompt512TokensPerSecond: prompt512,
    prompt4096TokensPerSecond: prompt4096,
    decodeStep: {
      wallMs: perStepMs(d.wallSeconds),
      gpuBusyMs: perStepMs(d.wallSeconds - d.gpuWaitSeconds),
      gpuWaitMs: perStepMs(d.gpuWaitSeconds),
      cpuExpertMs: perStepMs(d.cpuExpertSeconds),
      cpuWaitMs: perStepMs(d.cpuWaitSeconds),
      overlapMs: perStepMs(Math.max(0, d.cpuExpertSeconds - d.gpuWaitSeconds)),
    },
    prompt4096Passes: {
      streamedPasses: prompt4096Stats.streamedPasses,
      passes: prompt4096Stats.passes,
      wallSeconds: prompt4096Stats.wallSeconds,
      gpuWaitSeconds: prompt4096Stats.gpuWaitSeconds,
      cpuExpertSeconds: prompt4096Stats.cpuExpertSeconds,
      cpuWaitSeconds: prompt4096Stats.cpuWaitSeconds,
      streamedGB: prompt4096Stats.streamedBytes / 1e9,
      streamedGBPerSecond: prompt4096Offload.streamedBytesPerSecond / 1e9, // a rate: not a difference
    },
  };
  const peer = PEERS[name];
  const ratios = { decode: decode / peer.decode, prompt512: prompt512 / peer.prompt512 };
  if (peer.prompt4096) ratios.prompt4096 = prompt4096 / peer.prompt4096;
  console.log(
    `${name}: decode ${decode.toFixed(1)} tok/s (${ratios.decode.toFixed(2)}x ${peer.name}), prompt 512: ` +
      `${prompt512.toFixed(0)} (${ratios.prompt512.toFixed(2)}x), 4096: ${prompt4096.toFixed(0)}` +
      (ratios.prompt4096 ? ` (${ratios.prompt4096.toFixed(2)}x)` : "") +
      `; step ${JSON.stringify(figures.decodeStep)}`,
  );
  return {
    options: { ...options, plan: options.plan ? "every routed expert on the host" : undefined },
    figures,
    peer,
    ratios,
  };
}

const footprint = await modelFootprint(path, { contextSize: CONTEXT });
const dense = footprint.denseBytes + footprint.kvBytes + footprint.workspaceBytes + footprint.streamBytes;
const cpuExperts = planOffload(footprint, { gpu: dense, hostRam: Number.MAX_SAFE_INTEGER });
const runs = {
  "cpu-experts": await measure("cpu-experts", { gpu: "auto", plan: cpuExperts }),
  "budget-8gib": await measure("budget-8gib", { gpu: { budget: "8GiB" } }),
};

const result = {
  command: `node bench/hybrid.mjs ${path}`,
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, preset: "qwen3-30b-a3b synthetic", contextSize: CONTEXT },
  footprint: { ...footprint, expertBytes: footprint.expertBytes[0] },
  runs,
};
const out = join(process.env.OUT ?? ".", "hybrid-bench.json");
writeFileSync(out, JSON.stringify(result, null, 2));
console.log(`wrote ${out}`);
