/**
 * The GGUF writer: tools and tests build model files with it, from a few bytes to
 * tens of gigabytes (tensor data streams through a fixed buffer, never a whole file).
 * @module
 */
import { open, type FileHandle } from "node:fs/promises";
import { BloomeryError } from "../errors.js";
import { ggmlType } from "../system.js";
import type { GgufMetadataType, GgufScalarType, GgufTensorSource, GgufValue, WriteGgufOptions } from "./types.js";

const DEFAULT_ALIGNMENT = 32;
const MAX_DIMS = 4;
const CHUNK_BYTES = 16 << 20;

const TYPE_IDS: Record<GgufScalarType | "array", number> = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
};

/** Integer ranges of the scalar types that take a JS number. */
const INT_RANGES: Partial<Record<GgufScalarType, [number, number]>> = {
  u8: [0, 0xff],
  i8: [-0x80, 0x7f],
  u16: [0, 0xffff],
  i16: [-0x8000, 0x7fff],
  u32: [0, 0xffffffff],
  i32: [-0x80000000, 0x7fffffff],
};

const TYPED_ARRAY_TYPES: [new (...args: never[]) => ArrayBufferView, GgufScalarType][] = [
  [Uint8Array, "u8"],
  [Int8Array, "i8"],
  [Uint16Array, "u16"],
  [Int16Array, "i16"],
  [Uint32Array, "u32"],
  [Int32Array, "i32"],
  [BigUint64Array, "u64"],
  [BigInt64Array, "i64"],
  [Float32Array, "f32"],
  [Float64Array, "f64"],
];

const TWO_63 = 1n << 63n;
const TWO_64 = 1n << 64n;

function invalid(message: string, details: Record<string, unknown>): BloomeryError {
  return new BloomeryError("INVALID_ARGUMENT", message, details);
}

/** A parsed metadata type: a scalar, or an array of (possibly nested) elements. */
type ValueType = { scalar: GgufScalarType } | { element: ValueType };

function parseType(text: string, key: string): ValueType {
  const m = /^array<(.*)>$/.exec(text);
  if (m) return { element: parseType(m[1]!, key) };
  if (text in TYPE_IDS && text !== "array") return { scalar: text as GgufScalarType };
  throw invalid(`metadata ${key}: unknown GGUF type "${text}"`, { key, type: text });
}

function formatType(t: ValueType): GgufMetadataType {
  return "scalar" in t ? t.scalar : `array<${formatType(t.element)}>`;
}

function sameType(a: ValueType, b: ValueType): boolean {
  return formatType(a) === formatType(b);
}

function inferScalar(value: number | bigint | boolean | string, key: string): ValueType {
  switch (typeof value) {
    case "string":
      return { scalar: "string" };
    case "boolean":
      return { scalar: "bool" };
    case "bigint":
      return { scalar: value >= TWO_63 ? "u64" : "i64" };
    case "number":
      if (!Number.isInteger(value)) return { scalar: "f32" };
      if (value >= 0 && value <= 0xffffffff) return { scalar: "u32" };
      if (value >= -0x80000000 && value <= 0x7fffffff) return { scalar: "i32" };
      return { scalar: "i64" };
  }
  throw invalid(`metadata ${key}: cannot infer the type of ${String(value)}`, { key });
}

function inferArray(values: readonly unknown[], key: string): ValueType {
  if (values.every((v) => typeof v === "string")) return { element: { scalar: "string" } };
  if (values.every((v) => typeof v === "boolean")) return { element: { scalar: "bool" } };
  if (values.every((v) => typeof v === "number")) {
    const nums = values as number[];
    if (!nums.every(Number.isInteger)) return { element: { scalar: "f32" } };
    return { element: { scalar: nums.every((v) => v >= -0x80000000 && v <= 0x7fffffff) ? "i32" : "i64" } };
  }
  const elements = values.map((v) => inferType(v as GgufValue, key));
  if (elements.every((t) => "element" in t && sameType(t, elements[0]!))) return { element: elements[0]! };
  throw invalid(`metadata ${key}: an array of mixed values needs a type in metadataTypes`, { key });
}

