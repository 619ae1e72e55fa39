// The prompt-state cache on hand-made states: longest-prefix lookup, states that hold one
// another, LRU eviction under its byte budget; the KV cache's packed copies; and the state
// file's round trip and refusals; a windowed layer's cache through a state.
#include "engine/prompt_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/kv_cache.h"
#include "engine/state.h"
#include "quant/float_formats.h"
#include "tests/check.h"

using namespace bloomery;
using namespace bloomery::engine;

namespace {

constexpr int64_t kLayers = 2;
constexpr model::CacheRow kRow{4, 4};

// A state of `tokens` whose keys and values are numbered from `seed`, so copies can be told apart.
std::shared_ptr<SessionState> make_state(std::vector<int32_t> tokens, uint16_t seed = 0) {
  auto s = std::make_shared<SessionState>();
  s->model_fingerprint = 0x1234;
  s->layers = kLayers;
  s->row = kRow;
  s->tokens = std::move(tokens);
  const size_t elements = static_cast<size_t>(kLayers * kRow.keys) * s->tokens.size();
  for (size_t i = 0; i < elements; ++i) {
    s->keys.push_back(static_cast<uint16_t>(seed + i));
    s->values.push_back(static_cast<uint16_t>(seed + 2 * i));
  }
  return s;
}

uint64_t bytes_of(size_t tokens) { return session_state_bytes({kLayers, 0, kRow}, static_cast<int64_t>(tokens), 0); }

std::string refusal(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.code();
  }
  return "none";
}

std::string temp_path(const char* name) { return (std::filesystem::temp_directory_path() / name).string(); }

}  // namespace

TEST(prompt_cache_finds_the_longest_shared_prefix) {
  PromptCache cache(1 << 20);
  CHECK(cache.store(make_state({1, 2, 3, 4})) == PromptCache::Stored::kTaken);
  CHECK(cache.store(make_state({1, 2, 9})) == PromptCache::Stored::kTaken);
  CHECK(cache.store(make_state({7, 8})) == PromptCache::Stored::kTaken);
  const std::vector<int32_t> prompt{1, 2, 3, 5, 6};
  const PromptCache::Match m = cache.find(prompt);
  CHECK(m.state != nullptr);
  CHECK(m.length == 3) << m.length;
  CHECK(m.state->tokens.size() == 4);
  CHECK(cache.find(std::vector<int32_t>{5, 1}).state == nullptr);
  CHECK(cache.find(std::vector<int32_t>{7}).length == 1);
}

TEST(prompt_cache_of_whole_states_finds_the_longest_that_leaves_a_token_to_evaluate) {
  // Recurrent states serve only whole: the prompt that one covers entirely takes a shorter one.
  PromptCache cache(1 << 20, true);
  const auto whole = make_state({1, 2, 3, 4});
  const auto shorter = make_state({1, 2});
  CHECK(cache.store(whole) == PromptCache::Stored::kTaken);
  CHECK(cache.store(shorter) == PromptCache::Stored::kTaken);
  const std::vector<int32_t> prompt{1, 2, 3, 4};
  CHECK(cache.find(prompt).state == whole);
  const PromptCache::Match m = cache.find(prompt, 3);
  CHECK(m.state == shorter);
  CHECK(m.length == 2) << m.length;
  CHECK(cache.find(prompt, 1).state == nullptr);
  // A state of the same tokens again refreshes the entry: the cache keeps the first.
  CHECK(cache.store(make_state({1, 2})) == PromptCache::Stored::kRefreshed);
  CHECK(cache.find(prompt, 3).state == shorter);
}

TEST(prompt_cache_keeps_one_entry_for_states_that_hold_one_another) {
  PromptCache cache(1 << 20);
  CHECK(cache.store(make_state({1, 2})) == PromptCache::Stored::kTaken);
  CHECK(cache.store(make_state({1, 2, 3})) == PromptCache::Stored::kTaken);  // holds {1, 2}: replaces it
  CHECK(cache.size() == 1) << cache.size();
  CHECK(cache.bytes() == bytes_of(3));
  CHECK(cache.store(make_state({1, 2})) == PromptCache::Stored::kRefreshed);  // begins {1, 2, 3}: nothing new
  CHECK(cache.size() == 1);
  CHECK(cache.holds(std::vector<int32_t>{1, 2}));
  CHECK(!cache.holds(std::vector<int32_t>{1, 2, 4}));
}

