import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError, loadModel, type Model, type Session } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// Session state: fork, save/restore in memory and through a file (refused for another model),
// generate()'s prompt replacing the context, and the model's prompt-state cache (cacheRam).
const dir = mkdtempSync(join(tmpdir(), "bloomery-state-"));
const modelPath = join(dir, "tiny-qwen3moe.gguf");
const reseededPath = join(dir, "tiny-qwen3moe-seed2.gguf");
const densePath = join(dir, "tiny-qwen3.gguf");
const models: Model[] = [];

beforeAll(async () => {
  await writeSyntheticModel(modelPath, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
  await writeSyntheticModel(reseededPath, { preset: "tiny-qwen3moe", weightType: "Q8_0", seed: 2 });
  await writeSyntheticModel(densePath, { preset: "tiny-qwen3", weightType: "Q8_0" });
});

afterAll(() => {
  for (const model of models) model.dispose();
  rmSync(dir, { recursive: true, force: true });
});

async function open(path: string, options: Parameters<typeof loadModel>[1] = {}): Promise<Model> {
  const model = await loadModel(path, { threads: 2, contextSize: 1100, ...options });
  models.push(model);
  return model;
}

/** `n` tokens of the tiny vocabulary (393 tokens), the same for the same seed. */
function tokens(n: number, seed: number): number[] {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return 10 + (x % 370);
  });
}

async function refusal(promise: Promise<unknown>): Promise<BloomeryError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(BloomeryError);
  return error as BloomeryError;
}

async function greedy(session: Session, prompt: number[], options = {}) {
  return session.generate(prompt, { maxTokens: 8, ...options }).result;
}

describe("fork", () => {
  it("continues exactly as the original, independently of it", async () => {
    const model = await open(modelPath, { cacheRam: 0 });
    const original = model.createSession();
    const prompt = tokens(40, 1);
    await original.evaluate(prompt);
    const fork = await original.fork();
    expect(fork.position).toBe(prompt.length);

    const next = tokens(3, 2);
    const a = await original.evaluate(next, { logits: "all" });
    const b = await fork.evaluate(next, { logits: "all" });
    expect(b).toEqual(a);

    // The original moves on; the fork's context is its own.
    await original.reset();
    const context = [...prompt, ...next];
    const fromFork = await greedy(fork, context);
    expect(fromFork.timings.cachedPromptTokens).toBe(context.length - 1);
    const fresh = await greedy(model.createSession(), context);
    expect(fromFork.tokens).toEqual(fresh.tokens);
  });
});

describe("save and restore", () => {
  it("round-trips a state in memory", async () => {
    const model = await open(modelPath, { cacheRam: 0 });
    const session = model.createSession();
    const prompt = tokens(30, 3);
    await session.evaluate(prompt);
    const state = await session.save();
    expect(state.tokens).toEqual(prompt);
    // Per token, a key and a value row (f16) in every layer.
    const { layers, kvHeads, headDim } = model.info;
    expect(state.bytes).toBeGreaterThanOrEqual(prompt.length * layers * 2 * kvHeads * headDim * 2);

    const probe = tokens(2, 4);
    const expected = await session.evaluate(probe, { logits: "all" });

    const other = model.createSession();
    await other.restore(state);
    expect(other.position).toBe(prompt.length);
    expect(await other.evaluate(probe, { logits: "all" })).toEqual(expected);

    // Restoring rewinds a session that went on past the state.
    await session.evaluate(tokens(5, 5));
    await session.restore(state);
    expect(session.position).toBe(prompt.length);
    expect(await session.evaluate(probe, { logits: "all" })).toEqual(expected);
  });

  it("round-trips a state through a file, into another load of the same model", async () => {
    const model = await open(modelPath, { cacheRam: 0 });
    const session = model.createSession();
    const prompt = tokens(25, 6);
    await session.evaluate(prompt);
    const path = join(dir, "state.bin");
    await session.save(path);
    const probe = tokens(2, 7);
    const expected = await session.evaluate(probe, { logits: "all" });

    const again = await open(modelPath, { cacheRam: 0 });
    const restored = again.createSession();
    await restored.restore(path);
    expect(restored.position).toBe(prompt.length);
    expect(await restored.evaluate(probe, { logits: "all" })).toEqual(expected);
  });

  it("refuses a state of another model, a file that is not a state, and one too long for the context", async () => {
    const model = await open(modelPath, { cacheRam: 0 });
    const session = model.createSession();
    await session.evaluate(tokens(20, 8));
    const path = join(dir, "state-refusals.bin");
    await session.save(path);
    const state = await session.save();

    for (const other of [await open(densePath, { cacheRam: 0 }), await open(reseededPath, { cacheRam: 0 })]) {
      const target = other.createSession();
      expect((await refusal(target.restore(path))).code).toBe("STATE_MODEL_MISMATCH");
      expect((await refusal(target.restore(state))).code).toBe("STATE_MODEL_MISMATCH");
      expect(target.position).toBe(0);
    }

    const small = await open(modelPath, { cacheRam: 0, contextSize: 16 });
    expect((await refusal(small.createSession().restore(path))).code).toBe("CONTEXT_TOO_LONG");

    const garbage = join(dir, "not-a-state.bin");
    writeFileSync(garbage, "this is not a session state, though it is long enough to hold a header");
    expect((await refusal(session.restore(garbage))).code).toBe("STATE_BAD_FILE");
    expect((await refusal(session.restore(join(dir, "missing.bin")))).code).toBe("FILE_NOT_FOUND");
    expect((await refusal(session.save(join(dir, "no-such-dir", "state.bin")))).code).toBe("FILE_WRITE");
    expect(session.position).toBe(20);
  });
});

