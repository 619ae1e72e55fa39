// Builds the training corpus of the default model from freely licensed English that Debian ships:
// the WordNet 3.0 database (package wordnet-base) and the fortune cookie files (fortunes-min, fortunes).
// Output: tools/train/data/{train,heldout}.jsonl.gz, one JSON object `{ "text": ... }` a line, plain
// prose and ChatML conversations mixed. Deterministic: the same packages give the same bytes.
//
//   apt-get install -y wordnet-base fortunes-min fortunes && node tools/train/corpus.mjs
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

const WORDNET = "/usr/share/wordnet";
const FORTUNES = "/usr/share/games/fortunes";
// Pictures, untranslated text and song lyrics (quoted in full, so the most likely to be someone's verse) stay out.
const SKIPPED_FORTUNES = new Set(["ascii-art", "translate-me", "songs-poems"]);
const HELDOUT_PERCENT = 2;
const SEED = "bloomery-default-model-1";
const out = join(dirname(fileURLToPath(import.meta.url)), "data");

/** A number in [0, 1) from a key: the split and every choice below depend only on the text, not on order. */
function draw(key) {
  return createHash("sha256").update(`${SEED}\0${key}`).digest().readUInt32LE(0) / 2 ** 32;
}

function pick(key, options) {
  return options[Math.floor(draw(key) * options.length)];
}

function chat(turns) {
  return turns.map(([q, a]) => `<|im_start|>user\n${q}<|im_end|>\n<|im_start|>assistant\n${a}<|im_end|>\n`).join("");
}

const capitalize = (s) => s.charAt(0).toUpperCase() + s.slice(1);
// "a unit", "a urethra" but "an umbrella": a u before one consonant and a vowel sounds like "you".
const article = (word) => (/^([aeio]|u(?![b-df-hj-np-tv-z][aeiouy]))/i.test(word) && !/^one/i.test(word) ? "an" : "a");

// --- WordNet -----------------------------------------------------------------------------------

const POS = { noun: "n", verb: "v", adj: "a", adv: "r" };

