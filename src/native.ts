/**
 * The one place that loads the native addon (prebuilds/ or build/, through node-gyp-build).
 * Everything else asks {@link native} for it, so a missing or broken build fails in one
 * clear way.
 * @internal
 * @module
 */
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { BloomeryError, fromNativeError } from "./errors.js";
import type { RawGgufInfo } from "./gguf/types.js";
import type { SystemInfo, GgmlTypeInfo } from "./system.js";
import type { LoadStep, ModelInfo, OffloadTimes } from "./model.js";
import type { ModelFootprint } from "./plan.js";
import type { Pooling } from "./embeddings.js";
import type { NativeDraftOptions } from "./draft.js";

/** An opaque handle to a loaded model (native/addon/model.cc). */
export type NativeModelHandle = { readonly __nativeHandle: "model" };
/** An opaque handle to a session's native state. */
export type NativeSessionHandle = { readonly __nativeHandle: "session" };
/** An opaque handle to one generation's sampler (native/addon/sampling.cc). */
export type NativeSamplerHandle = { readonly __nativeHandle: "sampler" };
/** An opaque handle to a saved session state (native/addon/state.cc). */
export type NativeStateHandle = { readonly __nativeHandle: "state" };
/** An opaque handle to a running generation (native/addon/generation.cc). */
export type NativeGenerationHandle = { readonly __nativeHandle: "generation" };

/** Where a native generation's time went (native/engine/scheduler.h GenerationTimings). */
export interface NativeGenerationTimings {
  promptTokens: number;
  cachedPromptTokens: number;
  promptCacheHit: boolean;
  promptMs: number;
  decodeTokens: number;
  decodeMs: number;
  discardedTokens: number;
  draftTokens: number;
  draftAccepted: number;
}

/** What a native generation tells its listener: each token, then its end, once. */
export type NativeGenerationEvent =
  | { token: number; logprobs?: RawDrawLogprobs; timings: NativeGenerationTimings }
  | {
      end: "eos" | "maxTokens" | "contextFull" | "abort";
      timings: NativeGenerationTimings;
      error?: Error;
    };

/**
 * The scheduler's counters (native/engine/scheduler.h SchedulerStats), and where a model on the
 * GPU spent its hybrid passes' time (zeros without host experts; null on the CPU).
 */
export interface NativeModelStats {
  promptTokens: number;
  decodeTokens: number;
  promptSeconds: number;
  decodeSeconds: number;
  passes: number;
  decodePasses: number;
  draftTokens: number;
  draftAccepted: number;
  draftPasses: number;
  rows: number;
  sequenceRows: number;
  widestPass: number;
  active: number;
  waiting: number;
  offload: OffloadTimes | null;
  residency: {
    gpuCalls: number;
    hostCalls: number;
    diskCalls: number;
    steps: number;
    moves: number;
    adaptive: boolean;
  };
  disk: NativeDiskTierStats | null;
}

/** The disk tier's counters (engine::ArenaStats). */
export interface NativeDiskTierStats {
  slots: number;
  slotBytes: number;
  hits: number;
  misses: number;
  readAhead: number;
  bytesRead: number;
  readSeconds: number;
  waitSeconds: number;
  directIo: boolean;
}

/** What createSampler() reads; left-out settings take the engine's defaults (native/engine/sampler.h). */
export interface NativeSamplerOptions {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repeatPenalty?: number;
  repeatLastN?: number;
  presencePenalty?: number;
  frequencyPenalty?: number;
  seed?: number;
  biasTokens?: Int32Array;
  biasValues?: Float32Array;
  /** GBNF text; needs createSampler's tokenizer. */
  grammar?: string;
  /** Words from whose first appearance on the grammar holds (a lazy grammar); none: it holds throughout. */
  grammarTriggers?: string[];
  /** How many alternatives each generated token's logprobs report; left out: logprobs off. */
  logprobs?: number;
  /** true: the logprobs are those of the draw's own distribution (SamplingOptions.logprobsAfterSampling). */
  logprobsAfterSampling?: boolean;
}

/** A drawn token's log-probabilities: it and the most likely ones, log-softmax of the raw logits. */
export interface RawDrawLogprobs {
  token: number;
  logprob: number;
  top: { token: number; logprob: number }[];
}

/** What modelInfo() returns: the engine's part of ModelInfo (loadModel adds what it reads from the file). */
export type RawModelInfo = Omit<ModelInfo, "quantMix" | "bytes" | "chatTemplate" | "rankTemplate">;

