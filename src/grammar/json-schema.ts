/**
 * JSON Schema to GBNF: a grammar whose sentences are exactly the JSON texts (with bounded
 * whitespace) that the schema accepts, for `Session.generate({ jsonSchema })`. Pure; no I/O.
 *
 * Supported: `type` (one or a list), `properties`, `required`, `additionalProperties`, `items` (an array of them: a tuple, as prefixItems),
 * `prefixItems`, `minItems`, `maxItems`, `minLength`, `maxLength`, `enum`, `const`, `anyOf`,
 * `oneOf` (read as anyOf), a one-element `allOf`, `$ref` to `#/$defs/...` or `#/definitions/...`
 * (recursive schemas too), and the annotations (`title`, `description`, `default`, ...). Anything
 * else that would constrain the value (`pattern`, `format`, `minimum`, ...) is refused with
 * BloomeryError JSON_SCHEMA_UNSUPPORTED naming the keyword and where it is, rather than ignored.
 *
 * As llama.cpp's converter does, an object schema that lists `properties` allows no other
 * properties unless `additionalProperties` says so, and properties come in the listed order.
 * An `enum` shares the prefixes its values have in common (one parse per distinct prefix, not per
 * value, is what the matcher follows).
 *
 * The conversion runs on the caller's thread, so it is bounded: a schema past
 * {@link JSON_SCHEMA_LIMITS} is refused with BloomeryError JSON_SCHEMA_TOO_COMPLEX naming the limit.
 * @module
 */
import { BloomeryError } from "../errors.js";

/** What one schema may take; together they keep a conversion to a few milliseconds. */
export const JSON_SCHEMA_LIMITS = {
  /** Schemas inside schemas (properties, items, anyOf, ...), `$ref`s followed included. */
  depth: 64,
  /** Schemas visited in all. */
  schemas: 10_000,
  /** Values of one `enum`. */
  enumValues: 10_000,
  /** The counts of minItems / maxItems / minLength / maxLength, added up over the schema (each is a copy in the grammar). */
  repetitions: 100_000,
  /** Characters of the grammar the schema becomes. */
  grammarChars: 256 * 1024,
} as const;

/** Keywords that describe a schema without constraining the value. */
const ANNOTATIONS = new Set([
  "$schema",
  "$id",
  "$comment",
  "title",
  "description",
  "default",
  "examples",
  "deprecated",
  "readOnly",
  "writeOnly",
  "$defs",
  "definitions",
]);

/** Keywords the converter reads. */
const HANDLED = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "prefixItems",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "enum",
  "const",
  "anyOf",
  "oneOf",
  "allOf",
  "$ref",
]);

/** The rules every grammar may use: JSON's pieces, with at most one line break and 20 blanks between tokens. */
const PRIMITIVES: Record<string, string> = {
  space: '| " " | "\\n" [ \\t]{0,20}',
  boolean: '("true" | "false") space',
  null: '"null" space',
  "integral-part": "[0] | [1-9] [0-9]{0,15}",
  "decimal-part": "[0-9]{1,16}",
  integer: '"-"? integral-part space',
  number: '"-"? integral-part ("." decimal-part)? ([eE] [-+]? integral-part)? space',
  char: '[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})',
  string: '"\\"" char* "\\"" space',
  value: "object | array | string | number | boolean | null",
  object: '"{" space ( string ":" space value ("," space string ":" space value)* )? "}" space',
  array: '"[" space ( value ("," space value)* )? "]" space',
};

/** What each primitive rule uses, so a grammar carries only the rules it needs. */
const PRIMITIVE_USES: Record<string, readonly string[]> = {
  boolean: ["space"],
  null: ["space"],
  integer: ["integral-part", "space"],
  number: ["integral-part", "decimal-part", "space"],
  string: ["char", "space"],
  value: ["object", "array", "string", "number", "boolean", "null"],
  object: ["space", "string", "value"],
  array: ["space", "value"],
};

/** A GBNF literal for `text` (UTF-8 passes through; quotes, backslashes and controls are escaped). */
export function gbnfLiteral(text: string): string {
  let out = '"';
  for (const ch of text) {
    const code = ch.codePointAt(0)!;
    if (ch === '"' || ch === "\\") out += "\\" + ch;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += "\\x" + code.toString(16).padStart(2, "0");
    else out += ch;
  }
  return out + '"';
}

