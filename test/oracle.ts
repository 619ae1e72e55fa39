// Comparing next-token distributions with llama.cpp (node-llama-cpp's CPU build): the oracle of
// DESIGN.md's correctness section, shared by the oracle tests (test/oracle-cpu.test.ts on the
// synthetic fixtures, test/oracle-hybrid.test.ts on the hybrid Qwens', test/default-model.test.ts
// on the shipped model), and the runner of the fixture suites (describeOracle).
//
// Two bars. agreementBar (test/distributions.mjs) holds everywhere: top-1 >= 99 % and mean
// KL(llama.cpp || ours) <= 1e-3, or twice the misses and KL by which llama.cpp's own batched and
// one-token-at-a-time evaluations part. And bloomery's CPU kernels reproduce llama.cpp's
// one-token arithmetic on x86, every weight type's dot included (each SIMD tier that of the ggml
// CPU variant of the same instruction set): where llama.cpp runs that variant here, our
// distributions must equal llama.cpp's up to the float rounding of its probabilities. That second bar is what catches a rounding that differs:
// on a small trained model one ulp of difference grows within a few positions into a KL as large
// as llama.cpp's own batched-vs-one-by-one floor, which the first bar lets pass.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { getLlama, LlamaLogLevel, type Llama, type Token } from "node-llama-cpp";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getSystemInfo, loadModel } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";
import { agreementBar, sameTop } from "./distributions.mjs";
import { idTokens, proseTokens } from "./oracle-inputs.js";

/** Mean KL, per position, under which two distributions count as the same: float rounding of probabilities gives 1e-15 to 3e-15. */
const SAME_KL = 1e-13;

export interface Distributions {
  oneByOne: Float64Array[];
  batched: Float64Array[];
}

export interface OracleOptions {
  threads: number;
  /** Cells of both engines' KV caches: llama.cpp pads its attention rows to 256 cells, so a multiple of 256. */
  contextSize: number;
}

/**
 * The context for `tokens` positions: the multiple of 256 above (see OracleOptions.contextSize),
 * with a free cell left, since node-llama-cpp shifts a full context (drops its first tokens).
 */
export function contextFor(tokens: number): number {
  return Math.ceil((tokens + 1) / 256) * 256;
}

function softmax(logits: Float32Array): Float64Array {
  let max = -Infinity;
  for (const x of logits) max = Math.max(max, x);
  const p = Float64Array.from(logits, (x) => Math.exp(x - max));
  const sum = p.reduce((a, b) => a + b, 0);
  return p.map((x) => x / sum);
}

/**
 * llama.cpp's probabilities as a distribution. node-llama-cpp normalizes them by a float sum over
 * the vocabulary, which leaves their total off 1 by up to ~2e-5: a KL of that much against any
 * candidate, identical or not. Renormalized here in double.
 */
