/**
 * The grammars of tool calls: what follows a call's opening up to its end (the rest of a tool's
 * name, and arguments that satisfy its `parameters` schema), so a call always parses. A forced call
 * (toolChoice `"required"` or a named function) follows it from the first generated token, after
 * the opening the prompt ends with (forcedCallPrefix); with `"auto"` it is lazy, holding from the
 * call's opening on (the trigger), as llama-server's lazy grammars do (common/chat.cpp).
 *
 * A format's markers that are control tokens of the model's vocabulary (DeepSeek's and Kimi-K2's
 * tool-call tokens, harmony's `<|call|>`, MiniMax-M2's section tags, DSML's `｜DSML｜`) have no text in the output
 * the grammar reads: the grammar names them by id (token terminals, `<[id]>`).
 * @module
 */
import { jsonSchemaToGrammar, gbnfLiteral } from "../grammar/json-schema.js";
import { DEEPSEEK_CALL_BEGIN, DEEPSEEK_CALL_END, DEEPSEEK_SECTION, DEEPSEEK_SEP } from "./deepseek.js";
import {
  DSML_INVOKE_BEGIN,
  DSML_INVOKE_END,
  DSML_PARAMETER_BEGIN,
  DSML_PARAMETER_END,
  DSML_SECTIONS,
  type DsmlFormat,
} from "./dsml.js";
import { HARMONY_CALL, HARMONY_CHANNEL, HARMONY_CONSTRAIN, HARMONY_MESSAGE, harmonyCallPrefix } from "./harmony.js";
import { KIMI_ARGUMENTS_BEGIN, KIMI_CALL_BEGIN, KIMI_CALL_END, KIMI_SECTION } from "./kimi.js";
import { MINIMAX_SECTION } from "./minimax.js";
import type { ToolCallFormat } from "./output.js";
import { TOOL_CALL_TAGS } from "./tagged-tool-calls.js";
import { isPlainObject, schemaAdmitsString } from "./tool-call-values.js";
import type { ChatTool } from "./types.js";

/** The control tokens of a format's markers, by their text (see {@link forcedCallGrammar}). */
export type ControlTokens = ReadonlyMap<string, number>;

/** Writes text into a grammar, its control-token markers as token terminals. */
type Spell = (text: string) => string;

/**
 * How a format writes each argument of an XML-style call: `keyOpen` KEY `keyClose` `valueOpen`
 * `pad` VALUE `pad` `close`, a line break allowed before each argument, before `valueOpen` and
 * before the call's end.
 */
interface XmlArgument {
  keyOpen: string;
  /** After the key: one text, or one for a string value and one for a JSON value (DSML states the type). */
  keyClose: string | { string: string; json: string };
  valueOpen: string;
  pad: string;
  /** Ends the value: a string value's text never holds it. */
  close: string;
}

/** What XML-style calls allow between their parts. */
const XML_SEPARATOR = '"\\n"?';

/** A call: the text before its arguments, how they are written, the text after them. */
interface CallShape {
  before: (name: string) => string;
  /** GBNF between `before` and the arguments (Kimi-K2's call index), given the marker speller. */
  between?: (spell: Spell) => string;
  /** Undefined: one JSON object; else one XML element per argument. */
  xml?: XmlArgument;
  /** The text after the arguments, in parts: an XML-style call allows a line break between them. */
  after: readonly string[];
  /**
   * `"auto"`'s lazy grammar: from `trigger` (the first marker of a call, a control token's text or
   * a word) on, the call's `opening` then the rest; none: `"auto"` stays free. `head`: the GBNF
   * of what follows the opening up to the arguments, where a format's calls open in several ways
   * (else the rest of `before`).
   */
  lazy?: { opening: string; trigger: string; head?: (name: string, spell: Spell) => string };
}

/** A DSML call (DeepSeek-V3.2, V4): its section, the invocation, parameters that state their type. */
function dsmlCall(format: DsmlFormat): CallShape {
  const section = DSML_SECTIONS[format];
  return {
    before: (name) => `${section.open}\n${DSML_INVOKE_BEGIN}${name}">\n`,
    xml: {
      keyOpen: DSML_PARAMETER_BEGIN,
      keyClose: { string: '" string="true">', json: '" string="false">' },
      valueOpen: "",
      pad: "",
      close: DSML_PARAMETER_END,
    },
    after: [DSML_INVOKE_END, section.close],
    lazy: { opening: `${section.open}\n${DSML_INVOKE_BEGIN}`, trigger: section.open },
  };
}

