#include "engine/compressed_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/compressed_attention.h"
#include "cpu/lightning_indexer.h"
#include "cpu/matmul.h"
#include "cpu/rms_norm.h"
#include "cpu/rope.h"
#include "cpu/softmax.h"
#include "engine/head_products.h"
#include "engine/lightning_indexer.h"

namespace bloomery::engine {

namespace {

using model::CompressedParams;

// One compressor of a layer: its weights, how it compresses, and where its rows go.
struct Compressor {
  const model::CompressorWeights* weights = nullptr;
  int64_t ratio = 0;
  int64_t dim = 0;      // of a compressed row
  int64_t offset = 0;   // where in the layer's compressed row it goes
  bool rotate = false;  // multiplied by the Hadamard matrix after the rotation (the indexer's keys)
  bool overlap() const { return ratio == CompressedParams::kOverlapRatio; }
  // Each position's values and scores are twice as wide where blocks overlap.
  int64_t width() const { return (overlap() ? 2 : 1) * dim; }
  // Positions the ring keeps: the block being filled, and where blocks overlap the one before.
  int64_t slots() const { return (overlap() ? 2 : 1) * ratio; }
};

// The rows' values and scores of `c` (the score biased by the row's place in its block).
void compressor_rows(const Compressor& c, int64_t n, const std::vector<int64_t>& positions, std::vector<float>& values,
                     std::vector<float>& scores, ForwardScratch& s, cpu::ThreadPool& pool) {
  const int64_t width = c.width();
  values.resize(static_cast<size_t>(n * width));
  scores.resize(static_cast<size_t>(n * width));
  s.input.reset(s.normed.data(), n, c.weights->kv.cols);
  cpu::matmul(c.weights->kv, s.input, values.data(), pool);
  cpu::matmul(c.weights->gate, s.input, scores.data(), pool);
  // Each row's bias by its place in the block, as floats (llama.cpp's get_rows of the F16 table).
  s.position_bias.resize(static_cast<size_t>(width));
  for (int64_t i = 0; i < n; ++i) {
    cpu::dequantize_row(c.weights->position_bias, positions[i] % c.ratio, s.position_bias.data());
    for (int64_t j = 0; j < width; ++j) scores[i * width + j] += s.position_bias[j];
  }
}

// Compresses block `block` from the ring `state` into `row` (dim floats): per element, a softmax
// over the block's positions (and, where blocks overlap, the previous block's: their first half,
// the block's own the second) of the scores weighting the values, summed in double as ggml's
// sum_rows; then the RMS norm and the rotation at the block's first position.
void compress_block(const Compressor& c, const float* state, int64_t block, const cpu::RopeParams& rope, float eps,
                    std::vector<float>& entries, std::vector<float>& values, std::vector<float>& angles, float* row) {
  const int64_t width = c.width(), slots = c.slots(), ratio = c.ratio;
  const int64_t count = c.overlap() ? 2 * ratio : ratio;
  entries.resize(static_cast<size_t>(count));
  values.resize(static_cast<size_t>(count));
  for (int64_t j = 0; j < c.dim; ++j) {
    for (int64_t e = 0; e < count; ++e) {
      const bool earlier = c.overlap() && e < ratio;
      const int64_t position = earlier ? (block - 1) * ratio + e : block * ratio + (e - (c.overlap() ? ratio : 0));
      if (position < 0) {
        // The first block has no block before it: llama.cpp's zero value and -inf score.
        values[e] = 0.0f;
        entries[e] = -std::numeric_limits<float>::infinity();
        continue;
      }
      const float* slot = state + (position % slots) * 2 * width;
      const int64_t at = j + (c.overlap() && !earlier ? c.dim : 0);
      values[e] = slot[at];
      entries[e] = slot[width + at];
    }
    cpu::softmax(entries.data(), count);
    double sum = 0.0;
    for (int64_t e = 0; e < count; ++e) sum += static_cast<double>(values[e] * entries[e]);
    row[j] = static_cast<float>(sum);
  }
  cpu::rms_norm(row, 1, c.dim, c.dim, c.weights->norm, eps, row, c.dim);
  cpu::rope_angles(rope, block * ratio, angles);
  cpu::rope_apply(row + c.dim - rope.dims, 1, rope.dims, rope, angles);
}

// Runs compressor `c` over rows [row, row + n) of `values` and `scores`, those of positions
// [first, first + n) of `cache`: each row into its ring slot, each completed block compressed
// into the layer's compressed rows.
void run_compressor(const Compressor& c, const model::HyperParams& p, KvCache& cache, int64_t first, int64_t layer,
                    int64_t row, int64_t n, float* state, const std::vector<float>& values,
                    const std::vector<float>& scores, ForwardScratch& s, cpu::ThreadPool& pool) {
  const int64_t width = c.width();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t position = first + i;
    float* slot = state + (position % c.slots()) * 2 * width;
    std::copy_n(values.data() + (row + i) * width, width, slot);
    std::copy_n(scores.data() + (row + i) * width, width, slot + width);
    if ((position + 1) % c.ratio != 0) continue;
    const int64_t block = position / c.ratio;
    s.compressed_row.resize(static_cast<size_t>(c.dim));
    compress_block(c, state, block, p.compressed.rope, p.rms_epsilon, s.compressor_entries, s.compressor_values,
                   s.compressor_angles, s.compressed_row.data());
    if (c.rotate) rotate_by_hadamard(s.compressed_row.data(), 1, c.dim, c.dim, s, pool);
    cache.store_compressed(layer, block, c.offset, c.dim, s.compressed_row.data());
  }
}

// Rotates the last rope.dims elements of each of `heads` heads (head_dim apart) of row i by the
// row's angles, or (`back`) by their inverse (ggml_rope_ext_back).
void rotate_tails(float* rows, int64_t n, int64_t heads, int64_t head_dim, const cpu::RopeParams& rope,
                  const std::vector<std::vector<float>>& angles, bool back, std::vector<float>& inverse) {
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float>* a = &angles[i];
    if (back) {
      inverse = angles[i];
      for (size_t k = 1; k < inverse.size(); k += 2) inverse[k] = -inverse[k];
      a = &inverse;
    }
    cpu::rope_apply(rows + i * heads * head_dim + head_dim - rope.dims, heads, rope.dims, rope, *a, head_dim);
  }
}

}  // namespace

