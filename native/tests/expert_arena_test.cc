// The disk tier's arena on the default model: an expert read into a slot (aligned, O_DIRECT
// where the file system takes it) equals its bytes in the file; eviction takes the unpinned
// slot coldest by the routing counts and the calls since, the least recently used among equals,
// so it keeps a hot expert plain LRU would evict; routed calls count as RAM hits or disk calls;
// read-ahead fills only slots colder than what it reads and never a pinned one; a lease's
// experts stay pinned while it lives, and an arena smaller than the layer that pages the most
// experts is refused by name. A CPU pass through the arena gives the in-RAM pass's logits bit
// for bit and never maps a paged expert's page.
#include "engine/expert_arena.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/forward.h"
#include "model/model.h"
#include "tests/check.h"

using namespace bloomery;

namespace {

constexpr const char* kDefaultModel = "models/bloomery-tiny-moe-Q8_0.gguf";

// Flags paging `experts` in layers 0 and 1 and nothing elsewhere.
std::vector<std::vector<uint8_t>> paging(const model::Model& m, const std::vector<int32_t>& experts) {
  std::vector<std::vector<uint8_t>> paged(static_cast<size_t>(m.params.layers),
                                          std::vector<uint8_t>(static_cast<size_t>(m.params.experts), 0));
  for (const int l : {0, 1}) {
    for (const int32_t e : experts) paged[l][e] = 1;
  }
  return paged;
}

// Whether the lease's slices of expert e equal the expert's bytes in the mapped file.
bool same_as_file(const model::Model& m, int64_t layer, int32_t e, const engine::ExpertArena::Lease& lease) {
  const model::LayerWeights& w = m.layers[layer];
  const cpu::ExpertSlices in_file = cpu::stack_slices(w.ffn.routed.gate, w.ffn.routed.up, w.ffn.routed.down, e);
  const cpu::ExpertSlices in_slot = lease.slices(e);
  const auto bytes = [](const cpu::ExpertMatrices& s) { return s.first.rows * s.first.row_bytes; };
  return std::memcmp(in_file.gate, in_slot.gate, bytes(w.ffn.routed.gate)) == 0 &&
         std::memcmp(in_file.up, in_slot.up, bytes(w.ffn.routed.up)) == 0 &&
         std::memcmp(in_file.down, in_slot.down, bytes(w.ffn.routed.down)) == 0 && in_file.gate != in_slot.gate;
}

// Leases `experts` of `layer` for `calls` routed calls each, waits for all of them and checks their bytes.
void lease_all(engine::ExpertArena& arena, const model::Model& m, int64_t layer, std::vector<int32_t> experts,
               uint32_t calls = 1) {
  engine::ExpertArena::Lease lease = arena.lease(layer, experts, std::vector<uint32_t>(experts.size(), calls));
  size_t got = 0;
  for (auto ready = lease.next_ready(true); !ready.empty(); ready = lease.next_ready(true)) {
    for (const int32_t e : ready) CHECK(same_as_file(m, layer, e, lease)) << "layer " << layer << " expert " << e;
    got += ready.size();
  }
  CHECK(got == experts.size()) << got;
}

}  // namespace

TEST(expert_arena_reads_equal_the_file_and_evict_the_least_recently_used_among_equals) {
  const auto m = model::load_model(kDefaultModel);
  const uint64_t slot = engine::arena_slot_bytes(*m);
  CHECK(slot % engine::ExpertArena::kAlignment == 0 && slot >= engine::routed_expert_bytes(m->layers[0])) << slot;
  // Every expert of layers 0 and 1 paged, through an arena of one layer's worth.
  std::vector<int32_t> all;
  for (int32_t e = 0; e < m->params.experts; ++e) all.push_back(e);
  {
    engine::ExpertArena arena(*m, paging(*m, all), slot * all.size());
    lease_all(arena, *m, 0, all);
    lease_all(arena, *m, 1, {3, 1});
    const engine::ArenaStats s = arena.stats();
    CHECK(s.slots == m->params.experts && s.misses == all.size() + 2 && s.hits == 0) << s.misses << " " << s.hits;
    CHECK(s.bytes_read >= (all.size() + 2) * engine::routed_expert_bytes(m->layers[0])) << s.bytes_read;
    std::printf("  expert arena: direct_io %s\n", s.direct_io ? "yes" : "no (the file system refused O_DIRECT)");
  }
  // Two slots, experts 0 and 1 of layers 0 and 1 paged, no counts and no calls (every expert
  // equally cold): the eviction order, least recently used first, shows in hits and misses.
  engine::ExpertArena arena(*m, paging(*m, {0, 1}), 2 * slot);
  const auto step = [&](int64_t layer, int32_t e, bool hit) {
    const engine::ArenaStats before = arena.stats();
    lease_all(arena, *m, layer, {e}, 0);
    const engine::ArenaStats after = arena.stats();
    CHECK(after.hits - before.hits == (hit ? 1u : 0u) && after.misses - before.misses == (hit ? 0u : 1u))
        << "layer " << layer << " expert " << e << (hit ? " should hit" : " should miss");
  };
  step(0, 0, false);
  step(0, 1, false);
  step(0, 0, true);   // layer 0's expert 1 is now the least recently used
  step(1, 0, false);  // evicts it, not expert 0
  step(0, 0, true);
  step(0, 1, false);  // evicts layer 1's expert 0
  step(1, 0, false);
}

