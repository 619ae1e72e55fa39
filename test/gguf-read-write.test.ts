import { mkdirSync, readFileSync, rmSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, test } from "vitest";
import { readGgufInfo, writeGguf } from "../src/gguf.js";
import type { GgufMetadataType, GgufValue } from "../src/gguf/types.js";
import {
  afterKey,
  expectCode,
  kv,
  prng,
  randomBytes,
  rawGguf,
  str,
  tempDir,
  tensorInfo,
  u32,
  u64,
} from "./gguf-helpers.js";

const dir = tempDir();
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const at = (name: string): string => join(dir, name);

const TYPED: { metadata: Record<string, GgufValue>; types: Record<string, GgufMetadataType> } = {
  metadata: {
    "general.architecture": "qwen3moe",
    "general.name": "tést 模型 🚀",
    "s.u8": 255,
    "s.i8": -128,
    "s.u16": 65535,
    "s.i16": -32768,
    "s.u32": 4294967295,
    "s.i32": -2147483648,
    "s.u64": 2n ** 64n - 1n,
    "s.u64_past_2_53": 2n ** 53n + 1n,
    "s.i64": -(2n ** 63n),
    "s.i64_small": -7n,
    "s.f32": 1.5,
    "s.f64": Math.PI,
    "s.true": true,
    "s.false": false,
    "s.empty": "",
    "a.u8": new Uint8Array([0, 1, 255]),
    "a.i8": new Int8Array([-128, 127]),
    "a.u16": new Uint16Array([65535, 1]),
    "a.i16": new Int16Array([-32768, 32767]),
    "a.u32": new Uint32Array([4294967295]),
    "a.i32": new Int32Array([-1, 2147483647]),
    "a.u64": new BigUint64Array([2n ** 64n - 1n, 0n]),
    "a.i64": new BigInt64Array([-5n, 2n ** 62n]),
    "a.f32": new Float32Array([0.5, -2.25]),
    "a.f64": new Float64Array([1e300, -1e-300]),
    "a.bool": [true, false, true],
    "a.string": ["a", "ü", "日本語", "😀", "", "line\nbreak"],
    "e.u8": new Uint8Array(0),
    "e.f32": new Float32Array(0),
    "e.string": [],
    "e.bool": [],
    "n.i32": [new Int32Array([1, 2]), new Int32Array([3])],
    "n.string": [["x"], ["y", "zé"]],
    "n.deep": [[new Uint8Array([1, 2])], []],
  },
  types: {
    "general.architecture": "string",
    "general.name": "string",
    "s.u8": "u8",
    "s.i8": "i8",
    "s.u16": "u16",
    "s.i16": "i16",
    "s.u32": "u32",
    "s.i32": "i32",
    "s.u64": "u64",
    "s.u64_past_2_53": "u64",
    "s.i64": "i64",
    "s.i64_small": "i64",
    "s.f32": "f32",
    "s.f64": "f64",
    "s.true": "bool",
    "s.false": "bool",
    "s.empty": "string",
    "a.u8": "array<u8>",
    "a.i8": "array<i8>",
    "a.u16": "array<u16>",
    "a.i16": "array<i16>",
    "a.u32": "array<u32>",
    "a.i32": "array<i32>",
    "a.u64": "array<u64>",
    "a.i64": "array<i64>",
    "a.f32": "array<f32>",
    "a.f64": "array<f64>",
    "a.bool": "array<bool>",
    "a.string": "array<string>",
    "e.u8": "array<u8>",
    "e.f32": "array<f32>",
    "e.string": "array<string>",
    "e.bool": "array<bool>",
    "n.i32": "array<array<i32>>",
    "n.string": "array<array<string>>",
    "n.deep": "array<array<array<u8>>>",
  },
};

const TENSOR_TYPES = ["F32", "F16", "Q4_K", "Q6_K", "Q8_0", "IQ4_XS", "MXFP4"];

