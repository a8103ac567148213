// The warpgroup-level PTX of this stage's backward (sm_90a), as thin wrappers like common/ptx.cuh's:
// each is one instruction (plus the setp that turns an integer into wgmma's scale-d predicate). What
// the operands mean (descriptors, swizzle, fragment maps) is common/hopper_encoding.h's, CPU-tested in
// tests/test_hopper_encoding.cpp. The Hopper track's hopper_01_wgmma has the same wrappers for the
// forward; the backward adds the SS form at n64 and the SS form with both operands transposed.
//
// wgmma.mma_async is asynchronous: it reads its register operands and writes its accumulators some
// time after it issues, until the wgmma.wait_group that covers its commit group. The PTX ISA's
// rules, and how this file keeps them:
//   * wgmma.fence before the first wgmma that touches registers written by ordinary instructions
//     (P^T and dS^T are packed from accumulators that ordinary arithmetic rewrote); shared memory
//     that the generic proxy wrote (cp.async, ordinary stores) needs fence.proxy.async.shared::cta
//     in each writing thread before the barrier that precedes the wgmma;
//   * no ordinary access to an accumulator between the wgmma and the wait that completes it.
// The compiler does not know any of this: to it, an asm statement consumes its inputs and produces
// its outputs where it stands. `asm volatile` statements keep their order among themselves, but
// ordinary arithmetic may move across them. So every register the wgmmas read or write is "pinned"
// by an empty volatile asm that claims to modify it (pin_registers): right before wgmma.fence and
// right after wgmma.wait_group. The accumulators are "+f" operands of the wgmma itself.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "this stage uses wgmma: build it for sm_90a only (CMakeLists.txt does, from its stage.json)"
#endif

namespace FA_STAGE_NAMESPACE {

// ---- ordering ------------------------------------------------------------------------------------
// Orders this warpgroup's earlier register writes (and its earlier wgmmas' register accesses)
// before the wgmmas that follow.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the group of wgmmas issued since the last commit.
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most `kPending` of this warpgroup's committed groups are still running.
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Makes this thread's generic-proxy writes to shared memory (cp.async copies that have completed,
// ordinary stores) visible to the async proxy, through which wgmma reads its shared operands.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The pins (see the top of the file).
template <int kTiles>
__device__ __forceinline__ void pin_registers(float (&acc)[kTiles][4]) {
#pragma unroll
  for (int n = 0; n < kTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(acc[n][e])::"memory");
}
template <int kSteps>
__device__ __forceinline__ void pin_registers(uint32_t (&frag)[kSteps][4]) {
#pragma unroll
  for (int k = 0; k < kSteps; ++k)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(frag[k][j])::"memory");
}

// ---- wgmma.mma_async m64nNk16, fp32 accumulators ---------------------------------------------------
// The accumulator is float[N/8][4]: n8 block j, entries 0..3 = registers 4j .. 4j+3 of the PTX
// fragment (hopper_encoding.h: within a warp, block j is mma.sync's C fragment of columns 8j..8j+7).
// clang-format off
#define FA_ACC4(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define FA_ACC16_OPERANDS(d) FA_ACC4(d, 0), FA_ACC4(d, 1), FA_ACC4(d, 2), FA_ACC4(d, 3)
#define FA_ACC32_OPERANDS(d) FA_ACC16_OPERANDS(d), FA_ACC4(d, 4), FA_ACC4(d, 5), FA_ACC4(d, 6), FA_ACC4(d, 7)
#define FA_ACC64_OPERANDS(d)                                                                            \
  FA_ACC32_OPERANDS(d), FA_ACC4(d, 8), FA_ACC4(d, 9), FA_ACC4(d, 10), FA_ACC4(d, 11), FA_ACC4(d, 12),   \
      FA_ACC4(d, 13), FA_ACC4(d, 14), FA_ACC4(d, 15)
#define FA_ACC16_REGISTERS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FA_ACC32_REGISTERS                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                             \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FA_ACC64_REGISTERS                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                             \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                    \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                    \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// SS form: d (64 x N) (+)= A (64 x 16, shared) * B (16 x N, shared).
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, a-desc, b-desc, scale-d, imm-scale-a,
//                                                 imm-scale-b, imm-trans-a, imm-trans-b;
// scale-d is a predicate: 0 writes d = A B (the first k-step: no register clearing needed), 1
// accumulates. Not negated (scales 1). TRANS: "0, 0" reads both operands K-major (S^T = K Q^T,
// dP^T = V dO^T); "1, 1" reads A M-major and B N-major (dQ = dS K: dS^T is stored [key][query] and K
// [key][dim], each with the K dimension, the keys, as its rows).
// DESC_A, DESC_B, SCALE_D: the operand numbers that follow the accumulators.
#define FA_WGMMA_SS(shape, ptx_type, REGISTERS, DESC_A, DESC_B, SCALE_D, TRANS, d, desc_a, desc_b, scale_d) \
  asm volatile(                                                                                         \
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, " SCALE_D ", 0;\n"                            \
      "wgmma.mma_async.sync.aligned." shape ".f32." ptx_type "." ptx_type " " REGISTERS                 \
      ", " DESC_A ", " DESC_B ", accumulate, 1, 1, " TRANS ";\n}\n"                                    \
      : d                                                                                               \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d))