describe("generate and the prompt-state cache", () => {
  it("replaces the session's context by the prompt", async () => {
    const model = await open(modelPath, { cacheRam: 0 });
    const session = model.createSession();
    await greedy(session, tokens(30, 9));
    const prompt = tokens(12, 10);
    const run = await greedy(session, prompt);
    expect(run.timings.promptTokens).toBe(prompt.length);
    expect(session.position).toBe(prompt.length + run.tokens.length - 1);
    expect(run.tokens).toEqual((await greedy(model.createSession(), prompt)).tokens);
  });

  it("evaluates only the suffix after a 1,000-token prefix another session left, with the same output", async () => {
    const cached = await open(modelPath);
    const uncached = await open(modelPath, { cacheRam: 0 });
    // Greedy, then with a penalty that counts every prompt token (the reused ones too).
    for (const [i, options] of [{}, { repeatPenalty: 1.5, repeatLastN: -1 }].entries()) {
      const shared = tokens(1000, 11 + 3 * i);
      const first = [...shared, ...tokens(10, 12 + 3 * i)];
      const second = [...shared, ...tokens(10, 13 + 3 * i)];
      expect(first[1000]).not.toBe(second[1000]);
      const writer = cached.createSession();
      await greedy(writer, first, options);
      writer.dispose();

      const run = await greedy(cached.createSession(), second, options);
      expect(run.timings).toMatchObject({ promptTokens: 10, cachedPromptTokens: 1000, promptCacheHit: true });
      const reference = await greedy(uncached.createSession(), second, options);
      expect(reference.timings).toMatchObject({ promptTokens: 1010, cachedPromptTokens: 0, promptCacheHit: false });
      expect(run.tokens).toEqual(reference.tokens);
      expect(run.tokens.length).toBeGreaterThan(0);
    }
  });

  it("evaluates the whole prompt with reusePrefix: false, its own context or the cache notwithstanding", async () => {
    const model = await open(modelPath);
    const shared = tokens(300, 40);
    const first = [...shared, ...tokens(10, 41)];
    const second = [...shared, ...tokens(10, 42)];
    const holder = model.createSession();
    await greedy(holder, first);
    const whole = { reusePrefix: false };
    const own = await greedy(holder, second, whole);
    expect(own.timings).toMatchObject({ promptTokens: 310, cachedPromptTokens: 0, promptCacheHit: false });
    const fresh = await greedy(model.createSession(), second, whole);
    expect(fresh.timings).toMatchObject({ promptTokens: 310, cachedPromptTokens: 0, promptCacheHit: false });
    expect(fresh.tokens).toEqual(own.tokens);
    // The same prompt reused: from the cache in a new session, from its context in the holder.
    const cached = await greedy(model.createSession(), second);
    expect(cached.timings).toMatchObject({ cachedPromptTokens: 309, promptCacheHit: true });
    expect(() => holder.generate(second, { reusePrefix: 0 as unknown as boolean })).toThrow(
      expect.objectContaining({ code: "INVALID_ARGUMENT", message: "reusePrefix must be a boolean" }),
    );
  });

  it("evicts the least recently used state to stay within cacheRam", async () => {
    const a = tokens(200, 14);
    const b = tokens(200, 15);
    const probe = await open(modelPath, { cacheRam: 0 });
    const sizer = probe.createSession();
    await sizer.evaluate(a);
    const bytes = (await sizer.save()).bytes;

    // Stores the state of `prompt` (reset() stores before it forgets), then reports what a new
    // session with prompt + one token reuses.
    const store = async (model: Model, prompt: number[]) => {
      const session = model.createSession();
      await session.evaluate(prompt);
      await session.reset();
    };
    const reuse = async (model: Model, prompt: number[]) =>
      (await model.createSession().generate([...prompt, 7], { maxTokens: 1 }).result).timings;

    const roomForOne = await open(modelPath, { cacheRam: Math.floor(bytes * 1.5) });
    await store(roomForOne, a);
    await store(roomForOne, b);
    expect(await reuse(roomForOne, b)).toMatchObject({ cachedPromptTokens: 200, promptCacheHit: true });
    expect(await reuse(roomForOne, a)).toMatchObject({ cachedPromptTokens: 0, promptCacheHit: false });

    const roomForThree = await open(modelPath, { cacheRam: `${Math.ceil(bytes * 3.5)}B` });
    await store(roomForThree, a);
    await store(roomForThree, b);
    expect(await reuse(roomForThree, b)).toMatchObject({ cachedPromptTokens: 200, promptCacheHit: true });
    expect(await reuse(roomForThree, a)).toMatchObject({ cachedPromptTokens: 200, promptCacheHit: true });

    const off = await open(modelPath, { cacheRam: 0 });
    await store(off, a);
    expect(await reuse(off, a)).toMatchObject({ cachedPromptTokens: 0, promptCacheHit: false });
  });

  it("refuses a cacheRam that is not a size", async () => {
    for (const cacheRam of [-1, "lots", 1.5]) {
      const error = await refusal(loadModel(modelPath, { cacheRam }));
      expect(error.code).toBe("INVALID_ARGUMENT");
      expect(error.message).toContain("cacheRam");
    }
  });
});

