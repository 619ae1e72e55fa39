/**
 * readGgufInfo(): the native reader's view of a GGUF file, plus a summary of the model.
 * @module
 */
import { callNativeAsync } from "../native.js";
import { checkPath } from "../validate.js";
import type { GgufInfo, GgufSummary, GgufValue, RawGgufInfo } from "./types.js";

function numberOf(value: GgufValue | undefined): number {
  if (typeof value === "number") return value;
  if (typeof value === "bigint") return Number(value);
  return 0;
}

function summarize(raw: RawGgufInfo): GgufSummary {
  const meta = raw.metadata;
  const architecture = typeof meta["general.architecture"] === "string" ? meta["general.architecture"] : "";
  const archNumber = (suffix: string): number => numberOf(meta[`${architecture}.${suffix}`]);
  const bytesByType: Record<string, number> = {};
  let parameters = 0;
  let tensorBytes = 0;
  for (const t of raw.tensors) {
    parameters += t.elements;
    tensorBytes += t.bytes;
    bytesByType[t.type] = (bytesByType[t.type] ?? 0) + t.bytes;
  }
  const summary: GgufSummary = {
    architecture,
    layers: archNumber("block_count"),
    experts: archNumber("expert_count"),
    expertsUsed: archNumber("expert_used_count"),
    contextLength: archNumber("context_length"),
    embeddingLength: archNumber("embedding_length"),
    parameters,
    bytesByType,
    tensorBytes,
    fileBytes: raw.files.reduce((sum, f) => sum + f.bytes, 0),
  };
  const name = meta["general.name"];
  if (typeof name === "string") summary.name = name;
  return summary;
}

/**
 * Reads a GGUF file's metadata and tensor table (without reading tensor data) and
 * summarizes the model. A split model (`…-00001-of-0000N.gguf`) is read as one, with
 * each tensor's `file` naming its shard.
 *
 * Any architecture is reported; whether bloomery can run it is loadModel()'s question.
 * Throws a BloomeryError: `FILE_NOT_FOUND`, `FILE_READ`, `GGUF_BAD_MAGIC`,
 * `GGUF_UNSUPPORTED_VERSION`, `GGUF_TRUNCATED`, `GGUF_BAD_STRING`, `GGUF_BAD_VALUE_TYPE`,
 * `GGUF_BAD_TENSOR`, `GGUF_DUPLICATE`, `GGUF_BAD_ALIGNMENT`, `GGUF_TENSOR_OUT_OF_BOUNDS`,
 * `GGUF_TENSOR_OVERLAP` / `GGUF_TENSOR_LAYOUT` (tensors whose bytes overlap, or leave unused bytes between
 * them: a type or shape that does not match the data), `GGUF_TOO_LARGE` (arrays nested too deep, or more keys,
 * tensors or array entries than a model holds),
 * `GGUF_SPLIT`, `UNSUPPORTED_QUANT`, or `INVALID_ARGUMENT` (a path that is empty or holds a NUL byte). A
 * path that is not a regular file (a FIFO, a device) is FILE_READ, without waiting on it. Unused bytes after
 * the last tensor are a warning (`warnings`).
 */
export async function readGgufInfo(path: string): Promise<GgufInfo> {
  checkPath(path, "readGgufInfo()");
  const raw = await callNativeAsync((a) => a.readGgufInfo(path));
  return { ...raw, summary: summarize(raw) };
}
