// Matrix products against weights stored in any ggml type the quant kernels serve. The
// way ggml does it: each activation row is quantized once into the format the weight
// type's dot reads, then every weight row is dotted with it. Work is split over blocks of
// weight rows, so a block stays in cache while every activation row passes over it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/thread_pool.h"
#include "quant/kernels.h"

namespace bloomery::cpu {

// A row-major matrix of `rows` rows of `cols` elements in one ggml type (GGUF's ne0 = cols).
struct WeightMatrix {
  const quant::QuantKernels* kernels = nullptr;
  const uint8_t* data = nullptr;
  int64_t cols = 0;
  int64_t rows = 0;
  size_t row_bytes = 0;
  // llama.cpp keeps this weight as stored, never repacked: its token embedding, also where it
  // serves as the output. Its other weights with a repacked kernel and a multiple of 8 rows it
  // repacks, so their products here take QuantKernels::vec_dot_repacked's order.
  bool stored_plain_by_llama = false;

  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  bool empty() const { return data == nullptr; }
  bool repacked_by_llama() const { return kernels->vec_dot_repacked && rows % 8 == 0 && !stored_plain_by_llama; }
};

// Float rows quantized into the activation format of a weight type.
struct QuantizedRows {
  std::vector<uint8_t> bytes;
  size_t row_bytes = 0;
  uint32_t activation_type = 0;

  const uint8_t* row(int64_t r) const { return bytes.data() + static_cast<size_t>(r) * row_bytes; }
};

// Quantizes `n` rows of `cols` floats (row stride `stride`) for weights of `kernels`' type.
void quantize_rows(const quant::QuantKernels& kernels, const float* x, int64_t n, int64_t cols, int64_t stride,
                   QuantizedRows& out, ThreadPool& pool);

// out[k][o] = dot(w.row(o), activations[k]) for o in [first, last) and k < count, in
// w's activation format: up to quant::kDotRows activations at a time where the kernels have a
// multi-row dot, so each weight row is decoded once per group rather than once per row.
void dot_rows(const WeightMatrix& w, int64_t first, int64_t last, const uint8_t* const* activations, float* const* out,
              int64_t count);

// y[i * w.rows + o] = dot(w.row(o), x.row(i)) for i < n: x quantized for w by quantize_rows.
void matmul(const WeightMatrix& w, const QuantizedRows& x, int64_t n, float* y, ThreadPool& pool);

// Float rows that several matrices multiply: each activation format is quantized once
// however many weights read it (Q, K and V of one layer; an FFN's gate and up).
class MatmulInput {
 public:
  // Points at n rows of `cols` floats; forgets the quantized copies of the previous rows.
  void reset(const float* x, int64_t n, int64_t cols);
  const QuantizedRows& quantized_for(const quant::QuantKernels& kernels, ThreadPool& pool);
  int64_t rows() const { return n_; }

 private:
  const float* x_ = nullptr;
  int64_t n_ = 0;
  int64_t cols_ = 0;
  std::vector<QuantizedRows> copies_;
  std::vector<bool> valid_;
};

// y = w x for every row of `x`.
void matmul(const WeightMatrix& w, MatmulInput& x, float* y, ThreadPool& pool);

// Dequantizes row `r` of `w` into `out` (w.cols floats): an embedding lookup.
void dequantize_row(const WeightMatrix& w, int64_t r, float* out);

}  // namespace bloomery::cpu
