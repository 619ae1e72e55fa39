// POST /v1/chat/completions (and /chat/completions): OpenAI's chat API, streamed as llama-server
// streams it (a first delta with the role, reasoning_content / content / tool_calls deltas, a last
// chunk with finish_reason, a usage chunk, then [DONE]); `n` answers run on the slots together.
// POST /chat/completions/input_tokens counts a conversation's prompt tokens.
import type { FastifyInstance } from "fastify";
import type { ChatChunk, ChatResult, TokenLogprobs, ToolCall } from "../../../src/index.js";
import type { ChatMessage } from "../../../src/index.js";
import { checkJinja, chatKwargs, readChatShape, renderChat, type ChatPrompt, type ChatShape } from "../chat-request.js";
import { REASONING_FORMATS, type ServerContext } from "../context.js";
import { Fields, withoutKeys } from "../fields.js";
import { openAiMessages } from "../messages.js";
import { finishReason, llamaTimings, responseId, SYSTEM_FINGERPRINT, unixSeconds } from "../responses.js";
import { openAiLogprobs, readLogprobs, readMaxTokens, readSampling, samplingDefaults } from "../sampling.js";
import type { PromptProgress, ServeOptions, SlotChat } from "../slots.js";
import { clientSignal, SseStream, streamReply } from "../sse.js";
import { readOpenAiTools, type ToolOptions } from "../tools.js";
import { requestMaxTokens, RunClock } from "./llama-native.js";
import { readOpenAiCommon } from "./openai-completions.js";

/** A tool call as OpenAI's message carries it: arguments as JSON text. */
function openAiToolCall(call: ToolCall) {
  return { type: "function", id: call.id, function: { name: call.name, arguments: JSON.stringify(call.arguments) } };
}

/**
 * The deltas of one chat chunk, as llama-server streams them: reasoning first, then content, then
 * each tool call as two deltas (its index, id, type and name with empty arguments, then its
 * arguments). `callsSoFar` is the number of calls streamed before this chunk.
 */
export function openAiChatDeltas(chunk: ChatChunk, callsSoFar: number): Record<string, unknown>[] {
  const deltas: Record<string, unknown>[] = [];
  if (chunk.reasoning) deltas.push({ reasoning_content: chunk.reasoning });
  if (chunk.text) deltas.push({ content: chunk.text });
  (chunk.toolCalls ?? []).forEach((call, i) => {
    const index = callsSoFar + i;
    deltas.push({
      tool_calls: [{ index, id: call.id, type: "function", function: { name: call.name, arguments: "" } }],
    });
    deltas.push({ tool_calls: [{ index, function: { arguments: JSON.stringify(call.arguments) } }] });
  });
  return deltas;
}

/** OpenAI's reasoning_effort levels that gpt-oss's template knows. */
const REASONING_EFFORTS = ["low", "medium", "high"] as const;

/** A chat request as its fields give it, before its prompt is rendered. */
export interface ChatFields {
  messages: ChatMessage[];
  shape: ChatShape;
  tools: ToolOptions["tools"];
  templateKwargs: Record<string, unknown>;
  options: Parameters<ServerContext["slots"]["chat"]>[2];
}

/** A chat request, read: its prompt, the tools it offers and how it runs. */
export interface ChatRequest extends ChatPrompt {
  tools: ToolOptions["tools"];
  options: Parameters<ServerContext["slots"]["chat"]>[2];
}

