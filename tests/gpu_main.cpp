// The main of every GPU test program: without a usable CUDA GPU it says so and exits with 77,
// which CTest (SKIP_RETURN_CODE 77) reports as skipped, so a machine without a GPU never counts a
// GPU test as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

#include "common/cuda_check.h"

namespace {
constexpr int kSkipExitCode = 77;
}

int main(int argc, char** argv) {
  std::string why;
  if (!fa::cuda_device_available(&why)) {
    std::printf("SKIPPED: no CUDA GPU (%s)\n", why.c_str());
    return kSkipExitCode;
  }
  const int failed = Catch::Session().run(argc, argv);
  // Catch returns the number of failed assertions; 77 of them must not read as "skipped".
  return failed == 0 ? 0 : 1;
}
