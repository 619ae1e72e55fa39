// The CUDA ops the engine's GPU pass is made of, as plain C++ launchers (implemented in
// the .cu file of each op family). They take device pointers and shapes, never a model:
// the engine (engine/gpu_forward.cc) says which tensors go where. Every launcher queues
// work on `stream` and returns; shapes are checked by the caller at load.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "cuda/runtime.h"

namespace bloomery::cuda {

// Activations quantized for the integer dots: 32 values and their scale (for Q8_K, the
// eight blocks of 256 values share its one scale; see quantize.cu).
struct ActivationBlock {
  int8_t qs[32];
  union {
    float d;
    // Q8_1 (the activations of Q4_1 and Q5_1, whose offsets need the block's sum): the scale in
    // the low half and d * the sum of qs in the high one, both halves as the CPU keeps them.
    uint32_t d_and_sum;
  };
};

// A weight matrix in device memory: `rows` rows of `cols` elements of ggml type `type`,
// `row_bytes` apart; for expert stacks, `count` such matrices `matrix_bytes` apart.
struct DeviceMatrix {
  uint32_t type = 0;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  size_t matrix_bytes = 0;
  int64_t count = 1;
};

// Weight types whose matrices the matvec kernels multiply: quantized ones read
// ActivationBlock rows, float ones (F32, F16, BF16) read float rows.
bool matvec_supports(uint32_t type);
bool is_float_type(uint32_t type);
// Types the embedding lookup dequantizes.
bool embedding_supports(uint32_t type);

// --- quantize.cu ---
// How activations are quantized for a weight type's dots: the CPU's pairing (quant/kernels.h).
enum class ActivationFormat {
  kQ8_0,  // a scale per 32 values
  kQ8_1,  // the same, and the block's sum
  kQ8_K,  // one scale per 256 values
};
// Throws UNSUPPORTED_QUANT for a type without integer dots.
ActivationFormat activation_format(uint32_t weight_type);
// n rows of `cols` floats -> n rows of cols / 32 blocks, quantized as the CPU does for weights
// of `weight_type` (cols a multiple of 256 for the formats of 256-value blocks, of 32 for the others).
void quantize_activations(const float* x, int64_t n, int64_t cols, uint32_t weight_type, ActivationBlock* out,
                          StreamHandle stream);

// --- matvec.cu ---
// The activation of a product: float rows for float weights; for quantized ones, blocks, or
// (where quantizes_input allows) just the float rows, which the product quantizes itself as
// quantize_activations would, saving a launch per product of a decode step.
struct MatvecInput {
  const float* floats = nullptr;
  const ActivationBlock* blocks = nullptr;
};
// Whether a quantized product quantizes float input rows of `cols` itself: when each of its
// blocks reads one row (a dense product of n = 1 rows, an expert product of tokens_per_chunk 1).
bool quantizes_input(int64_t rows_per_block, int64_t cols);
// Whether a product of one row through `weight_rows` rows of `cols` weights of `type` (in all, over
// the launch's matrices or experts) should take the row as floats (quantizes_input) rather than
// after a quantize launch: while the product is small.
bool quantizes_one_row(uint32_t type, int64_t cols, int64_t weight_rows);

// y[i] (+)= w x[i] for n rows (y rows of w.rows floats). `accumulate` adds into y.
void matvec(const DeviceMatrix& w, const MatvecInput& x, int64_t n, float* y, bool accumulate, StreamHandle stream);

// One of several products of one input (matvecs).
struct MatvecProduct {
  const DeviceMatrix* w = nullptr;
  float* y = nullptr;
  bool accumulate = false;
};
// matvec of each product's matrix by the one input x (in the format every product's type
// reads): matrices of one quantized type and width share a launch, so a layer's q, k and v
// take one or two launches, not three.
void matvecs(std::span<const MatvecProduct> products, const MatvecInput& x, int64_t n, StreamHandle stream);

// How a gated product joins gate and up (cpu::ActivationKind): silu(gate) * up; gpt-oss's clamped
// SwiGLU (cpu::clamped_swiglu: alpha and limit); DeepSeek-V4's limited SwiGLU
// (cpu::limited_swiglu: limit).
struct GatedActivation {
  enum class Kind : uint8_t { kSwiglu, kClamped, kLimited };
  Kind kind = Kind::kSwiglu;
  float alpha = 0.0f;
  float limit = 0.0f;
};

// y[i] = activation(gate x[i], up x[i]) (silu(gate x[i]) * (up x[i]) by default): an FFN's fused
// first half. gate and up share a quantized type (see gated_matvec_supports).
bool gated_matvec_supports(const DeviceMatrix& gate, const DeviceMatrix& up);
void gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const ActivationBlock* x, int64_t n, float* y,
                  StreamHandle stream, const GatedActivation& activation = {});

// Rows grouped by expert (moe.cu builds them): `order` lists routed slots (row * used + k)
// expert by expert; each chunk {expert, first, count} covers at most `tokens_per_chunk`
// of them. Chunk tables live in device memory so a decode step needs no host round trip.
struct ExpertGroups {
  const int32_t* order = nullptr;
  const int32_t* chunks = nullptr;  // 3 ints per chunk
  const int32_t* chunk_count = nullptr;
  int64_t max_chunks = 0;
  int tokens_per_chunk = 1;
};

