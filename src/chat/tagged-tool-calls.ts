/**
 * Tool calls written as tagged blocks in the answer, `OPEN BODY CLOSE`: Qwen3's, Hermes',
 * Qwen3-Coder's and GLM's `<tool_call>...</tool_call>` (one call each), DeepSeek's and Kimi-K2's
 * sections of calls between their section tokens, MiniMax-M2's and DSML's sections of invocations.
 * The body's syntax is the format's (see hermes.ts, qwen3-coder.ts, glm.ts, deepseek.ts, kimi.ts,
 * minimax.ts, dsml.ts).
 * @module
 */
import { partialTagLength, trailingSpaceLength } from "./holdback.js";
import { xmlCallArguments } from "./tool-call-values.js";
import type { ChatTool, ToolCall, ToolCallDelta, ToolCallIds, ToolCallParser } from "./types.js";

/** A call's name and arguments from a block's body, or undefined when the body is malformed. */
export type ToolCallBody = (body: string) => Omit<ToolCall, "id"> | undefined;

/** A call read from a block, with its id where the format writes one (Kimi-K2's `functions.name:0`). */
export type BlockCall = Omit<ToolCall, "id"> & { id?: string };

/** The calls of a block's body, in order, or undefined when the body is malformed. */
export type ToolCallBlock = (body: string) => BlockCall[] | undefined;

/** The text that opens and closes a block. */
export interface BlockTags {
  open: string;
  close: string;
}

/** Qwen3's, Hermes' and GLM's blocks. */
export const TOOL_CALL_TAGS: BlockTags = { open: "<tool_call>", close: "</tool_call>" };

/** The block reader of a format whose blocks hold one call each. */
export function oneCall(body: ToolCallBody): ToolCallBlock {
  return (text) => {
    const call = body(text);
    return call && [call];
  };
}

/**
 * Streams answer text through and turns each complete, well-formed block into its calls. A block
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
    readonly parseBlock: ToolCallBlock,
    readonly newId: ToolCallIds,
    readonly tags: BlockTags = TOOL_CALL_TAGS,
  ) {}

  push(text: string): ToolCallDelta {
    const { open, close } = this.tags;
    this.#held += text;
    const out: ToolCallDelta = { text: "", toolCalls: [] };
    for (;;) {
      if (this.#inside) {
        const end = this.#held.indexOf(close);
        if (end < 0) return out;
        const body = this.#held.slice(0, end);
        this.#held = this.#held.slice(end + close.length);
        this.#inside = false;
        const calls = this.parseBlock(body);
        if (calls) {
          for (const { id, ...call } of calls) out.toolCalls.push({ id: id ?? this.newId(), ...call });
          this.#afterCall = true;
        } else {
          out.text += this.#spaceBefore + open + body + close;
        }
        continue;
      }
      if (this.#afterCall) {
        this.#held = this.#held.trimStart();
        if (!this.#held) return out;
        this.#afterCall = false;
      }
      const start = this.#held.indexOf(open);
      if (start >= 0) {
        const before = this.#held.slice(0, start);
        out.text += before.trimEnd();
        this.#spaceBefore = before.slice(before.trimEnd().length);
        this.#held = this.#held.slice(start + open.length);
        this.#inside = true;
        continue;
      }
      // Hold back what may begin a block, and the whitespace that would go with it.
      const partial = partialTagLength(this.#held, open);
      const before = this.#held.slice(0, this.#held.length - partial);
      const cut = before.length - trailingSpaceLength(before);
      out.text += this.#held.slice(0, cut);
      this.#held = this.#held.slice(cut);
      return out;
    }
  }

  finish(): ToolCallDelta {
    const open = this.#inside ? this.#spaceBefore + this.tags.open : "";
    const text = open + (this.#afterCall ? this.#held.trimStart() : this.#held);
    this.#held = "";
    this.#inside = false;
    return { text, toolCalls: [] };
  }
}

/**
 * The block reader of a format whose blocks are sections of calls, `BEGIN body END` each, with
 * nothing but whitespace around and between them: each body read by `readCall`. A section that
 * holds anything else, no call, or a malformed one is malformed.
 */
export function sectionOfCalls(
  begin: string,
  end: string,
  readCall: (body: string) => BlockCall | undefined,
): ToolCallBlock {
  return (section) => {
    const calls: BlockCall[] = [];
    let rest = section.trimStart();
    while (rest) {
      if (!rest.startsWith(begin)) return undefined;
      const close = rest.indexOf(end, begin.length);
      if (close < 0) return undefined;
      const call = readCall(rest.slice(begin.length, close));
      if (!call) return undefined;
      calls.push(call);
      rest = rest.slice(close + end.length).trimStart();
    }
    return calls.length > 0 ? calls : undefined;
  };
}

/**
 * The block reader of sections of named invocations (MiniMax-M2's, DSML's): `INVOKE_BEGIN` NAME `">`
 * then its parameters (`parameter`, a global regex as {@link xmlCallArguments} takes it) up to `INVOKE_END`, each
 * call's values typed for `tools`.
 */
export function invocationSection(
  invokeBegin: string,
  invokeEnd: string,
  parameter: RegExp,
  tools: readonly ChatTool[],
): ToolCallBlock {
  return sectionOfCalls(invokeBegin, invokeEnd, (body): BlockCall | undefined => {
    const match = NAMED_INVOCATION.exec(body);
    if (!match) return undefined;
    const name = match[1]!;
    const args = xmlCallArguments(tools, name, match[2]!, parameter);
    return args && { name, arguments: args };
  });
}

/** The rest of an invocation's opening: its name, `">`, then its body. */
const NAMED_INVOCATION = /^([^"<>\s]+)">([\s\S]*)$/;
