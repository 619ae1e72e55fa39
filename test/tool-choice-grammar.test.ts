// Forced tool calls (issue 26): with toolChoice "required" or a named function, the call's rest is
// constrained by the tools' schemas (src/chat/tool-grammar.ts), so every answer of the default model
// is a call that parses, through the SDK and through the server's tool_choice.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HARMONY_MARKERS } from "../src/chat/harmony.js";
import { ChatOutputParser } from "../src/chat/output.js";
import { excludingRules, forcedCallGrammar, lazyCallGrammar, lazyCallTrigger } from "../src/chat/tool-grammar.js";
import { loadModel, type ChatTool, type Model } from "../src/index.js";
import { writeFamilyModel, type ChatFamily } from "./chat-helpers.js";
import { startServer, type TestServer } from "./server-helpers.js";

const MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";
const SEED = Number(process.env.BLOOMERY_TOOL_SEED ?? 1);
const RUNS = 200;
const PARALLEL = 4;

const TOOLS: ChatTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "The weather in a city",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", enum: ["Paris", "Lima", "Oslo"] },
          unit: { type: "string", enum: ["c", "f"] },
        },
        required: ["city", "unit"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "set_alarm",
      description: "Sets an alarm",
      parameters: {
        type: "object",
        properties: { hour: { type: "integer" }, loud: { type: "boolean" } },
        required: ["hour", "loud"],
        additionalProperties: false,
      },
    },
  },
];

function expectValidCall(call: { name: string; arguments: Record<string, unknown> }, label: string) {
  if (call.name === "get_weather") {
    expect(Object.keys(call.arguments).sort(), label).toEqual(["city", "unit"]);
    expect(["Paris", "Lima", "Oslo"], label).toContain(call.arguments.city);
    expect(["c", "f"], label).toContain(call.arguments.unit);
  } else {
    expect(call.name, label).toBe("set_alarm");
    expect(Number.isInteger(call.arguments.hour), label).toBe(true);
    expect(typeof call.arguments.loud, label).toBe("boolean");
  }
}

describe("the forced call's grammar", () => {
  it("joins the tools' schemas after the opening, each tool's rules apart", () => {
    const grammar = forcedCallGrammar("hermes", TOOLS, '<tool_call>\n{"name": "')!;
    expect(grammar).toMatch(/^root ::= "get_weather\\", \\"arguments\\": " t0-root "}\\n<\/tool_call>" \| /);
    expect(grammar).toContain("t1-root ::=");
    expect(forcedCallGrammar("hermes", TOOLS, '<tool_call>\n{"name": "set_alarm", "arguments": ')).not.toContain(
      "t0-root",
    );
    // Markers that are control tokens are named by id; the others, and text around them, are literals.
    const controls = new Map([
      ["<｜tool▁sep｜>", 7],
      ["<｜tool▁call▁end｜>", 8],
      ["<｜tool▁calls▁end｜>", 9],
    ]);
    const deepseek = forcedCallGrammar(
      "deepseek-v3.1",
      TOOLS,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>",
      controls,
    )!;
    expect(deepseek).toMatch(/^root ::= "get_weather" <\[7\]> t0-root <\[8\]> <\[9\]> \| "set_alarm" <\[7\]> t1-root /);
    // DeepSeek-R1: the name, then the arguments in a json code fence.
    const r1 = forcedCallGrammar(
      "deepseek-r1",
      TOOLS,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>",
      controls,
    )!;
    expect(r1).toMatch(
      /^root ::= "get_weather\\n```json\\n" t0-root "\\n```" <\[8\]> <\[9\]> \| "set_alarm\\n```json\\n" t1-root /,
    );
    const glm = forcedCallGrammar("glm-4.5", TOOLS, "<tool_call>set_alarm")!;
    expect(glm).toMatch(/^root ::= \(t1-p0 t1-p1\) "\\n"\? "<\/tool_call>"\n/);
    expect(glm).toContain(
      't1-p1 ::= "\\n"? "<arg_key>" "loud" "</arg_key>" "\\n"? "<arg_value>" t1-p1-root "</arg_value>"',
    );
  });
});

/**
 * Whether the rules excludingRules writes (each alternative `""`, `"c" state` or `[^...] state`) take
 * `text`: a walk of the automaton they spell.
 */
