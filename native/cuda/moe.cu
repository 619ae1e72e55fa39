// The MoE layer's routing: top-k over the router's softmax or sigmoid (or gpt-oss's logits, then
// a softmax over the chosen), the routed slots grouped by
// expert (so each expert's weights are read once per chunk of rows), and the weighted sum
// of the experts' outputs back into the residual stream.
#include <algorithm>

#include "base/error.h"
#include "cuda/expert_sum.cuh"
#include "cuda/float_dot.cuh"
#include "cuda/log_as_libm.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kMaxExpertsPerLane = 16;  // 512 experts per router row
// llama.cpp clamps the sum of the chosen weights from below before dividing by it.
constexpr float kMinWeightSum = 6.103515625e-5f;

// Where top_k_kernel writes a single row's groups (see ExpertGroups); chunks null: not asked.
struct SingleRowGroups {
  const int32_t* slot_of_expert = nullptr;
  int32_t* order = nullptr;
  int32_t* chunks = nullptr;
  int32_t* chunk_count = nullptr;
};

// Merges two (value, index) candidates: the larger value, the lower index among equals.
__device__ __forceinline__ void take_better(float& best, int& best_e, float& best_w, float other, int other_e,
                                            float other_w) {
  if (other > best || (other == best && other_e < best_e)) {
    best = other;
    best_e = other_e;
    best_w = other_w;
  }
}

// Clears the selection values of the experts outside the router's best `groups_used` groups,
// each group scored by the sum of its two best values, as cpu::route does; lane g scores group g.
__device__ void limit_to_groups(float (&s)[kMaxExpertsPerLane], int experts, const RouterSpec& r) {
  const int lane = threadIdx.x % kWarp;
  const int group_size = experts / r.groups;
  float my_group = -INFINITY;
  for (int g = 0; g < r.groups; ++g) {
    float first = -INFINITY, second = -INFINITY;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      const int e = lane + i * kWarp;
      if (e >= experts || e / group_size != g) continue;
      if (s[i] > first) {
        second = first;
        first = s[i];
      } else if (s[i] > second) {
        second = s[i];
      }
    }
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const float other_first = __shfl_xor_sync(0xffffffffu, first, offset);
      const float other_second = __shfl_xor_sync(0xffffffffu, second, offset);
      second = fmaxf(fminf(first, other_first), fmaxf(second, other_second));
      first = fmaxf(first, other_first);
    }
    if (lane == g) my_group = __fadd_rn(first, second);
  }
  uint32_t allowed = 0;
  for (int k = 0; k < r.groups_used; ++k) {
    float best = my_group, unused_w = 0.0f;
    int best_g = lane;
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      take_better(best, best_g, unused_w, __shfl_xor_sync(0xffffffffu, best, offset),
                  __shfl_xor_sync(0xffffffffu, best_g, offset), 0.0f);
    }
    allowed |= 1u << best_g;
    if (lane == best_g) my_group = -INFINITY;
  }
#pragma unroll
  for (int i = 0; i < kMaxExpertsPerLane; ++i) {
    const int e = lane + i * kWarp;
    if (e < experts && !((allowed >> (e / group_size)) & 1u)) s[i] = -INFINITY;
  }
}

