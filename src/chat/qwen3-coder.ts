/**
 * Qwen3-Coder tool calls, in XML:
 * `<tool_call><function=NAME><parameter=P>VALUE</parameter>...</function></tool_call>`.
 * @module
 */
import { typedArgument } from "./tool-call-values.js";
import type { ChatTool, ToolCall } from "./types.js";

const FUNCTION = /^<function=([^>\s]+)>([\s\S]*)<\/function>$/;
const PARAMETER = /<parameter=([^>\s]+)>([\s\S]*?)<\/parameter>/g;

/** The body parser for `tools`: each parameter's value typed by the tool's schema (see {@link typedArgument}). */
export function qwen3CoderBody(tools: readonly ChatTool[]): (body: string) => Omit<ToolCall, "id"> | undefined {
  return (body) => {
    const match = FUNCTION.exec(body.trim());
    if (!match) return undefined;
    const name = match[1]!;
    const inner = match[2]!;
    const args: Record<string, unknown> = {};
    let rest = inner;
    for (const [whole, key, raw] of inner.matchAll(PARAMETER)) {
      rest = rest.replace(whole, "");
      // The model puts each value on its own lines: the newline after the tag and before the close are layout.
      args[key!] = typedArgument(tools, name, key!, raw!.replace(/^\n/, "").replace(/\n$/, ""));
    }
    // Anything but whitespace between the parameters means the block is not what it seems.
    return rest.trim() ? undefined : { name, arguments: args };
  };
}
