#include "cpu/matmul.h"

#include <algorithm>

#include "quant/ggml_types.h"

namespace bloomery::cpu {

namespace {

// Weight rows per task: enough work per hand-out, small enough for a few tasks per thread.
constexpr int64_t kRowsPerTask = 16;
// A task's rows are one contiguous stream, but the hardware prefetcher stops at each 4 KiB
// page; asking for the row after next while a row computes keeps the loads ahead of a decode
// step's single pass over the weights.
constexpr int64_t kPrefetchRowsAhead = 2;

void prefetch_row(const uint8_t* row, size_t bytes) {
  for (size_t line = 0; line < bytes; line += 64) __builtin_prefetch(row + line, 0, 3);
}

}  // namespace

void quantize_rows(const quant::QuantKernels& kernels, const float* x, int64_t n, int64_t cols, int64_t stride,
                   QuantizedRows& out, ThreadPool& pool) {
  out.activation_type = kernels.activation_type;
  out.row_bytes = *quant::ggml_row_bytes(*quant::ggml_type(kernels.activation_type), static_cast<uint64_t>(cols));
  out.bytes.resize(out.row_bytes * static_cast<size_t>(n));
  pool.parallel_for(static_cast<size_t>(n), 4, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      kernels.quantize_activations(x + i * stride, out.bytes.data() + i * out.row_bytes, cols);
    }
  });
}

void dot_rows(const WeightMatrix& w, int64_t first, int64_t last, const uint8_t* const* activations, float* const* out,
              int64_t count) {
  const quant::QuantKernels& k = *w.kernels;
  const bool repacked = w.repacked_by_llama();
  const quant::VecDotFn dot = repacked ? k.vec_dot_repacked : k.vec_dot;
  const quant::VecDotRowsFn dot_many = repacked ? k.vec_dot_rows_repacked : k.vec_dot_rows;
  const quant::VecDotWeightRowsFn dot_weight_rows = repacked ? k.vec_dot_weight_rows_repacked : k.vec_dot_weight_rows;
  if (dot_weight_rows) {
    // Eight weight rows at a time against up to kDotRows activation rows, sharing each weight
    // block's decoding among them (quant/kernels.h says how each kernel does). The first
    // activation rows' pass prefetches the eight weight rows after them (the later passes find
    // them in cache), past this task's rows too (within the matrix): the thread's next task mostly
    // takes them, and so its first rows come from cache.
    constexpr int64_t kGroup = quant::kWeightRows;
    float tile[quant::kDotRows * kGroup];
    for (; first + kGroup <= last; first += kGroup) {
      for (int64_t done = 0; done < count; done += quant::kDotRows) {
        const int rows = static_cast<int>(std::min<int64_t>(quant::kDotRows, count - done));
        const int64_t ahead = done == 0 ? std::clamp<int64_t>(w.rows - (first + kGroup), 0, kGroup) : 0;
        dot_weight_rows(w.row(first), w.row_bytes, reinterpret_cast<const void* const*>(activations + done), rows,
                        w.cols, tile, ahead > 0 ? w.row(first + kGroup) : nullptr,
                        static_cast<size_t>(ahead) * w.row_bytes);
        for (int r = 0; r < rows; ++r) std::copy_n(tile + r * kGroup, kGroup, out[done + r] + first);
      }
    }
  }
  if (!dot_many) {
    for (int64_t r = 0; r < count; ++r) {
      for (int64_t o = first; o < last; ++o) out[r][o] = dot(w.row(o), activations[r], w.cols);
    }
    return;
  }
  float group[quant::kDotRows];
  for (int64_t done = 0; done < count; done += quant::kDotRows) {
    const int rows = static_cast<int>(std::min<int64_t>(quant::kDotRows, count - done));
    const void* const* a = reinterpret_cast<const void* const*>(activations + done);
    // Only the first group of activation rows reads the weights from memory; the later ones find
    // them in cache.
    const bool from_memory = done == 0;
    if (from_memory) {
      for (int64_t o = first + 1; o < std::min(last, first + kPrefetchRowsAhead); ++o)
        prefetch_row(w.row(o), w.row_bytes);
    }
    for (int64_t o = first; o < last; ++o) {
      if (from_memory && o + kPrefetchRowsAhead < last) prefetch_row(w.row(o + kPrefetchRowsAhead), w.row_bytes);
      dot_many(w.row(o), a, rows, w.cols, group);
      for (int r = 0; r < rows; ++r) out[done + r][o] = group[r];
    }
  }
}

void matmul(const WeightMatrix& w, const QuantizedRows& x, int64_t n, float* y, ThreadPool& pool) {
  // Reused by this thread's later calls: a decode step allocates nothing here.
  // Workers see their own thread_locals, so the body captures plain pointers to these.
  thread_local std::vector<const uint8_t*> activation_rows;
  thread_local std::vector<float*> out_rows;
  activation_rows.resize(static_cast<size_t>(n));
  out_rows.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) activation_rows[i] = x.row(i), out_rows[i] = y + i * w.rows;
  const uint8_t* const* activations = activation_rows.data();
  float* const* out = out_rows.data();
  const size_t blocks = static_cast<size_t>((w.rows + kRowsPerTask - 1) / kRowsPerTask);
  const size_t task_bytes = static_cast<size_t>(kRowsPerTask) * w.row_bytes * static_cast<size_t>(n);
  pool.parallel_for(blocks, pool.grain(blocks, task_bytes), [&](size_t begin, size_t end) {
    for (size_t b = begin; b < end; ++b) {
      const int64_t first = static_cast<int64_t>(b) * kRowsPerTask;
      dot_rows(w, first, std::min(w.rows, first + kRowsPerTask), activations, out, n);
    }
  });
}

void MatmulInput::reset(const float* x, int64_t n, int64_t cols) {
  x_ = x;
  n_ = n;
  cols_ = cols;
  valid_.assign(valid_.size(), false);
}

const QuantizedRows& MatmulInput::quantized_for(const quant::QuantKernels& kernels, ThreadPool& pool) {
  for (size_t i = 0; i < copies_.size(); ++i) {
    if (copies_[i].activation_type != kernels.activation_type) continue;
    if (!valid_[i]) quantize_rows(kernels, x_, n_, cols_, cols_, copies_[i], pool);
    valid_[i] = true;
    return copies_[i];
  }
  copies_.emplace_back();
  valid_.push_back(true);
  quantize_rows(kernels, x_, n_, cols_, cols_, copies_.back(), pool);
  return copies_.back();
}

void matmul(const WeightMatrix& w, MatmulInput& x, float* y, ThreadPool& pool) {
  matmul(w, x.quantized_for(*w.kernels, pool), x.rows(), y, pool);
}

void dequantize_row(const WeightMatrix& w, int64_t r, float* out) { w.kernels->dequantize_row(w.row(r), out, w.cols); }

}  // namespace bloomery::cpu
