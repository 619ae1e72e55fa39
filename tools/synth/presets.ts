/**
 * The synthetic models: hyper-parameters and tensor types of each preset.
 * @module
 */
import { BloomeryError } from "../../src/errors.js";
import type { VocabFamily } from "./vocab.js";

/** The architectures the generator writes (llama.cpp's `general.architecture` names). */
export type SynthArchitecture =
  | "qwen3moe"
  | "qwen3"
  | "qwen2"
  | "llama"
  | "glm4moe"
  | "deepseek2"
  | "deepseek32"
  | "glm-dsa"
  | "gpt-oss"
  | "minimax-m2"
  | "mimo2"
  | "qwen3next"
  | "qwen35moe"
  | "deepseek4";

/** The weight matrices whose type a preset fixes or the `weightType` option sets (norms and routers stay F32). */
export type WeightRole =
  | "token_embd"
  | "output"
  | "attn_q"
  | "attn_k"
  | "attn_v"
  | "attn_output"
  | "ffn_gate"
  | "ffn_up"
  | "ffn_down"
  | "ffn_gate_exps"
  | "ffn_up_exps"
  | "ffn_down_exps"
  | "ffn_gate_shexp"
  | "ffn_up_shexp"
  | "ffn_down_shexp"
  | "attn_q_a"
  | "attn_q_b"
  | "attn_kv_a_mqa"
  | "attn_k_b"
  | "attn_v_b"
  | "indexer"
  | "nextn_eh_proj"
  | "attn_qkv"
  | "attn_gate"
  | "ssm_out"
  | "ssm_ba"
  | "cls_output";

/** Multi-head latent attention's sizes (deepseek2). */
export interface SynthMla {
  /** 0: queries from one matrix (attn_q). */
  qLoraRank: number;
  kvLoraRank: number;
  /** Each head's unrotated and rotated query/key parts, and its value width. */
  nopeDim: number;
  ropeDim: number;
  valueDim: number;
}

/** YaRN rope scaling, as the DeepSeek and gpt-oss files carry it. */
export interface SynthYarn {
  factor: number;
  originalContext: number;
  /** rope.scaling.yarn_log_multiplier as the converter writes it (0.1 x mscale_all_dim); DeepSeek's files only. */
  logMultiplier?: number;
}

/** gpt-oss's attention and experts: sliding windows, sinks, biases, the clamped SwiGLU. */
export interface SynthGptOss {
  /** attention.sliding_window: the positions a windowed layer sees. */
  slidingWindow: number;
  /** attention.sliding_window_pattern (absent: llama.cpp's default 2, even layers windowed). */
  pattern?: number;
}

/**
 * MiMo-V2's attention: windowed layers (with their own rope base, more KV heads and learned
 * sinks) beside full ones, value heads narrower than the key heads, a scaled output. The
 * next-token-prediction layers are windowed, with a fused attn_qkv and a dense FFN.
 */
export interface SynthMimo {
  /** attention.sliding_window */
  slidingWindow: number;
  /** Per layer before the next-token-prediction ones, whether it is windowed (attention.sliding_window_pattern). */
  windowed: boolean[];
  /** rope.freq_base_swa */
  ropeFreqBaseWindowed: number;
  /** KV heads of the windowed layers (headsKv: of the full ones); attention.head_count_kv becomes an array. */
  headsKvWindowed: number;
  /** attention.value_length: each value head's width. */
  valueDim: number;
  /** attention.value_scale */
  valueScale: number;
}

/**
 * Gated DeltaNet's sizes (qwen3next, qwen35moe): every layer but each `interval`-th is linear
 * attention; queries and keys have kHeads heads, values vHeads, all of headDim.
 */
export interface SynthDeltaNet {
  convKernel: number;
  kHeads: number;
  vHeads: number;
  headDim: number;
  /** full_attention_interval */
  interval: number;
}

/**
 * DeepSeek sparse attention's lightning indexer (deepseek32, glm-dsa): `heads` query heads and one
 * key of `headDim` per position; each query attends its `topK` best-scored positions.
 */
export interface SynthIndexer {
  heads: number;
  headDim: number;
  topK: number;
  /** glm-dsa's attention.indexer.types: per layer 1 (an indexer of its own) or 0 (the last one's choice). */
  types?: number[];
}

/**
 * DeepSeek-V4's blocks (deepseek4): attention of one shared key/value head over a sliding window of
 * its raw rows plus rows compressed from blocks of `compressRatios[l]` positions (4: overlapping
 * blocks scored by a lightning indexer, `indexer`; 128: every block; 0: the window alone), a
 * low-rank query, a grouped low-rank output; `hyperConnections` residual streams mixed by
 * Sinkhorn-normalized weights; the first `hashLayers` layers routed by a table of token ids; every
 * expert's SwiGLU clamped at `swigluLimit`; router weights sqrt(softplus(logit)).
 */
export interface SynthDeepseek4 {
  qLoraRank: number;
  /** attention.compress_ratios: one per layer, next-token-prediction layers included (0 for them). */
  compressRatios: number[];
  slidingWindow: number;
  compressRopeFreqBase: number;
  outputGroups: number;
  outputRank: number;
  hyperConnections: number;
  sinkhornIterations: number;
  hyperEpsilon: number;
  hashLayers: number;
  swigluLimit: number;
}

/** The router of an MoE preset beyond softmax top-k (DeepSeek-V3's and GLM-4.5's). */
export interface SynthRouter {
  /** llama.cpp's expert_gating_func: 1 softmax, 2 sigmoid, 4 sqrt(softplus) (deepseek4). */
  gating: 1 | 2 | 4;
  /** expert_weights_norm */
  normalize: boolean;
  /** expert_weights_scale */
  scale: number;
  /** A selection bias (exp_probs_b) per layer. */
  selectionBias: boolean;
  /** expert_group_count and expert_group_used_count (1 and 1: none). */
  groups: number;
  groupsUsed: number;
}

/** What makes an embedding or reranker model of a decoder (Qwen3-Embedding, Qwen3-Reranker). */
export interface SynthPooled {
  /** `<arch>.pooling_type` in llama.cpp's numbering: 0 none, 1 mean, 2 cls, 3 last, 4 rank. */
  pooling: number;
  /** tokenizer.ggml.add_eos_token: the tokenizer ends each input with EOS (Qwen3-Embedding's does). */
  addEos: boolean;
  /** A reranker head (cls.output) with these labels (`<arch>.classifier.output_labels`). */
  rankLabels?: string[];
  /** tokenizer.chat_template.rerank, with {query} and {document} in it. */
  rankTemplate?: string;
}

