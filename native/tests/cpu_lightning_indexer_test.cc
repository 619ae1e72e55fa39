// The lightning indexer against plain math in double: its Hadamard matrix is orthonormal and
// its own inverse; each query's selection is the top_k of its scores (sum over heads of
// relu(q.k) times the head's weight) among the positions it sees, or all of them when they are
// fewer; and attention restricted to a selection equals attention over those positions alone.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "base/heap_select.h"
#include "cpu/attention.h"
#include "cpu/lightning_indexer.h"
#include "cpu/thread_pool.h"
#include "quant/float_formats.h"
#include "tests/check.h"

using namespace bloomery;
using namespace bloomery::cpu;

TEST(lightning_indexer_hadamard_is_orthonormal) {
  for (const int64_t n : {64, 128}) {
    const std::vector<float> h = hadamard_matrix(n);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < n; ++k) dot += double(h[i * n + k]) * h[k * n + j];
        worst = std::max(worst, std::abs(dot - (i == j ? 1.0 : 0.0)));
      }
    }
    CHECK(worst < 1e-6) << "H*H - I of " << n << ": " << worst;
    CHECK(h[0] == h[1] && h[n] == -h[n + 1]) << "Sylvester's signs";
  }
}

namespace {

// A prompt of n tokens after `first` cached ones: the first see fewer positions than top_k when
// `first` is small; with `first` past 256 the scores span several blocks of positions, and more
// than 64 tokens are scored in groups.
void check_selection(int64_t first, int64_t n) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int64_t heads = 4, d = 64, top_k = 8, stride = 80, positions = first + n;
  std::vector<float> q(static_cast<size_t>(n * heads * d)), w(static_cast<size_t>(n * heads));
  std::vector<uint16_t> keys(static_cast<size_t>(positions * stride));
  for (float& v : q) v = uniform(rng);
  for (float& v : w) v = uniform(rng);
  for (uint16_t& v : keys) v = quant::fp32_to_fp16(uniform(rng));
  std::vector<int32_t> selected(static_cast<size_t>(n * top_k));
  std::vector<float> scores;
  ThreadPool pool(2);
  select_positions(q.data(), w.data(), n, first, keys.data(), {heads, d, top_k, stride}, selected.data(), scores, pool);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t seen = first + i + 1;
    std::vector<std::pair<double, int32_t>> scored;
    for (int64_t p = 0; p < seen; ++p) {
      double score = 0;
      for (int64_t h = 0; h < heads; ++h) {
        double dot = 0;
        for (int64_t j = 0; j < d; ++j)
          dot += double(q[(i * heads + h) * d + j]) * quant::fp16_to_fp32(keys[p * stride + j]);
        score += std::max(dot, 0.0) * w[i * heads + h];
      }
      scored.emplace_back(-score, static_cast<int32_t>(p));
    }
    std::sort(scored.begin(), scored.end());
    std::set<int32_t> expected, got;
    for (int64_t j = 0; j < std::min(seen, top_k); ++j) expected.insert(scored[j].second);
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t p = selected[i * top_k + j];
      if (j >= seen) {
        CHECK(p == -1) << "token " << i << " sees " << seen << " positions, slot " << j << " holds " << p;
      } else {
        got.insert(p);
      }
    }
    // Positions chosen or left out against the reference must tie with the boundary score to
    // float rounding (the reference sums in double).
    std::vector<double> score_of(static_cast<size_t>(seen));
    for (const auto& [negated, p] : scored) score_of[p] = -negated;
    const double boundary = -scored[std::min(seen, top_k) - 1].first;
    CHECK(got.size() == expected.size()) << "token " << i << " chose " << got.size() << " distinct positions";
    int64_t swapped = 0;
    for (const int32_t p : got) {
      if (expected.count(p) != 0) continue;
      ++swapped;
      CHECK(std::abs(score_of[p] - boundary) <= 1e-5 * (1 + std::abs(boundary)))
          << "token " << i << " chose position " << p << " of score " << score_of[p] << ", the top " << top_k
          << " end at " << boundary;
    }
    CHECK(swapped <= 1) << "token " << i << ": " << swapped << " positions differ from the top " << top_k;
  }
}

}  // namespace

TEST(lightning_indexer_selects_the_best_scored_positions) {
  check_selection(5, 20);
  check_selection(300, 3);
  check_selection(600, 1);
  check_selection(100, 150);
}

