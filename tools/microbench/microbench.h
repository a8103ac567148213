// What the four microbenchmarks share: their options, the timing loop, the result row.
//
// Each benchmark checks its result before it reports a number (a benchmark never reports a time
// for a result that failed its check), times with CUDA events (warm-up launches, then the median
// of `reps` launches, each between its own pair of events) and prints one CSV row per result on
// stdout:
//     name,dtype,value,unit,method
// Progress and the checks' outcomes go to stderr. scripts/microbench.sh collects the rows.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/cuda_check.h"

namespace fa::microbench {

struct Options {
  std::vector<std::string> dtypes = {"fp16", "bf16"};  // mma-sync, wgmma
  int warpgroups = 2;                                  // wgmma: consumer warpgroups per CTA
  long long iters = 0;                                 // MMA loop trips per launch; 0: the default
  long long bytes = 0;                                 // buffer size of hbm-read / copy; 0: the default
  int warmup = 3;
  int reps = 30;
  int device = 0;
};

// This GPU cannot run the benchmark (e.g. wgmma on a GPU that is not sm_90); exit status 77.
struct Skipped : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The benchmark's result is wrong; no number is reported; exit status 1.
struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One row of the ceilings CSV. The method is quoted (it is prose).
void print_row(const std::string& name, const std::string& dtype, double value, const std::string& unit,
               const std::string& method);

struct DeviceFacts {
  std::string name;
  int compute_capability = 0;  // 90 for sm_90
  int sms = 0;
};
DeviceFacts device_facts(int device);

// Median, in milliseconds, of `reps` executions of `enqueue` (which enqueues the work on `stream`),
// each between its own pair of CUDA events, after `warmup` untimed ones. `before_each` runs before
// each timed execution, outside the events (e.g. resetting a counter).
template <typename Enqueue, typename BeforeEach>
double median_ms(cudaStream_t stream, const Options& opt, Enqueue&& enqueue, BeforeEach&& before_each) {
  for (int i = 0; i < opt.warmup; ++i) {
    before_each();
    enqueue();
    FA_CUDA_CHECK(cudaGetLastError());
  }
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<cudaEvent_t> starts(opt.reps), stops(opt.reps);
  for (int i = 0; i < opt.reps; ++i) {
    FA_CUDA_CHECK(cudaEventCreate(&starts[i]));
    FA_CUDA_CHECK(cudaEventCreate(&stops[i]));
  }
  for (int i = 0; i < opt.reps; ++i) {
    before_each();
    FA_CUDA_CHECK(cudaEventRecord(starts[i], stream));
    enqueue();
    FA_CUDA_CHECK(cudaGetLastError());
    FA_CUDA_CHECK(cudaEventRecord(stops[i], stream));
  }
  FA_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> times(opt.reps);
  for (int i = 0; i < opt.reps; ++i) {
    float ms = 0;
    FA_CUDA_CHECK(cudaEventElapsedTime(&ms, starts[i], stops[i]));
    times[i] = ms;
    FA_CUDA_CHECK(cudaEventDestroy(starts[i]));
    FA_CUDA_CHECK(cudaEventDestroy(stops[i]));
  }
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  return n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
}

template <typename Enqueue>
double median_ms(cudaStream_t stream, const Options& opt, Enqueue&& enqueue) {
  return median_ms(stream, opt, enqueue, [] {});
}

// "median of 30 launches after 3 warm-up (CUDA events)": the timing part of every method text.
std::string timing_text(const Options& opt);

// The benchmarks. Each prints its rows and returns normally, or throws Skipped / CheckFailed /
// std::runtime_error (a CUDA error).
void run_mma_sync(const Options& opt);
void run_wgmma(const Options& opt);
void run_hbm_read(const Options& opt);
void run_copy(const Options& opt);

}  // namespace fa::microbench
