// The sampling fields shared by the OpenAI and llama.cpp endpoints, mapped onto Session.generate's
// options. Names and defaults are llama-server's: temperature 0.8 unless the server's --temp says
// otherwise (the SDK itself defaults to greedy), top_k 40, top_p 0.95, min_p 0.05, a fresh seed.
// Constrained output (grammar, json_schema, response_format) and OpenAI's logprobs live here too.
import type { DraftSettings, GenerateOptions, Model, TokenLogprob, TokenLogprobs } from "../../src/index.js";
import type { ServerContext } from "./context.js";
import { Fields, isObject } from "./fields.js";

/** What a request asks of the generation, before the server adds the signal. */
export type RequestSampling = Omit<GenerateOptions, "signal">;

/** The fields of llama-server's sampler that bloomery maps; a route may read fewer (Anthropic's). */
export const SAMPLING_FIELDS = [
  "temperature",
  "top_k",
  "top_p",
  "min_p",
  "seed",
  "repeat_penalty",
  "repeat_last_n",
  "presence_penalty",
  "frequency_penalty",
  "logit_bias",
  "grammar",
  "json_schema",
  "response_format",
  "speculative",
] as const;

export type SamplingField = (typeof SAMPLING_FIELDS)[number];

export interface SamplingDefaults {
  temperature: number;
  vocabSize: number;
  /** The server's --seed: the seed of requests that set none (undefined: a fresh one each). */
  seed?: number;
  /** --context-shift: requests shift a full context, keeping their n_keep. */
  contextShift?: boolean;
  /** The server's drafts (-md, --spec-type, --draft-*), which a request's `speculative.*` fields tune; none: undefined. */
  draft?: DraftSettings;
  /** Tokenizes a `logit_bias` key that is text (llama-server biases each of its tokens); without it text is refused. */
  tokenize?: (text: string) => number[];
}

/** The defaults of a request on `context`'s model: the server's --temp and --seed, and its tokenizer for logit_bias. */
export function samplingDefaults(context: ServerContext): SamplingDefaults {
  const model = context.model;
  return {
    temperature: context.config.temperature,
    vocabSize: model.info.vocabSize,
    ...(context.config.seed !== undefined ? { seed: context.config.seed } : {}),
    ...(context.config.contextShift ? { contextShift: true } : {}),
    ...(context.config.draft ? { draft: context.config.draft } : {}),
    tokenize: (text) => Array.from(model.tokenize(text, { special: false, addSpecial: false })),
  };
}

export function readSampling(
  f: Fields,
  defaults: SamplingDefaults,
  fields: readonly SamplingField[] = SAMPLING_FIELDS,
): RequestSampling {
  const use = new Set(fields);
  const out: RequestSampling = { temperature: f.number("temperature", { min: 0 }) ?? defaults.temperature };
  if (use.has("top_k")) out.topK = f.integer("top_k", { min: 0 });
  if (use.has("top_p")) out.topP = f.number("top_p", { min: 0, max: 1 });
  if (use.has("min_p")) out.minP = f.number("min_p", { min: 0, max: 1 });
  if (use.has("seed")) {
    // llama-server's -1 (and OpenAI's absent) both mean a fresh seed.
    const seed = f.integer("seed", { min: -1 }) ?? defaults.seed;
    if (seed !== undefined && seed >= 0) out.seed = seed;
  }
  // llama-server's n_keep: the prompt tokens a context shift keeps (BOS aside; -1: the whole prompt).
  const keep = f.integer("n_keep", { min: -1 });
  if (defaults.contextShift) out.contextShift = { keep: keep ?? 0 };
  if (use.has("repeat_penalty")) out.repeatPenalty = f.number("repeat_penalty", { min: 0 });
  if (use.has("repeat_last_n")) out.repeatLastN = f.integer("repeat_last_n", { min: -1 });
  if (use.has("presence_penalty")) out.presencePenalty = f.number("presence_penalty");
  if (use.has("frequency_penalty")) out.frequencyPenalty = f.number("frequency_penalty");
  if (use.has("logit_bias")) out.logitBias = readLogitBias(f, defaults);
  if (use.has("grammar")) out.grammar = f.string("grammar");
  if (use.has("json_schema")) out.jsonSchema = readSchema(f, "json_schema", f.raw("json_schema"));
  if (use.has("response_format")) {
    const format = readResponseFormat(f);
    if (format !== undefined && out.jsonSchema !== undefined) {
      throw f.bad("response_format", "cannot be used together with json_schema");
    }
    out.jsonSchema ??= format;
  }
  if (use.has("speculative")) out.draft = readSpeculative(f, defaults.draft);
  if (out.grammar !== undefined && out.jsonSchema !== undefined) {
    throw f.bad("grammar", "cannot be used together with a JSON schema (json_schema or response_format)");
  }
  for (const key of Object.keys(out) as (keyof RequestSampling)[]) if (out[key] === undefined) delete out[key];
  return out;
}

/**
 * llama-server's per-request draft settings, `speculative.n_max`, `speculative.n_min` and `speculative.p_min`, over the
 * server's (--draft-max, --draft-min, --draft-p-min). They tune drafts, so a server that drafts nothing refuses them,
 * and p_min, a draft model's threshold, is refused for n-gram drafts, as --draft-p-min is.
 */
