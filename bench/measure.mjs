// What the benchmarks share: timing, the synthetic prompts of the GPU benches, greedy picks,
// decode as generate() streams it, the plans of their placements, and keeping the best round of
// each stream count.
import { planOffload } from "../dist/index.js";

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
 * Tokens per second from the first chunk of `chunks` (an async iterable of `{ tokens }`, as generate() and a
 * streamed completion yield them) to the last, the first chunk's tokens not counted; `atFirst()` runs when the
 * first chunk arrives.
 */
export async function streamRate(chunks, atFirst = () => {}) {
  let first, last;
  let generated = 0;
  for await (const chunk of chunks) {
    last = process.hrtime.bigint();
    if (!first) {
      first = last;
      atFirst();
    } else {
      generated += chunk.tokens.length;
    }
  }
  return generated / (Number(last - first) / 1e9);
}

/**
 * Decode tok/s as a user streaming `session.generate()` sees it, first token to last: `tokens`
 * tokens after a prompt of 64 spread tokens, the end of sequence banned so that all of them come;
 * greedy unless `sampling` says otherwise. `atFirst()` runs when the first token arrives (the
 * prompt's pass is over).
 */
export function streamedDecodeRate(model, session, tokens, sampling = {}, atFirst = () => {}) {
  session.reset();
  const chunks = session.generate(spreadTokens(64, model.info.vocabSize), {
    maxTokens: tokens + 1,
    logitBias: { [model.info.eosToken]: -Infinity },
    ...sampling,
  });
  return streamRate(chunks, atFirst);
}

/** A plan (planOffload's, for `footprint`) with every routed expert in host memory and the rest on the GPU. */
export function cpuExpertsPlan(footprint) {
  const plan = planOffload(footprint, { gpu: 1e15, hostRam: 1e15 });
  for (const layer of plan.layers) {
    layer.host = [...layer.gpu, ...layer.host].sort((a, b) => a - b);
    layer.gpu = [];
    layer.reason = "benchmark: every routed expert on the CPU";
  }
  return plan;
}

/** Per stream count of `streams`, the round of `rounds` ({ streams, decodeTokensPerSecond }) that decoded fastest. */
export function fastestRounds(rounds, streams) {
  return streams.map((count) =>
    rounds
      .filter((r) => r.streams === count)
      .reduce((a, b) => (b.decodeTokensPerSecond > a.decodeTokensPerSecond ? b : a)),
  );
}