/** One synthetic model. Lengths are in elements. */
export interface SynthPreset {
  name: string;
  description: string;
  architecture: SynthArchitecture;
  vocab: VocabFamily;
  /** Pad the vocabulary to this many tokens (the real model's count); otherwise it is what buildVocab makes. */
  vocabSize?: number;
  /** Pad with tokens that write text (buildVocab's `padWithText`) rather than unused ones. */
  vocabPadText?: boolean;
  layers: number;
  embedding: number;
  heads: number;
  headsKv: number;
  headDim: number;
  /** Dense FFN length (for an MoE model, the `feed_forward_length` its metadata states). */
  feedForward: number;
  /** Routed experts per layer (0: dense). */
  experts: number;
  expertsUsed: number;
  expertFeedForward: number;
  contextLength: number;
  ropeFreqBase: number;
  rmsEpsilon: number;
  /** No output.weight: the output projection reuses token_embd (tied embeddings, as small Qwen2 models have). */
  tiedOutput?: boolean;
  /** Rotated elements of each head when fewer than headDim (GLM's partial rotary). */
  ropeDims?: number;
  /** Q, K and V biases (qwen2, glm4moe). */
  qkvBias?: boolean;
  /** Layers before the first MoE layer that have a dense FFN (leading_dense_block_count). */
  leadingDense?: number;
  /** Shared experts beside the routed ones (expert_shared_count), each expertFeedForward wide. */
  sharedExperts?: number;
  router?: SynthRouter;
  /** Next-token-prediction layers after the last (nextn_predict_layers). */
  nextnLayers?: number;
  /** deepseek2's attention; headDim is then nopeDim + ropeDim. */
  mla?: SynthMla;
  /** DeepSeek sparse attention (deepseek32, glm-dsa), over `mla`; deepseek4's indexer. */
  indexer?: SynthIndexer;
  /** DeepSeek-V4's blocks (deepseek4); headDim and ropeDims are its attention head's. */
  deepseek4?: SynthDeepseek4;
  yarn?: SynthYarn;
  /** gpt-oss's blocks (sliding windows, attention sinks, output and expert biases, router bias). */
  gptOss?: SynthGptOss;
  /** MiMo-V2's attention (mimo2). */
  mimo?: SynthMimo;
  /** The hybrid Qwens' linear-attention layers (qwen3next, qwen35moe). */
  deltaNet?: SynthDeltaNet;
  /** rope.dimension_sections (qwen35moe's interleaved multi-axis rope). */
  ropeSections?: [number, number, number, number];
  /** expert_shared_feed_forward_length: the shared expert's width (qwen3next, qwen35moe). */
  sharedFeedForward?: number;
  /** An embedding or reranker model's pooling (Qwen3-Embedding's, Qwen3-Reranker's). */
  pooled?: SynthPooled;
  /** Fixed type of every weight matrix; a preset without one takes the `weightType` option. */
  mix?: Partial<Record<WeightRole, string>>;
  /** Per layer, exceptions to `mix` for that layer's matrices. */
  layerMix?: Record<number, Partial<Record<WeightRole, string>>>;
  /** `general.file_type` (a llama_ftype) of a preset with a fixed mix. */
  fileType?: number;
  /**
   * Bound Q6_K's sub-block scales (blocks.ts): the tiny presets' oracle fixtures need logits as
   * narrow as the other types' give; the benchmark presets keep every byte but `d` random.
   */
  boundedScales?: boolean;
}

/**
 * The presets. `qwen3-30b-a3b` has the shapes and tensor types of Qwen3-30B-A3B at a Q4_K_M-like
 * mix (docs: BASELINES.md, "The benchmark model"); the tiny ones are a few MB, with every row
 * length a multiple of 256 so that every fillable type, K-quants included, applies.
 */
/** The tensor types of BASELINES.md's benchmark model: a Q4_K_M-like mix. */
const Q4_K_M_MIX: Partial<Record<WeightRole, string>> = {
  token_embd: "Q4_K",
  output: "Q6_K",
  attn_q: "Q4_K",
  attn_k: "Q4_K",
  attn_v: "Q6_K",
  attn_output: "Q4_K",
  ffn_gate_exps: "Q4_K",
  ffn_up_exps: "Q4_K",
  ffn_down_exps: "Q6_K",
};

/**
 * The benchmark model's shapes at a UD-IQ2_XXS-like mix (issue 25's rows): every routed expert
 * IQ2_XXS, attention and the embedding as the Q4_K_M mix has them.
 */
const IQ2_XXS_EXPERTS_MIX: Partial<Record<WeightRole, string>> = {
  ...Q4_K_M_MIX,
  ffn_gate_exps: "IQ2_XXS",
  ffn_up_exps: "IQ2_XXS",
  ffn_down_exps: "IQ2_XXS",
};

/**
 * A tiny mix of the 32-element, 256-element and codebook formats, with layer 1's ffn_gate_exps and
 * ffn_up_exps of different types (the GPU's fused expert kernel needs one: that layer's experts stay
 * on the CPU, the other layers' may sit on or stream to the GPU): the GPU tests' fixture for
 * switching activation formats within a pass and for kernel gaps.
 */
const TINY_MIX: Partial<Record<WeightRole, string>> = {
  token_embd: "Q4_0",
  output: "Q6_K",
  attn_q: "Q5_0",
  attn_k: "IQ4_NL",
  attn_v: "Q8_0",
  attn_output: "Q4_1",
  ffn_gate_exps: "Q4_K",
  ffn_up_exps: "Q4_K",
  ffn_down_exps: "MXFP4",
};
const TINY_MIX_GAP: Partial<Record<WeightRole, string>> = { ffn_up_exps: "IQ4_XS" };

/** tiny-qwen3: the dense oracle fixture, whose shapes the embedding, reranker, qwen2 and llama fixtures share. */
const TINY_QWEN3: SynthPreset = {
  name: "tiny-qwen3",
  description: "dense qwen3 with q/k norms, 2 layers, embedding 256, 4 heads of 128, FFN 768",
  architecture: "qwen3",
  vocab: "qwen",
  layers: 2,
  embedding: 256,
  heads: 4,
  headsKv: 2,
  headDim: 128,
  feedForward: 768,
  experts: 0,
  expertsUsed: 0,
  expertFeedForward: 0,
  contextLength: 4096,
  ropeFreqBase: 1e6,
  rmsEpsilon: 1e-6,
  boundedScales: true,
};

/** The rerank template of Qwen3-Reranker's GGUF files (llama.cpp's converter writes it). */
const QWEN3_RERANK_TEMPLATE =
  '<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n<|im_start|>user\n<Instruct>: Given a web search query, retrieve relevant passages that answer the query\n<Query>: {query}\n<Document>: {document}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n';

/** tiny-qwen3moe: the MoE oracle fixture, whose shapes the mix fixture shares. */
const TINY_QWEN3MOE: SynthPreset = {
  name: "tiny-qwen3moe",
  description: "qwen3moe, 3 layers x 8 experts (2 used), embedding 256, 8 heads of 64 (q wider than the embedding)",
  architecture: "qwen3moe",
  vocab: "qwen",
  layers: 3,
  embedding: 256,
  heads: 8,
  headsKv: 2,
  headDim: 64,
  feedForward: 512,
  experts: 8,
  expertsUsed: 2,
  expertFeedForward: 256,
  contextLength: 4096,
  ropeFreqBase: 1e6,
  rmsEpsilon: 1e-6,
  boundedScales: true,
};