// One warp per row: each lane holds experts lane, lane + 32, ...; k rounds of a warp argmax of
// the selection values (ties to the lower index) pick the best in order, lane k keeping the k-th,
// so that what follows (normalizing, counting, grouping) takes one step per lane rather than a
// loop over k (the loads of a decode step's loop would wait one after another). The weights are
// the CPU path's on an AVX-512 host (cpu::route, cpu/softmax_avx512.cc): softmax exps rounded to
// float, summed in its order, probabilities as exp * float(1 / sum), or sigmoids with libm's exp;
// the chosen ones' sum in double; so both route alike. With `counts` set, each choice adds one to its expert's routing
// counter (wrapping: adaptive residency reads their differences between passes). With `single` set (a pass of one row),
// the row's groups too: one chunk per GPU-resident chosen expert, in k order (what group_kernel makes of one row, in
// another order). The logits are read from L2 (__ldcg): route_decode_kernel's other blocks wrote them in this launch.
// `row`: the row's index in chosen and weights.
__device__ void route_row(const float* l, int row, int experts, int used, const RouterSpec& r, int32_t* chosen,
                          float* weights, uint32_t* counts, SingleRowGroups single) {
  const int lane = threadIdx.x % kWarp;
  float p[kMaxExpertsPerLane];  // the gating weights
  float s[kMaxExpertsPerLane];  // what experts are chosen by; -INFINITY: none, or out of the race
#pragma unroll
  for (int i = 0; i < kMaxExpertsPerLane; ++i) {
    const int e = lane + i * kWarp;
    p[i] = e < experts ? __ldcg(l + e) : -INFINITY;
    if (r.router_bias && e < experts) p[i] = __fadd_rn(p[i], __ldg(r.router_bias + e));
  }
  if (r.gating == RouterSpec::Gating::kSoftmaxSelected) {
    // The logits choose; their softmax over the chosen weights them, below.
  } else if (r.gating == RouterSpec::Gating::kSigmoid) {
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) p[i] = __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_as_libm(-p[i])));
  } else if (r.gating == RouterSpec::Gating::kSqrtSoftplus) {
    // As cpu::route: ggml's softplus (linear above 20; libm's exp and logf), then its square root.
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      const float softplus = p[i] > 20.0f ? p[i] : log_as_libm(__fadd_rn(1.0f, exp_as_libm(p[i])));
      p[i] = __fsqrt_rn(softplus);
    }
  } else {
    float local_max = -INFINITY;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) local_max = fmaxf(local_max, p[i]);
    const float max = warp_max(local_max);
    // As cpu/softmax_avx512.cc: the whole blocks of 16 experts through exp_as_host, each block
    // summed in float as _mm512_reduce_add_ps sums it (a butterfly over 8, 4, 2 and 1 lanes:
    // half a warp is one block), the block sums added in double; the last partial block through
    // libm's exp, one at a time, added in double after them (in the order of its experts).
    const int whole = experts / kSoftmaxBlock * kSoftmaxBlock;
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      const int e = lane + i * kWarp;
      const float shifted = __fsub_rn(p[i], max);
      p[i] = e < whole ? exp_as_host(shifted) : e < experts ? exp_as_libm(shifted) : 0.0f;
      if (i * kWarp >= experts) continue;
      float block = e < whole ? p[i] : 0.0f;
      for (int offset = kSoftmaxBlock / 2; offset > 0; offset /= 2) {
        block = __fadd_rn(block, __shfl_xor_sync(0xffffffffu, block, offset));
      }
      const float first = __shfl_sync(0xffffffffu, block, 0), second = __shfl_sync(0xffffffffu, block, kSoftmaxBlock);
      if (i * kWarp < whole) sum += static_cast<double>(first);
      if (i * kWarp + kSoftmaxBlock < whole) sum += static_cast<double>(second);
      if (i * kWarp <= whole && whole < (i + 1) * kWarp) {
        for (int tail = whole; tail < experts; ++tail)
          sum += static_cast<double>(__shfl_sync(0xffffffffu, p[i], tail % kWarp));
      }
    }
    const auto inverse = static_cast<float>(1.0 / sum);
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) p[i] = __fmul_rn(p[i], inverse);
  }
