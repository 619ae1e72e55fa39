// Request bodies are strict UTF-8 JSON whatever their size: a large one is parsed on a worker
// thread (examples/server/body.ts), and must be refused or read exactly as a small one is.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer } from "./server-helpers.js";

let server: TestServer;

beforeAll(async () => {
  server = await startServer();
});
afterAll(() => server.close());

function post(path: string, body: Buffer) {
  return fetch(`${server.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body });
}

/** A /tokenize body whose content is `text`, padded with spaces to `bytes` bytes in all. */
function tokenizeBody(text: string, bytes: number): Buffer {
  const head = Buffer.from(`{"content":${JSON.stringify(text)}`);
  return Buffer.concat([head, Buffer.from(" ".repeat(Math.max(0, bytes - head.length - 1))), Buffer.from("}")]);
}

// Below and above the size that moves the parse to the worker.
describe.each([
  ["a small body", 1_000],
  ["a large body", 1_000_000],
])("%s", (_name, bytes) => {
  it("is read as the same value", async () => {
    const text = "Mañana, the river ran 3 km: naïve 🐟 ".repeat(8);
    const response = await post("/tokenize", tokenizeBody(text, bytes));
    expect(response.status).toBe(200);
    const { tokens } = (await response.json()) as { tokens: number[] };
    expect(tokens).toEqual([...server.model.tokenize(text, { special: true })]);
  });

  it("that is not UTF-8 gets a 400 naming that", async () => {
    const body = tokenizeBody("abc", bytes);
    body[body.length - 3] = 0xff;
    const response = await post("/tokenize", body);
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { message: string } }).error.message).toBe(
      "the request body is not valid UTF-8",
    );
  });

  it("that is not JSON gets a 400 naming that", async () => {
    const body = tokenizeBody("abc", bytes);
    body[body.length - 1] = 0x2c;
    const response = await post("/tokenize", body);
    expect(response.status).toBe(400);
    expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(
      /^the request body is not valid JSON: /,
    );
  });
});

it("a large body's /tokenize answer lists every token", async () => {
  const text = Array.from({ length: 40_000 }, (_, i) => (i * 7919).toString(36)).join(" ");
  const response = await post("/tokenize", tokenizeBody(text, 0));
  const { tokens } = (await response.json()) as { tokens: number[] };
  const expected = [...server.model.tokenize(text, { special: true })];
  expect(expected.length).toBeGreaterThan(65_536);
  expect(tokens).toEqual(expected);
});
