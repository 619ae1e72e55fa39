/**
 * The model's chat output, parsed as it streams: reasoning, answer text and tool calls, by the
 * parsers of the format its chat template speaks.
 * @module
 */
import { parseHermesBody } from "./hermes.js";
import { randomToolCallId } from "./tool-call-values.js";
import { Llama3ToolCallParser } from "./llama3.js";
import { qwen3CoderBody } from "./qwen3-coder.js";
import { ReasoningParser } from "./reasoning.js";
import { TaggedToolCallParser } from "./tagged-tool-calls.js";
import type { ChatDelta, ChatTool, OutputParser, ToolCall, ToolCallIds, ToolCallParser } from "./types.js";

/**
 * How a model writes tool calls: `"hermes"` (Qwen3, Qwen2.5, Hermes: `<tool_call>{json}</tool_call>`),
 * `"qwen3-coder"` (`<tool_call><function=name><parameter=p>...`), `"llama3"` (a
 * `{"name", "parameters"}` JSON answer, or after `<|python_tag|>`).
 */
export type ToolCallFormat = "hermes" | "qwen3-coder" | "llama3";

/**
 * The tool-call format a chat template teaches its model, read from the template's text as
 * llama.cpp does; `"hermes"` (the built-in ChatML template's) when the template names none.
 */
export function detectToolCallFormat(template: string): ToolCallFormat {
  if (template.includes("<function=") && template.includes("<parameter=")) return "qwen3-coder";
  if (template.includes("<tool_call>")) return "hermes";
  if (template.includes("<|python_tag|>") || template.includes("<|start_header_id|>")) return "llama3";
  return "hermes";
}

/**
 * Whether the rendered prompt leaves a think block open, so that the model's text starts as
 * reasoning (templates that put `<think>` after the assistant's header).
 */
export function promptOpensThinking(prompt: string, open = "<think>", close = "</think>"): boolean {
  const at = prompt.lastIndexOf(open);
  return at >= 0 && !prompt.slice(at).includes(close) && !prompt.slice(at + open.length).trim();
}

/** Options of {@link ChatOutputParser}. */
export interface ChatOutputOptions {
  /** Parse tool calls in this format; left out, the answer is all text. */
  toolCallFormat?: ToolCallFormat;
  /** The tools offered (Qwen3-Coder's parameters take their types from the schemas). */
  tools?: readonly ChatTool[];
  /** Split `<think>` blocks into reasoning (default true); false leaves them in the text. */
  parseReasoning?: boolean;
  /** The prompt opened the think block: the output starts as reasoning. */
  startInReasoning?: boolean;
  /** Makes tool-call ids (default: random `call_...`). */
  newId?: ToolCallIds;
}

function toolCallParser(format: ToolCallFormat, tools: readonly ChatTool[], newId: ToolCallIds): ToolCallParser {
  switch (format) {
    case "hermes":
      return new TaggedToolCallParser(parseHermesBody, newId);
    case "qwen3-coder":
      return new TaggedToolCallParser(qwen3CoderBody(tools), newId);
    case "llama3":
      return new Llama3ToolCallParser(newId);
  }
}

/** Reasoning first, then tool calls in what is left: the whole of a chat's output parsing. */
export class ChatOutputParser implements OutputParser {
  readonly #reasoning: ReasoningParser | undefined;
  readonly #tools: ToolCallParser | undefined;

  constructor(options: ChatOutputOptions = {}) {
    if (options.parseReasoning ?? true) {
      this.#reasoning = new ReasoningParser({ startInside: options.startInReasoning ?? false });
    }
    if (options.toolCallFormat) {
      this.#tools = toolCallParser(options.toolCallFormat, options.tools ?? [], options.newId ?? randomToolCallId);
    }
  }

  push(text: string): ChatDelta {
    const split = this.#reasoning ? this.#reasoning.push(text) : { text, reasoning: "" };
    const answer = this.#tools ? this.#tools.push(split.text) : { text: split.text, toolCalls: [] };
    return { text: answer.text, reasoning: split.reasoning, toolCalls: answer.toolCalls };
  }

  finish(): ChatDelta {
    const split = this.#reasoning ? this.#reasoning.finish() : { text: "", reasoning: "" };
    if (!this.#tools) return { text: split.text, reasoning: split.reasoning, toolCalls: [] };
    const last = this.#tools.push(split.text);
    const tail = this.#tools.finish();
    return {
      text: last.text + tail.text,
      reasoning: split.reasoning,
      toolCalls: [...last.toolCalls, ...tail.toolCalls],
    };
  }
}

/** The assistant's message a chat produced. */
export interface AssistantMessage {
  role: "assistant";
  /** The answer text (without reasoning or tool calls). */
  content: string;
  /** The reasoning text, when the model wrote any. */
  reasoning?: string;
  /** The tool calls, when the model made any. */
  toolCalls?: ToolCall[];
}

/** Joins deltas into the final message. */
export class AssistantMessageBuilder {
  #content = "";
  #reasoning = "";
  readonly #toolCalls: ToolCall[] = [];

  add(delta: ChatDelta): void {
    this.#content += delta.text;
    this.#reasoning += delta.reasoning;
    this.#toolCalls.push(...delta.toolCalls);
  }

  get message(): AssistantMessage {
    const message: AssistantMessage = { role: "assistant", content: this.#content };
    if (this.#reasoning) message.reasoning = this.#reasoning;
    if (this.#toolCalls.length > 0) message.toolCalls = [...this.#toolCalls];
    return message;
  }
}

/** Which tool the model must call: any (`"required"`) or the one named. */
export type ForcedToolChoice = "required" | { name: string };

/**
 * The text that starts the assistant's answer so that it is a tool call (of the named function):
 * the prompt ends with it and the parser reads it before the model's text. A think block the
 * prompt left open is closed first: a forced call skips the reasoning.
 */
export function forcedCallPrefix(format: ToolCallFormat, choice: ForcedToolChoice, opensThinking: boolean): string {
  const name = typeof choice === "object" ? choice.name : undefined;
  const close = opensThinking ? "</think>\n\n" : "";
  switch (format) {
    case "hermes":
      return `${close}<tool_call>\n{"name": ${name === undefined ? '"' : `${JSON.stringify(name)}, "arguments": `}`;
    case "qwen3-coder":
      return `${close}<tool_call>\n<function=${name === undefined ? "" : `${name}>\n`}`;
    case "llama3":
      return `${close}{"name": ${name === undefined ? '"' : `${JSON.stringify(name)}, "parameters": `}`;
  }
}
