#include "cpu/moe.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <numeric>
#include <thread>

#include "base/arch.h"
#include "cpu/softmax.h"
#include "cpu/swiglu.h"
#include "quant/ggml_types.h"

namespace bloomery::cpu {

namespace {

// llama.cpp clamps the sum of the chosen weights from below before dividing by it.
constexpr float kMinWeightSum = 6.103515625e-5f;
constexpr int64_t kRowsPerTask = 16;
// Pauses (~10-40 ns each) between two yields of a down block waiting for its hidden rows.
constexpr int kSpinsBeforeYield = 1024;

// Sorts the (row, k) slots of the experts that run by expert (a counting sort: stable, so
// rows keep their order); returns how many there are.
int64_t group_by_expert(const Routing& routing, int64_t n, int64_t experts, std::span<const uint8_t> run_expert,
                        MoeScratch& s) {
  const int64_t count = n * routing.used;
  const auto runs = [&](int32_t e) { return run_expert.empty() || run_expert[e] != 0; };
  s.group_begin.assign(static_cast<size_t>(experts + 1), 0);
  for (int64_t i = 0; i < count; ++i) {
    if (runs(routing.experts[i])) ++s.group_begin[routing.experts[i] + 1];
  }
  for (int64_t e = 0; e < experts; ++e) s.group_begin[e + 1] += s.group_begin[e];
  const int64_t running = s.group_begin[experts];
  s.slots.resize(static_cast<size_t>(running));
  s.slot_place.assign(static_cast<size_t>(count), -1);
  s.cursors.assign(s.group_begin.begin(), s.group_begin.end() - 1);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t e = routing.experts[i];
    if (!runs(e)) continue;
    s.slot_place[i] = s.cursors[e];
    s.slots[s.cursors[e]++] = i;
  }
  return running;
}

void add_bias(float* x, const float* bias, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += bias[i];
}

WeightMatrix at(const WeightMatrix& shape, const uint8_t* data) {
  WeightMatrix w = shape;
  w.data = data;
  return w;
}

}  // namespace

