// POST /completion (and /completions): llama.cpp's native completion API. Streamed chunks carry
// `content` and `stop: false`; the last one has `stop: true` and the run's totals; no [DONE].
import type { FastifyInstance } from "fastify";
import type { StopReason } from "../../../src/index.js";
import type { ServerContext } from "../context.js";
import { Fields } from "../fields.js";
import { llamaTimings, promptTokens, stoppingWord } from "../responses.js";
import { readMaxTokens, readSampling } from "../sampling.js";
import type { SlotRun } from "../slots.js";
import { clientSignal, SseStream, streamReply } from "../sse.js";
import { readPrompt } from "./openai-completions.js";

const STOP_TYPES: Record<StopReason, string> = {
  eos: "eos",
  stop: "word",
  maxTokens: "limit",
  contextFull: "limit",
  abort: "none",
};

export function registerLlamaNative(app: FastifyInstance, context: ServerContext): void {
  for (const path of ["/completion", "/completions"]) {
    app.post(path, async (request, reply) => {
      const model = context.model;
      const f = new Fields(request.body);
      const prompt = await readPrompt(f, model.info.vocabSize, (text) => promptTokens(model, text));
      const promptText = typeof f.raw("prompt") === "string" ? (f.raw("prompt") as string) : model.detokenize(prompt);
      const stream = f.boolean("stream") ?? false;
      const returnTokens = f.boolean("return_tokens") ?? false;
      const maxTokens = readMaxTokens(f, ["n_predict", "max_tokens"]);
      const stop = f.strings("stop");
      const sampling = readSampling(f, { temperature: context.config.temperature, vocabSize: model.info.vocabSize });
      // A prefix reused from the slot or the prompt-state cache gives the same text as evaluating the
      // prompt in full, so cache_prompt only changes speed: bloomery always reuses.
      f.boolean("cache_prompt");
      const idSlot = f.integer("id_slot") ?? -1;
      f.unsupported("n_probs", (v) => v === 0);
      f.unsupported("ignore_eos", (v) => v === false);
      f.finish();

      const options = { ...sampling, maxTokens, stop };
      const signal = clientSignal(reply);
      const final = (result: SlotRun, content: string) => ({
        index: 0,
        content,
        tokens: returnTokens && content ? result.tokens : [],
        id_slot: result.slot,
        stop: true,
        model: context.modelId,
        tokens_predicted: result.tokens.length,
        tokens_evaluated: prompt.length,
        generation_settings: { n_predict: maxTokens ?? -1, temperature: sampling.temperature, stop: stop ?? [] },
        prompt: promptText,
        has_new_line: result.text.includes("\n"),
        truncated: false,
        stop_type: STOP_TYPES[result.stopReason],
        stopping_word: stoppingWord(model, result, stop),
        tokens_cached: 0,
        timings: llamaTimings(result),
      });

      if (!stream) {
        const result = await context.slots.run(prompt, options, signal, () => {}, idSlot);
        return final(result, result.text);
      }
      const sse = new SseStream(reply);
      await streamReply(sse, signal, async () => {
        let predicted = 0;
        const result = await context.slots.run(
          prompt,
          options,
          signal,
          (piece) => {
            predicted += piece.tokens.length;
            sse.send({
              index: 0,
              content: piece.text,
              tokens: returnTokens ? piece.tokens : [],
              stop: false,
              id_slot: idSlot,
              tokens_predicted: predicted,
              tokens_evaluated: prompt.length,
            });
          },
          idSlot,
        );
        if (signal.aborted) throw new Error("client gone");
        sse.send(final(result, ""));
        sse.end();
      });
    });
  }
}
