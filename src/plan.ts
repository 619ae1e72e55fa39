/**
 * The offload plan: which routed experts of each layer live on the GPU and which in host
 * RAM, given the model's footprint and the memory budgets. {@link planOffload} is pure;
 * {@link loadModel} runs it (or checks a plan you pass back) and `model.plan` shows the
 * plan in use.
 * @module
 */
import { BloomeryError } from "./errors.js";
import { callNativeAsync } from "./native.js";

/**
 * A tensor the GPU's kernels cannot serve (a weight type without a GPU kernel, or routed experts
 * the fused expert kernel cannot take). The plan keeps a routed-expert stack's experts in host
 * RAM, where the CPU runs them; any other such tensor keeps the model off the GPU.
 */
export interface GpuKernelGap {
  /** Its name in the file, as `blk.3.ffn_down_exps.weight`. */
  tensor: string;
  /** What the GPU lacks, naming the tensor and its type. */
  reason: string;
  /** The layer of a routed-expert stack; null for any other tensor. */
  expertLayer: number | null;
}

/**
 * What a model needs in device memory, term by term, as the native engine allocates it
 * (native/engine/gpu_forward.h owns these sizes and the kernel gaps): read it with {@link modelFootprint}.
 */
export interface ModelFootprint {
  /** Tokens of the one session the KV term holds. */
  contextSize: number;
  /** Routed experts per layer (0 for a dense model). */
  experts: number;
  /** Every weight but the routed experts (attention, norms, router, embeddings, output, expert tables). */
  denseBytes: number;
  /** Per layer, the bytes of one routed expert (its gate, up and down slices). */
  expertBytes: number[];
  /** The KV cache of one session of `contextSize` tokens. */
  kvBytes: number;
  /** The forward pass's buffers. */
  workspaceBytes: number;
  /** Staging for prompts that copy one layer's host experts to the GPU: needed only when some experts are on the host. */
  streamBytes: number;
  /** Device memory left free for the CUDA context, graphs and kernels. */
  reserveBytes: number;
  /** Tensors the GPU's kernels cannot serve (empty when it serves them all). */
  kernelGaps: GpuKernelGap[];
}

/** The memory a plan may use, in bytes. */
export interface OffloadBudgets {
  /** Device memory for dense weights, KV cache, workspace and expert slots (the reserve already taken off). */
  gpu: number;
  /** Host RAM for the routed experts that are not on the GPU. */
  hostRam: number;
}

/** One layer of a plan: its routed experts by tier, and why. */
export interface OffloadLayer {
  /** Expert ids resident on the GPU. */
  gpu: number[];
  /** Expert ids run by the CPU from host RAM (the model file's pages). */
  host: number[];
  /** Why the layer is split this way. */
  reason: string;
}

/** Bytes of device memory a plan uses, by term. */
export interface OffloadGpuBytes {
  dense: number;
  kvCache: number;
  workspace: number;
  /** Prompt staging ({@link ModelFootprint.streamBytes}), when some experts are on the host. */
  staging: number;
  experts: number;
  /** The sum of the above. */
  total: number;
}

/**
 * Where a model's weights live. Data: read it, change a layer's `gpu` / `host` lists and pass
 * it back to {@link loadModel} (`plan`), which checks it and uses it as is.
 */
export interface OffloadPlan {
  /** Tokens each session holds; the KV term is sized for it. */
  contextSize: number;
  /** The budgets the plan was made for. */
  budgets: OffloadBudgets;
  /** Bytes per tier. The disk tier (experts beyond host RAM) is not supported yet: always 0. */
  bytes: { gpu: OffloadGpuBytes; host: number; disk: number };
  /** Per layer, the experts on each tier. */
  layers: OffloadLayer[];
}

/** The device memory terms of the model at `path` with sessions of `contextSize` tokens (default: loadModel's). */
export async function modelFootprint(path: string, options: { contextSize?: number } = {}): Promise<ModelFootprint> {
  return callNativeAsync((a) => a.gpuFootprint(path, options.contextSize ?? 0));
}

function gib(bytes: number): string {
  return `${(bytes / 1024 ** 3).toFixed(2)} GiB`;
}

const range = (from: number, to: number) => Array.from({ length: Math.max(0, to - from) }, (_, i) => from + i);

/** Refuses, naming the first, a tensor other than routed experts that the GPU cannot serve. */
function refuseDenseGaps(footprint: ModelFootprint): void {
  const dense = footprint.kernelGaps.find((gap) => gap.expertLayer === null);
  if (dense) {
    throw new BloomeryError(
      "UNSUPPORTED_QUANT",
      `${dense.reason}, so the model cannot run on the GPU; load it with gpu: false`,
      { tensor: dense.tensor },
    );
  }
}

