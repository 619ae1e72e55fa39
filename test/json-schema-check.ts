// A JSON Schema validator for the keywords src/grammar/json-schema.ts supports, written from the
// specification (draft 2020-12) for the tests: the converter's output is checked against it, not
// against itself. Returns the first violation found, or undefined.
type Schema = Record<string, unknown> | boolean;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function typeOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

function sameJson(a: unknown, b: unknown): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

export function schemaViolation(schema: Schema, value: unknown, root: Schema = schema, at = "$"): string | undefined {
  if (schema === true) return undefined;
  if (schema === false) return `${at}: no value is allowed`;
  if (typeof schema.$ref === "string") {
    const [, where, name] = /^#\/(\$defs|definitions)\/(.+)$/.exec(schema.$ref)!;
    return schemaViolation((root as Record<string, Record<string, Schema>>)[where!]![name!]!, value, root, at);
  }
  if ("const" in schema && !sameJson(schema.const, value)) return `${at}: not the const`;
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => sameJson(e, value))) return `${at}: not in the enum`;
  for (const key of ["anyOf", "oneOf"] as const) {
    const choices = schema[key] as Schema[] | undefined;
    if (!choices) continue;
    const matching = choices.filter((c) => schemaViolation(c, value, root, at) === undefined).length;
    if (key === "anyOf" ? matching === 0 : matching !== 1) return `${at}: ${matching} of ${key} match`;
  }
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? (schema.type as string[]) : [schema.type as string];
    const actual = typeOf(value);
    if (!types.includes(actual) && !(actual === "integer" && types.includes("number"))) {
      return `${at}: ${actual} is not ${types.join(" or ")}`;
    }
  }
  if (typeof value === "string") {
    const length = [...value].length;
    if (typeof schema.minLength === "number" && length < schema.minLength) return `${at}: shorter than minLength`;
    if (typeof schema.maxLength === "number" && length > schema.maxLength) return `${at}: longer than maxLength`;
  }
  if (Array.isArray(value)) {
    if (typeof schema.minItems === "number" && value.length < schema.minItems) return `${at}: fewer than minItems`;
    if (typeof schema.maxItems === "number" && value.length > schema.maxItems) return `${at}: more than maxItems`;
    const prefix = (schema.prefixItems as Schema[] | undefined) ?? [];
    for (let i = 0; i < value.length; i++) {
      const itemSchema = i < prefix.length ? prefix[i]! : ((schema.items as Schema | undefined) ?? true);
      const bad = schemaViolation(itemSchema, value[i], root, `${at}[${i}]`);
      if (bad) return bad;
    }
  }
  if (isObject(value)) {
    const properties = (schema.properties as Record<string, Schema> | undefined) ?? {};
    for (const name of (schema.required as string[] | undefined) ?? []) {
      if (!(name in value)) return `${at}: required ${name} is missing`;
    }
    for (const [name, v] of Object.entries(value)) {
      const propertySchema =
        name in properties ? properties[name]! : ((schema.additionalProperties as Schema | undefined) ?? true);
      const bad = schemaViolation(propertySchema, v, root, `${at}.${name}`);
      if (bad) return bad;
    }
  }
  return undefined;
}

/** The first key that appears twice in one object of the JSON text (JSON.parse keeps the last silently). */
export function duplicateKey(text: string): string | undefined {
  const open: Set<string>[] = [];
  const pattern = /"((?:[^"\\]|\\.)*)"(\s*:)?|[{}]/g;
  for (const match of text.matchAll(pattern)) {
    if (match[0] === "{") open.push(new Set());
    else if (match[0] === "}") open.pop();
    else if (match[2] !== undefined) {
      const keys = open[open.length - 1]!;
      const key = JSON.parse(`"${match[1]!}"`) as string;
      if (keys.has(key)) return key;
      keys.add(key);
    }
  }
  return undefined;
}
