// The pieces of speculative decoding that decide what to draft (engine/draft.h): the n-gram
// lookup, the measured pass costs and the width they make pay.
#include "engine/draft.h"

#include <vector>

#include "tests/check.h"

using namespace bloomery;

TEST(draft_ngram_takes_what_followed_the_latest_occurrence) {
  // "7 8" occurs twice before the end: the later one is followed by 9 5.
  const std::vector<int32_t> context{7, 8, 1, 2, 7, 8, 9, 5, 3, 7, 8};
  CHECK((engine::ngram_draft(context, 2, 4, 2) == std::vector<int32_t>{9, 5}));
  // The longest n-gram that occurs wins: "3 7 8" nowhere before, "7 8" is what matches.
  CHECK((engine::ngram_draft(context, 1, 3, 2) == std::vector<int32_t>{9}));
  // No earlier occurrence of the last two tokens: no draft.
  CHECK(engine::ngram_draft(std::vector<int32_t>{1, 2, 3, 4}, 4, 4, 2).empty());
  // A period of two tokens drafts on past the context's end, as wide as asked.
  CHECK((engine::ngram_draft(std::vector<int32_t>{5, 6, 5, 6}, 5, 4, 2) == std::vector<int32_t>{5, 6, 5, 6, 5}));
}

TEST(draft_pass_costs_interpolate_and_follow_the_faster_passes) {
  engine::PassCosts costs;
  costs.record(1, 1.0);
  costs.record(5, 3.0);
  CHECK(costs.estimate(3) == 2.0) << costs.estimate(3);
  // Beyond the widest measured, 5% more per row: optimistic until measured.
  CHECK(costs.estimate(7) > 3.0 && costs.estimate(7) < 3.4) << costs.estimate(7);
  // A pass another process held up moves the mean a little; a faster one half way.
  costs.record(1, 100.0);
  CHECK(costs.estimate(1) < 1.3) << costs.estimate(1);
  costs.record(1, 0.5);
  CHECK(costs.estimate(1) < 0.95) << costs.estimate(1);
}

TEST(draft_width_follows_cost_and_acceptance) {
  engine::PassCosts flat, moderate, steep;
  for (int64_t rows = 1; rows <= 9; ++rows) {
    flat.record(rows, 1.0 + 0.02 * double(rows - 1));
    moderate.record(rows, 1.0 + 0.15 * double(rows - 1));
    steep.record(rows, double(rows));  // each row costs a whole pass: drafts never pay
  }
  // Drafts always kept and passes nearly free to widen: as wide as allowed.
  CHECK(engine::best_draft_width(flat, 0, 0.99, 0, 8) == 8) << engine::best_draft_width(flat, 0, 0.99, 0, 8);
  // Rarely kept: none.
  CHECK(engine::best_draft_width(flat, 0, 0.01, 0, 8) == 0) << engine::best_draft_width(flat, 0, 0.01, 0, 8);
  CHECK(engine::best_draft_width(steep, 0, 0.9, 0, 8) == 0) << engine::best_draft_width(steep, 0, 0.9, 0, 8);
  // A draft model whose token costs as much as a pass does not pay either.
  CHECK(engine::best_draft_width(flat, 1.0, 0.9, 0, 8) == 0) << engine::best_draft_width(flat, 1.0, 0.9, 0, 8);
  // In between, a middle width: with 70% kept and 15% more per row, 3 tokens (2.53 per 1.45 passes).
  const int32_t middle = engine::best_draft_width(moderate, 0, 0.7, 0, 8);
  CHECK(middle == 3) << middle;
}

TEST(draft_acceptance_follows_what_was_kept) {
  engine::DraftAcceptance a;
  CHECK(a.rate() == 0.5);
  for (int i = 0; i < 40; ++i) a.record(4, 4);
  CHECK(a.rate() > 0.95) << a.rate();
  // Rejected at the first draft each time: the rate falls.
  for (int i = 0; i < 40; ++i) a.record(4, 0);
  CHECK(a.rate() < 0.1) << a.rate();
}
