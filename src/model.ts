/**
 * loadModel() and Model: a GGUF model loaded into the native engine.
 * @module
 */
import { BloomeryError } from "./errors.js";
import { callNative, callNativeAsync, type NativeLoadOptions, type NativeModelHandle } from "./native.js";
import { Session } from "./session.js";
import { openTokenizer, type DetokenizeOptions, type TokenizeOptions, type Tokenizer } from "./tokenizer.js";
import { ChatTemplate, type ApplyChatTemplateOptions, type ChatMessage } from "./chat/template.js";
import { readGgufInfo } from "./gguf/read.js";

/** Where {@link loadModel} puts the model on a GPU: the device index (default 0) and the device memory it may use. */
export interface GpuOptions {
  device?: number;
  /** Bytes, or a size such as `"8GiB"` or `"512MB"` (default: the card's free memory). */
  budget?: number | string;
}

/** Options of {@link loadModel}. */
export interface LoadModelOptions {
  /**
   * `false` or left out: run on the CPU. `"auto"` or `{ device?, budget? }`: the whole model on the GPU;
   * loadModel refuses (GPU_UNAVAILABLE, INSUFFICIENT_MEMORY naming each term) rather than fall back to the CPU.
   */
  gpu?: false | "auto" | GpuOptions;
  /** Threads of the CPU backend (default: one per physical core). */
  threads?: number;
  /** Tokens each session holds (default: the model's trained context, at most 4096). */
  contextSize?: number;
  /**
   * Sequences decoded together (default 2): the scheduler thread runs the next tokens of up to
   * this many generating or evaluating sessions in one forward pass, so each weight is read once
   * for all of them; further sessions wait in the order they asked. On the CPU the sequences
   * share every matrix product; a GPU model runs them one after another within each step (not
   * batched yet).
   */
  parallel?: number;
  /** A Jinja chat template to use instead of the file's `tokenizer.chat_template`. */
  chatTemplate?: string;
}

/** What a loaded model is. */
export interface ModelInfo {
  /** `general.architecture`: qwen3moe, qwen3, qwen2 or llama. */
  architecture: string;
  layers: number;
  embeddingLength: number;
  vocabSize: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  /** Routed experts per layer (0 for a dense model). */
  experts: number;
  /** Experts each token uses. */
  expertsUsed: number;
  /** The context the model was trained for. */
  contextLength: number;
  /** Tokens each session holds. */
  contextSize: number;
  threads: number;
  /** Sequences decoded together (`LoadModelOptions.parallel`). */
  parallel: number;
  /** Whether the whole model runs on the GPU. */
  gpu: boolean;
  /** Beginning- and end-of-sequence tokens (-1 when the model names none). */
  bosToken: number;
  eosToken: number;
  /** Bytes of weights per ggml type, e.g. `{ Q4_K: ..., Q6_K: ..., F32: ... }`. */
  quantMix: Record<string, number>;
  /** Bytes of all weights. */
  bytes: number;
  /** The chat template stored in the file (`tokenizer.chat_template`), if any. */
  chatTemplate?: string;
}

/** A snapshot of {@link Model.stats}: the scheduler's work since the model was loaded. */
export interface ModelStats {
  /** Prompt (and `evaluate`) tokens run. */
  promptTokens: number;
  /** Generated tokens fed back, one row each. */
  decodeTokens: number;
  /** Wall time of the passes that ran prompt tokens. */
  promptSeconds: number;
  /** Wall time of the passes that ran generated tokens (a pass with both kinds counts in both). */
  decodeSeconds: number;
  /** promptTokens / promptSeconds. */
  promptTokensPerSecond: number;
  /** decodeTokens / decodeSeconds: the total decode rate of all streams together. */
  decodeTokensPerSecond: number;
  /** Sequences running now: at most `info.parallel`. */
  activeSequences: number;
  /** Sequences waiting for a place, served in the order they asked. */
  waitingSequences: number;
  /** Forward passes run. */
  passes: number;
  /** Token rows per pass, on average. */
  meanRowsPerPass: number;
  /** Sessions per pass, on average: above 1 when streams shared passes. */
  meanSequencesPerPass: number;
}

