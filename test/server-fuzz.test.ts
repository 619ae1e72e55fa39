// 1,000+ malformed or hostile requests: each one is answered with a 4xx, and the server still
// answers a good request correctly afterwards.
import { afterAll, beforeAll, expect, it } from "vitest";
import { greedyChat, startServer, type TestServer } from "./server-helpers.js";

let server: TestServer;

beforeAll(async () => {
  server = await startServer({ apiKeys: ["good-key"] });
});
afterAll(() => server.close());

/** Deterministic choices, so that a failure can be replayed. */
function random(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1664525 + 1013904223) >>> 0;
    return state / 2 ** 32;
  };
}

type Kind = "string" | "integer" | "number" | "boolean" | "array" | "object";

/** A valid body for each endpoint, and the kind of each field it takes. */
const ENDPOINTS: { path: string; body: Record<string, unknown>; fields: Record<string, Kind> }[] = [
  {
    path: "/v1/chat/completions",
    body: { model: "m", messages: [{ role: "user", content: "hi" }], max_tokens: 1 },
    fields: {
      model: "string",
      messages: "array",
      max_tokens: "integer",
      temperature: "number",
      top_k: "integer",
      stream: "boolean",
      stop: "array",
      seed: "integer",
      chat_template_kwargs: "object",
      stream_options: "object",
    },
  },
  {
    path: "/v1/completions",
    body: { model: "m", prompt: "hi", max_tokens: 1 },
    fields: {
      model: "string",
      max_tokens: "integer",
      top_p: "number",
      min_p: "number",
      stream: "boolean",
      presence_penalty: "number",
    },
  },
  {
    path: "/completion",
    body: { prompt: "hi", n_predict: 1 },
    fields: {
      n_predict: "integer",
      repeat_last_n: "integer",
      repeat_penalty: "number",
      cache_prompt: "boolean",
      return_tokens: "boolean",
      logit_bias: "object",
    },
  },
  {
    path: "/v1/messages",
    body: { model: "m", max_tokens: 1, messages: [{ role: "user", content: "hi" }] },
    fields: {
      model: "string",
      max_tokens: "integer",
      temperature: "number",
      top_k: "integer",
      stream: "boolean",
      metadata: "object",
      stop_sequences: "array",
    },
  },
  {
    path: "/v1/messages/count_tokens",
    body: { model: "m", messages: [{ role: "user", content: "hi" }] },
    fields: { model: "string", messages: "array" },
  },
  {
    path: "/tokenize",
    body: { content: "hi" },
    fields: { content: "string", add_special: "boolean", with_pieces: "boolean" },
  },
  { path: "/detokenize", body: { tokens: [1] }, fields: { tokens: "array" } },
  {
    path: "/apply-template",
    body: { messages: [{ role: "user", content: "hi" }] },
    fields: { messages: "array", chat_template_kwargs: "object" },
  },
];

const WRONG: Record<Kind, unknown[]> = {
  string: [1, true, [], {}, ["a"]],
  integer: ["1", 1.5, true, [], {}, 2 ** 64, -1e300, 1e308],
  number: ["0.5", true, [], {}, -1e300, "NaN"],
  boolean: ["true", 1, 0, [], {}],
  array: [1, true, {}, [{}], [[[]]], [null]],
  object: ["x", 1, true, [1]],
};

