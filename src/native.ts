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
import type { ModelInfo } from "./model.js";

/** An opaque handle to a loaded model (native/addon/model.cc). */
export type NativeModelHandle = { readonly __nativeHandle: "model" };
/** An opaque handle to a session's native state. */
export type NativeSessionHandle = { readonly __nativeHandle: "session" };
/** An opaque handle to one generation's sampler (native/addon/sampling.cc). */
export type NativeSamplerHandle = { readonly __nativeHandle: "sampler" };

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
  /** How many alternatives samplerLogprobs reports; left out: logprobs off. */
  logprobs?: number;
}

/** What samplerLogprobs() returns: the drawn token and the most likely ones, log-softmax of the raw logits. */
export interface RawDrawLogprobs {
  token: number;
  logprob: number;
  top: { token: number; logprob: number }[];
}

/** What modelInfo() returns: the engine's part of ModelInfo (loadModel adds what it reads from the file). */
export type RawModelInfo = Omit<ModelInfo, "quantMix" | "bytes" | "chatTemplate">;

/** What loadModel() passes to the addon: `gpu` set runs the whole model on that device. */
export interface NativeLoadOptions {
  threads?: number;
  contextSize?: number;
  gpu?: { device?: number; budget?: number };
}

/** The functions the addon exports (native/addon). */
export interface NativeAddon {
  getSystemInfo(): SystemInfo;
  ggmlTypes(): GgmlTypeInfo[];
  readGgufInfo(path: string): Promise<RawGgufInfo>;
  loadModel(path: string, options: NativeLoadOptions): Promise<NativeModelHandle>;
  modelInfo(model: NativeModelHandle): RawModelInfo;
  disposeModel(model: NativeModelHandle): void;
  createSession(model: NativeModelHandle): NativeSessionHandle;
  sessionEvaluate(session: NativeSessionHandle, tokens: Int32Array, allLogits: boolean): Promise<Float32Array>;
  sessionReset(session: NativeSessionHandle): void;
  sessionPosition(session: NativeSessionHandle): number;
  disposeSession(session: NativeSessionHandle): void;
  createSampler(options: NativeSamplerOptions, tokenizer?: NativeTokenizer): NativeSamplerHandle;
  /** The last draw's log-probabilities; null when the sampler was made without `logprobs`. */
  samplerLogprobs(sampler: NativeSamplerHandle): RawDrawLogprobs | null;
  /** Evaluates `tokens`, adds them to the sampler's history, and draws the next token. */
  sessionSample(session: NativeSessionHandle, tokens: Int32Array, sampler: NativeSamplerHandle): Promise<number>;
  disposeSampler(sampler: NativeSamplerHandle): void;
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
  tokenize(text: string, addSpecial: boolean, parseSpecial: boolean): Uint32Array;
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
