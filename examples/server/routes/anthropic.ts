// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, with tools
// (tool_use / tool_result blocks) and thinking blocks, streamed as Anthropic's event sequence.
import type { FastifyInstance } from "fastify";
import type { ChatChunk, ChatMessage, ChatOptions, StopReason, ToolCall } from "../../../src/index.js";
import type { ServerContext } from "../context.js";
import { badField } from "../errors.js";
import { Fields } from "../fields.js";
import { anthropicMessages } from "../messages.js";
import { promptTokens, responseId, stoppingWord } from "../responses.js";
import { readSampling, samplingDefaults } from "../sampling.js";
import type { SlotChat } from "../slots.js";
import { clientSignal, SseStream, streamReply } from "../sse.js";
import { readAnthropicTools, type ToolOptions } from "../tools.js";

const STOP_REASONS: Record<StopReason, string> = {
  eos: "end_turn",
  stop: "stop_sequence",
  maxTokens: "max_tokens",
  contextFull: "max_tokens",
  abort: "end_turn",
};

interface Conversation extends ToolOptions {
  messages: ChatMessage[];
  templateKwargs?: Record<string, unknown>;
  parseReasoning?: boolean;
}

/** The conversation and the fields both endpoints take. */
function readConversation(f: Fields, context: ServerContext): Conversation {
  f.string("model");
  const conversation: Conversation = { messages: anthropicMessages(f.raw("system"), f.raw("messages")) };
  Object.assign(conversation, readAnthropicTools(f));
  const thinking = f.object("thinking");
  if (thinking) {
    const t = new Fields(thinking, "thinking.");
    const type = t.string("type");
    if (type !== "enabled" && type !== "disabled") throw t.bad("type", 'must be "enabled" or "disabled"');
    // The budget guides how long the model thinks; a local model is not trained to follow it.
    if (type === "enabled") t.integer("budget_tokens", { min: 1 });
    t.finish();
    // Templates with a thinking switch (Qwen3's) read it from this variable.
    conversation.templateKwargs = { enable_thinking: type === "enabled" };
  }
  const templateKwargs = context.templateKwargs(conversation.templateKwargs);
  if (templateKwargs) conversation.templateKwargs = templateKwargs;
  if (context.config.reasoningFormat === "none") conversation.parseReasoning = false;
  return conversation;
}

/** The prompt's tokens, as the chat will render it. */
async function chatPrompt(context: ServerContext, c: Conversation): Promise<number[]> {
  const tools = c.toolChoice === "none" ? undefined : c.tools;
  const model = context.model;
  return promptTokens(
    model,
    await model.applyChatTemplateAsync(c.messages, { templateKwargs: c.templateKwargs, tools }),
  );
}

function toolUse(call: ToolCall) {
  return { type: "tool_use", id: call.id, name: call.name, input: call.arguments };
}

type BlockKind = "thinking" | "text" | "tool_use";

/**
 * Anthropic's content-block events from chat chunks: each kind of output opens its own block when
 * it starts (closing the one before), thinking as `thinking_delta`, text as `text_delta`, and
 * each tool call as a tool_use block whose input comes as one `input_json_delta`. A thinking block
 * ends with an (empty) `signature_delta`.
 */
export class AnthropicBlocks {
  #index = -1;
  #open: BlockKind | undefined;

  constructor(readonly send: (type: string, data: Record<string, unknown>) => void) {}

  push(chunk: ChatChunk): void {
    if (chunk.reasoning) {
      this.#start("thinking", { type: "thinking", thinking: "" });
      this.#delta({ type: "thinking_delta", thinking: chunk.reasoning });
    }
    if (chunk.text) {
      this.#start("text", { type: "text", text: "" });
      this.#delta({ type: "text_delta", text: chunk.text });
    }
    for (const call of chunk.toolCalls ?? []) {
      this.#start("tool_use", { type: "tool_use", id: call.id, name: call.name, input: {} }, true);
      this.#delta({ type: "input_json_delta", partial_json: JSON.stringify(call.arguments) });
    }
  }

