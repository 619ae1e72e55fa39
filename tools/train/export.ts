/**
 * Exports a Hugging Face Qwen3-MoE checkpoint (what tools/train/train.py writes: config.json,
 * tokenizer.json, model-*.safetensors with one tensor per expert) to a qwen3moe GGUF with our own
 * writer: llama.cpp's tensor names and metadata keys, the byte-level BPE vocabulary, a ChatML
 * template, matrices in Q8_0 and norms and routers in F32.
 *
 * The command line is export-cli.ts (tools/train/README.md shows how to run it).
 * @module
 */
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { GgufMetadataType, GgufTensorSource, GgufValue } from "../../src/gguf/types.js";
import { writeGguf } from "../../src/gguf/write.js";
import { f16ToF32, f32ToF16 } from "../synth/blocks.js";
import { TokenType } from "../synth/vocab.js";

/** ChatML, as Qwen writes it, without Qwen's tool and reasoning branches (the model was not trained on them). */
export const CHAT_TEMPLATE = `{%- for message in messages -%}
{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\\n' -}}
{%- endif -%}`;

const Q8_0_BLOCK = 32;
const Q8_0_BLOCK_BYTES = 2 + Q8_0_BLOCK;

/** One tensor of a safetensors file, as float32 values in row-major order of `shape` (outermost first). */
export interface LoadedTensor {
  shape: number[];
  values: Float32Array;
}

/** Reads every tensor of a safetensors file: an 8-byte little-endian header length, the JSON header, the data. */
export function readSafetensors(path: string): Map<string, LoadedTensor> {
  const file = readFileSync(path);
  const headerBytes = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.toString("utf8", 8, 8 + headerBytes)) as Record<
    string,
    { dtype: string; shape: number[]; data_offsets: [number, number] }
  >;
  const dataStart = 8 + headerBytes;
  const tensors = new Map<string, LoadedTensor>();
  for (const [name, entry] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [begin, end] = entry.data_offsets;
    const bytes = file.subarray(dataStart + begin, dataStart + end);
    const count = entry.shape.reduce((a, b) => a * b, 1);
    const values = new Float32Array(count);
    if (entry.dtype === "F32") {
      for (let i = 0; i < count; i++) values[i] = bytes.readFloatLE(4 * i);
    } else if (entry.dtype === "F16") {
      for (let i = 0; i < count; i++) values[i] = f16ToF32(bytes.readUInt16LE(2 * i));
    } else if (entry.dtype === "BF16") {
      const u32 = new Uint32Array(values.buffer);
      for (let i = 0; i < count; i++) u32[i] = bytes.readUInt16LE(2 * i) << 16;
    } else {
      throw new Error(`${path}: tensor ${name} has dtype ${entry.dtype}; the export reads F32, F16 and BF16`);
    }
    if (bytes.length !== count * (entry.dtype === "F32" ? 4 : 2)) throw new Error(`${path}: ${name} has a bad size`);
    tensors.set(name, { shape: entry.shape, values });
  }
  return tensors;
}

/** Rounds half away from zero, as C's roundf (ggml's reference quantizer) does. */
const roundHalfAway = (x: number) => Math.sign(x) * Math.round(Math.abs(x));

/** Q8_0 blocks of float32 values: per 32 values, d = max|x| / 127 as f16, then q = round(x / d) as int8. */
export function quantizeQ8_0(values: Float32Array): Uint8Array {
  if (values.length % Q8_0_BLOCK !== 0) throw new Error(`Q8_0 needs a multiple of ${Q8_0_BLOCK} values`);
  const out = new Uint8Array((values.length / Q8_0_BLOCK) * Q8_0_BLOCK_BYTES);
  const view = new DataView(out.buffer);
  for (let b = 0; b < values.length / Q8_0_BLOCK; b++) {
    let amax = 0;
    for (let i = 0; i < Q8_0_BLOCK; i++) amax = Math.max(amax, Math.abs(values[b * Q8_0_BLOCK + i]!));
    const d = amax / 127;
    const inverse = d ? 1 / d : 0;
    const at = b * Q8_0_BLOCK_BYTES;
    view.setUint16(at, f32ToF16(d), true);
    for (let i = 0; i < Q8_0_BLOCK; i++) view.setInt8(at + 2 + i, roundHalfAway(values[b * Q8_0_BLOCK + i]! * inverse));
  }
  return out;
}

export function f32Bytes(values: Float32Array): Uint8Array {
  const out = new Uint8Array(values.length * 4);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => view.setFloat32(4 * i, v, true));
  return out;
}

