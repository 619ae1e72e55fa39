// Products whose matrix differs per head (or per group of heads): MLA's absorbed key and value
// up-projections, DeepSeek-V4's grouped output projection.
#pragma once

#include <cstdint>

#include "cpu/moe.h"
#include "cpu/thread_pool.h"
#include "engine/forward.h"

namespace bloomery::engine {

// y[i][h] = matrices[h] x[i][h] for every head h of n rows: head h of row i read from
// x + i * x_row + h * x_stride (matrices' cols floats) and written to y + i * y_row + h * y_stride
// (rows floats). The heads' matrices differ, so each head's rows are gathered and multiplied alone.
void per_head(const cpu::ExpertMatrices& matrices, const float* x, int64_t n, int64_t x_row, int64_t x_stride, float* y,
              int64_t y_row, int64_t y_stride, ForwardScratch& s, cpu::ThreadPool& pool);

}  // namespace bloomery::engine
