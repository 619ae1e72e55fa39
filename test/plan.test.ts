import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  BloomeryError,
  checkOffloadPlan,
  getSystemInfo,
  loadModel,
  modelFootprint,
  planOffload,
  readGgufInfo,
  type GpuKernelGap,
  type ModelFootprint,
  type OffloadPlan,
} from "../src/index.js";
import { FILLABLE_TYPES } from "../tools/synth/blocks.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// planOffload places dense weights, KV cache and workspace first, then the same number of
// routed experts in each layer while the GPU budget lasts, the rest in host RAM.
const footprint: ModelFootprint = {
  contextSize: 1024,
  experts: 8,
  denseBytes: 10_000,
  expertBytes: [100, 100, 100, 100],
  kvBytes: 2_000,
  workspaceBytes: 500,
  streamBytes: 0,
  reserveBytes: 1 << 20,
  arenaSlotBytes: 128,
  kernelGaps: [],
};
const fixed = 12_500;
const everyExpert = 4 * 8 * 100;
const roomy = 1e12;

function thrown(fn: () => unknown): BloomeryError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(BloomeryError);
    return error as BloomeryError;
  }
  throw new Error("expected a BloomeryError");
}

function expectPartition(plan: OffloadPlan, experts: number): void {
  for (const layer of plan.layers) {
    expect([...layer.gpu, ...layer.host, ...(layer.disk ?? [])].sort((a, b) => a - b)).toEqual(
      Array.from({ length: experts }, (_, i) => i),
    );
  }
}