function readSpeculative(f: Fields, server: DraftSettings | undefined): DraftSettings | undefined {
  const max = f.integer("speculative.n_max", { min: 0 });
  const min = f.integer("speculative.n_min", { min: 0 });
  const pMin = f.number("speculative.p_min", { min: 0, max: 1 });
  const given = (
    [
      ["n_max", max],
      ["n_min", min],
      ["p_min", pMin],
    ] as const
  ).find(([, value]) => value !== undefined);
  if (!given) return undefined;
  if (!server) {
    throw f.bad(
      `speculative.${given[0]}`,
      "tunes drafts: the server drafts nothing (start it with -md or --spec-type)",
    );
  }
  if (pMin !== undefined && server.source !== "model") {
    throw f.bad("speculative.p_min", "applies to a draft model's drafts (-md) only");
  }
  return {
    ...server,
    ...(max !== undefined ? { max } : {}),
    ...(min !== undefined ? { min } : {}),
    ...(pMin !== undefined ? { pMin } : {}),
  };
}

function readSchema(f: Fields, name: string, value: unknown): Record<string, unknown> | undefined {
  if (value === undefined) return undefined;
  if (!isObject(value)) throw f.bad(name, "must be a JSON Schema object");
  return value;
}

/**
 * OpenAI's `response_format`: `{type: "text"}` (no constraint), `{type: "json_object"}` (any
 * JSON object) or `{type: "json_schema", json_schema: {schema, name?, strict?, description?}}`;
 * llama-server also takes `{type: "json_object", schema}`.
 */
function readResponseFormat(f: Fields): Record<string, unknown> | undefined {
  const value = f.raw("response_format");
  if (value === undefined) return undefined;
  const format = new Fields(value, "response_format.");
  const type = format.string("type");
  let schema: Record<string, unknown> | undefined;
  if (type === "json_object") {
    schema = readSchema(format, "schema", format.raw("schema")) ?? { type: "object" };
  } else if (type === "json_schema") {
    const wrapper = new Fields(format.raw("json_schema") ?? {}, "response_format.json_schema.");
    wrapper.string("name");
    wrapper.string("description");
    wrapper.boolean("strict");
    schema = readSchema(wrapper, "schema", wrapper.raw("schema"));
    if (schema === undefined) throw wrapper.bad("schema", "is required");
    wrapper.finish();
  } else if (type !== "text") {
    throw format.bad("type", 'must be "text", "json_object" or "json_schema"');
  }
  format.finish();
  return schema;
}

/**
 * How many alternatives to report per token, from OpenAI's fields: chat's `logprobs` (boolean)
 * and `top_logprobs` (0 to 20), or completions' `logprobs` (a count, 0 to 20). Undefined: none.
 */
export function readLogprobs(f: Fields, style: "chat" | "completions"): number | undefined {
  if (style === "completions") return f.integer("logprobs", { min: 0, max: 20 });
  const wanted = f.boolean("logprobs") ?? false;
  const top = f.integer("top_logprobs", { min: 0, max: 20 });
  if (top !== undefined && !wanted) throw f.bad("top_logprobs", "needs logprobs: true");
  return wanted ? (top ?? 0) : undefined;
}

/** OpenAI's `logprobs` object for generated tokens: `{content: [{token, logprob, bytes, top_logprobs}]}`. */
export function openAiLogprobs(model: Model, entries: readonly TokenLogprobs[]) {
  const describe = (t: TokenLogprob) => {
    const token = model.detokenize([t.token], { special: true });
    return { token, logprob: t.logprob, bytes: Array.from(Buffer.from(token, "utf8")) };
  };
  return { content: entries.map((e) => ({ ...describe(e), top_logprobs: e.top.map(describe) })) };
}

/**
 * `logit_bias` as OpenAI sends it ({"token id": bias}) or as llama.cpp also takes it
 * ([[token id, bias or false], ...], false banning the token); as llama-server, a key that is text biases each of
 * its tokens alike.
 */
function readLogitBias(f: Fields, { vocabSize, tokenize }: SamplingDefaults): Record<number, number> | undefined {
  const value = f.raw("logit_bias");
  if (value === undefined) return undefined;
  const pairs: [unknown, unknown][] = isObject(value)
    ? Object.entries(value)
    : Array.isArray(value) && value.every((p) => Array.isArray(p) && p.length === 2)
      ? (value as [unknown, unknown][])
      : [];
  if (!isObject(value) && pairs.length !== (value as unknown[]).length) {
    throw f.bad("logit_bias", "must be an object of token -> bias, or an array of [token, bias] pairs");
  }
  const bias: Record<number, number> = {};
  for (const [key, amount] of pairs) {
    const isText = typeof key === "string" && !/^\d+$/.test(key);
    const tokens = isText && tokenize ? tokenize(key) : [typeof key === "string" && !isText ? Number(key) : key];
    for (const token of tokens) {
      if (typeof token !== "number" || !Number.isInteger(token) || token < 0 || token >= vocabSize) {
        throw f.bad("logit_bias", `names ${JSON.stringify(key)}, not a token id below ${vocabSize} or a text`);
      }
      if (amount === false) bias[token] = -Infinity;
      else if (typeof amount === "number" && Number.isFinite(amount)) bias[token] = amount;
      else throw f.bad("logit_bias", `of ${JSON.stringify(key)} must be a finite number or false`);
    }
  }
  return bias;
}

/**
 * The most tokens to generate, from the first of `names` the request sets; -1 (llama-server's
 * default) and absent mean "until the context is full".
 */
export function readMaxTokens(f: Fields, names: readonly string[]): number | undefined {
  let max: number | undefined;
  for (const name of names) {
    const value = f.integer(name, { min: -1 });
    if (max === undefined && value !== undefined && value >= 0) max = value;
  }
  return max;
}
