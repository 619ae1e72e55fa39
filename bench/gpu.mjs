// GPU benchmark (run on the GPU machine): the whole model on the card; decode tok/s of one
// stream and prompt tok/s at P = 512 and 4096, against ik_llama.cpp's figures on the same
// machine and model (../shared/BASELINES.md). Writes JSON to $OUT (or the working directory).
//   node bench/gpu.mjs /root/q.gguf
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel } from "../dist/index.js";

const PEER = { name: "ik_llama.cpp (-ngl 99 -fa 1)", decode: 238.9, prompt512: 4342, prompt4096: 5215 };
const path = process.argv[2] ?? "/root/q.gguf";
const DECODE_STEPS = 256;

const seconds = (start) => Number(process.hrtime.bigint() - start) / 1e9;
const prompt = (length, vocab) => Array.from({ length }, (_, i) => (i * 7919 + 11) % vocab);

const loadStart = process.hrtime.bigint();
const model = await loadModel(path, { gpu: "auto", contextSize: 8192 });
const loadSeconds = seconds(loadStart);
const vocab = model.info.vocabSize;
const session = model.createSession();

async function promptRate(length) {
  session.reset();
  const start = process.hrtime.bigint();
  await session.evaluate(prompt(length, vocab));
  return length / seconds(start);
}

await promptRate(64); // warm-up: kernels loaded, first graph captured below
const prompt512 = Math.max(await promptRate(512), await promptRate(512));
const prompt4096 = await promptRate(4096);

session.reset();
let logits = await session.evaluate(prompt(64, vocab));
let token;
function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; ++i) if (row[i] > row[best]) best = i;
  return best;
}
token = argmax(logits);
logits = await session.evaluate([token]); // captures the decode graph
const decodeStart = process.hrtime.bigint();
for (let i = 0; i < DECODE_STEPS; ++i) {
  token = argmax(logits);
  logits = await session.evaluate([token]);
}
const decode = DECODE_STEPS / seconds(decodeStart);
model.dispose();

const result = {
  command: `node bench/gpu.mjs ${path}`,
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, preset: "qwen3-30b-a3b synthetic", contextSize: 8192 },
  figures: {
    loadSeconds,
    decodeTokensPerSecond: decode,
    decodeSteps: DECODE_STEPS,
    decodeContextStart: 65,
    prompt512TokensPerSecond: prompt512,
    prompt4096TokensPerSecond: prompt4096,
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
  `decode ${decode.toFixed(1)} tok/s (${result.ratios.decode.toFixed(2)}x ik_llama.cpp), ` +
    `prompt 512: ${prompt512.toFixed(0)} (${result.ratios.prompt512.toFixed(2)}x), ` +
    `4096: ${prompt4096.toFixed(0)} (${result.ratios.prompt4096.toFixed(2)}x); wrote ${out}`,
);