function cases(next: () => number): { path: string; body: string | Uint8Array; headers: Record<string, string> }[] {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!;
  const json = (value: unknown) => JSON.stringify(value);
  const out: { path: string; body: string | Uint8Array; headers: Record<string, string> }[] = [];
  const key = { authorization: "Bearer good-key" };
  for (let i = 0; i < 1200; i++) {
    const endpoint = pick(ENDPOINTS);
    const body: Record<string, unknown> = { ...endpoint.body };
    let raw: string | Uint8Array | undefined;
    let headers: Record<string, string> = key;
    switch (i % 10) {
      case 0:
      case 1:
      case 2: {
        const [field, kind] = pick(Object.entries(endpoint.fields));
        body[field] = pick(WRONG[kind]);
        break;
      }
      case 3:
        body[`x_${Math.floor(next() * 1e6)}`] = pick([1, "a", null, {}]);
        body.__proto__unknown = 1;
        break;
      case 4: {
        const depth = pick([100, 10_000, 100_000]);
        raw = `{"${Object.keys(endpoint.body)[0]}":${"[".repeat(depth)}${"]".repeat(depth)}}`;
        break;
      }
      case 5: {
        const text = json(body);
        const at = Math.floor(next() * text.length);
        const bad = pick([[0xff], [0xc3, 0x28], [0xed, 0xa0, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xe2, 0x82]]);
        raw = new Uint8Array([...Buffer.from(text.slice(0, at)), ...bad, ...Buffer.from(text.slice(at))]);
        break;
      }
      case 6:
        raw = pick(["", "{", "null", "[]", '"x"', "1", "{'a':1}", json(body).slice(0, -1), "\u0000", "{}}"]);
        if (raw === "") raw = " ";
        break;
      case 7:
        headers = pick<Record<string, string>>([
          {},
          { authorization: "Bearer bad-key" },
          { "x-api-key": "good-key2" },
          { authorization: "good-key" },
        ]);
        break;
      case 8:
        if (endpoint.path === "/tokenize" || endpoint.path === "/detokenize") body.tokens = [-1, 1e9];
        else if ("messages" in body)
          // An empty conversation is valid for Anthropic's endpoints; images are refused with llama-server's 500.
          body.messages = pick([
            endpoint.path.startsWith("/v1/messages") ? [null] : [],
            [{ role: "user" }],
            [{ role: 1, content: "a" }],
            [{ role: "user", content: [{ type: "video" }] }],
            [{ role: "user", content: "a", extra: 1 }],
          ]);
        else body.prompt = pick([[], [-5], [1.5], [{}], 5, [["a", {}]]]);
        if (endpoint.path === "/tokenize") body.content = 5;
        break;
      case 9:
        body.stop = pick([[1], [""], 5, {}]);
        body.logit_bias = pick([{ "-1": 1 }, { "99999999": 1 }, [[1]], { 1: "x" }, "x"]);
        break;
    }
    out.push({
      path: endpoint.path,
      body: raw ?? json(body),
      headers: { "content-type": "application/json", ...headers },
    });
  }
  out.push({
    path: "/completion",
    body: json({ prompt: "x".repeat(9 * 1024 * 1024) }),
    headers: { "content-type": "application/json", ...key },
  });
  return out;
}

it("answers 1,200 hostile requests with a 4xx and stays healthy", async () => {
  const all = cases(random(5));
  const failures: string[] = [];
  let at = 0;
  const worker = async () => {
    while (at < all.length) {
      const c = all[at++]!;
      const response = await fetch(server.url + c.path, { method: "POST", headers: c.headers, body: c.body });
      const text = await response.text();
      if (response.status < 400 || response.status >= 500) {
        failures.push(`${response.status} ${c.path} ${String(c.body).slice(0, 200)} -> ${text.slice(0, 200)}`);
      } else if (!JSON.parse(text).error?.message) failures.push(`no error message: ${text.slice(0, 200)}`);
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  expect(failures).toEqual([]);

  const health = await fetch(`${server.url}/health`);
  expect(await health.json()).toEqual({ status: "ok" });
  const expected = await greedyChat(server.model, "What is a dog?", 16);
  const answer = await fetch(`${server.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: "Bearer good-key" },
    body: JSON.stringify({ messages: [{ role: "user", content: "What is a dog?" }], temperature: 0, max_tokens: 16 }),
  });
  const body = (await answer.json()) as { choices: { message: { content: string } }[] };
  expect(body.choices[0]!.message.content).toBe(expected);
});
