// bloomery-serve's shutdown (issue 17, finding 7): SIGTERM once left running and queued generations going for
// 40 s and more, and a client trickling its body kept the process alive past 75 s. Now it drains within a
// deadline: waiting requests get a 503 at once, running ones end or are stopped at the deadline (a 503, or an
// error event closing a stream), slow and idle connections are closed, and the process exits.
import { connect, type Socket } from "node:net";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { DRAIN_SECONDS } from "../examples/server/drain.js";
import { readGgufInfo } from "../src/index.js";
import { defaultModelPath } from "../tools/default-model.js";
import {
  exitWithin,
  getUrl,
  postJson,
  spawnServe,
  startServer,
  type JsonResponse,
  type ServeProcess,
  type TestServer,
} from "./server-helpers.js";

let eos: number;
beforeAll(async () => {
  eos = Number((await readGgufInfo(defaultModelPath())).metadata["tokenizer.ggml.eos_token_id"]);
});

/** A chat that runs until the context is full (the end-of-sequence token banned): long enough to outlast a drain. */
const longChat = (stream: boolean) => ({
  messages: [{ role: "user", content: "Tell me a long story." }],
  stream,
  temperature: 0,
  logit_bias: [[eos, false]],
});

/** The `data:` payloads of an event stream. */
function events(body: string): string[] {
  return body
    .split("\n\n")
    .filter((block) => block.startsWith("data: "))
    .map((block) => block.slice(6));
}

/** A streamed chat read as it comes: resolves `started` with its first event, `whole` with the full body. */
function streamChat(
  url: string,
  body: unknown,
): { started: Promise<void>; whole: Promise<{ status: number; body: string }> } {
  let start!: () => void;
  const started = new Promise<void>((resolve) => (start = resolve));
  const whole = postJson(`${url}/v1/chat/completions`, body).then(async (response) => {
    const decoder = new TextDecoder();
    let text = "";
    // A torn connection rejects here, failing the test: the stream must end well-formed.
    for await (const chunk of response.body!) {
      text += decoder.decode(chunk, { stream: true });
      if (text.includes("\n\n")) start();
    }
    start();
    return { status: response.status, body: text };
  });
  return { started, whole };
}

/** A stream that ended well: whole (a finish_reason, then [DONE]) or with an error event saying why. */
function expectCleanEnd(body: string): "complete" | "stopped" {
  const data = events(body);
  if (data.at(-1) === "[DONE]") {
    expect(data.slice(0, -1).some((d) => JSON.parse(d).choices?.[0]?.finish_reason)).toBe(true);
    return "complete";
  }
  expect(JSON.parse(data.at(-1)!)).toEqual({
    error: {
      code: 503,
      type: "unavailable_error",
      message: expect.stringMatching(/^the server is shutting down: the generation was stopped after \d+ tokens$/),
    },
  });
  return "stopped";
}

/** A raw connection to the server: what it received, and when it closed. */
function rawClient(port: number, first: string): { socket: Socket; received: () => string; closed: Promise<void> } {
  const socket = connect(port, "127.0.0.1");
  let received = "";
  socket.on("data", (d) => (received += d.toString()));
  socket.on("error", () => {});
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()));
  socket.write(first);
  return { socket, received: () => received, closed };
}

/** A POST whose head is sent whole and whose body never arrives whole (one byte of 50, then nothing). */
const TRICKLE =
  "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n{";
/** A request head that never ends. */
const SLOW_HEAD = "POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\n";
/** A request answered at once on a connection then left open (keep-alive). */
const KEEP_ALIVE = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n";

