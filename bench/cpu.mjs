// CPU benchmark: bloomery against llama.cpp (node-llama-cpp's CPU build) on one synthetic MoE.
//
//   npm run bench:cpu [-- --threads N --prompt 512 --decode 64 --reps 3 --model FILE]
//
// Plain ESM over the built package (dist/ and the addon), so it needs no TypeScript loader.
// Each engine runs in its own child process, one after the other, on the same file and thread
// count: a warm-up pass, then the best of `reps` prompt passes of P tokens on an empty context,
// then `decode` greedy single-token steps after the prompt. The children alternate for `rounds`
// rounds and each engine keeps its best figures, so a load spike from another process on the
// machine costs a round, not the ratio. Prints the figures and their ratios (ours / llama.cpp)
// and writes them to bench/results/<date>-cpu.json.
import { execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { benchModel } from "./model-file.mjs";
import { argmax } from "./measure.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const PRESET = "qwen3moe-2b";

const { values } = parseArgs({
  options: {
    child: { type: "string" },
    model: { type: "string" },
    threads: { type: "string" },
    prompt: { type: "string", default: "512" },
    decode: { type: "string", default: "64" },
    reps: { type: "string", default: "3" },
    rounds: { type: "string", default: "2" },
  },
});
const settings = {
  threads: Number(values.threads ?? availableParallelism()),
  prompt: Number(values.prompt),
  decode: Number(values.decode),
  reps: Number(values.reps),
  rounds: Number(values.rounds),
};
const contextSize = settings.prompt + settings.decode + 16;

/**
 * Deterministic prompt tokens, away from the special tokens at the ends of the vocabulary: ids from
 * 256 up to 20,256, or to 256 below the vocabulary's end where it is smaller (the default model's 8,192).
 */
function promptTokens(count, vocabSize) {
  const span = Math.min(20_000, vocabSize - 512);
  const tokens = [];
  let state = 0x2545f491;
  while (tokens.length < count) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    tokens.push(256 + (state % span));
  }
  return tokens;
}

/** Times `run` `reps` times and keeps the fastest, in seconds. */
async function best(reps, before, run) {
  let fastest = Infinity;
  for (let r = 0; r < reps; r++) {
    await before();
    const start = performance.now();
    await run();
    fastest = Math.min(fastest, (performance.now() - start) / 1000);
  }
  return fastest;
}

/** The file's vocabulary size, from its metadata (both engines draw the same prompt from it). */
async function vocabSize(modelPath) {
  const { readGgufInfo } = await import(join(root, "dist/index.js"));
  return (await readGgufInfo(modelPath)).metadata["tokenizer.ggml.tokens"].length;
}

async function benchOurs(modelPath) {
  const { loadModel } = await import(join(root, "dist/index.js"));
  const model = await loadModel(modelPath, { gpu: false, threads: settings.threads, contextSize });
  const session = model.createSession();
  const prompt = promptTokens(settings.prompt, await vocabSize(modelPath));
  const decode = async (steps) => {
    let token = argmax(await session.evaluate([prompt[0]]));
    for (let i = 1; i < steps; i++) token = argmax(await session.evaluate([token]));
  };
  await session.evaluate(prompt);
  await decode(8);
  const promptSeconds = await best(
    settings.reps,
    () => session.reset(),
    () => session.evaluate(prompt),
  );
  const decodeSeconds = await best(
    1,
    async () => {},
    () => decode(settings.decode),
  );
  model.dispose();
  return { promptSeconds, decodeSeconds };
}