// RS form: d (64 x N) += A (64 x 16, registers) * B (16 x N, shared, N-major).
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.T.T d, a, b-desc, scale-d, imm-scale-a, imm-scale-b,
//                                                 imm-trans-b;
// (no imm-trans-a: A comes from registers). scale-d = 1 (dV and dK always accumulate), imm-trans-b
// = 1: B is read N-major, which is how dO and Q ([query][dim]) lie in shared memory.
// A_REGISTERS, DESC_B: the operand numbers that follow the accumulators.
#define FA_WGMMA_RS(shape, ptx_type, REGISTERS, A_REGISTERS, DESC_B, d, a, desc_b)                      \
  asm volatile(                                                                                         \
      "wgmma.mma_async.sync.aligned." shape ".f32." ptx_type "." ptx_type " " REGISTERS                 \
      ", " A_REGISTERS ", " DESC_B ", 1, 1, 1, 1;\n"                                                    \
      : d                                                                                               \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b))
// clang-format on

template <typename T, int N>
struct Wgmma;

// m64nNk16 for the five products of the backward, by N:
//   N = 64:  S^T = K Q^T and dP^T = V dO^T (64 queries; ss), dV += P^T dO and dK += dS^T Q at head_dim
//            64 (rs), dQ = dS K at head_dim 128 (half the head dims per warpgroup; ss_transposed);
//   N = 128: dV and dK at head_dim 128 (rs);
//   N = 32:  dQ at head_dim 64 (ss_transposed).
#define FA_WGMMA_STRUCTS(T, ptx_type)                                                                                 \
  template <>                                                                                                        \
  struct Wgmma<T, 128> {                                                                                             \
    __device__ static void rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t desc_b) {                          \
      FA_WGMMA_RS("m64n128k16", ptx_type, FA_ACC64_REGISTERS, "{%64, %65, %66, %67}", "%68", FA_ACC64_OPERANDS(d), a, \
                  desc_b);                                                                                           \
    }                                                                                                                \
  };                                                                                                                 \
  template <>                                                                                                        \
  struct Wgmma<T, 64> {                                                                                              \
    __device__ static void ss(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {                     \
      FA_WGMMA_SS("m64n64k16", ptx_type, FA_ACC32_REGISTERS, "%32", "%33", "%34", "0, 0", FA_ACC32_OPERANDS(d),       \
                  desc_a, desc_b, scale_d);                                                                          \
    }                                                                                                                \
    __device__ static void ss_transposed(float (&d)[8][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {          \
      FA_WGMMA_SS("m64n64k16", ptx_type, FA_ACC32_REGISTERS, "%32", "%33", "%34", "1, 1", FA_ACC32_OPERANDS(d),       \
                  desc_a, desc_b, scale_d);                                                                          \
    }                                                                                                                \
    __device__ static void rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t desc_b) {                           \
      FA_WGMMA_RS("m64n64k16", ptx_type, FA_ACC32_REGISTERS, "{%32, %33, %34, %35}", "%36", FA_ACC32_OPERANDS(d), a,  \
                  desc_b);                                                                                           \
    }                                                                                                                \
  };                                                                                                                 \
  template <>                                                                                                        \
  struct Wgmma<T, 32> {                                                                                              \
    __device__ static void ss_transposed(float (&d)[4][4], uint64_t desc_a, uint64_t desc_b, int scale_d) {          \
      FA_WGMMA_SS("m64n32k16", ptx_type, FA_ACC16_REGISTERS, "%16", "%17", "%18", "1, 1", FA_ACC16_OPERANDS(d),       \
                  desc_a, desc_b, scale_d);                                                                          \
    }                                                                                                                \
  };
FA_WGMMA_STRUCTS(__half, "f16")
FA_WGMMA_STRUCTS(__nv_bfloat16, "bf16")

#undef FA_WGMMA_STRUCTS
#undef FA_WGMMA_RS
#undef FA_WGMMA_SS
#undef FA_ACC64_REGISTERS
#undef FA_ACC32_REGISTERS
#undef FA_ACC16_REGISTERS
#undef FA_ACC64_OPERANDS
#undef FA_ACC32_OPERANDS
#undef FA_ACC16_OPERANDS
#undef FA_ACC4

}  // namespace FA_STAGE_NAMESPACE
