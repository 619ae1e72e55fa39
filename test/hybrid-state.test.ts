import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// A session of a model with recurrent layers carries their states with its KV cache: a fork, a
// saved state (memory and file), a cached prefix and a checkpoint of the session's own (kept with
// the prompt-state cache off, and by evaluations too) continue exactly as one evaluation of the
// whole sequence, and a context cut back by a stop string, or by drafts a pass rejected, continues
// from the state after its last kept token. Two families: tiny-qwen35moe (Gated DeltaNet's convolution and recurrent states
// beside attention) and tiny-deepseek4 (DeepSeek-V4: each compressor's rows of the blocks it has
// not compressed yet, beside compressed rows and windowed attention of 32 positions; the session's
// own older checkpoints outlive the windows they need, so only the cache's copies restore them).
const FAMILIES = [
  { preset: "tiny-qwen35moe", windowed: false },
  { preset: "tiny-deepseek4", windowed: true },
];
const dir = mkdtempSync(join(tmpdir(), "bloomery-hybrid-state-"));
const models: Model[] = [];

beforeAll(async () => {
  for (const { preset } of FAMILIES) {
    await writeSyntheticModel(join(dir, `${preset}.gguf`), { preset, weightType: "F32" });
  }
});

afterAll(() => {
  for (const m of models) m.dispose();
  rmSync(dir, { recursive: true, force: true });
});

async function open(preset: string, options: Parameters<typeof loadModel>[1] = {}): Promise<Model> {
  const model = await loadModel(join(dir, `${preset}.gguf`), { gpu: false, threads: 2, contextSize: 1100, ...options });
  models.push(model);
  return model;
}

/** `n` tokens of the tiny vocabulary, the same for the same seed. */
function tokens(n: number, seed: number): number[] {
  let x = seed * 2654435761;
  return Array.from({ length: n }, () => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return 10 + (x % 370);
  });
}

/** The logits of the last `rows` positions of one evaluation of `sequence` by a fresh session. */
async function wholeEvaluation(model: Model, sequence: number[], rows: number): Promise<Float32Array> {
  const session = model.createSession();
  const all = await session.evaluate(sequence, { logits: "all" });
  session.dispose();
  return all.slice(all.length - (rows * all.length) / sequence.length);
}

