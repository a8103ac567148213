// Benchmark 2: the peak of wgmma.mma_async.sync.aligned.m64n256k16 with fp16 or bf16 inputs and
// fp32 accumulation, A and B read from shared memory through matrix descriptors (the Hopper track's
// instruction). Built for sm_90a only (tools/microbench/CMakeLists.txt).
//
// Each CTA (one per SM) stages a K-major, 128B-swizzled 64 x 64 A tile per warpgroup and a shared
// 256 x 64 B tile in shared memory, once. Then each warpgroup loops: wgmma.fence, four m64n256k16
// wgmmas (the four 16-wide K slices of the tiles) into one 64 x 256 fp32 accumulator (128
// registers per thread), commit_group, wait_group 1 (the next group is issued while the previous
// one runs), as a GEMM main loop does, minus the loads. With two warpgroups one's issue gaps are the other's
// tensor-core time.
//
// FLOP: 2 * 64 * 256 * 16 = 524288 per wgmma; TFLOP/s = 524288 * wgmmas per launch / median time.
//
// The descriptors, the swizzle and the accumulator map are common/hopper_encoding.h's, and the
// benchmark checks them against the hardware before it times anything:
//   (1) small-integer inputs, one iteration: every CTA's 64 x 256 tile must equal the host product
//       exactly (every product and sum is an integer far below 2^24);
//   (2) the timed launches, random inputs in [-1, 1): the last launch's tiles must equal iters
//       times the host product within the rounding of the running fp32 sums.
// Every CTA records where and when it ran (block_spans.cuh): the run checks that there was one on
// every SM, all at once, and measures the SM clock during the launch.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/hopper_encoding.h"
#include "tools/microbench/block_spans.cuh"
#include "tools/microbench/dtypes.cuh"
#include "tools/microbench/microbench.h"

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma_peak.cu uses wgmma: build it for sm_90a only (see tools/microbench/CMakeLists.txt)"
#endif

