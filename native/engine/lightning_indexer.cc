#include "engine/lightning_indexer.h"

#include <cmath>

#include "cpu/cpu_dispatch.h"
#include "cpu/lightning_indexer.h"
#include "cpu/matmul.h"
#include "cpu/rms_norm.h"
#include "cpu/rope.h"

namespace bloomery::engine {

namespace {

constexpr uint32_t kF32 = 0;  // ggml's type id of F32

}  // namespace

void rotate_by_hadamard(float* x, int64_t count, int64_t dim, int64_t stride, ForwardScratch& s,
                        cpu::ThreadPool& pool) {
  if (static_cast<int64_t>(s.hadamard.size()) != dim * dim) s.hadamard = cpu::hadamard_matrix(dim);
  const cpu::WeightMatrix h{&cpu::host_quant_kernels(kF32), reinterpret_cast<const uint8_t*>(s.hadamard.data()), dim,
                            dim, static_cast<size_t>(dim) * sizeof(float)};
  s.head_in.resize(static_cast<size_t>(count * dim));
  s.head_out.resize(static_cast<size_t>(count * dim));
  for (int64_t i = 0; i < count; ++i) std::copy_n(x + i * stride, dim, s.head_in.data() + i * dim);
  s.input.reset(s.head_in.data(), count, dim);
  cpu::matmul(h, s.input, s.head_out.data(), pool);
  for (int64_t i = 0; i < count; ++i) std::copy_n(s.head_out.data() + i * dim, dim, x + i * stride);
}

void indexer_rows(const model::HyperParams& p, const model::IndexerWeights& w, int64_t n, ForwardScratch& s,
                  cpu::ThreadPool& pool) {
  const model::IndexerParams& x = p.indexer;
  const int64_t q_width = x.heads * x.head_dim;
  cpu::RopeParams rope = p.rope;
  rope.style = x.rope_style;
  s.indexer_q.resize(static_cast<size_t>(n * q_width));
  s.indexer_weights.resize(static_cast<size_t>(n * x.heads));
  s.indexer_k.resize(static_cast<size_t>(n * x.head_dim));

  s.input.reset(s.q_low.data(), n, p.mla.q_lora_rank);
  cpu::matmul(w.q, s.input, s.indexer_q.data(), pool);
  for (int64_t i = 0; i < n; ++i) {
    cpu::rope_apply(s.indexer_q.data() + i * q_width, x.heads, x.head_dim, rope, s.rope_angles[i]);
  }
  rotate_by_hadamard(s.indexer_q.data(), n * x.heads, x.head_dim, x.head_dim, s, pool);

  s.input.reset(s.normed.data(), n, p.embedding);
  cpu::matmul(w.k, s.input, s.indexer_k.data(), pool);
  cpu::layer_norm(s.indexer_k.data(), n, x.head_dim, x.head_dim, w.k_norm, w.k_norm_bias, x.norm_epsilon);
  for (int64_t i = 0; i < n; ++i) {
    cpu::rope_apply(s.indexer_k.data() + i * x.head_dim, 1, x.head_dim, rope, s.rope_angles[i]);
  }
  rotate_by_hadamard(s.indexer_k.data(), n, x.head_dim, x.head_dim, s, pool);
  const int64_t row = model::cache_row(p).keys, offset = model::indexer_key_offset(p);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(s.indexer_k.data() + i * x.head_dim, x.head_dim, s.k.data() + i * row + offset);
  }

  // Prescaled, as llama.cpp does, rather than scaling every score.
  s.input.reset(s.normed.data(), n, p.embedding);
  cpu::matmul(w.head_weights, s.input, s.indexer_weights.data(), pool);
  const float scale = 1.0f / std::sqrt(static_cast<float>(x.head_dim * x.heads));
  for (float& v : s.indexer_weights) v *= scale;
}

void select_positions(const model::HyperParams& p, const SequenceRows& part, int64_t layer, int64_t row, int64_t n,
                      ForwardScratch& s, cpu::ThreadPool& pool) {
  const model::IndexerParams& x = p.indexer;
  const cpu::IndexerShape shape{x.heads, x.head_dim, x.top_k, part.cache->row().keys};
  cpu::select_positions(s.indexer_q.data() + row * x.heads * x.head_dim, s.indexer_weights.data() + row * x.heads, n,
                        part.first_position, part.cache->keys(layer) + model::indexer_key_offset(p), shape,
                        s.selected.data() + row * x.top_k, s.indexer_scores, pool);
}

}  // namespace bloomery::engine