TEST(prompt_cache_evicts_the_least_recently_used_within_its_budget) {
  PromptCache cache(2 * bytes_of(4) + bytes_of(4) / 2);  // room for two states of four tokens
  CHECK(cache.store(make_state({1, 1, 1, 1})) == PromptCache::Stored::kTaken);
  CHECK(cache.store(make_state({2, 2, 2, 2})) == PromptCache::Stored::kTaken);
  CHECK(cache.find(std::vector<int32_t>{1, 1, 1, 1}).length == 4);  // {1...} is now the most recent
  CHECK(cache.store(make_state({3, 3, 3, 3})) == PromptCache::Stored::kTaken);
  CHECK(cache.size() == 2) << cache.size();
  CHECK(cache.bytes() <= cache.capacity());
  CHECK(cache.find(std::vector<int32_t>{2, 2}).state == nullptr) << "the least recently used entry stays";
  CHECK(cache.find(std::vector<int32_t>{1, 1}).length == 2);
  CHECK(cache.find(std::vector<int32_t>{3, 3}).length == 2);
  // A state larger than the whole cache is refused and evicts nothing.
  CHECK(cache.store(make_state(std::vector<int32_t>(40, 5))) == PromptCache::Stored::kRefused);
  CHECK(cache.size() == 2);
}

TEST(prompt_cache_of_zero_bytes_holds_nothing) {
  PromptCache cache(0);
  CHECK(cache.store(make_state({1})) == PromptCache::Stored::kRefused);
  CHECK(cache.size() == 0);
  CHECK(cache.bytes() == 0);
}

TEST(kv_cache_copies_a_prefix_to_and_from_a_packed_state) {
  model::HyperParams p;
  p.layers = kLayers;
  p.kv_heads = 2;
  p.head_dim = 2;
  p.value_dim = 2;
  KvCache kv(p, {}, 8);
  const std::shared_ptr<SessionState> state = make_state({1, 2, 3, 4, 5}, 100);
  kv.copy_in(3, *state);  // the first 3 of 5 positions
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    for (int64_t i = 0; i < 3 * kRow.keys; ++i) {
      CHECK(kv.keys(layer)[i] == state->keys[layer * 5 * kRow.keys + i]) << layer << " " << i;
      CHECK(kv.values(layer)[i] == state->values[layer * 5 * kRow.keys + i]) << layer << " " << i;
    }
  }
  std::vector<uint16_t> keys(kLayers * 3 * kRow.keys), values(keys.size());
  kv.copy_out(3, keys.data(), values.data(), nullptr);
  for (int64_t layer = 0; layer < kLayers; ++layer) {
    for (int64_t i = 0; i < 3 * kRow.keys; ++i) {
      CHECK(keys[layer * 3 * kRow.keys + i] == state->keys[layer * 5 * kRow.keys + i]) << layer << " " << i;
    }
  }
}

// What a state of make_state's shape must match to be read back.
StateExpectation expect_of(const SessionState& state) {
  return {state.model_fingerprint, {kLayers, state.windowed_layers, state.row}, 64, 100};
}

TEST(state_file_round_trips) {
  const std::string path = temp_path("bloomery-state-roundtrip.bin");
  const std::shared_ptr<SessionState> state = make_state({4, 5, 6}, 7);
  write_state_file(path, *state);
  const SessionState back = read_state_file(path, expect_of(*state));
  CHECK(back.tokens == state->tokens);
  CHECK(back.keys == state->keys);
  CHECK(back.values == state->values);
  CHECK(back.layers == kLayers && back.row.keys == kRow.keys && back.row.values == kRow.values);
  // Latent attention's shape: keys only (the values are the keys' first elements).
  auto latent = make_state({8, 9}, 3);
  latent->row = {6, 0};
  latent->keys.resize(static_cast<size_t>(kLayers * 6 * 2));
  latent->values.clear();
  write_state_file(path, *latent);
  const SessionState latent_back = read_state_file(path, expect_of(*latent));
  CHECK(latent_back.keys == latent->keys && latent_back.values.empty());
  CHECK(refusal([&] { read_state_file(path, expect_of(*state)); }) == "STATE_MODEL_MISMATCH")
      << "a keys-only state is another shape";
  std::filesystem::remove(path);
}

