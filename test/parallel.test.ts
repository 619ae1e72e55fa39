import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError, loadModel, type GenerateOptions, type Model, type ModelStats } from "../src/index.js";

// Parallel streams on the default model: sessions generating at once share forward passes
// (continuous batching on the model's scheduler thread), each gives the same greedy tokens as
// when it runs alone, more sessions than `parallel` wait in FIFO order, and aborting one stream
// leaves the others as they were. model.stats() is the evidence that passes were shared.
const MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";
const QUESTIONS = ["What is a river?", "What does happy mean?", "Tell me a fortune.", "What is a mountain?"];
let model: Model;
let prompts: number[][];

beforeAll(async () => {
  model = await loadModel(MODEL, { threads: 2, contextSize: 512 });
  prompts = QUESTIONS.map((content) =>
    Array.from(
      model.tokenize(model.applyChatTemplate([{ role: "user", content }]), { special: true, addSpecial: true }),
    ),
  );
});

afterAll(() => model?.dispose());

/** Each prompt's greedy tokens, generated alone: one session after another. */
async function alone(m: Model, which: number[], options: GenerateOptions): Promise<number[][]> {
  const out: number[][] = [];
  for (const i of which) out.push((await m.createSession().generate(prompts[i]!, options).result).tokens);
  return out;
}

/** What happened between two snapshots. */
function delta(before: ModelStats, after: ModelStats): { passes: number; decodeTokens: number; promptTokens: number } {
  return {
    passes: after.passes - before.passes,
    decodeTokens: after.decodeTokens - before.decodeTokens,
    promptTokens: after.promptTokens - before.promptTokens,
  };
}

