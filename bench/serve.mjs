// The server against the SDK (issue 19): decode tok/s as a client streaming bloomery-serve's /completion sees it,
// against generate() streamed in this process on the same file with the same placement, in one run. Per prompt
// depth (--depths, prompts of that many spread tokens), rounds alternate SDK and server; each side keeps its best
// round. Both decode greedily with the end of text banned (the server: ignore_eos), one stream, one slot
// (`-np 1 -c <context>` against `parallel: 1, contextSize: <context>`), default threads; the server's own
// `timings.predicted_per_second` is kept beside the client's rate, so what the HTTP and SSE side costs shows apart
// from the engine's. Placements: cpu (`-ngl 0` / gpu: false), whole (`-ngl 99` / gpu: "auto"), cpu-experts
// (`--cpu-moe` / every routed expert in a plan's host list); --threads N is `-t N` / threads: N on both sides.
// With --streams 1,2,4,8 it measures concurrent streams instead, at the first depth: each count of requests
// at once (distinct prompts, `-np <most>` against `parallel: <most>`), their total decode tok/s (every stream's
// tokens after its first, over the time from the first stream's first token to the last one's last), the ratio
// to one stream's on each side, and whether each stream's tokens equal its prompt's alone (and the server's the
// SDK's). Writes JSON to $OUT (or the working directory).
//   node bench/serve.mjs <model.gguf> [--placement cpu|whole|cpu-experts] [--tokens 128] [--rounds 3]
//        [--depths 64,5600] [--streams 1,2,4,8] [--threads N] [--port 8177]
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel, modelFootprint } from "../dist/index.js";
import { cpuExpertsPlan, spreadTokens, streamRate, takeOption } from "./measure.mjs";
import { completionChunks as serverChunks, startServer } from "./server-client.mjs";

const args = process.argv.slice(2);
const placement = takeOption(args, "--placement", "cpu");
const TOKENS = Number(takeOption(args, "--tokens", "128"));
const ROUNDS = Number(takeOption(args, "--rounds", "3"));
const DEPTHS = takeOption(args, "--depths", "64").split(",").map(Number);
const PORT = Number(takeOption(args, "--port", "8177"));
const THREADS = takeOption(args, "--threads");
const STREAMS = takeOption(args, "--streams")?.split(",").map(Number);
const SLOTS = STREAMS ? Math.max(...STREAMS) : 1;
// Streams compare each one's tokens with its prompt's alone: no prompt-state cache on either side, whose restored
// prefix is not evaluated in the same passes as a fresh one (a prompt's tiled products against a last row's
// mat-vec), so every run evaluates its whole prompt.
const NO_CACHE = STREAMS ? { sdk: { cacheRam: 0 }, server: ["--cache-ram", "0"] } : { sdk: {}, server: [] };
const path = args[0];
if (!path) throw new Error("usage: node bench/serve.mjs <model.gguf> [--placement cpu|whole|cpu-experts] [options]");
const CONTEXT = Math.max(...DEPTHS) + TOKENS + 64;

async function sides() {
  if (placement === "cpu") return { sdk: { gpu: false }, server: ["-ngl", "0"] };
  if (placement === "whole") return { sdk: { gpu: "auto" }, server: ["-ngl", "99"] };
  if (placement === "cpu-experts") {
    const plan = cpuExpertsPlan(await modelFootprint(path, { contextSize: CONTEXT }));
    return { sdk: { gpu: "auto", plan }, server: ["-ngl", "99", "--cpu-moe"] };
  }
  throw new Error(`--placement ${placement}: cpu, whole or cpu-experts`);
}

/** When each chunk of `chunks` came (the first's and the last's) and every token after the first chunk's. */
async function timedTokens(chunks) {
  let first, last;
  const tokens = [];
  let afterFirst = 0;
  for await (const chunk of chunks) {
    last = process.hrtime.bigint();
    if (first === undefined) first = last;
    else afterFirst += chunk.tokens.length;
    tokens.push(...chunk.tokens);
  }
  return { first, last, tokens, afterFirst };
}

/** Total decode tok/s of streams run together: tokens after each one's first chunk, first chunk to last. */
function totalRate(runs) {
  const first = runs.reduce((t, r) => (r.first < t ? r.first : t), runs[0].first);
  const last = runs.reduce((t, r) => (r.last > t ? r.last : t), runs[0].last);
  return runs.reduce((n, r) => n + r.afterFirst, 0) / (Number(last - first) / 1e9);
}

/** Stream `s`'s prompt: `depth` spread tokens of its own. */
const streamPrompt = (s, depth, vocab) => Array.from({ length: depth }, (_, i) => (i * 7919 + s * 104729 + 11) % vocab);

/**
 * Per stream count: rounds alternating the SDK (that many sessions generating at once) and the server (that many
 * streamed /completion requests at once); each side's best total rate, its ratio to one stream's, and whether every
 * stream's tokens equal what its prompt gave alone on that side, and on the SDK's.
 */
