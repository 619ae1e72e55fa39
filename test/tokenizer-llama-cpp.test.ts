import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openTokenizer, type Tokenizer } from "../src/tokenizer.js";
import { CORPUS } from "./tokenizer-corpus.js";
import { BPE_TOKENIZERS, bpeVocabMetadata, writeVocabGguf, type BpeTokenizerName } from "./tokenizer-fixtures.js";

// llama.cpp (node-llama-cpp's prebuilt CPU binary) is the oracle: on the same vocabulary-only
// GGUF, our token ids must equal its ids for every corpus text, with and without special parsing.
const dir = mkdtempSync(join(tmpdir(), "bloomery-tokenizer-"));
const names = Object.keys(BPE_TOKENIZERS) as BpeTokenizerName[];
let llama: Llama;
const fixtures = new Map<BpeTokenizerName, { oracle: LlamaModel; ours: Tokenizer }>();

/** What JS strings become at the native boundary: lone surrogates turn into U+FFFD. */
const wellFormed = (s: string) => Buffer.from(s, "utf8").toString("utf8");

beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.disabled });
  await Promise.all(
    names.map(async (name) => {
      const path = join(dir, `${name}.gguf`);
      await writeVocabGguf(path, bpeVocabMetadata(name));
      const oracle = await llama.loadModel({ modelPath: path, vocabOnly: true });
      fixtures.set(name, { oracle, ours: openTokenizer(path) });
    }),
  );
});

afterAll(async () => {
  await llama?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

it("the corpus is adversarial and large enough", () => {
  expect(CORPUS.join("").length).toBeGreaterThan(10_000);
});

describe.each(names)("%s matches llama.cpp", (name) => {
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

  it("adds BOS as the vocabulary asks", () => {
    const { ours } = fixtures.get(name)!;
    const plain = [...ours.tokenize("Hi", { addSpecial: false })];
    const withSpecial = [...ours.tokenize("Hi")];
    expect(withSpecial).toEqual(ours.info.addBos ? [ours.info.bos, ...plain] : plain);
  });

  it("detokenize(tokenize(x)) == x", () => {
    const { ours } = fixtures.get(name)!;
    for (const text of CORPUS) {
      expect(ours.detokenize(ours.tokenize(text, { addSpecial: false }))).toBe(wellFormed(text));
      const withSpecial = ours.tokenize(text, { special: true, addSpecial: false });
      expect(ours.detokenize(withSpecial, { special: true })).toBe(wellFormed(text));
    }
  });

  it("streams whole characters when tokens split them", () => {
    const { ours } = fixtures.get(name)!;
    let heldBack = 0;
    for (const text of CORPUS) {
      const expected = wellFormed(text);
      const decoder = ours.createDecoder();
      let out = "";
      for (const token of ours.tokenize(text, { addSpecial: false })) {
        const chunk = decoder.push(token);
        if (!expected.includes("\ufffd")) expect(chunk).not.toContain("\ufffd");
        if (chunk === "") heldBack++;
        out += chunk;
      }
      out += decoder.flush();
      expect(out).toBe(expected);
    }
    // Emoji and rare CJK characters are several byte tokens in every one of these vocabularies.
    expect(heldBack).toBeGreaterThan(0);
  });
});
