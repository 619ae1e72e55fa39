// The sampler on hand-made logits: each stage of the chain against probabilities worked out by
// hand, the penalties' exact arithmetic, the generator against its published reference values,
// and draws that follow the distribution and repeat with their seed.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "base/error.h"
#include "tests/check.h"

using namespace bloomery;
using namespace bloomery::engine;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Every filter off, temperature 1: the distribution is the softmax of the adjusted logits.
SamplerParams plain() {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  return p;
}

std::map<int32_t, double> probabilities(Sampler& sampler, const std::vector<float>& logits) {
  std::map<int32_t, double> out;
  for (const Candidate& c : sampler.distribution(logits)) out[c.token] = c.probability;
  return out;
}

std::map<int32_t, double> softmax_of(const std::map<int32_t, double>& logits) {
  double total = 0.0;
  for (const auto& [token, logit] : logits) total += std::exp(logit);
  std::map<int32_t, double> out;
  for (const auto& [token, logit] : logits) out[token] = std::exp(logit) / total;
  return out;
}

bool near(const std::map<int32_t, double>& actual, const std::map<int32_t, double>& expected, double tolerance = 1e-6) {
  if (actual.size() != expected.size()) return false;
  for (const auto& [token, p] : expected) {
    const auto it = actual.find(token);
    if (it == actual.end() || std::fabs(it->second - p) > tolerance) return false;
  }
  return true;
}

bool refused(const SamplerParams& params, const char* mentions) {
  try {
    Sampler sampler(params);
  } catch (const Error& e) {
    return e.code() == "INVALID_ARGUMENT" && std::string(e.what()).find(mentions) != std::string::npos;
  }
  return false;
}

}  // namespace

TEST(sampler_xoshiro256_matches_reference_values) {
  // splitmix64 from seed 0 gives the well-known state e220a8397b1dcdaf, 6e789e6aa1b965f4, ...;
  // the outputs below come from an independent implementation of both published algorithms.
  Xoshiro256 zero(0);
  CHECK(zero.next() == 0x99ec5f36cb75f2b4ull);
  CHECK(zero.next() == 0xbf6e1f784956452aull);
  CHECK(zero.next() == 0x1a5f849d4933e6e0ull);
  Xoshiro256 answer(42);
  CHECK(answer.next() == 0x15780b2e0c2ec716ull);
  CHECK(answer.next() == 0x6104d9866d113a7eull);
  for (int i = 0; i < 1000; ++i) {
    const double u = answer.uniform();
    CHECK(u >= 0.0 && u < 1.0) << u;
  }
}

TEST(sampler_plain_is_the_softmax_of_the_logits) {
  Sampler sampler(plain());
  CHECK(near(probabilities(sampler, {1.0f, 2.0f, 0.5f, -1.0f}), softmax_of({{0, 1.0}, {1, 2.0}, {2, 0.5}, {3, -1.0}})));
}

TEST(sampler_temperature_divides_the_logits) {
  SamplerParams p = plain();
  p.temperature = 0.5f;
  Sampler sampler(p);
  CHECK(near(probabilities(sampler, {1.0f, 2.0f, 0.5f}), softmax_of({{0, 2.0}, {1, 4.0}, {2, 1.0}})));
}

TEST(sampler_temperature_zero_is_argmax_after_bias_and_penalties) {
  SamplerParams p = plain();
  p.temperature = 0.0f;
  Sampler greedy(p);
  const std::vector<float> logits{0.1f, 3.0f, 2.9f, -1.0f};
  CHECK(greedy.sample(logits) == 1);
  CHECK(greedy.distribution(logits).size() == 1);
  // Equal logits: the lower token id, like an argmax scan.
  CHECK(greedy.sample(std::vector<float>{1.0f, 5.0f, 5.0f}) == 1);

  p.logit_bias = {{1, -0.2f}};
  Sampler biased(p);
  CHECK(biased.sample(logits) == 2);

  p.logit_bias.clear();
  p.repeat_penalty = 2.0f;
  Sampler penalized(p);
  penalized.accept_prompt(std::vector<int32_t>{1});
  CHECK(penalized.sample(logits) == 2);
}