// The GPU's choice where more positions tie at the k-th score than fit follows std::partial_sort's
// heap (base/heap_select.h): it keeps the ties std::partial_sort keeps (which are not the first
// ones), for k from 1 to DeepSeek-V3.2's 2048, over rows of few distinct scores and over rows of
// the synthetic models' kind: mostly 0 (every head's dot negative), the rest distinct scores on
// either side, so that a row's later positions above the tie enter by the hundred.
TEST(partial_sort_selection_keeps_std_partial_sorts_ties) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  int64_t not_first = 0, without_heap = 0, after_moves = 0;
  for (int trial = 0; trial < 2100; ++trial) {
    const int64_t k = std::vector<int64_t>{1, 2, 3, 16, 24, 100, 2048}[trial % 7];
    const int64_t seen = k + 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(k < 100 ? 2000 : 5000));
    const int levels = 1 + static_cast<int>(rng() % 8);
    const float above = 0.05f + 0.3f * uniform(rng), below = 0.2f * uniform(rng);
    std::vector<float> scores(static_cast<size_t>(seen));
    for (float& v : scores) {
      if (trial % 3 != 2) {
        v = static_cast<float>(static_cast<int>(rng() % levels)) - (rng() % 4 == 0 ? 100.0f : 0.0f);
      } else {
        const float u = uniform(rng);
        v = u < above ? 1.0f + uniform(rng) : u < above + below ? -1.0f - uniform(rng) : 0.0f;
      }
    }
    std::vector<int32_t> order(static_cast<size_t>(seen));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
    std::vector<int32_t> expected(order.begin(), order.begin() + k);
    std::vector<int32_t> got = partial_sort_selection(scores.data(), seen, k);
    std::sort(expected.begin(), expected.end());
    std::sort(got.begin(), got.end());
    CHECK(got == expected) << "k " << k << " of " << seen << " positions (" << levels << " scores): another choice";
    // Which way the choice went: without a heap (no later position above the tie once it holds the
    // top), after entries that moved the heap first (some of the first k scoring under the tie).
    const float tie = kth_largest_score(scores.data(), seen, k);
    const int64_t reached = tie_reaches_top(scores.data(), seen, k, tie);
    const bool none_after = std::none_of(scores.begin() + reached, scores.end(), [&](float v) { return v > tie; });
    without_heap += none_after && reached > k;
    after_moves += !none_after && reached > k;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return scores[a] > scores[b]; });
    std::sort(order.begin(), order.begin() + k);
    not_first += !std::equal(expected.begin(), expected.end(), order.begin());
  }
  CHECK(not_first > 100) << "the rows should tie past k often enough that the first ties differ: " << not_first;
  CHECK(without_heap > 100 && after_moves > 100)
      << "rows should take both ways after entries moved the heap: " << without_heap << " without it, " << after_moves
      << " with it";
}

TEST(attention_over_a_selection_equals_attention_over_those_positions) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const int64_t heads = 2, d = 32, positions = 12, count = 4;
  std::vector<float> q(static_cast<size_t>(heads * d));
  std::vector<uint16_t> keys(static_cast<size_t>(positions * d));
  for (float& v : q) v = uniform(rng);
  for (uint16_t& v : keys) v = quant::fp32_to_fp16(uniform(rng));
  const std::vector<int32_t> selected = {9, 2, 11, 5};
  AttentionShape shape{heads, 1, d, d, 0.25f};
  shape.selected = selected.data();
  shape.selected_count = count;
  std::vector<float> sparse(static_cast<size_t>(heads * d));
  ThreadPool pool(1);
  causal_attention(q.data(), 1, positions - 1, keys.data(), keys.data(), shape, sparse.data(), pool);
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<double> weights;
    double total = 0;
    for (const int32_t p : selected) {
      double dot = 0;
      for (int64_t j = 0; j < d; ++j)
        dot += quant::fp16_to_fp32(quant::fp32_to_fp16(q[h * d + j])) * quant::fp16_to_fp32(keys[p * d + j]);
      weights.push_back(std::exp(dot * 0.25));
      total += weights.back();
    }
    for (int64_t j = 0; j < d; ++j) {
      double expected = 0;
      for (size_t s = 0; s < selected.size(); ++s)
        expected += weights[s] / total * quant::fp16_to_fp32(keys[selected[s] * d + j]);
      CHECK(std::abs(sparse[h * d + j] - expected) < 2e-3)
          << "head " << h << " element " << j << ": " << sparse[h * d + j] << " vs " << expected;
    }
  }
}