#pragma unroll
  for (int i = 0; i < kMaxExpertsPerLane; ++i) {
    const int e = lane + i * kWarp;
    s[i] = e >= experts ? -INFINITY : r.selection_bias ? __fadd_rn(p[i], __ldg(r.selection_bias + e)) : p[i];
  }
  if (r.groups > 1 && r.groups_used < r.groups) limit_to_groups(s, experts, r);
  double chosen_sum = 0.0;
  int my_expert = 0;
  float my_weight = 0.0f;
  if (r.token_experts) {
    // Hash routing: the token's experts in table order, each with its gating weight (held by
    // lane e % 32, at index e / 32).
    const int32_t* table = r.token_experts + static_cast<int64_t>(__ldg(r.tokens + row)) * used;
    for (int k = 0; k < used; ++k) {
      const int e = __ldg(table + k);
      float held = 0.0f;
#pragma unroll
      for (int i = 0; i < kMaxExpertsPerLane; ++i) held = i == e / kWarp ? p[i] : held;
      const float w = __shfl_sync(0xffffffffu, held, e % kWarp);
      chosen_sum += static_cast<double>(w);
      if (lane == k) {
        my_expert = e;
        my_weight = w;
      }
    }
  }
  for (int k = 0; k < (r.token_experts ? 0 : used); ++k) {
    float best = -INFINITY, best_w = 0.0f;
    int best_e = INT32_MAX;
#pragma unroll
    for (int i = 0; i < kMaxExpertsPerLane; ++i) {
      if (s[i] > best) {
        best = s[i];
        best_e = lane + i * kWarp;
        best_w = p[i];
      }
    }
#pragma unroll
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      take_better(best, best_e, best_w, __shfl_xor_sync(0xffffffffu, best, offset),
                  __shfl_xor_sync(0xffffffffu, best_e, offset), __shfl_xor_sync(0xffffffffu, best_w, offset));
    }
    if (best_e % kWarp == lane) s[best_e / kWarp] = -INFINITY;
    chosen_sum += static_cast<double>(best_w);
    if (lane == k) {
      my_expert = best_e;
      my_weight = best_w;
    }
  }
  if (r.gating == RouterSpec::Gating::kSoftmaxSelected) {
    // cpu::route's softmax over the chosen, in k order: the maximum, exps, their sum in double
    // (cpu/softmax.cc's scalar tail, libm's exp, which a row of fewer than a SIMD block takes:
    // gpt-oss's routers choose 4; 16 or more would take the CPU's blocks and part in last bits).
    float max = -INFINITY;
    for (int k = 0; k < used; ++k) max = fmaxf(max, __shfl_sync(0xffffffffu, my_weight, k));
    const float e = lane < used ? exp_as_libm(__fsub_rn(my_weight, max)) : 0.0f;
    double sum = 0.0;
    for (int k = 0; k < used; ++k) sum += static_cast<double>(__shfl_sync(0xffffffffu, e, k));
    my_weight = __fmul_rn(e, static_cast<float>(1.0 / sum));
  }
  if (r.normalize) my_weight = __fdiv_rn(my_weight, fmaxf(static_cast<float>(chosen_sum), kMinWeightSum));
  if (r.scale != 1.0f) my_weight = __fmul_rn(my_weight, r.scale);
  const bool chooses = lane < used;
  if (r.replay && chooses) {
    my_expert = __ldg(r.replay + row * used + lane);
    my_weight = __fdiv_rn(r.scale, static_cast<float>(used));
  }
  if (chooses) {
    chosen[row * used + lane] = my_expert;
    weights[row * used + lane] = my_weight;
    if (counts) atomicAdd(&counts[my_expert], 1u);
  }
  if (single.chunks) {
    const int slot = chooses ? single.slot_of_expert[my_expert] : -1;
    const unsigned resident = __ballot_sync(0xffffffffu, slot >= 0);
    if (slot >= 0) {
      const int c = __popc(resident & ((1u << lane) - 1u));
      single.chunks[3 * c] = slot;
      single.chunks[3 * c + 1] = c;
      single.chunks[3 * c + 2] = 1;
      single.order[c] = lane;
    }
    if (lane == 0) *single.chunk_count = __popc(resident);
  }
}

__global__ void top_k_kernel(const float* logits, int n, int experts, int used, RouterSpec router, int32_t* chosen,
                             float* weights, uint32_t* counts, SingleRowGroups single) {
  wait_for_previous_kernel();
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= n) return;
  route_row(logits + static_cast<int64_t>(row) * experts, row, experts, used, router, chosen, weights, counts, single);
}