function tensorsOfEveryType(seed: number) {
  const rand = prng(seed);
  return TENSOR_TYPES.map((type, i) => {
    const shape = i % 2 ? [256, 3] : [512, 2, 2];
    const probe = { F32: 4, F16: 2 }[type];
    const blockBytes = { Q4_K: 144, Q6_K: 210, Q8_0: 34 * 8, IQ4_XS: 136, MXFP4: 17 * 8 }[type];
    const rows = shape.slice(1).reduce((a, b) => a * b, 1);
    const rowBytes = probe ? 256 * probe * (shape[0]! / 256) : blockBytes! * (shape[0]! / 256);
    const data = randomBytes(rand, rowBytes * rows);
    // Half the tensors stream through fill(), the other half hand over their bytes.
    return i % 2
      ? { name: `blk.${i}.${type}`, type, shape, data }
      : {
          name: `blk.${i}.${type}`,
          type,
          shape,
          fill: (chunk: Uint8Array, offset: number) => chunk.set(data.subarray(offset, offset + chunk.length)),
          expected: data,
        };
  });
}

/** Reads a file and writes it back through writeGguf; the copy must be identical. */
async function expectRewriteIdentical(src: string): Promise<void> {
  const info = await readGgufInfo(src);
  const bytes = readFileSync(src);
  const dst = `${src}.rewritten.gguf`;
  await writeGguf(dst, {
    version: info.version,
    metadata: info.metadata,
    metadataTypes: info.metadataTypes,
    tensors: info.tensors.map((t) => ({
      name: t.name,
      type: t.type,
      shape: t.shape,
      data: bytes.subarray(t.offset, t.offset + t.bytes),
    })),
  });
  expect(readFileSync(dst).equals(bytes)).toBe(true);
}

