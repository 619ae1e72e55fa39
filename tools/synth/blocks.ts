/**
 * Random but valid tensor data: quantized blocks whose scales are fixed small numbers and
 * whose other bytes are random, and float tensors of small uniform values.
 *
 * Every block's f16 scale `d` is {@link BLOCK_D} (0.0005); the f16 `dmin` of Q2_K, Q4_K and
 * Q5_K is {@link BLOCK_DMIN} (0.0002); the f16 min `m` of Q4_1 and Q5_1 is minus half the
 * quant range times `d`, so their values centre on zero; the E8M0 exponent of MXFP4 is
 * {@link MXFP4_E} (2^-8, values within about ±0.023); IQ4_XS's sub-block scales are fixed at one
 * `d` too. The 1- to 3-bit i-quants (IQ1_S .. IQ3_S) keep their random grid indices, signs and
 * sub-block scales (any bytes are a valid block) under the same `d`; the ternary TQ1_0 and TQ2_0,
 * whose values are only -d, 0 and d, get {@link TERNARY_D} so their weights are not 100x smaller
 * than the other types'. Random bytes are what a quantizer could write for every type but the
 * ternary ones, whose quantizer never writes a TQ1_0 byte of 243 or more or a TQ2_0 code of 3:
 * both decode (to values within the same range, by the same formula in llama.cpp and here), so
 * the files stay valid. Block sizes come from the engine's type table (ggmlType); this file only
 * knows where each format keeps its scales.
 *
 * With `boundedScales` (the tiny presets), Q6_K's int8 sub-block scales are drawn from
 * [-{@link Q6_K_SCALE_BOUND}, {@link Q6_K_SCALE_BOUND}) instead of all 256 byte values: raw bytes
 * make weights up to ±2 (127 x 32 x `d`), some 30x the other types', and logits that wide let
 * rounding-level differences decide the next-token distributions; bounded, they span ±0.064,
 * Q8_0's range.
 * @module
 */
import { BloomeryError } from "../../src/errors.js";
import { ggmlType } from "../../src/system.js";
import { fillWords } from "./random.js";

/** The f16 scale `d` of every synthetic block. */
export const BLOCK_D = 0.0005;
/** The f16 `dmin` of every synthetic Q2_K, Q4_K and Q5_K block. */
export const BLOCK_DMIN = 0.0002;
/** The f16 scale `d` of every synthetic TQ1_0 and TQ2_0 block (their values are -d, 0, d). */
export const TERNARY_D = 0.004;
/** The E8M0 scale byte of every synthetic MXFP4 block. */
export const MXFP4_E = 119;
/** Under `boundedScales`, Q6_K's sub-block scales lie in [-Q6_K_SCALE_BOUND, Q6_K_SCALE_BOUND). */
export const Q6_K_SCALE_BOUND = 4;
/** Where Q6_K keeps its sixteen int8 sub-block scales (after ql[128] and qh[64]). */
const Q6_K_SCALES_OFFSET = 192;
const Q6_K_SCALES = 16;

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The IEEE half-precision bits nearest to `value` (round to nearest even). */
export function f32ToF16(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    return sign | (half + (rest > mid || (rest === mid && half & 1) ? 1 : 0));
  }
  const half = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  // A carry out of the mantissa correctly bumps the exponent.
  return sign | (half + (rest > 0x1000 || (rest === 0x1000 && half & 1) ? 1 : 0));
}

