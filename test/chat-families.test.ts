// Session.chat end to end in the DeepSeek-V3.1, GLM-4.5, Kimi-K2, MiniMax-M2 and Qwen3.5 formats: tiny models whose
// GGUF carries the family's tokenizer (its special tokens, typed as the converter types them) and
// chat template. The model writes a tool call and a think block through public sampling options
// (see forceText); the chat must show the control tokens they are written in, parse them while
// they stream, and give the calls the ids the format carries.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError, loadModel, type ChatTool, type Model, type ModelWarning } from "../src/index.js";
import { promptOpensThinking } from "../src/chat/output.js";
import { forceText, writeFamilyModel, type ChatFamily } from "./chat-helpers.js";

/**
 * The tiny model each family's chat runs on (the engine does not read the template). DSML's calls repeat
 * their tokens, which forceText cannot write: tool-choice-grammar.test.ts runs that format's chats.
 */
const PRESETS: Partial<Record<ChatFamily, string>> = {
  "qwen3-coder": "tiny-qwen3moe",
  "deepseek-v3.1": "tiny-deepseek2",
  "deepseek-r1": "tiny-deepseek2",
  "glm-4.5": "tiny-glm4moe",
  "kimi-k2": "tiny-deepseek2",
  "minimax-m2": "tiny-minimax-m2",
  "qwen3.5": "tiny-qwen35moe",
  harmony: "tiny-gpt-oss",
};

const dir = mkdtempSync(join(tmpdir(), "bloomery-chat-families-"));
const models = new Map<ChatFamily, Model>();
const warnings = new Map<ChatFamily, ModelWarning[]>();

beforeAll(async () => {
  for (const [family, preset] of Object.entries(PRESETS) as [ChatFamily, string][]) {
    const path = join(dir, `${family}.gguf`);
    await writeFamilyModel(path, family, preset);
    const model = await loadModel(path, { threads: 2 });
    const seen: ModelWarning[] = [];
    model.on("warning", (warning) => seen.push(warning));
    models.set(family, model);
    warnings.set(family, seen);
  }
});

afterAll(() => {
  for (const model of models.values()) model.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const weather: ChatTool = {
  type: "function",
  function: {
    name: "get_weather",
    parameters: { type: "object", properties: { city: { type: "string" }, days: { type: "integer" } } },
  },
};

interface FamilyCase {
  family: ChatFamily;
  /** What the model writes after the forced opening of a call to get_weather. */
  callRest: string;
  /** The whole raw text of that turn. */
  raw: string;
  id: RegExp;
  args: Record<string, unknown>;
  /** Template variables that make the prompt open the think block, when the template has them. */
  thinking?: Record<string, unknown>;
}

const CASES: FamilyCase[] = [
  {
    family: "deepseek-v3.1",
    callRest: "{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    raw: "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    id: /^call_\w{24}$/,
    args: {},
    thinking: { thinking: true },
  },
  {
    family: "glm-4.5",
    callRest: "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
    raw: "<tool_call>get_weather<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
    id: /^call_\w{24}$/,
    args: { days: 3 },
  },
  {
    family: "kimi-k2",
    callRest: "0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
    raw: "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
    id: /^functions\.get_weather:0$/,
    args: {},
  },
  {
    family: "minimax-m2",
    callRest: "</invoke></minimax:tool_call>",
    // The prompt opened the think block: the forced call closes it first.
    raw: '</think>\n\n<minimax:tool_call>\n<invoke name="get_weather">\n</invoke></minimax:tool_call>',
    id: /^call_\w{24}$/,
    args: {},
    // The template opens the think block in every prompt.
    thinking: {},
  },
  {
    family: "qwen3.5",
    callRest: "</function></tool_call>",
    // The prompt opened the think block: the forced call closes it as the template writes an empty one.
    raw: "\n</think>\n\n<tool_call>\n<function=get_weather>\n</function></tool_call>",
    id: /^call_\w{24}$/,
    args: {},
    // The template opens the think block unless enable_thinking is false.
    thinking: {},
  },
];

describe.each(CASES)("$family", ({ family, callRest, raw, id, args, thinking }) => {
  it("parses a tool call the engine writes in the family's tokens, streamed as one whole call", async () => {
    const model = models.get(family)!;
    const session = model.createSession();
    const run = session.chat([{ role: "user", content: "Weather in Paris?" }], {
      tools: [weather],
      toolChoice: { name: "get_weather" },
      ...forceText(model, callRest),
    });
    const streamed = [];
    for await (const chunk of run) if (chunk.toolCalls) streamed.push(...chunk.toolCalls);
    const result = await run.result;
    expect(result.text).toBe(raw);
    expect(result.message).toEqual({
      role: "assistant",
      content: "",
      toolCalls: [{ id: expect.stringMatching(id), name: "get_weather", arguments: args }],
    });
    expect(streamed).toEqual(result.message.toolCalls);
    session.dispose();
  });

  it("splits the think block the engine writes from the answer", async () => {
    const model = models.get(family)!;
    const session = model.createSession();
    const opens = model.applyChatTemplate([{ role: "user", content: "Hi" }], { templateKwargs: thinking });
    const text = `${thinking ? "" : "<think>"}x</think>y`;
    expect(promptOpensThinking(opens)).toBe(thinking !== undefined);
    const run = session.chat([{ role: "user", content: "Hi" }], {
      templateKwargs: thinking,
      ...forceText(model, text),
    });
    let reasoning = "";
    let content = "";
    for await (const chunk of run) {
      reasoning += chunk.reasoning ?? "";
      content += chunk.text;
    }
    expect([reasoning, content]).toEqual(["x", "y"]);
    expect((await run.result).message).toEqual({ role: "assistant", content: "y", reasoning: "x" });
    session.dispose();
  });
});

describe("the families' templates as the models carry them", () => {
  it("renders Kimi-K2-Thinking's through the rewrites a CHAT_TEMPLATE_ADAPTED warning names, once", () => {
    const model = models.get("kimi-k2")!;
    const messages = [
      { role: "user", content: "Weather?" },
      {
        role: "assistant",
        content: "",
        toolCalls: [{ id: "functions.get_weather:0", name: "get_weather", arguments: { city: "Oslo" } }],
      },
      { role: "tool", content: "Rain", toolCallId: "functions.get_weather:0" },
    ];
    const prompt = model.applyChatTemplate(messages, { tools: [weather] });
    model.applyChatTemplate(messages);
    expect(prompt).toContain("## Return of functions.get_weather:0\nRain<|im_end|>");
    expect(warnings.get("kimi-k2")).toEqual([
      { code: "CHAT_TEMPLATE_ADAPTED", message: expect.stringContaining("list.append(x)") },
    ]);
  });

  it("generate shows the special tokens asked for, and refuses ids outside the vocabulary", async () => {
    const model = models.get("kimi-k2")!;
    const session = model.createSession();
    const marker = "<|tool_call_begin|>";
    const [token] = model.tokenize(marker, { special: true });
    const forced = forceText(model, `${marker}a`);
    expect((await session.generate("Hi", forced).result).text).toBe("a");
    expect((await session.generate("Hi", { ...forced, showSpecialTokens: [token!] }).result).text).toBe(`${marker}a`);
    for (const bad of [-1, model.info.vocabSize, 1.5]) {
      expect(() => session.generate("Hi", { showSpecialTokens: [bad] })).toThrow(BloomeryError);
    }
    session.dispose();
  });
});
