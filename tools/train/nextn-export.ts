/**
 * Gives the default model (a qwen3moe GGUF) the next-token-prediction layer that tools/train/mtp.py trained for it,
 * written as the glm4moe file llama.cpp loads with a next-n block (src/models/glm4-moe.cpp): the same trunk, its
 * tensors' bytes copied, under glm4moe's names and keys, plus `blk.<layers>` with `nextn.eh_proj`, `nextn.enorm` and
 * `nextn.hnorm`. glm4moe computes what qwen3moe does once its options say so (softmax gating, the top-k weights
 * renormalized, a routed scale of 1, rope over the whole head), except two things:
 *   - it requires a selection bias (`exp_probs_b`): zeros here, which choose as none does;
 *   - llama.cpp runs a shared expert in every layer: the trunk's are zeros, so they add exactly 0.
 * The next-n layer trains a shared expert of its own.
 *
 * The command line is nextn-export-cli.ts (tools/train/README.md shows how to run it).
 * @module
 */
import { openSync, readSync, closeSync } from "node:fs";
import { readGgufInfo } from "../../src/gguf/read.js";
import type { GgufMetadataType, GgufTensorSource, GgufValue } from "../../src/gguf/types.js";
import { writeGguf } from "../../src/gguf/write.js";
import { f32Bytes, quantizeQ8_0, readSafetensors, type LoadedTensor } from "./export.js";

const FROM = "qwen3moe";
const TO = "glm4moe";
const GATING_SOFTMAX = 1; // llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX

/** The trunk tensors whose glm4moe name differs. */
const RENAMED: Record<string, string> = { ffn_norm: "post_attention_norm" };

/** Matrices of the next-n layer (Q8_0, as the trunk's); the rest are F32 vectors and the router. */
const NEXTN_MATRICES = new Set([
  "attn_q",
  "attn_k",
  "attn_v",
  "attn_output",
  "ffn_gate_exps",
  "ffn_up_exps",
  "ffn_down_exps",
  "ffn_gate_shexp",
  "ffn_up_shexp",
  "ffn_down_shexp",
  "nextn.eh_proj",
]);

/** Writes `out`: the glm4moe form of the qwen3moe `model` with the next-n layer of `nextn` (mtp.py's safetensors). */
export async function exportWithNextn(model: string, nextn: string, out: string): Promise<GgufTensorSource[]> {
  const info = await readGgufInfo(model);
  if (info.summary.architecture !== FROM) throw new Error(`${model} is ${info.summary.architecture}, not ${FROM}`);
  const layers = Number(info.metadata[`${FROM}.block_count`]);
  const embedding = Number(info.metadata[`${FROM}.embedding_length`]);
  const expertWidth = Number(info.metadata[`${FROM}.expert_feed_forward_length`]);
  const experts = Number(info.metadata[`${FROM}.expert_count`]);
  const headDim = Number(info.metadata[`${FROM}.attention.key_length`]);

  const trained = readSafetensors(nextn);
  const prefix = `blk.${layers}.`;
  checkNextn(trained, prefix, embedding, headDim);

  const tensors: GgufTensorSource[] = [];
  const fd = openSync(model, "r");
  try {
    for (const t of info.tensors) {
      const data = new Uint8Array(t.bytes);
      readSync(fd, data, 0, t.bytes, t.offset);
      const [, layer, role] = /^blk\.(\d+)\.([^.]+)\.weight$/.exec(t.name) ?? [];
      const name = role && RENAMED[role] ? `blk.${layer}.${RENAMED[role]}.weight` : t.name;
      tensors.push({ name, type: t.type, shape: t.shape, data });
    }
  } finally {
    closeSync(fd);
  }
  // Every layer, the next-n one too, has a selection bias of zeros; the trunk's layers a shared expert of zeros.
  for (let l = 0; l <= layers; l++) {
    tensors.push({
      name: `blk.${l}.exp_probs_b.bias`,
      type: "F32",
      shape: [experts],
      data: new Uint8Array(4 * experts),
    });
    if (l === layers) break;
    for (const [role, shape] of [
      ["ffn_gate_shexp", [embedding, expertWidth]],
      ["ffn_up_shexp", [embedding, expertWidth]],
      ["ffn_down_shexp", [expertWidth, embedding]],
    ] as const) {
      tensors.push({
        name: `blk.${l}.${role}.weight`,
        type: "Q8_0",
        shape: [...shape],
        data: quantizeQ8_0(new Float32Array(shape[0] * shape[1])),
      });
    }
  }

  for (const [key, tensor] of trained) {
    if (!key.startsWith(prefix) || !key.endsWith(".weight")) throw new Error(`${nextn}: unexpected tensor ${key}`);
    const role = key.slice(prefix.length, -".weight".length);
    const name = `${prefix}${RENAMED[role] ?? role}.weight`;
    const shape = [...tensor.shape].reverse();
    if (NEXTN_MATRICES.has(role)) tensors.push({ name, type: "Q8_0", shape, data: quantizeQ8_0(tensor.values) });
    else tensors.push({ name, type: "F32", shape, data: f32Bytes(tensor.values) });
  }

  const metadata: Record<string, GgufValue> = {};
  const metadataTypes: Record<string, GgufMetadataType> = {};
  for (const [key, value] of Object.entries(info.metadata)) {
    const renamed = key.startsWith(`${FROM}.`) ? `${TO}.${key.slice(FROM.length + 1)}` : key;
    metadata[renamed] = key === "general.architecture" ? TO : value;
    const type = info.metadataTypes[key];
    if (type) metadataTypes[renamed] = type;
  }
  const added: [string, GgufValue, GgufMetadataType][] = [
    [`${TO}.block_count`, layers + 1, "u32"],
    [`${TO}.nextn_predict_layers`, 1, "u32"],
    [`${TO}.leading_dense_block_count`, 0, "u32"],
    [`${TO}.expert_shared_count`, 1, "u32"],
    [`${TO}.expert_gating_func`, GATING_SOFTMAX, "u32"],
    [`${TO}.expert_weights_norm`, true, "bool"],
    [`${TO}.expert_weights_scale`, 1, "f32"],
    [`${TO}.rope.dimension_count`, headDim, "u32"],
  ];
  for (const [key, value, type] of added) {
    metadata[key] = value;
    metadataTypes[key] = type;
  }
  await writeGguf(out, { metadata, metadataTypes, tensors });
  return tensors;
}

/** The next-n block's own tensors must all be there, at the trunk's widths. */
function checkNextn(trained: Map<string, LoadedTensor>, prefix: string, embedding: number, headDim: number): void {
  const expect: Record<string, number[]> = {
    "nextn.eh_proj": [embedding, 2 * embedding],
    "nextn.enorm": [embedding],
    "nextn.hnorm": [embedding],
    attn_norm: [embedding],
    ffn_norm: [embedding],
    attn_q_norm: [headDim],
    attn_k_norm: [headDim],
  };
  for (const [role, shape] of Object.entries(expect)) {
    const t = trained.get(`${prefix}${role}.weight`);
    if (!t || t.shape.join() !== shape.join()) throw new Error(`the next-n layer lacks ${role} of shape [${shape}]`);
  }
}
