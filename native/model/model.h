// A loaded model: its hyper-parameters and, per layer, its blocks and their weights bound to
// the GGUF mapping. An architecture file (model/<arch>.cc) describes a model in these terms:
// which kind of attention and FFN each layer has, from the shared set below, and which of the
// file's tensors each block reads (through the Binder, the one owner of tensor names). The
// forward passes (engine/forward.cc on the CPU, engine/gpu_forward.cc on the GPU) implement each
// block kind once and read only this, never an architecture's name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/rope.h"
#include "gguf/gguf_file.h"

namespace bloomery::model {

// How a layer attends. kGqa: grouped-query attention over cached keys and values of
// kv_heads heads. kMla: multi-head latent attention (DeepSeek-V2/V3): the cache holds each
// position's compressed latent (kv_lora_rank) and its rotary key (rope dims), one row for
// every head; the key and value up-projections are absorbed into the query and the output.
// kDeltaNet: linear attention by the gated delta rule (Qwen3-Next, Qwen3.5): no KV rows, but
// per sequence a short causal convolution's state and a recurrent state per value head.
// kSparseMla: DeepSeek sparse attention (DeepSeek-V3.2, GLM-5): MLA over only the positions a
// lightning indexer selects for each query (IndexerParams), the indexer's keys cached beside
// the latent.
// kCompressed: DeepSeek-V4's attention (CompressedParams): one key/value head over the sliding
// window's raw rows plus rows each compressed from a block of positions, chosen by a lightning
// indexer where the blocks are short.
enum class AttentionKind : uint8_t { kGqa, kMla, kDeltaNet, kSparseMla, kCompressed };

// Whether a layer of `kind` is multi-head latent attention, over every position or a sparse choice.
inline bool is_latent(AttentionKind kind) { return kind == AttentionKind::kMla || kind == AttentionKind::kSparseMla; }

// What a layer's FFN is. kDense: a SwiGLU FFN. kMoe: routed SwiGLU experts, plus shared
// experts (a SwiGLU every row runs) when the model has them.
enum class FfnKind : uint8_t { kDense, kMoe };

using cpu::Gating;
using cpu::RouterParams;

// How a sequence's hidden states (after the output norm) become its embedding, in llama.cpp's
// numbering (`<arch>.pooling_type`). kNone: every token's row; kMean: their mean; kCls: the
// first row; kLast: the last row; kRank: a reranker's score, through the model's RankHead.
enum class Pooling : uint8_t { kNone = 0, kMean = 1, kCls = 2, kLast = 3, kRank = 4 };

// Multi-head latent attention's sizes (AttentionKind::kMla).
struct MlaParams {
  int64_t q_lora_rank = 0;   // 0: queries come from one matrix (attn_q), not attn_q_a then attn_q_b
  int64_t kv_lora_rank = 0;  // the cached latent's width
  int64_t nope_dim = 0;      // the part of each query and key head without rotation
  int64_t rope_dim = 0;      // the rotated part (= rope.dims)
  int64_t value_dim = 0;     // each head's value width after the value up-projection
};

// The lightning indexer's sizes (AttentionKind::kSparseMla): `heads` query heads of `head_dim`
// score each cached position against one key of `head_dim` per position; a query attends the
// `top_k` best-scored positions it sees. Queries and keys rotate their first rope.dims elements
// in `rope_style` and are multiplied by the Hadamard matrix of head_dim before scoring.
struct IndexerParams {
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t top_k = 0;
  cpu::RopeStyle rope_style = cpu::RopeStyle::kNeox;
  float norm_epsilon = 0;  // of the keys' layer norm
};

// Gated DeltaNet's sizes (AttentionKind::kDeltaNet). Queries and keys have k_heads heads,
// values v_heads (a multiple), all of head_dim; each value head keeps a head_dim x head_dim
// state. The convolution runs over the concatenated [q, k, v] channels.
struct DeltaNetParams {
  int64_t conv_kernel = 0;  // taps of the causal convolution (its state keeps conv_kernel - 1 inputs)
  int64_t k_heads = 0;
  int64_t v_heads = 0;
  int64_t head_dim = 0;
  // Which key head a value head reads: h / (v_heads / k_heads) (Qwen3-Next's repeated heads), or
  // h % k_heads (Qwen3.5's tiled ones).
  bool grouped_heads = false;
  int64_t key_width() const { return k_heads * head_dim; }
  int64_t value_width() const { return v_heads * head_dim; }
  int64_t channels() const { return 2 * key_width() + value_width(); }
  // Floats of one layer's recurrent state of one sequence: the convolution's, then the rule's.
  int64_t conv_floats() const { return (conv_kernel - 1) * channels(); }
  int64_t state_floats() const { return conv_floats() + v_heads * head_dim * head_dim; }
};

// DeepSeek-V4's attention (AttentionKind::kCompressed). Queries come through a low-rank
// projection (q_lora_rank, normed), then each head is RMS-normed without a weight; one key row of
// head_dim per position is also the value row. Heads rotate their last rope.dims elements. A
// layer's ratio says what it attends beside the last sliding_window positions' raw rows:
// 0 nothing; kOverlapRatio (4) one row per block of 4 positions, compressed from that block and
// the one before it, of which the layer's lightning indexer (IndexerParams) picks top_k per query;
// any other ratio (128) one row per block, compressed from the block, every one the query sees.
// A block's row is seen from the position that completes it on. The heads' outputs rotate back,
// then each of output_groups groups of heads is projected to output_rank (attn_output_a) before
// attn_output_b.
struct CompressedParams {
  static constexpr int64_t kOverlapRatio = 4;
  int64_t q_lora_rank = 0;
  int64_t output_groups = 0;
  int64_t output_rank = 0;
  std::vector<int64_t> ratios;  // per layer of the pass
  // The rotation of layers with compressed rows, their compressed rows and their indexer: the
  // file's compress_rope_freq_base with its YaRN (whose magnitude is undone: 1). Layers without
  // compressed rows rotate by HyperParams::rope, without YaRN.
  cpu::RopeParams rope;
  // Per layer with compressed rows: floats of the state that compresses the next rows (the
  // positions of the blocks not yet compressed: their rows' values and scores; the attention's
  // compressor's first, state_floats(ratio, head_dim, 0) of them, then the indexer's).
  static int64_t state_floats(int64_t ratio, int64_t head_dim, int64_t indexer_head_dim);
};

// Hyper-connections (DeepSeek-V4): the residual is `streams` copies of the embedding. Before a
// block, weights from the normed copies (through the block's own small matrix) mix them into the
// block's input; after it, each copy becomes the block's output times a weight plus a
// Sinkhorn-normalized mix of the copies. The head mixes them once more. 0: a plain residual.
struct HyperConnectionParams {
  int64_t streams = 0;
  int64_t sinkhorn_iterations = 0;
  float epsilon = 0;
};

struct HyperParams {
  std::string architecture;
  int64_t layers = 0;        // the layers a pass runs
  int64_t nextn_layers = 0;  // next-token-prediction layers after them in the file: bound, not run
  int64_t embedding = 0;
  int64_t vocab = 0;
  int64_t context_length = 0;  // the context the model was trained for
  int64_t heads = 0;
  int64_t kv_heads = 0;       // GQA: the most KV heads any layer has (GqaWeights::kv_heads: each layer's)
  int64_t head_dim = 0;       // GQA's query and key heads; MLA: nope_dim + rope_dim
  int64_t value_dim = 0;      // GQA's value heads (attention.value_length; MiMo's are narrower than its keys)
  float attention_scale = 0;  // what q.k is multiplied by before the softmax
  float value_scale = 1.0f;   // what attention's output (after attn_output) is multiplied by (mimo2)
  MlaParams mla;
  IndexerParams indexer;        // layers of AttentionKind::kSparseMla
  DeltaNetParams delta_net;     // layers of AttentionKind::kDeltaNet
  CompressedParams compressed;  // layers of AttentionKind::kCompressed
  HyperConnectionParams hyper;
  int64_t feed_forward = 0;  // the dense FFN's width (layers of FfnKind::kDense)
  int64_t experts = 0;       // routed experts of each MoE layer; 0: no MoE layer
  int64_t experts_used = 0;
  int64_t expert_feed_forward = 0;  // one routed expert's width
  int64_t shared_feed_forward = 0;  // the shared experts' width together; 0: none
  RouterParams router;
  cpu::ExpertActivation activation;         // of the routed experts (SwiGLU, or gpt-oss's clamped one)
  cpu::ExpertActivation shared_activation;  // of the shared experts and dense FFNs (DeepSeek-V4 limits them)
  // Sliding-window attention: a windowed layer's token at position p attends positions
  // (p - sliding_window, p] only, and its cache keeps only what later tokens can still see
  // (window_cells). 0: no layer is windowed.
  int64_t sliding_window = 0;
  float rms_epsilon = 1e-6f;
  Pooling pooling = Pooling::kNone;  // the file's pooling type: what embeddings use unless asked otherwise
  cpu::RopeParams rope;              // freq_factors points into the mapping when the model has them
  // The rotation of windowed layers: `rope` but where the family gives them a base of their own
  // (mimo2's rope.freq_base_swa).
  cpu::RopeParams windowed_rope;
  int32_t bos_token = -1;
  int32_t eos_token = -1;
};

// A SwiGLU FFN: down(silu(gate x) * up x).
struct SwigluWeights {
  cpu::WeightMatrix gate, up, down;
  bool empty() const { return gate.empty(); }
};

struct GqaWeights {
  cpu::WeightMatrix q, k, v;
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;  // RMS norms of queries and keys, per head or (qk_norm_whole) per row
  const float* k_norm = nullptr;
  bool qk_norm_whole = false;  // the norms span each row's whole projection, all heads at once (MiniMax-M2)
  int64_t kv_heads = 0;        // this layer's KV heads (mimo2's windowed and full layers differ)
  // Each head of q's output is [query, gate] (Qwen3-Next, Qwen3.5): the attention's output is
  // multiplied by sigmoid(gate) before attn_output.
  bool output_gate = false;
};

// Gated DeltaNet's weights. The input projections come as qkv (the convolution's channels)
// and z (the output gate), or (Qwen3-Next's first files) as one qkvz with each key head's parts
// together: [q, k, its values, their z] per key head. Beta and alpha come apart (Qwen3.5) or as
// one beta_alpha (Qwen3-Next) of [its betas, its alphas] per key head. Empty: the other form.
struct DeltaNetWeights {
  cpu::WeightMatrix qkv, z, qkvz;
  cpu::WeightMatrix beta, alpha, beta_alpha;
  const float* conv = nullptr;     // [channels][conv_kernel]
  const float* dt_bias = nullptr;  // per value head, added to alpha
  const float* a = nullptr;        // per value head: -exp(A_log), the decay's rate
  const float* norm = nullptr;     // head_dim: the RMS norm of each head's output
};

struct MlaWeights {
  cpu::WeightMatrix q_a;  // embedding -> q_lora_rank (empty without q_lora_rank)
  const float* q_a_norm = nullptr;
  cpu::WeightMatrix q;     // q_lora_rank (or embedding) -> heads * (nope_dim + rope_dim)
  cpu::WeightMatrix kv_a;  // embedding -> kv_lora_rank + rope_dim
  const float* kv_a_norm = nullptr;
  cpu::ExpertMatrices k_b;  // per head: nope_dim -> kv_lora_rank (absorbed into the query)
  cpu::ExpertMatrices v_b;  // per head: kv_lora_rank -> value_dim
};

// A lightning indexer's weights (AttentionKind::kSparseMla). A layer without its own (`q` empty:
// GLM-5's shared layers) attends the positions the last layer with one selected.
struct IndexerWeights {
  cpu::WeightMatrix q;            // q_lora_rank -> heads * head_dim, from MLA's normed low-rank query
  cpu::WeightMatrix k;            // embedding -> head_dim
  const float* k_norm = nullptr;  // the key's layer norm: weight and bias
  const float* k_norm_bias = nullptr;
  cpu::WeightMatrix head_weights;  // embedding -> heads: each head's weight in a position's score
  bool own() const { return !q.empty(); }
};

// A compressor (AttentionKind::kCompressed): each position's value and score rows (kv, gate: of
// 2 x width for overlapping blocks, else width), the score's bias by place in its block
// (position_bias: ratio rows of the rows' width, F16 in the released files), and the compressed
// rows' RMS norm.
struct CompressorWeights {
  cpu::WeightMatrix kv, gate;
  cpu::WeightMatrix position_bias;
  const float* norm = nullptr;
  bool empty() const { return kv.empty(); }
};

// DeepSeek-V4's attention's weights (AttentionKind::kCompressed).
struct CompressedWeights {
  cpu::WeightMatrix q_a;  // embedding -> q_lora_rank
  const float* q_a_norm = nullptr;
  cpu::WeightMatrix q_b;  // q_lora_rank -> heads * head_dim
  cpu::WeightMatrix kv;   // embedding -> head_dim
  const float* kv_norm = nullptr;
  // Positions a compressed row takes (CompressedParams::ratios): 0 (the window alone; a
  // next-token-prediction layer's), kOverlapRatio (overlapping blocks, indexed) or 128.
  int64_t ratio = 0;
  CompressorWeights compressor;          // empty for layers of ratio 0
  CompressorWeights indexer_compressor;  // the indexer's keys (layers of kOverlapRatio)
  cpu::WeightMatrix indexer_q;           // q_lora_rank -> indexer heads * head_dim
  cpu::WeightMatrix indexer_weights;     // embedding -> indexer heads
  cpu::ExpertMatrices output_a;          // per group: heads / groups * head_dim -> output_rank
  cpu::WeightMatrix output_b;            // groups * output_rank -> embedding (AttentionWeights::output)
};

// A block's hyper-connection weights (HyperConnectionParams): `mix` maps the normed streams
// (streams x embedding) to (2 + streams) x streams values: the input weights, the output weights
// and the streams' mix, each scaled by its `scale` and offset by `base`.
struct HyperConnectionWeights {
  cpu::WeightMatrix mix;
  const float* base = nullptr;
  const float* scale = nullptr;
};

struct AttentionWeights {
  AttentionKind kind = AttentionKind::kGqa;
  bool windowed = false;  // attends the last HyperParams::sliding_window positions only
  const float* norm = nullptr;
  GqaWeights gqa;
  MlaWeights mla;
  IndexerWeights indexer;  // kSparseMla
  DeltaNetWeights delta_net;
  CompressedWeights compressed;
  HyperConnectionWeights hyper;  // the residual streams' mix around the block (HyperConnectionParams)
  // Learned attention sinks (gpt-oss), one logit per query head: a softmax entry with no value,
  // which takes its share of each head's weights. Null: none.
  const float* sinks = nullptr;
  cpu::WeightMatrix output;
  const float* output_bias = nullptr;
};

// The routed experts of an MoE FFN: the router, and one SwiGLU per expert in three stacks.
struct RoutedExperts {
  cpu::WeightMatrix router;
  const float* router_bias = nullptr;     // added to the router's logits (gpt-oss)
  const float* selection_bias = nullptr;  // added to the weights to choose experts (not to weight them)
  cpu::ExpertMatrices gate, up, down;
  cpu::ExpertBiases biases;  // per-expert biases of gate, up and down (gpt-oss); null: none
  // Hash routing (DeepSeek-V4's first layers): each token's experts by its id (experts_used per
  // token), weighted by the gating function of the router's logits. Null: the router chooses.
  const int32_t* token_experts = nullptr;
  bool empty() const { return gate.count == 0; }
};

struct FfnWeights {
  FfnKind kind = FfnKind::kDense;
  const float* norm = nullptr;
  SwigluWeights dense;   // kDense: the FFN; kMoe: the shared experts (empty when the model has none)
  RoutedExperts routed;  // kMoe
  // One row: the shared experts' output is scaled by sigmoid(shared_gate x) (Qwen3-Next, Qwen3.5).
  cpu::WeightMatrix shared_gate;
  HyperConnectionWeights hyper;  // the residual streams' mix around the block (HyperConnectionParams)
};

struct LayerWeights {
  AttentionWeights attention;
  FfnWeights ffn;
};

// A next-token-prediction (MTP) layer: its blocks, and its own weights around them (llama.cpp's
// nextn): the token's embedding and the previous hidden state, each normed, concatenated and
// projected to the embedding, then the blocks, then a head (by default the model's own).
// The hidden state a next-token-prediction layer takes with the next token (and passes on to the
// next drafted token, its own): after the model's output norm and the layer's head norm (GLM,
// DeepSeek-V3, Qwen3.5), before them (MiMo-V2), or the hyper-connection streams before the head
// mixes them (DeepSeek-V4: streams x embedding floats).
enum class NextnHidden : uint8_t { kNormed, kBeforeNorm, kStreams };

struct NextnLayer {
  LayerWeights blocks;
  cpu::WeightMatrix eh_proj;  // 2 x embedding -> embedding
  const float* enorm = nullptr;
  const float* hnorm = nullptr;
  cpu::WeightMatrix embed_tokens;           // empty: the model's token embedding
  cpu::WeightMatrix shared_head;            // empty: the model's output matrix
  const float* shared_head_norm = nullptr;  // null: the model's output norm
  NextnHidden hidden = NextnHidden::kNormed;
};

// A reranker's classification head (Pooling::kRank): one row of the sequence's hidden states,
// times `output` (cls.output: one row per label), plus its bias, then a softmax over the labels
// where the family's head asks for one. Empty `output`: the model is no reranker.
struct RankHead {
  cpu::WeightMatrix output;
  const float* output_bias = nullptr;
  bool last_row = false;  // the head reads the last row (else the first, a BERT-style CLS row)
  bool softmax = false;
  bool empty() const { return output.empty(); }
};

struct Model {
  explicit Model(gguf::GgufFile gguf) : file(std::move(gguf)) {}

