// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API (text only so far),
// streamed as Anthropic's event sequence.
import type { FastifyInstance } from "fastify";
import type { ChatMessage, StopReason } from "../../../src/index.js";
import type { ServerContext } from "../context.js";
import { badField } from "../errors.js";
import { Fields, isObject } from "../fields.js";
import { anthropicMessages } from "../messages.js";
import { promptTokens, responseId, stoppingWord } from "../responses.js";
import { readSampling } from "../sampling.js";
import type { SlotRun } from "../slots.js";
import { clientSignal, SseStream, streamReply } from "../sse.js";

const STOP_REASONS: Record<StopReason, string> = {
  eos: "end_turn",
  stop: "stop_sequence",
  maxTokens: "max_tokens",
  contextFull: "max_tokens",
  abort: "end_turn",
};

/** The conversation and the fields both endpoints take. */
function readConversation(f: Fields): ChatMessage[] {
  f.string("model");
  const messages = anthropicMessages(f.raw("system"), f.raw("messages"));
  f.unsupported("tools", (v) => Array.isArray(v) && v.length === 0);
  f.unsupported("tool_choice", (v) => isObject(v) && v.type === "none");
  f.unsupported("thinking", (v) => isObject(v) && v.type === "disabled");
  return messages;
}

export function registerAnthropic(app: FastifyInstance, context: ServerContext): void {
  app.post("/v1/messages/count_tokens", async (request) => {
    const model = context.model;
    const f = new Fields(request.body);
    const messages = readConversation(f);
    f.finish();
    return { input_tokens: promptTokens(model, model.applyChatTemplate(messages)).length };
  });

  app.post("/v1/messages", async (request, reply) => {
    const model = context.model;
    const f = new Fields(request.body);
    const messages = readConversation(f);
    const maxTokens = f.integer("max_tokens", { min: 1 });
    if (maxTokens === undefined) throw badField("max_tokens", "is required");
    const stop = f.strings("stop_sequences");
    const stream = f.boolean("stream") ?? false;
    const sampling = readSampling(f, { temperature: context.config.temperature, vocabSize: model.info.vocabSize }, [
      "top_k",
      "top_p",
    ]);
    // Anthropic's metadata (user_id) describes the caller; it does not change the answer.
    f.object("metadata");
    f.finish();

    const prompt = promptTokens(model, model.applyChatTemplate(messages));
    const options = { ...sampling, maxTokens, stop };
    const signal = clientSignal(reply);
    const message = { id: responseId("msg_"), type: "message", role: "assistant", model: context.modelId };
    const ending = (result: SlotRun) => ({
      stop_reason: STOP_REASONS[result.stopReason],
      stop_sequence: result.stopReason === "stop" ? stoppingWord(model, result, stop) : null,
    });

    if (!stream) {
      const result = await context.slots.run(prompt, options, signal, () => {});
      return {
        ...message,
        content: [{ type: "text", text: result.text }],
        ...ending(result),
        usage: { input_tokens: prompt.length, output_tokens: result.tokens.length },
      };
    }
    const sse = new SseStream(reply);
    const send = (type: string, data: Record<string, unknown> = {}) => sse.send({ type, ...data }, type);
    const start = () => {
      if (sse.open) return;
      send("message_start", {
        message: {
          ...message,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: prompt.length, output_tokens: 0 },
        },
      });
      send("content_block_start", { index: 0, content_block: { type: "text", text: "" } });
    };
    await streamReply(
      sse,
      signal,
      async () => {
        const result = await context.slots.run(prompt, options, signal, (piece) => {
          start();
          if (piece.text) send("content_block_delta", { index: 0, delta: { type: "text_delta", text: piece.text } });
        });
        if (signal.aborted) throw new Error("client gone");
        start();
        send("content_block_stop", { index: 0 });
        send("message_delta", { delta: ending(result), usage: { output_tokens: result.tokens.length } });
        send("message_stop");
        sse.end();
      },
      "error",
    );
  });
}
