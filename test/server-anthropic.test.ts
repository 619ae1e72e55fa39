// bloomery-serve through the official @anthropic-ai/sdk client: messages (streamed and not) and count_tokens.
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { greedyChat, startServer, type TestServer } from "./server-helpers.js";

let server: TestServer;
let client: Anthropic;
let expected: string;

beforeAll(async () => {
  // This SDK has no temperature field: the server's default (--temp 0) makes the answers greedy.
  server = await startServer({ apiKeys: ["sk-test"], temperature: 0 });
  client = new Anthropic({ baseURL: server.url, apiKey: "sk-test", maxRetries: 0 });
  expected = await greedyChat(server.model, "What is a dog?", 32);
});
afterAll(() => server.close());

describe("anthropic client", () => {
  it("gets the greedy answer", async () => {
    const message = await client.messages.create({
      model: "tiny",
      max_tokens: 32,
      messages: [{ role: "user", content: "What is a dog?" }],
    });
    expect(message.type).toBe("message");
    expect(message.content).toEqual([{ type: "text", text: expected }]);
    expect(message.stop_reason).toBe("end_turn");
    expect(message.usage.output_tokens).toBeGreaterThan(0);
  });

  it("streams the same answer as Anthropic's event sequence", async () => {
    const stream = client.messages.stream({
      model: "tiny",
      max_tokens: 32,
      messages: [{ role: "user", content: [{ type: "text", text: "What is a dog?" }] }],
    });
    const events: string[] = [];
    stream.on("streamEvent", (event) => events.push(event.type));
    const message = await stream.finalMessage();
    expect(message.content).toEqual([{ type: "text", text: expected }]);
    expect(events[0]).toBe("message_start");
    expect(events[1]).toBe("content_block_start");
    expect(events.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    expect(events).toContain("content_block_delta");
  });

  it("says max_tokens when it stops there", async () => {
    const message = await client.messages.create({
      model: "tiny",
      max_tokens: 2,
      messages: [{ role: "user", content: "What is a dog?" }],
    });
    expect(message.stop_reason).toBe("max_tokens");
    expect(message.usage.output_tokens).toBe(2);
  });

  it("counts tokens as the prompt is tokenized", async () => {
    const messages = [{ role: "user" as const, content: "What is a dog?" }];
    const count = await client.messages.countTokens({ model: "tiny", messages, system: "Be brief." });
    const prompt = server.model.applyChatTemplate([{ role: "system", content: "Be brief." }, ...messages]);
    expect(count.input_tokens).toBe(server.model.tokenize(prompt, { special: true, addSpecial: true }).length);
  });

  it("refuses a wrong key", async () => {
    const other = new Anthropic({ baseURL: server.url, apiKey: "wrong", maxRetries: 0 });
    const error = await other.messages
      .create({ model: "tiny", max_tokens: 2, messages: [{ role: "user", content: "hi" }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Anthropic.AuthenticationError);
  });
});
