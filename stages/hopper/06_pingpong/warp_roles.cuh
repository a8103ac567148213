// The PTX of warp specialization (sm_90a), thin wrappers like wgmma.cuh's and tma.cuh's.
//
// setmaxnreg changes how many registers each thread of a warpgroup owns, while the kernel runs:
// .dec gives registers back to the SM's pool, .inc takes them from it (waiting until the pool has
// them). The launch reserves kThreads x (the cap __launch_bounds__(kThreads, 1) gives ptxas), so
// what the producer warpgroup returns is what the consumer warpgroups can take. ptxas compiles the
// code after each setmaxnreg for that many registers; it requires the count to be a multiple of 8
// in [24, 256] and every thread of the warpgroup to execute the same instruction (.sync.aligned).
//
// Named barriers (bar.sync id, count) are __syncthreads for a subset of warps: the count is in
// threads, a multiple of 32; barrier 0 is the one __syncthreads uses. bar.arrive counts its warp
// towards the barrier without waiting, so one warpgroup can release another: a warpgroup that
// syncs on a 256-thread barrier passes once the other warpgroup's 128 threads have arrived there.
#pragma once

#include <cstdint>

namespace FA_STAGE_NAMESPACE {

template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256, "setmaxnreg's range");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegisters % 8 == 0 && kRegisters >= 24 && kRegisters <= 256, "setmaxnreg's range");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
}

// Blocks until `kThreadCount` threads have arrived at named barrier `kId` (1..15).
template <int kId, int kThreadCount>
__device__ __forceinline__ void named_barrier_sync() {
  static_assert(kId >= 1 && kId < 16 && kThreadCount % 32 == 0, "a named barrier other than __syncthreads' 0");
  asm volatile("bar.sync %0, %1;\n" ::"n"(kId), "n"(kThreadCount) : "memory");
}

// The same, with the barrier chosen at run time (the warpgroup's own), and its counterpart that
// arrives without waiting.
template <int kThreadCount>
__device__ __forceinline__ void named_barrier_sync(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(kThreadCount) : "memory");
}
template <int kThreadCount>
__device__ __forceinline__ void named_barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(kThreadCount) : "memory");
}

}  // namespace FA_STAGE_NAMESPACE
