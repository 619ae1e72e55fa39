// Shared by the cuda_*_test.cc files: whether a CUDA device is there (printing why not),
// device buffers filled from and read back into host vectors, random weights of realistic
// scale in every GPU weight type, and the CPU's products that the GPU's are checked against.
#pragma once

#ifdef BLOOMERY_CUDA

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cpu/cpu_dispatch.h"
#include "cuda/device.h"
#include "cuda/ops.h"
#include "cuda/runtime.h"
#include "quant/blocks.h"
#include "quant/float_formats.h"
#include "quant/ggml_types.h"
#include "quant/kernels.h"

namespace bloomery::tests::gpu {

// True when a CUDA device can run the kernels; otherwise prints why the test is skipped.
inline bool device_ready(const char* test) {
  static const cuda::CudaStatus status = cuda::query_cuda();
  if (!status.available) {
    std::printf("skip %s: %s\n", test, status.reason.c_str());
    return false;
  }
  cuda::use_device(0);
  return true;
}

template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& host) {
  cuda::DeviceBuffer buffer(std::max<size_t>(host.size() * sizeof(T), 1), "test data");
  if (!host.empty()) cuda::upload(buffer.data(), host.data(), host.size() * sizeof(T));
  return buffer;
}

template <typename T>
std::vector<T> download(const cuda::DeviceBuffer& buffer, size_t count, const cuda::Stream& stream) {
  std::vector<T> host(count);
  cuda::copy_to_host(host.data(), buffer.data(), count * sizeof(T), stream.handle());
  stream.synchronize();
  return host;
}

inline std::vector<float> random_floats(size_t count, float amplitude, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-amplitude, amplitude);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline size_t row_bytes(uint32_t type, int64_t cols) {
  return *quant::ggml_row_bytes(*quant::ggml_type(type), static_cast<uint64_t>(cols));
}

// The weight types the GPU's kernels take (every type with CPU kernels: cuda_types_match_cpu_types
// checks it): the float ones read float rows, the quantized ones activation blocks.
inline constexpr std::array<uint32_t, 3> kFloatTypes = {0, 1, 30};  // F32, F16, BF16
inline constexpr std::array<uint32_t, 22> kQuantizedTypes = {
    quant::BlockQ4_0::kType,    quant::BlockQ4_1::kType,    quant::BlockQ5_0::kType,   quant::BlockQ5_1::kType,
    quant::BlockQ8_0::kType,    quant::BlockQ2_K::kType,    quant::BlockQ3_K::kType,   quant::BlockQ4_K::kType,
    quant::BlockQ5_K::kType,    quant::BlockQ6_K::kType,    quant::BlockIQ4_NL::kType, quant::BlockIQ4_XS::kType,
    quant::BlockMXFP4::kType,   quant::BlockIQ2_XXS::kType, quant::BlockIQ2_XS::kType, quant::BlockIQ2_S::kType,
    quant::BlockIQ3_XXS::kType, quant::BlockIQ3_S::kType,   quant::BlockIQ1_S::kType,  quant::BlockIQ1_M::kType,
    quant::BlockTQ1_0::kType,   quant::BlockTQ2_0::kType};
inline constexpr auto kGpuTypes = [] {
  std::array<uint32_t, kFloatTypes.size() + kQuantizedTypes.size()> all{};
  std::copy(kFloatTypes.begin(), kFloatTypes.end(), all.begin());
  std::copy(kQuantizedTypes.begin(), kQuantizedTypes.end(), all.begin() + kFloatTypes.size());
  return all;
}();

inline const char* type_name(uint32_t type) { return quant::ggml_type(type)->name.data(); }

// `data` as `count` matrices of `rows` x `cols` weights of `type`, back to back.
inline cuda::DeviceMatrix device_matrix(uint32_t type, const cuda::DeviceBuffer& data, int64_t rows, int64_t cols,
                                        int64_t count = 1) {
  cuda::DeviceMatrix m;
  m.type = type;
  m.data = data.as<uint8_t>();
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = row_bytes(type, cols);
  m.matrix_bytes = m.row_bytes * static_cast<size_t>(rows);
  m.count = count;
  return m;
}

