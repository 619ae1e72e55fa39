/**
 * Llama 3.x tool calls: a JSON object `{"name": ..., "parameters": {...}}` (optionally with
 * `"type": "function"`) as the whole start of the answer, or after the `<|python_tag|>` token;
 * several calls may follow one another, separated by whitespace or `;`.
 * @module
 */
import { callFromJson } from "./tool-call-values.js";
import { partialTagLength } from "./holdback.js";
import type { ToolCallDelta, ToolCallIds, ToolCallParser } from "./types.js";

export const PYTHON_TAG = "<|python_tag|>";

/**
 * The end of the JSON object that starts `text` (the index after its closing brace), or -1 while
 * it is still open. Strings and escapes are followed, so braces inside strings do not count.
 */
export function jsonObjectEnd(text: string): number {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

/** "start": nothing but whitespace yet; "calls": between calls; "text": an ordinary answer. */
type State = "start" | "calls" | "text";

/**
 * A Llama 3 answer is either calls or text: it is calls when it starts with a JSON object that is
 * a call (or with `<|python_tag|>`), and text otherwise. An object that is not a call, or is still
 * open at the end, comes back as text, with everything after it.
 */
export class Llama3ToolCallParser implements ToolCallParser {
  #state: State = "start";
  #held = "";
  /** The python tag, when it was read and no call has followed it yet: text after all if none does. */
  #tag = "";

  constructor(readonly newId: ToolCallIds) {}

  push(text: string): ToolCallDelta {
    this.#held += text;
    const out: ToolCallDelta = { text: "", toolCalls: [] };
    for (;;) {
      if (this.#state === "text") {
        out.text += this.#tag + this.#held;
        this.#held = "";
        this.#tag = "";
        return out;
      }
      const separator = this.#state === "calls" ? /^[\s;]*/ : /^\s*/;
      const rest = this.#held.slice(separator.exec(this.#held)![0].length);
      if (this.#state === "start" && rest.startsWith(PYTHON_TAG)) {
        this.#tag = this.#held.slice(0, this.#held.length - rest.length) + PYTHON_TAG;
        this.#held = rest.slice(PYTHON_TAG.length);
        this.#state = "calls";
        continue;
      }
      if (rest.startsWith("{")) {
        const end = jsonObjectEnd(rest);
        if (end < 0) return out;
        const call = parseCall(rest.slice(0, end));
        if (!call) {
          this.#state = "text";
          continue;
        }
        out.toolCalls.push({ id: this.newId(), ...call });
        this.#held = rest.slice(end);
        this.#tag = "";
        this.#state = "calls";
        continue;
      }
      // Whitespace only, or what may yet become the python tag: wait for more.
      if (!rest || (this.#state === "start" && partialTagLength(rest, PYTHON_TAG) === rest.length)) return out;
      this.#state = "text";
    }
  }

  finish(): ToolCallDelta {
    const held = this.#tag + this.#held;
    this.#held = "";
    this.#tag = "";
    // Separators after the last call are layout; anything else held is text.
    return { text: this.#state === "calls" && !held.replace(/[\s;]/g, "") ? "" : held, toolCalls: [] };
  }
}

function parseCall(json: string): ReturnType<typeof callFromJson> {
  try {
    const value: unknown = JSON.parse(json);
    if (typeof value === "object" && value !== null && "type" in value && value.type !== "function") return undefined;
    return callFromJson(value);
  } catch {
    return undefined;
  }
}