// Groups the `pairs` routed slots of GPU-resident experts by expert (see group_by_expert), in
// one block: `shared` holds 4 * experts ints. The first warp lays the chunks out, each lane a
// run of experts (a scan across the lanes), so the block does not wait on one thread's loop.
// The order within an expert varies from run to run; each slot's result does not depend on it.
__device__ void group_slots(const int32_t* chosen, int pairs, int experts, const int32_t* slot_of_expert,
                            int tokens_per_chunk, int32_t* order, int32_t* chunks, int32_t* chunk_count, int* shared) {
  int* counts = shared;
  int* offsets = shared + experts;
  int* chunk_offsets = shared + 2 * experts;
  int* fill = shared + 3 * experts;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    counts[e] = 0;
    fill[e] = 0;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    if (slot_of_expert[chosen[i]] >= 0) atomicAdd(&counts[chosen[i]], 1);
  }
  __syncthreads();
  if (threadIdx.x < kWarp) {
    const int lane = threadIdx.x;
    const int per_lane = (experts + kWarp - 1) / kWarp;
    const int begin = min(experts, lane * per_lane), end = min(experts, begin + per_lane);
    int slots = 0, chunk = 0;
    for (int e = begin; e < end; ++e) {
      slots += counts[e];
      chunk += (counts[e] + tokens_per_chunk - 1) / tokens_per_chunk;
    }
    int slots_before = slots, chunks_before = chunk;  // inclusive sums over the lanes, then exclusive
#pragma unroll
    for (int offset = 1; offset < kWarp; offset *= 2) {
      const int other_slots = __shfl_up_sync(0xffffffffu, slots_before, offset);
      const int other_chunks = __shfl_up_sync(0xffffffffu, chunks_before, offset);
      if (lane >= offset) {
        slots_before += other_slots;
        chunks_before += other_chunks;
      }
    }
    if (lane == kWarp - 1) *chunk_count = chunks_before;
    slots_before -= slots;
    chunks_before -= chunk;
    for (int e = begin; e < end; ++e) {
      offsets[e] = slots_before;
      chunk_offsets[e] = chunks_before;
      slots_before += counts[e];
      chunks_before += (counts[e] + tokens_per_chunk - 1) / tokens_per_chunk;
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    for (int start = 0, c = chunk_offsets[e]; start < counts[e]; start += tokens_per_chunk, ++c) {
      chunks[3 * c] = slot_of_expert[e];
      chunks[3 * c + 1] = offsets[e] + start;
      chunks[3 * c + 2] = min(tokens_per_chunk, counts[e] - start);
    }
  }
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = chosen[i];
    if (slot_of_expert[e] >= 0) order[offsets[e] + atomicAdd(&fill[e], 1)] = i;
  }
}

struct RouteDecodeArgs {
  const uint8_t* router;
  size_t row_bytes;
  int cols;
  const float* x;
  int n;
  int experts;
  int used;
  int tokens_per_chunk;
  RouterSpec spec;
  float* logits;
  int32_t* chosen;
  float* weights;
  uint32_t* counts;
  const int32_t* slot_of_expert;
  int32_t* order;
  int32_t* chunks;
  int32_t* chunk_count;
  uint32_t* ticket;
};

