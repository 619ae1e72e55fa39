// bloomery-serve's llama.cpp-native endpoints over raw HTTP, the API key, errors, and disconnects.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../examples/server/app.js";
import { parseServeOptions } from "../examples/server/options.js";
import { getUrl, greedyChat, postJson, startServer, type TestServer } from "./server-helpers.js";

let server: TestServer;
let expected: string;
let prompt: string;

beforeAll(async () => {
  server = await startServer({ parallel: 1 });
  expected = await greedyChat(server.model, "What is a dog?", 32);
  prompt = server.model.applyChatTemplate([{ role: "user", content: "What is a dog?" }]);
});
afterAll(() => server.close());

/** The JSON payloads of an event stream. */
function events(text: string): unknown[] {
  return text
    .split("\n\n")
    .filter((block) => block.startsWith("data: "))
    .map((block) => JSON.parse(block.slice(6)));
}

describe("llama.cpp-native endpoints", () => {
  it("reports n_probs as the model's log-probabilities, or with post_sampling_probs the draw's own", async () => {
    const body = { prompt: "Once upon a time", n_predict: 4, temperature: 1.5, top_k: 3, seed: 7, n_probs: 5 };
    type Entry = { id: number; prob?: number; logprob?: number; top_probs?: Entry[]; top_logprobs?: Entry[] };
    const probabilities = async (fields: Record<string, unknown>) => {
      const response = await postJson(`${server.url}/completion`, { ...body, ...fields });
      expect(response.status).toBe(200);
      return ((await response.json()) as { completion_probabilities: Entry[] }).completion_probabilities;
    };
    const raw = await probabilities({});
    const sampled = await probabilities({ post_sampling_probs: true });
    expect(sampled.map((e) => e.id)).toEqual(raw.map((e) => e.id));
    for (const [i, entry] of sampled.entries()) {
      // The raw distribution's top 5 over the whole vocabulary; the draw's, top_k 3's tokens only, summing to 1.
      expect(raw[i]!.top_logprobs).toHaveLength(5);
      expect(entry.logprob).toBeUndefined();
      const top = entry.top_probs!;
      expect(top.length).toBeLessThanOrEqual(3);
      expect(top.map((t) => t.id)).toEqual(raw[i]!.top_logprobs!.slice(0, top.length).map((t) => t.id));
      expect(top.reduce((sum, t) => sum + t.prob!, 0)).toBeCloseTo(1, 5);
      expect(top.find((t) => t.id === entry.id)?.prob).toBeCloseTo(entry.prob!, 6);
      // Temperature 1.5 flattens the kept tokens: the most likely one's share falls below its raw share among them.
      const rawTop = raw[i]!.top_logprobs!.slice(0, top.length).map((t) => Math.exp(t.logprob!));
      if (top.length > 1) expect(top[0]!.prob!).toBeLessThan(rawTop[0]! / rawTop.reduce((a, b) => a + b, 0));
    }
  });

  it("answers /health and /props", async () => {
    expect(await (await getUrl(`${server.url}/health`)).json()).toEqual({ status: "ok" });
    const props = await (await getUrl(`${server.url}/props`)).json();
    expect(props.total_slots).toBe(1);
    expect(props.default_generation_settings.n_ctx).toBe(server.model.info.contextSize);
    expect(props.chat_template).toBe(server.model.info.chatTemplate);
    expect(props.eos_token).toBe("<|im_end|>");
  });

  it("completes with /completion, streamed and not", async () => {
    const body = { prompt, n_predict: 32, temperature: 0, return_tokens: true };
    const done = await (await postJson(`${server.url}/completion`, body)).json();
    expect(done.content).toBe(expected);
    expect(done.stop).toBe(true);
    expect(done.stop_type).toBe("eos");
    expect(done.tokens_predicted).toBe(done.tokens.length);
    expect(done.timings.predicted_n).toBe(done.tokens_predicted);

    const response = await postJson(`${server.url}/completion`, { ...body, stream: true });
    expect(response.headers.get("content-type")).toBe("text/event-stream");
    const chunks = events(await response.text()) as { content: string; stop: boolean; stop_type?: string }[];
    expect(chunks.map((c) => c.content).join("")).toBe(expected);
    expect(chunks.at(-1)!.stop).toBe(true);
    expect(chunks.slice(0, -1).every((c) => !c.stop)).toBe(true);
  });

  it("names the stop word and the limit", async () => {
    const word = await (await postJson(`${server.url}/completion`, { prompt, temperature: 0, stop: ["dog"] })).json();
    expect(word).toMatchObject({ content: "A ", stop_type: "word", stopping_word: "dog" });
    const limit = await (await postJson(`${server.url}/completion`, { prompt, temperature: 0, n_predict: 2 })).json();
    expect(limit).toMatchObject({ stop_type: "limit", tokens_predicted: 2 });
  });

  it("tokenizes, detokenizes and applies the template", async () => {
    const { tokens } = await (await postJson(`${server.url}/tokenize`, { content: prompt })).json();
    expect(tokens).toEqual(Array.from(server.model.tokenize(prompt, { special: true, addSpecial: false })));
    const pieces = await (await postJson(`${server.url}/tokenize`, { content: "a dog", with_pieces: true })).json();
    expect(pieces.tokens.map((p: { piece: string }) => p.piece).join("")).toBe("a dog");
    const { content } = await (await postJson(`${server.url}/detokenize`, { tokens })).json();
    expect(content).toBe(server.model.detokenize(tokens));
    const applied = await postJson(`${server.url}/apply-template`, {
      messages: [{ role: "user", content: "What is a dog?" }],
    });
    expect(await applied.json()).toEqual({ prompt });
  });

  it("serves Prometheus metrics", async () => {
    const text = await (await getUrl(`${server.url}/metrics`)).text();
    expect(text).toMatch(/^llamacpp:tokens_predicted_total \d+/m);
  });

  it("takes a prompt of token ids, alone or among texts, and refuses an id outside the vocabulary by its place", async () => {
    const ids = Array.from(server.model.tokenize(prompt, { special: true, addSpecial: false }));
    const body = { n_predict: 8, temperature: 0, return_tokens: true };
    const fromText = await (await postJson(`${server.url}/completion`, { ...body, prompt })).json();
    const fromIds = await (await postJson(`${server.url}/completion`, { ...body, prompt: ids })).json();
    expect(fromIds.tokens).toEqual(fromText.tokens);
    expect(fromIds.tokens_evaluated).toBe(ids.length);
    // A text among ids is tokenized in its place (no BOS but first): the text of the last ids gives them back.
    const split = ids.length - 3;
    const tail = server.model.detokenize(ids.slice(split), { special: true });
    const mixed = await (
      await postJson(`${server.url}/completion`, { ...body, prompt: [...ids.slice(0, split), tail] })
    ).json();
    expect(mixed.tokens_evaluated).toBe(
      split + server.model.tokenize(tail, { special: true, addSpecial: false }).length,
    );
    for (const bad of [server.model.info.vocabSize, -1, 1.5]) {
      const refused = await postJson(`${server.url}/completion`, { ...body, prompt: [ids[0], ids[1], bad, "x"] });
      expect(refused.status).toBe(400);
      expect((await refused.json()).error.message).toMatch(/'prompt\[2\]'.*token id below/);
    }
  });

  it("refuses unknown fields, wrong types and long prompts with llama-server's error shape", async () => {
    const unknown = await postJson(`${server.url}/completion`, { prompt: "x", mirostat: 2 });
    expect(unknown.status).toBe(400);
    expect(await unknown.json()).toEqual({
      error: { code: 400, message: "unsupported field: 'mirostat'", type: "invalid_request_error" },
    });
    const wrong = await postJson(`${server.url}/completion`, { prompt: "x", n_predict: "many" });
    expect((await wrong.json()).error.message).toMatch(/'n_predict'/);
    const long = await postJson(`${server.url}/completion`, { prompt: "dog ".repeat(5000) });
    expect(long.status).toBe(400);
    expect((await long.json()).error.type).toBe("exceed_context_size_error");
    const missing = await getUrl(`${server.url}/nowhere`);
    expect(missing.status).toBe(404);
  });

  it("cancels a generation whose client disconnects, and serves the next request", async () => {
    const predicted = async () =>
      Number(/^llamacpp:tokens_predicted_total (\d+)/m.exec(await (await getUrl(`${server.url}/metrics`)).text())![1]);
    const before = await predicted();
    const controller = new AbortController();
    // The end-of-sequence token banned: only n_predict or the disconnect can end this one.
    const eos = server.model.info.eosToken;
    const response = await fetch(`${server.url}/completion`, {
      method: "POST",
      body: JSON.stringify({ prompt, n_predict: 900, logit_bias: [[eos, false]], stream: true }),
      signal: controller.signal,
    });
    await response.body!.getReader().read();
    controller.abort();
    const next = await (await postJson(`${server.url}/completion`, { prompt, n_predict: 32, temperature: 0 })).json();
    expect(next.content).toBe(expected);
    expect((await predicted()) - before - next.tokens_predicted).toBeLessThan(450);
  });
});

