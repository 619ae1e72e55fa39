/**
 * loadModel() and Model: a GGUF model loaded into the native engine.
 * @module
 */
import { BloomeryError } from "./errors.js";
import { callNative, callNativeAsync, type NativeModelHandle } from "./native.js";
import { Session } from "./session.js";
import { openTokenizer, type DetokenizeOptions, type TokenizeOptions, type Tokenizer } from "./tokenizer.js";
import { ChatTemplate, type ApplyChatTemplateOptions, type ChatMessage } from "./chat/template.js";
import { readGgufInfo } from "./gguf/read.js";

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
  /** Bytes of weights per ggml type, e.g. `{ Q4_K: ..., Q6_K: ..., F32: ... }`. */
  quantMix: Record<string, number>;
  /** Bytes of all weights. */
  bytes: number;
  /** The chat template stored in the file (`tokenizer.chat_template`), if any. */
  chatTemplate?: string;
}

/** What loadModel reads from the file besides the engine's view. @internal */
interface FileFacts {
  quantMix: Record<string, number>;
  bytes: number;
  chatTemplate?: string;
}

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
  const file = await readGgufInfo(path);
  const facts: FileFacts = { quantMix: file.summary.bytesByType, bytes: file.summary.tensorBytes };
  const template = file.metadata["tokenizer.chat_template"];
  if (typeof template === "string") facts.chatTemplate = template;
  const handle = await callNativeAsync((a) => a.loadModel(path, nativeOptions));
  try {
    return new Model(handle, openTokenizer(path), facts);
  } catch (error) {
    callNative((a) => a.disposeModel(handle));
    throw error;
  }
}
