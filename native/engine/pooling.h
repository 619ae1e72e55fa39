// Embeddings: a sequence's hidden states after the output norm (LogitRows::kEmbeddings), pooled
// into one vector as llama.cpp's build_pooling does, or scored by a reranker's head.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cpu/thread_pool.h"
#include "model/model.h"

namespace bloomery::engine {

// "none", "mean", "cls", "last", "rank": the names src/ and llama-server's --pooling use.
std::string_view pooling_name(model::Pooling pooling);
std::optional<model::Pooling> pooling_named(std::string_view name);

// Throws NOT_A_RERANKER for kRank on a model without a RankHead.
void check_pooling(const model::Model& model, model::Pooling pooling);

// Pools `rows` (n rows of model.params.embedding floats, in position order): kNone returns them
// as they are, kMean their mean, kCls the first, kLast the last; kRank returns the rank head's
// outputs (one per label) for its row. The caller has checked the pooling (check_pooling).
std::vector<float> pool(const model::Model& model, model::Pooling pooling, std::span<const float> rows,
                        cpu::ThreadPool& threads);

}  // namespace bloomery::engine
