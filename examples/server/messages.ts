// Conversations from OpenAI's and Anthropic's request shapes, as the SDK's chat messages: text,
// reasoning, tool calls and tool results. Images and audio are refused by name.
import type { ChatMessage, ToolCall } from "../../src/index.js";
import { badField, HttpError } from "./errors.js";
import { Fields, isObject } from "./fields.js";

/**
 * OpenAI's `messages`: content as a string or an array of `{type: "text", text}` parts (absent
 * or null in an assistant message that calls tools), `tool_calls` with their arguments as JSON
 * text, `tool_call_id` and `name` of tool messages, and llama-server's `reasoning_content`.
 */
export function openAiMessages(value: unknown): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0) throw badField("messages", "must be a non-empty array");
  return value.map((message, i) => {
    const f = new Fields(message, `messages[${i}].`);
    const role = f.string("role");
    if (!role) throw f.bad("role", "must be a non-empty string");
    const toolCalls = f.array("tool_calls")?.map((call, j) => openAiToolCall(call, `${f.prefix}tool_calls[${j}].`));
    const content = role === "assistant" && !f.has("content") ? "" : textContent(f, "content", "text");
    const out: ChatMessage = { role, content };
    if (toolCalls && toolCalls.length > 0) out.toolCalls = toolCalls;
    const toolCallId = f.string("tool_call_id");
    if (toolCallId !== undefined) out.toolCallId = toolCallId;
    const name = f.string("name");
    if (name !== undefined) out.name = name;
    const reasoning = f.string("reasoning_content");
    if (reasoning !== undefined) out.reasoning = reasoning;
    f.finish();
    return out;
  });
}

function openAiToolCall(value: unknown, prefix: string): ToolCall {
  const f = new Fields(value, prefix);
  const id = f.string("id") ?? "";
  const type = f.string("type");
  if (type !== undefined && type !== "function") throw f.bad("type", 'must be "function"');
  const fn = new Fields(f.object("function") ?? {}, `${prefix}function.`);
  const name = fn.string("name");
  if (!name) throw fn.bad("name", "must be a non-empty string");
  const text = fn.string("arguments") ?? "{}";
  fn.finish();
  f.finish();
  return { id, name, arguments: jsonObject(text, () => fn.bad("arguments", "must be a JSON object, as text")) };
}

function jsonObject(text: string, bad: () => Error): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw bad();
  }
  if (!isObject(value)) throw bad();
  return value;
}

/**
 * Anthropic's `system` (a string or text blocks) and `messages`, whose content blocks may be
 * `text`, `thinking` and `tool_use` (assistant) or `tool_result` (user: each becomes a tool message).
 */
export function anthropicMessages(system: unknown, value: unknown): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (system !== undefined && system !== null) {
    out.push({ role: "system", content: textContent(new Fields({ system }), "system", "text") });
  }
  // An empty conversation is rendered as it is (the system prompt, if any), as llama-server accepts it.
  if (!Array.isArray(value)) throw badField("messages", "must be an array");
  value.forEach((message, i) => {
    const f = new Fields(message, `messages[${i}].`);
    const role = f.string("role");
    if (role !== "user" && role !== "assistant") throw f.bad("role", 'must be "user" or "assistant"');
    const content = f.raw("content");
    if (typeof content === "string") {
      out.push({ role, content });
    } else if (Array.isArray(content)) {
      out.push(...anthropicBlocks(role, content, `${f.prefix}content`));
    } else {
      throw f.bad("content", "must be a string or an array of content blocks");
    }
    f.finish();
  });
  return out;
}

/** The blocks of one Anthropic message, in order: tool results first become tool messages. */
function anthropicBlocks(role: "user" | "assistant", blocks: unknown[], where: string): ChatMessage[] {
  const out: ChatMessage[] = [];
  const message: ChatMessage = { role, content: "" };
  const toolCalls: ToolCall[] = [];
  blocks.forEach((block, j) => {
    const p = new Fields(block, `${where}[${j}].`);
    const type = p.string("type");
    // Anthropic's prompt-caching hint changes nothing for a local engine.
    p.raw("cache_control");
    if (type === "text") {
      const text = requiredString(p, "text");
      message.content += message.content ? PART_DELIMITER + text : text;
      p.raw("citations");
    } else if (type === "thinking" && role === "assistant") {
      message.reasoning = (message.reasoning ?? "") + requiredString(p, "thinking");
      // Signatures guard Anthropic's own thinking blocks; a local model has nothing to check them against.
      p.string("signature");
    } else if (type === "tool_use" && role === "assistant") {
      const input = p.object("input") ?? {};
      toolCalls.push({ id: requiredString(p, "id"), name: requiredString(p, "name"), arguments: input });
    } else if (type === "tool_result" && role === "user") {
      const id = requiredString(p, "tool_use_id");
      const result = p.raw("content");
      const text = result === undefined ? "" : typeof result === "string" ? result : textContent(p, "content", "text");
      const isError = p.boolean("is_error") ?? false;
      out.push({ role: "tool", content: isError ? `Error: ${text}` : text, toolCallId: id });
    } else {
      refuseMedia(type);
      throw p.bad("type", `${JSON.stringify(type)} is not supported in a ${role} message`);
    }
    p.finish();
  });
  if (toolCalls.length > 0) message.toolCalls = toolCalls;
  if (message.content || message.reasoning !== undefined || toolCalls.length > 0 || out.length === 0) out.push(message);
  return out;
}

function requiredString(p: Fields, name: string): string {
  const value = p.string(name);
  if (value === undefined) throw p.bad(name, "must be a string");
  return value;
}

/**
 * An image or audio part: refused as llama-server refuses it for a model without a multimodal projector (500,
 * "image input is not supported"), the part being well-formed and the server unable to take it.
 */
function refuseMedia(type: string | undefined): void {
  if (type === "image" || type === "image_url" || type === "input_image") {
    throw new HttpError(500, "image input is not supported: bloomery-serve takes text only");
  }
  if (type === "input_audio" || type === "audio") {
    throw new HttpError(500, "audio input is not supported: bloomery-serve takes text only");
  }
}

/** Between the text parts of one message, as llama.cpp joins them for a template that reads text. */
const PART_DELIMITER = "\n\n";

/** A string, or an array of text parts joined; any other kind of part is refused by its type. */
function textContent(f: Fields, name: string, textType: string): string {
  const value = f.raw(name);
  if (typeof value === "string") return value;
  if (!Array.isArray(value)) throw f.bad(name, "must be a string or an array of content parts");
  return value
    .map((part, j) => {
      const p = new Fields(part, `${f.prefix}${name}[${j}].`);
      const type = p.string("type");
      refuseMedia(type);
      if (type !== textType) throw p.bad("type", `${JSON.stringify(type)} is not supported yet (only "${textType}")`);
      const text = p.string("text");
      if (text === undefined) throw p.bad("text", "must be a string");
      p.raw("cache_control");
      p.finish();
      return text;
    })
    .join(PART_DELIMITER);
}