// What a routed expert's products add to their dot products (gpt-oss's experts; the default adds
// nothing): per-expert biases, each `rows` floats of the product's outputs expert after expert
// (device memory, indexed by the slot's expert in `chosen`, so they stay put when residency moves
// an expert to another slot), then gated products join gate and up by `activation`. As the CPU's
// moe_run_experts: each bias added to its product, then the activation.
struct ExpertEpilogue {
  const int32_t* chosen = nullptr;  // routed slot -> expert (with any bias)
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  GatedActivation activation;
};

// For each routed slot s: hidden[s] = silu(gate_e x[s / used]) * (up_e x[s / used]). gate and
// up share a type (quantized: x's blocks; float: its float rows).
void expert_gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const MatvecInput& x, int64_t used,
                         const ExpertGroups& groups, float* hidden, StreamHandle stream,
                         const ExpertEpilogue& epilogue = {});
// For each routed slot s: out[s] = down_e hidden[s].
void expert_matvec(const DeviceMatrix& down, const MatvecInput& hidden, const ExpertGroups& groups, float* out,
                   StreamHandle stream, const ExpertEpilogue& epilogue = {});

// --- float_experts.cu: the two above for stacks of a float type ---
void float_expert_gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const float* x, int64_t used,
                               const ExpertGroups& groups, float* hidden, StreamHandle stream,
                               const ExpertEpilogue& epilogue);
void float_expert_matvec(const DeviceMatrix& down, const float* hidden, const ExpertGroups& groups, float* out,
                         StreamHandle stream, const ExpertEpilogue& epilogue);
// --- mmq.cu: the same products for prompt batches, as tiles on the integer tensor cores ---
// Batches from kMmqMinRows rows on take the tiled products (a tile's worth of rows: below it,
// the tiles would run mostly empty and the matvec's many small blocks fill the GPU better).
inline constexpr int64_t kMmqMinRows = 64;
// Routed slots per chunk that the expert tiles take (ExpertGroups::tokens_per_chunk at most this).
inline constexpr int kMmqTileTokens = 64;
// Whether the tiled products serve weights of `type` for a batch of n rows.
bool mmq_serves(uint32_t type, int64_t n);
// As matvec, gated_matvec, expert_gated_matvec and expert_matvec, for quantized weights of a
// type mmq_serves (any n: the threshold is the caller's choice).
void mmq(const DeviceMatrix& w, const ActivationBlock* x, int64_t n, float* y, bool accumulate, StreamHandle stream);
void gated_mmq(const DeviceMatrix& gate, const DeviceMatrix& up, const ActivationBlock* x, int64_t n, float* y,
               StreamHandle stream, const GatedActivation& activation = {});
void expert_gated_mmq(const DeviceMatrix& gate, const DeviceMatrix& up, const ActivationBlock* x, int64_t used,
                      const ExpertGroups& groups, float* hidden, StreamHandle stream,
                      const ExpertEpilogue& epilogue = {});
void expert_mmq(const DeviceMatrix& down, const ActivationBlock* hidden, const ExpertGroups& groups, float* out,
                StreamHandle stream, const ExpertEpilogue& epilogue = {});

// --- float_mmq.cu: float weights for prompt batches, on the f16/bf16 tensor cores ---
// Whether the float tiles serve `w`: F16 or BF16 rows of a multiple of 64 columns.
bool float_mmq_serves(const DeviceMatrix& w);
// y[i] (+)= w x[i] for n float rows, as matvec computes it for such weights (the activations
// rounded to the weight type, exact products), its f32 sums in another order.
void float_mmq(const DeviceMatrix& w, const float* x, int64_t n, float* y, bool accumulate, StreamHandle stream);

// --- moe.cu ---
// How the router turns a row's logits into its experts and their weights, as the CPU's
// cpu::route does: the gating's weights (cpu::Gating: softmax, sigmoid, DeepSeek-V4's square root
// of softplus; or gpt-oss's softmax over the chosen); `selection_bias` (device, one per expert, or
// null) added to them only to choose; the best `groups_used` of `groups` expert groups (each
// scored by its two best) alone compete; the `used` best, their weights normalized to sum to one
// or not, then scaled.
struct RouterSpec {
  enum class Gating : uint8_t { kSoftmax, kSigmoid, kSoftmaxSelected, kSqrtSoftplus };
  Gating gating = Gating::kSoftmax;
  bool normalize = false;
  float scale = 1.0f;
  int groups = 1;
  int groups_used = 1;
  const float* selection_bias = nullptr;
  // gpt-oss (kSoftmaxSelected): the top logits choose and a softmax over the chosen ones weights
  // them (no gating over all experts), after router_bias (one per expert, or null) is added to
  // the logits.
  const float* router_bias = nullptr;
  // Benchmarks (engine/routing_replay.h): each row's experts as given here ([row][used]), each weighted
  // scale / used, instead of the router's choice.
  const int32_t* replay = nullptr;
  // Hash routing (DeepSeek-V4's first layers): row r's experts are token_experts[tokens[r] *
  // used ...] (device), weighted by the gating as the router would weight them.
  const int32_t* token_experts = nullptr;
  const int32_t* tokens = nullptr;
};
// The `used` best experts of each row (in order) and their weights.
void route_top_k(const float* logits, int64_t n, int64_t experts, int64_t used, const RouterSpec& router,
                 int32_t* chosen, float* weights, StreamHandle stream);
