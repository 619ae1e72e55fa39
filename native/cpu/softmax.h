// Softmax in place, as llama.cpp's CPU backend computes it (ggml_soft_max): the row's max
// subtracted, e^x of each whole SIMD block (avx512_math.h, avx2_math.h), each block's
// exponentials added in float in the order of a horizontal sum and the block sums added in
// double, then the row multiplied by the float nearest 1 / sum. A row's last partial block
// takes std::exp one entry at a time (summed in double), as ggml's scalar tail does; where
// llama.cpp pads its rows with masked entries (attention over the KV cells: a multiple of 256),
// the partial block instead goes through the vector exponential with zeros in its missing
// lanes, which is what the padding makes of it. The same operations in the same order give the
// same bits as llama.cpp at each tier.
#pragma once

#include <cstdint>

namespace bloomery::cpu {

// How a row that does not fill its last SIMD block ends.
enum class SoftmaxTail : uint8_t {
  kScalar,  // the row is all there is (the router's experts): std::exp for the last entries
  kPadded,  // the row continues with masked entries (attention): their e^x are 0
};

// The kernel of this host's tier.
void softmax(float* x, int64_t n, SoftmaxTail tail = SoftmaxTail::kScalar);

// The tiers: std::exp one at a time (the tail is irrelevant), AVX2 (blocks of 8) and AVX-512
// (blocks of 16).
void softmax_scalar(float* x, int64_t n, SoftmaxTail tail);
void softmax_avx2(float* x, int64_t n, SoftmaxTail tail);
void softmax_avx512(float* x, int64_t n, SoftmaxTail tail);

}  // namespace bloomery::cpu
