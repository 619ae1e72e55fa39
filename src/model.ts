/**
 * loadModel() and Model: a GGUF model loaded into the native engine.
 * @module
 */
import { BloomeryError } from "./errors.js";
import { callNative, callNativeAsync, type NativeModelHandle } from "./native.js";
import { Session } from "./session.js";
import { openTokenizer, type DetokenizeOptions, type TokenizeOptions, type Tokenizer } from "./tokenizer.js";

/** Options of {@link loadModel}. */
export interface LoadModelOptions {
  /** `false`: run on the CPU. The CPU is the only backend so far, so leaving it out does the same. */
  gpu?: false;
  /** Threads of the CPU backend (default: one per physical core). */
  threads?: number;
  /** Tokens each session holds (default: the model's trained context, at most 4096). */
  contextSize?: number;
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
  /** Beginning- and end-of-sequence tokens (-1 when the model names none). */
  bosToken: number;
  eosToken: number;
}

/** A loaded model. Create sessions from it; dispose() frees it and every session it made. */
export class Model {
  #handle: NativeModelHandle | undefined;
  readonly #sessions = new Set<Session>();
  /** What the model is and how it runs. */
  readonly info: ModelInfo;

  readonly #tokenizer: Tokenizer;

  /** @internal */
  constructor(handle: NativeModelHandle, tokenizer: Tokenizer) {
    this.#handle = handle;
    this.#tokenizer = tokenizer;
    this.info = Object.freeze(callNative((a) => a.modelInfo(handle)));
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
        contextSize: this.info.contextSize,
        eosToken: this.info.eosToken,
        tokenizer: this.#tokenizer,
        sessionClosed: (s) => this.#sessions.delete(s),
      },
    );
    this.#sessions.add(session);
    return session;
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

/**
 * Loads a GGUF model (qwen3moe, qwen3, qwen2 or llama) for inference on the CPU. Throws
 * BloomeryError UNSUPPORTED_ARCH, UNSUPPORTED_QUANT (naming the tensor), MODEL_MISSING_TENSOR,
 * MODEL_TENSOR_SHAPE, MODEL_BAD_METADATA, CONTEXT_TOO_LONG (a contextSize beyond the model's
 * trained context), or the GGUF reader's codes.
 */
export async function loadModel(path: string, options: LoadModelOptions = {}): Promise<Model> {
  if (options.gpu !== undefined && options.gpu !== false) {
    throw new BloomeryError("INVALID_ARGUMENT", "only the CPU backend exists so far: pass gpu: false or leave it out", {
      gpu: options.gpu,
    });
  }
  for (const key of ["threads", "contextSize"] as const) {
    const value = options[key];
    if (value !== undefined && (!Number.isInteger(value) || value < 1)) {
      throw new BloomeryError("INVALID_ARGUMENT", `${key} must be a positive integer`, { [key]: value });
    }
  }
  const nativeOptions: { threads?: number; contextSize?: number } = {};
  if (options.threads !== undefined) nativeOptions.threads = options.threads;
  if (options.contextSize !== undefined) nativeOptions.contextSize = options.contextSize;
  const handle = await callNativeAsync((a) => a.loadModel(path, nativeOptions));
  try {
    return new Model(handle, openTokenizer(path));
  } catch (error) {
    callNative((a) => a.disposeModel(handle));
    throw error;
  }
}