// `rows` rows of random codes; block scales set to the ranges real models use.
inline std::vector<uint8_t> random_matrix(uint32_t type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t bytes = row_bytes(type, cols) * static_cast<size_t>(rows);
  std::vector<uint8_t> m(bytes);
  const auto half = [&](size_t offset, float lo, float hi, bool sign) {
    float v = std::uniform_real_distribution<float>(lo, hi)(rng);
    if (sign && (rng() & 1)) v = -v;
    const uint16_t h = quant::fp32_to_fp16(v);
    std::memcpy(m.data() + offset, &h, sizeof h);
  };
  if (type == 0) {
    const auto f = random_floats(bytes / 4, 1.0f, rng);
    std::memcpy(m.data(), f.data(), bytes);
    return m;
  }
  if (type == 1) {
    for (size_t i = 0; i < bytes / 2; ++i) half(2 * i, 0.0f, 1.0f, true);
    return m;
  }
  if (type == 30) {
    for (size_t i = 0; i < bytes / 2; ++i) {
      const uint16_t b = quant::fp32_to_bf16(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng));
      std::memcpy(m.data() + 2 * i, &b, sizeof b);
    }
    return m;
  }
  for (auto& b : m) b = static_cast<uint8_t>(rng());
  const size_t block = quant::ggml_type(type)->block_bytes;
  // Q4_1/Q5_1's offset m centres the codes (0..15, 0..31) on zero, as real models' do.
  const auto offset = [&](size_t d_at, size_t m_at, float centre) {
    uint16_t d;
    std::memcpy(&d, m.data() + d_at, sizeof d);
    const float v = -centre * quant::fp16_to_fp32(d) * std::uniform_real_distribution<float>(0.8f, 1.2f)(rng);
    const uint16_t h = quant::fp32_to_fp16(v);
    std::memcpy(m.data() + m_at, &h, sizeof h);
  };
  for (size_t o = 0; o < bytes; o += block) {
    switch (type) {
      case quant::BlockQ4_0::kType:
        half(o + offsetof(quant::BlockQ4_0, d), 1e-3f, 1e-1f, true);
        break;
      case quant::BlockQ5_0::kType:
        half(o + offsetof(quant::BlockQ5_0, d), 1e-3f, 1e-1f, true);
        break;
      case quant::BlockQ4_1::kType:
        half(o + offsetof(quant::BlockQ4_1, d), 1e-3f, 1e-1f, false);
        offset(o + offsetof(quant::BlockQ4_1, d), o + offsetof(quant::BlockQ4_1, m), 8.0f);
        break;
      case quant::BlockQ5_1::kType:
        half(o + offsetof(quant::BlockQ5_1, d), 1e-3f, 1e-1f, false);
        offset(o + offsetof(quant::BlockQ5_1, d), o + offsetof(quant::BlockQ5_1, m), 16.0f);
        break;
      case quant::BlockQ8_0::kType:
        half(o + offsetof(quant::BlockQ8_0, d), 1e-3f, 1e-1f, true);
        break;
      case quant::BlockQ2_K::kType:
        half(o + offsetof(quant::BlockQ2_K, d), 1e-4f, 1e-2f, false);
        half(o + offsetof(quant::BlockQ2_K, dmin), 1e-4f, 1e-2f, false);
        break;
      case quant::BlockQ3_K::kType:
        half(o + offsetof(quant::BlockQ3_K, d), 1e-4f, 1e-2f, true);
        break;
      case quant::BlockQ4_K::kType:
        half(o + offsetof(quant::BlockQ4_K, d), 1e-4f, 1e-2f, false);
        half(o + offsetof(quant::BlockQ4_K, dmin), 1e-4f, 1e-2f, false);
        break;
      case quant::BlockQ5_K::kType:
        half(o + offsetof(quant::BlockQ5_K, d), 1e-4f, 1e-2f, false);
        half(o + offsetof(quant::BlockQ5_K, dmin), 1e-4f, 1e-2f, false);
        break;
      case quant::BlockQ6_K::kType:
        half(o + offsetof(quant::BlockQ6_K, d), 1e-5f, 1e-3f, true);
        break;
      case quant::BlockIQ4_NL::kType:
        half(o + offsetof(quant::BlockIQ4_NL, d), 1e-4f, 1e-2f, true);
        break;
      case quant::BlockIQ4_XS::kType:
        half(o + offsetof(quant::BlockIQ4_XS, d), 1e-5f, 1e-3f, true);
        break;
      case quant::BlockMXFP4::kType:
        m[o + offsetof(quant::BlockMXFP4, e)] = static_cast<uint8_t>(115 + rng() % 10);  // 2^-12 .. 2^-3
        break;
      case quant::BlockIQ2_XXS::kType:
      case quant::BlockIQ2_XS::kType:
      case quant::BlockIQ2_S::kType:
      case quant::BlockIQ3_XXS::kType:
      case quant::BlockIQ3_S::kType:
      case quant::BlockIQ1_S::kType:
        half(o, 1e-4f, 1e-2f, true);  // d leads these blocks
        break;
      case quant::BlockIQ1_M::kType: {  // the f16 scale in the top nibbles of the four scale words
        half(o, 1e-4f, 1e-2f, true);    // drawn into the first bytes, then moved
        uint16_t d;
        std::memcpy(&d, m.data() + o, sizeof d);
        m[o] = static_cast<uint8_t>(rng()), m[o + 1] = static_cast<uint8_t>(rng());
        for (int k = 0; k < 4; ++k) {
          uint8_t& top = m[o + offsetof(quant::BlockIQ1_M, scales) + 2 * k + 1];
          top = static_cast<uint8_t>((top & 0x0f) | (((d >> (4 * k)) & 0x0f) << 4));
        }
        break;
      }
      case quant::BlockTQ1_0::kType:
        half(o + offsetof(quant::BlockTQ1_0, d), 1e-4f, 1e-2f, true);
        break;
      case quant::BlockTQ2_0::kType:
        half(o + offsetof(quant::BlockTQ2_0, d), 1e-4f, 1e-2f, true);
        break;
      default:
        break;
    }
  }
  return m;
}