// A block per expert computes its logits of the n rows (up to NT) as float_matvec_kernel does
// (float_dot.cuh); each then takes a ticket once its logits are visible, and the block that takes
// the last one routes the rows, a warp per row (route_row), groups them (a single row of one
// token per chunk as route_row groups it, else group_slots) and leaves the ticket zero for the
// next launch. Two launches less per layer than the router's product, top_k_kernel and
// group_kernel, with the same floats.
template <uint32_t Type, int NT>
__global__ void __launch_bounds__(kFloatThreads) route_decode_kernel(RouteDecodeArgs a) {
  extern __shared__ int grouping[];  // group_slots' counters: 4 * experts ints
  const float* xs[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) xs[t] = a.x + static_cast<int64_t>(min(t, a.n - 1)) * a.cols;
  const float logit = float_row_dots<Type, NT>(a.router + blockIdx.x * a.row_bytes, a.cols, xs);
  __shared__ bool last;
  if (static_cast<int>(threadIdx.x) < a.n) {
    a.logits[threadIdx.x * a.experts + blockIdx.x] = logit;
    __threadfence();  // the logit, before the block's ticket
  }
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(a.ticket, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  const bool single = a.n == 1 && a.tokens_per_chunk == 1;
  const SingleRowGroups groups =
      single ? SingleRowGroups{a.slot_of_expert, a.order, a.chunks, a.chunk_count} : SingleRowGroups{};
  for (int row = threadIdx.x / kWarp; row < a.n; row += kFloatThreads / kWarp) {
    route_row(a.logits + static_cast<int64_t>(row) * a.experts, row, a.experts, a.used, a.spec, a.chosen, a.weights,
              a.counts, groups);
  }
  if (!single) {
    __syncthreads();  // the rows' choices, written above, are read back by the whole block
    group_slots(a.chosen, a.n * a.used, a.experts, a.slot_of_expert, a.tokens_per_chunk, a.order, a.chunks,
                a.chunk_count, grouping);
  }
  if (threadIdx.x == 0) *a.ticket = 0;
}

// One block of group_slots.
__global__ void group_kernel(const int32_t* chosen, int pairs, int experts, const int32_t* slot_of_expert,
                             int tokens_per_chunk, int32_t* order, int32_t* chunks, int32_t* chunk_count) {
  wait_for_previous_kernel();
  extern __shared__ int shared[];
  group_slots(chosen, pairs, experts, slot_of_expert, tokens_per_chunk, order, chunks, chunk_count, shared);
}

// Each thread adds the expert sum (expert_sum.cuh) to kSumValues consecutive values of a row.
__global__ void combine_kernel(ExpertSum e, int width, float* residual) {
  wait_for_previous_kernel();
  const int64_t row = blockIdx.x;
  for (int first = static_cast<int>(threadIdx.x) * kSumValues; first < width;
       first += static_cast<int>(blockDim.x) * kSumValues) {
    const int count = min(kSumValues, width - first);
    float sum[kSumValues], v[kSumValues];
    expert_sum(e, row, first, count, width, sum);
    float* r = residual + row * width + first;
    load_values(r, count, v);
    for (int i = 0; i < count; ++i) r[i] = v[i] + sum[i];
  }
}

// Writes per launch, passed by value (about 1 KB of kernel parameters).
constexpr int kSlotWritesPerLaunch = 64;
struct SlotWriteBatch {
  SlotWrite writes[kSlotWritesPerLaunch];
  int count;
};

__global__ void set_slots_kernel(SlotWriteBatch batch) {
  for (int i = 0; i < batch.count; ++i) batch.writes[i].slot_of_expert[batch.writes[i].expert] = batch.writes[i].slot;
}

void check_routing(int64_t experts, int64_t used, const RouterSpec& router) {
  if (experts > kMaxExpertsPerLane * kWarp) {
    throw Error("UNSUPPORTED_MODEL", "the GPU router serves at most " + std::to_string(kMaxExpertsPerLane * kWarp) +
                                         " experts, the model has " + std::to_string(experts));
  }
  if (used > kWarp) {
    throw Error("UNSUPPORTED_MODEL", "the GPU router picks at most " + std::to_string(kWarp) +
                                         " experts per token, the model uses " + std::to_string(used));
  }
  if (router.groups > kWarp) {
    throw Error("UNSUPPORTED_MODEL", "the GPU router serves at most " + std::to_string(kWarp) +
                                         " expert groups, the model has " + std::to_string(router.groups));
  }
}

void launch_top_k(const float* logits, int64_t n, int64_t experts, int64_t used, const RouterSpec& router,
                  int32_t* chosen, float* weights, uint32_t* counts, const SingleRowGroups& single,
                  StreamHandle stream) {
  check_routing(experts, used, router);
  constexpr int kThreads = 128;
  launch_early(top_k_kernel, dim3(ceil_div(n, kThreads / kWarp)), dim3(kThreads), 0, static_cast<cudaStream_t>(stream),
               logits, static_cast<int>(n), static_cast<int>(experts), static_cast<int>(used), router, chosen, weights,
               counts, single);
}

}  // namespace

void set_expert_slots(std::span<const SlotWrite> writes, StreamHandle stream) {
  for (size_t first = 0; first < writes.size(); first += kSlotWritesPerLaunch) {
    SlotWriteBatch batch;
    batch.count = static_cast<int>(std::min<size_t>(kSlotWritesPerLaunch, writes.size() - first));
    std::copy_n(writes.begin() + static_cast<std::ptrdiff_t>(first), batch.count, batch.writes);
    set_slots_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(batch);
  }
}

void route_top_k(const float* logits, int64_t n, int64_t experts, int64_t used, const RouterSpec& router,
                 int32_t* chosen, float* weights, StreamHandle stream) {
  launch_top_k(logits, n, experts, used, router, chosen, weights, nullptr, {}, stream);
}

int tokens_per_expert_chunk(int64_t n) { return n == 1 ? 1 : 8; }

int64_t max_expert_chunks(int64_t n, int64_t experts, int64_t used, int tokens_per_chunk) {
  const int64_t pairs = n * used;
  return std::min(pairs, (pairs + tokens_per_chunk - 1) / tokens_per_chunk + experts);
}