// One rewrite of a layer's expert->slot table: slot_of_expert[expert] = slot.
struct SlotWrite {
  int32_t* slot_of_expert;
  int32_t expert;
  int32_t slot;
};
// The writes in order, in stream order: how adaptive residency retires and seats experts. A step's
// writes take one launch (a few for hundreds), not one each.
void set_expert_slots(std::span<const SlotWrite> writes, StreamHandle stream);
// Tokens per chunk the matvec kernels take for a pass of n rows (the tiled products take
// kMmqTileTokens), and the most chunks a grouping of n rows in chunks of `tokens_per_chunk` makes.
int tokens_per_expert_chunk(int64_t n);
int64_t max_expert_chunks(int64_t n, int64_t experts, int64_t used, int tokens_per_chunk);
// Groups the n * used routed slots of GPU-resident experts by expert (order, chunks,
// chunk_count: see ExpertGroups). `slot_of_expert` (device, one per expert) says where each
// expert's weights sit in the layer's slot pool, -1 for an expert in host memory: chunks name
// slots, so the expert kernels read the pool, and a swap only rewrites this table.
void group_by_expert(const int32_t* chosen, int64_t n, int64_t experts, int64_t used, const int32_t* slot_of_expert,
                     int tokens_per_chunk, int32_t* order, int32_t* chunks, int32_t* chunk_count, StreamHandle stream);
// route_top_k then group_by_expert (`tokens_per_chunk` per chunk); a single row (a decode
// step, one token per chunk) in one launch. counts[e] += the number of the n * used routed
// slots that chose expert e (device counters, wrapping: adaptive residency reads their
// differences between passes).
void route_and_group(const float* logits, int64_t n, int64_t experts, int64_t used, const RouterSpec& router,
                     const int32_t* slot_of_expert, int tokens_per_chunk, int32_t* chosen, float* weights,
                     uint32_t* counts, int32_t* order, int32_t* chunks, int32_t* chunk_count, StreamHandle stream);
// A decode step's router product (float weights: logits = router x, as matvec computes them, for
// n <= kMaxRouteDecodeRows rows) and route_and_group of its rows in one launch: the last of the
// router's blocks routes and groups. `ticket`: a device counter, zero between launches (the
// launch leaves it zero).
inline constexpr int64_t kMaxRouteDecodeRows = 8;
void route_decode(const DeviceMatrix& router, const float* x, int64_t n, int64_t experts, int64_t used,
                  const RouterSpec& spec, const int32_t* slot_of_expert, int tokens_per_chunk, float* logits,
                  int32_t* chosen, float* weights, uint32_t* counts, int32_t* order, int32_t* chunks,
                  int32_t* chunk_count, uint32_t* ticket, StreamHandle stream);
// residual[i] += sum over k of weights[i, k] * expert_out[i * used + k], in k order, over the
// GPU-resident experts (slot_of_expert[chosen[i, k]] >= 0). rms_norm can add the same sum
// itself (RmsNorm::pending).
void combine_experts(const float* expert_out, const float* weights, const int32_t* chosen,
                     const int32_t* slot_of_expert, int64_t n, int64_t used, int64_t width, float* residual,
                     StreamHandle stream);

// --- handoff.cu: the GPU's side of a hybrid pass, through flags in mapped host memory ---
// Each pass bumps a step counter in device memory; a flag set to the current step means
// "this layer's data is there". Graph replays need no new parameters: kernels read the step.
void begin_handoff_step(uint32_t* step, StreamHandle stream);
// A layer's routed rows (device) and where they go in mapped host memory.
struct HandoffRows {
  const float* rows = nullptr;      // `count` floats
  const int32_t* chosen = nullptr;  // `routed` experts and weights
  const float* weights = nullptr;
  int64_t count = 0, routed = 0;
  float* host_rows = nullptr;
  int32_t* host_chosen = nullptr;
  float* host_weights = nullptr;
};
// Copies `rows` to host memory, then sets *flag (mapped) to the step. `blocks_done`: a device
// counter, zero between calls.
void publish_to_host(const HandoffRows& rows, const uint32_t* step, uint32_t* flag, uint32_t* blocks_done,
                     StreamHandle stream);
void add_from_host(const uint32_t* step, const uint32_t* flag, uint64_t* waited_ns, const float* host_rows,
                   int64_t count, float* residual, StreamHandle stream);

// --- norm.cu ---
// The weighted sum of a MoE layer's GPU-resident experts (combine_experts' operands), for an
// op that adds it into its input rows itself.
struct ExpertSum {
  const float* expert_out = nullptr;  // none: nothing to add
  const float* weights = nullptr;
  const int32_t* chosen = nullptr;
  const int32_t* slot_of_expert = nullptr;
  int64_t used = 0;
};

