#include "cpu/moe.h"

#include <algorithm>
#include <numeric>

#include "cpu/softmax.h"
#include "cpu/swiglu.h"

namespace bloomery::cpu {

namespace {

// llama.cpp clamps the sum of the chosen weights from below before dividing by it.
constexpr float kMinWeightSum = 6.103515625e-5f;
constexpr int64_t kRowsPerTask = 16;

// A unit of work: one expert and a block of its output rows.
struct ExpertTask {
  int32_t expert;
  int64_t first_row;
};

// The (row, slot) pairs routed to each expert, as indices row * used + slot.
std::vector<std::vector<int64_t>> group_by_expert(const Routing& routing, int64_t n, int64_t experts) {
  std::vector<std::vector<int64_t>> groups(static_cast<size_t>(experts));
  for (int64_t i = 0; i < n * routing.used; ++i) groups[routing.experts[i]].push_back(i);
  return groups;
}

std::vector<ExpertTask> expert_tasks(const std::vector<std::vector<int64_t>>& groups, int64_t rows) {
  std::vector<ExpertTask> tasks;
  for (size_t e = 0; e < groups.size(); ++e) {
    if (groups[e].empty()) continue;
    for (int64_t r = 0; r < rows; r += kRowsPerTask) tasks.push_back({static_cast<int32_t>(e), r});
  }
  return tasks;
}

}  // namespace

void route_top_k(const float* logits, int64_t n, int64_t experts, int64_t used, bool normalize, Routing& routing) {
  routing.used = used;
  routing.experts.resize(static_cast<size_t>(n * used));
  routing.weights.resize(static_cast<size_t>(n * used));
  std::vector<float> probabilities(static_cast<size_t>(experts));
  std::vector<int32_t> order(static_cast<size_t>(experts));
  for (int64_t i = 0; i < n; ++i) {
    std::copy(logits + i * experts, logits + (i + 1) * experts, probabilities.begin());
    softmax(probabilities.data(), experts);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + used, order.end(),
                      [&](int32_t a, int32_t b) { return probabilities[a] > probabilities[b]; });
    double sum = 0.0;
    for (int64_t k = 0; k < used; ++k) sum += probabilities[order[k]];
    const float divisor = normalize ? std::max(static_cast<float>(sum), kMinWeightSum) : 1.0f;
    for (int64_t k = 0; k < used; ++k) {
      routing.experts[i * used + k] = order[k];
      routing.weights[i * used + k] = probabilities[order[k]] / divisor;
    }
  }
}

void moe_swiglu(const float* x, int64_t n, const Routing& routing, const ExpertMatrices& gate, const ExpertMatrices& up,
                const ExpertMatrices& down, float* out, MoeScratch& scratch, ThreadPool& pool) {
  const int64_t used = routing.used;
  const int64_t width = gate.first.cols;
  const int64_t hidden = gate.first.rows;
  const int64_t out_width = down.first.rows;
  const auto groups = group_by_expert(routing, n, gate.count);

  // Gate and up read the same activation format in every real model; quantize once for both.
  quantize_rows(*gate.first.kernels, x, n, width, width, scratch.input, pool);
  QuantizedRows up_input_storage;
  const bool shared_input = up.first.kernels->activation_type == gate.first.kernels->activation_type;
  if (!shared_input) quantize_rows(*up.first.kernels, x, n, width, width, up_input_storage, pool);
  const QuantizedRows& up_input = shared_input ? scratch.input : up_input_storage;

  scratch.hidden.resize(static_cast<size_t>(n * used * hidden));
  const std::vector<ExpertTask> hidden_tasks = expert_tasks(groups, hidden);
  pool.parallel_for(hidden_tasks.size(), 1, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const ExpertTask task = hidden_tasks[t];
      const WeightMatrix g = gate.expert(task.expert);
      const WeightMatrix u = up.expert(task.expert);
      const int64_t last = std::min(hidden, task.first_row + kRowsPerTask);
      for (const int64_t slot : groups[task.expert]) {
        const int64_t row = slot / used;
        float* h = scratch.hidden.data() + slot * hidden;
        for (int64_t o = task.first_row; o < last; ++o) {
          const float g_out = g.kernels->vec_dot(g.row(o), scratch.input.row(row), width);
          const float u_out = u.kernels->vec_dot(u.row(o), up_input.row(row), width);
          swiglu(&g_out, &u_out, 1, h + o);
        }
      }
    }
  });

  quantize_rows(*down.first.kernels, scratch.hidden.data(), n * used, hidden, hidden, scratch.hidden_quantized, pool);
  scratch.expert_out.resize(static_cast<size_t>(n * used * out_width));
  const std::vector<ExpertTask> down_tasks = expert_tasks(groups, out_width);
  pool.parallel_for(down_tasks.size(), 1, [&](size_t begin, size_t end) {
    for (size_t t = begin; t < end; ++t) {
      const ExpertTask task = down_tasks[t];
      const WeightMatrix d = down.expert(task.expert);
      const int64_t last = std::min(out_width, task.first_row + kRowsPerTask);
      for (const int64_t slot : groups[task.expert]) {
        float* y = scratch.expert_out.data() + slot * out_width;
        const uint8_t* activation = scratch.hidden_quantized.row(slot);
        for (int64_t o = task.first_row; o < last; ++o) y[o] = d.kernels->vec_dot(d.row(o), activation, hidden);
      }
    }
  });

  for (int64_t i = 0; i < n; ++i) {
    float* o = out + i * out_width;
    for (int64_t k = 0; k < used; ++k) {
      const float w = routing.weights[i * used + k];
      const float* y = scratch.expert_out.data() + (i * used + k) * out_width;
      if (k == 0) {
        for (int64_t j = 0; j < out_width; ++j) o[j] = w * y[j];
      } else {
        for (int64_t j = 0; j < out_width; ++j) o[j] += w * y[j];
      }
    }
  }
}

}  // namespace bloomery::cpu