void route_and_group(const float* logits, int64_t n, int64_t experts, int64_t used, const RouterSpec& router,
                     const int32_t* slot_of_expert, int tokens_per_chunk, int32_t* chosen, float* weights,
                     uint32_t* counts, int32_t* order, int32_t* chunks, int32_t* chunk_count, StreamHandle stream) {
  if (n == 1 && tokens_per_chunk == 1) {
    launch_top_k(logits, n, experts, used, router, chosen, weights, counts,
                 {slot_of_expert, order, chunks, chunk_count}, stream);
    return;
  }
  launch_top_k(logits, n, experts, used, router, chosen, weights, counts, {}, stream);
  group_by_expert(chosen, n, experts, used, slot_of_expert, tokens_per_chunk, order, chunks, chunk_count, stream);
}

void group_by_expert(const int32_t* chosen, int64_t n, int64_t experts, int64_t used, const int32_t* slot_of_expert,
                     int tokens_per_chunk, int32_t* order, int32_t* chunks, int32_t* chunk_count, StreamHandle stream) {
  const size_t shared = 4 * static_cast<size_t>(experts) * sizeof(int);
  launch_early(group_kernel, dim3(1), dim3(1024), shared, static_cast<cudaStream_t>(stream), chosen,
               static_cast<int>(n * used), static_cast<int>(experts), slot_of_expert, tokens_per_chunk, order, chunks,
               chunk_count);
}

void route_decode(const DeviceMatrix& router, const float* x, int64_t n, int64_t experts, int64_t used,
                  const RouterSpec& spec, const int32_t* slot_of_expert, int tokens_per_chunk, float* logits,
                  int32_t* chosen, float* weights, uint32_t* counts, int32_t* order, int32_t* chunks,
                  int32_t* chunk_count, uint32_t* ticket, StreamHandle stream) {
  check_routing(experts, used, spec);
  if (router.rows != experts) {
    throw Error("INVALID_ARGUMENT",
                "the router has " + std::to_string(router.rows) + " rows for " + std::to_string(experts) + " experts");
  }
  if (n < 1 || n > kMaxRouteDecodeRows) {
    throw Error("INVALID_ARGUMENT",
                "route_decode routes 1 to " + std::to_string(kMaxRouteDecodeRows) + " rows, not " + std::to_string(n));
  }
  const RouteDecodeArgs a{router.data,
                          router.row_bytes,
                          static_cast<int>(router.cols),
                          x,
                          static_cast<int>(n),
                          static_cast<int>(experts),
                          static_cast<int>(used),
                          tokens_per_chunk,
                          spec,
                          logits,
                          chosen,
                          weights,
                          counts,
                          slot_of_expert,
                          order,
                          chunks,
                          chunk_count,
                          ticket};
  const size_t shared = 4 * static_cast<size_t>(experts) * sizeof(int);
  const auto s = static_cast<cudaStream_t>(stream);
  const dim3 grid(static_cast<unsigned>(experts));
  const bool supported = with_type(FloatTypes{}, router.type, [&](auto t) {
    constexpr uint32_t kType = decltype(t)::value;
    switch (n) {
      case 1:
        launch_early(route_decode_kernel<kType, 1>, grid, dim3(kFloatThreads), shared, s, a);
        break;
      case 2:
        launch_early(route_decode_kernel<kType, 2>, grid, dim3(kFloatThreads), shared, s, a);
        break;
      case 3:
      case 4:
        launch_early(route_decode_kernel<kType, 4>, grid, dim3(kFloatThreads), shared, s, a);
        break;
      default:
        launch_early(route_decode_kernel<kType, 8>, grid, dim3(kFloatThreads), shared, s, a);
        break;
    }
  });
  if (!supported) {
    throw Error("UNSUPPORTED_QUANT", "route_decode takes a float router, not ggml type " + std::to_string(router.type));
  }
}

void combine_experts(const float* expert_out, const float* weights, const int32_t* chosen,
                     const int32_t* slot_of_expert, int64_t n, int64_t used, int64_t width, float* residual,
                     StreamHandle stream) {
  const ExpertSum e{expert_out, weights, chosen, slot_of_expert, used};
  launch_early(combine_kernel, dim3(static_cast<unsigned>(n)), dim3(256), 0, static_cast<cudaStream_t>(stream), e,
               static_cast<int>(width), residual);
}

}  // namespace bloomery::cuda
