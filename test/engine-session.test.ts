import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError, loadModel, writeGguf } from "../src/index.js";
import { planSyntheticModel, writeSyntheticModel } from "../tools/synth/synth.js";

// The Model / Session surface of the CPU engine, and the inputs it refuses by name.
const dir = mkdtempSync(join(tmpdir(), "bloomery-engine-"));
const modelPath = join(dir, "tiny-qwen3moe.gguf");

beforeAll(async () => {
  await writeSyntheticModel(modelPath, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function expectCode(promise: Promise<unknown>, code: string, mentions: string): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(BloomeryError);
  expect((error as BloomeryError).code).toBe(code);
  expect((error as BloomeryError).message).toContain(mentions);
}

/** A tiny-qwen3 file with zero weights, after `edit` changes its metadata or tensor list. */
async function writeEdited(
  name: string,
  edit: (metadata: Record<string, unknown>, tensors: { name: string; type: string; shape: number[] }[]) => void,
): Promise<string> {
  const plan = planSyntheticModel({ preset: "tiny-qwen3", weightType: "F32" });
  const metadata: Record<string, unknown> = { ...plan.metadata };
  const tensors = plan.tensors.map((t) => ({ name: t.name, type: t.type, shape: [...t.shape] }));
  edit(metadata, tensors);
  const path = join(dir, name);
  await writeGguf(path, {
    metadata: metadata as typeof plan.metadata,
    metadataTypes: plan.metadataTypes,
    tensors: tensors.map((t) => ({ ...t, fill: (chunk: Uint8Array) => chunk.fill(0) })),
  });
  return path;
}

describe("Model and Session", () => {
  it("reports the model and evaluates tokens into logits", async () => {
    const model = await loadModel(modelPath, { gpu: false, threads: 2, contextSize: 64 });
    try {
      expect(model.info).toMatchObject({ architecture: "qwen3moe", layers: 3, experts: 8, expertsUsed: 2 });
      expect(model.info.contextSize).toBe(64);
      const session = model.createSession();
      const logits = await session.evaluate([model.info.bosToken, 10, 20]);
      expect(logits).toBeInstanceOf(Float32Array);
      expect(logits.length).toBe(model.info.vocabSize);
      expect(logits.every(Number.isFinite)).toBe(true);
      expect(session.position).toBe(3);

      // The same tokens after reset() give the same logits; "all" gives one row per token.
      await session.reset();
      const all = await session.evaluate([model.info.bosToken, 10, 20], { logits: "all" });
      expect(all.length).toBe(3 * model.info.vocabSize);
      expect(all.subarray(2 * model.info.vocabSize)).toEqual(logits);
    } finally {
      model.dispose();
    }
  });

  it("generates greedily, as chunks and as a result", async () => {
    const model = await loadModel(modelPath, { threads: 2, contextSize: 64 });
    try {
      const prompt = [model.info.bosToken, 5, 6];
      const reference = model.createSession();
      const expected: number[] = [];
      let logits = await reference.evaluate(prompt);
      for (let i = 0; i < 5; i++) {
        const next = logits.indexOf(Math.max(...logits));
        if (next === model.info.eosToken) break;
        expected.push(next);
        logits = await reference.evaluate([next]);
      }

      const run = model.createSession().generate(prompt, { maxTokens: 5 });
      const chunks: number[] = [];
      for await (const chunk of run) chunks.push(...chunk.tokens);
      const result = await run.result;
      expect(result.tokens).toEqual(chunks);
      expect(chunks).toEqual(expected);
      expect(result.stopReason).toBe(expected.length === 5 ? "maxTokens" : "eos");

      const awaitedOnly = await model.createSession().generate(prompt, { maxTokens: 5 }).result;
      expect(awaitedOnly.tokens).toEqual(expected);
    } finally {
      model.dispose();
    }
  });

  it("tokenizes, detokenizes, and generates from text with streamed text chunks", async () => {
    const model = await loadModel(modelPath, { threads: 2, contextSize: 64 });
    try {
      const text = "the cat sat on the mat, 123 times.";
      const tokens = model.tokenize(text);
      expect(tokens.length).toBeGreaterThan(0);
      expect(tokens.length).toBeLessThan(text.length); // merges apply
      expect(model.detokenize(tokens)).toBe(text);
      // Special-token text is a token only when asked for.
      const special = "<|im_start|>";
      expect(model.tokenize(special, { special: true }).length).toBe(1);
      expect(model.tokenize(special).length).toBeGreaterThan(1);

      const run = model.createSession().generate(text, { maxTokens: 6 });
      let streamed = "";
      const streamedTokens: number[] = [];
      for await (const chunk of run) {
        streamed += chunk.text;
        streamedTokens.push(...chunk.tokens);
      }
      const result = await run.result;
      expect(result.text).toBe(streamed);
      expect(result.tokens).toEqual(streamedTokens);
      expect(result.text).toBe(model.detokenize(result.tokens));
      // The text prompt is the same as its tokens (with BOS when the model asks for one).
      const fromTokens = await model
        .createSession()
        .generate(model.tokenize(text, { special: true, addSpecial: true }), { maxTokens: 6 }).result;
      expect(fromTokens.tokens).toEqual(result.tokens);
    } finally {
      model.dispose();
    }
    expect(() => model.tokenize("x")).toThrowError(expect.objectContaining({ code: "DISPOSED" }));
  });

  it("renders the file's chat template, or the one given to loadModel", async () => {
    const messages = [{ role: "user", content: "hello" }];
    const fromFile = await loadModel(modelPath, { threads: 1, contextSize: 32 });
    const given = await loadModel(modelPath, {
      threads: 1,
      contextSize: 32,
      chatTemplate: "U:{{ messages[0].content }}",
    });
    try {
      expect(fromFile.applyChatTemplate(messages)).toContain("<|im_start|>user\nhello");
      expect(given.applyChatTemplate(messages)).toBe("U:hello");
      expect(given.info.chatTemplate).toBe("U:{{ messages[0].content }}");
    } finally {
      fromFile.dispose();
      given.dispose();
    }
  });

  it("refuses disposed objects with DISPOSED, and dispose cascades from the model", async () => {
    const model = await loadModel(modelPath, { threads: 2, contextSize: 32 });
    const session = model.createSession();
    const queued = session.evaluate([1, 2, 3]); // not started before dispose: refused
    model.dispose();
    await expectCode(queued, "DISPOSED", "disposed");
    expect(session.disposed).toBe(true);
    expect(() => session.evaluate([1])).toThrowError(expect.objectContaining({ code: "DISPOSED" }));
    expect(() => model.createSession()).toThrowError(expect.objectContaining({ code: "DISPOSED" }));
    model.dispose();
  });
});

describe("bad input", () => {
  it("refuses a context longer than the model allows", async () => {
    await expectCode(loadModel(modelPath, { contextSize: 4097 }), "CONTEXT_TOO_LONG", "qwen3moe.context_length");
    const model = await loadModel(modelPath, { threads: 2, contextSize: 8 });
    try {
      const session = model.createSession();
      await expectCode(session.evaluate([1, 2, 3, 4, 5, 6, 7, 8, 9]), "CONTEXT_TOO_LONG", "context of 8");
      await session.evaluate([1, 2, 3, 4, 5, 6, 7, 8]);
      await expectCode(session.evaluate([1]), "CONTEXT_TOO_LONG", "9 tokens");
      expect(() => session.evaluate([model.info.vocabSize])).toThrow(/not a token id/);
    } finally {
      model.dispose();
    }
  });

  it("refuses an architecture it does not serve", async () => {
    const path = await writeEdited("gpt2.gguf", (metadata) => (metadata["general.architecture"] = "gpt2"));
    await expectCode(loadModel(path), "UNSUPPORTED_ARCH", "gpt2");
  });

  it("refuses a missing tensor by name", async () => {
    const path = await writeEdited("missing.gguf", (_, tensors) => {
      tensors.splice(
        tensors.findIndex((t) => t.name === "blk.1.attn_k.weight"),
        1,
      );
    });
    await expectCode(loadModel(path), "MODEL_MISSING_TENSOR", "blk.1.attn_k.weight");
  });

  it("refuses a tensor of the wrong shape by name", async () => {
    const path = await writeEdited("shape.gguf", (_, tensors) => {
      tensors.find((t) => t.name === "blk.0.attn_q.weight")!.shape = [256, 256];
    });
    await expectCode(loadModel(path), "MODEL_TENSOR_SHAPE", "blk.0.attn_q.weight");
  });

  it("refuses a weight type without CPU kernels by tensor name", async () => {
    const path = await writeEdited("quant.gguf", (_, tensors) => {
      tensors.find((t) => t.name === "blk.0.ffn_up.weight")!.type = "IQ2_XXS";
    });
    await expectCode(loadModel(path), "UNSUPPORTED_QUANT", "blk.0.ffn_up.weight");
  });

  it("refuses missing hyper-parameters by key", async () => {
    const path = await writeEdited("metadata.gguf", (metadata) => delete metadata["qwen3.block_count"]);
    await expectCode(loadModel(path), "MODEL_BAD_METADATA", "qwen3.block_count");
  });
});
