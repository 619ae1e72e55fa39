/**
 * MiniMax-M2's tool calls, in XML: a section of invocations,
 * `<minimax:tool_call>` (`<invoke name="NAME">` (`<parameter name="P">VALUE</parameter>`)* `</invoke>`)+
 * `</minimax:tool_call>`, each value typed by the tool's schema (see {@link xmlCallArguments}).
 * @module
 */
import { xmlCallArguments } from "./tool-call-values.js";
import { sectionOfCalls, type BlockCall, type BlockTags, type ToolCallBlock } from "./tagged-tool-calls.js";
import type { ChatTool } from "./types.js";

export const MINIMAX_SECTION: BlockTags = { open: "<minimax:tool_call>", close: "</minimax:tool_call>" };
const INVOKE_BEGIN = '<invoke name="';
const INVOKE_END = "</invoke>";

const NAMED = /^([^"<>\s]+)">([\s\S]*)$/;
const PARAMETER = /<parameter name="([^"<>]+)">([\s\S]*?)<\/parameter>/g;

/** The section parser for `tools`. */
export function minimaxSection(tools: readonly ChatTool[]): ToolCallBlock {
  return sectionOfCalls(INVOKE_BEGIN, INVOKE_END, (body): BlockCall | undefined => {
    const match = NAMED.exec(body);
    if (!match) return undefined;
    const name = match[1]!;
    const args = xmlCallArguments(tools, name, match[2]!, PARAMETER);
    return args && { name, arguments: args };
  });
}
