// bloomery-serve's embeddings and reranking endpoints (llama-server's shapes): the official openai client's
// embeddings.create, base64 and float; the non-OpenAI /embeddings with token ids and mixed inputs; pooling none;
// /rerank in Jina's and TEI's shapes. Each answers what model.embed / model.rank give for the same inputs.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { postJson, startServer, type TestServer } from "./server-helpers.js";

const dir = mkdtempSync(join(tmpdir(), "bloomery-serve-embed-"));
const embeddingPath = join(dir, "embedding.gguf");
const rerankerPath = join(dir, "reranker.gguf");
let embedder: TestServer;
let reranker: TestServer;

const TEXTS = ["The ferry leaves the north pier.", "A man sells honey in jars.", "Paris est une grande ville."];

beforeAll(async () => {
  await writeSyntheticModel(embeddingPath, { preset: "tiny-qwen3-embedding", seed: 5 });
  await writeSyntheticModel(rerankerPath, { preset: "tiny-qwen3-reranker", seed: 6 });
  embedder = await startServer({ modelPath: embeddingPath, config: { embedding: true } });
  reranker = await startServer({ modelPath: rerankerPath, config: { reranking: true } });
});

afterAll(async () => {
  await embedder?.close();
  await reranker?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("/v1/embeddings", () => {
  it("answers the openai client's embeddings.create (base64, its default) with model.embed's vectors", async () => {
    const client = new OpenAI({ baseURL: `${embedder.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const expected = await embedder.model.embed(TEXTS);
    const one = await client.embeddings.create({ model: "text-embedding-3-small", input: TEXTS[0]! });
    expect(one.object).toBe("list");
    expect(one.data).toHaveLength(1);
    expect(one.data[0]!.embedding).toEqual(Array.from(expected[0]!.vector));
    expect(one.usage).toEqual({ prompt_tokens: expected[0]!.tokenCount, total_tokens: expected[0]!.tokenCount });

    const many = await client.embeddings.create({ model: "m", input: TEXTS });
    expect(many.data.map((d) => d.index)).toEqual([0, 1, 2]);
    many.data.forEach((d, i) => expect(d.embedding).toEqual(Array.from(expected[i]!.vector)));
    const floats = await client.embeddings.create({ model: "m", input: TEXTS, encoding_format: "float" });
    floats.data.forEach((d, i) => expect(d.embedding).toEqual(Array.from(expected[i]!.vector)));
    const norm = Math.hypot(...floats.data[0]!.embedding);
    expect(norm).toBeCloseTo(1, 5);
  });

  it("takes token ids, and ids mixed with text, as llama-server does; embd_normalize -1 leaves vectors as they are", async () => {
    const ids = [12, 34, 56];
    const response = await postJson(`${embedder.url}/v1/embeddings`, { input: [ids, [12, "hello", 34]] });
    expect(response.status).toBe(200);
    const body = await response.json();
    const [fromIds] = await embedder.model.embed([ids]);
    const mixed = [12, ...embedder.model.tokenize("hello", { special: true, addSpecial: false }), 34];
    const [fromMixed] = await embedder.model.embed([mixed]);
    expect(body.data[0].embedding).toEqual(Array.from(fromIds!.vector));
    expect(body.data[1].embedding).toEqual(Array.from(fromMixed!.vector));
    expect(body.usage.prompt_tokens).toBe(3 + mixed.length);

    const raw = await (await postJson(`${embedder.url}/v1/embeddings`, { input: ids, embd_normalize: -1 })).json();
    const [unnormalized] = await embedder.model.embed([ids], { normalize: false });
    expect(raw.data[0].embedding).toEqual(Array.from(unnormalized!.vector));
  });

  it("refuses by name: too long an input, a bad encoding_format, an unknown field, rerank without --reranking", async () => {
    const long = await postJson(`${embedder.url}/v1/embeddings`, { input: "This is a test ".repeat(2000) });
    expect(long.status).toBe(400);
    expect((await long.json()).error.message).toMatch(/too large/);
    const format = await postJson(`${embedder.url}/v1/embeddings`, { input: "x", encoding_format: "int8" });
    expect(format.status).toBe(400);
    const field = await postJson(`${embedder.url}/v1/embeddings`, { input: "x", dimensions: 8 });
    expect((await field.json()).error.message).toMatch(/'dimensions'/);
    const rerank = await postJson(`${embedder.url}/rerank`, { query: "q", documents: ["d"] });
    expect(rerank.status).toBe(501);
    expect((await rerank.json()).error.message).toMatch(/--reranking/);
  });
});

describe("/embeddings (llama-server's own shape)", () => {
  it("gives every token's unnormalized vector with pooling none, which /v1/embeddings refuses", async () => {
    const server = await startServer({ modelPath: embeddingPath, config: { embedding: true, pooling: "none" } });
    try {
      const response = await postJson(`${server.url}/embeddings`, { input: "hello hello hello" });
      expect(response.status).toBe(200);
      const body = await response.json();
      const [expected] = await server.model.embed(["hello hello hello"], { pooling: "none" });
      expect(body).toHaveLength(1);
      expect(body[0].index).toBe(0);
      expect(body[0].embedding).toEqual(expected!.tokenVectors!.map((v) => Array.from(v)));
      const oai = await postJson(`${server.url}/v1/embeddings`, { input: "hello" });
      expect(oai.status).toBe(400);
      expect((await oai.json()).error.message).toMatch(/Pooling type 'none' is not OAI compatible/);
    } finally {
      await server.close();
    }
  });

  it("answers 501 without --embedding", async () => {
    const server = await startServer({ modelPath: embeddingPath });
    try {
      const response = await postJson(`${server.url}/v1/embeddings`, { input: "hello" });
      expect(response.status).toBe(501);
      expect((await response.json()).error.message).toMatch(/Start it with `--embeddings`/);
    } finally {
      await server.close();
    }
  });
});

describe("/rerank", () => {
  it("ranks as model.rank, best first, in Jina's shape and TEI's, with top_n and return_text", async () => {
    const query = "Where is the ferry?";
    const ranked = await reranker.model.rank(query, TEXTS);
    const best = [...ranked].sort((a, b) => b.score - a.score);
    for (const path of ["/rerank", "/reranking", "/v1/rerank", "/v1/reranking"]) {
      const response = await postJson(`${reranker.url}${path}`, { query, documents: TEXTS, top_n: 2 });
      expect(response.status).toBe(200);
      const body = await response.json();
      expect(body.results).toEqual(best.slice(0, 2).map((r) => ({ index: r.index, relevance_score: r.score })));
      const tokens = ranked.reduce((sum, r) => sum + r.tokenCount, 0);
      expect(body.usage).toEqual({ prompt_tokens: tokens, total_tokens: tokens });
    }
    const tei = await (await postJson(`${reranker.url}/rerank`, { query, texts: TEXTS, return_text: true })).json();
    expect(tei).toEqual(best.map((r) => ({ index: r.index, score: r.score, text: TEXTS[r.index] })));
    for (const documents of [[], null, 123, [1, 2, 3]]) {
      const bad = await postJson(`${reranker.url}/rerank`, { query, documents });
      expect(bad.status).toBe(400);
    }
  });
});
