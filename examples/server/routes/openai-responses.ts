// POST /v1/responses (and /responses): OpenAI's Responses API, what Codex-style clients speak (with llama-server's
// sampling fields, timings_per_token and return_progress beside OpenAI's). The request's
// `input` items become a chat (messages, function calls and their outputs), served as chat completions are; the
// answer is a response object whose `output` holds the reasoning, the message and the function calls, streamed as
// the API's typed events (response.created ... response.completed).
import type { FastifyInstance } from "fastify";
import type { ChatChunk, ToolCall } from "../../../src/index.js";
import type { ServerContext } from "../context.js";
import { badField } from "../errors.js";
import { Fields, isObject, withoutKeys, type JsonObject } from "../fields.js";
import { llamaTimings, responseId, unixSeconds } from "../responses.js";
import { SAMPLING_FIELDS } from "../sampling.js";
import type { PromptProgress, SlotChat } from "../slots.js";
import { clientSignal, SseStream, streamReply } from "../sse.js";
import { RunClock } from "./llama-native.js";
import { readChatRequest, renderChatRequest, runChat } from "./openai-chat.js";

/** The Responses API's input items as OpenAI chat messages (the shape the chat endpoints read). */
function inputMessages(input: unknown, instructions: string | undefined): JsonObject[] {
  const messages: JsonObject[] = instructions !== undefined ? [{ role: "system", content: instructions }] : [];
  if (typeof input === "string") return [...messages, { role: "user", content: input }];
  if (!Array.isArray(input) || input.length === 0)
    throw badField("input", "must be a text or a non-empty array of items");
  let reasoning: string | undefined;
  input.forEach((item, i) => {
    if (!isObject(item)) throw badField(`input[${i}]`, "must be an object");
    const type = item.type ?? "message";
    const last = messages.at(-1);
    if (type === "message") {
      const role = item.role === "developer" ? "system" : item.role;
      const content = typeof item.content === "string" ? item.content : partsText(item.content, `input[${i}].content`);
      messages.push({ role, content, ...(role === "assistant" && reasoning ? { reasoning_content: reasoning } : {}) });
      if (role === "assistant") reasoning = undefined;
    } else if (type === "function_call") {
      const call = { id: item.call_id, type: "function", function: { name: item.name, arguments: item.arguments } };
      if (last?.role === "assistant" && (Array.isArray(last.tool_calls) || last.content === "")) {
        last.tool_calls = [...((last.tool_calls as unknown[] | undefined) ?? []), call];
      } else {
        messages.push({
          role: "assistant",
          content: "",
          tool_calls: [call],
          ...(reasoning ? { reasoning_content: reasoning } : {}),
        });
        reasoning = undefined;
      }
    } else if (type === "function_call_output") {
      const output = typeof item.output === "string" ? item.output : partsText(item.output, `input[${i}].output`);
      messages.push({ role: "tool", tool_call_id: item.call_id, content: output });
    } else if (type === "reasoning") {
      // A client sends the model's reasoning back with the turn it preceded.
      reasoning = partsText(item.content ?? [], `input[${i}].content`);
    } else {
      throw badField(`input[${i}].type`, `${JSON.stringify(type)} is not supported by bloomery-serve`);
    }
  });
  return messages;
}

/** The text of content parts (input_text, output_text, reasoning_text); an image or a file is refused by name. */
function partsText(parts: unknown, field: string): string {
  if (!Array.isArray(parts)) throw badField(field, "must be a text or an array of content parts");
  return parts
    .map((part, j) => {
      if (!isObject(part) || typeof part.text !== "string" || !String(part.type).endsWith("_text")) {
        throw badField(
          `${field}[${j}]`,
          "must be a text part (input_text, output_text): bloomery-serve takes no images or files",
        );
      }
      return part.text;
    })
    .join("");
}

/** The Responses API's function tools ({type, name, description, parameters}) as chat tools. */
function chatTools(tools: unknown): JsonObject[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) throw badField("tools", "must be an array");
  return tools.map((tool, i) => {
    if (!isObject(tool) || tool.type !== "function") {
      throw badField(`tools[${i}].type`, 'must be "function": bloomery-serve runs no built-in tools');
    }
    return { type: "function", function: withoutKeys(tool, ["type"]) };
  });
}

function chatToolChoice(choice: unknown): unknown {
  if (isObject(choice) && choice.type === "function") return { type: "function", function: { name: choice.name } };
  return choice;
}