/**
 * The mix the GPU machine's 64 GiB disk holds for a 106B model: Q3_K gate and up experts and Q4_K
 * down ones (about 3.8 bits per expert weight, as Q3_K_M files have them), Q4_K/Q6_K elsewhere.
 */
const Q3_K_M_MIX: Partial<Record<WeightRole, string>> = {
  token_embd: "Q4_K",
  output: "Q6_K",
  attn_q: "Q4_K",
  attn_k: "Q4_K",
  attn_v: "Q6_K",
  attn_output: "Q4_K",
  attn_q_a: "Q4_K",
  attn_q_b: "Q4_K",
  attn_kv_a_mqa: "Q6_K",
  attn_k_b: "Q8_0",
  attn_v_b: "Q8_0",
  ffn_gate: "Q4_K",
  ffn_up: "Q4_K",
  ffn_down: "Q6_K",
  ffn_gate_shexp: "Q4_K",
  ffn_up_shexp: "Q4_K",
  ffn_down_shexp: "Q6_K",
  ffn_gate_exps: "Q3_K",
  ffn_up_exps: "Q3_K",
  ffn_down_exps: "Q4_K",
  nextn_eh_proj: "Q4_K",
};

/**
 * tiny-glm4moe: GLM-4.5's layout: partial rotary, Q/K/V biases, a leading dense layer, sigmoid
 * routing with a selection bias, normalized and scaled weights, a shared expert, and a
 * next-token-prediction layer after the last.
 */
const TINY_GLM4MOE: SynthPreset = {
  name: "tiny-glm4moe",
  description:
    "glm4moe, 3 layers (the first dense) + 1 MTP layer, embedding 256, 4 heads of 128 (64 rotated), 8 experts (2 used) + 1 shared",
  architecture: "glm4moe",
  vocab: "qwen",
  layers: 3,
  embedding: 256,
  heads: 4,
  headsKv: 2,
  headDim: 128,
  ropeDims: 64,
  qkvBias: true,
  feedForward: 512,
  experts: 8,
  expertsUsed: 2,
  expertFeedForward: 256,
  leadingDense: 1,
  sharedExperts: 1,
  router: { gating: 2, normalize: true, scale: 2.5, selectionBias: true, groups: 1, groupsUsed: 1 },
  nextnLayers: 1,
  contextLength: 4096,
  ropeFreqBase: 1e6,
  rmsEpsilon: 1e-5,
  boundedScales: true,
};

/**
 * tiny-deepseek2: DeepSeek-V3's layout: multi-head latent attention with a low-rank query, YaRN,
 * a leading dense layer, sigmoid routing over 4 groups of which 2 compete, a selection bias,
 * scaled weights, a shared expert, and a next-token-prediction layer after the last.
 */
const TINY_DEEPSEEK2: SynthPreset = {
  name: "tiny-deepseek2",
  description:
    "deepseek2 (MLA, YaRN), 3 layers (the first dense) + 1 MTP layer, embedding 256, 4 heads, latent 128, 16 experts in 4 groups (4 used) + 1 shared",
  architecture: "deepseek2",
  vocab: "qwen",
  layers: 3,
  embedding: 256,
  heads: 4,
  headsKv: 1,
  headDim: 96,
  mla: { qLoraRank: 128, kvLoraRank: 128, nopeDim: 64, ropeDim: 32, valueDim: 64 },
  yarn: { factor: 4, originalContext: 512, logMultiplier: 0.1 },
  feedForward: 512,
  experts: 16,
  expertsUsed: 4,
  expertFeedForward: 256,
  leadingDense: 1,
  sharedExperts: 1,
  // DeepSeek-V3 scales by 2.5; on random weights that, with the group limit, makes the fixture's
  // logits chaotic (any rounding flips routings that the scale then amplifies), so 1.5 here.
  router: { gating: 2, normalize: true, scale: 1.5, selectionBias: true, groups: 4, groupsUsed: 2 },
  nextnLayers: 1,
  contextLength: 2048,
  ropeFreqBase: 10_000,
  rmsEpsilon: 1e-6,
  boundedScales: true,
};

/**
 * tiny-deepseek32: tiny-deepseek2's blocks with DeepSeek-V3.2's sparse attention: every layer's
 * lightning indexer (8 heads of 64, neox rope) picks the 16 positions its MLA attends, so any
 * context past 16 tokens attends a subset.
 */
const TINY_DEEPSEEK32: SynthPreset = {
  ...TINY_DEEPSEEK2,
  name: "tiny-deepseek32",
  description:
    "deepseek32 (MLA with DeepSeek sparse attention: an indexer of 8 heads of 64 choosing 16 positions), tiny-deepseek2's other blocks",
  architecture: "deepseek32",
  vocab: "deepseek",
  indexer: { heads: 8, headDim: 64, topK: 16 },
};

/**
 * tiny-glm-dsa: GLM-5's layout: MLA with DeepSeek sparse attention where layers 0 and 3 have an
 * indexer of their own (normal rope) and layers 1, 2 and 4 attend what the last one chose, a
 * leading dense layer, sigmoid routing with a selection bias, a shared expert, an MTP layer.
 */
const TINY_GLM_DSA: SynthPreset = {
  name: "tiny-glm-dsa",
  description:
    "glm-dsa (MLA with sparse attention: indexers of 8 heads of 64 choosing 24 positions on layers 0 and 3, shared by the others), 5 layers (the first dense) + 1 MTP layer, 16 experts (4 used) + 1 shared",
  architecture: "glm-dsa",
  vocab: "glm",
  layers: 5,
  embedding: 256,
  heads: 4,
  headsKv: 1,
  headDim: 96,
  mla: { qLoraRank: 128, kvLoraRank: 128, nopeDim: 64, ropeDim: 32, valueDim: 64 },
  indexer: { heads: 8, headDim: 64, topK: 24, types: [1, 0, 0, 1, 0] },
  feedForward: 512,
  experts: 16,
  expertsUsed: 4,
  expertFeedForward: 256,
  leadingDense: 1,
  sharedExperts: 1,
  router: { gating: 2, normalize: true, scale: 1.5, selectionBias: true, groups: 1, groupsUsed: 1 },
  nextnLayers: 1,
  contextLength: 4096,
  ropeFreqBase: 1e6,
  rmsEpsilon: 1e-5,
  boundedScales: true,
};

/**
 * tiny-deepseek4: DeepSeek-V4's layout at a few MB: 4 layers whose attention compresses blocks of
 * 0 / 4 / 128 / 4 positions beside a window of 32 (the ratio-4 layers' indexer of 8 heads of 64
 * choosing 8 blocks), heads of 128 (32 rotated), 4 hyper-connection streams, the first layer routed
 * by token id, 16 experts (4 used) clamped at 0.75 plus a shared one, and a next-token-prediction
 * layer (its window alone), which llama.cpp and we load and do not run.
 */
