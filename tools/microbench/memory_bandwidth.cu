// Benchmarks 3 and 4: what global memory (HBM) can deliver.
//
// hbm-read: a grid-stride sum of a buffer far larger than L2 (default 4 GiB; the H200's L2 is
//   60 MiB, `fa_microbench info` prints l2_bytes), read with 16-byte vector loads, kUnroll of them
//   in flight per thread. The buffer holds a known pattern; every launch's sum (uint64) is compared
//   with the host's sum of the pattern, so no load can be skipped and none can read wrong.
//   GB/s = bytes read / median time.
// copy: device-to-device copy of a buffer far larger than L2 (default 2 GiB to another 2 GiB),
//   by cudaMemcpyAsync and by a 16-byte-vector grid-stride copy kernel. The destination is filled
//   with a value the pattern never takes before the launches and compared with the pattern after
//   them. GB/s = (bytes read + bytes written) / median time = 2 * buffer bytes / median time.
// GB = 10^9 bytes, as memory datasheets count.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/fragment_layout.h"  // FA_HOST_DEVICE
#include "tools/microbench/microbench.h"

namespace fa::microbench {
namespace {

constexpr long long kDefaultReadBytes = 4LL << 30;
constexpr long long kDefaultCopyBytes = 2LL << 30;
constexpr int kThreadsPerBlock = 256;
constexpr int kUnroll = 4;  // independent 16-byte loads in flight per thread and loop trip

// Word i of the buffers: a multiplicative hash of i (no long runs of equal words), always even,
// so the 0xFFFFFFFF poison of an unwritten destination word never matches it.
FA_HOST_DEVICE constexpr uint32_t pattern(uint64_t word) {
  return (static_cast<uint32_t>(word) * 2654435761u) & ~1u;
}

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

__global__ void fill_pattern_kernel(uint32_t* data, size_t words) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    data[i] = pattern(i);
}

// *total += the sum of all 32-bit words of data (vecs 16-byte vectors).
__global__ void __launch_bounds__(kThreadsPerBlock)
    read_sum_kernel(const uint4* __restrict__ data, size_t vecs, unsigned long long* total) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  unsigned long long sum = 0;
  for (; i + (kUnroll - 1) * stride < vecs; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = data[i + u * stride];  // all loads first, then the adds
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      sum += static_cast<unsigned long long>(v[u].x) + v[u].y + v[u].z + v[u].w;
  }
  for (; i < vecs; i += stride) {
    const uint4 v = data[i];
    sum += static_cast<unsigned long long>(v.x) + v.y + v.z + v.w;
  }
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) atomicAdd(total, sum);
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t vecs) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < vecs; i += kUnroll * stride) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * stride];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < vecs; i += stride) dst[i] = src[i];
}

__global__ void count_mismatches_kernel(const uint32_t* data, size_t words, unsigned long long* mismatches) {
  unsigned long long count = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    count += data[i] != pattern(i);
  count = warp_sum(count);
  if (threadIdx.x % 32 == 0 && count) atomicAdd(mismatches, count);
}

// One full wave of the kernel on every SM.
template <typename Kernel>
int full_wave_blocks(Kernel kernel, const DeviceFacts& facts) {
  int blocks_per_sm = 0;
  FA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, kThreadsPerBlock, 0));
  if (blocks_per_sm < 1) throw std::runtime_error("a memory kernel does not fit on an SM");
  return blocks_per_sm * facts.sms;
}

