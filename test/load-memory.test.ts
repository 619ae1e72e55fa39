import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// How a model's bytes are held: mapped (default), read into private memory (mmap: false), and
// locked in RAM (mlock). The engine must compute the same logits whichever way it reads them.
describe("loadModel's mmap and mlock options", () => {
  const dir = mkdtempSync(join(tmpdir(), "bloomery-load-memory-"));
  const path = join(dir, "tiny-qwen3moe-Q4_K.gguf");
  const tokens = [1, 17, 300, 33, 121, 9, 212];

  beforeAll(async () => {
    await writeSyntheticModel(path, { preset: "tiny-qwen3moe", weightType: "Q4_K" });
  });

  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  async function logits(options: { mmap?: boolean; mlock?: boolean }): Promise<Float32Array> {
    const model = await loadModel(path, { gpu: false, threads: 1, contextSize: 64, ...options });
    try {
      return await model.createSession().evaluate(tokens, { logits: "all" });
    } finally {
      model.dispose();
    }
  }

  it("reads the file without mmap, or locked in RAM, to the same logits as the mapping", async () => {
    const mapped = await logits({});
    expect(await logits({ mmap: false })).toEqual(mapped);
    expect(await logits({ mmap: false, mlock: true })).toEqual(mapped);
    expect(await logits({ mlock: true })).toEqual(mapped);
  });

  // Linux's view of this process: whether the file is mapped, and how many bytes are locked in RAM.
  const mapsFile = () => readFileSync("/proc/self/maps", "utf8").includes(path);
  const lockedBytes = () => Number(/VmLck:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))![1]) * 1024;

  it("maps the file only with mmap, and locks its bytes only with mlock", async () => {
    for (const [options, mapped, locked] of [
      [{}, true, false],
      [{ mmap: false }, false, false],
      [{ mlock: true }, true, true],
      [{ mmap: false, mlock: true }, false, true],
    ] as const) {
      const before = lockedBytes();
      const model = await loadModel(path, { gpu: false, threads: 1, contextSize: 64, ...options });
      try {
        expect(mapsFile(), JSON.stringify(options)).toBe(mapped);
        expect(lockedBytes() - before >= statSync(path).size, JSON.stringify(options)).toBe(locked);
      } finally {
        model.dispose();
      }
    }
  });

  it("refuses options that are not booleans", async () => {
    await expect(loadModel(path, { gpu: false, mmap: "no" as unknown as boolean })).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
    await expect(loadModel(path, { gpu: false, mlock: 1 as unknown as boolean })).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
    });
  });
});