// out[r] = x[r] / rms(x[r]) * weight (no weight: none) for `rows` rows of `width` floats (contiguous). With
// `pending` set, first x[r] += the expert sum, in place and rounded as combine_experts adds it.
// With `blocks` set, the normed rows are also quantized for weights of type `blocks_for`, as
// quantize_activations would quantize `out` (in activation_format(blocks_for): width a multiple
// of 256 for Q8_K, of 32 for Q8_0 and Q8_1), so the first product after a norm needs no quantize launch.
struct RmsNorm {
  float* x = nullptr;
  int64_t rows = 0;
  int64_t width = 0;
  const float* weight = nullptr;
  float eps = 0.0f;
  float* out = nullptr;
  ExpertSum pending;
  ActivationBlock* blocks = nullptr;
  uint32_t blocks_for = 0;
};
void rms_norm(const RmsNorm& norm, StreamHandle stream);

// --- elementwise.cu ---
// out = activation(gate, up) (silu(gate) * up by default), elementwise over `count` floats.
void swiglu(const float* gate, const float* up, int64_t count, float* out, StreamHandle stream,
            const GatedActivation& activation = {});
// residual[r] += (projected[r] + bias) * scale for `rows` rows of `width` floats (bias: `width`
// floats, or none): an attention output's bias and scale, rounded as the CPU path's add_bias, the
// value scale's multiply, then add_into (engine/forward.cc).
void add_projection(const float* projected, int64_t rows, int64_t width, const float* bias, float scale,
                    float* residual, StreamHandle stream);

// --- rope.cu ---
// The rotation, as cpu::RopeParams and cpu::RopeConstants give it (the host computes the
// constants, with the host's libm, as the CPU path does).
struct RopeShape {
  bool neox = false;
  int64_t dims = 0;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // device, dims / 2, or none
  float ext_factor = 0.0f;              // YaRN's; 0: none
  float theta_scale = 1.0f;
  float ramp_low = 0.0f, ramp_high = 0.0f;
  float mscale = 1.0f;
  // cpu::RopeParams::sections (interleaved multi-axis rope at text positions: a pair whose sector
  // falls in the fourth axis takes angle 0); all zero: plain rope.
  int sections[4] = {};
};
// Where position_heads also writes the k and v rows, as f16 (as llama.cpp keeps them): the rows
// of segment s, [first_row[s], first_row[s + 1]), into one sequence's cache of the layer
// (keys[s], values[s]: rows of AttentionHeads' key_row and value_row), row i at positions[i].
constexpr int kMaxKvSegments = 8;
struct KvSegments {
  int count = 0;  // 0: no cache writes
  int first_row[kMaxKvSegments + 1] = {};
  uint16_t* keys[kMaxKvSegments] = {};
  uint16_t* values[kMaxKvSegments] = {};
};
// A layer's q, k and v rows (n rows each; q of `heads`, k of `kv_heads` heads of `head_dim`, v
// of `kv_heads` heads of value_dim) made ready for attention in one launch, as the CPU path does it step by step
// (engine/forward.cc): each plus its bias (when set), q and k heads RMS-normed by q_norm and
// k_norm (when set; `head_dim` weights, epsilon `eps`), then rotated, row i sitting at
// positions[i]. In place; with `cache`, k and v also go to the KV cache (the rows of at most
// kMaxKvSegments sequences a launch).
struct AttentionHeads {
  float* q = nullptr;
  float* k = nullptr;
  float* v = nullptr;
  const float* q_bias = nullptr;
  const float* k_bias = nullptr;
  const float* v_bias = nullptr;
  const float* q_norm = nullptr;
  const float* k_norm = nullptr;
  float eps = 0.0f;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;   // at most 256
  int64_t value_dim = 0;  // the v heads' width (0: head_dim)
  // The cache's row widths, as AttentionShape's key_row and value_row (0: kv_heads times the head widths).
  int64_t key_row = 0, value_row = 0;
  KvSegments cache;
};
void position_heads(const AttentionHeads& h, int64_t n, const int32_t* positions, const RopeShape& shape,
                    StreamHandle stream);
// x: n rows of `heads` heads of head_dim floats, in place: each head's last rope.dims values
// rotated at its row's position (DeepSeek-V4's queries and keys), or with `inverse` back by the
// opposite angle (its attention's outputs), as cpu::rope_apply with the sines negated for that.
void rotate_tails(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* positions, const RopeShape& rope,
                  bool inverse, StreamHandle stream);

// --- latent.cu: multi-head latent attention's heads, as the CPU path makes them ---
// q: n rows of `heads` heads of nope + rope.dims floats -> nope_out: n * heads rows of `nope`
// (row token * heads + head), rope_out: n * heads rows of the rotated rope.dims values.
void split_latent_query(const float* q, int64_t n, int64_t heads, int64_t nope, const int32_t* positions,
                        const RopeShape& rope, float* nope_out, float* rope_out, StreamHandle stream);
