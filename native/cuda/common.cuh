// Helpers shared by the kernels: warp reductions, the ggml type ids the kernels serve, and
// unaligned loads (ggml blocks of 34 and 210 bytes leave their data only 2-byte aligned).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/ops.h"
#include "quant/blocks.h"

namespace bloomery::cuda {

inline constexpr uint32_t kTypeF32 = 0;
inline constexpr uint32_t kTypeF16 = 1;
inline constexpr uint32_t kTypeQ8_0 = quant::BlockQ8_0::kType;
inline constexpr uint32_t kTypeQ4_K = quant::BlockQ4_K::kType;
inline constexpr uint32_t kTypeQ6_K = quant::BlockQ6_K::kType;

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

// A 32-bit word from a 2-byte aligned address.
__device__ __forceinline__ int load_int_aligned2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<int>(static_cast<uint32_t>(h[0]) | (static_cast<uint32_t>(h[1]) << 16));
}

// A float's exp as the CPU path computes it on AVX-512 hosts (cpu/avx512_math.h's
// exp_avx512, step for step: the same clamps, the same round-to-nearest k, fused multiply-adds
// in the same order, the same scaling by 2^k), so the GPU and the CPU round softmax, SwiGLU
// and attention inputs alike there. (On hosts without AVX-512 the CPU uses libm's exp: the
// two differ by at most 2 ulp.)
__device__ __forceinline__ float exp_as_host(float x) {
  x = fminf(89.0f, fmaxf(-104.0f, x));
  const float k = rintf(__fmul_rn(x, 1.44269504088896341f));
  float r = __fmaf_rn(-k, 0.693145751953125f, x);
  r = __fmaf_rn(-k, 1.4286068202862268e-06f, r);
  float p = 1.0f / 5040;
  p = __fmaf_rn(p, r, 1.0f / 720);
  p = __fmaf_rn(p, r, 1.0f / 120);
  p = __fmaf_rn(p, r, 1.0f / 24);
  p = __fmaf_rn(p, r, 1.0f / 6);
  p = __fmaf_rn(p, r, 0.5f);
  p = __fmaf_rn(p, r, 1.0f);
  p = __fmaf_rn(p, r, 1.0f);
  return ldexpf(p, static_cast<int>(k));
}

// silu(gate) * up, rounded step by step as cpu/swiglu.cc computes it.
__device__ __forceinline__ float swiglu_value(float gate, float up) {
  return __fmul_rn(__fdiv_rn(gate, __fadd_rn(1.0f, exp_as_host(-gate))), up);
}

__device__ __forceinline__ float round_to_half(float x) { return __half2float(__float2half_rn(x)); }

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