describe.each(FAMILIES)("a session with recurrent layers ($preset)", ({ preset, windowed }) => {
  // What a session's own checkpoint at `at` restores: itself, or (where its window is gone) nothing.
  const own = (at: number) => (windowed ? 0 : at);
  it("forks, saves and restores (memory and file) mid-sequence to the logits of one whole evaluation", async () => {
    const model = await open(preset, { cacheRam: 0 });
    const prompt = tokens(300, 1); // two passes of the default 256-row step
    const next = tokens(3, 2);
    const expected = await wholeEvaluation(model, [...prompt, ...next], next.length);

    const original = model.createSession();
    await original.evaluate(prompt);
    const fork = await original.fork();
    const saved = await original.save();
    const file = join(dir, "mid.state");
    await original.save(file);

    expect(await original.evaluate(next, { logits: "all" })).toEqual(expected);
    expect(await fork.evaluate(next, { logits: "all" })).toEqual(expected);
    const fromMemory = model.createSession();
    await fromMemory.restore(saved);
    expect(await fromMemory.evaluate(next, { logits: "all" })).toEqual(expected);
    const fromFile = model.createSession();
    await fromFile.restore(file);
    expect(await fromFile.evaluate(next, { logits: "all" })).toEqual(expected);
  });

  it("reuses a cached state whose tokens begin the prompt, and evaluates one that diverges inside it again", async () => {
    const cached = await open(preset, { cacheRam: "64MiB" });
    const plain = await open(preset, { cacheRam: 0 });
    const first = cached.createSession();
    await first.generate(tokens(280, 3), { maxTokens: 4 }).result;
    const held = (await first.save()).tokens;

    const extended = [...held, ...tokens(20, 4)];
    const reuse = await cached.createSession().generate(extended, { maxTokens: 6 }).result;
    expect(reuse.timings.cachedPromptTokens).toBe(held.length);
    const fresh = await plain.createSession().generate(extended, { maxTokens: 6 }).result;
    expect(reuse.tokens).toEqual(fresh.tokens);

    // Diverging inside the cached state: its recurrent state is no prefix, so all is evaluated.
    const diverging = [...held.slice(0, 200), ...tokens(30, 5)];
    const again = await cached.createSession().generate(diverging, { maxTokens: 6 }).result;
    expect(again.timings.cachedPromptTokens).toBe(0);
    expect(again.tokens).toEqual((await plain.createSession().generate(diverging, { maxTokens: 6 }).result).tokens);
  });

  it("restores the nearest checkpoint inside a shared prefix that ends before, on or after one", async () => {
    // A prompt of 1,200 tokens leaves checkpoints at 176 (1,200 - 1,024), 688 (1,200 - 512) and 1,200.
    const cached = await open(preset, { cacheRam: "256MiB", contextSize: 1300 });
    const plain = await open(preset, { cacheRam: 0, contextSize: 1300 });
    const prompt = tokens(1200, 8);
    // The generation goes on past its prompt: the cache takes the checkpoints' states, not the last.
    await cached.createSession().generate(prompt, { maxTokens: 3 }).result;
    const after = tokens(2, 30);
    for (const [shared, restored] of [
      [687, 176],
      [688, 688],
      [700, 688],
    ] as const) {
      const next = [...prompt.slice(0, shared), ...tokens(40, 9 + shared)];
      const reusing = cached.createSession();
      const reuse = await reusing.generate(next, { maxTokens: 4 }).result;
      expect(reuse.timings.cachedPromptTokens, `a prefix of ${shared}`).toBe(restored);
      const evaluating = plain.createSession();
      const fresh = await evaluating.generate(next, { maxTokens: 4 }).result;
      expect(reuse.tokens, `a prefix of ${shared}`).toEqual(fresh.tokens);
      expect(await reusing.evaluate(after, { logits: "all" }), `a prefix of ${shared}`).toEqual(
        await evaluating.evaluate(after, { logits: "all" }),
      );
    }
  });

  it("restores its own nearest checkpoint, with the prompt-state cache off, for a prompt that diverges inside its context", async () => {
    // A prompt of 1,200 tokens leaves checkpoints at 176, 688 and 1,200; none is inside 100.
    const model = await open(preset, { cacheRam: 0, contextSize: 1300 });
    const prompt = tokens(1200, 8);
    for (const [shared, restored] of [
      [687, own(176)],
      [688, own(688)],
      [700, own(688)],
      [100, 0],
    ] as const) {
      const session = model.createSession();
      await session.generate(prompt, { maxTokens: 1 }).result;
      const next = [...prompt.slice(0, shared), ...tokens(40, 9 + shared)];
      const reuse = await session.generate(next, { maxTokens: 4 }).result;
      expect(reuse.timings.cachedPromptTokens, `a prefix of ${shared}`).toBe(restored);
      const fresh = model.createSession();
      expect(reuse.tokens, `a prefix of ${shared}`).toEqual(
        (await fresh.generate(next, { maxTokens: 4 }).result).tokens,
      );
      const after = tokens(2, 30);
      expect(await session.evaluate(after, { logits: "all" }), `a prefix of ${shared}`).toEqual(
        await fresh.evaluate(after, { logits: "all" }),
      );
      session.dispose();
      fresh.dispose();
    }
  });

  it("restores its own checkpoint whose states the prompt-state cache took when the request ended", async () => {
    // The cache's state and the session's checkpoint at 688 share one copy of the recurrent states
    // (without windowed layers; with them the session's own checkpoint is gone and the cache's serves).
    const cached = await open(preset, { cacheRam: "256MiB", contextSize: 1300 });
    const plain = await open(preset, { cacheRam: 0, contextSize: 1300 });
    const prompt = tokens(1200, 60);
    const next = [...prompt.slice(0, 700), ...tokens(40, 61)];
    const after = tokens(2, 62);
    const session = cached.createSession();
    await session.generate(prompt, { maxTokens: 2 }).result;
    const reuse = await session.generate(next, { maxTokens: 4 }).result;
    expect(reuse.timings.cachedPromptTokens).toBe(688);
    const fresh = plain.createSession();
    expect(reuse.tokens).toEqual((await fresh.generate(next, { maxTokens: 4 }).result).tokens);
    expect(await session.evaluate(after, { logits: "all" })).toEqual(await fresh.evaluate(after, { logits: "all" }));
    // Another session restores the same state from the cache.
    const other = cached.createSession();
    const again = await other.generate(next, { maxTokens: 4 }).result;
    expect(again.timings.cachedPromptTokens).toBe(688);
    expect(again.tokens).toEqual(reuse.tokens);
  });

  it("takes a prompt's checkpoints inside its passes", async () => {
    const model = await open(preset, { cacheRam: "256MiB", contextSize: 1300 });
    const before = model.stats().passes;
    await model.createSession().generate(tokens(1200, 50), { maxTokens: 1 }).result;
    // Checkpoints at 176, 688, the tail 1,196 and 1,200: five passes of the default 256-row step
    // (six where they ended on them: [0, 176), [176, 432) ... [944, 1,196), [1,196, 1,200)).
    expect(model.stats().passes - before).toBe(5);
  });

  it("caches the checkpoints inside passes longer than the default step", async () => {
    // 300 parallel sessions make a step of 300 rows. A windowed layer keeps the window before the
    // start of a part's last 256-row store only, so a part with a checkpoint inside is cut to 256
    // rows ([0, 256) with 176, [556, 812) with 688); else the window before 176 would be gone by the
    // part's end at 300 and its state not cached.
    const cached = await open(preset, { cacheRam: "256MiB", contextSize: 1300, parallel: 300 });
    const plain = await open(preset, { cacheRam: 0, contextSize: 1300 });
    const prompt = tokens(1200, 70);
    await cached.createSession().generate(prompt, { maxTokens: 2 }).result;
    for (const [shared, restored] of [
      [687, 176],
      [700, 688],
    ] as const) {
      const next = [...prompt.slice(0, shared), ...tokens(40, 71 + shared)];
      const reuse = await cached.createSession().generate(next, { maxTokens: 4 }).result;
      expect(reuse.timings.cachedPromptTokens, `a prefix of ${shared}`).toBe(restored);
      expect(reuse.tokens, `a prefix of ${shared}`).toEqual(
        (await plain.createSession().generate(next, { maxTokens: 4 }).result).tokens,
      );
    }
  });

  it("evaluates only the last tokens of a prompt it ran before (a regenerated answer)", async () => {
    const model = await open(preset, { cacheRam: 0 });
    const prompt = tokens(300, 40);
    const after = tokens(2, 41);
    const fresh = model.createSession();
    const expected = (await fresh.generate(prompt, { maxTokens: 8 }).result).tokens;
    const expectedAfter = await fresh.evaluate(after, { logits: "all" });
    const session = model.createSession();
    await session.generate(prompt, { maxTokens: 8 }).result;
    const again = await session.generate(prompt, { maxTokens: 8 }).result;
    // The prompt's tail checkpoint, 4 tokens before its end: only those are evaluated again.
    expect(again.timings.cachedPromptTokens).toBe(296);
    expect(again.tokens).toEqual(expected);
    expect(await session.evaluate(after, { logits: "all" })).toEqual(expectedAfter);
  });

  it("keeps checkpoints of evaluations too, for its own next prompt and, through the cache, for others", async () => {
    // Evaluated after 100 tokens, 1,100 more end at 1,200: checkpoints at 176, 688 and 1,200.
    const prompt = tokens(1200, 12);
    const next = [...prompt.slice(0, 700), ...tokens(40, 13)];
    const after = tokens(2, 14);
    const plain = await open(preset, { cacheRam: 0, contextSize: 1300 });
    const fresh = plain.createSession();
    const expected = (await fresh.generate(next, { maxTokens: 4 }).result).tokens;
    const expectedAfter = await fresh.evaluate(after, { logits: "all" });
    const session = plain.createSession();
    await session.evaluate(prompt.slice(0, 100));
    await session.evaluate(prompt.slice(100));
    const mine = await session.generate(next, { maxTokens: 4 }).result;
    expect(mine.timings.cachedPromptTokens).toBe(own(688));
    expect(mine.tokens).toEqual(expected);
    expect(await session.evaluate(after, { logits: "all" })).toEqual(expectedAfter);

    const cached = await open(preset, { cacheRam: "256MiB", contextSize: 1300 });
    await cached.createSession().evaluate(prompt);
    const other = cached.createSession();
    const reuse = await other.generate(next, { maxTokens: 4 }).result;
    expect(reuse.timings.cachedPromptTokens).toBe(688);
    expect(reuse.tokens).toEqual(expected);
    expect(await other.evaluate(after, { logits: "all" })).toEqual(expectedAfter);
  });

  it("runs sessions together in shared passes with the tokens each gives alone", async () => {
    const model = await open(preset, { cacheRam: 0, parallel: 2 });
    const prompts = [tokens(300, 10), tokens(90, 11)];
    const alone = [];
    for (const prompt of prompts)
      alone.push((await model.createSession().generate(prompt, { maxTokens: 10 }).result).tokens);
    const before = model.stats().meanSequencesPerPass;
    const together = await Promise.all(
      prompts.map(async (prompt) => (await model.createSession().generate(prompt, { maxTokens: 10 }).result).tokens),
    );
    expect(together).toEqual(alone);
    expect(model.stats().meanSequencesPerPass).toBeGreaterThan(before);
  });

  it("drafts (ngram) the tokens greedy decoding gives without, rolling rejected drafts back, alone and beside another session", async () => {
    const model = await open(preset, { cacheRam: 0, parallel: 2 });
    // A prompt that repeats itself, so that n-grams of the context draft.
    const unit = tokens(12, 21);
    const prompt = [...unit, ...unit, ...unit, ...unit];
    const other = tokens(30, 22);
    const greedy = { maxTokens: 160, temperature: 0 };
    // Drafts from any one-token match, every step: many are rejected (tiny-deepseek4 keeps some too).
    const ngram = { source: "ngram", max: 4, ngramMin: 1, adaptive: false } as const;
    const plain = await model.createSession().generate(prompt, greedy).result;
    const otherPlain = await model.createSession().generate(other, greedy).result;

    const session = model.createSession();
    const drafted = await session.generate(prompt, { ...greedy, draft: ngram }).result;
    expect(drafted.tokens).toEqual(plain.tokens);
    expect(drafted.timings.draftTokens).toBeGreaterThan(drafted.timings.draftAccepted);
    // The context holds the kept tokens' state: what follows is one whole evaluation's.
    const after = tokens(2, 23);
    const held = (await session.save()).tokens;
    expect(await session.evaluate(after, { logits: "all" })).toEqual(
      await wholeEvaluation(model, [...held, ...after], after.length),
    );

    const [beside, alongside] = await Promise.all([
      model.createSession().generate(prompt, { ...greedy, draft: ngram }).result,
      model.createSession().generate(other, greedy).result,
    ]);
    expect(beside.tokens).toEqual(plain.tokens);
    expect(alongside.tokens).toEqual(otherPlain.tokens);
  });

  it("continues after a stop string from the state after the last kept token", async () => {
    const model = await open(preset, { cacheRam: 0 });
    const prompt = tokens(120, 6);
    const probe = await model.createSession().generate(prompt, { maxTokens: 12 }).result;
    expect(probe.tokens.length).toBe(12);
    // Stop on the text of a later generated token not found before it: the context keeps some of
    // the generated tokens, fewer than ran.
    const at = [5, 4, 6, 3, 7, 8, 9, 10, 2].find((k) => {
      const text = model.detokenize(probe.tokens.slice(k, k + 1));
      return text.length > 0 && !model.detokenize([...prompt, ...probe.tokens.slice(0, k)]).includes(text);
    });
    expect(at).toBeDefined();
    const stop = model.detokenize(probe.tokens.slice(at!, at! + 1));

    const session = model.createSession();
    const stopped = await session.generate(prompt, { maxTokens: 12, stop: [stop] }).result;
    expect(stopped.stopReason).toBe("stop");
    const next = tokens(2, 7);
    const logits = await session.evaluate(next, { logits: "all" });
    const kept = (await session.save()).tokens.slice(0, -next.length);
    expect(kept.length).toBeGreaterThan(prompt.length);
    expect(kept.length).toBeLessThanOrEqual(prompt.length + at!);
    expect(logits).toEqual(await wholeEvaluation(model, [...kept, ...next], next.length));
  });
});

describe("a draft model with recurrent layers", () => {
  it("is refused by name (its own states could not follow a rejected draft back)", async () => {
    const path = join(dir, "tiny-qwen35moe.gguf");
    await expect(loadModel(path, { gpu: false, contextSize: 64, draftModel: path })).rejects.toMatchObject({
      code: "DRAFT_UNSUPPORTED",
      message: expect.stringMatching(/draft model with recurrent layers/),
    });
  });
});
