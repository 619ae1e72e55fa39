// Fuzzes the two parsers user input and model files reach from JavaScript: JSON schemas (to
// grammars, which the native parser then reads) and chat templates (rendered in their workers).
// Random and adversarial inputs: deep nesting, long chains, huge enums, cycles, lone surrogates,
// loops and blow-ups. Every outcome must be a result or a BloomeryError with a parser's code,
// each within its time. The grammar parser and matcher have their own fuzz in
// native/tests/grammar_fuzz_test.cc. The seed is printed; BLOOMERY_FUZZ_SEED sets it.
import { describe, expect, it } from "vitest";
import { BUILTIN_TEMPLATES } from "../src/chat/builtin-templates.js";
import { ChatTemplate } from "../src/chat/template.js";
import type { ChatMessage } from "../src/chat/types.js";
import { BloomeryError } from "../src/errors.js";
import { jsonSchemaToGrammar } from "../src/grammar/json-schema.js";
import { CHAT_TEMPLATE_LIMITS } from "../src/index.js";
import { callNative, callNativeAsync } from "../src/native.js";
import { openTokenizer } from "../src/tokenizer.js";
import { defaultModelPath } from "../tools/default-model.js";
import { prng } from "./gguf-helpers.js";

const SEED = Number(process.env.BLOOMERY_FUZZ_SEED ?? 0x5c4e3a);

