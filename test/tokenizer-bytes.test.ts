// A text given as its UTF-8 bytes (a Uint8Array) tokenizes exactly as the string does, on this
// thread and on the addon's worker (where the bytes are read in place, not copied: the server
// passes a request's long text this way); bytes that are not UTF-8 are refused by name.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError } from "../src/errors.js";
import { openTokenizer, type Tokenizer } from "../src/tokenizer.js";
import { bpeVocabMetadata, spmVocabMetadata, writeVocabGguf } from "./tokenizer-fixtures.js";

const dir = mkdtempSync(join(tmpdir(), "bloomery-tokenizer-bytes-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TEXTS = [
  "",
  "Hello world",
  "Mañana, the river ran 3 km: naïve 🐟 <|im_start|>user\n",
  "  leading and trailing spaces\t\n ",
  "日本語のテキストと English の混在 ".repeat(3),
];
/** Long enough for the worker (the SDK tokenizes short texts at once). */
const LONG = "Mañana 🐟 the river ran, ".repeat(2000) + " ".repeat(50_000);

const VOCABS = {
  bpe: () => bpeVocabMetadata("qwen3"),
  spm: () => spmVocabMetadata(TEXTS.join(" ")),
};

describe.each(Object.keys(VOCABS) as (keyof typeof VOCABS)[])("%s", (name) => {
  let t: Tokenizer;
  beforeAll(async () => {
    const path = join(dir, `${name}.gguf`);
    await writeVocabGguf(path, VOCABS[name]());
    t = openTokenizer(path);
  });

  it("tokenizes UTF-8 bytes as the string, with every option", async () => {
    for (const text of [...TEXTS, LONG]) {
      const bytes = new TextEncoder().encode(text);
      for (const options of [{}, { special: true, addSpecial: false }, { special: false, addSpecial: true }]) {
        const expected = [...t.tokenize(text, options)];
        expect([...t.tokenize(bytes, options)]).toEqual(expected);
        expect([...(await t.tokenizeAsync(bytes, options))]).toEqual(expected);
        expect([...(await t.tokenizeAsync(text, options))]).toEqual(expected);
      }
    }
  });

  it("reads a view's own bytes, not its buffer's", async () => {
    const inner = new TextEncoder().encode(LONG);
    const padded = new Uint8Array(inner.length + 8).fill(0x41);
    padded.set(inner, 4);
    expect([...(await t.tokenizeAsync(padded.subarray(4, 4 + inner.length)))]).toEqual([...t.tokenize(LONG)]);
  });

  it("refuses bytes that are not UTF-8, and other objects, by name", async () => {
    const bad = new Uint8Array([0x61, 0xff, 0x62]);
    expect(() => t.tokenize(bad)).toThrow(BloomeryError);
    await expect(t.tokenizeAsync(new Uint8Array([...new TextEncoder().encode(LONG), 0xc3]))).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
    expect(() => t.tokenize(new Uint16Array(3) as unknown as Uint8Array)).toThrow(/string or its UTF-8 bytes/);
  });
});