function excludingAccepts(rules: string, text: string): boolean {
  const states = new Map<string, { chars: Map<string, string>; excluded: string; other: string }>();
  for (const line of rules.trim().split("\n")) {
    const [name, body] = line.split(" ::= ") as [string, string];
    const chars = new Map<string, string>();
    let excluded = "";
    let other = "";
    for (const alternative of body.split(" | ")) {
      const literal = /^"(\\?.)" (\S+)$/.exec(alternative);
      const negated = /^\[\^(.*)\] (\S+)$/.exec(alternative);
      if (literal) chars.set(literal[1]!.replace(/^\\/, ""), literal[2]!);
      else if (negated) [excluded, other] = [negated[1]!.replace(/\\(.)/g, "$1"), negated[2]!];
    }
    states.set(name, { chars, excluded, other });
  }
  let state = "text";
  for (const c of text) {
    const here = states.get(state)!;
    const next = here.chars.get(c) ?? (here.excluded.includes(c) ? undefined : here.other);
    if (next === undefined) return false;
    state = next;
  }
  return true;
}

describe("the text of an XML-style argument", () => {
  it("is any text without the value's closing tag, near misses included", () => {
    const rules = excludingRules("text", "</parameter>");
    for (const text of ["", "a < b", "</param", "<</paramete", "x</parameterx", "</</parameter_", "<p>x</p>"]) {
      expect(excludingAccepts(rules, text), text).toBe(true);
    }
    for (const text of [
      "</parameter>",
      "a</parameter>b",
      "<</parameter>",
      "</para</parameter>",
      "</parameter</parameter>",
    ]) {
      expect(excludingAccepts(rules, text), text).toBe(false);
    }
    // A word whose prefix recurs in it: after "aab" of "aaba", a following "a" completes it.
    const aaba = excludingRules("text", "aaba");
    expect(excludingAccepts(aaba, "aaab")).toBe(true);
    expect(excludingAccepts(aaba, "aaaba")).toBe(false);
    expect(excludingAccepts(aaba, "aabaaba".slice(0, 6))).toBe(false);
  });
});

describe(`${RUNS} forced calls on the default model (seeds from ${SEED}; BLOOMERY_TOOL_SEED sets it)`, () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(MODEL, { gpu: false, threads: 2, parallel: PARALLEL, contextSize: 512 });
  });
  afterAll(() => model?.dispose());

  it('toolChoice "required" (and named) always parses as a call of an offered tool', async () => {
    const sessions = Array.from({ length: PARALLEL }, () => model.createSession());
    const questions = ["What is the weather in Paris?", "Wake me up at seven.", "Hello!", "Tell me a story."];
    let named = 0;
    await Promise.all(
      sessions.map(async (session, lane) => {
        for (let i = lane; i < RUNS; i += PARALLEL) {
          const choice = i % 4 === 3 ? { name: "set_alarm" } : "required";
          const result = await session.chat([{ role: "user", content: questions[i % questions.length]! }], {
            tools: TOOLS,
            toolChoice: choice,
            temperature: 1,
            seed: SEED + i,
            maxTokens: 256,
          }).result;
          const label = `run ${i} (seed ${SEED + i}): ${JSON.stringify(result.text)}`;
          expect(result.message.toolCalls, label).toHaveLength(1);
          const call = result.message.toolCalls![0]!;
          if (typeof choice === "object") {
            expect(call.name, label).toBe("set_alarm");
            named++;
          }
          expectValidCall(call, label);
          expect(result.message.content.trim(), label).toBe("");
        }
      }),
    );
    expect(named).toBe(RUNS / 4);
  }, 120_000);
});

