// Where bloomery-serve puts the model: llama-server's -ngl, --cpu-moe, --n-cpu-moe and -ot mapped
// onto loadModel's gpu and plan options. bloomery always keeps the dense weights (attention, norms,
// router, embeddings, output) on the GPU when it uses one, so what these flags can move to the CPU
// is the routed experts; a flag that asks for more is refused by name rather than half-obeyed.
// bloomery's own --gpu-budget, --host-ram and --residency are loadModel's gpu.budget, hostRam (whose sizes it
// checks) and residency.
import {
  getSystemInfo,
  modelFootprint,
  planOffload,
  type LoadModelOptions,
  type OffloadPlan,
} from "../../src/index.js";
import { UsageError, type ServeOptions } from "./options.js";

export interface Placement {
  gpu: LoadModelOptions["gpu"];
  plan?: OffloadPlan;
  hostRam?: LoadModelOptions["hostRam"];
  residency?: LoadModelOptions["residency"];
  /** One line for the log: where the model runs and why. */
  description: string;
}

const EXPERT_TENSORS = ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"];

/**
 * The -ot rules as (regex, on the CPU): CPU keeps the tensors in host RAM, CUDA0 (the GPU bloomery uses) where they
 * are by default; another buffer type is refused rather than read as the GPU.
 */
function overrideRules(patterns: readonly string[]): { regex: RegExp; cpu: boolean; text: string }[] {
  return patterns.map((text) => {
    const at = text.lastIndexOf("=");
    if (at <= 0)
      throw new UsageError(`--override-tensor ${JSON.stringify(text)}: expected <tensor regex>=<buffer type>`);
    const buffer = text.slice(at + 1);
    if (!/^(cpu|cuda0)$/i.test(buffer))
      throw new UsageError(
        `--override-tensor ${JSON.stringify(text)}: the buffer type must be CPU or CUDA0, not ${JSON.stringify(buffer)}`,
      );
    let regex: RegExp;
    try {
      regex = new RegExp(text.slice(0, at));
    } catch (error) {
      throw new UsageError(`--override-tensor ${JSON.stringify(text)}: ${(error as Error).message}`);
    }
    return { regex, cpu: /^cpu$/i.test(buffer), text };
  });
}

/** Which layers' routed experts the flags send to the CPU; refuses a rule that would move a dense tensor. */
export function cpuExpertLayers(options: ServeOptions, layers: number): boolean[] {
  const rules = overrideRules(options.overrideTensors);
  const denseProbe = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate_inp", "attn_norm", "ffn_norm"];
  for (const rule of rules.filter((r) => r.cpu)) {
    for (let l = 0; l < layers; l++) {
      const dense = denseProbe.find((name) => rule.regex.test(`blk.${l}.${name}.weight`));
      if (dense) {
        throw new UsageError(
          `--override-tensor ${rule.text} matches blk.${l}.${dense}.weight: only routed expert tensors ` +
            `(${EXPERT_TENSORS.join(", ")}) can be kept on the CPU`,
        );
      }
    }
  }
  return Array.from({ length: layers }, (_, l) => {
    if (options.cpuMoe || (options.nCpuMoe !== undefined && l < options.nCpuMoe)) return true;
    const names = EXPERT_TENSORS.map((t) => `blk.${l}.${t}.weight`);
    // The first rule matching a tensor decides its buffer, as llama.cpp applies them.
    const decided = names.map((name) => rules.find((r) => r.regex.test(name))?.cpu ?? false);
    if (decided.some((cpu) => cpu) && !decided.every((cpu) => cpu)) {
      throw new UsageError(
        `--override-tensor keeps only some of layer ${l}'s expert tensors on the CPU: bloomery moves an expert's ` +
          `gate, up and down together`,
      );
    }
    return decided[0]!;
  });
}

/** loadModel's gpu and hostRam options of a load on the GPU, from --gpu-budget and --host-ram. */
export function gpuBudgets(options: ServeOptions): {
  gpu: LoadModelOptions["gpu"];
  hostRam: Pick<LoadModelOptions, "hostRam">;
  /** How the log names the limits. */
  within: string;
} {
  const limits = [
    ...(options.gpuBudget !== undefined ? [`${options.gpuBudget} of GPU memory`] : []),
    ...(options.hostRam !== undefined ? [`${options.hostRam} of host RAM`] : []),
  ];
  return {
    gpu: options.gpuBudget !== undefined ? { budget: options.gpuBudget } : "auto",
    hostRam: options.hostRam !== undefined ? { hostRam: options.hostRam } : {},
    within: limits.length > 0 ? `, within ${limits.join(" and ")}` : "",
  };
}

