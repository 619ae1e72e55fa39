/**
 * The tokenizer of a GGUF file (byte-level BPE or SentencePiece, from its `tokenizer.ggml.*`
 * metadata), giving the same token ids as llama.cpp. {@link Model} delegates to it.
 * @internal
 * @module
 */
import { isUtf8 } from "node:buffer";
import { BloomeryError } from "./errors.js";
import {
  callNative,
  callNativeAsync,
  type NativeStreamDecoder,
  type NativeTokenizer,
  type RawTokenizerInfo,
} from "./native.js";

/** Texts up to this many characters tokenize in well under a millisecond: not worth a worker thread. */
const SYNC_TOKENIZE_CHARS = 8192;

/** Options of {@link Model.tokenize}. */
export interface TokenizeOptions {
  /**
   * Turn the text of control tokens (`<|im_start|>`, `<|eot_id|>`) into those tokens. Off by
   * default, so user text cannot forge them; user-defined tokens (`<think>`) always match.
   */
  special?: boolean;
  /** Add BOS / EOS where the vocabulary asks for them (`tokenizer.ggml.add_bos_token`). Default true. */
  addSpecial?: boolean;
}

/** Options of {@link Model.detokenize}. */
export interface DetokenizeOptions {
  /** Show control tokens as their text; by default they produce no text. */
  special?: boolean;
}

/** A vocabulary's size, special token ids and flags. */
export type TokenizerInfo = RawTokenizerInfo;

/**
 * Detokenizes a stream of tokens as they are generated. {@link push} returns only whole
 * characters: the bytes of a character split over several tokens wait for the rest.
 */
export class StreamDecoder {
  readonly #native: NativeStreamDecoder;

  /** @internal */
  constructor(native: NativeStreamDecoder) {
    this.#native = native;
  }

  /** Adds tokens; returns the text they complete. */
  push(tokens: ArrayLike<number> | number): string {
    const ids = toIds(typeof tokens === "number" ? [tokens] : tokens);
    return callNative(() => this.#native.push(ids));
  }

  /** Ends the stream: returns what was held back (an unfinished character shows as U+FFFD). */
  flush(): string {
    return callNative(() => this.#native.flush());
  }
}

/** Text to token ids and back, for one GGUF file's vocabulary. Create it with {@link openTokenizer}. */
export class Tokenizer {
  readonly #native: NativeTokenizer;
  /** Vocabulary size, BOS/EOS ids, and whether BOS/EOS are added. */
  readonly info: TokenizerInfo;

  /** @internal */
  constructor(native: NativeTokenizer) {
    this.#native = native;
    this.info = callNative(() => native.info());
  }

  /** The addon's tokenizer, for native objects that need the vocabulary (a grammar's sampler). @internal */
  get nativeTokenizer(): NativeTokenizer {
    return this.#native;
  }

  /** The token ids of `text` (a string, or its UTF-8 bytes), computed on this thread. */
  tokenize(text: string | Uint8Array, options: TokenizeOptions = {}): Uint32Array {
    checkText(text);
    return callNative(() => this.#native.tokenize(text, options.addSpecial ?? true, options.special ?? false));
  }

  /**
   * The token ids of `text` (a string, or its UTF-8 bytes), computed on a worker thread of the
   * addon when the text is long (a short one costs less than the trip, and is tokenized at once).
   * Bytes are read there as they are, not copied: leave them unchanged until the promise settles.
   */
  async tokenizeAsync(text: string | Uint8Array, options: TokenizeOptions = {}): Promise<Uint32Array> {
    checkText(text);
    if ((typeof text === "string" ? text.length : text.byteLength) <= SYNC_TOKENIZE_CHARS) {
      return this.tokenize(text, options);
    }
    const addSpecial = options.addSpecial ?? true;
    const special = options.special ?? false;
    return callNativeAsync(() => this.#native.tokenizeAsync(text, addSpecial, special));
  }

  /**
   * The text of `tokens`: for ids that {@link tokenize} produced, the original text. Bytes that
   * do not form whole UTF-8 characters show as U+FFFD; use {@link createDecoder} for streams.
   */
  detokenize(tokens: ArrayLike<number>, options: DetokenizeOptions = {}): string {
    const ids = toIds(tokens);
    return callNative(() => this.#native.detokenize(ids, options.special ?? false));
  }

  /** A decoder for tokens that arrive one (or a few) at a time. */
  createDecoder(options: DetokenizeOptions = {}): StreamDecoder {
    const native = callNative((addon) => new addon.NativeStreamDecoder(this.#native, options.special ?? false));
    return new StreamDecoder(native);
  }
}

/** Reads the tokenizer of a GGUF file (a vocabulary-only file is enough). */
export function openTokenizer(path: string): Tokenizer {
  return new Tokenizer(callNative((addon) => new addon.NativeTokenizer(path)));
}

/** Refuses a text that is neither a string nor UTF-8 bytes (the tokenizer reads bytes as UTF-8). */
function checkText(text: unknown): asserts text is string | Uint8Array {
  if (typeof text === "string") return;
  if (!(text instanceof Uint8Array)) {
    throw new BloomeryError(
      "INVALID_ARGUMENT",
      "tokenize(text): text must be a string or its UTF-8 bytes (a Uint8Array)",
    );
  }
  if (!isUtf8(text))
    throw new BloomeryError("INVALID_ARGUMENT", "tokenize(text): the bytes of text are not valid UTF-8");
}

function toIds(tokens: ArrayLike<number>): Uint32Array {
  if (tokens instanceof Uint32Array) return tokens;
  const ids = new Uint32Array(tokens.length);
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new BloomeryError("INVALID_ARGUMENT", `token ${String(t)} at index ${i} is not a token id`, { index: i });
    }
    ids[i] = t;
  }
  return ids;
}