async function until(condition: () => boolean | Promise<boolean>, what: string, ms = 30_000): Promise<void> {
  const end = performance.now() + ms;
  while (!(await condition())) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe("the drain (in process)", () => {
  let server: TestServer | undefined;
  afterEach(async () => {
    await server?.close();
    server = undefined;
  });

  it("stops running generations at the deadline with a 503 or an error event, refuses the waiting, closes every connection", async () => {
    // Context shift on and a bound far past the context: both generations run until the drain stops them. Bounded
    // by the context (the server's default), one sometimes ended under the full suite's load before the drain
    // began (CI: a stream that completed; a waiting request that took the freed slot).
    server = await startServer({ parallel: 2, config: { contextShift: true } });
    const { url, context } = server;
    const port = Number(new URL(url).port);
    const endless = (stream: boolean) => ({ ...longChat(stream), max_tokens: 10_000_000 });
    const streamed = streamChat(url, endless(true));
    await streamed.started;
    const plain = postJson(`${url}/v1/chat/completions`, endless(false));
    await until(() => context.slots.busy === 2, "both slots to run");
    const waiting = postJson(`${url}/v1/chat/completions`, endless(true));
    await until(() => context.slots.waiting === 1, "a request to wait for a slot");
    const trickle = rawClient(port, TRICKLE);
    const slowHead = rawClient(port, SLOW_HEAD);
    const idle = rawClient(port, KEEP_ALIVE);
    await until(() => idle.received().includes("200 OK"), "the keep-alive answer");
    await new Promise((resolve) => setTimeout(resolve, 100));

    const started = performance.now();
    // Deadline 0: whatever runs when the drain begins is stopped.
    const report = await server.shutdown(0);
    const seconds = (performance.now() - started) / 1000;
    expect(report).toEqual({ running: 2, waiting: 1, stopped: true, drained: true });
    expect(seconds).toBeLessThan(3);

    const { status, body } = await streamed.whole;
    expect(status).toBe(200);
    expect(expectCleanEnd(body)).toBe("stopped");
    const stopped: JsonResponse = await plain;
    expect(stopped.status).toBe(503);
    expect((await stopped.json()).error.message).toMatch(/stopped after \d+ tokens/);
    const refused: JsonResponse = await waiting;
    expect(refused.status).toBe(503);
    expect(await refused.json()).toEqual({
      error: {
        code: 503,
        type: "unavailable_error",
        message: "the server is shutting down: the request was waiting for a slot",
      },
    });
    await Promise.all([trickle.closed, slowHead.closed, idle.closed]);
    expect(trickle.received()).toMatch(/^HTTP\/1\.1 503 [^]*the request had not arrived whole/);
    await expect(getUrl(`${url}/health`)).rejects.toThrow();
  });

  it("lets generations that end before the deadline end whole", async () => {
    server = await startServer({ parallel: 1 });
    const { url, context } = server;
    // Long enough (256 tokens, the end-of-sequence banned) that the second request arrives while it runs, even
    // on a loaded machine; 8 tokens sometimes ended before it and the second never waited.
    const bounded = { ...longChat(true), max_tokens: 256 };
    const running = streamChat(url, bounded);
    await running.started;
    const waiting = postJson(`${url}/v1/chat/completions`, { ...bounded, stream: false, max_tokens: 8 });
    await until(() => context.slots.waiting === 1, "a request to wait for a slot");
    const report = await server.shutdown(120_000);
    expect(report).toEqual({ running: 1, waiting: 1, stopped: false, drained: true });
    expect(expectCleanEnd((await running.whole).body)).toBe("complete");
    expect((await waiting).status).toBe(503);
  });
});

describe("bloomery-serve on SIGTERM (child process)", () => {
  let server: ServeProcess | undefined;
  afterEach(async () => {
    await server?.kill();
    server = undefined;
  });

  it(`exits within the ${DRAIN_SECONDS} s drain, every client answered, slow and idle ones closed`, async () => {
    server = spawnServe(["--port", "0", "-np", "1", "--metrics", "-t", "2"]);
    const url = await server.loaded();
    const port = Number(new URL(url).port);
    const running = streamChat(url, longChat(true));
    await running.started;
    const waiting = postJson(`${url}/v1/chat/completions`, longChat(false));
    await until(
      async () => /requests_deferred 1\n/.test(await (await fetch(`${url}/metrics`)).text()),
      "a request to wait for the slot",
    );
    const trickle = rawClient(port, TRICKLE);
    const idle = rawClient(port, KEEP_ALIVE);
    await until(() => idle.received().includes("200 OK"), "the keep-alive answer");

    const signalled = performance.now();
    server.child.kill("SIGTERM");
    // With the defect the generations run on (a full context, then the queued one): the wait runs out.
    const exit = await exitWithin(server, (DRAIN_SECONDS + 5) * 1000);
    expect(exit, `still running ${DRAIN_SECONDS + 5} s after SIGTERM: ${server.stderr()}`).toBeDefined();
    expect(exit).toMatchObject({ code: 0, signal: null });
    const seconds = (exit!.at - signalled) / 1000;
    console.log(`SIGTERM to exit: ${seconds.toFixed(1)} s; ${server.stderr().trim().split("\n").at(-1)}`);
    expect(seconds).toBeLessThan(DRAIN_SECONDS + 4);
    expect(server.stderr()).toMatch(/SIGTERM: shutting down/);

    const { status, body } = await running.whole;
    expect(status).toBe(200);
    expectCleanEnd(body);
    const refused = await waiting;
    expect(refused.status).toBe(503);
    expect((await refused.json()).error.message).toBe(
      "the server is shutting down: the request was waiting for a slot",
    );
    await Promise.all([trickle.closed, idle.closed]);
    expect(trickle.received()).toMatch(/^HTTP\/1\.1 503 /);
  }, 90_000);

  it("exits at once, with 1, on a second signal", async () => {
    server = spawnServe(["--port", "0", "-np", "1", "-t", "2"]);
    const url = await server.loaded();
    const running = streamChat(url, longChat(true));
    // Exiting at once tears the stream: that is what a second signal asks for.
    const torn = running.whole.then(
      () => "ended",
      () => "torn",
    );
    await running.started;
    server.child.kill("SIGINT");
    await until(() => server!.stderr().includes("SIGINT: shutting down"), "the drain to begin");
    const second = performance.now();
    server.child.kill("SIGTERM");
    const exit = await exitWithin(server, 5000);
    expect(exit, server.stderr()).toMatchObject({ code: 1 });
    expect((exit!.at - second) / 1000).toBeLessThan(3);
    expect(server.stderr()).toMatch(/SIGTERM again: exiting now/);
    expect(await torn).toBe("torn");
  }, 60_000);
});
