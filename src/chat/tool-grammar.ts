/**
 * The grammar of a forced tool call (toolChoice `"required"` or a named function): what follows the
 * call's opening, which the prompt ends with (forcedCallPrefix), up to the call's end: the rest of a
 * tool's name, and arguments that satisfy its `parameters` schema (through jsonSchemaToGrammar),
 * so the call always parses. llama-server constrains the same way (common/chat.cpp); as it does
 * for `"required"`, the grammar holds from the first generated token.
 * @module
 */
import { jsonSchemaToGrammar, gbnfLiteral } from "../grammar/json-schema.js";
import type { ToolCallFormat } from "./output.js";
import type { ChatTool } from "./types.js";

/** A call in a format whose arguments are one JSON object: the text before them and after them. */
interface JsonCallShape {
  before: (name: string) => string;
  after: string;
}

/** The formats whose forced calls are constrained; the others keep only the forced opening. */
const JSON_CALLS: Partial<Record<ToolCallFormat, JsonCallShape>> = {
  hermes: {
    before: (name) => `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": `,
    after: "}\n</tool_call>",
  },
  llama3: { before: (name) => `{"name": ${JSON.stringify(name)}, "parameters": `, after: "}" },
};

/** Whether forced calls of `format` are constrained by {@link forcedCallGrammar}. */
export function constrainsForcedCalls(format: ToolCallFormat): boolean {
  return JSON_CALLS[format] !== undefined;
}

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
