// The lightning indexer's part of a pass (AttentionKind::kSparseMla layers with an indexer of
// their own), as llama.cpp's deepseek32 and glm-dsa graphs run it: queries from MLA's normed
// low-rank query, one key per position from the attention's input (layer-normed), both rotated
// over their first rope dims and multiplied by the Hadamard matrix, and per head a weight; the
// keys go to the cache beside MLA's, and each row's selection to ForwardScratch::selected.
#pragma once

#include <cstdint>

#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "model/model.h"

namespace bloomery::engine {

// Multiplies `count` vectors of `dim` floats, `stride` apart, by the Hadamard matrix, in place: a
// product of F32 matrices, as llama.cpp's ggml_mul_mat by its rotation.
void rotate_by_hadamard(float* x, int64_t count, int64_t dim, int64_t stride, ForwardScratch& s, cpu::ThreadPool& pool);

// The n rows' indexer queries and head weights (into s.indexer_q, s.indexer_weights), and each
// row's key into its key row of s.k (model::indexer_key_offset of model::cache_row(p).keys).
// Reads s.q_low (normed), s.normed and s.rope_angles.
void indexer_rows(const model::HyperParams& p, const model::IndexerWeights& w, int64_t n, ForwardScratch& s,
                  cpu::ThreadPool& pool);

// The positions each of a part's `n` rows (rows [row, row + n) of the pass) attends, scored
// against the keys of `layer` in its cache (those rows' stored already): into s.selected.
void select_positions(const model::HyperParams& p, const SequenceRows& part, int64_t layer, int64_t row, int64_t n,
                      ForwardScratch& s, cpu::ThreadPool& pool);

}  // namespace bloomery::engine