namespace fa::microbench {
namespace {

constexpr int kN = 256;                                     // wgmma n: the B tile's rows
constexpr int kTileK = 64;                                  // one 128-byte swizzle row of 16-bit elements
constexpr int kKSteps = kTileK / 16;                        // wgmmas per tile
constexpr int kAccRegs = wgmma_acc_regs(kN);                // 128 floats per thread
constexpr int kATileBytes = kWgmmaM * kSwizzle128RowBytes;  // 8 KiB
constexpr int kBTileBytes = kN * kSwizzle128RowBytes;       // 32 KiB
constexpr long long kDefaultIters = 20000;                  // ~11 ms with two warpgroups on an H200
constexpr double kFlopPerWgmma = 2.0 * kWgmmaM * kN * 16;
static_assert(kATileBytes % kSwizzle128AtomBytes == 0, "tiles must start on swizzle atoms");

__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// ---- the wgmma instructions ---------------------------------------------------------------------
// Ordering point between ordinary register accesses (zeroing the accumulator) and the wgmmas that
// use those registers.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPendingGroups>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPendingGroups) : "memory");
}
// The compiler must not move reads of the accumulator above the wait that completes it: an empty
// asm that "modifies" every register pins them after the wait.
__device__ __forceinline__ void pin_accumulator(float (&d)[kAccRegs]) {
#pragma unroll
  for (int i = 0; i < kAccRegs; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// clang-format off
#define FA_WGMMA_ACC_REGISTERS                                                                          \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                             \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                    \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                    \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                    \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                    \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                    \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "        \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
#define FA_WGMMA_ACC8(d, i)                                                                             \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]),           \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define FA_WGMMA_ACC_OPERANDS(d)                                                                        \
  FA_WGMMA_ACC8(d, 0), FA_WGMMA_ACC8(d, 8), FA_WGMMA_ACC8(d, 16), FA_WGMMA_ACC8(d, 24),                 \
      FA_WGMMA_ACC8(d, 32), FA_WGMMA_ACC8(d, 40), FA_WGMMA_ACC8(d, 48), FA_WGMMA_ACC8(d, 56),           \
      FA_WGMMA_ACC8(d, 64), FA_WGMMA_ACC8(d, 72), FA_WGMMA_ACC8(d, 80), FA_WGMMA_ACC8(d, 88),           \
      FA_WGMMA_ACC8(d, 96), FA_WGMMA_ACC8(d, 104), FA_WGMMA_ACC8(d, 112), FA_WGMMA_ACC8(d, 120)
// d (64 x 256, fp32) += A (64 x 16, K-major, descriptor %128) * B (16 x 256, K-major, descriptor
// %129). scale-d = 1 (accumulate), scale-a = scale-b = 1, neither operand transposed.
#define FA_WGMMA_M64N256K16(ptx_type, d, desc_a, desc_b)                                                \
  asm volatile(                                                                                         \
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %130, 0;\n"                                   \
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." ptx_type "." ptx_type " " FA_WGMMA_ACC_REGISTERS   \
      ", %128, %129, accumulate, 1, 1, 0, 0;\n}\n"                                                      \
      : FA_WGMMA_ACC_OPERANDS(d)                                                                        \
      : "l"(desc_a), "l"(desc_b), "r"(1))
// clang-format on

template <typename T>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[kAccRegs], uint64_t desc_a, uint64_t desc_b);
template <>
__device__ __forceinline__ void wgmma_m64n256k16<__half>(float (&d)[kAccRegs], uint64_t desc_a,
                                                         uint64_t desc_b) {
  FA_WGMMA_M64N256K16("f16", d, desc_a, desc_b);
}
template <>
__device__ __forceinline__ void wgmma_m64n256k16<__nv_bfloat16>(float (&d)[kAccRegs], uint64_t desc_a,
                                                                uint64_t desc_b) {
  FA_WGMMA_M64N256K16("bf16", d, desc_a, desc_b);
}

// ---- the kernel ---------------------------------------------------------------------------------
// a: [kWarpgroups][64][64], b: [256][64] (both K-major: row m of A and row n of B are the K values);
// d: [CTA][warpgroup][64][256] = iters * A_wg B^T; spans[CTA] = where and when the CTA ran.
template <typename T, int kWarpgroups>
__global__ void __launch_bounds__((kWarpgroups * kWarpgroupThreads), 1)
    wgmma_peak_kernel(const T* a, const T* b, long long iters, float* d, BlockSpan* spans) {
  record_block_start(spans);
  // The tiles, one after the other, as one tall 128-byte-row tile: the A tile of each warpgroup,
  // then B. Each starts on a 1024-byte swizzle atom, so the descriptors' base offset
  // is 0 and the hardware's swizzle (from address bits 7-9) matches swizzle128_offset.
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw_address = smem_u32(smem_raw);
  const uint32_t tiles_address =
      (raw_address + kSwizzle128AtomBytes - 1) & ~static_cast<uint32_t>(kSwizzle128AtomBytes - 1);
  uint8_t* tiles = smem_raw + (tiles_address - raw_address);
  constexpr int kARows = kWarpgroups * kWgmmaM;
  constexpr int kChunksPerRow = kSwizzle128RowBytes / kSwizzle128ChunkBytes;
  constexpr int kElemsPerChunk = kSwizzle128ChunkBytes / sizeof(T);
  for (int c = threadIdx.x; c < (kARows + kN) * kChunksPerRow; c += blockDim.x) {
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;
    const T* src = row < kARows ? a + row * kTileK : b + (row - kARows) * kTileK;
    *reinterpret_cast<uint4*>(tiles + swizzle128_offset(row, chunk * kSwizzle128ChunkBytes)) =
        *reinterpret_cast<const uint4*>(src + chunk * kElemsPerChunk);
  }
  // The tiles were written by the generic proxy; wgmma reads them through the async proxy.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  const int thread = threadIdx.x % kWarpgroupThreads;
  const uint32_t a_tile = tiles_address + warpgroup * kATileBytes;
  const uint32_t b_tile = tiles_address + kWarpgroups * kATileBytes;
  uint64_t desc_a[kKSteps], desc_b[kKSteps];
#pragma unroll
  for (int k = 0; k < kKSteps; ++k) {
    desc_a[k] = wgmma_descriptor_k_major_sw128(a_tile, k);
    desc_b[k] = wgmma_descriptor_k_major_sw128(b_tile, k);
  }

  float acc[kAccRegs];
#pragma unroll
  for (int i = 0; i < kAccRegs; ++i) acc[i] = 0.0f;
  for (long long it = 0; it < iters; ++it) {
    wgmma_fence();  // as a GEMM main loop does before each group (ptxas would insert it otherwise)
#pragma unroll
    for (int k = 0; k < kKSteps; ++k) wgmma_m64n256k16<T>(acc, desc_a[k], desc_b[k]);
    wgmma_commit_group();
    wgmma_wait_group<1>();
  }
  wgmma_wait_group<0>();
  pin_accumulator(acc);

  float* d_tile = d + (static_cast<size_t>(blockIdx.x) * kWarpgroups + warpgroup) * kWgmmaM * kN;
#pragma unroll
  for (int i = 0; i < kAccRegs; i += 2) {  // registers i, i+1: neighbouring columns of one row
    *reinterpret_cast<float2*>(d_tile + wgmma_acc_row(thread, i) * kN + wgmma_acc_col(thread, i)) =
        make_float2(acc[i], acc[i + 1]);
  }
  record_block_end(spans);
}

// ---- host side ----------------------------------------------------------------------------------
struct Operands {
  std::vector<float> a, b;  // the values as T holds them: [warpgroups][64][64], [256][64]
};

template <typename T, typename Draw>
Operands draw_operands(int warpgroups, Draw&& draw) {
  Operands ops;
  ops.a.resize(static_cast<size_t>(warpgroups) * kWgmmaM * kTileK);
  ops.b.resize(static_cast<size_t>(kN) * kTileK);
  for (float& x : ops.a) x = round_to<T>(draw());
  for (float& x : ops.b) x = round_to<T>(draw());
  return ops;
}

// ref[warpgroup][m][n] = sum_k A_wg[m][k] B[n][k]; magnitude: the same with |products|.
void host_product(const Operands& ops, int warpgroups, std::vector<double>* ref,
                  std::vector<double>* magnitude) {
  ref->assign(static_cast<size_t>(warpgroups) * kWgmmaM * kN, 0.0);
  magnitude->assign(ref->size(), 0.0);
  for (int wg = 0; wg < warpgroups; ++wg)
    for (int m = 0; m < kWgmmaM; ++m)
      for (int n = 0; n < kN; ++n) {
        double sum = 0, abs_sum = 0;
        for (int k = 0; k < kTileK; ++k) {
          const double p =
              static_cast<double>(ops.a[(wg * kWgmmaM + m) * kTileK + k]) * ops.b[n * kTileK + k];
          sum += p;
          abs_sum += std::fabs(p);
        }
        (*ref)[(wg * kWgmmaM + m) * kN + n] = sum;
        (*magnitude)[(wg * kWgmmaM + m) * kN + n] = abs_sum;
      }
}

// The tolerance of the timed check, relative to iters x magnitude (the sum of |a||b| of one
// iteration). The H200's tensor core adds a K slice (16 products) to the fp32 accumulator like
// this: every term, the accumulator included, is cut (toward zero or down) to 2 bits below the fp32
// ulp of the largest term, the cut terms are summed exactly and the sum is cut to fp32. That model
// reproduces the H200's results bit for bit (fp16 operands in [0.5, 1), 20000 iterations:
// D[0][0] = 723767.75 with 1 warpgroup, D[0][75] = 709343.75 with 2, both 0.96% low). It loses less
// than 16 x 2^-25 + 2^-23 = 5 x 2^-23 of the largest term per slice; after i iterations that term
// is at most (i + 1) x magnitude, so `iters` iterations of kKSteps slices lose less than
// kKSteps x 5 x 2^-23 x magnitude x iters (iters + 1) / 2 (2.4% at 20000 iterations).
double timed_relative_tolerance(long long iters) {
  return kKSteps * 5 * 0x1p-23 * static_cast<double>(iters + 1) / 2;
}

// Can the timed check see a skipped K slice? Skipping slice s moves an element by iters x S_s (its
// part of the product) per launch; the check is sure to see that where |S_s| > 2 x tolerance / iters
// (the rounding could hide up to half of it). Returns, for the slice that shows in the fewest
// elements, how many elements show it.
size_t fewest_elements_showing_a_skipped_slice(const Operands& ops, int warpgroups,
                                               const std::vector<double>& magnitude,
                                               double relative_tolerance) {
  size_t fewest = magnitude.size();
  for (int slice = 0; slice < kKSteps; ++slice) {
    size_t showing = 0;
    for (int wg = 0; wg < warpgroups; ++wg)
      for (int m = 0; m < kWgmmaM; ++m)
        for (int n = 0; n < kN; ++n) {
          double slice_sum = 0;
          for (int k = slice * 16; k < slice * 16 + 16; ++k)
            slice_sum += static_cast<double>(ops.a[(wg * kWgmmaM + m) * kTileK + k]) * ops.b[n * kTileK + k];
          showing += std::fabs(slice_sum) > 2 * relative_tolerance * magnitude[(wg * kWgmmaM + m) * kN + n];
        }
    fewest = std::min(fewest, showing);
  }
  return fewest;
}

// Every CTA's tile against iters * ref, within relative_tolerance * iters * magnitude.
void check_tiles(const std::vector<float>& got, const std::vector<double>& ref,
                 const std::vector<double>& magnitude, long long iters, double relative_tolerance,
                 const std::string& what) {
  const size_t tile = ref.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const double want = static_cast<double>(iters) * ref[i % tile];
    const double tolerance = relative_tolerance * static_cast<double>(iters) * magnitude[i % tile];
    if (!(std::fabs(got[i] - want) <= tolerance)) {  // NaN fails
      const size_t cta_wg = i / (kWgmmaM * kN), row = i / kN % kWgmmaM, col = i % kN;
      char text[320];
      std::snprintf(text, sizeof text,
                    "%s: CTA %zu warpgroup %zu D[%zu][%zu] = %.9g, expected %.9g (tolerance %.3g)",
                    what.c_str(), cta_wg / (tile / (kWgmmaM * kN)), cta_wg % (tile / (kWgmmaM * kN)), row,
                    col, static_cast<double>(got[i]), want, tolerance);
      throw CheckFailed(text);
    }
  }
}

template <typename T, int kWarpgroups>
void run_one(const Options& opt, const DeviceFacts& facts) {
  auto kernel = wgmma_peak_kernel<T, kWarpgroups>;
  const int threads = kWarpgroups * kWarpgroupThreads;
  // One CTA per SM, guaranteed: ask for more than half of an SM's shared memory (the tiles need
  // (kWarpgroups * 8 + 32) KiB + 1 KiB of alignment slack). Then every SM runs exactly
  // kWarpgroups warpgroups, which is what the row's name says.
  int smem_per_sm = 0, smem_per_block_optin = 0;
  FA_CUDA_CHECK(
      cudaDeviceGetAttribute(&smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, opt.device));
  FA_CUDA_CHECK(
      cudaDeviceGetAttribute(&smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, opt.device));
  const int tiles_bytes = kWarpgroups * kATileBytes + kBTileBytes + kSwizzle128AtomBytes;
  const int smem_bytes = std::max(tiles_bytes, smem_per_sm / 2 + 1024);
  if (smem_bytes > smem_per_block_optin)
    throw std::runtime_error("wgmma_peak_kernel needs " + std::to_string(smem_bytes) +
                             " bytes of shared memory; this GPU allows " +
                             std::to_string(smem_per_block_optin));
  FA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  int ctas_per_sm = 0;
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas_per_sm, kernel, threads, smem_bytes));
  if (ctas_per_sm != 1)
    throw std::runtime_error("the occupancy API allows " + std::to_string(ctas_per_sm) +
                             " wgmma_peak_kernel CTAs per SM; the benchmark is sized for exactly 1");
  cudaFuncAttributes attributes{};
  FA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const int ctas = facts.sms;
  const long long iters = opt.iters ? opt.iters : kDefaultIters;
  std::fprintf(stderr,
               "wgmma %s %d warpgroup(s): occupancy 1 CTA of %d threads per SM (%d warps; %d registers per "
               "thread, %d bytes of shared memory): grid of %d CTAs, one wave on %d SMs\n",
               Dtype<T>::name, kWarpgroups, threads, threads / 32, attributes.numRegs, smem_bytes, ctas,
               facts.sms);

  T *a_dev = nullptr, *b_dev = nullptr;
  float* d_dev = nullptr;
  BlockSpan* spans_dev = nullptr;
  const size_t a_elems = static_cast<size_t>(kWarpgroups) * kWgmmaM * kTileK,
               b_elems = static_cast<size_t>(kN) * kTileK;
  const size_t d_elems = static_cast<size_t>(ctas) * kWarpgroups * kWgmmaM * kN;
  FA_CUDA_CHECK(cudaMalloc(&a_dev, sizeof(T) * a_elems));
  FA_CUDA_CHECK(cudaMalloc(&b_dev, sizeof(T) * b_elems));
  FA_CUDA_CHECK(cudaMalloc(&d_dev, sizeof(float) * d_elems));
  FA_CUDA_CHECK(cudaMalloc(&spans_dev, sizeof(BlockSpan) * ctas));
  FA_CUDA_CHECK(cudaMemset(spans_dev, 0, sizeof(BlockSpan) * ctas));  // unrecorded: end == start
  cudaStream_t stream;
  FA_CUDA_CHECK(cudaStreamCreate(&stream));

  auto upload = [&](const Operands& ops) {
    std::vector<T> a(a_elems), b(b_elems);
    for (size_t i = 0; i < a_elems; ++i) a[i] = Dtype<T>::from_float(ops.a[i]);
    for (size_t i = 0; i < b_elems; ++i) b[i] = Dtype<T>::from_float(ops.b[i]);
    FA_CUDA_CHECK(cudaMemcpy(a_dev, a.data(), sizeof(T) * a_elems, cudaMemcpyHostToDevice));
    FA_CUDA_CHECK(cudaMemcpy(b_dev, b.data(), sizeof(T) * b_elems, cudaMemcpyHostToDevice));
    FA_CUDA_CHECK(cudaMemset(d_dev, 0xFF, sizeof(float) * d_elems));  // NaN where unwritten
  };
  std::vector<float> got(d_elems);
  auto fetch = [&] {
    FA_CUDA_CHECK(cudaMemcpy(got.data(), d_dev, sizeof(float) * d_elems, cudaMemcpyDeviceToHost));
  };
  auto launch = [&](long long n) {
    kernel<<<ctas, threads, smem_bytes, stream>>>(a_dev, b_dev, n, d_dev, spans_dev);
  };
  std::mt19937 rng(20240 + kWarpgroups);  // fixed: a failure can be rerun as it was
  std::vector<double> ref, magnitude;
  const std::string label = std::string(Dtype<T>::name) + " " + std::to_string(kWarpgroups) + " warpgroup(s)";

  // (1) The encodings: small integers, one iteration, exact.
  std::uniform_int_distribution<int> small_int(-2, 2);
  const Operands exact_ops =
      draw_operands<T>(kWarpgroups, [&] { return static_cast<float>(small_int(rng)); });
  host_product(exact_ops, kWarpgroups, &ref, &magnitude);
  upload(exact_ops);
  launch(1);
  FA_CUDA_CHECK(cudaGetLastError());
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  fetch();
  check_tiles(got, ref, magnitude, 1, 0.0, label + " tile check (descriptors, swizzle, accumulator map)");
  std::fprintf(stderr, "wgmma %s: every CTA's 64x256 tile equals the host product exactly\n", label.c_str());

  // (2) Timed: random values with random mantissas and both signs (what a real GEMM feeds the
  // tensor cores). With both signs the cuts' errors partly cancel and the accumulator grows as
  // iters x D, well below the iters x magnitude the tolerance assumes; the model above stays within
  // about a fifth of the tolerance. A skipped K slice: per iteration the tolerance is
  // 2.4% of a magnitude of about 16 (64 products of mean 1/4), 0.38, while a slice's part S of the
  // product has a standard deviation of 4/3 (16 products of variance 1/9): |S| > 2 x 0.38 in about
  // 57% of the elements. fewest_elements_showing_a_skipped_slice counts them, and the benchmark
  // refuses to time what its check could not see (an --iters so large that no element would show).
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const Operands timed_ops = draw_operands<T>(kWarpgroups, [&] { return unit(rng); });
  host_product(timed_ops, kWarpgroups, &ref, &magnitude);
  const double relative_tolerance = timed_relative_tolerance(iters);
  const size_t showing =
      fewest_elements_showing_a_skipped_slice(timed_ops, kWarpgroups, magnitude, relative_tolerance);
  if (showing == 0)
    throw std::runtime_error("with " + std::to_string(iters) +
                             " iterations the timed check's tolerance would hide a skipped K slice: use "
                             "fewer");
  std::fprintf(stderr, "wgmma %s: a skipped K slice would show in at least %zu of the %zu elements per CTA\n",
               label.c_str(), showing, magnitude.size());
  upload(timed_ops);
  const double ms = median_ms(stream, opt, [&] { launch(iters); });
  fetch();
  check_tiles(got, ref, magnitude, iters, relative_tolerance, label + " timed-launch check");
  std::vector<BlockSpan> spans(ctas);
  FA_CUDA_CHECK(cudaMemcpy(spans.data(), spans_dev, sizeof(BlockSpan) * ctas, cudaMemcpyDeviceToHost));
  const LaunchSpans ran = analyse_spans(spans, 1, facts.sms, label + " timed launch");

  const double wgmmas = static_cast<double>(ctas) * kWarpgroups * kKSteps * static_cast<double>(iters);
  const double tflops = kFlopPerWgmma * wgmmas / (ms * 1e-3) / 1e12;
  const std::string name = "wgmma_m64n256k16_" + std::to_string(kWarpgroups) + "wg";
  std::fprintf(stderr,
               "wgmma %s: %lld iterations x %d wgmmas: %.3f ms, %.1f TFLOP/s; all %d CTAs resident at once; "
               "SM clock %.0f MHz (median of %d SMs, %.0f..%.0f)\n",
               label.c_str(), iters, kKSteps, ms, tflops, ctas, ran.clock_mhz, facts.sms, ran.min_clock_mhz,
               ran.max_clock_mhz);
  print_row(name, Dtype<T>::name, tflops, "TFLOP/s",
            std::string("wgmma.mma_async.sync.aligned.m64n256k16.f32.") + Dtype<T>::ptx + "." +
                Dtype<T>::ptx + "; A and B K-major in 128B-swizzled shared memory through descriptors; " +
                std::to_string(kWarpgroups) + " warpgroup(s) per CTA; 1 CTA resident on each of " +
                std::to_string(ctas) + " SMs; " + std::to_string(iters) +
                " iterations of 4 wgmmas + commit_group + wait_group 1; " + "524288 FLOP per wgmma; " +
                timing_text(opt) +
                "; checked: exact tile vs host (small integers) and iters x host product (timed launches)");
  print_row("sm_clock_during_" + name, Dtype<T>::name, ran.clock_mhz, "MHz",
            sm_clock_method(ran, facts.sms, name));

  FA_CUDA_CHECK(cudaStreamDestroy(stream));
  FA_CUDA_CHECK(cudaFree(a_dev));
  FA_CUDA_CHECK(cudaFree(b_dev));
  FA_CUDA_CHECK(cudaFree(d_dev));
  FA_CUDA_CHECK(cudaFree(spans_dev));
}

template <typename T>
void run_dtype(const Options& opt, const DeviceFacts& facts) {
  if (opt.warpgroups == 1)
    run_one<T, 1>(opt, facts);
  else
    run_one<T, 2>(opt, facts);
}

}  // namespace

void run_wgmma(const Options& opt) {
  const DeviceFacts facts = device_facts(opt.device);
  // sm_90a code runs on compute capability 9.0 only (arch-specific features are not forward
  // compatible).
  if (facts.compute_capability != 90)
    throw Skipped("wgmma is built for sm_90a, which runs on compute capability 9.0 only; this GPU (" +
                  facts.name + ") is " + std::to_string(facts.compute_capability / 10) + "." +
                  std::to_string(facts.compute_capability % 10));
  for (const std::string& dtype : opt.dtypes) {
    if (dtype == "fp16")
      run_dtype<__half>(opt, facts);
    else
      run_dtype<__nv_bfloat16>(opt, facts);
  }
}

}  // namespace fa::microbench