void compressed_attention(const model::HyperParams& p, const model::AttentionWeights& a, int64_t layer, int64_t n,
                          std::span<const SequenceRows> batch, ForwardScratch& s, cpu::ThreadPool& pool) {
  const CompressedParams& c = p.compressed;
  const model::CompressedWeights& w = a.compressed;
  const model::IndexerParams& x = p.indexer;
  const int64_t d = p.head_dim, heads = p.heads, ratio = w.ratio;
  const cpu::RopeParams& rope = ratio != 0 ? c.rope : p.rope;
  const auto& angles = ratio != 0 ? s.compressed_rope_angles : s.rope_angles;
  std::vector<int64_t>& positions = s.row_positions;
  positions.clear();
  for (const SequenceRows& part : batch) {
    for (int64_t i = 0; i < static_cast<int64_t>(part.tokens.size()); ++i) positions.push_back(part.first_position + i);
  }

  // The query: low rank, normed; each head RMS-normed (no weight); its tail rotated.
  s.input.reset(s.normed.data(), n, p.embedding);
  cpu::matmul(w.q_a, s.input, s.q_low.data(), pool);
  cpu::rms_norm(s.q_low.data(), n, c.q_lora_rank, c.q_lora_rank, w.q_a_norm, p.rms_epsilon, s.q_low.data(),
                c.q_lora_rank);
  s.input.reset(s.q_low.data(), n, c.q_lora_rank);
  cpu::matmul(w.q_b, s.input, s.q.data(), pool);
  cpu::rms_norm(s.q.data(), n * heads, d, d, nullptr, p.rms_epsilon, s.q.data(), d);
  rotate_tails(s.q.data(), n, heads, d, rope, angles, false, s.compressor_angles);
  // The key (and value) row: normed, its tail rotated.
  s.input.reset(s.normed.data(), n, p.embedding);
  cpu::matmul(w.kv, s.input, s.k.data(), pool);
  cpu::rms_norm(s.k.data(), n, d, d, w.kv_norm, p.rms_epsilon, s.k.data(), d);
  rotate_tails(s.k.data(), n, 1, d, rope, angles, false, s.compressor_angles);

  const bool indexed = ratio == CompressedParams::kOverlapRatio;
  const Compressor main{&w.compressor, ratio, d, 0, false};
  const Compressor keys{&w.indexer_compressor, ratio, x.head_dim, d, true};
  if (ratio != 0) {
    compressor_rows(main, n, positions, s.compressor_kv, s.compressor_scores, s, pool);
    if (indexed) compressor_rows(keys, n, positions, s.indexer_kv, s.indexer_scores_in, s, pool);
  }
  if (indexed) {
    // The indexer's queries (from the normed low-rank query) and per-head weights.
    const int64_t q_width = x.heads * x.head_dim;
    s.indexer_q.resize(static_cast<size_t>(n * q_width));
    s.indexer_weights.resize(static_cast<size_t>(n * x.heads));
    s.input.reset(s.q_low.data(), n, c.q_lora_rank);
    cpu::matmul(w.indexer_q, s.input, s.indexer_q.data(), pool);
    rotate_tails(s.indexer_q.data(), n, x.heads, x.head_dim, c.rope, s.compressed_rope_angles, false,
                 s.compressor_angles);
    rotate_by_hadamard(s.indexer_q.data(), n * x.heads, x.head_dim, x.head_dim, s, pool);
    s.input.reset(s.normed.data(), n, p.embedding);
    cpu::matmul(w.indexer_weights, s.input, s.indexer_weights.data(), pool);
    const float scale = 1.0f / std::sqrt(static_cast<float>(x.head_dim * x.heads));
    for (float& v : s.indexer_weights) v *= scale;
    s.selected.resize(static_cast<size_t>(n * x.top_k));
  }

  cpu::CompressedAttentionShape shape;
  shape.heads = heads;
  shape.head_dim = d;
  shape.scale = p.attention_scale;
  shape.window = p.sliding_window;
  shape.ratio = ratio;
  shape.compressed_stride = model::compressed_width_at_ratio(p, ratio);
  shape.sinks = a.sinks;
  shape.selected_count = indexed ? x.top_k : 0;
  int64_t row = 0;
  for (const SequenceRows& part : batch) {
    const auto rows = static_cast<int64_t>(part.tokens.size());
    KvCache& cache = *part.cache;
    if (ratio != 0) {
      // The rings are the layer's recurrent state: a snapshot inside the rows takes them there.
      float* state = cache.recurrent(layer);
      const int64_t state_floats = CompressedParams::state_floats(ratio, d, x.head_dim);
      runs_between_snapshots(part.snapshots, rows, [&](int64_t from, int64_t to, const StateSnapshot* snapshot) {
        const int64_t first = part.first_position + from;
        run_compressor(main, p, cache, first, layer, row + from, to - from, state, s.compressor_kv, s.compressor_scores,
                       s, pool);
        if (indexed) {
          run_compressor(keys, p, cache, first, layer, row + from, to - from,
                         state + CompressedParams::state_floats(ratio, d, 0), s.indexer_kv, s.indexer_scores_in, s,
                         pool);
        }
        if (snapshot) std::copy_n(state, state_floats, snapshot->states + cache.recurrent_offset(layer));
      });
    }
    if (indexed) {
      const cpu::IndexerShape selection{x.heads, x.head_dim, x.top_k, shape.compressed_stride, ratio};
      cpu::select_positions(s.indexer_q.data() + row * x.heads * x.head_dim, s.indexer_weights.data() + row * x.heads,
                            rows, part.first_position, cache.compressed(layer) + d, selection,
                            s.selected.data() + row * x.top_k, s.indexer_scores, pool);
    }
    for (int64_t done = 0; done < rows; done += model::kWindowSlice) {
      const int64_t slice = std::min(model::kWindowSlice, rows - done), first = part.first_position + done;
      cache.store(layer, first, slice, s.k.data() + (row + done) * d, nullptr);
      shape.raw_first = cache.first_cached(layer);
      shape.selected = indexed ? s.selected.data() + (row + done) * x.top_k : nullptr;
      cpu::compressed_attention(s.q.data() + (row + done) * heads * d, slice, first, cache.keys(layer),
                                cache.compressed(layer), shape, s.attention.data() + (row + done) * heads * d, pool);
    }
    row += rows;
  }

  // Each head's output rotated back, then each group of heads projected to the output rank.
  rotate_tails(s.attention.data(), n, heads, d, rope, angles, true, s.compressor_angles);
  const int64_t group_width = heads / c.output_groups * d, out_width = c.output_groups * c.output_rank;
  s.grouped.resize(static_cast<size_t>(n * out_width));
  per_head(w.output_a, s.attention.data(), n, heads * d, group_width, s.grouped.data(), out_width, c.output_rank, s,
           pool);
  std::copy_n(s.grouped.data(), n * out_width, s.attention.data());
}

}  // namespace bloomery::engine