const TINY_DEEPSEEK4: SynthPreset = {
  name: "tiny-deepseek4",
  description:
    "deepseek4 (compressed attention 0/4/128/4 with a window of 32, an indexer on the ratio-4 layers, 4 hyper-connection streams, a hash-routed first layer) + 1 MTP layer, embedding 256, 4 heads of 128, 16 experts (4 used) + 1 shared",
  architecture: "deepseek4",
  vocab: "deepseek",
  layers: 4,
  embedding: 256,
  heads: 4,
  headsKv: 1,
  headDim: 128,
  ropeDims: 32,
  feedForward: 512,
  experts: 16,
  expertsUsed: 4,
  expertFeedForward: 256,
  sharedExperts: 1,
  router: { gating: 4, normalize: true, scale: 1.5, selectionBias: true, groups: 1, groupsUsed: 1 },
  nextnLayers: 1,
  indexer: { heads: 8, headDim: 64, topK: 8 },
  deepseek4: {
    qLoraRank: 128,
    compressRatios: [0, 4, 128, 4, 0],
    slidingWindow: 32,
    compressRopeFreqBase: 160_000,
    outputGroups: 2,
    outputRank: 64,
    hyperConnections: 4,
    sinkhornIterations: 20,
    hyperEpsilon: 1e-6,
    hashLayers: 1,
    swigluLimit: 0.75,
  },
  yarn: { factor: 4, originalContext: 1024 },
  contextLength: 4096,
  ropeFreqBase: 10_000,
  rmsEpsilon: 1e-6,
  boundedScales: true,
};

/**
 * A mix like the UD-IQ1_S / UD-IQ2_XXS files of the giant MoE models: 1- and 2-bit i-quant routed
 * experts (their down projections a step up), K-quants for attention, the dense layer and the
 * shared expert, Q6_K output. Layer 2's experts are other low-bit types (IQ2_XXS gate and up,
 * IQ3_S down), the MTP layer's others again (IQ1_M, IQ2_S), as such files vary them by layer.
 */
const UD_LOW_BIT_MIX: Partial<Record<WeightRole, string>> = {
  ...Q3_K_M_MIX,
  ffn_gate_shexp: "Q5_K",
  ffn_up_shexp: "Q5_K",
  ffn_gate_exps: "IQ1_S",
  ffn_up_exps: "IQ1_S",
  ffn_down_exps: "IQ2_XXS",
};
const UD_LOW_BIT_LAYERS: Record<number, Partial<Record<WeightRole, string>>> = {
  2: { ffn_gate_exps: "IQ2_XXS", ffn_up_exps: "IQ2_XXS", ffn_down_exps: "IQ3_S" },
  3: { ffn_gate_exps: "IQ1_M", ffn_up_exps: "IQ1_M", ffn_down_exps: "IQ2_S" },
};

/**
 * tiny-gpt-oss: gpt-oss's layout: sliding-window layers (window 32, every other layer)
 * alternating with full ones, learned attention sinks, Q/K/V and output biases, YaRN, and in
 * every layer 8 experts (4 used) chosen by the router's biased logits and weighted by a softmax
 * over the chosen, each a clamped SwiGLU with per-expert biases.
 */
const TINY_GPT_OSS: SynthPreset = {
  name: "tiny-gpt-oss",
  description:
    "gpt-oss, 4 layers (window 32 on even layers), embedding 256, 8 heads / 2 KV heads of 64, sinks, YaRN x8, 8 experts (4 used) of 256 with biases",
  architecture: "gpt-oss",
  vocab: "qwen",
  layers: 4,
  embedding: 256,
  heads: 8,
  headsKv: 2,
  headDim: 64,
  qkvBias: true,
  feedForward: 256,
  experts: 8,
  expertsUsed: 4,
  expertFeedForward: 256,
  yarn: { factor: 8, originalContext: 512 },
  gptOss: { slidingWindow: 32 },
  contextLength: 4096,
  ropeFreqBase: 150_000,
  rmsEpsilon: 1e-5,
  boundedScales: true,
};

/**
 * tiny-minimax-m2: MiniMax-M2's layout: partial rotary, RMS norms over each row's whole query
 * and key projections, and in every layer experts chosen by sigmoid with a selection bias, their
 * weights normalized.
 */
const TINY_MINIMAX_M2: SynthPreset = {
  name: "tiny-minimax-m2",
  description:
    "minimax-m2, 3 layers, embedding 256, 4 heads / 2 KV heads of 128 (64 rotated), whole-projection Q/K norms, 8 experts (2 used), sigmoid",
  architecture: "minimax-m2",
  vocab: "qwen",
  layers: 3,
  embedding: 256,
  heads: 4,
  headsKv: 2,
  headDim: 128,
  ropeDims: 64,
  feedForward: 256,
  experts: 8,
  expertsUsed: 2,
  expertFeedForward: 256,
  router: { gating: 2, normalize: true, scale: 1, selectionBias: true, groups: 1, groupsUsed: 1 },
  contextLength: 4096,
  ropeFreqBase: 5e6,
  rmsEpsilon: 1e-6,
  boundedScales: true,
};

/**
 * tiny-mimo2: MiMo-V2-Flash's layout: a dense first layer, full layers with 1 KV head beside
 * windowed ones (window 32, base 10,000, 2 KV heads, sinks), keys of 128 and values of 64 (64
 * rotated), the output scaled by 0.707, sigmoid-routed experts with a selection bias, and a
 * next-token-prediction layer after the last.
 */
const TINY_MIMO2: SynthPreset = {
  name: "tiny-mimo2",
  description:
    "mimo2, 4 layers (the first dense; 1 and 2 windowed, window 32) + 1 MTP layer, embedding 256, 4 heads, keys 128 / values 64, 1 or 2 KV heads, 8 experts (2 used)",
  architecture: "mimo2",
  vocab: "qwen",
  layers: 4,
  embedding: 256,
  heads: 4,
  headsKv: 1,
  headDim: 128,
  ropeDims: 64,
  feedForward: 512,
  experts: 8,
  expertsUsed: 2,
  expertFeedForward: 256,
  leadingDense: 1,
  router: { gating: 2, normalize: true, scale: 1, selectionBias: true, groups: 1, groupsUsed: 1 },
  nextnLayers: 1,
  mimo: {
    slidingWindow: 32,
    windowed: [false, true, true, false],
    ropeFreqBaseWindowed: 10_000,
    headsKvWindowed: 2,
    valueDim: 64,
    valueScale: 0.707,
  },
  contextLength: 4096,
  ropeFreqBase: 5e6,
  rmsEpsilon: 1e-5,
  boundedScales: true,
};