TEST(sampler_logit_bias_adds_bans_and_forces) {
  SamplerParams p = plain();
  p.logit_bias = {{0, 1.5f}, {2, -kInf}};
  Sampler sampler(p);
  CHECK(near(probabilities(sampler, {1.0f, 2.0f, 0.5f}), softmax_of({{0, 2.5}, {1, 2.0}})));

  p.logit_bias = {{2, 100.0f}};
  Sampler forced(p);
  for (int i = 0; i < 100; ++i) CHECK(forced.sample(std::vector<float>{1.0f, 2.0f, 0.5f}) == 2);

  p.logit_bias = {{0, -kInf}, {1, -kInf}};
  Sampler all_banned(p);
  bool threw = false;
  try {
    all_banned.sample(std::vector<float>{1.0f, 2.0f});
  } catch (const Error& e) {
    threw = e.code() == "INVALID_ARGUMENT";
  }
  CHECK(threw);

  p.logit_bias = {{5, 1.0f}};
  Sampler outside(p);
  threw = false;
  try {
    outside.sample(std::vector<float>{1.0f, 2.0f});
  } catch (const Error& e) {
    threw = std::string(e.what()).find("outside the vocabulary of 2") != std::string::npos;
  }
  CHECK(threw);
}

TEST(sampler_penalties_follow_llama_cpp_and_openai) {
  SamplerParams p = plain();
  p.repeat_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  Sampler sampler(p);
  sampler.accept_prompt(std::vector<int32_t>{0, 2, 2});
  // Token 0 (seen once, positive): 2 / 2 - 0.25 - 0.5. Token 2 (twice, negative): -1 * 2 - 0.5 - 0.5.
  CHECK(
      near(probabilities(sampler, {2.0f, 1.0f, -1.0f, 0.5f}), softmax_of({{0, 0.25}, {1, 1.0}, {2, -3.0}, {3, 0.5}})));
}

TEST(sampler_penalties_look_at_the_last_n_tokens) {
  SamplerParams p = plain();
  p.frequency_penalty = 1.0f;
  p.repeat_last_n = 2;
  Sampler sampler(p);
  sampler.accept_prompt(std::vector<int32_t>{0, 0, 1});
  sampler.accept(2);
  // The window is {1, 2}: token 0's two uses fell out of it.
  CHECK(near(probabilities(sampler, {1.0f, 1.0f, 1.0f}), softmax_of({{0, 1.0}, {1, 0.0}, {2, 0.0}})));

  p.repeat_last_n = -1;
  Sampler whole(p);
  whole.accept_prompt(std::vector<int32_t>{0, 0, 1, 2});
  CHECK(near(probabilities(whole, {1.0f, 1.0f, 1.0f}), softmax_of({{0, -1.0}, {1, 0.0}, {2, 0.0}})));

  p.repeat_last_n = 0;
  Sampler off(p);
  off.accept_prompt(std::vector<int32_t>{0, 0, 1, 2});
  CHECK(near(probabilities(off, {1.0f, 1.0f, 1.0f}), softmax_of({{0, 1.0}, {1, 1.0}, {2, 1.0}})));
}

TEST(sampler_top_k_keeps_the_k_most_likely) {
  SamplerParams p = plain();
  p.top_k = 2;
  Sampler sampler(p);
  CHECK(near(probabilities(sampler, {1.0f, 3.0f, 0.5f, 2.0f}), softmax_of({{1, 3.0}, {3, 2.0}})));
  p.top_k = 1;
  Sampler one(p);
  for (int i = 0; i < 50; ++i) CHECK(one.sample(std::vector<float>{1.0f, 3.0f, 0.5f, 2.0f}) == 1);
}