interface HfConfig {
  vocab_size: number;
  hidden_size: number;
  intermediate_size: number;
  num_hidden_layers: number;
  num_attention_heads: number;
  num_key_value_heads: number;
  head_dim: number;
  /** transformers 5 names it num_local_experts; earlier versions num_experts. */
  num_experts?: number;
  num_local_experts?: number;
  num_experts_per_tok: number;
  moe_intermediate_size: number;
  max_position_embeddings: number;
  /** transformers 5 keeps it in rope_parameters; earlier versions at the top level. */
  rope_theta?: number;
  rope_parameters?: { rope_theta?: number; rope_type?: string };
  rms_norm_eps: number;
  norm_topk_prob: boolean;
  tie_word_embeddings: boolean;
}

interface HfTokenizer {
  model: { type: string; vocab: Record<string, number>; merges: (string | [string, string])[] };
  added_tokens: { id: number; content: string; special: boolean }[];
}

/** The `tokenizer.*` metadata of a byte-level BPE tokenizer.json (Qwen2-style pre-tokenizer). */
export function tokenizerMetadata(tokenizer: HfTokenizer): [string, GgufValue, GgufMetadataType][] {
  if (tokenizer.model.type !== "BPE") throw new Error(`tokenizer model ${tokenizer.model.type}: expected BPE`);
  const byId = new Map<number, [string, number]>();
  for (const [text, id] of Object.entries(tokenizer.model.vocab)) byId.set(id, [text, TokenType.normal]);
  for (const t of tokenizer.added_tokens)
    byId.set(t.id, [t.content, t.special ? TokenType.control : TokenType.userDefined]);
  const tokens: string[] = [];
  const types: number[] = [];
  for (let id = 0; id < byId.size; id++) {
    const entry = byId.get(id);
    if (!entry) throw new Error(`tokenizer has no token ${id}: ids must run from 0 without gaps`);
    tokens.push(entry[0]);
    types.push(entry[1]);
  }
  const special = (text: string) => {
    const id = tokenizer.added_tokens.find((t) => t.content === text)?.id;
    if (id === undefined) throw new Error(`tokenizer lacks ${text}`);
    return id;
  };
  const merges = tokenizer.model.merges.map((m) => (typeof m === "string" ? m : m.join(" ")));
  return [
    ["tokenizer.ggml.model", "gpt2", "string"],
    ["tokenizer.ggml.pre", "qwen2", "string"],
    ["tokenizer.ggml.tokens", tokens, "array<string>"],
    ["tokenizer.ggml.token_type", Int32Array.from(types), "array<i32>"],
    ["tokenizer.ggml.merges", merges, "array<string>"],
    ["tokenizer.ggml.bos_token_id", special("<|endoftext|>"), "u32"],
    ["tokenizer.ggml.eos_token_id", special("<|im_end|>"), "u32"],
    ["tokenizer.ggml.padding_token_id", special("<|endoftext|>"), "u32"],
    ["tokenizer.ggml.add_bos_token", false, "bool"],
    ["tokenizer.chat_template", CHAT_TEMPLATE, "string"],
  ];
}