/** `text.format` as chat's response_format. */
function chatResponseFormat(text: unknown): unknown {
  if (!isObject(text)) return undefined;
  const format = text.format;
  if (!isObject(format) || format.type === "text") return undefined;
  if (format.type === "json_schema") {
    return { type: "json_schema", json_schema: withoutKeys(format, ["type"]) };
  }
  return format;
}

function functionCallItem(call: ToolCall, status: string) {
  return {
    type: "function_call",
    id: `fc_${call.id}`,
    call_id: call.id,
    name: call.name,
    arguments: JSON.stringify(call.arguments),
    status,
  };
}

export function registerOpenAiResponses(app: FastifyInstance, context: ServerContext): void {
  for (const path of ["/v1/responses", "/responses"]) {
    app.post(path, async (request, reply) => {
      const body = new Fields(request.body);
      const model = body.string("model");
      const instructions = body.string("instructions");
      const messages = inputMessages(body.raw("input"), instructions);
      const stream = body.boolean("stream") ?? false;
      const maxTokens = body.integer("max_output_tokens", { min: 1 });
      // The response is not kept: each request carries its whole conversation, as a client with store: false sends it.
      body.boolean("store");
      if (body.has("previous_response_id")) {
        throw body.bad(
          "previous_response_id",
          "is not supported: bloomery-serve keeps no responses; send the whole input",
        );
      }
      body.object("metadata");
      body.string("user");
      const truncation = body.string("truncation");
      if (truncation !== undefined && truncation !== "disabled") throw body.bad("truncation", 'must be "disabled"');
      const reasoning = body.object("reasoning");
      const timingsPerToken = body.boolean("timings_per_token") ?? false;
      const returnProgress = body.boolean("return_progress") ?? false;
      const chatBody: JsonObject = {
        messages,
        ...Object.fromEntries(
          [...SAMPLING_FIELDS.filter((name) => name !== "response_format"), "parallel_tool_calls", "stop"]
            .filter((name) => body.has(name))
            .map((name) => [name, body.raw(name)]),
        ),
        ...(body.has("tools") ? { tools: chatTools(body.raw("tools")) } : {}),
        ...(body.has("tool_choice") ? { tool_choice: chatToolChoice(body.raw("tool_choice")) } : {}),
        ...(chatResponseFormat(body.raw("text")) ? { response_format: chatResponseFormat(body.raw("text")) } : {}),
        ...(reasoning?.effort === "none" ? { chat_template_kwargs: { enable_thinking: false } } : {}),
      };
      body.finish();
      const f = new Fields(chatBody);
      const read = readChatRequest(context, f, f.raw("messages"), maxTokens);
      f.finish();
      const chat = await renderChatRequest(context, read);

      const signal = clientSignal(reply);
      const id = responseId("resp_");
      const messageId = responseId("msg_");
      const reasoningId = responseId("rs_");
      const created = unixSeconds();
      const response = (status: string, output: unknown[], result?: SlotChat) => ({
        id,
        object: "response",
        created_at: created,
        status,
        model: model ?? context.modelId,
        output,
        parallel_tool_calls: chat.options.parallelToolCalls ?? true,
        tool_choice: chat.options.toolChoice ?? "auto",
        tools:
          (chatBody.tools as JsonObject[] | undefined)?.map((t) => ({
            type: "function",
            ...(t.function as JsonObject),
          })) ?? [],
        temperature: chat.options.temperature ?? null,
        top_p: chat.options.topP ?? null,
        max_output_tokens: maxTokens ?? null,
        instructions: instructions ?? null,
        metadata: {},
        error: null,
        incomplete_details:
          result && (result.stopReason === "maxTokens" || result.stopReason === "contextFull")
            ? { reason: "max_output_tokens" }
            : null,
        usage: result
          ? {
              input_tokens: result.timings.promptTokens + result.timings.cachedPromptTokens,
              input_tokens_details: { cached_tokens: result.timings.cachedPromptTokens },
              output_tokens: result.tokens.length,
              output_tokens_details: { reasoning_tokens: 0 },
              total_tokens: result.timings.promptTokens + result.timings.cachedPromptTokens + result.tokens.length,
            }
          : null,
      });
      const reasoningItem = (text: string, status: string) => ({
        type: "reasoning",
        id: reasoningId,
        status,
        summary: [],
        content: [{ type: "reasoning_text", text }],
      });
      const messageItem = (text: string, status: string) => ({
        type: "message",
        id: messageId,
        status,
        role: "assistant",
        content: [{ type: "output_text", text, annotations: [], logprobs: [] }],
      });
      const outputOf = (result: SlotChat) => {
        const { content, reasoning: thought, toolCalls } = result.message;
        return [
          ...(thought ? [reasoningItem(thought, "completed")] : []),
          ...(content || !toolCalls ? [messageItem(content, "completed")] : []),
          ...(toolCalls ?? []).map((call) => functionCallItem(call, "completed")),
        ];
      };
      const statusOf = (result: SlotChat) =>
        result.stopReason === "maxTokens" || result.stopReason === "contextFull" ? "incomplete" : "completed";

      if (!stream) {
        const result = await runChat(context, chat, chat.options, signal, () => {}, {});
        return response(statusOf(result), outputOf(result), result);
      }

      const sse = new SseStream(reply);
      let sequence = 0;
      const clock = new RunClock();
      let cached = 0;
      const send = (type: string, data: Record<string, unknown>, withTimings = false) =>
        sse.send(
          {
            type,
            sequence_number: sequence++,
            ...data,
            ...(withTimings && timingsPerToken ? { timings: clock.timings(chat.prompt.length - cached, cached) } : {}),
          },
          type,
        );
      await streamReply(
        sse,
        signal,
        async () => {
          send("response.created", { response: response("in_progress", []) });
          send("response.in_progress", { response: response("in_progress", []) });
          // Output items in order: each opens when its first piece comes and closes when another kind begins.
          let index = -1;
          let open: "reasoning" | "message" | undefined;
          let text = "";
          const close = () => {
            if (open === "reasoning") {
              send("response.reasoning_text.done", {
                item_id: reasoningId,
                output_index: index,
                content_index: 0,
                text,
              });
              send("response.output_item.done", { output_index: index, item: reasoningItem(text, "completed") });
            } else if (open === "message") {
              const part = { type: "output_text", text, annotations: [], logprobs: [] };
              send("response.output_text.done", {
                item_id: messageId,
                output_index: index,
                content_index: 0,
                text,
                logprobs: [],
              });
              send("response.content_part.done", { item_id: messageId, output_index: index, content_index: 0, part });
              send("response.output_item.done", { output_index: index, item: messageItem(text, "completed") });
            }
            open = undefined;
            text = "";
          };
          const begin = (kind: "reasoning" | "message") => {
            if (open === kind) return;
            close();
            open = kind;
            index++;
            if (kind === "reasoning") {
              send("response.output_item.added", { output_index: index, item: reasoningItem("", "in_progress") });
            } else {
              send("response.output_item.added", { output_index: index, item: messageItem("", "in_progress") });
              send("response.content_part.added", {
                item_id: messageId,
                output_index: index,
                content_index: 0,
                part: { type: "output_text", text: "", annotations: [], logprobs: [] },
              });
            }
          };
          const onChunk = (piece: ChatChunk) => {
            clock.token(piece.tokens.length);
            if (piece.reasoning) {
              begin("reasoning");
              text += piece.reasoning;
              send(
                "response.reasoning_text.delta",
                { item_id: reasoningId, output_index: index, content_index: 0, delta: piece.reasoning },
                true,
              );
            }
            if (piece.text) {
              begin("message");
              text += piece.text;
              send(
                "response.output_text.delta",
                { item_id: messageId, output_index: index, content_index: 0, delta: piece.text, logprobs: [] },
                true,
              );
            }
            for (const call of piece.toolCalls ?? []) {
              close();
              index++;
              const item = functionCallItem(call, "in_progress");
              send("response.output_item.added", { output_index: index, item: { ...item, arguments: "" } });
              send("response.function_call_arguments.delta", {
                item_id: item.id,
                output_index: index,
                delta: item.arguments,
              });
              send("response.function_call_arguments.done", {
                item_id: item.id,
                output_index: index,
                name: call.name,
                arguments: item.arguments,
              });
              send("response.output_item.done", { output_index: index, item: { ...item, status: "completed" } });
            }
          };
          const progress = returnProgress
            ? {
                batchSize: context.config.batchSize ?? 2048,
                report: (p: PromptProgress) => {
                  cached = p.cache;
                  send("response.in_progress", { response: response("in_progress", []), prompt_progress: p }, true);
                },
              }
            : undefined;
          const result = await runChat(context, chat, chat.options, signal, onChunk, progress ? { progress } : {});
          if (signal.aborted) throw new Error("client gone");
          close();
          const done = response(statusOf(result), outputOf(result), result);
          sse.send(
            {
              type: "response.completed",
              sequence_number: sequence++,
              response: done,
              timings: llamaTimings(result),
            },
            "response.completed",
          );
          sse.end();
        },
        "error",
      );
    });
  }
}