size_t buffer_bytes(const Options& opt, long long default_bytes, int buffers) {
  const long long bytes = opt.bytes ? opt.bytes : default_bytes;
  if (bytes % 16 != 0) throw std::runtime_error("--bytes must be a multiple of 16");
  size_t free_bytes = 0, total_bytes = 0;
  FA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (static_cast<size_t>(bytes) * buffers > free_bytes)
    throw std::runtime_error(std::to_string(buffers) + " buffer(s) of " + std::to_string(bytes) +
                             " bytes do not fit in the " + std::to_string(free_bytes) +
                             " bytes free on the GPU; ask for less with --bytes");
  int l2_bytes = 0;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, opt.device));
  if (bytes < 16LL * l2_bytes)
    std::fprintf(stderr,
                 "note: %lld bytes is less than 16 x the L2 (%d bytes): L2 hits will inflate the result\n",
                 bytes, l2_bytes);
  return static_cast<size_t>(bytes);
}

// The host's sum of pattern() over `words` words, on every core (4 GiB is 2^30 words: seconds
// on one core). uint64 arithmetic wraps modulo 2^64 beyond 2^32 words, as the GPU's sum does.
unsigned long long host_pattern_sum(size_t words) {
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<unsigned long long> partial(workers, 0);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) {
    threads.emplace_back([&partial, words, workers, w] {
      unsigned long long sum = 0;
      for (size_t i = words * w / workers; i < words * (w + 1) / workers; ++i) sum += pattern(i);
      partial[w] = sum;
    });
  }
  unsigned long long total = 0;
  for (unsigned w = 0; w < workers; ++w) {
    threads[w].join();
    total += partial[w];
  }
  return total;
}

std::string size_text(size_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

void fill_pattern(uint32_t* data, size_t words, const DeviceFacts& facts, cudaStream_t stream) {
  fill_pattern_kernel<<<full_wave_blocks(fill_pattern_kernel, facts), kThreadsPerBlock, 0, stream>>>(data,
                                                                                                     words);
  FA_CUDA_CHECK(cudaGetLastError());
}

unsigned long long count_mismatches(const uint32_t* data, size_t words, const DeviceFacts& facts,
                                    cudaStream_t stream) {
  unsigned long long* count_dev = nullptr;
  FA_CUDA_CHECK(cudaMalloc(&count_dev, sizeof(unsigned long long)));
  FA_CUDA_CHECK(cudaMemsetAsync(count_dev, 0, sizeof(unsigned long long), stream));
  count_mismatches_kernel<<<full_wave_blocks(count_mismatches_kernel, facts), kThreadsPerBlock, 0, stream>>>(
      data, words, count_dev);
  FA_CUDA_CHECK(cudaGetLastError());
  unsigned long long count = 0;
  FA_CUDA_CHECK(cudaMemcpyAsync(&count, count_dev, sizeof count, cudaMemcpyDeviceToHost, stream));
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  FA_CUDA_CHECK(cudaFree(count_dev));
  return count;
}

}  // namespace

void run_hbm_read(const Options& opt) {
  const DeviceFacts facts = device_facts(opt.device);
  const size_t bytes = buffer_bytes(opt, kDefaultReadBytes, 1);
  const size_t words = bytes / sizeof(uint32_t);
  uint32_t* data = nullptr;
  unsigned long long* totals = nullptr;  // one per launch: every launch's sum is checked
  const int launches = opt.warmup + opt.reps;
  FA_CUDA_CHECK(cudaMalloc(&data, bytes));
  FA_CUDA_CHECK(cudaMalloc(&totals, sizeof(unsigned long long) * launches));
  FA_CUDA_CHECK(cudaMemset(totals, 0, sizeof(unsigned long long) * launches));
  cudaStream_t stream;
  FA_CUDA_CHECK(cudaStreamCreate(&stream));
  fill_pattern(data, words, facts, stream);

  const unsigned long long expected = host_pattern_sum(words);

  const int blocks = full_wave_blocks(read_sum_kernel, facts);
  int launch = 0;
  const double ms = median_ms(stream, opt, [&] {
    read_sum_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(reinterpret_cast<const uint4*>(data), bytes / 16,
                                                             totals + launch);
    ++launch;
  });
  std::vector<unsigned long long> got(launches);
  FA_CUDA_CHECK(
      cudaMemcpy(got.data(), totals, sizeof(unsigned long long) * launches, cudaMemcpyDeviceToHost));
  for (int i = 0; i < launches; ++i)
    if (got[i] != expected)
      throw CheckFailed("launch " + std::to_string(i) + " summed " + std::to_string(got[i]) + ", expected " +
                        std::to_string(expected));

  const double gbps = static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  std::fprintf(stderr, "hbm-read: %s, %d blocks x %d threads: %.3f ms, %.1f GB/s; all %d sums correct\n",
               size_text(bytes).c_str(), blocks, kThreadsPerBlock, ms, gbps, launches);
  print_row("hbm_read", "-", gbps, "GB/s",
            "grid-stride sum of a " + size_text(bytes) + " buffer with 16-byte loads (" +
                std::to_string(kUnroll) + " in flight per thread; one wave of " + std::to_string(blocks) +
                " blocks x " + std::to_string(kThreadsPerBlock) + " threads); GB/s = bytes read / time; " +
                timing_text(opt) + "; every launch's sum checked against the host's");

  FA_CUDA_CHECK(cudaStreamDestroy(stream));
  FA_CUDA_CHECK(cudaFree(data));
  FA_CUDA_CHECK(cudaFree(totals));
}

