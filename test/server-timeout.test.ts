// bloomery-serve's --timeout: a client slower than it to send its request is answered 408 and cut,
// as llama-server's read timeout cuts it; a request sent in time is served.
import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createApp } from "../examples/server/app.js";
import { parseServeOptions } from "../examples/server/options.js";
import { Slots } from "../examples/server/slots.js";
import { loadModel, type Model } from "../src/index.js";
import { defaultModelPath } from "../tools/default-model.js";
import { postJson } from "./server-helpers.js";

const TIMEOUT_SECONDS = 1;

let model: Model;
let app: ReturnType<typeof createApp>["app"];
let port: number;

beforeAll(async () => {
  model = await loadModel(defaultModelPath(), { gpu: false, threads: 2 });
  const created = createApp(
    { modelPath: defaultModelPath(), apiKeys: [], metrics: false, temperature: 0 },
    { timeoutSeconds: TIMEOUT_SECONDS },
  );
  app = created.app;
  created.context.serve(new Slots(model, 1));
  port = Number(new URL(await app.listen({ host: "127.0.0.1", port: 0 })).port);
});
afterAll(async () => {
  await app.close();
  model.dispose();
});

/** Sends a POST /tokenize whose body arrives one byte per `gapMs`; what the server answers, and when it closed. */
function trickle(gapMs: number): Promise<{ answer: string; seconds: number; sentAll: boolean }> {
  const body = Buffer.from(JSON.stringify({ content: "a slow client" }));
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = connect(port, "127.0.0.1");
    let answer = "";
    let sent = 0;
    socket.on("error", reject);
    socket.on("data", (data) => (answer += data.toString()));
    socket.on("close", () => {
      clearInterval(timer);
      resolve({ answer, seconds: (performance.now() - started) / 1000, sentAll: sent === body.length });
    });
    socket.write(
      `POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n`,
    );
    const timer = setInterval(() => {
      if (sent < body.length && !socket.destroyed) socket.write(body.subarray(sent, ++sent));
    }, gapMs);
  });
}

describe("--timeout", () => {
  it("is read as llama-server's -to / --timeout / LLAMA_ARG_TIMEOUT, 600 s by default", () => {
    expect(parseServeOptions([]).timeoutSeconds).toBe(600);
    expect(parseServeOptions(["-to", "30"]).timeoutSeconds).toBe(30);
    expect(parseServeOptions(["--timeout", "0"]).timeoutSeconds).toBe(0);
    expect(parseServeOptions([], { LLAMA_ARG_TIMEOUT: "45" }).timeoutSeconds).toBe(45);
    expect(() => parseServeOptions(["--timeout", "-1"])).toThrow(/--timeout must be at least 0/);
    expect(() => parseServeOptions(["--timeout", "soon"])).toThrow(/--timeout must be an integer/);
  });

  it("cuts a request body that trickles in slower than the timeout with a 408", async () => {
    // 27 bytes at 200 ms each: over 5 s to send, against a 1 s timeout.
    const { answer, seconds, sentAll } = await trickle(200);
    expect(answer).toMatch(/^HTTP\/1\.1 408 /);
    expect(sentAll).toBe(false);
    expect(seconds).toBeGreaterThanOrEqual(TIMEOUT_SECONDS * 0.9);
    expect(seconds).toBeLessThan(TIMEOUT_SECONDS * 3);
  });

  it("serves a request sent within the timeout, slow or not", async () => {
    const { answer, sentAll } = await trickle(10);
    expect(sentAll).toBe(true);
    expect(answer).toMatch(/^HTTP\/1\.1 200 /);
    const response = await postJson(`http://127.0.0.1:${port}/tokenize`, { content: "a fast client" });
    expect(response.status).toBe(200);
  });
});
