// Helpers shared by the kernels: warp reductions, the ggml type ids the kernels serve,
// unaligned loads (ggml blocks of 34 and 210 bytes leave their data only 2-byte aligned, MXFP4's
// of 17 bytes only 1-byte), the small float formats, and register lookups in 16-entry codebooks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/ops.h"
#include "quant/blocks.h"

namespace bloomery::cuda {

inline constexpr uint32_t kTypeF32 = 0;
inline constexpr uint32_t kTypeF16 = 1;
inline constexpr uint32_t kTypeBF16 = 30;
inline constexpr uint32_t kTypeQ4_0 = quant::BlockQ4_0::kType;
inline constexpr uint32_t kTypeQ4_1 = quant::BlockQ4_1::kType;
inline constexpr uint32_t kTypeQ5_0 = quant::BlockQ5_0::kType;
inline constexpr uint32_t kTypeQ5_1 = quant::BlockQ5_1::kType;
inline constexpr uint32_t kTypeQ8_0 = quant::BlockQ8_0::kType;
inline constexpr uint32_t kTypeQ8_1 = quant::BlockQ8_1::kType;
inline constexpr uint32_t kTypeQ2_K = quant::BlockQ2_K::kType;
inline constexpr uint32_t kTypeQ3_K = quant::BlockQ3_K::kType;
inline constexpr uint32_t kTypeQ4_K = quant::BlockQ4_K::kType;
inline constexpr uint32_t kTypeQ5_K = quant::BlockQ5_K::kType;
inline constexpr uint32_t kTypeQ6_K = quant::BlockQ6_K::kType;
inline constexpr uint32_t kTypeQ8_K = quant::BlockQ8_K::kType;
inline constexpr uint32_t kTypeIQ4_NL = quant::BlockIQ4_NL::kType;
inline constexpr uint32_t kTypeIQ4_XS = quant::BlockIQ4_XS::kType;
inline constexpr uint32_t kTypeMXFP4 = quant::BlockMXFP4::kType;
// The 1- to 3-bit types (iq_decode.cuh decodes them).
inline constexpr uint32_t kTypeIQ2_XXS = quant::BlockIQ2_XXS::kType;
inline constexpr uint32_t kTypeIQ2_XS = quant::BlockIQ2_XS::kType;
inline constexpr uint32_t kTypeIQ2_S = quant::BlockIQ2_S::kType;
inline constexpr uint32_t kTypeIQ3_XXS = quant::BlockIQ3_XXS::kType;
inline constexpr uint32_t kTypeIQ3_S = quant::BlockIQ3_S::kType;
inline constexpr uint32_t kTypeIQ1_S = quant::BlockIQ1_S::kType;
inline constexpr uint32_t kTypeIQ1_M = quant::BlockIQ1_M::kType;
inline constexpr uint32_t kTypeTQ1_0 = quant::BlockTQ1_0::kType;
inline constexpr uint32_t kTypeTQ2_0 = quant::BlockTQ2_0::kType;

constexpr bool is_low_bit_type(uint32_t type) {
  return type == kTypeIQ2_XXS || type == kTypeIQ2_XS || type == kTypeIQ2_S || type == kTypeIQ3_XXS ||
         type == kTypeIQ3_S || type == kTypeIQ1_S || type == kTypeIQ1_M || type == kTypeTQ1_0 || type == kTypeTQ2_0;
}

// The block layouts the kernels decode, by their names.
using quant::BlockIQ4_NL;
using quant::BlockIQ4_XS;
using quant::BlockMXFP4;
using quant::BlockQ2_K;
using quant::BlockQ3_K;
using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ4_K;
using quant::BlockQ5_0;
using quant::BlockQ5_1;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;

// The weight types the kernels serve: matvec.cu's integer dots take the quantized ones,
// its float kernel the float ones; embed.cu looks up rows of all of them.
template <uint32_t... Types>
struct TypeList {};
using QuantizedTypes = TypeList<kTypeQ4_0, kTypeQ4_1, kTypeQ5_0, kTypeQ5_1, kTypeQ8_0, kTypeQ2_K, kTypeQ3_K, kTypeQ4_K,
                                kTypeQ5_K, kTypeQ6_K, kTypeIQ4_NL, kTypeIQ4_XS, kTypeMXFP4, kTypeIQ2_XXS, kTypeIQ2_XS,
                                kTypeIQ2_S, kTypeIQ3_XXS, kTypeIQ3_S, kTypeIQ1_S, kTypeIQ1_M, kTypeTQ1_0, kTypeTQ2_0>;
using FloatTypes = TypeList<kTypeF32, kTypeF16, kTypeBF16>;

// Calls f(std::integral_constant<uint32_t, T>{}) for the T of the list equal to `type`, and
// says whether there was one.
template <uint32_t... Types, typename F>
bool with_type(TypeList<Types...>, uint32_t type, F&& f) {
  return ((type == Types ? (f(std::integral_constant<uint32_t, Types>{}), true) : false) || ...);
}

inline constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

__device__ __forceinline__ float half_bits_to_float(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
// The half at a 2-byte aligned address (a block's d, dmin or m).
__device__ __forceinline__ float half_at(const uint8_t* p) {
  return half_bits_to_float(*reinterpret_cast<const uint16_t*>(p));
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t bits) { return __uint_as_float(uint32_t{bits} << 16); }

// MXFP4's E8M0 scale 2^(e-127), halved as quant::e8m0_to_fp32_half halves it (its codebook holds doubled values).
__device__ __forceinline__ float e8m0_to_float_half(uint8_t e) {
  return __uint_as_float(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23);
}

// A 32-bit word from a 4-byte aligned address.
__device__ __forceinline__ int load_int_aligned4(const uint8_t* p) { return *reinterpret_cast<const int*>(p); }

// A 32-bit word from a 2-byte aligned address.
__device__ __forceinline__ int load_int_aligned2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16));
}