describe("writeGguf -> readGgufInfo", () => {
  test("every metadata type round-trips with its type", async () => {
    const path = at("types.gguf");
    await writeGguf(path, { metadata: TYPED.metadata, metadataTypes: TYPED.types, tensors: [] });
    const info = await readGgufInfo(path);
    expect(info.metadata).toStrictEqual(TYPED.metadata);
    expect(info.metadataTypes).toStrictEqual(TYPED.types);
    expect(Object.keys(info.metadata)).toEqual(Object.keys(TYPED.metadata));
    expect(info.summary.architecture).toBe("qwen3moe");
    expect(info.summary.name).toBe("tést 模型 🚀");
    await expectRewriteIdentical(path);
  });

  test("types are inferred when metadataTypes lacks the key", async () => {
    const path = at("inferred.gguf");
    await writeGguf(path, {
      metadata: {
        s: "x",
        b: true,
        big: 5n,
        huge: 2n ** 63n,
        u: 7,
        neg: -7,
        vneg: -(2 ** 40),
        f: 0.25,
        ta: new Uint16Array([1]),
        sa: ["a"],
        ba: [true],
        ia: [1, -2],
        fa: [1.5, 2],
        la: [2 ** 40],
        na: [[1], [2, 3]],
      },
      tensors: [],
    });
    const info = await readGgufInfo(path);
    expect(info.metadataTypes).toStrictEqual({
      s: "string",
      b: "bool",
      big: "i64",
      huge: "u64",
      u: "u32",
      neg: "i32",
      vneg: "i64",
      f: "f32",
      ta: "array<u16>",
      sa: "array<string>",
      ba: "array<bool>",
      ia: "array<i32>",
      fa: "array<f32>",
      la: "array<i64>",
      na: "array<array<i32>>",
    });
    expect(info.metadata.vneg).toBe(-(2n ** 40n));
    expect(info.metadata.huge).toBe(2n ** 63n);
    expect(info.metadata.na).toStrictEqual([new Int32Array([1]), new Int32Array([2, 3])]);
  });

  test("tensors of several types: table and bytes at the reported offsets", async () => {
    const path = at("tensors.gguf");
    const tensors = tensorsOfEveryType(1);
    const written = await writeGguf(path, {
      metadata: { "general.architecture": "test", "test.block_count": 7, "test.expert_count": 4 },
      tensors,
    });
    const info = await readGgufInfo(path);
    const file = readFileSync(path);
    expect(written).toEqual({ files: [path], bytes: file.length });
    expect(info.tensors.map((t) => t.type)).toEqual(TENSOR_TYPES);
    for (const [i, t] of info.tensors.entries()) {
      const source = tensors[i]!;
      const expected = "data" in source ? source.data : source.expected;
      expect(t.name).toBe(source.name);
      expect(t.shape).toEqual(source.shape);
      expect(t.elements).toBe(source.shape.reduce((a, b) => a * b, 1));
      expect(t.bytes).toBe(expected!.length);
      expect(t.offset % 32).toBe(0);
      expect(t.file).toBe(0);
      expect(file.subarray(t.offset, t.offset + t.bytes).equals(Buffer.from(expected!))).toBe(true);
    }
    expect(info.summary.layers).toBe(7);
    expect(info.summary.experts).toBe(4);
    expect(info.summary.expertsUsed).toBe(0);
    expect(info.summary.tensorBytes).toBe(info.tensors.reduce((s, t) => s + t.bytes, 0));
    expect(info.summary.bytesByType.Q6_K).toBe(210 * 3);
    expect(info.summary.fileBytes).toBe(file.length);
    expect(info.files).toEqual([
      { path, bytes: file.length, version: 3, dataOffset: info.files[0]!.dataOffset, alignment: 32, tensorCount: 7 },
    ]);
    await expectRewriteIdentical(path);
  });

  test("version 2 and alignment 64", async () => {
    const path = at("v2-align64.gguf");
    await writeGguf(path, { version: 2, alignment: 64, metadata: { a: 1 }, tensors: tensorsOfEveryType(2) });
    const info = await readGgufInfo(path);
    expect(info.version).toBe(2);
    expect(info.alignment).toBe(64);
    expect(info.metadataTypes["general.alignment"]).toBe("u32");
    expect(info.files[0]!.dataOffset % 64).toBe(0);
    for (const t of info.tensors) expect(t.offset % 64).toBe(0);
    await expectRewriteIdentical(path);
  });

  test("header-only files are sparse and report full sizes", async () => {
    const path = at("sparse.gguf");
    const result = await writeGguf(path, {
      metadata: { "general.architecture": "test" },
      tensors: [
        { name: "big", type: "F32", shape: [4096, 16384] },
        { name: "q", type: "Q4_K", shape: [4096, 8192] },
      ],
      headerOnly: true,
    });
    const st = statSync(path);
    const info = await readGgufInfo(path);
    expect(st.size).toBe(result.bytes);
    expect(st.blocks * 512).toBeLessThan(1 << 20);
    expect(info.tensors[0]!.bytes).toBe(4096 * 16384 * 4);
    expect(info.tensors[1]!.bytes).toBe(4096 * 32 * 144);
    const last = info.tensors[1]!;
    expect(last.offset + last.bytes).toBe(st.size);
    expect(info.summary.fileBytes).toBe(st.size);
    expect(info.summary.parameters).toBe(4096 * 16384 + 4096 * 8192);
  });

  test("fill() streams a tensor larger than one chunk in contiguous chunks", async () => {
    const path = at("streamed.gguf");
    const shape = [1024, 10240]; // 40 MiB of F32: three chunks
    const calls: [number, number][] = [];
    await writeGguf(path, {
      metadata: {},
      tensors: [
        {
          name: "big",
          type: "F32",
          shape,
          fill: (chunk, offset) => {
            calls.push([offset, chunk.length]);
            const words = new Uint32Array(chunk.buffer, chunk.byteOffset, chunk.length / 4);
            for (let i = 0; i < words.length; i++) words[i] = offset / 4 + i;
          },
        },
      ],
    });
    let next = 0;
    for (const [offset, length] of calls) {
      expect(offset).toBe(next);
      expect(length).toBeLessThanOrEqual(16 << 20);
      next += length;
    }
    expect(next).toBe(40 << 20);
    const info = await readGgufInfo(path);
    const file = readFileSync(path);
    const t = info.tensors[0]!;
    for (const word of [0, 1, (16 << 18) - 1, 16 << 18, (40 << 18) - 1]) {
      expect(file.readUInt32LE(t.offset + word * 4)).toBe(word);
    }
  });

  test("a 151,936-entry vocabulary converts in well under a second", async () => {
    const path = at("vocab.gguf");
    const tokens = Array.from({ length: 151936 }, (_, i) => (i % 3 ? `tok${i}` : `Ġ日本${i}`));
    await writeGguf(path, { metadata: { "tokenizer.ggml.tokens": tokens }, tensors: [] });
    await readGgufInfo(path); // warm the addon and page cache
    const start = performance.now();
    const info = await readGgufInfo(path);
    const ms = performance.now() - start;
    expect(info.metadata["tokenizer.ggml.tokens"]).toEqual(tokens);
    expect(ms).toBeLessThan(500);
  });
});