/** The released gpt-oss GGUFs' types: MXFP4 experts, the rest BF16 but for Q8_0 embeddings and output. */
const GPT_OSS_MIX: Partial<Record<WeightRole, string>> = {
  token_embd: "Q8_0",
  output: "Q8_0",
  attn_q: "BF16",
  attn_k: "BF16",
  attn_v: "BF16",
  attn_output: "BF16",
  ffn_gate_exps: "MXFP4",
  ffn_up_exps: "MXFP4",
  ffn_down_exps: "MXFP4",
};

/**
 * gpt-oss's shapes (both sizes): embedding 2880, 64 heads / 8 KV heads of 64, windows of 128 on
 * every other layer, sinks, YaRN x32 over 4,096, 4 experts used of 2880, o200k's 201,088 tokens;
 * the released files' types.
 */
const GPT_OSS_SHAPES: Omit<SynthPreset, "name" | "description" | "layers" | "experts"> = {
  architecture: "gpt-oss",
  vocab: "qwen",
  vocabSize: 201_088,
  embedding: 2880,
  heads: 64,
  headsKv: 8,
  headDim: 64,
  qkvBias: true,
  feedForward: 2880,
  expertsUsed: 4,
  expertFeedForward: 2880,
  yarn: { factor: 32, originalContext: 4096 },
  gptOss: { slidingWindow: 128 },
  contextLength: 131_072,
  ropeFreqBase: 150_000,
  rmsEpsilon: 1e-5,
  mix: GPT_OSS_MIX,
  fileType: 38, // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
};

/**
 * tiny-qwen35moe: Qwen3.5/3.6 MoE's layout: three Gated DeltaNet layers (2 key heads tiled over 8
 * value heads of 64, a 4-tap convolution) then one gated attention layer (per-head Q/K norms,
 * output gate, 32 of 128 rotated by the interleaved multi-axis rope, whose sections [6, 5, 4, 0]
 * leave one pair unrotated), and in every layer 8 experts (2 used) plus a sigmoid-gated shared one.
 */
const TINY_QWEN35MOE: SynthPreset = {
  name: "tiny-qwen35moe",
  description:
    "qwen35moe, 4 layers (3 Gated DeltaNet, 1 gated attention), embedding 256, 4 heads of 128 (32 rotated), 8 experts (2 used) + 1 gated shared",
  architecture: "qwen35moe",
  vocab: "qwen",
  layers: 4,
  embedding: 256,
  heads: 4,
  headsKv: 2,
  headDim: 128,
  ropeDims: 32,
  ropeSections: [6, 5, 4, 0],
  deltaNet: { convKernel: 4, kHeads: 2, vHeads: 8, headDim: 64, interval: 4 },
  feedForward: 512,
  experts: 8,
  expertsUsed: 2,
  expertFeedForward: 256,
  sharedFeedForward: 256,
  contextLength: 4096,
  ropeFreqBase: 1e7,
  rmsEpsilon: 1e-6,
  boundedScales: true,
};

/** The Q4_K_M-like mix with the hybrid Qwens' linear-attention and shared-expert matrices. */
const HYBRID_QWEN_MIX: Partial<Record<WeightRole, string>> = {
  ...Q4_K_M_MIX,
  attn_qkv: "Q4_K",
  attn_gate: "Q4_K",
  ssm_out: "Q4_K",
  ssm_ba: "Q8_0",
  ffn_gate_shexp: "Q4_K",
  ffn_up_shexp: "Q4_K",
  ffn_down_shexp: "Q6_K",
};

/** BASELINES.md's benchmark model. */
const QWEN3_30B_A3B: SynthPreset = {
  name: "qwen3-30b-a3b",
  description: "Qwen3-30B-A3B shapes, Q4_K_M-like mix, 48 layers x 128 experts (8 used), 19.8 GB",
  architecture: "qwen3moe",
  vocab: "qwen",
  vocabSize: 151_936,
  layers: 48,
  embedding: 2048,
  heads: 32,
  headsKv: 4,
  headDim: 128,
  feedForward: 6144,
  experts: 128,
  expertsUsed: 8,
  expertFeedForward: 768,
  contextLength: 40_960,
  ropeFreqBase: 1e6,
  rmsEpsilon: 1e-6,
  mix: Q4_K_M_MIX,
  fileType: 15, // LLAMA_FTYPE_MOSTLY_Q4_K_M
};

/** DeepSeek-V4-Flash's compression over `layers` layers: the window alone on the first two, then blocks of 4 and 128 in turn. */
function v4FlashRatios(layers: number): number[] {
  return [0, 0, ...Array.from({ length: layers - 2 }, (_, i) => (i % 2 === 0 ? 4 : 128))];
}

/**
 * DeepSeek-V4-Flash's exact per-layer shapes (43 layers, embedding 4096, 64 heads of 512 with 64
 * rotated, a window of 128, layers 0 and 1 the window alone, then compressed blocks of 4 and 128 in
 * turn, an indexer of 64 heads of 128 choosing 512, 256 experts (6 used) of 2048 + 1 shared, the
 * first 3 layers hash-routed), 12 of its layers: each layer's bytes and work are the real file's,
 * so per-layer figures scale to the 43 layers by the layer count (the embedding and output once).
 */
const DEEPSEEK_V4_FLASH_SLICE: SynthPreset = {
  name: "deepseek-v4-flash-slice",
  description:
    "DeepSeek-V4-Flash's exact per-layer shapes, 12 of its 43 layers (ratios 0, 0, then 4 and 128 in turn), 256 experts (6 used) + 1 shared, a Q3_K_M-like mix, 38 GB",
  architecture: "deepseek4",
  vocab: "deepseek",
  vocabSize: 129_280,
  layers: 12,
  embedding: 4096,
  heads: 64,
  headsKv: 1,
  headDim: 512,
  ropeDims: 64,
  feedForward: 2048,
  experts: 256,
  expertsUsed: 6,
  expertFeedForward: 2048,
  sharedExperts: 1,
  router: { gating: 4, normalize: true, scale: 1.5, selectionBias: true, groups: 1, groupsUsed: 1 },
  indexer: { heads: 64, headDim: 128, topK: 512 },
  deepseek4: {
    qLoraRank: 1024,
    compressRatios: v4FlashRatios(12),
    slidingWindow: 128,
    compressRopeFreqBase: 160_000,
    outputGroups: 8,
    outputRank: 1024,
    hyperConnections: 4,
    sinkhornIterations: 20,
    hyperEpsilon: 1e-6,
    hashLayers: 3,
    swigluLimit: 10,
  },
  yarn: { factor: 16, originalContext: 65_536 },
  contextLength: 1_048_576,
  ropeFreqBase: 10_000,
  rmsEpsilon: 1e-6,
  mix: { ...Q3_K_M_MIX, indexer: "Q4_K" },
  fileType: 12, // LLAMA_FTYPE_MOSTLY_Q3_K_M
};

