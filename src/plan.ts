/**
 * The offload plan: which routed experts of each layer live on the GPU, which in host RAM and
 * which stay in the model file on disk (the disk tier), given the model's footprint and the
 * memory budgets. {@link planOffload} is pure;
 * {@link loadModel} runs it (or checks a plan you pass back) and `model.plan` shows the
 * plan in use.
 * @module
 */
import { BloomeryError } from "./errors.js";
import { callNativeAsync } from "./native.js";
import { checkOptions, checkPath } from "./validate.js";

/**
 * A tensor the GPU's kernels cannot serve (a weight type without a GPU kernel, or routed experts
 * the fused expert kernel cannot take). The plan keeps a routed-expert stack's experts off the
 * GPU (in host RAM or the disk tier), where the CPU runs them; any other such tensor keeps the
 * model off the GPU.
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
  /**
   * What prompts that copy host experts to the GPU cost beside {@link workspaceBytes}, needed only when some experts
   * are on the host: staging, a ring of two layers' experts (one filled over PCIe while the other's layer computes),
   * and, where that costs no more than the staging, a workspace for passes of 4,096 rows rather than 2,048 (each
   * pass copies every host expert once, so a prompt of 4,096 tokens copies them once).
   */
  streamBytes: number;
  /** Device memory left free for the CUDA context, graphs and kernels. */
  reserveBytes: number;
  /**
   * Bytes of one slot of the disk tier's RAM arena: the largest routed expert, each of its three slices with room
   * to be read as whole aligned blocks.
   */
  arenaSlotBytes: number;
  /** Tensors the GPU's kernels cannot serve (empty when it serves them all). */
  kernelGaps: GpuKernelGap[];
}

/** The memory a plan may use, in bytes. */
export interface OffloadBudgets {
  /** Device memory for dense weights, KV cache, workspace and expert slots (the reserve already taken off). */
  gpu: number;
  /**
   * Host RAM for the routed experts that are not on the GPU: the host experts' bytes, and the disk tier's arena
   * (what is left, in whole slots) when they do not all fit.
   */
  hostRam: number;
}

/** One layer of a plan: its routed experts by tier, and why. */
export interface OffloadLayer {
  /** Expert ids resident on the GPU. */
  gpu: number[];
  /** Expert ids run by the CPU from host RAM (the model file's pages). */
  host: number[];
  /**
   * Expert ids run by the CPU from the disk tier: read from the model file (O_DIRECT where the file system allows)
   * into the RAM arena's slots when a pass needs them, the least routed expert (by the decaying routing counts) out
   * first. Left out: none.
   */
  disk?: number[];
  /** Why the layer is split this way. */
  reason: string;
}

/** Bytes of device memory a plan uses, by term. */
export interface OffloadGpuBytes {
  dense: number;
  kvCache: number;
  workspace: number;
  /**
   * Prompt staging ({@link ModelFootprint.streamBytes}), when some experts are on the host and none on the disk tier
   * (with a disk tier every prompt pass hands its rows to the CPU, as decode steps do: copying a layer's host experts
   * to the GPU would read them all from disk).
   */
  staging: number;
  experts: number;
  /** The sum of the above. */
  total: number;
}

/** The disk tier's RAM arena: fixed slots of one expert each (none when every host expert fits `hostRam`). */
export interface OffloadArena {
  /** Experts it holds at once: at least the most any layer pages, which one prompt pass may need together. */
  slots: number;
  /** {@link ModelFootprint.arenaSlotBytes}. */
  slotBytes: number;
  /** slots * slotBytes. */
  bytes: number;
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
  /** Bytes per tier: `host` the experts in host RAM, `disk` the experts paged from the file. */
  bytes: { gpu: OffloadGpuBytes; host: number; disk: number };
  /** The disk tier's RAM arena (0 slots without a disk tier). */
  arena: OffloadArena;
  /** Per layer, the experts on each tier. */
  layers: OffloadLayer[];
}

