// POST /v1/completions: OpenAI's legacy text completions, on a prompt given as text or tokens.
import type { FastifyInstance } from "fastify";
import type { TokenLogprobs } from "../../../src/index.js";
import type { ServerContext } from "../context.js";
import { badField } from "../errors.js";
import { Fields } from "../fields.js";
import { finishReason, llamaTimings, promptTokens, responseId, SYSTEM_FINGERPRINT, unixSeconds } from "../responses.js";
import { openAiLogprobs, readLogprobs, readMaxTokens, readSampling, samplingDefaults } from "../sampling.js";
import { clientSignal, SseStream, streamReply } from "../sse.js";
import { requestMaxTokens } from "./llama-native.js";

/** The fields every OpenAI-style generation takes besides its prompt and sampling. */
export function readOpenAiCommon(f: Fields): {
  stream: boolean;
  includeUsage: boolean;
  idSlot: number;
  reusePrefix: boolean;
  n: number;
} {
  // One model is served: any name is accepted, as llama-server does.
  f.string("model");
  f.string("user");
  // false: the whole prompt is evaluated (a reused prefix matches that up to float rounding only).
  const reusePrefix = f.boolean("cache_prompt") ?? true;
  const idSlot = f.integer("id_slot") ?? -1;
  const n = f.integer("n", { min: 1, max: 16 }) ?? 1;
  const stream = f.boolean("stream") ?? false;
  const options = f.object("stream_options");
  let includeUsage = false;
  if (options) {
    const o = new Fields(options, "stream_options.");
    includeUsage = o.boolean("include_usage") ?? false;
    o.finish();
  }
  return { stream, includeUsage, idSlot, reusePrefix, n };
}

/** `prompt` as text (tokenized by `text`), one text in an array, or token ids. */
export async function readPrompt(
  f: Fields,
  vocabSize: number,
  text: (prompt: string) => Promise<number[]>,
): Promise<number[]> {
  const value = f.raw("prompt");
  if (typeof value === "string") return text(value);
  if (Array.isArray(value) && value.length === 1 && typeof value[0] === "string") return text(value[0]);
  if (Array.isArray(value) && value.every((t) => Number.isInteger(t) && t >= 0 && t < vocabSize)) return value;
  throw badField("prompt", `must be a string, one string in an array, or an array of token ids below ${vocabSize}`);
}

export function registerOpenAiCompletions(app: FastifyInstance, context: ServerContext): void {
  app.post("/v1/completions", async (request, reply) => {
    const model = context.model;
    const f = new Fields(request.body);
    const prompt = await readPrompt(f, model.info.vocabSize, (text) => promptTokens(model, text));
    const { stream, includeUsage, idSlot, reusePrefix, n } = readOpenAiCommon(f);
    const maxTokens = requestMaxTokens(context, readMaxTokens(f, ["max_tokens", "n_predict"]));
    const stop = f.strings("stop");
    const sampling = readSampling(f, samplingDefaults(context));
    const logprobs = readLogprobs(f, "completions");
    f.unsupported("echo", (v) => v === false);
    f.unsupported("best_of", (v) => v === 1);
    f.unsupported("suffix");
    f.finish();
    if (n > 1) throw f.bad("n", "above 1 is not supported by /v1/completions in bloomery-serve yet");

    const options = { ...sampling, maxTokens, stop, logprobs };
    const signal = clientSignal(reply);
    const head = {
      id: responseId("cmpl-"),
      object: "text_completion",
      created: unixSeconds(),
      model: context.modelId,
      system_fingerprint: SYSTEM_FINGERPRINT,
    };
    const usage = (completion: number) => ({
      completion_tokens: completion,
      prompt_tokens: prompt.length,
      total_tokens: prompt.length + completion,
    });
    const choice = (text: string, finish: string | null, tokens?: TokenLogprobs[]) => ({
      text,
      index: 0,
      logprobs: tokens ? openAiLogprobs(model, tokens) : null,
      finish_reason: finish,
    });

    if (!stream) {
      const result = await context.slots.run(prompt, options, signal, () => {}, { idSlot, reusePrefix });
      return {
        ...head,
        choices: [choice(result.text, finishReason(result.stopReason), result.logprobs)],
        usage: usage(result.tokens.length),
        timings: llamaTimings(result),
      };
    }
    const sse = new SseStream(reply);
    await streamReply(sse, signal, async () => {
      const result = await context.slots.run(
        prompt,
        options,
        signal,
        (piece) => {
          if (piece.text || piece.logprobs?.length)
            sse.send({ ...head, choices: [choice(piece.text, null, piece.logprobs)] });
        },
        { idSlot, reusePrefix },
      );
      if (signal.aborted) throw new Error("client gone");
      sse.send({ ...head, choices: [choice("", finishReason(result.stopReason))], timings: llamaTimings(result) });
      if (includeUsage) sse.send({ ...head, choices: [], usage: usage(result.tokens.length) });
      sse.done();
      sse.end();
    });
  });
}