// The 16 bytes from any address as four words: five aligned word loads (four where p is aligned)
// shifted into place, rather than sixteen byte loads (MXFP4's 17-byte blocks leave its codes at
// every alignment).
__device__ __forceinline__ void load_16_unaligned(const uint8_t* p, uint32_t (&words)[4]) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  const auto* aligned = reinterpret_cast<const uint32_t*>(address & ~uintptr_t{3});
  const auto shift = static_cast<uint32_t>(address & 3) * 8;
  uint32_t v[5];
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = aligned[i];
  v[4] = shift != 0 ? aligned[4] : 0u;
#pragma unroll
  for (int i = 0; i < 4; ++i) words[i] = __funnelshift_r(v[i], v[i + 1], shift);
}

// Entries 4w .. 4w+3 of a 16-entry int8 codebook (quant/blocks.h), one per byte.
constexpr uint32_t codebook_word(const int8_t (&values)[16], int w) {
  uint32_t word = 0;
  for (int i = 3; i >= 0; --i) word = (word << 8) | static_cast<uint8_t>(values[4 * w + i]);
  return word;
}

// Four 4-bit indices (one per byte, each 0..15) mapped through the codebook whose words are
// w0..w3: byte permutes pick each index's entry from the low and the high half of the table,
// then bit 3 of the index chooses between the two.
__device__ __forceinline__ int codebook_lookup(uint32_t indices, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  const uint32_t within =
      (indices & 0x7u) | ((indices >> 4) & 0x70u) | ((indices >> 8) & 0x700u) | ((indices >> 12) & 0x7000u);
  const uint32_t low = __byte_perm(w0, w1, within);
  const uint32_t high = __byte_perm(w2, w3, within);
  const uint32_t half = 0x3210u | ((indices & 0x8u) >> 1) | ((indices & 0x800u) >> 5) | ((indices & 0x80000u) >> 9) |
                        ((indices & 0x8000000u) >> 13);
  return static_cast<int>(__byte_perm(low, high, half));
}

// The eight 4-bit indices of a word of 32-element block codes (byte k: the low nibble indexes
// weight k, the high one weight k + 16) mapped through the codebook whose words are w0..w3:
// weights k (.x) and k + 16 (.y) for the word's four k. A byte permute reads only the low three
// bits of each selector nibble, so the indices select within each half of the table as they
// are, and bit 3 then picks the half: half the work of four codebook_lookup calls.
__device__ __forceinline__ int2 codebook_pairs(uint32_t indices, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3) {
  const uint32_t half = 0x32103210u | ((indices & 0x88888888u) >> 1);
  uint32_t values[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t selector = indices >> (16 * i);
    values[i] = __byte_perm(__byte_perm(w0, w1, selector), __byte_perm(w2, w3, selector), half >> (16 * i));
  }
  return make_int2(static_cast<int>(__byte_perm(values[0], values[1], 0x6420)),
                   static_cast<int>(__byte_perm(values[0], values[1], 0x7531)));
}