/** What loadModel reads from the file besides the engine's view. @internal */
type FileFacts = Pick<ModelInfo, "quantMix" | "bytes" | "chatTemplate">;

/** A loaded model. Create sessions from it; dispose() frees it and every session it made. */
export class Model {
  #handle: NativeModelHandle | undefined;
  readonly #sessions = new Set<Session>();
  /** What the model is and how it runs. */
  readonly info: ModelInfo;

  readonly #tokenizer: Tokenizer;
  readonly #chatTemplate: ChatTemplate | undefined;

  /** @internal */
  constructor(handle: NativeModelHandle, tokenizer: Tokenizer, facts: FileFacts) {
    this.#handle = handle;
    this.#tokenizer = tokenizer;
    this.#chatTemplate = facts.chatTemplate === undefined ? undefined : new ChatTemplate(facts.chatTemplate);
    this.info = Object.freeze({ ...callNative((a) => a.modelInfo(handle)), ...facts });
  }

  /**
   * The prompt text for a conversation, rendered with the model's chat template. Throws
   * BloomeryError CHAT_TEMPLATE when the file has no template or it fails.
   */
  applyChatTemplate(messages: readonly ChatMessage[], options: ApplyChatTemplateOptions = {}): string {
    this.#live();
    if (!this.#chatTemplate) {
      throw new BloomeryError("CHAT_TEMPLATE", "the model file has no chat template (tokenizer.chat_template)");
    }
    const text = (token: number) => (token < 0 ? "" : this.#tokenizer.detokenize([token], { special: true }));
    return this.#chatTemplate.render(
      messages,
      { bosToken: text(this.info.bosToken), eosToken: text(this.info.eosToken) },
      options,
    );
  }

  /**
   * The tokens of `text`. Special-token text (e.g. `<|im_start|>`) becomes its token only
   * with `special: true`; `addSpecial: true` adds the BOS/EOS tokens the model asks for.
   */
  tokenize(text: string, options: TokenizeOptions = {}): Uint32Array {
    this.#live();
    return this.#tokenizer.tokenize(text, options);
  }

  /** The text of `tokens`; special tokens are rendered only with `special: true`. */
  detokenize(tokens: ArrayLike<number>, options: DetokenizeOptions = {}): string {
    this.#live();
    return this.#tokenizer.detokenize(tokens, options);
  }

  /** True once {@link dispose} ran. */
  get disposed(): boolean {
    return this.#handle === undefined;
  }

  /** A new session with an empty context of `info.contextSize` tokens. */
  createSession(): Session {
    const handle = this.#live();
    const session = new Session(
      callNative((a) => a.createSession(handle)),
      {
        eosToken: this.info.eosToken,
        tokenizer: this.#tokenizer,
        sessionClosed: (s) => this.#sessions.delete(s),
      },
    );
    this.#sessions.add(session);
    return session;
  }

  /**
   * What the scheduler has done since the model was loaded, and what it is doing now. Counters
   * only grow; compare two snapshots for the rates of a period.
   */
  stats(): ModelStats {
    const handle = this.#live();
    const s = callNative((a) => a.modelStats(handle));
    return {
      promptTokens: s.promptTokens,
      decodeTokens: s.decodeTokens,
      promptSeconds: s.promptSeconds,
      decodeSeconds: s.decodeSeconds,
      promptTokensPerSecond: s.promptSeconds > 0 ? s.promptTokens / s.promptSeconds : 0,
      decodeTokensPerSecond: s.decodeSeconds > 0 ? s.decodeTokens / s.decodeSeconds : 0,
      activeSequences: s.active,
      waitingSequences: s.waiting,
      passes: s.passes,
      meanRowsPerPass: s.passes > 0 ? s.rows / s.passes : 0,
      meanSequencesPerPass: s.passes > 0 ? s.sequenceRows / s.passes : 0,
    };
  }

