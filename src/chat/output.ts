/**
 * The model's chat output, parsed as it streams: reasoning, answer text and tool calls, by the
 * parsers of the format its chat template speaks.
 * @module
 */
import {
  DEEPSEEK_CALL_BEGIN,
  DEEPSEEK_CALL_END,
  DEEPSEEK_SECTION,
  DEEPSEEK_SEP,
  parseDeepSeekR1Section,
  parseDeepSeekV31Section,
} from "./deepseek.js";
import { DSML, DSML_INVOKE_BEGIN, DSML_SECTIONS, dsmlSection } from "./dsml.js";
import { glmBody } from "./glm.js";
import { HARMONY_CHANNEL, HARMONY_MARKERS, HarmonyOutputParser, harmonyCallPrefix } from "./harmony.js";
import { parseHermesBody } from "./hermes.js";
import { MINIMAX_SECTION, minimaxSection } from "./minimax.js";
import { KIMI_ARGUMENTS_BEGIN, KIMI_CALL_BEGIN, KIMI_CALL_END, KIMI_SECTION, parseKimiSection } from "./kimi.js";
import { randomToolCallId } from "./tool-call-values.js";
import { Llama3ToolCallParser, PYTHON_TAG } from "./llama3.js";
import { qwen3CoderBody } from "./qwen3-coder.js";
import { ReasoningParser } from "./reasoning.js";
import { oneCall, TaggedToolCallParser, TOOL_CALL_TAGS } from "./tagged-tool-calls.js";
import type { ChatDelta, ChatTool, OutputParser, ToolCall, ToolCallIds, ToolCallParser } from "./types.js";

/**
 * How a model writes tool calls: `"hermes"` (Qwen3, Qwen2.5, Hermes: `<tool_call>{json}</tool_call>`),
 * `"qwen3-coder"` (Qwen3-Coder, and Qwen3.5 / 3.6, which reason first: `<tool_call><function=name><parameter=p>...`), `"llama3"` (a
 * `{"name", "parameters"}` JSON answer, or after `<|python_tag|>`), `"glm-4.5"` (GLM-4.5 to 4.7:
 * `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>...`), `"deepseek-v3.1"`
 * (`<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>name<｜tool▁sep｜>{json}...`), `"deepseek-r1"` (DeepSeek-R1
 * and V3: `...function<｜tool▁sep｜>name` and a json code fence), `"kimi-k2"`
 * (`<|tool_calls_section_begin|><|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{json}...`),
 * `"minimax-m2"` (`<minimax:tool_call><invoke name="name"><parameter name="p">v</parameter></invoke></minimax:tool_call>`),
 * `"deepseek-v3.2"` and `"deepseek-v4"` (DSML: `<｜DSML｜function_calls>` / `<｜DSML｜tool_calls>`, then
 * `<｜DSML｜invoke name="name"><｜DSML｜parameter name="p" string="true|false">v</｜DSML｜parameter>...`),
 * `"harmony"` (gpt-oss: `<|channel|>commentary to=functions.name <|constrain|>json<|message|>{json}`, its
 * reasoning in the analysis channel and its answer in the final one, parsed whether tools are offered or not).
 */
export type ToolCallFormat =
  | "hermes"
  | "qwen3-coder"
  | "llama3"
  | "glm-4.5"
  | "deepseek-v3.1"
  | "deepseek-r1"
  | "kimi-k2"
  | "minimax-m2"
  | "deepseek-v3.2"
  | "deepseek-v4"
  | "harmony";

/**
 * The tool-call format a chat template teaches its model, read from the template's text as
 * llama.cpp does; `"hermes"` (the built-in ChatML template's) when the template names none.
 */
