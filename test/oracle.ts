// Comparing next-token distributions with llama.cpp (node-llama-cpp's CPU build): the oracle of
// DESIGN.md's correctness section, shared by the oracle tests.
import type { Llama, Token } from "node-llama-cpp";
import { loadModel } from "../src/index.js";
import { sameTop } from "./distributions.mjs";

function softmax(logits: Float32Array): Float64Array {
  let max = -Infinity;
  for (const x of logits) max = Math.max(max, x);
  const p = Float64Array.from(logits, (x) => Math.exp(x - max));
  const sum = p.reduce((a, b) => a + b, 0);
  return p.map((x) => x / sum);
}

function fromMap(probabilities: Map<Token, number>, vocabSize: number): Float64Array {
  const p = new Float64Array(vocabSize);
  for (const [token, probability] of probabilities) p[token] = probability;
  return p;
}

/** KL(p || q) in nats, over the entries where p is positive. */
function kl(p: Float64Array, q: Float64Array): number {
  let sum = 0;
  for (let i = 0; i < p.length; i++) {
    if (p[i]! > 0) sum += p[i]! * Math.log(p[i]! / Math.max(q[i]!, 1e-30));
  }
  return sum;
}

function argmax(p: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < p.length; i++) if (p[i]! > p[best]!) best = i;
  return best;
}

export interface Comparison {
  top1: number;
  meanKl: number;
}

export function compare(reference: Float64Array[], candidate: Float64Array[]): Comparison {
  let agree = 0;
  let klSum = 0;
  for (let i = 0; i < reference.length; i++) {
    const ref = reference[i]!;
    if (sameTop(ref[argmax(ref)]!, ref[argmax(candidate[i]!)]!)) agree++;
    klSum += kl(reference[i]!, candidate[i]!);
  }
  return { top1: agree / reference.length, meanKl: klSum / reference.length };
}

/** llama.cpp's next-token distributions after each token: one token per decode, and all in one batch. */
export async function llamaCppDistributions(
  llama: Llama,
  path: string,
  tokens: number[],
  vocabSize: number,
  threads: number,
) {
  const model = await llama.loadModel({ modelPath: path });
  try {
    const context = await model.createContext({ contextSize: 256, threads, flashAttention: false });
    try {
      const sequence = context.getSequence();
      const oneByOne: Float64Array[] = [];
      for (const token of tokens as Token[]) {
        const [result] = await sequence.controlledEvaluate([[token, { generateNext: { probabilities: true } }]]);
        oneByOne.push(fromMap(result!.next!.probabilities!, vocabSize));
      }
      await sequence.clearHistory();
      const batch = await sequence.controlledEvaluate(
        (tokens as Token[]).map((token): [Token, { generateNext: { probabilities: true } }] => [
          token,
          { generateNext: { probabilities: true } },
        ]),
      );
      const batched = batch.map((r) => fromMap(r!.next!.probabilities!, vocabSize));
      return { oneByOne, batched };
    } finally {
      await context.dispose();
    }
  } finally {
    await model.dispose();
  }
}

/** Ours: one token per evaluate, and the whole batch in one evaluate. */
export async function ourDistributions(path: string, tokens: number[], threads: number) {
  const model = await loadModel(path, { gpu: false, threads, contextSize: 256 });
  try {
    const session = model.createSession();
    const oneByOne: Float64Array[] = [];
    for (const token of tokens) oneByOne.push(softmax(await session.evaluate([token])));
    await session.reset();
    const all = await session.evaluate(tokens, { logits: "all" });
    const vocab = model.info.vocabSize;
    const batched = tokens.map((_, i) => softmax(all.subarray(i * vocab, (i + 1) * vocab)));
    return { oneByOne, batched, vocab, bos: model.info.bosToken };
  } finally {
    model.dispose();
  }
}