/**
 * What loadModel() passes to the addon: `gpu` set runs the model on that device, with
 * `experts` (per layer, the expert ids resident there; left out: all) on the GPU and the
 * other routed experts on the CPU.
 */
export interface NativeLoadOptions {
  threads?: number;
  contextSize?: number;
  parallel?: number;
  gpu?: { device?: number; budget?: number; experts?: number[][] };
  /** Bytes of the prompt-state cache; 0 or left out: no cache. */
  cacheRam?: number;
  /** false: read the file into private memory instead of mapping it. */
  mmap?: boolean;
  /** Lock the model's bytes in RAM. */
  mlock?: boolean;
  /** "adaptive" (default) or "static": whether experts move between the GPU and host RAM as routing asks. */
  residency?: "adaptive" | "static";
  /** The disk tier: per layer, the experts paged from the file, through an arena of arenaBytes. */
  disk?: { experts: number[][]; arenaBytes: number };
  /** The file of a draft model (engine::DraftModel). */
  draftModel?: string;
  /** Runs draft with the model's MTP layer by default: refused at load where it cannot (engine::check_mtp_drafts). */
  mtpDrafts?: boolean;
}

/** The functions the addon exports (native/addon). */
export interface NativeAddon {
  getSystemInfo(): SystemInfo;
  /** getSystemInfo().memory, without querying the GPUs. */
  hostMemory(): SystemInfo["memory"];
  ggmlTypes(): GgmlTypeInfo[];
  readGgufInfo(path: string): Promise<RawGgufInfo>;
  /**
   * Loads the model off the JS thread. `onProgress` hears each weight-moving step's bytes (see LoadStep), many
   * times per step, then `("done", 0, 0)` after the last: reports can trail the promise.
   */
  loadModel(
    path: string,
    options: NativeLoadOptions,
    onProgress?: (step: LoadStep | "done", done: number, total: number) => void,
  ): Promise<NativeModelHandle>;
  modelInfo(model: NativeModelHandle): RawModelInfo;
  disposeModel(model: NativeModelHandle): void;
  /** The device memory terms of the model at `path` (contextSize 0: the default). */
  gpuFootprint(path: string, contextSize: number): Promise<ModelFootprint>;
  /** The footprint of the model at `path` on the CPU: its routed experts and the arena slot size; device terms 0. */
  hostFootprint(path: string, contextSize: number): Promise<ModelFootprint>;
  modelStats(model: NativeModelHandle): NativeModelStats;
  /** The decaying routing counts, layer after layer (layers * experts). */
  modelRoutingCounts(model: NativeModelHandle): Float64Array;
  /** [layer, slot, evicted, seated] per expert swap begun since the last call. */
  modelTakeMoves(model: NativeModelHandle): Int32Array;
  /** Starts (on) or stops keeping each step's routed calls; returns those kept so far. */
  modelRoutingTrace(model: NativeModelHandle, on: boolean): Uint32Array[];
  /** Benchmarks only (src/model.ts REPLAY_ROUTING): each MoE layer's experts from `ids`; null: the routers again. */
  modelReplayRouting(model: NativeModelHandle, layers: Int32Array | null, ids?: Int32Array): void;
  createSession(model: NativeModelHandle): NativeSessionHandle;
  sessionEvaluate(session: NativeSessionHandle, tokens: Int32Array, allLogits: boolean): Promise<Float32Array>;
  /** Appends `tokens` and resolves to their hidden states pooled by `pooling` (native/engine/pooling.h). */
  sessionEmbed(session: NativeSessionHandle, tokens: Int32Array, pooling: Pooling): Promise<Float32Array>;
  sessionReset(session: NativeSessionHandle): void;
  sessionPosition(session: NativeSessionHandle): number;
  disposeSession(session: NativeSessionHandle): void;
  /** The MTP layer's logits at `token` appended to the session's context, from its MTP rows (tests). */
  sessionMtpLogits(session: NativeSessionHandle, token: number): Float32Array;
  /** The MTP layer's logits after `tokens`, evaluated afresh in one pass each (tests: engine::mtp_reference_logits). */
  modelMtpReferenceLogits(model: NativeModelHandle, tokens: Int32Array): Float32Array;
  createSampler(options: NativeSamplerOptions, tokenizer?: NativeTokenizer): NativeSamplerHandle;
  /** The same with the grammar parsed on a worker thread; the settings are checked at once (thrown). */
  createSamplerAsync(options: NativeSamplerOptions, tokenizer?: NativeTokenizer): Promise<NativeSamplerHandle>;
  /**
   * Starts a generation on the model's scheduler thread: `prompt` replaces the context (the prefix
   * the context or the prompt-state cache holds already is kept), the rest is evaluated, then up
   * to `maxTokens` tokens are drawn, calling `listener` on the JS thread with each and then with the end.
   */
  sessionGenerate(
    session: NativeSessionHandle,
    prompt: Int32Array,
    sampler: NativeSamplerHandle,
    maxTokens: number,
    listener: (event: NativeGenerationEvent) => void,
    /** A full context shifts, keeping this many tokens (-1: it ends the generation). */
    shiftKeep?: number,
    draft?: NativeDraftOptions,
    /** false: the whole prompt is evaluated, nothing of it reused (default true). */
    reusePrefix?: boolean,
  ): NativeGenerationHandle;
  /** Ends a generation at once; the session keeps the prompt and `keptTokens - 1` drawn tokens (none of it for 0). */
  generationCancel(generation: NativeGenerationHandle, keptTokens: number): void;
  disposeSampler(sampler: NativeSamplerHandle): void;
  sessionSave(session: NativeSessionHandle): Promise<NativeStateHandle>;
  sessionSaveFile(session: NativeSessionHandle, path: string): Promise<void>;
  sessionRestore(session: NativeSessionHandle, state: NativeStateHandle): Promise<void>;
  sessionRestoreFile(session: NativeSessionHandle, path: string): Promise<void>;
  sessionFork(session: NativeSessionHandle): Promise<NativeSessionHandle>;
  stateTokens(state: NativeStateHandle): Int32Array;
  stateBytes(state: NativeStateHandle): number;
  /** Stores the session's state in the prompt-state cache; false when the cache cannot take it. */
  sessionStoreInCache(session: NativeSessionHandle): Promise<boolean>;
  NativeTokenizer: new (path: string) => NativeTokenizer;
  NativeStreamDecoder: new (tokenizer: NativeTokenizer, special: boolean) => NativeStreamDecoder;
}

