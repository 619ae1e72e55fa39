// Records a model's routing as bloomery computes it (model.traceRouting()) over held-out text and
// the model's own generations, one token a step, into a trace file (bench/routing-trace.mjs's
// format) with its statistics: prompts of held-out documents joined up to PROMPT tokens, each
// evaluated token by token, then GENERATE tokens sampled after it (temperature 0.8, seeded, no
// drafts, the tokens that end a generation banned), in a fresh session per segment pair.
//   node bench/record-routing.mjs <model.gguf> <out.json.gz> [--heldout tools/train/data/heldout.jsonl.gz]
//        [--prompts 12] [--prompt-tokens 400] [--generate 256] [--gpu]
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { gunzipSync } from "node:zlib";
import { loadModel } from "../dist/index.js";
import { takeOption } from "./measure.mjs";
import { TRACE_FORMAT, choicesOf, routingStatistics, writeTrace } from "./routing-trace.mjs";

const args = process.argv.slice(2);
const option = (name, fallback) => takeOption(args, name, fallback);
const flag = (name) => {
  const at = args.indexOf(name);
  return at >= 0 && args.splice(at, 1).length > 0;
};
const heldout = option("--heldout", "tools/train/data/heldout.jsonl.gz");
const PROMPTS = Number(option("--prompts", "12"));
const PROMPT_TOKENS = Number(option("--prompt-tokens", "400"));
const GENERATE = Number(option("--generate", "256"));
const gpu = flag("--gpu");
const [path, out] = args;
if (!path || !out) throw new Error("usage: node bench/record-routing.mjs <model.gguf> <out.json.gz> [options]");

const documents = gunzipSync(readFileSync(heldout))
  .toString("utf8")
  .split("\n")
  .filter((line) => line.trim())
  .map((line) => JSON.parse(line).text);

const model = await loadModel(path, { gpu: gpu ? "auto" : false, contextSize: PROMPT_TOKENS + GENERATE + 64 });
const { layers, experts, expertsUsed, architecture, name } = model.info;
if (!(experts > 0)) throw new Error(`${path} has no routed experts`);
// Every generation runs GENERATE tokens: the tokens that end one are banned (llama-server's ignore_eos).
const logitBias = Object.fromEntries(model.info.endTokens.map((token) => [token, -Infinity]));
const segments = [];
const trace = model.traceRouting();
let next = 0;
for (let p = 0; p < PROMPTS; ++p) {
  // Held-out documents in file order, joined until the prompt is long enough.
  let tokens = [];
  while (tokens.length < PROMPT_TOKENS && next < documents.length) {
    tokens = [...tokens, ...model.tokenize(`${tokens.length > 0 ? "\n\n" : ""}${documents[next++]}`)];
  }
  tokens = tokens.slice(0, PROMPT_TOKENS);
  const session = model.createSession();
  for (const t of tokens.slice(0, -1)) await session.evaluate([t]);
  // generate() evaluates the prompt's last token (the rest is the session's context), then decodes.
  const run = session.generate(tokens, {
    maxTokens: GENERATE,
    temperature: 0.8,
    seed: 1000 + p,
    draft: false,
    logitBias,
  });
  const result = await run.result;
  session.dispose();
  // The last token drawn is never evaluated: the generation's steps are one fewer than its tokens.
  const generated = Math.max(0, result.tokens.length - 1);
  segments.push({ kind: "prompt", steps: tokens.length }, { kind: "generation", steps: generated });
  console.log(`segment ${p}: ${tokens.length} prompt tokens, ${result.tokens.length} generated`);
}
const recorded = trace.stop();
const steps = segments.reduce((a, s) => a + s.steps, 0);
if (recorded.steps.length !== steps) throw new Error(`${recorded.steps.length} traced steps for ${steps} tokens`);
const { moeLayers, choices } = choicesOf(recorded, expertsUsed);
model.dispose();

const file = {
  format: TRACE_FORMAT,
  model: { name, architecture, file: basename(path), layers, experts, expertsUsed, moeLayers },
  recorded: {
    date: new Date().toISOString(),
    command: `node bench/record-routing.mjs ${process.argv.slice(2).join(" ")}`,
    placement: gpu ? "gpu" : "cpu",
    text: `${basename(heldout)}: ${next} documents in file order, prompts of ${PROMPT_TOKENS} tokens`,
    sampling: { temperature: 0.8, seeds: "1000 + prompt", maxTokens: GENERATE, endTokensBanned: true },
  },
  segments,
  steps,
  choices,
};
file.statistics = routingStatistics(file);
writeTrace(out, file);
const { perLayer, ...summary } = file.statistics;
console.log(JSON.stringify({ out, layers: perLayer.length, ...summary }, null, 1));