/** Writes the GGUF of the checkpoint in `dir`; returns the tensors written. */
export async function exportCheckpoint(dir: string, out: string, name: string): Promise<GgufTensorSource[]> {
  const config = JSON.parse(readFileSync(join(dir, "config.json"), "utf8")) as HfConfig;
  const tokenizer = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")) as HfTokenizer;
  if (!config.norm_topk_prob)
    throw new Error("llama.cpp's qwen3moe renormalizes the top-k weights: norm_topk_prob must be true");
  if (config.tie_word_embeddings) throw new Error("expected untied embeddings (an output.weight)");

  const hf = new Map<string, LoadedTensor>();
  for (const file of readdirSync(dir)
    .filter((f) => f.endsWith(".safetensors"))
    .sort()) {
    for (const [key, tensor] of readSafetensors(join(dir, file))) hf.set(key, tensor);
  }
  const take = (key: string, shape: number[]): Float32Array => {
    const t = hf.get(key);
    if (!t) throw new Error(`checkpoint lacks ${key}`);
    if (t.shape.join() !== shape.join()) throw new Error(`${key}: shape [${t.shape}], expected [${shape}]`);
    hf.delete(key);
    return t.values;
  };

  const { hidden_size: h, moe_intermediate_size: ffn, head_dim: hd } = config;
  const nExp = config.num_experts ?? config.num_local_experts;
  const ropeTheta = config.rope_parameters?.rope_theta ?? config.rope_theta;
  if (!nExp || !ropeTheta) throw new Error("config.json lacks the expert count or the rope base");
  if ((config.rope_parameters?.rope_type ?? "default") !== "default") throw new Error("rope scaling is not exported");
  const qWidth = config.num_attention_heads * hd;
  const kvWidth = config.num_key_value_heads * hd;
  const tensors: GgufTensorSource[] = [];
  // A Hugging Face Linear weight is [out, in], row-major: the same bytes as GGUF's shape [in, out].
  const matrix = (gguf: string, key: string, rows: number, cols: number) =>
    tensors.push({ name: gguf, type: "Q8_0", shape: [cols, rows], data: quantizeQ8_0(take(key, [rows, cols])) });
  const f32 = (gguf: string, key: string, shape: number[]) =>
    tensors.push({ name: gguf, type: "F32", shape: [...shape].reverse(), data: f32Bytes(take(key, shape)) });
  // The experts of a layer stack outermost, so each expert's slice is contiguous (what offloading moves).
  const experts = (gguf: string, layer: number, proj: string, rows: number, cols: number) => {
    const stacked = new Float32Array(nExp * rows * cols);
    for (let e = 0; e < nExp; e++) {
      stacked.set(take(`model.layers.${layer}.mlp.experts.${e}.${proj}.weight`, [rows, cols]), e * rows * cols);
    }
    tensors.push({ name: gguf, type: "Q8_0", shape: [cols, rows, nExp], data: quantizeQ8_0(stacked) });
  };

  matrix("token_embd.weight", "model.embed_tokens.weight", config.vocab_size, h);
  for (let l = 0; l < config.num_hidden_layers; l++) {
    const hfl = `model.layers.${l}`;
    const blk = `blk.${l}`;
    f32(`${blk}.attn_norm.weight`, `${hfl}.input_layernorm.weight`, [h]);
    matrix(`${blk}.attn_q.weight`, `${hfl}.self_attn.q_proj.weight`, qWidth, h);
    matrix(`${blk}.attn_k.weight`, `${hfl}.self_attn.k_proj.weight`, kvWidth, h);
    matrix(`${blk}.attn_v.weight`, `${hfl}.self_attn.v_proj.weight`, kvWidth, h);
    matrix(`${blk}.attn_output.weight`, `${hfl}.self_attn.o_proj.weight`, h, qWidth);
    f32(`${blk}.attn_q_norm.weight`, `${hfl}.self_attn.q_norm.weight`, [hd]);
    f32(`${blk}.attn_k_norm.weight`, `${hfl}.self_attn.k_norm.weight`, [hd]);
    f32(`${blk}.ffn_norm.weight`, `${hfl}.post_attention_layernorm.weight`, [h]);
    f32(`${blk}.ffn_gate_inp.weight`, `${hfl}.mlp.gate.weight`, [nExp, h]);
    experts(`${blk}.ffn_gate_exps.weight`, l, "gate_proj", ffn, h);
    experts(`${blk}.ffn_up_exps.weight`, l, "up_proj", ffn, h);
    experts(`${blk}.ffn_down_exps.weight`, l, "down_proj", h, ffn);
  }
  f32("output_norm.weight", "model.norm.weight", [h]);
  matrix("output.weight", "lm_head.weight", config.vocab_size, h);
  if (hf.size) throw new Error(`checkpoint tensors left unexported: ${[...hf.keys()].join(", ")}`);

  const a = "qwen3moe";
  const entries: [string, GgufValue, GgufMetadataType][] = [
    ["general.architecture", a, "string"],
    ["general.type", "model", "string"],
    ["general.name", name, "string"],
    ["general.file_type", 7, "u32"], // LLAMA_FTYPE_MOSTLY_Q8_0
    ["general.quantization_version", 2, "u32"],
    [`${a}.context_length`, config.max_position_embeddings, "u32"],
    [`${a}.embedding_length`, h, "u32"],
    [`${a}.block_count`, config.num_hidden_layers, "u32"],
    [`${a}.feed_forward_length`, config.intermediate_size, "u32"],
    [`${a}.attention.head_count`, config.num_attention_heads, "u32"],
    [`${a}.attention.head_count_kv`, config.num_key_value_heads, "u32"],
    [`${a}.attention.key_length`, hd, "u32"],
    [`${a}.attention.value_length`, hd, "u32"],
    [`${a}.rope.freq_base`, ropeTheta, "f32"],
    [`${a}.attention.layer_norm_rms_epsilon`, config.rms_norm_eps, "f32"],
    [`${a}.expert_count`, nExp, "u32"],
    [`${a}.expert_used_count`, config.num_experts_per_tok, "u32"],
    [`${a}.expert_feed_forward_length`, ffn, "u32"],
    ...tokenizerMetadata(tokenizer),
  ];
  const metadata: Record<string, GgufValue> = {};
  const metadataTypes: Record<string, GgufMetadataType> = {};
  for (const [key, value, type] of entries) {
    metadata[key] = value;
    metadataTypes[key] = type;
  }
  await writeGguf(out, { metadata, metadataTypes, tensors });
  return tensors;
}
