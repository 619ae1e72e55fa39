// How a hybrid prompt pass chooses between streaming its host experts to the GPU and handing
// its rows to the CPU: the bounds, the default before any measurement, the measured costs
// between them, and the CPU's cost table learned from the layers it ran.
#include "engine/expert_stream.h"

#include <algorithm>
#include <cmath>

#include "tests/check.h"

using namespace bloomery::engine;

namespace {

bool near(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(1.0, std::abs(b)); }

}  // namespace

TEST(stream_choice_keeps_few_rows_on_the_cpu_and_streams_many_whatever_was_measured) {
  CHECK(!StreamChoice::stream(StreamChoice::kFloorRows - 1, 1e-9, 1.0)) << "below the floor";
  CHECK(StreamChoice::stream(StreamChoice::kCeilingRows, 1.0, 1e-9)) << "at the ceiling";
  CHECK(!StreamChoice::stream(1, 1e-9, 1.0)) << "a decode step";
}

TEST(stream_choice_uses_the_default_rows_until_both_costs_are_measured) {
  CHECK(!StreamChoice::stream(StreamChoice::kDefaultRows - 1, 0, 0));
  CHECK(StreamChoice::stream(StreamChoice::kDefaultRows, 0, 0));
  CHECK(StreamChoice::stream(StreamChoice::kDefaultRows, 1e-3, 0)) << "the CPU not measured yet";
  CHECK(!StreamChoice::stream(StreamChoice::kDefaultRows - 1, 0, 1.0)) << "the copy not measured yet";
}

TEST(stream_choice_streams_between_the_bounds_when_the_cpu_costs_more_than_the_copy) {
  CHECK(StreamChoice::stream(32, 1e-3, 2e-3));
  CHECK(!StreamChoice::stream(32, 2e-3, 1e-3));
  CHECK(!StreamChoice::stream(256, 8e-3, 4e-3)) << "a slow link keeps even 256 rows on the CPU";
}

TEST(row_cost_table_estimates_nothing_before_it_measures) {
  const RowCostTable table;
  CHECK(table.estimate(1) == 0);
  CHECK(table.estimate(100) == 0);
}

TEST(row_cost_table_scales_the_nearest_measured_bucket_below_by_the_rows) {
  RowCostTable table;
  table.observe(1, 0.5e-3);  // a decode step's layer: 0.5 ms for one row
  CHECK(near(table.estimate(1), 0.5e-3));
  CHECK(near(table.estimate(40), 40 * 0.5e-3)) << "from the one-row bucket";
  table.observe(40, 4e-3);  // 0.1 ms per row at 40 rows: rows share the experts' reads
  CHECK(near(table.estimate(40), 4e-3));
  CHECK(near(table.estimate(50), 5e-3)) << "40 and 50 share a bucket (32..63)";
  CHECK(near(table.estimate(100), 10e-3)) << "from the 32..63 bucket";
  CHECK(near(table.estimate(2), 2 * 0.5e-3)) << "the bucket below 32 is the one-row one";
}

TEST(row_cost_table_averages_new_measurements_into_a_bucket) {
  RowCostTable table;
  table.observe(8, 8e-3);
  table.observe(8, 16e-3);
  const double per_row = table.estimate(8) / 8;
  CHECK(per_row > 1e-3 && per_row < 2e-3) << per_row << " lies between the two measurements";
  table.observe(8, 0);  // a layer with nothing to run measures nothing
  CHECK(near(table.estimate(8) / 8, per_row));
}