void run_copy(const Options& opt) {
  const DeviceFacts facts = device_facts(opt.device);
  const size_t bytes = buffer_bytes(opt, kDefaultCopyBytes, 2);
  const size_t words = bytes / sizeof(uint32_t);
  uint32_t *src = nullptr, *dst = nullptr;
  FA_CUDA_CHECK(cudaMalloc(&src, bytes));
  FA_CUDA_CHECK(cudaMalloc(&dst, bytes));
  cudaStream_t stream;
  FA_CUDA_CHECK(cudaStreamCreate(&stream));
  fill_pattern(src, words, facts, stream);
  const int blocks = full_wave_blocks(copy_kernel, facts);

  struct Method {
    const char* name;
    std::string how;
  };
  const Method methods[] = {
      {"d2d_copy_memcpy", "cudaMemcpyAsync device to device"},
      {"d2d_copy_kernel", "grid-stride copy kernel with 16-byte loads and stores (" +
                              std::to_string(kUnroll) + " in flight per thread; one wave of " +
                              std::to_string(blocks) + " blocks x " + std::to_string(kThreadsPerBlock) +
                              " threads)"},
  };
  for (int m = 0; m < 2; ++m) {
    const Method& method = methods[m];
    const bool by_memcpy = m == 0;
    FA_CUDA_CHECK(cudaMemsetAsync(dst, 0xFF, bytes, stream));  // a value pattern() never takes
    const double ms = median_ms(stream, opt, [&] {
      if (by_memcpy) {
        FA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
      } else {
        copy_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(reinterpret_cast<const uint4*>(src),
                                                             reinterpret_cast<uint4*>(dst), bytes / 16);
      }
    });
    const unsigned long long wrong = count_mismatches(dst, words, facts, stream);
    if (wrong != 0)
      throw CheckFailed(std::string(method.name) + ": " + std::to_string(wrong) + " of " +
                        std::to_string(words) + " destination words differ from the source");
    const double gbps = 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
    std::fprintf(stderr, "copy %s: %s: %.3f ms, %.1f GB/s (read + write); destination verified\n",
                 method.name, size_text(bytes).c_str(), ms, gbps);
    print_row(method.name, "-", gbps, "GB/s",
              method.how + " of " + size_text(bytes) + "; GB/s = (bytes read + bytes written) / time = 2 x " +
                  size_text(bytes) + " / time; " + timing_text(opt) +
                  "; destination poisoned before and compared with the source pattern after");
  }

  FA_CUDA_CHECK(cudaStreamDestroy(stream));
  FA_CUDA_CHECK(cudaFree(src));
  FA_CUDA_CHECK(cudaFree(dst));
}

}  // namespace fa::microbench