describe("split models", () => {
  const prefix = at("split/model");
  const shard = (i: number): string => `${prefix}-0000${i}-of-00003.gguf`;

  async function writeSplit(): Promise<string[]> {
    mkdirSync(join(dir, "split"), { recursive: true });
    const tensors = tensorsOfEveryType(3).slice(0, 3);
    const { files } = await writeGguf(`${prefix}.gguf`, {
      metadata: { "general.architecture": "test", "test.block_count": 1 },
      tensors,
      splitMaxTensors: 1,
    });
    return files;
  }

  test("three shards read as one model", async () => {
    const files = await writeSplit();
    expect(files).toEqual([1, 2, 3].map(shard));
    const info = await readGgufInfo(shard(1));
    expect(info.files.map((f) => f.path)).toEqual(files);
    expect(info.tensors.map((t) => t.file)).toEqual([0, 1, 2]);
    expect(info.metadata["split.count"]).toBe(3);
    expect(info.metadataTypes["split.no"]).toBe("u16");
    expect(info.metadataTypes["split.count"]).toBe("u16");
    expect(info.metadataTypes["split.tensors.count"]).toBe("i32");
    expect(info.metadata["general.architecture"]).toBe("test");
    for (const [i, t] of info.tensors.entries()) {
      const bytes = readFileSync(files[i]!);
      const source = tensorsOfEveryType(3)[i]!;
      const expected = "data" in source ? source.data : source.expected;
      expect(bytes.subarray(t.offset, t.offset + t.bytes).equals(Buffer.from(expected!))).toBe(true);
    }
    // Later shards carry only the split keys, as llama.cpp's gguf-split writes them.
    expect(readFileSync(files[1]!).includes("general.architecture")).toBe(false);
    expect(info.summary.fileBytes).toBe(files.reduce((s, f) => s + statSync(f).size, 0));
  });

  test("a missing shard, a wrong tensor count, a wrong split.no, or opening a later shard is GGUF_SPLIT", async () => {
    await writeSplit();
    unlinkSync(shard(2));
    await expectCode(readGgufInfo(shard(1)), "GGUF_SPLIT", /missing/);

    await writeSplit();
    const first = readFileSync(shard(1));
    first.writeInt32LE(4, afterKey(first, "split.tensors.count") + 4);
    writeFileSync(shard(1), first);
    await expectCode(readGgufInfo(shard(1)), "GGUF_SPLIT", /split\.tensors\.count/);

    await writeSplit();
    const third = readFileSync(shard(3));
    third.writeUInt16LE(1, afterKey(third, "split.no") + 4);
    writeFileSync(shard(3), third);
    await expectCode(readGgufInfo(shard(1)), "GGUF_SPLIT", /expected 3 of 3/);

    await writeSplit();
    await expectCode(readGgufInfo(shard(2)), "GGUF_SPLIT", /open the first shard/);
  });
});