type Schema = Record<string, unknown>;

class Converter {
  readonly #rules = new Map<string, string>();
  readonly #root: unknown;
  /** Rule names of the `$ref`s met so far, by reference. */
  readonly #refs = new Map<string, string>();
  /**
   * The `$ref`s being expanded since which nothing has been read yet (no "{" or "["): meeting
   * one again would be a left-recursive grammar, which no top-down matcher can follow.
   */
  #unread = new Set<string>();
  /** The next suffix to try for each rule name, so that making names unique stays linear. */
  readonly #suffixes = new Map<string, number>();
  #depth = 0;
  #schemas = 0;
  #repetitions = 0;
  /** Characters of the rules set so far, and of the enum and const values read (not yet in a rule). */
  #chars = 0;
  #literals = 0;

  constructor(root: unknown) {
    this.#root = root;
  }

  grammar(): string {
    const root = this.#visit(this.#root, "root", "#");
    const lines = [`root ::= ${root}`];
    for (const [name, body] of this.#rules) lines.push(`${name} ::= ${body}`);
    const grammar = lines.join("\n") + "\n";
    this.#limit("grammarChars", grammar.length, "characters of grammar");
    return grammar;
  }

  /** The GBNF expression for `schema`, adding the rules it needs; `name` names those rules. */
  #visit(schema: unknown, name: string, path: string): string {
    this.#limit("depth", this.#depth + 1, "levels of nesting", path);
    this.#limit("schemas", ++this.#schemas, "schemas", path);
    this.#depth++;
    try {
      return this.#visitSchema(schema, name, path);
    } finally {
      this.#depth--;
    }
  }

