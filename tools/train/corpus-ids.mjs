// The corpus as the default model's token ids, for tools/train/mtp.py: each document of
// tools/train/data/<split>.jsonl.gz (corpus.mjs) tokenized by the model's own vocabulary, control tokens
// read as such (the chat documents' <|im_start|>), and ended by <|endoftext|>, as train.py streams them.
// Writes little-endian int32 ids. Needs the addon and `npm run build:ts`.
//
//   node tools/train/corpus-ids.mjs models/bloomery-tiny-moe-Q8_0.gguf tools/train/data/train.jsonl.gz /tmp/train.i32
import { readFileSync, writeFileSync } from "node:fs";
import { gunzipSync } from "node:zlib";
import { loadModel } from "../../dist/index.js";

const [modelPath, input, output] = process.argv.slice(2);
if (!modelPath || !input || !output) {
  console.error("usage: node tools/train/corpus-ids.mjs <model.gguf> <split.jsonl.gz> <out.i32>");
  process.exit(2);
}
const model = await loadModel(modelPath, { threads: 1, gpu: false });
const [endOfText] = model.tokenize("<|endoftext|>", { special: true, addSpecial: false });
const documents = gunzipSync(readFileSync(input)).toString("utf8").split("\n").filter(Boolean);
const parts = [];
let count = 0;
for (const line of documents) {
  const ids = model.tokenize(JSON.parse(line).text, { special: true, addSpecial: false });
  parts.push(ids, Uint32Array.of(endOfText));
  count += ids.length + 1;
}
const out = new Int32Array(count);
let at = 0;
for (const part of parts) {
  out.set(part, at);
  at += part.length;
}
writeFileSync(output, out);
console.log(`${output}: ${documents.length} documents, ${count} tokens`);
model.dispose();
