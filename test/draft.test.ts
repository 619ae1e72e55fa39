import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type DraftOption, type GenerateOptions, type Model } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { DEFAULT_MODEL, writeDraftModel } from "./draft-helpers.js";

// Speculative decoding (issue 20) on the default model: a pass verifies the tokens an n-gram
// lookup, a draft model or the model's own trained next-token-prediction layer drafts, the
// sampler draws at each of its rows as it would without drafts, and the drafts are kept up to
// the first draw that differs; the rest roll back. So greedy runs give the tokens they give
// without drafts, and sampled runs the target's distribution (a randomized probability-integral
// test against the model's own probabilities).

const dir = mkdtempSync(join(tmpdir(), "bloomery-draft-"));
let model: Model;

// Plain text, a repetitive prompt (where the n-gram lookup drafts a lot) and a chat.
const PROMPTS = [
  "A river is",
  "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,",
  "To run means to move fast. To walk means to move slowly. To run means to move fast. To walk means",
  '<|im_start|>user\nWhat does "whisper" mean?<|im_end|>\n<|im_start|>assistant\n',
];
// Drafts of a fixed width, so that every pass verifies some (the adaptive width may turn them off).
const SOURCES: Record<string, DraftOption> = {
  ngram: { source: "ngram", adaptive: false, max: 6 },
  model: { source: "model", adaptive: false, max: 4 },
  mtp: { source: "mtp", adaptive: false, max: 3 },
};

beforeAll(async () => {
  // The draft model: the default model with one routed expert per token instead of four.
  model = await loadModel(DEFAULT_MODEL, { threads: 2, contextSize: 512, draftModel: await writeDraftModel(dir) });
});

