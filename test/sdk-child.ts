// Scenarios that crashed or hung a process before they were fixed, run in a child process (started by runScenario
// in sdk-child-run.ts, with child-loader.mjs) so that a crash or a hang fails the test instead of the test runner.
// Prints one JSON line: { outcome: "ok" | <error code> | "bad: ...", ...details }.
import { copyFileSync, truncateSync } from "node:fs";
import { BloomeryError } from "../src/errors.js";
import { readGgufInfo } from "../src/gguf.js";
import { loadModel, type LoadModelOptions } from "../src/model.js";

const [scenario, ...args] = process.argv.slice(2);

function outcomeOf(error: unknown): string {
  return error instanceof BloomeryError ? error.code : `bad: ${String(error)}`;
}

const scenarios: Record<string, () => Promise<Record<string, unknown>>> = {
  /** readGgufInfo(path). */
  async info() {
    await readGgufInfo(args[0]!);
    return { outcome: "ok" };
  },
  /** loadModel(path, options JSON) and a generation of 4 tokens. */
  async load() {
    const options = JSON.parse(args[1] ?? "{}") as LoadModelOptions;
    const model = await loadModel(args[0]!, { threads: 1, contextSize: 64, cacheRam: 0, ...options });
    try {
      const result = await model.createSession().generate("The river", { maxTokens: 4 }).result;
      return { outcome: "ok", text: result.text };
    } finally {
      model.dispose();
    }
  },
  /**
   * Copies the model to args[1], loads the copy (mmap unless args[2] is "copy"), generates, truncates the file to
   * half its size and generates again.
   */
  async truncate() {
    copyFileSync(args[0]!, args[1]!);
    const model = await loadModel(args[1]!, { threads: 1, contextSize: 64, cacheRam: 0, mmap: args[2] !== "copy" });
    try {
      const session = model.createSession();
      const before = (await session.generate("The river", { maxTokens: 4 }).result).text;
      truncateSync(args[1]!, Math.floor(model.info.bytes / 2));
      const after = (await session.generate("The river", { maxTokens: 4 }).result).text;
      return { outcome: "ok", before, after };
    } finally {
      model.dispose();
    }
  },
  /** Loads the model args[0], generates, and saves the session's state to args[1]. */
  async save() {
    const model = await loadModel(args[0]!, { threads: 1, contextSize: 64, cacheRam: 0 });
    try {
      const session = model.createSession();
      await session.generate("The river", { maxTokens: 2 }).result;
      await session.save(args[1]!);
      return { outcome: "ok" };
    } finally {
      model.dispose();
    }
  },
  /** Loads the model args[0] and restores the state file args[1] into a session. */
  async restore() {
    const model = await loadModel(args[0]!, { threads: 1, contextSize: 64, cacheRam: 0 });
    try {
      await model.createSession().restore(args[1]!);
      return { outcome: "ok" };
    } finally {
      model.dispose();
    }
  },
};

const result = await scenarios[scenario!]!().catch((error: unknown) => ({ outcome: outcomeOf(error) }));
process.stdout.write(`${JSON.stringify(result)}\n`);
