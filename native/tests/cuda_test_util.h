// Shared by the cuda_*_test.cc files: whether a CUDA device is there (printing why not),
// device buffers filled from and read back into host vectors, and random weights of
// realistic scale in every GPU weight type (quant's CPU kernels cover the same types).
#pragma once

#ifdef BLOOMERY_CUDA

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/device.h"
#include "cuda/runtime.h"
#include "quant/blocks.h"
#include "quant/float_formats.h"
#include "quant/ggml_types.h"

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

}  // namespace bloomery::tests::gpu

#endif
