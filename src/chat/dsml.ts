/**
 * DeepSeek-V3.2's and DeepSeek-V4's tool calls, in DSML (`｜DSML｜` is a token of their vocabulary):
 * a section `<｜DSML｜function_calls>` (V4: `<｜DSML｜tool_calls>`) of invocations
 * `<｜DSML｜invoke name="NAME">` (`<｜DSML｜parameter name="P" string="true|false">VALUE</｜DSML｜parameter>`)*
 * `</｜DSML｜invoke>`, the section closed by its own tag. A parameter says its type: `string="true"`
 * takes the text as it is, `string="false"` JSON (numbers, booleans, arrays, objects).
 * @module
 */
import { invocationSection, type BlockTags, type ToolCallBlock } from "./tagged-tool-calls.js";
import type { ChatMessage, ChatTool } from "./types.js";

export const DSML = "｜DSML｜";
/** The section of calls: `function_calls` in DeepSeek-V3.2, `tool_calls` in DeepSeek-V4. */
export const DSML_SECTIONS = {
  "deepseek-v3.2": { open: `<${DSML}function_calls>`, close: `</${DSML}function_calls>` },
  "deepseek-v4": { open: `<${DSML}tool_calls>`, close: `</${DSML}tool_calls>` },
} as const satisfies Record<string, BlockTags>;
export type DsmlFormat = keyof typeof DSML_SECTIONS;

export const DSML_INVOKE_BEGIN = `<${DSML}invoke name="`;
export const DSML_INVOKE_END = `</${DSML}invoke>`;
export const DSML_PARAMETER_BEGIN = `<${DSML}parameter name="`;
export const DSML_PARAMETER_END = `</${DSML}parameter>`;

const PARAMETER = /<｜DSML｜parameter name="([^"<>]+)" string="(true|false)">([\s\S]*?)<\/｜DSML｜parameter>/g;

/** The section parser for `tools`. */
export function dsmlSection(tools: readonly ChatTool[]): ToolCallBlock {
  return invocationSection(DSML_INVOKE_BEGIN, DSML_INVOKE_END, PARAMETER, tools);
}

/**
 * The messages as DeepSeek-V4 reads them: each run of tool results (with the user messages among them, which its
 * template joins into one user block) in the order of the calls of the assistant message before it, matched by id
 * (a result of an unknown id first), as its reference implementation renders them and llama.cpp does; a client
 * that ran the calls at once may send their results in the order they finished.
 */
export function resultsInCallOrder(messages: readonly ChatMessage[]): ChatMessage[] {
  const out = [...messages];
  let order = new Map<string, number>();
  for (let i = 0; i < out.length; ) {
    const message = out[i]!;
    if (message.role === "assistant" && message.toolCalls && message.toolCalls.length > 0) {
      order = new Map(message.toolCalls.map((call, k) => [call.id, k]));
      i++;
      continue;
    }
    if (message.role !== "user" && message.role !== "tool") {
      i++;
      continue;
    }
    const results: number[] = [];
    let end = i;
    for (; end < out.length && (out[end]!.role === "user" || out[end]!.role === "tool"); end++) {
      if (out[end]!.role === "tool") results.push(end);
    }
    if (results.length > 1 && order.size > 0) {
      const rank = (m: ChatMessage) => order.get(m.toolCallId ?? "") ?? 0;
      const sorted = results.map((at) => out[at]!).sort((a, b) => rank(a) - rank(b));
      results.forEach((at, k) => (out[at] = sorted[k]!));
    }
    i = end;
  }
  return out;
}
