// POST /completion (and /completions): llama.cpp's native completion API. Streamed chunks carry `content`, the
// chunk's `tokens` and `stop: false`; the last one has `stop: true` and the run's totals; no [DONE]. Several prompts
// in one request give one result each (a JSON array; streamed, chunks carry their prompt's `index`).
import type { FastifyInstance, FastifyReply } from "fastify";
import type { GenerateChunk, Model, StopReason, TokenLogprob, TokenLogprobs } from "../../../src/index.js";
import type { ServerContext } from "../context.js";
import { HttpError } from "../errors.js";
import { Fields } from "../fields.js";
import { readPrompts } from "../prompts.js";
import { llamaTimings, stoppingWord } from "../responses.js";
import { readMaxTokens, readSampling, samplingDefaults, type RequestSampling } from "../sampling.js";
import type { PromptProgress, SlotRun } from "../slots.js";
import { clientSignal, SseStream, streamReply } from "../sse.js";

const STOP_TYPES: Record<StopReason, string> = {
  eos: "eos",
  stop: "word",
  maxTokens: "limit",
  contextFull: "limit",
  abort: "none",
};

/** llama-server's seed when none was set: LLAMA_DEFAULT_SEED, a fresh seed each request. */
const DEFAULT_SEED = 0xffffffff;

/**
 * llama-server's `completion_probabilities` entries: a token, its log-probability and the most likely ones; with
 * post_sampling_probs (logprobs of the draw's own distribution) the probabilities themselves, as `prob` and
 * `top_probs`.
 */
export function llamaProbabilities(model: Model, entries: readonly TokenLogprobs[], postSampling = false) {
  const describe = (t: TokenLogprob) => {
    const token = model.detokenize([t.token], { special: true });
    const bytes = Array.from(Buffer.from(token, "utf8"));
    return postSampling
      ? { id: t.token, token, bytes, prob: Math.exp(t.logprob) }
      : { id: t.token, token, bytes, logprob: t.logprob };
  };
  return entries.map((e) => ({ ...describe(e), [postSampling ? "top_probs" : "top_logprobs"]: e.top.map(describe) }));
}

/** The request's sampling as llama-server's `generation_settings` reports it (its defaults where it set none). */
export function generationSettings(
  sampling: RequestSampling,
  extra: {
    maxTokens: number | undefined;
    stop: string[] | undefined;
    stream: boolean;
    nProbs: number;
    ignoreEos: boolean;
  },
) {
  const bias = Object.entries(sampling.logitBias ?? {}).map(([token, value]) => ({
    // JSON has no -Infinity: llama-server writes a banned token's bias as null.
    bias: Number.isFinite(value) ? value : null,
    token: Number(token),
  }));
  return {
    seed: sampling.seed ?? DEFAULT_SEED,
    temperature: sampling.temperature ?? 0,
    top_k: sampling.topK ?? 40,
    top_p: sampling.topP ?? 0.95,
    min_p: sampling.minP ?? 0.05,
    repeat_last_n: sampling.repeatLastN ?? 64,
    repeat_penalty: sampling.repeatPenalty ?? 1,
    presence_penalty: sampling.presencePenalty ?? 0,
    frequency_penalty: sampling.frequencyPenalty ?? 0,
    // llama-server's adaptive-p sampler, off (bloomery has none): its defaults.
    adaptive_target: -1,
    adaptive_decay: 0.9,
    max_tokens: extra.maxTokens ?? -1,
    n_predict: extra.maxTokens ?? -1,
    stop: extra.stop ?? [],
    ignore_eos: extra.ignoreEos,
    stream: extra.stream,
    n_probs: extra.nProbs,
    logit_bias: bias,
    grammar: sampling.grammar ?? "",
    samplers: ["penalties", "top_k", "top_p", "min_p", "temperature"],
  };
}

/**
 * llama-server's `response_fields`: only these fields of the response, each under its path as given
 * ("generation_settings/n_predict" reads the nested field); a path the response lacks is left out.
 */
export function pickFields(response: Record<string, unknown>, paths: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const path of paths) {
    let value: unknown = response;
    for (const key of path.split("/")) {
      value = typeof value === "object" && value !== null ? (value as Record<string, unknown>)[key] : undefined;
    }
    if (value !== undefined) out[path] = value;
  }
  return out;
}

