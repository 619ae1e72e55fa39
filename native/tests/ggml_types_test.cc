#include "quant/ggml_types.h"

#include "tests/check.h"

using namespace bloomery::quant;

TEST(ggml_row_bytes_whole_blocks) {
  auto q4k = ggml_type(12);
  CHECK(q4k && q4k->name == "Q4_K");
  CHECK(ggml_row_bytes(*q4k, 2048) == 8u * 144u);
  CHECK(!ggml_row_bytes(*q4k, 100)) << "a partial block must be refused";
}

TEST(ggml_row_bytes_refuses_overflow) {
  auto f32 = ggml_type(0);
  CHECK(!ggml_row_bytes(*f32, UINT64_MAX / 2)) << "4 bytes x 2^63 elements overflows";
}

TEST(ggml_type_unknown_ids) {
  CHECK(!ggml_type(4)) << "Q4_2 was removed from ggml";
  CHECK(!ggml_type(1000));
}
