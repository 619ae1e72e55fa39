// Conversations from OpenAI's and Anthropic's request shapes, as the chat template's messages.
// Only text is supported yet: images, audio, tool calls and tool results are refused by name.
import type { ChatMessage } from "../../src/index.js";
import { badField } from "./errors.js";
import { Fields } from "./fields.js";

/** OpenAI's `messages`: content as a string or an array of `{type: "text", text}` parts. */
export function openAiMessages(value: unknown): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0) throw badField("messages", "must be a non-empty array");
  return value.map((message, i) => {
    const f = new Fields(message, `messages[${i}].`);
    const role = f.string("role");
    if (!role) throw f.bad("role", "must be a non-empty string");
    const content = textContent(f, "content", "text");
    f.unsupported("name");
    f.unsupported("tool_calls", (v) => Array.isArray(v) && v.length === 0);
    f.unsupported("tool_call_id");
    f.unsupported("reasoning_content");
    f.finish();
    return { role, content };
  });
}

/** Anthropic's `system` (a string or text blocks) and `messages`. */
export function anthropicMessages(system: unknown, value: unknown): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (system !== undefined && system !== null) {
    out.push({ role: "system", content: textContent(new Fields({ system }), "system", "text") });
  }
  if (!Array.isArray(value) || value.length === 0) throw badField("messages", "must be a non-empty array");
  value.forEach((message, i) => {
    const f = new Fields(message, `messages[${i}].`);
    const role = f.string("role");
    if (role !== "user" && role !== "assistant") throw f.bad("role", 'must be "user" or "assistant"');
    const content = textContent(f, "content", "text");
    f.finish();
    out.push({ role, content });
  });
  return out;
}

/** A string, or an array of text parts joined; any other kind of part is refused by its type. */
function textContent(f: Fields, name: string, textType: string): string {
  const value = f.raw(name);
  if (typeof value === "string") return value;
  if (!Array.isArray(value)) throw f.bad(name, "must be a string or an array of content parts");
  return value
    .map((part, j) => {
      const p = new Fields(part, `${f.prefix}${name}[${j}].`);
      const type = p.string("type");
      if (type !== textType) throw p.bad("type", `${JSON.stringify(type)} is not supported yet (only "${textType}")`);
      const text = p.string("text");
      if (text === undefined) throw p.bad("text", "must be a string");
      // Anthropic's prompt-caching hint changes nothing for a local engine.
      p.raw("cache_control");
      p.finish();
      return text;
    })
    .join("");
}
