// fa_microbench: the hardware ceilings that docs/ceilings.md quotes, measured on this GPU.
// Usage: fa_microbench --help. scripts/microbench.sh builds it, runs every benchmark and writes the
// CSV; docs/ceilings.md says what each one measures and how.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "tools/microbench/microbench.h"

namespace fa::microbench {

void print_row(const std::string& name, const std::string& dtype, double value, const std::string& unit,
               const std::string& method) {
  std::string quoted;
  for (char c : method) quoted += (c == '"') ? std::string("\"\"") : std::string(1, c);
  std::printf("%s,%s,%.1f,%s,\"%s\"\n", name.c_str(), dtype.c_str(), value, unit.c_str(), quoted.c_str());
  std::fflush(stdout);
}

DeviceFacts device_facts(int device) {
  cudaDeviceProp prop{};
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return {prop.name, prop.major * 10 + prop.minor, prop.multiProcessorCount};
}

std::string timing_text(const Options& opt) {
  return "median of " + std::to_string(opt.reps) + " launches after " + std::to_string(opt.warmup) +
         " warm-up (CUDA events)";
}

}  // namespace fa::microbench

namespace {

using fa::microbench::Options;

constexpr int kExitCheckFailed = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoGpu = 3;
constexpr int kExitSkipped = 77;

const char* const kUsage = R"(usage: fa_microbench BENCHMARK [options]

Measures one hardware ceiling on this GPU and prints one CSV row per result on stdout:
    name,dtype,value,unit,method
(progress and checks on stderr). Every result is checked before it is reported.

benchmarks:
  info       '# key=value' lines: gpu, compute_capability, sms, cuda (runtime), cuda_driver_api,
             l2_bytes, memory_bytes
  mma-sync   mma.sync.aligned.m16n8k16 (fp32 accumulate) peak, operands in registers: TFLOP/s
  wgmma      wgmma.mma_async m64n256k16 (fp32 accumulate) peak, A and B in 128B-swizzled shared
             memory through matrix descriptors: TFLOP/s (sm_90 only: built for sm_90a)
  hbm-read   streaming read of a buffer far larger than L2, 16-byte loads, checked sum: GB/s
  copy       device-to-device copy (cudaMemcpyAsync and a 16-byte copy kernel), checked: GB/s of
             bytes read + bytes written

options:
  --dtype fp16|bf16|all   mma-sync, wgmma: input type (default all)
  --warpgroups 1|2        wgmma: warpgroups per CTA (default 2)
  --iters N               mma-sync, wgmma: loop trips per launch (default: about 10 ms on an H200)
  --bytes N[K|M|G]        hbm-read: buffer size (default 4G); copy: size of each buffer (default 2G);
                          binary units
  --warmup N              untimed launches first (default 3)
  --reps N                timed launches; the median is reported (default 30)
  --device N              CUDA device (default 0)
  --csv-header            print the CSV header line first
  -h, --help              this text

exit status: 0 done; 1 a check failed or a CUDA error; 2 bad usage; 3 no usable CUDA GPU;
77 this GPU cannot run the benchmark (e.g. wgmma on a GPU that is not sm_90)
)";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "fa_microbench: %s (see --help)\n", message.c_str());
  std::exit(kExitUsage);
}

// A whole number >= min_value, with an optional K/M/G (binary) suffix where binary_suffix.
long long parse_count(const std::string& flag, const std::string& text, bool binary_suffix,
                      long long min_value = 1) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  long long scale = 1;
  if (binary_suffix && end && *end) {
    if (std::strcmp(end, "K") == 0)
      scale = 1LL << 10;
    else if (std::strcmp(end, "M") == 0)
      scale = 1LL << 20;
    else if (std::strcmp(end, "G") == 0)
      scale = 1LL << 30;
    else
      usage_error(flag + ": '" + text + "' is not a count (suffixes: K, M, G)");
  } else if (!end || *end || text.empty()) {
    usage_error(flag + ": '" + text + "' is not a count");
  }
  if (value < min_value) usage_error(flag + " must be at least " + std::to_string(min_value));
  return value * scale;
}

