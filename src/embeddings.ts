/**
 * Embeddings and reranking: what {@link Model.embed} and {@link Model.rank} take and return, and the
 * arithmetic around the engine's pooled hidden states (normalization, a reranker's prompt), as
 * llama.cpp's server does it (`common_embd_normalize`, `format_prompt_rerank`).
 * @module
 */
import { BloomeryError } from "./errors.js";
import type { Tokenizer } from "./tokenizer.js";
import { checkOptions, optionKeys, tokenIds } from "./validate.js";

/**
 * How a text's hidden states (after the model's output norm) become its embedding: `"none"` keeps every token's
 * vector, `"mean"` averages them, `"cls"` takes the first token's, `"last"` the last token's, `"rank"` runs a
 * reranker's classification head (`cls.output`) over the token the model's family reads (the last for Qwen3)
 * and returns its outputs (for Qwen3 rerankers, the softmax over its labels: the first is the relevance).
 * A file names its own in `<arch>.pooling_type` ({@link ModelInfo.pooling}).
 */
export type Pooling = "none" | "mean" | "cls" | "last" | "rank";

/** Every {@link Pooling}, in llama.cpp's numbering order. */
export const POOLINGS: readonly Pooling[] = ["none", "mean", "cls", "last", "rank"];

/** Options of {@link Model.embed}. */
export interface EmbedOptions {
  /** How the tokens' hidden states are pooled. Default: the file's (`info.pooling`). */
  pooling?: Pooling;
  /**
   * How each vector is scaled, as llama.cpp's `embd_normalize`: `true` or `2` to unit Euclidean length, `1` by
   * the sum of absolute values, `0` so that the largest absolute value is 32760 (int16's range), any other
   * positive integer p by the p-norm; `false` leaves it as the model wrote it. Default: `true`, but `false` for
   * `"none"` and `"rank"` (per-token vectors and scores, which llama-server leaves as they are).
   */
  normalize?: boolean | number;
}

/** One input's embedding. */
export interface Embedding {
  /** The pooled vector (`info.embeddingLength` floats; `"rank"`: the head's outputs). With pooling `"none"`, the last token's vector. */
  vector: Float32Array;
  /** With pooling `"none"`: each token's vector, in order. Absent otherwise. */
  tokenVectors?: Float32Array[];
  /** The tokens evaluated for this input (special tokens included). */
  tokenCount: number;
}

/** One document's result of {@link Model.rank}, in the order of the documents given. */
export interface RankedDocument {
  /** The document's index in the array given. */
  index: number;
  /** Its relevance to the query: the reranker head's first output (for Qwen3 rerankers, a probability). */
  score: number;
  /** The tokens of the query-and-document prompt the model evaluated. */
  tokenCount: number;
}

/** An input of {@link Model.embed}: text (tokenized with the model's special tokens) or token ids as given. */
export type EmbedInput = string | ArrayLike<number>;

export const EMBED_OPTIONS = optionKeys<EmbedOptions>()({ pooling: true, normalize: true });

/** The options checked: the pooling to run and the norm's order (-1: none). @internal */
export function resolveEmbedOptions(options: EmbedOptions, filePooling: Pooling): { pooling: Pooling; norm: number } {
  checkOptions(options, EMBED_OPTIONS, "embed()");
  const pooling = options.pooling ?? filePooling;
  if (!POOLINGS.includes(pooling)) {
    throw new BloomeryError("INVALID_ARGUMENT", `pooling must be one of ${POOLINGS.join(", ")}`, { pooling });
  }
  const { normalize } = options;
  let norm: number;
  if (normalize === undefined) norm = pooling === "none" || pooling === "rank" ? -1 : 2;
  else if (normalize === true) norm = 2;
  else if (normalize === false) norm = -1;
  else if (typeof normalize === "number" && Number.isInteger(normalize) && normalize >= 0) norm = normalize;
  else {
    throw new BloomeryError("INVALID_ARGUMENT", "normalize must be a boolean or a non-negative integer (the norm)", {
      normalize,
    });
  }
  return { pooling, norm };
}

/** The tokens of each input: text with the model's special tokens added and parsed, ids checked. @internal */
export async function embedInputTokens(
  inputs: readonly EmbedInput[],
  tokenizer: Tokenizer,
  what: string,
): Promise<Int32Array[]> {
  if (!Array.isArray(inputs)) {
    throw new BloomeryError("INVALID_ARGUMENT", `${what} takes an array of texts or token arrays`);
  }
  return Promise.all(
    inputs.map(async (input, i) => {
      const tokens =
        typeof input === "string"
          ? Int32Array.from(await tokenizer.tokenizeAsync(input, { addSpecial: true, special: true }))
          : tokenIds(input, tokenizer.info.size, `${what}[${i}]`);
      if (tokens.length === 0) {
        throw new BloomeryError("INVALID_ARGUMENT", `${what}[${i}] has no tokens`, { index: i });
      }
      return tokens;
    }),
  );
}

/** `vector` scaled by its norm of order `norm` (llama.cpp's common_embd_normalize), in place. @internal */
export function normalizeEmbedding(vector: Float32Array, norm: number): Float32Array {
  if (norm < 0) return vector;
  let sum = 0;
  if (norm === 0) {
    for (const x of vector) sum = Math.max(sum, Math.abs(x));
    sum /= 32760;
  } else if (norm === 2) {
    for (const x of vector) sum += x * x;
    sum = Math.sqrt(sum);
  } else {
    for (const x of vector) sum += Math.abs(x) ** norm;
    sum **= 1 / norm;
  }
  const scale = sum > 0 ? 1 / sum : 0;
  for (let i = 0; i < vector.length; i++) vector[i]! *= scale;
  return vector;
}

/** An {@link Embedding} of the engine's pooled floats (`width` each for pooling "none"). @internal */
export function embeddingOf(
  pooled: Float32Array,
  pooling: Pooling,
  norm: number,
  width: number,
  tokens: number,
): Embedding {
  if (pooling !== "none") return { vector: normalizeEmbedding(pooled, norm), tokenCount: tokens };
  const tokenVectors = Array.from({ length: tokens }, (_, i) =>
    normalizeEmbedding(pooled.slice(i * width, (i + 1) * width), norm),
  );
  return { vector: tokenVectors.at(-1)!, tokenVectors, tokenCount: tokens };
}

/**
 * The prompt a reranker scores, as llama-server's format_prompt_rerank: the file's rerank template
 * (`tokenizer.chat_template.rerank`, with `{query}` and `{document}` in it) with special tokens parsed, or else
 * BOS (where the model adds it), the query, EOS (where the model adds it), the document and EOS again.
 * @internal
 */
export async function rankPromptTokens(
  tokenizer: Tokenizer,
  template: string | undefined,
  query: string,
  document: string,
): Promise<Int32Array> {
  if (template !== undefined) {
    const prompt = template.replaceAll("{query}", query).replaceAll("{document}", document);
    return Int32Array.from(await tokenizer.tokenizeAsync(prompt, { addSpecial: false, special: true }));
  }
  const { bos, eos, addBos, addEos } = tokenizer.info;
  const plain = async (text: string) => tokenizer.tokenizeAsync(text, { addSpecial: false, special: false });
  const end = addEos && eos !== null ? [eos] : [];
  return Int32Array.from([
    ...(addBos && bos !== null ? [bos] : []),
    ...(await plain(query)),
    ...end,
    ...(await plain(document)),
    ...end,
  ]);
}
