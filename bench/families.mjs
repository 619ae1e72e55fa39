// Model-family benchmark (run on the GPU machine): one synthetic model of a family's full shapes
// (bloomery-synth's glm-4.5-air, deepseek-v3-slice) in one or more placements, ours and
// ik_llama.cpp's llama-bench on the same file on the same machine, each figure with its ratio:
//   whole        the whole model on the GPU            (ik: -ngl 99)
//   budget=24    a GPU budget of 24 GiB, the rest on the CPU (ik: the routed experts of as many
//                whole layers as the same memory holds on the GPU, the others' with -ot on the CPU)
//   cpu-experts  every routed expert on the CPU        (ik: -ot exps=CPU); adaptive residency moves the
//                most-routed onto the GPU as it runs, as by default
//   cpu-experts-static  the same, the experts kept where the plan put them (residency "static"), as ik keeps them
// ik runs with -fa 1 -fmoe 1 (and -mla 3 for MLA models), -t 16, prompts of 4,096 with
// -b 4096 -ub 4096 (../shared/BASELINES.md: its fastest settings). Decode is greedy generate()
// as a user streams it (first token to last) and the engine's own time for those passes (what
// llama-bench's tg measures); prompts of 512 and 4,096 tokens; with --depth D, the engine's decode
// after a prompt of D tokens (ik: -gp D,128). Writes JSON to $OUT (or the working directory), one
// file per placement.
//   node bench/families.mjs /root/glm.gguf whole budget=24
// A device call lasts at most 10 minutes, and ours can run while the peer's build finishes, so the
// two halves can run apart: `--phase ours` keeps our figures in BENCH_STATE (default /root/families),
// a later `--phase peer` (same model and placements) adds the peer's and the ratios.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel, modelFootprint, readGgufInfo } from "../dist/index.js";
import { cpuExpertsPlan, promptRate, secondsSince, spreadTokens, streamedDecodeRate, takeOption } from "./measure.mjs";
import { IK_BENCH, ikLayerSplit, ikRun, peerBuilt } from "./peer.mjs";

const args = process.argv.slice(2);
const PHASE = takeOption(args, "--phase", "both");
const DEPTH = Number(takeOption(args, "--depth", "0"));
const [path, ...placementArgs] = args;
if (!path || !["ours", "peer", "both"].includes(PHASE))
  throw new Error(
    "usage: node bench/families.mjs <model.gguf> (whole|budget=<GiB>|cpu-experts|cpu-experts-static)... [--phase ours|peer|both] [--depth D]",
  );
const PLACEMENTS = placementArgs.length > 0 ? placementArgs : ["whole"];
const STATE = process.env.BENCH_STATE ?? "/root/families";
const CONTEXT = Math.max(8192, DEPTH + 256);
const DECODE_STEPS = 128;
const GIB = 2 ** 30;

const info = await readGgufInfo(path);
const summary = info.summary;
const mla = info.metadata[`${summary.architecture}.attention.kv_lora_rank`] !== undefined;

/** Our load options and ik's placement flags for `placement`. */
async function placements(placement) {
  if (placement === "whole") return { ours: { gpu: "auto" }, ik: ["-ngl", "99"] };
  const footprint = await modelFootprint(path, { contextSize: CONTEXT });
  const layers = footprint.expertBytes.length;
  if (placement === "cpu-experts" || placement === "cpu-experts-static") {
    const residency = placement === "cpu-experts-static" ? "static" : "adaptive";
    return {
      ours: { gpu: "auto", plan: cpuExpertsPlan(footprint), residency },
      ik: ["-ngl", "99", "-ot", "exps=CPU"],
    };
  }
  const budget = Number(/^budget=(\d+(\.\d+)?)$/.exec(placement)?.[1]) * GIB;
  if (!(budget > 0)) throw new Error(`unknown placement ${placement}`);
  // ik with the same memory: the dense part and cache, then whole layers' experts from the first on.
  const split = ikLayerSplit(footprint, budget);
  console.log(`ik: experts of ${split.gpuLayers} of ${split.moeLayers} MoE layers on the GPU (${layers} layers)`);
  return { ours: { gpu: { budget } }, ik: split.args };
}