describe("planOffload", () => {
  it("places no experts in a model's dense layers (DeepSeek's and GLM's leading ones), and refuses plans that do", () => {
    const leadingDense: ModelFootprint = { ...footprint, expertBytes: [0, 100, 100, 100] };
    // Room for 5 experts in each of the three MoE layers (a dense layer costs nothing) and 50 bytes to spare.
    const plan = planOffload(leadingDense, { gpu: fixed + 3 * 5 * 100 + 50, hostRam: roomy });
    expect(plan.layers[0]).toEqual({ gpu: [], host: [], disk: [], reason: "a dense layer: no routed experts" });
    for (const layer of plan.layers.slice(1)) {
      expect(layer.gpu).toEqual([0, 1, 2, 3, 4]);
      expect(layer.host).toEqual([5, 6, 7]);
    }
    expect(plan.bytes.gpu.experts).toBe(1500);
    expect(plan.bytes.host).toBe(900);
    expect(checkOffloadPlan(plan, leadingDense, plan.budgets).layers).toEqual(plan.layers);
    const listed = structuredClone(plan);
    listed.layers[0]!.host = [0];
    const error = thrown(() => checkOffloadPlan(listed, leadingDense, plan.budgets));
    expect(error.code).toBe("INVALID_ARGUMENT");
    expect(error.message).toMatch(/layer 0 is a dense layer/);
  });

  it("refuses a GPU budget that cannot hold the dense part, naming each term", () => {
    const error = thrown(() => planOffload(footprint, { gpu: fixed - 1, hostRam: roomy }));
    expect(error.code).toBe("INSUFFICIENT_MEMORY");
    expect(error.message).toMatch(/dense weights .* KV cache .* \(contextSize 1024\) .* workspace .* gpu budget/);
  });

  it("puts every expert on the host when only the dense part fits", () => {
    const plan = planOffload(footprint, { gpu: fixed + 99, hostRam: roomy });
    expect(plan.layers.map((l) => l.gpu.length)).toEqual([0, 0, 0, 0]);
    expect(plan.bytes.gpu).toEqual({
      dense: 10_000,
      kvCache: 2_000,
      workspace: 500,
      staging: 0,
      experts: 0,
      total: fixed,
    });
    expect(plan.bytes.host).toBe(everyExpert);
    expect(plan.layers[0]?.reason).toMatch(/no GPU room/);
    expectPartition(plan, 8);
  });

  it("puts every expert on the GPU when they all fit", () => {
    const plan = planOffload(footprint, { gpu: fixed + everyExpert, hostRam: 0 });
    expect(plan.layers.map((l) => l.gpu.length)).toEqual([8, 8, 8, 8]);
    expect(plan.bytes.host).toBe(0);
    expect(plan.bytes.gpu.total).toBe(fixed + everyExpert);
    expect(plan.layers[3]?.reason).toMatch(/all 8 experts/);
  });

  it("spreads a partial budget evenly, the remainder one more in the first layers", () => {
    const plan = planOffload(footprint, { gpu: fixed + 3 * 400 + 250, hostRam: roomy });
    expect(plan.layers.map((l) => l.gpu.length)).toEqual([4, 4, 3, 3]);
    expect(plan.layers[0]?.gpu).toEqual([0, 1, 2, 3]);
    expect(plan.layers[2]?.host).toEqual([3, 4, 5, 6, 7]);
    expect(plan.bytes.gpu.experts).toBe(1400);
    expect(plan.bytes.host).toBe(1800);
    expectPartition(plan, 8);
  });

  it("covers every budget from zero expert slots to all of them", () => {
    let previous = -1;
    for (let slots = 0; slots <= 32; ++slots) {
      const budget = fixed + slots * 100;
      const plan = planOffload(footprint, { gpu: budget, hostRam: roomy });
      const counts = plan.layers.map((l) => l.gpu.length);
      expect(counts.reduce((a, b) => a + b, 0)).toBe(slots);
      expect(Math.max(...counts) - Math.min(...counts)).toBeLessThanOrEqual(1);
      expect(plan.bytes.gpu.total).toBeLessThanOrEqual(budget);
      expect(plan.bytes.gpu.experts + plan.bytes.host).toBe(everyExpert);
      expect(plan.bytes.gpu.experts).toBeGreaterThan(previous);
      previous = plan.bytes.gpu.experts;
      expectPartition(plan, 8);
    }
  });

  it("reserves the prompt staging only when some experts stay on the host", () => {
    const staged = { ...footprint, streamBytes: 700 };
    const whole = planOffload(staged, { gpu: fixed + everyExpert, hostRam: 0 });
    expect(whole.bytes.gpu.staging).toBe(0);
    expect(whole.layers.every((l) => l.host.length === 0)).toBe(true);
    const partial = planOffload(staged, { gpu: fixed + everyExpert - 1, hostRam: roomy });
    expect(partial.bytes.gpu.staging).toBe(700);
    expect(partial.layers.map((l) => l.gpu.length)).toEqual([6, 6, 6, 6]);
    expect(partial.bytes.gpu.total).toBeLessThanOrEqual(fixed + everyExpert - 1);
    const error = thrown(() => planOffload(staged, { gpu: fixed + 699, hostRam: roomy }));
    expect(error.message).toMatch(/prompt staging/);
  });

  it("pages the host experts from disk when hostRam cannot hold them, into an arena of whole slots", () => {
    const inRam = planOffload(footprint, { gpu: fixed + 1600, hostRam: 1600 });
    expect(inRam.bytes.host).toBe(1600);
    expect(inRam.arena).toEqual({ slots: 0, slotBytes: 128, bytes: 0 });
    expect(inRam.layers.every((l) => l.disk?.length === 0)).toBe(true);
    const paged = planOffload(footprint, { gpu: fixed + 1600, hostRam: 1599 });
    expect(paged.layers.map((l) => l.gpu.length)).toEqual([4, 4, 4, 4]);
    expect(paged.layers.map((l) => l.disk)).toEqual([
      [4, 5, 6, 7],
      [4, 5, 6, 7],
      [4, 5, 6, 7],
      [4, 5, 6, 7],
    ]);
    expect(paged.layers.every((l) => l.host.length === 0)).toBe(true);
    expect(paged.layers[0]?.reason).toMatch(/paged from disk/);
    expect(paged.bytes).toMatchObject({ host: 0, disk: 1600 });
    expect(paged.arena).toEqual({ slots: 12, slotBytes: 128, bytes: 1536 });
    expectPartition(paged, 8);
  });

  it("pages from disk when the GPU budget holds the dense part but not the prompt staging", () => {
    const staged = { ...footprint, streamBytes: 700 };
    const paged = planOffload(staged, { gpu: fixed + 699, hostRam: 1000 });
    expect(paged.bytes.gpu.staging).toBe(0);
    expect(paged.layers.map((l) => l.gpu.length)).toEqual([2, 2, 1, 1]);
    expect(paged.layers.map((l) => l.disk?.length)).toEqual([6, 6, 7, 7]);
    expect(paged.layers.every((l) => l.host.length === 0)).toBe(true);
    const error = thrown(() => planOffload(staged, { gpu: fixed + 699, hostRam: roomy }));
    expect(error.code).toBe("INSUFFICIENT_MEMORY");
    expect(error.message).toMatch(/prompt staging/);
  });

  it("refuses a hostRam below the arena's minimum, the most experts one layer pages, by name", () => {
    expect(planOffload(footprint, { gpu: fixed + 1600, hostRam: 4 * 128 }).arena.slots).toBe(4);
    const error = thrown(() => planOffload(footprint, { gpu: fixed + 1600, hostRam: 4 * 128 - 1 }));
    expect(error.code).toBe("INSUFFICIENT_MEMORY");
    expect(error.message).toMatch(/arena needs at least 4 slots .*layer 0 pages 4 experts.* holds 3/);
  });

  it("gives the disk tier the prompt staging's GPU room: its prompts hand rows to the CPU", () => {
    const staged = { ...footprint, streamBytes: 700 };
    const plan = planOffload(staged, { gpu: fixed + 2400, hostRam: 4 * 128 });
    expect(plan.bytes.gpu.staging).toBe(0);
    expect(plan.layers.map((l) => l.gpu.length)).toEqual([6, 6, 6, 6]);
    expect(plan.bytes.gpu.total).toBe(fixed + 2400);
  });

  it("plans a model on the CPU (a GPU budget of 0): every expert on the host or the disk tier", () => {
    const cpu = { ...footprint, denseBytes: 0, kvBytes: 0, workspaceBytes: 0, reserveBytes: 0 };
    const inRam = planOffload(cpu, { gpu: 0, hostRam: everyExpert });
    expect(inRam.layers.every((l) => l.gpu.length === 0 && l.host.length === 8)).toBe(true);
    expect(inRam.layers[0]?.reason).toMatch(/no GPU/);
    expect(inRam.bytes.gpu.total).toBe(0);
    const paged = planOffload(cpu, { gpu: 0, hostRam: everyExpert - 1 });
    expect(paged.layers.every((l) => l.disk?.length === 8)).toBe(true);
    expect(paged.arena.slots).toBe(Math.floor((everyExpert - 1) / 128));
  });

  it("plans a dense model as its dense part alone", () => {
    const dense = { ...footprint, experts: 0, expertBytes: [0, 0, 0, 0] };
    const plan = planOffload(dense, { gpu: fixed, hostRam: 0 });
    expect(plan.layers.every((l) => l.gpu.length === 0 && l.host.length === 0)).toBe(true);
    expect(plan.bytes.gpu.total).toBe(fixed);
  });
});

