/**
 * Qwen3-Coder tool calls, in XML:
 * `<tool_call><function=NAME><parameter=P>VALUE</parameter>...</function></tool_call>`.
 * @module
 */
import { isPlainObject } from "./tool-call-values.js";
import type { ChatTool, ToolCall } from "./types.js";

const FUNCTION = /^<function=([^>\s]+)>([\s\S]*)<\/function>$/;
const PARAMETER = /<parameter=([^>\s]+)>([\s\S]*?)<\/parameter>/g;

/**
 * The body parser for `tools`: a parameter's value is text, kept as a string when the tool's
 * schema says the parameter is a string (or names no type), and read as JSON otherwise (a number,
 * an object, ...), falling back to the string when it is not JSON.
 */
export function qwen3CoderBody(tools: readonly ChatTool[]): (body: string) => Omit<ToolCall, "id"> | undefined {
  return (body) => {
    const match = FUNCTION.exec(body.trim());
    if (!match) return undefined;
    const name = match[1]!;
    const inner = match[2]!;
    const schema = tools.find((tool) => tool.function.name === name)?.function.parameters;
    const properties = isPlainObject(schema?.properties) ? schema.properties : {};
    const args: Record<string, unknown> = {};
    let rest = inner;
    for (const [whole, key, raw] of inner.matchAll(PARAMETER)) {
      rest = rest.replace(whole, "");
      // The model puts each value on its own lines: the newline after the tag and before the close are layout.
      const text = raw!.replace(/^\n/, "").replace(/\n$/, "");
      const property = properties[key!];
      const type = isPlainObject(property) ? property.type : undefined;
      args[key!] = type === undefined || type === "string" ? text : jsonOrText(text);
    }
    // Anything but whitespace between the parameters means the block is not what it seems.
    return rest.trim() ? undefined : { name, arguments: args };
  };
}

function jsonOrText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