describe("parallel streams", () => {
  it("gives two sessions run together the tokens each gives alone, in shared passes", async () => {
    const options = { maxTokens: 24 };
    const expected = await alone(model, [0, 1], options);
    expect(expected[0]!.length).toBeGreaterThan(10);
    expect(expected[1]).not.toEqual(expected[0]);

    const before = model.stats();
    const together = await Promise.all([0, 1].map((i) => model.createSession().generate(prompts[i]!, options).result));
    const after = model.stats();
    expect(together.map((r) => r.tokens)).toEqual(expected);

    // Run alone, each fed-back token is a pass of its own; together, both streams' tokens share
    // passes: far fewer passes than rows.
    const d = delta(before, after);
    const decodeRows = together.reduce((n, r) => n + r.timings.decodeTokens, 0);
    expect(d.decodeTokens).toBe(decodeRows);
    expect(d.passes).toBeLessThan(decodeRows * 0.75);
    expect(after.meanSequencesPerPass).toBeGreaterThan(before.meanSequencesPerPass);
    expect(before.widestPass).toBe(1);
    expect(after.widestPass).toBe(2);
    expect(after.decodeTokensPerSecond).toBeGreaterThan(0);
    expect(after.promptTokensPerSecond).toBeGreaterThan(0);
    expect(after).toMatchObject({ activeSequences: 0, waitingSequences: 0 });
  });

  it("runs at most `parallel` sequences together and starts the others in the order they came", async () => {
    // Long enough that this thread, which a loaded machine may keep off its core for a few steps, still
    // sees two sessions waiting and session 1 starting before session 0 ends.
    const options = { maxTokens: 48 };
    const expected = await alone(model, [0, 1, 2, 3], options);
    const events: string[] = [];
    let seenWaiting = 0;
    const consume = async (i: number, maxTokens: number): Promise<number[]> => {
      const tokens: number[] = [];
      for await (const chunk of model.createSession().generate(prompts[i]!, { maxTokens })) {
        if (tokens.length === 0) events.push(`start ${i}`);
        tokens.push(...chunk.tokens);
        seenWaiting = Math.max(seenWaiting, model.stats().waitingSequences);
        expect(model.stats().activeSequences).toBeLessThanOrEqual(2);
      }
      events.push(`end ${i}`);
      return tokens;
    };
    const before = model.stats();
    // Session 0 ends first (fewer tokens); 2 then 3 wait for places, in that order.
    const running = Promise.all([consume(0, 16), consume(1, 48), consume(2, 48), consume(3, 48)]);
    // All four are submitted once the microtasks have run; at most two run, so two wait. (Seen from
    // the chunks alone, a JavaScript thread that a loaded machine keeps off its core for session
    // 0's few steps may see session 2 admitted already.)
    await new Promise((resolve) => setImmediate(resolve));
    seenWaiting = Math.max(seenWaiting, model.stats().waitingSequences);
    const results = await running;
    const after = model.stats();
    expect(results[0]).toEqual(expected[0]!.slice(0, 16));
    expect(results.slice(1)).toEqual(expected.slice(1));
    // Requests join at step boundaries: all but the first may wait through the first pass.
    expect(seenWaiting).toBeGreaterThanOrEqual(2);
    // Sessions 0 and 1 start together and two sessions share nearly every pass (0 and 1, then 1 and
    // 2, then 2 and 3): 160 generated tokens in about 97 passes. Counted by the engine, not from the
    // chunks' order here: a loaded machine may hand this thread session 0's whole output in one chunk
    // before session 1's first.
    const passes = after.passes - before.passes;
    const sequenceRows = after.meanSequencesPerPass * after.passes - before.meanSequencesPerPass * before.passes;
    expect(sequenceRows / passes).toBeGreaterThan(1.4);
    const at = (event: string) => events.indexOf(event);
    expect(at("start 0")).toBeLessThan(at("end 0"));
    expect(at("start 2")).toBeGreaterThan(at("end 0"));
    expect(at("start 3")).toBeGreaterThan(at("start 2"));
    expect(at("start 3")).toBeGreaterThan(Math.min(at("end 1"), at("end 2")));
  });

  it("aborts one stream within a step while the other goes on unchanged, and the aborted session serves again", async () => {
    const options = { maxTokens: 20 };
    const [expected] = await alone(model, [1], options);
    const aborted = model.createSession();
    const controller = new AbortController();
    const other = model.createSession().generate(prompts[1]!, options).result;
    let returnedMs = 0;
    const taken: number[] = [];
    const run = aborted.generate(prompts[0]!, { maxTokens: 40, signal: controller.signal });
    for await (const chunk of run) {
      taken.push(...chunk.tokens);
      if (taken.length === 3) {
        const at = performance.now();
        controller.abort();
        returnedMs = -at;
      }
    }
    returnedMs += performance.now();
    expect((await run.result).stopReason).toBe("abort");
    expect(taken).toHaveLength(3);
    // Within one step: far less than a pass of the default model's prompt would take.
    expect(returnedMs).toBeLessThan(50);
    expect((await other).tokens).toEqual(expected);
    // The context keeps the prompt and the tokens taken but the last; the next request, the same
    // prompt and the tokens taken, goes on from there: only the last token taken is evaluated.
    expect(aborted.position).toBe(prompts[0]!.length + 2);
    const next = await aborted.generate([...prompts[0]!, ...taken], { maxTokens: 5 }).result;
    expect(next.timings).toMatchObject({ promptTokens: 1, cachedPromptTokens: prompts[0]!.length + 2 });
    const straight = await model.createSession().generate(prompts[0]!, { maxTokens: 8 }).result;
    expect([...taken, ...next.tokens]).toEqual(straight.tokens);
  });

  it("lets an aborted session reset and evaluate at once, while its dropped pass may still run", async () => {
    const long = Array.from({ length: 480 }, (_, i) => prompts[0]![i % prompts[0]!.length]!);
    const session = model.createSession();
    const controller = new AbortController();
    const iterator = session.generate(long, { signal: controller.signal })[Symbol.asyncIterator]();
    const first = iterator.next();
    await new Promise((resolve) => setImmediate(resolve));
    controller.abort();
    expect((await first).done).toBe(true);
    await session.reset();
    expect(session.position).toBe(0);
    const token = prompts[0]![0]!;
    expect(await session.evaluate([token])).toEqual(await model.createSession().evaluate([token]));
  });

  it("keeps the event loop turning while a long prompt runs", async () => {
    const long = Array.from({ length: 480 }, (_, i) => prompts[0]![i % prompts[0]!.length]!);
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    const started = performance.now();
    await model.createSession().generate(long, { maxTokens: 2 }).result;
    const ms = performance.now() - started;
    clearInterval(timer);
    expect(ticks).toBeGreaterThan(Math.min(10, ms / 4));
  });

  it("refuses a parallel that is not a positive integer", async () => {
    for (const parallel of [0, 1.5, -2]) {
      const error = await loadModel(MODEL, { parallel }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(BloomeryError);
      expect((error as BloomeryError).code).toBe("INVALID_ARGUMENT");
      expect((error as BloomeryError).message).toContain("parallel");
    }
  });
});