const QWEN3MOE_2B: SynthPreset = {
  ...QWEN3_30B_A3B,
  name: "qwen3moe-2b",
  description:
    "qwen3moe for the CPU benchmark: 24 layers x 32 experts (4 used), embedding 1536, the big preset's mix, 2 GB",
  vocabSize: 32_768,
  layers: 24,
  embedding: 1536,
  heads: 16,
  feedForward: 4608,
  experts: 32,
  expertsUsed: 4,
};

const QWEN36_35B_A3B: SynthPreset = {
  name: "qwen3.6-35b-a3b",
  description:
    "Qwen3.6-35B-A3B shapes (qwen35moe), 40 layers (30 Gated DeltaNet), 256 experts (8 used) + 1 gated shared, Q4_K_M-like mix",
  architecture: "qwen35moe",
  vocab: "qwen",
  vocabSize: 248_320,
  layers: 40,
  embedding: 2048,
  heads: 16,
  headsKv: 2,
  headDim: 256,
  ropeDims: 64,
  ropeSections: [11, 11, 10, 0],
  deltaNet: { convKernel: 4, kHeads: 16, vHeads: 32, headDim: 128, interval: 4 },
  feedForward: 512,
  experts: 256,
  expertsUsed: 8,
  expertFeedForward: 512,
  sharedFeedForward: 512,
  contextLength: 262_144,
  ropeFreqBase: 1e7,
  rmsEpsilon: 1e-6,
  mix: HYBRID_QWEN_MIX,
  fileType: 15, // LLAMA_FTYPE_MOSTLY_Q4_K_M
};

