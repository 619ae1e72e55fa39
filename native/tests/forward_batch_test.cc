// The multi-sequence forward pass against each sequence run alone: a row's logits must not
// depend on the other rows of its pass, bit for bit, so that a stream gives the same tokens
// whether it shares passes or not. First the quantized products (one row alone vs the same
// row in batches of every size up to two multi-row groups), then the whole pass on the default
// model, with prompt chunks and decode rows of several sequences mixed.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "cpu/cpu_dispatch.h"
#include "cpu/matmul.h"
#include "cpu/thread_pool.h"
#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "model/model.h"
#include "quant/float_formats.h"
#include "quant/ggml_types.h"
#include "quant/quantize_activations.h"
#include "tests/check.h"

using namespace bloomery;

namespace {

constexpr uint32_t kF16 = 1, kQ8_0 = 8, kQ4_K = 12, kQ6_K = 14;
constexpr const char* kDefaultModel = "models/bloomery-tiny-moe-Q8_0.gguf";

// `rows` weight rows of `cols` elements of `type`: Q8_0 and F16 quantized from random floats;
// the K-quants random bytes with every f16 scale field set small, so no block is inf or NaN.
std::vector<uint8_t> random_weights(uint32_t type, int64_t cols, int64_t rows, std::mt19937& rng) {
  const size_t row_bytes = *quant::ggml_row_bytes(*quant::ggml_type(type), static_cast<uint64_t>(cols));
  std::vector<uint8_t> out(row_bytes * static_cast<size_t>(rows));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols));
  if (type == kQ8_0 || type == kF16) {
    for (int64_t r = 0; r < rows; ++r) {
      for (float& v : x) v = uniform(rng);
      uint8_t* row = out.data() + static_cast<size_t>(r) * row_bytes;
      if (type == kQ8_0) {
        quant::quantize_row_q8_0(x.data(), row, cols);
      } else {
        quant::quantize_row_f16(x.data(), row, cols);
      }
    }
    return out;
  }
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  const uint16_t half = quant::fp32_to_fp16(0.001f);
  const size_t block_bytes = quant::ggml_type(type)->block_bytes;
  const std::vector<size_t> f16_fields = type == kQ4_K ? std::vector<size_t>{0, 2} : std::vector<size_t>{208};
  for (size_t block = 0; block < out.size() / block_bytes; ++block) {
    for (const size_t at : f16_fields) std::memcpy(out.data() + block * block_bytes + at, &half, 2);
  }
  return out;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

}  // namespace

TEST(forward_quantized_product_rows_do_not_depend_on_the_batch) {
  std::mt19937 rng(3);
  cpu::ThreadPool pool(2);
  const int64_t cols = 512, out_rows = 40, max_batch = 9;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(cols * max_batch));
  for (float& v : x) v = uniform(rng);
  for (const uint32_t type : {kF16, kQ8_0, kQ4_K, kQ6_K}) {
    const std::vector<uint8_t> bytes = random_weights(type, cols, out_rows, rng);
    const cpu::WeightMatrix w{&cpu::host_quant_kernels(type), bytes.data(), cols, out_rows,
                              *quant::ggml_row_bytes(*quant::ggml_type(type), static_cast<uint64_t>(cols))};
    // Each row alone, then the first n rows together for every n: the row's outputs never change.
    std::vector<float> alone(static_cast<size_t>(out_rows * max_batch));
    cpu::QuantizedRows quantized;
    for (int64_t i = 0; i < max_batch; ++i) {
      cpu::quantize_rows(*w.kernels, x.data() + i * cols, 1, cols, cols, quantized, pool);
      cpu::matmul(w, quantized, 1, alone.data() + i * out_rows, pool);
    }
    for (int64_t n = 2; n <= max_batch; ++n) {
      std::vector<float> together(static_cast<size_t>(out_rows * n));
      cpu::quantize_rows(*w.kernels, x.data(), n, cols, cols, quantized, pool);
      cpu::matmul(w, quantized, n, together.data(), pool);
      for (int64_t i = 0; i < n; ++i) {
        CHECK(same_bits(together.data() + i * out_rows, alone.data() + i * out_rows, out_rows))
            << "type " << type << ": row " << i << " of a batch of " << n;
      }
    }
  }
}