// kv: n rows of [latent (rank), rotary key (rope.dims)]: the latent RMS-normed by `norm` (epsilon
// `eps`), the key rotated, both stored as f16 at the start of the row's cache row (cache.keys;
// rows of key_row halves) at its position.
void store_latent(const float* kv, int64_t n, int64_t rank, const float* norm, float eps, const int32_t* positions,
                  const RopeShape& rope, const KvSegments& cache, int64_t key_row, StreamHandle stream);

// x: n rows of `width` floats stored as f16 at the start of each row's cache row (cache.keys; rows
// of key_row halves) at its position (DeepSeek-V4's keys, normed and rotated already).
void store_rows(const float* x, int64_t n, int64_t width, const int32_t* positions, const KvSegments& cache,
                int64_t key_row, StreamHandle stream);

// --- attention_latent.cu ---
// Multi-head latent attention with the up-projections absorbed: rows of n tokens x heads
// (row token * heads + head), each query [q_latent (rank), q_rope (rope)] against the cache's
// f16 rows [latent, rotary key] of positions [0, positions[token]], the values being the
// latents; out: rows of rank floats. The rounding is causal_attention's. Sparse (`selected` set):
// token t attends only positions selected[t * top_k ...], the first min(positions[t] + 1, top_k)
// of them (a lightning indexer's choice, lightning_indexer.cu).
struct LatentAttention {
  const float* q_latent = nullptr;
  const float* q_rope = nullptr;
  const int32_t* positions = nullptr;  // per token
  const uint16_t* cache = nullptr;
  int64_t key_row = 0;  // halves from one cache row to the next (a multiple of 8); 0: rank + rope
  const int32_t* selected = nullptr;
  int64_t top_k = 0;
  int64_t n = 0;
  int64_t heads = 0;
  int64_t rank = 0;
  int64_t rope = 0;
  float scale = 1.0f;
  int64_t cache_positions = 0;  // the cache's capacity: a decode step's grid covers it
  float* out = nullptr;
};
bool latent_attention_supports(int64_t rank, int64_t rope);
// Once per device before the first launch (outside a graph capture): the kernels' shared memory.
void prepare_latent_attention(int64_t rank, int64_t rope);
// Scratch for passes of up to `max_rows` tokens.
size_t latent_attention_scratch_bytes(int64_t heads, int64_t rank, int64_t cache_positions, int64_t max_rows);
void latent_attention(const LatentAttention& a, void* scratch, StreamHandle stream);

// --- lightning_indexer.cu: DeepSeek sparse attention's choice of positions ---
// The indexer's sizes: `heads` query heads of `head_dim` against one key of head_dim per
// `ratio` positions (DeepSeek-V4's indexer scores compressed rows: a token at position p sees keys
// [0, (p + 1) / ratio)), each token attending its top_k best-scored keys; `rope`: the rotation of
// the first rope.dims of each head (the indexer's own style), or with `rope_tail` the last ones.
struct IndexerShape {
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t top_k = 0;
  RopeShape rope;
  int64_t ratio = 1;
  bool rope_tail = false;
};
// The most positions a token chooses on the GPU: the tie path's heap (a position and a score each)
// fits the 48 KiB of shared memory a launch has without asking.
constexpr int64_t kIndexerMaxTopK = 4096;
// Heads of 64 or 128 dims (at most 128 heads and 8192 query floats a token), at most
// kIndexerMaxTopK chosen.
bool indexer_supports(int64_t heads, int64_t head_dim, int64_t top_k);
// q: n rows of heads * head_dim floats, in place: each head rotated, then multiplied by the
// orthonormal Hadamard matrix of head_dim; row i at positions[i].
void indexer_queries(float* q, int64_t n, const IndexerShape& shape, const int32_t* positions, StreamHandle stream);
// k: n rows of head_dim floats, layer-normed (norm, bias, eps), rotated and multiplied by the
// Hadamard matrix, stored as f16 at key_offset of each row's cache row (rows of key_row halves).
void store_indexer_keys(const float* k, int64_t n, const IndexerShape& shape, const float* norm, const float* bias,
                        float eps, const int32_t* positions, const KvSegments& cache, int64_t key_row,
                        int64_t key_offset, StreamHandle stream);
// One sequence's rows: each token's score of every position it sees, sum over heads of
// max(q_h . k, 0) * weight_h * weight_scale, and its top_k best positions into
// selected[i * top_k ...] in position order (all it sees, then -1, where they are at most top_k).
struct IndexerSelect {
  const float* q = nullptr;        // n rows of heads * head_dim (indexer_queries')
  const float* weights = nullptr;  // n rows of heads
  float weight_scale = 1.0f;
  const int32_t* positions = nullptr;
  const uint16_t* keys = nullptr;  // position 0's key (its cache row plus key_offset)
  int64_t key_row = 0;
  int64_t n = 0;
  int64_t cache_positions = 0;  // the keys the cache can hold: the grid covers them
  int32_t* selected = nullptr;
};
// The scratch indexer_select keeps its scores in, for passes of up to max_rows tokens over caches
// of up to cache_positions: a row of scores for each token one launch selects for (all of them,
// unless a long cache would make that large; then fewer, as many as the budget holds).
size_t indexer_scratch_bytes(int64_t cache_positions, int64_t max_rows);
// `scratch` of scratch_bytes (indexer_scratch_bytes'): each launch takes as many tokens as it holds.
void indexer_select(const IndexerSelect& s, const IndexerShape& shape, void* scratch, size_t scratch_bytes,
                    StreamHandle stream);

