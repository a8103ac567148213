// Benchmark 1: the peak of mma.sync.aligned.m16n8k16 with fp16 or bf16 inputs and fp32
// accumulation, the instruction of every Ampere-style stage.
//
// A pure-MMA loop: each warp holds one A and one B fragment of random values in registers and
// feeds them to kChains independent accumulators in turn, so that kChains MMAs are in flight per
// warp (an MMA's latency is several times its issue interval). The grid is one wave: the occupancy
// API's blocks per SM (the registers ptxas gave the kernel decide it) on every SM, and every block
// records where and when it ran, so the run checks that all of them were resident at once
// (block_spans.cuh). Nothing but the MMAs is in the loop. Every thread writes the sum of its
// accumulators, so no MMA is dead code.
//
// FLOP: 2 * 16 * 8 * 16 = 4096 per mma.sync; TFLOP/s = 4096 * MMAs per launch / median time.
//
// Checks: (1) a launch with one iteration against a host product (fp64) of the same operands,
// placed through the fragment maps of common/fragment_layout.h: the benchmark multiplies what it
// says it multiplies; (2) the last timed launch's checksums equal iters times that product within
// the rounding of the running fp32 sums: the timed kernel did the work counted (a skipped chain or
// k-slice shows; one missing iteration out of thousands would hide in the rounding).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/fragment_layout.h"
#include "common/ptx.cuh"
#include "tools/microbench/block_spans.cuh"
#include "tools/microbench/dtypes.cuh"
#include "tools/microbench/microbench.h"