export const PRESETS: Record<string, SynthPreset> = {
  "qwen3-30b-a3b": QWEN3_30B_A3B,
  "qwen3-30b-a3b-iq2xxs": {
    ...QWEN3_30B_A3B,
    name: "qwen3-30b-a3b-iq2xxs",
    description: "Qwen3-30B-A3B shapes, IQ2_XXS routed experts (a UD-IQ2_XXS-like mix), 8.5 GB",
    mix: IQ2_XXS_EXPERTS_MIX,
    fileType: 19, // LLAMA_FTYPE_MOSTLY_IQ2_XXS
  },
  "qwen3moe-2b": QWEN3MOE_2B,
  "qwen3moe-2b-q3km": {
    ...QWEN3MOE_2B,
    name: "qwen3moe-2b-q3km",
    description:
      "qwen3moe-2b with the Q3_K_M-like mix of the DeepSeek and GLM presets (Q3_K gate and up experts, Q4_K down): their CPU experts' kernels on the CPU benchmark",
    mix: Q3_K_M_MIX,
    fileType: 12, // LLAMA_FTYPE_MOSTLY_Q3_K_M
  },
  "glm-4.5-air": {
    name: "glm-4.5-air",
    description:
      "GLM-4.5-Air shapes (106B-A12B), 46 layers (the first dense) + 1 MTP layer, 128 experts (8 used) + 1 shared, Q3_K_M-like mix, 57 GB",
    architecture: "glm4moe",
    vocab: "qwen",
    vocabSize: 151_552,
    layers: 46,
    embedding: 4096,
    heads: 96,
    headsKv: 8,
    headDim: 128,
    ropeDims: 64,
    qkvBias: true,
    feedForward: 10_944,
    experts: 128,
    expertsUsed: 8,
    expertFeedForward: 1408,
    leadingDense: 1,
    sharedExperts: 1,
    router: { gating: 2, normalize: true, scale: 1, selectionBias: true, groups: 1, groupsUsed: 1 },
    nextnLayers: 1,
    contextLength: 131_072,
    ropeFreqBase: 1e6,
    rmsEpsilon: 1e-5,
    mix: Q3_K_M_MIX,
    fileType: 12, // LLAMA_FTYPE_MOSTLY_Q3_K_M
  },
  "deepseek-v3-slice": {
    name: "deepseek-v3-slice",
    description:
      "DeepSeek-V3's exact per-layer shapes, 10 of its 61 layers (the first 3 dense, as the real file's), 256 experts in 8 groups (8 used) + 1 shared, Q3_K_M-like mix, 41 GB",
    architecture: "deepseek2",
    vocab: "qwen",
    vocabSize: 129_280,
    layers: 10,
    embedding: 7168,
    heads: 128,
    headsKv: 1,
    headDim: 192,
    mla: { qLoraRank: 1536, kvLoraRank: 512, nopeDim: 128, ropeDim: 64, valueDim: 128 },
    yarn: { factor: 40, originalContext: 4096, logMultiplier: 0.1 },
    feedForward: 18_432,
    experts: 256,
    expertsUsed: 8,
    expertFeedForward: 2048,
    leadingDense: 3,
    sharedExperts: 1,
    router: { gating: 2, normalize: true, scale: 2.5, selectionBias: true, groups: 8, groupsUsed: 4 },
    contextLength: 163_840,
    ropeFreqBase: 10_000,
    rmsEpsilon: 1e-6,
    mix: Q3_K_M_MIX,
    fileType: 12, // LLAMA_FTYPE_MOSTLY_Q3_K_M
  },
  "glm-5-slice": {
    name: "glm-5-slice",
    description:
      "GLM-5's (and 5.1's) exact per-layer shapes, 10 of its 78 layers (the first 3 dense, as the real file's), MLA with DeepSeek sparse attention on every layer, 256 experts (8 used) + 1 shared, Q3_K_M-like mix, 35 GB",
    architecture: "glm-dsa",
    vocab: "glm",
    vocabSize: 154_880,
    layers: 10,
    embedding: 6144,
    heads: 64,
    headsKv: 1,
    headDim: 256,
    mla: { qLoraRank: 2048, kvLoraRank: 512, nopeDim: 192, ropeDim: 64, valueDim: 256 },
    // No indexer.types: as llama.cpp reads GLM-5's files without the key, every layer has its own.
    indexer: { heads: 32, headDim: 128, topK: 2048 },
    feedForward: 12_288,
    experts: 256,
    expertsUsed: 8,
    expertFeedForward: 2048,
    leadingDense: 3,
    sharedExperts: 1,
    router: { gating: 2, normalize: true, scale: 2.5, selectionBias: true, groups: 1, groupsUsed: 1 },
    contextLength: 202_752,
    ropeFreqBase: 1e6,
    rmsEpsilon: 1e-5,
    mix: { ...Q3_K_M_MIX, indexer: "Q4_K" },
    fileType: 12, // LLAMA_FTYPE_MOSTLY_Q3_K_M
  },
  "deepseek-v4-flash-slice": DEEPSEEK_V4_FLASH_SLICE,
  // The whole file's shapes, for plans on a header-only file (--header-only): too large to write in full here.
  "deepseek-v4-flash": {
    ...DEEPSEEK_V4_FLASH_SLICE,
    name: "deepseek-v4-flash",
    description:
      "DeepSeek-V4-Flash's shapes, all 43 layers (ratios 0, 0, then 4 and 128 in turn), 256 experts (6 used) + 1 shared, the slice's Q3_K_M-like mix, for plans (--header-only)",
    layers: 43,
    deepseek4: { ...DEEPSEEK_V4_FLASH_SLICE.deepseek4!, compressRatios: v4FlashRatios(43) },
  },
  // DeepSeek-V4.1-Flash (deepseek_v41, deepseek-ai/DeepSeek-V4.1-Flash at 314113f8) is a newer architecture than
  // deepseek4, which no GGUF architecture describes yet: its published widths and counts over V4's blocks, for plans on
  // a header-only file (--header-only), too large to write in full here. V4.1's CSA2 attention (ratios 0, 0, 2 x 18,
  // 1 x 20, compressors shared by source layers 2, 8, 14 and 20, indexers by 8 layers, a candidate pre-filter) has no
  // deepseek4 form: V4-Flash's ratios stand for it, a compressor and indexer per layer, with V4.1's indexer widths.
  // Its config names no hash-routed layers. Not in it: the Engram tables (layers 1 and 14, 384,006,168 and
  // 384,016,682 rows of 256 at fp8, ~203 GB, read from disk by hash), the vision encoder, the 3 DSpark draft layers.
  "deepseek-v4.1-flash": {
    ...DEEPSEEK_V4_FLASH_SLICE,
    name: "deepseek-v4.1-flash",
    description:
      "DeepSeek-V4.1-Flash's widths and counts over DeepSeek-V4's blocks, for plans (--header-only): 40 layers of embedding 5120, q_lora 1280, an indexer of 32 heads of 128, 384 experts (6 used) of 2304 + 1 shared, none hash-routed, the V4 slice's Q3_K_M-like mix; V4-Flash's ratios (0, 0, then 4 and 128 in turn) stand for V4.1's CSA2, and the Engram tables (~203 GB at fp8, read from disk by hash), the vision encoder and the DSpark draft layers are not in it",
    layers: 40,
    embedding: 5120,
    feedForward: 2304,
    experts: 384,
    expertFeedForward: 2304,
    indexer: { heads: 32, headDim: 128, topK: 512 },
    deepseek4: {
      ...DEEPSEEK_V4_FLASH_SLICE.deepseek4!,
      qLoraRank: 1280,
      compressRatios: v4FlashRatios(40),
      hashLayers: 0,
    },
    rmsEpsilon: 1e-20,
  },
  "deepseek4-cpu": {
    ...DEEPSEEK_V4_FLASH_SLICE,
    name: "deepseek4-cpu",
    description:
      "deepseek4 for the CPU benchmark: DeepSeek-V4-Flash's attention heads and compression (ratios 0, 0, then 4 and 128 in turn) on 8 layers of embedding 1024, 32 experts (4 used) of 768, the slice's mix, 0.4 GB",
    vocabSize: 32_768,
    layers: 8,
    embedding: 1024,
    heads: 16,
    experts: 32,
    expertsUsed: 4,
    expertFeedForward: 768,
    indexer: { heads: 16, headDim: 128, topK: 64 },
    deepseek4: {
      ...DEEPSEEK_V4_FLASH_SLICE.deepseek4!,
      qLoraRank: 512,
      compressRatios: v4FlashRatios(8),
      outputGroups: 4,
      outputRank: 256,
      hashLayers: 2,
    },
  },
  "qwen3.6-35b-a3b": QWEN36_35B_A3B,
  "qwen35moe-cpu": {
    ...QWEN36_35B_A3B,
    name: "qwen35moe-cpu",
    description:
      "qwen35moe for the CPU benchmark: Qwen3.6-35B-A3B's attention and Gated DeltaNet heads on 8 layers (6 Gated DeltaNet), 32 experts (4 used) + 1 gated shared, the big preset's mix, 0.7 GB",
    vocabSize: 32_768,
    layers: 8,
    experts: 32,
    expertsUsed: 4,
  },
  "qwen3-next-80b-a3b": {
    name: "qwen3-next-80b-a3b",
    description:
      "Qwen3-Next-80B-A3B shapes (qwen3next), 48 layers (36 Gated DeltaNet), 512 experts (10 used) + 1 gated shared, Q4_K_M-like mix",
    architecture: "qwen3next",
    vocab: "qwen",
    vocabSize: 151_936,
    layers: 48,
    embedding: 2048,
    heads: 16,
    headsKv: 2,
    headDim: 256,
    ropeDims: 64,
    deltaNet: { convKernel: 4, kHeads: 16, vHeads: 32, headDim: 128, interval: 4 },
    feedForward: 5120,
    experts: 512,
    expertsUsed: 10,
    expertFeedForward: 512,
    sharedFeedForward: 512,
    contextLength: 262_144,
    ropeFreqBase: 1e7,
    rmsEpsilon: 1e-6,
    mix: HYBRID_QWEN_MIX,
    fileType: 15, // LLAMA_FTYPE_MOSTLY_Q4_K_M
  },
  "tiny-qwen35moe": TINY_QWEN35MOE,
  "tiny-qwen35moe-mtp": {
    ...TINY_QWEN35MOE,
    name: "tiny-qwen35moe-mtp",
    description:
      "tiny-qwen35moe with a next-token-prediction layer after the last (MTP drafts beside recurrent layers)",
    nextnLayers: 1,
  },
  "tiny-qwen35moe-256": {
    ...TINY_QWEN35MOE,
    name: "tiny-qwen35moe-256",
    description:
      "tiny-qwen35moe with attention heads of 256, as Qwen3.5/3.6's (the GPU's tiled attention splits their value columns over two blocks)",
    headDim: 256,
  },
  "tiny-qwen3next": {
    ...TINY_QWEN35MOE,
    name: "tiny-qwen3next",
    description:
      "qwen3next, 4 layers (3 Gated DeltaNet with 2 key heads repeated over 8 value heads, 1 gated attention), embedding 256, 4 heads of 128 (32 rotated), 8 experts (2 used) + 1 gated shared",
    architecture: "qwen3next",
    ropeSections: undefined,
  },
  "tiny-qwen3moe": TINY_QWEN3MOE,
  "tiny-qwen3moe-8k": {
    ...TINY_QWEN3MOE,
    name: "tiny-qwen3moe-8k",
    description:
      "tiny-qwen3moe with its vocabulary padded to 8192 tokens that write text: random weights then draw an end " +
      "token about once in 8192, a model that writes until its limit (as llama-server's suite expects of TinyStories)",
    vocabSize: 8192,
    vocabPadText: true,
  },
  "tiny-qwen3moe-fim": {
    ...TINY_QWEN3MOE,
    name: "tiny-qwen3moe-fim",
    description: "tiny-qwen3moe with Qwen2.5-Coder's fill-in-the-middle tokens (llama-server's /infill)",
    vocab: "qwen-coder",
  },

  "tiny-glm4moe": TINY_GLM4MOE,
  "tiny-deepseek2": TINY_DEEPSEEK2,
  "tiny-deepseek32": TINY_DEEPSEEK32,
  "tiny-glm-dsa": TINY_GLM_DSA,
  "tiny-deepseek4": TINY_DEEPSEEK4,
  "tiny-glm4moe-ud": {
    ...TINY_GLM4MOE,
    name: "tiny-glm4moe-ud",
    description:
      "tiny-glm4moe's shapes with a UD-IQ1_S-like mix: IQ1_S/IQ2_XXS routed experts (IQ2_XXS/IQ3_S in layer 2), K-quants elsewhere",
    mix: UD_LOW_BIT_MIX,
    layerMix: UD_LOW_BIT_LAYERS,
    fileType: 24, // LLAMA_FTYPE_MOSTLY_IQ1_S, as the UD-IQ1_S files say
  },
  "tiny-gpt-oss": TINY_GPT_OSS,
  "tiny-minimax-m2": TINY_MINIMAX_M2,
  "tiny-mimo2": TINY_MIMO2,
  "minimax-m2": {
    name: "minimax-m2",
    description:
      "MiniMax-M2's shapes (230B-A10B), 62 layers x 256 experts (8 used) of 1536, 48 heads / 8 KV heads of 128 (64 rotated), Q3_K_M-like mix, 109 GB",
    architecture: "minimax-m2",
    vocab: "qwen",
    vocabSize: 200_064,
    layers: 62,
    embedding: 3072,
    heads: 48,
    headsKv: 8,
    headDim: 128,
    ropeDims: 64,
    feedForward: 1536,
    experts: 256,
    expertsUsed: 8,
    expertFeedForward: 1536,
    router: { gating: 2, normalize: true, scale: 1, selectionBias: true, groups: 1, groupsUsed: 1 },
    contextLength: 196_608,
    ropeFreqBase: 5e6,
    rmsEpsilon: 1e-6,
    mix: Q3_K_M_MIX,
    fileType: 12, // LLAMA_FTYPE_MOSTLY_Q3_K_M
  },
  "mimo-v2-flash": {
    name: "mimo-v2-flash",
    description:
      "MiMo-V2-Flash's shapes (310B-A15B), 48 layers (the first dense; 39 windowed, window 128), 256 experts (8 used) of 2048, 64 heads, keys 192 / values 128, 4 or 8 KV heads, Q3_K_M-like mix, 147 GB",
    architecture: "mimo2",
    vocab: "qwen",
    vocabSize: 152_576,
    layers: 48,
    embedding: 4096,
    heads: 64,
    headsKv: 4,
    headDim: 192,
    ropeDims: 64,
    feedForward: 16_384,
    experts: 256,
    expertsUsed: 8,
    expertFeedForward: 2048,
    leadingDense: 1,
    router: { gating: 2, normalize: true, scale: 1, selectionBias: true, groups: 1, groupsUsed: 1 },
    // The released GGUFs hold the trunk only (no next-token-prediction layers).
    mimo: {
      slidingWindow: 128,
      // Full attention on the first layer and on every sixth from the sixth on, windows elsewhere.
      windowed: Array.from({ length: 48 }, (_, l) => l !== 0 && l % 6 !== 5),
      ropeFreqBaseWindowed: 10_000,
      headsKvWindowed: 8,
      valueDim: 128,
      valueScale: 0.707,
    },
    contextLength: 262_144,
    ropeFreqBase: 5e6,
    rmsEpsilon: 1e-5,
    mix: Q3_K_M_MIX,
    fileType: 12, // LLAMA_FTYPE_MOSTLY_Q3_K_M
  },
  "gpt-oss-120b": {
    ...GPT_OSS_SHAPES,
    name: "gpt-oss-120b",
    description: "gpt-oss-120b's shapes, 36 layers x 128 experts (4 used), MXFP4 experts as the released file, 64 GB",
    layers: 36,
    experts: 128,
  },
  "gpt-oss-20b": {
    ...GPT_OSS_SHAPES,
    name: "gpt-oss-20b",
    description: "gpt-oss-20b's shapes, 24 layers x 32 experts (4 used), MXFP4 experts as the released file, 13 GB",
    layers: 24,
    experts: 32,
  },
  "tiny-gpt-oss-mxfp4": {
    ...TINY_GPT_OSS,
    name: "tiny-gpt-oss-mxfp4",
    description: "tiny-gpt-oss's shapes with the released files' types: MXFP4 experts, BF16 attention, Q8_0 embeddings",
    mix: GPT_OSS_MIX,
    fileType: 38, // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
  },
  "tiny-qwen3moe-mix": {
    ...TINY_QWEN3MOE,
    name: "tiny-qwen3moe-mix",
    description:
      "tiny-qwen3moe's shapes with a mix of nine weight types (layer 1's gate and up experts differ in type)",
    mix: TINY_MIX,
    layerMix: { 1: TINY_MIX_GAP },
    fileType: 1024, // LLAMA_FTYPE_GUESSED: no named llama.cpp mix
  },
  "tiny-qwen3": TINY_QWEN3,
  "tiny-qwen3-embedding": {
    ...TINY_QWEN3,
    name: "tiny-qwen3-embedding",
    description: "tiny-qwen3 as Qwen3-Embedding: last-token pooling, EOS added to each input",
    pooled: { pooling: 3, addEos: true },
  },
  "tiny-qwen3-reranker": {
    ...TINY_QWEN3,
    name: "tiny-qwen3-reranker",
    description:
      'tiny-qwen3 as Qwen3-Reranker: rank pooling, a cls.output head of labels "yes" and "no", a rerank template',
    pooled: { pooling: 4, addEos: false, rankLabels: ["yes", "no"], rankTemplate: QWEN3_RERANK_TEMPLATE },
  },
  "tiny-qwen2": {
    ...TINY_QWEN3,
    name: "tiny-qwen2",
    description:
      "qwen2 with Q/K/V biases and a tied output, 2 layers, embedding 256, 4 heads of 64 (2 KV heads), FFN 768",
    architecture: "qwen2",
    headDim: 64,
    tiedOutput: true,
  },
  "tiny-llama": {
    ...TINY_QWEN3,
    name: "tiny-llama",
    description: "llama 3 style, 2 layers, embedding 256, 4 heads of 64 (2 KV heads), FFN 768",
    architecture: "llama",
    vocab: "llama",
    headDim: 64,
    contextLength: 8192,
    ropeFreqBase: 500_000,
    rmsEpsilon: 1e-5,
  },
};

/** The preset of this name; throws INVALID_ARGUMENT naming the known ones. */
export function getPreset(name: string): SynthPreset {
  const preset = Object.hasOwn(PRESETS, name) ? PRESETS[name] : undefined;
  if (!preset) {
    const known = Object.keys(PRESETS);
    throw new BloomeryError("INVALID_ARGUMENT", `unknown preset ${JSON.stringify(name)} (known: ${known.join(", ")})`, {
      preset: name,
      known,
    });
  }
  return preset;
}