TEST(forward_several_sequences_in_one_pass_equal_each_alone) {
  std::unique_ptr<model::Model> model;
  try {
    model = model::load_model(kDefaultModel);
  } catch (const std::exception& e) {
    CHECK(false) << kDefaultModel << " (run from the repository root): " << e.what();
    return;
  }
  const model::HyperParams& p = model->params;
  const size_t vocab = static_cast<size_t>(p.vocab);
  cpu::ThreadPool pool(2);
  engine::ForwardScratch scratch;
  using engine::LogitRows;
  using engine::SequenceRows;

  // Three sequences: A and B start with prompts, C with one token; then A decodes while B's
  // prompt goes on in a second chunk and C stays out.
  const std::vector<int32_t> a_prompt{1, 17, 230, 45, 9, 300, 12}, b_first{2, 99, 7, 150, 61}, b_second{33, 34};
  const std::vector<int32_t> c_token{77}, a_next{123};

  // Alone: one sequence per pass, every row's logits.
  std::vector<engine::KvCache> alone_caches;
  for (int i = 0; i < 3; ++i) alone_caches.emplace_back(*model, 64);
  const auto run_alone = [&](const std::vector<int32_t>& tokens, int64_t first, engine::KvCache& cache) {
    std::vector<float> logits;
    const SequenceRows part{tokens, first, &cache, LogitRows::kAll};
    engine::forward(*model, std::span(&part, 1), logits, scratch, pool);
    return logits;
  };
  const std::vector<float> a1 = run_alone(a_prompt, 0, alone_caches[0]);
  const std::vector<float> b1 = run_alone(b_first, 0, alone_caches[1]);
  const std::vector<float> c1 = run_alone(c_token, 0, alone_caches[2]);
  const std::vector<float> a2 = run_alone(a_next, 7, alone_caches[0]);
  const std::vector<float> b2 = run_alone(b_second, 5, alone_caches[1]);

  // Together: A's prompt (all rows), B's first chunk (last row), C's token in one pass.
  std::vector<engine::KvCache> caches;
  for (int i = 0; i < 3; ++i) caches.emplace_back(*model, 64);
  std::vector<float> logits;
  const SequenceRows first_pass[] = {{a_prompt, 0, &caches[0], LogitRows::kAll},
                                     {b_first, 0, &caches[1], LogitRows::kLast},
                                     {c_token, 0, &caches[2], LogitRows::kLast}};
  engine::forward(*model, first_pass, logits, scratch, pool);
  CHECK(logits.size() == (7 + 1 + 1) * vocab) << logits.size();
  CHECK(same_bits(logits.data(), a1.data(), 7 * vocab)) << "A's prompt rows";
  CHECK(same_bits(logits.data() + 7 * vocab, b1.data() + 4 * vocab, vocab)) << "B's last prompt row";
  CHECK(same_bits(logits.data() + 8 * vocab, c1.data(), vocab)) << "C's row";

  // A decode row and the rest of B's prompt, each against its own cache.
  const SequenceRows second_pass[] = {{a_next, 7, &caches[0], LogitRows::kLast},
                                      {b_second, 5, &caches[1], LogitRows::kAll}};
  engine::forward(*model, second_pass, logits, scratch, pool);
  CHECK(logits.size() == 3 * vocab) << logits.size();
  CHECK(same_bits(logits.data(), a2.data(), vocab)) << "A's decode row";
  CHECK(same_bits(logits.data() + vocab, b2.data(), 2 * vocab)) << "B's second chunk";

  // The batched logits are the alone ones, not merely equal to each other: a different
  // sequence gives different logits.
  CHECK(!same_bits(a2.data(), b2.data() + vocab, vocab)) << "A and B gave the same logits";
}

