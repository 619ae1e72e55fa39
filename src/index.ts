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
export { loadModel, Model, type LoadModelOptions, type ModelInfo, type GpuOptions } from "./model.js";
export type { TokenizeOptions, DetokenizeOptions } from "./tokenizer.js";
export type { ChatMessage, ApplyChatTemplateOptions } from "./chat/template.js";
export {
  Session,
  type EvaluateOptions,
  type GenerateOptions,
  type GenerateChunk,
  type GenerateIterable,
  type GenerateResult,
  type GenerateTimings,
  type StopReason,
  type TokenLogprob,
  type TokenLogprobs,
} from "./session.js";
export type { SamplingOptions } from "./sampling.js";
export { jsonSchemaToGrammar } from "./grammar/json-schema.js";
