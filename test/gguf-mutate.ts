// Structure-aware mutations of GGUF model files, for the model fuzz suite (model-fuzz.test.ts): a file is parsed
// into its metadata pairs (raw value bytes), tensor infos and data, one to three mutations change what a model
// loader indexes with (counts swapped, enlarged, zeroed or negative, token ids out of range, arrays shortened,
// tensor types, shapes and offsets, poisoned weights, flipped or cut bytes), and it is written back. Plain
// TypeScript without vitest, so a child process can run it.

/** A seeded PRNG (mulberry32), so every random file reproduces from its seed. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** GGUF value type ids. */
const U8 = 0;
const I8 = 1;
const U16 = 2;
const I16 = 3;
const U32 = 4;
const I32 = 5;
const F32 = 6;
const BOOL = 7;
const STRING = 8;
const ARRAY = 9;
const U64 = 10;
const I64 = 11;
const F64 = 12;

const SCALAR_BYTES: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const INT_TYPES = [U8, I8, U16, I16, U32, I32, U64, I64];

export interface RawKv {
  key: string;
  type: number;
  /** The value's bytes as in the file (after its type). */
  value: Buffer;
}

export interface RawTensor {
  name: string;
  dims: bigint[];
  type: number;
  /** Relative to the data section. */
  offset: bigint;
}

export interface RawGguf {
  version: number;
  kvs: RawKv[];
  tensors: RawTensor[];
  alignment: number;
  /** The data section (from its aligned start to the end of the file). */
  data: Buffer;
}

/** A ggml type's block: elements and bytes (from ggmlTypes()). */
export interface BlockSize {
  elements: number;
  bytes: number;
}

function valueBytes(b: Buffer, at: number, type: number): number {
  if (type === STRING) return 8 + Number(b.readBigUInt64LE(at));
  if (type !== ARRAY) return SCALAR_BYTES[type]!;
  const element = b.readUInt32LE(at);
  const count = Number(b.readBigUInt64LE(at + 4));
  if (element !== STRING && element !== ARRAY) return 12 + count * SCALAR_BYTES[element]!;
  let p = at + 12;
  for (let i = 0; i < count; i++) p += valueBytes(b, p, element);
  return p - at;
}

/** Parses a valid GGUF file (the fuzz suite's bases). */
export function parseGguf(b: Buffer): RawGguf {
  let p = 24;
  const string = (): string => {
    const n = Number(b.readBigUInt64LE(p));
    const s = b.toString("utf8", p + 8, p + 8 + n);
    p += 8 + n;
    return s;
  };
  const kvs: RawKv[] = [];
  for (let i = 0; i < Number(b.readBigUInt64LE(16)); i++) {
    const key = string();
    const type = b.readUInt32LE(p);
    const n = valueBytes(b, p + 4, type);
    kvs.push({ key, type, value: Buffer.from(b.subarray(p + 4, p + 4 + n)) });
    p += 4 + n;
  }
  const tensors: RawTensor[] = [];
  for (let i = 0; i < Number(b.readBigUInt64LE(8)); i++) {
    const name = string();
    const dims: bigint[] = [];
    const n = b.readUInt32LE(p);
    p += 4;
    for (let d = 0; d < n; d++, p += 8) dims.push(b.readBigUInt64LE(p));
    tensors.push({ name, dims, type: b.readUInt32LE(p), offset: b.readBigUInt64LE(p + 4) });
    p += 12;
  }
  const alignKv = kvs.find((kv) => kv.key === "general.alignment");
  const alignment = alignKv ? alignKv.value.readUInt32LE(0) : 32;
  const start = Math.ceil(p / alignment) * alignment;
  return { version: b.readUInt32LE(4), kvs, tensors, alignment, data: Buffer.from(b.subarray(start)) };
}

const u32 = (n: number): Buffer => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
};
const u64 = (n: bigint): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt.asUintN(64, n));
  return b;
};
const str = (s: string | Buffer): Buffer => {
  const bytes = typeof s === "string" ? Buffer.from(s, "utf8") : s;
  return Buffer.concat([u64(BigInt(bytes.length)), bytes]);
};

