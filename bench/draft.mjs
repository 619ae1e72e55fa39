// Speculative decoding on the default model: decode with drafts (n-gram, a draft model, the
// model's own next-token-prediction layer) against decode without, in the same process, with the
// same tokens; on the CPU, or with --gpu the whole model on the GPU (the draft model stays on the
// CPU, as loadModel runs one).
//
//   node bench/draft.mjs [--threads N --tokens 256 --rounds 5] [--gpu | --peer]
//
// With --peer (on the CPU), the n-gram and draft-model cases also run on llama.cpp through
// node-llama-cpp (bench/draft-peer.mjs, a process of its own each round): its token predictors
// for the same sources (input lookup over the prompt; the same draft model), with and without, from
// the same ids. Its greedy tokens may part with drafts (see peerDecode); ours may not.
//
// Plain ESM over the built package (dist/ and the addon). Each case generates greedily from its
// prompt with drafts off and on, alternating for `rounds` rounds; each keeps its best decode rate
// (generated tokens after the first over the time from the first to the last), so a load spike
// from another process costs a round, not the ratio. Every run's tokens must equal the run's
// without drafts. Prints the rates, the ratios (drafts / none) and the drafts kept, and writes
// them to bench/results/<date>-draft.json (-draft-gpu.json with --gpu, -draft-peer.json with
// --peer), or into $OUT where that is set (as on the GPU machine).
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { getSystemInfo, loadModel } from "../dist/index.js";
import { writeDraftModel } from "./draft-model.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const MODEL = join(root, "models/bloomery-tiny-moe-Q8_0.gguf");
const { values } = parseArgs({
  options: {
    threads: { type: "string", default: "2" },
    tokens: { type: "string", default: "256" },
    rounds: { type: "string", default: "5" },
    gpu: { type: "boolean", default: false },
    peer: { type: "boolean", default: false },
  },
});
if (values.gpu && values.peer) throw new Error("--peer runs on the CPU: node-llama-cpp's CPU build is the peer here");
const threads = Number(values.threads);
const maxTokens = Number(values.tokens);
const rounds = Number(values.rounds);

const CODE = [
  "function add(a, b) {",
  "  return a + b;",
  "}",
  "function subtract(a, b) {",
  "  return a - b;",
  "}",
  "function multiply(a, b) {",
  "  return a * b;",
  "}",
].join("\n");
const chat = (content) => `<|im_start|>user\n${content}<|im_end|>\n<|im_start|>assistant\n`;
const CASES = [
  {
    name: "ngram, code edit",
    draft: "ngram",
    prompt: `${CODE}\n\nThe same code with each name in capitals:\n\n${CODE.replaceAll("add", "ADD")}\n`,
  },
  { name: "ngram, repetitive", draft: "ngram", prompt: "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16," },
  { name: "model, chat", draft: "model", prompt: chat('What does "whisper" mean?') },
  { name: "model, text", draft: "model", prompt: "A river is" },
  // The model's own trained next-token-prediction layer: the width as the engine chooses it, and fixed.
  { name: "mtp, chat", draft: "mtp", prompt: chat('What does "whisper" mean?') },
  { name: "mtp, text", draft: "mtp", prompt: "A river is" },
  {
    name: "mtp x1, chat",
    draft: { source: "mtp", adaptive: false, max: 1 },
    prompt: chat('What does "whisper" mean?'),
  },
  {
    name: "mtp x2, chat",
    draft: { source: "mtp", adaptive: false, max: 2 },
    prompt: chat('What does "whisper" mean?'),
  },
];

const dir = mkdtempSync(join(tmpdir(), "bloomery-bench-draft-"));
const draftModel = await writeDraftModel(MODEL, join(dir, "draft.gguf"));
const model = await loadModel(MODEL, { threads, gpu: values.gpu ? "auto" : false, draft: false, draftModel });

/** The peer's rates without and with its predictor for `source`, `count` tokens from `ids` (bench/draft-peer.mjs). */
function peerDecode(ids, count, source) {
  const job = JSON.stringify({ model: MODEL, draftModel, threads, ids, count, source });
  const out = execFileSync(process.execPath, [join(root, "bench/draft-peer.mjs"), job], { encoding: "utf8" });
  const { none, drafts } = JSON.parse(out.trim().split("\n").pop());
  // llama.cpp's verify passes (several rows) may round otherwise than its one-token steps, so its greedy
  // tokens may part with drafts: how many agree is kept beside the rates.
  let same = 0;
  while (same < none.tokens.length && drafts.tokens[same] === none.tokens[same]) same++;
  return { none, drafts, sameWithDrafts: same };
}

