// Tools and reasoning through bloomery-serve, with the official openai and @anthropic-ai/sdk
// clients. The tiny models do not call tools by themselves. What each part covers:
// - OpenAI tool calls end to end: the server runs a synthetic model under a chat template written
//   here (it teaches the Qwen3-Coder XML format), and the request's own sampling fields (logit_bias,
//   presence_penalty, repeat_last_n) make the engine finish the call the forced tool_choice opens.
// - Reasoning end to end (OpenAI and Anthropic): the template opens a think block when
//   chat_template_kwargs asks, so the model's answer is reasoning.
// - Anthropic tool_use streaming: its API has no logit bias, so the route's block shaper is fed a
//   parsed chat stream directly and the official client's MessageStream reads its events.
import Anthropic from "@anthropic-ai/sdk";
import { MessageStream } from "@anthropic-ai/sdk/lib/MessageStream";
import OpenAI from "openai";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AnthropicBlocks } from "../examples/server/routes/anthropic.js";
import { openAiChatDeltas } from "../examples/server/routes/openai-chat.js";
import type { ChatChunk } from "../src/index.js";
import { parseServeOptions, UsageError } from "../examples/server/options.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { getUrl, postJson, startServer, type TestServer } from "./server-helpers.js";

const TEMPLATE = `{%- if tools -%}
<|im_start|>system
Call tools as <tool_call><function=NAME><parameter=P>VALUE</parameter></function></tool_call>. Tools:
{%- for tool in tools %} {{ tool.function.name }}{% endfor %}<|im_end|>
{% endif -%}
{%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}
{%- for c in m.tool_calls or [] %}<tool_call><function={{ c.function.name }}>{{ c.function.arguments | tojson }}</function></tool_call>{% endfor %}
{%- if m.tool_call_id %} (answers {{ m.tool_call_id }}){% endif %}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if think %}<think>
{% endif %}{% endif -%}`;

const dir = mkdtempSync(join(tmpdir(), "bloomery-server-tools-"));
let server: TestServer;
let openai: OpenAI;
let anthropic: Anthropic;

beforeAll(async () => {
  const modelPath = join(dir, "tiny-qwen3moe.gguf");
  await writeSyntheticModel(modelPath, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
  server = await startServer({ modelPath, chatTemplate: TEMPLATE, apiKeys: ["k"] });
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "k", maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: "k", maxRetries: 0 });
});

afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

const weather = {
  type: "function" as const,
  function: { name: "get_weather", description: "The weather in a city", parameters: { type: "object" } },
};
const ask = [{ role: "user" as const, content: "Weather in Paris?" }];

/** Request fields that make the engine write `text` greedily (its tokens all differ; see test/chat-session.test.ts). */
function forceText(text: string) {
  const tokens = Array.from(server.model.tokenize(text, { special: true }));
  expect(new Set(tokens).size).toBe(tokens.length);
  const logit_bias: Record<string, number> = {};
  tokens.forEach((token, i) => (logit_bias[token] = 100 * (tokens.length - i)));
  return {
    logit_bias,
    presence_penalty: 1000,
    repeat_last_n: tokens.length - 1,
    max_tokens: tokens.length,
    temperature: 0,
  };
}

