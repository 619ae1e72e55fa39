// Forced tool calls (issue 26): with toolChoice "required" or a named function, the call's rest is
// constrained by the tools' schemas (src/chat/tool-grammar.ts), so every answer of the default model
// is a call that parses, through the SDK and through the server's tool_choice.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { forcedCallGrammar } from "../src/chat/tool-grammar.js";
import { loadModel, type ChatTool, type Model } from "../src/index.js";
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
        properties: { city: { enum: ["Paris", "Lima", "Oslo"] }, unit: { enum: ["c", "f"] } },
        required: ["city", "unit"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "set_alarm",
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
    expect(forcedCallGrammar("glm-4.5", TOOLS, "<tool_call>")).toBeUndefined();
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