// The formats whose calls are XML (Qwen3-Coder, GLM-4.5, MiniMax-M2) or whose markers are control tokens
// (DeepSeek-V3.1, Kimi-K2, MiniMax-M2's section, harmony's <|call|>), on tiny models of random weights
// with each family's vocabulary and template: nothing but the grammar makes their answers calls.
const FORMAT_RUNS = 12;
// `trigger`: the first marker of a call, one token of the vocabulary, where "auto"'s lazy grammar takes over
// (Qwen3-Coder's and GLM's are words, DeepSeek's and Kimi's control tokens; MiniMax-M2's and DeepSeek-R1's
// templates open the think block, where a call is reasoning; harmony's trigger is several tokens, which a
// logit bias cannot make the model write: its lazy grammar is checked below).
const FORMATS: { label: string; family: ChatFamily; preset: string; trigger?: string }[] = [
  { label: "qwen3-coder", family: "qwen3-coder", preset: "tiny-qwen3moe", trigger: "<tool_call>" },
  { label: "glm-4.5", family: "glm-4.5", preset: "tiny-glm4moe", trigger: "<tool_call>" },
  { label: "deepseek-v3.1", family: "deepseek-v3.1", preset: "tiny-deepseek2", trigger: "<｜tool▁calls▁begin｜>" },
  { label: "deepseek-r1", family: "deepseek-r1", preset: "tiny-deepseek2" },
  { label: "kimi-k2", family: "kimi-k2", preset: "tiny-deepseek2", trigger: "<|tool_calls_section_begin|>" },
  { label: "minimax-m2", family: "minimax-m2", preset: "tiny-minimax-m2" },
  { label: "deepseek-v3.2", family: "deepseek-v3.2", preset: "tiny-deepseek2" },
  { label: "harmony", family: "harmony", preset: "tiny-gpt-oss" },
];

