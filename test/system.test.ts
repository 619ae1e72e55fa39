import { execFileSync } from "node:child_process";
import { readFileSync, existsSync } from "node:fs";
import { totalmem } from "node:os";
import { describe, expect, it } from "vitest";
import { getSystemInfo, ggmlType, ggmlTypes, BloomeryError } from "../src/index.js";

// The kernel's view of the CPU flags: an independent witness for the addon's cpuid reading.
const procFlags = new Set(
  (readFileSync("/proc/cpuinfo", "utf8").match(/^flags\s*:\s*(.*)$/m)?.[1] ?? "").split(/\s+/).filter(Boolean),
);

describe("getSystemInfo", () => {
  const info = getSystemInfo();

  it("reports the CPU features the kernel reports", () => {
    const f = info.cpu.features;
    expect(f.avx2).toBe(procFlags.has("avx2"));
    expect(f.fma).toBe(procFlags.has("fma"));
    expect(f.avx512f).toBe(procFlags.has("avx512f"));
    expect(f.avx512bw).toBe(procFlags.has("avx512bw"));
    expect(f.avx512vnni).toBe(procFlags.has("avx512_vnni"));
    expect(f.avx512bf16).toBe(procFlags.has("avx512_bf16"));
    expect(f.avxVnni).toBe(procFlags.has("avx_vnni"));
    expect(f.bmi2).toBe(procFlags.has("bmi2"));
    expect(f.amxTile).toBe(procFlags.has("amx_tile"));
    expect(f.amxInt8).toBe(procFlags.has("amx_int8"));
  });

  it("picks the widest CPU kernels the features allow", () => {
    const f = info.cpu.features;
    const avx2 = f.avx2 && f.fma && f.f16c;
    const avx512 = avx2 && f.bmi2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
    expect(info.cpu.simdTier).toBe(avx512 ? "avx512" : avx2 ? "avx2" : "scalar");
  });

  // The cap is read once per process: each case runs in a child of its own, on the built package.
  const underCap = (isa: string, script: string) =>
    execFileSync(process.execPath, ["--input-type=module", "-e", script], {
      env: { ...process.env, BLOOMERY_CPU_ISA: isa },
      encoding: "utf8",
    }).trim();
  const tierScript = `import { getSystemInfo } from "./dist/index.js"; console.log(getSystemInfo().cpu.simdTier);`;

  it("caps the CPU kernels at BLOOMERY_CPU_ISA", () => {
    expect(underCap("scalar", tierScript)).toBe("scalar");
    expect(underCap("", tierScript)).toBe(info.cpu.simdTier);
    // A cap above what the machine runs leaves the machine's tier.
    expect(underCap("avx512", tierScript)).toBe(info.cpu.simdTier);
    if (info.cpu.simdTier !== "scalar") expect(underCap("avx2", tierScript)).toBe("avx2");
  });

  it("refuses an unknown BLOOMERY_CPU_ISA by name, at load too", () => {
    const refused = underCap(
      "sse4",
      `import { getSystemInfo, loadModel } from "./dist/index.js";
       const codes = [];
       try { getSystemInfo(); } catch (e) { codes.push(e.code); }
       try { await loadModel("models/bloomery-tiny-moe-Q8_0.gguf", { gpu: false }); } catch (e) { codes.push(e.code); }
       console.log(codes.join(" "));`,
    );
    expect(refused).toBe("INVALID_ARGUMENT INVALID_ARGUMENT");
  });

  it("reports cores and memory", () => {
    const logical = readFileSync("/proc/cpuinfo", "utf8").match(/^processor\s*:/gm)?.length ?? 0;
    expect(info.cpu.logicalCores).toBe(logical);
    expect(info.cpu.physicalCores).toBeGreaterThanOrEqual(1);
    expect(info.cpu.physicalCores).toBeLessThanOrEqual(info.cpu.logicalCores);
    expect(info.memory.total).toBeGreaterThan(0);
    expect(info.memory.total).toBeLessThanOrEqual(totalmem());
    expect(info.memory.available).toBeGreaterThan(0);
    expect(info.memory.available).toBeLessThanOrEqual(info.memory.total);
  });

  // The GPU machine checks the other half (test/device/system.test.mjs).
  it.skipIf(existsSync("/dev/nvidiactl"))("says why CUDA is unavailable on a machine without a GPU", () => {
    expect(info.cuda.available).toBe(false);
    expect(info.gpus).toEqual([]);
    expect(info.cuda.reason).toMatch(/driver|device|no CUDA/);
  });

  const nvccHere = existsSync("/usr/local/cuda/bin/nvcc") && process.env.BLOOMERY_CUDA !== "0";
  it.skipIf(!nvccHere)("was built with CUDA when nvcc is installed here", () => {
    expect(info.cuda.compiled).toBe(true);
    expect(info.cuda.runtimeVersion).toBeGreaterThanOrEqual(12000);
  });
});

describe("ggmlTypes", () => {
  it("knows the block layouts of the formats bloomery reads", () => {
    const layout = (name: string) => {
      const t = ggmlType(name);
      return [t.blockElements, t.blockBytes];
    };
    expect(layout("F32")).toEqual([1, 4]);
    expect(layout("BF16")).toEqual([1, 2]);
    expect(layout("Q8_0")).toEqual([32, 34]);
    expect(layout("Q4_K")).toEqual([256, 144]);
    expect(layout("Q5_K")).toEqual([256, 176]);
    expect(layout("Q6_K")).toEqual([256, 210]);
    expect(layout("Q2_K")).toEqual([256, 84]);
    expect(layout("Q3_K")).toEqual([256, 110]);
    expect(layout("IQ4_XS")).toEqual([256, 136]);
    expect(layout("IQ4_NL")).toEqual([32, 18]);
    expect(layout("MXFP4")).toEqual([32, 17]);
    expect(ggmlType(12).name).toBe("Q4_K");
    expect(ggmlType(39).name).toBe("MXFP4");
  });

  it("has unique ids and names", () => {
    const types = ggmlTypes();
    expect(new Set(types.map((t) => t.id)).size).toBe(types.length);
    expect(new Set(types.map((t) => t.name)).size).toBe(types.length);
  });

  it("refuses an unknown type by name", () => {
    expect(() => ggmlType("Q9_9")).toThrow(BloomeryError);
    expect(() => ggmlType(4)).toThrow(/unknown ggml tensor type 4/);
  });
});
