// Types of bench/routing-trace.mjs.
export const TRACE_FORMAT: string;

export interface TraceModel {
  name?: string;
  architecture?: string;
  file?: string;
  layers: number;
  experts: number;
  expertsUsed: number;
  moeLayers: number[];
}

export interface TraceFile {
  format: string;
  model: TraceModel;
  recorded?: Record<string, unknown>;
  segments: { kind: "prompt" | "generation"; steps: number }[];
  steps: number;
  choices: Uint8Array | Uint16Array;
  statistics?: RoutingStatistics;
}

export interface LayerStatistics {
  topQuarterShare: number;
  entropy: number;
  reuse: { median: number | null; nextStep: number; within16: number; firstCalls: number };
}

export interface RoutingStatistics {
  steps: number;
  topQuarterShare: { mean: number; range: [number, number] };
  entropy: { mean: number; range: [number, number] };
  reuse: { median: number; nextStep: number; within16: number; firstCalls: number };
  perLayer: LayerStatistics[];
}

export function choicesOf(
  trace: { layers: number; experts: number; steps: Uint32Array[] },
  expertsUsed: number,
): { moeLayers: number[]; choices: Uint8Array | Uint16Array };
export function writeTrace(path: string, file: TraceFile): void;
export function readTrace(path: string): TraceFile;
export function routingStatistics(file: Pick<TraceFile, "model" | "steps" | "choices">): RoutingStatistics;
export function uniformChoices(model: TraceModel, steps: number, seed?: number): Uint8Array | Uint16Array;
export function replayTrace(model: import("../src/index.js").Model, file: TraceFile): void;
