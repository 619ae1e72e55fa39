/**
 * MiniMax-M2's tool calls, in XML: a section of invocations,
 * `<minimax:tool_call>` (`<invoke name="NAME">` (`<parameter name="P">VALUE</parameter>`)* `</invoke>`)+
 * `</minimax:tool_call>`, each value typed by the tool's schema (tool-call-values.ts' xmlCallArguments).
 * @module
 */
import { invocationSection, type BlockTags, type ToolCallBlock } from "./tagged-tool-calls.js";
import type { ChatTool } from "./types.js";

export const MINIMAX_SECTION: BlockTags = { open: "<minimax:tool_call>", close: "</minimax:tool_call>" };
const INVOKE_BEGIN = '<invoke name="';
const INVOKE_END = "</invoke>";

const PARAMETER = /<parameter name="([^"<>]+)">([\s\S]*?)<\/parameter>/g;

/** The section parser for `tools`. */
export function minimaxSection(tools: readonly ChatTool[]): ToolCallBlock {
  return invocationSection(INVOKE_BEGIN, INVOKE_END, PARAMETER, tools);
}