afterAll(() => {
  model?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

async function run(prompt: string, options: GenerateOptions) {
  const session = model.createSession();
  try {
    return await session.generate(prompt, options).result;
  } finally {
    session.dispose();
  }
}

describe("greedy drafts", () => {
  for (const [name, draft] of Object.entries(SOURCES)) {
    it(`gives the tokens of a run without drafts (${name}), alone and with parallel sessions`, async () => {
      const expected = [];
      for (const prompt of PROMPTS) expected.push((await run(prompt, { maxTokens: 96, draft: false })).tokens);
      let drafted = 0,
        kept = 0;
      for (const [i, prompt] of PROMPTS.entries()) {
        const r = await run(prompt, { maxTokens: 96, draft });
        expect(r.tokens, `prompt ${i}`).toEqual(expected[i]);
        drafted += r.timings.draftTokens;
        kept += r.timings.draftAccepted;
      }
      // Drafts were verified, some kept and some rolled back.
      expect(kept).toBeGreaterThan(0);
      expect(kept).toBeLessThan(drafted);
      // Two sessions at once share passes (parallel: 2), each verifying its own drafts.
      const together = await Promise.all(PROMPTS.map((prompt) => run(prompt, { maxTokens: 96, draft })));
      expect(together.map((r) => r.tokens)).toEqual(expected);
    });
  }

  it("applies the sampler's settings as without drafts: penalties, bias, grammar, stop strings, logprobs", async () => {
    const settings: GenerateOptions[] = [
      { repeatPenalty: 1.3, presencePenalty: 0.5, logitBias: { 11: -2, 220: 1 }, logprobs: 3 },
      { grammar: 'root ::= ("1, " | "2, " | "3, ")+ "done"', maxTokens: 40 },
      { stop: ["5, 9"], temperature: 0.8, seed: 3 },
    ];
    for (const [i, options] of settings.entries()) {
      const without = await run(PROMPTS[1]!, { maxTokens: 64, ...options, draft: false });
      const withDrafts = await run(PROMPTS[1]!, { maxTokens: 64, ...options, draft: SOURCES.ngram });
      expect(withDrafts.tokens, `settings ${i}`).toEqual(without.tokens);
      expect(withDrafts.text, `settings ${i}`).toBe(without.text);
      expect(withDrafts.stopReason, `settings ${i}`).toBe(without.stopReason);
      expect(withDrafts.logprobs, `settings ${i}`).toEqual(without.logprobs);
      expect(withDrafts.timings.draftTokens, `settings ${i}`).toBeGreaterThan(0);
    }
  });

  it("counts drafts in model.stats() and turns them off where they do not pay", async () => {
    const before = model.stats();
    const r = await run(PROMPTS[1]!, { maxTokens: 200, draft: "ngram" });
    const after = model.stats();
    expect(after.draftAccepted - before.draftAccepted).toBe(r.timings.draftAccepted);
    expect(after.draftTokens - before.draftTokens).toBe(r.timings.draftTokens);
    expect(r.timings.draftAccepted).toBeGreaterThan(0);
    expect(after.tokensPerDecodePass).toBeGreaterThan(1);
    expect(after.draftAcceptanceRate).toBeGreaterThan(0);
  });
});

describe("draft options", () => {
  it("refuses what it does not run, by name", async () => {
    // A model without next-token-prediction layers.
    const plainPath = join(dir, "tiny-qwen3moe.gguf");
    await writeSyntheticModel(plainPath, { preset: "tiny-qwen3moe", weightType: "Q8_0" });
    const plain = await loadModel(plainPath, { threads: 1 });
    const p = plain.createSession();
    await expect(p.generate("A", { draft: "mtp" }).result).rejects.toMatchObject({
      code: "DRAFT_UNSUPPORTED",
      message: expect.stringMatching(/next-token-prediction/),
    });
    p.dispose();
    plain.dispose();
    await expect(loadModel(plainPath, { draft: "mtp" })).rejects.toMatchObject({ code: "DRAFT_UNSUPPORTED" });
    const s = model.createSession();
    expect(() => s.generate("A", { draft: { source: "ngram", max: 65 } })).toThrow(/draft.max/);
    expect(() => s.generate("A", { draft: { source: "ngram", pMin: 2 } })).toThrow(/draft.pMin/);
    expect(() => s.generate("A", { draft: { source: "ngram", extra: 1 } as DraftOption })).toThrow(/extra/);
    s.dispose();
    await expect(loadModel(DEFAULT_MODEL, { draft: "model" })).rejects.toMatchObject({ code: "DRAFT_UNSUPPORTED" });
  });
});

/** Softmax at temperature 1 of each vocab-wide row of `logits`. */
function softmaxRows(logits: Float32Array, vocab: number): Float64Array[] {
  const rows: Float64Array[] = [];
  for (let i = 0; i < logits.length / vocab; i++) {
    const row = logits.subarray(i * vocab, (i + 1) * vocab);
    let max = -Infinity;
    for (const v of row) max = Math.max(max, v);
    const p = Float64Array.from(row, (v) => Math.exp(v - max));
    const sum = p.reduce((a, b) => a + b, 0);
    rows.push(p.map((v) => v / sum));
  }
  return rows;
}

/** mulberry32: the test's seeded uniform draws. */
function uniform(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe("sampled drafts", () => {
  // Each drawn token's randomized probability-integral transform under the model's own distribution
  // given the tokens before it (the mass of the likelier tokens, plus a uniform share of its own) is
  // uniform on [0, 1) and independent of the others exactly when the tokens follow the model's
  // distribution; a chi-square test over ten bins checks it. Without the rollback, a token drawn after
  // rejected drafts sees them in its context and the transform piles up near 1.
  const seed = Number(process.env.BLOOMERY_DRAFT_SEED ?? 20);
  for (const [name, draft] of Object.entries(SOURCES)) {
    it(`keep the model's distribution at temperature 1 (${name}; seed ${seed})`, async () => {
      const prompt = PROMPTS[1]!;
      const vocab = model.info.vocabSize;
      // The model's probabilities after the prompt, and a session holding it to score what follows.
      const scorer = model.createSession();
      const promptTokens = Array.from(model.tokenize(prompt, { special: true, addSpecial: true }));
      const first = softmaxRows(await scorer.evaluate(promptTokens), vocab)[0]!;
      const afterPrompt = await scorer.save();
      const next = uniform(seed);
      const bins = new Array<number>(10).fill(0);
      let drafted = 0,
        kept = 0,
        draws = 0;
      for (let run = 0; run < (name === "ngram" ? 60 : 50); run++) {
        const session = model.createSession();
        const r = await session.generate(prompt, {
          temperature: 1,
          topK: 0,
          topP: 1,
          minP: 0,
          seed: seed * 1000 + run,
          maxTokens: 12,
          draft,
        }).result;
        session.dispose();
        drafted += r.timings.draftTokens;
        kept += r.timings.draftAccepted;
        const tokens = r.stopReason === "eos" ? [...r.tokens, model.info.eosToken] : r.tokens;
        await scorer.restore(afterPrompt);
        const rest = tokens.length > 1 ? await scorer.evaluate(tokens.slice(0, -1), { logits: "all" }) : null;
        const rows = [first, ...(rest ? softmaxRows(rest, vocab) : [])];
        tokens.forEach((token, i) => {
          const p = rows[i]!;
          let above = 0;
          for (let t = 0; t < p.length; t++) if (p[t]! > p[token]! || (p[t] === p[token] && t < token)) above += p[t]!;
          const u = above + next() * p[token]!;
          bins[Math.min(9, Math.floor(u * 10))]!++;
          draws++;
        });
      }
      scorer.dispose();
      const expected = draws / 10;
      const chi2 = bins.reduce((sum, n) => sum + (n - expected) ** 2 / expected, 0);
      // 9 degrees of freedom: P(chi2 > 27.88) = 0.001.
      expect(chi2, `bins ${bins.join(" ")} of ${draws} tokens (seed ${seed})`).toBeLessThan(27.88);
      // The drafts were tested: many were rolled back, many kept.
      expect(kept).toBeGreaterThan(drafted * 0.1);
      expect(kept).toBeLessThan(drafted * 0.9);
    });
  }
});
