// The DeepSeek-V3.1, GLM-4.5, Kimi-K2, MiniMax-M2, Qwen3.5 and gpt-oss (harmony) formats through bloomery-serve and the
// official openai client, streamed and not: a tool call the engine writes in the family's tokens
// (made to by the request's own logit_bias, presence_penalty and repeat_last_n, as in
// test/server-tools.test.ts) comes back as OpenAI's tool_calls with the format's ids, and a think
// block (harmony: the analysis channel) as reasoning_content.
import OpenAI from "openai";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeFamilyModel, type ChatFamily } from "./chat-helpers.js";
import { startServer, type TestServer } from "./server-helpers.js";

/** The tiny model each family's server runs (the engine does not read the template). */
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

const dir = mkdtempSync(join(tmpdir(), "bloomery-chat-server-"));

afterAll(() => rmSync(dir, { recursive: true, force: true }));

const weather = {
  type: "function" as const,
  function: {
    name: "get_weather",
    // gpt-oss's template writes every tool's description (and fails on one without).
    description: "The weather in a city",
    parameters: { type: "object", properties: { days: { type: "integer" } } },
  },
};
const ask = [{ role: "user" as const, content: "Weather in Paris?" }];

/** What the engine is made to write, and the reasoning and content the answer must carry. */
type Answer = [text: string, reasoning: string | undefined, content: string];

const CASES: {
  family: ChatFamily;
  callRest: string;
  id: RegExp;
  args: string;
  thinking?: Record<string, unknown>;
  /** Default: `<think>x</think>y` (with the think block opened by `thinking` where given). */
  answers?: Answer[];
}[] = [
  {
    family: "deepseek-v3.1",
    callRest: "{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    id: /^call_/,
    args: "{}",
    thinking: { thinking: true },
  },
  {
    family: "glm-4.5",
    callRest: "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
    id: /^call_/,
    args: '{"days":3}',
  },
  {
    family: "kimi-k2",
    callRest: "0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
    id: /^functions\.get_weather:0$/,
    args: "{}",
  },
  {
    family: "minimax-m2",
    callRest: "</invoke></minimax:tool_call>",
    id: /^call_/,
    args: "{}",
    // The template opens the think block in every prompt.
    thinking: {},
  },
  {
    family: "qwen3.5",
    callRest: "</function></tool_call>",
    id: /^call_/,
    args: "{}",
    // The template opens the think block unless enable_thinking is false.
    thinking: {},
  },
  {
    family: "harmony",
    callRest: "{}",
    id: /^call_/,
    args: "{}",
    // forceText writes each token once: an analysis message, and a final one, in two answers.
    answers: [
      ["<|channel|>analysis<|message|>x<|end|>", "x", ""],
      ["<|channel|>final<|message|>y", undefined, "y"],
    ],
  },
];

describe.each(CASES)("$family", ({ family, callRest, id, args, thinking, answers }) => {
  let server: TestServer;
  let openai: OpenAI;

  beforeAll(async () => {
    const modelPath = join(dir, `${family}.gguf`);
    await writeFamilyModel(modelPath, family, PRESETS[family]!);
    server = await startServer({ modelPath });
    openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
  });

  afterAll(async () => {
    await server?.close();
  });

  /** Request fields that make the engine write `text` greedily (its tokens all differ). */
  function forceText(text: string) {
    const tokens = Array.from(server.model.tokenize(text, { special: true }));
    expect(new Set(tokens).size).toBe(tokens.length);
    const logit_bias: Record<string, number> = {};
    tokens.forEach((token, i) => (logit_bias[token] = 100 * (tokens.length - i)));
    return { logit_bias, presence_penalty: 1000, repeat_last_n: tokens.length - 1, max_tokens: tokens.length };
  }

  const callRequest = () => ({
    model: "tiny",
    messages: ask,
    tools: [weather],
    tool_choice: { type: "function" as const, function: { name: "get_weather" } },
    temperature: 0,
    ...forceText(callRest),
  });

  it("answers a tool call, streamed and not", async () => {
    const completion = await openai.chat.completions.create(callRequest());
    const streamed = await openai.chat.completions.stream(callRequest()).finalChatCompletion();
    for (const answer of [completion, streamed]) {
      expect(answer.choices[0]!.finish_reason).toBe("tool_calls");
      expect(answer.choices[0]!.message.tool_calls).toEqual([
        { id: expect.stringMatching(id), type: "function", function: { name: "get_weather", arguments: args } },
      ]);
    }
  });

  it("answers with reasoning, streamed and not", async () => {
    for (const [text, expectedReasoning, expectedContent] of answers ?? [
      [`${thinking ? "" : "<think>"}x</think>y`, "x", "y"] satisfies Answer,
    ]) {
      const request = {
        model: "tiny",
        messages: ask,
        temperature: 0,
        ...(thinking && { chat_template_kwargs: thinking }),
        ...forceText(text),
      };
      const completion = await openai.chat.completions.create(request);
      const message = completion.choices[0]!.message as { content: string | null; reasoning_content?: string };
      expect([message.reasoning_content, message.content ?? ""]).toEqual([expectedReasoning, expectedContent]);
      let reasoning = "";
      let content = "";
      for await (const chunk of await openai.chat.completions.create({ ...request, stream: true })) {
        const delta = chunk.choices[0]?.delta as { content?: string | null; reasoning_content?: string } | undefined;
        reasoning += delta?.reasoning_content ?? "";
        content += delta?.content ?? "";
      }
      expect([reasoning, content]).toEqual([expectedReasoning ?? "", expectedContent]);
    }
  });
});
