// Model's chat-related lifecycle: the built-in template standing in for a missing one (with a
// warning event), loadModel's onProgress and signal, and Symbol.asyncDispose.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError, loadModel, writeGguf, type LoadProgress, type ModelWarning } from "../src/index.js";
import { planSyntheticModel } from "../tools/synth/synth.js";
import { defaultModelPath } from "../tools/default-model.js";

const dir = mkdtempSync(join(tmpdir(), "bloomery-chat-model-"));
const noTemplatePath = join(dir, "no-template.gguf");

beforeAll(async () => {
  const plan = planSyntheticModel({ preset: "tiny-qwen3", weightType: "F32" });
  const metadata: Record<string, unknown> = { ...plan.metadata };
  delete metadata["tokenizer.chat_template"];
  await writeGguf(noTemplatePath, {
    metadata: metadata as typeof plan.metadata,
    metadataTypes: plan.metadataTypes,
    tensors: plan.tensors.map((t) => ({
      name: t.name,
      type: t.type,
      shape: [...t.shape],
      fill: (chunk: Uint8Array) => chunk.fill(0),
    })),
  });
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function codeOf(promise: Promise<unknown>): Promise<string> {
  return promise.then(
    () => "resolved",
    (error: unknown) => (error instanceof BloomeryError ? error.code : String(error)),
  );
}

describe("chat template fallback", () => {
  it("uses the built-in ChatML template and warns once, on first use", async () => {
    const model = await loadModel(noTemplatePath, { threads: 1 });
    try {
      expect(model.info.chatTemplate).toBeUndefined();
      expect(model.info.builtinChatTemplate).toBe("chatml");
      const warnings: ModelWarning[] = [];
      model.on("warning", (warning) => warnings.push(warning));
      const messages = [
        { role: "system", content: "Be brief." },
        { role: "user", content: "Hi" },
      ];
      expect(model.applyChatTemplate(messages)).toBe(
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
      );
      model.applyChatTemplate(messages);
      expect(warnings).toEqual([{ code: "CHAT_TEMPLATE_FALLBACK", message: expect.stringContaining('"chatml"') }]);
    } finally {
      model.dispose();
    }
  });

  it("renders tools, tool calls and tool results the Hermes way", async () => {
    const model = await loadModel(noTemplatePath, { threads: 1 });
    try {
      const tools = [{ type: "function" as const, function: { name: "add", parameters: { type: "object" } } }];
      const prompt = model.applyChatTemplate(
        [
          { role: "user", content: "1+2?" },
          { role: "assistant", content: "", toolCalls: [{ id: "call_1", name: "add", arguments: { a: 1, b: 2 } }] },
          { role: "tool", content: "3", toolCallId: "call_1" },
        ],
        { tools },
      );
      expect(prompt).toContain(
        '<tools>\n{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}\n</tools>',
      );
      expect(prompt).toContain(
        '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call><|im_end|>',
      );
      expect(prompt).toContain(
        "<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
      );
    } finally {
      model.dispose();
    }
  });
});

describe("loadModel lifecycle", () => {
  it("reports progress from metadata to ready", async () => {
    const stages: LoadProgress[] = [];
    const model = await loadModel(defaultModelPath(), { threads: 1, onProgress: (p) => stages.push(p) });
    model.dispose();
    expect([...new Set(stages.map((p) => p.stage))]).toEqual(["metadata", "weights", "ready"]);
    expect(stages.map((p) => p.fraction)).toEqual([...stages.map((p) => p.fraction)].sort((a, b) => a - b));
    expect(stages.at(-1)!.fraction).toBe(1);
  });

  it("refuses with ABORTED when the signal aborts before or while loading", async () => {
    expect(await codeOf(loadModel(defaultModelPath(), { signal: AbortSignal.abort() }))).toBe("ABORTED");
    const controller = new AbortController();
    const loading = loadModel(defaultModelPath(), {
      threads: 1,
      signal: controller.signal,
      onProgress: (p) => {
        if (p.stage === "weights") controller.abort();
      },
    });
    expect(await codeOf(loading)).toBe("ABORTED");
    expect(await codeOf(loadModel(defaultModelPath(), { signal: "no" as unknown as AbortSignal }))).toBe(
      "INVALID_ARGUMENT",
    );
  });

  it("disposes the model at the end of an `await using` scope", async () => {
    const model = await loadModel(defaultModelPath(), { threads: 1 });
    await model[Symbol.asyncDispose]();
    expect(model.disposed).toBe(true);
    expect(() => model.createSession()).toThrow(BloomeryError);
  });
});