/** The value of IEEE half-precision bits. */
export function f16ToF32(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** bfloat16 bits of `value` (round to nearest even). */
function f32ToBf16(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

/** A fixed little-endian field of a block: its byte offset and bytes (only the bits of `mask` in each, if given). */
interface BlockField {
  offset: number;
  bytes: number[];
  mask?: number;
}

function f16Field(offset: number, value: number): BlockField {
  const bits = f32ToF16(value);
  return { offset, bytes: [bits & 0xff, bits >>> 8] };
}

/** Where each quantized format keeps its scales (ggml's block structs), set to fixed values. */
function scaleFields(type: string): BlockField[] {
  const d = (offset: number) => f16Field(offset, BLOCK_D);
  const dmin = (offset: number) => f16Field(offset, BLOCK_DMIN);
  switch (type) {
    case "Q4_0":
    case "Q5_0":
    case "Q8_0":
    case "IQ4_NL":
      return [d(0)];
    case "IQ4_XS":
      // Each 32-value sub-block's 6-bit scale (4 low bits in scales_l, 2 high in scales_h) is fixed
      // at 33, i.e. d x (33 - 32) = d: random ones reach 32 x d and weights 30x the other types'.
      return [d(0), { offset: 2, bytes: [0xaa, 0xaa] }, { offset: 4, bytes: [0x11, 0x11, 0x11, 0x11] }];
    case "Q4_1":
      return [d(0), f16Field(2, -8 * BLOCK_D)];
    case "Q5_1":
      return [d(0), f16Field(2, -16 * BLOCK_D)];
    case "Q4_K":
    case "Q5_K":
      return [d(0), dmin(2)];
    case "Q2_K":
      return [d(80), dmin(82)];
    case "Q3_K":
      return [d(108)];
    case "Q6_K":
      return [d(208)];
    case "MXFP4":
      return [{ offset: 0, bytes: [MXFP4_E] }];
    case "IQ2_XXS":
    case "IQ2_XS":
    case "IQ2_S":
    case "IQ3_XXS":
    case "IQ3_S":
    case "IQ1_S":
      return [d(0)];
    case "IQ1_M": {
      // The f16 scale's four nibbles sit in the top nibbles of the four 16-bit scale words (bytes 48..55).
      const bits = f32ToF16(BLOCK_D);
      return [0, 1, 2, 3].map((k) => ({ offset: 49 + 2 * k, bytes: [((bits >>> (4 * k)) & 0x0f) << 4], mask: 0xf0 }));
    }
    case "TQ1_0":
      return [f16Field(52, TERNARY_D)];
    case "TQ2_0":
      return [f16Field(64, TERNARY_D)];
    default:
      throw new BloomeryError("UNSUPPORTED_QUANT", `no synthetic block layout for ${type}`, { type });
  }
}

/** The f16 scale `d` of a block of `type`, decoded from the block's bytes (for checks). */
export function blockScale(type: string, block: Uint8Array): number {
  const fields = scaleFields(type);
  let bits: number;
  if (type === "IQ1_M") {
    bits = 0;
    for (let k = 0; k < 4; k++) bits |= (block[49 + 2 * k]! >>> 4) << (4 * k);
  } else {
    const field = fields[0]!;
    if (field.bytes.length !== 2) throw new BloomeryError("UNSUPPORTED_QUANT", `${type} has no f16 scale`, { type });
    bits = block[field.offset]! | (block[field.offset + 1]! << 8);
  }
  return f16ToF32(bits);
}

/** The `d` writeSyntheticModel gives every block of `type`. */
export function syntheticBlockD(type: string): number {
  return type === "TQ1_0" || type === "TQ2_0" ? TERNARY_D : BLOCK_D;
}

/** How float values of a tensor are drawn: `center + uniform(±amplitude) * rowScale[row]`. */
export interface FloatInit {
  center: number;
  amplitude: number;
  /** Elements per row, and a scale per row (repeated if shorter than the row count). */
  rowLength?: number;
  rowScale?: Float32Array;
  /**
   * An I32 table of expert ids instead of floats (deepseek4's hash routing): each row (rowLength
   * ids) holds distinct ids below `table`, drawn from the stream.
   */
  table?: number;
}

/** The types writeSyntheticModel can fill, quantized or float. */
export const FILLABLE_TYPES = [
  "F32",
  "F16",
  "BF16",
  "Q8_0",
  "Q4_0",
  "Q4_1",
  "Q5_0",
  "Q5_1",
  "Q4_K",
  "Q5_K",
  "Q6_K",
  "Q2_K",
  "Q3_K",
  "IQ4_NL",
  "IQ4_XS",
  "MXFP4",
  "IQ1_S",
  "IQ1_M",
  "IQ2_XXS",
  "IQ2_XS",
  "IQ2_S",
  "IQ3_XXS",
  "IQ3_S",
  "TQ1_0",
  "TQ2_0",
] as const;

const FLOAT_BYTES: Record<string, number> = { F32: 4, F16: 2, BF16: 2 };

/** A reusable scratch buffer, grown on demand. */
class Scratch {
  private buf = new ArrayBuffer(0);
  bytes(n: number): Uint8Array {
    if (this.buf.byteLength < n) this.buf = new ArrayBuffer(Math.max(n, this.buf.byteLength * 2));
    return new Uint8Array(this.buf, 0, n);
  }
}

/** How quantized blocks are filled beyond their fixed scales. */
export interface BlockFillOptions {
  /** Bound Q6_K's int8 sub-block scales to [-Q6_K_SCALE_BOUND, Q6_K_SCALE_BOUND) (module note). */
  boundedScales?: boolean;
}

/**
 * A `fill(chunk, byteOffset)` for a tensor of `type`: random bytes with fixed scales for a
 * quantized type, or values drawn per `float` for F32/F16/BF16. `key` picks the random stream.
 */
export function tensorFiller(
  type: string,
  key: number,
  float: FloatInit,
  options: BlockFillOptions = {},
): (chunk: Uint8Array, byteOffset: number) => void {
  const scratch = new Scratch();
  if (type === "I32") return tableFiller(key, float);
  const elementBytes = FLOAT_BYTES[type];
  if (elementBytes !== undefined) return floatFiller(type, elementBytes, key, float, scratch);
  const blockBytes = ggmlType(type).blockBytes;
  const fields = scaleFields(type);
  const boundQ6KScales = options.boundedScales === true && type === "Q6_K";
  return (chunk, byteOffset) => {
    randomBytes(chunk, byteOffset, key, scratch);
    if (boundQ6KScales) boundQ6KSubBlockScales(chunk, byteOffset, blockBytes);
    patchFields(chunk, byteOffset, blockBytes, fields);
  };
}

/** An I32 table (FloatInit.table): row r's ids a partial Fisher-Yates shuffle of [0, table) from the stream's words. */
function tableFiller(key: number, init: FloatInit): (chunk: Uint8Array, byteOffset: number) => void {
  const { table, rowLength } = init;
  if (table === undefined || rowLength === undefined || rowLength > table) {
    throw new BloomeryError("INTERNAL", "an I32 tensor needs a table of at least rowLength ids", { table, rowLength });
  }
  const words = new Uint32Array(rowLength);
  const ids = Int32Array.from({ length: table }, (_, i) => i);
  const row = new Int32Array(rowLength);
  const rowBytes = new Uint8Array(row.buffer);
  return (chunk, byteOffset) => {
    const rowSize = rowLength * 4;
    for (let r = Math.floor(byteOffset / rowSize); r * rowSize < byteOffset + chunk.length; r++) {
      fillWords(words, key, r * rowLength);
      for (let i = 0; i < table; i++) ids[i] = i;
      for (let i = 0; i < rowLength; i++) {
        const j = i + (words[i]! % (table - i));
        [ids[i], ids[j]] = [ids[j]!, ids[i]!];
        row[i] = ids[i]!;
      }
      const from = Math.max(0, byteOffset - r * rowSize);
      const to = Math.min(rowSize, byteOffset + chunk.length - r * rowSize);
      chunk.set(rowBytes.subarray(from, to), r * rowSize + from - byteOffset);
    }
  };
}

/** Maps each random scale byte into the bound: a function of the byte alone, so chunking cannot change it. */
function boundQ6KSubBlockScales(chunk: Uint8Array, byteOffset: number, blockBytes: number): void {
  const end = byteOffset + chunk.length;
  for (let block = Math.floor(byteOffset / blockBytes); block * blockBytes < end; block++) {
    const base = block * blockBytes - byteOffset + Q6_K_SCALES_OFFSET;
    for (let j = 0; j < Q6_K_SCALES; j++) {
      const at = base + j;
      if (at >= 0 && at < chunk.length) chunk[at] = ((chunk[at]! % (2 * Q6_K_SCALE_BOUND)) - Q6_K_SCALE_BOUND) & 0xff;
    }
  }
}

/** Random bytes for tensor bytes [byteOffset, byteOffset + chunk.length), from 4-byte words of the stream. */
function randomBytes(chunk: Uint8Array, byteOffset: number, key: number, scratch: Scratch): void {
  const firstWord = Math.floor(byteOffset / 4);
  const skip = byteOffset - firstWord * 4;
  const words = Math.ceil((skip + chunk.length) / 4);
  if (skip === 0 && chunk.byteOffset % 4 === 0 && chunk.length % 4 === 0) {
    fillWords(new Uint32Array(chunk.buffer, chunk.byteOffset, words), key, firstWord);
    return;
  }
  const tmp = scratch.bytes(words * 4);
  fillWords(new Uint32Array(tmp.buffer, 0, words), key, firstWord);
  chunk.set(tmp.subarray(skip, skip + chunk.length));
}

function patchFields(chunk: Uint8Array, byteOffset: number, blockBytes: number, fields: BlockField[]): void {
  const end = byteOffset + chunk.length;
  for (let block = Math.floor(byteOffset / blockBytes); block * blockBytes < end; block++) {
    const base = block * blockBytes - byteOffset;
    for (const field of fields) {
      for (let j = 0; j < field.bytes.length; j++) {
        const at = base + field.offset + j;
        const mask = field.mask ?? 0xff;
        if (at >= 0 && at < chunk.length) chunk[at] = (chunk[at]! & ~mask) | (field.bytes[j]! & mask);
      }
    }
  }
}

function floatFiller(
  type: string,
  elementBytes: number,
  key: number,
  float: FloatInit,
  scratch: Scratch,
): (chunk: Uint8Array, byteOffset: number) => void {
  const { center, amplitude, rowLength, rowScale } = float;
  return (chunk, byteOffset) => {
    const first = Math.floor(byteOffset / elementBytes);
    const count = Math.ceil((byteOffset + chunk.length) / elementBytes) - first;
    const tmp = scratch.bytes(count * Math.max(elementBytes, 4));
    const words = new Uint32Array(tmp.buffer, 0, count);
    fillWords(words, key, first);
    const values = new Float32Array(tmp.buffer, 0, count);
    for (let i = 0; i < count; i++) {
      // Uniform in [-1, 1) from the top 24 bits. `values` aliases `words`: word i is read before value i replaces it.
      const unit = (words[i]! >>> 8) / 0x800000 - 1;
      const scale = rowScale && rowLength ? rowScale[Math.floor((first + i) / rowLength) % rowScale.length]! : 1;
      values[i] = center + unit * amplitude * scale;
    }
    let out: Uint8Array;
    if (type === "F32") {
      out = tmp.subarray(0, count * 4);
    } else {
      // Narrow in place: element i's two bytes land before element i + 1's four are read.
      const halves = new Uint16Array(tmp.buffer, 0, count);
      const convert = type === "F16" ? f32ToF16 : f32ToBf16;
      for (let i = 0; i < count; i++) halves[i] = convert(values[i]!);
      out = tmp.subarray(0, count * 2);
    }
    const skip = byteOffset - first * elementBytes;
    chunk.set(out.subarray(skip, skip + chunk.length));
  };
}