namespace {

// Counts for rank_by: `hot` of (layer, expert) each, 0 elsewhere.
std::vector<double> counts_of(const model::Model& m, const std::vector<std::pair<int64_t, int32_t>>& hot,
                              double count) {
  std::vector<double> counts(static_cast<size_t>(m.params.layers * m.params.experts), 0.0);
  for (const auto& [layer, e] : hot) counts[static_cast<size_t>(layer * m.params.experts + e)] = count;
  return counts;
}

// Whether leasing `e` of `layer` (one call) found it resident.
bool leased_a_hit(engine::ExpertArena& arena, const model::Model& m, int64_t layer, int32_t e) {
  const uint64_t hits = arena.stats().hits;
  lease_all(arena, m, layer, {e});
  return arena.stats().hits == hits + 1;
}

}  // namespace

TEST(expert_arena_keeps_the_expert_the_routing_counts_rank_hot) {
  const auto m = model::load_model(kDefaultModel);
  const uint64_t slot = engine::arena_slot_bytes(*m);
  // Two slots. Layer 0's expert 0 is hot by the counts but least recently used when layer 1's
  // expert 0 needs a slot: LRU would evict it (and miss it next); the counts keep it.
  {
    engine::ExpertArena arena(*m, paging(*m, {0, 1}), 2 * slot);
    arena.rank_by(counts_of(*m, {{0, 0}}, 10.0));
    lease_all(arena, *m, 0, {0});
    lease_all(arena, *m, 0, {1});
    lease_all(arena, *m, 1, {0});
    CHECK(leased_a_hit(arena, *m, 0, 0)) << "the hot expert was evicted";
    CHECK(!leased_a_hit(arena, *m, 0, 1)) << "the cold expert stayed";
  }
  // The calls leased since the last counts rank too: within one step, the expert more rows used stays.
  {
    engine::ExpertArena arena(*m, paging(*m, {0, 1}), 2 * slot);
    lease_all(arena, *m, 0, {0}, 5);
    lease_all(arena, *m, 0, {1}, 1);
    lease_all(arena, *m, 1, {0}, 1);
    CHECK(leased_a_hit(arena, *m, 0, 0)) << "the expert with 5 calls was evicted";
    // New counts replace those calls: layer 0's expert 1 is now the hot one, and stays though
    // layer 0's expert 0 was used after it.
    arena.rank_by(counts_of(*m, {{0, 1}}, 10.0));
    lease_all(arena, *m, 0, {1});
    lease_all(arena, *m, 0, {0});
    lease_all(arena, *m, 1, {1});
    CHECK(leased_a_hit(arena, *m, 0, 1)) << "the expert hot by the new counts was evicted";
  }
}

TEST(expert_arena_counts_routed_calls_as_ram_hits_or_disk_calls) {
  const auto m = model::load_model(kDefaultModel);
  engine::ExpertArena arena(*m, paging(*m, {0, 1, 2}), 3 * engine::arena_slot_bytes(*m));
  const auto lease = [&](int64_t layer, std::vector<int32_t> experts, std::vector<uint32_t> calls) {
    engine::ExpertArena::Lease l = arena.lease(layer, experts, calls);
    while (!l.next_ready(true).empty()) {
    }
  };
  lease(0, {0, 1}, {3, 4});
  CHECK(arena.take_disk_calls() == 7);
  lease(0, {0, 1, 2}, {2, 1, 5});
  const uint64_t after_one_miss = arena.take_disk_calls();
  CHECK(after_one_miss == 5) << after_one_miss << " disk calls: only expert 2's 5 calls were read for";
  lease(0, {2}, {9});
  CHECK(arena.take_disk_calls() == 0);
  bool refused = false;
  try {
    arena.lease(0, std::vector<int32_t>{0, 1}, std::vector<uint32_t>{1});
  } catch (const Error& e) {
    refused = e.code() == "INVALID_ARGUMENT";
  }
  CHECK(refused) << "calls that do not match the experts";
}

