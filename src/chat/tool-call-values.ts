/**
 * The values tool calls are made of: their ids, and their name and arguments read from JSON.
 * @module
 */
import { randomBytes } from "node:crypto";
import type { ChatTool, ToolCall } from "./types.js";

const ID_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

/** A tool-call id as OpenAI spells them: `call_` and 24 random letters and digits. */
export function randomToolCallId(): string {
  const bytes = randomBytes(24);
  let id = "call_";
  for (const byte of bytes) id += ID_LETTERS[byte % ID_LETTERS.length];
  return id;
}

/** A plain object (not an array, not null). */
export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** A call from a JSON object with a string `name` and an object of `arguments` (or `parameters`). */
export function callFromJson(value: unknown): Omit<ToolCall, "id"> | undefined {
  if (!isPlainObject(value) || typeof value.name !== "string" || !value.name) return undefined;
  let args = value.arguments ?? value.parameters ?? {};
  // Some models write the arguments as a JSON string, as OpenAI's API sends them.
  if (typeof args === "string") {
    try {
      args = JSON.parse(args);
    } catch {
      return undefined;
    }
  }
  return isPlainObject(args) ? { name: value.name, arguments: args } : undefined;
}

/** An arguments object from its JSON text, or undefined when the text is not a JSON object. */
export function argumentsFromJson(text: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return isPlainObject(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Whether a JSON schema admits a string, as llama.cpp decides it for XML-style arguments: its
 * `type` is or lists "string", one of its `anyOf` / `oneOf` alternatives does, all of its `allOf`
 * parts do, or its `const` / every `enum` value is a string.
 */
export function schemaAdmitsString(schema: unknown): boolean {
  if (!isPlainObject(schema)) return false;
  const { type } = schema;
  if (type === "string" || (Array.isArray(type) && type.includes("string"))) return true;
  for (const key of ["anyOf", "oneOf"] as const) {
    const alternatives = schema[key];
    if (Array.isArray(alternatives) && alternatives.some(schemaAdmitsString)) return true;
  }
  const parts = schema.allOf;
  if (Array.isArray(parts) && parts.length > 0 && parts.every(schemaAdmitsString)) return true;
  if (typeof schema.const === "string") return true;
  const values = schema.enum;
  return Array.isArray(values) && values.length > 0 && values.every((v) => typeof v === "string");
}

/**
 * The argument value of an XML-style tool call (Qwen3-Coder's `<parameter=...>`, GLM's
 * `<arg_value>`), typed by the tool's schema as llama.cpp types it: the text as is when the
 * parameter's schema admits a string, its JSON value otherwise (the text itself when it is not
 * JSON).
 */
export function typedArgument(tools: readonly ChatTool[], name: string, key: string, text: string): unknown {
  const schema = tools.find((tool) => tool.function.name === name)?.function.parameters;
  const property = isPlainObject(schema?.properties) ? schema.properties[key] : undefined;
  return statedArgument(schemaAdmitsString(property), text);
}

/**
 * The arguments of an XML-style call whose body `inner` holds only `parameter` matches (a global
 * regex capturing the key and the raw value, or the key, a type and the raw value) and whitespace,
 * each value cleaned by `clean` and typed: by the type the call states where it states one (DSML's
 * `string="true"` the text as is, `"false"` its JSON value), else by {@link typedArgument}; undefined
 * when anything else stands between them (then the body is not what it seems).
 */
export function xmlCallArguments(
  tools: readonly ChatTool[],
  name: string,
  inner: string,
  parameter: RegExp,
  clean: (raw: string) => string = (raw) => raw,
): Record<string, unknown> | undefined {
  const args: Record<string, unknown> = {};
  let rest = inner;
  for (const match of inner.matchAll(parameter)) {
    const [whole, key] = match;
    const stated = match.length > 3 ? match[2] : undefined;
    const text = clean(match[match.length - 1]!);
    rest = rest.replace(whole, "");
    args[key!] =
      stated === undefined ? typedArgument(tools, name, key!, text) : statedArgument(stated === "true", text);
  }
  return rest.trim() ? undefined : args;
}

/** A value whose call states its type: a string as is, else its JSON value (the text itself when it is not JSON). */
function statedArgument(isString: boolean, text: string): unknown {
  if (isString) return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