// An embedding's part (each row's hidden state after the output norm, no logits) beside a part that returns logits:
// each is what it is alone, bit for bit, and the hidden rows go to scratch.hidden, not among the logits.
TEST(forward_embedding_rows_beside_logit_rows_equal_each_alone) {
  std::unique_ptr<model::Model> model;
  try {
    model = model::load_model(kDefaultModel);
  } catch (const std::exception& e) {
    CHECK(false) << kDefaultModel << " (run from the repository root): " << e.what();
    return;
  }
  const model::HyperParams& p = model->params;
  const size_t vocab = static_cast<size_t>(p.vocab), width = static_cast<size_t>(p.embedding);
  cpu::ThreadPool pool(2);
  engine::ForwardScratch scratch;
  using engine::LogitRows;
  using engine::SequenceRows;
  const std::vector<int32_t> embedded{5, 80, 23, 301, 42}, generating{1, 17, 230};

  engine::KvCache alone_embedded(*model, 64), alone_generating(*model, 64);
  std::vector<float> logits;
  const SequenceRows embed_alone{embedded, 0, &alone_embedded, LogitRows::kEmbeddings};
  engine::forward(*model, std::span(&embed_alone, 1), logits, scratch, pool);
  CHECK(logits.empty()) << logits.size();
  const std::vector<float> hidden = scratch.hidden;
  CHECK(hidden.size() == embedded.size() * width) << hidden.size();
  const SequenceRows generate_alone{generating, 0, &alone_generating, LogitRows::kLast};
  engine::forward(*model, std::span(&generate_alone, 1), logits, scratch, pool);
  const std::vector<float> last = logits;

  engine::KvCache a(*model, 64), b(*model, 64);
  const SequenceRows both[] = {{generating, 0, &a, LogitRows::kLast}, {embedded, 0, &b, LogitRows::kEmbeddings}};
  engine::forward(*model, both, logits, scratch, pool);
  CHECK(logits.size() == vocab && same_bits(logits.data(), last.data(), vocab)) << "the logits part's row";
  CHECK(scratch.hidden.size() == hidden.size() && same_bits(scratch.hidden.data(), hidden.data(), hidden.size()))
      << "the embedding part's rows";
  // The output norm's rows: root mean square 1 before its weights, so not the residual itself.
  double square = 0;
  for (size_t j = 0; j < width; ++j)
    square += double(hidden[j] / model->output_norm[j]) * (hidden[j] / model->output_norm[j]);
  CHECK(std::abs(std::sqrt(square / double(width)) - 1.0) < 1e-3) << std::sqrt(square / double(width));
}

TEST(forward_refuses_snapshots_outside_a_parts_rows_or_out_of_order) {
  float states[1] = {};
  const auto code = [](std::span<const engine::StateSnapshot> snapshots, int64_t rows) -> std::string {
    try {
      engine::check_snapshots(snapshots, rows);
    } catch (const Error& e) {
      return e.code();
    }
    return "none";
  };
  const engine::StateSnapshot inside[] = {{1, states}, {3, states}};
  CHECK(code(inside, 4) == "none");
  CHECK(code({}, 4) == "none");
  const engine::StateSnapshot at_end[] = {{4, states}};  // the pass's end is no snapshot: its own state is
  CHECK(code(at_end, 4) == "INVALID_ARGUMENT");
  const engine::StateSnapshot at_start[] = {{0, states}};
  CHECK(code(at_start, 4) == "INVALID_ARGUMENT");
  const engine::StateSnapshot backwards[] = {{3, states}, {2, states}};
  CHECK(code(backwards, 4) == "INVALID_ARGUMENT");
  const engine::StateSnapshot twice[] = {{2, states}, {2, states}};
  CHECK(code(twice, 4) == "INVALID_ARGUMENT");
  const engine::StateSnapshot nowhere[] = {{2, nullptr}};
  CHECK(code(nowhere, 4) == "INVALID_ARGUMENT");
}
