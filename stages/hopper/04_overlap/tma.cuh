// The copy engine's PTX (sm_90): mbarriers and TMA tensor copies, thin wrappers like wgmma.cuh's,
// each one instruction (plus the loop around a barrier's try_wait).
//
// An mbarrier is a 64-bit object in shared memory that counts two things down for its current
// phase: arrivals (set at init) and transaction bytes (announced with expect_tx, delivered by the
// copies that name the barrier). When both reach zero the phase completes, its parity flips, and
// the counts rearm for the next phase. A waiter names the parity of the phase it waits for: 0 for
// the first completion, 1 for the second, 0 again for the third... so a ring slot used for the
// n-th time (n = 0, 1, ...) waits for parity n % 2. That one bit is all the state a waiter keeps.
//
// A TMA copy (cp.async.bulk.tensor) is issued by one thread: the tensor map (hopper_encoding.h,
// section 7; encoded on the host) gives address, shape and strides, the instruction gives the box's
// coordinates, the destination and the barrier whose transaction count the delivered bytes pay off.
// It writes shared memory through the async proxy, the one wgmma reads through: a consumer that
// waited on the barrier can hand the tile to wgmma with no proxy fence.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

namespace FA_STAGE_NAMESPACE {

// ---- mbarrier ------------------------------------------------------------------------------------
__device__ __forceinline__ void mbarrier_init(uint32_t barrier, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(barrier), "r"(arrivals) : "memory");
}
// Makes the initializations visible to the async proxy (the copy engine completes transactions on
// them) and to the other threads after the barrier that follows.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival, and `bytes` more transaction bytes expected in this phase (the arrival of the
// thread that issues the copies).
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes) : "memory");
}
// One arrival (a consumer saying it is done with a slot).
__device__ __forceinline__ void mbarrier_arrive(uint32_t barrier) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(barrier) : "memory");
}
// Blocks until the phase of parity `parity` has completed. try_wait suspends the thread for a
// while in hardware before it answers "not yet", so the loop does not spin hot.
__device__ __forceinline__ void mbarrier_wait(uint32_t barrier, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(barrier),
      "r"(parity)
      : "memory");
}

// ---- TMA -----------------------------------------------------------------------------------------
// Copies the box at coordinates {dim, row, head, batch} of the map's tensor to shared memory at
// `dst` (1024-byte aligned for the 128-byte swizzle); its bytes count against `barrier`.
__device__ __forceinline__ void tma_load_box(uint32_t dst, const CUtensorMap* map, uint32_t barrier, int dim,
                                             int row, int head, int batch) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(barrier), "r"(dim), "r"(row), "r"(head), "r"(batch)
      : "memory");
}
// Fetches the tensor map (a kernel parameter) into the TMA unit's cache before the first copy.
__device__ __forceinline__ void prefetch_tensor_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace FA_STAGE_NAMESPACE
