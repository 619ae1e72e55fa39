// The disk tier's token identity on a large file, on the CPU: the same prompt's logits, then
// single-token steps' logits (of given tokens, which route alike whatever the logits) and each
// row's greedy token, with every routed expert in host RAM (the file mapped, a hostRam
// as large as the file) and with a hostRam that pages them from the file through a RAM arena
// (O_DIRECT reads into its slots), compared bit for bit. The file may be larger than the host's
// memory: the first load then leaves the paging of the mapping to the OS. Writes JSON to $OUT (or
// the working directory).
//   node dist/synth-cli.js deepseek-v4-flash-slice /tmp/v4.gguf
//   node bench/disk-tokens.mjs /tmp/v4.gguf --host-ram 4GiB --prompt 32 --steps 8
import { statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { getSystemInfo, loadModel, readGgufInfo } from "../dist/index.js";
import { argmax, secondsSince, spreadTokens, takeOption } from "./measure.mjs";

const args = process.argv.slice(2);
const hostRam = takeOption(args, "--host-ram", "4GiB");
const PROMPT = Number(takeOption(args, "--prompt", "32"));
const STEPS = Number(takeOption(args, "--steps", "8"));
const [path] = args;
if (!path || !(PROMPT > 0) || !(STEPS > 0)) {
  throw new Error("usage: node bench/disk-tokens.mjs <model.gguf> [--host-ram 4GiB] [--prompt 32] [--steps 8]");
}
const CONTEXT = 256;

/** The prompt's logits (its last row) and each step's, each row's greedy token, and the load's plan and disk figures. */
async function run(options) {
  const start = process.hrtime.bigint();
  const model = await loadModel(path, { gpu: false, contextSize: CONTEXT, cacheRam: 0, ...options });
  try {
    const vocab = model.info.vocabSize;
    const session = model.createSession();
    const logits = [await session.evaluate(spreadTokens(PROMPT, vocab))];
    for (let i = 0; i < STEPS; ++i) logits.push(await session.evaluate([(i * 104729 + 17) % vocab]));
    const tokens = logits.map(argmax);
    const plan = model.plan;
    return {
      seconds: secondsSince(start),
      tokens,
      logits,
      hostExperts: plan.layers.reduce((n, l) => n + l.host.length, 0),
      diskExperts: plan.layers.reduce((n, l) => n + (l.disk ?? []).length, 0),
      arena: plan.arena,
      disk: model.stats().disk,
    };
  } finally {
    model.dispose();
  }
}

/** The positions at which two logit rows differ in their bits. */
function differing(a, b) {
  const x = new Uint32Array(a.buffer, a.byteOffset, a.length);
  const y = new Uint32Array(b.buffer, b.byteOffset, b.length);
  let count = 0;
  for (let i = 0; i < x.length; ++i) if (x[i] !== y[i]) ++count;
  return count;
}

const summary = (await readGgufInfo(path)).summary;
const inRam = await run({ hostRam: statSync(path).size * 2 });
console.log(`in RAM: ${inRam.hostExperts} host experts, ${inRam.seconds.toFixed(1)} s, tokens ${inRam.tokens}`);
const paged = await run({ hostRam });
console.log(
  `paged (hostRam ${hostRam}): ${paged.diskExperts} experts on disk, arena of ${paged.arena?.slots} slots, ` +
    `${paged.seconds.toFixed(1)} s, tokens ${paged.tokens}`,
);
const rows = inRam.logits.map((row, i) => differing(row, paged.logits[i]));
const identical = rows.every((n) => n === 0) && inRam.tokens.join() === paged.tokens.join();
/** A run's figures without its logits (the rows compared above). */
const figures = (run) => Object.fromEntries(Object.entries(run).filter(([key]) => key !== "logits"));
const result = {
  command: `node bench/disk-tokens.mjs ${path} --host-ram ${hostRam} --prompt ${PROMPT} --steps ${STEPS}`,
  date: new Date().toISOString(),
  machine: getSystemInfo(),
  model: { path, architecture: summary.architecture, layers: summary.layers, bytes: summary.tensorBytes },
  inRam: figures(inRam),
  paged: figures(paged),
  differingLogitsPerRow: rows,
  identical,
};
console.log(JSON.stringify({ differingLogitsPerRow: rows, identical, disk: paged.disk }, null, 2));
writeFileSync(
  join(process.env.OUT ?? ".", `disk-tokens-${summary.architecture}.json`),
  JSON.stringify(result, null, 2),
);
if (!identical) process.exitCode = 1;
