// loadModel's progress: bytes of the weights read, mapped or uploaded, in many reports, never going back.
import { statSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { loadModel, type LoadProgress } from "../src/index.js";
import { defaultModelPath } from "../tools/default-model.js";

async function load(options: { mmap?: boolean } = {}): Promise<LoadProgress[]> {
  const reports: LoadProgress[] = [];
  const model = await loadModel(defaultModelPath(), { threads: 1, ...options, onProgress: (p) => reports.push(p) });
  model.dispose();
  return reports;
}

function expectSteady(reports: LoadProgress[]): void {
  expect(reports[0]).toEqual({ stage: "metadata", fraction: 0 });
  expect(reports.at(-1)).toEqual({ stage: "ready", fraction: 1 });
  const fractions = reports.map((p) => p.fraction);
  expect(fractions).toEqual([...fractions].sort((a, b) => a - b));
}

describe("loadModel's onProgress", () => {
  it("reports the mapped weights faulted into RAM, in many steps up to their total", async () => {
    const reports = await load();
    expectSteady(reports);
    const weights = reports.filter((p) => p.stage === "weights");
    expect(weights.every((p) => p.step === "map")).toBe(true);
    // The default model's 29.0 MB move in pieces of 1 MiB: a report each, from 0 to the total.
    expect(weights.length).toBeGreaterThan(10);
    const total = weights[0]!.totalBytes!;
    expect(total).toBeGreaterThan(20e6);
    expect(total).toBeLessThanOrEqual(statSync(defaultModelPath()).size);
    const bytes = weights.map((p) => p.bytes!);
    expect(bytes[0]).toBe(0);
    expect(bytes.at(-1)).toBe(total);
    expect(bytes).toEqual([...bytes].sort((a, b) => a - b));
    expect(weights.every((p) => p.totalBytes === total)).toBe(true);
  });

  it("reports the file read into memory without mmap", async () => {
    const reports = await load({ mmap: false });
    expectSteady(reports);
    const weights = reports.filter((p) => p.stage === "weights");
    expect(weights.every((p) => p.step === "read")).toBe(true);
    expect(weights.length).toBeGreaterThan(10);
    expect(weights.at(-1)).toMatchObject({ bytes: statSync(defaultModelPath()).size });
    expect(weights.at(-1)!.totalBytes).toBe(statSync(defaultModelPath()).size);
  });

  it("rejects with the error the listener throws", async () => {
    const error = new Error("the listener failed");
    let calls = 0;
    const loading = loadModel(defaultModelPath(), {
      threads: 1,
      onProgress: (p) => {
        calls++;
        if (p.stage === "weights") throw error;
      },
    });
    await expect(loading).rejects.toBe(error);
    // After it threw, the listener hears nothing more.
    const heard = calls;
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(calls).toBe(heard);
  });
});
