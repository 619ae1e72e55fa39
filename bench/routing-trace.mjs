// Routing traces for benchmarks (bench/traces/*.json.gz): which experts a model's routers chose,
// token by token, over held-out text and its own generations (bench/record-routing.mjs writes
// them), and what that routing looks like to a cache of experts.
//
// A trace file is gzipped JSON:
//   format      "bloomery-routing-trace/1"
//   model       { name, architecture, layers, experts, expertsUsed, moeLayers: [layer indices] }
//   recorded    how: date, command, placement, sampling
//   segments    [{ kind: "prompt" | "generation", steps }] in order, their steps summing to `steps`
//   steps       the tokens traced, one decode step each
//   choices     base64 of a Uint8Array (Uint16Array, little-endian, above 256 experts) of
//               steps x moeLayers.length x expertsUsed expert ids, each layer's ascending
//   statistics  routingStatistics() of the trace
// A step is one token evaluated alone, so each MoE layer chose exactly expertsUsed experts.
import { gunzipSync, gzipSync } from "node:zlib";
import { readFileSync, writeFileSync } from "node:fs";

export const TRACE_FORMAT = "bloomery-routing-trace/1";

/** The benchmark-only door of a Model (src/model.ts REPLAY_ROUTING): routing replayed from a trace. */
const REPLAY_ROUTING = Symbol.for("bloomery.bench.replayRouting");

/**
 * Makes `model`'s passes route each token as the trace's next step did (docs/DESIGN.md: measuring residency on
 * real routing); throws when the trace routes another number of experts.
 */
export function replayTrace(model, file) {
  const { experts, expertsUsed } = model.info;
  if (file.model.experts !== experts || file.model.expertsUsed !== expertsUsed) {
    throw new Error(
      `the trace routes ${file.model.expertsUsed} of ${file.model.experts} experts, the model ${expertsUsed} of ${experts}`,
    );
  }
  model[REPLAY_ROUTING]({ layers: Int32Array.from(file.model.moeLayers), ids: Int32Array.from(file.choices) });
}

/**
 * The choices of model.traceRouting().stop()'s steps: each step must hold one token (every MoE
 * layer's counts are 0 or 1 and sum to expertsUsed; dense layers count nothing).
 */
export function choicesOf(trace, expertsUsed) {
  const { layers, experts, steps } = trace;
  const moeLayers = [];
  for (let l = 0; l < layers; ++l) {
    if (steps.some((s) => s.subarray(l * experts, (l + 1) * experts).some((n) => n > 0))) moeLayers.push(l);
  }
  const Ids = experts > 256 ? Uint16Array : Uint8Array;
  const choices = new Ids(steps.length * moeLayers.length * expertsUsed);
  let at = 0;
  steps.forEach((step, t) => {
    for (const l of moeLayers) {
      let chosen = 0;
      for (let e = 0; e < experts; ++e) {
        const n = step[l * experts + e];
        if (n === 0) continue;
        if (n !== 1 || chosen === expertsUsed) throw new Error(`step ${t} layer ${l}: not one token's routing`);
        choices[at++] = e;
        chosen++;
      }
      if (chosen !== expertsUsed) throw new Error(`step ${t} layer ${l}: ${chosen} experts, not ${expertsUsed}`);
    }
  });
  return { moeLayers, choices };
}

export function writeTrace(path, file) {
  const { choices, ...rest } = file;
  const bytes = Buffer.from(choices.buffer, choices.byteOffset, choices.byteLength);
  writeFileSync(path, gzipSync(JSON.stringify({ ...rest, choices: bytes.toString("base64") }), { level: 9 }));
}