// IQ4_NL's and IQ4_XS's non-linear values, and MXFP4's doubled E2M1 values, of four indices.
__device__ __forceinline__ int iq4nl_values(uint32_t indices) {
  constexpr uint32_t w0 = codebook_word(quant::kIq4nlValues, 0), w1 = codebook_word(quant::kIq4nlValues, 1);
  constexpr uint32_t w2 = codebook_word(quant::kIq4nlValues, 2), w3 = codebook_word(quant::kIq4nlValues, 3);
  return codebook_lookup(indices, w0, w1, w2, w3);
}
__device__ __forceinline__ int mxfp4_values(uint32_t indices) {
  constexpr uint32_t w0 = codebook_word(quant::kMxfp4Values, 0), w1 = codebook_word(quant::kMxfp4Values, 1);
  constexpr uint32_t w2 = codebook_word(quant::kMxfp4Values, 2), w3 = codebook_word(quant::kMxfp4Values, 3);
  return codebook_lookup(indices, w0, w1, w2, w3);
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block (quant::k4_scale_min).
__device__ __forceinline__ int k4_scale(const uint8_t* s, int j) {
  return j < 4 ? s[j] & 63 : (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
}
__device__ __forceinline__ int k4_min(const uint8_t* s, int j) {
  return j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
}

// The signed scale of sub-block j (16 elements) of a Q3_K block (quant::q3k_scale).
__device__ __forceinline__ int q3k_scale(const uint8_t* scales, int j) {
  const int low = j < 8 ? scales[j] & 0x0f : scales[j - 8] >> 4;
  const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (low | (high << 4)) - 32;
}

// The signed scale of sub-block j (32 elements) of an IQ4_XS block (quant::iq4xs_scale).
__device__ __forceinline__ int iq4xs_scale(const uint8_t* block, int j) {
  const int low = (block[offsetof(quant::BlockIQ4_XS, scales_l) + j / 2] >> (4 * (j % 2))) & 0x0f;
  const uint16_t scales_h = *reinterpret_cast<const uint16_t*>(block + offsetof(quant::BlockIQ4_XS, scales_h));
  return (low | (((scales_h >> (2 * j)) & 3) << 4)) - 32;
}

// A float's exp as the CPU path computes it on AVX-512 hosts (cpu/avx512_math.h's exp_avx512,
// ggml's AVX-512 expf, step for step: n through the 1.5 * 2^23 shift, the two-part reduction, the
// degree-5 polynomial in b and b^2 with fused multiply-adds in the same order, scaled by 2^n; |n|
// past 192 gives infinity or 0), so the GPU and the CPU round softmax blocks and SwiGLU alike
// there. (On AVX2 hosts the CPU's e^x differs from this in its scaling only past |n| > 126.)
__device__ __forceinline__ float exp_as_host(float x) {
  constexpr float kShift = 0x1.8p23f;
  const float n = __fsub_rn(__fmaf_rn(x, 0x1.715476p+0f, kShift), kShift);
  const float b = __fmaf_rn(-n, 0x1.7f7d1cp-20f, __fmaf_rn(-n, 0x1.62e4p-1f, x));
  const float b2 = __fmul_rn(b, b);
  const float high =
      __fmaf_rn(__fmaf_rn(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), b2, __fmaf_rn(0x1.555e66p-3f, b, 0x1.fffdb6p-2f));
  const float poly = __fmaf_rn(high, b2, __fmaf_rn(0x1.ffffecp-1f, b, 1.0f));
  if (fabsf(n) > 192.0f) return n > 0.0f ? INFINITY : 0.0f;
  return ldexpf(poly, static_cast<int>(n));
}

// The CPU softmax's block on an AVX-512 host (cpu/softmax_avx512.cc: 16 floats), whose exps it
// sums in float before adding the block's sum in double.
constexpr int kSoftmaxBlock = 16;

// A float's exp as the host's libm returns it (std::exp: correctly rounded but for rare
// halfway cases), for what the CPU path computes one value at a time.
__device__ __forceinline__ float exp_as_libm(float x) { return static_cast<float>(exp(static_cast<double>(x))); }

// silu(gate) * up, rounded step by step as cpu/swiglu.cc computes it.
__device__ __forceinline__ float swiglu_value(float gate, float up) {
  return __fmul_rn(__fdiv_rn(gate, __fadd_rn(1.0f, exp_as_host(-gate))), up);
}

// gate and up joined by `a`, rounded as cpu/swiglu.cc's swiglu, clamped_swiglu and limited_swiglu
// (the last two's exps are libm's).
__device__ __forceinline__ float gated_value(float gate, float up, const GatedActivation& a) {
  switch (a.kind) {
    case GatedActivation::Kind::kSwiglu:
      break;
    case GatedActivation::Kind::kClamped: {
      const float g = fminf(gate, a.limit);
      const float u = fminf(fmaxf(up, -a.limit), a.limit);
      return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, exp_as_libm(__fmul_rn(a.alpha, -g)))), __fadd_rn(u, 1.0f));
    }
    case GatedActivation::Kind::kLimited: {
      const float g = fminf(gate, a.limit);
      const float u = fminf(fmaxf(up, -a.limit), a.limit);
      return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, exp_as_libm(-g))), u);
    }
  }
  return swiglu_value(gate, up);
}

