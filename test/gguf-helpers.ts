// Byte-level GGUF pieces for crafting files the writer would refuse to produce, and small
// helpers shared by the GGUF tests.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "vitest";
import { BloomeryError } from "../src/errors.js";

export const tempDir = (): string => mkdtempSync(join(tmpdir(), "bloomery-gguf-"));

export const u32 = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
};

export const u64 = (n: number | bigint): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt.asUintN(64, BigInt(n)));
  return b;
};

export const str = (s: string | Buffer): Buffer => {
  const bytes = typeof s === "string" ? Buffer.from(s, "utf8") : s;
  return Buffer.concat([u64(bytes.length), bytes]);
};

/** One metadata pair: key, u32 value type, value bytes. */
export const kv = (key: string | Buffer, type: number, value: Buffer): Buffer =>
  Buffer.concat([str(key), u32(type), value]);

/** One tensor info: name, dims, ggml type, offset relative to the data start. */
export const tensorInfo = (name: string | Buffer, dims: (number | bigint)[], type: number, offset: number | bigint) =>
  Buffer.concat([str(name), u32(dims.length), ...dims.map(u64), u32(type), u64(offset)]);

/** A whole file: header, kvs, tensor infos, padding to `alignment`, then `data`. */
export function rawGguf(parts: {
  magic?: string;
  version?: number;
  kvs?: Buffer[];
  tensors?: Buffer[];
  kvCount?: number | bigint;
  tensorCount?: number | bigint;
  alignment?: number;
  data?: Buffer;
}): Buffer {
  const kvs = parts.kvs ?? [];
  const tensors = parts.tensors ?? [];
  const head = Buffer.concat([
    Buffer.from(parts.magic ?? "GGUF", "latin1"),
    u32(parts.version ?? 3),
    u64(parts.tensorCount ?? tensors.length),
    u64(parts.kvCount ?? kvs.length),
    ...kvs,
    ...tensors,
  ]);
  const alignment = parts.alignment ?? 32;
  const pad = Buffer.alloc((alignment - (head.length % alignment)) % alignment);
  return Buffer.concat([head, pad, parts.data ?? Buffer.alloc(0)]);
}

/** The byte offset just past a metadata key's string in a file (where its u32 type starts). */
export function afterKey(file: Buffer, key: string): number {
  const at = file.indexOf(str(key));
  if (at < 0) throw new Error(`key ${key} not in file`);
  return at + 8 + Buffer.byteLength(key);
}

/** Asserts that a promise rejects with a BloomeryError of this code. */
export async function expectCode(promise: Promise<unknown>, code: string, message?: RegExp): Promise<void> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error, `expected ${code}`).toBeInstanceOf(BloomeryError);
  expect((error as BloomeryError).code).toBe(code);
  if (message) expect((error as BloomeryError).message).toMatch(message);
}

export { prng } from "./gguf-mutate.js";

export function randomBytes(rand: () => number, n: number): Uint8Array {
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.floor(rand() * 256);
  return out;
}