/**
 * How often a model's router picked each routed expert, counts that decay by half every 32 steps
 * (a step: one forward pass of the scheduler): {@link Model.routingProfile} exports it, and
 * {@link planOffload} takes it (`{ profile }`) to seat the hottest experts on the GPU from the start.
 * Plain data: save it as JSON.
 */
export interface RoutingProfile {
  layers: number;
  /** Routed experts per layer. */
  experts: number;
  /** Steps counted. */
  steps: number;
  /** Per layer, per expert, the decayed count of rows routed to it. */
  counts: number[][];
}

/** Options of {@link planOffload}. */
export interface PlanOffloadOptions {
  /** Seat each layer's most-routed experts on the GPU (ties to the lower id) instead of the lowest ids. */
  profile?: RoutingProfile;
}

/** Per layer, the expert ids from most to least routed (ties to the lower id); INVALID_ARGUMENT for a profile of another shape. */
function hottestFirst(profile: RoutingProfile, footprint: ModelFootprint): number[][] {
  const layerCount = footprint.expertBytes.length;
  const counts = profile?.counts;
  if (
    !Array.isArray(counts) ||
    counts.length !== layerCount ||
    counts.some((row) => !Array.isArray(row) || row.length !== footprint.experts || row.some((c) => !(c >= 0)))
  ) {
    throw new BloomeryError(
      "INVALID_ARGUMENT",
      `profile: it must count ${footprint.experts} experts in each of ${layerCount} layers with non-negative numbers`,
    );
  }
  return counts.map((row) => range(0, footprint.experts).sort((a, b) => row[b]! - row[a]! || a - b));
}