describe("refusals", () => {
  const arch = kv("general.architecture", 8, str("llama"));
  const base = (over: Parameters<typeof rawGguf>[0] = {}): Buffer =>
    rawGguf({ kvs: [arch], tensors: [tensorInfo("w", [32], 0, 0)], data: Buffer.alloc(128), ...over });
  let n = 0;
  const read = (bytes: Buffer): Promise<unknown> => {
    const path = at(`crafted-${n++}.gguf`);
    writeFileSync(path, bytes);
    return readGgufInfo(path);
  };

  test("the crafted base file is valid", async () => {
    const info = (await read(base())) as Awaited<ReturnType<typeof readGgufInfo>>;
    expect(info.tensors[0]).toMatchObject({ name: "w", type: "F32", bytes: 128 });
  });

  test("missing files and directories", async () => {
    await expectCode(readGgufInfo(at("nope.gguf")), "FILE_NOT_FOUND");
    await expectCode(readGgufInfo(dir), "FILE_READ");
  });

  test("GGUF_BAD_MAGIC and GGUF_UNSUPPORTED_VERSION", async () => {
    await expectCode(read(base({ magic: "GGML" })), "GGUF_BAD_MAGIC");
    for (const version of [0, 1, 4, 0x03000000]) await expectCode(read(base({ version })), "GGUF_UNSUPPORTED_VERSION");
  });

  test("GGUF_TRUNCATED at every field boundary of the header", async () => {
    const file = base();
    const boundaries = [0, 3, 4, 8, 16, 24, 24 + 8 + 20, 24 + 8 + 20 + 4, 24 + 8 + 20 + 4 + 8 + 5];
    for (const cut of boundaries) await expectCode(read(file.subarray(0, cut)), "GGUF_TRUNCATED");
    const infoStart = 24 + arch.length;
    for (const extra of [0, 8 + 1, 8 + 1 + 4, 8 + 1 + 4 + 8, 8 + 1 + 4 + 8 + 4]) {
      await expectCode(read(file.subarray(0, infoStart + extra)), "GGUF_TRUNCATED");
    }
  });

  test("huge counts and lengths fail fast, before allocating", async () => {
    const huge = 2n ** 60n;
    const start = performance.now();
    await expectCode(read(base({ kvCount: huge })), "GGUF_TRUNCATED");
    await expectCode(read(base({ tensorCount: huge })), "GGUF_TRUNCATED");
    for (const elementType of [0, 8, 9, 12]) {
      await expectCode(
        read(base({ kvs: [kv("a", 9, Buffer.concat([u32(elementType), u64(huge)]))] })),
        "GGUF_TRUNCATED",
      );
    }
    expect(performance.now() - start).toBeLessThan(1000);
  });

  test("GGUF_BAD_STRING", async () => {
    await expectCode(read(base({ kvs: [Buffer.concat([u64(2n ** 40n), Buffer.from("key")])] })), "GGUF_BAD_STRING");
    await expectCode(read(base({ kvs: [kv("a", 8, u64(1000))] })), "GGUF_BAD_STRING");
    for (const bad of [
      [0xff, 0x61],
      [0xc0, 0x80],
      [0xed, 0xa0, 0x80],
      [0xf4, 0x90, 0x80, 0x80],
      [0xe6, 0x97],
    ]) {
      await expectCode(read(base({ kvs: [kv(Buffer.from(bad), 8, str("x"))] })), "GGUF_BAD_STRING");
      await expectCode(read(base({ tensors: [tensorInfo(Buffer.from(bad), [32], 0, 0)] })), "GGUF_BAD_STRING");
    }
  });

  test("GGUF_BAD_VALUE_TYPE", async () => {
    await expectCode(read(base({ kvs: [kv("a", 13, u32(0))] })), "GGUF_BAD_VALUE_TYPE", /"a"/);
    await expectCode(read(base({ kvs: [kv("a", 9, Buffer.concat([u32(99), u64(0)]))] })), "GGUF_BAD_VALUE_TYPE");
  });

  test("arrays nest at most 8 deep (GGUF_TOO_LARGE beyond)", async () => {
    const nest = (levels: number): Buffer =>
      levels === 1 ? Buffer.concat([u32(0), u64(0)]) : Buffer.concat([u32(9), u64(1), nest(levels - 1)]);
    const ok = (await read(base({ kvs: [kv("deep", 9, nest(8))] }))) as Awaited<ReturnType<typeof readGgufInfo>>;
    expect(ok.metadataTypes.deep).toBe(`${"array<".repeat(8)}u8${">".repeat(8)}`);
    await expectCode(read(base({ kvs: [kv("deep", 9, nest(9))] })), "GGUF_TOO_LARGE");
  });

  test("UNSUPPORTED_QUANT names the tensor", async () => {
    for (const type of [4, 5, 1000]) {
      await expectCode(
        read(base({ tensors: [tensorInfo("blk.0.weird", [32], type, 0)] })),
        "UNSUPPORTED_QUANT",
        /blk\.0\.weird/,
      );
    }
  });

  test("GGUF_BAD_TENSOR", async () => {
    const shapes: (number | bigint)[][] = [[], [32, 1, 1, 1, 1], [32, 0], [2n ** 40n, 2n ** 40n], [2n ** 63n]];
    for (const dims of shapes)
      await expectCode(read(base({ tensors: [tensorInfo("w", dims, 0, 0)] })), "GGUF_BAD_TENSOR");
    await expectCode(read(base({ tensors: [tensorInfo("w", [33], 8, 0)] })), "GGUF_BAD_TENSOR", /block/);
  });

  test("GGUF_DUPLICATE keys and tensor names", async () => {
    await expectCode(read(base({ kvs: [arch, arch] })), "GGUF_DUPLICATE", /general\.architecture/);
    const twice = [tensorInfo("w", [32], 0, 0), tensorInfo("w", [32], 0, 128)];
    await expectCode(read(base({ tensors: twice, data: Buffer.alloc(256) })), "GGUF_DUPLICATE", /"w"/);
  });

  test("GGUF_TENSOR_OUT_OF_BOUNDS", async () => {
    await expectCode(read(base({ tensors: [tensorInfo("w", [32], 0, 1024)] })), "GGUF_TENSOR_OUT_OF_BOUNDS");
    await expectCode(read(base({ tensors: [tensorInfo("w", [32], 0, 2n ** 64n - 32n)] })), "GGUF_TENSOR_OUT_OF_BOUNDS");
    await expectCode(read(base({ tensors: [tensorInfo("w", [32], 0, 16)] })), "GGUF_TENSOR_OUT_OF_BOUNDS", /multiple/);
    await expectCode(read(base({ data: Buffer.alloc(127) })), "GGUF_TENSOR_OUT_OF_BOUNDS");
  });

  test("GGUF_BAD_ALIGNMENT", async () => {
    for (const value of [u32(0), u32(48)]) {
      await expectCode(read(base({ kvs: [kv("general.alignment", 4, value)] })), "GGUF_BAD_ALIGNMENT");
    }
    await expectCode(read(base({ kvs: [kv("general.alignment", 10, u64(32))] })), "GGUF_BAD_ALIGNMENT", /u64/);
  });

  test("the writer refuses bad tensors and values by name", async () => {
    const write = (tensors: Parameters<typeof writeGguf>[1]["tensors"], metadata = {}, types = {}) =>
      writeGguf(at("refused.gguf"), { metadata, metadataTypes: types, tensors });
    await expectCode(
      write([{ name: "t.short", type: "F32", shape: [4], data: new Uint8Array(15) }]),
      "INVALID_ARGUMENT",
      /t\.short/,
    );
    await expectCode(
      write([{ name: "t.rows", type: "Q4_K", shape: [128], data: new Uint8Array(72) }]),
      "INVALID_ARGUMENT",
      /t\.rows/,
    );
    await expectCode(write([{ name: "t.type", type: "Q9_Z", shape: [32] }]), "UNSUPPORTED_QUANT");
    await expectCode(write([{ name: "t.empty", type: "F32", shape: [32] }]), "INVALID_ARGUMENT", /t\.empty/);
    await expectCode(write([], { "k.small": 300 }, { "k.small": "u8" }), "INVALID_ARGUMENT", /k\.small/);
    await expectCode(write([], { "k.mixed": [1, "a"] as never }), "INVALID_ARGUMENT", /k\.mixed/);
  });
});