/** Writes a RawGguf back: header, metadata, tensor infos, padding to its alignment, data. */
export function serializeGguf(g: RawGguf): Buffer {
  const head = Buffer.concat([
    Buffer.from("GGUF", "latin1"),
    u32(g.version),
    u64(BigInt(g.tensors.length)),
    u64(BigInt(g.kvs.length)),
    ...g.kvs.map((kv) => Buffer.concat([str(kv.key), u32(kv.type), kv.value])),
    ...g.tensors.map((t) =>
      Buffer.concat([str(t.name), u32(t.dims.length), ...t.dims.map(u64), u32(t.type), u64(t.offset)]),
    ),
  ]);
  const pad = Buffer.alloc((g.alignment - (head.length % g.alignment)) % g.alignment);
  return Buffer.concat([head, pad, g.data]);
}

/** A copy to mutate; its data stays the base's until a mutation replaces it (relayout, poisonData). */
function clone(g: RawGguf): RawGguf {
  return {
    ...g,
    kvs: g.kvs.map((kv) => ({ ...kv, value: Buffer.from(kv.value) })),
    tensors: g.tensors.map((t) => ({ ...t, dims: [...t.dims] })),
  };
}

/** An integer scalar's bytes in `type`, wrapped to its width. */
function encodeInt(type: number, v: bigint): Buffer {
  const b = Buffer.alloc(SCALAR_BYTES[type]!);
  const bits = b.length * 8;
  const signed = type === I8 || type === I16 || type === I32 || type === I64;
  const wrapped = signed ? BigInt.asIntN(bits, v) : BigInt.asUintN(bits, v);
  if (bits === 64) (signed ? b.writeBigInt64LE : b.writeBigUInt64LE).call(b, wrapped);
  else if (signed) b.writeIntLE(Number(wrapped), 0, b.length);
  else b.writeUIntLE(Number(wrapped), 0, b.length);
  return b;
}

function decodeInt(type: number, b: Buffer, at = 0): bigint {
  switch (type) {
    case U8:
      return BigInt(b.readUInt8(at));
    case I8:
      return BigInt(b.readInt8(at));
    case U16:
      return BigInt(b.readUInt16LE(at));
    case I16:
      return BigInt(b.readInt16LE(at));
    case U32:
      return BigInt(b.readUInt32LE(at));
    case I32:
      return BigInt(b.readInt32LE(at));
    case U64:
      return b.readBigUInt64LE(at);
    default:
      return b.readBigInt64LE(at);
  }
}

/** The elements of an array value: [element type, count, offset of each element in value]. */
function arrayElements(kv: RawKv): { element: number; offsets: number[]; end: number } {
  const element = kv.value.readUInt32LE(0);
  const count = Number(kv.value.readBigUInt64LE(4));
  const offsets: number[] = [];
  let p = 12;
  for (let i = 0; i < count; i++) {
    offsets.push(p);
    p += valueBytes(kv.value, p, element);
  }
  return { element, offsets, end: p };
}

function arrayOf(element: number, items: Buffer[]): Buffer {
  return Buffer.concat([u32(element), u64(BigInt(items.length)), ...items]);
}

/** Replaces the pair of `entry.key`, or adds it. */
function upsert(g: RawGguf, entry: RawKv): void {
  const at = g.kvs.findIndex((kv) => kv.key === entry.key);
  if (at >= 0) g.kvs[at] = entry;
  else g.kvs.push(entry);
}

function items(kv: RawKv): Buffer[] {
  const { offsets, end } = arrayElements(kv);
  return offsets.map((o, i) => kv.value.subarray(o, offsets[i + 1] ?? end));
}

/** Tensor bytes of `dims` in a type of `block`, or undefined when the row is not whole blocks. */
function tensorBytes(dims: bigint[], block: BlockSize | undefined): bigint | undefined {
  if (!block || dims.length === 0 || dims[0]! % BigInt(block.elements) !== 0n) return undefined;
  return (dims.reduce((a, b) => a * b, 1n) / BigInt(block.elements)) * BigInt(block.bytes);
}

