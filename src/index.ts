/**
 * bloomery: fast inference for mixture-of-experts language models, built for offloading.
 * @module
 */
export { BloomeryError, type BloomeryErrorCode } from "./errors.js";
export {
  getSystemInfo,
  ggmlTypes,
  ggmlType,
  type SystemInfo,
  type CpuFeatures,
  type GpuInfo,
  type GgmlTypeInfo,
} from "./system.js";
export { readGgufInfo, writeGguf } from "./gguf.js";
export type * from "./gguf/types.js";
