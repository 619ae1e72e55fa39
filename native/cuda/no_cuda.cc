// The CPU-only build's answer to cuda/device.h: it names why there is no GPU.
#ifndef BLOOMERY_CUDA

#include "cuda/device.h"

namespace bloomery::cuda {

bool compiled_with_cuda() { return false; }

CudaStatus query_cuda() {
  CudaStatus s;
  s.reason = "this build of bloomery has no CUDA (nvcc was not found when it was compiled)";
  return s;
}

}  // namespace bloomery::cuda

#endif
