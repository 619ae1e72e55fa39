// What the target processor offers the build, and the few instructions every spin loop needs.
// The x86 SIMD tiers (AVX2, AVX-512) exist only in x64 builds: elsewhere (linux-arm64) their
// kernel files are left out of the build (tools/build/sources.mjs), their names stay as null
// kernels so the dispatch tables keep one shape, and every tier resolves to the scalar kernels.
#pragma once

#if defined(__x86_64__)
#define BLOOMERY_X86_SIMD 1
#else
#define BLOOMERY_X86_SIMD 0
#endif

namespace bloomery {

// Tells the core this thread is spinning (x86 `pause`, arm64 `yield`): the sibling hyper-thread
// gets the pipeline and the loop burns less power.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace bloomery
