/**
 * Qwen3 / Hermes tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
 * @module
 */
import { callFromJson } from "./tool-call-values.js";
import type { ToolCall } from "./types.js";

/** The body of a Hermes block: one JSON object. */
export function parseHermesBody(body: string): Omit<ToolCall, "id"> | undefined {
  try {
    return callFromJson(JSON.parse(body));
  } catch {
    return undefined;
  }
}
