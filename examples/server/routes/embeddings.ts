// llama-server's embeddings and reranking endpoints, over Model.embed and Model.rank: POST /embedding and
// /embeddings (every input's vectors: one pooled vector, or each token's with --pooling none), /v1/embeddings
// (OpenAI's shape, floats or base64), and /rerank (/reranking, /v1/rerank, /v1/reranking: Jina's shape, or TEI's
// when the documents come as `texts`). They answer only with --embedding (or --reranking), as llama-server's.
import type { FastifyInstance } from "fastify";
import { BloomeryError, type Model, type Pooling } from "../../../src/index.js";
import type { ServerContext } from "../context.js";
import { HttpError } from "../errors.js";
import { Fields } from "../fields.js";

export function registerEmbeddings(app: FastifyInstance, context: ServerContext): void {
  for (const path of ["/embedding", "/embeddings"]) {
    app.post(path, async (request) => embeddings(context, request.body, false));
  }
  app.post("/v1/embeddings", async (request) => embeddings(context, request.body, true));
  for (const path of ["/rerank", "/reranking", "/v1/rerank", "/v1/reranking"]) {
    app.post(path, async (request) => rerank(context, request.body));
  }
}

/** The pooling embeddings use: --pooling, else rank with --reranking, else the file's. */
function servedPooling(context: ServerContext): Pooling {
  return context.config.pooling ?? (context.config.reranking ? "rank" : context.model.info.pooling);
}

async function embeddings(context: ServerContext, body: unknown, openAi: boolean): Promise<unknown> {
  if (!context.config.embedding) {
    throw new HttpError(501, "This server does not support embeddings. Start it with `--embeddings`");
  }
  const pooling = servedPooling(context);
  const f = new Fields(body);
  f.string("model");
  f.string("user");
  // "content" is llama-server's own field: its answer is then in the non-OpenAI shape.
  const input = f.has("input") ? f.raw("input") : f.raw("content");
  if (f.has("content") && !f.has("input")) openAi = false;
  if (openAi && pooling === "none") {
    throw new HttpError(400, "Pooling type 'none' is not OAI compatible. Please use a different pooling type");
  }
  if (input === undefined) throw new HttpError(400, '"input" or "content" must be provided');
  const format = f.string("encoding_format") ?? "float";
  if (format !== "float" && format !== "base64") {
    throw f.bad("encoding_format", "must be float or base64 (the format to return the embeddings in)");
  }
  const norm = f.integer("embd_normalize", { min: -1 });
  f.finish();

  const model = context.model;
  const inputs = await inputTokens(model, input);
  const longest = Math.max(...inputs.map((tokens) => tokens.length));
  if (longest > model.info.contextSize) {
    throw new HttpError(
      400,
      `input (${longest} tokens) is too large to process: a slot's context holds ${model.info.contextSize} tokens (-c)`,
    );
  }
  const normalize = pooling === "none" || norm === -1 ? false : (norm ?? 2);
  const started = performance.now();
  const results = await model.embed(inputs, { pooling, normalize }).catch(rethrowNotSupported);
  const tokens = results.reduce((sum, e) => sum + e.tokenCount, 0);
  context.slots.countEmbeddings(tokens, (performance.now() - started) / 1000, results.length);
  if (!openAi) {
    return results.map((e, index) => ({
      index,
      embedding: (e.tokenVectors ?? [e.vector]).map((v) => Array.from(v)),
    }));
  }
  return {
    model: f.raw("model") ?? context.modelName,
    object: "list",
    usage: { prompt_tokens: tokens, total_tokens: tokens },
    data: results.map((e, index) =>
      format === "base64"
        ? {
            embedding: Buffer.from(e.vector.buffer, e.vector.byteOffset, e.vector.byteLength).toString("base64"),
            index,
            object: "embedding",
            encoding_format: "base64",
          }
        : { embedding: Array.from(e.vector), index, object: "embedding" },
    ),
  };
}

/**
 * The token lists of `input` as llama-server reads a prompt: a string, an array of token ids, an array of ids and
 * strings (one input; the first string gets the model's special tokens), or an array of those (several inputs).
 */
async function inputTokens(model: Model, input: unknown): Promise<number[][]> {
  const isPiece = (x: unknown) => typeof x === "string" || typeof x === "number";
  const oneInput = typeof input === "string" || (Array.isArray(input) && input.some((x) => typeof x === "number"));
  const inputs = oneInput ? [input] : input;
  if (!Array.isArray(inputs) || inputs.length === 0) {
    throw new HttpError(400, '"input" must be a string, a list of tokens, or a non-empty list of those');
  }
  return Promise.all(
    inputs.map(async (one: unknown, index) => {
      const pieces = typeof one === "string" ? [one] : one;
      if (!Array.isArray(pieces) || !pieces.every(isPiece)) {
        throw new HttpError(400, `"input"[${index}] must be a string, a list of tokens, or a list of both`);
      }
      const tokens: number[] = [];
      for (const [i, piece] of pieces.entries()) {
        if (typeof piece === "number") tokens.push(piece);
        else tokens.push(...(await model.tokenizeAsync(piece, { special: true, addSpecial: i === 0 })));
      }
      if (tokens.length === 0) throw new HttpError(400, "Input content cannot be empty");
      return tokens;
    }),
  );
}

async function rerank(context: ServerContext, body: unknown): Promise<unknown> {
  if (!context.config.reranking) {
    throw new HttpError(501, "This server does not support reranking. Start it with `--reranking`");
  }
  const f = new Fields(body);
  f.string("model");
  const query = f.raw("query");
  if (query === undefined) throw new HttpError(400, '"query" must be provided');
  if (typeof query !== "string") throw new HttpError(400, '"query" must be a string');
  // TEI's shape (https://huggingface.github.io/text-embeddings-inference/) sends `texts`; Jina's `documents`.
  const tei = f.has("texts");
  const documents = f.raw(tei ? "texts" : "documents");
  if (!Array.isArray(documents) || documents.length === 0 || documents.some((d) => typeof d !== "string")) {
    throw new HttpError(400, '"documents" must be a non-empty string array');
  }
  const topN = f.integer("top_n", { min: 0 }) ?? documents.length;
  const returnText = f.boolean("return_text") ?? false;
  if (returnText && !tei) throw f.bad("return_text", "applies to TEI's request shape (texts) only");
  f.finish();

  const started = performance.now();
  const ranked = await context.model.rank(query, documents as string[]).catch(rethrowNotSupported);
  const tokens = ranked.reduce((sum, r) => sum + r.tokenCount, 0);
  context.slots.countEmbeddings(tokens, (performance.now() - started) / 1000, ranked.length);
  const scoreField = tei ? "score" : "relevance_score";
  const results = [...ranked]
    .sort((a, b) => b.score - a.score)
    .slice(0, topN)
    .map((r) => ({ index: r.index, [scoreField]: r.score, ...(returnText ? { text: documents[r.index] } : {}) }));
  if (tei) return results;
  return {
    model: f.raw("model") ?? context.modelName,
    object: "list",
    usage: { prompt_tokens: tokens, total_tokens: tokens },
    results,
  };
}

/** What the model cannot do (no reranker head, the GPU) as llama-server's 501. */
function rethrowNotSupported(error: unknown): never {
  if (error instanceof BloomeryError && (error.code === "NOT_A_RERANKER" || error.code === "UNSUPPORTED_FEATURE")) {
    throw new HttpError(501, error.message);
  }
  throw error;
}
