/**
 * The values tool calls are made of: their ids, and their name and arguments read from JSON.
 * @module
 */
import { randomBytes } from "node:crypto";
import type { ToolCall } from "./types.js";

const ID_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/** A tool-call id as OpenAI spells them: `call_` and 24 random letters and digits. */
export function randomToolCallId(): string {
  const bytes = randomBytes(24);
  let id = "call_";
  for (const byte of bytes) id += ID_LETTERS[byte % ID_LETTERS.length];
  return id;
}

/** A plain object (not an array, not null). */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

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