/** The vocabulary facts NativeTokenizer.info() reports. */
export interface RawTokenizerInfo {
  model: "gpt2" | "llama";
  size: number;
  bos: number | null;
  eos: number | null;
  eot: number | null;
  addBos: boolean;
  addEos: boolean;
}

/** native/addon/tokenizer.cc: a GGUF file's tokenizer. */
export interface NativeTokenizer {
  /** `text`: a string, or its UTF-8 bytes (checked by the caller: the addon reads them as they are). */
  tokenize(text: string | Uint8Array, addSpecial: boolean, parseSpecial: boolean): Uint32Array;
  /** The same on a worker thread; UTF-8 bytes are read there, and must not change until it settles. */
  tokenizeAsync(text: string | Uint8Array, addSpecial: boolean, parseSpecial: boolean): Promise<Uint32Array>;
  detokenize(tokens: Uint32Array, special: boolean): string;
  info(): RawTokenizerInfo;
}

/** native/addon/tokenizer.cc: detokenizes a token stream, holding back unfinished UTF-8. */
export interface NativeStreamDecoder {
  push(tokens: Uint32Array): string;
  flush(): string;
}

let addon: NativeAddon | undefined;

/** The package root: src/ and dist/ both sit one level below it. */
export function packageRoot(): string {
  return join(dirname(fileURLToPath(import.meta.url)), "..");
}

export function native(): NativeAddon {
  if (addon) return addon;
  const require = createRequire(import.meta.url);
  try {
    const load = require("node-gyp-build") as (dir: string) => unknown;
    addon = load(packageRoot()) as NativeAddon;
  } catch (error) {
    throw new BloomeryError(
      "NATIVE_LOAD",
      `bloomery's native addon could not be loaded (${(error as Error).message}); run \`npm run build:native\``,
      { root: packageRoot() },
      { cause: error },
    );
  }
  return addon;
}

/** Calls into the addon, turning native errors into BloomeryError. */
export function callNative<T>(fn: (addon: NativeAddon) => T): T {
  const a = native();
  try {
    return fn(a);
  } catch (error) {
    throw fromNativeError(error);
  }
}

/** The async variant of {@link callNative}. */
export async function callNativeAsync<T>(fn: (addon: NativeAddon) => Promise<T>): Promise<T> {
  const a = native();
  try {
    return await fn(a);
  } catch (error) {
    throw fromNativeError(error);
  }
}