/** Synsets of one data file: lemmas (spaces, no markers) and the gloss split into a definition and examples. */
function readSynsets(pos) {
  const synsets = [];
  for (const line of readFileSync(join(WORDNET, `data.${pos}`), "latin1").split("\n")) {
    if (!line || line.startsWith("  ")) continue; // the license header lines start with two spaces
    const bar = line.indexOf(" | ");
    if (bar < 0) continue;
    const fields = line.slice(0, bar).split(" ");
    const count = parseInt(fields[3], 16);
    const lemmas = [];
    for (let i = 0; i < count; i++) lemmas.push(fields[4 + 2 * i].replace(/\(\w+\)$/, "").replace(/_/g, " "));
    const gloss = line.slice(bar + 3).trim();
    const examples = [...gloss.matchAll(/"([^"]+)"/g)].map((m) => m[1].trim()).filter((e) => e.length > 3);
    const definition = gloss
      .replace(/;?\s*"[^"]*"/g, "")
      .replace(/^\([^)]*\)\s*/, "") // "(usually followed by `to') ..." usage notes
      .replace(/[;:\s]+$/, "")
      .replace(/`/g, "'")
      .trim();
    if (definition.length < 3) continue;
    synsets.push({ id: `${POS[pos]}${fields[0]}`, pos, lemmas: [...new Set(lemmas)], definition, examples });
  }
  return synsets;
}

/** One English sentence that defines a lemma. */
function defineSentence(lemma, synset) {
  const d = synset.definition;
  switch (synset.pos) {
    case "noun":
      return /^[A-Z]/.test(lemma) ? `${lemma} is ${d}.` : `${capitalize(article(lemma))} ${lemma} is ${d}.`;
    case "verb":
      return `To ${lemma} means to ${d}.`;
    default:
      return `${capitalize(lemma)} means ${d}.`;
  }
}

function wordnetDocuments() {
  const docs = [];
  for (const pos of Object.keys(POS)) {
    for (const synset of readSynsets(pos)) {
      const [lemma, ...others] = synset.lemmas;
      const sentence = defineSentence(lemma, synset);
      const example = synset.examples.length ? ` For example: "${synset.examples[0]}".` : "";
      const synonyms = others.length ? ` Other words for it: ${others.slice(0, 4).join(", ")}.` : "";
      const key = synset.id;
      docs.push({ key, text: `${sentence}${example}${synonyms}` });

      const question = pick(`${key}/q`, [
        `What does "${lemma}" mean?`,
        `What is the meaning of the word "${lemma}"?`,
        `Define ${lemma}.`,
        synset.pos === "noun"
          ? `What is ${/^[A-Z]/.test(lemma) ? "" : `${article(lemma)} `}${lemma}?`
          : `Explain "${lemma}".`,
      ]);
      const turns = [[question, `${sentence}${example}`]];
      if (synset.examples.length) {
        turns.push([
          pick(`${key}/e`, ["Use it in a sentence.", "Can you give me an example?", "Show me how to use it."]),
          `Here is an example: "${capitalize(synset.examples.at(-1))}."`.replace(/([.!?])\."$/, '$1"'),
        ]);
      }
      if (others.length) turns.push([`What is another word for "${lemma}"?`, `You can also say "${others[0]}".`]);
      docs.push({ key, text: chat(turns) });
    }
  }
  return docs;
}

// --- fortunes ----------------------------------------------------------------------------------

function fortuneDocuments() {
  const docs = [];
  const files = readdirSync(FORTUNES)
    .filter((f) => !f.includes(".") && !SKIPPED_FORTUNES.has(f))
    .sort();
  for (const file of files) {
    const entries = readFileSync(join(FORTUNES, file), "utf8").split(/\n%\n/);
    for (const raw of entries) {
      const text = raw
        .replace(/\r/g, "")
        .split("\n")
        .map((l) => l.replace(/\t/g, "  ").trimEnd())
        .join("\n")
        .replace(/^\n+|\n+$/g, "");
      const letters = (text.match(/[A-Za-z]/g) ?? []).length;
      // Skip pictures, code and tables: text is mostly letters.
      if (text.length < 20 || letters / text.length < 0.6 || /[^\n\x20-\x7e]/.test(text)) continue;
      const key = `f/${text.replace(/\s+/g, " ").toLowerCase()}`;
      const flat = text.replace(/\s*\n\s*/g, " ").replace(/\s+--\s+/g, " -- ");
      docs.push({ key, text });
      const question = pick(`${key}/q`, [
        "Tell me a fortune.",
        "Say something wise.",
        "Tell me a quote.",
        `Tell me something about ${file.replace(/-/g, " and ")}.`,
        "Cheer me up.",
      ]);
      docs.push({ key, text: chat([[question, flat]]) });
    }
  }
  return docs;
}

// --- split and write ---------------------------------------------------------------------------

function main() {
  for (const path of [WORDNET, FORTUNES]) {
    if (!existsSync(path)) throw new Error(`${path} is missing: apt-get install -y wordnet-base fortunes-min fortunes`);
  }
  const seen = new Set();
  const split = { train: [], heldout: [] };
  const stats = { wordnet: 0, fortunes: 0 };
  for (const [source, docs] of [
    ["wordnet", wordnetDocuments()],
    ["fortunes", fortuneDocuments()],
  ]) {
    for (const { key, text } of docs) {
      if (seen.has(text)) continue;
      seen.add(text);
      stats[source] += text.length;
      // A definition and its conversation fall on the same side, so held-out text is unseen.
      const side = draw(`${key}/split`) * 100 < HELDOUT_PERCENT ? "heldout" : "train";
      split[side].push({ order: draw(`${key}/order/${text.length}`), text });
    }
  }
  mkdirSync(out, { recursive: true });
  for (const [side, docs] of Object.entries(split)) {
    docs.sort((a, b) => a.order - b.order);
    const lines = docs.map(({ text }) => JSON.stringify({ text })).join("\n") + "\n";
    writeFileSync(join(out, `${side}.jsonl.gz`), gzipSync(lines, { level: 9 }));
    console.log(`${side}: ${docs.length} documents, ${(Buffer.byteLength(lines) / 1e6).toFixed(1)} MB`);
  }
  console.log(`characters: wordnet ${stats.wordnet}, fortunes ${stats.fortunes}`);
}

main();