// A layer whose expert stacks the GPU cannot serve keeps its experts off the GPU (in host RAM, or
// on the disk tier when hostRam cannot hold them); any other tensor the GPU cannot serve keeps
// the model off the GPU.
describe("planOffload with tensors the GPU cannot serve", () => {
  const noKernel = (tensor: string, expertLayer: number | null): GpuKernelGap => ({
    tensor,
    reason: `${tensor} is I8, which has no GPU matvec kernel`,
    expertLayer,
  });
  const gapped: ModelFootprint = {
    ...footprint,
    streamBytes: 700,
    kernelGaps: [noKernel("blk.1.ffn_down_exps.weight", 1)],
  };

  it("keeps such a layer's experts in host RAM and says why", () => {
    const plan = planOffload(gapped, { gpu: roomy, hostRam: roomy });
    expect(plan.layers.map((l) => l.gpu.length)).toEqual([8, 0, 8, 8]);
    expect(plan.layers[1]?.host).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(plan.layers[1]?.reason).toMatch(/blk\.1\.ffn_down_exps\.weight is I8.*no GPU matvec kernel.*off the GPU/);
    expect(plan.layers[0]?.reason).toMatch(/all 8 experts/);
    expect(plan.bytes.host).toBe(800);
    expect(plan.bytes.gpu.staging).toBe(700);
    expectPartition(plan, 8);
  });

  it("spreads the budget over the other layers only", () => {
    const plan = planOffload(gapped, { gpu: fixed + 700 + 3 * 4 * 100 + 150, hostRam: roomy });
    expect(plan.layers.map((l) => l.gpu.length)).toEqual([5, 0, 4, 4]);
    expect(plan.bytes.gpu.experts).toBe(1300);
    expect(plan.bytes.host).toBe(3 * 100 + 800 + 4 * 100 + 4 * 100);
  });

  it("pages such a layer's experts from disk with the others when hostRam cannot hold them", () => {
    const plan = planOffload(gapped, { gpu: fixed + 3 * 4 * 100, hostRam: 8 * 128 });
    expect(plan.layers.map((l) => l.gpu.length)).toEqual([4, 0, 4, 4]);
    expect(plan.layers[1]?.disk).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(plan.layers[1]?.reason).toMatch(/no GPU matvec kernel.*off the GPU.*paged from disk/);
    expect(plan.bytes.gpu.staging).toBe(0);
    expect(plan.arena.slots).toBe(8);
    expectPartition(plan, 8);
  });

  it("names every gap of a layer", () => {
    const twice = { ...gapped, kernelGaps: [...gapped.kernelGaps, noKernel("blk.1.ffn_gate_exps.weight", 1)] };
    const reason = planOffload(twice, { gpu: roomy, hostRam: roomy }).layers[1]?.reason;
    expect(reason).toContain("blk.1.ffn_down_exps.weight");
    expect(reason).toContain("blk.1.ffn_gate_exps.weight");
  });

  it("refuses a dense tensor without a GPU kernel by name", () => {
    const dense = { ...gapped, kernelGaps: [...gapped.kernelGaps, noKernel("blk.0.attn_q.weight", null)] };
    for (const attempt of [
      () => planOffload(dense, { gpu: roomy, hostRam: roomy }),
      () =>
        checkOffloadPlan(planOffload(gapped, { gpu: roomy, hostRam: roomy }), dense, { gpu: roomy, hostRam: roomy }),
    ]) {
      const error = thrown(attempt);
      expect(error.code).toBe("UNSUPPORTED_QUANT");
      expect(error.message).toMatch(/blk\.0\.attn_q\.weight is I8.*cannot run on the GPU/);
    }
  });

  it("refuses a passed plan that puts such a layer's experts on the GPU", () => {
    const budgets = { gpu: roomy, hostRam: roomy };
    const all = planOffload(footprint, budgets);
    const error = thrown(() => checkOffloadPlan(all, gapped, budgets));
    expect(error.code).toBe("UNSUPPORTED_QUANT");
    expect(error.message).toMatch(/layer 1 puts 8 experts on the GPU.*blk\.1\.ffn_down_exps\.weight/);
    expect(checkOffloadPlan(planOffload(gapped, budgets), gapped, budgets).layers[1]?.gpu).toEqual([]);
  });
});

