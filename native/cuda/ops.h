// The CUDA ops the engine's GPU pass is made of, as plain C++ launchers (implemented in
// the .cu file of each op family). They take device pointers and shapes, never a model:
// the engine (engine/gpu_forward.cc) says which tensors go where. Every launcher queues
// work on `stream` and returns; shapes are checked by the caller at load.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/runtime.h"

namespace bloomery::cuda {

// Activations quantized for the integer dots: 32 values and their scale (for the K-quants,
// the eight blocks of 256 values share Q8_K's one scale; see quantize.cu).
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
// The activation of a product: float rows for float weights, blocks for quantized ones.
struct MatvecInput {
  const float* floats = nullptr;
  const ActivationBlock* blocks = nullptr;
};

// y[i] (+)= w x[i] for n rows (y rows of w.rows floats). `accumulate` adds into y.
void matvec(const DeviceMatrix& w, const MatvecInput& x, int64_t n, float* y, bool accumulate, StreamHandle stream);

// y[i] = silu(gate x[i]) * (up x[i]): an FFN's fused first half. gate and up share a
// quantized type (see gated_matvec_supports).
bool gated_matvec_supports(const DeviceMatrix& gate, const DeviceMatrix& up);
void gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const ActivationBlock* x, int64_t n, float* y,
                  StreamHandle stream);

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

// For each routed slot s: hidden[s] = silu(gate_e x[s / used]) * (up_e x[s / used]). gate and
// up share a type (quantized: x's blocks; float: its float rows).
void expert_gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const MatvecInput& x, int64_t used,
                         const ExpertGroups& groups, float* hidden, StreamHandle stream);
// For each routed slot s: out[s] = down_e hidden[s].
void expert_matvec(const DeviceMatrix& down, const MatvecInput& hidden, const ExpertGroups& groups, float* out,
                   StreamHandle stream);

// --- float_experts.cu: the two above for stacks of a float type ---
void float_expert_gated_matvec(const DeviceMatrix& gate, const DeviceMatrix& up, const float* x, int64_t used,
                               const ExpertGroups& groups, float* hidden, StreamHandle stream);
void float_expert_matvec(const DeviceMatrix& down, const float* hidden, const ExpertGroups& groups, float* out,
                         StreamHandle stream);

// --- moe.cu ---
// Softmax over each row's router logits, the `used` best (in order), optionally
// renormalized to sum to one.
void route_top_k(const float* logits, int64_t n, int64_t experts, int64_t used, bool normalize, int32_t* chosen,
                 float* weights, StreamHandle stream);
// Tokens per chunk the grouping uses for a pass of n rows, and the most chunks it can make.
int tokens_per_expert_chunk(int64_t n);
int64_t max_expert_chunks(int64_t n, int64_t experts, int64_t used);
// Groups the n * used routed slots of GPU-resident experts by expert (order, chunks,
// chunk_count: see ExpertGroups). `slot_of_expert` (device, one per expert) says where each
// expert's weights sit in the layer's slot pool, -1 for an expert in host memory: chunks name
// slots, so the expert kernels read the pool, and a swap only rewrites this table.
void group_by_expert(const int32_t* chosen, int64_t n, int64_t experts, int64_t used, const int32_t* slot_of_expert,
                     int tokens_per_chunk, int32_t* order, int32_t* chunks, int32_t* chunk_count, StreamHandle stream);
// residual[i] += sum over k of weights[i, k] * expert_out[i * used + k], in k order, over the
// GPU-resident experts (slot_of_expert[chosen[i, k]] >= 0).
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
// out[r] = x[r] / rms(x[r]) * weight, for `rows` rows of `width` floats (contiguous).
void rms_norm(const float* x, int64_t rows, int64_t width, const float* weight, float eps, float* out,
              StreamHandle stream);

// --- elementwise.cu ---
// rows[i] += bias, for n rows of `width`.
void add_bias(float* rows, int64_t n, int64_t width, const float* bias, StreamHandle stream);
// out = silu(gate) * up, elementwise over `count` floats.
void swiglu(const float* gate, const float* up, int64_t count, float* out, StreamHandle stream);

// --- rope.cu ---
struct RopeShape {
  bool neox = false;
  int64_t dims = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;  // device, dims / 2, or none
};
// Rotates n rows of `heads` heads of `head_dim` floats; row i sits at positions[i].
void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* positions, const RopeShape& shape,
          StreamHandle stream);

// --- embed.cu ---
// out[i] = row tokens[i] of `table`, dequantized to floats.
void embed(const DeviceMatrix& table, const int32_t* tokens, int64_t n, float* out, StreamHandle stream);

// --- attention.cu ---
struct AttentionShape {
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;  // a multiple of 32, at most 256
  float scale = 1.0f;
};
// Writes n rows of keys and values (kv_heads * head_dim floats) as f16 at positions[i].
void store_kv(const float* k, const float* v, int64_t n, int64_t kv_width, const int32_t* positions, uint16_t* keys,
              uint16_t* values, StreamHandle stream);
// Causal attention of n query rows, row i attending to cache positions [0, positions[i]].
void causal_attention(const float* q, int64_t n, const int32_t* positions, const uint16_t* keys, const uint16_t* values,
                      const AttentionShape& shape, float* out, StreamHandle stream);

}  // namespace bloomery::cuda