/** Lays the tensors out again one after another (as a writer would), each filled from its old bytes, cut or repeated. */
function relayout(g: RawGguf, blocks: Map<number, BlockSize>): void {
  const chunks: Buffer[] = [];
  let offset = 0n;
  for (const t of g.tensors) {
    const size = tensorBytes(t.dims, blocks.get(t.type)) ?? 32n;
    if (size > 64n << 20n) return; // a shape made huge: leave the layout as it is
    const old = g.data.subarray(Number(t.offset), Number(t.offset) + Number(size));
    const bytes = Buffer.alloc(Number(size));
    for (let i = 0; i < bytes.length && old.length > 0; i += old.length) old.copy(bytes, i);
    const padded = ((size + BigInt(g.alignment) - 1n) / BigInt(g.alignment)) * BigInt(g.alignment);
    chunks.push(bytes, Buffer.alloc(Number(padded - size)));
    t.offset = offset;
    offset += padded;
  }
  g.data = Buffer.concat(chunks);
}

type Rand = () => number;
/** One of `xs` (undefined when it is empty: mutations of lists emptied by earlier ones skip). */
const pick = <T>(rand: Rand, xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;

/** One mutation in place; returns what it did. */
type Mutation = (g: RawGguf, rand: Rand, blocks: Map<number, BlockSize>) => string;

const intKvs = (g: RawGguf) => g.kvs.filter((kv) => INT_TYPES.includes(kv.type));
const arrayKvs = (g: RawGguf) => g.kvs.filter((kv) => kv.type === ARRAY);
const vocabSize = (g: RawGguf): bigint => {
  const tokens = g.kvs.find((kv) => kv.key === "tokenizer.ggml.tokens");
  return tokens ? tokens.value.readBigUInt64LE(4) : 0n;
};

const MUTATIONS: Record<string, Mutation> = {
  intValue(g, rand) {
    const kv = pick(rand, intKvs(g));
    if (!kv) return "no integer";
    const old = decodeInt(kv.type, kv.value);
    const value = pick(rand, [
      0n,
      1n,
      -1n,
      old + 1n,
      old - 1n,
      old * 2n,
      old / 2n,
      old * 1000n,
      2n ** 31n - 1n,
      2n ** 32n - 1n,
      2n ** 63n - 1n,
      vocabSize(g),
      BigInt(Math.floor(rand() * 70000)),
    ]);
    const type = rand() < 0.8 ? kv.type : pick(rand, INT_TYPES);
    kv.type = type;
    kv.value = encodeInt(type, value);
    return `${kv.key} = ${value} (type ${type})`;
  },
  retype(g, rand) {
    const kv = pick(
      rand,
      g.kvs.filter((kv) => kv.type !== ARRAY),
    );
    if (!kv) return "no scalar";
    const to = pick(rand, ["string", "f32", "bool", "array"] as const);
    if (to === "string") [kv.type, kv.value] = [STRING, str("8")];
    else if (to === "f32") [kv.type, kv.value] = [F32, Buffer.from(new Float32Array([8.5]).buffer)];
    else if (to === "bool") [kv.type, kv.value] = [BOOL, Buffer.from([1])];
    else [kv.type, kv.value] = [ARRAY, arrayOf(U32, [u32(8), u32(2)])];
    return `${kv.key} retyped as ${to}`;
  },
  swapCounts(g, rand) {
    const ints = intKvs(g);
    const a = pick(rand, ints);
    const b = pick(rand, ints);
    if (!a || !b) return "no integers";
    const [va, vb] = [decodeInt(a.type, a.value), decodeInt(b.type, b.value)];
    a.value = encodeInt(a.type, vb);
    b.value = encodeInt(b.type, va);
    return `swapped ${a.key} and ${b.key}`;
  },
  floatValue(g, rand) {
    const floats = g.kvs.filter((kv) => kv.type === F32 || kv.type === F64);
    if (floats.length === 0) return "no float";
    const kv = pick(rand, floats);
    const value = pick(rand, [NaN, Infinity, -Infinity, 0, -1, 1e38, 1e-38, -0]);
    kv.value =
      kv.type === F32 ? Buffer.from(new Float32Array([value]).buffer) : Buffer.from(new Float64Array([value]).buffer);
    return `${kv.key} = ${value}`;
  },
  tokenId(g, rand) {
    const vocab = vocabSize(g);
    const key = pick(
      rand,
      ["bos", "eos", "eot", "padding", "unknown"].map((k) => `tokenizer.ggml.${k}_token_id`),
    );
    const value = pick(rand, [vocab, vocab + 1n, -1n, 2n ** 31n - 1n, 2n ** 32n - 1n, vocab - 1n]);
    const type = value < 0n ? I32 : U32;
    upsert(g, { key, type, value: encodeInt(type, value) });
    return `${key} = ${value}`;
  },
  shortenArray(g, rand) {
    const kv = pick(rand, arrayKvs(g));
    if (!kv) return "no array";
    const all = items(kv);
    const keep = pick(rand, [0, 1, all.length - 1, all.length >> 1, Math.floor(rand() * all.length)]);
    kv.value = arrayOf(kv.value.readUInt32LE(0), all.slice(0, Math.max(0, keep)));
    return `${kv.key} cut to ${keep} of ${all.length}`;
  },
  growArray(g, rand) {
    const kv = pick(rand, arrayKvs(g));
    if (!kv) return "no array";
    const all = items(kv);
    const more = pick(rand, [1, 2, all.length]);
    kv.value = arrayOf(kv.value.readUInt32LE(0), [...all, ...all.slice(0, more)]);
    return `${kv.key} grown by ${more}`;
  },
  arrayElement(g, rand) {
    const kv = pick(rand, arrayKvs(g));
    if (!kv) return "no array";
    const { element, offsets } = arrayElements(kv);
    if (offsets.length === 0) return `${kv.key} is empty`;
    const all = items(kv);
    const i = Math.floor(rand() * all.length);
    if (element === STRING) {
      all[i] = str(pick(rand, ["", all[(i + 1) % all.length]!.subarray(8), " ", "x".repeat(5000), "\u0120 \u0120"]));
    } else if (INT_TYPES.includes(element)) {
      all[i] = encodeInt(element, pick(rand, [-1n, 7n, 255n, 2n ** 31n - 1n, 100000n]));
    } else if (element === F32) {
      all[i] = Buffer.from(new Float32Array([pick(rand, [NaN, Infinity, -1e30])]).buffer);
    }
    kv.value = arrayOf(element, all);
    return `${kv.key}[${i}] changed`;
  },
  retypeArray(g, rand) {
    const kv = pick(
      rand,
      arrayKvs(g).filter((kv) => kv.value.readUInt32LE(0) !== STRING),
    );
    if (!kv) return "no numeric array";
    const element = kv.value.readUInt32LE(0);
    const bytes = kv.value.subarray(12);
    const to = pick(rand, [U8, I8, U16, U32, I32, F32, U64]);
    const count = Math.floor(bytes.length / SCALAR_BYTES[to]!);
    kv.value = Buffer.concat([u32(to), u64(BigInt(count)), bytes.subarray(0, count * SCALAR_BYTES[to]!)]);
    return `${kv.key} elements ${element} read as ${to}`;
  },
  stringValue(g, rand) {
    const key = pick(rand, ["general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.pre"]);
    const value = pick(rand, ["qwen3moe", "qwen3", "qwen2", "llama", "gpt2", "qwen2", "llama-bpe", "t5", "", "x"]);
    const kv = g.kvs.find((k) => k.key === key);
    if (kv) [kv.type, kv.value] = [STRING, str(value)];
    return `${key} = "${value}"`;
  },
  removeKv(g, rand) {
    const [kv] = g.kvs.splice(Math.floor(rand() * g.kvs.length), 1);
    return kv ? `removed ${kv.key}` : "no metadata";
  },
  addKv(g, rand) {
    const arch =
      g.kvs
        .find((kv) => kv.key === "general.architecture")
        ?.value.subarray(8)
        .toString() ?? "llama";
    const [suffix, type, value] = pick(rand, [
      ["attention.key_length", U32, u32(pick(rand, [0, 32, 63, 64, 128, 100000]))],
      ["attention.value_length", U32, u32(pick(rand, [32, 64, 128]))],
      ["attention.head_count_kv", U32, u32(pick(rand, [1, 3, 8, 64]))],
      ["rope.dimension_count", U32, u32(pick(rand, [0, 7, 32, 64, 65, 1024]))],
      ["rope.scaling.type", STRING, str(pick(rand, ["linear", "yarn", "none"]))],
      ["rope.scaling.factor", F32, Buffer.from(new Float32Array([pick(rand, [0, -2, 4, NaN])]).buffer)],
      ["rope.scale_linear", F32, Buffer.from(new Float32Array([pick(rand, [0, 2])]).buffer)],
      ["expert_count", U32, u32(pick(rand, [0, 4, 8, 16]))],
      ["expert_used_count", U32, u32(pick(rand, [0, 2, 9, 1000]))],
    ] as const);
    const key = pick(rand, [`${arch}.${suffix}`, "tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"]);
    upsert(g, key.startsWith("tokenizer") ? { key, type: BOOL, value: Buffer.from([1]) } : { key, type, value });
    return `set ${key}`;
  },
  duplicateKv(g, rand) {
    const kv = pick(rand, g.kvs);
    if (!kv) return "no metadata";
    g.kvs.push({ ...kv });
    return `duplicated ${kv.key}`;
  },
  tensorType(g, rand, blocks) {
    const t = pick(rand, g.tensors);
    if (!t) return "no tensor";
    const old = t.type;
    t.type = rand() < 0.9 ? pick(rand, [...blocks.keys()]) : pick(rand, [4, 5, 31, 39, 1000]);
    const relaid = rand() < 0.5;
    if (relaid) relayout(g, blocks);
    return `${t.name} type ${old} -> ${t.type}${relaid ? " (laid out again)" : " (in place)"}`;
  },
  tensorShape(g, rand, blocks) {
    const t = pick(rand, g.tensors);
    if (!t) return "no tensor";
    const d = Math.floor(rand() * t.dims.length);
    const change = pick(rand, ["swap", "double", "halve", "one", "add", "drop"] as const);
    if (change === "swap" && t.dims.length > 1) [t.dims[0], t.dims[d]] = [t.dims[d]!, t.dims[0]!];
    else if (change === "double") t.dims[d] = t.dims[d]! * 2n;
    else if (change === "halve") t.dims[d] = t.dims[d]! / 2n || 1n;
    else if (change === "one") t.dims[d] = 1n;
    else if (change === "add") t.dims.push(2n);
    else if (change === "drop" && t.dims.length > 1) t.dims.pop();
    const relaid = rand() < 0.5;
    if (relaid) relayout(g, blocks);
    return `${t.name} shape ${change} at ${d}${relaid ? " (laid out again)" : " (in place)"}`;
  },
  tensorOffset(g, rand) {
    const t = pick(rand, g.tensors);
    if (!t) return "no tensor";
    const other = pick(rand, g.tensors);
    const a = BigInt(g.alignment);
    t.offset = pick(rand, [other.offset, t.offset + a, t.offset - a, t.offset + 1n, BigInt(g.data.length), 2n ** 63n]);
    return `${t.name} offset ${t.offset}`;
  },
  renameTensor(g, rand) {
    const t = pick(rand, g.tensors);
    if (!t) return "no tensor";
    const old = t.name;
    t.name = pick(rand, [
      pick(rand, g.tensors).name,
      "blk.99.attn_norm.weight",
      "extra.weight",
      t.name.replace("blk.0", "blk.1"),
    ]);
    return `${old} renamed ${t.name}`;
  },
  removeTensor(g, rand, blocks) {
    const [t] = g.tensors.splice(Math.floor(rand() * g.tensors.length), 1);
    if (rand() < 0.5) relayout(g, blocks);
    return t ? `removed ${t.name}` : "no tensor";
  },
  poisonData(g, rand, blocks) {
    const t = pick(rand, g.tensors);
    if (!t) return "no tensor";
    const value = pick(rand, [NaN, Infinity, -Infinity, 65504, 1e30]);
    g.data = Buffer.from(g.data); // the base's data is shared until now
    const start = Number(t.offset);
    const size = Number(tensorBytes(t.dims, blocks.get(t.type)) ?? 0n);
    for (let i = 0; i < 1 + Math.floor(rand() * 64) && size >= 4; i++) {
      const at = start + Math.floor((rand() * size) / 2) * 2;
      if (t.type === 0 && at + 4 <= g.data.length) g.data.writeFloatLE(value, at - (at % 4));
      else if (at + 2 <= g.data.length) g.data.writeUInt16LE(pick(rand, [0x7c00, 0xfc00, 0x7e00, 0x7bff]), at);
    }
    return `${t.name} data poisoned with ${value}`;
  },
};

/** The file's bytes flipped or cut after serializing: what a damaged copy looks like. */
function damage(bytes: Buffer, rand: Rand): { bytes: Buffer; what: string } {
  if (rand() < 0.5) {
    const flips = 1 + Math.floor(rand() * 8);
    const headerEnd = Math.min(bytes.length, 12_000);
    for (let i = 0; i < flips; i++) bytes[Math.floor(rand() * headerEnd)] = Math.floor(rand() * 256);
    return { bytes, what: `${flips} bytes flipped` };
  }
  const at = Math.floor(rand() * bytes.length);
  return { bytes: bytes.subarray(0, at), what: `cut at ${at}` };
}

export const MUTATION_NAMES = Object.keys(MUTATIONS);

/**
 * Mutates one of `bases` as the seeded `rand` says: one to three structured mutations, and sometimes damage to the
 * bytes. Returns the file and a description of what was done.
 */
export function mutateModel(
  bases: readonly RawGguf[],
  blocks: Map<number, BlockSize>,
  rand: Rand,
): { bytes: Buffer; what: string } {
  const which = Math.floor(rand() * bases.length);
  const g = clone(bases[which]!);
  const done = [`base ${which}`];
  const count = 1 + Math.floor(rand() * 3);
  for (let i = 0; i < count; i++) done.push(MUTATIONS[pick(rand, MUTATION_NAMES)]!(g, rand, blocks));
  let bytes = serializeGguf(g);
  if (rand() < 0.15) {
    const damaged = damage(bytes, rand);
    bytes = damaged.bytes;
    done.push(damaged.what);
  }
  return { bytes, what: done.join("; ") };
}

/** The random source of file `index` under `seed`: files reproduce one by one. */
export function fileRandom(seed: number, index: number): Rand {
  return prng((seed ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0);
}

/** Sets (or adds) an integer metadata value of `type`: for tests that craft one change. */
export function setInt(g: RawGguf, key: string, type: number, value: bigint): void {
  upsert(g, { key, type, value: encodeInt(type, value) });
}

/** Sets (or adds) an f32 metadata value. */
export function setF32(g: RawGguf, key: string, value: number): void {
  upsert(g, { key, type: F32, value: Buffer.from(new Float32Array([value]).buffer) });
}

/** Sets (or adds) an array of f32 values. */
export function setF32Array(g: RawGguf, key: string, values: number[]): void {
  upsert(g, {
    key,
    type: ARRAY,
    value: arrayOf(
      F32,
      values.map((v) => Buffer.from(new Float32Array([v]).buffer)),
    ),
  });
}

/** Keeps the first `count` elements of an array value. */
export function cutArray(g: RawGguf, key: string, count: number): void {
  const kv = g.kvs.find((k) => k.key === key)!;
  kv.value = arrayOf(kv.value.readUInt32LE(0), items(kv).slice(0, count));
}

/** Sets element `index` of an integer array value. */
export function setArrayInt(g: RawGguf, key: string, index: number, value: bigint): void {
  const kv = g.kvs.find((k) => k.key === key)!;
  const all = items(kv);
  const element = kv.value.readUInt32LE(0);
  all[index] = encodeInt(element, value);
  kv.value = arrayOf(element, all);
}

export { clone as cloneGguf, U32, I32, U64 };
