// POST /v1/chat/completions (and /chat/completions): OpenAI's chat API, streamed as llama-server
// streams it (a first delta with the role, reasoning_content / content / tool_calls deltas, a last
// chunk with finish_reason, a usage chunk when asked, then [DONE]).
import type { FastifyInstance } from "fastify";
import type { ChatChunk, TokenLogprobs, ToolCall } from "../../../src/index.js";
import { REASONING_FORMATS, type ServerContext } from "../context.js";
import { Fields } from "../fields.js";
import { openAiMessages } from "../messages.js";
import { finishReason, llamaTimings, promptTokens, responseId, SYSTEM_FINGERPRINT, unixSeconds } from "../responses.js";
import { openAiLogprobs, readLogprobs, readMaxTokens, readSampling } from "../sampling.js";
import { clientSignal, SseStream, streamReply } from "../sse.js";
import { readOpenAiTools } from "../tools.js";
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

export function registerOpenAiChat(app: FastifyInstance, context: ServerContext): void {
  for (const path of ["/v1/chat/completions", "/chat/completions"]) {
    app.post(path, async (request, reply) => {
      const model = context.model;
      const f = new Fields(request.body);
      const messages = openAiMessages(f.raw("messages"));
      const effort = f.string("reasoning_effort");
      if (effort !== undefined && !REASONING_EFFORTS.some((level) => level === effort)) {
        throw f.bad("reasoning_effort", `must be one of ${REASONING_EFFORTS.join(", ")}`);
      }
      // OpenAI's reasoning_effort is a template variable (gpt-oss's templates read it), over chat_template_kwargs'.
      const requested = f.object("chat_template_kwargs");
      const templateKwargs = context.templateKwargs(
        effort === undefined ? requested : { ...requested, reasoning_effort: effort },
      );
      const { stream, includeUsage, idSlot } = readOpenAiCommon(f);
      const maxTokens = readMaxTokens(f, ["max_completion_tokens", "max_tokens", "n_predict"]);
      const stop = f.strings("stop");
      const sampling = readSampling(f, { temperature: context.config.temperature, vocabSize: model.info.vocabSize });
      const toolOptions = readOpenAiTools(f);
      const reasoningFormat = f.string("reasoning_format") ?? context.config.reasoningFormat ?? "auto";
      if (!REASONING_FORMATS.some((format) => format === reasoningFormat)) {
        throw f.bad("reasoning_format", `must be one of ${REASONING_FORMATS.join(", ")}`);
      }
      const logprobs = readLogprobs(f, "chat");
      f.finish();

      const tools = toolOptions.toolChoice === "none" ? undefined : toolOptions.tools;
      const prompt = await promptTokens(model, await model.applyChatTemplateAsync(messages, { templateKwargs, tools }));
      const options = {
        ...sampling,
        ...toolOptions,
        maxTokens,
        stop,
        logprobs,
        templateKwargs,
        parseReasoning: reasoningFormat !== "none",
      };
      const signal = clientSignal(reply);
      const id = responseId("chatcmpl-");
      const created = unixSeconds();
      const head = { id, created, model: context.modelId, system_fingerprint: SYSTEM_FINGERPRINT };
      const usage = (promptLength: number, completion: number) => ({
        completion_tokens: completion,
        prompt_tokens: promptLength,
        total_tokens: promptLength + completion,
      });

      if (!stream) {
        const result = await context.slots.chat(messages, prompt.length, options, signal, () => {}, idSlot);
        const { content, reasoning, toolCalls } = result.message;
        const message: Record<string, unknown> = { role: "assistant", content: toolCalls && !content ? null : content };
        if (reasoning) message.reasoning_content = reasoning;
        if (toolCalls) message.tool_calls = toolCalls.map(openAiToolCall);
        return {
          ...head,
          object: "chat.completion",
          choices: [
            {
              index: 0,
              finish_reason: toolCalls ? "tool_calls" : finishReason(result.stopReason),
              message,
              ...(result.logprobs && { logprobs: openAiLogprobs(model, result.logprobs) }),
            },
          ],
          usage: usage(result.timings.promptTokens + result.timings.cachedPromptTokens, result.tokens.length),
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
        let calls = 0;
        const result = await context.slots.chat(
          messages,
          prompt.length,
          options,
          signal,
          (piece) => {
            sendRole();
            // The piece's logprobs go with its first delta (or alone, when it adds no text).
            const deltas = openAiChatDeltas(piece, calls);
            if (deltas.length === 0 && piece.logprobs?.length) deltas.push({ content: "" });
            deltas.forEach((delta, i) => sse.send(chunk(delta, null, i === 0 ? piece.logprobs : undefined)));
            calls += piece.toolCalls?.length ?? 0;
          },
          idSlot,
        );
        if (signal.aborted) throw new Error("client gone");
        sendRole();
        const finish = calls > 0 ? "tool_calls" : finishReason(result.stopReason);
        sse.send({ ...chunk({}, finish), timings: llamaTimings(result) });
        if (includeUsage) {
          sse.send({
            ...head,
            object: "chat.completion.chunk",
            choices: [],
            usage: usage(result.timings.promptTokens + result.timings.cachedPromptTokens, result.tokens.length),
          });
        }
        sse.done();
        sse.end();
      });
    });
  }
}