/** Reads the conversation, tools, sampling and chat options every OpenAI-style chat endpoint takes. */
export function readChatRequest(
  context: ServerContext,
  f: Fields,
  messagesField: unknown,
  maxTokens: number | undefined,
): ChatFields {
  const messages = openAiMessages(messagesField);
  const toolOptions = readOpenAiTools(f);
  const tools = toolOptions.toolChoice === "none" ? undefined : toolOptions.tools;
  checkJinja(context, tools);
  const effort = f.string("reasoning_effort");
  if (effort !== undefined && !REASONING_EFFORTS.some((level) => level === effort)) {
    throw f.bad("reasoning_effort", `must be one of ${REASONING_EFFORTS.join(", ")}`);
  }
  // OpenAI's reasoning_effort is a template variable (gpt-oss's templates read it), over chat_template_kwargs'.
  const requested = f.object("chat_template_kwargs");
  const templateKwargs = chatKwargs(
    context,
    tools,
    effort === undefined ? requested : { ...requested, reasoning_effort: effort },
  );
  const shape = readChatShape(f, messages);
  const stop = f.strings("stop");
  const sampling = readSampling(f, samplingDefaults(context));
  const reasoningFormat = f.string("reasoning_format") ?? context.config.reasoningFormat ?? "auto";
  if (!REASONING_FORMATS.some((format) => format === reasoningFormat)) {
    throw f.bad("reasoning_format", `must be one of ${REASONING_FORMATS.join(", ")}`);
  }
  return {
    messages,
    shape,
    tools,
    templateKwargs,
    options: {
      ...sampling,
      ...toolOptions,
      maxTokens: requestMaxTokens(context, maxTokens),
      stop,
      templateKwargs,
      parseReasoning: reasoningFormat !== "none",
    },
  };
}

/** The request with its prompt rendered and tokenized (off the event loop). */
export async function renderChatRequest(context: ServerContext, read: ChatFields): Promise<ChatRequest> {
  const rendered = await renderChat(context, read.messages, read.shape, read.tools, read.templateKwargs);
  return { ...rendered, tools: read.tools, options: read.options };
}

/**
 * Runs a chat on a slot: through Session.chat, or, for a prefilled answer, as a generation that continues the
 * rendered prompt (its text is the answer; a prefill asks for text, not tool calls).
 */
export async function runChat(
  context: ServerContext,
  request: ChatRequest,
  options: ChatRequest["options"],
  signal: AbortSignal,
  onChunk: (chunk: ChatChunk) => void,
  serve: ServeOptions,
): Promise<SlotChat> {
  if (request.prefill === undefined) {
    return context.slots.chat(request.messages, request.prompt, options, signal, onChunk, serve);
  }
  const generate = withoutKeys(options, [
    "tools",
    "toolChoice",
    "parallelToolCalls",
    "templateKwargs",
    "parseReasoning",
    "toolCallFormat",
    "contextOverflow",
  ]);
  const result = await context.slots.run(request.prompt, generate, signal, onChunk, serve);
  const message: ChatResult["message"] = { role: "assistant", content: result.text };
  return { ...result, message, droppedMessages: 0 };
}

