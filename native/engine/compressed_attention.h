// DeepSeek-V4's attention block (model::AttentionKind::kCompressed), as llama.cpp's deepseek4
// graph computes it: the low-rank query (normed, then each head RMS-normed), the one key/value
// row per position (normed), both rotated over their last rope dims; the layer's compressor,
// which turns each completed block of positions into one compressed row (a softmax over the
// block's positions, per element, of their scores, weighting their values; then normed and
// rotated at the block's first position), with the indexer's compressed keys beside them on
// layers of overlapping blocks, whose lightning indexer picks the rows each query attends; the
// attention over the window's raw rows and those compressed rows; the heads' outputs rotated
// back, then each group of heads projected to the output rank.
#pragma once

#include <cstdint>
#include <span>

#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "model/model.h"

namespace bloomery::engine {

// `a` over the n rows of s.normed (each part's raw rows, compressed rows and compressor state
// kept in layer `layer` of its cache; a.compressed.ratio says which it has): into s.attention, n rows of groups *
// output_rank (the input of the layer's attn_output_b).
void compressed_attention(const model::HyperParams& p, const model::AttentionWeights& a, int64_t layer, int64_t n,
                          std::span<const SequenceRows> batch, ForwardScratch& s, cpu::ThreadPool& pool);

}  // namespace bloomery::engine