// Top-k over a large vocabulary full of ties and banned tokens: the candidates are the k most
// likely by logit then token id, most likely first, exactly as sorting every finite logit gives
// them; with no more finite logits than k, all of them in token order.
TEST(sampler_top_k_selects_as_a_full_sort_does) {
  std::mt19937 rng(7);
  for (const int vocab : {10, 1000, 20000}) {
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& l : logits) {
      const unsigned r = rng() % 16;
      l = r == 0 ? -kInf : 0.25f * static_cast<float>(r % 7);  // a few values: ties everywhere
    }
    std::vector<Candidate> finite;
    for (int i = 0; i < vocab; ++i) {
      if (logits[static_cast<size_t>(i)] > -kInf) finite.push_back({i, logits[static_cast<size_t>(i)], 0.0f});
    }
    std::vector<Candidate> sorted = finite;
    std::sort(sorted.begin(), sorted.end(), [](const Candidate& a, const Candidate& b) {
      return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
    });
    for (const int k : {1, 3, 40, 999, static_cast<int>(finite.size()), vocab + 1}) {
      SamplerParams p = plain();
      p.top_k = k;
      Sampler sampler(p);
      const std::vector<Candidate>& got = sampler.distribution(logits);
      const bool cut = static_cast<size_t>(k) < finite.size();
      const std::vector<Candidate> want(cut ? sorted.begin() : finite.begin(), cut ? sorted.begin() + k : finite.end());
      bool same = got.size() == want.size();
      for (size_t i = 0; same && i < got.size(); ++i)
        same = got[i].token == want[i].token && got[i].logit == want[i].logit;
      CHECK(same) << "vocab " << vocab << ", top-k " << k << ": " << got.size() << " candidates, not the "
                  << want.size() << " a full sort keeps, in its order";
    }
  }
}

// Greedy draws over a large vocabulary of ties, with bans, boosts and penalties that sometimes
// touch the raw maximum: the first most likely token of the logits as bias and penalties leave
// them, whether the sampler finds it without copying the logits or by the full path.
TEST(sampler_greedy_is_the_first_maximum_after_bias_and_penalties) {
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    const int vocab = round % 2 ? 37 : 5000;
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& l : logits) l = 0.5f * static_cast<float>(rng() % 9) - 2.0f;
    SamplerParams p;
    p.temperature = 0.0f;
    p.repeat_penalty = round % 3 ? 1.0f : 1.3f;
    p.presence_penalty = round % 5 ? 0.0f : 0.5f;
    std::vector<float> adjusted = logits;
    const auto best = [&] {
      return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    };
    for (int b = 0; b < 3; ++b) {
      const int32_t token = b == 0 ? best() : static_cast<int32_t>(rng() % static_cast<unsigned>(vocab));
      const float bias = rng() % 3 == 0 ? -kInf : 0.5f * static_cast<float>(static_cast<int>(rng() % 5) - 2);
      p.logit_bias.push_back({token, bias});
      adjusted[static_cast<size_t>(token)] += bias;
    }
    Sampler sampler(p);
    std::vector<int32_t> history = {best(), best(), static_cast<int32_t>(rng() % static_cast<unsigned>(vocab))};
    sampler.accept_prompt(history);
    std::sort(history.begin(), history.end());
    history.erase(std::unique(history.begin(), history.end()), history.end());
    for (const int32_t token : history) {
      float& logit = adjusted[static_cast<size_t>(token)];
      logit = logit <= 0.0f ? logit * p.repeat_penalty : logit / p.repeat_penalty;
      logit -= p.presence_penalty;
    }
    const auto want = static_cast<int32_t>(std::max_element(adjusted.begin(), adjusted.end()) - adjusted.begin());
    const int32_t got = sampler.sample(logits);
    CHECK(got == want) << "round " << round << ": drew " << got << ", the first maximum is " << want;
  }
}

TEST(sampler_top_p_keeps_the_smallest_prefix_reaching_p) {
  // Probabilities 0.5, 0.3, 0.2 (logits are their logs).
  const std::vector<float> logits{std::log(0.2f), std::log(0.5f), std::log(0.3f)};
  SamplerParams p = plain();
  p.top_p = 0.75f;  // 0.5 + 0.3 reaches it
  Sampler two(p);
  CHECK(near(probabilities(two, logits), {{1, 0.5 / 0.8}, {2, 0.3 / 0.8}}, 1e-5));
  p.top_p = 0.85f;  // needs the third
  Sampler three(p);
  CHECK(probabilities(three, logits).size() == 3);
  p.top_p = 0.4f;
  Sampler one(p);
  CHECK(near(probabilities(one, logits), {{1, 1.0}}));
}

TEST(sampler_min_p_drops_tokens_below_a_share_of_the_best) {
  const std::vector<float> logits{std::log(0.2f), std::log(0.5f), std::log(0.3f)};
  SamplerParams p = plain();
  p.min_p = 0.5f;  // keeps p >= 0.25
  Sampler sampler(p);
  CHECK(near(probabilities(sampler, logits), {{1, 0.5 / 0.8}, {2, 0.3 / 0.8}}, 1e-5));
}