describe.each(FORMATS)(`${FORMAT_RUNS} forced calls in the $label format`, ({ label, family, preset, trigger }) => {
  let model: Model;
  const dir = mkdtempSync(join(tmpdir(), "bloomery-forced-"));
  beforeAll(async () => {
    await writeFamilyModel(join(dir, "model.gguf"), family, preset);
    model = await loadModel(join(dir, "model.gguf"), { gpu: false, threads: 2 });
  });
  afterAll(() => {
    model?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  it('toolChoice "required" (and named) always parses as a call of an offered tool', async () => {
    const session = model.createSession();
    for (let i = 0; i < FORMAT_RUNS; i++) {
      const choice = i % 3 === 2 ? { name: "get_weather" } : "required";
      const result = await session.chat([{ role: "user", content: "What is the weather in Paris?" }], {
        tools: TOOLS,
        toolChoice: choice,
        temperature: 1,
        seed: SEED + i,
        maxTokens: 400,
      }).result;
      const label_ = `${label} run ${i} (seed ${SEED + i}): ${JSON.stringify(result.text)}`;
      if (i < 2) console.log(label_);
      expect(result.message.toolCalls, label_).toHaveLength(1);
      const call = result.message.toolCalls![0]!;
      if (typeof choice === "object") expect(call.name, label_).toBe("get_weather");
      expectValidCall(call, label_);
    }
  }, 120_000);

  it.runIf(trigger)(
    'toolChoice "auto": a call the model opens follows the grammar from its first marker on',
    async () => {
      const session = model.createSession();
      const marker = Array.from(model.tokenize(trigger!, { special: true, addSpecial: false }));
      expect(marker).toHaveLength(1);
      for (let i = 0; i < FORMAT_RUNS; i++) {
        const result = await session.chat([{ role: "user", content: "What is the weather in Paris?" }], {
          tools: TOOLS,
          // The model opens a call (it would not by itself); what follows is the grammar's.
          logitBias: { [marker[0]!]: 30 },
          temperature: 1,
          seed: SEED + i,
          maxTokens: 400,
        }).result;
        const label_ = `${label} auto run ${i} (seed ${SEED + i}): ${JSON.stringify(result.text)}`;
        if (i < 2) console.log(label_);
        expect(result.message.toolCalls, label_).toHaveLength(1);
        expectValidCall(result.message.toolCalls![0]!, label_);
      }
    },
    120_000,
  );
});

// Harmony's calls open in two ways (the recipient in the role's header or the channel's), so its lazy
// grammar holds from the recipient's `to=functions.` on. Whatever that grammar lets the model write
// (sampled freely, so both ways and the optional parts come up) must parse as one call of an offered
// tool with valid arguments: the grammar is run here from the first token, where "auto" starts it
// at the trigger.
describe("harmony's lazy grammar (toolChoice auto)", () => {
  let model: Model;
  const dir = mkdtempSync(join(tmpdir(), "bloomery-harmony-lazy-"));
  beforeAll(async () => {
    await writeFamilyModel(join(dir, "model.gguf"), "harmony", "tiny-gpt-oss");
    model = await loadModel(join(dir, "model.gguf"), { gpu: false, threads: 2 });
  });
  afterAll(() => {
    model?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  it("holds from the recipient on, and everything it admits parses as a call", async () => {
    expect(lazyCallTrigger("harmony")).toBe("to=functions.");
    const controls = new Map(
      HARMONY_MARKERS.map((marker) => [marker, model.tokenize(marker, { special: true, addSpecial: false })[0]!]),
    );
    const lazy = lazyCallGrammar("harmony", TOOLS, controls)!;
    expect(lazy.trigger).toBe("to=functions.");
    expect(lazy.grammar).toMatch(/^root ::= "to=functions\." call\n/);
    const session = model.createSession();
    const headers = new Set<string>();
    for (let i = 0; i < FORMAT_RUNS; i++) {
      const result = await session.generate("<|start|>user<|message|>What is the weather?<|end|><|start|>assistant", {
        grammar: lazy.grammar,
        showSpecialTokens: [...controls.values()],
        temperature: 1,
        seed: SEED + i,
        maxTokens: 400,
      }).result;
      const label = `harmony lazy run ${i} (seed ${SEED + i}): ${JSON.stringify(result.text)}`;
      headers.add(result.text.slice(0, result.text.indexOf("<|message|>")).replace(/functions\.\w+/, "functions.NAME"));
      // What the model wrote before the trigger, free: the role's header (a channel after the name)
      // or the channel's.
      const roleHeader = /^to=functions\.\w+<\|channel\|>/.test(result.text);
      const parser = new ChatOutputParser({ toolCallFormat: "harmony", tools: TOOLS });
      const first = parser.push(`${roleHeader ? " " : "<|channel|>commentary "}${result.text}`);
      const calls = [...first.toolCalls, ...parser.finish().toolCalls];
      expect(calls, label).toHaveLength(1);
      expectValidCall(calls[0]!, label);
    }
    console.log(`harmony lazy headers: ${JSON.stringify([...headers])}`);
    // The runs took more than one of the header's ways.
    expect(headers.size).toBeGreaterThan(1);
  }, 120_000);
});

// The default model never opens a tool call by itself, so "auto"'s lazy grammar is seen here through
// generate's grammarTriggers with a word it does write, and natively (grammar_test.cc) token by token.
describe("a lazy grammar (grammarTriggers), as toolChoice auto uses it", () => {
  let model: Model;
  beforeAll(async () => {
    model = await loadModel(MODEL, { gpu: false, threads: 2, contextSize: 512 });
  });
  afterAll(() => model?.dispose());

  it("leaves the text free up to the trigger, then holds from the trigger on", async () => {
    const session = model.createSession();
    const prompt = model.applyChatTemplate([{ role: "user", content: 'What does "river" mean?' }]);
    const free = await session.generate(prompt, { maxTokens: 60 }).result;
    const at = free.text.indexOf(" is");
    expect(at, free.text).toBeGreaterThanOrEqual(0);
    const grammar = 'root ::= " is" " number " [0-9] [0-9] "."';
    const lazy = await session.generate(prompt, { maxTokens: 60, grammar, grammarTriggers: [" is"] }).result;
    console.log(`free: ${JSON.stringify(free.text)}\nlazy: ${JSON.stringify(lazy.text)}`);
    expect(lazy.text.slice(0, at)).toBe(free.text.slice(0, at));
    expect(lazy.text.slice(at)).toMatch(/^ is number [0-9]{2}\.$/);
    expect(lazy.stopReason).toBe("eos");
  });
});

describe("the server's tool_choice", () => {
  let server: TestServer;
  beforeAll(async () => {
    server = await startServer({ modelPath: MODEL, parallel: 2 });
  });
  afterAll(() => server?.close());

  it('tool_choice "required" and a named function give calls that parse (/v1/chat/completions)', async () => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none" });
    for (let i = 0; i < 8; i++) {
      const choice =
        i % 2 === 0 ? ("required" as const) : { type: "function" as const, function: { name: "get_weather" } };
      const completion = await client.chat.completions.create({
        model: "tiny",
        messages: [{ role: "user", content: "Hello there" }],
        tools: TOOLS,
        tool_choice: choice,
        max_tokens: 256,
        seed: SEED + i,
      });
      const calls = completion.choices[0]!.message.tool_calls ?? [];
      expect(calls, `request ${i}`).toHaveLength(1);
      const call = calls[0]!;
      if (call.type !== "function") throw new Error("not a function call");
      if (i % 2 === 1) expect(call.function.name).toBe("get_weather");
      expectValidCall({ name: call.function.name, arguments: JSON.parse(call.function.arguments) }, `request ${i}`);
    }
  });
});
