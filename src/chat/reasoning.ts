/**
 * Reasoning text: the `<think>...</think>` block a reasoning model writes before its answer,
 * split from the answer while the text streams in.
 * @module
 */
import { partialTagLength, trailingSpaceLength } from "./holdback.js";

/** Options of {@link ReasoningParser}. */
export interface ReasoningParserOptions {
  /**
   * The chat template opened the think block in the prompt (e.g. DeepSeek-R1's, or Qwen3's with
   * a prefilled `<think>`): the model's text is reasoning until it closes the block.
   */
  startInside?: boolean;
  open?: string;
  close?: string;
  /**
   * Text that ends the reasoning without a close tag and begins the answer (Kimi-K2 may start its
   * tool calls without closing its think block).
   */
  endsBefore?: readonly string[];
}

type State = "start" | "reasoning" | "answer";

/**
 * Splits a stream of model text into reasoning and answer. A think block counts only at the
 * start of the output (after whitespace), as llama-server reads it; a block never closed is all
 * reasoning. The whitespace around the block is dropped (the reasoning is trimmed, and so is the
 * start of the answer after it); every other character comes out once, in order.
 */
export class ReasoningParser {
  readonly #open: string;
  readonly #close: string;
  readonly #endsBefore: readonly string[];
  #state: State;
  /** Reasoning has begun (its leading whitespace is dropped until then). */
  #reasoningBegun = false;
  /** The answer has begun (after a think block, its leading whitespace is dropped until then). */
  #answerBegun = false;
  #held = "";

  constructor(options: ReasoningParserOptions = {}) {
    this.#open = options.open ?? "<think>";
    this.#close = options.close ?? "</think>";
    this.#endsBefore = options.endsBefore ?? [];
    this.#state = options.startInside ? "reasoning" : "start";
  }

  push(text: string): { text: string; reasoning: string } {
    this.#held += text;
    const out = { text: "", reasoning: "" };
    for (;;) {
      if (this.#state === "start") {
        const rest = this.#held.trimStart();
        if (rest.startsWith(this.#open)) {
          this.#held = rest.slice(this.#open.length);
          this.#state = "reasoning";
          continue;
        }
        // Only whitespace so far, or what may yet become the open tag: wait for more.
        if (this.#open.startsWith(rest)) return out;
        this.#state = "answer";
        this.#answerBegun = true;
        out.text += this.#held;
        this.#held = "";
        return out;
      }
      if (this.#state === "reasoning") {
        if (!this.#reasoningBegun) {
          this.#held = this.#held.trimStart();
          if (!this.#held) return out;
          this.#reasoningBegun = true;
        }
        const end = this.#held.indexOf(this.#close);
        const handoff = this.#handoff();
        if (end >= 0 || handoff >= 0) {
          const closed = end >= 0 && (handoff < 0 || end < handoff);
          const at = closed ? end : handoff;
          out.reasoning += this.#held.slice(0, at).trimEnd();
          this.#held = this.#held.slice(closed ? end + this.#close.length : handoff);
          this.#state = "answer";
          continue;
        }
        // Hold back what may begin the close tag (or a hand-off), and the whitespace before it.
        const partial = Math.max(
          partialTagLength(this.#held, this.#close),
          ...this.#endsBefore.map((marker) => partialTagLength(this.#held, marker)),
        );
        const before = this.#held.slice(0, this.#held.length - partial);
        const cut = before.length - trailingSpaceLength(before);
        out.reasoning += this.#held.slice(0, cut);
        this.#held = this.#held.slice(cut);
        return out;
      }
      if (!this.#answerBegun) {
        this.#held = this.#held.trimStart();
        if (!this.#held) return out;
        this.#answerBegun = true;
      }
      out.text += this.#held;
      this.#held = "";
      return out;
    }
  }

  /** Where the first text that ends the reasoning without a close tag starts, or -1. */
  #handoff(): number {
    let first = -1;
    for (const marker of this.#endsBefore) {
      const at = this.#held.indexOf(marker);
      if (at >= 0 && (first < 0 || at < first)) first = at;
    }
    return first;
  }

  finish(): { text: string; reasoning: string } {
    const held = this.#held;
    this.#held = "";
    if (this.#state === "reasoning") return { text: "", reasoning: held.trimEnd() };
    // In "start", the held text is whitespace or a piece of the open tag: answer text after all.
    return { text: this.#state === "start" || this.#answerBegun ? held : "", reasoning: "" };
  }
}