const CALLS: Record<ToolCallFormat, CallShape> = {
  hermes: {
    before: (name) => `<tool_call>\n{"name": ${JSON.stringify(name)}, "arguments": `,
    after: ["}\n</tool_call>"],
    lazy: { opening: "<tool_call>", trigger: "<tool_call>" },
  },
  llama3: {
    before: (name) => `{"name": ${JSON.stringify(name)}, "parameters": `,
    after: ["}"],
    lazy: { opening: '{"name": ', trigger: '{"name": ' },
  },
  "qwen3-coder": {
    before: (name) => `${TOOL_CALL_TAGS.open}\n<function=${name}>\n`,
    xml: { keyOpen: "<parameter=", keyClose: ">", valueOpen: "", pad: "\n", close: "</parameter>" },
    after: ["</function>", TOOL_CALL_TAGS.close],
    lazy: { opening: `${TOOL_CALL_TAGS.open}\n<function=`, trigger: TOOL_CALL_TAGS.open },
  },
  "glm-4.5": {
    before: (name) => `${TOOL_CALL_TAGS.open}${name}`,
    // GLM-4.5 and 4.6 put a line break after the name and after each tag, GLM-4.7 none.
    xml: { keyOpen: "<arg_key>", keyClose: "</arg_key>", valueOpen: "<arg_value>", pad: "", close: "</arg_value>" },
    after: [TOOL_CALL_TAGS.close],
    lazy: { opening: TOOL_CALL_TAGS.open, trigger: TOOL_CALL_TAGS.open },
  },
  "deepseek-v3.1": {
    before: (name) => `${DEEPSEEK_SECTION.open}${DEEPSEEK_CALL_BEGIN}${name}${DEEPSEEK_SEP}`,
    after: [DEEPSEEK_CALL_END + DEEPSEEK_SECTION.close],
    lazy: { opening: DEEPSEEK_SECTION.open + DEEPSEEK_CALL_BEGIN, trigger: DEEPSEEK_SECTION.open },
  },
  "deepseek-r1": {
    before: (name) => `${DEEPSEEK_SECTION.open}${DEEPSEEK_CALL_BEGIN}function${DEEPSEEK_SEP}${name}\n\`\`\`json\n`,
    after: [`\n\`\`\`${DEEPSEEK_CALL_END}${DEEPSEEK_SECTION.close}`],
    lazy: {
      opening: `${DEEPSEEK_SECTION.open}${DEEPSEEK_CALL_BEGIN}function${DEEPSEEK_SEP}`,
      trigger: DEEPSEEK_SECTION.open,
    },
  },
  "kimi-k2": {
    before: (name) => `${KIMI_SECTION.open}${KIMI_CALL_BEGIN}functions.${name}:`,
    between: (spell) => `[0-9]{1,9} ${spell(KIMI_ARGUMENTS_BEGIN)}`,
    after: [KIMI_CALL_END + KIMI_SECTION.close],
    lazy: { opening: `${KIMI_SECTION.open}${KIMI_CALL_BEGIN}functions.`, trigger: KIMI_SECTION.open },
  },
  "minimax-m2": {
    before: (name) => `${MINIMAX_SECTION.open}\n<invoke name="${name}">\n`,
    xml: { keyOpen: '<parameter name="', keyClose: '">', valueOpen: "", pad: "", close: "</parameter>" },
    after: ["</invoke>", MINIMAX_SECTION.close],
    lazy: { opening: `${MINIMAX_SECTION.open}\n<invoke name="`, trigger: MINIMAX_SECTION.open },
  },
  "deepseek-v3.2": dsmlCall("deepseek-v3.2"),
  "deepseek-v4": dsmlCall("deepseek-v4"),
  harmony: {
    before: (name) => harmonyCallPrefix(name),
    after: [HARMONY_CALL],
    // The recipient in the channel's header (`<|channel|>commentary to=functions.NAME
    // <|constrain|>json<|message|>`) or in the role's (` to=functions.NAME<|channel|>commentary
    // json<|message|>`), as llama.cpp's gpt-oss grammar takes them: from the recipient on. Nothing
    // joins the name's end but a marker or a space (the parser reads the name up to either).
    lazy: {
      opening: "to=functions.",
      trigger: "to=functions.",
      head: (name, spell) =>
        `${gbnfLiteral(name)} (${spell(HARMONY_CHANNEL)} ("commentary" | "analysis"))? ` +
        `(" " ${spell(HARMONY_CONSTRAIN)}? "json" | ${spell(HARMONY_CONSTRAIN)} "json")? ${spell(HARMONY_MESSAGE)}`,
    },
  },
};

