/**
 * writeSyntheticModel(): GGUF models of real shapes with random but valid weights, for tests
 * and benchmarks. See tools/synth/README.md.
 * @module
 */
import { BloomeryError } from "../../src/errors.js";
import type { GgufMetadataType, GgufTensorSource, GgufValue } from "../../src/gguf/types.js";
import { writeGguf } from "../../src/gguf/write.js";
import { ggmlType } from "../../src/system.js";
import { FILLABLE_TYPES, tensorFiller, type FloatInit } from "./blocks.js";
import { getPreset, type SynthPreset, type WeightRole } from "./presets.js";
import { streamKey, wordAt } from "./random.js";
import { buildVocab, vocabMetadata, type SyntheticVocab } from "./vocab.js";

/** Options of writeSyntheticModel(). */
export interface SyntheticModelOptions {
  /** A preset name (see PRESETS). */
  preset: string;
  /** Type of every weight matrix of a tiny preset (default Q8_0); presets with a fixed mix refuse it. */
  weightType?: string;
  /** Seed of the random weights (default 1): the same seed writes the same bytes. */
  seed?: number;
  /** Write only the header: a sparse file of full size whose tensor data is a hole. */
  headerOnly?: boolean;
  /** Called as tensor data is produced, with the bytes so far and in all. */
  onProgress?: (bytesDone: number, bytesTotal: number) => void;
}

/** One tensor of a synthetic model. */
export interface SyntheticTensor {
  name: string;
  type: string;
  /** GGUF order: the row length first. */
  shape: number[];
  bytes: number;
  /** How its values are drawn when its type is F32, F16 or BF16. */
  init: FloatInit;
}

/** Everything a synthetic model is made of, before any byte is written. */
export interface SyntheticModelPlan {
  preset: SynthPreset;
  /** The weight type of a tiny preset, or "mix" for a preset with a fixed mix. */
  weightType: string;
  seed: number;
  vocab: SyntheticVocab;
  metadata: Record<string, GgufValue>;
  metadataTypes: Record<string, GgufMetadataType>;
  tensors: SyntheticTensor[];
  /** Bytes of all tensor data (without alignment padding). */
  tensorBytes: number;
}

/** The default weight type of tiny presets. */
export const DEFAULT_WEIGHT_TYPE = "Q8_0";

/** `general.file_type` (llama_ftype) of a model whose weights are all of one type. */
const FILE_TYPE: Record<string, number> = {
  F32: 0,
  F16: 1,
  Q4_0: 2,
  Q4_1: 3,
  Q8_0: 7,
  Q5_0: 8,
  Q5_1: 9,
  Q2_K: 10,
  Q3_K: 11,
  Q4_K: 14,
  Q5_K: 16,
  Q6_K: 18,
  IQ2_XXS: 19,
  IQ2_XS: 20,
  IQ3_XXS: 23,
  IQ1_S: 24,
  IQ4_NL: 25,
  IQ3_S: 26,
  IQ2_S: 28,
  IQ4_XS: 30,
  IQ1_M: 31,
  BF16: 32,
  TQ1_0: 36,
  TQ2_0: 37,
  MXFP4: 38,
};

const WEIGHT_INIT: FloatInit = { center: 0, amplitude: 0.05 };
const NORM_INIT: FloatInit = { center: 1, amplitude: 0.02 };
// As wide as the projections' outputs (about ±0.5 for unit inputs), so that a bias left out shows in the logits.
const BIAS_INIT: FloatInit = { center: 0, amplitude: 0.5 };
// gpt-oss's sinks: logits about as large as the scores, so that each takes a visible share.
const SINK_INIT: FloatInit = { center: 0.5, amplitude: 1 };
// gpt-oss's expert gate and up biases: wide enough that the clamped SwiGLU's limit (7) clamps
// about a fifth of the values, so that a clamp left out shows in the logits.
const EXPERT_BIAS_INIT: FloatInit = { center: 0, amplitude: 9 };
// Gated DeltaNet's A (-exp(A_log)): negative, so that every token's decay exp(g) is below one.
const SSM_A_INIT: FloatInit = { center: -1, amplitude: 0.5 };

/**
 * Router row scales of one layer: expert e gets (1 + rank(e))^-1/2, the ranks a seeded
 * permutation per layer, so each layer has its own hot experts. For hidden states of no
 * preferred direction, wider rows win the top-k more often: at 128 experts, 8 used, the
 * hottest quarter of the experts takes about 70 % of the routings and every expert is used.
 */
