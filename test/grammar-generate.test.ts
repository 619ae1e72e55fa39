import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError, loadModel, type GenerateOptions, type Model } from "../src/index.js";
import { duplicateKey, schemaViolation } from "./json-schema-check.js";

// Grammar- and schema-constrained generation on the default model, whose weights know nothing of
// the constraints: whatever it would write, the sampler keeps the text inside the grammar, greedy
// or sampled, and lets the end of sequence through only once the text is complete. The parser and
// matcher themselves are tested in native/tests/grammar_test.cc.
const MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";
let model: Model;
let prompt: string;

beforeAll(async () => {
  model = await loadModel(MODEL, { threads: 2, contextSize: 1024 });
  prompt = model.applyChatTemplate([{ role: "user", content: "Describe a river." }]);
});

afterAll(() => model?.dispose());

async function generate(options: GenerateOptions) {
  return model.createSession().generate(prompt, { maxTokens: 600, ...options }).result;
}

/** The error a run ends with, which must come before any chunk and be its result's rejection too. */
async function refusedBeforeFirstChunk(run: ReturnType<ReturnType<Model["createSession"]>["generate"]>) {
  const chunks: unknown[] = [];
  const error = await (async () => {
    for await (const chunk of run) chunks.push(chunk);
  })().catch((e: unknown) => e);
  expect(chunks).toEqual([]);
  await expect(run.result).rejects.toBe(error);
  expect(error).toBeInstanceOf(BloomeryError);
  return error;
}

const SAMPLED = [
  { temperature: 0 },
  { temperature: 1, seed: 1 },
  { temperature: 1.5, topK: 0, topP: 1, minP: 0, seed: 2 },
];

const SCHEMAS: Record<string, Record<string, unknown>> = {
  "an object with required and optional properties": {
    type: "object",
    properties: {
      name: { type: "string", maxLength: 12 },
      kind: { enum: ["river", "lake", "sea"] },
      length: { type: "integer" },
      navigable: { type: "boolean" },
    },
    required: ["name", "kind"],
  },
  "arrays with bounds, numbers, null and anyOf": {
    type: "object",
    properties: {
      depths: { type: "array", items: { type: "number" }, minItems: 2, maxItems: 4 },
      source: { anyOf: [{ type: "null" }, { const: "spring" }, { type: "string", maxLength: 8 }] },
    },
    required: ["depths", "source"],
  },
  "a recursive $ref": {
    $defs: {
      node: {
        type: "object",
        properties: {
          id: { type: "integer" },
          children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 1 },
        },
        required: ["id"],
      },
    },
    $ref: "#/$defs/node",
  },
  // Values that share long prefixes (and some that are prefixes of others): the grammar follows
  // one parse per shared prefix, not one per value.
  "an enum of 3,000 values": {
    type: "object",
    properties: {
      code: { enum: Array.from({ length: 3000 }, (_, i) => (i % 3 === 2 ? i : `${["river", "lake"][i % 2]}-${i}`)) },
    },
    required: ["code"],
  },
  "a tuple, a type list and additionalProperties": {
    type: "array",
    prefixItems: [
      { type: ["integer", "string"], maxLength: 5 },
      { type: "object", additionalProperties: { type: "boolean" } },
    ],
  },
};

describe("jsonSchema", () => {
  for (const [what, schema] of Object.entries(SCHEMAS)) {
    it(`writes JSON that validates: ${what}`, async () => {
      // Keys of additional properties are free strings, which a hot sampler may never close.
      const samplings = schema.prefixItems ? SAMPLED.slice(0, 2) : SAMPLED;
      for (const sampling of samplings) {
        const run = await generate({ jsonSchema: schema, ...sampling });
        expect(run.stopReason, run.text).toBe("eos");
        const value: unknown = JSON.parse(run.text);
        expect(schemaViolation(schema, value), run.text).toBeUndefined();
        expect(duplicateKey(run.text), run.text).toBeUndefined();
      }
    });
  }

  it("refuses a keyword it cannot honour, by name, before its first chunk", async () => {
    const session = model.createSession();
    const pattern = { type: "string", pattern: "^[a-z]+$" };
    const run = session.generate(prompt, { jsonSchema: pattern });
    const error = await refusedBeforeFirstChunk(run);
    expect(error).toMatchObject({ code: "JSON_SCHEMA_UNSUPPORTED", message: expect.stringContaining('"pattern"') });
    expect(session.position).toBe(0);
  });

  it("refuses a schema that is not plain data (it converts on a worker thread)", async () => {
    const run = model.createSession().generate(prompt, { jsonSchema: { enum: ["a", () => "b"] } });
    await expect(run.result).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
      message: expect.stringContaining("plain data"),
    });
  });
});