TEST(expert_arena_reads_ahead_into_colder_slots_only) {
  const auto m = model::load_model(kDefaultModel);
  const uint64_t slot = engine::arena_slot_bytes(*m);
  // Four slots; layer 1's experts 2 and 3 are hot by the counts.
  engine::ExpertArena arena(*m, paging(*m, {0, 1, 2, 3}), 4 * slot);
  std::vector<double> counts = counts_of(*m, {{1, 2}}, 5.0);
  counts[static_cast<size_t>(m->params.experts + 3)] = 3.0;
  arena.rank_by(counts);
  {
    engine::ExpertArena::Lease lease = arena.lease(0, std::vector<int32_t>{0, 1}, std::vector<uint32_t>{1, 1});
    // Two empty slots take the two hottest; the leased (pinned) experts stay, and layer 1's
    // experts 0 and 1 (count 0) would evict nothing colder.
    arena.read_ahead(1, 8);
    CHECK(arena.stats().read_ahead == 2) << arena.stats().read_ahead;
    while (!lease.next_ready(true).empty()) {
    }
    CHECK(same_as_file(*m, 0, 0, lease) && same_as_file(*m, 0, 1, lease)) << "a read-ahead overwrote a leased expert";
  }
  // Layer 0's experts (1 call each) are colder than layer 1's hot ones, but hotter than the rest.
  arena.read_ahead(1, 8);
  CHECK(arena.stats().read_ahead == 2) << "read ahead into a hotter slot";
  // A read-ahead expert's first lease is a miss (its calls are disk calls), then a hit.
  arena.take_disk_calls();
  const uint64_t misses = arena.stats().misses;
  lease_all(arena, *m, 1, {3, 2}, 2);
  CHECK(arena.stats().misses == misses + 2 && arena.take_disk_calls() == 4);
  CHECK(leased_a_hit(arena, *m, 1, 2) && leased_a_hit(arena, *m, 0, 0)) << "read-ahead evicted a leased expert";
  // Up to the limit, hottest first: layer 1's expert 0 (now hotter than layer 0's) takes one slot.
  arena.rank_by(counts_of(*m, {{1, 0}, {1, 1}, {1, 2}, {1, 3}}, 7.0));
  arena.read_ahead(1, 1);
  CHECK(arena.stats().read_ahead == 3) << arena.stats().read_ahead;
  CHECK(!leased_a_hit(arena, *m, 1, 0) && !leased_a_hit(arena, *m, 1, 1) && leased_a_hit(arena, *m, 1, 1));

  // A lease that needs the one slot a read-ahead is still filling waits for it, then takes it.
  engine::ExpertArena two(*m, paging(*m, {0, 1}), 2 * slot);
  for (int round = 0; round < 20; ++round) {
    two.rank_by(counts_of(*m, {{1, 0}}, 5.0));
    {
      engine::ExpertArena::Lease lease = two.lease(0, std::vector<int32_t>{0}, std::vector<uint32_t>{1});
      two.read_ahead(1, 8);
    }
    lease_all(two, *m, 0, {0, 1});
    lease_all(two, *m, 1, {1, 0});
    lease_all(two, *m, 0, {1, 0});
  }
  CHECK(two.stats().read_ahead == 20) << two.stats().read_ahead;
}

TEST(expert_arena_pins_a_lease_and_refuses_a_second_one) {
  const auto m = model::load_model(kDefaultModel);
  const uint64_t slot = engine::arena_slot_bytes(*m);
  engine::ExpertArena arena(*m, paging(*m, {0, 1}), 2 * slot);
  lease_all(arena, *m, 1, {0});
  lease_all(arena, *m, 0, {0});
  // Layer 1's expert 0 is the least recently used, but this lease pins it as a hit: the miss
  // must take the other slot, or it would overwrite the hit's bytes.
  {
    engine::ExpertArena::Lease lease = arena.lease(1, std::vector<int32_t>{0, 1}, std::vector<uint32_t>{1, 1});
    for (auto ready = lease.next_ready(true); !ready.empty(); ready = lease.next_ready(true)) {
    }
    CHECK(same_as_file(*m, 1, 0, lease) && same_as_file(*m, 1, 1, lease));
    bool refused = false;
    try {
      arena.lease(0, std::vector<int32_t>{0}, std::vector<uint32_t>{1});
    } catch (const Error& e) {
      refused = e.code() == "INVALID_ARGUMENT";
    }
    CHECK(refused) << "a second lease while one lives";
  }
  CHECK(arena.stats().hits == 1 && arena.stats().misses == 3) << arena.stats().hits << " " << arena.stats().misses;
}