  #visitSchema(schema: unknown, name: string, path: string): string {
    if (schema === true) return this.#primitive("value");
    if (schema === false) this.#refuse(path, "the schema `false` accepts no value");
    if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
      throw new BloomeryError("INVALID_ARGUMENT", `jsonSchema at ${path} must be an object or a boolean`, { path });
    }
    const s = schema as Schema;
    for (const key of Object.keys(s)) {
      if (!HANDLED.has(key) && !ANNOTATIONS.has(key)) this.#refuse(path, `the keyword "${key}" is not supported`);
    }
    if (s.$ref !== undefined) return this.#ref(s.$ref, path);
    if (s.const !== undefined) {
      this.#use("space");
      return `${gbnfLiteral(this.#json(s.const, path))} space`;
    }
    if (s.enum !== undefined) {
      if (!Array.isArray(s.enum) || s.enum.length === 0) this.#refuse(path, "enum must be a non-empty array");
      this.#limit("enumValues", s.enum.length, "enum values", path);
      this.#use("space");
      return `${this.#choice(
        s.enum.map((v) => this.#json(v, path)),
        `${name}-enum`,
      )} space`;
    }
    const choices = s.anyOf ?? s.oneOf;
    if (choices !== undefined) {
      if (!Array.isArray(choices) || choices.length === 0)
        this.#refuse(path, "anyOf / oneOf must be a non-empty array");
      const key = s.anyOf !== undefined ? "anyOf" : "oneOf";
      return `(${choices.map((c, i) => this.#visit(c, `${name}-${i}`, `${path}/${key}/${i}`)).join(" | ")})`;
    }
    if (s.allOf !== undefined) {
      if (!Array.isArray(s.allOf) || s.allOf.length !== 1)
        this.#refuse(path, "allOf is supported with one schema only");
      return this.#visit(s.allOf[0], name, `${path}/allOf/0`);
    }
    const type = s.type;
    if (Array.isArray(type)) {
      return `(${type.map((t) => this.#typed(s, t, `${name}-${String(t)}`, path)).join(" | ")})`;
    }
    if (type === undefined) {
      if (s.properties !== undefined || s.additionalProperties !== undefined)
        return this.#typed(s, "object", name, path);
      if (s.items !== undefined || s.prefixItems !== undefined) return this.#typed(s, "array", name, path);
      return this.#primitive("value");
    }
    return this.#typed(s, type, name, path);
  }

  #typed(s: Schema, type: unknown, name: string, path: string): string {
    switch (type) {
      case "object":
        return this.#object(s, name, path);
      case "array":
        return this.#array(s, name, path);
      case "string":
        return this.#string(s, path);
      case "number":
      case "integer":
      case "boolean":
      case "null":
        return this.#primitive(type);
      default:
        return this.#refuse(path, `the type ${JSON.stringify(type)} is not a JSON Schema type`);
    }
  }

  #object(s: Schema, name: string, path: string): string {
    return this.#afterReading(() => this.#objectBody(s, name, path));
  }

  #objectBody(s: Schema, name: string, path: string): string {
    const properties = s.properties ?? {};
    if (typeof properties !== "object" || properties === null || Array.isArray(properties)) {
      this.#refuse(path, "properties must be an object");
    }
    const required = s.required ?? [];
    if (!Array.isArray(required) || required.some((r) => typeof r !== "string")) {
      this.#refuse(path, "required must be an array of property names");
    }
    const keys = Object.keys(properties);
    const listed = new Set(keys);
    for (const r of required as string[]) {
      if (!listed.has(r)) this.#refuse(path, `required names "${r}", which properties does not define`);
    }
    const extra = s.additionalProperties;
    if (keys.length === 0 && (extra === undefined || extra === true)) return this.#primitive("object");
    this.#use("space");
    const pairs = keys.map((key) => {
      const value = this.#visit((properties as Schema)[key], `${name}-${ruleName(key)}`, `${path}/properties/${key}`);
      return `${gbnfLiteral(JSON.stringify(key))} space ":" space ${value}`;
    });
    // Properties past the listed ones, when additionalProperties allows them.
    let rest = "";
    let restFirst = "";
    if (extra !== undefined && extra !== false) {
      const value = this.#visit(extra, `${name}-additional`, `${path}/additionalProperties`);
      const pair = this.#add(`${name}-additional-kv`, `string ":" space ${value}`);
      this.#use("string");
      rest = this.#add(`${name}-additional-rest`, `("," space ${pair})*`);
      restFirst = `(${pair} ${rest})?`;
    }
    // after[i]: properties i.. once something is written (each starts with a comma);
    // first[i]: properties i.. before anything is (the first one written has none).
    let after = rest;
    let first = restFirst;
    for (let i = keys.length - 1; i >= 0; i--) {
      const optional = !(required as string[]).includes(keys[i]!);
      const kv = this.#add(`${name}-kv-${ruleName(keys[i]!)}`, pairs[i]!);
      first = this.#add(`${name}-first-${i}`, `${kv} ${after}${optional ? ` | ${first || '""'}` : ""}`);
      if (i > 0)
        after = this.#add(`${name}-after-${i}`, `"," space ${kv} ${after}${optional ? ` | ${after || '""'}` : ""}`);
    }
    return `"{" space ${first} "}" space`;
  }

  #array(s: Schema, name: string, path: string): string {
    return this.#afterReading(() => this.#arrayBody(s, name, path));
  }

  /** Visits what comes after an opening bracket: the `$ref`s expanded so far have read something. */
  #afterReading(visit: () => string): string {
    const unread = this.#unread;
    this.#unread = new Set();
    try {
      return visit();
    } finally {
      this.#unread = unread;
    }
  }

  #arrayBody(s: Schema, name: string, path: string): string {
    const min = this.#count(s, "minItems", path) ?? 0;
    const max = this.#count(s, "maxItems", path);
    if (max !== undefined && max < min) this.#refuse(path, "maxItems is below minItems");
    this.#use("space");
    if (s.prefixItems !== undefined) {
      if (!Array.isArray(s.prefixItems)) this.#refuse(path, "prefixItems must be an array");
      if (s.items !== undefined && s.items !== false) this.#refuse(path, "items beside prefixItems is not supported");
      const items = s.prefixItems.map((item, i) => this.#visit(item, `${name}-${i}`, `${path}/prefixItems/${i}`));
      return `"[" space ${items.join(' "," space ')} "]" space`;
    }
    if (Array.isArray(s.items)) {
      // Draft 4-2019's tuple form, which llama.cpp reads as prefixItems.
      const items = s.items.map((item, i) => this.#visit(item, `${name}-${i}`, `${path}/items/${i}`));
      return `"[" space ${items.join(' "," space ')} "]" space`;
    }
    const item = this.#add(`${name}-item`, this.#visit(s.items ?? true, `${name}-item`, `${path}/items`));
    if (max === 0) return `"[" space "]" space`;
    const more = `("," space ${item}){${Math.max(min - 1, 0)},${max === undefined ? "" : max - 1}}`;
    const list = `${item} ${more}`;
    return `"[" space ${min > 0 ? list : `(${list})?`} "]" space`;
  }

  #string(s: Schema, path: string): string {
    const min = this.#count(s, "minLength", path) ?? 0;
    const max = this.#count(s, "maxLength", path);
    if (max !== undefined && max < min) this.#refuse(path, "maxLength is below minLength");
    if (min === 0 && max === undefined) return this.#primitive("string");
    this.#use("char");
    this.#use("space");
    return `"\\"" char{${min},${max ?? ""}} "\\"" space`;
  }

  #ref(ref: unknown, path: string): string {
    const match = typeof ref === "string" ? /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref) : null;
    if (!match)
      this.#refuse(path, `$ref ${JSON.stringify(ref)} is not supported (only #/$defs/... and #/definitions/...)`);
    if (this.#unread.has(ref as string)) {
      this.#refuse(path, `$ref ${ref as string} refers back to itself before any of the value is read`);
    }
    const known = this.#refs.get(ref as string);
    if (known) return known;
    const defs = (this.#root as Schema | null)?.[match[1]!] as Schema | undefined;
    let key: string;
    try {
      key = decodeURIComponent(match[2]!);
    } catch {
      this.#refuse(path, `$ref ${ref as string} is not a valid reference`);
    }
    const target = typeof defs === "object" && defs !== null && Object.hasOwn(defs, key) ? defs[key] : undefined;
    if (target === undefined) this.#refuse(path, `$ref ${ref as string} names no definition`);
    const name = this.#unique(`ref-${ruleName(match[2]!)}`);
    // Reserved before visiting, so that a recursive definition refers to itself.
    this.#refs.set(ref as string, name);
    this.#set(name, "");
    this.#unread.add(ref as string);
    try {
      this.#set(name, this.#visit(target, name, ref as string));
    } finally {
      this.#unread.delete(ref as string);
    }
    return name;
  }

  #count(s: Schema, key: string, path: string): number | undefined {
    const v = s[key];
    if (v === undefined) return undefined;
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > 10000) {
      this.#refuse(path, `${key} must be an integer from 0 to 10000`);
    }
    this.#repetitions += v;
    this.#limit(
      "repetitions",
      this.#repetitions,
      "items and characters counted by minItems, maxItems, minLength and maxLength",
      path,
    );
    return v;
  }

  /** The JSON text of an enum or const value. */
  #json(value: unknown, path: string): string {
    let text: string | undefined;
    try {
      text = JSON.stringify(value);
    } catch (error) {
      this.#refuse(path, `enum and const values must be JSON (${(error as Error).message})`);
    }
    if (text === undefined) this.#refuse(path, "enum and const values must be JSON");
    this.#literals += text.length;
    this.#limit("grammarChars", this.#chars + this.#literals, "characters of grammar", path);
    return text;
  }

  /**
   * A GBNF expression for exactly `texts`, sharing their common prefixes: a trie over the sorted
   * texts (each a range of them), whose branching points become rules named after `name`; built
   * and written without recursion, in time linear in the texts' length.
   */
  #choice(texts: string[], name: string): string {
    const words = [...new Set(texts)].map(codePoints).sort(compareWords);
    const pending: { lo: number; hi: number; depth: number; rule: string | undefined }[] = [
      { lo: 0, hi: words.length, depth: 0, rule: undefined },
    ];
    let expression = "";
    while (pending.length > 0) {
      const { lo, hi, depth, rule } = pending.pop()!;
      const alternatives: string[] = [];
      let i = lo;
      // A word that ends here sorts first among those it begins.
      if (words[i]!.length === depth) {
        alternatives.push('""');
        i++;
      }
      while (i < hi) {
        const first = words[i]!;
        let j = i + 1;
        while (j < hi && words[j]![depth] === first[depth]) j++;
        // The run the group shares: up to where its first and last words part, or the first ends.
        const last = words[j - 1]!;
        let end = depth + 1;
        while (end < first.length && first[end] === last[end]) end++;
        const run = gbnfLiteral(textOf(first, depth, end));
        if (j - i === 1) {
          alternatives.push(run);
        } else {
          const branch = this.#add(name, "");
          pending.push({ lo: i, hi: j, depth: end, rule: branch });
          alternatives.push(`${run} ${branch}`);
        }
        i = j;
      }
      const body = alternatives.join(" | ");
      if (rule === undefined) expression = `(${body})`;
      else this.#set(rule, body);
    }
    return expression;
  }

  /** Adds the primitive rule and what it uses; returns its name. */
  #primitive(name: string): string {
    this.#use(name);
    return name;
  }

  #use(name: string): void {
    if (this.#rules.has(name)) return;
    this.#set(name, PRIMITIVES[name]!);
    for (const dep of PRIMITIVE_USES[name] ?? []) this.#use(dep);
  }

  /** A new rule with `body` (named after `name`, made unique); returns its name. */
  #add(name: string, body: string): string {
    const unique = this.#unique(name);
    this.#set(unique, body);
    return unique;
  }

  /** Sets a rule, counting its characters against the grammar's limit as it grows. */
  #set(name: string, body: string): void {
    this.#rules.set(name, body);
    this.#limit("grammarChars", (this.#chars += name.length + body.length + 6), "characters of grammar");
  }

  #unique(name: string): string {
    let unique = name;
    let i = this.#suffixes.get(name) ?? 1;
    while (this.#rules.has(unique) || unique in PRIMITIVES || unique === "root") unique = `${name}-${i++}`;
    this.#suffixes.set(name, i);
    return unique;
  }

  #refuse(path: string, why: string): never {
    throw new BloomeryError("JSON_SCHEMA_UNSUPPORTED", `jsonSchema at ${path}: ${why}`, { path });
  }

  /** Refuses once `value` passes `JSON_SCHEMA_LIMITS[limit]`. */
  #limit(limit: keyof typeof JSON_SCHEMA_LIMITS, value: number, what: string, path?: string): void {
    const max = JSON_SCHEMA_LIMITS[limit];
    if (value <= max) return;
    throw new BloomeryError(
      "JSON_SCHEMA_TOO_COMPLEX",
      `jsonSchema${path ? ` at ${path}` : ""}: more than ${max} ${what} (JSON_SCHEMA_LIMITS.${limit})`,
      { limit, max, ...(path && { path }) },
    );
  }
}

