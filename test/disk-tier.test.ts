import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadModel, type Model } from "../src/index.js";
import { writeSyntheticModel } from "../tools/synth/synth.js";

// The disk tier on the CPU: a hostRam too small for the routed experts pages them from the model
// file through a RAM arena of fixed slots, and the logits and greedy tokens are the all-in-RAM
// run's, bit for bit, with the arena's hits and misses counted; below one layer's experts the
// load is refused by name. The fixture's router sends most rows to a few experts per layer, so
// evictions show best with one expert of every layer paged through a single slot: an expert
// used in two layers is read again in each pass.
const dir = mkdtempSync(join(tmpdir(), "bloomery-disk-"));
const path = join(dir, "tiny-qwen3moe-Q4_K.gguf");
const EXPERTS = 8;
let reference: Model;
let slotBytes = 0;

beforeAll(async () => {
  await writeSyntheticModel(path, { preset: "tiny-qwen3moe", weightType: "Q4_K" });
  reference = await loadModel(path, { threads: 2, contextSize: 256 });
  slotBytes = reference.plan!.arena.slotBytes;
});

afterAll(() => {
  reference?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

/** The logits of every row of a 40-token prompt, then of 12 decode steps, and 16 greedy tokens of a fresh session. */
async function run(model: Model): Promise<{ logits: Float32Array[]; tokens: number[] }> {
  const vocab = model.info.vocabSize;
  const tokens = (count: number, seed: number) => Array.from({ length: count }, (_, i) => (i * 7919 + seed) % vocab);
  const session = model.createSession();
  const logits = [await session.evaluate(tokens(40, 13), { logits: "all" })];
  for (const token of tokens(12, 101)) logits.push(await session.evaluate([token]));
  session.dispose();
  const fresh = model.createSession();
  const { tokens: greedy } = await fresh.generate(tokens(5, 3), { maxTokens: 16, temperature: 0 }).result;
  fresh.dispose();
  return { logits, tokens: greedy };
}

function expectSameBits(a: Float32Array[], b: Float32Array[]): void {
  expect(b.length).toBe(a.length);
  a.forEach((x, i) => expect(Buffer.from(b[i]!.buffer).equals(Buffer.from(x.buffer)), `logits ${i}`).toBe(true));
}

describe("the disk tier on the CPU", () => {
  it("keeps every expert in RAM when hostRam holds them", () => {
    const plan = reference.plan!;
    expect(plan.arena).toEqual({ slots: 0, slotBytes, bytes: 0 });
    expect(plan.layers.every((l) => l.gpu.length === 0 && l.host.length === EXPERTS && l.disk?.length === 0)).toBe(
      true,
    );
    expect(plan.bytes.disk).toBe(0);
    expect(reference.stats().disk).toBeNull();
  });

  it("pages the experts hostRam cannot hold and gives the all-in-RAM logits and tokens, bit for bit", async () => {
    const expected = await run(reference);
    const paged = await loadModel(path, { threads: 2, contextSize: 256, hostRam: EXPERTS * slotBytes });
    try {
      const plan = paged.plan!;
      expect(plan.arena).toEqual({ slots: EXPERTS, slotBytes, bytes: EXPERTS * slotBytes });
      expect(plan.layers.every((l) => l.host.length === 0 && l.disk?.length === EXPERTS)).toBe(true);
      expect(plan.layers[0]?.reason).toMatch(/paged from disk/);
      expect(plan.bytes.host).toBe(0);
      expect(plan.bytes.disk).toBe(reference.plan!.bytes.host);
      const got = await run(paged);
      expectSameBits(expected.logits, got.logits);
      expect(got.tokens).toEqual(expected.tokens);
      const disk = paged.stats().disk!;
      expect(disk.slots).toBe(EXPERTS);
      expect(disk.misses).toBeGreaterThan(0);
      expect(disk.hits).toBeGreaterThan(0);
      expect(disk.hitRate).toBeCloseTo(disk.hits / (disk.hits + disk.misses));
      expect(disk.bytesRead).toBeGreaterThanOrEqual(disk.misses * (plan.bytes.disk / (3 * EXPERTS)));
      expect(typeof disk.directIo).toBe("boolean");
      expect(disk.readSeconds).toBeGreaterThan(0);
    } finally {
      paged.dispose();
    }
  });

  it("runs plans passed back, edited to page one expert of every layer through a single slot", async () => {
    const expected = await run(reference);
    const expertBytes = reference.plan!.bytes.host / (3 * EXPERTS);
    const hostRam = 3 * (EXPERTS - 1) * expertBytes + slotBytes;
    const base = await loadModel(path, { threads: 2, contextSize: 256, hostRam: EXPERTS * slotBytes });
    const paged = base.plan!;
    base.dispose();
    let mostMisses = 0;
    for (let e = 0; e < EXPERTS; ++e) {
      const plan = structuredClone(paged);
      for (const layer of plan.layers) {
        layer.disk = [e];
        layer.host = Array.from({ length: EXPERTS }, (_, i) => i).filter((i) => i !== e);
        layer.reason = `expert ${e} on disk`;
      }
      const edited = await loadModel(path, { threads: 2, contextSize: 256, hostRam, plan });
      try {
        expect(edited.plan!.arena.slots).toBe(1);
        expect(edited.plan!.bytes.host).toBe(3 * (EXPERTS - 1) * expertBytes);
        const got = await run(edited);
        expectSameBits(expected.logits, got.logits);
        expect(got.tokens).toEqual(expected.tokens);
        mostMisses = Math.max(mostMisses, edited.stats().disk!.misses);
      } finally {
        edited.dispose();
      }
    }
    // An expert some rows use in two layers is read again in every pass (13 evaluations, 16 generation steps).
    expect(mostMisses).toBeGreaterThan(13 + 16);
  });

  it("counts each routed call as a RAM hit or a disk call, and reads nothing again through an arena that holds all", async () => {
    const prompt = Array.from({ length: 40 }, (_, i) => (i * 7919 + 13) % reference.info.vocabSize);
    const routedCalls = prompt.length * reference.info.expertsUsed * reference.info.layers;
    const evaluate = async (model: Model) => {
      const session = model.createSession();
      await session.evaluate(prompt);
      session.dispose();
      return model.stats().residency;
    };
    // A cold arena (the smallest: one layer's experts) reads every expert, so every call is a disk call.
    const small = await loadModel(path, { threads: 2, contextSize: 256, hostRam: EXPERTS * slotBytes, cacheRam: 0 });
    try {
      const r = await evaluate(small);
      expect(r).toMatchObject({ gpuCalls: 0, hostCalls: 0, diskCalls: routedCalls, diskHitRate: 1 });
    } finally {
      small.dispose();
    }
    // An arena of every paged expert, passed back in an edited plan: the second run of the prompt reads nothing.
    const base = await loadModel(path, { threads: 2, contextSize: 256, hostRam: EXPERTS * slotBytes });
    const plan = structuredClone(base.plan!);
    base.dispose();
    const slots = reference.info.layers * EXPERTS;
    plan.arena = { slots, slotBytes, bytes: slots * slotBytes };
    const large = await loadModel(path, {
      threads: 2,
      contextSize: 256,
      hostRam: slots * slotBytes,
      plan,
      cacheRam: 0,
    });
    try {
      expect(large.plan!.arena.slots).toBe(slots);
      const first = await evaluate(large);
      expect(first.diskCalls).toBeGreaterThan(0);
      expect(first.gpuCalls + first.hostCalls + first.diskCalls).toBe(routedCalls);
      const second = await evaluate(large);
      expect(second.diskCalls).toBe(first.diskCalls);
      expect(second.hostCalls - first.hostCalls).toBe(routedCalls);
    } finally {
      large.dispose();
    }
  });

  it("refuses an arena smaller than one layer's experts, and mmap: false with paged experts, by name", async () => {
    await expect(loadModel(path, { threads: 2, hostRam: EXPERTS * slotBytes - 1 })).rejects.toMatchObject({
      code: "INSUFFICIENT_MEMORY",
      message: expect.stringMatching(/disk tier's RAM arena needs at least 8 slots .*layer 0 pages 8 experts/),
    });
    await expect(loadModel(path, { threads: 2, hostRam: EXPERTS * slotBytes, mmap: false })).rejects.toMatchObject({
      code: "INVALID_ARGUMENT",
      message: expect.stringMatching(/mmap: false .* pages 24 routed experts from disk/),
    });
  });

  it("pages DeepSeek-V4's experts (hash-routed and routed layers) to the all-in-RAM logits and tokens, bit for bit", async () => {
    const ds4 = join(dir, "tiny-deepseek4-Q4_K.gguf");
    await writeSyntheticModel(ds4, { preset: "tiny-deepseek4", weightType: "Q4_K" });
    const inRam = await loadModel(ds4, { threads: 2, contextSize: 256, cacheRam: 0 });
    const experts = 16;
    const slot = inRam.plan!.arena.slotBytes;
    const paged = await loadModel(ds4, { threads: 2, contextSize: 256, cacheRam: 0, hostRam: experts * slot });
    try {
      expect(paged.plan!.bytes.host).toBe(0);
      const expected = await run(inRam);
      const got = await run(paged);
      expectSameBits(expected.logits, got.logits);
      expect(got.tokens).toEqual(expected.tokens);
      expect(paged.stats().disk!.misses).toBeGreaterThan(0);
    } finally {
      paged.dispose();
      inRam.dispose();
    }
  });
});
