import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { BloomeryError } from "../src/errors.js";
import { writeGguf } from "../src/gguf.js";
import type { GgufValue } from "../src/gguf/types.js";
import { openTokenizer } from "../src/tokenizer.js";
import { byteSymbols } from "../tools/synth/vocab.js";

// Bad vocabularies and bad calls are refused by name, never a crash.
const dir = mkdtempSync(join(tmpdir(), "bloomery-tokenizer-errors-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function vocabFile(name: string, metadata: Record<string, GgufValue>): Promise<string> {
  const path = join(dir, `${name}.gguf`);
  await writeGguf(path, { metadata: { "general.architecture": "llama", ...metadata }, tensors: [] });
  return path;
}

const BYTES = [...byteSymbols()];

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(BloomeryError);
    return (error as BloomeryError).code;
  }
  return undefined;
}

describe("openTokenizer refuses", () => {
  it("a file without a tokenizer", async () => {
    const path = await vocabFile("none", {});
    expect(codeOf(() => openTokenizer(path))).toBe("TOKENIZER_BAD_VOCAB");
  });

  it("a tokenizer model we do not implement", async () => {
    const path = await vocabFile("t5", { "tokenizer.ggml.model": "t5", "tokenizer.ggml.tokens": ["a"] });
    expect(codeOf(() => openTokenizer(path))).toBe("TOKENIZER_UNSUPPORTED");
  });

  it("a pre-tokenizer we do not implement", async () => {
    const path = await vocabFile("pre", {
      "tokenizer.ggml.model": "gpt2",
      "tokenizer.ggml.pre": "no-such-pre",
      "tokenizer.ggml.tokens": BYTES,
      "tokenizer.ggml.merges": [],
    });
    expect(codeOf(() => openTokenizer(path))).toBe("TOKENIZER_UNSUPPORTED");
  });

  it("a NaN score, which has no place in SentencePiece's merge order", async () => {
    const path = await vocabFile("nan-score", {
      "tokenizer.ggml.model": "llama",
      "tokenizer.ggml.tokens": ["<unk>", "a", "b", "ab"],
      "tokenizer.ggml.scores": new Float32Array([0, -1, -2, NaN]),
    });
    const error = (() => {
      try {
        openTokenizer(path);
      } catch (e) {
        return e as BloomeryError;
      }
    })();
    expect(error?.code).toBe("TOKENIZER_BAD_VOCAB");
    expect(error?.message).toContain("tokenizer.ggml.scores[3]");
  });

  it("a missing file", () => {
    expect(codeOf(() => openTokenizer(join(dir, "missing.gguf")))).toBe("FILE_NOT_FOUND");
  });
});

describe("a tokenizer refuses", () => {
  it("ids outside the vocabulary", async () => {
    const path = await vocabFile("ok", {
      "tokenizer.ggml.model": "gpt2",
      "tokenizer.ggml.pre": "qwen2",
      "tokenizer.ggml.tokens": BYTES,
      "tokenizer.ggml.merges": [],
    });
    const t = openTokenizer(path);
    expect(t.detokenize(t.tokenize("ok"))).toBe("ok");
    expect(codeOf(() => t.detokenize([256]))).toBe("INVALID_ARGUMENT");
    expect(codeOf(() => t.detokenize([-1]))).toBe("INVALID_ARGUMENT");
    expect(codeOf(() => t.createDecoder().push(1000))).toBe("INVALID_ARGUMENT");
  });
});
