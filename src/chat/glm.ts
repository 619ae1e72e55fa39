/**
 * GLM-4.5 / 4.6 / 4.7 tool calls: `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`,
 * with a newline after the name and after each tag in GLM-4.5 and 4.6, none in GLM-4.7.
 * @module
 */
import { typedArgument } from "./tool-call-values.js";
import type { ToolCallBody } from "./tagged-tool-calls.js";
import type { ChatTool } from "./types.js";

const ARG_KEY = "<arg_key>";
const ARGUMENT = /<arg_key>([\s\S]*?)<\/arg_key>\s*<arg_value>([\s\S]*?)<\/arg_value>/g;

/**
 * The body parser for `tools`: the function's name, then its arguments as key / value pairs (a
 * call without arguments is the name alone), each value typed by the tool's schema (see
 * {@link typedArgument}: the template writes strings as they are and other values as JSON).
 */
export function glmBody(tools: readonly ChatTool[]): ToolCallBody {
  return (body) => {
    const first = body.indexOf(ARG_KEY);
    const name = (first < 0 ? body : body.slice(0, first)).trim();
    if (!name || /[\s<>]/.test(name)) return undefined;
    const pairs = first < 0 ? "" : body.slice(first);
    const args: Record<string, unknown> = {};
    let end = 0;
    for (const match of pairs.matchAll(ARGUMENT)) {
      // Only whitespace may stand between the pairs.
      if (pairs.slice(end, match.index).trim()) return undefined;
      end = match.index + match[0].length;
      const key = match[1]!.trim();
      args[key] = typedArgument(tools, name, key, match[2]!);
    }
    return pairs.slice(end).trim() ? undefined : { name, arguments: args };
  };
}
