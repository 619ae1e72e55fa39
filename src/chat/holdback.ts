/**
 * Helpers for streaming parsers that must hold back text which could begin a tag until the
 * next piece tells whether it does.
 * @module
 */
import { randomBytes } from "node:crypto";

/** Length of the longest suffix of `text` that is a proper prefix of `tag` (0 when none). */
export function partialTagLength(text: string, tag: string): number {
  for (let n = Math.min(text.length, tag.length - 1); n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}

/** Length of the run of whitespace that ends `text`. */
export function trailingSpaceLength(text: string): number {
  return text.length - text.trimEnd().length;
}

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
