// Embeddings and reranking against llama.cpp (node-llama-cpp's CPU build): on the same synthetic
// Qwen3-Embedding-like file, with each pooling type, model.embed's vectors point where
// LlamaEmbeddingContext's do (cosine >= 0.999) for plain text, arbitrary token ids and a long
// input; on a Qwen3-Reranker-like file, the rank head's scores equal LlamaRankingContext's.
import { readFileSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type Llama, type Token } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model, type Pooling } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { afterKey } from "./gguf-helpers.js";
import { idTokens, PROSE, proseTokens } from "./oracle-inputs.js";
import { sameArithmetic } from "./oracle.js";

const THREADS = 2;
const CONTEXT = 2048;
const dir = mkdtempSync(join(tmpdir(), "bloomery-embed-oracle-"));
let llama: Llama;
let embeddingPath: string;
let rerankerPath: string;

/** llama.cpp's numbering of pooling types (`<arch>.pooling_type`). */
const POOLING_TYPE: Record<Exclude<Pooling, "rank">, number> = { none: 0, mean: 1, cls: 2, last: 3 };

/** The embedding fixture with `qwen3.pooling_type` set to `pooling` (node-llama-cpp reads the file's). */
function withPooling(pooling: Exclude<Pooling, "rank">): string {
  const file = readFileSync(embeddingPath);
  file.writeUInt32LE(POOLING_TYPE[pooling], afterKey(file, "qwen3.pooling_type") + 4);
  const path = join(dir, `embedding-${pooling}.gguf`);
  writeFileSync(path, file);
  return path;
}

function cosine(a: ArrayLike<number>, b: ArrayLike<number>): number {
  expect(a.length).toBe(b.length);
  let dot = 0,
    na = 0,
    nb = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i]! * b[i]!;
    na += a[i]! * a[i]!;
    nb += b[i]! * b[i]!;
  }
  return dot / Math.sqrt(na * nb);
}

beforeAll(async () => {
  llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
  embeddingPath = join(dir, "embedding.gguf");
  rerankerPath = join(dir, "reranker.gguf");
  await writeSyntheticModel(embeddingPath, { preset: "tiny-qwen3-embedding", seed: 26 });
  await writeSyntheticModel(rerankerPath, { preset: "tiny-qwen3-reranker", seed: 27 });
});