void route(const float* logits, int64_t n, int64_t experts, int64_t used, const RouterParams& router,
           const float* selection_bias, Routing& routing, const int32_t* chosen) {
  routing.used = used;
  routing.experts.resize(static_cast<size_t>(n * used));
  routing.weights.resize(static_cast<size_t>(n * used));
  std::vector<float> weights(static_cast<size_t>(experts)), selection(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  std::vector<float> picked(static_cast<size_t>(used));
  const int64_t group_size = experts / router.groups;
  std::vector<float> group_scores(static_cast<size_t>(router.groups));
  std::vector<int32_t> groups(static_cast<size_t>(router.groups));
  for (int64_t i = 0; i < n; ++i) {
    std::copy(logits + i * experts, logits + (i + 1) * experts, weights.begin());
    if (router.gating == Gating::kSoftmax) {
      softmax(weights.data(), experts);
    } else if (router.gating == Gating::kSigmoid) {
      for (float& w : weights) w = 1.0f / (1.0f + std::exp(-w));
    } else if (router.gating == Gating::kSqrtSoftplus) {
      // ggml's softplus (linear above 20; libm's logf, as llama.cpp's, which the oracle matches
      // exactly), then its square root.
      for (float& w : weights) w = std::sqrt(w > 20.0f ? w : std::log(1.0f + std::exp(w)));
    }
    if (chosen) {
      std::copy_n(chosen + i * used, used, order.begin());
    } else {
      for (int64_t e = 0; e < experts; ++e) selection[e] = weights[e] + (selection_bias ? selection_bias[e] : 0.0f);
      if (router.groups > 1 && router.groups_used < router.groups) {
        for (int64_t g = 0; g < router.groups; ++g) {
          const float* first = selection.data() + g * group_size;
          float best[2];
          std::partial_sort_copy(first, first + group_size, best, best + 2, std::greater<float>());
          group_scores[g] = best[0] + best[1];
        }
        std::iota(groups.begin(), groups.end(), 0);
        std::partial_sort(groups.begin(), groups.begin() + router.groups_used, groups.end(), [&](int32_t a, int32_t b) {
          return group_scores[a] > group_scores[b] || (group_scores[a] == group_scores[b] && a < b);
        });
        for (int64_t g = router.groups_used; g < router.groups; ++g) {
          std::fill_n(selection.begin() + groups[g] * group_size, group_size, -INFINITY);
        }
      }
      std::iota(order.begin(), order.end(), 0);
      // Ties go to the lower index, as on the GPU.
      std::partial_sort(order.begin(), order.begin() + used, order.end(), [&](int32_t a, int32_t b) {
        return selection[a] > selection[b] || (selection[a] == selection[b] && a < b);
      });
    }
    if (router.gating == Gating::kSoftmaxSelected) {
      for (int64_t k = 0; k < used; ++k) picked[k] = weights[order[k]];
      softmax(picked.data(), used);
      for (int64_t k = 0; k < used; ++k) weights[order[k]] = picked[k];
    }
    double sum = 0.0;
    for (int64_t k = 0; k < used; ++k) sum += weights[order[k]];
    const float divisor = router.normalize ? std::max(static_cast<float>(sum), kMinWeightSum) : 1.0f;
    for (int64_t k = 0; k < used; ++k) {
      routing.experts[i * used + k] = order[k];
      float w = weights[order[k]];
      if (router.normalize) w /= divisor;
      if (router.scale != 1.0f) w *= router.scale;
      routing.weights[i * used + k] = w;
    }
  }
}

ExpertSlices stack_slices(const ExpertMatrices& gate, const ExpertMatrices& up, const ExpertMatrices& down, int64_t e) {
  return {gate.expert(e).data, up.expert(e).data, down.expert(e).data};
}

void moe_prepare(const float* x, int64_t n, const Routing& routing, const ExpertMatrices& gate,
                 const ExpertMatrices& up, const ExpertMatrices& down, MoeScratch& s, ThreadPool& pool,
                 std::span<const uint8_t> run_expert) {
  const int64_t used = routing.used;
  const int64_t width = gate.first.cols;
  const int64_t hidden = gate.first.rows;
  const int64_t out_width = down.first.rows;
  // The grouped buffers hold the running slots in `slots` order: slot s.slots[j] is row j.
  const int64_t running = group_by_expert(routing, n, gate.count, run_expert, s);
  s.in_use.clear();
  for (int64_t e = 0; e < gate.count; ++e) {
    if (s.group_begin[e] != s.group_begin[e + 1]) s.in_use.push_back(static_cast<int32_t>(e));
  }
  if (running == 0) return;

  // Gate and up read the same activation format in every real model; quantize once for both.
  quantize_rows(*gate.first.kernels, x, n, width, width, s.input, pool);
  const bool shared_input = up.first.kernels->activation_type == gate.first.kernels->activation_type;
  if (!shared_input) quantize_rows(*up.first.kernels, x, n, width, width, s.up_input, pool);
  const QuantizedRows& up_input = shared_input ? s.input : s.up_input;

  s.gate.resize(static_cast<size_t>(running * hidden));
  s.up.resize(static_cast<size_t>(running * hidden));
  s.hidden.resize(static_cast<size_t>(running * hidden));
  s.expert_out.resize(static_cast<size_t>(running * out_width));
  const quant::QuantKernels& down_kernels = *down.first.kernels;
  s.hidden_quantized.activation_type = down_kernels.activation_type;
  s.hidden_quantized.row_bytes =
      *quant::ggml_row_bytes(*quant::ggml_type(down_kernels.activation_type), static_cast<uint64_t>(hidden));
  s.hidden_quantized.bytes.resize(s.hidden_quantized.row_bytes * static_cast<size_t>(running));
  for (auto* v : {&s.gate_in, &s.up_in, &s.down_in}) v->resize(static_cast<size_t>(running));
  for (auto* v : {&s.gate_out, &s.up_out, &s.down_out}) v->resize(static_cast<size_t>(running));
  for (int64_t j = 0; j < running; ++j) {
    const int64_t row = s.slots[j] / used;
    s.gate_in[j] = s.input.row(row);
    s.up_in[j] = up_input.row(row);
    s.down_in[j] = s.hidden_quantized.row(j);
    s.gate_out[j] = s.gate.data() + j * hidden;
    s.up_out[j] = s.up.data() + j * hidden;
    s.down_out[j] = s.expert_out.data() + j * out_width;
  }
}

void moe_run_experts(std::span<const int32_t> experts, std::span<const ExpertSlices> slices, const ExpertMatrices& gate,
                     const ExpertMatrices& up, const ExpertMatrices& down, const ExpertBiases& biases,
                     const ExpertActivation& activation, MoeScratch& s, ThreadPool& pool) {
  if (experts.empty()) return;
  const int64_t hidden = gate.first.rows;
  const int64_t out_width = down.first.rows;
  const int64_t* begin = s.group_begin.data();
  const int64_t hidden_blocks = (hidden + kRowsPerTask - 1) / kRowsPerTask;
  const int64_t out_blocks = (out_width + kRowsPerTask - 1) / kRowsPerTask;
  const size_t first_down_task = experts.size() * static_cast<size_t>(hidden_blocks);
  const size_t tasks = first_down_task + experts.size() * static_cast<size_t>(out_blocks);
  s.hidden_blocks_left.assign(static_cast<size_t>(gate.count), hidden_blocks);
  s.hidden_ready.assign(static_cast<size_t>(gate.count), 0);
  const quant::QuantKernels& down_kernels = *down.first.kernels;

  // Gate and up, then SwiGLU, over a block of hidden rows of one expert; the block that
  // finishes an expert quantizes its hidden rows for the down product (row by row, so a row's
  // result is the same in any wave) and marks them ready.
  const auto gate_up_block = [&](int32_t e, int64_t first, int64_t last) {
    const int64_t count = begin[e + 1] - begin[e];
    dot_rows(at(gate.first, slices[e].gate), first, last, s.gate_in.data() + begin[e], s.gate_out.data() + begin[e],
             count);
    dot_rows(at(up.first, slices[e].up), first, last, s.up_in.data() + begin[e], s.up_out.data() + begin[e], count);
    for (int64_t j = begin[e]; j < begin[e + 1]; ++j) {
      if (biases.gate) add_bias(s.gate_out[j] + first, biases.gate + e * hidden + first, last - first);
      if (biases.up) add_bias(s.up_out[j] + first, biases.up + e * hidden + first, last - first);
      float* out = s.hidden.data() + j * hidden + first;
      if (activation.kind == ActivationKind::kClampedSwiglu) {
        clamped_swiglu(s.gate_out[j] + first, s.up_out[j] + first, last - first, activation.alpha, activation.limit,
                       out);
      } else if (activation.kind == ActivationKind::kLimitedSwiglu) {
        limited_swiglu(s.gate_out[j] + first, s.up_out[j] + first, last - first, activation.limit, out);
      } else {
        swiglu(s.gate_out[j] + first, s.up_out[j] + first, last - first, out);
      }
    }
    if (std::atomic_ref(s.hidden_blocks_left[e]).fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    for (int64_t j = begin[e]; j < begin[e + 1]; ++j) {
      down_kernels.quantize_activations(s.hidden.data() + j * hidden,
                                        s.hidden_quantized.bytes.data() + j * s.hidden_quantized.row_bytes, hidden);
    }
    std::atomic_ref(s.hidden_ready[e]).store(1, std::memory_order_release);
  };
  // A block of the down product waits for its expert's hidden rows. Tasks are handed out in
  // order and every gate and up task comes first, so the blocks it waits for are running on
  // threads that wait for nothing: one loop does both products, with no barrier between them.
  const auto down_block = [&](int32_t e, int64_t first, int64_t last) {
    for (int spin = 1; std::atomic_ref(s.hidden_ready[e]).load(std::memory_order_acquire) == 0; ++spin) {
      // Yielding now and then lets a preempted thread finish the blocks waited for on a host
      // with fewer cores than busy threads.
      if (spin % kSpinsBeforeYield == 0) {
        std::this_thread::yield();
      } else {
        cpu_relax();
      }
    }
    dot_rows(at(down.first, slices[e].down), first, last, s.down_in.data() + begin[e], s.down_out.data() + begin[e],
             begin[e + 1] - begin[e]);
    if (!biases.down) return;
    for (int64_t j = begin[e]; j < begin[e + 1]; ++j) {
      add_bias(s.down_out[j] + first, biases.down + e * out_width + first, last - first);
    }
  };
  // A task's bytes, for its grain: a gate and up block over an expert's average rows.
  const auto average_rows = static_cast<size_t>(std::max<int64_t>(1, begin[gate.count] / std::ssize(experts)));
  const size_t task_bytes =
      static_cast<size_t>(kRowsPerTask) * (gate.first.row_bytes + up.first.row_bytes) * average_rows;
  pool.parallel_for(tasks, pool.grain(tasks, task_bytes), [&](size_t first_task, size_t end_task) {
    for (size_t t = first_task; t < end_task; ++t) {
      if (t < first_down_task) {
        const int64_t first = static_cast<int64_t>(t % hidden_blocks) * kRowsPerTask;
        gate_up_block(experts[t / hidden_blocks], first, std::min(hidden, first + kRowsPerTask));
      } else {
        const size_t d = t - first_down_task;
        const int64_t first = static_cast<int64_t>(d % out_blocks) * kRowsPerTask;
        down_block(experts[d / out_blocks], first, std::min(out_width, first + kRowsPerTask));
      }
    }
  });
}

void moe_combine(int64_t n, const Routing& routing, int64_t out_width, float* out, const MoeScratch& s) {
  const int64_t used = routing.used;
  std::fill(out, out + n * out_width, 0.0f);
  // Adding to zero keeps the first term exact, so the sum is the all-experts one's, in k order.
  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * out_width;
    for (int64_t k = 0; k < used; ++k) {
      const int64_t place = s.slot_place[i * used + k];
      if (place < 0) continue;
      const float w = routing.weights[i * used + k];
      const float* y = s.expert_out.data() + place * out_width;
      for (int64_t j = 0; j < out_width; ++j) o[j] += w * y[j];
    }
  }
}

void moe_swiglu(const float* x, int64_t n, const Routing& routing, const ExpertMatrices& gate, const ExpertMatrices& up,
                const ExpertMatrices& down, const ExpertBiases& biases, const ExpertActivation& activation, float* out,
                MoeScratch& s, ThreadPool& pool, std::span<const uint8_t> run_expert) {
  moe_prepare(x, n, routing, gate, up, down, s, pool, run_expert);
  s.slices.resize(static_cast<size_t>(gate.count));
  for (const int32_t e : s.in_use) s.slices[e] = stack_slices(gate, up, down, e);
  moe_run_experts(s.in_use, s.slices, gate, up, down, biases, activation, s, pool);
  moe_combine(n, routing, down.first.rows, out, s);
}

}  // namespace bloomery::cpu