export function readTrace(path) {
  const file = JSON.parse(gunzipSync(readFileSync(path)).toString("utf8"));
  if (file.format !== TRACE_FORMAT) throw new Error(`${path}: not a ${TRACE_FORMAT} file`);
  const bytes = Buffer.from(file.choices, "base64");
  const Ids = file.model.experts > 256 ? Uint16Array : Uint8Array;
  const copy = new Uint8Array(bytes);
  file.choices = new Ids(copy.buffer, 0, copy.byteLength / Ids.BYTES_PER_ELEMENT);
  const expected = file.steps * file.model.moeLayers.length * file.model.expertsUsed;
  if (file.choices.length !== expected)
    throw new Error(`${path}: ${file.choices.length} choices, expected ${expected}`);
  return file;
}

function median(sorted) {
  if (sorted.length === 0) return null;
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * What the routing looks like to an expert cache, per MoE layer and as means over them:
 *   topQuarterShare  share of the layer's calls that went to its 25 % most-called experts (uniform
 *                    routing: 0.25; the random-weight benchmark file: ~0.77)
 *   entropy          the entropy of the layer's calls over its experts, over log(experts) (uniform: 1)
 *   reuse            per call, the steps since the layer last called that expert: the median, the
 *                    share of calls made in the step before too (distance 1), within 16 steps,
 *                    and of first calls (never called before in the trace)
 */
export function routingStatistics({ model, steps, choices }) {
  const { experts, expertsUsed } = model;
  const layers = model.moeLayers.length;
  const perLayer = [];
  for (let l = 0; l < layers; ++l) {
    const calls = new Float64Array(experts);
    const last = new Int32Array(experts).fill(-1);
    const distances = [];
    let first = 0;
    for (let t = 0; t < steps; ++t) {
      const base = (t * layers + l) * expertsUsed;
      for (let k = 0; k < expertsUsed; ++k) {
        const e = choices[base + k];
        calls[e]++;
        if (last[e] < 0) first++;
        else distances.push(t - last[e]);
        last[e] = t;
      }
    }
    const total = steps * expertsUsed;
    const sorted = [...calls].sort((a, b) => b - a);
    const quarter = sorted.slice(0, Math.max(1, Math.round(experts / 4))).reduce((a, b) => a + b, 0);
    let entropy = 0;
    for (const c of calls) if (c > 0) entropy -= (c / total) * Math.log(c / total);
    distances.sort((a, b) => a - b);
    const within = (d) => distances.filter((x) => x <= d).length / total;
    perLayer.push({
      topQuarterShare: quarter / total,
      entropy: entropy / Math.log(experts),
      reuse: { median: median(distances), nextStep: within(1), within16: within(16), firstCalls: first / total },
    });
  }
  const mean = (f) => perLayer.reduce((a, s) => a + f(s), 0) / perLayer.length;
  const range = (f) => [Math.min(...perLayer.map(f)), Math.max(...perLayer.map(f))];
  return {
    steps,
    topQuarterShare: { mean: mean((s) => s.topQuarterShare), range: range((s) => s.topQuarterShare) },
    entropy: { mean: mean((s) => s.entropy), range: range((s) => s.entropy) },
    reuse: {
      median: mean((s) => s.reuse.median ?? 0),
      nextStep: mean((s) => s.reuse.nextStep),
      within16: mean((s) => s.reuse.within16),
      firstCalls: mean((s) => s.reuse.firstCalls),
    },
    perLayer,
  };
}

/** Routing drawn uniformly (each step's experts a random set of expertsUsed), the reference at one end. */
export function uniformChoices(model, steps, seed = 1) {
  let state = seed >>> 0 || 1;
  const next = () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 2 ** 32;
  };
  const layers = model.moeLayers.length;
  const Ids = model.experts > 256 ? Uint16Array : Uint8Array;
  const choices = new Ids(steps * layers * model.expertsUsed);
  const pool = Array.from({ length: model.experts }, (_, e) => e);
  for (let i = 0; i < steps * layers; ++i) {
    for (let k = 0; k < model.expertsUsed; ++k) {
      const j = k + Math.floor(next() * (model.experts - k));
      [pool[k], pool[j]] = [pool[j], pool[k]];
    }
    const picked = pool.slice(0, model.expertsUsed).sort((a, b) => a - b);
    choices.set(picked, i * model.expertsUsed);
  }
  return choices;
}
