// When and where each block of an MMA benchmark ran, and what that says: the SM clock during the
// launch, and whether the grid really ran as the one wave its occupancy promises.
//
// Why not "block 0's clock64() cycles over the launch time": that assumes block 0 runs for the
// whole launch, and it need not. On an H200 that formula gave 378 MHz for the mma.sync kernel (5
// blocks of 256 threads resident per SM, one wave) at a clock nvidia-smi read as 1980 MHz before
// and after; 634 TFLOP/s at 378 MHz would be 3x the tensor cores' 4096 FLOP per clock per SM. So
// block 0 ran for about a fifth of the launch: the warp schedulers need not share an SM evenly
// between the blocks on it. Instead every block records its SM and its start and end on two
// clocks, and the host measures each SM over its own busy span, from its first block's start to
// its last block's end: clock64() cycles (a per-SM counter) over %globaltimer nanoseconds (one
// GPU-wide clock) of the same interval. That assumes nothing about how long any one block runs,
// and the span is about the whole launch (milliseconds), so the globaltimer's resolution (it may
// tick only every microsecond) does not matter.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "tools/microbench/microbench.h"

namespace fa::microbench {

struct BlockSpan {
  uint32_t sm;                          // %smid
  long long start_cycles, end_cycles;   // clock64() of that SM
  unsigned long long start_ns, end_ns;  // %globaltimer
};

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long ns;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns));
  return ns;
}
__device__ __forceinline__ uint32_t sm_id() {
  uint32_t id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

// First thing in the kernel. Thread 0 stores the start at once, so that no register holds it
// through the benchmark loop (a register more could cost the MMA kernel a block per SM).
__device__ __forceinline__ void record_block_start(BlockSpan* spans) {
  if (threadIdx.x == 0) {
    BlockSpan& span = spans[blockIdx.x];
    span.sm = sm_id();
    span.start_cycles = clock64();
    span.start_ns = global_ns();
  }
}
// Last thing in the kernel, reached by every thread: the block ends when its last warp does.
__device__ __forceinline__ void record_block_end(BlockSpan* spans) {
  __syncthreads();
  if (threadIdx.x == 0) {
    BlockSpan& span = spans[blockIdx.x];
    span.end_cycles = clock64();
    span.end_ns = global_ns();
  }
}

// What the spans of one launch say.
struct LaunchSpans {
  double clock_mhz = 0;  // median over SMs of cycles / ns over the SM's busy span
  double min_clock_mhz = 0, max_clock_mhz = 0;
  double busy_ms = 0;                            // the median SM's busy span
  double shortest_block = 0, longest_block = 0;  // block run time / its SM's busy span
};

// Checks that the grid ran as one wave of blocks_per_sm blocks on each of `sms` SMs (every block
// started before any block finished, and each SM held blocks_per_sm of them: then the warps per SM
// that the benchmark states were all there at once), and measures the SM clock. Throws CheckFailed
// otherwise: the benchmark's description of what ran would be false.
inline LaunchSpans analyse_spans(const std::vector<BlockSpan>& spans, int blocks_per_sm, int sms,
                                 const std::string& what) {
  struct Sm {
    int blocks = 0;
    long long first_cycles = std::numeric_limits<long long>::max(), last_cycles = 0;
    unsigned long long first_ns = std::numeric_limits<unsigned long long>::max(), last_ns = 0;
  };
  std::map<uint32_t, Sm> per_sm;  // by %smid, which need not be contiguous
  unsigned long long last_start_ns = 0, first_end_ns = std::numeric_limits<unsigned long long>::max();
  for (const BlockSpan& s : spans) {
    if (s.end_cycles <= s.start_cycles || s.end_ns < s.start_ns)
      throw CheckFailed(what + ": a block's recorded end is not after its start (not recorded?)");
    Sm& sm = per_sm[s.sm];
    ++sm.blocks;
    sm.first_cycles = std::min(sm.first_cycles, s.start_cycles);
    sm.last_cycles = std::max(sm.last_cycles, s.end_cycles);
    sm.first_ns = std::min(sm.first_ns, s.start_ns);
    sm.last_ns = std::max(sm.last_ns, s.end_ns);
    last_start_ns = std::max(last_start_ns, s.start_ns);
    first_end_ns = std::min(first_end_ns, s.end_ns);
  }
  if (last_start_ns >= first_end_ns) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "%s: the grid did not run as one wave: a block started %.3f us after another had "
                  "finished (too few iterations, or the GPU shared with other work?)",
                  what.c_str(), static_cast<double>(last_start_ns - first_end_ns) * 1e-3);
    throw CheckFailed(text);
  }
  if (static_cast<int>(per_sm.size()) != sms)
    throw CheckFailed(what + ": the blocks ran on " + std::to_string(per_sm.size()) + " SMs, not on all " +
                      std::to_string(sms));
  std::vector<double> clocks;
  std::vector<double> busy_ms;
  for (const auto& [id, sm] : per_sm) {
    if (sm.blocks != blocks_per_sm)
      throw CheckFailed(what + ": SM " + std::to_string(id) + " ran " + std::to_string(sm.blocks) +
                        " blocks, not " + std::to_string(blocks_per_sm));
    const double ns = static_cast<double>(sm.last_ns - sm.first_ns);
    if (ns <= 0)
      throw CheckFailed(what + ": SM " + std::to_string(id) + " ran for less than a globaltimer tick");
    clocks.push_back(static_cast<double>(sm.last_cycles - sm.first_cycles) / ns * 1e3);
    busy_ms.push_back(ns * 1e-6);
  }
  LaunchSpans out;
  out.shortest_block = 1.0;
  for (const BlockSpan& s : spans) {
    const Sm& sm = per_sm.at(s.sm);
    const double share =
        static_cast<double>(s.end_ns - s.start_ns) / static_cast<double>(sm.last_ns - sm.first_ns);
    out.shortest_block = std::min(out.shortest_block, share);
    out.longest_block = std::max(out.longest_block, share);
  }
  std::sort(clocks.begin(), clocks.end());
  std::sort(busy_ms.begin(), busy_ms.end());
  const size_t n = clocks.size();
  out.clock_mhz = n % 2 ? clocks[n / 2] : 0.5 * (clocks[n / 2 - 1] + clocks[n / 2]);
  out.min_clock_mhz = clocks.front();
  out.max_clock_mhz = clocks.back();
  out.busy_ms = busy_ms[busy_ms.size() / 2];
  return out;
}

// The method text of an sm_clock_during_* row.
inline std::string sm_clock_method(const LaunchSpans& spans, int sms, const std::string& benchmark) {
  char text[512];
  std::snprintf(text, sizeof text,
                "during the last timed launch of %s: on each SM, clock64() cycles from its first block's "
                "start to its last block's end over the %%globaltimer nanoseconds of that interval "
                "(%.2f ms); median over the %d SMs (min %.0f, max %.0f MHz)",
                benchmark.c_str(), spans.busy_ms, sms, spans.min_clock_mhz, spans.max_clock_mhz);
  return text;
}

}  // namespace fa::microbench