// --- hyper_connections.cu: DeepSeek-V4's residual of several streams, as cpu/hyper_connections.h ---
struct HyperShape {
  int64_t streams = 0;  // at most 8
  int64_t width = 0;
  int64_t sinkhorn_iterations = 0;
  float epsilon = 0.0f;
};
// residual: n rows of `streams` copies of x's row (n rows of width), as the CPU spreads the embedding.
void spread_streams(const float* x, int64_t n, const HyperShape& shape, float* residual, StreamHandle stream);
// From n rows of (2 + streams) * streams mixes and the block's scale (3) and base: the input
// weights `pre` (n x streams), the output weights `post` (n x streams) and the streams' mix `comb`
// (n x streams x streams, [dst + streams * src]), as cpu::hyper_weights.
void hyper_weights(const float* mixes, int64_t n, const float* scale, const float* base, const HyperShape& shape,
                   float* pre, float* post, float* comb, StreamHandle stream);
// The head's input weights from n rows of `streams` mixes, as cpu::hyper_head_weights.
void hyper_head_weights(const float* mixes, int64_t n, const float* scale, const float* base, const HyperShape& shape,
                        float* pre, StreamHandle stream);
// out[i] = sum over streams of pre[i][s] * residual[i][s] (n rows of width), as cpu::hyper_pre.
void hyper_pre(const float* residual, const float* pre, int64_t n, const HyperShape& shape, float* out,
               StreamHandle stream);
// residual[i][dst] = x[i] * post[i][dst] + sum over src of residual[i][src] * comb[i][dst][src], in
// place, as cpu::hyper_post.
void hyper_post(const float* x, const float* post, const float* comb, int64_t n, const HyperShape& shape,
                float* residual, StreamHandle stream);

// --- compressor.cu: DeepSeek-V4's compressors, as engine/compressed_attention.cc runs them ---
// A compressor turns each block of `ratio` positions into one row of `dim`; with `overlap` (the
// indexed layers' blocks of 4) each position's values and scores are 2 * dim wide and a block
// also weighs the block before. Rows go to `offset` of the layer's compressed rows (row_stride
// halves apart), normed by eps, rotated over their last rope.dims at the block's first position,
// then (`hadamard`: the indexer's keys) multiplied by the Hadamard matrix.
struct CompressorShape {
  int64_t ratio = 0;
  int64_t dim = 0;
  bool overlap = false;
  int64_t offset = 0;
  int64_t row_stride = 0;
  bool hadamard = false;
  RopeShape rope;
  float eps = 0.0f;
};
bool compressor_supports(const CompressorShape& shape);
// scores: n rows of `width`; each += the F16 or F32 table's row for its position's place in its block.
void add_position_bias(float* scores, int64_t n, const int32_t* positions, const DeviceMatrix& table, int64_t ratio,
                       int64_t width, StreamHandle stream);
// One sequence's n rows (positions[0] on, consecutive): each block they complete compressed into
// `compressed` (its row block * row_stride), from these rows and the ring of earlier ones
// (`ring`: slots of [values, scores], 2 * ratio slots with overlap, else ratio), then the rows'
// last slots into the ring.
void compress_rows(const float* values, const float* scores, int64_t n, const int32_t* positions,
                   const CompressorShape& shape, const float* norm, float* ring, uint16_t* compressed,
                   StreamHandle stream);

// --- compressed_attention.cu: DeepSeek-V4's attention, as cpu::compressed_attention ---
// Each of n tokens' heads reads one key head whose keys are its values: the raw rows of the last
// `window` positions (position p's at raw + p * raw_row) and the compressed rows it sees (block
// b's at compressed + b * compressed_stride, seen from position (b + 1) * ratio - 1 on): all of
// them, or with `selected` those of the token's top_k entries (-1 or unseen: none), one softmax
// with each head's sink (sinks: one logit a head, or null).
struct CompressedAttention {
  const float* q = nullptr;  // n rows of heads * head_dim
  int64_t n = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  const int32_t* positions = nullptr;
  float scale = 1.0f;
  const uint16_t* raw = nullptr;
  int64_t raw_row = 0;
  int64_t window = 0;
  const uint16_t* compressed = nullptr;
  int64_t compressed_stride = 0;
  int64_t ratio = 0;  // 0: no compressed rows
  const int32_t* selected = nullptr;
  int64_t top_k = 0;
  const float* sinks = nullptr;
  float* out = nullptr;  // n rows of heads * head_dim
};
bool compressed_attention_supports(int64_t head_dim);
// Once per device before the first launch (outside a graph capture): the shared memory of the
// prompts' kernel, past the default limit.
void prepare_compressed_attention();
void compressed_attention(const CompressedAttention& a, StreamHandle stream);

