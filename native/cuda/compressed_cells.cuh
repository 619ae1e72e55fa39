// A token's cells in DeepSeek-V4's compressed attention (model::AttentionKind::kCompressed): the
// raw rows of its window's positions, then the compressed rows it sees (all of them, or those a
// lightning indexer chose). What both of its kernels walk: compressed_attention.cu's, for a few
// tokens, and compressed_attention_tiles.cu's, for prompts.
#pragma once

#include <cstdint>

#include "cuda/ops.h"

namespace bloomery::cuda {

// A token's cells: raw rows of positions [raw_first, position], then compressed rows.
struct Cells {
  int position, raw_first, raw, compressed;  // raw and compressed: counts of cells (compressed may be masked)
  int seen;                                  // compressed rows the token sees
  const int32_t* chosen;                     // the indexer's list, or null
  __device__ int count() const { return raw + compressed; }
};

__device__ __forceinline__ Cells cells_of(const CompressedAttention& a, int token) {
  Cells c;
  c.position = a.positions[token];
  c.raw_first = a.window > 0 ? max(0, c.position - static_cast<int>(a.window) + 1) : 0;
  c.raw = c.position + 1 - c.raw_first;
  c.seen = a.ratio > 0 ? (c.position + 1) / static_cast<int>(a.ratio) : 0;
  c.chosen = a.selected ? a.selected + static_cast<int64_t>(token) * a.top_k : nullptr;
  c.compressed = a.ratio == 0 ? 0 : (c.chosen ? static_cast<int>(a.top_k) : c.seen);
  return c;
}

// Cell `cell`'s row, or null where it is masked (a selection entry past what the token sees).
__device__ __forceinline__ const uint16_t* cell_row(const CompressedAttention& a, const Cells& c, int cell) {
  if (cell < c.raw) return a.raw + static_cast<int64_t>(c.raw_first + cell) * a.raw_row;
  const int k = cell - c.raw;
  const int block = c.chosen ? c.chosen[k] : k;
  if (block < 0 || block >= c.seen) return nullptr;
  return a.compressed + static_cast<int64_t>(block) * a.compressed_stride;
}

// compressed_attention_tiles.cu: whether its blocks of 64 heads of a token serve `a` (prompts:
// 16 tokens or more; rows the 16-byte copies can read), and the launch.
bool compressed_tiles_serve(const CompressedAttention& a);
void compressed_attention_tiles(const CompressedAttention& a, StreamHandle stream);

}  // namespace bloomery::cuda