export function registerOpenAiChat(app: FastifyInstance, context: ServerContext): void {
  for (const path of ["/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"]) {
    app.post(path, async (request) => {
      const f = new Fields(request.body);
      f.string("model");
      const read = readChatRequest(context, f, f.raw("messages"), undefined);
      f.finish();
      const chat = await renderChatRequest(context, read);
      return { input_tokens: chat.prompt.length };
    });
  }

  for (const path of ["/v1/chat/completions", "/chat/completions"]) {
    app.post(path, async (request, reply) => {
      const model = context.model;
      const f = new Fields(request.body);
      const { stream, includeUsage, idSlot, reusePrefix, n } = readOpenAiCommon(f);
      const maxTokens = readMaxTokens(f, ["max_completion_tokens", "max_tokens", "n_predict"]);
      const read = readChatRequest(context, f, f.raw("messages"), maxTokens);
      const logprobs = readLogprobs(f, "chat");
      const timingsPerToken = f.boolean("timings_per_token") ?? false;
      const returnProgress = f.boolean("return_progress") ?? false;
      const verbose = (f.boolean("verbose") ?? false) || context.config.verbose === true;
      f.finish();
      if (n > 1 && stream) throw f.bad("n", "above 1 is not streamed by bloomery-serve: ask for stream: false");
      const chat = await renderChatRequest(context, read);

      const options = { ...chat.options, ...(logprobs !== undefined ? { logprobs } : {}) };
      const signal = clientSignal(reply);
      const id = responseId("chatcmpl-");
      const created = unixSeconds();
      const head = { id, created, model: context.modelId, system_fingerprint: SYSTEM_FINGERPRINT };
      const usage = (result: SlotChat) => ({
        completion_tokens: result.tokens.length,
        prompt_tokens: result.timings.promptTokens + result.timings.cachedPromptTokens,
        total_tokens: result.timings.promptTokens + result.timings.cachedPromptTokens + result.tokens.length,
        prompt_tokens_details: { cached_tokens: result.timings.cachedPromptTokens },
      });
      const verboseOf = (content: string) => (verbose ? { __verbose: { prompt: chat.text, content } } : {});

      if (!stream) {
        const results = await Promise.all(
          Array.from({ length: n }, () => runChat(context, chat, options, signal, () => {}, { idSlot, reusePrefix })),
        );
        const choices = results.map((result, index) => {
          const { content, reasoning, toolCalls } = result.message;
          const message: Record<string, unknown> = {
            role: "assistant",
            content: toolCalls && !content ? null : content,
          };
          if (reasoning) message.reasoning_content = reasoning;
          if (toolCalls) message.tool_calls = toolCalls.map(openAiToolCall);
          return {
            index,
            finish_reason: toolCalls ? "tool_calls" : finishReason(result.stopReason),
            message,
            ...(result.logprobs && { logprobs: openAiLogprobs(model, result.logprobs) }),
          };
        });
        const first = results[0]!;
        const total = results.reduce((sum, r) => sum + r.tokens.length, 0);
        return {
          ...head,
          object: "chat.completion",
          choices,
          usage: { ...usage(first), completion_tokens: total, total_tokens: usage(first).prompt_tokens + total },
          timings: llamaTimings(first),
          ...verboseOf(first.message.content),
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
        const clock = new RunClock();
        let cached = 0;
        const timings = () => (timingsPerToken ? { timings: clock.timings(chat.prompt.length - cached, cached) } : {});
        const sendRole = () => {
          if (!sse.open) sse.send(chunk({ role: "assistant", content: null }));
        };
        const progress = returnProgress
          ? {
              batchSize: context.config.batchSize ?? 2048,
              report: (p: PromptProgress) => {
                cached = p.cache;
                clock.progress(p);
                sendRole();
                sse.send({ ...head, object: "chat.completion.chunk", choices: [], prompt_progress: p, ...timings() });
              },
            }
          : undefined;
        let calls = 0;
        let text = "";
        const result = await runChat(
          context,
          chat,
          options,
          signal,
          (piece) => {
            sendRole();
            clock.token(piece.tokens.length);
            text += piece.text;
            // The piece's logprobs go with its first delta (or alone, when it adds no text).
            const deltas = openAiChatDeltas(piece, calls);
            if (deltas.length === 0 && piece.logprobs?.length) deltas.push({ content: "" });
            deltas.forEach((delta, i) =>
              sse.send({ ...chunk(delta, null, i === 0 ? piece.logprobs : undefined), ...timings() }),
            );
            calls += piece.toolCalls?.length ?? 0;
          },
          { idSlot, reusePrefix, ...(progress ? { progress } : {}) },
        );
        if (signal.aborted) throw new Error("client gone");
        sendRole();
        const finish = calls > 0 ? "tool_calls" : finishReason(result.stopReason);
        sse.send({ ...chunk({}, finish), ...verboseOf(text) });
        if (includeUsage) {
          sse.send({
            ...head,
            object: "chat.completion.chunk",
            choices: [],
            usage: usage(result),
            timings: llamaTimings(result),
          });
        }
        sse.done();
        sse.end();
      });
    });
  }
}