// --- embed.cu ---
// out[i] = row tokens[i] of `table`, dequantized to floats.
void embed(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* out, StreamHandle stream);

// --- attention.cu ---
struct AttentionShape {
  int64_t heads = 0;
  int64_t kv_heads = 0;  // divides heads
  int64_t head_dim = 0;  // a multiple of 32, at most 256
  float scale = 1.0f;
  int64_t cache_positions = 0;  // positions the KV cache holds: the tiled kernels' grid of a decode step covers them
  // Sliding window: a row at position p attends (p - window, p] only (0: every earlier position).
  int64_t window = 0;
  // Learned sinks (device memory, one logit per query head): a softmax entry with no value (null: none).
  const float* sinks = nullptr;
  // Value heads narrower than the key heads (MiMo's; 0: head_dim), which the exact kernel serves.
  int64_t value_dim = 0;
  // The cache's row widths (a position's keys, its values) where they are wider than this layer's
  // heads: MiMo's layers have KV head counts of their own in rows sized for the most (0: kv_heads
  // times the head widths).
  int64_t key_row = 0, value_row = 0;
};
// `heads` (an AttentionShape or an AttentionHeads) with value_dim, key_row and value_row set
// where they were left 0.
template <typename Heads>
Heads with_cache_rows(Heads heads) {
  if (heads.value_dim == 0) heads.value_dim = heads.head_dim;
  if (heads.key_row == 0) heads.key_row = heads.kv_heads * heads.head_dim;
  if (heads.value_row == 0) heads.value_row = heads.kv_heads * heads.value_dim;
  return heads;
}
// Where attention may also write its output rows quantized for weights of `type`, as
// quantize_activations would (blocks: one row's worth per output row).
struct QuantizedRows {
  ActivationBlock* blocks = nullptr;
  uint32_t type = 0;
};
// Causal attention of n query rows, row i attending to cache positions [0, positions[i]] (all
// of them written; with a window, its last shape.window of them): the tiled kernels where they
// serve the head_dim, else the exact kernel.
// `scratch`: attention_scratch_bytes(shape, rows) of device memory for any n <= rows. A row's
// floats do not depend on the other rows of the batch. Returns whether `quantized` was written
// too: a decode step's few rows are (the launch that adds up the cache's segments quantizes
// them), a prompt's are not.
bool causal_attention(const float* q, int64_t n, const int32_t* positions, const uint16_t* keys, const uint16_t* values,
                      const AttentionShape& shape, void* scratch, float* out, StreamHandle stream,
                      const QuantizedRows& quantized = {});
// The same with the CPU path's roundings (cpu/attention.cc; its sums in sequence, not in the CPU's
// SIMD order), one block per row and head: the kernel for head dims the tiled kernels lack, and
// their reference.
void exact_causal_attention(const float* q, int64_t n, const int32_t* positions, const uint16_t* keys,
                            const uint16_t* values, const AttentionShape& shape, float* out, StreamHandle stream);

// --- attention_tiled.cu ---
// Tensor-core attention (f16 mma, f32 sums) for head_dim 64, 128 and 256, the cache's positions
// split over blocks when the batch is one row tile per KV head (a decode step). The CPU's f16
// roundings (query, normalized probabilities), a different order of float sums.
// Whether they serve `shape`: key and value heads of one width, 64, 128 or 256.
bool tiled_attention_serves(const AttentionShape& shape);
// Once per device before the first launch for heads of `head_dim` (outside a graph capture): the
// shared memory of 256-wide heads' kernels, past the default limit.
void prepare_tiled_attention(int64_t head_dim);
// Device memory the tiled kernels need for batches of up to `max_rows` rows over a cache of
// shape.cache_positions: every row's softmax statistics per segment of the cache, a decode
// step's partial outputs per segment, and the barriers of a decode step's blocks, which need
// the memory zeroed before its first use (a DeviceBuffer's is).
size_t attention_scratch_bytes(const AttentionShape& shape, int64_t max_rows);
bool tiled_causal_attention(const float* q, int64_t n, const int32_t* positions, const uint16_t* keys,
                            const uint16_t* values, const AttentionShape& shape, void* scratch, float* out,
                            const QuantizedRows& quantized, StreamHandle stream);
// A decode step of several sequences in one launch (and one launch adding up the cache's
// segments): sequence i's rows [first_row[i], first_row[i + 1]) of q, positions and out attend
// its own cache (keys[i], values[i]), a cache of up to shape.cache_positions. Each row's floats
// are tiled_causal_attention's for that sequence alone. Served for up to kMaxBatchedDecodeRows
// rows in all, each sequence's rows times the query heads per KV head within one 16-row tile
// (batched_attention_serves); `scratch` as attention_scratch_bytes.
// Returns whether `quantized` was written too.
constexpr int64_t kMaxBatchedDecodeRows = kMaxKvSegments;
bool batched_attention_serves(const AttentionShape& shape, const KvSegments& sequences);
bool batched_causal_attention(const float* q, const int32_t* positions, const KvSegments& sequences,
                              const AttentionShape& shape, void* scratch, float* out, const QuantizedRows& quantized,
                              StreamHandle stream);

