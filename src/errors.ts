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
  | "DRAFT_UNSUPPORTED"
  | "DRAFT_VOCAB_MISMATCH"
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
