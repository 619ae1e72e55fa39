// Each decode pass's time after a long prompt, as bench/families.mjs's decode at depth runs it (the
// model whole on the GPU, the context it gives, greedy, end of text banned, a fresh session a round), so
// that a figure that moves shows which steps moved: the median step, the slow tail (p90, max) and the
// sum. A step's time is the engine's (model.stats() decodeSeconds before and after it). Prints one JSON
// line of figures and one of the step times per round; passes that ran ahead of the stream (several
// between two chunks) are counted as `merged` and left out.
//   node bench/decode-steps.mjs /root/g5.gguf [--depth 16384] [--steps 128] [--rounds 2]
import { loadModel } from "../dist/index.js";
import { spreadTokens, takeOption } from "./measure.mjs";

const args = process.argv.slice(2);
const depth = Number(takeOption(args, "--depth", "16384"));
const stepCount = Number(takeOption(args, "--steps", "128"));
const rounds = Number(takeOption(args, "--rounds", "2"));
const [path] = args;
if (!path || !(depth > 0) || !(stepCount > 0) || !(rounds > 0))
  throw new Error("usage: node bench/decode-steps.mjs <model.gguf> [--depth D] [--steps N] [--rounds R]");

const model = await loadModel(path, { contextSize: depth + Math.max(256, stepCount), gpu: "auto" });
const ban = { [model.info.eosToken]: -Infinity };
for (let round = 0; round < rounds; ++round) {
  const session = model.createSession();
  const times = [];
  let merged = 0; // passes that ran ahead of the stream, timed together: left out of the figures
  let last = model.stats();
  const stream = session.generate(spreadTokens(depth, model.info.vocabSize), { maxTokens: stepCount, logitBias: ban });
  const chunks = stream[Symbol.asyncIterator]();
  while (!(await chunks.next()).done) {
    const now = model.stats();
    // The first chunk follows the prompt's passes, not a decode pass: it adds no decode pass.
    const passes = now.decodePasses - last.decodePasses;
    if (passes === 1) times.push(1000 * (now.decodeSeconds - last.decodeSeconds));
    else merged += passes;
    last = now;
  }
  session.dispose();
  if (times.length === 0) {
    console.log(JSON.stringify({ round, depth, steps: 0, merged }));
    continue;
  }
  const sorted = [...times].sort((a, b) => a - b);
  const sum = times.reduce((a, b) => a + b, 0);
  const at = (q) => +sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))].toFixed(3);
  console.log(
    JSON.stringify({
      round,
      depth,
      steps: times.length,
      merged,
      sumMs: +sum.toFixed(1),
      meanMs: +(sum / times.length).toFixed(3),
      median: at(0.5),
      p90: at(0.9),
      max: +sorted.at(-1).toFixed(3),
      tokensPerSecond: +((1000 * times.length) / sum).toFixed(1),
    }),
  );
  console.log(JSON.stringify(times.map((ms) => +ms.toFixed(3))));
}
model.dispose();