// A routed slot's gated value with ExpertEpilogue's biases and activation, for output `row` of
// `rows`, rounded as the CPU's moe_run_experts (add_bias, then the activation).
__device__ __forceinline__ float gated_expert_value(float gate, float up, const ExpertEpilogue& e, int slot, int row,
                                                    int rows) {
  if (e.gate_bias || e.up_bias) {
    const int64_t at = static_cast<int64_t>(e.chosen[slot]) * rows + row;
    if (e.gate_bias) gate = __fadd_rn(gate, e.gate_bias[at]);
    if (e.up_bias) up = __fadd_rn(up, e.up_bias[at]);
  }
  return gated_value(gate, up, e.activation);
}

// A routed slot's down product with ExpertEpilogue's bias, for output `row` of `rows`.
__device__ __forceinline__ float expert_output_value(float value, const ExpertEpilogue& e, int slot, int row,
                                                     int rows) {
  if (!e.down_bias) return value;
  return __fadd_rn(value, e.down_bias[static_cast<int64_t>(e.chosen[slot]) * rows + row]);
}

__device__ __forceinline__ float round_to_half(float x) { return __half2float(__float2half_rn(x)); }
__device__ __forceinline__ float round_to_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Element c of a row of a float weight type (F32, F16, BF16).
template <uint32_t Type>
__device__ __forceinline__ float float_weight(const uint8_t* row, int c) {
  if constexpr (Type == kTypeF32) {
    return reinterpret_cast<const float*>(row)[c];
  } else if constexpr (Type == kTypeF16) {
    return half_bits_to_float(reinterpret_cast<const uint16_t*>(row)[c]);
  } else {
    static_assert(Type == kTypeBF16);
    return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(row)[c]);
  }
}

// An activation as the CPU path (as ggml) multiplies it with weights of a float type: rounded to F16 or BF16 for those.
template <uint32_t Type>
__device__ __forceinline__ float float_operand(float v) {
  if constexpr (Type == kTypeF16) {
    return round_to_half(v);
  } else if constexpr (Type == kTypeBF16) {
    return round_to_bf16(v);
  } else {
    return v;
  }
}

inline unsigned int ceil_div(int64_t a, int64_t b) { return static_cast<unsigned int>((a + b - 1) / b); }

// Programmatic dependent launch (sm_90 and later): a kernel started by launch_early may begin
// while the kernel before it in the stream (or graph) finishes its last blocks, so that its
// launch, its block scheduling and any loads of data no kernel writes (weights) overlap that
// kernel's tail; a decode step is hundreds of short kernels. Such a kernel must call
// wait_for_previous_kernel() before it touches memory another kernel writes or reads: it returns
// once the previous kernel has completed and its writes are visible. The same call lets the next
// early-launched kernel start (all of this one's blocks are running by then).
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether the current device starts kernels early (compute capability 9.0 and later); older
// ones run launch_early's kernels as plain launches.
inline bool launches_early() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
  return major >= 9;
}

// kernel<<<grid, block, shared, stream>>>(args...), allowed to start early (see above). A failed
// launch is reported as a <<<>>> launch's is, by cudaGetLastError (check_launch).
template <typename... Params, typename... Args>
void launch_early(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute early{};
  early.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  early.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = &early;
  config.numAttrs = launches_early() ? 1 : 0;
  cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

}  // namespace bloomery::cuda