  /** Disposes every session of the model, then frees the model. Later calls throw BloomeryError DISPOSED. */
  dispose(): void {
    if (!this.#handle) return;
    for (const session of [...this.#sessions]) session.dispose();
    const handle = this.#handle;
    this.#handle = undefined;
    callNative((a) => a.disposeModel(handle));
  }

  #live(): NativeModelHandle {
    if (!this.#handle) throw new BloomeryError("DISPOSED", "the model has been disposed");
    return this.#handle;
  }
}

const SIZE_UNITS: Record<string, number> = {
  "": 1,
  B: 1,
  KB: 1e3,
  MB: 1e6,
  GB: 1e9,
  TB: 1e12,
  KIB: 1024,
  MIB: 1024 ** 2,
  GIB: 1024 ** 3,
  TIB: 1024 ** 4,
};

/** Bytes of a size given as a number or as text such as "8GiB". */
function parseBytes(size: number | string, what: string): number {
  const match = typeof size === "string" ? /^\s*([\d.]+)\s*([a-z]*)\s*$/i.exec(size) : null;
  const unit = match ? SIZE_UNITS[(match[2] ?? "").toUpperCase()] : undefined;
  const bytes = typeof size === "number" ? size : match && unit !== undefined ? Number(match[1]) * unit : NaN;
  if (!Number.isFinite(bytes) || bytes < 1) {
    throw new BloomeryError("INVALID_ARGUMENT", `${what} must be a positive number of bytes or a size like "8GiB"`, {
      [what]: size,
    });
  }
  return Math.floor(bytes);
}

/** The addon's view of the gpu option: undefined runs on the CPU. */
function resolveGpu(gpu: LoadModelOptions["gpu"]): NativeLoadOptions["gpu"] {
  if (gpu === undefined || gpu === false) return undefined;
  if (gpu === "auto") return {};
  if (typeof gpu !== "object" || gpu === null) {
    throw new BloomeryError("INVALID_ARGUMENT", 'gpu must be false, "auto" or { device?, budget? }', { gpu });
  }
  const out: NonNullable<NativeLoadOptions["gpu"]> = {};
  if (gpu.device !== undefined) {
    if (!Number.isInteger(gpu.device) || gpu.device < 0) {
      throw new BloomeryError("INVALID_ARGUMENT", "gpu.device must be a non-negative integer", { device: gpu.device });
    }
    out.device = gpu.device;
  }
  if (gpu.budget !== undefined) out.budget = parseBytes(gpu.budget, "gpu.budget");
  return out;
}

/**
 * Loads a GGUF model (qwen3moe, qwen3, qwen2 or llama) for inference on the CPU, or with `gpu`
 * set, wholly on a GPU (GPU weight types: Q4_K, Q6_K, Q8_0, F16, F32). Throws GPU_UNAVAILABLE
 * (no usable CUDA device, saying why), INSUFFICIENT_MEMORY, UNSUPPORTED_QUANT (a tensor type
 * without a GPU kernel), and like the CPU path BloomeryError UNSUPPORTED_ARCH, UNSUPPORTED_QUANT
 * (naming the tensor), MODEL_MISSING_TENSOR,
 * MODEL_TENSOR_SHAPE, MODEL_BAD_METADATA, CONTEXT_TOO_LONG (a contextSize beyond the model's
 * trained context), or the GGUF reader's codes.
 */
export async function loadModel(path: string, options: LoadModelOptions = {}): Promise<Model> {
  for (const key of ["threads", "contextSize", "parallel"] as const) {
    const value = options[key];
    if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
      throw new BloomeryError("INVALID_ARGUMENT", `${key} must be a positive integer`, { [key]: value });
    }
  }
  const nativeOptions: NativeLoadOptions = {};
  if (options.threads !== undefined) nativeOptions.threads = options.threads;
  if (options.contextSize !== undefined) nativeOptions.contextSize = options.contextSize;
  if (options.parallel !== undefined) nativeOptions.parallel = options.parallel;
  const gpu = resolveGpu(options.gpu);
  if (gpu) nativeOptions.gpu = gpu;
  const file = await readGgufInfo(path);
  const facts: FileFacts = { quantMix: file.summary.bytesByType, bytes: file.summary.tensorBytes };
  const template = options.chatTemplate ?? file.metadata["tokenizer.chat_template"];
  if (typeof template === "string") facts.chatTemplate = template;
  const handle = await callNativeAsync((a) => a.loadModel(path, nativeOptions));
  try {
    return new Model(handle, openTokenizer(path), facts);
  } catch (error) {
    callNative((a) => a.disposeModel(handle));
    throw error;
  }
}