type Rand = () => number;
const pick = <T>(rand: Rand, xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
const int = (rand: Rand, n: number) => Math.floor(rand() * n);

/** The code of a refusal; anything else that was thrown is the test's failure. */
function codeOf(error: unknown, allowed: readonly string[], what: string): string {
  if (!(error instanceof BloomeryError) || !allowed.includes(error.code)) {
    throw new Error(`${what}: not a refusal by code: ${String(error)} (${(error as BloomeryError).code})`, {
      cause: error,
    });
  }
  return error.code;
}

const STRINGS = ["", "a", "é", "日本", "😀", "\ud800", "\u0000", '"\\', "x".repeat(300), "__proto__", "constructor"];

function randomValue(rand: Rand, depth: number): unknown {
  switch (int(rand, depth > 3 ? 5 : 7)) {
    case 0:
      return pick(rand, STRINGS);
    case 1:
      return pick(rand, [0, -1, 1.5, 1e308, -0, 2 ** 53, NaN, Infinity]);
    case 2:
      return pick(rand, [true, false, null]);
    case 3:
      return undefined;
    case 4:
      return pick(rand, ["string", "object", "array", "integer", "number", "boolean", "null", "date"]);
    case 5:
      return Array.from({ length: int(rand, 4) }, () => randomValue(rand, depth + 1));
    default:
      return { [pick(rand, STRINGS)]: randomValue(rand, depth + 1) };
  }
}

const KEYWORDS = [
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
  "$defs",
  "definitions",
  "description",
  "pattern",
];

/** A schema of random keywords with values of the right shape, mostly, or of any. */
function randomSchema(rand: Rand, depth: number): unknown {
  if (depth > 5 || rand() < 0.15) return pick(rand, [{}, true, false, { type: "string" }, randomValue(rand, depth)]);
  const schema: Record<string, unknown> = {};
  for (let n = 1 + int(rand, 4); n > 0; n--) {
    const key = pick(rand, KEYWORDS);
    const sub = () => randomSchema(rand, depth + 1);
    switch (key) {
      case "type":
        schema.type = rand() < 0.8 ? randomValue(rand, 4) : [randomValue(rand, 4), randomValue(rand, 4)];
        break;
      case "properties":
        schema.properties = Object.fromEntries(
          Array.from({ length: int(rand, 4) }, () => [pick(rand, STRINGS), sub()]),
        );
        break;
      case "required":
        schema.required = rand() < 0.7 ? Object.keys(schema.properties ?? {}) : randomValue(rand, 3);
        break;
      case "anyOf":
      case "oneOf":
      case "allOf":
      case "prefixItems":
        schema[key] = Array.from({ length: int(rand, 4) }, sub);
        break;
      case "enum":
        schema.enum = Array.from({ length: int(rand, 6) }, () => randomValue(rand, 2));
        break;
      case "$ref":
        schema.$ref = pick(rand, ["#/$defs/a", "#/definitions/b", "#/$defs/%zz", "#/$defs/constructor", "#/x"]);
        break;
      case "$defs":
      case "definitions":
        schema[key] = { a: sub(), b: sub() };
        break;
      case "minItems":
      case "maxItems":
      case "minLength":
      case "maxLength":
        // The largest count allowed costs its copies in the grammar: seldom.
        schema[key] = rand() < 0.03 ? 10_000 : pick(rand, [0, 1, 3, 99, 10_001, -1, 1.5, "2"]);
        break;
      default:
        schema[key] = rand() < 0.5 ? sub() : randomValue(rand, 3);
    }
  }
  return schema;
}

/** Schemas the findings and their kin are made of. */
function adversarialSchema(rand: Rand): unknown {
  const n = pick(rand, [50, 64, 65, 1000, 20_000]);
  switch (int(rand, 6)) {
    case 0: {
      let deep: unknown = { type: "integer" };
      for (let i = 0; i < n; i++) deep = rand() < 0.5 ? { anyOf: [deep, { type: "null" }] } : { items: deep };
      return deep;
    }
    case 1:
      return { enum: Array.from({ length: n * 5 }, (_, i) => (rand() < 0.5 ? i : `v${i}`.repeat(1 + int(rand, 3)))) };
    case 2: {
      const cycle: Record<string, unknown> = { type: "object" };
      cycle.properties = { again: cycle, items: { items: cycle } };
      return cycle;
    }
    case 3:
      return { $defs: { a: { $ref: "#/$defs/b" }, b: { $ref: "#/$defs/a" } }, $ref: "#/$defs/a" };
    case 4:
      return {
        type: "object",
        properties: Object.fromEntries(
          Array.from({ length: n }, (_, i) => [`p${i}`, { type: "string", maxLength: 99 }]),
        ),
      };
    default:
      return { anyOf: Array.from({ length: n }, () => ({ const: pick(rand, STRINGS) })) };
  }
}

describe("fuzz", () => {
  it("JSON schemas become a grammar the native parser takes, or a refusal by code", { timeout: 120_000 }, async () => {
    process.stderr.write(`parsers fuzz seed: ${SEED} (set BLOOMERY_FUZZ_SEED to reproduce)\n`);
    const rand = prng(SEED);
    const tokenizer = openTokenizer(defaultModelPath()).nativeTokenizer;
    const outcomes = new Map<string, number>();
    const started = performance.now();
    for (let i = 0; i < 2000; i++) {
      const what = `seed ${SEED}, schema ${i}`;
      const schema = rand() < 0.9 ? randomSchema(rand, 0) : adversarialSchema(rand);
      const caseStart = performance.now();
      let outcome: string;
      try {
        const grammar = jsonSchemaToGrammar(schema);
        // What the converter writes must parse: GRAMMAR_INVALID here is a converter bug.
        outcome = await callNativeAsync((a) => a.createSamplerAsync({ grammar }, tokenizer)).then(
          (sampler) => {
            callNative((a) => a.disposeSampler(sampler));
            return "grammar";
          },
          (error: unknown) => codeOf(error, ["GRAMMAR_TOO_COMPLEX"], `${what}: ${grammar.slice(0, 300)}`),
        );
      } catch (error) {
        outcome = codeOf(error, ["JSON_SCHEMA_UNSUPPORTED", "JSON_SCHEMA_TOO_COMPLEX", "INVALID_ARGUMENT"], what);
      }
      expect(performance.now() - caseStart, what).toBeLessThan(2000);
      outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
    }
    process.stderr.write(
      `schema fuzz: ${JSON.stringify(Object.fromEntries(outcomes))} in ${(performance.now() - started).toFixed(0)} ms\n`,
    );
    for (const outcome of ["grammar", "JSON_SCHEMA_UNSUPPORTED", "JSON_SCHEMA_TOO_COMPLEX"]) {
      expect(outcomes.get(outcome) ?? 0, outcome).toBeGreaterThan(20);
    }
  });

  it("chat templates render or are refused by code", { timeout: 180_000 }, async () => {
    const rand = prng(SEED ^ 0x7e3);
    const SNIPPETS = [
      "{% for m in messages %}{{ m.content }}{% endfor %}",
      "{% if x %}a{% elif y %}b{% else %}c{% endif %}",
      "{{ messages | tojson }}",
      "{% set ns = namespace(s='ab') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}",
      "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
      "{{ raise_exception('refused') }}",
      "{% for i in range(5000) %}{{ i }}{% endfor %}",
      "{{ '\ud800' ~ messages[0].content[:3] }}",
      "{% for %}",
      "{{ }}",
      "{% endfor %}",
      "{{ messages[99].content.missing.deeper }}",
      "{{ 'x' * 3 }}",
      `${"{% if true %}".repeat(600)}deep${"{% endif %}".repeat(600)}`,
      `{{ ${"(".repeat(3000)}1${")".repeat(3000)} }}`,
    ];
    // Costly: a loop to the deadline, once (the three other renders of its batch go on meanwhile).
    const FOREVER = "{% for i in range(100000000) %}{% endfor %}";
    const mutate = (source: string): string => {
      let s = source;
      for (let n = 1 + int(rand, 3); n > 0; n--) {
        const at = int(rand, s.length + 1);
        switch (int(rand, 5)) {
          case 0:
            s = s.slice(0, at) + pick(rand, SNIPPETS) + s.slice(at);
            break;
          case 1:
            s = s.slice(0, at) + s.slice(at + 1 + int(rand, 8));
            break;
          case 2:
            s =
              s.slice(0, at) +
              pick(rand, ["{%", "%}", "{{", "}}", "-", "|", "'", "(", "endif", "\ud83d"]) +
              s.slice(at);
            break;
          case 3:
            s = s.slice(0, at);
            break;
          default:
            s = s.slice(0, at) + s.slice(at, at + int(rand, 200)) + s.slice(at);
        }
      }
      return s;
    };
    const messages = (): ChatMessage[] =>
      Array.from({ length: int(rand, 4) }, () => ({
        role: pick(rand, ["system", "user", "assistant", "tool"]),
        content: pick(rand, STRINGS) + pick(rand, ["", "\n<|im_end|>", "{{ x }}"]),
      }));

    const outcomes = new Map<string, number>();
    const started = performance.now();
    const CASES = 1000;
    for (let batch = 0; batch < CASES; batch += 4) {
      const runs = Array.from({ length: 4 }, async (_, k) => {
        const i = batch + k;
        const what = `seed ${SEED}, template ${i}`;
        const base = rand() < 0.7 ? BUILTIN_TEMPLATES.chatml : pick(rand, SNIPPETS);
        const source = i === 7 ? FOREVER : rand() < 0.85 ? mutate(base) : base;
        const caseStart = performance.now();
        let outcome: string;
        try {
          const template = new ChatTemplate(source);
          await template.renderAsync(
            messages(),
            { bosToken: "<s>", eosToken: "</s>" },
            { templateKwargs: { x: rand() < 0.5 }, tools: [] },
          );
          outcome = "rendered";
        } catch (error) {
          outcome = codeOf(error, ["CHAT_TEMPLATE", "CHAT_TEMPLATE_TOO_COMPLEX"], what);
        }
        expect(performance.now() - caseStart, what).toBeLessThan(CHAT_TEMPLATE_LIMITS.timeMs + 3000);
        outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
      });
      await Promise.all(runs);
    }
    process.stderr.write(
      `template fuzz: ${JSON.stringify(Object.fromEntries(outcomes))} in ${(performance.now() - started).toFixed(0)} ms\n`,
    );
    for (const outcome of ["rendered", "CHAT_TEMPLATE", "CHAT_TEMPLATE_TOO_COMPLEX"]) {
      expect(outcomes.get(outcome) ?? 0, outcome).toBeGreaterThan(5);
    }
  });
});
