import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { postJson, startServer } from "./server-helpers.js";
import { parseServeOptions } from "../examples/server/options.js";

// Which free slot a request takes (llama-server's -sps, --slot-prompt-similarity): the one whose
// context shares the longest prefix with its prompt, beyond the fraction -sps of it, else the one idle
// longest. On a model with recurrent layers (tiny-qwen35moe) only the slot whose session ran a prompt
// holds its state near the end (its checkpoint 4 tokens before it): the same prompt again, sent to
// another slot, would be evaluated whole.
const dir = mkdtempSync(join(tmpdir(), "bloomery-slot-choice-"));
const modelPath = join(dir, "tiny-qwen35moe.gguf");
const PROMPT = "A river is a long stream of water that flows to the sea and";

beforeAll(async () => {
  await writeSyntheticModel(modelPath, { preset: "tiny-qwen35moe", weightType: "Q8_0" });
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Completion {
  id_slot: number;
  content: string;
  timings: { prompt_n: number; cache_n: number };
}

async function complete(url: string, prompt: string): Promise<Completion> {
  const response = await postJson(`${url}/completion`, { prompt, n_predict: 6, temperature: 0 });
  expect(response.status).toBe(200);
  return (await response.json()) as Completion;
}

describe("the slot a request takes", () => {
  it("is the one whose context begins with its prompt, which then evaluates only the prompt's last tokens", async () => {
    const server = await startServer({ modelPath, parallel: 2, contextSize: 512 });
    try {
      const first = await complete(server.url, PROMPT);
      const again = await complete(server.url, PROMPT);
      expect(again.id_slot).toBe(first.id_slot);
      expect(again.timings.cache_n).toBe(first.timings.prompt_n - 4);
      expect(again.timings.prompt_n).toBe(4);
      expect(again.content).toBe(first.content);
      // A prompt like no slot's context: the slot idle longest.
      const other = await complete(server.url, "Something else entirely, told in other words");
      expect(other.id_slot).not.toBe(first.id_slot);
    } finally {
      await server.close();
    }
  });

  it("is the one idle longest with -sps 0, or where no slot's context shares enough of the prompt", async () => {
    const server = await startServer({ modelPath, parallel: 2, contextSize: 512, slotPromptSimilarity: 0 });
    try {
      const first = await complete(server.url, PROMPT);
      const again = await complete(server.url, PROMPT);
      expect(again.id_slot).not.toBe(first.id_slot);
      expect(again.timings.cache_n).toBe(0);
      expect(again.content).toBe(first.content);
    } finally {
      await server.close();
    }
  });

  it("is set by -sps, from 0 to 1", () => {
    expect(parseServeOptions(["-m", "x.gguf"]).slotPromptSimilarity).toBe(0.1);
    expect(parseServeOptions(["-m", "x.gguf", "-sps", "0.5"]).slotPromptSimilarity).toBe(0.5);
    expect(() => parseServeOptions(["-m", "x.gguf", "--slot-prompt-similarity", "2"])).toThrow(
      /slot-prompt-similarity/,
    );
  });
});