describe("latent attention's cache (deepseek2: keys only, the values inside them)", () => {
  const latentPath = join(dir, "tiny-deepseek2.gguf");
  beforeAll(async () => {
    await writeSyntheticModel(latentPath, { preset: "tiny-deepseek2", weightType: "Q8_0" });
  });

  it("forks, saves to a file and restores to the same logits, and a prompt reuses a cached prefix", async () => {
    const model = await open(latentPath, { cacheRam: 64 * 2 ** 20 });
    const prompt = tokens(60, 7);
    const original = model.createSession();
    const expected = await original.evaluate([...prompt, 11]);
    const base = model.createSession();
    await base.evaluate(prompt);
    const fork = await base.fork();
    expect(await fork.evaluate([11])).toEqual(expected);
    const file = join(dir, "latent.state");
    await base.save(file);
    const restored = model.createSession();
    await restored.restore(file);
    expect(await restored.evaluate([11])).toEqual(expected);
    // The prompt-state cache: a later prompt sharing the first 60 tokens evaluates only the rest.
    const first = model.createSession();
    await first.generate(prompt, { maxTokens: 1 }).result;
    const second = model.createSession();
    const run = await second.generate([...prompt.slice(0, 50), ...tokens(10, 8)], { maxTokens: 1 }).result;
    expect(run.timings.cachedPromptTokens).toBeGreaterThanOrEqual(49);
    const cold = await open(latentPath, { cacheRam: 0 });
    const fresh = await cold.createSession().generate([...prompt.slice(0, 50), ...tokens(10, 8)], { maxTokens: 1 })
      .result;
    expect(run.tokens).toEqual(fresh.tokens);
    // A state of another shape (a GQA model's) is refused by name.
    const gqa = await open(modelPath);
    expect((await refusal(gqa.createSession().restore(file))).code).toBe("STATE_MODEL_MISMATCH");
  });
});

