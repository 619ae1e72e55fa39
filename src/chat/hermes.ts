/**
 * Qwen3 / Hermes tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
 * @module
 */
import { isPlainObject } from "./holdback.js";
import type { ToolCall } from "./types.js";

/** A call from a JSON object with a string `name` and an object of `arguments` (or `parameters`). */
export function callFromJson(value: unknown): Omit<ToolCall, "id"> | undefined {
  if (!isPlainObject(value) || typeof value.name !== "string" || !value.name) return undefined;
  let args = value.arguments ?? value.parameters ?? {};
  // Some models write the arguments as a JSON string, as OpenAI's API sends them.
  if (typeof args === "string") {
    try {
      args = JSON.parse(args);
    } catch {
      return undefined;
    }
  }
  return isPlainObject(args) ? { name: value.name, arguments: args } : undefined;
}

/** The body of a Hermes block: one JSON object. */
export function parseHermesBody(body: string): Omit<ToolCall, "id"> | undefined {
  try {
    return callFromJson(JSON.parse(body));
  } catch {
    return undefined;
  }
}
