// Mixture-of-experts FFN on the CPU: softmax routing with top-k, and SwiGLU experts run
// grouped by expert, so each expert's weights are read once per pass however many rows
// chose it. Outputs are combined per row in top-k order, as llama.cpp adds them.
//
// Each expert's weights are read through its own pointers (ExpertSlices), not through the
// stack's base and the expert's index, so an expert may sit anywhere: in the file's pages
// or in a slot of the disk tier's arena (engine/expert_arena.h). A pass runs in three steps,
// so experts can run in waves as they arrive from disk: moe_prepare, moe_run_experts (once
// per wave), moe_combine; moe_swiglu does all three over experts in their stacks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/thread_pool.h"

namespace bloomery::cpu {

// One weight matrix per expert, stored back to back (GGUF's ne2 is the expert index).
struct ExpertMatrices {
  WeightMatrix first;  // expert 0
  int64_t count = 0;

  WeightMatrix expert(int64_t e) const {
    WeightMatrix w = first;
    w.data += static_cast<size_t>(e) * static_cast<size_t>(first.rows) * first.row_bytes;
    return w;
  }
};

// Where one expert's three matrices are (the stacks give their shape and type).
struct ExpertSlices {
  const uint8_t* gate = nullptr;
  const uint8_t* up = nullptr;
  const uint8_t* down = nullptr;
};

// Expert e's matrices in place in their stacks.
ExpertSlices stack_slices(const ExpertMatrices& gate, const ExpertMatrices& up, const ExpertMatrices& down, int64_t e);

// The experts each row uses and their weights: n rows of `used` entries, best first.
struct Routing {
  int64_t used = 0;
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

// How a router turns its logits into each row's experts and their weights. kSoftmaxSelected
// (gpt-oss): the top logits choose, then a softmax over the chosen ones weights them.
enum class Gating : uint8_t { kSoftmax, kSigmoid, kSoftmaxSelected, kSqrtSoftplus };

// What an expert makes of its gate and up rows. kSwiglu: silu(gate) * up. kClampedSwiglu
// (gpt-oss's swiglu_oai): g = min(gate, limit), u = clamp(up, -limit, limit),
// g * sigmoid(alpha g) * (u + 1). kLimitedSwiglu (DeepSeek-V4's swiglu_clamp): the same g and u,
// silu(g) * u.
enum class ActivationKind : uint8_t { kSwiglu, kClampedSwiglu, kLimitedSwiglu };
struct ExpertActivation {
  ActivationKind kind = ActivationKind::kSwiglu;
  float alpha = 1.702f;
  float limit = 7.0f;
};

// Per-expert biases added to the gate, up and down products (each `count` rows of the
// matrix's outputs, expert after expert). Null: none.
struct ExpertBiases {
  const float* gate = nullptr;
  const float* up = nullptr;
  const float* down = nullptr;
};

struct RouterParams {
  Gating gating = Gating::kSoftmax;
  bool normalize = false;  // divide the chosen experts' weights by their sum (Qwen3-MoE's norm_topk_prob)
  float scale = 1.0f;      // then multiply them by this (expert_weights_scale)
  // Group-limited choice (DeepSeek-V3): the experts form `groups` equal groups, each scored by
  // the sum of its two best selection weights; only the best `groups_used` groups compete.
  int64_t groups = 1;
  int64_t groups_used = 1;
};

// Each row's `used` experts, as llama.cpp's build_moe_ffn chooses them: the gating function
// over the row's logits gives the weights (kSoftmaxSelected: the logits themselves, the chosen
// ones then softmaxed); `selection_bias` (one per expert, or null) is added
// to them only to choose; then the group limit and the top `used`; the chosen weights (unbiased)
// normalized and scaled as `router` says. Best first. `chosen` (n rows of `used` experts; null:
// none) replaces the choice: hash routing's experts by token, weighted as the router would.
void route(const float* logits, int64_t n, int64_t experts, int64_t used, const RouterParams& router,
           const float* selection_bias, Routing& routing, const int32_t* chosen = nullptr);

// Buffers reused across calls, so a decode step allocates nothing.
struct MoeScratch {
  QuantizedRows input;
  QuantizedRows up_input;  // only where up reads another activation format than gate
  QuantizedRows hidden_quantized;
  std::vector<float> gate, up, hidden, expert_out;
  std::vector<int64_t> slots;        // (row * used + k) of the experts that run, grouped by expert
  std::vector<int64_t> slot_place;   // where slot (row * used + k) sits in `slots`, -1 when its expert does not run
  std::vector<int64_t> group_begin;  // expert e's slots are slots[group_begin[e] .. group_begin[e + 1])
  std::vector<int64_t> cursors;      // where group_by_expert puts each expert's next slot
  std::vector<int32_t> in_use;       // the experts that run and have rows, ascending (moe_prepare)
  std::vector<int64_t> hidden_blocks_left;  // per expert, gate and up blocks not yet done (moe_run_experts)
  std::vector<uint32_t> hidden_ready;       // per expert, 1 once its hidden rows are quantized
  std::vector<ExpertSlices> slices;         // per expert, where its weights are (the caller's table)
  std::vector<const uint8_t*> gate_in, up_in, down_in;
  std::vector<float*> gate_out, up_out, down_out;
};

// Step 1: groups the rows' (row, k) slots by expert, for the experts that run here
// (`run_expert`, one flag per expert; empty: all), fills s.in_use and quantizes x.
void moe_prepare(const float* x, int64_t n, const Routing& routing, const ExpertMatrices& gate,
                 const ExpertMatrices& up, const ExpertMatrices& down, MoeScratch& s, ThreadPool& pool,
                 std::span<const uint8_t> run_expert = {});

// Step 2, once per wave: runs `experts` (each of s.in_use once over the pass, in any order and
// waves) over their rows, reading expert e's weights from slices[e]; the biases are added to
// each product (as llama.cpp's ggml_add_id) and `activation` joins gate and up.
void moe_run_experts(std::span<const int32_t> experts, std::span<const ExpertSlices> slices, const ExpertMatrices& gate,
                     const ExpertMatrices& up, const ExpertMatrices& down, const ExpertBiases& biases,
                     const ExpertActivation& activation, MoeScratch& s, ThreadPool& pool);

// Step 3: out (n rows of `out_width`) = each row's expert outputs times their weights, added in
// top-k order (rows with no expert that runs here get zeros).
void moe_combine(int64_t n, const Routing& routing, int64_t out_width, float* out, const MoeScratch& s);

// out[i] = sum over k of weight(i, k) * down_e(act(gate_e x_i, up_e x_i)), e = expert(i, k),
// each product with its bias. x: n rows of gate.first.cols floats; out: n rows of
// down.first.rows floats. `run_expert` (one flag per expert; empty: all) limits the sum to
// those experts, so a hybrid pass runs here only the experts that live in host memory (rows
// with none of them get zeros).
void moe_swiglu(const float* x, int64_t n, const Routing& routing, const ExpertMatrices& gate, const ExpertMatrices& up,
                const ExpertMatrices& down, const ExpertBiases& biases, const ExpertActivation& activation, float* out,
                MoeScratch& scratch, ThreadPool& pool, std::span<const uint8_t> run_expert = {});

}  // namespace bloomery::cpu