export function routerScales(experts: number, seed: number, layer: number): Float32Array {
  const rank = Array.from({ length: experts }, (_, i) => i);
  const key = streamKey(seed, 0x726f7574, layer);
  for (let i = experts - 1; i > 0; i--) {
    const j = wordAt(key, i) % (i + 1);
    [rank[i], rank[j]] = [rank[j]!, rank[i]!];
  }
  return Float32Array.from(rank, (r) => 1 / Math.sqrt(1 + r));
}

function tensorBytes(type: string, shape: number[]): number {
  const t = ggmlType(type);
  const rowLength = shape[0]!;
  if (rowLength % t.blockElements !== 0) {
    throw new BloomeryError("INVALID_ARGUMENT", `row length ${rowLength} is not a whole number of ${type} blocks`, {
      type,
      shape,
    });
  }
  return (shape.reduce((a, b) => a * b, 1) / t.blockElements) * t.blockBytes;
}

function architectureMetadata(p: SynthPreset): [string, GgufValue, GgufMetadataType][] {
  const a = p.architecture;
  const entries: [string, GgufValue, GgufMetadataType][] = [
    [`${a}.context_length`, p.contextLength, "u32"],
    [`${a}.embedding_length`, p.embedding, "u32"],
    [`${a}.block_count`, p.layers + (p.nextnLayers ?? 0), "u32"],
    [`${a}.feed_forward_length`, p.feedForward, "u32"],
    [`${a}.attention.head_count`, p.heads, "u32"],
    [`${a}.attention.head_count_kv`, p.headsKv, "u32"],
    [`${a}.rope.freq_base`, p.ropeFreqBase, "f32"],
    [`${a}.attention.layer_norm_rms_epsilon`, p.rmsEpsilon, "f32"],
  ];
  if (p.mla) {
    // llama.cpp's MLA files: the cache's key row is the latent and the rotated key, its value row the latent.
    const m = p.mla;
    entries.push(
      [`${a}.attention.key_length`, m.kvLoraRank + m.ropeDim, "u32"],
      [`${a}.attention.value_length`, m.kvLoraRank, "u32"],
      [`${a}.attention.key_length_mla`, m.nopeDim + m.ropeDim, "u32"],
      [`${a}.attention.value_length_mla`, m.valueDim, "u32"],
      [`${a}.attention.kv_lora_rank`, m.kvLoraRank, "u32"],
      [`${a}.rope.dimension_count`, m.ropeDim, "u32"],
    );
    if (m.qLoraRank > 0) entries.push([`${a}.attention.q_lora_rank`, m.qLoraRank, "u32"]);
  } else if (a === "llama") {
    entries.push([`${a}.rope.dimension_count`, p.headDim, "u32"]);
  } else if (a !== "qwen2") {
    // Qwen3's heads are not embedding / heads wide: llama.cpp reads their width from these keys.
    // Qwen2's always are (llama.cpp sizes its attn_output by the embedding), and its files omit them.
    entries.push(
      [`${a}.attention.key_length`, p.headDim, "u32"],
      [`${a}.attention.value_length`, p.mimo?.valueDim ?? p.headDim, "u32"],
    );
    if (p.ropeDims !== undefined) entries.push([`${a}.rope.dimension_count`, p.ropeDims, "u32"]);
  }
  if (p.indexer) {
    entries.push(
      [`${a}.attention.indexer.head_count`, p.indexer.heads, "u32"],
      [`${a}.attention.indexer.key_length`, p.indexer.headDim, "u32"],
      [`${a}.attention.indexer.top_k`, p.indexer.topK, "u32"],
    );
    if (p.indexer.types) {
      entries.push([`${a}.attention.indexer.types`, Int32Array.from(p.indexer.types), "array<i32>"]);
    }
  }
  if (p.yarn) {
    entries.push(
      [`${a}.rope.scaling.type`, "yarn", "string"],
      [`${a}.rope.scaling.factor`, p.yarn.factor, "f32"],
      [`${a}.rope.scaling.original_context_length`, p.yarn.originalContext, "u32"],
    );
    if (p.yarn.logMultiplier !== undefined) {
      entries.push([`${a}.rope.scaling.yarn_log_multiplier`, p.yarn.logMultiplier, "f32"]);
    }
  }
  if (p.gptOss) {
    entries.push([`${a}.attention.sliding_window`, p.gptOss.slidingWindow, "u32"]);
    if (p.gptOss.pattern !== undefined)
      entries.push([`${a}.attention.sliding_window_pattern`, p.gptOss.pattern, "u32"]);
  }
  if (p.mimo) {
    const m = p.mimo;
    // As llama.cpp reads them: KV heads for every layer of the file, windows for the layers a pass runs.
    entries[entries.findIndex(([key]) => key === `${a}.attention.head_count_kv`)] = [
      `${a}.attention.head_count_kv`,
      Int32Array.from(kvHeadsPerLayer(p)),
      "array<i32>",
    ];
    entries.push(
      [`${a}.attention.sliding_window`, m.slidingWindow, "u32"],
      [`${a}.attention.sliding_window_pattern`, Int32Array.from(m.windowed, (w) => (w ? 1 : 0)), "array<i32>"],
      [`${a}.rope.freq_base_swa`, m.ropeFreqBaseWindowed, "f32"],
      [`${a}.attention.value_scale`, m.valueScale, "f32"],
    );
  }
  if (p.experts > 0) {
    entries.push(
      [`${a}.expert_count`, p.experts, "u32"],
      [`${a}.expert_used_count`, p.expertsUsed, "u32"],
      [`${a}.expert_feed_forward_length`, p.expertFeedForward, "u32"],
    );
  }
  if (p.leadingDense !== undefined) entries.push([`${a}.leading_dense_block_count`, p.leadingDense, "u32"]);
  if (p.sharedExperts !== undefined) entries.push([`${a}.expert_shared_count`, p.sharedExperts, "u32"]);
  if (p.router) {
    entries.push(
      [`${a}.expert_gating_func`, p.router.gating, "u32"],
      [`${a}.expert_weights_norm`, p.router.normalize, "bool"],
      [`${a}.expert_weights_scale`, p.router.scale, "f32"],
      [`${a}.expert_group_count`, p.router.groups, "u32"],
      [`${a}.expert_group_used_count`, p.router.groupsUsed, "u32"],
    );
  }
  if (p.nextnLayers !== undefined) entries.push([`${a}.nextn_predict_layers`, p.nextnLayers, "u32"]);
  if (p.deltaNet) {
    const d = p.deltaNet;
    entries.push(
      [`${a}.ssm.conv_kernel`, d.convKernel, "u32"],
      [`${a}.ssm.state_size`, d.headDim, "u32"],
      [`${a}.ssm.group_count`, d.kHeads, "u32"],
      [`${a}.ssm.time_step_rank`, d.vHeads, "u32"],
      [`${a}.ssm.inner_size`, d.vHeads * d.headDim, "u32"],
      [`${a}.full_attention_interval`, d.interval, "u32"],
    );
  }
  if (p.deepseek4) {
    const v = p.deepseek4;
    const perLayer = (value: number) => Float32Array.from({ length: p.layers + (p.nextnLayers ?? 0) }, () => value);
    entries.push(
      [`${a}.attention.q_lora_rank`, v.qLoraRank, "u32"],
      [`${a}.attention.sliding_window`, v.slidingWindow, "u32"],
      [`${a}.attention.compress_ratios`, Int32Array.from(v.compressRatios), "array<i32>"],
      [`${a}.attention.compress_rope_freq_base`, v.compressRopeFreqBase, "f32"],
      [`${a}.attention.output_group_count`, v.outputGroups, "u32"],
      [`${a}.attention.output_lora_rank`, v.outputRank, "u32"],
      [`${a}.hyper_connection.count`, v.hyperConnections, "u32"],
      [`${a}.hyper_connection.sinkhorn_iterations`, v.sinkhornIterations, "u32"],
      [`${a}.hyper_connection.epsilon`, v.hyperEpsilon, "f32"],
      // A count key is positive where present: a model without hash-routed layers leaves it out.
      ...(v.hashLayers > 0 ? ([[`${a}.hash_layer_count`, v.hashLayers, "u32"]] as typeof entries) : []),
      [`${a}.swiglu_clamp_exp`, perLayer(v.swigluLimit), "array<f32>"],
      [`${a}.swiglu_clamp_shexp`, perLayer(v.swigluLimit), "array<f32>"],
    );
  }
  if (p.ropeSections) entries.push([`${a}.rope.dimension_sections`, Int32Array.from(p.ropeSections), "array<i32>"]);
  if (p.sharedFeedForward !== undefined) {
    entries.push([`${a}.expert_shared_feed_forward_length`, p.sharedFeedForward, "u32"]);
  }
  if (p.pooled) {
    entries.push(
      [`${a}.pooling_type`, p.pooled.pooling, "u32"],
      ["tokenizer.ggml.add_eos_token", p.pooled.addEos, "bool"],
    );
    if (p.pooled.rankLabels) entries.push([`${a}.classifier.output_labels`, p.pooled.rankLabels, "array<string>"]);
    if (p.pooled.rankTemplate) entries.push(["tokenizer.chat_template.rerank", p.pooled.rankTemplate, "string"]);
  }
  return entries;
}

