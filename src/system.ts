/**
 * What this machine offers bloomery: CPU features, cores, RAM, and each CUDA GPU.
 * @module
 */
import { BloomeryError } from "./errors.js";
import { callNative } from "./native.js";

/** CPU instruction-set features, as the CPU reports them and the OS enables them. */
export interface CpuFeatures {
  avx: boolean;
  avx2: boolean;
  fma: boolean;
  f16c: boolean;
  avxVnni: boolean;
  bmi2: boolean;
  avx512f: boolean;
  avx512bw: boolean;
  avx512vl: boolean;
  avx512vnni: boolean;
  avx512bf16: boolean;
  avx512fp16: boolean;
  amxTile: boolean;
  amxInt8: boolean;
  amxBf16: boolean;
}

/** One CUDA device. Memory figures are in bytes. */
export interface GpuInfo {
  index: number;
  name: string;
  /** e.g. "9.0" for an H100 or H200. */
  computeCapability: string;
  totalMemory: number;
  freeMemory: number;
  multiprocessors: number;
  pciBusId: string;
}

/** The machine as bloomery sees it. Memory figures are in bytes. */
export interface SystemInfo {
  cpu: {
    model: string;
    logicalCores: number;
    physicalCores: number;
    features: CpuFeatures;
    /**
     * The widest CPU kernels bloomery runs here: "avx512" needs AVX-512 F/BW/VL/VNNI, "avx2" needs
     * AVX2/FMA/F16C; the environment's BLOOMERY_CPU_ISA caps it ("avx2", "scalar").
     */
    simdTier: "scalar" | "avx2" | "avx512";
  };
  /** Host RAM; under a cgroup memory limit, the limit and what it leaves. */
  memory: { total: number; available: number };
  cuda: {
    /** Whether this build of the addon has CUDA kernels at all. */
    compiled: boolean;
    available: boolean;
    /** Why CUDA cannot be used (no driver, driver too old, no device, CPU-only build). */
    reason?: string;
    /** The driver's CUDA version times 1000 (13000 is 13.0); 0 without a driver. */
    driverVersion: number;
    /** The CUDA runtime the addon was built with, in the same form. */
    runtimeVersion: number;
  };
  gpus: GpuInfo[];
}

/** One ggml tensor type: its id in GGUF files, name, and block layout. */
export interface GgmlTypeInfo {
  id: number;
  name: string;
  /** Elements per block (1 for plain types such as F32). */
  blockElements: number;
  /** Bytes per block. */
  blockBytes: number;
}

/** Reports CPU features, cores, RAM and each GPU, or why CUDA is unavailable. */
export function getSystemInfo(): SystemInfo {
  return callNative((a) => a.getSystemInfo());
}

let typeTable: GgmlTypeInfo[] | undefined;

/** The ggml tensor types bloomery knows (the engine's table). */
export function ggmlTypes(): readonly GgmlTypeInfo[] {
  typeTable ??= callNative((a) => a.ggmlTypes());
  return typeTable;
}

/** The type with this name (e.g. "Q4_K") or id; throws UNSUPPORTED_QUANT for an unknown one. */
export function ggmlType(nameOrId: string | number): GgmlTypeInfo {
  const t = ggmlTypes().find((x) => (typeof nameOrId === "number" ? x.id === nameOrId : x.name === nameOrId));
  if (!t)
    throw new BloomeryError("UNSUPPORTED_QUANT", `unknown ggml tensor type ${JSON.stringify(nameOrId)}`, {
      type: nameOrId,
    });
  return t;
}
