// bloomery-serve through the official openai client: chat (streamed and not) and completions.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { greedyChat, startServer, type TestServer } from "./server-helpers.js";

let server: TestServer;
let client: OpenAI;
let expected: string;

beforeAll(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
  expected = await greedyChat(server.model, "What is a dog?", 32);
});
afterAll(() => server.close());

describe("openai client", () => {
  it("gets the greedy answer from a chat completion", async () => {
    expect(expected.startsWith("A dog is")).toBe(true);
    const completion = await client.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "What is a dog?" }],
      temperature: 0,
      max_tokens: 32,
    });
    expect(completion.object).toBe("chat.completion");
    expect(completion.choices[0]!.message).toEqual({ role: "assistant", content: expected });
    expect(completion.choices[0]!.finish_reason).toBe("stop");
    expect(completion.usage!.completion_tokens).toBeGreaterThan(0);
    expect(completion.usage!.total_tokens).toBe(completion.usage!.prompt_tokens + completion.usage!.completion_tokens);
  });

  it("streams the same answer: role first, content deltas, finish_reason, usage", async () => {
    const stream = await client.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "What is a dog?" }],
      temperature: 0,
      max_tokens: 32,
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta.role).toBe("assistant");
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(text).toBe(expected);
    const last = chunks.at(-2)!;
    expect(last.choices[0]!.finish_reason).toBe("stop");
    expect(chunks.at(-1)!.choices).toEqual([]);
    expect(chunks.at(-1)!.usage!.completion_tokens).toBeGreaterThan(0);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  it("reports finish_reason length at max_tokens", async () => {
    const completion = await client.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "What is a dog?" }],
      temperature: 0,
      max_completion_tokens: 3,
    });
    expect(completion.choices[0]!.finish_reason).toBe("length");
    expect(completion.usage!.completion_tokens).toBe(3);
    expect(expected.startsWith(completion.choices[0]!.message.content!)).toBe(true);
  });

  it("stops at a stop string", async () => {
    const completion = await client.chat.completions.create({
      model: "tiny",
      messages: [{ role: "user", content: "What is a dog?" }],
      temperature: 0,
      max_tokens: 32,
      stop: [" is"],
    });
    expect(completion.choices[0]!.message.content).toBe("A dog");
    expect(completion.choices[0]!.finish_reason).toBe("stop");
  });

  it("completes text, streamed and not, the same way", async () => {
    const prompt = server.model.applyChatTemplate([{ role: "user", content: "What is a dog?" }]);
    const completion = await client.completions.create({ model: "tiny", prompt, temperature: 0, max_tokens: 32 });
    expect(completion.object).toBe("text_completion");
    expect(completion.choices[0]!.text).toBe(expected);
    const stream = await client.completions.create({
      model: "tiny",
      prompt,
      temperature: 0,
      max_tokens: 32,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    expect(text).toBe(expected);
  });

  it("lists the model", async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["tiny"]);
  });

  it("refuses an unsupported field by name", async () => {
    const error = await client.chat.completions
      .create({
        model: "tiny",
        messages: [{ role: "user", content: "hi" }],
        prediction: { type: "content", content: "hi" },
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as Error).message).toMatch(/'prediction'/);
  });
});