/** mimo2's layers' KV heads: the windowed ones' (next-token-prediction layers among them) and the full ones'. */
function kvHeadsPerLayer(p: SynthPreset): number[] {
  const m = p.mimo!;
  return Array.from({ length: p.layers + (p.nextnLayers ?? 0) }, (_, l) =>
    l >= p.layers || m.windowed[l] ? m.headsKvWindowed : p.headsKv,
  );
}

/**
 * The type a quantizer gives a matrix whose rows a type's blocks do not divide: llama.cpp's
 * fallback (llama-quant.cpp), as in real files of those shapes (MLA's per-head matrices).
 */
function fitType(type: string, rowLength: number): string {
  if (rowLength % ggmlType(type).blockElements === 0) return type;
  const fallback: Record<string, string> = {
    IQ1_S: "IQ4_NL",
    IQ1_M: "IQ4_NL",
    IQ2_XXS: "IQ4_NL",
    IQ2_XS: "IQ4_NL",
    IQ2_S: "IQ4_NL",
    IQ3_XXS: "IQ4_NL",
    IQ3_S: "IQ4_NL",
    IQ4_XS: "IQ4_NL",
    TQ1_0: "Q4_0",
    TQ2_0: "Q4_0",
    Q2_K: "Q4_0",
    Q3_K: "Q4_0",
    Q4_K: "Q5_0",
    Q5_K: "Q5_1",
    Q6_K: "Q8_0",
  };
  const fitted = fallback[type] ?? type;
  return rowLength % ggmlType(fitted).blockElements === 0 ? fitted : "F16";
}