/**
 * The GBNF grammar of the rest of a forced call after `opening` (the forced prefix without a
 * closed think block), for the tools it may call; undefined when no tool's call starts so.
 * `controls` holds the format's markers that are control tokens of the model's vocabulary, with
 * their ids. Throws JSON_SCHEMA_UNSUPPORTED / JSON_SCHEMA_TOO_COMPLEX for a tool's
 * schema it cannot follow.
 *
 * XML-style arguments (Qwen3-Coder, GLM-4.5, MiniMax-M2, DSML) are the schema's properties in its order,
 * the required ones always, each value as the parsers type it: one of the strings of a string
 * `enum` or `const`, any text without the value's closing tag where the schema admits a string,
 * else JSON of the property's schema; a schema without properties takes any arguments as text.
 */
export function forcedCallGrammar(
  format: ToolCallFormat,
  tools: readonly ChatTool[],
  opening: string,
  controls: ControlTokens = new Map(),
): string | undefined {
  const spell = speller(controls);
  return callsGrammar(format, tools, spell, restOfBefore(format, opening, spell));
}

/** A call's head after `opening`: the rest of its `before`, or undefined when it does not start so. */
function restOfBefore(format: ToolCallFormat, opening: string, spell: Spell): (name: string) => string | undefined {
  return (name) => {
    const before = CALLS[format].before(name);
    return before.startsWith(opening) ? spell(before.slice(opening.length)) : undefined;
  };
}

/**
 * The GBNF of a call of any of `tools` from where `headOf` starts: its head (GBNF; undefined: the
 * tool's call cannot start there), the arguments, the end.
 */
function callsGrammar(
  format: ToolCallFormat,
  tools: readonly ChatTool[],
  spell: Spell,
  headOf: (name: string) => string | undefined,
): string | undefined {
  const shape = CALLS[format];
  const alternatives: string[] = [];
  const rules: string[] = [];
  tools.forEach((tool, i) => {
    const head = headOf(tool.function.name);
    if (head === undefined) return;
    const prefix = `t${i}-`;
    const schema = tool.function.parameters ?? { type: "object" };
    const args = shape.xml ? xmlArguments(schema, shape.xml, prefix, spell) : jsonArguments(schema, prefix);
    rules.push(args.rules);
    const parts = [
      head,
      shape.between?.(spell),
      args.root,
      shape.xml && XML_SEPARATOR,
      shape.after.map(spell).join(shape.xml ? ` ${XML_SEPARATOR} ` : " "),
    ];
    alternatives.push(parts.filter((part) => part).join(" "));
  });
  if (alternatives.length === 0) return undefined;
  return `root ::= ${alternatives.join(" | ")}\n${rules.join("")}`;
}

/** The trigger of the format's lazy grammar (see lazyCallGrammar); undefined: `"auto"` stays free. */
export function lazyCallTrigger(format: ToolCallFormat): string | undefined {
  return CALLS[format].lazy?.trigger;
}

/**
 * `"auto"`'s lazy grammar: a whole call, from its opening on, and the trigger from which it holds
 * (a word, or the text of a control token of `controls`, which the sampler then reads as that
 * token); undefined for a format without one.
 */
export function lazyCallGrammar(
  format: ToolCallFormat,
  tools: readonly ChatTool[],
  controls: ControlTokens = new Map(),
): { grammar: string; trigger: string } | undefined {
  const lazy = CALLS[format].lazy;
  if (!lazy) return undefined;
  const spell = speller(controls);
  const head = lazy.head;
  const headOf = head ? (name: string) => head(name, spell) : restOfBefore(format, lazy.opening, spell);
  const rest = callsGrammar(format, tools, spell, headOf);
  if (!rest) return undefined;
  const call = rest.slice("root ".length);
  return { grammar: `root ::= ${spell(lazy.opening)} call\ncall ${call}`, trigger: lazy.trigger };
}

/** Text as GBNF: literals, and a token terminal for each control-token marker in it. */
function speller(controls: ControlTokens): Spell {
  const markers = [...controls.keys()].sort((a, b) => b.length - a.length);
  return (text) => {
    const parts: string[] = [];
    let literal = "";
    for (let i = 0; i < text.length; ) {
      const marker = markers.find((m) => text.startsWith(m, i));
      if (marker === undefined) {
        literal += text[i];
        i++;
        continue;
      }
      if (literal) parts.push(gbnfLiteral(literal));
      literal = "";
      parts.push(`<[${controls.get(marker)}]>`);
      i += marker.length;
    }
    if (literal) parts.push(gbnfLiteral(literal));
    return parts.join(" ");
  };
}