export function detectToolCallFormat(template: string): ToolCallFormat {
  if (template.includes(HARMONY_CHANNEL)) return "harmony";
  if (template.includes(KIMI_SECTION.open) && template.includes(KIMI_CALL_BEGIN)) return "kimi-k2";
  if (template.includes(MINIMAX_SECTION.open)) return "minimax-m2";
  // DeepSeek-V4 names its section `tool_calls`, V3.2 `function_calls` (llama.cpp tells them apart so too).
  if (template.includes(DSML)) return template.includes("function_calls") ? "deepseek-v3.2" : "deepseek-v4";
  if (template.includes(DEEPSEEK_SECTION.open)) return template.includes("```json") ? "deepseek-r1" : "deepseek-v3.1";
  if (template.includes("<function=") && template.includes("<parameter=")) return "qwen3-coder";
  if (template.includes("<tool_call>") && template.includes("<arg_key>")) return "glm-4.5";
  if (template.includes("<tool_call>")) return "hermes";
  if (template.includes(PYTHON_TAG) || template.includes("<|start_header_id|>")) return "llama3";
  return "hermes";
}

const THINK_TAGS = ["<think>", "</think>"];

/**
 * The texts a format's output is written in. Where one is a special token of the model's vocabulary
 * (DeepSeek's and Kimi-K2's tool-call tokens, Kimi's think tags), the chat shows its text, which
 * output hides otherwise, for the parsers to read.
 */