async function benchLlamaCpp(modelPath) {
  const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath });
  const context = await model.createContext({
    contextSize,
    batchSize: settings.prompt,
    threads: settings.threads,
  });
  const sequence = context.getSequence();
  const prompt = promptTokens(settings.prompt, await vocabSize(modelPath));
  const decode = async (steps) => {
    // A greedy generator: each token it yields is one single-token forward pass. It yields end
    // tokens too (and goes on): without yieldEogToken it ends at the first one, and a trained
    // model (the default one) reaches one within a few steps, so the steps would not be timed.
    const generator = sequence.evaluate([prompt[0]], { temperature: 0, yieldEogToken: true });
    for (let i = 0; i < steps; i++) {
      if ((await generator.next()).done) throw new Error(`llama.cpp's generator ended after ${i} of ${steps} steps`);
    }
    await generator.return();
  };
  await sequence.evaluateWithoutGeneratingNewTokens(prompt);
  await decode(8);
  const promptSeconds = await best(
    settings.reps,
    () => sequence.clearHistory(),
    () => sequence.evaluateWithoutGeneratingNewTokens(prompt),
  );
  const decodeSeconds = await best(
    1,
    async () => {},
    () => decode(settings.decode),
  );
  const info = {
    flashAttention: context.flashAttention,
    batchSize: context.batchSize,
    threads: context.currentThreads,
  };
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  return { promptSeconds, decodeSeconds, info };
}

function runChild(engine, modelPath) {
  const args = [fileURLToPath(import.meta.url), "--child", engine, "--model", modelPath];
  for (const key of ["threads", "prompt", "decode", "reps"]) args.push(`--${key}`, String(settings[key]));
  const out = execFileSync(process.execPath, args, { encoding: "utf8", stdio: ["ignore", "pipe", "inherit"] });
  const result = JSON.parse(out.trim().split("\n").pop());
  return {
    ...result,
    promptTokensPerSecond: settings.prompt / result.promptSeconds,
    decodeTokensPerSecond: settings.decode / result.decodeSeconds,
  };
}

async function main() {
  if (values.child) {
    const result = values.child === "ours" ? await benchOurs(values.model) : await benchLlamaCpp(values.model);
    console.log(JSON.stringify(result));
    return;
  }
  const modelPath = values.model ?? benchModel(PRESET);
  const { getSystemInfo } = await import(join(root, "dist/index.js"));
  const runs = { ours: [], llamaCpp: [] };
  for (let round = 0; round < settings.rounds; round++) {
    runs.ours.push(runChild("ours", modelPath));
    runs.llamaCpp.push(runChild("llama.cpp", modelPath));
  }
  const fastest = (list) => ({
    ...list[0],
    promptSeconds: Math.min(...list.map((r) => r.promptSeconds)),
    decodeSeconds: Math.min(...list.map((r) => r.decodeSeconds)),
    promptTokensPerSecond: Math.max(...list.map((r) => r.promptTokensPerSecond)),
    decodeTokensPerSecond: Math.max(...list.map((r) => r.decodeTokensPerSecond)),
  });
  const ours = { ...fastest(runs.ours), rounds: runs.ours };
  const llamaCpp = { ...fastest(runs.llamaCpp), rounds: runs.llamaCpp };
  const ratios = {
    prompt: ours.promptTokensPerSecond / llamaCpp.promptTokensPerSecond,
    decode: ours.decodeTokensPerSecond / llamaCpp.decodeTokensPerSecond,
  };
  const fmt = (x) => x.toFixed(2).padStart(9);
  console.log(
    `${values.model ?? PRESET}, ${settings.threads} threads, P = ${settings.prompt}, ${settings.decode} decode steps`,
  );
  console.log(`            ${"bloomery".padStart(9)} ${"llama.cpp".padStart(9)}     ratio`);
  console.log(
    `prompt t/s  ${fmt(ours.promptTokensPerSecond)} ${fmt(llamaCpp.promptTokensPerSecond)} ${fmt(ratios.prompt)}x`,
  );
  console.log(
    `decode t/s  ${fmt(ours.decodeTokensPerSecond)} ${fmt(llamaCpp.decodeTokensPerSecond)} ${fmt(ratios.decode)}x`,
  );

  const date = new Date().toISOString();
  const report = {
    command: `node bench/cpu.mjs ${process.argv.slice(2).join(" ")}`.trim(),
    date,
    machine: getSystemInfo(),
    model: { preset: values.model ? undefined : PRESET, path: modelPath },
    settings,
    bloomery: ours,
    llamaCpp,
    ratios,
  };
  const dir = join(root, "bench/results");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${date.slice(0, 10)}-cpu.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`wrote ${file}`);
}

await main();
