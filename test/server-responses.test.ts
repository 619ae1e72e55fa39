// bloomery-serve's /v1/responses (OpenAI's Responses API) through the official openai client: text, streamed and
// not, on the default model; a function call, streamed and not, and its output sent back, on a synthetic model whose
// template teaches the Qwen3-Coder format (the request's sampling fields make the engine finish the forced call, as
// in test/server-tools.test.ts).
import OpenAI from "openai";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { greedyChat, startServer, type TestServer } from "./server-helpers.js";

const TEMPLATE = `{%- if tools -%}
<|im_start|>system
Call tools as <tool_call><function=NAME><parameter=P>VALUE</parameter></function></tool_call>. Tools:
{%- for tool in tools %} {{ tool.function.name }}{% endfor %}<|im_end|>
{% endif -%}
{%- for m in messages -%}
<|im_start|>{{ m.role }}
{{ m.content }}
{%- for c in m.tool_calls or [] %}<tool_call><function={{ c.function.name }}>{{ c.function.arguments | tojson }}</function></tool_call>{% endfor %}
{%- if m.tool_call_id %} (answers {{ m.tool_call_id }}){% endif %}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}`;

const dir = mkdtempSync(join(tmpdir(), "bloomery-server-responses-"));
let text: TestServer;
let tools: TestServer;
let client: OpenAI;
let toolClient: OpenAI;
let expected: string;

