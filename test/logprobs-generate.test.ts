import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../src/index.js";

// generate({ logprobs }) on the default model: each token's log-probability and the top
// alternatives are the log-softmax of the model's own logits (what llama-server reports by
// default), checked against evaluate()'s logits step by step.
const MODEL = "models/bloomery-tiny-moe-Q8_0.gguf";
let model: Model;
let promptTokens: number[];

beforeAll(async () => {
  model = await loadModel(MODEL, { threads: 2, contextSize: 256 });
  const prompt = model.applyChatTemplate([{ role: "user", content: "What is a river?" }]);
  promptTokens = Array.from(model.tokenize(prompt, { special: true, addSpecial: true }));
});

afterAll(() => model?.dispose());

function logSoftmax(logits: Float32Array): Float64Array {
  let max = -Infinity;
  for (const l of logits) max = Math.max(max, l);
  let total = 0;
  for (const l of logits) total += Math.exp(l - max);
  const out = new Float64Array(logits.length);
  for (let i = 0; i < logits.length; i++) out[i] = logits[i]! - max - Math.log(total);
  return out;
}

describe("logprobs", () => {
  it("reports each token's log-probability and the top alternatives of the raw logits", async () => {
    const bias = { [model.tokenize(" the")[0]!]: 5 };
    const run = model
      .createSession()
      .generate(promptTokens, { maxTokens: 12, temperature: 0.7, seed: 5, logitBias: bias, logprobs: 4 });
    const chunks = [];
    for await (const chunk of run) chunks.push(chunk);
    const result = await run.result;
    expect(result.logprobs).toHaveLength(result.tokens.length);
    expect(chunks.flatMap((c) => c.logprobs ?? [])).toEqual(result.logprobs);
    for (const chunk of chunks) expect(chunk.logprobs).toHaveLength(chunk.tokens.length);

    // The same steps through evaluate(): the reported numbers are the logits' log-softmax, not
    // the biased, tempered distribution the draw used.
    const session = model.createSession();
    let logits = await session.evaluate(promptTokens);
    for (const [i, entry] of result.logprobs!.entries()) {
      const expected = logSoftmax(logits);
      expect(entry.token).toBe(result.tokens[i]);
      expect(entry.logprob).toBeCloseTo(expected[entry.token]!, 4);
      expect(entry.top).toHaveLength(4);
      const best = Array.from(expected.keys()).sort((a, b) => expected[b]! - expected[a]! || a - b);
      expect(entry.top.map((t) => t.token)).toEqual(best.slice(0, 4));
      for (const t of entry.top) expect(t.logprob).toBeCloseTo(expected[t.token]!, 4);
      logits = await session.evaluate([entry.token]);
    }
  });

  it("is left out unless asked for, and refuses a bad count", async () => {
    const result = await model.createSession().generate(promptTokens, { maxTokens: 3 }).result;
    expect(result.logprobs).toBeUndefined();
    const zero = await model.createSession().generate(promptTokens, { maxTokens: 3, logprobs: 0 }).result;
    expect(zero.logprobs!.every((e) => e.top.length === 0 && e.logprob <= 0)).toBe(true);
    expect(() => model.createSession().generate(promptTokens, { logprobs: -1 })).toThrow(
      expect.objectContaining({ code: "INVALID_ARGUMENT" }),
    );
  });
});