TEST(sampler_filters_run_in_llama_cpp_order) {
  // Each case gives a different answer with its two stages swapped.
  SamplerParams p = plain();
  p.repeat_penalty = 4.0f;
  p.top_k = 1;
  Sampler penalties_then_top_k(p);
  penalties_then_top_k.accept_prompt(std::vector<int32_t>{0});
  CHECK(near(probabilities(penalties_then_top_k, {3.0f, 2.0f, 1.0f}), {{1, 1.0}}));

  // top-k then top-p: the pair 0.4, 0.3 renormalized puts 4/7 >= 0.5 on its own.
  p = plain();
  p.top_k = 2;
  p.top_p = 0.5f;
  Sampler top_k_then_top_p(p);
  CHECK(near(probabilities(top_k_then_top_p, {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)}),
             {{0, 1.0}}));

  // top-p then min-p: top-p over all five keeps 0.5 and 0.3 (0.5 < 0.55); min-p first would
  // drop the two 0.05s and lift 0.5 to 0.556, which top-p would keep alone.
  p = plain();
  p.top_p = 0.55f;
  p.min_p = 0.15f;
  Sampler top_p_then_min_p(p);
  CHECK(near(probabilities(top_p_then_min_p,
                           {std::log(0.5f), std::log(0.3f), std::log(0.1f), std::log(0.05f), std::log(0.05f)}),
             {{0, 0.5 / 0.8}, {1, 0.3 / 0.8}}, 1e-5));

  // Temperature last: a hot temperature does not let min-p keep more tokens.
  p = plain();
  p.temperature = 100.0f;
  p.min_p = 0.5f;
  Sampler min_p_then_temperature(p);
  CHECK(probabilities(min_p_then_temperature, {std::log(0.5f), std::log(0.3f), std::log(0.2f)}).size() == 2);
}

TEST(sampler_draws_follow_the_distribution_and_repeat_with_the_seed) {
  const std::vector<float> logits{std::log(0.1f), std::log(0.6f), std::log(0.3f)};
  SamplerParams p = plain();
  p.seed = 42;
  Sampler a(p), b(p);
  std::vector<int> counts(3, 0);
  std::vector<int32_t> draws_a, draws_b;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    draws_a.push_back(a.sample(logits));
    draws_b.push_back(b.sample(logits));
    ++counts[draws_a.back()];
  }
  CHECK(draws_a == draws_b);
  CHECK(std::fabs(counts[0] / double(n) - 0.1) < 0.005) << counts[0];
  CHECK(std::fabs(counts[1] / double(n) - 0.6) < 0.005) << counts[1];
  CHECK(std::fabs(counts[2] / double(n) - 0.3) < 0.005) << counts[2];

  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> draws_c;
  for (int i = 0; i < 100; ++i) draws_c.push_back(c.sample(logits));
  CHECK(!std::equal(draws_c.begin(), draws_c.end(), draws_a.begin()));
}

TEST(sampler_refuses_settings_by_name) {
  SamplerParams p;
  p.temperature = -1.0f;
  CHECK(refused(p, "temperature"));
  p = {};
  p.top_k = -1;
  CHECK(refused(p, "topK"));
  p = {};
  p.top_p = 1.5f;
  CHECK(refused(p, "topP"));
  p = {};
  p.min_p = std::nanf("");
  CHECK(refused(p, "minP"));
  p = {};
  p.repeat_penalty = 0.0f;
  CHECK(refused(p, "repeatPenalty"));
  p = {};
  p.repeat_last_n = -2;
  CHECK(refused(p, "repeatLastN"));
  p = {};
  p.presence_penalty = kInf;
  CHECK(refused(p, "presencePenalty"));
  p = {};
  p.frequency_penalty = std::nanf("");
  CHECK(refused(p, "frequencyPenalty"));
  p = {};
  p.logit_bias = {{3, kInf}};
  CHECK(refused(p, "logitBias"));
  p = {};
  p.logit_bias = {{-1, 1.0f}};
  CHECK(refused(p, "logitBias"));
}
