/**
 * Qwen3-Coder tool calls, in XML:
 * `<tool_call><function=NAME><parameter=P>VALUE</parameter>...</function></tool_call>`.
 * @module
 */
import { xmlCallArguments } from "./tool-call-values.js";
import type { ChatTool, ToolCall } from "./types.js";

const FUNCTION = /^<function=([^>\s]+)>([\s\S]*)<\/function>$/;
const PARAMETER = /<parameter=([^>\s]+)>([\s\S]*?)<\/parameter>/g;

/** The body parser for `tools`: each parameter's value typed by the tool's schema (see {@link xmlCallArguments}). */
export function qwen3CoderBody(tools: readonly ChatTool[]): (body: string) => Omit<ToolCall, "id"> | undefined {
  return (body) => {
    const match = FUNCTION.exec(body.trim());
    if (!match) return undefined;
    const name = match[1]!;
    // The model puts each value on its own lines: the newline after the tag and before the close are layout.
    const args = xmlCallArguments(tools, name, match[2]!, PARAMETER, (raw) =>
      raw.replace(/^\n/, "").replace(/\n$/, ""),
    );
    return args && { name, arguments: args };
  };
}