/** The tensors of a preset, in file order (llama.cpp names; shapes row length first). */
function planTensors(
  p: SynthPreset,
  nVocab: number,
  typeOf: (role: WeightRole, layer?: number) => string,
  seed: number,
): SyntheticTensor[] {
  const tensors: SyntheticTensor[] = [];
  const add = (name: string, type: string, shape: number[], init: FloatInit) =>
    tensors.push({ name, type, shape, bytes: tensorBytes(type, shape), init });
  const weight = (name: string, role: WeightRole, shape: number[], layer?: number) =>
    add(name, fitType(typeOf(role, layer), shape[0]!), shape, WEIGHT_INIT);
  const norm = (name: string, length: number) => add(name, "F32", [length], NORM_INIT);

  const qWidth = p.heads * p.headDim;
  weight("token_embd.weight", "token_embd", [p.embedding, nVocab]);
  for (let l = 0; l < p.layers + (p.nextnLayers ?? 0); l++) {
    const blk = `blk.${l}`;
    if (p.deepseek4) {
      deepseek4Layer(p, l, nVocab, seed, add, weight, norm);
      continue;
    }
    norm(`${blk}.attn_norm.weight`, p.embedding);
    const d = p.deltaNet;
    if (d && l < p.layers && (l + 1) % d.interval !== 0) {
      const keyWidth = d.kHeads * d.headDim;
      const valueWidth = d.vHeads * d.headDim;
      const channels = 2 * keyWidth + valueWidth;
      weight(`${blk}.attn_qkv.weight`, "attn_qkv", [p.embedding, channels], l);
      weight(`${blk}.attn_gate.weight`, "attn_gate", [p.embedding, valueWidth], l);
      add(`${blk}.ssm_conv1d.weight`, "F32", [d.convKernel, channels], BIAS_INIT);
      add(`${blk}.ssm_dt.bias`, "F32", [d.vHeads], BIAS_INIT);
      add(`${blk}.ssm_a`, "F32", [d.vHeads], SSM_A_INIT);
      if (p.architecture === "qwen3next") {
        weight(`${blk}.ssm_ba.weight`, "ssm_ba", [p.embedding, 2 * d.vHeads], l);
      } else {
        weight(`${blk}.ssm_beta.weight`, "ssm_ba", [p.embedding, d.vHeads], l);
        weight(`${blk}.ssm_alpha.weight`, "ssm_ba", [p.embedding, d.vHeads], l);
      }
      norm(`${blk}.ssm_norm.weight`, d.headDim);
      weight(`${blk}.ssm_out.weight`, "ssm_out", [valueWidth, p.embedding], l);
    } else if (d) {
      // Gated attention: each head of attn_q is [query, gate].
      const kvWidth = p.headsKv * p.headDim;
      weight(`${blk}.attn_q.weight`, "attn_q", [p.embedding, 2 * qWidth], l);
      weight(`${blk}.attn_k.weight`, "attn_k", [p.embedding, kvWidth], l);
      weight(`${blk}.attn_v.weight`, "attn_v", [p.embedding, kvWidth], l);
      weight(`${blk}.attn_output.weight`, "attn_output", [qWidth, p.embedding], l);
      norm(`${blk}.attn_q_norm.weight`, p.headDim);
      norm(`${blk}.attn_k_norm.weight`, p.headDim);
    } else if (p.mla) {
      const m = p.mla;
      const headWidth = m.nopeDim + m.ropeDim;
      if (m.qLoraRank > 0) {
        weight(`${blk}.attn_q_a.weight`, "attn_q_a", [p.embedding, m.qLoraRank], l);
        norm(`${blk}.attn_q_a_norm.weight`, m.qLoraRank);
        weight(`${blk}.attn_q_b.weight`, "attn_q_b", [m.qLoraRank, p.heads * headWidth], l);
      } else {
        weight(`${blk}.attn_q.weight`, "attn_q", [p.embedding, p.heads * headWidth], l);
      }
      weight(`${blk}.attn_kv_a_mqa.weight`, "attn_kv_a_mqa", [p.embedding, m.kvLoraRank + m.ropeDim], l);
      norm(`${blk}.attn_kv_a_norm.weight`, m.kvLoraRank);
      weight(`${blk}.attn_k_b.weight`, "attn_k_b", [m.nopeDim, m.kvLoraRank, p.heads], l);
      weight(`${blk}.attn_v_b.weight`, "attn_v_b", [m.kvLoraRank, m.valueDim, p.heads], l);
      weight(`${blk}.attn_output.weight`, "attn_output", [p.heads * m.valueDim, p.embedding], l);
      const x = p.indexer;
      // deepseek32's layers all have an indexer, MTP layers too; glm-dsa's where its types say.
      if (x && (l < p.layers ? (x.types?.[l] ?? 1) === 1 : !x.types)) {
        norm(`${blk}.indexer.k_norm.weight`, x.headDim);
        add(`${blk}.indexer.k_norm.bias`, "F32", [x.headDim], BIAS_INIT);
        weight(`${blk}.indexer.proj.weight`, "indexer", [p.embedding, x.heads], l);
        weight(`${blk}.indexer.attn_k.weight`, "indexer", [p.embedding, x.headDim], l);
        weight(`${blk}.indexer.attn_q_b.weight`, "indexer", [m.qLoraRank, x.heads * x.headDim], l);
      }
    } else {
      const kvHeads = p.mimo ? kvHeadsPerLayer(p)[l]! : p.headsKv;
      const kWidth = kvHeads * p.headDim;
      const vWidth = kvHeads * (p.mimo?.valueDim ?? p.headDim);
      const outWidth = p.heads * (p.mimo?.valueDim ?? p.headDim);
      if (p.mimo && l >= p.layers) {
        // MiMo's next-token-prediction layers have one fused Q/K/V matrix.
        weight(`${blk}.attn_qkv.weight`, "attn_qkv", [p.embedding, qWidth + kWidth + vWidth], l);
      } else {
        weight(`${blk}.attn_q.weight`, "attn_q", [p.embedding, qWidth], l);
        weight(`${blk}.attn_k.weight`, "attn_k", [p.embedding, kWidth], l);
        weight(`${blk}.attn_v.weight`, "attn_v", [p.embedding, vWidth], l);
      }
      if (p.architecture === "qwen2" || p.qkvBias) {
        add(`${blk}.attn_q.bias`, "F32", [qWidth], BIAS_INIT);
        add(`${blk}.attn_k.bias`, "F32", [kWidth], BIAS_INIT);
        add(`${blk}.attn_v.bias`, "F32", [vWidth], BIAS_INIT);
      }
      weight(`${blk}.attn_output.weight`, "attn_output", [outWidth, p.embedding], l);
      if (p.gptOss) {
        add(`${blk}.attn_output.bias`, "F32", [p.embedding], WEIGHT_INIT);
        add(`${blk}.attn_sinks.weight`, "F32", [p.heads], SINK_INIT);
      }
      // MiMo's windowed layers (the next-token-prediction ones among them) have sinks, its full ones none.
      if (p.mimo && (l >= p.layers || p.mimo.windowed[l])) add(`${blk}.attn_sinks.weight`, "F32", [p.heads], SINK_INIT);
      if (p.architecture === "qwen3" || p.architecture === "qwen3moe") {
        norm(`${blk}.attn_q_norm.weight`, p.headDim);
        norm(`${blk}.attn_k_norm.weight`, p.headDim);
      }
      // MiniMax-M2 norms each row's whole query and key projections, all heads at once.
      if (p.architecture === "minimax-m2") {
        norm(`${blk}.attn_q_norm.weight`, qWidth);
        norm(`${blk}.attn_k_norm.weight`, kWidth);
      }
    }
    // GLM and gpt-oss name the norm before the FFN after the attention it follows.
    const postAttention = p.architecture === "glm4moe" || p.architecture === "gpt-oss" || d !== undefined;
    norm(`${blk}.${postAttention ? "post_attention_norm" : "ffn_norm"}.weight`, p.embedding);
    // MiMo's next-token-prediction layers have a dense FFN.
    const nextnDense = p.mimo !== undefined && l >= p.layers;
    if (p.experts > 0 && l >= (p.leadingDense ?? 0) && !nextnDense) {
      const rowScale = routerScales(p.experts, seed, l);
      add(`${blk}.ffn_gate_inp.weight`, "F32", [p.embedding, p.experts], {
        ...WEIGHT_INIT,
        rowLength: p.embedding,
        rowScale,
      });
      if (p.router?.selectionBias) add(`${blk}.exp_probs_b.bias`, "F32", [p.experts], WEIGHT_INIT);
      weight(`${blk}.ffn_gate_exps.weight`, "ffn_gate_exps", [p.embedding, p.expertFeedForward, p.experts], l);
      weight(`${blk}.ffn_up_exps.weight`, "ffn_up_exps", [p.embedding, p.expertFeedForward, p.experts], l);
      weight(`${blk}.ffn_down_exps.weight`, "ffn_down_exps", [p.expertFeedForward, p.embedding, p.experts], l);
      if (p.gptOss) {
        add(`${blk}.ffn_gate_inp.bias`, "F32", [p.experts], WEIGHT_INIT);
        add(`${blk}.ffn_gate_exps.bias`, "F32", [p.expertFeedForward, p.experts], EXPERT_BIAS_INIT);
        add(`${blk}.ffn_up_exps.bias`, "F32", [p.expertFeedForward, p.experts], EXPERT_BIAS_INIT);
        add(`${blk}.ffn_down_exps.bias`, "F32", [p.embedding, p.experts], WEIGHT_INIT);
      }
      if (p.sharedExperts || p.sharedFeedForward) {
        const shared = p.sharedFeedForward ?? p.sharedExperts! * p.expertFeedForward;
        weight(`${blk}.ffn_gate_shexp.weight`, "ffn_gate_shexp", [p.embedding, shared], l);
        weight(`${blk}.ffn_up_shexp.weight`, "ffn_up_shexp", [p.embedding, shared], l);
        weight(`${blk}.ffn_down_shexp.weight`, "ffn_down_shexp", [shared, p.embedding], l);
        if (p.sharedFeedForward) add(`${blk}.ffn_gate_inp_shexp.weight`, "F32", [p.embedding], WEIGHT_INIT);
      }
    } else {
      weight(`${blk}.ffn_gate.weight`, "ffn_gate", [p.embedding, p.feedForward], l);
      weight(`${blk}.ffn_up.weight`, "ffn_up", [p.embedding, p.feedForward], l);
      weight(`${blk}.ffn_down.weight`, "ffn_down", [p.feedForward, p.embedding], l);
    }
    if (l >= p.layers) {
      weight(`${blk}.nextn.eh_proj.weight`, "nextn_eh_proj", [2 * p.embedding, p.embedding], l);
      norm(`${blk}.nextn.enorm.weight`, p.embedding);
      norm(`${blk}.nextn.hnorm.weight`, p.embedding);
      norm(`${blk}.nextn.shared_head_norm.weight`, p.embedding);
    }
  }
  if (p.deepseek4) {
    const hc = p.deepseek4.hyperConnections;
    add("output_hc_fn.weight", "F16", [hc * p.embedding, hc], WEIGHT_INIT);
    add("output_hc_base.weight", "F32", [hc], BIAS_INIT);
    add("output_hc_scale.weight", "F32", [1], NORM_INIT);
  }
  norm("output_norm.weight", p.embedding);
  if (!p.tiedOutput) weight("output.weight", "output", [p.embedding, nVocab]);
  const labels = p.pooled?.rankLabels;
  if (labels) weight("cls.output.weight", "cls_output", [p.embedding, labels.length]);
  return tensors;
}