function fromMap(probabilities: Map<Token, number>, vocabSize: number): Float64Array {
  const p = new Float64Array(vocabSize);
  let total = 0;
  for (const [token, probability] of probabilities) {
    p[token] = probability;
    total += probability;
  }
  return p.map((x) => x / total);
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
  { threads, contextSize }: OracleOptions,
): Promise<Distributions> {
  const model = await llama.loadModel({ modelPath: path });
  try {
    // A full-size cache for sliding-window layers (llama.cpp's swa_full): its cells stay in position
    // order at any length, as ours do, where the smaller iSWA cache reuses cells in its own order.
    const context = await model.createContext({ contextSize, threads, flashAttention: false, swaFullCache: true });
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

/** Ours: one token per evaluate (the decode path), and the whole batch in one evaluate (the prompt path). */
export async function ourDistributions(
  path: string,
  tokens: number[],
  { threads, contextSize }: OracleOptions,
): Promise<Distributions & { vocab: number }> {
  const model = await loadModel(path, { gpu: false, threads, contextSize });
  try {
    const session = model.createSession();
    const oneByOne: Float64Array[] = [];
    for (const token of tokens) oneByOne.push(softmax(await session.evaluate([token])));
    await session.reset();
    const all = await session.evaluate(tokens, { logits: "all" });
    const vocab = model.info.vocabSize;
    const batched = tokens.map((_, i) => softmax(all.subarray(i * vocab, (i + 1) * vocab)));
    return { oneByOne, batched, vocab };
  } finally {
    model.dispose();
  }
}

/** The SIMD tier of the ggml CPU variant llama.cpp loaded, from its system info ("other": none we reproduce). */
export function llamaCppTier(llama: Llama): "avx512" | "avx2" | "other" {
  const has = (feature: string) => new RegExp(`\\b${feature} = 1\\b`).test(llama.systemInfo);
  // The sapphirerapids variant (AMX) multiplies F16 in half precision and quantized weights on AMX tiles.
  if (has("AMX_INT8")) return "other";
  if (has("AVX512")) return "avx512";
  return has("AVX2") && has("FMA") ? "avx2" : "other";
}

/** Whether our CPU kernels here run llama.cpp's arithmetic: its CPU variant and our SIMD tier are the same. */
export function sameArithmetic(llama: Llama): boolean {
  return llamaCppTier(llama) === getSystemInfo().cpu.simdTier;
}

/**
 * Checks our one-by-one and batched distributions against llama.cpp's one-by-one ones: within
 * agreementBar of llama.cpp's own batched-vs-one-by-one floor always, and the same distributions
 * where `exact` (sameArithmetic). Logs every figure.
 */
export function expectAgreement(label: string, reference: Distributions, ours: Distributions, exact: boolean): void {
  const floor = compare(reference.oneByOne, reference.batched);
  const bar = agreementBar(floor.top1, floor.meanKl);
  const oneByOne = compare(reference.oneByOne, ours.oneByOne);
  const batched = compare(reference.oneByOne, ours.batched);
  const pct = (x: number) => `${(x * 100).toFixed(1)} %`;
  console.log(
    `${label}: one-by-one top-1 ${pct(oneByOne.top1)}, KL ${oneByOne.meanKl.toExponential(2)};` +
      ` batched top-1 ${pct(batched.top1)}, KL ${batched.meanKl.toExponential(2)}` +
      ` (bar ${pct(bar.top1)}, ${bar.kl.toExponential(2)}${exact ? `, exact: KL <= ${SAME_KL}` : ""};` +
      ` llama.cpp batched vs one-by-one: top-1 ${pct(floor.top1)}, KL ${floor.meanKl.toExponential(2)})`,
  );
  for (const [path, result] of [
    ["one-by-one", oneByOne],
    ["batched", batched],
  ] as const) {
    expect(result.top1, `${label}, ${path}: top-1`).toBeGreaterThanOrEqual(bar.top1);
    expect(result.meanKl, `${label}, ${path}: KL`).toBeLessThanOrEqual(bar.kl);
    if (exact) {
      expect(result.top1, `${label}, ${path}: top-1 with llama.cpp's arithmetic`).toBe(1);
      expect(result.meanKl, `${label}, ${path}: KL with llama.cpp's arithmetic`).toBeLessThanOrEqual(SAME_KL);
    }
  }
}

/** A synthetic fixture: a preset of tools/synth and its weight type (undefined: the preset's own mix). */
export type OracleCase = [preset: string, weightType: string | undefined];

export interface OracleSuite {
  /** Positions of the arbitrary ids and of the plain text each case runs. */
  positions: number;
  /** Positions of the long context of plain text each long case runs. */
  longPositions: number;
  cases: OracleCase[];
  longCases: OracleCase[];
  /** Whether the distributions must also be llama.cpp's own where its arithmetic is ours (sameArithmetic); else agreementBar alone. */
  exactWhereSameArithmetic: boolean;
}

/** Threads of both engines: tiny models only spin with more (and CI has two cores). */
const SUITE_THREADS = 1;

/**
 * The fixture suites' runner: for each case, our one-by-one and batched distributions against
 * llama.cpp's (expectAgreement) on arbitrary ids and on plain text, and for each long case on a
 * long context of plain text; our batched and one-by-one distributions the same arithmetic.
 */
export function describeOracle(title: string, suite: OracleSuite): void {
  describe(title, () => {
    const dir = mkdtempSync(join(tmpdir(), "bloomery-oracle-"));
    let llama: Llama;
    let exact = false;

    beforeAll(async () => {
      llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
      if (suite.exactWhereSameArithmetic) {
        exact = sameArithmetic(llama);
        console.log(`llama.cpp's CPU variant: ${llamaCppTier(llama)}; exact checks ${exact ? "on" : "off"}`);
      }
    });

    afterAll(async () => {
      await llama?.dispose();
      rmSync(dir, { recursive: true, force: true });
    });

    /** The fixture's file, its vocabulary size and BOS, and the first `textTokens` tokens of the prose in its vocabulary. */
    async function fixture([preset, weightType]: OracleCase, textTokens: number) {
      const path = join(dir, `${preset}-${weightType ?? "mix"}.gguf`);
      const plan = await writeSyntheticModel(path, weightType === undefined ? { preset } : { preset, weightType });
      const model = await loadModel(path, { gpu: false, threads: SUITE_THREADS, contextSize: 256 });
      try {
        const text = proseTokens((prose) => model.tokenize(prose), textTokens);
        return { path, vocabSize: plan.vocab.tokens.length, bos: plan.vocab.bos, text };
      } finally {
        model.dispose();
      }
    }

    async function check(label: string, path: string, tokens: number[], vocabSize: number) {
      const options = { threads: SUITE_THREADS, contextSize: contextFor(tokens.length) };
      const ours = await ourDistributions(path, tokens, options);
      expect(ours.vocab).toBe(vocabSize);
      const reference = await llamaCppDistributions(llama, path, tokens, vocabSize, options);
      expectAgreement(label, reference, ours, exact);
      const batchedVsOneByOne = compare(ours.oneByOne, ours.batched);
      expect(batchedVsOneByOne.top1).toBe(1);
      expect(batchedVsOneByOne.meanKl).toBeLessThanOrEqual(1e-6);
    }

    const caseLabel = ([preset, weightType]: OracleCase) => `${preset} ${weightType ?? "mix"}`;
    for (const c of suite.cases) {
      it(`${caseLabel(c)}: arbitrary ids and plain text`, async () => {
        const { path, vocabSize, bos, text } = await fixture(c, suite.positions);
        await check(`${caseLabel(c)} ids`, path, idTokens(bos, vocabSize, suite.positions), vocabSize);
        await check(`${caseLabel(c)} text`, path, text, vocabSize);
      });
    }
    for (const c of suite.longCases) {
      it(`${caseLabel(c)}: a long context of plain text`, async () => {
        const { path, vocabSize, text } = await fixture(c, suite.longPositions);
        await check(`${caseLabel(c)} long`, path, text, vocabSize);
      });
    }
  });
}