async function ours(options) {
  const loadStart = process.hrtime.bigint();
  const model = await loadModel(path, { contextSize: CONTEXT, ...options });
  const loadSeconds = secondsSince(loadStart);
  const vocab = model.info.vocabSize;
  const session = model.createSession();
  await promptRate(session, 64, vocab);
  const prompt512 = Math.max(await promptRate(session, 512, vocab), await promptRate(session, 512, vocab));
  const beforeLong = model.stats().offload;
  const prompt4096 = await promptRate(session, 4096, vocab);
  const before = model.stats();
  // With host experts: what the prompts' streamed passes copied, and how fast (their limit).
  const offload = before.offload;
  const decode = await streamedDecodeRate(model, session, DECODE_STEPS);
  const after = model.stats();
  const decodeEngine = (after.decodeTokens - before.decodeTokens) / (after.decodeSeconds - before.decodeSeconds);
  const decodeAtDepth = DEPTH > 0 ? await engineDecodeAfter(model, DEPTH) : undefined;
  const plan = model.plan;
  const { adaptive, moves, gpuHitRate } = after.residency;
  model.dispose();
  return {
    loadSeconds,
    gpuExperts: plan?.layers.reduce((n, l) => n + l.gpu.length, 0),
    hostExperts: plan?.layers.reduce((n, l) => n + l.host.length, 0),
    planBytes: plan?.bytes,
    decodeTokensPerSecond: decode,
    decodeEngineTokensPerSecond: decodeEngine,
    prompt512TokensPerSecond: prompt512,
    prompt4096TokensPerSecond: prompt4096,
    // Whether experts moved onto the GPU while it ran (up to the decode's end), and the share of calls it served.
    residency: { adaptive, moves, gpuHitRate },
    ...(offload?.streamedPasses
      ? {
          streamedPasses: offload.streamedPasses,
          streamedGB: offload.streamedBytes / 1e9,
          streamedGBPerSecond: offload.streamedBytesPerSecond / 1e9,
          // The prompt of 4,096 alone: how many passes streamed and the CPU ran (its checkpoints split it), and
          // what they copied.
          prompt4096Offload: {
            streamedPasses: offload.streamedPasses - beforeLong.streamedPasses,
            cpuPasses: offload.passes - beforeLong.passes,
            streamedGB: (offload.streamedBytes - beforeLong.streamedBytes) / 1e9,
            wallSeconds: offload.wallSeconds - beforeLong.wallSeconds,
          },
        }
      : {}),
    ...(decodeAtDepth === undefined ? {} : { depth: DEPTH, decodeAtDepthTokensPerSecond: decodeAtDepth }),
  };
}

/** The engine's decode tok/s (model.stats(): the passes' own time) of DECODE_STEPS greedy tokens after `depth` prompt tokens. */
async function engineDecodeAfter(model, depth) {
  const session = model.createSession();
  const start = model.stats();
  const ban = { [model.info.eosToken]: -Infinity };
  await session.generate(spreadTokens(depth, model.info.vocabSize), { maxTokens: DECODE_STEPS, logitBias: ban }).result;
  const end = model.stats();
  session.dispose();
  return (end.decodeTokens - start.decodeTokens) / (end.decodeSeconds - start.decodeSeconds);
}

const stateFile = (placement) => join(STATE, `${summary.architecture}-${placement}.json`);
const results = [];
for (const placement of PLACEMENTS) {
  const { ours: options, ik: ikArgs } = await placements(placement);
  if (PHASE === "peer") {
    if (!existsSync(stateFile(placement))) throw new Error(`no --phase ours result at ${stateFile(placement)}`);
    results.push({ result: JSON.parse(readFileSync(stateFile(placement), "utf8")), ikArgs });
    continue;
  }
  const result = {
    command: `node bench/families.mjs ${path} ${placement}${DEPTH > 0 ? ` --depth ${DEPTH}` : ""}`,
    date: new Date().toISOString(),
    machine: getSystemInfo(),
    model: { path, architecture: summary.architecture, layers: summary.layers, bytes: summary.tensorBytes },
    placement,
    ours: await ours(options),
  };
  console.log(JSON.stringify(result, null, 2));
  if (PHASE === "ours") {
    mkdirSync(STATE, { recursive: true });
    writeFileSync(stateFile(placement), JSON.stringify(result, null, 2));
  }
  results.push({ result, ikArgs });
}
if (PHASE === "ours") process.exit(0);
// The peer's build (../shared/device/peer/build.sh) may still be running: wait for it a while.
const built = await peerBuilt();
for (const { result, ikArgs } of results) {
  if (built) {
    const short = ikRun(path, [...ikArgs, "-p", "512", "-n", "128"], { mla });
    const long = ikRun(path, [...ikArgs, "-p", "4096", "-n", "0", "-b", "4096", "-ub", "4096"], { mla });
    const peer = { decode: short.figures.tg128, prompt512: short.figures.pp512, prompt4096: long.figures.pp4096 };
    const runs = [short, long];
    if (DEPTH > 0) {
      const deep = ikRun(path, [...ikArgs, "-p", "0", "-n", "0", "-gp", `${DEPTH},${DECODE_STEPS}`], { mla });
      // llama-bench names the test tg<n>@pp<depth> (spacing differs between versions).
      const test = Object.keys(deep.figures).find((name) => name.replace(/\s/g, "").includes(`@pp${DEPTH}`));
      peer.decodeAtDepth = test === undefined ? undefined : deep.figures[test];
      runs.push(deep);
    }
    result.peer = {
      name: "ik_llama.cpp llama-bench",
      date: new Date().toISOString(),
      runs,
      figures: peer,
    };
    result.ratios = {
      decode: result.ours.decodeTokensPerSecond / peer.decode,
      decodeEngine: result.ours.decodeEngineTokensPerSecond / peer.decode,
      prompt512: result.ours.prompt512TokensPerSecond / peer.prompt512,
      prompt4096: result.ours.prompt4096TokensPerSecond / peer.prompt4096,
      ...(peer.decodeAtDepth === undefined
        ? {}
        : { decodeAtDepth: result.ours.decodeAtDepthTokensPerSecond / peer.decodeAtDepth }),
    };
  } else {
    result.peer = { error: `${IK_BENCH} not built (../shared/device/peer/build.sh)` };
  }
  console.log(
    JSON.stringify({ placement: result.placement, peer: result.peer.figures, ratios: result.ratios }, null, 2),
  );
  const name = `families-${summary.architecture}-${result.placement}`.replace(/[^\w.-]/g, "-");
  const out = join(process.env.OUT ?? ".", `${name}.json`);
  writeFileSync(out, JSON.stringify(result, null, 2));
}