/** Adds layer `l` of a deepseek4 preset (llama.cpp's names and shapes, src/models/deepseek4.cpp). */
function deepseek4Layer(
  p: SynthPreset,
  l: number,
  nVocab: number,
  seed: number,
  add: (name: string, type: string, shape: number[], init: FloatInit) => void,
  weight: (name: string, role: WeightRole, shape: number[], layer?: number) => void,
  norm: (name: string, length: number) => void,
): void {
  const v = p.deepseek4!;
  const x = p.indexer!;
  const blk = `blk.${l}`;
  const head = p.headDim;
  const hc = v.hyperConnections;
  const mixes = (2 + hc) * hc;
  norm(`${blk}.attn_norm.weight`, p.embedding);
  add(`${blk}.attn_sinks.weight`, "F32", [p.heads], SINK_INIT);
  weight(`${blk}.attn_q_a.weight`, "attn_q_a", [p.embedding, v.qLoraRank], l);
  norm(`${blk}.attn_q_a_norm.weight`, v.qLoraRank);
  weight(`${blk}.attn_q_b.weight`, "attn_q_b", [v.qLoraRank, p.heads * head], l);
  weight(`${blk}.attn_kv.weight`, "attn_kv_a_mqa", [p.embedding, head], l);
  norm(`${blk}.attn_kv_a_norm.weight`, head);
  weight(
    `${blk}.attn_output_a.weight`,
    "attn_output",
    [(p.heads * head) / v.outputGroups, v.outputRank * v.outputGroups],
    l,
  );
  weight(`${blk}.attn_output_b.weight`, "attn_output", [v.outputGroups * v.outputRank, p.embedding], l);
  // The hyper-connection matrices and the compressors' position biases are F16, as in the released files.
  for (const part of ["attn", "ffn"]) {
    add(`${blk}.hc_${part}_fn.weight`, "F16", [hc * p.embedding, mixes], WEIGHT_INIT);
    add(`${blk}.hc_${part}_base.weight`, "F32", [mixes], BIAS_INIT);
    add(`${blk}.hc_${part}_scale.weight`, "F32", [3], NORM_INIT);
  }
  const ratio = v.compressRatios[l]!;
  if (ratio !== 0) {
    // Blocks of 4 overlap their predecessor: twice the width, the first half for the next block.
    const width = (ratio === 4 ? 2 : 1) * head;
    weight(`${blk}.attn_compressor_kv.weight`, "attn_kv_a_mqa", [p.embedding, width], l);
    weight(`${blk}.attn_compressor_gate.weight`, "attn_kv_a_mqa", [p.embedding, width], l);
    add(`${blk}.attn_compressor_ape.weight`, "F16", [width, ratio], BIAS_INIT);
    norm(`${blk}.attn_compressor_norm.weight`, head);
  }
  if (ratio === 4) {
    weight(`${blk}.indexer.proj.weight`, "indexer", [p.embedding, x.heads], l);
    weight(`${blk}.indexer.attn_q_b.weight`, "indexer", [v.qLoraRank, x.heads * x.headDim], l);
    weight(`${blk}.indexer_compressor_kv.weight`, "indexer", [p.embedding, 2 * x.headDim], l);
    weight(`${blk}.indexer_compressor_gate.weight`, "indexer", [p.embedding, 2 * x.headDim], l);
    add(`${blk}.indexer_compressor_ape.weight`, "F16", [2 * x.headDim, ratio], BIAS_INIT);
    norm(`${blk}.indexer_compressor_norm.weight`, x.headDim);
  }
  add(`${blk}.ffn_gate_inp.weight`, "F32", [p.embedding, p.experts], {
    ...WEIGHT_INIT,
    rowLength: p.embedding,
    rowScale: routerScales(p.experts, seed, l),
  });
  if (l < v.hashLayers) {
    add(`${blk}.ffn_gate_tid2eid.weight`, "I32", [p.expertsUsed, nVocab], {
      center: 0,
      amplitude: 0,
      rowLength: p.expertsUsed,
      table: p.experts,
    });
  } else {
    add(`${blk}.exp_probs_b.bias`, "F32", [p.experts], WEIGHT_INIT);
  }
  norm(`${blk}.ffn_norm.weight`, p.embedding);
  weight(`${blk}.ffn_gate_exps.weight`, "ffn_gate_exps", [p.embedding, p.expertFeedForward, p.experts], l);
  weight(`${blk}.ffn_up_exps.weight`, "ffn_up_exps", [p.embedding, p.expertFeedForward, p.experts], l);
  weight(`${blk}.ffn_down_exps.weight`, "ffn_down_exps", [p.expertFeedForward, p.embedding, p.experts], l);
  const shared = p.sharedExperts! * p.expertFeedForward;
  weight(`${blk}.ffn_gate_shexp.weight`, "ffn_gate_shexp", [p.embedding, shared], l);
  weight(`${blk}.ffn_up_shexp.weight`, "ffn_up_shexp", [p.embedding, shared], l);
  weight(`${blk}.ffn_down_shexp.weight`, "ffn_down_shexp", [shared, p.embedding], l);
  if (l >= p.layers) {
    weight(`${blk}.nextn.eh_proj.weight`, "nextn_eh_proj", [2 * p.embedding, p.embedding], l);
    norm(`${blk}.nextn.enorm.weight`, p.embedding);
    norm(`${blk}.nextn.hnorm.weight`, p.embedding);
    norm(`${blk}.nextn.shared_head_norm.weight`, p.embedding);
  }
}