// Overwrites bytes of a file at `offset`.
void patch(const std::string& path, std::streamoff offset, const void* bytes, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(offset);
  f.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
}

TEST(state_file_refuses_by_name) {
  const std::string path = temp_path("bloomery-state-refusals.bin");
  const std::shared_ptr<SessionState> state = make_state({4, 5, 6});
  const StateExpectation expected = expect_of(*state);
  write_state_file(path, *state);
  StateExpectation other = expected;
  other.model_fingerprint += 1;
  CHECK(refusal([&] { read_state_file(path, other); }) == "STATE_MODEL_MISMATCH");
  other = expected;
  other.shape.row.keys += 1;
  CHECK(refusal([&] { read_state_file(path, other); }) == "STATE_MODEL_MISMATCH");
  other = expected;
  other.max_tokens = 2;
  CHECK(refusal([&] { read_state_file(path, other); }) == "CONTEXT_TOO_LONG");
  other = expected;
  other.vocab = 6;
  CHECK(refusal([&] { read_state_file(path, other); }) == "STATE_BAD_FILE");

  const auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size - 1);
  CHECK(refusal([&] { read_state_file(path, expected); }) == "STATE_BAD_FILE");

  // One flipped bit of a key: the checksum no longer matches.
  write_state_file(path, *state);
  const uint8_t flipped = 0x80;
  patch(path, static_cast<std::streamoff>(size - 1), &flipped, 1);
  CHECK(refusal([&] { read_state_file(path, expected); }) == "STATE_BAD_FILE");

  // Where a context shift began travels with the state (none: kNoShift).
  SessionState shifted = *state;
  shifted.shifted_from = 1;
  write_state_file(path, shifted);
  CHECK(read_state_file(path, expected).shifted_from == 1);
  write_state_file(path, *state);
  CHECK(read_state_file(path, expected).shifted_from == SessionState::kNoShift);

  write_state_file(path, *state);
  const uint32_t version = 99;
  patch(path, 8, &version, sizeof version);
  CHECK(refusal([&] { read_state_file(path, expected); }) == "STATE_UNSUPPORTED_VERSION");

  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << "GGUF and not a state at all, but long enough to hold a header";
  }
  CHECK(refusal([&] { read_state_file(path, expected); }) == "STATE_BAD_FILE");
  std::filesystem::remove(path);
  CHECK(refusal([&] { read_state_file(path, expected); }) == "FILE_NOT_FOUND");
  CHECK(refusal([&] { write_state_file("/nonexistent-dir/state.bin", *state); }) == "FILE_WRITE");
  CHECK(refusal([&] { read_state_file(std::string("a\0b", 3), expected); }) == "INVALID_ARGUMENT");
}

TEST(state_file_follows_no_link_and_opens_only_regular_files) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "bloomery-state-links";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::shared_ptr<SessionState> state = make_state({4, 5, 6});
  const std::string outside = (dir / "outside.bin").string();
  {
    std::ofstream f(outside);
    f << "precious";
  }
  const std::string link = (dir / "link.bin").string();
  std::filesystem::create_symlink(outside, link);
  CHECK(refusal([&] { read_state_file(link, expect_of(*state)); }) == "FILE_READ");
  CHECK(refusal([&] { write_state_file(link, *state); }) == "FILE_WRITE");
  CHECK(std::filesystem::file_size(outside) == 8);
  const std::string dangling = (dir / "dangling.bin").string();
  std::filesystem::create_symlink(dir / "created-through-link.bin", dangling);
  CHECK(refusal([&] { write_state_file(dangling, *state); }) == "FILE_WRITE");
  CHECK(!std::filesystem::exists(dir / "created-through-link.bin"));

  const std::string fifo = (dir / "fifo.bin").string();
  CHECK(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(refusal([&] { read_state_file(fifo, expect_of(*state)); }) == "FILE_READ");
  CHECK(refusal([&] { write_state_file(fifo, *state); }) == "FILE_WRITE");
  std::filesystem::remove_all(dir);
}

