/**
 * Every error bloomery throws on purpose is a {@link BloomeryError} with a stable `code`.
 * @module
 */

/** The stable codes of {@link BloomeryError}. New codes may be added; existing ones keep their meaning. */
export type BloomeryErrorCode =
  | "GGUF_BAD_MAGIC"
  | "GGUF_TRUNCATED"
  | "GGUF_UNSUPPORTED_VERSION"
  | "GGUF_TENSOR_OUT_OF_BOUNDS"
  | "GGUF_TENSOR_OVERLAP"
  | "GGUF_TENSOR_LAYOUT"
  | "GGUF_BAD_STRING"
  | "GGUF_BAD_VALUE_TYPE"
  | "GGUF_BAD_TENSOR"
  | "GGUF_DUPLICATE"
  | "GGUF_TOO_LARGE"
  | "GGUF_BAD_ALIGNMENT"
  | "GGUF_SPLIT"
  | "FILE_NOT_FOUND"
  | "FILE_READ"
  | "FILE_WRITE"
  | "STATE_BAD_FILE"
  | "STATE_UNSUPPORTED_VERSION"
  | "STATE_MODEL_MISMATCH"
  | "UNSUPPORTED_ARCH"
  | "UNSUPPORTED_QUANT"
  | "TOKENIZER_UNSUPPORTED"
  | "TOKENIZER_BAD_VOCAB"
  | "MODEL_MISSING_TENSOR"
  | "MODEL_TENSOR_SHAPE"
  | "MODEL_BAD_METADATA"
  | "MODEL_UNEXPECTED_TENSOR"
  | "MODEL_FILE_CHANGED"
  | "CONTEXT_TOO_LONG"
  | "CONTEXT_WINDOW_DROPPED"
  | "CHAT_TEMPLATE"
  | "CHAT_TEMPLATE_TOO_COMPLEX"
  | "GRAMMAR_INVALID"
  | "GRAMMAR_TOO_COMPLEX"
  | "JSON_SCHEMA_UNSUPPORTED"
  | "JSON_SCHEMA_TOO_COMPLEX"
  | "INVALID_ARGUMENT"
  | "INSUFFICIENT_MEMORY"
  | "GPU_UNAVAILABLE"
  | "CUDA_ERROR"
  | "UNSUPPORTED_MODEL"
  | "OUT_OF_MEMORY"
  | "NATIVE_LOAD"
  | "DISPOSED"
  | "SESSION_BUSY"
  | "ABORTED"
  /** downloadModel: a reference that is not `user/repo[:quant]`, or a URL without a file name. */
  | "HUB_BAD_REPO"
  /** downloadModel: the hub (or URL) could not be reached, or answered with an HTTP error. */
  | "HUB_REQUEST"
  /** downloadModel: the file listing is not the hub's: not JSON, too large, or a file with a bad path, size or checksum. */
  | "HUB_BAD_LISTING"
  /** downloadModel: the repo has no file for the quant or name asked for, several, or not every part of a split model. */
  | "HUB_NO_FILE"
  /** downloadModel: the download is longer than the listing says, or says so in its Content-Length. */
  | "HUB_DOWNLOAD_SIZE"
  /** downloadModel: the download broke off before its end: call again to resume it. */
  | "HUB_DOWNLOAD_BROKEN"
  /** downloadModel: the downloaded bytes do not match the listing's checksum (the partial file is removed). */
  | "HUB_CHECKSUM"
  /** downloadModel: the cache folder's disk has less room than the files need. */
  | "HUB_NO_SPACE"
  /** downloadModel: the cache folder could not be read or written. */
  | "HUB_CACHE"
  /** downloadModel offline, and the cache does not hold the model. */
  | "HUB_OFFLINE"
  | "INTERNAL";

/** An error with a stable, machine-readable `code`, and `details` that name what was wrong. */
export class BloomeryError extends Error {
  override name = "BloomeryError";
  readonly code: BloomeryErrorCode;
  readonly details: Record<string, unknown>;

  constructor(code: BloomeryErrorCode, message: string, details: Record<string, unknown> = {}, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.details = details;
  }
}

/** Rethrows an error from the native addon (a plain Error with a `code`) as a BloomeryError. */
export function fromNativeError(error: unknown): BloomeryError {
  if (error instanceof BloomeryError) return error;
  if (error instanceof Error) {
    const raw = error as Error & { code?: unknown; details?: unknown };
    const code = typeof raw.code === "string" ? (raw.code as BloomeryErrorCode) : "INTERNAL";
    const details =
      typeof raw.details === "object" && raw.details !== null ? (raw.details as Record<string, unknown>) : {};
    return new BloomeryError(code, error.message, details, { cause: error });
  }
  return new BloomeryError("INTERNAL", String(error));
}
