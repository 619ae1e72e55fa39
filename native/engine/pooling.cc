#include "engine/pooling.h"

#include <iterator>

#include "base/error.h"
#include "cpu/matmul.h"
#include "cpu/softmax.h"

namespace bloomery::engine {

using model::Pooling;

namespace {

constexpr std::string_view kNames[] = {"none", "mean", "cls", "last", "rank"};

}  // namespace

std::string_view pooling_name(Pooling pooling) { return kNames[static_cast<size_t>(pooling)]; }

std::optional<Pooling> pooling_named(std::string_view name) {
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (kNames[i] == name) return static_cast<Pooling>(i);
  }
  return std::nullopt;
}

void check_pooling(const model::Model& model, Pooling pooling) {
  if (pooling == Pooling::kRank && model.rank_head.empty()) {
    throw Error("NOT_A_RERANKER", "the model has no reranker head (cls.output): it cannot rank");
  }
}

namespace {

std::vector<float> row(std::span<const float> rows, int64_t width, int64_t i) {
  const auto first = rows.begin() + i * width;
  return {first, first + width};
}

// The head's label logits for one row, then their softmax where the head asks for it.
std::vector<float> rank(const model::RankHead& head, std::vector<float> pooled, cpu::ThreadPool& threads) {
  std::vector<float> out(static_cast<size_t>(head.output.rows));
  cpu::MatmulInput input;
  input.reset(pooled.data(), 1, head.output.cols);
  cpu::matmul(head.output, input, out.data(), threads);
  if (head.output_bias) {
    for (size_t i = 0; i < out.size(); ++i) out[i] += head.output_bias[i];
  }
  // As llama.cpp's ggml_soft_max: the exponentials summed in double, then each times the float
  // nearest 1 / sum (a float sum and a division part from it by an ulp or two).
  if (head.softmax) cpu::softmax(out.data(), static_cast<int64_t>(out.size()));
  return out;
}

}  // namespace

std::vector<float> pool(const model::Model& model, Pooling pooling, std::span<const float> rows,
                        cpu::ThreadPool& threads) {
  const int64_t width = model.params.embedding;
  const auto n = static_cast<int64_t>(rows.size()) / width;
  switch (pooling) {
    case Pooling::kNone:
      return {rows.begin(), rows.end()};
    case Pooling::kMean: {
      std::vector<float> sum(static_cast<size_t>(width), 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < width; ++j) sum[j] += rows[i * width + j];
      }
      for (float& x : sum) x /= static_cast<float>(n);
      return sum;
    }
    case Pooling::kCls:
      return row(rows, width, 0);
    case Pooling::kLast:
      return row(rows, width, n - 1);
    case Pooling::kRank:
      return rank(model.rank_head, row(rows, width, model.rank_head.last_row ? n - 1 : 0), threads);
  }
  return {};
}

}  // namespace bloomery::engine