namespace fa::microbench {
namespace {

constexpr int kChains = 8;  // independent accumulators per warp
constexpr int kThreadsPerBlock = 256;
constexpr long long kDefaultIters = 40000;  // ~11 ms at 40 warps/SM on an H200
constexpr double kFlopPerMma = 2.0 * 16 * 8 * 16;
constexpr uint32_t kSeed = 0x5eed1234u;

// A 32-bit integer hash (good avalanche); the same on host and device.
FA_HOST_DEVICE constexpr uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Element `element` (0-7: A, 8-11: B, in fragment order) of thread `thread`: uniform in [-1, 1).
// Random mantissas, not zeros: a tensor core multiplying zeros draws less power and may clock
// higher than one doing real work.
FA_HOST_DEVICE inline float operand_value(uint32_t thread, int element) {
  const uint32_t h = mix32(kSeed ^ mix32(thread * 16u + static_cast<uint32_t>(element)));
  return static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

// mma_m16n8k16<T>: the project's one wrapper of mma.sync.m16n8k16 (common/ptx.cuh), the
// instruction every Ampere-style stage runs.
using fa::mma_m16n8k16;

// checksums[thread] = the sum of the thread's kChains x 4 accumulators after `iters` rounds;
// spans[block] = where and when the block ran.
template <typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    mma_sync_peak_kernel(long long iters, float* checksums, BlockSpan* spans) {
  record_block_start(spans);
  const uint32_t thread = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t a[4], b[2];
#pragma unroll
  for (int r = 0; r < 4; ++r)
    a[r] = Dtype<T>::pack(operand_value(thread, 2 * r), operand_value(thread, 2 * r + 1));
#pragma unroll
  for (int r = 0; r < 2; ++r)
    b[r] = Dtype<T>::pack(operand_value(thread, 8 + 2 * r), operand_value(thread, 8 + 2 * r + 1));

  float acc[kChains][4] = {};
  for (long long it = 0; it < iters; ++it) {
#pragma unroll
    for (int c = 0; c < kChains; ++c) mma_m16n8k16<T>(acc[c], a, b);
  }

  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) sum += acc[c][i];
  checksums[thread] = sum;
  record_block_end(spans);
}

// What one iteration adds to each thread's checksum, and the sum of the magnitudes of all the
// products in it (the scale of its rounding error), from the operands as packed (rounded to T)
// and the fragment maps: per warp, C = A (16x16) * B (16x8) in fp64.
template <typename T>
void expected_per_iteration(int threads, std::vector<double>* value, std::vector<double>* magnitude) {
  value->assign(threads, 0.0);
  magnitude->assign(threads, 0.0);
  for (int warp_base = 0; warp_base < threads; warp_base += 32) {
    double a[16][16] = {}, b[16][8] = {};
    for (int lane = 0; lane < 32; ++lane) {
      const uint32_t thread = static_cast<uint32_t>(warp_base + lane);
      for (int e = 0; e < 8; ++e)
        a[mma_a_row(lane, e)][mma_a_col(lane, e)] = round_to<T>(operand_value(thread, e));
      for (int e = 0; e < 4; ++e)
        b[mma_b_k(lane, e)][mma_b_n(lane, e)] = round_to<T>(operand_value(thread, 8 + e));
    }
    for (int lane = 0; lane < 32; ++lane) {
      for (int i = 0; i < 4; ++i) {
        for (int k = 0; k < 16; ++k) {
          const double product = a[mma_c_row(lane, i)][k] * b[k][mma_c_col(lane, i)];
          (*value)[warp_base + lane] += kChains * product;
          (*magnitude)[warp_base + lane] += kChains * std::fabs(product);
        }
      }
    }
  }
}

// Compares the checksums of a launch with `iters` iterations against the expectation.
// `relative_tolerance` is relative to the sum of the magnitudes of the checksum's terms.
void check_checksums(const std::vector<float>& got, const std::vector<double>& per_iteration,
                     const std::vector<double>& magnitude, long long iters, double relative_tolerance,
                     const std::string& what) {
  for (size_t t = 0; t < got.size(); ++t) {
    const double want = per_iteration[t] * static_cast<double>(iters);
    const double tolerance = relative_tolerance * magnitude[t] * static_cast<double>(iters) + 1e-6;
    if (!(std::fabs(got[t] - want) <= tolerance)) {  // NaN fails
      char text[256];
      std::snprintf(text, sizeof text, "%s: thread %zu: checksum %.6g, expected %.6g (tolerance %.3g)",
                    what.c_str(), t, static_cast<double>(got[t]), want, tolerance);
      throw CheckFailed(text);
    }
  }
}

template <typename T>
void run_one(const Options& opt, const DeviceFacts& facts) {
  int blocks_per_sm = 0;
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, mma_sync_peak_kernel<T>,
                                                              kThreadsPerBlock, 0));
  if (blocks_per_sm < 1) throw std::runtime_error("mma_sync_peak_kernel does not fit on an SM");
  cudaFuncAttributes attributes{};
  FA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, mma_sync_peak_kernel<T>));
  const int blocks = blocks_per_sm * facts.sms;
  const int threads = blocks * kThreadsPerBlock;
  const int warps_per_sm = blocks_per_sm * kThreadsPerBlock / 32;
  const long long iters = opt.iters ? opt.iters : kDefaultIters;
  std::fprintf(stderr,
               "mma-sync %s: occupancy %d blocks of %d threads per SM (%d warps; %d registers per thread): "
               "grid of %d blocks, one wave on %d SMs\n",
               Dtype<T>::name, blocks_per_sm, kThreadsPerBlock, warps_per_sm, attributes.numRegs, blocks,
               facts.sms);

  float* checksums = nullptr;
  BlockSpan* spans_dev = nullptr;
  FA_CUDA_CHECK(cudaMalloc(&checksums, sizeof(float) * threads));
  FA_CUDA_CHECK(cudaMalloc(&spans_dev, sizeof(BlockSpan) * blocks));
  FA_CUDA_CHECK(cudaMemset(spans_dev, 0, sizeof(BlockSpan) * blocks));  // unrecorded: end == start
  cudaStream_t stream;
  FA_CUDA_CHECK(cudaStreamCreate(&stream));

  std::vector<double> per_iteration, magnitude;
  expected_per_iteration<T>(threads, &per_iteration, &magnitude);
  std::vector<float> got(threads);
  auto fetch = [&] {
    FA_CUDA_CHECK(cudaMemcpy(got.data(), checksums, sizeof(float) * threads, cudaMemcpyDeviceToHost));
  };

  // (1) One iteration: the products themselves (fp32 sums of 16 exact products, then of 32 terms).
  FA_CUDA_CHECK(cudaMemset(checksums, 0xFF, sizeof(float) * threads));  // NaN where unwritten
  mma_sync_peak_kernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(1, checksums, spans_dev);
  FA_CUDA_CHECK(cudaGetLastError());
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  fetch();
  check_checksums(got, per_iteration, magnitude, 1, 1e-5,
                  std::string(Dtype<T>::name) + " one-iteration check");

  // (2) The timed launches. Adding a product `iters` times to an fp32 accumulator loses at most an
  // ulp of the accumulator per addition (truncating adder), so the sum drifts by at most about
  // iters * 2^-24 of the magnitude; twice that is the tolerance (0.5% at 40000 iterations).
  FA_CUDA_CHECK(cudaMemset(checksums, 0xFF, sizeof(float) * threads));
  const double ms = median_ms(stream, opt, [&] {
    mma_sync_peak_kernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(iters, checksums, spans_dev);
  });
  fetch();
  check_checksums(got, per_iteration, magnitude, iters, 1e-5 + static_cast<double>(iters) * 0x1p-23,
                  std::string(Dtype<T>::name) + " timed-launch check");
  std::vector<BlockSpan> spans(blocks);
  FA_CUDA_CHECK(cudaMemcpy(spans.data(), spans_dev, sizeof(BlockSpan) * blocks, cudaMemcpyDeviceToHost));
  const LaunchSpans ran =
      analyse_spans(spans, blocks_per_sm, facts.sms, std::string(Dtype<T>::name) + " timed launch");

  const double mmas = static_cast<double>(threads / 32) * kChains * static_cast<double>(iters);
  const double tflops = kFlopPerMma * mmas / (ms * 1e-3) / 1e12;
  const std::string shape = std::to_string(blocks_per_sm) + " blocks of " + std::to_string(kThreadsPerBlock) +
                            " threads (" + std::to_string(warps_per_sm) + " warps) resident on each of " +
                            std::to_string(facts.sms) + " SMs at once, as the occupancy API allows";
  std::fprintf(stderr,
               "mma-sync %s: %lld iterations x %d chains: %.3f ms, %.1f TFLOP/s; all %d blocks resident at "
               "once; SM clock %.0f MHz (median of %d SMs, %.0f..%.0f); each block ran for %.0f%%..%.0f%% "
               "of its SM's busy span\n",
               Dtype<T>::name, iters, kChains, ms, tflops, blocks, ran.clock_mhz, facts.sms,
               ran.min_clock_mhz, ran.max_clock_mhz, 100 * ran.shortest_block, 100 * ran.longest_block);
  print_row("mma_sync_m16n8k16", Dtype<T>::name, tflops, "TFLOP/s",
            std::string("mma.sync.aligned.m16n8k16.row.col.f32.") + Dtype<T>::ptx + "." + Dtype<T>::ptx +
                ".f32 on random register operands; " + std::to_string(kChains) +
                " independent accumulator chains per warp; " + shape + "; " + std::to_string(iters) +
                " iterations; 4096 FLOP per mma; " + timing_text(opt) +
                "; checked against a host fp64 product (1 iteration) and iters x it (timed launches)");
  print_row("sm_clock_during_mma_sync", Dtype<T>::name, ran.clock_mhz, "MHz",
            sm_clock_method(ran, facts.sms, "mma_sync_m16n8k16"));

  FA_CUDA_CHECK(cudaStreamDestroy(stream));
  FA_CUDA_CHECK(cudaFree(checksums));
  FA_CUDA_CHECK(cudaFree(spans_dev));
}

}  // namespace

void run_mma_sync(const Options& opt) {
  const DeviceFacts facts = device_facts(opt.device);
  if (facts.compute_capability < 80)
    throw Skipped("mma.sync m16n8k16 with bf16 needs sm_80 or newer; this GPU is sm_" +
                  std::to_string(facts.compute_capability));
  for (const std::string& dtype : opt.dtypes) {
    if (dtype == "fp16")
      run_one<__half>(opt, facts);
    else
      run_one<__nv_bfloat16>(opt, facts);
  }
}

}  // namespace fa::microbench