/** The device memory terms of the model at `path` with sessions of `contextSize` tokens (default: loadModel's). */
export async function modelFootprint(path: string, options: { contextSize?: number } = {}): Promise<ModelFootprint> {
  checkPath(path, "modelFootprint()");
  checkOptions(options, ["contextSize"], "modelFootprint()");
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

/** The layers whose routed experts must stay off the GPU (the CPU runs them), with why. */
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

/** The byte totals and arena of `layers`, refusing by name what the budgets cannot hold. */
function tally(
  footprint: ModelFootprint,
  budgets: OffloadBudgets,
  layers: OffloadLayer[],
): Pick<OffloadPlan, "bytes" | "arena"> {
  const paging = layers.some((layer) => (layer.disk ?? []).length > 0);
  const fixed = fixedGpu(footprint, !paging && layers.some((layer) => layer.host.length > 0));
  let experts = 0;
  let host = 0;
  let disk = 0;
  layers.forEach((layer, l) => {
    experts += layer.gpu.length * (footprint.expertBytes[l] ?? 0);
    host += layer.host.length * (footprint.expertBytes[l] ?? 0);
    disk += (layer.disk ?? []).length * (footprint.expertBytes[l] ?? 0);
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
        `list the others under a layer's disk to page them from the file`,
      { needed: host, hostRam: budgets.hostRam },
    );
  }
  const slotBytes = footprint.arenaSlotBytes;
  const arena: OffloadArena = { slots: 0, slotBytes, bytes: 0 };
  if (paging) {
    let widest = 0;
    let widestLayer = 0;
    layers.forEach((layer, l) => {
      if ((layer.disk ?? []).length > widest) [widest, widestLayer] = [(layer.disk ?? []).length, l];
    });
    const room = budgets.hostRam - host;
    arena.slots = slotBytes > 0 ? Math.floor(room / slotBytes) : 0;
    arena.bytes = arena.slots * slotBytes;
    if (arena.slots < widest) {
      throw new BloomeryError(
        "INSUFFICIENT_MEMORY",
        `the disk tier's RAM arena needs at least ${widest} slots of ${gib(slotBytes)} = ${gib(widest * slotBytes)} ` +
          `(layer ${widestLayer} pages ${widest} experts, which one prompt pass may need at once); the hostRam budget ` +
          `of ${gib(budgets.hostRam)}` +
          (host > 0 ? ` less the host experts' ${gib(host)}` : "") +
          ` holds ${arena.slots}`,
        { needed: host + widest * slotBytes, hostRam: budgets.hostRam },
      );
    }
  }
  return { bytes: { gpu: { ...fixed, experts, total }, host, disk }, arena };
}

/**
 * Per layer, how many routed experts (lowest ids first) the GPU budget holds after `fixedBytes`: none in the
 * `hostOnly` layers, whose expert stacks the GPU cannot serve.
 */
function gpuCounts(
  footprint: ModelFootprint,
  budgets: OffloadBudgets,
  fixedBytes: number,
  hostOnly: Map<number, string>,
): number[] {
  const E = footprint.experts;
  const perRound = footprint.expertBytes.reduce((sum, bytes, l) => sum + (hostOnly.has(l) ? 0 : bytes), 0);
  let left = budgets.gpu - fixedBytes;
  const even = perRound > 0 ? Math.min(E, Math.floor(left / perRound)) : E;
  left -= even * perRound;
  const counts = footprint.expertBytes.map((bytes, l) => (hostOnly.has(l) || bytes === 0 ? 0 : even));
  for (let l = 0; l < counts.length && even < E; ++l) {
    if (hostOnly.has(l) || footprint.expertBytes[l] === 0) continue;
    const bytes = footprint.expertBytes[l] ?? 0;
    if (bytes > left) break;
    counts[l] = even + 1;
    left -= bytes;
  }
  return counts;
}

function refuseDense(fixed: Omit<OffloadGpuBytes, "experts" | "total">, footprint: ModelFootprint, budget: number) {
  return new BloomeryError(
    "INSUFFICIENT_MEMORY",
    `the model needs ${gib(fixedTotal(fixed))} of GPU memory before any routed expert: dense weights ` +
      `${gib(fixed.dense)} + KV cache ${gib(fixed.kvCache)} (contextSize ${footprint.contextSize}) + workspace ` +
      `${gib(fixed.workspace)} + prompt staging ${gib(fixed.staging)}; more than the gpu budget of ${gib(budget)}`,
    { needed: fixedTotal(fixed), budget },
  );
}

/**
 * Places a model: dense weights, KV cache and workspace on the GPU first (and, unless every
 * expert fits, the staging long prompts copy host experts into), then as many
 * routed experts per layer as the GPU budget holds, the same count in every layer (the
 * remainder one more in the first layers): with `options.profile` each layer's most-routed
 * experts, else the lowest expert ids; the other experts stay in host RAM. When `hostRam` cannot
 * hold them, they all go to the disk tier instead: the CPU runs them from a RAM arena of
 * `hostRam` (in whole slots), read from the model file as passes need them, and no prompt
 * staging is reserved (prompts hand their rows to the CPU). A layer whose expert stacks the GPU
 * cannot serve ({@link ModelFootprint.kernelGaps}) keeps all its experts off the GPU, and its
 * reason says why. A budgets.gpu of 0 plans a model on the CPU: every expert on the host or the
 * disk tier. Pure. Throws UNSUPPORTED_QUANT, naming the tensor, when a tensor other than routed
 * experts has no GPU kernel; INSUFFICIENT_MEMORY, naming each term, when the dense part does not
 * fit the GPU budget or `hostRam` is below the arena's minimum (the most experts one layer
 * pages); INVALID_ARGUMENT for a profile of another model's shape.
 */
export function planOffload(
  footprint: ModelFootprint,
  budgets: OffloadBudgets,
  options: PlanOffloadOptions = {},
): OffloadPlan {
  checkOptions(options, ["profile"], "planOffload()");
  refuseDenseGaps(footprint);
  const hostOnly = hostOnlyLayers(footprint);
  const order = options.profile ? hottestFirst(options.profile, footprint) : undefined;
  const E = footprint.experts;
  const perRound = footprint.expertBytes.reduce((sum, bytes) => sum + bytes, 0);
  const whole = hostOnly.size === 0 && fixedTotal(fixedGpu(footprint, false)) + E * perRound <= budgets.gpu;
  const fixed = fixedGpu(footprint, !whole);
  const bare = fixedGpu(footprint, false);
  if (fixedTotal(bare) > budgets.gpu) throw refuseDense(fixed, footprint, budgets.gpu);
  const hostBytes = (counts: number[]) =>
    counts.reduce((sum, count, l) => sum + (E - count) * (footprint.expertBytes[l] ?? 0), 0);
  const stagingFits = fixedTotal(fixed) <= budgets.gpu;
  // Without room for the staging, no expert can sit on the GPU beside host ones in RAM; only a
  // disk tier (which needs no staging) can run then.
  let counts = stagingFits
    ? gpuCounts(footprint, budgets, fixedTotal(fixed), hostOnly)
    : footprint.expertBytes.map(() => 0);
  const paging = hostBytes(counts) > budgets.hostRam;
  if (!paging && !stagingFits) throw refuseDense(fixed, footprint, budgets.gpu);
  // The disk tier needs no prompt staging: its room goes to experts.
  if (paging) counts = gpuCounts(footprint, budgets, fixedTotal(bare), hostOnly);
  const routed = (l: number) => footprint.expertBytes[l] !== 0;
  const even = Math.min(...counts.filter((_, l) => !hostOnly.has(l) && routed(l)));
  const layers = counts.map((count, l): OffloadLayer => {
    if (E > 0 && !routed(l)) return { gpu: [], host: [], disk: [], reason: "a dense layer: no routed experts" };
    let reason: string;
    const seat = order ? "the most-routed first (routing profile)" : "lowest ids first, no routing profile";
    const gap = hostOnly.get(l);
    if (E === 0) reason = "a dense layer: no routed experts";
    else if (gap !== undefined) reason = `${gap}: the layer's experts stay off the GPU, run by the CPU`;
    else if (count === E) reason = `all ${E} experts fit the GPU budget`;
    else if (count === 0 && budgets.gpu === 0) reason = "no GPU: the CPU runs every expert";
    else if (count === 0) reason = `no GPU room left for experts after the dense weights, KV cache and workspace`;
    else
      reason =
        `${count} of ${E} experts fit the GPU budget (the same count in each layer${count > even ? ", one more here" : ""}); ` +
        seat;
    const ranked = order?.[l] ?? range(0, E);
    const byId = (a: number, b: number) => a - b;
    const rest = ranked.slice(count).sort(byId);
    if (paging && rest.length > 0) {
      reason += `; the CPU's ${rest.length} are paged from disk into the RAM arena (hostRam cannot hold every host expert)`;
    }
    return { gpu: ranked.slice(0, count).sort(byId), host: paging ? [] : rest, disk: paging ? rest : [], reason };
  });
  return {
    contextSize: footprint.contextSize,
    budgets: { ...budgets },
    ...tally(footprint, budgets, layers),
    layers,
  };
}

const PLAN_KEYS: readonly string[] = ["contextSize", "budgets", "bytes", "arena", "layers"];
const LAYER_KEYS: readonly string[] = ["gpu", "host", "disk", "reason"];

/**
 * Refuses (INVALID_ARGUMENT, naming the field) a value that does not have an OffloadPlan's shape: an object of the
 * plan's fields only, an integer contextSize, and layers each of `gpu` and `host` arrays (and an optional `disk`
 * array) of integers, and an optional string `reason`. The budgets, bytes and arena it carries are recomputed, not trusted.
 */
export function checkPlanShape(plan: unknown): asserts plan is OffloadPlan {
  const refuse = (what: string) => new BloomeryError("INVALID_ARGUMENT", `plan: ${what}`);
  const isObject = (v: unknown): v is Record<string, unknown> =>
    typeof v === "object" && v !== null && !Array.isArray(v);
  if (!isObject(plan)) throw refuse("not an OffloadPlan (an object)");
  for (const key of Object.keys(plan)) if (!PLAN_KEYS.includes(key)) throw refuse(`has no field "${key}"`);
  if (!Number.isInteger(plan.contextSize)) throw refuse("contextSize must be an integer");
  if (!Array.isArray(plan.layers)) throw refuse("layers must be an array");
  plan.layers.forEach((layer: unknown, l) => {
    if (!isObject(layer)) throw refuse(`layers[${l}] must be an object`);
    for (const key of Object.keys(layer))
      if (!LAYER_KEYS.includes(key)) throw refuse(`layers[${l}] has no field "${key}"`);
    for (const tier of ["gpu", "host", "disk"] as const) {
      const ids = layer[tier];
      if (tier === "disk" && ids === undefined) continue;
      if (!Array.isArray(ids) || !ids.every((e) => Number.isInteger(e))) {
        throw refuse(`layers[${l}].${tier} must be an array of expert ids`);
      }
    }
    if (layer.reason !== undefined && typeof layer.reason !== "string") {
      throw refuse(`layers[${l}].reason must be a string`);
    }
  });
}

/**
 * Checks a plan passed back to loadModel against the model: one entry per layer, each
 * expert on exactly one tier (gpu, host or disk), and the budgets. Returns it with its bytes and
 * arena recomputed (its placement as given): the arena takes what `hostRam` leaves after the host
 * experts. Throws INVALID_ARGUMENT naming the first fault, INSUFFICIENT_MEMORY, or
 * UNSUPPORTED_QUANT (naming the tensor) for GPU experts in a layer whose expert stacks the GPU
 * cannot serve, or for a model the GPU cannot run at all.
 */
export function checkOffloadPlan(plan: OffloadPlan, footprint: ModelFootprint, budgets: OffloadBudgets): OffloadPlan {
  checkPlanShape(plan);
  refuseDenseGaps(footprint);
  const hostOnly = hostOnlyLayers(footprint);
  const layerCount = footprint.expertBytes.length;
  const refuse = (what: string) => new BloomeryError("INVALID_ARGUMENT", `plan: ${what}`);
  if (plan.layers.length !== layerCount) {
    throw refuse(`it has ${plan.layers.length} layers; the model has ${layerCount}`);
  }
  if (plan.contextSize !== footprint.contextSize) {
    throw refuse(`it was made for contextSize ${plan.contextSize}; this load uses ${footprint.contextSize}`);
  }
  const layers = plan.layers.map((layer, l): OffloadLayer => {
    const seen = new Set<number>();
    for (const e of [...layer.gpu, ...layer.host, ...(layer.disk ?? [])]) {
      if (!Number.isInteger(e) || e < 0 || e >= footprint.experts) {
        throw refuse(`layer ${l} names expert ${String(e)}; the model has ${footprint.experts} per layer`);
      }
      if (seen.has(e)) throw refuse(`layer ${l} places expert ${e} twice`);
      seen.add(e);
    }
    const experts = footprint.expertBytes[l] === 0 ? 0 : footprint.experts;
    if (seen.size !== experts) {
      throw refuse(
        experts === 0
          ? `layer ${l} is a dense layer, without routed experts to place`
          : `layer ${l} places ${seen.size} of its ${experts} experts; each needs a tier`,
      );
    }
    const gap = hostOnly.get(l);
    if (gap !== undefined && layer.gpu.length > 0) {
      throw new BloomeryError(
        "UNSUPPORTED_QUANT",
        `plan: layer ${l} puts ${layer.gpu.length} experts on the GPU, but ${gap}; keep them off the GPU`,
        { layer: l },
      );
    }
    return {
      gpu: [...layer.gpu],
      host: [...layer.host],
      disk: [...(layer.disk ?? [])],
      reason: layer.reason ?? "as given",
    };
  });
  return { contextSize: plan.contextSize, budgets: { ...budgets }, ...tally(footprint, budgets, layers), layers };
}