afterAll(async () => {
  await llama?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

/** The inputs both engines embed, as token ids (EOS last, as the file's tokenizer adds it to text). */
function inputs(model: Model): { name: string; tokens: number[] }[] {
  const eos = model.info.eosToken;
  const text = Array.from(model.tokenize("The ferry leaves the north pier at a quarter past seven."));
  expect(text.at(-1)).toBe(eos);
  return [
    { name: "plain text", tokens: text },
    { name: "arbitrary ids", tokens: [...idTokens(eos, model.info.vocabSize, 40).slice(1), eos] },
    { name: "a long input", tokens: [...proseTokens((t) => model.tokenize(t, { addSpecial: false }), 1500), eos] },
  ];
}

describe("model.embed against llama.cpp's embeddings", () => {
  for (const pooling of ["last", "mean", "cls", "none"] as const) {
    it(`pooling ${pooling}: plain text, arbitrary ids, a long input (cosine >= 0.9999 with llama.cpp's arithmetic)`, async () => {
      const path = withPooling(pooling);
      const model = await loadModel(path, { gpu: false, threads: THREADS, contextSize: CONTEXT });
      // Without flash attention (its CPU kernel sums in f16), as the rank test below and test/oracle.ts run it. In one
      // batch llama.cpp's attention products are tinyBLAS's, not the one-token order ours take: on the long input
      // the vectors part by a cosine of 1.2e-5, the short ones by less than 1e-6 (with flash attention: up to 1.3e-4). Where
      // llama.cpp's CPU variant is not our tier's arithmetic (its AMX variant multiplies in half precision), 1e-3.
      const theirs = await llama.loadModel({ modelPath: path, defaultContextFlashAttention: false });
      const context = await theirs.createEmbeddingContext({
        contextSize: CONTEXT,
        batchSize: CONTEXT,
        threads: THREADS,
      });
      try {
        expect(model.info.pooling).toBe(pooling);
        const cases = inputs(model);
        // All at once: the scheduler runs them as separate sequences, batched together.
        const ours = await model.embed(cases.map((c) => c.tokens));
        for (const [i, c] of cases.entries()) {
          const reference = (await context.getEmbeddingFor(c.tokens as Token[])).vector;
          // llama.cpp's per-token rows are reachable only for the last token: compare that one.
          const vector = pooling === "none" ? ours[i]!.tokenVectors!.at(-1)! : ours[i]!.vector;
          const similarity = cosine(vector, reference);
          console.log(`${pooling}, ${c.name} (${c.tokens.length} tokens): cosine ${similarity.toFixed(6)}`);
          expect(similarity, c.name).toBeGreaterThanOrEqual(sameArithmetic(llama) ? 0.9999 : 0.999);
          expect(ours[i]!.tokenCount).toBe(c.tokens.length);
          if (pooling === "none") {
            expect(ours[i]!.tokenVectors).toHaveLength(c.tokens.length);
          } else {
            let norm = 0;
            for (const x of ours[i]!.vector) norm += x * x;
            expect(Math.sqrt(norm)).toBeCloseTo(1, 5);
          }
        }
        // Text is tokenized with the model's special tokens (EOS added), as the ids above were.
        const [fromText] = await model.embed(["The ferry leaves the north pier at a quarter past seven."]);
        expect(cosine(fromText!.vector, ours[0]!.vector)).toBeCloseTo(1, 6);
      } finally {
        model.dispose();
        await context.dispose();
        await theirs.dispose();
      }
    });
  }

  it("normalizes as llama.cpp's embd_normalize: off, taxicab, max-abs", async () => {
    const model = await loadModel(embeddingPath, { gpu: false, threads: THREADS, contextSize: 256 });
    try {
      const text = "The ferry leaves the north pier.";
      const [raw] = await model.embed([text], { normalize: false });
      const [taxicab] = await model.embed([text], { normalize: 1 });
      const [maxAbs] = await model.embed([text], { normalize: 0 });
      const sumAbs = raw!.vector.reduce((s, x) => s + Math.abs(x), 0);
      const maxAbsRaw = raw!.vector.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
      expect(Math.abs(1 - sumAbs)).toBeGreaterThan(1e-3);
      for (let i = 0; i < raw!.vector.length; i++) {
        expect(taxicab!.vector[i]).toBeCloseTo(raw!.vector[i]! / sumAbs, 6);
        expect(maxAbs!.vector[i]).toBeCloseTo((raw!.vector[i]! * 32760) / maxAbsRaw, 2);
      }
    } finally {
      model.dispose();
    }
  });
});

describe("model.rank against llama.cpp's reranking", () => {
  it("the rank head's scores equal LlamaRankingContext's on the same tokens", async () => {
    const model = await loadModel(rerankerPath, { gpu: false, threads: THREADS, contextSize: CONTEXT });
    // Without flash attention, as test/oracle.ts runs llama.cpp. node-llama-cpp's default ("auto") turns it on
    // for the CPU, whose kernel sums each head's values in an f16 accumulator (under 64 rows a batch; in its
    // own tiles from 64), rounding unlike llama.cpp's graph without it and ours: with it, the first document
    // scores 0.589031 in llama.cpp on an AVX2 host, against 0.586796 without it and here.
    const theirs = await llama.loadModel({ modelPath: rerankerPath, defaultContextFlashAttention: false });
    // A template of the query and the document alone: node-llama-cpp then evaluates exactly their tokens.
    const rankingContext = (batchSize: number) =>
      theirs.createRankingContext({
        contextSize: CONTEXT,
        batchSize,
        threads: THREADS,
        template: "{{query}}{{document}}",
      });
    // One token per decode, llama.cpp's attention products are ggml_vec_dot_f16's, in whose order ours sum in a
    // prompt too, so its scores are ours, bit for bit. In batches of two rows or more it multiplies them with
    // llamafile's tinyBLAS (8 or 16 lanes a sum), which a random model magnifies: on an AVX2 host the long
    // document scores 0.488743 against 0.485780 one token per decode. Those are logged, not checked.
    const oneByOne = await rankingContext(1);
    const batched = await rankingContext(CONTEXT);
    try {
      expect(model.info).toMatchObject({ pooling: "rank", rankLabels: 2 });
      const tokenize = (text: string) => Array.from(model.tokenize(text, { addSpecial: false }));
      const query = tokenize("Which island has a lighthouse?");
      const documents = [
        tokenize("There is a lighthouse at the southern point, no longer used."),
        idTokens(0, model.info.vocabSize, 60).slice(1),
        proseTokens(tokenize, 200),
      ];
      const ours = await model.embed(
        documents.map((d) => [...query, ...d]),
        { pooling: "rank" },
      );
      const reference = await oneByOne.rankAll(query as Token[], documents as Token[][]);
      const prompt = await batched.rankAll(query as Token[], documents as Token[][]);
      for (const [i, score] of reference.entries()) {
        const probabilities = ours[i]!.vector;
        console.log(
          `document ${i}: ours ${probabilities[0]!.toFixed(6)}, llama.cpp ${score.toFixed(6)} one token per decode (${prompt[i]!.toFixed(6)} in one batch)`,
        );
        expect(probabilities).toHaveLength(2);
        expect(probabilities[0]! + probabilities[1]!).toBeCloseTo(1, 6); // the head's softmax over "yes" and "no"
        // Bit for bit where llama.cpp's CPU variant is our tier's arithmetic (test/oracle.ts): the head's softmax
        // too is ggml_soft_max's (a float sum and a division part by 2 ulps on the long document). Elsewhere (its
        // AMX variant multiplies in half precision) within 1e-3, agreementBar's floor for logits.
        if (sameArithmetic(llama)) expect(probabilities[0]).toBe(score);
        else expect(Math.abs(probabilities[0]! - score)).toBeLessThanOrEqual(1e-3);
      }

      // rank() scores the file's rerank template with the query and each document in it (llama-server's prompt).
      const texts = ["There is a lighthouse at the southern point.", PROSE.slice(0, 400)];
      const ranked = await model.rank("Which island has a lighthouse?", texts);
      const template = model.info.rankTemplate!;
      const prompts = texts.map((d) =>
        template.replace("{query}", "Which island has a lighthouse?").replace("{document}", d),
      );
      const direct = await model.embed(
        prompts.map((p) => Array.from(model.tokenize(p, { addSpecial: false, special: true }))),
        { pooling: "rank" },
      );
      expect(ranked.map((r) => r.index)).toEqual([0, 1]);
      for (const [i, r] of ranked.entries()) {
        expect(r.score).toBe(direct[i]!.vector[0]);
        expect(r.tokenCount).toBe(direct[i]!.tokenCount);
      }
    } finally {
      model.dispose();
      await oneByOne.dispose();
      await batched.dispose();
      await theirs.dispose();
    }
  });

  it("refuses by name: rank on a model without a reranker head, rank pooling there, bad options", async () => {
    const model = await loadModel(embeddingPath, { gpu: false, threads: THREADS, contextSize: 256 });
    try {
      await expect(model.rank("q", ["d"])).rejects.toMatchObject({ code: "NOT_A_RERANKER" });
      await expect(model.embed(["x"], { pooling: "rank" })).rejects.toMatchObject({ code: "NOT_A_RERANKER" });
      await expect(model.embed(["x"], { pooling: "max" as Pooling })).rejects.toMatchObject({
        code: "INVALID_ARGUMENT",
      });
      await expect(model.embed(["x"], { normalize: -1 })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
      await expect(model.embed([[]])).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
      await expect(model.embed([PROSE + PROSE])).rejects.toMatchObject({ code: "CONTEXT_TOO_LONG" });
    } finally {
      model.dispose();
    }
  });
});
