/**
 * The grammars of tool calls: what follows a call's opening up to its end (the rest of a tool's
 * name, and arguments that satisfy its `parameters` schema, through jsonSchemaToGrammar), so a call
 * always parses. A forced call (toolChoice `"required"` or a named function) follows it from the
 * first generated token, after the opening the prompt ends with (forcedCallPrefix); with `"auto"`
 * it is lazy, holding from the call's opening on (the trigger), as llama-server's lazy grammars do
 * (common/chat.cpp).
 * @module
 */
import { jsonSchemaToGrammar, gbnfLiteral } from "../grammar/json-schema.js";
import type { ToolCallFormat } from "./output.js";
import type { ChatTool } from "./types.js";

/** A call in a format whose arguments are one JSON object: the text before them and after them. */
interface JsonCallShape {
  before: (name: string) => string;
  after: string;
  /** The text that begins every call: `"auto"`'s trigger. */
  opening: string;
}

/** The formats whose calls are constrained; the others keep only a forced call's opening. */
const JSON_CALLS: Partial<Record<ToolCallFormat, JsonCallShape>> = {
  hermes: {
    before: (name) => `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": `,
    after: "}\n</tool_call>",
    opening: "<tool_call>",
  },
  llama3: {
    before: (name) => `{"name": ${JSON.stringify(name)}, "parameters": `,
    after: "}",
    opening: '{"name": ',
  },
};

/**
 * The GBNF grammar of the rest of a forced call after `opening` (the forced prefix without a
 * closed think block), for the tools it may call; undefined for a format not constrained. Throws
 * JSON_SCHEMA_UNSUPPORTED / JSON_SCHEMA_TOO_COMPLEX for a tool's schema it cannot follow.
 */
export function forcedCallGrammar(
  format: ToolCallFormat,
  tools: readonly ChatTool[],
  opening: string,
): string | undefined {
  const shape = JSON_CALLS[format];
  if (!shape) return undefined;
  const alternatives: string[] = [];
  const rules: string[] = [];
  tools.forEach((tool, i) => {
    const before = shape.before(tool.function.name);
    if (!before.startsWith(opening)) return;
    const prefix = `t${i}-`;
    rules.push(prefixRules(jsonSchemaToGrammar(tool.function.parameters ?? { type: "object" }), prefix));
    const head = before.slice(opening.length);
    alternatives.push(`${head ? `${gbnfLiteral(head)} ` : ""}${prefix}root ${gbnfLiteral(shape.after)}`);
  });
  if (alternatives.length === 0) return undefined;
  return `root ::= ${alternatives.join(" | ")}\n${rules.join("")}`;
}

/**
 * `"auto"`'s lazy grammar: a whole call, from its opening (the trigger) on; undefined for a format
 * not constrained.
 */
export function lazyCallGrammar(
  format: ToolCallFormat,
  tools: readonly ChatTool[],
): { grammar: string; trigger: string } | undefined {
  const shape = JSON_CALLS[format];
  const rest = shape && forcedCallGrammar(format, tools, shape.opening);
  if (!shape || !rest) return undefined;
  const call = rest.slice("root ".length);
  return { grammar: `root ::= ${gbnfLiteral(shape.opening)} call\ncall ${call}`, trigger: shape.opening };
}

/** `grammar` with every rule name (definitions and references) prefixed, so grammars can be joined. */
function prefixRules(grammar: string, prefix: string): string {
  let out = "";
  let i = 0;
  const skipQuoted = (close: string) => {
    let j = i + 1;
    while (j < grammar.length && grammar[j] !== close) j += grammar[j] === "\\" ? 2 : 1;
    out += grammar.slice(i, j + 1);
    i = j + 1;
  };
  while (i < grammar.length) {
    const c = grammar[i]!;
    if (c === '"') skipQuoted('"');
    else if (c === "[") skipQuoted("]");
    else if (c === "#") {
      const end = grammar.indexOf("\n", i);
      i = end < 0 ? grammar.length : end;
    } else if (/[A-Za-z]/.test(c)) {
      let j = i;
      while (j < grammar.length && /[A-Za-z0-9_-]/.test(grammar[j]!)) j++;
      out += prefix + grammar.slice(i, j);
      i = j;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}
