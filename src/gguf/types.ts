/**
 * The shapes of GGUF files as bloomery reads and writes them.
 * @module
 */

/** A scalar GGUF value type. 64-bit integers are `bigint` in JavaScript. */
export type GgufScalarType =
  | "u8"
  | "i8"
  | "u16"
  | "i16"
  | "u32"
  | "i32"
  | "u64"
  | "i64"
  | "f32"
  | "f64"
  | "bool"
  | "string";

/** A metadata value's type: a scalar, or an array written as `array<element>` (`array<string>`, `array<array<u32>>`). */
export type GgufMetadataType = GgufScalarType | `array<${string}>`;

/** A GGUF array: numeric arrays are typed arrays of their element type; bool and string arrays are plain arrays. */
export type GgufArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | BigUint64Array
  | BigInt64Array
  | Float32Array
  | Float64Array
  | boolean[]
  | string[]
  /** Accepted by writeGguf() (see its inference rules); the reader returns typed arrays. */
  | number[]
  | GgufArray[];

/** A metadata value as read: u64/i64 are `bigint`, other numbers `number`. */
export type GgufValue = number | bigint | boolean | string | GgufArray;

/** One tensor of a GGUF file. */
export interface GgufTensorInfo {
  name: string;
  /** The ggml type's name, e.g. "Q4_K" (see ggmlTypes()). */
  type: string;
  /** The ggml type's id in the file. */
  typeId: number;
  /** Dimensions as GGUF stores them: the fastest-varying (row length) first. */
  shape: number[];
  /** Elements (product of shape). */
  elements: number;
  /** Absolute byte offset of the tensor's data in its file. */
  offset: number;
  /** Bytes of data. */
  bytes: number;
  /** Index into {@link GgufInfo.files} of the file that holds it (0 unless the model is split). */
  file: number;
}

/** One file of a (possibly split) model. */
export interface GgufFileInfo {
  path: string;
  /** Size of the file in bytes. */
  bytes: number;
  version: number;
  /** Offset where tensor data starts. */
  dataOffset: number;
  alignment: number;
  tensorCount: number;
}

/** The model as a whole, derived from metadata and tensors. */
export interface GgufSummary {
  /** `general.architecture`, e.g. "qwen3moe". */
  architecture: string;
  /** `general.name`, when present. */
  name?: string;
  /** `<arch>.block_count`. */
  layers: number;
  /** `<arch>.expert_count` (0 for a dense model). */
  experts: number;
  /** `<arch>.expert_used_count` (0 for a dense model). */
  expertsUsed: number;
  contextLength: number;
  embeddingLength: number;
  /** Total elements over all tensors. */
  parameters: number;
  /** Bytes of tensor data per ggml type name. */
  bytesByType: Record<string, number>;
  /** Bytes of all tensor data. */
  tensorBytes: number;
  /** Bytes of all files. */
  fileBytes: number;
}

/**
 * Something odd in a file that does not stop it from loading. `GGUF_TENSOR_LAYOUT`: unused bytes follow the last
 * tensor's data (beyond the alignment padding), as that tensor leaves behind when its type or shape was changed to
 * a smaller one; its values may then not be the ones written. (Unused bytes between tensors, and overlapping
 * tensors, are refused: see docs/hardening.md.)
 */
export interface GgufWarning {
  code: "GGUF_TENSOR_LAYOUT";
  message: string;
  /** The tensor it is about. */
  tensor: string;
}

/** Everything readGgufInfo() learns from a GGUF file (or every file of a split model). */
export interface GgufInfo {
  /** The path given (the first file of a split model). */
  path: string;
  version: number;
  alignment: number;
  files: GgufFileInfo[];
  /** All metadata of the first file, by key, in file order. */
  metadata: Record<string, GgufValue>;
  /** The type of each metadata value, by key. */
  metadataTypes: Record<string, GgufMetadataType>;
  /** Every tensor, in file order (over all files of a split model). */
  tensors: GgufTensorInfo[];
  /** What the reader found odd but not wrong (see {@link GgufWarning}). */
  warnings: GgufWarning[];
  summary: GgufSummary;
}

/** What the addon returns; src/gguf/read.ts adds the summary. */
export type RawGgufInfo = Omit<GgufInfo, "summary">;

/** A tensor to write: its bytes given at once (`data`), or produced in chunks (`fill`). */
export interface GgufTensorSource {
  name: string;
  /** A ggml type name, e.g. "Q4_K". */
  type: string;
  /** Dimensions, fastest-varying first; shape[0] must be a whole number of the type's blocks. */
  shape: number[];
  /** The tensor's bytes (exactly its size). */
  data?: Uint8Array;
  /** Called with successive chunks of the tensor's bytes to fill, and each chunk's offset within the tensor. */
  fill?: (chunk: Uint8Array, byteOffset: number) => void;
}

/** Options of writeGguf(). */
export interface WriteGgufOptions {
  /** File format version (2 or 3; default 3). */
  version?: number;
  /** Data alignment (default 32, or the `general.alignment` metadata value). */
  alignment?: number;
  metadata: Record<string, GgufValue>;
  /** Types for metadata values whose type cannot be inferred (see writeGguf for the inference rules). */
  metadataTypes?: Record<string, GgufMetadataType>;
  tensors: GgufTensorSource[];
  /** Write the header and leave the data region a hole (a sparse file of full size, for metadata tests). */
  headerOnly?: boolean;
  /** Write a split model: `<path without .gguf>-0000i-of-0000n.gguf`, with at most this many tensors per file. */
  splitMaxTensors?: number;
}