  /** Closes the last block; an answer with no output at all still gets its (empty) text block. */
  finish(): void {
    if (this.#index < 0) this.#start("text", { type: "text", text: "" });
    this.#close();
  }

  #start(kind: BlockKind, block: Record<string, unknown>, always = false): void {
    if (this.#open === kind && !always) return;
    this.#close();
    this.#open = kind;
    this.send("content_block_start", { index: ++this.#index, content_block: block });
  }

  #delta(delta: Record<string, unknown>): void {
    this.send("content_block_delta", { index: this.#index, delta });
  }

  #close(): void {
    if (this.#open === undefined) return;
    // Anthropic signs its thinking blocks; a local model's have an empty signature, as in the non-streamed answer.
    if (this.#open === "thinking") this.#delta({ type: "signature_delta", signature: "" });
    this.send("content_block_stop", { index: this.#index });
    this.#open = undefined;
  }
}

export function registerAnthropic(app: FastifyInstance, context: ServerContext): void {
  app.post("/v1/messages/count_tokens", async (request) => {
    const f = new Fields(request.body);
    const conversation = readConversation(f, context);
    f.finish();
    return { input_tokens: (await chatPrompt(context, conversation)).length };
  });

  app.post("/v1/messages", async (request, reply) => {
    const model = context.model;
    const f = new Fields(request.body);
    const conversation = readConversation(f, context);
    const maxTokens = f.integer("max_tokens", { min: 1 });
    if (maxTokens === undefined) throw badField("max_tokens", "is required");
    const stop = f.strings("stop_sequences");
    const stream = f.boolean("stream") ?? false;
    const sampling = readSampling(f, samplingDefaults(context), ["top_k", "top_p"]);
    // Anthropic's metadata (user_id) describes the caller; it does not change the answer.
    f.object("metadata");
    f.finish();

    const { messages, ...chat } = conversation;
    const prompt = await chatPrompt(context, conversation);
    const options: Omit<ChatOptions, "signal"> = { ...sampling, ...chat, maxTokens, stop };
    const signal = clientSignal(reply);
    const message = { id: responseId("msg_"), type: "message", role: "assistant", model: context.modelId };
    const ending = (result: SlotChat) => ({
      stop_reason: result.message.toolCalls ? "tool_use" : STOP_REASONS[result.stopReason],
      stop_sequence:
        result.stopReason === "stop" && !result.message.toolCalls ? stoppingWord(model, result, stop) : null,
    });

    if (!stream) {
      const result = await context.slots.chat(messages, prompt, options, signal, () => {});
      const { content, reasoning, toolCalls } = result.message;
      const blocks: Record<string, unknown>[] = [];
      if (reasoning) blocks.push({ type: "thinking", thinking: reasoning, signature: "" });
      if (content || (!reasoning && !toolCalls)) blocks.push({ type: "text", text: content });
      blocks.push(...(toolCalls ?? []).map(toolUse));
      return {
        ...message,
        content: blocks,
        ...ending(result),
        // As llama-server counts them: the prompt tokens evaluated, and those read from the cache.
        usage: {
          cache_read_input_tokens: result.timings.cachedPromptTokens,
          input_tokens: result.timings.promptTokens,
          output_tokens: result.tokens.length,
        },
      };
    }
    const sse = new SseStream(reply);
    const send = (type: string, data: Record<string, unknown> = {}) => sse.send({ type, ...data }, type);
    const blocks = new AnthropicBlocks(send);
    const start = () => {
      if (sse.open) return;
      send("message_start", {
        message: {
          ...message,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { cache_read_input_tokens: 0, input_tokens: prompt.length, output_tokens: 0 },
        },
      });
    };
    await streamReply(
      sse,
      signal,
      async () => {
        const result = await context.slots.chat(messages, prompt, options, signal, (piece) => {
          start();
          blocks.push(piece);
        });
        if (signal.aborted) throw new Error("client gone");
        start();
        blocks.finish();
        send("message_delta", { delta: ending(result), usage: { output_tokens: result.tokens.length } });
        send("message_stop");
        sse.end();
      },
      "error",
    );
  });
}
