// The GPU's side of a hybrid pass: the layer's routed rows go to mapped host memory and a
// flag says they are there; later the GPU waits for the host's flag and adds the CPU's
// expert sum. Flags hold step numbers (bumped once per pass in device memory), so a
// captured decode graph replays with no new parameters and no host call in between. One
// kernel each way: the handoff is on the critical path of every layer.
#include "cuda/common.cuh"

namespace bloomery::cuda {

namespace {

constexpr int kThreads = 256;
// Blocks of the grid-stride copies: enough to keep PCIe writes in flight, few enough to spin.
constexpr int64_t kMaxBlocks = 128;

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

unsigned blocks_for(int64_t count) {
  return static_cast<unsigned>(std::min<int64_t>(kMaxBlocks, ceil_div(count, kThreads)));
}

__global__ void begin_step_kernel(uint32_t* step) { *step += 1; }

// Every block copies its share into mapped memory and fences; the last block to finish
// raises the flag (and rearms the block counter for the next layer).
__global__ void publish_kernel(HandoffRows rows, const uint32_t* step, uint32_t* flag, uint32_t* blocks_done) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < rows.count; i += stride) rows.host_rows[i] = rows.rows[i];
  for (int64_t i = first; i < rows.routed; i += stride) {
    rows.host_chosen[i] = rows.chosen[i];
    rows.host_weights[i] = rows.weights[i];
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && atomicAdd(blocks_done, 1u) == gridDim.x - 1) {
    *blocks_done = 0;
    __threadfence_system();
    *reinterpret_cast<volatile uint32_t*>(flag) = *step;
  }
}

// Each block waits for the host's flag (block 0 counts the wait), then adds its share;
// volatile reads, as the host wrote the rows while this kernel ran.
__global__ void collect_kernel(const uint32_t* step, const uint32_t* flag, uint64_t* waited_ns, const float* host_rows,
                               int64_t count, float* residual) {
  if (threadIdx.x == 0) {
    const uint32_t want = *step;
    const uint64_t start = global_time_ns();
    while (*reinterpret_cast<const volatile uint32_t*>(flag) != want) __nanosleep(128);
    if (blockIdx.x == 0) *waited_ns += global_time_ns() - start;
  }
  __syncthreads();
  __threadfence_system();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    residual[i] += reinterpret_cast<const volatile float*>(host_rows)[i];
  }
}

}  // namespace

void begin_handoff_step(uint32_t* step, StreamHandle stream) {
  begin_step_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(step);
}

void publish_to_host(const HandoffRows& rows, const uint32_t* step, uint32_t* flag, uint32_t* blocks_done,
                     StreamHandle stream) {
  publish_kernel<<<blocks_for(std::max(rows.count, rows.routed)), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      rows, step, flag, blocks_done);
}

void add_from_host(const uint32_t* step, const uint32_t* flag, uint64_t* waited_ns, const float* host_rows,
                   int64_t count, float* residual, StreamHandle stream) {
  collect_kernel<<<blocks_for(count), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(step, flag, waited_ns,
                                                                                        host_rows, count, residual);
}

}  // namespace bloomery::cuda
