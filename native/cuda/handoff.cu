// The GPU's side of a hybrid pass: the layer's routed rows go to mapped host memory and a
// flag says they are there; later the GPU waits for the host's flag and adds the CPU's
// expert sum. Flags hold step numbers (bumped once per pass in device memory), so a
// captured decode graph replays with no new parameters and no host call in between.
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void begin_step_kernel(uint32_t* step) { *step += 1; }

// Copies queued earlier on the stream are complete when this runs; the fence orders this
// kernel's view before the flag, which the host reads with acquire.
__global__ void publish_kernel(const uint32_t* step, uint32_t* flag) {
  __threadfence_system();
  *reinterpret_cast<volatile uint32_t*>(flag) = *step;
  __threadfence_system();
}

__global__ void wait_kernel(const uint32_t* step, const uint32_t* flag, uint64_t* waited_ns) {
  const uint32_t want = *step;
  const uint64_t start = global_time_ns();
  while (*reinterpret_cast<const volatile uint32_t*>(flag) != want) __nanosleep(256);
  __threadfence_system();
  *waited_ns += global_time_ns() - start;
}

// Volatile reads: the host wrote these rows after the kernels before this one started.
__global__ void add_rows_kernel(const float* host_rows, int64_t count, float* residual) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) residual[i] += reinterpret_cast<const volatile float*>(host_rows)[i];
}

}  // namespace

void begin_handoff_step(uint32_t* step, StreamHandle stream) {
  begin_step_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(step);
}

void publish_to_host(const uint32_t* step, uint32_t* flag, StreamHandle stream) {
  publish_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(step, flag);
}

void add_from_host(const uint32_t* step, const uint32_t* flag, uint64_t* waited_ns, const float* host_rows,
                   int64_t count, float* residual, StreamHandle stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  wait_kernel<<<1, 1, 0, s>>>(step, flag, waited_ns);
  constexpr int kThreads = 256;
  add_rows_kernel<<<ceil_div(count, kThreads), kThreads, 0, s>>>(host_rows, count, residual);
}

}  // namespace bloomery::cuda
