/**
 * Tool calls written as tagged blocks, `<tool_call>BODY</tool_call>`, as Qwen3, Hermes and
 * Qwen3-Coder write them; the body's syntax is the format's (see hermes.ts, qwen3-coder.ts).
 * @module
 */
import { partialTagLength, trailingSpaceLength } from "./holdback.js";
import type { ToolCall, ToolCallDelta, ToolCallIds, ToolCallParser } from "./types.js";

/** A call's name and arguments from a block's body, or undefined when the body is malformed. */
export type ToolCallBody = (body: string) => Omit<ToolCall, "id"> | undefined;

export const TOOL_CALL_OPEN = "<tool_call>";
export const TOOL_CALL_CLOSE = "</tool_call>";

/**
 * Streams answer text through and turns each complete, well-formed block into a call. A block
 * whose body is malformed, or that is still open when the stream ends, comes back as text, tags
 * and all, with the whitespace before it. Whitespace between the answer and a call, and between
 * calls, is dropped.
 */
export class TaggedToolCallParser implements ToolCallParser {
  #held = "";
  #inside = false;
  /** A call ended just before the held text: its leading whitespace is dropped. */
  #afterCall = false;
  /** The whitespace before the open block: dropped if it is a call, given back if it is not. */
  #spaceBefore = "";

  constructor(
    readonly parseBody: ToolCallBody,
    readonly newId: ToolCallIds,
  ) {}

  push(text: string): ToolCallDelta {
    this.#held += text;
    const out: ToolCallDelta = { text: "", toolCalls: [] };
    for (;;) {
      if (this.#inside) {
        const end = this.#held.indexOf(TOOL_CALL_CLOSE);
        if (end < 0) return out;
        const body = this.#held.slice(0, end);
        this.#held = this.#held.slice(end + TOOL_CALL_CLOSE.length);
        this.#inside = false;
        const call = this.parseBody(body);
        if (call) {
          out.toolCalls.push({ id: this.newId(), ...call });
          this.#afterCall = true;
        } else {
          out.text += this.#spaceBefore + TOOL_CALL_OPEN + body + TOOL_CALL_CLOSE;
        }
        continue;
      }
      if (this.#afterCall) {
        this.#held = this.#held.trimStart();
        if (!this.#held) return out;
        this.#afterCall = false;
      }
      const start = this.#held.indexOf(TOOL_CALL_OPEN);
      if (start >= 0) {
        const before = this.#held.slice(0, start);
        out.text += before.trimEnd();
        this.#spaceBefore = before.slice(before.trimEnd().length);
        this.#held = this.#held.slice(start + TOOL_CALL_OPEN.length);
        this.#inside = true;
        continue;
      }
      // Hold back what may begin a block, and the whitespace that would go with it.
      const partial = partialTagLength(this.#held, TOOL_CALL_OPEN);
      const before = this.#held.slice(0, this.#held.length - partial);
      const cut = before.length - trailingSpaceLength(before);
      out.text += this.#held.slice(0, cut);
      this.#held = this.#held.slice(cut);
      return out;
    }
  }

  finish(): ToolCallDelta {
    const open = this.#inside ? this.#spaceBefore + TOOL_CALL_OPEN : "";
    const text = open + (this.#afterCall ? this.#held.trimStart() : this.#held);
    this.#held = "";
    this.#inside = false;
    return { text, toolCalls: [] };
  }
}
