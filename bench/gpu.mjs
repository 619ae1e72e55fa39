// GPU benchmark (run on the GPU machine): the whole model on the card; decode tok/s of one
// stream and prompt tok/s at P = 512 and 4096, against ik_llama.cpp's figures on the same
// machine and model (../shared/BASELINES.md). Decode four ways: greedy generate() as a user
// streams it (first token to last: the figure the ratio takes), the engine's own time for those
// passes (model.stats(); what llama-bench's tg times), generate() with llama-server's default
// sampling, and evaluate() of one token at a time with the logits copied to JavaScript and
// argmax taken there. Then decode at depth: the engine's decode tok/s after prompts of 512 and
// 16,384 tokens (a model loaded with a context that holds the deeper), and their ratio, which
// says what attention over a long cache costs a step. Writes JSON to $OUT (or the working directory).
//   node bench/gpu.mjs /root/q.gguf
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel } from "../dist/index.js";
import { argmax, promptRate, secondsSince, spreadTokens, streamedDecodeRate } from "./measure.mjs";

const PEER = { name: "ik_llama.cpp (-ngl 99 -fa 1)", decode: 238.9, prompt512: 4342, prompt4096: 5215 };
const path = process.argv[2] ?? "/root/q.gguf";
const DECODE_STEPS = 256;
const DEPTHS = [512, 16384];
const DEPTH_STEPS = 128;

/** What the bench is doing, on stderr: a run of minutes says where it is. */
const step = (what) => console.error(`gpu.mjs: ${what} (${new Date().toISOString()})`);

step("loading");
const loadStart = process.hrtime.bigint();
const model = await loadModel(path, { gpu: "auto", contextSize: 8192 });
const loadSeconds = secondsSince(loadStart);
const vocab = model.info.vocabSize;
const session = model.createSession();

step("prompts of 512 and 4,096 tokens");
await promptRate(session, 64, vocab); // warm-up: kernels loaded, first graph captured below
const prompt512 = Math.max(await promptRate(session, 512, vocab), await promptRate(session, 512, vocab));
const prompt4096 = await promptRate(session, 4096, vocab);

step("decode through evaluate()");
session.reset();
let logits = await session.evaluate(spreadTokens(64, vocab));
let token;
token = argmax(logits);
logits = await session.evaluate([token]); // captures the decode graph
const decodeStart = process.hrtime.bigint();
for (let i = 0; i < DECODE_STEPS; ++i) {
  token = argmax(logits);
  logits = await session.evaluate([token]);
}
const decodeEvaluate = DECODE_STEPS / secondsSince(decodeStart);

step("decode through generate()");
const before = model.stats();
const decode = await streamedDecodeRate(model, session, DECODE_STEPS);
const after = model.stats();
const decodeEngine = (after.decodeTokens - before.decodeTokens) / (after.decodeSeconds - before.decodeSeconds);
// llama-server's default sampling (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05), on the host.
const decodeSampled = await streamedDecodeRate(model, session, DECODE_STEPS, { temperature: 0.8, seed: 1 });
model.dispose();

// The engine's decode tok/s (model.stats(): the passes' own time) of greedy tokens after `depth` prompt tokens.
async function decodeAtDepth(deep, depth) {
  const s = deep.createSession();
  const start = deep.stats();
  const ban = { [deep.info.eosToken]: -Infinity };
  await s.generate(spreadTokens(depth, vocab), { maxTokens: DEPTH_STEPS, logitBias: ban }).result;
  const end = deep.stats();
  s.dispose();
  return (end.decodeTokens - start.decodeTokens) / (end.decodeSeconds - start.decodeSeconds);
}
step("decode at depth");
const deep = await loadModel(path, { gpu: "auto", contextSize: Math.max(...DEPTHS) + DEPTH_STEPS + 64 });
await decodeAtDepth(deep, 64); // warm-up: the decode graph captured
const atDepth = {};
for (const depth of DEPTHS) {
  step(`decode after ${depth} tokens`);
  atDepth[depth] = Math.max(await decodeAtDepth(deep, depth), await decodeAtDepth(deep, depth));
}
deep.dispose();

const result = {
  command: `node bench/gpu.mjs ${path}`,
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, preset: "qwen3-30b-a3b synthetic", contextSize: 8192 },
  figures: {
    loadSeconds,
    decodeTokensPerSecond: decode,
    decodeEngineTokensPerSecond: decodeEngine,
    decodeSampledTokensPerSecond: decodeSampled,
    decodeEvaluateTokensPerSecond: decodeEvaluate,
    decodeSteps: DECODE_STEPS,
    decodeContextStart: 65,
    prompt512TokensPerSecond: prompt512,
    prompt4096TokensPerSecond: prompt4096,
    decodeAtDepth: atDepth,
    decodeDeepOverShallow: atDepth[DEPTHS[1]] / atDepth[DEPTHS[0]],
  },
  peer: PEER,
  ratios: {
    decode: decode / PEER.decode,
    prompt512: prompt512 / PEER.prompt512,
    prompt4096: prompt4096 / PEER.prompt4096,
  },
};
const out = join(process.env.OUT ?? ".", "gpu-bench.json");
writeFileSync(out, JSON.stringify(result, null, 2));
console.log(JSON.stringify(result.figures, null, 2));
console.log(
  `decode ${decode.toFixed(1)} tok/s (${result.ratios.decode.toFixed(2)}x ik_llama.cpp; engine ` +
    `${decodeEngine.toFixed(1)}, sampled ${decodeSampled.toFixed(1)}, evaluate loop ${decodeEvaluate.toFixed(1)}), ` +
    `prompt 512: ${prompt512.toFixed(0)} (${result.ratios.prompt512.toFixed(2)}x), ` +
    `4096: ${prompt4096.toFixed(0)} (${result.ratios.prompt4096.toFixed(2)}x); decode at depth ` +
    `${DEPTHS.map((d) => `${d}: ${atDepth[d].toFixed(1)}`).join(", ")} ` +
    `(${result.figures.decodeDeepOverShallow.toFixed(3)}x); wrote ${out}`,
);
