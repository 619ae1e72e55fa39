// Adaptive residency's host half: the decaying counts and tier hits, and the swap policy
// (pairing, margin, cap, ties, determinism) on hand-made counts.
#include "engine/residency.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "tests/check.h"

using namespace bloomery::engine;

namespace {

// A one-step history: `calls` per (layer, expert), all served by the host.
RoutingCounts counted(int64_t layers, int64_t experts, const std::vector<uint32_t>& calls) {
  RoutingCounts counts(layers, experts);
  counts.add_step(calls, {});
  return counts;
}

// The policy by its definition, every layer ranked whole: the oracle for choose_swaps, which
// ranks only as many experts per layer as the cap can take.
std::vector<Swap> swaps_by_definition(const RoutingCounts& counts, const std::vector<std::vector<int32_t>>& slots,
                                      const SwapLimits& limits) {
  std::vector<std::tuple<double, int64_t, Swap>> all;  // gain, rank, swap
  for (int32_t l = 0; l < counts.layers(); ++l) {
    std::vector<int32_t> host, gpu;
    for (int32_t e = 0; e < counts.experts(); ++e) {
      if (std::find(slots[l].begin(), slots[l].end(), e) == slots[l].end()) host.push_back(e);
    }
    for (int32_t s = 0; s < static_cast<int32_t>(slots[l].size()); ++s) gpu.push_back(s);
    const auto c = [&](int32_t e) { return counts.count(l, e); };
    std::sort(host.begin(), host.end(), [&](int32_t a, int32_t b) { return c(a) > c(b) || (c(a) == c(b) && a < b); });
    std::sort(gpu.begin(), gpu.end(), [&](int32_t a, int32_t b) {
      const int32_t ea = slots[l][a], eb = slots[l][b];
      return c(ea) < c(eb) || (c(ea) == c(eb) && ea < eb);
    });
    for (size_t i = 0; i < std::min(host.size(), gpu.size()); ++i) {
      const double gain = c(host[i]) - c(slots[l][gpu[i]]);
      if (gain <= limits.margin) break;
      all.emplace_back(gain, static_cast<int64_t>(i), Swap{l, gpu[i], slots[l][gpu[i]], host[i]});
    }
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
    if (std::get<2>(a).layer != std::get<2>(b).layer) return std::get<2>(a).layer < std::get<2>(b).layer;
    return std::get<1>(a) < std::get<1>(b);
  });
  std::vector<Swap> swaps;
  for (const auto& [gain, rank, swap] : all) {
    if (static_cast<int64_t>(swaps.size()) < limits.max_swaps) swaps.push_back(swap);
  }
  return swaps;
}

}  // namespace

TEST(swaps_match_the_policy_ranked_whole) {
  // Skewed random routing over 200 steps, the slots following the swaps: caps of 1, 3 and no cap.
  for (const int64_t cap : {int64_t{1}, int64_t{3}, int64_t{1} << 20}) {
    std::mt19937 rng(7);
    RoutingCounts counts(6, 24);
    std::vector<std::vector<int32_t>> slots(6, {0, 1, 2, 3, 4, 5});
    size_t swaps_seen = 0;
    for (int step = 0; step < 200; ++step) {
      std::vector<uint32_t> calls(6 * 24, 0);
      for (int64_t l = 0; l < 6; ++l) {
        for (int k = 0; k < 4; ++k) calls[l * 24 + (rng() % 2 ? rng() % 6 + 8 : rng() % 24)] += 1;
      }
      counts.add_step(calls, {});
      const std::vector<Swap> got = choose_swaps(counts, slots, {1.0, cap});
      const std::vector<Swap> want = swaps_by_definition(counts, slots, {1.0, cap});
      CHECK(got.size() == want.size()) << "step " << step << ": " << got.size() << " vs " << want.size();
      if (got.size() != want.size()) return;
      for (size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].layer == want[i].layer && got[i].slot == want[i].slot && got[i].seated == want[i].seated &&
              got[i].evicted == want[i].evicted)
            << "step " << step << " swap " << i;
        slots[got[i].layer][got[i].slot] = got[i].seated;
      }
      swaps_seen += got.size();
    }
    CHECK(swaps_seen > 20) << "the history moves experts: " << swaps_seen;
  }
}

TEST(routing_counts_decay_then_add) {
  RoutingCounts counts(1, 3);
  counts.add_step(std::vector<uint32_t>{4, 0, 1}, {});
  counts.add_step(std::vector<uint32_t>{0, 2, 1}, {});
  CHECK(std::abs(counts.count(0, 0) - 4 * kRoutingDecay) < 1e-12) << counts.count(0, 0);
  CHECK(std::abs(counts.count(0, 1) - 2) < 1e-12) << counts.count(0, 1);
  CHECK(std::abs(counts.count(0, 2) - (kRoutingDecay + 1)) < 1e-12) << counts.count(0, 2);
  CHECK(counts.steps() == 2);
  CHECK(std::abs(std::pow(kRoutingDecay, 32) - 0.5) < 1e-3) << "half-life of 32 steps";
}

