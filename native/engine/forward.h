// The forward pass of a decoder-only transformer over a batch of tokens of one sequence:
// embeddings, then per layer attention and FFN (dense or MoE) with residuals, then the
// output norm and logits. It reads the model's hyper-parameters and weights, never its
// architecture's name.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "cpu/matmul.h"
#include "cpu/moe.h"
#include "cpu/thread_pool.h"
#include "engine/kv_cache.h"
#include "model/model.h"

namespace bloomery::engine {

// Buffers reused from one pass to the next.
struct ForwardScratch {
  std::vector<float> residual, normed, q, k, v, attention, projected, gate, up, activated, router_logits;
  std::vector<std::vector<float>> rope_angles;  // per token
  cpu::MatmulInput input;
  cpu::Routing routing;
  cpu::MoeScratch moe;
};

// Which rows of logits a pass returns.
enum class LogitRows : uint8_t { kLast, kAll };

// Runs `tokens` at positions [first_position, first_position + tokens.size()), storing their
// keys and values in `cache`, and writes vocab logits for the last token or for each token.
// The caller checks token ids and that the positions fit the cache.
void forward(const model::Model& model, std::span<const int32_t> tokens, int64_t first_position, KvCache& cache,
             LogitRows rows, std::vector<float>& logits, ForwardScratch& scratch, cpu::ThreadPool& pool);

}  // namespace bloomery::engine