describe("grammar", () => {
  it("forces a fixed text exactly, then ends", async () => {
    const text = 'The answer is "42".\nÉtienne said: ok!';
    const grammar = `root ::= "The answer is \\"42\\".\\n" name " said: ok!"\nname ::= "Étienne"`;
    for (const sampling of SAMPLED) {
      const run = await generate({ grammar, ...sampling });
      expect(run.text).toBe(text);
      expect(run.stopReason).toBe("eos");
    }
  });

  it("keeps a sampled text inside a character-class grammar", async () => {
    const grammar = 'root ::= [a-z]+ (" " [a-z]+){2,5} "."';
    for (const sampling of SAMPLED) {
      const run = await generate({ grammar, ...sampling });
      expect(run.text).toMatch(/^[a-z]+( [a-z]+){2,5}\.$/);
    }
  });

  it("refuses a bad grammar by name, with its line and column, before the first chunk", async () => {
    const session = model.createSession();
    // The grammar parses on a worker thread: its refusal ends the generation.
    const run = session.generate(prompt, { grammar: 'root ::= "a"\nitem ::= "b" | (' });
    const error = await refusedBeforeFirstChunk(run);
    expect((error as BloomeryError).code).toBe("GRAMMAR_INVALID");
    expect((error as BloomeryError).message).toMatch(/line 2, column 17: expected '\)'/);
    expect(() => session.generate(prompt, { grammar: "root ::= x", jsonSchema: {} })).toThrow(
      expect.objectContaining({ code: "INVALID_ARGUMENT" }),
    );
    expect(session.position).toBe(0);
  });

  it("takes a promise of a grammar: the generation follows it once it settles, or ends with its refusal", async () => {
    const grammar = 'root ::= "later, " [a-z]{3,6} "."';
    const later = new Promise<string>((resolve) => setTimeout(() => resolve(grammar), 50));
    const run = await generate({ grammar: later, temperature: 0 });
    expect(run.text).toMatch(/^later, [a-z]{3,6}\.$/);
    const session = model.createSession();
    const refused = new BloomeryError("JSON_SCHEMA_UNSUPPORTED", "built elsewhere, and refused there");
    expect(await refusedBeforeFirstChunk(session.generate(prompt, { grammar: Promise.reject(refused) }))).toBe(refused);
    const notText = Promise.resolve(42) as unknown as Promise<string>;
    const error = await refusedBeforeFirstChunk(session.generate(prompt, { grammar: notText }));
    expect((error as BloomeryError).code).toBe("INVALID_ARGUMENT");
    expect(() => session.generate(prompt, { grammar: 42 as unknown as string })).toThrow(
      expect.objectContaining({ code: "INVALID_ARGUMENT" }),
    );
    expect(session.position).toBe(0);
  });
});

describe("beside other sessions", () => {
  // A constrained draw runs on the scheduler's drawing thread while the other sessions' passes go
  // on: the tokens of each run must be what it draws alone, and a grammar's failure its own.
  it("each run gives what it gives alone, a failing grammar ending only its own", async () => {
    const parallelModel = await loadModel(MODEL, { threads: 2, contextSize: 1024, parallel: 3 });
    try {
      const runs: GenerateOptions[] = [
        { grammar: 'root ::= [a-z]+ (" " [a-z]+){2,5} "."', temperature: 1, seed: 3 },
        { temperature: 0 },
        { jsonSchema: SCHEMAS["an object with required and optional properties"]!, temperature: 0 },
      ];
      const generate = (options: GenerateOptions) =>
        parallelModel.createSession().generate(prompt, { maxTokens: 60, ...options }).result;
      const alone: string[] = [];
      for (const options of runs) alone.push((await generate(options)).text);
      const together = await Promise.all(runs.map(generate));
      expect(together.map((run) => run.text)).toEqual(alone);
      expect(alone[0]).toMatch(/^[a-z]+( [a-z]+){2,5}\.$/);

      // Once the text is "ab", only the end of sequence continues it, which the grammar forbids
      // before its end: "abc" is required.
      const failing = parallelModel.createSession().generate(prompt, {
        grammar: 'root ::= "ab" [c]',
        logitBias: Object.fromEntries(Array.from(parallelModel.tokenize("c"), (id) => [id, -Infinity])),
        maxTokens: 20,
      }).result;
      const beside = generate({ temperature: 0 });
      await expect(failing).rejects.toMatchObject({ code: "GRAMMAR_INVALID" });
      expect((await beside).text).toBe(alone[1]);
    } finally {
      await parallelModel.dispose();
    }
  });
});