/** The layers whose routed experts must stay in host RAM, with why. */
function hostOnlyLayers(footprint: ModelFootprint): Map<number, string> {
  const layers = new Map<number, string>();
  for (const gap of footprint.kernelGaps) {
    if (gap.expertLayer === null) continue;
    const known = layers.get(gap.expertLayer);
    layers.set(gap.expertLayer, known ? `${known}; ${gap.reason}` : gap.reason);
  }
  return layers;
}

function fixedGpu(footprint: ModelFootprint, hybrid: boolean): Omit<OffloadGpuBytes, "experts" | "total"> {
  return {
    dense: footprint.denseBytes,
    kvCache: footprint.kvBytes,
    workspace: footprint.workspaceBytes,
    staging: hybrid ? footprint.streamBytes : 0,
  };
}

const fixedTotal = (fixed: Omit<OffloadGpuBytes, "experts" | "total">) =>
  fixed.dense + fixed.kvCache + fixed.workspace + fixed.staging;

/** The byte totals of `layers`, refusing by name what the budgets cannot hold. */
function tally(footprint: ModelFootprint, budgets: OffloadBudgets, layers: OffloadLayer[]): OffloadPlan["bytes"] {
  const fixed = fixedGpu(
    footprint,
    layers.some((layer) => layer.host.length > 0),
  );
  let experts = 0;
  let host = 0;
  layers.forEach((layer, l) => {
    experts += layer.gpu.length * (footprint.expertBytes[l] ?? 0);
    host += layer.host.length * (footprint.expertBytes[l] ?? 0);
  });
  const total = fixedTotal(fixed) + experts;
  if (total > budgets.gpu) {
    throw new BloomeryError(
      "INSUFFICIENT_MEMORY",
      `the plan needs ${gib(total)} of GPU memory: dense weights ${gib(fixed.dense)} + KV cache ${gib(fixed.kvCache)} ` +
        `(contextSize ${footprint.contextSize}) + workspace ${gib(fixed.workspace)} + prompt staging ` +
        `${gib(fixed.staging)} + experts ${gib(experts)}; ` +
        `more than the gpu budget of ${gib(budgets.gpu)}`,
      { needed: total, budget: budgets.gpu },
    );
  }
  if (host > budgets.hostRam) {
    throw new BloomeryError(
      "INSUFFICIENT_MEMORY",
      `the experts left in host memory need ${gib(host)}, more than the hostRam budget of ${gib(budgets.hostRam)}; ` +
        `experts paged from disk (the disk tier) are not supported yet`,
      { needed: host, hostRam: budgets.hostRam },
    );
  }
  return { gpu: { ...fixed, experts, total }, host, disk: 0 };
}

/**
 * Places a model: dense weights, KV cache and workspace on the GPU first (and, unless every
 * expert fits, the staging long prompts copy host experts into), then as many
 * routed experts per layer as the GPU budget holds, the same count in every layer (the
 * remainder one more in the first layers), the lowest expert ids first (no routing profile
 * yet); the other experts stay in host RAM. A layer whose expert stacks the GPU cannot serve
 * ({@link ModelFootprint.kernelGaps}) keeps all its experts in host RAM, and its reason says
 * why. Pure. Throws UNSUPPORTED_QUANT, naming the tensor, when a tensor other than routed
 * experts has no GPU kernel; INSUFFICIENT_MEMORY, naming each term, when the dense part does
 * not fit the GPU budget or the host experts do not fit `hostRam` (the disk tier is not
 * supported yet).
 */