/**
 * A rule name from a property or definition name (GBNF names are letters, digits, - and _), cut
 * short: names nest (root-a-b-...), and only need to be readable and unique.
 */
function ruleName(text: string): string {
  return text.slice(0, 32).replace(/[^A-Za-z0-9_-]/g, "-") || "empty";
}

/** The code points of `text`, as numbers: sorting and splitting them is several times cheaper than one-character strings. */
function codePoints(text: string): number[] {
  const out: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const code = text.codePointAt(i)!;
    out.push(code);
    if (code > 0xffff) i++;
  }
  return out;
}

/** The text of code points [from, to) of `points`, a slice at a time (an argument list has a length limit). */
function textOf(points: number[], from: number, to: number): string {
  let text = "";
  for (let i = from; i < to; i += 4096) text += String.fromCodePoint(...points.slice(i, Math.min(to, i + 4096)));
  return text;
}

/** Orders words (arrays of code points) so that those sharing a prefix lie together, a prefix first. */
function compareWords(a: number[], b: number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] !== b[i]) return a[i]! < b[i]! ? -1 : 1;
  }
  return a.length - b.length;
}

/**
 * A GBNF grammar for the JSON texts `schema` accepts (see the module's notes for what is
 * supported). `{}` or `true` give any JSON value; `{ type: "object" }` any JSON object.
 * Throws BloomeryError JSON_SCHEMA_UNSUPPORTED naming a keyword it cannot honour,
 * JSON_SCHEMA_TOO_COMPLEX naming the limit of {@link JSON_SCHEMA_LIMITS} it goes past.
 */
export function jsonSchemaToGrammar(schema: unknown): string {
  return new Converter(schema).grammar();
}
