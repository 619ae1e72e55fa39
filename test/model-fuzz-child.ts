// The model fuzz suite's worker (model-fuzz.test.ts starts it with child-loader.mjs): for each file index of its
// range it mutates a base model (gguf-mutate.ts), then reads it, loads it and generates a few tokens. It writes
// one line per step to stdout, synchronously, so that the parent knows which file was running if this process
// dies or hangs: `start <index> <what>`, then `done <index> <outcome> <peak RSS bytes>`, where the outcome is
// "ok", an error code, or "bad:<what went wrong>" for anything but success or a BloomeryError with a code.
import { readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { BloomeryError } from "../src/errors.js";
import { readGgufInfo } from "../src/gguf.js";
import { loadModel } from "../src/model.js";
import { ggmlTypes } from "../src/system.js";
import { fileRandom, mutateModel, parseGguf, type BlockSize } from "./gguf-mutate.js";

interface ChildTask {
  bases: string[];
  seed: number;
  from: number;
  to: number;
  dir: string;
}

/** Codes that mean a bug, not a refusal: an unexpected exception, or an allocation sized by the file that failed. */
const NOT_A_REFUSAL = new Set(["INTERNAL", "OUT_OF_MEMORY"]);

const task = JSON.parse(process.argv[2]!) as ChildTask;
const bases = task.bases.map((path) => parseGguf(readFileSync(path)));
const blocks = new Map<number, BlockSize>(
  ggmlTypes().map((t) => [t.id, { elements: t.blockElements, bytes: t.blockBytes }]),
);
const path = join(task.dir, `mutated-${process.pid}.gguf`);
const say = (line: string) => writeSync(1, `${line.replace(/\n/g, " ")}\n`);

function outcomeOf(error: unknown): string {
  if (error instanceof BloomeryError && !NOT_A_REFUSAL.has(error.code)) return error.code;
  return `bad:${error instanceof BloomeryError ? error.code : "uncoded"} ${String(error)}`;
}

async function run(): Promise<string> {
  try {
    await readGgufInfo(path);
  } catch (error) {
    return outcomeOf(error);
  }
  try {
    // The file's chat template is not parsed (its own fuzz suite covers templates).
    const model = await loadModel(path, { threads: 1, contextSize: 64, cacheRam: 0, chatTemplate: "{{ x }}" });
    try {
      const session = model.createSession();
      const result = await session.generate("The river ran", { maxTokens: 3 }).result;
      model.detokenize(result.tokens);
      await session.generate(result.tokens.length > 0 ? result.tokens : [0], { maxTokens: 1 }).result;
    } finally {
      model.dispose();
    }
    return "ok";
  } catch (error) {
    return outcomeOf(error);
  }
}

for (let index = task.from; index < task.to; index++) {
  const { bytes, what } = mutateModel(bases, blocks, fileRandom(task.seed, index));
  writeFileSync(path, bytes);
  say(`start ${index} ${what}`);
  const outcome = await run();
  say(`done ${index} ${process.resourceUsage().maxRSS * 1024} ${outcome}`);
}
rmSync(path, { force: true });