// --- delta_net.cu ---
// Gated DeltaNet (qwen3next, qwen35moe), as engine/forward.cc's delta_net_attention. Its sizes
// (model::DeltaNetParams): channels = 2 * key_width + value_width, the convolution's [q..., k...,
// v...] per row.
struct DeltaNetShape {
  int64_t k_heads = 0, v_heads = 0, head_dim = 0, conv_kernel = 0;
  bool grouped_heads = false;  // value head h reads key head h / (v_heads / k_heads); else h % k_heads
  int64_t key_width() const { return k_heads * head_dim; }
  int64_t value_width() const { return v_heads * head_dim; }
  int64_t channels() const { return 2 * key_width() + value_width(); }
  int64_t conv_floats() const { return (conv_kernel - 1) * channels(); }
};
// Whether the kernels serve these sizes: head_dim 32, 64, 128 or 256 (the rule keeps a state row
// in a warp's registers), conv_kernel 2 to 8, v_heads a positive multiple of k_heads.
bool delta_net_supports(const DeltaNetShape& shape);
// The sequences of one launch: segment s is rows [first_row[s], first_row[s + 1]) of the pass's
// buffers (relative to the pointers passed; first_row nondecreasing), its layer's state at
// states[s] (conv_floats() floats of the convolution's state, then v_heads states of head_dim x
// head_dim, model::DeltaNetParams' layout). Rows of a segment are consecutive tokens of one sequence.
constexpr int kMaxRecurrentSegments = 8;
struct RecurrentSegments {
  int count = 0;
  int first_row[kMaxRecurrentSegments + 1] = {};
  float* states[kMaxRecurrentSegments] = {};
};
// In place over `mixed` (rows of shape.channels() floats): each segment's causal convolution
// (taps: [channels][conv_kernel], device) from its state's held inputs, then SiLU, rounded as
// cpu::causal_conv_silu (its SiLU's exp that of an AVX-512 host); each segment's convolution
// state moves on past its rows; then each row's q heads and k heads L2-normed (cpu::l2_norm,
// epsilon `eps`). Two launches.
void delta_net_conv(float* mixed, const RecurrentSegments& segments, const DeltaNetShape& shape, const float* taps,
                    float eps, StreamHandle stream);
// beta[i] = sigmoid(beta[i]); decay[i] = softplus(decay[i] + dt_bias[h]) * a[h] (ggml's softplus:
// linear above 20), in place over n rows of v_heads values (h = i % v_heads), as engine/forward.cc's
// delta_net_attention computes them.
void delta_net_gates(float* beta, float* decay, int64_t n, int64_t v_heads, const float* dt_bias, const float* a,
                     StreamHandle stream);
// The gated delta rule (cpu::gated_delta_rule) over each segment's rows of `mixed` (after
// delta_net_conv): per token, per value head: S *= exp(g); d = (v - S k) * beta; S += d k^T;
// o = (S q) / sqrt(head_dim), g (decay) and beta read at [row * v_heads + h], o written to
// out + row * value_width + h * head_dim, the states updated in place (at states[s] +
// conv_floats()). The state's row dots sum in another order than the CPU's.
void delta_net_rule(const float* mixed, const float* decay, const float* beta, const RecurrentSegments& segments,
                    const DeltaNetShape& shape, float* out, StreamHandle stream);
// Qwen3-Next's fused projections: n `grouped` rows of k_heads parts [q (head_dim), k (head_dim),
// the group's values (group * head_dim), their z (group * head_dim)], group = v_heads / k_heads,
// into mixed ([q..., k..., v...]) and z rows (value_width), as forward.cc's qkvz branch.
void delta_net_split_qkvz(const float* grouped, int64_t n, const DeltaNetShape& shape, float* mixed, float* z,
                          StreamHandle stream);
// And its beta_alpha: n rows of k_heads parts [the group's betas, their alphas] into beta and
// decay rows of v_heads.
void delta_net_split_beta_alpha(const float* grouped, int64_t n, const DeltaNetShape& shape, float* beta, float* decay,
                                StreamHandle stream);
// Gated attention's query projection (model::GqaWeights::output_gate): n rows of `heads` parts
// [query (head_dim), gate (head_dim)] into q and gate rows of heads * head_dim.
void split_gated_query(const float* q_gated, int64_t n, int64_t heads, int64_t head_dim, float* q, float* gate,
                       StreamHandle stream);
// x[i] *= sigmoid(gate[i]) over `count` floats (the gated attention's output).
void sigmoid_gate(float* x, const float* gate, int64_t count, StreamHandle stream);
// residual[r] += rows[r] * sigmoid(gate_logits[r]) for n rows of `width` floats (the shared
// expert's output behind its gate, model::FfnWeights::shared_gate: one logit per row), each
// product rounded before the sum, as forward.cc's ffn_block.
void add_sigmoid_gated(const float* rows, const float* gate_logits, int64_t n, int64_t width, float* residual,
                       StreamHandle stream);

}  // namespace bloomery::cuda
