// What the benchmarks share: timing, the synthetic prompts of the GPU benches, greedy picks,
// decode as generate() streams it, and keeping the best round of each stream count.

/** The value after `--name` in `args` (removed from it with its flag), or `fallback` where it is absent. */
export function takeOption(args, name, fallback) {
  const at = args.indexOf(name);
  return at >= 0 ? args.splice(at, 2)[1] : fallback;
}

/** Seconds since `start` (a process.hrtime.bigint()). */
export const secondsSince = (start) => Number(process.hrtime.bigint() - start) / 1e9;

/** `length` tokens spread over the vocabulary (noise, as the synthetic models' tokens are). */
export const spreadTokens = (length, vocab) => Array.from({ length }, (_, i) => (i * 7919 + 11) % vocab);

/** Prompt tok/s of `length` spread tokens evaluated by `session` from an empty context. */
export async function promptRate(session, length, vocab) {
  session.reset();
  const start = process.hrtime.bigint();
  await session.evaluate(spreadTokens(length, vocab));
  return length / secondsSince(start);
}

/** The index of the largest value (the first of equals): a greedy token. */
export function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; ++i) if (values[i] > values[best]) best = i;
  return best;
}

/**
 * Decode tok/s as a user streaming `session.generate()` sees it, first token to last: `tokens`
 * tokens after a prompt of 64 spread tokens, the end of sequence banned so that all of them come;
 * greedy unless `sampling` says otherwise. `atFirst()` runs when the first token arrives (the
 * prompt's pass is over).
 */
export async function streamedDecodeRate(model, session, tokens, sampling = {}, atFirst = () => {}) {
  session.reset();
  let first, last;
  let generated = 0;
  for await (const chunk of session.generate(spreadTokens(64, model.info.vocabSize), {
    maxTokens: tokens + 1,
    logitBias: { [model.info.eosToken]: -Infinity },
    ...sampling,
  })) {
    last = process.hrtime.bigint();
    if (!first) {
      first = last;
      atFirst();
    }
    generated += chunk.tokens.length;
  }
  return (generated - 1) / (Number(last - first) / 1e9);
}

/** Per stream count of `streams`, the round of `rounds` ({ streams, decodeTokensPerSecond }) that decoded fastest. */
export function fastestRounds(rounds, streams) {
  return streams.map((count) =>
    rounds
      .filter((r) => r.streams === count)
      .reduce((a, b) => (b.decodeTokensPerSecond > a.decodeTokensPerSecond ? b : a)),
  );
}
