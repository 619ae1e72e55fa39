import { describe, expect, it } from "vitest";
import { BloomeryError, JSON_SCHEMA_LIMITS, jsonSchemaToGrammar } from "../src/index.js";
import { gbnfLiteral } from "../src/grammar/json-schema.js";

// The JSON Schema to GBNF conversion as text: what it writes for each construct and what it
// refuses by name. That its grammars accept exactly valid JSON is tested by generating under
// them (test/grammar-generate.test.ts), since only the native matcher reads GBNF.
function refusal(schema: unknown): BloomeryError {
  try {
    jsonSchemaToGrammar(schema);
  } catch (error) {
    return error as BloomeryError;
  }
  throw new Error("the schema was accepted");
}

describe("jsonSchemaToGrammar", () => {
  it("writes a root rule and only the primitives it uses", () => {
    expect(jsonSchemaToGrammar({ type: "boolean" })).toBe(
      'root ::= boolean\nboolean ::= ("true" | "false") space\nspace ::= | " " | "\\n" [ \\t]{0,20}\n',
    );
    const any = jsonSchemaToGrammar({});
    expect(any).toMatch(/^root ::= value\n/);
    for (const rule of ["value", "object", "array", "string", "number", "boolean", "null", "char", "space"]) {
      expect(any).toContain(`\n${rule} ::= `);
    }
  });

  it("lists properties in order, required ones always, optional ones maybe", () => {
    const grammar = jsonSchemaToGrammar({
      type: "object",
      properties: { a: { type: "integer" }, "b c": { type: "string" } },
      required: ["a"],
    });
    expect(grammar).toContain('root ::= "{" space root-first-0 "}" space');
    expect(grammar).toContain('root-kv-a ::= "\\"a\\"" space ":" space integer');
    expect(grammar).toContain('root-kv-b-c ::= "\\"b c\\"" space ":" space string');
    // "a" comes first and has no alternative without it; "b c" may follow, after a comma, or not.
    expect(grammar).toMatch(/\nroot-first-0 ::= root-kv-a root-after-1\n/);
    expect(grammar).toMatch(/\nroot-after-1 ::= "," space root-kv-b-c {2}\| ""\n/);
    expect(grammar).not.toContain("root-after-0");
  });

  it("bounds arrays and strings, and spells enums and consts as JSON", () => {
    const grammar = jsonSchemaToGrammar({
      type: "array",
      items: { enum: ["x", 1, null, { k: [true] }] },
      minItems: 2,
      maxItems: 5,
    });
    expect(grammar).toContain('root ::= "[" space root-item ("," space root-item){1,4} "]" space');
    expect(grammar).toContain('root-item ::= ("\\"x\\"" | "1" | "null" | "{\\"k\\":[true]}") space');
    expect(jsonSchemaToGrammar({ type: "string", minLength: 1, maxLength: 3 })).toContain(
      'root ::= "\\"" char{1,3} "\\"" space',
    );
    expect(jsonSchemaToGrammar({ const: "é\n" })).toContain('root ::= "\\"é\\\\n\\"" space');
  });

  it("reads an items array as a tuple, as prefixItems (llama.cpp's reading of the older draft)", () => {
    const tuple = { items: [{ type: "integer" }, { type: "string" }] };
    expect(jsonSchemaToGrammar(tuple)).toContain('root ::= "[" space integer "," space string "]" space');
    expect(jsonSchemaToGrammar(tuple)).toBe(
      jsonSchemaToGrammar({ prefixItems: [{ type: "integer" }, { type: "string" }] }),
    );
  });

  it("writes an enum as a trie: shared prefixes once, a rule per branching point", () => {
    expect(jsonSchemaToGrammar({ enum: ["ab1", "ab2", "ac", "ab2"] })).toBe(
      'root ::= ("\\"a" root-enum) space\n' +
        'space ::= | " " | "\\n" [ \\t]{0,20}\n' +
        'root-enum ::= "b" root-enum-1 | "c\\""\n' +
        'root-enum-1 ::= "1\\"" | "2\\""\n',
    );
    // A value that begins another may end there; surrogate pairs stay whole.
    expect(jsonSchemaToGrammar({ enum: [1, 12, 123] })).toContain('root ::= ("1" root-enum) space');
    expect(jsonSchemaToGrammar({ enum: [1, 12, 123] })).toContain('root-enum ::= "" | "2" root-enum-1');
    expect(jsonSchemaToGrammar({ enum: ["😀a", "😀b"] })).toContain('root ::= ("\\"😀" root-enum) space');
    // 😀 and 😁 share their first UTF-16 unit: the branch is between whole code points.
    expect(jsonSchemaToGrammar({ enum: ["😀", "😁"] })).toContain('root-enum ::= "😀\\"" | "😁\\""');
    const long = "é".repeat(5000) + "😀".repeat(5000);
    expect(jsonSchemaToGrammar({ enum: [long, "x"] })).toContain(`root-enum ::= "x\\"" | "${long}\\""`);
  });

  it("refuses a schema past its limits, naming the limit", () => {
    let deep: Record<string, unknown> = { type: "integer" };
    for (let i = 0; i < 1000; i++) deep = { type: "object", properties: { a: deep } };
    const cases: [unknown, keyof typeof JSON_SCHEMA_LIMITS][] = [
      [deep, "depth"],
      [{ enum: Array.from({ length: 100_000 }, (_, i) => i) }, "enumValues"],
      [{ anyOf: Array.from({ length: 20_000 }, () => ({ type: "null" })) }, "schemas"],
      [
        // Each bound is that many copies in the grammar: eleven strings of up to 10,000 characters.
        {
          type: "object",
          properties: Object.fromEntries(
            Array.from({ length: 11 }, (_, i) => [`s${i}`, { type: "string", maxLength: 10_000 }]),
          ),
        },
        "repetitions",
      ],
      [{ enum: Array.from({ length: 300 }, (_, i) => `${i}`.padEnd(1000, "x")) }, "grammarChars"],
      [
        {
          type: "object",
          properties: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`p${i}`.padEnd(60, "y"), {}])),
        },
        "grammarChars",
      ],
    ];
    for (const [schema, limit] of cases) {
      const error = refusal(schema);
      expect(error.code, limit).toBe("JSON_SCHEMA_TOO_COMPLEX");
      expect(error.details.limit).toBe(limit);
      expect(error.message).toContain(`more than ${JSON_SCHEMA_LIMITS[limit]}`);
    }
    // A schema that refers to itself through properties is deep, not endless.
    const cycle: Record<string, unknown> = { type: "object" };
    cycle.properties = { again: cycle };
    expect(refusal(cycle).details.limit).toBe("depth");
  });

  it("follows $ref to $defs and definitions, recursively", () => {
    const grammar = jsonSchemaToGrammar({
      definitions: { tree: { type: "array", items: { $ref: "#/definitions/tree" } } },
      $ref: "#/definitions/tree",
    });
    expect(grammar).toContain("root ::= ref-tree\n");
    expect(grammar).toMatch(/ref-tree-item ::= ref-tree\n/);
  });

  it("refuses what it cannot honour, naming the keyword and where it is", () => {
    const cases: [unknown, string][] = [
      [{ type: "string", pattern: "^a" }, 'jsonSchema at #: the keyword "pattern" is not supported'],
      [
        { type: "object", properties: { n: { type: "number", minimum: 0 } } },
        'at #/properties/n: the keyword "minimum"',
      ],
      [{ type: "string", format: "date" }, '"format"'],
      [{ $ref: "https://example.com/s.json" }, "only #/$defs/... and #/definitions/..."],
      [{ $ref: "#/$defs/missing" }, "names no definition"],
      [{ allOf: [{}, {}] }, "allOf is supported with one schema only"],
      [{ type: "object", properties: {}, required: ["x"] }, 'required names "x"'],
      [{ type: "date" }, "not a JSON Schema type"],
      [false, "accepts no value"],
      [{ type: "array", minItems: 3, maxItems: 2 }, "maxItems is below minItems"],
      // A cycle of $refs that reads nothing on the way would be a left-recursive grammar.
      [
        {
          $defs: { a: { $ref: "#/$defs/b" }, b: { anyOf: [{ $ref: "#/$defs/a" }, { type: "null" }] } },
          $ref: "#/$defs/a",
        },
        "$ref #/$defs/a refers back to itself before any of the value is read",
      ],
    ];
    for (const [schema, message] of cases) {
      const error = refusal(schema);
      expect(error).toBeInstanceOf(BloomeryError);
      expect(error.code).toBe("JSON_SCHEMA_UNSUPPORTED");
      expect(error.message).toContain(message);
    }
    expect(refusal("not a schema").code).toBe("INVALID_ARGUMENT");
  });

  it("escapes GBNF literals", () => {
    expect(gbnfLiteral('a"b\\c\n\t\u0001é')).toBe('"a\\"b\\\\c\\n\\t\\x01é"');
  });
});
