// When may a GPU test report "skipped"? Only when there is nothing to run on: no CUDA device, or no
// NVIDIA driver at all (fa::classify_cuda_device_query in common/cuda_check.h). The CUDA runtime
// answers cudaErrorInsufficientDriver both without a driver and with a driver too old for it; a too
// old driver on a GPU machine must fail with its message, or every GPU test there would read as
// skipped and CTest would say 100% passed.
//
// The first test cases check the decision on what the runtime can report. The hidden one,
// "[fake_old_driver]", is run by CTest with LD_LIBRARY_PATH pointing at a stand-in libcuda.so.1
// that reports CUDA 11.4 (tests/fake_old_driver.cpp): it checks that the real runtime, asked by
// fa::probe_cuda_device(), reports such a driver as an error and not as "nothing to run on".
#include <cuda_runtime.h>

#include "common/cuda_check.h"
#include "fa_catch.h"

using fa::classify_cuda_device_query;
using Outcome = fa::CudaDeviceProbe::Outcome;

namespace {
constexpr int kRuntime13 = 13000;  // what cudaRuntimeGetVersion returns for CUDA 13.0
}

TEST_CASE("devices found: usable, never skipped", "[device_probe]") {
  const fa::CudaDeviceProbe probe = classify_cuda_device_query(cudaSuccess, 2, 13000, kRuntime13);
  CHECK(probe.outcome == Outcome::kUsable);
  CHECK(probe.usable());
  CHECK_FALSE(probe.nothing_to_run_on());
  CHECK(probe.message == "2 CUDA devices");
  CHECK(classify_cuda_device_query(cudaSuccess, 1, 13000, kRuntime13).message == "1 CUDA device");
}

TEST_CASE("no device: nothing to run on", "[device_probe]") {
  const fa::CudaDeviceProbe none = classify_cuda_device_query(cudaErrorNoDevice, 0, 13000, kRuntime13);
  CHECK(none.outcome == Outcome::kNoDevice);
  CHECK(none.nothing_to_run_on());
  CHECK_FALSE(none.usable());
  CHECK_THAT(none.message, Catch::StartsWith("no CUDA GPU (cudaErrorNoDevice: "));

  const fa::CudaDeviceProbe zero = classify_cuda_device_query(cudaSuccess, 0, 13000, kRuntime13);
  CHECK(zero.outcome == Outcome::kNoDevice);
  CHECK(zero.nothing_to_run_on());
}

TEST_CASE("no driver: nothing to run on, and said as such", "[device_probe]") {
  // cudaDriverGetVersion reports 0 when the runtime found no driver library to load.
  const fa::CudaDeviceProbe probe = classify_cuda_device_query(cudaErrorInsufficientDriver, 0, 0, kRuntime13);
  CHECK(probe.outcome == Outcome::kNoDriver);
  CHECK(probe.nothing_to_run_on());
  CHECK_THAT(probe.message, Catch::StartsWith("no NVIDIA driver"));
  // Not the runtime's "CUDA driver version is insufficient": there is no driver to be too old.
  CHECK_FALSE(probe.message.find("insufficient") != std::string::npos);
}

TEST_CASE("a driver too old for the runtime is an error with both versions", "[device_probe]") {
  const fa::CudaDeviceProbe probe =
      classify_cuda_device_query(cudaErrorInsufficientDriver, 0, 12020, kRuntime13);
  CHECK(probe.outcome == Outcome::kError);
  CHECK_FALSE(probe.nothing_to_run_on());
  CHECK_FALSE(probe.usable());
  CHECK_THAT(probe.message, Catch::StartsWith("the NVIDIA driver is too old"));
  CHECK_THAT(probe.message, Catch::Contains("supports CUDA 12.2"));
  CHECK_THAT(probe.message, Catch::Contains("runtime is CUDA 13.0"));
  CHECK_THAT(probe.message, Catch::Contains("cudaErrorInsufficientDriver"));

  // If the driver version could not be read at all, the case is unknown: an error too.
  CHECK(classify_cuda_device_query(cudaErrorInsufficientDriver, 0, -1, kRuntime13).outcome ==
        Outcome::kError);
}

TEST_CASE("every other CUDA error is an error with its name", "[device_probe]") {
  const cudaError_t errors[] = {cudaErrorInitializationError,
                                cudaErrorDevicesUnavailable,
                                cudaErrorNotPermitted,
                                cudaErrorSystemNotReady,
                                cudaErrorSystemDriverMismatch,
                                cudaErrorCompatNotSupportedOnDevice,
                                cudaErrorUnknown};
  for (const cudaError_t error : errors) {
    const fa::CudaDeviceProbe probe = classify_cuda_device_query(error, 0, 13000, kRuntime13);
    INFO(cudaGetErrorName(error));
    CHECK(probe.outcome == Outcome::kError);
    CHECK_FALSE(probe.nothing_to_run_on());
    CHECK_THAT(probe.message, Catch::StartsWith("cudaGetDeviceCount failed ("));
    CHECK_THAT(probe.message, Catch::Contains(cudaGetErrorName(error)));
  }
}

TEST_CASE("the runtime reports a driver too old for it as an error", "[.fake_old_driver]") {
  int driver_version = 0;
  REQUIRE(cudaDriverGetVersion(&driver_version) == cudaSuccess);
  // 11040 is what tests/fake_old_driver.cpp reports; anything else means another libcuda.so.1 was
  // loaded and this test does not test what it says.
  REQUIRE(driver_version == 11040);
  const fa::CudaDeviceProbe probe = fa::probe_cuda_device();
  INFO(probe.message);
  CHECK(probe.outcome == Outcome::kError);
  CHECK_FALSE(probe.nothing_to_run_on());
  CHECK_THAT(probe.message, Catch::StartsWith("the NVIDIA driver is too old (it supports CUDA 11.4"));
}
