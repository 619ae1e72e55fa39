// What the benchmarks share: timing, the synthetic prompts of the GPU benches, greedy picks, and
// keeping the best round of each stream count.

/** Seconds since `start` (a process.hrtime.bigint()). */
export const secondsSince = (start) => Number(process.hrtime.bigint() - start) / 1e9;

/** `length` tokens spread over the vocabulary (noise, as the synthetic models' tokens are). */
export const spreadTokens = (length, vocab) => Array.from({ length }, (_, i) => (i * 7919 + 11) % vocab);

/** The index of the largest value (the first of equals): a greedy token. */
export function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; ++i) if (values[i] > values[best]) best = i;
  return best;
}

/** Per stream count of `streams`, the round of `rounds` ({ streams, decodeTokensPerSecond }) that decoded fastest. */
export function fastestRounds(rounds, streams) {
  return streams.map((count) =>
    rounds
      .filter((r) => r.streams === count)
      .reduce((a, b) => (b.decodeTokensPerSecond > a.decodeTokensPerSecond ? b : a)),
  );
}