describe("OpenAI tool calls", () => {
  const request = () => ({
    model: "tiny",
    messages: ask,
    tools: [weather],
    tool_choice: { type: "function" as const, function: { name: "get_weather" } },
    ...forceText("</function></tool_call>"),
  });

  it("answers with the parsed call and finish_reason tool_calls", async () => {
    const completion = await openai.chat.completions.create(request());
    const choice = completion.choices[0]!;
    expect(choice.finish_reason).toBe("tool_calls");
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toEqual([
      { id: expect.stringMatching(/^call_/), type: "function", function: { name: "get_weather", arguments: "{}" } },
    ]);
  });

  it("streams the call as OpenAI does: index, id, type and name, then the arguments", async () => {
    const stream = await openai.chat.completions.create({ ...request(), stream: true });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    const deltas = chunks.map((c) => c.choices[0]?.delta).filter((d) => d?.tool_calls);
    expect(deltas.map((d) => d!.tool_calls)).toEqual([
      [
        {
          index: 0,
          id: expect.stringMatching(/^call_/),
          type: "function",
          function: { name: "get_weather", arguments: "" },
        },
      ],
      [{ index: 0, function: { arguments: "{}" } }],
    ]);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe("tool_calls");
    // The client's own accumulator puts the pieces together.
    const final = await openai.chat.completions.stream(request()).finalChatCompletion();
    expect(final.choices[0]!.message.tool_calls![0]!.function).toEqual({ name: "get_weather", arguments: "{}" });
  });

  it("renders a conversation with tool calls and tool results", async () => {
    const response = await postJson(
      `${server.url}/apply-template`,
      {
        messages: [
          ...ask,
          {
            role: "assistant",
            content: null,
            tool_calls: [
              { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
            ],
          },
          { role: "tool", tool_call_id: "call_1", content: "sunny" },
        ],
        tools: [weather],
      },
      { authorization: "Bearer k" },
    );
    const { prompt } = await response.json();
    expect(prompt).toContain("Tools: get_weather<|im_end|>");
    expect(prompt).toContain('<tool_call><function=get_weather>{"city": "Paris"}</function></tool_call>');
    expect(prompt).toContain("<|im_start|>tool\nsunny (answers call_1)<|im_end|>");
  });

  it("refuses bad tools and tool choices by name", async () => {
    const refuse = async (body: Record<string, unknown>) => {
      const response = await postJson(
        `${server.url}/v1/chat/completions`,
        { messages: ask, ...body },
        { authorization: "Bearer k" },
      );
      expect(response.status).toBe(400);
      return (await response.json()).error.message as string;
    };
    expect(await refuse({ tools: [{ type: "retrieval" }] })).toMatch(/'tools\[0\]\.type'/);
    expect(await refuse({ tools: [weather], tool_choice: { type: "function", function: { name: "nope" } } })).toMatch(
      /toolChoice names a tool that is not offered/,
    );
    expect(await refuse({ tools: [{ ...weather, function: { ...weather.function, strict: true } }] })).toMatch(
      /'tools\[0\]\.function\.strict'/,
    );
    expect(await refuse({ reasoning_format: "deepseek-legacy" })).toMatch(/'reasoning_format'/);
    expect(
      await refuse({
        messages: [
          { role: "assistant", tool_calls: [{ type: "function", function: { name: "f", arguments: "[1]" } }] },
        ],
      }),
    ).toMatch(/'messages\[0\]\.tool_calls\[0\]\.function\.arguments'/);
  });
});

describe("Anthropic tools", () => {
  const tools = [
    { name: "get_weather", description: "The weather in a city", input_schema: { type: "object" as const } },
  ];

  it("reads tool_use and tool_result blocks into the conversation", async () => {
    const history = {
      model: "tiny",
      tools,
      messages: [
        ...ask,
        {
          role: "assistant" as const,
          content: [
            { type: "thinking" as const, thinking: "Look it up.", signature: "" },
            { type: "tool_use" as const, id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
          ],
        },
        {
          role: "user" as const,
          content: [{ type: "tool_result" as const, tool_use_id: "toolu_1", content: "sunny" }],
        },
      ],
    };
    const withCall = await anthropic.messages.countTokens(history);
    const prompt = server.model.applyChatTemplate(
      [
        ...ask,
        {
          role: "assistant",
          content: "",
          reasoning: "Look it up.",
          toolCalls: [{ id: "toolu_1", name: "get_weather", arguments: { city: "Paris" } }],
        },
        { role: "tool", content: "sunny", toolCallId: "toolu_1" },
      ],
      {
        tools: [
          {
            type: "function",
            function: { name: "get_weather", description: "The weather in a city", parameters: { type: "object" } },
          },
        ],
      },
    );
    expect(withCall.input_tokens).toBe(server.model.tokenize(prompt, { special: true }).length);
  });

  it("opens a forced call, and gives what the tiny model writes instead of finishing it back as text", async () => {
    // A variable, not a literal: this client's types have no `temperature`, which the server reads.
    const body = {
      model: "tiny",
      max_tokens: 4,
      temperature: 0,
      messages: ask,
      tools,
      tool_choice: { type: "tool" as const, name: "get_weather" },
    };
    const message = await anthropic.messages.create(body);
    expect(message.stop_reason).toBe("max_tokens");
    expect(message.content).toHaveLength(1);
    expect(message.content[0]).toMatchObject({
      type: "text",
      text: expect.stringMatching(/^<tool_call>\n<function=get_weather>\n/),
    });
  });
});

describe("reasoning", () => {
  const thinking = { chat_template_kwargs: { think: true }, temperature: 0, max_tokens: 8 };

  it("comes as reasoning_content (message and deltas) unless reasoning_format is none", async () => {
    const raw = await openai.chat.completions.create({
      model: "tiny",
      messages: ask,
      ...thinking,
      reasoning_format: "none",
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const text = raw.choices[0]!.message.content!;
    expect(text.length).toBeGreaterThan(0);

    const parsed = await openai.chat.completions.create({
      model: "tiny",
      messages: ask,
      ...thinking,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const message = parsed.choices[0]!.message as unknown as Record<string, unknown>;
    expect(message.reasoning_content).toBe(text.trim());
    expect(message.content).toBe("");

    const stream = await openai.chat.completions.create({
      model: "tiny",
      messages: ask,
      ...thinking,
      stream: true,
    } as OpenAI.ChatCompletionCreateParamsStreaming);
    let reasoning = "";
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta as Record<string, unknown> | undefined;
      reasoning += (delta?.reasoning_content as string | undefined) ?? "";
      expect(delta?.content ?? "").toBe("");
    }
    expect(reasoning).toBe(text.trim());
  });

  it("comes as Anthropic thinking blocks, streamed with thinking_delta", async () => {
    const body = {
      model: "tiny",
      max_tokens: 8,
      temperature: 0,
      messages: ask,
      thinking: { type: "enabled" as const, budget_tokens: 1024 },
    };
    // Anthropic's `thinking` switch reaches the template as enable_thinking; this template reads `think`.
    const raw = await openai.chat.completions.create({
      model: "tiny",
      messages: ask,
      ...thinking,
      reasoning_format: "none",
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    const expected = raw.choices[0]!.message.content!.trim();
    const thinkServer = await startServer({
      modelPath: join(dir, "tiny-qwen3moe.gguf"),
      chatTemplate: TEMPLATE.replace("{% if think %}", "{% if enable_thinking %}"),
    });
    try {
      const client = new Anthropic({ baseURL: thinkServer.url, apiKey: "unused", maxRetries: 0 });
      const message = await client.messages.create(body);
      expect(message.content).toEqual([{ type: "thinking", thinking: expected, signature: "" }]);
      const events: string[] = [];
      const stream = client.messages.stream(body);
      stream.on("streamEvent", (event) =>
        events.push(event.type === "content_block_delta" ? event.delta.type : event.type),
      );
      const final = await stream.finalMessage();
      expect(final.content).toEqual([{ type: "thinking", thinking: expected, signature: "" }]);
      expect(events[0]).toBe("message_start");
      expect(events).toContain("thinking_delta");
      expect(events.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    } finally {
      await thinkServer.close();
    }
  });
});

describe("--reasoning-format and --chat-template-kwargs", () => {
  it("are read from flags and LLAMA_ARG_THINK / LLAMA_CHAT_TEMPLATE_KWARGS, and refuse bad values", () => {
    expect(parseServeOptions([])).toMatchObject({ reasoningFormat: "auto" });
    const flags = parseServeOptions(["--reasoning-format", "none", "--chat-template-kwargs", '{"think":true}']);
    expect(flags).toMatchObject({ reasoningFormat: "none", chatTemplateKwargs: { think: true } });
    const env = parseServeOptions([], { LLAMA_ARG_THINK: "deepseek", LLAMA_CHAT_TEMPLATE_KWARGS: '{"a":1}' });
    expect(env).toMatchObject({ reasoningFormat: "deepseek", chatTemplateKwargs: { a: 1 } });
    expect(() => parseServeOptions(["--reasoning-format", "deepseek-legacy"])).toThrow(UsageError);
    expect(() => parseServeOptions(["--chat-template-kwargs", "[1]"])).toThrow(/--chat-template-kwargs/);
  });

  it("set the defaults of requests, which may override them", async () => {
    const configured = await startServer({
      modelPath: join(dir, "tiny-qwen3moe.gguf"),
      chatTemplate: TEMPLATE,
      config: { reasoningFormat: "none", chatTemplateKwargs: { think: true } },
    });
    try {
      const client = new OpenAI({ baseURL: `${configured.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const body = { model: "tiny", messages: ask, temperature: 0, max_tokens: 6 };
      const raw = (await client.chat.completions.create(body)).choices[0]!.message;
      expect(raw.content!.length).toBeGreaterThan(0);
      const parsed = await client.chat.completions.create({ ...body, reasoning_format: "auto" } as typeof body);
      expect((parsed.choices[0]!.message as unknown as Record<string, unknown>).reasoning_content).toBe(
        raw.content!.trim(),
      );
      const rendered = async (kwargs?: object) =>
        (
          await (
            await postJson(`${configured.url}/apply-template`, { messages: ask, chat_template_kwargs: kwargs })
          ).json()
        ).prompt as string;
      expect((await rendered()).endsWith("<|im_start|>assistant\n<think>\n")).toBe(true);
      expect((await rendered({ think: false })).endsWith("<|im_start|>assistant\n")).toBe(true);
    } finally {
      await configured.close();
    }
  });
});

describe("stream shapers on a parsed chat stream", () => {
  const chunks: ChatChunk[] = [
    { text: "", reasoning: "Need weather.", tokens: [1] },
    { text: "Checking.", tokens: [2] },
    {
      text: "",
      toolCalls: [
        { id: "call_a", name: "get_weather", arguments: { city: "Paris" } },
        { id: "call_b", name: "get_weather", arguments: { city: "Oslo" } },
      ],
      tokens: [3],
    },
  ];

  it("gives Anthropic's client thinking, text and tool_use blocks with input_json_delta", async () => {
    const events: Record<string, unknown>[] = [
      {
        type: "message_start",
        message: {
          id: "msg_1",
          type: "message",
          role: "assistant",
          model: "tiny",
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 1, output_tokens: 0 },
        },
      },
    ];
    const blocks = new AnthropicBlocks((type, data) => events.push({ type, ...data }));
    for (const chunk of chunks) blocks.push(chunk);
    blocks.finish();
    events.push({
      type: "message_delta",
      delta: { stop_reason: "tool_use", stop_sequence: null },
      usage: { output_tokens: 3 },
    });
    events.push({ type: "message_stop" });
    expect(
      events.filter((e) => e.type === "content_block_delta").map((e) => (e.delta as { type: string }).type),
    ).toEqual(["thinking_delta", "signature_delta", "text_delta", "input_json_delta", "input_json_delta"]);
    const body = new Blob(events.map((e) => JSON.stringify(e) + "\n")).stream();
    const message = await MessageStream.fromReadableStream(body).finalMessage();
    expect(message.content).toEqual([
      { type: "thinking", thinking: "Need weather.", signature: "" },
      { type: "text", text: "Checking." },
      { type: "tool_use", id: "call_a", name: "get_weather", input: { city: "Paris" } },
      { type: "tool_use", id: "call_b", name: "get_weather", input: { city: "Oslo" } },
    ]);
    expect(message.stop_reason).toBe("tool_use");
  });

  it("numbers OpenAI tool-call deltas across chunks", () => {
    expect(openAiChatDeltas(chunks[2]!, 1).map((d) => (d.tool_calls as { index: number }[])[0]!.index)).toEqual([
      1, 1, 2, 2,
    ]);
    expect(openAiChatDeltas(chunks[0]!, 0)).toEqual([{ reasoning_content: "Need weather." }]);
  });
});

describe("CORS", () => {
  it("answers a preflight without a key, and echoes the origin on every answer", async () => {
    const preflight = await fetch(`${server.url}/v1/chat/completions`, {
      method: "OPTIONS",
      headers: { origin: "http://example.test", "access-control-request-method": "POST" },
    });
    expect(preflight.status).toBe(200);
    expect(preflight.headers.get("access-control-allow-origin")).toBe("http://example.test");
    expect(preflight.headers.get("access-control-allow-methods")).toBe("GET, POST, DELETE, OPTIONS");
    expect(preflight.headers.get("access-control-allow-headers")).toBe("*");
    const health = await getUrl(`${server.url}/health`);
    expect(health.headers.get("access-control-allow-origin")).toBe("*");
    const streamed = await postJson(
      `${server.url}/v1/chat/completions`,
      { messages: ask, max_tokens: 2, stream: true },
      { authorization: "Bearer k", origin: "http://example.test" },
    );
    expect(streamed.headers.get("content-type")).toBe("text/event-stream");
    expect(streamed.headers.get("access-control-allow-origin")).toBe("http://example.test");
    await streamed.text();
  });
});
