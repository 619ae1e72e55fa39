// Mutates valid GGUF files thousands of times; every read must resolve or reject with a
// GGUF/FILE/UNSUPPORTED code: no crash, no hang, no runaway memory. The seed is printed
// and can be set with BLOOMERY_FUZZ_SEED; the last mutated file stays on disk if the
// process dies, as a reproducer.
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, test } from "vitest";
import { BloomeryError } from "../src/errors.js";
import { readGgufInfo, writeGguf } from "../src/gguf.js";
import type { WriteGgufOptions } from "../src/gguf/types.js";
import { prng, randomBytes, tempDir } from "./gguf-helpers.js";

const ITERATIONS = 12_000;
const CALL_TIMEOUT_MS = 5000;
const SEED = Number(process.env.BLOOMERY_FUZZ_SEED ?? 0x5eed1234);
const ALLOWED = /^(GGUF_[A-Z_]+|FILE_NOT_FOUND|FILE_READ|UNSUPPORTED_QUANT)$/;

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const VALUE_BYTES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };

/** Offsets of the u64 count/length fields and the u32 type/dimension-count fields of a valid file. */
function fieldOffsets(b: Buffer): { counts: number[]; types: number[] } {
  const counts = [8, 16];
  const types = [4];
  let p = 24;
  const string = (): void => {
    counts.push(p);
    p += 8 + Number(b.readBigUInt64LE(p));
  };
  const value = (type: number): void => {
    if (type === 8) return string();
    if (type !== 9) {
      p += VALUE_BYTES[type]!;
      return;
    }
    types.push(p);
    const element = b.readUInt32LE(p);
    counts.push(p + 4);
    const n = Number(b.readBigUInt64LE(p + 4));
    p += 12;
    for (let i = 0; i < n; i++) value(element);
  };
  const tensorCount = Number(b.readBigUInt64LE(8));
  const kvCount = Number(b.readBigUInt64LE(16));
  for (let i = 0; i < kvCount; i++) {
    string();
    types.push(p);
    p += 4;
    value(b.readUInt32LE(p - 4));
  }
  for (let i = 0; i < tensorCount; i++) {
    string();
    types.push(p);
    const dims = b.readUInt32LE(p);
    p += 4;
    for (let d = 0; d < dims; d++, p += 8) counts.push(p);
    types.push(p);
    counts.push(p + 4);
    p += 12;
  }
  return { counts, types };
}

async function baseFiles(): Promise<Buffer[]> {
  const rand = prng(SEED ^ 0xabcdef);
  const tensors = (n: number) =>
    ["F32", "Q4_K", "Q8_0", "MXFP4", "F16"].slice(0, n).map((type, i) => ({
      name: `blk.${i}.weight`,
      type,
      shape: type === "Q4_K" ? [256, 2] : [64, 3],
      data: randomBytes(
        rand,
        type === "Q4_K" ? 288 : type === "Q8_0" ? 204 : type === "MXFP4" ? 102 : type === "F16" ? 384 : 768,
      ),
    }));
  const specs: WriteGgufOptions[] = [
    {
      metadata: {
        "general.architecture": "qwen3moe",
        "qwen3moe.block_count": 2,
        "qwen3moe.expert_count": 8n,
        "tokenizer.ggml.tokens": ["a", "bé", "日本", "<|im_end|>"],
        "tokenizer.ggml.scores": new Float32Array([0, -1, -2, -3]),
        "tokenizer.ggml.token_type": new Int32Array([1, 1, 1, 3]),
        nested: [[1, 2], [3]],
        flag: true,
        ratio: 0.5,
      },
      tensors: tensors(5),
    },
    {
      version: 2,
      alignment: 64,
      metadata: { "general.architecture": "llama", u64s: new BigUint64Array([1n, 2n]) },
      tensors: tensors(3),
    },
    {
      metadata: { deep: [[["x"], ["y"]], [[]]], s: "" },
      metadataTypes: { deep: "array<array<array<string>>>" },
      tensors: tensors(1),
    },
  ];
  const out: Buffer[] = [];
  for (const [i, spec] of specs.entries()) {
    const path = join(dir, `base-${i}.gguf`);
    await writeGguf(path, spec);
    await readGgufInfo(path);
    out.push(readFileSync(path));
  }
  return out;
}