/**
 * The flags given that only mean something on the GPU: --residency says how experts move between the GPU and host
 * RAM, the others where they go.
 */
function gpuOnlyFlags(options: ServeOptions): string[] {
  const given: [string, boolean][] = [
    ["--cpu-moe", options.cpuMoe],
    ["--n-cpu-moe", options.nCpuMoe !== undefined],
    ["--override-tensor", options.overrideTensors.length > 0],
    ["--gpu-budget", options.gpuBudget !== undefined],
    ["--host-ram", options.hostRam !== undefined],
    ["--residency", options.residency !== undefined],
  ];
  return given.filter(([, set]) => set).map(([name]) => name);
}

const listed = (names: string[]) =>
  names.length === 1 ? names[0]! : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
const needs = (names: string[]) => (names.length === 1 ? "needs" : "need");

/**
 * The gpu, plan, hostRam and residency options for loadModel from the serve options, for a model of `layers` layers
 * loaded with `contextSize` (undefined: loadModel's default). `gpus`: the usable CUDA devices (the system's; tests
 * pass 1 to see what a GPU machine would load).
 */
export async function placement(
  modelPath: string,
  options: ServeOptions,
  { layers, contextSize }: { layers: number; contextSize?: number },
  gpus = getSystemInfo().gpus.length,
): Promise<Placement> {
  const moesToCpu = options.cpuMoe || options.nCpuMoe !== undefined || options.overrideTensors.length > 0;
  const gpuFlags = gpuOnlyFlags(options);
  const ngl = options.gpuLayers?.trim().toLowerCase();
  if (options.nCpuMoe !== undefined && options.nCpuMoe < 0) throw new UsageError("--n-cpu-moe must be at least 0");
  if (ngl === "0") {
    if (gpuFlags.length > 0)
      throw new UsageError(`${listed(gpuFlags)} ${needs(gpuFlags)} the GPU; -ngl 0 runs on the CPU`);
    return { gpu: false, description: "on the CPU (-ngl 0)" };
  }
  if (ngl !== undefined && ngl !== "auto" && ngl !== "all" && ngl !== "-1") {
    if (!/^\d+$/.test(ngl)) throw new UsageError(`-ngl must be a layer count, auto or all, not ${JSON.stringify(ngl)}`);
    if (Number(ngl) < layers) {
      throw new UsageError(
        `-ngl ${ngl} of ${layers} layers: bloomery keeps every layer's dense weights on the GPU; ` +
          `use --n-cpu-moe or --cpu-moe to keep routed experts on the CPU instead`,
      );
    }
  }
  const onCpu = moesToCpu ? cpuExpertLayers(options, layers) : [];
  if (gpus === 0) {
    const given = [...(ngl !== undefined ? ["-ngl"] : []), ...gpuFlags];
    if (given.length > 0) throw new UsageError(`${listed(given)} ${needs(given)} a CUDA GPU, and none is usable`);
    return { gpu: false, description: "on the CPU (no usable CUDA GPU)" };
  }
  const { gpu, hostRam, within } = gpuBudgets(options);
  const residency = options.residency !== undefined ? { residency: options.residency } : {};
  if (!moesToCpu)
    return {
      gpu,
      ...hostRam,
      ...residency,
      description: `on the GPU (experts it cannot hold stay in host RAM)${within}`,
    };
  const footprint = await modelFootprint(modelPath, contextSize !== undefined ? { contextSize } : {});
  // Every expert on the GPU but those the flags name; loadModel checks the result against the real budgets.
  const all = planOffload(footprint, { gpu: Infinity, hostRam: Infinity });
  const plan: OffloadPlan = {
    ...all,
    layers: all.layers.map((layer, l) => {
      const experts = [...layer.gpu, ...layer.host].sort((a, b) => a - b);
      return onCpu[l]
        ? { gpu: [], host: experts, reason: "routed experts kept on the CPU by the command line" }
        : { gpu: experts, host: [], reason: "routed experts on the GPU (the command line moves only the others)" };
    }),
  };
  const count = onCpu.filter(Boolean).length;
  return {
    gpu,
    ...hostRam,
    ...residency,
    plan,
    description: `on the GPU, with the routed experts of ${count} of ${layers} layers on the CPU${within}`,
  };
}
