// POST /v1/chat/completions (and /chat/completions): OpenAI's chat API, streamed as llama-server
// streams it (a first delta with the role, content deltas, a last chunk with finish_reason, a
// usage chunk when asked, then [DONE]).
import type { FastifyInstance } from "fastify";
import type { TokenLogprobs } from "../../../src/index.js";
import type { ServerContext } from "../context.js";
import { Fields } from "../fields.js";
import { openAiMessages } from "../messages.js";
import { finishReason, llamaTimings, promptTokens, responseId, SYSTEM_FINGERPRINT, unixSeconds } from "../responses.js";
import { openAiLogprobs, readLogprobs, readMaxTokens, readSampling } from "../sampling.js";
import { clientSignal, SseStream, streamReply } from "../sse.js";
import { readOpenAiCommon } from "./openai-completions.js";

export function registerOpenAiChat(app: FastifyInstance, context: ServerContext): void {
  for (const path of ["/v1/chat/completions", "/chat/completions"]) {
    app.post(path, async (request, reply) => {
      const model = context.model;
      const f = new Fields(request.body);
      const messages = openAiMessages(f.raw("messages"));
      const templateKwargs = f.object("chat_template_kwargs");
      const { stream, includeUsage } = readOpenAiCommon(f);
      const maxTokens = readMaxTokens(f, ["max_completion_tokens", "max_tokens", "n_predict"]);
      const stop = f.strings("stop");
      const sampling = readSampling(f, { temperature: context.config.temperature, vocabSize: model.info.vocabSize });
      const logprobs = readLogprobs(f, "chat");
      f.unsupported("tools", (v) => Array.isArray(v) && v.length === 0);
      f.unsupported("tool_choice", (v) => v === "none");
      f.finish();

      const prompt = promptTokens(model, model.applyChatTemplate(messages, { templateKwargs }));
      const options = { ...sampling, maxTokens, stop, logprobs };
      const signal = clientSignal(reply);
      const id = responseId("chatcmpl-");
      const created = unixSeconds();
      const head = { id, created, model: context.modelId, system_fingerprint: SYSTEM_FINGERPRINT };
      const usage = (completion: number) => ({
        completion_tokens: completion,
        prompt_tokens: prompt.length,
        total_tokens: prompt.length + completion,
      });

      if (!stream) {
        const result = await context.slots.run(prompt, options, signal, () => {});
        return {
          ...head,
          object: "chat.completion",
          choices: [
            {
              index: 0,
              finish_reason: finishReason(result.stopReason),
              message: { role: "assistant", content: result.text },
              ...(result.logprobs && { logprobs: openAiLogprobs(model, result.logprobs) }),
            },
          ],
          usage: usage(result.tokens.length),
          timings: llamaTimings(result),
        };
      }

      const sse = new SseStream(reply);
      const chunk = (delta: Record<string, unknown>, finish: string | null = null, tokens?: TokenLogprobs[]) => ({
        ...head,
        object: "chat.completion.chunk",
        choices: [
          { index: 0, finish_reason: finish, delta, ...(tokens && { logprobs: openAiLogprobs(model, tokens) }) },
        ],
      });
      await streamReply(sse, signal, async () => {
        const sendRole = () => {
          if (!sse.open) sse.send(chunk({ role: "assistant", content: null }));
        };
        const result = await context.slots.run(prompt, options, signal, (piece) => {
          sendRole();
          if (piece.text || piece.logprobs?.length) sse.send(chunk({ content: piece.text }, null, piece.logprobs));
        });
        if (signal.aborted) throw new Error("client gone");
        sendRole();
        sse.send({ ...chunk({}, finishReason(result.stopReason)), timings: llamaTimings(result) });
        if (includeUsage) {
          sse.send({ ...head, object: "chat.completion.chunk", choices: [], usage: usage(result.tokens.length) });
        }
        sse.done();
        sse.end();
      });
    });
  }
}