/** Plans a synthetic model: its vocabulary, metadata and tensors, without writing anything. */
export function planSyntheticModel(
  options: Omit<SyntheticModelOptions, "headerOnly" | "onProgress">,
): SyntheticModelPlan {
  const preset = getPreset(options.preset);
  const seed = options.seed ?? 1;
  if (!Number.isSafeInteger(seed)) throw new BloomeryError("INVALID_ARGUMENT", `seed must be an integer`, { seed });
  if (preset.mix && options.weightType !== undefined) {
    throw new BloomeryError(
      "INVALID_ARGUMENT",
      `preset ${preset.name} has a fixed tensor-type mix; weightType applies to tiny presets only`,
      { preset: preset.name, weightType: options.weightType },
    );
  }
  const weightType = preset.mix ? "mix" : (options.weightType ?? DEFAULT_WEIGHT_TYPE);
  if (!preset.mix && !(FILLABLE_TYPES as readonly string[]).includes(weightType)) {
    throw new BloomeryError(
      "UNSUPPORTED_QUANT",
      `weightType ${weightType} is not one of ${FILLABLE_TYPES.join(", ")}`,
      {
        weightType,
      },
    );
  }
  const typeOf = (role: WeightRole, layer?: number): string => {
    if (!preset.mix) return weightType;
    const type = (layer === undefined ? undefined : preset.layerMix?.[layer]?.[role]) ?? preset.mix[role];
    if (!type) throw new BloomeryError("INTERNAL", `preset ${preset.name} has no type for ${role}`);
    return type;
  };

  const vocab = buildVocab(
    preset.vocab,
    preset.vocabSize === undefined ? {} : { size: preset.vocabSize, padWithText: preset.vocabPadText === true },
  );
  const tensors = planTensors(preset, vocab.tokens.length, typeOf, seed);

  const fileType = preset.mix ? preset.fileType : FILE_TYPE[weightType];
  const entries: [string, GgufValue, GgufMetadataType][] = [
    ["general.architecture", preset.architecture, "string"],
    ["general.type", "model", "string"],
    ["general.name", `bloomery synthetic ${preset.name}`, "string"],
    ...(fileType === undefined
      ? []
      : [["general.file_type", fileType, "u32"] as [string, GgufValue, GgufMetadataType]]),
    ["general.quantization_version", 2, "u32"],
    ...architectureMetadata(preset),
  ];
  const metadata: Record<string, GgufValue> = {};
  const metadataTypes: Record<string, GgufMetadataType> = {};
  for (const [key, value, type] of entries) {
    metadata[key] = value;
    metadataTypes[key] = type;
  }
  const tokenizer = vocabMetadata(vocab);
  Object.assign(metadata, tokenizer.metadata);
  Object.assign(metadataTypes, tokenizer.types);

  const totalBytes = tensors.reduce((sum, t) => sum + t.bytes, 0);
  return { preset, weightType, seed, vocab, metadata, metadataTypes, tensors, tensorBytes: totalBytes };
}

/**
 * Writes a synthetic model of a preset to `path` (see tools/synth/README.md): llama.cpp's
 * tensor names and shapes, tokenizer metadata, and random but valid weights, streamed to disk.
 * Returns the plan it wrote.
 */
export async function writeSyntheticModel(path: string, options: SyntheticModelOptions): Promise<SyntheticModelPlan> {
  const plan = planSyntheticModel(options);
  let done = 0;
  const tensors: GgufTensorSource[] = plan.tensors.map((t, index) => {
    const fill = tensorFiller(t.type, streamKey(plan.seed, index), t.init, {
      boundedScales: plan.preset.boundedScales ?? false,
    });
    const onProgress = options.onProgress;
    return {
      name: t.name,
      type: t.type,
      shape: t.shape,
      fill: onProgress
        ? (chunk, byteOffset) => {
            fill(chunk, byteOffset);
            done += chunk.length;
            onProgress(done, plan.tensorBytes);
          }
        : fill,
    };
  });
  await writeGguf(path, {
    metadata: plan.metadata,
    metadataTypes: plan.metadataTypes,
    tensors,
    headerOnly: options.headerOnly ?? false,
  });
  return plan;
}