  gguf::GgufFile file;
  HyperParams params;
  cpu::WeightMatrix token_embedding;
  std::vector<LayerWeights> layers;      // the layers a pass runs
  std::vector<NextnLayer> nextn_layers;  // the next-token-prediction layers after them (not run)
  const float* output_norm = nullptr;
  cpu::WeightMatrix output;  // token_embedding when the model ties them
  // The hyper-connection streams' mix before the output norm (input weights only): `mix` maps the
  // normed streams to `streams` values.
  HyperConnectionWeights output_hyper;
  RankHead rank_head;
};

// What one position of one layer keeps in the KV cache, in f16 elements. A layer of MLA caches
// its latent and rotary key as the key row and no value row: its values are the key row's
// first kv_lora_rank elements. A model with a lightning indexer keeps its key after them
// (indexer_key_offset), so the cache, session states and the footprint hold it with the row.
struct CacheRow {
  int64_t keys = 0;
  int64_t values = 0;
};
CacheRow cache_row(const HyperParams& params);
// A layer of AttentionKind::kCompressed: the f16 elements of one compressed row (the compressed
// key, then for overlapping blocks the indexer's compressed key); 0 for other layers. The same
// for a layer of `ratio` (CompressedWeights::ratio).
int64_t compressed_row_width(const HyperParams& params, int64_t layer);
int64_t compressed_width_at_ratio(const HyperParams& params, int64_t ratio);
// Where in a key row the lightning indexer's key lies: after MLA's latent and rotary key.
int64_t indexer_key_offset(const HyperParams& params);

// Windowed layers keep positions from a multiple of this on: their attention rows then start
// where llama.cpp's SIMD blocks do, so a windowed row rounds as llama.cpp's masked full row.
inline constexpr int64_t kWindowAlign = 64;
// Rows a pass stores into a windowed layer at once (attention runs over them in slices).
inline constexpr int64_t kWindowSlice = 256;
// Positions a windowed layer's cache holds for a context of `context`: the window, its
// alignment and one slice, never more than the context.
int64_t window_cells(const HyperParams& params, int64_t context);
// The first position a windowed layer must still hold for a sequence to go on from position
// `n` (0 when every layer keeps every position): the aligned start of the window before n.
int64_t window_floor(const HyperParams& params, int64_t n);
// Per layer of the pass, 1 for a sliding-window layer.
std::vector<uint8_t> windowed_layers(const Model& model);
// Positions layer `layer` keeps for a context of `context` (its KV cache's rows; 0 for a layer
// of linear attention, which keeps a recurrent state instead).
int64_t cache_positions(const Model& model, int64_t layer, int64_t context);
// Whether any layer keeps a recurrent state (which cannot be cut back to an earlier position):
// linear attention's, or a compressor's (the rows of the blocks it has not compressed yet).
bool has_recurrent_layers(const Model& model);
// Whether any layer attends positions a lightning indexer selects (AttentionKind::kSparseMla).
bool has_sparse_attention(const Model& model);

// Opens a GGUF file and binds its weights. Throws Error with UNSUPPORTED_ARCH (an
// architecture we do not serve), UNSUPPORTED_FEATURE (a feature of the file we do not serve,
// naming its key), UNSUPPORTED_QUANT (naming the tensor), MODEL_MISSING_TENSOR,
// MODEL_TENSOR_SHAPE, MODEL_BAD_METADATA (naming the key), or the reader's GGUF_* codes.
// `map` says how the file's bytes are held (gguf::MapOptions: mmap, mlock).
std::unique_ptr<Model> load_model(const std::string& path, const gguf::MapOptions& map = {});

// The architectures load_model serves.
std::vector<std::string> supported_architectures();

}  // namespace bloomery::model