void print_info(int device) {
  const auto facts = fa::microbench::device_facts(device);
  cudaDeviceProp prop{};
  FA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int runtime = 0, driver = 0;
  FA_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  FA_CUDA_CHECK(cudaDriverGetVersion(&driver));
  auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
  std::printf("# gpu=%s\n# compute_capability=%d\n# sms=%d\n# cuda=%s\n# cuda_driver_api=%s\n",
              facts.name.c_str(), facts.compute_capability, facts.sms, version(runtime).c_str(),
              version(driver).c_str());
  std::printf("# l2_bytes=%d\n# memory_bytes=%zu\n", prop.l2CacheSize, prop.totalGlobalMem);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) usage_error("no benchmark given");
  const std::string benchmark = argv[1];
  if (benchmark == "-h" || benchmark == "--help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Options opt;
  bool csv_header = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (flag == "--dtype") {
      const std::string dtype = value();
      if (dtype == "all")
        opt.dtypes = {"fp16", "bf16"};
      else if (dtype == "fp16" || dtype == "bf16")
        opt.dtypes = {dtype};
      else
        usage_error("--dtype must be fp16, bf16 or all");
    } else if (flag == "--warpgroups") {
      opt.warpgroups = static_cast<int>(parse_count(flag, value(), false));
      if (opt.warpgroups != 1 && opt.warpgroups != 2) usage_error("--warpgroups must be 1 or 2");
    } else if (flag == "--iters") {
      opt.iters = parse_count(flag, value(), false);
    } else if (flag == "--bytes") {
      opt.bytes = parse_count(flag, value(), true);
    } else if (flag == "--warmup") {
      opt.warmup = static_cast<int>(parse_count(flag, value(), false, 0));
    } else if (flag == "--reps") {
      opt.reps = static_cast<int>(parse_count(flag, value(), false));
    } else if (flag == "--device") {
      opt.device = static_cast<int>(parse_count(flag, value(), false, 0));
    } else if (flag == "--csv-header") {
      csv_header = true;
    } else {
      usage_error("unknown option '" + flag + "'");
    }
  }
  if (benchmark != "info" && benchmark != "mma-sync" && benchmark != "wgmma" && benchmark != "hbm-read" &&
      benchmark != "copy")
    usage_error("unknown benchmark '" + benchmark + "'");

  // A GPU first: without one there is nothing to measure.
  int device_count = 0;
  const cudaError_t count_status = cudaGetDeviceCount(&device_count);
  if (count_status != cudaSuccess || device_count == 0) {
    std::fprintf(
        stderr, "fa_microbench: no usable CUDA GPU (%s), so nothing can be measured\n",
        count_status != cudaSuccess ? cudaGetErrorString(count_status) : "the driver reports 0 devices");
    return kExitNoGpu;
  }
  if (opt.device >= device_count)
    usage_error("--device " + std::to_string(opt.device) + ": there are only " +
                std::to_string(device_count) + " CUDA devices");

  try {
    FA_CUDA_CHECK(cudaSetDevice(opt.device));
    if (benchmark == "info") {
      print_info(opt.device);
      return 0;
    }
    if (csv_header) std::printf("name,dtype,value,unit,method\n");
    if (benchmark == "mma-sync")
      fa::microbench::run_mma_sync(opt);
    else if (benchmark == "wgmma")
      fa::microbench::run_wgmma(opt);
    else if (benchmark == "hbm-read")
      fa::microbench::run_hbm_read(opt);
    else
      fa::microbench::run_copy(opt);
  } catch (const fa::microbench::Skipped& e) {
    std::fprintf(stderr, "fa_microbench %s: SKIPPED: %s\n", benchmark.c_str(), e.what());
    return kExitSkipped;
  } catch (const fa::microbench::CheckFailed& e) {
    std::fprintf(stderr, "fa_microbench %s: CHECK FAILED, nothing reported: %s\n", benchmark.c_str(),
                 e.what());
    return kExitCheckFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fa_microbench %s: FAILED: %s\n", benchmark.c_str(), e.what());
    return kExitCheckFailed;
  }
  return 0;
}
