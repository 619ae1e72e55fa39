import { describe, expect, it } from "vitest";
import { parseServeOptions, UsageError } from "../examples/server/options.js";
import { cpuExpertLayers, gpuBudgets, placement } from "../examples/server/placement.js";
import { loadModel } from "../src/index.js";
import { defaultModelPath } from "../tools/default-model.js";

const LAYERS = 6;
const flags = (...argv: string[]) => parseServeOptions(argv);

describe("bloomery-serve's memory flags", () => {
  it("reads --mlock and --no-mmap, and their LLAMA_ARG_* variables", () => {
    expect(flags()).toMatchObject({ mlock: false, noMmap: false });
    expect(flags("--mlock", "--no-mmap")).toMatchObject({ mlock: true, noMmap: true });
    expect(parseServeOptions([], { LLAMA_ARG_MLOCK: "1", LLAMA_ARG_NO_MMAP: "true" })).toMatchObject({
      mlock: true,
      noMmap: true,
    });
  });
});

describe("bloomery-serve's expert placement flags", () => {
  it("--cpu-moe and --n-cpu-moe pick whole layers' routed experts", () => {
    expect(cpuExpertLayers(flags("--cpu-moe"), LAYERS)).toEqual([true, true, true, true, true, true]);
    expect(cpuExpertLayers(flags("--n-cpu-moe", "2"), LAYERS)).toEqual([true, true, false, false, false, false]);
    expect(cpuExpertLayers(flags(), LAYERS)).toEqual([false, false, false, false, false, false]);
  });

  it("-ot maps expert tensors by regex, the first matching rule deciding, as llama.cpp applies them", () => {
    expect(cpuExpertLayers(flags("-ot", "blk\\.(1|3)\\.ffn_.*_exps=CPU"), LAYERS)).toEqual([
      false,
      true,
      false,
      true,
      false,
      false,
    ]);
    expect(cpuExpertLayers(flags("-ot", "exps=CPU"), LAYERS)).toEqual([true, true, true, true, true, true]);
    // An earlier rule keeping layer 0 on the GPU wins over a later catch-all.
    expect(cpuExpertLayers(flags("-ot", "blk\\.0\\.=CUDA0,exps=CPU"), LAYERS)).toEqual([
      false,
      true,
      true,
      true,
      true,
      true,
    ]);
  });

  it("refuses by name what it cannot obey: dense tensors on the CPU, a layer's experts split, a partial -ngl", async () => {
    expect(() => cpuExpertLayers(flags("-ot", "blk\\.2\\.=CPU"), LAYERS)).toThrow(/matches blk\.2\.attn_q\.weight/);
    expect(() => cpuExpertLayers(flags("-ot", "ffn_down_exps=CPU"), LAYERS)).toThrow(/gate, up and down together/);
    expect(() => cpuExpertLayers(flags("-ot", "exps"), LAYERS)).toThrow(UsageError);
    await expect(placement("unused.gguf", flags("-ngl", "3"), { layers: LAYERS })).rejects.toThrow(
      /-ngl 3 of 6 layers/,
    );
    await expect(placement("unused.gguf", flags("-ngl", "0", "--cpu-moe"), { layers: LAYERS })).rejects.toThrow(
      /^--cpu-moe needs the GPU; -ngl 0 runs on the CPU$/,
    );
    await expect(placement("unused.gguf", flags("-ngl", "many"), { layers: LAYERS })).rejects.toThrow(/layer count/);
  });

  it("runs on the CPU with -ngl 0, and without a GPU only when no flag asks for one", async () => {
    expect(await placement("unused.gguf", flags("-ngl", "0"), { layers: LAYERS })).toMatchObject({ gpu: false });
    const noGpu = (...argv: string[]) => placement("unused.gguf", flags(...argv), { layers: LAYERS }, 0);
    expect(await noGpu()).toMatchObject({ gpu: false, description: "on the CPU (no usable CUDA GPU)" });
    await expect(noGpu("--n-cpu-moe", "2")).rejects.toThrow(/^--n-cpu-moe needs a CUDA GPU/);
    await expect(noGpu("-ngl", "all")).rejects.toThrow(/^-ngl needs a CUDA GPU/);
    await expect(noGpu("-ngl", "all", "--cpu-moe", "--host-ram", "1GiB")).rejects.toThrow(
      /^-ngl, --cpu-moe and --host-ram need a CUDA GPU, and none is usable$/,
    );
  });
});

describe("bloomery-serve's --gpu-budget, --host-ram and --residency", () => {
  it("maps --gpu-budget onto loadModel's gpu.budget and --host-ram onto hostRam, bytes or sizes as given", () => {
    expect(gpuBudgets(flags())).toEqual({ gpu: "auto", hostRam: {}, within: "" });
    expect(gpuBudgets(flags("--gpu-budget", "8GiB"))).toEqual({
      gpu: { budget: "8GiB" },
      hostRam: {},
      within: ", within 8GiB of GPU memory",
    });
    expect(gpuBudgets(flags("--gpu-budget=4294967296", "--host-ram", "64GiB"))).toEqual({
      gpu: { budget: "4294967296" },
      hostRam: { hostRam: "64GiB" },
      within: ", within 4294967296 of GPU memory and 64GiB of host RAM",
    });
  });

  it("refuses the budgets where the model runs on the CPU rather than ignore them", async () => {
    await expect(
      placement("unused.gguf", flags("-ngl", "0", "--gpu-budget", "8GiB"), { layers: LAYERS }),
    ).rejects.toThrow(/^--gpu-budget needs the GPU; -ngl 0 runs on the CPU$/);
    await expect(
      placement("unused.gguf", flags("-ngl", "0", "--host-ram", "1GiB"), { layers: LAYERS }),
    ).rejects.toThrow(UsageError);
    await expect(placement("unused.gguf", flags("--host-ram", "64GiB"), { layers: LAYERS }, 0)).rejects.toThrow(
      /^--host-ram needs a CUDA GPU/,
    );
  });

  it("leaves the size syntax to loadModel, which refuses a value that is not one by name", async () => {
    const { hostRam } = gpuBudgets(flags("--host-ram", "lots"));
    await expect(loadModel(defaultModelPath(), { gpu: false, ...hostRam })).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
      message: expect.stringMatching(/hostRam must be a positive number of bytes or a size like "8GiB"/),
    });
  });

  it("hands --residency adaptive or static to loadModel on the GPU, and refuses it on the CPU or misspelt", async () => {
    for (const residency of ["adaptive", "static"]) {
      expect(await placement("unused.gguf", flags("--residency", residency), { layers: LAYERS }, 1)).toMatchObject({
        gpu: "auto",
        residency,
      });
    }
    expect(await placement("unused.gguf", flags(), { layers: LAYERS }, 1)).not.toHaveProperty("residency");
    await expect(
      placement("unused.gguf", flags("-ngl", "0", "--residency", "static"), { layers: LAYERS }),
    ).rejects.toThrow(/^--residency needs the GPU; -ngl 0 runs on the CPU$/);
    await expect(placement("unused.gguf", flags("--residency", "static"), { layers: LAYERS }, 0)).rejects.toThrow(
      /^--residency needs a CUDA GPU, and none is usable$/,
    );
    expect(() => flags("--residency", "dynamic")).toThrow(/--residency must be adaptive or static, not "dynamic"/);
  });
});
