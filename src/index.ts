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
export { downloadModel, type DownloadModelOptions, type DownloadProgress } from "./download.js";
export type * from "./gguf/types.js";
export {
  loadModel,
  Model,
  type LoadModelOptions,
  type LoadProgress,
  type LoadStep,
  type ModelEvents,
  type ModelInfo,
  type ModelWarning,
  type GpuOptions,
  type ModelStats,
  type OffloadTimes,
  type ResidencyStats,
  type ResidencyEvent,
  type ResidencyMove,
  type RoutingTrace,
  type DiskTierStats,
} from "./model.js";
export {
  planOffload,
  checkOffloadPlan,
  modelFootprint,
  type ModelFootprint,
  type GpuKernelGap,
  type OffloadBudgets,
  type OffloadPlan,
  type OffloadLayer,
  type OffloadGpuBytes,
  type RoutingProfile,
  type PlanOffloadOptions,
  type OffloadArena,
} from "./plan.js";
export type { TokenizeOptions, DetokenizeOptions } from "./tokenizer.js";
export type { ApplyChatTemplateOptions } from "./chat/template.js";
export type { ChatMessage, ChatTool, ToolCall } from "./chat/types.js";
export type { AssistantMessage, ToolCallFormat } from "./chat/output.js";
export type { BuiltinTemplateName } from "./chat/builtin-templates.js";
export {
  Session,
  SessionState,
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
export type { ChatOptions, ChatChunk, ChatIterable, ChatResult } from "./chat/run.js";
export type { SamplingOptions } from "./sampling.js";
export { jsonSchemaToGrammar, JSON_SCHEMA_LIMITS } from "./grammar/json-schema.js";
export { CHAT_TEMPLATE_LIMITS } from "./chat/render-worker.js";
