// DeepSeek's lightning indexer (DeepSeek sparse attention: DeepSeek-V3.2, GLM-5): which cached
// positions each query attends. A query's heads score a position's one key as the sum over
// heads of max(q_h . k, 0) times the head's weight; the query attends its top_k best-scored
// positions (all it sees when they are fewer). The arithmetic follows llama.cpp's fused CPU op
// (ggml_lightning_indexer: ggml_vec_dot_f32 at this host's tier over the f16 keys converted to
// float, the heads summed in order) and its selection (ggml_top_k's std::partial_sort over the
// row of positions), so ties resolve as there.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/thread_pool.h"

namespace bloomery::cpu {

struct IndexerShape {
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t top_k = 0;
  int64_t key_stride = 0;  // f16 elements from one position's key to the next
  // Positions per key: a token at position p sees keys [0, (p + 1) / ratio) (DeepSeek-V4's
  // indexer scores compressed rows, one per block of `ratio` positions).
  int64_t ratio = 1;
};

// The orthonormal Walsh-Hadamard matrix of `dim` (a power of two), as llama.cpp builds its
// indexer's rotation: row-major, entries +-1/sqrt(dim).
std::vector<float> hadamard_matrix(int64_t dim);

// q: n rows of heads * head_dim floats (token i at position first_position + i), weights: n rows
// of heads floats, keys: f16 rows for the keys the last token sees. Writes, for each token, top_k
// keys it attends to selected[i * top_k ...], unordered, -1 past the last where it sees fewer
// than top_k. `scores`: a buffer for every token's scores, kept between calls.
void select_positions(const float* q, const float* weights, int64_t n, int64_t first_position, const uint16_t* keys,
                      const IndexerShape& shape, int32_t* selected, std::vector<float>& scores, ThreadPool& pool);

}  // namespace bloomery::cpu
