// Generation on a CPU that other programs keep busy, as a desktop app's always is: decode tok/s on
// the default model with each engine's defaults (bloomery's loadModel and node-llama-cpp's, both on
// the CPU), first on the machine as it is ("quiet"), then with one busy process per CPU beside it
// ("loaded"), and the ratio loaded / quiet of each (--llama-threads N gives node-llama-cpp N threads instead
// of its default). Goal: bloomery >= 0.8x, and no slower than
// node-llama-cpp loaded.
//
//   npm run bench:load [-- --tokens 128 --seconds 20 --rounds 3 --busy N --model FILE --timeout 120 --llama-threads N]
//
// Each measurement runs in its own child process and decodes `tokens` tokens or for `seconds`,
// whichever ends first (an engine that crawls still gets its rate); quiet and loaded alternate for
// `rounds` rounds and each keeps its median, so one spike of other load costs a round, not the
// figure. Writes bench/results/<date>-load.json.
import { execFileSync, spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { streamedDecodeRate } from "./measure.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const { values } = parseArgs({
  options: {
    child: { type: "string" },
    model: { type: "string" },
    tokens: { type: "string", default: "128" },
    seconds: { type: "string", default: "20" },
    rounds: { type: "string", default: "3" },
    busy: { type: "string" },
    timeout: { type: "string", default: "120" },
    "llama-threads": { type: "string" },
  },
});
const tokens = Number(values.tokens);
const seconds = Number(values.seconds);
const rounds = Number(values.rounds);
const busyCount = Number(values.busy ?? availableParallelism());
const timeoutSeconds = Number(values.timeout);

async function defaultModelPath() {
  const pkg = JSON.parse((await import("node:fs")).readFileSync(join(root, "package.json"), "utf8"));
  return join(root, pkg.bloomery.defaultModel);
}

async function benchOurs(modelPath) {
  const { loadModel } = await import(join(root, "dist/index.js"));
  const model = await loadModel(modelPath, { gpu: false });
  const session = model.createSession();
  await streamedDecodeRate(model, session, 8);
  const rate = await streamedDecodeRate(model, session, tokens, {
    signal: globalThis.AbortSignal.timeout(seconds * 1000),
  });
  const threads = model.info.threads;
  model.dispose();
  return { tokensPerSecond: rate, threads };
}

async function benchLlamaCpp(modelPath) {
  const { getLlama, LlamaLogLevel, TokenBias } = await import("node-llama-cpp");
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  const model = await llama.loadModel({ modelPath });
  const threadOption = values["llama-threads"] ? { threads: Number(values["llama-threads"]) } : {};
  // Room for the prompt, the warm-up and the measured tokens.
  const context = await model.createContext({ contextSize: tokens + 128, ...threadOption });
  const sequence = context.getSequence();
  const prompt = model.tokenize("Once upon a time, by a river that ran through a quiet valley, there lived");
  // Never the end of text, as for bloomery (streamedDecodeRate's logitBias).
  const tokenBias = TokenBias.for(model);
  for (const token of [model.tokens.eos, model.tokens.eot].filter((t) => t != null)) tokenBias.set(token, "never");
  const decode = async (steps) => {
    // A greedy generator: each token it yields is one single-token forward pass.
    const generator = sequence.evaluate(prompt, { temperature: 0, tokenBias });
    await generator.next();
    const start = process.hrtime.bigint();
    const deadline = start + BigInt(seconds * 1e9);
    let done = 0;
    // The generator may also end on its own (on this tiny model it does after ~160 tokens, for
    // no reason it gives): the rate is then that of the tokens it decoded.
    while (done < steps && process.hrtime.bigint() < deadline && !(await generator.next()).done) done++;
    const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
    await generator.return();
    await sequence.clearHistory();
    return done / elapsed;
  };
  await decode(8);
  const rate = await decode(tokens);
  const threads = context.currentThreads;
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  return { tokensPerSecond: rate, threads };
}

/** One measurement in a child process; a child that runs past --timeout seconds counts as 0 tok/s (it stalled). */
function runChild(engine, modelPath) {
  const args = [
    fileURLToPath(import.meta.url),
    ...["--child", engine, "--model", modelPath, "--tokens", String(tokens), "--seconds", String(seconds)],
  ];
  if (values["llama-threads"]) args.push("--llama-threads", values["llama-threads"]);
  try {
    const out = execFileSync(process.execPath, args, {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "inherit"],
      timeout: timeoutSeconds * 1000,
    });
    return JSON.parse(out.trim().split("\n").pop());
  } catch (error) {
    if (error.code !== "ETIMEDOUT" && error.signal !== "SIGTERM") throw error;
    console.error(`${engine}: no result in ${timeoutSeconds} s, counted as 0 tok/s`);
    return { tokensPerSecond: 0, threads: null, timedOut: true };
  }
}

/** `count` processes that spin until killed: one per CPU is a fully busy machine. */
function startBusy(count) {
  return Array.from({ length: count }, () => spawn(process.execPath, ["-e", "for (;;);"], { stdio: "ignore" }));
}

const median = (list) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)];

async function main() {
  if (values.child) {
    const result = values.child === "ours" ? await benchOurs(values.model) : await benchLlamaCpp(values.model);
    console.log(JSON.stringify(result));
    return;
  }
  const modelPath = values.model ?? (await defaultModelPath());
  const engines = { bloomery: "ours", "node-llama-cpp": "llama.cpp" };
  const runs = Object.fromEntries(Object.keys(engines).map((name) => [name, { quiet: [], loaded: [], threads: 0 }]));
  for (let round = 0; round < rounds; round++) {
    for (const [name, engine] of Object.entries(engines)) {
      const quiet = runChild(engine, modelPath);
      runs[name].quiet.push(quiet.tokensPerSecond);
      runs[name].threads = quiet.threads ?? runs[name].threads;
    }
    const busy = startBusy(busyCount);
    try {
      for (const [name, engine] of Object.entries(engines))
        runs[name].loaded.push(runChild(engine, modelPath).tokensPerSecond);
    } finally {
      for (const child of busy) child.kill();
    }
  }
  const results = Object.fromEntries(
    Object.entries(runs).map(([name, r]) => {
      const quiet = median(r.quiet);
      const loaded = median(r.loaded);
      return [name, { ...r, quietTokensPerSecond: quiet, loadedTokensPerSecond: loaded, ratio: loaded / quiet }];
    }),
  );
  const fmt = (x) => x.toFixed(1).padStart(9);
  console.log(
    `default model, ${tokens} decode tokens, ${busyCount} busy process(es) on ${availableParallelism()} CPU(s), median of ${rounds}`,
  );
  console.log(`                  threads     quiet    loaded    ratio`);
  for (const [name, r] of Object.entries(results)) {
    console.log(
      `${name.padEnd(16)} ${String(r.threads).padStart(8)} ${fmt(r.quietTokensPerSecond)} ${fmt(r.loadedTokensPerSecond)} ${r.ratio.toFixed(2).padStart(7)}x`,
    );
  }
  const date = new Date().toISOString();
  const { getSystemInfo } = await import(join(root, "dist/index.js"));
  const report = {
    command: `node bench/load.mjs ${process.argv.slice(2).join(" ")}`.trim(),
    date,
    machine: getSystemInfo(),
    model: modelPath,
    settings: { tokens, seconds, rounds, busy: busyCount, llamaThreads: values["llama-threads"] ?? null },
    results,
  };
  const dir = join(root, "bench/results");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${date.slice(0, 10)}-load.json`);
  writeFileSync(file, `${JSON.stringify(report, null, 2)}\n`);
  console.log(`wrote ${file}`);
}

await main();
