import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BloomeryError, loadModel, type GenerateOptions, type Model } from "../src/index.js";

// Session.generate's sampling settings on the default model, which writes real English: seeds,
// greedy equivalences, logit bias and penalties reach the native sampler, and bad settings are
// refused by name. The sampler's exact arithmetic is tested in native/tests/sampler_test.cc.
const MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";
let model: Model;
let prompt: string;

beforeAll(async () => {
  model = await loadModel(MODEL, { threads: 2, contextSize: 256 });
  prompt = model.applyChatTemplate([{ role: "user", content: "What is a river?" }]);
});

afterAll(() => model?.dispose());

async function generate(options: GenerateOptions): Promise<{ text: string; tokens: number[] }> {
  const { text, tokens } = await model.createSession().generate(prompt, options).result;
  return { text, tokens };
}

/** The greedy continuation, from evaluate() and an argmax of its logits (not through the sampler). */
async function greedy(maxTokens: number): Promise<number[]> {
  const session = model.createSession();
  const tokens: number[] = [];
  let logits = await session.evaluate(model.tokenize(prompt, { special: true, addSpecial: true }));
  while (tokens.length < maxTokens) {
    let best = 0;
    for (let i = 1; i < logits.length; i++) if (logits[i]! > logits[best]!) best = i;
    if (best === model.info.eosToken) break;
    tokens.push(best);
    logits = await session.evaluate([best]);
  }
  return tokens;
}

describe("sampling settings", () => {
  it("reproduces a sampled text from its seed, and another seed samples another", async () => {
    const options = { maxTokens: 40, temperature: 1.2, topK: 0, topP: 1, minP: 0 };
    const first = await generate({ ...options, seed: 7 });
    const again = await generate({ ...options, seed: 7 });
    const other = await generate({ ...options, seed: 8 });
    expect(first.tokens.length).toBeGreaterThan(5);
    expect(again).toEqual(first);
    expect(other.text).not.toBe(first.text);
    // Sampling really happened: the seeded text is not the greedy one.
    expect(first.tokens).not.toEqual(await greedy(40));
  });

  it("decodes greedily at temperature 0 (the default) and with topK 1, whatever the seed", async () => {
    const expected = await greedy(30);
    expect(expected.length).toBeGreaterThan(10);
    expect((await generate({ maxTokens: 30 })).tokens).toEqual(expected);
    expect((await generate({ maxTokens: 30, temperature: 0, seed: 1 })).tokens).toEqual(expected);
    expect((await generate({ maxTokens: 30, temperature: 5, topK: 1, topP: 1, minP: 0, seed: 2 })).tokens).toEqual(
      expected,
    );
  });

  it("bans a token with a bias of -Infinity or -100 and forces one with +100", async () => {
    const expected = await greedy(30);
    const first = expected[0]!;
    for (const bias of [-Infinity, -100]) {
      const banned = await generate({ maxTokens: 30, temperature: 1, seed: 3, logitBias: { [first]: bias } });
      expect(banned.tokens.length).toBeGreaterThan(0);
      expect(banned.tokens).not.toContain(first);
    }
    const forced = model.tokenize(" river")[0]!;
    const run = await generate({ maxTokens: 8, temperature: 1, seed: 4, logitBias: { [forced]: 100 } });
    expect(run.tokens).toEqual(Array(8).fill(forced));
  });

  it("applies the penalties to the prompt and the generated tokens", async () => {
    const expected = await greedy(30);
    // Greedy decoding repeats itself (" river" twice, " a" and " is" again) ...
    expect(new Set(expected).size).toBeLessThan(expected.length);
    // ... a presence penalty over the whole history forbids any token seen before, the prompt's too.
    const promptTokens = new Set(model.tokenize(prompt, { special: true, addSpecial: true }));
    const run = await generate({ maxTokens: 30, presencePenalty: 100, repeatLastN: -1 });
    expect(run.tokens.length).toBeGreaterThan(10);
    expect(new Set(run.tokens).size).toBe(run.tokens.length);
    for (const token of run.tokens) expect(promptTokens.has(token)).toBe(false);
    // A repeat penalty changes the greedy text too.
    const repeat = await generate({ maxTokens: 30, repeatPenalty: 1.5 });
    expect(repeat.tokens).not.toEqual(expected);
  });

  it("refuses bad settings by name, before generating", () => {
    const session = model.createSession();
    const cases: [GenerateOptions, string][] = [
      [{ temperature: -1 }, "temperature"],
      [{ temperature: Infinity }, "temperature"],
      [{ topK: -1 }, "topK"],
      [{ topK: 1.5 }, "topK"],
      [{ topP: 1.5 }, "topP"],
      [{ minP: -0.1 }, "minP"],
      [{ seed: -1 }, "seed"],
      [{ seed: 0.5 }, "seed"],
      [{ repeatPenalty: 0 }, "repeatPenalty"],
      [{ repeatLastN: -2 }, "repeatLastN"],
      [{ presencePenalty: NaN }, "presencePenalty"],
      [{ frequencyPenalty: Infinity }, "frequencyPenalty"],
      [{ logitBias: { [model.info.vocabSize]: 1 } }, "logitBias"],
      [{ logitBias: { 5: Infinity } }, "logitBias"],
      [{ temperature: "hot" as unknown as number }, "temperature"],
      [{ stop: "" }, "stop"],
      [{ stop: [5] as unknown as string[] }, "stop"],
      [{ maxTokens: -1 }, "maxTokens"],
      [{ signal: {} as AbortSignal }, "signal"],
    ];
    for (const [options, name] of cases) {
      let error: unknown;
      try {
        session.generate(prompt, options);
      } catch (e) {
        error = e;
      }
      expect(error, name).toBeInstanceOf(BloomeryError);
      expect((error as BloomeryError).code).toBe("INVALID_ARGUMENT");
      expect((error as BloomeryError).message).toContain(name);
    }
    expect(session.position).toBe(0);
  });

  it("reports prompt and decode timings", async () => {
    const run = await model.createSession().generate(prompt, { maxTokens: 10 }).result;
    const promptTokens = model.tokenize(prompt, { special: true, addSpecial: true }).length;
    // Evaluated and reused tokens make up the prompt (other tests of this model left states in its cache).
    expect(run.timings.promptTokens).toBeGreaterThanOrEqual(1);
    expect(run.timings.promptTokens + run.timings.cachedPromptTokens).toBe(promptTokens);
    expect(run.timings.promptMs).toBeGreaterThan(0);
    // Ten tokens drawn: the first from the prompt's pass, nine more fed back one pass each.
    expect(run.timings.decodeTokens).toBe(9);
    expect(run.timings.decodeMs).toBeGreaterThan(0);
  });
});
