// The main of every GPU test program. Where there is nothing to run on (no CUDA device, or no
// NVIDIA driver at all) it says so and exits with 77, which CTest (SKIP_RETURN_CODE 77) reports as
// skipped. Any other CUDA error, such as a driver too old for this program's CUDA runtime, is a
// failure with its message: skipped must never hide a GPU that is there.
#define CATCH_CONFIG_RUNNER
#include <cstdio>

#include "common/cuda_check.h"
#include "fa_catch.h"

namespace {
constexpr int kSkipExitCode = 77;
}

int main(int argc, char** argv) {
  const fa::CudaDeviceProbe gpu = fa::probe_cuda_device();
  if (gpu.nothing_to_run_on()) {
    std::printf("SKIPPED: %s\n", gpu.message.c_str());
    return kSkipExitCode;
  }
  if (!gpu.usable()) {
    std::printf("FAILED: CUDA is not usable: %s\n", gpu.message.c_str());
    return 1;
  }
  const int failed = Catch::Session().run(argc, argv);
  // Catch returns the number of failed assertions; 77 of them must not read as "skipped".
  return failed == 0 ? 0 : 1;
}
