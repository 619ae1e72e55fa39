import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../src/index.js";

// Ending a generation early: an AbortSignal stops it at once (the iteration does not wait for the
// forward pass in flight), leaving out of the for-await loop stops it before the next pass, and in
// both cases the session serves the next request. session.position counts the tokens in the
// context: the prompt and the tokens taken but the last (none of the generation if none was taken).
const MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";
let model: Model;
let prompt: number[];

beforeAll(async () => {
  model = await loadModel(MODEL, { threads: 2, contextSize: 1024 });
  prompt = Array.from(
    model.tokenize(model.applyChatTemplate([{ role: "user", content: "What is a river?" }]), {
      special: true,
      addSpecial: true,
    }),
  );
});

afterAll(() => model?.dispose());

describe("abort", () => {
  it("stops at once when the signal aborts mid-generation, keeps the partial text, and the session goes on", async () => {
    const session = model.createSession();
    const controller = new AbortController();
    const run = session.generate(prompt, { maxTokens: 40, signal: controller.signal });
    const texts: string[] = [];
    for await (const chunk of run) {
      texts.push(chunk.text);
      if (texts.length === 3) controller.abort();
    }
    const result = await run.result;
    expect(texts).toHaveLength(3);
    expect(result.stopReason).toBe("abort");
    expect(result.text).toBe(texts.join(""));
    expect(result.tokens).toHaveLength(3);
    // The prompt and the two tokens fed back: no pass ran after the abort.
    expect(session.position).toBe(prompt.length + 2);

    // The next prompt repeats the context: only the token it had not evaluated yet is evaluated.
    const next = await session.generate([...prompt, ...result.tokens], { maxTokens: 5 }).result;
    expect(next.stopReason).toBe("maxTokens");
    expect(next.tokens).toHaveLength(5);
    expect(next.timings.promptTokens).toBe(1);
    expect(session.position).toBe(prompt.length + 2 + 5);
  });

  it("returns without waiting for the pass in flight, and leaves nothing of an unanswered prompt in the context", async () => {
    // A long prompt: its passes take far longer than the abort takes to land. It shares no prefix
    // with the states the generations above left in the prompt-state cache.
    const long = Array.from({ length: 600 }, (_, i) => prompt[(i + 1) % prompt.length]!);
    const session = model.createSession();
    const controller = new AbortController();
    const run = session.generate(long, { maxTokens: 40, signal: controller.signal });
    const iterator = run[Symbol.asyncIterator]();
    const first = iterator.next();
    // One turn of the event loop: the generation has taken the session and its prompt's first pass runs.
    await new Promise((resolve) => setImmediate(resolve));
    const abortedAt = performance.now();
    controller.abort();
    expect((await first).done).toBe(true);
    const returnedMs = performance.now() - abortedAt;
    expect((await run.result).stopReason).toBe("abort");
    expect((await run.result).tokens).toEqual([]);
    // evaluate() waits for the pass in flight: the abort returned well before that pass ended.
    const logits = await session.evaluate([prompt[0]!]);
    const passMs = performance.now() - abortedAt;
    expect(returnedMs).toBeLessThan(passMs / 2);
    // No token was taken, so the context is as before the generation: one token, as in a new session.
    expect(session.position).toBe(1);
    expect(logits).toEqual(await model.createSession().evaluate([prompt[0]!]));
  });

  it("keeps the prefix the prompt found computed when aborted after it started, before its first token", async () => {
    const session = model.createSession();
    await session.generate(prompt, { maxTokens: 1 }).result;
    expect(session.position).toBe(prompt.length);
    // The same prompt and a long tail: its prefix is reused, then the tail's passes run.
    const long = [...prompt, ...Array.from({ length: 600 }, (_, i) => prompt[(i + 1) % prompt.length]!)];
    const controller = new AbortController();
    const run = session.generate(long, { maxTokens: 40, signal: controller.signal });
    const iterator = run[Symbol.asyncIterator]();
    const first = iterator.next();
    // The scheduler has taken the generation (and made its prompt the context) once it is active.
    while (model.stats().activeSequences === 0) await new Promise((resolve) => setImmediate(resolve));
    controller.abort();
    expect((await first).done).toBe(true);
    expect((await run.result).tokens).toEqual([]);
    // The context keeps the prefix it reused, and nothing the generation evaluated.
    const logits = await session.evaluate([prompt[0]!]);
    expect(session.position).toBe(prompt.length + 1);
    const fresh = model.createSession();
    await fresh.evaluate(prompt);
    expect(logits).toEqual(await fresh.evaluate([prompt[0]!]));
  });

  it("runs no pass at all for a signal aborted before it starts", async () => {
    const session = model.createSession();
    const result = await session.generate(prompt, { signal: AbortSignal.abort() }).result;
    expect(result).toMatchObject({ text: "", tokens: [], stopReason: "abort" });
    expect(session.position).toBe(0);
  });
});

describe("leaving the loop", () => {
  it("stops before the next forward pass and frees the session for the next request", async () => {
    const session = model.createSession();
    const run = session.generate(prompt, { maxTokens: 40 });
    let seen = 0;
    for await (const chunk of run) {
      void chunk;
      if (++seen === 3) break;
    }
    expect(session.position).toBe(prompt.length + 2);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(session.position).toBe(prompt.length + 2);
    const result = await run.result;
    expect(result.stopReason).toBe("abort");
    expect(result.tokens).toHaveLength(3);

    const next = await session.generate([...prompt, ...result.tokens], { maxTokens: 4 }).result;
    expect(next.tokens).toHaveLength(4);
    expect(next.timings.promptTokens).toBe(1);
    expect(session.position).toBe(prompt.length + 2 + 4);
  });

  it("refuses the session's other calls while a generation runs, and takes them after its last pass", async () => {
    const session = model.createSession();
    const run = session.generate(prompt, { maxTokens: 6 });
    const iterator = run[Symbol.asyncIterator]();
    await iterator.next();
    expect(() => session.evaluate([prompt[0]!])).toThrow(expect.objectContaining({ code: "SESSION_BUSY" }));
    const chunks = [];
    for (let step = await iterator.next(); !step.done; step = await iterator.next()) chunks.push(step.value);
    const result = await run.result;
    const generatedPasses = result.tokens.length - (result.stopReason === "maxTokens" ? 1 : 0);
    await session.evaluate([prompt[0]!]);
    expect(session.position).toBe(prompt.length + generatedPasses + 1);
  });
});