describe("api key and loading", () => {
  it("answers 503 while loading and 401 without the key", async () => {
    const { app } = createApp({ modelPath: "m.gguf", apiKeys: ["k1"], metrics: false, temperature: 0.8 });
    const health = await app.inject({ method: "GET", url: "/health" });
    expect(health.statusCode).toBe(503);
    expect(health.json()).toEqual({ error: { code: 503, message: "Loading model", type: "unavailable_error" } });
    const denied = await app.inject({ method: "POST", url: "/completion", payload: {} });
    expect(denied.statusCode).toBe(401);
    expect(denied.json().error).toEqual({ code: 401, message: "Invalid API Key", type: "authentication_error" });
    const keyed = await app.inject({
      method: "POST",
      url: "/completion",
      headers: { authorization: "Bearer k1" },
      payload: {},
    });
    expect(keyed.statusCode).toBe(503);
    await app.close();
  });
});

describe("command line", () => {
  it("reads llama-server's flags and LLAMA_ARG_* variables", () => {
    const options = parseServeOptions(["-m", "x.gguf", "-np", "3", "--port=9000", "--jinja", "-a", "name"], {
      LLAMA_ARG_CTX_SIZE: "512",
      LLAMA_ARG_PORT: "1",
      LLAMA_API_KEY: "a,b",
    });
    expect(options).toMatchObject({
      model: "x.gguf",
      parallel: 3,
      port: 9000,
      ctxSize: 512,
      aliases: ["name"],
      apiKeys: ["a", "b"],
    });
  });

  it("takes a chat template inline or from a file, and names a file it cannot read", () => {
    const path = join(mkdtempSync(join(tmpdir(), "bloomery-template-")), "t.jinja");
    writeFileSync(path, "{{ messages[0].content }}");
    expect(parseServeOptions(["--chat-template-file", path]).chatTemplate).toBe("{{ messages[0].content }}");
    expect(parseServeOptions(["--chat-template", "x{{ 1 }}"]).chatTemplate).toBe("x{{ 1 }}");
    expect(() => parseServeOptions(["--chat-template-file", `${path}.missing`])).toThrow(/--chat-template-file/);
  });

  it("refuses unknown flags and variables by name", () => {
    expect(() => parseServeOptions(["--no-such-flag"])).toThrow(/--no-such-flag/);
    expect(() => parseServeOptions([], { LLAMA_ARG_NO_SUCH_FLAG: "on" })).toThrow(/LLAMA_ARG_NO_SUCH_FLAG/);
    expect(() => parseServeOptions(["--port", "x"])).toThrow(/--port/);
  });
});