// Largest |a - b| over |b|'s largest magnitude.
inline double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

inline size_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) count += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return count;
}

// A grouping of the routed slots of up to n rows (route_and_group's or group_by_expert's order,
// chunks and chunk count) in device buffers of its own, and the ExpertGroups naming them.
// The input of a product of `type` from `count` float rows of `cols`: the rows themselves for
// float weights, else the rows quantized into `blocks` for that type.
inline cuda::MatvecInput product_input(uint32_t type, const cuda::DeviceBuffer& rows, int64_t count, int64_t cols,
                                       const cuda::DeviceBuffer& blocks, const cuda::Stream& stream) {
  if (cuda::is_float_type(type)) return {rows.as<float>(), nullptr};
  cuda::quantize_activations(rows.as<float>(), count, cols, type, blocks.as<cuda::ActivationBlock>(), stream.handle());
  return {nullptr, blocks.as<cuda::ActivationBlock>()};
}

struct DeviceGroups {
  DeviceGroups(int64_t n, int64_t experts, int64_t used, int tokens_per_chunk)
      : order(static_cast<size_t>(n * used) * sizeof(int32_t), "order"),
        chunks(static_cast<size_t>(3 * cuda::max_expert_chunks(n, experts, used, tokens_per_chunk)) * sizeof(int32_t),
               "chunks"),
        chunk_count(sizeof(int32_t), "chunk count") {
    groups.order = order.as<int32_t>();
    groups.chunks = chunks.as<int32_t>();
    groups.chunk_count = chunk_count.as<int32_t>();
    groups.tokens_per_chunk = tokens_per_chunk;
    groups.max_chunks = cuda::max_expert_chunks(n, experts, used, tokens_per_chunk);
  }
  // Groups `chosen` (device: n rows of `used` experts) by expert through `slots` (device).
  void group(const int32_t* chosen, int64_t n, int64_t experts, int64_t used, const int32_t* slots,
             const cuda::Stream& stream) const {
    cuda::group_by_expert(chosen, n, experts, used, slots, groups.tokens_per_chunk, order.as<int32_t>(),
                          chunks.as<int32_t>(), chunk_count.as<int32_t>(), stream.handle());
  }

  cuda::DeviceBuffer order, chunks, chunk_count;
  cuda::ExpertGroups groups;
};

inline const quant::QuantKernels& cpu_kernels(uint32_t type) {
  return quant::quant_kernels(type, cpu::host_simd_tier());
}

// CPU: y[i][r] = dot(row r, x[i]) through the CPU's activation quantizer and dot.
inline std::vector<float> cpu_matvec(uint32_t type, const std::vector<uint8_t>& w, int64_t rows, int64_t cols,
                                     const std::vector<float>& x, int64_t n) {
  const quant::QuantKernels& k = cpu_kernels(type);
  const size_t a_bytes = row_bytes(k.activation_type, cols);
  std::vector<uint8_t> a(a_bytes);
  std::vector<float> y(static_cast<size_t>(n * rows));
  for (int64_t i = 0; i < n; ++i) {
    k.quantize_activations(x.data() + i * cols, a.data(), cols);
    for (int64_t r = 0; r < rows; ++r)
      y[i * rows + r] = k.vec_dot(w.data() + r * row_bytes(type, cols), a.data(), cols);
  }
  return y;
}

}  // namespace bloomery::tests::gpu

#endif
