/**
 * gpt-oss's harmony format: the assistant's turn is a run of messages, each a header and a body,
 * `<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>...`. The
 * analysis channel is reasoning, the final channel the answer, and a commentary message with a
 * recipient (`to=functions.NAME`, in the channel's header or the role's) a tool call whose body
 * is its JSON arguments; a commentary message without one (a preamble) is answer text. The turn
 * ends with `<|return|>` or, after a call, `<|call|>` (end-of-generation tokens, which the text
 * does not show).
 * @module
 */
import { partialTagLength } from "./holdback.js";
import { argumentsFromJson } from "./tool-call-values.js";
import type { ChatDelta, OutputParser, ToolCallIds } from "./types.js";

export const HARMONY_CHANNEL = "<|channel|>";
export const HARMONY_MESSAGE = "<|message|>";
export const HARMONY_END = "<|end|>";
export const HARMONY_START = "<|start|>";
export const HARMONY_CONSTRAIN = "<|constrain|>";
const HARMONY_RETURN = "<|return|>";
export const HARMONY_CALL = "<|call|>";

/** The control tokens of the format, which a chat shows so that the parser can read them. */
export const HARMONY_MARKERS = [
  HARMONY_CHANNEL,
  HARMONY_MESSAGE,
  HARMONY_END,
  HARMONY_START,
  HARMONY_CONSTRAIN,
  HARMONY_RETURN,
  HARMONY_CALL,
];

// How the turn's first message opens when its recipient is in the role's header.
const ROLE_RECIPIENT = " to=";

// What ends a message's body: the next message, or the turn.
const BODY_ENDS = [HARMONY_END, HARMONY_START, HARMONY_RETURN, HARMONY_CALL];

/** The opening of a call to `name` (any function when undefined) that a forced tool call's prompt ends with. */
export function harmonyCallPrefix(name: string | undefined): string {
  return `${HARMONY_CHANNEL}commentary to=functions.${name === undefined ? "" : `${name} ${HARMONY_CONSTRAIN}json${HARMONY_MESSAGE}`}`;
}

/** Options of {@link HarmonyOutputParser}. */
export interface HarmonyOutputOptions {
  /** false: the analysis channel comes out as answer text, not reasoning (default true). */
  parseReasoning?: boolean;
  newId: ToolCallIds;
}

type Body = "reasoning" | "text" | "call";

/**
 * Splits a stream of harmony text into reasoning, answer text and tool calls. A header is read
 * whole (up to `<|message|>`); a body streams out as it comes, but for a call's, whose arguments
 * are parsed when it ends. Text before any header is answer text. A call whose arguments are not
 * a JSON object comes back as answer text, as it was written.
 */
export class HarmonyOutputParser implements OutputParser {
  readonly #reasoningAsText: boolean;
  readonly #newId: ToolCallIds;
  /** In a header (reading up to `<|message|>`), or in a body of the given kind. */
  #state: "header" | Body = "header";
  #held = "";
  #callName = "";
  #callHeader = "";
  #callBody = "";
  /** Nothing came yet: text that does not open a header is answer text. */
  #first = true;

  constructor(options: HarmonyOutputOptions) {
    this.#reasoningAsText = options.parseReasoning === false;
    this.#newId = options.newId;
  }

  push(piece: string): ChatDelta {
    this.#held += piece;
    const out: ChatDelta = { text: "", reasoning: "", toolCalls: [] };
    for (;;) {
      if (this.#state === "header") {
        if (this.#first) {
          // The turn's first header follows the prompt's `<|start|>assistant`: its channel, or
          // a recipient in the role's header (` to=functions.NAME<|channel|>...`).
          const opening = [HARMONY_CHANNEL, HARMONY_START, ROLE_RECIPIENT];
          // Nothing yet, or what may yet become a header's opening: wait for more.
          if (opening.some((marker) => marker.startsWith(this.#held))) return out;
          this.#first = false;
          if (!opening.some((marker) => this.#held.startsWith(marker))) {
            this.#state = "text";
            continue;
          }
        }
        const at = this.#held.indexOf(HARMONY_MESSAGE);
        if (at < 0) return out;
        this.#open(this.#held.slice(0, at));
        this.#held = this.#held.slice(at + HARMONY_MESSAGE.length);
        continue;
      }
      const end = this.#bodyEnd();
      const body = end ? this.#held.slice(0, end.at) : this.#held.slice(0, this.#held.length - this.#partialEnd());
      this.#emit(body, out);
      this.#held = this.#held.slice(body.length);
      if (!end) return out;
      if (this.#state === "call") this.#closeCall(out);
      // <|end|> is followed by <|start|>, which begins the next header; the others begin it themselves.
      this.#held = this.#held.slice(end.marker === HARMONY_END ? HARMONY_END.length : 0);
      this.#state = "header";
    }
  }

  finish(): ChatDelta {
    const out: ChatDelta = { text: "", reasoning: "", toolCalls: [] };
    if (this.#state === "header") {
      // A header never finished: what it was comes back as text (an end marker alone is dropped).
      const rest = this.#held.replace(/^(<\|(return|call|end)\|>)+/, "");
      if (rest) out.text += rest;
    } else {
      this.#emit(this.#held, out);
      if (this.#state === "call") this.#closeCall(out);
    }
    this.#held = "";
    this.#state = "header";
    return out;
  }

  /** Reads a header: its channel and recipient say what its body is. */
  #open(header: string): void {
    const channel = /<\|channel\|>\s*([A-Za-z0-9_-]+)/.exec(header)?.[1];
    const recipient = /\bto=([^\s<]+)/.exec(header)?.[1];
    if (recipient !== undefined && recipient.startsWith("functions.") && channel !== "final") {
      this.#state = "call";
      this.#callName = recipient.slice("functions.".length);
      this.#callHeader = header + HARMONY_MESSAGE;
      this.#callBody = "";
      return;
    }
    this.#state = channel === "analysis" && !this.#reasoningAsText ? "reasoning" : "text";
  }

  #emit(body: string, out: ChatDelta): void {
    if (this.#state === "reasoning") out.reasoning += body;
    else if (this.#state === "call") this.#callBody += body;
    else out.text += body;
  }

  #closeCall(out: ChatDelta): void {
    const args = argumentsFromJson(this.#callBody.trim());
    if (this.#callName && args) {
      out.toolCalls.push({ id: this.#newId(), name: this.#callName, arguments: args });
    } else {
      out.text += this.#callHeader + this.#callBody;
    }
    this.#callBody = "";
  }

  /** The first marker that ends the body in the held text. */
  #bodyEnd(): { at: number; marker: string } | undefined {
    let best: { at: number; marker: string } | undefined;
    for (const marker of BODY_ENDS) {
      const at = this.#held.indexOf(marker);
      if (at >= 0 && (!best || at < best.at)) best = { at, marker };
    }
    return best;
  }

  /** What may begin a marker that ends the body, held back until the next piece. */
  #partialEnd(): number {
    return Math.max(...BODY_ENDS.map((marker) => partialTagLength(this.#held, marker)));
  }
}