const HUGE = [2n ** 60n, 2n ** 63n, 2n ** 64n - 1n, 2n ** 32n, 2n ** 32n - 1n, 2n ** 31n];

function mutate(rand: () => number, base: Buffer, fields: { counts: number[]; types: number[] }): Buffer {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const b = Buffer.from(base);
  const randomU64 = (): bigint => (BigInt(Math.floor(rand() * 2 ** 32)) << 32n) | BigInt(Math.floor(rand() * 2 ** 32));
  switch (Math.floor(rand() * 6)) {
    case 0: {
      const flips = 1 + Math.floor(rand() * 8);
      for (let i = 0; i < flips; i++) b[Math.floor(rand() * b.length)] = Math.floor(rand() * 256);
      return b;
    }
    case 1:
      return b.subarray(0, Math.floor(rand() * b.length));
    case 2: {
      const value = pick([
        ...HUGE,
        BigInt(b.length),
        BigInt(b.length + 1),
        randomU64(),
        BigInt(Math.floor(rand() * 1000)),
      ]);
      b.writeBigUInt64LE(value, pick(fields.counts));
      return b;
    }
    case 3:
      b.writeBigUInt64LE(randomU64(), Math.floor(rand() * (b.length - 7)));
      return b;
    case 4:
      b.writeUInt32LE(pick([Math.floor(rand() * 2 ** 32), 13, 9, 0, 5, Math.floor(rand() * 40)]), pick(fields.types));
      return b;
    default: {
      b.writeBigUInt64LE(pick(HUGE), pick(fields.counts));
      return b.subarray(0, Math.floor(rand() * b.length));
    }
  }
}

function withTimeout<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${CALL_TIMEOUT_MS} ms`)), CALL_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

test(`${ITERATIONS} mutated files are read or refused by code`, { timeout: 120_000 }, async () => {
  process.stderr.write(`gguf fuzz seed: ${SEED} (set BLOOMERY_FUZZ_SEED to reproduce)\n`);
  const bases = await baseFiles();
  const fields = bases.map(fieldOffsets);
  const rand = prng(SEED);
  const path = join(dir, "mutated.gguf");
  const codes = new Map<string, number>();
  let rssAfterWarmup = 0;

  for (let i = 0; i < ITERATIONS; i++) {
    if (i === 200) rssAfterWarmup = process.memoryUsage().rss;
    const which = Math.floor(rand() * bases.length);
    const bytes = mutate(rand, bases[which]!, fields[which]!);
    writeFileSync(path, bytes);
    const what = `seed ${SEED}, iteration ${i}`;
    const outcome = await withTimeout(readGgufInfo(path), what).then(
      () => "ok",
      (e: unknown) => {
        if (!(e instanceof BloomeryError) || !ALLOWED.test(e.code)) {
          const saved = join(dir, "..", `bloomery-fuzz-${SEED}-${i}.gguf`);
          writeFileSync(saved, bytes);
          throw new Error(`${what}: unexpected ${String(e)} (${(e as BloomeryError).code}); file saved to ${saved}`);
        }
        return e.code;
      },
    );
    codes.set(outcome, (codes.get(outcome) ?? 0) + 1);
  }

  process.stderr.write(`gguf fuzz outcomes: ${JSON.stringify(Object.fromEntries(codes))}\n`);
  const growth = process.memoryUsage().rss - rssAfterWarmup;
  expect(growth).toBeLessThan(200 * 2 ** 20);
  // The mutations must reach deep into the parser, not stop at the magic number.
  for (const code of ["GGUF_TRUNCATED", "GGUF_BAD_STRING", "GGUF_BAD_VALUE_TYPE", "GGUF_TENSOR_OUT_OF_BOUNDS"]) {
    expect(codes.get(code) ?? 0, code).toBeGreaterThan(0);
  }
});