// DeepSeek sparse attention (deepseek32): each position's key row holds the indexer's key after
// MLA's latent, so a state, a fork and a cached prefix carry what later queries select by.
describe("sparse attention's cache (deepseek32: the indexer's keys beside the latent)", () => {
  const sparsePath = join(dir, "tiny-deepseek32.gguf");
  beforeAll(async () => {
    await writeSyntheticModel(sparsePath, { preset: "tiny-deepseek32", weightType: "Q8_0" });
  });

  it("forks, saves to a file and restores past the indexer's top-k to the same logits", async () => {
    const model = await open(sparsePath, { cacheRam: 64 * 2 ** 20 });
    const prompt = tokens(90, 9); // the indexer picks 16 of them
    const all = await model.createSession().evaluate([...prompt, 11, 12], { logits: "all" });
    const expected = all.subarray(90 * model.info.vocabSize);
    const base = model.createSession();
    await base.evaluate(prompt);
    const state = await base.save();
    // 3 layers of 90 positions, each the latent (128), rotary key (32) and indexer key (64) in f16.
    expect(state.bytes).toBeGreaterThanOrEqual(3 * 90 * (128 + 32 + 64) * 2);
    const fork = await base.fork();
    expect(await fork.evaluate([11, 12], { logits: "all" })).toEqual(expected);
    const file = join(dir, "sparse.state");
    await base.save(file);
    const restored = model.createSession();
    await restored.restore(file);
    expect(await restored.evaluate([11, 12], { logits: "all" })).toEqual(expected);
    // The prompt-state cache: a prompt sharing the first 80 tokens evaluates only the rest.
    await model.createSession().generate(prompt, { maxTokens: 1 }).result;
    const next = [...prompt.slice(0, 80), ...tokens(12, 10)];
    const run = await model.createSession().generate(next, { maxTokens: 1 }).result;
    expect(run.timings.cachedPromptTokens).toBeGreaterThanOrEqual(79);
    const cold = await open(sparsePath, { cacheRam: 0 });
    expect(run.tokens).toEqual((await cold.createSession().generate(next, { maxTokens: 1 }).result).tokens);
  });

  it("gives each of several sessions in one pass its own selection", async () => {
    const model = await open(sparsePath, { cacheRam: 0, parallel: 3 });
    const prompts = [tokens(70, 4), tokens(45, 5), tokens(90, 6)];
    const alone: Float32Array[] = [];
    for (const prompt of prompts) alone.push(await model.createSession().evaluate(prompt));
    const together = await Promise.all(prompts.map((prompt) => model.createSession().evaluate(prompt)));
    expect(together).toEqual(alone);
  });

  it("refuses a context shift by name (its cached indexer keys are not shifted)", async () => {
    const model = await open(sparsePath, { contextSize: 64 });
    const error = await refusal(
      model.createSession().generate(tokens(60, 3), { maxTokens: 10, contextShift: true }).result,
    );
    expect(error.code).toBe("UNSUPPORTED_MODEL");
    expect(error.message).toContain("lightning indexer");
  });
});

// gpt-oss's sliding-window layers keep only their last positions (window 32: 352 cells here). A
// state holds what they held; a prefix is reused only where its window is still held (from the
// state's first held position plus the window on), and evaluated again otherwise.
describe("sliding-window layers (gpt-oss)", () => {
  const windowedPath = join(dir, "tiny-gpt-oss.gguf");
  beforeAll(async () => {
    await writeSyntheticModel(windowedPath, { preset: "tiny-gpt-oss", weightType: "Q8_0" });
  });

  it("forks, saves to a file and restores past the window to the logits of one long evaluation", async () => {
    const model = await open(windowedPath, { cacheRam: 0 });
    const vocab = model.info.vocabSize;
    const prompt = tokens(700, 21);
    const all = await model.createSession().evaluate([...prompt, 11, 12], { logits: "all" });
    const expected = all.subarray(700 * vocab);
    const base = model.createSession();
    await base.evaluate(prompt);
    const state = await base.save();
    // 4 layers of 700 positions of 512 bytes, but the 2 windowed ones hold at most 352 positions.
    expect(state.bytes).toBeLessThan((2 * 700 + 2 * 352) * 512 + 700 * 4 + 4096);
    const fork = await base.fork();
    expect(await fork.evaluate([11, 12], { logits: "all" })).toEqual(expected);
    const file = join(dir, "windowed.state");
    await base.save(file);
    const restored = model.createSession();
    await restored.restore(file);
    expect(await restored.evaluate([11, 12], { logits: "all" })).toEqual(expected);
    const fromMemory = model.createSession();
    await fromMemory.restore(state);
    expect(await fromMemory.evaluate([11, 12], { logits: "all" })).toEqual(expected);
  });

  it("reuses a prefix whose window is held and evaluates one whose window was dropped again", async () => {
    const cold = await open(windowedPath, { cacheRam: 0 });
    const prompt = tokens(700, 22);
    for (const [shared, reused] of [
      [690, 690],
      [400, 0],
    ] as const) {
      const next = [...prompt.slice(0, shared), ...tokens(20, 23)];
      const reference = (await greedy(cold.createSession(), next)).tokens;
      // From the prompt-state cache, which another session's state entered.
      const cached = await open(windowedPath, { cacheRam: 64 * 2 ** 20 });
      await greedy(cached.createSession(), prompt);
      const fromCache = await greedy(cached.createSession(), next);
      expect(fromCache.timings.cachedPromptTokens, `${shared} shared, from the cache`).toBe(reused);
      expect(fromCache.tokens).toEqual(reference);
      // From the session's own context.
      const own = (await open(windowedPath, { cacheRam: 0 })).createSession();
      await greedy(own, prompt);
      const fromOwn = await greedy(own, next);
      expect(fromOwn.timings.cachedPromptTokens, `${shared} shared, its own`).toBe(reused);
      expect(fromOwn.tokens).toEqual(reference);
    }
  });
});