TEST(routing_counts_split_hits_by_tier) {
  RoutingCounts counts(2, 2);
  // Layer 0: expert 1 on the GPU; layer 1: expert 0 on the GPU.
  const std::vector<std::vector<int32_t>> tables{{-1, 0}, {0, -1}};
  counts.add_step(std::vector<uint32_t>{3, 5, 7, 11}, tables);
  CHECK(counts.hits().gpu == 5 + 7) << counts.hits().gpu;
  CHECK(counts.hits().host == 3 + 11) << counts.hits().host;
  CHECK(counts.hits().disk == 0);
  counts.add_step(std::vector<uint32_t>{1, 1, 1, 1}, {});
  CHECK(counts.hits().host == 3 + 11 + 4) << "no tables: the CPU engine serves all";
  counts.add_step(std::vector<uint32_t>{2, 0, 0, 2}, tables, 3);
  CHECK(counts.hits().host == 3 + 11 + 4 + 1 && counts.hits().disk == 3) << "the disk tier's calls leave the host's";
  CHECK(counts.hits().gpu == 5 + 7) << counts.hits().gpu;
}

TEST(swaps_pair_hottest_host_with_coldest_gpu) {
  // Six experts, GPU slots 0 and 1 hold experts 0 and 1 (cold); experts 4 and 5 are hot.
  const RoutingCounts counts = counted(1, 6, {1, 0, 3, 2, 9, 20});
  const std::vector<Swap> swaps = choose_swaps(counts, {{0, 1}}, {0.5, 10});
  CHECK(swaps.size() == 2) << swaps.size();
  if (swaps.size() != 2) return;
  CHECK(swaps[0].seated == 5 && swaps[0].evicted == 1 && swaps[0].slot == 1) << swaps[0].seated << swaps[0].evicted;
  CHECK(swaps[1].seated == 4 && swaps[1].evicted == 0 && swaps[1].slot == 0) << swaps[1].seated << swaps[1].evicted;
}

TEST(swaps_respect_margin) {
  const RoutingCounts counts = counted(1, 3, {4, 5, 7});
  CHECK(choose_swaps(counts, {{0}}, {3.0, 10}).empty()) << "7 - 4 is not more than a margin of 3";
  CHECK(choose_swaps(counts, {{0}}, {2.5, 10}).size() == 1);
  // A hot host expert never displaces a GPU expert as hot as it.
  const RoutingCounts even = counted(1, 2, {5, 5});
  CHECK(choose_swaps(even, {{1}}, {0.0, 10}).empty());
}

TEST(swaps_cap_keeps_the_largest_gains_over_layers) {
  // Layer 0's best gain is 10 - 0, layer 1's 30 - 0 and 20 - 1.
  const RoutingCounts counts = counted(2, 4, {0, 10, 0, 0, 0, 1, 30, 20});
  const std::vector<Swap> swaps = choose_swaps(counts, {{0}, {0, 1}}, {0.5, 2});
  CHECK(swaps.size() == 2) << swaps.size();
  if (swaps.size() != 2) return;
  CHECK(swaps[0].layer == 1 && swaps[0].seated == 2 && swaps[0].evicted == 0);
  CHECK(swaps[1].layer == 1 && swaps[1].seated == 3 && swaps[1].evicted == 1);
  CHECK(choose_swaps(counts, {{0}, {0, 1}}, {0.5, 0}).empty()) << "a cap of 0 moves nothing";
}

TEST(swaps_break_ties_by_expert_id_and_repeat) {
  // Hosts 2, 3, 4 tie; GPU 0 and 1 tie: the lower ids go first on both sides.
  const RoutingCounts counts = counted(1, 5, {1, 1, 6, 6, 6});
  const std::vector<Swap> a = choose_swaps(counts, {{1, 0}}, {0.5, 10});
  const std::vector<Swap> b = choose_swaps(counts, {{1, 0}}, {0.5, 10});
  CHECK(a.size() == 2) << a.size();
  if (a.size() != 2) return;
  CHECK(a[0].seated == 2 && a[0].evicted == 0 && a[0].slot == 1) << a[0].seated << a[0].evicted << a[0].slot;
  CHECK(a[1].seated == 3 && a[1].evicted == 1 && a[1].slot == 0) << a[1].seated << a[1].evicted << a[1].slot;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].layer == b[i].layer && a[i].slot == b[i].slot && a[i].seated == b[i].seated &&
          a[i].evicted == b[i].evicted);
  }
}

TEST(swaps_skip_layers_without_gpu_slots) {
  const RoutingCounts counts = counted(1, 3, {0, 9, 9});
  CHECK(choose_swaps(counts, {{}}, {0.0, 10}).empty());
  CHECK(choose_swaps(counts, {{0, 1, 2}}, {0.0, 10}).empty()) << "all on the GPU: nothing to seat";
}