/** The rules documented on {@link writeGguf}. */
function inferType(value: GgufValue, key: string): ValueType {
  if (Array.isArray(value)) return inferArray(value, key);
  if (ArrayBuffer.isView(value)) {
    for (const [ctor, scalar] of TYPED_ARRAY_TYPES) if (value instanceof ctor) return { element: { scalar } };
    throw invalid(`metadata ${key}: unsupported typed array ${value.constructor.name}`, { key });
  }
  return inferScalar(value as number | bigint | boolean | string, key);
}

/** A growable little-endian byte buffer for the header. */
class HeaderBuilder {
  private buf = Buffer.allocUnsafe(1 << 16);
  length = 0;

  private reserve(n: number): number {
    if (this.length + n > this.buf.length) {
      const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.length + n));
      this.buf.copy(next, 0, 0, this.length);
      this.buf = next;
    }
    const at = this.length;
    this.length += n;
    return at;
  }

  // Each writer reserves first: reserve() may replace this.buf.
  u8(v: number): void {
    const at = this.reserve(1);
    this.buf.writeUInt8(v, at);
  }
  u32(v: number): void {
    const at = this.reserve(4);
    this.buf.writeUInt32LE(v, at);
  }
  u64(v: number | bigint): void {
    const at = this.reserve(8);
    this.buf.writeBigUInt64LE(BigInt(v), at);
  }
  /** A number of a fixed-size GGUF type that takes a JS number (range already checked). */
  number(scalar: GgufScalarType, v: number): void {
    const size = scalar.endsWith("8") ? 1 : scalar.endsWith("16") ? 2 : scalar === "f64" ? 8 : 4;
    const at = this.reserve(size);
    const b = this.buf;
    switch (scalar) {
      case "u8":
        return void b.writeUInt8(v, at);
      case "i8":
        return void b.writeInt8(v, at);
      case "u16":
        return void b.writeUInt16LE(v, at);
      case "i16":
        return void b.writeInt16LE(v, at);
      case "u32":
        return void b.writeUInt32LE(v, at);
      case "i32":
        return void b.writeInt32LE(v, at);
      case "f32":
        return void b.writeFloatLE(v, at);
      default:
        return void b.writeDoubleLE(v, at);
    }
  }
  bytes(v: Uint8Array): void {
    const at = this.reserve(v.length);
    this.buf.set(v, at);
  }
  string(v: string): void {
    const n = Buffer.byteLength(v, "utf8");
    this.u64(n);
    const at = this.reserve(n);
    this.buf.write(v, at, n, "utf8");
  }
  padTo(alignment: number): void {
    const pad = (alignment - (this.length % alignment)) % alignment;
    const at = this.reserve(pad);
    this.buf.fill(0, at, this.length);
  }
  result(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

function scalarOf(type: ValueType): GgufScalarType | undefined {
  return "scalar" in type ? type.scalar : undefined;
}

function writeScalar(h: HeaderBuilder, scalar: GgufScalarType, value: unknown, key: string): void {
  const bad = (): BloomeryError =>
    invalid(`metadata ${key}: ${String(value)} is not a valid ${scalar}`, { key, type: scalar });
  switch (scalar) {
    case "string":
      if (typeof value !== "string") throw bad();
      h.string(value);
      return;
    case "bool":
      if (typeof value !== "boolean") throw bad();
      h.u8(value ? 1 : 0);
      return;
    case "f32":
    case "f64":
      if (typeof value !== "number") throw bad();
      h.number(scalar, value);
      return;
    case "u64":
    case "i64": {
      if (typeof value === "number" && !Number.isSafeInteger(value)) throw bad();
      if (typeof value !== "number" && typeof value !== "bigint") throw bad();
      const v = BigInt(value);
      const [lo, hi] = scalar === "u64" ? [0n, TWO_64] : [-TWO_63, TWO_63];
      if (v < lo || v >= hi) throw bad();
      h.u64(BigInt.asUintN(64, v));
      return;
    }
    default: {
      const [lo, hi] = INT_RANGES[scalar]!;
      if (typeof value !== "number" || !Number.isInteger(value) || value < lo || value > hi) throw bad();
      h.number(scalar, value);
    }
  }
}

function writeValue(h: HeaderBuilder, type: ValueType, value: unknown, key: string): void {
  const scalar = scalarOf(type);
  if (scalar) return writeScalar(h, scalar, value, key);
  const element = (type as { element: ValueType }).element;
  if (!Array.isArray(value) && !ArrayBuffer.isView(value)) {
    throw invalid(`metadata ${key}: expected an array for ${formatType(type)}`, { key });
  }
  const elementScalar = scalarOf(element);
  h.u32(TYPE_IDS[elementScalar ?? "array"]);
  const items = value as ArrayLike<unknown> & ArrayBufferView;
  h.u64(items.length);
  // A typed array of exactly the element type is copied as bytes (GGUF and x86/ARM are little-endian).
  const matching = TYPED_ARRAY_TYPES.find(([, s]) => s === elementScalar)?.[0];
  if (matching && value instanceof matching) {
    h.bytes(new Uint8Array(items.buffer, items.byteOffset, items.byteLength));
    return;
  }
  for (let i = 0; i < items.length; i++) writeValue(h, element, items[i], key);
}

interface MetadataEntry {
  key: string;
  type: ValueType;
  value: unknown;
}

interface PlannedTensor {
  source: GgufTensorSource;
  typeId: number;
  bytes: number;
}

function planTensor(source: GgufTensorSource): PlannedTensor {
  const { name, shape } = source;
  const type = ggmlType(source.type);
  if (shape.length < 1 || shape.length > MAX_DIMS || !shape.every((d) => Number.isSafeInteger(d) && d > 0)) {
    throw invalid(`tensor ${name}: shape [${shape.join(", ")}] must be 1 to ${MAX_DIMS} positive integers`, {
      tensor: name,
      shape,
    });
  }
  if (shape[0]! % type.blockElements !== 0) {
    throw invalid(
      `tensor ${name}: shape[0] = ${shape[0]} is not a multiple of ${type.name}'s block of ${type.blockElements}`,
      { tensor: name, shape, type: type.name },
    );
  }
  const elements = shape.reduce((a, b) => a * b, 1);
  const bytes = (elements / type.blockElements) * type.blockBytes;
  if (!Number.isSafeInteger(bytes)) throw invalid(`tensor ${name}: too large`, { tensor: name, shape });
  if (source.data && source.data.length !== bytes) {
    throw invalid(
      `tensor ${name}: data has ${source.data.length} bytes, ${type.name} ${shape.join("x")} needs ${bytes}`,
      {
        tensor: name,
        expected: bytes,
        actual: source.data.length,
      },
    );
  }
  return { source, typeId: type.id, bytes };
}

function alignUp(n: number, alignment: number): number {
  return Math.ceil(n / alignment) * alignment;
}

function buildHeader(version: number, alignment: number, metadata: MetadataEntry[], tensors: PlannedTensor[]): Buffer {
  const h = new HeaderBuilder();
  h.bytes(Buffer.from("GGUF", "latin1"));
  h.u32(version);
  h.u64(tensors.length);
  h.u64(metadata.length);
  for (const { key, type, value } of metadata) {
    h.string(key);
    h.u32(TYPE_IDS[scalarOf(type) ?? "array"]);
    writeValue(h, type, value, key);
  }
  let offset = 0;
  for (const t of tensors) {
    h.string(t.source.name);
    h.u32(t.source.shape.length);
    for (const d of t.source.shape) h.u64(d);
    h.u32(t.typeId);
    h.u64(offset);
    offset += alignUp(t.bytes, alignment);
  }
  h.padTo(alignment);
  return h.result();
}

/**
 * Sequential writes through reusable buffers, so small tensors do not cost a syscall each;
 * double-buffered: one buffer is written while the caller fills
 * the other, so producing bytes (e.g. random blocks) and disk writes overlap.
 */
class FileSink {
  private buffers: [Buffer, Buffer];
  private buf: Buffer;
  private used = 0;
  private inFlight: Promise<void> = Promise.resolve();
  position = 0;

  constructor(
    private readonly fh: FileHandle,
    capacity: number,
  ) {
    this.buffers = [Buffer.alloc(capacity), Buffer.alloc(capacity)];
    this.buf = this.buffers[0];
  }

  /** Room for up to `max` bytes (at least 1), zeroed. */
  async take(max: number): Promise<Buffer> {
    if (this.used === this.buf.length) await this.startFlush();
    const n = Math.min(max, this.buf.length - this.used);
    const chunk = this.buf.subarray(this.used, this.used + n);
    chunk.fill(0);
    this.used += n;
    return chunk;
  }

  async write(data: Uint8Array): Promise<void> {
    if (data.length >= this.buf.length) {
      await this.flush();
      await writeAll(this.fh, data, this.position);
      this.position += data.length;
      return;
    }
    for (let done = 0; done < data.length; ) {
      const chunk = await this.take(data.length - done);
      chunk.set(data.subarray(done, done + chunk.length));
      done += chunk.length;
    }
  }

  async zeros(n: number): Promise<void> {
    for (let left = n; left > 0; ) left -= (await this.take(left)).length;
  }

  /** Starts writing the filled buffer and switches to the other one once its own write is done. */
  private async startFlush(): Promise<void> {
    await this.inFlight;
    const full = this.buf.subarray(0, this.used);
    this.inFlight = writeAll(this.fh, full, this.position);
    this.position += this.used;
    this.used = 0;
    this.buf = this.buf === this.buffers[0] ? this.buffers[1] : this.buffers[0];
  }

  /** Writes everything buffered and waits for it. */
  async flush(): Promise<void> {
    await this.startFlush();
    await this.inFlight;
  }
}

async function writeAll(fh: FileHandle, data: Uint8Array, position: number): Promise<void> {
  for (let done = 0; done < data.length; ) {
    const { bytesWritten } = await fh.write(data, done, data.length - done, position + done);
    done += bytesWritten;
  }
}

async function writeFile(
  path: string,
  header: Buffer,
  tensors: PlannedTensor[],
  alignment: number,
  headerOnly: boolean,
): Promise<number> {
  const total = header.length + tensors.reduce((sum, t) => sum + alignUp(t.bytes, alignment), 0);
  const fh = await open(path, "w");
  try {
    if (headerOnly) {
      await writeAll(fh, header, 0);
      await fh.truncate(total);
      return total;
    }
    const sink = new FileSink(fh, CHUNK_BYTES);
    await sink.write(header);
    for (const { source, bytes } of tensors) {
      if (source.data) {
        await sink.write(source.data);
      } else {
        for (let done = 0; done < bytes; ) {
          const chunk = await sink.take(bytes - done);
          source.fill!(chunk, done);
          done += chunk.length;
        }
      }
      await sink.zeros(alignUp(bytes, alignment) - bytes);
    }
    await sink.flush();
    return total;
  } finally {
    await fh.close();
  }
}

/** `<prefix>-00001-of-00003.gguf`, as llama.cpp's gguf-split names shards. */
function shardPath(path: string, index: number, count: number): string {
  const prefix = path.endsWith(".gguf") ? path.slice(0, -".gguf".length) : path;
  const pad = (n: number): string => String(n).padStart(5, "0");
  return `${prefix}-${pad(index + 1)}-of-${pad(count)}.gguf`;
}

const SPLIT_KEYS = ["split.no", "split.count", "split.tensors.count"];

/**
 * Writes a GGUF file (or the shards of a split model) and resolves to the paths written
 * and their total size in bytes.
 *
 * Metadata is written in the object's key order. A value's type comes from
 * `metadataTypes[key]` when given, otherwise it is inferred: string → `string`,
 * boolean → `bool`, bigint → `i64` (`u64` from 2^63), integer → `u32` when it fits,
 * else `i32`, else `i64`; other numbers → `f32`; typed arrays → arrays of their element
 * type; `string[]` → `array<string>`, `boolean[]` → `array<bool>`, `number[]` →
 * `array<i32>` when all are integers (`array<i64>` beyond 32 bits), else `array<f32>`;
 * arrays of arrays nest. Any other alignment than 32 is recorded as `general.alignment`.
 *
 * Tensor data comes from `data`, or from `fill(chunk, byteOffset)` called with
 * successive chunks of up to 16 MiB, so files far larger than memory can be written.
 * With `headerOnly`, the data region is left as a sparse hole of the full size.
 * With `splitMaxTensors`, shards are named `<path without .gguf>-00001-of-0000N.gguf`;
 * like llama.cpp's gguf-split, the first shard carries all metadata and every shard
 * carries `split.no` (u16), `split.count` (u16) and `split.tensors.count` (i32).
 *
 * Throws `INVALID_ARGUMENT` naming the key or tensor whose value, shape or data size is
 * wrong, and `UNSUPPORTED_QUANT` for an unknown tensor type.
 */
export async function writeGguf(path: string, options: WriteGgufOptions): Promise<{ files: string[]; bytes: number }> {
  const version = options.version ?? 3;
  if (version !== 2 && version !== 3) throw invalid(`GGUF version ${version} cannot be written (2 or 3)`, { version });

  const metadataAlignment = options.metadata["general.alignment"];
  const alignment =
    options.alignment ?? (typeof metadataAlignment === "number" ? metadataAlignment : DEFAULT_ALIGNMENT);
  if (!Number.isInteger(alignment) || alignment <= 0 || (alignment & (alignment - 1)) !== 0 || alignment > 2 ** 31) {
    throw invalid(`alignment ${alignment} is not a power of two`, { alignment });
  }
  if (metadataAlignment !== undefined && metadataAlignment !== alignment) {
    throw invalid(`alignment ${alignment} differs from general.alignment = ${String(metadataAlignment)}`, {
      alignment,
    });
  }

  const entries: MetadataEntry[] = Object.entries(options.metadata).map(([key, value]) => {
    const declared = options.metadataTypes?.[key];
    return { key, type: declared ? parseType(declared, key) : inferType(value, key), value };
  });
  const alignmentEntry: MetadataEntry = { key: "general.alignment", type: { scalar: "u32" }, value: alignment };
  if (alignment !== DEFAULT_ALIGNMENT && metadataAlignment === undefined) entries.push(alignmentEntry);

  const tensors = options.tensors.map(planTensor);
  const names = new Set<string>();
  for (const t of tensors) {
    if (names.has(t.source.name)) throw invalid(`tensor ${t.source.name} appears twice`, { tensor: t.source.name });
    names.add(t.source.name);
  }
  const headerOnly = options.headerOnly ?? false;
  const empty = headerOnly ? undefined : tensors.find((t) => !t.source.data && !t.source.fill);
  if (empty) throw invalid(`tensor ${empty.source.name}: neither data nor fill given`, { tensor: empty.source.name });

  if (options.splitMaxTensors === undefined) {
    const header = buildHeader(version, alignment, entries, tensors);
    return { files: [path], bytes: await writeFile(path, header, tensors, alignment, headerOnly) };
  }

  const perShard = options.splitMaxTensors;
  if (!Number.isSafeInteger(perShard) || perShard < 1) {
    throw invalid(`splitMaxTensors must be a positive integer, not ${perShard}`, { splitMaxTensors: perShard });
  }
  const count = Math.max(1, Math.ceil(tensors.length / perShard));
  if (count > 0xffff) throw invalid(`a split into ${count} shards exceeds split.count's u16`, { count });
  const unsplitEntries = entries.filter((e) => !SPLIT_KEYS.includes(e.key));
  const files: string[] = [];
  let bytes = 0;
  for (let i = 0; i < count; i++) {
    const splitEntries: MetadataEntry[] = [
      { key: "split.no", type: { scalar: "u16" }, value: i },
      { key: "split.count", type: { scalar: "u16" }, value: count },
      { key: "split.tensors.count", type: { scalar: "i32" }, value: tensors.length },
    ];
    // Later shards carry only the split keys, as gguf-split writes them, plus a non-default
    // alignment: without it a reader would look for their data at 32-byte alignment.
    const shardMeta =
      i === 0
        ? [...unsplitEntries, ...splitEntries]
        : [...(alignment !== DEFAULT_ALIGNMENT ? [alignmentEntry] : []), ...splitEntries];
    const shardTensors = tensors.slice(i * perShard, (i + 1) * perShard);
    const file = shardPath(path, i, count);
    bytes += await writeFile(
      file,
      buildHeader(version, alignment, shardMeta, shardTensors),
      shardTensors,
      alignment,
      headerOnly,
    );
    files.push(file);
  }
  return { files, bytes };
}