export function formatMarkers(format: ToolCallFormat | undefined): string[] {
  switch (format) {
    case "hermes":
    case "qwen3-coder":
      return [...THINK_TAGS, TOOL_CALL_TAGS.open, TOOL_CALL_TAGS.close];
    case "glm-4.5":
      return [
        ...THINK_TAGS,
        TOOL_CALL_TAGS.open,
        TOOL_CALL_TAGS.close,
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
      ];
    case "llama3":
      return [...THINK_TAGS, PYTHON_TAG];
    case "deepseek-v3.1":
    case "deepseek-r1":
      return [
        ...THINK_TAGS,
        DEEPSEEK_SECTION.open,
        DEEPSEEK_SECTION.close,
        DEEPSEEK_CALL_BEGIN,
        DEEPSEEK_CALL_END,
        DEEPSEEK_SEP,
      ];
    case "kimi-k2":
      return [
        ...THINK_TAGS,
        KIMI_SECTION.open,
        KIMI_SECTION.close,
        KIMI_CALL_BEGIN,
        KIMI_ARGUMENTS_BEGIN,
        KIMI_CALL_END,
      ];
    case "minimax-m2":
      return [...THINK_TAGS, MINIMAX_SECTION.open, MINIMAX_SECTION.close];
    case "deepseek-v3.2":
    case "deepseek-v4":
      return [...THINK_TAGS, DSML];
    case "harmony":
      return HARMONY_MARKERS;
    case undefined:
      return THINK_TAGS;
  }
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

function toolCallParser(
  format: Exclude<ToolCallFormat, "harmony">,
  tools: readonly ChatTool[],
  newId: ToolCallIds,
): ToolCallParser {
  switch (format) {
    case "hermes":
      return new TaggedToolCallParser(oneCall(parseHermesBody), newId);
    case "qwen3-coder":
      return new TaggedToolCallParser(oneCall(qwen3CoderBody(tools)), newId);
    case "glm-4.5":
      return new TaggedToolCallParser(oneCall(glmBody(tools)), newId);
    case "llama3":
      return new Llama3ToolCallParser(newId);
    case "deepseek-v3.1":
      return new TaggedToolCallParser(parseDeepSeekV31Section, newId, DEEPSEEK_SECTION);
    case "deepseek-r1":
      return new TaggedToolCallParser(parseDeepSeekR1Section, newId, DEEPSEEK_SECTION);
    case "kimi-k2":
      return new TaggedToolCallParser(parseKimiSection, newId, KIMI_SECTION);
    case "minimax-m2":
      return new TaggedToolCallParser(minimaxSection(tools), newId, MINIMAX_SECTION);
    case "deepseek-v3.2":
    case "deepseek-v4":
      return new TaggedToolCallParser(dsmlSection(tools), newId, DSML_SECTIONS[format]);
  }
}

/**
 * Where a format's calls may begin inside a think block the model left open, ending the reasoning
 * there, as llama.cpp reads them: Kimi-K2's and DSML's sections, and Qwen3.5's `<tool_call>` (llama.cpp's
 * thinking end tags of the Qwen3-Coder format when the template reasons).
 */
function reasoningHandoffs(format: ToolCallFormat | undefined): string[] {
  if (format === "kimi-k2") return [KIMI_SECTION.open];
  if (format === "deepseek-v3.2" || format === "deepseek-v4") return [DSML_SECTIONS[format].open];
  if (format === "qwen3-coder") return [TOOL_CALL_TAGS.open];
  return [];
}

/**
 * Reasoning first, then tool calls in what is left: the whole of a chat's output parsing (harmony's
 * messages by their own parser).
 */
export class ChatOutputParser implements OutputParser {
  readonly #reasoning: ReasoningParser | undefined;
  readonly #tools: ToolCallParser | undefined;
  readonly #harmony: HarmonyOutputParser | undefined;

  constructor(options: ChatOutputOptions = {}) {
    if (options.toolCallFormat === "harmony") {
      this.#harmony = new HarmonyOutputParser({
        newId: options.newId ?? randomToolCallId,
        ...(options.parseReasoning !== undefined && { parseReasoning: options.parseReasoning }),
      });
      return;
    }
    if (options.parseReasoning ?? true) {
      this.#reasoning = new ReasoningParser({
        startInside: options.startInReasoning ?? false,
        endsBefore: reasoningHandoffs(options.toolCallFormat),
      });
    }
    if (options.toolCallFormat) {
      this.#tools = toolCallParser(options.toolCallFormat, options.tools ?? [], options.newId ?? randomToolCallId);
    }
  }

  push(text: string): ChatDelta {
    if (this.#harmony) return this.#harmony.push(text);
    const split = this.#reasoning ? this.#reasoning.push(text) : { text, reasoning: "" };
    const answer = this.#tools ? this.#tools.push(split.text) : { text: split.text, toolCalls: [] };
    return { text: answer.text, reasoning: split.reasoning, toolCalls: answer.toolCalls };
  }

  finish(): ChatDelta {
    if (this.#harmony) return this.#harmony.finish();
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
  // Qwen3's and MiniMax-M2's templates leave a blank line after the think block, Qwen3.5's (the
  // Qwen3-Coder format's that reasons) writes an empty block as `<think>\n\n</think>\n\n`; the
  // others no blank line.
  const close = !opensThinking
    ? ""
    : format === "qwen3-coder"
      ? "\n</think>\n\n"
      : format === "hermes" || format === "llama3" || format === "minimax-m2"
        ? "</think>\n\n"
        : "</think>";
  switch (format) {
    case "hermes":
      return `${close}<tool_call>\n{"name": ${name === undefined ? '"' : `${JSON.stringify(name)}, "arguments": `}`;
    case "qwen3-coder":
      return `${close}<tool_call>\n<function=${name === undefined ? "" : `${name}>\n`}`;
    case "llama3":
      return `${close}{"name": ${name === undefined ? '"' : `${JSON.stringify(name)}, "parameters": `}`;
    case "glm-4.5":
      return `${close}<tool_call>${name ?? ""}`;
    case "deepseek-v3.1":
      return `${close}${DEEPSEEK_SECTION.open}${DEEPSEEK_CALL_BEGIN}${name === undefined ? "" : `${name}${DEEPSEEK_SEP}`}`;
    case "deepseek-r1":
      return `${close}${DEEPSEEK_SECTION.open}${DEEPSEEK_CALL_BEGIN}function${DEEPSEEK_SEP}${name === undefined ? "" : `${name}\n\`\`\`json\n`}`;
    case "kimi-k2":
      return `${close}${KIMI_SECTION.open}${KIMI_CALL_BEGIN}functions.${name === undefined ? "" : `${name}:`}`;
    case "minimax-m2":
      return `${close}${MINIMAX_SECTION.open}\n<invoke name="${name === undefined ? "" : `${name}">\n`}`;
    case "deepseek-v3.2":
    case "deepseek-v4":
      return `${close}${DSML_SECTIONS[format].open}\n${DSML_INVOKE_BEGIN}${name === undefined ? "" : `${name}">\n`}`;
    case "harmony":
      return harmonyCallPrefix(name);
  }
}