describe("checkOffloadPlan", () => {
  const budgets = { gpu: fixed + everyExpert, hostRam: roomy };
  const base = planOffload(footprint, budgets);
  const edited = (edit: (layers: OffloadPlan["layers"]) => void): OffloadPlan => {
    const copy = structuredClone(base);
    edit(copy.layers);
    return copy;
  };

  it("uses an edited plan as given, with its bytes recomputed", () => {
    const alternate = edited((layers) => {
      for (const layer of layers) {
        layer.gpu = [0, 2, 4, 6];
        layer.host = [7, 5, 3, 1];
        layer.reason = "even experts on the GPU";
      }
    });
    const plan = checkOffloadPlan(alternate, footprint, budgets);
    expect(plan.layers[1]).toEqual({
      gpu: [0, 2, 4, 6],
      host: [7, 5, 3, 1],
      disk: [],
      reason: "even experts on the GPU",
    });
    expect(plan.bytes.gpu.experts).toBe(1600);
    expect(plan.bytes.host).toBe(1600);
  });

  it("refuses plans that do not fit the model", () => {
    const faults: [string, OffloadPlan][] = [
      ["3 layers", edited((layers) => layers.pop())],
      ["twice", edited((layers) => layers[0]?.host.push(0))],
      ["places 7 of its 8", edited((layers) => layers[2]?.gpu.pop())],
      ["expert 8", edited((layers) => layers[1]?.gpu.push(8))],
      ["contextSize 64", { ...structuredClone(base), contextSize: 64 }],
    ];
    for (const [mentions, plan] of faults) {
      const error = thrown(() => checkOffloadPlan(plan, footprint, budgets));
      expect(error.code).toBe("INVALID_ARGUMENT");
      expect(error.message).toContain(mentions);
    }
  });

  it("gives the arena what hostRam leaves after the host experts of an edited plan", () => {
    const mixed = edited((layers) => {
      for (const layer of layers) {
        layer.gpu = [0, 1, 2, 3];
        layer.host = [4, 5];
        layer.disk = [6, 7];
      }
    });
    const plan = checkOffloadPlan(mixed, footprint, { gpu: roomy, hostRam: 800 + 3 * 128 + 5 });
    expect(plan.bytes).toMatchObject({ host: 800, disk: 800 });
    expect(plan.arena).toEqual({ slots: 3, slotBytes: 128, bytes: 384 });
    const error = thrown(() => checkOffloadPlan(mixed, footprint, { gpu: roomy, hostRam: 800 + 128 }));
    expect(error.message).toMatch(/arena needs at least 2 slots .* less the host experts'/);
    const onHost = planOffload(footprint, { gpu: fixed, hostRam: roomy });
    const tooMuch = thrown(() => checkOffloadPlan(onHost, footprint, { gpu: roomy, hostRam: 0 }));
    expect(tooMuch.message).toMatch(/hostRam .* disk/);
  });

  it("refuses an edited plan the GPU budget cannot hold", () => {
    const error = thrown(() => checkOffloadPlan(base, footprint, { gpu: fixed + everyExpert - 1, hostRam: roomy }));
    expect(error.code).toBe("INSUFFICIENT_MEMORY");
    expect(error.message).toMatch(/experts .* gpu budget/);
  });
});

describe("modelFootprint", () => {
  const dir = mkdtempSync(join(tmpdir(), "bloomery-plan-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const cuda = getSystemInfo().cuda.compiled;

  it.skipIf(!cuda)("reports the file's expert slices and the KV cache the engine allocates", async () => {
    const path = join(dir, "tiny-qwen3moe.gguf");
    await writeSyntheticModel(path, { preset: "tiny-qwen3moe", weightType: "Q4_K" });
    const info = await readGgufInfo(path);
    const f = await modelFootprint(path, { contextSize: 64 });
    const layers = f.expertBytes.length;
    const experts = info.tensors.filter((t) => /_exps\.weight$/.test(t.name)).reduce((sum, t) => sum + t.bytes, 0);
    expect(f.experts).toBeGreaterThan(1);
    expect(f.expertBytes.reduce((a, b) => a + b, 0) * f.experts).toBe(experts);
    expect(f.contextSize).toBe(64);
    const m = info.metadata;
    const kvWidth = Number(m["qwen3moe.attention.head_count_kv"]) * Number(m["qwen3moe.attention.key_length"]);
    expect(f.kvBytes).toBe(2 * layers * 64 * kvWidth * 2);
    expect(f.denseBytes + experts).toBeGreaterThan(info.summary.tensorBytes);
    expect(f.kernelGaps).toEqual([]);
  });

  it.skipIf(!cuda)("counts a low-bit mix's expert slices, layer by layer, at the file's bytes", async () => {
    const path = join(dir, "tiny-glm4moe-ud.gguf");
    await writeSyntheticModel(path, { preset: "tiny-glm4moe-ud" });
    const info = await readGgufInfo(path);
    const f = await modelFootprint(path, { contextSize: 64 });
    expect(f.kernelGaps).toEqual([]);
    // Layers 1 and 2 hold experts of different types (IQ1_S/IQ2_XXS, IQ2_XXS/IQ3_S): their slices differ.
    for (const layer of [1, 2]) {
      const stacks = info.tensors.filter((t) => t.name.startsWith(`blk.${layer}.`) && /_exps\.weight$/.test(t.name));
      expect(stacks.map((t) => t.type).some((type) => type.startsWith("IQ"))).toBe(true);
      expect(f.expertBytes[layer]! * f.experts).toBe(stacks.reduce((sum, t) => sum + t.bytes, 0));
    }
    expect(f.expertBytes[1]).not.toBe(f.expertBytes[2]);
  });

  it.skipIf(!cuda)("leaves no tensor without a GPU kernel in a model of any weight type the CPU runs", async () => {
    for (const weightType of FILLABLE_TYPES) {
      const path = join(dir, `tiny-qwen3moe-${weightType}.gguf`);
      await writeSyntheticModel(path, { preset: "tiny-qwen3moe", weightType });
      const f = await modelFootprint(path, { contextSize: 64 });
      expect(f.kernelGaps, weightType).toEqual([]);
      rmSync(path);
    }
  });

  it.skipIf(!cuda)(
    "lists expert stacks the fused kernel cannot take, and the plan keeps their experts off the GPU",
    async () => {
      const path = join(dir, "tiny-qwen3moe-mix.gguf");
      await writeSyntheticModel(path, { preset: "tiny-qwen3moe-mix" });
      const f = await modelFootprint(path, { contextSize: 64 });
      expect(f.kernelGaps.map((g) => [g.tensor, g.expertLayer])).toEqual([["blk.1.ffn_up_exps.weight", 1]]);
      expect(f.kernelGaps[0]?.reason).toMatch(/blk\.1\.ffn_gate_exps\.weight \(Q4_K\) and .*\(IQ4_XS\) differ in type/);
      // The staging ring holds the other layers' experts: they may stream.
      expect(f.streamBytes).toBeGreaterThan(0);
      const plan = planOffload(f, { gpu: roomy, hostRam: roomy });
      expect(plan.layers.map((l) => l.gpu.length)).toEqual([8, 0, 8]);
      expect(plan.layers[1]?.reason).toMatch(/differ in type.*off the GPU/);
      expect(plan.bytes.gpu.staging).toBe(f.streamBytes);
    },
  );

  it.skipIf(!cuda)(
    "counts passes of 4,096 rows in streaming's cost where the staging outweighs their workspace",
    async () => {
      // The staging ring: two of the largest layer's expert stacks, and an int per expert.
      const staging = (f: ModelFootprint) => 2 * Math.max(...f.expertBytes) * f.experts + 4 * f.experts;
      const big = join(dir, "qwen3-30b-a3b.gguf");
      await writeSyntheticModel(big, { preset: "qwen3-30b-a3b", headerOnly: true });
      const f = await modelFootprint(big, { contextSize: 8192 });
      // Twice the rows: about twice the workspace (a pass's activations, logits aside), within the staging's size.
      const growth = f.streamBytes - staging(f);
      expect(growth).toBeGreaterThan(0.5 * f.workspaceBytes);
      expect(growth).toBeLessThanOrEqual(Math.min(1.5 * f.workspaceBytes, staging(f)));
      rmSync(big);
      // A tiny model's experts copy in no time, and a larger workspace would outweigh them: 2,048 rows.
      const tiny = join(dir, "tiny-qwen3moe.gguf");
      await writeSyntheticModel(tiny, { preset: "tiny-qwen3moe", weightType: "Q4_K" });
      const t = await modelFootprint(tiny, { contextSize: 64 });
      expect(t.streamBytes).toBe(staging(t));
    },
  );

  it.skipIf(!cuda)(
    "plans DeepSeek-V4-Flash's whole file (header-only) on a 24 GiB GPU: 128 GiB of host RAM holds the rest, 64 GiB pages it from disk",
    async () => {
      const GiB = 2 ** 30;
      const path = join(dir, "deepseek-v4-flash.gguf");
      await writeSyntheticModel(path, { preset: "deepseek-v4-flash", headerOnly: true });
      const f = await modelFootprint(path, { contextSize: 32_768 });
      rmSync(path);
      expect(f.expertBytes).toHaveLength(43);
      const all = 43 * f.experts;
      const total = (plan: OffloadPlan, tier: "gpu" | "host" | "disk") =>
        plan.layers.reduce((n, layer) => n + (layer[tier] ?? []).length, 0);
      // 136 GB at the slice's Q3_K_M-like mix: the GPU takes what its 24 GiB leave for experts, host RAM the rest.
      const roomy = planOffload(f, { gpu: 24 * GiB, hostRam: 128 * GiB });
      expect(total(roomy, "gpu")).toBeGreaterThan(0);
      expect(total(roomy, "gpu") + total(roomy, "host")).toBe(all);
      expect(total(roomy, "disk")).toBe(0);
      expect(roomy.bytes.gpu.total).toBeLessThanOrEqual(24 * GiB);
      expect(roomy.bytes.host).toBeLessThanOrEqual(128 * GiB);
      expect(roomy.arena.slots).toBe(0);
      // With 64 GiB the host experts cannot all stay: every one not on the GPU is paged from the file into an arena
      // that RAM holds, with room for the widest layer's.
      const tight = planOffload(f, { gpu: 24 * GiB, hostRam: 64 * GiB });
      expect(total(tight, "host")).toBe(0);
      expect(total(tight, "disk")).toBe(all - total(tight, "gpu"));
      expect(tight.arena.bytes).toBeLessThanOrEqual(64 * GiB);
      expect(tight.arena.slots).toBeGreaterThanOrEqual(Math.max(...tight.layers.map((l) => (l.disk ?? []).length)));
      for (const layer of tight.layers) expect(layer.reason).toMatch(/paged from disk/);
    },
  );

  it.skipIf(!cuda)(
    "plans DeepSeek-V4.1-Flash's widths (header-only) on a 24 GiB GPU and 128 GiB of host RAM: the GPU, a RAM arena and the disk",
    async () => {
      const GiB = 2 ** 30;
      const path = join(dir, "deepseek-v4.1-flash.gguf");
      await writeSyntheticModel(path, { preset: "deepseek-v4.1-flash", headerOnly: true });
      const f = await modelFootprint(path, { contextSize: 32_768 });
      rmSync(path);
      // 40 layers of 384 routed experts, all MoE: 15,360 experts, every layer's the same width.
      expect(f.expertBytes).toHaveLength(40);
      expect(f.experts).toBe(384);
      expect(new Set(f.expertBytes).size).toBe(1);
      const all = 40 * 384;
      const total = (plan: OffloadPlan, tier: "gpu" | "host" | "disk") =>
        plan.layers.reduce((n, layer) => n + (layer[tier] ?? []).length, 0);
      // About twice V4-Flash's experts at the same mix: 128 GiB of host RAM cannot hold those the GPU leaves, so
      // they are all paged from the file through an arena that takes the whole budget in whole slots.
      const plan = planOffload(f, { gpu: 24 * GiB, hostRam: 128 * GiB });
      expectPartition(plan, 384);
      const gpu = total(plan, "gpu");
      const disk = total(plan, "disk");
      expect(gpu).toBeGreaterThan(0);
      expect(total(plan, "host")).toBe(0);
      expect(disk).toBe(all - gpu);
      expect(plan.bytes.gpu.total).toBeLessThanOrEqual(24 * GiB);
      expect(plan.bytes.gpu.staging).toBe(0);
      expect(plan.bytes.gpu.experts).toBe(gpu * f.expertBytes[0]!);
      expect(plan.bytes.disk).toBe(disk * f.expertBytes[0]!);
      expect(plan.bytes.host).toBe(0);
      expect(plan.arena.slots).toBe(Math.floor((128 * GiB) / f.arenaSlotBytes));
      expect(plan.arena.bytes).toBeLessThanOrEqual(128 * GiB);
      // The arena holds more than any layer pages, and fewer than the disk tier's experts: it pages.
      expect(plan.arena.slots).toBeGreaterThanOrEqual(Math.max(...plan.layers.map((l) => (l.disk ?? []).length)));
      expect(plan.arena.slots).toBeLessThan(disk);
      // The same count on the GPU in every layer (one more in the first), and each layer's reason says what each
      // tier holds.
      const seated = plan.layers.map((l) => l.gpu.length);
      expect(Math.max(...seated) - Math.min(...seated)).toBeLessThanOrEqual(1);
      for (const layer of plan.layers) {
        expect(layer.reason).toContain(`${layer.gpu.length} of 384 experts fit the GPU budget`);
        expect(layer.reason).toContain(`the CPU's ${layer.disk!.length} are paged from disk into the RAM arena`);
      }
    },
  );

  it("is what loadModel plans with; a plan with GPU experts without gpu is refused", async () => {
    const path = join(dir, "tiny-qwen3moe.gguf");
    await writeSyntheticModel(path, { preset: "tiny-qwen3moe", weightType: "Q4_K" });
    const plan = planOffload({ ...footprint, expertBytes: [100, 100, 100] }, { gpu: fixed + 300, hostRam: roomy });
    await expect(loadModel(path, { plan })).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
      message: expect.stringMatching(/GPU: load with gpu/),
    });
    await expect(loadModel(path, { gpu: false, hostRam: "lots" })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
  });
});

describe("planOffload with a routing profile", () => {
  // Layer l's expert (7 - e + l) % 8 is the e-th most routed.
  const profile = {
    layers: 4,
    experts: 8,
    steps: 10,
    counts: [0, 1, 2, 3].map((l) => Array.from({ length: 8 }, (_, e) => 8 - ((e + l) % 8) + (e === 0 ? 0.5 : 0))),
  };

  it("seats each layer's most-routed experts on the GPU", () => {
    const plan = planOffload(footprint, { gpu: fixed + 4 * 3 * 100, hostRam: roomy }, { profile });
    plan.layers.forEach((layer, l) => {
      const ranked = Array.from({ length: 8 }, (_, e) => e).sort(
        (a, b) => profile.counts[l]![b]! - profile.counts[l]![a]! || a - b,
      );
      expect(layer.gpu).toEqual(ranked.slice(0, 3).sort((a, b) => a - b));
      expect(layer.host).toEqual(ranked.slice(3).sort((a, b) => a - b));
      expect(layer.reason).toMatch(/routing profile/);
    });
    expect(plan.layers[0]!.gpu).toEqual([0, 1, 2]);
    expect(plan.layers[1]!.gpu).toEqual([0, 1, 7]);
  });

  it("breaks ties by the lower expert id, as without a profile", () => {
    const flat = { ...profile, counts: profile.counts.map((row) => row.map(() => 1)) };
    const withFlat = planOffload(footprint, { gpu: fixed + 4 * 3 * 100, hostRam: roomy }, { profile: flat });
    const without = planOffload(footprint, { gpu: fixed + 4 * 3 * 100, hostRam: roomy });
    expect(withFlat.layers.map((l) => l.gpu)).toEqual(without.layers.map((l) => l.gpu));
  });

  it("refuses a profile of another shape", () => {
    const wrongLayers = { ...profile, counts: profile.counts.slice(1) };
    expect(thrown(() => planOffload(footprint, { gpu: roomy, hostRam: roomy }, { profile: wrongLayers })).code).toBe(
      "INVALID_ARGUMENT",
    );
    const negative = { ...profile, counts: profile.counts.map((row) => row.map(() => -1)) };
    expect(thrown(() => planOffload(footprint, { gpu: roomy, hostRam: roomy }, { profile: negative })).code).toBe(
      "INVALID_ARGUMENT",
    );
  });
});