/** What the server's clock says of a run so far: llama-server's timings, for timings_per_token. */
export class RunClock {
  readonly #started = performance.now();
  #firstToken: number | undefined;
  #tokens = 0;
  /** While the prompt is evaluated: its tokens evaluated so far and the milliseconds that took (return_progress). */
  #prompt: { evaluated: number; ms: number } | undefined;

  /** A prompt progress report: the timings say how far the prompt's evaluation is, until the first token. */
  progress(p: PromptProgress): void {
    this.#prompt = { evaluated: p.processed - p.cache, ms: p.time_ms };
  }

  token(count: number): void {
    this.#firstToken ??= performance.now();
    this.#tokens += count;
  }

  timings(promptTokens: number, cachedTokens: number): Record<string, number> {
    const now = performance.now();
    const inPrompt = this.#firstToken === undefined ? this.#prompt : undefined;
    const promptN = inPrompt ? inPrompt.evaluated : promptTokens;
    const promptMs = inPrompt ? inPrompt.ms : (this.#firstToken ?? now) - this.#started;
    const predictedMs = this.#firstToken === undefined ? 0 : now - this.#firstToken;
    // The first token comes with the prompt's pass: the rate is over the tokens after it.
    const decoded = Math.max(0, this.#tokens - 1);
    return {
      cache_n: cachedTokens,
      prompt_n: promptN,
      prompt_ms: promptMs,
      prompt_per_token_ms: promptN ? promptMs / promptN : 0,
      prompt_per_second: promptMs ? (promptN * 1000) / promptMs : 0,
      predicted_n: this.#tokens,
      predicted_ms: predictedMs,
      predicted_per_token_ms: decoded ? predictedMs / decoded : 0,
      predicted_per_second: predictedMs && decoded ? (decoded * 1000) / predictedMs : 0,
    };
  }
}

/**
 * The most tokens a request generates: what it asks, else the server's -n (llama-server's n_predict_max: the request's
 * n_predict where it sets one, the server's where it does not or sets -1).
 */
export function requestMaxTokens(context: ServerContext, requested: number | undefined): number | undefined {
  return requested ?? context.config.nPredict;
}

/** ignore_eos as llama-server applies it: a logit bias of -infinity on every token that ends a generation. */
export function withIgnoreEos(model: Model, sampling: RequestSampling, ignoreEos: boolean): RequestSampling {
  if (!ignoreEos) return sampling;
  const banned = Object.fromEntries(model.info.endTokens.map((token) => [token, -Infinity]));
  return { ...sampling, logitBias: { ...sampling.logitBias, ...banned } };
}

export function registerLlamaNative(app: FastifyInstance, context: ServerContext): void {
  for (const path of ["/completion", "/completions"]) {
    app.post(path, (request, reply) =>
      serveCompletion(context, request.body, reply, (f) => readPrompts(context.model, f.raw("prompt"))),
    );
  }
  app.post("/infill", (request, reply) =>
    serveCompletion(context, request.body, reply, (f) => {
      const infill = readInfill(context.model, f);
      return infillPrompt(context, infill).then((prompt) => [prompt]);
    }),
  );
}

/**
 * One request of llama.cpp's native completion API, on the prompts `readPromptsOf` reads from its body (the
 * other fields are the same for /completion and /infill).
 */
async function serveCompletion(
  context: ServerContext,
  body: unknown,
  reply: FastifyReply,
  readPromptsOf: (f: Fields) => Promise<number[][]>,
) {
  const model = context.model;
  const f = new Fields(body);
  // The prompts' fields are read at once, their tokenizing runs on worker threads meanwhile; a refusal of another
  // field below must not leave the pending prompts' own refusal unhandled (awaiting them still throws it).
  const pendingPrompts = readPromptsOf(f);
  pendingPrompts.catch(() => undefined);
  const stream = f.boolean("stream") ?? false;
  const returnTokens = f.boolean("return_tokens") ?? false;
  const maxTokens = requestMaxTokens(context, readMaxTokens(f, ["n_predict", "max_tokens"]));
  const stop = f.strings("stop");
  const ignoreEos = f.boolean("ignore_eos") ?? false;
  const sampling = withIgnoreEos(model, readSampling(f, samplingDefaults(context)), ignoreEos);
  const nProbs = f.integer("n_probs", { min: 0, max: model.info.vocabSize }) ?? 0;
  // The probabilities the draw chose by (after the sampler's filters and temperature) rather than the model's.
  const postSampling = f.boolean("post_sampling_probs") ?? false;
  // bloomery samples in its engine always: llama-server's choice between its samplers changes nothing here.
  f.boolean("backend_sampling");
  const responseFields = f.strings("response_fields") ?? [];
  const timingsPerToken = f.boolean("timings_per_token") ?? false;
  const returnProgress = f.boolean("return_progress") ?? false;
  const verbose = (f.boolean("verbose") ?? false) || context.config.verbose === true;
  // false: the whole prompt is evaluated (a reused prefix matches that up to float rounding only).
  const reusePrefix = f.boolean("cache_prompt") ?? true;
  const idSlot = f.integer("id_slot") ?? -1;
  f.finish();
  const prompts = await pendingPrompts;
  const promptTexts = prompts.map((prompt) => model.detokenize(prompt, { special: true }));

  const logprobs = nProbs > 0 ? { logprobs: nProbs, ...(postSampling ? { logprobsAfterSampling: true } : {}) } : {};
  const options = { ...sampling, maxTokens, stop, ...logprobs };
  const settings = generationSettings(sampling, { maxTokens, stop, stream, nProbs, ignoreEos });
  const signal = clientSignal(reply);
  const final = (index: number, result: SlotRun, content: string) => {
    const prompt = prompts[index]!;
    const body: Record<string, unknown> = {
      index,
      content,
      tokens: returnTokens && content ? result.tokens : [],
      id_slot: result.slot,
      stop: true,
      model: context.modelId,
      tokens_predicted: result.tokens.length,
      tokens_evaluated: prompt.length,
      generation_settings: settings,
      prompt: promptTexts[index],
      has_new_line: result.text.includes("\n"),
      truncated: result.stopReason === "contextFull" || result.timings.discardedTokens > 0,
      stop_type: STOP_TYPES[result.stopReason],
      stopping_word: stoppingWord(model, result, stop),
      tokens_cached: result.timings.cachedPromptTokens + result.timings.promptTokens + result.tokens.length,
      timings: llamaTimings(result),
    };
    if (!stream && result.logprobs)
      body.completion_probabilities = llamaProbabilities(model, result.logprobs, postSampling);
    const picked = responseFields.length > 0 ? pickFields(body, responseFields) : body;
    return verbose ? { ...picked, __verbose: body } : picked;
  };

  if (!stream) {
    const results = await Promise.all(
      prompts.map((prompt, index) =>
        context.slots
          .run(prompt, options, signal, () => {}, { idSlot, reusePrefix })
          .then((result) => final(index, result, result.text)),
      ),
    );
    return results.length === 1 ? results[0] : results;
  }
  const sse = new SseStream(reply);
  await streamReply(sse, signal, async () => {
    await Promise.all(
      prompts.map(async (prompt, index) => {
        const clock = new RunClock();
        let predicted = 0;
        let slot = idSlot;
        let cached = 0;
        const partial = (fields: Record<string, unknown>) => ({
          index,
          stop: false,
          id_slot: slot,
          tokens_predicted: predicted,
          tokens_evaluated: prompt.length,
          ...fields,
          ...(timingsPerToken ? { timings: clock.timings(prompt.length - cached, cached) } : {}),
        });
        const progress = returnProgress
          ? {
              batchSize: context.config.batchSize ?? 2048,
              report: (p: PromptProgress) => {
                cached = p.cache;
                clock.progress(p);
                sse.send(partial({ content: "", tokens: [], prompt_progress: p }));
              },
            }
          : undefined;
        const onChunk = (piece: GenerateChunk) => {
          predicted += piece.tokens.length;
          clock.token(piece.tokens.length);
          sse.send(
            partial({
              content: piece.text,
              tokens: piece.tokens,
              ...(piece.logprobs?.length
                ? { completion_probabilities: llamaProbabilities(model, piece.logprobs, postSampling) }
                : {}),
            }),
          );
        };
        const result = await context.slots.run(prompt, options, signal, onChunk, {
          idSlot,
          reusePrefix,
          ...(progress ? { progress } : {}),
          onSlot: (id: number) => (slot = id),
        });
        if (signal.aborted) throw new Error("client gone");
        sse.send(final(index, result, ""));
      }),
    );
    sse.end();
  });
}

/** The fill-in-the-middle texts llama.cpp recognizes, by role (after the GGUF's fim ids, which name the same tokens). */
const FIM_TEXTS = {
  pre: ["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>"],
  suf: ["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>"],
  mid: ["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>"],
  rep: ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"],
  sep: ["<|file_sep|>", "<|fim_sep|>", "<fim-sep>", "<SEP>", "<filename>"],
} as const;

/** The model's token for a fill-in-the-middle role: a single special token with one of that role's texts. */
function fimToken(model: Model, role: keyof typeof FIM_TEXTS): number | undefined {
  for (const text of FIM_TEXTS[role]) {
    const tokens = model.tokenize(text, { special: true, addSpecial: false });
    if (tokens.length === 1 && model.detokenize(tokens, { special: true }) === text) return tokens[0];
  }
  return undefined;
}

/** An /infill request's texts, and the model's fill-in-the-middle tokens. */
interface Infill {
  tokens: { pre: number; suf: number; mid: number; rep?: number; sep?: number };
  prefix: string;
  suffix: string;
  prompt: string;
  files: { filename: string; body: string }[];
}

/** Reads an /infill request's fields; a model without fill-in-the-middle tokens is refused (501, as llama-server). */
function readInfill(model: Model, f: Fields): Infill {
  const pre = fimToken(model, "pre");
  const suf = fimToken(model, "suf");
  const mid = fimToken(model, "mid");
  const missing = [pre === undefined && "prefix", suf === undefined && "suffix", mid === undefined && "middle"];
  if (pre === undefined || suf === undefined || mid === undefined) {
    throw new HttpError(
      501,
      `Infill is not supported by this model: its ${missing.filter(Boolean).join(", ")} token is missing`,
    );
  }
  const prefix = f.string("input_prefix");
  const suffix = f.string("input_suffix");
  if (prefix === undefined) throw f.bad("input_prefix", "is required");
  if (suffix === undefined) throw f.bad("input_suffix", "is required");
  const files = (f.array("input_extra") ?? []).map((chunk, i) => {
    const c = new Fields(chunk, `input_extra[${i}].`);
    const body = c.string("text");
    if (body === undefined) throw c.bad("text", "must be a string");
    const filename = c.string("filename") ?? "tmp";
    c.finish();
    return { filename, body };
  });
  const rep = fimToken(model, "rep");
  const sep = fimToken(model, "sep");
  return {
    tokens: { pre, suf, mid, ...(rep !== undefined && { rep }), ...(sep !== undefined && { sep }) },
    prefix,
    suffix,
    prompt: f.string("prompt") ?? "",
    files,
  };
}

/**
 * llama-server's /infill prompt (the repo-level FIM pattern): `input_extra` chunks as files of a project, then the
 * prefix (at most 3/4 of a batch, its end kept), the suffix, and `prompt` where the middle starts:
 * [REP]myproject [SEP]file0 text0 ... [SEP]filename [PRE]prefix prompt [SUF]suffix [MID].
 * The texts are tokenized on worker threads: a prefix or a project's files may be long.
 */
async function infillPrompt(context: ServerContext, infill: Infill): Promise<number[]> {
  const model = context.model;
  const { pre, suf, mid, rep, sep } = infill.tokens;
  const text = async (value: string) =>
    Array.from(await model.tokenizeAsync(value, { special: false, addSpecial: false }));
  const extra: number[] = rep === undefined ? [] : [rep, ...(await text("myproject\n"))];
  for (const { filename, body } of infill.files) {
    extra.push(
      ...(sep === undefined ? await text("\n\n--- snippet ---\n\n") : [sep, ...(await text(`${filename}\n`))]),
    );
    extra.push(...(await text(body)));
  }
  if (sep !== undefined) extra.push(sep, ...(await text("filename\n")));
  const prompt = await text(infill.prompt);
  const batch = context.config.batchSize ?? 2048;
  const prefixTokens = await text(infill.prefix);
  const takePrefix = Math.min(prefixTokens.length, 3 * Math.floor(batch / 4));
  const takeSuffix = Math.max(0, Math.floor(batch / 4) - (2 + prompt.length));
  const contextSize = model.info.contextSize;
  const takeExtra = Math.min(Math.max(0, contextSize - batch - 2 * (context.config.nPredict ?? 0)), extra.length);
  const bos = model.tokenize("", { special: true, addSpecial: true });
  return [
    ...extra.slice(extra.length - takeExtra),
    ...bos,
    pre,
    ...prefixTokens.slice(prefixTokens.length - takePrefix),
    ...prompt,
    suf,
    ...(await text(infill.suffix)).slice(0, takeSuffix),
    mid,
  ];
}