async function streamRows() {
  const depth = DEPTHS[0];
  const prompts = Array.from({ length: SLOTS }, (_, s) => streamPrompt(s, depth, vocab));
  const sessions = prompts.map(() => model.createSession());
  const alone = { sdk: [], server: [] };
  const result = [];
  for (const streams of STREAMS) {
    const row = { streams, depth, sdk: [], server: [], sameTokens: { sdk: true, server: true, serverAsSdk: true } };
    for (let round = 0; round < ROUNDS; ++round) {
      const runs = {
        sdk: await Promise.all(
          sessions.slice(0, streams).map((session, s) => {
            session.reset();
            return timedTokens(session.generate(prompts[s], { maxTokens: TOKENS + 1, logitBias: banEnd }));
          }),
        ),
        server: await Promise.all(prompts.slice(0, streams).map((prompt) => timedTokens(completionChunks(prompt, {})))),
      };
      for (const side of ["sdk", "server"]) {
        row[side].push(totalRate(runs[side]));
        runs[side].forEach((run, s) => {
          alone[side][s] ??= run.tokens;
          row.sameTokens[side] &&= run.tokens.join() === alone[side][s].join();
        });
      }
      runs.server.forEach((run, s) => (row.sameTokens.serverAsSdk &&= run.tokens.join() === runs.sdk[s].tokens.join()));
    }
    result.push(row);
  }
  for (const session of sessions) session.dispose();
  const best = (xs) => Math.max(...xs);
  for (const row of result) {
    for (const side of ["sdk", "server"]) row[`${side}VsOneStream`] = best(row[side]) / best(result[0][side]);
    console.log(
      `${row.streams} streams: server ${best(row.server).toFixed(1)} tok/s (${row.serverVsOneStream.toFixed(2)}x one), ` +
        `SDK ${best(row.sdk).toFixed(1)} (${row.sdkVsOneStream.toFixed(2)}x); same tokens as alone: ` +
        `${JSON.stringify(row.sameTokens)}`,
    );
  }
  return result;
}

/** The token chunks of a greedy streamed /completion of `prompt` (end of text ignored, no cache), its timings in `out`. */
const completionChunks = (prompt, out) =>
  serverChunks(PORT, { prompt, n_predict: TOKENS + 1, temperature: 0, ignore_eos: true, cache_prompt: false }, out);

const placed = await sides();
const sdk = { ...placed.sdk, ...(THREADS ? { threads: Number(THREADS) } : {}) };
const serverFlags = [...placed.server, ...NO_CACHE.server, ...(THREADS ? ["-t", THREADS] : [])];
const model = await loadModel(path, { ...sdk, ...NO_CACHE.sdk, contextSize: CONTEXT, parallel: SLOTS });
const vocab = model.info.vocabSize;
const session = model.createSession();
const banEnd = Object.fromEntries(model.info.endTokens.map((token) => [token, -Infinity]));
const log = [];
const server = await startServer(
  path,
  PORT,
  ["-np", String(SLOTS), "-c", String(CONTEXT * SLOTS), ...serverFlags],
  log,
);
const props = await (await fetch(`http://127.0.0.1:${PORT}/props`)).json();
const rows = [];
try {
  if (props.total_slots !== SLOTS || props.default_generation_settings?.n_ctx !== CONTEXT) {
    throw new Error(`the server runs ${props.total_slots} slots of ${props.default_generation_settings?.n_ctx} tokens`);
  }
  if (STREAMS) rows.push(...(await streamRows()));
  for (const depth of STREAMS ? [] : DEPTHS) {
    const prompt = spreadTokens(depth, vocab);
    const row = { depth, sdk: [], server: [], serverEngine: [] };
    for (let round = 0; round < ROUNDS; ++round) {
      session.reset();
      row.sdk.push(await streamRate(session.generate(prompt, { maxTokens: TOKENS + 1, logitBias: banEnd })));
      const out = {};
      row.server.push(await streamRate(completionChunks(prompt, out)));
      row.serverEngine.push(out.timings?.predicted_per_second ?? null);
    }
    const best = (xs) => Math.max(...xs.filter((x) => x !== null));
    row.ratio = best(row.server) / best(row.sdk);
    console.log(
      `depth ${depth}: server ${best(row.server).toFixed(1)} tok/s (its engine ${best(row.serverEngine).toFixed(1)}), ` +
        `SDK ${best(row.sdk).toFixed(1)}: ${row.ratio.toFixed(3)}x`,
    );
    rows.push(row);
  }
} finally {
  server.kill("SIGTERM");
  model.dispose();
}

const result = {
  command: `node bench/serve.mjs ${process.argv.slice(2).join(" ")}`,
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: path,
  placement,
  threads: model.info.threads,
  server: {
    flags: ["-np", String(SLOTS), "-c", String(CONTEXT * SLOTS), ...serverFlags],
    log: log.filter((l) => /listening|loaded/.test(l)),
  },
  tokens: TOKENS,
  rounds: ROUNDS,
  ...(STREAMS ? { streams: STREAMS } : {}),
  rows,
};
const file = join(process.env.OUT ?? ".", "serve-bench.json");
writeFileSync(file, JSON.stringify(result, null, 2));
console.log(`wrote ${file}`);
