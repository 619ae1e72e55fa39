// What the CPU oracle (test/oracle-cpu.test.ts) and the GPU machine's tests (test/device/) share
// when they compare next-token distributions: the tokens they feed, and when two top tokens agree.
// Plain JavaScript, so that the GPU machine's tests, run without a TypeScript loader, share it.

/**
 * Random-weight models have near-flat distributions: when the reference itself cannot tell the
 * candidate's top token from its own (their probabilities within TIE_MARGIN, 0.2 %, of each
 * other: logits within 0.002), that is a tie, not a miss.
 */
export const TIE_MARGIN = 2e-3;

/**
 * Whether a candidate's top token agrees with the reference's: `best` is the reference's
 * probability of its own top token, `candidateBest` the reference's probability of the
 * candidate's top token.
 */
export function sameTop(best, candidateBest) {
  return candidateBest >= best * (1 - TIE_MARGIN);
}

/**
 * The bar a candidate's agreement with its reference must meet, given the floor: how far two
 * correct evaluations of the same file and tokens already part (`floorTop1`, their top-1
 * agreement; `floorKl`, their mean KL). Top-1 >= 99 % and mean KL <= 1e-3, or, on a fixture whose
 * floor is wider, twice its misses and twice its KL, as issue 9 rules for KL with llama.cpp's floor.
 */
export function agreementBar(floorTop1, floorKl) {
  return { top1: Math.min(0.99, 1 - 2 * (1 - floorTop1)), kl: Math.max(1e-3, 2 * floorKl) };
}

/** `count` deterministic token ids: BOS, then a fixed pseudo-random walk over the vocabulary. */
export function walkTokens(bos, vocabSize, count) {
  const tokens = [bos];
  let state = 0x9e3779b9;
  while (tokens.length < count) {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    tokens.push(state % vocabSize);
  }
  return tokens;
}
