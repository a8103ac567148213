// The bulk reduction of this stage's dQ (sm_90): shared -> global through the TMA unit, as thin
// wrappers like common/ptx.cuh's, each one instruction.
//
// cp.reduce.async.bulk adds a contiguous run of shared memory (a multiple of 16 bytes, both addresses
// 16-byte aligned) into global memory element by element, each add atomic at L2, like an fp32 RED
// per element, but issued by one thread as one instruction. It runs in the async proxy and is
// tracked by the issuing thread's bulk groups:
//   * the threads that wrote the shared memory fence it to the async proxy
//     (fence.proxy.async.shared::cta) and meet the issuing thread at a barrier before the issue;
//   * the issuing thread closes a group (commit) and waits until its groups have read their shared
//     memory (wait_group.read) before that memory is written again or the thread block exits, or until
//     their adds are done (wait_group) where another thread must see them.
#pragma once

#include <cstdint>

namespace FA_STAGE_NAMESPACE {

// global[0 .. bytes / 4) += shared[0 .. bytes / 4), fp32 element by element.
__device__ __forceinline__ void bulk_reduce_add_f32(float* global, uint32_t shared_address, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(global),
               "r"(shared_address), "r"(bytes)
               : "memory");
}
// Closes the issuing thread's bulk group: the reductions issued since the last commit.
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Blocks the issuing thread until its committed bulk groups have read their shared memory.
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
// Blocks the issuing thread until its committed bulk groups are complete (the adds are performed).
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
// Orders the async proxy's completed writes to global memory before this thread's later
// generic-proxy operations (the deterministic mode's fence and counter).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

}  // namespace FA_STAGE_NAMESPACE