async function decode(prompt, draft) {
  const session = model.createSession();
  const r = await session.generate(prompt, { maxTokens, draft }).result;
  session.dispose();
  const rate = r.tokens.length > 1 && r.timings.decodeMs > 0 ? ((r.tokens.length - 1) * 1000) / r.timings.decodeMs : 0;
  return { tokens: r.tokens, rate, drafted: r.timings.draftTokens, kept: r.timings.draftAccepted };
}

const results = [];
for (const c of CASES) {
  const ids = Array.from(model.tokenize(c.prompt, { special: true, addSpecial: true }));
  const source = typeof c.draft === "string" ? c.draft : c.draft.source;
  const withPeer = values.peer && (source === "ngram" || source === "model");
  const best = { none: 0, drafts: 0, peerNone: 0, peerDrafts: 0 };
  const counts = { drafted: 0, kept: 0, peerDrafted: 0, peerKept: 0 };
  let reference, peerSame;
  let peerAgree = Infinity;
  for (let round = 0; round < rounds; round++) {
    const none = await decode(ids, false);
    const drafts = await decode(ids, c.draft);
    reference ??= none.tokens;
    for (const run of [none, drafts]) {
      if (run.tokens.join() !== reference.join()) throw new Error(`${c.name}: a run's tokens differ from the first's`);
    }
    best.none = Math.max(best.none, none.rate);
    best.drafts = Math.max(best.drafts, drafts.rate);
    counts.drafted += drafts.drafted;
    counts.kept += drafts.kept;
    if (withPeer) {
      const peer = peerDecode(ids, reference.length, source);
      peerSame = peer.none.tokens.join() === reference.join();
      peerAgree = Math.min(peerAgree, peer.sameWithDrafts);
      best.peerNone = Math.max(best.peerNone, peer.none.rate);
      best.peerDrafts = Math.max(best.peerDrafts, peer.drafts.rate);
      counts.peerDrafted += peer.drafts.drafted;
      counts.peerKept += peer.drafts.kept;
    }
  }
  const result = {
    case: c.name,
    tokens: reference.length,
    noneTokensPerSecond: Math.round(best.none),
    draftTokensPerSecond: Math.round(best.drafts),
    ratio: Number((best.drafts / best.none).toFixed(2)),
    drafted: counts.drafted / rounds,
    kept: counts.kept / rounds,
    ...(withPeer && {
      peer: {
        name: "llama.cpp (node-llama-cpp's CPU build and token predictors)",
        noneTokensPerSecond: Math.round(best.peerNone),
        draftTokensPerSecond: Math.round(best.peerDrafts),
        ratio: Number((best.peerDrafts / best.peerNone).toFixed(2)),
        drafted: counts.peerDrafted / rounds,
        kept: counts.peerKept / rounds,
        sameTokensAsOurs: peerSame,
        tokensEqualWithDrafts: peerAgree,
      },
      oursOverPeerWithDrafts: Number((best.drafts / best.peerDrafts).toFixed(2)),
    }),
  };
  results.push(result);
  console.log(
    `${c.name.padEnd(20)} ${String(result.tokens).padStart(4)} tokens  none ${result.noneTokensPerSecond} tok/s  ` +
      `drafts ${result.draftTokensPerSecond} tok/s  ratio ${result.ratio}  drafted ${result.drafted} kept ${result.kept} per run`,
  );
  if (result.peer) {
    const p = result.peer;
    console.log(
      `${"  llama.cpp".padEnd(25)} none ${p.noneTokensPerSecond} tok/s  drafts ${p.draftTokensPerSecond} tok/s  ` +
        `ratio ${p.ratio}  drafted ${p.drafted} kept ${p.kept} per run, the first ${p.tokensEqualWithDrafts} tokens ` +
        `as without; ours / llama.cpp with drafts ${result.oursOverPeerWithDrafts}`,
    );
  }
}
model.dispose();
rmSync(dir, { recursive: true, force: true });
const stamp = new Date().toISOString().slice(0, 16).replace(":", "");
const outDir = process.env.OUT ?? join(root, "bench/results");
mkdirSync(outDir, { recursive: true });
const machine = values.gpu ? { machine: getSystemInfo() } : {};
writeFileSync(
  join(outDir, `${stamp}-draft${values.gpu ? "-gpu" : values.peer ? "-peer" : ""}.json`),
  `${JSON.stringify({ threads, gpu: values.gpu, maxTokens, rounds, ...machine, results }, null, 2)}\n`,
);