beforeAll(async () => {
  text = await startServer();
  client = new OpenAI({ baseURL: `${text.url}/v1`, apiKey: "unused", maxRetries: 0 });
  expected = await greedyChat(text.model, "What is a dog?", 24);
  const modelPath = join(dir, "tiny-qwen3moe.gguf");
  await writeSyntheticModel(modelPath, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
  tools = await startServer({ modelPath, chatTemplate: TEMPLATE });
  toolClient = new OpenAI({ baseURL: `${tools.url}/v1`, apiKey: "unused", maxRetries: 0 });
});

afterAll(async () => {
  await text?.close();
  await tools?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("responses.create on text", () => {
  const request = { model: "tiny", input: "What is a dog?", temperature: 0, max_output_tokens: 24 };

  it("answers with the greedy chat answer as one message item", async () => {
    const response = await client.responses.create(request);
    expect(response.id).toMatch(/^resp_/);
    expect(response.object).toBe("response");
    expect(response.output_text).toBe(expected);
    expect(response.output).toEqual([
      {
        type: "message",
        id: expect.stringMatching(/^msg_/),
        status: "completed",
        role: "assistant",
        content: [{ type: "output_text", text: expected, annotations: [], logprobs: [] }],
      },
    ]);
    expect(response.usage!.output_tokens).toBeGreaterThan(0);
    expect(response.usage!.total_tokens).toBe(response.usage!.input_tokens + response.usage!.output_tokens);
  });

  it("takes instructions and message items as the conversation", async () => {
    const items = await client.responses.create({
      ...request,
      instructions: "Answer briefly.",
      input: [{ role: "user", content: [{ type: "input_text", text: "What is a dog?" }] }],
    });
    const plain = await client.responses.create({ ...request, instructions: "Answer briefly." });
    expect(items.output_text).toBe(plain.output_text);
    expect(items.usage!.input_tokens).toBeGreaterThan(plain.usage!.input_tokens - 1);
  });

  it("streams the same text as the API's events, each naming its item", async () => {
    const stream = await client.responses.create({ ...request, stream: true });
    const events = [];
    for await (const event of stream) events.push(event);
    const types = events.map((e) => e.type);
    expect(types.slice(0, 4)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
    ]);
    expect(types.slice(-4)).toEqual([
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const deltas = events.filter((e) => e.type === "response.output_text.delta");
    expect(deltas.map((e) => e.delta).join("")).toBe(expected);
    const added = events.find((e) => e.type === "response.output_item.added")!;
    const messageId = added.type === "response.output_item.added" ? added.item.id : "";
    expect(new Set(deltas.map((e) => e.item_id))).toEqual(new Set([messageId]));
    const completed = events.at(-1)!;
    if (completed.type !== "response.completed") throw new Error("no response.completed");
    expect(completed.response.output[0]!.id).toBe(messageId);
    const created = events[0]!;
    expect(created.type === "response.created" && created.response.id).toBe(completed.response.id);
  });

  it("refuses what it cannot serve by name", async () => {
    await expect(client.responses.create({ ...request, previous_response_id: "resp_1" })).rejects.toMatchObject({
      status: 400,
      message: expect.stringMatching(/previous_response_id/),
    });
    await expect(
      client.responses.create({ ...request, tools: [{ type: "web_search_preview" }] }),
    ).rejects.toMatchObject({ status: 400, message: expect.stringMatching(/tools\[0\]\.type/) });
  });
});

describe("responses.create with a function call", () => {
  /** Request fields that make the engine write `text` greedily (its tokens all differ). */
  function forceText(body: string) {
    const ids = Array.from(tools.model.tokenize(body, { special: true }));
    expect(new Set(ids).size).toBe(ids.length);
    const logit_bias: Record<string, number> = {};
    ids.forEach((token, i) => (logit_bias[token] = 100 * (ids.length - i)));
    return { logit_bias, presence_penalty: 1000, repeat_last_n: ids.length - 1, max_output_tokens: ids.length };
  }
  const weather = {
    type: "function" as const,
    name: "get_weather",
    description: "The weather in a city",
    parameters: { type: "object" },
    strict: false,
  };
  const request = () =>
    ({
      model: "tiny",
      input: "Weather in Paris?",
      tools: [weather],
      tool_choice: { type: "function" as const, name: "get_weather" },
      temperature: 0,
      ...forceText("</function></tool_call>"),
    }) as OpenAI.Responses.ResponseCreateParamsNonStreaming;

  it("answers with a function_call item", async () => {
    const response = await toolClient.responses.create(request());
    expect(response.output).toEqual([
      {
        type: "function_call",
        id: expect.stringMatching(/^fc_call_/),
        call_id: expect.stringMatching(/^call_/),
        name: "get_weather",
        arguments: "{}",
        status: "completed",
      },
    ]);
  });

  it("streams the call: the item added, its arguments, the item done", async () => {
    const stream = await toolClient.responses.create({ ...request(), stream: true });
    const events = [];
    for await (const event of stream) events.push(event);
    const calls = events.filter((e) => e.type.includes("output_item") || e.type.includes("function_call"));
    expect(calls.map((e) => e.type)).toEqual([
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
    ]);
    const done = calls.at(-1)!;
    expect(done.type === "response.output_item.done" && done.item).toMatchObject({
      type: "function_call",
      name: "get_weather",
      arguments: "{}",
    });
    const completed = events.at(-1)!;
    expect(completed.type === "response.completed" && completed.response.output[0]).toMatchObject({
      type: "function_call",
      name: "get_weather",
    });
  });

  it("renders the call and its output sent back as the next turn's input", async () => {
    const first = await toolClient.responses.create(request());
    const call = first.output[0]!;
    if (call.type !== "function_call") throw new Error("no function call");
    const response = await toolClient.responses.create({
      model: "tiny",
      input: [
        { role: "user", content: "Weather in Paris?" },
        call,
        { type: "function_call_output", call_id: call.call_id, output: "sunny" },
      ],
      tools: [weather],
      temperature: 0,
      max_output_tokens: 4,
    });
    expect(response.status).toBe("incomplete");
    const rendered = tools.model.applyChatTemplate(
      [
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: "", toolCalls: [{ id: call.call_id, name: "get_weather", arguments: {} }] },
        { role: "tool", content: "sunny", toolCallId: call.call_id },
      ],
      { tools: [{ type: "function", function: { name: "get_weather" } }] },
    );
    expect(rendered).toContain(`(answers ${call.call_id})`);
    expect(response.usage!.input_tokens).toBe(
      tools.model.tokenize(rendered, { special: true, addSpecial: true }).length,
    );
  });
});