/** A JSON object of the schema: its root rule's name and its rules, prefixed. */
function jsonArguments(schema: unknown, prefix: string): { root: string; rules: string } {
  return { root: `${prefix}root`, rules: prefixRules(jsonSchemaToGrammar(schema), prefix) };
}

/** XML-style arguments of the schema (see forcedCallGrammar): the rule of all of them and the rules. */
function xmlArguments(
  schema: unknown,
  xml: XmlArgument,
  prefix: string,
  spell: Spell,
): { root: string; rules: string } {
  const properties = isPlainObject(schema) && isPlainObject(schema.properties) ? schema.properties : {};
  const required = new Set(isPlainObject(schema) && Array.isArray(schema.required) ? schema.required : []);
  const text = `${prefix}text`;
  const rules = [excludingRules(text, xml.close)];
  const argument = (key: string, value: XmlValue) =>
    [
      XML_SEPARATOR,
      spell(xml.keyOpen),
      key,
      spell(typeof xml.keyClose === "string" ? xml.keyClose : xml.keyClose[value.isString ? "string" : "json"]),
      xml.valueOpen && `${XML_SEPARATOR} ${spell(xml.valueOpen)}`,
      xml.pad && gbnfLiteral(xml.pad),
      value.gbnf,
      xml.pad && gbnfLiteral(xml.pad),
      spell(xml.close),
    ]
      .filter((part) => part)
      .join(" ");
  const keys = Object.keys(properties);
  if (keys.length === 0) {
    rules.push(`${prefix}arg ::= ${argument(`[^<>\\n"=]+`, { gbnf: text, isString: true })}\n`);
    return { root: `${prefix}arg*`, rules: rules.join("") };
  }
  const sequence = keys.map((key, k) => {
    const name = `${prefix}p${k}`;
    rules.push(`${name} ::= ${argument(gbnfLiteral(key), xmlValue(properties[key], `${name}-`, text, rules))}\n`);
    return required.has(key) ? name : `${name}?`;
  });
  return { root: `(${sequence.join(" ")})`, rules: rules.join("") };
}

/** One XML-style value's GBNF, and whether the parsers read it as a string (else as JSON). */
interface XmlValue {
  gbnf: string;
  isString: boolean;
}

/** The GBNF of one XML-style value (see forcedCallGrammar); its JSON rules, if any, go to `rules`. */
function xmlValue(property: unknown, prefix: string, text: string, rules: string[]): XmlValue {
  const strings = stringChoices(property);
  if (strings) return { gbnf: `(${strings.map(gbnfLiteral).join(" | ")})`, isString: true };
  if (schemaAdmitsString(property)) return { gbnf: text, isString: true };
  rules.push(prefixRules(jsonSchemaToGrammar(property ?? {}), prefix));
  return { gbnf: `${prefix}root`, isString: false };
}

/** The strings a property's `enum` or `const` allows, when it allows only strings. */
function stringChoices(property: unknown): string[] | undefined {
  if (!isPlainObject(property)) return undefined;
  if (typeof property.const === "string") return [property.const];
  const values = property.enum;
  if (Array.isArray(values) && values.length > 0 && values.every((v) => typeof v === "string")) return values;
  return undefined;
}

/**
 * Rules named `name` (and `name-k`) for any text that does not contain `word`: the states of
 * matching `word` (how much of it the text's end holds), each taking the characters that keep it
 * short of the whole word. Every state may end the text. @internal
 */
export function excludingRules(name: string, word: string): string {
  const chars = [...word];
  // next(k, c): how much of the word the text's end holds after c, when it held k.
  const next = (k: number, c: string): number => {
    const seen = chars.slice(0, k).join("") + c;
    for (let n = Math.min(chars.length, k + 1); n > 0; n--) {
      if (seen.endsWith(chars.slice(0, n).join(""))) return n;
    }
    return 0;
  };
  const state = (k: number) => (k === 0 ? name : `${name}-${k}`);
  const distinct = [...new Set(chars)];
  let out = "";
  for (let k = 0; k < chars.length; k++) {
    const alternatives = ['""'];
    for (const c of distinct) {
      const to = next(k, c);
      if (to < chars.length) alternatives.push(`${gbnfLiteral(c)} ${state(to)}`);
    }
    alternatives.push(`[^${distinct.map(classChar).join("")}] ${name}`);
    out += `${state(k)} ::= ${alternatives.join(" | ")}\n`;
  }
  return out;
}

/** A character inside a GBNF character class. */
function classChar(c: string): string {
  if ("[]\\^-".includes(c)) return `\\${c}`;
  return c === "\n" ? "\\n" : c;
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