TEST(expert_arena_refuses_fewer_slots_than_a_layer_pages) {
  const auto m = model::load_model(kDefaultModel);
  const uint64_t slot = engine::arena_slot_bytes(*m);
  std::string message;
  try {
    engine::ExpertArena arena(*m, paging(*m, {0, 1, 2}), 3 * slot - 1);
  } catch (const Error& e) {
    message = e.code() + ": " + e.what();
  }
  CHECK(message.rfind("INSUFFICIENT_MEMORY", 0) == 0 && message.find("layer 0 pages 3") != std::string::npos)
      << message;
}

namespace {

// Pages of [begin, end) this process has mapped (the present bit of /proc/self/pagemap), or -1
// when pagemap cannot be read.
int64_t present_pages(const uint8_t* begin, const uint8_t* end) {
  const long page = ::sysconf(_SC_PAGESIZE);
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  int64_t present = 0;
  for (uintptr_t at = reinterpret_cast<uintptr_t>(begin) / page; at < reinterpret_cast<uintptr_t>(end) / page; ++at) {
    uint64_t entry = 0;
    if (::pread(fd, &entry, sizeof entry, static_cast<off_t>(at * sizeof entry)) != sizeof entry) {
      ::close(fd);
      return -1;
    }
    present += (entry >> 63) & 1;
  }
  ::close(fd);
  return present;
}

}  // namespace

TEST(expert_arena_cpu_pass_equals_the_in_ram_pass_and_never_maps_paged_experts) {
  const auto m = model::load_model(kDefaultModel);
  const model::HyperParams& p = m->params;
  std::vector<int32_t> all;
  for (int32_t e = 0; e < p.experts; ++e) all.push_back(e);
  std::vector<std::vector<uint8_t>> paged(static_cast<size_t>(p.layers), std::vector<uint8_t>(all.size(), 1));
  engine::ExpertArena arena(*m, paged, engine::arena_slot_bytes(*m) * all.size());
  cpu::ThreadPool pool(2);
  engine::ForwardScratch scratch;
  const std::vector<int32_t> prompt{1, 17, 230, 45, 9, 300, 12, 5, 88}, next{123};
  std::vector<float> in_ram, through_arena;
  for (engine::ExpertArena* source : {static_cast<engine::ExpertArena*>(nullptr), &arena}) {
    engine::KvCache cache(p, {}, 64);
    std::vector<float> logits, out;
    const engine::SequenceRows first{prompt, 0, &cache, engine::LogitRows::kAll};
    engine::forward(*m, std::span(&first, 1), logits, scratch, pool, source);
    out = logits;
    const engine::SequenceRows second{next, 9, &cache, engine::LogitRows::kLast};
    engine::forward(*m, std::span(&second, 1), logits, scratch, pool, source);
    out.insert(out.end(), logits.begin(), logits.end());
    (source ? through_arena : in_ram) = std::move(out);
  }
  CHECK(in_ram.size() == through_arena.size() &&
        std::memcmp(in_ram.data(), through_arena.data(), in_ram.size() * sizeof(float)) == 0)
      << "logits through the arena differ from those in RAM";
  CHECK(arena.stats().misses > 0);

  // Through a second mapping of the file, only the arena: each layer's up stack lies between the
  // gate and down stacks, away from any other tensor, so no page of it may be mapped.
  const auto fresh = model::load_model(kDefaultModel);
  engine::ExpertArena fresh_arena(*fresh, paged, engine::arena_slot_bytes(*fresh) * all.size());
  engine::KvCache cache(p, {}, 64);
  std::vector<float> logits;
  const engine::SequenceRows rows{prompt, 0, &cache, engine::LogitRows::kLast};
  engine::forward(*fresh, std::span(&rows, 1), logits, scratch, pool, &fresh_arena);
  for (int64_t l = 0; l < p.layers; ++l) {
    const cpu::ExpertMatrices& up = fresh->layers[l].ffn.routed.up;
    const uint8_t* begin = up.first.data;
    const int64_t mapped = present_pages(begin, begin + up.count * up.first.rows * up.first.row_bytes);
    CHECK(mapped == 0) << "layer " << l << ": " << mapped << " pages of the paged up stack are mapped";
  }
}