export function planOffload(footprint: ModelFootprint, budgets: OffloadBudgets): OffloadPlan {
  refuseDenseGaps(footprint);
  const hostOnly = hostOnlyLayers(footprint);
  const E = footprint.experts;
  const gpuCapable = (l: number) => !hostOnly.has(l);
  const perRound = footprint.expertBytes.reduce((sum, bytes, l) => sum + (gpuCapable(l) ? bytes : 0), 0);
  const whole = hostOnly.size === 0 && fixedTotal(fixedGpu(footprint, false)) + E * perRound <= budgets.gpu;
  const fixed = fixedGpu(footprint, !whole);
  const fixedBytes = fixedTotal(fixed);
  if (fixedBytes > budgets.gpu) {
    throw new BloomeryError(
      "INSUFFICIENT_MEMORY",
      `the model needs ${gib(fixedBytes)} of GPU memory before any routed expert: dense weights ${gib(fixed.dense)} ` +
        `+ KV cache ${gib(fixed.kvCache)} (contextSize ${footprint.contextSize}) + workspace ${gib(fixed.workspace)} ` +
        `+ prompt staging ${gib(fixed.staging)}; more than the gpu budget of ${gib(budgets.gpu)}`,
      { needed: fixedBytes, budget: budgets.gpu },
    );
  }
  const layerCount = footprint.expertBytes.length;
  let left = budgets.gpu - fixedBytes;
  const even = perRound > 0 ? Math.min(E, Math.floor(left / perRound)) : E;
  left -= even * perRound;
  const counts = footprint.expertBytes.map((_, l) => (gpuCapable(l) ? even : 0));
  for (let l = 0; l < layerCount && even < E; ++l) {
    if (!gpuCapable(l)) continue;
    const bytes = footprint.expertBytes[l] ?? 0;
    if (bytes > left) break;
    counts[l] = even + 1;
    left -= bytes;
  }
  const layers = counts.map((count, l): OffloadLayer => {
    let reason: string;
    const gap = hostOnly.get(l);
    if (E === 0) reason = "a dense layer: no routed experts";
    else if (gap !== undefined) reason = `${gap}: the layer's experts stay in host RAM, run by the CPU`;
    else if (count === E) reason = `all ${E} experts fit the GPU budget`;
    else if (count === 0) reason = `no GPU room left for experts after the dense weights, KV cache and workspace`;
    else
      reason =
        `${count} of ${E} experts fit the GPU budget (the same count in each layer${count > even ? ", one more here" : ""}); ` +
        `lowest ids first, no routing profile yet`;
    return { gpu: range(0, count), host: range(count, E), reason };
  });
  return {
    contextSize: footprint.contextSize,
    budgets: { ...budgets },
    bytes: tally(footprint, budgets, layers),
    layers,
  };
}

/**
 * Checks a plan passed back to loadModel against the model: one entry per layer, each
 * expert on exactly one tier, and the budgets. Returns it with its bytes recomputed (its
 * placement as given). Throws INVALID_ARGUMENT naming the first fault, INSUFFICIENT_MEMORY,
 * or UNSUPPORTED_QUANT (naming the tensor) for GPU experts in a layer whose expert stacks
 * the GPU cannot serve, or for a model the GPU cannot run at all.
 */
export function checkOffloadPlan(plan: OffloadPlan, footprint: ModelFootprint, budgets: OffloadBudgets): OffloadPlan {
  refuseDenseGaps(footprint);
  const hostOnly = hostOnlyLayers(footprint);
  const layerCount = footprint.expertBytes.length;
  const refuse = (what: string) => new BloomeryError("INVALID_ARGUMENT", `plan: ${what}`);
  if (typeof plan !== "object" || plan === null || !Array.isArray(plan.layers)) throw refuse("not an OffloadPlan");
  if (plan.layers.length !== layerCount) {
    throw refuse(`it has ${plan.layers.length} layers; the model has ${layerCount}`);
  }
  if (plan.contextSize !== footprint.contextSize) {
    throw refuse(`it was made for contextSize ${plan.contextSize}; this load uses ${footprint.contextSize}`);
  }
  const layers = plan.layers.map((layer, l): OffloadLayer => {
    const seen = new Set<number>();
    for (const e of [...(layer?.gpu ?? []), ...(layer?.host ?? [])]) {
      if (!Number.isInteger(e) || e < 0 || e >= footprint.experts) {
        throw refuse(`layer ${l} names expert ${String(e)}; the model has ${footprint.experts} per layer`);
      }
      if (seen.has(e)) throw refuse(`layer ${l} places expert ${e} twice`);
      seen.add(e);
    }
    if (seen.size !== footprint.experts) {
      throw refuse(`layer ${l} places ${seen.size} of its ${footprint.experts} experts; each needs a tier`);
    }
    const gap = hostOnly.get(l);
    if (gap !== undefined && layer.gpu.length > 0) {
      throw new BloomeryError(
        "UNSUPPORTED_QUANT",
        `plan: layer ${l} puts ${layer.gpu.length} experts on the GPU, but ${gap}; keep them in host RAM`,
        { layer: l },
      );
    }
    return { gpu: [...layer.gpu], host: [...layer.host], reason: layer.reason ?? "as given" };
  });
  return { contextSize: plan.contextSize, budgets: { ...budgets }, bytes: tally(footprint, budgets, layers), layers };
}