// A windowed layer (gpt-oss) keeps the last window_cells positions: stores past them move the rows
// the window still needs to the front, from a multiple of 64; a state holds them from there on,
// reads back from a file (a misaligned window_first is refused) and loads into another cache.
TEST(kv_cache_windowed_layer_keeps_its_window_through_a_state) {
  model::HyperParams p;
  p.layers = 2;
  p.kv_heads = 2;
  p.head_dim = 2;
  p.value_dim = 2;
  p.sliding_window = 8;
  const std::vector<uint8_t> windowed{1, 0};
  KvCache kv(p, windowed, 1000);
  std::vector<float> rows;
  for (int64_t first = 0; first < 600; first += model::kWindowSlice) {
    const int64_t n = std::min<int64_t>(model::kWindowSlice, 600 - first);
    rows.assign(static_cast<size_t>(n * kRow.keys), 0.0f);
    for (int64_t i = 0; i < n * kRow.keys; ++i) rows[i] = static_cast<float>(first + i / kRow.keys);
    for (int64_t layer = 0; layer < 2; ++layer) kv.store(layer, first, n, rows.data(), rows.data());
  }
  // Slices at 0, 256 and 512: the last kept the aligned start of 512's window, 448.
  CHECK(kv.first_cached(0) == 448 && kv.first_cached(1) == 0 && kv.window_first() == 448) << kv.first_cached(0);
  const auto position_of = [](uint16_t f16) { return static_cast<int64_t>(quant::fp16_to_fp32(f16)); };
  for (int64_t pos = 448; pos < 600; ++pos) CHECK(position_of(kv.keys(0)[(pos - 448) * kRow.keys]) == pos) << pos;

  SessionState state;
  state.layers = 2;
  state.windowed_layers = 1;
  state.row = kRow;
  state.window_first = kv.window_first();
  state.tokens.assign(600, 1);
  const int64_t packed = state_rows({2, 1, kRow}, 600, 448);
  CHECK(packed == 152 + 600) << packed;
  state.keys.resize(static_cast<size_t>(packed * kRow.keys));
  state.values.resize(state.keys.size());
  kv.copy_out(600, state.keys.data(), state.values.data(), nullptr);
  CHECK(position_of(state.keys[0]) == 448 && position_of(state.keys[151 * kRow.keys]) == 599);
  CHECK(position_of(state.keys[152 * kRow.keys]) == 0 && position_of(state.keys[751 * kRow.keys]) == 599);

  const std::string path = temp_path("bloomery-state-windowed.bin");
  write_state_file(path, state);
  const StateExpectation expected{0, {2, 1, kRow}, 1000, 100};
  const SessionState back = read_state_file(path, expected);
  CHECK(back.window_first == 448 && back.keys == state.keys && back.values == state.values);
  StateExpectation unwindowed = expected;
  unwindowed.shape.windowed_layers = 0;
  CHECK(refusal([&] { read_state_file(path, unwindowed); }) == "STATE_MODEL_MISMATCH");
  const uint64_t misaligned = 447;
  patch(path, 64, &misaligned, sizeof misaligned);  // the header's window_first
  CHECK(refusal([&] { read_state_file(path, expected); }) == "STATE_BAD_FILE");
  std::filesystem::remove(path);

  KvCache loaded(p, windowed, 1000);
  loaded.copy_in(590, back);
  CHECK(loaded.first_cached(0) == 448 && loaded.first_cached(1) == 0);
  CHECK(position_of(loaded.keys(0)[(589 - 448) * kRow.keys]) == 589 && position_of(loaded.keys(1)[0]) == 0);
}
