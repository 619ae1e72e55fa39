// bloomery-serve's constrained output and logprobs through the official openai client (and raw
// HTTP for llama-server's own fields): response_format json_object / json_schema, json_schema and
// grammar, logprobs / top_logprobs on chat and completions, and the 400s for bad constraints.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { postJson, startServer, type TestServer } from "./server-helpers.js";
import { duplicateKey, schemaViolation } from "./json-schema-check.js";

let server: TestServer;
let client: OpenAI;

beforeAll(async () => {
  server = await startServer();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(() => server.close());

const messages = [{ role: "user" as const, content: "Describe a dog." }];

const schema = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 10 },
    legs: { type: "integer" },
    sound: { enum: ["woof", "meow"] },
  },
  required: ["name", "legs", "sound"],
  additionalProperties: false,
};

/** POSTs to the server; the status and the parsed body. */
async function post(path: string, body: unknown) {
  const response = await postJson(`${server.url}${path}`, body);
  return { status: response.status, json: await response.json() };
}

describe("constrained output", () => {
  it("answers response_format json_schema with JSON that validates, streamed and not", async () => {
    const response_format = { type: "json_schema" as const, json_schema: { name: "dog", schema, strict: true } };
    const completion = await client.chat.completions.create({
      model: "tiny",
      messages,
      response_format,
      max_tokens: 200,
    });
    const text = completion.choices[0]!.message.content!;
    expect(completion.choices[0]!.finish_reason).toBe("stop");
    expect(schemaViolation(schema, JSON.parse(text)), text).toBeUndefined();
    expect(duplicateKey(text)).toBeUndefined();

    const stream = await client.chat.completions.create({
      model: "tiny",
      messages,
      response_format,
      max_tokens: 200,
      stream: true,
      seed: 3,
    });
    let streamed = "";
    for await (const chunk of stream) streamed += chunk.choices[0]?.delta.content ?? "";
    expect(schemaViolation(schema, JSON.parse(streamed)), streamed).toBeUndefined();
  });

  it("answers response_format json_object with a JSON object", async () => {
    const completion = await client.chat.completions.create({
      model: "tiny",
      messages,
      response_format: { type: "json_object" },
      temperature: 0,
      max_tokens: 300,
    });
    const value: unknown = JSON.parse(completion.choices[0]!.message.content!);
    expect(typeof value === "object" && value !== null && !Array.isArray(value)).toBe(true);
  });

  it("takes llama-server's json_schema and grammar fields, on /completion too", async () => {
    const viaSchema = await post("/v1/chat/completions", { messages, json_schema: schema, max_tokens: 200 });
    expect(viaSchema.status).toBe(200);
    expect(schemaViolation(schema, JSON.parse(viaSchema.json.choices[0].message.content))).toBeUndefined();
    const grammar = 'root ::= "Yes, " ("woof" | "bark") "."';
    const native = await post("/completion", { prompt: "Does a dog bark?", grammar, n_predict: 20 });
    expect(native.status).toBe(200);
    expect(native.json.content).toMatch(/^Yes, (woof|bark)\.$/);
  });

  it("refuses bad constraints with a 400 that names them", async () => {
    const badGrammar = await post("/v1/chat/completions", { messages, grammar: "root ::= (" });
    expect(badGrammar.status).toBe(400);
    expect(badGrammar.json.error.message).toMatch(/grammar line 1, column 11/);
    const pattern = await post("/v1/chat/completions", { messages, json_schema: { type: "string", pattern: "a+" } });
    expect(pattern.status).toBe(400);
    expect(pattern.json.error.message).toContain('"pattern"');
    const both = await post("/v1/chat/completions", { messages, grammar: 'root ::= "a"', json_schema: {} });
    expect(both.status).toBe(400);
    const format = await post("/v1/chat/completions", { messages, response_format: { type: "xml" } });
    expect(format.status).toBe(400);
    expect(format.json.error.message).toContain("response_format.type");
    const noSchema = await post("/v1/chat/completions", { messages, response_format: { type: "json_schema" } });
    expect(noSchema.status).toBe(400);
    expect((await server.app.inject({ method: "GET", url: "/health" })).statusCode).toBe(200);
  });
});

describe("logprobs", () => {
  it("reports chat logprobs with top_logprobs, streamed and not", async () => {
    const completion = await client.chat.completions.create({
      model: "tiny",
      messages,
      temperature: 0,
      max_tokens: 8,
      logprobs: true,
      top_logprobs: 3,
    });
    const content = completion.choices[0]!.logprobs!.content!;
    expect(content.length).toBe(completion.usage!.completion_tokens);
    expect(content.map((c) => c.token).join("")).toBe(completion.choices[0]!.message.content);
    for (const entry of content) {
      expect(entry.logprob).toBeLessThanOrEqual(0);
      expect(entry.top_logprobs).toHaveLength(3);
      // Greedy: the drawn token is the most likely one.
      expect(entry.top_logprobs[0]!.token).toBe(entry.token);
      expect(entry.top_logprobs[0]!.logprob).toBeCloseTo(entry.logprob, 6);
      expect(Buffer.from(entry.bytes!).toString("utf8")).toBe(entry.token);
    }

    const stream = await client.chat.completions.create({
      model: "tiny",
      messages,
      temperature: 0,
      max_tokens: 8,
      logprobs: true,
      top_logprobs: 3,
      stream: true,
    });
    const streamed = [];
    for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    expect(streamed).toEqual(content);
  });

  it("reports completions logprobs, and leaves them out unless asked", async () => {
    const prompt = "A dog is";
    const completion = await client.completions.create({
      model: "tiny",
      prompt,
      temperature: 0,
      max_tokens: 5,
      logprobs: 2,
    });
    const logprobs = completion.choices[0]!.logprobs as unknown as { content: { top_logprobs: unknown[] }[] };
    expect(logprobs.content).toHaveLength(completion.usage!.completion_tokens);
    expect(logprobs.content.every((c) => c.top_logprobs.length === 2)).toBe(true);
    const plain = await client.chat.completions.create({ model: "tiny", messages, temperature: 0, max_tokens: 4 });
    expect(plain.choices[0]!.logprobs ?? null).toBeNull();
    const badTop = await post("/v1/chat/completions", { messages, top_logprobs: 2 });
    expect(badTop.status).toBe(400);
  });
});
