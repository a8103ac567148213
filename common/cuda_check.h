// Every CUDA call in the harness goes through FA_CUDA_CHECK, which throws with the failing
// expression and location. (The stage launchers return fa::Status instead; see params.h.)
//
// probe_cuda_device() answers "can this process use a GPU, and if not, why?" for the test mains
// and the runner. Only two answers mean "nothing to run on" (a test may then report skipped): no
// CUDA device, and no NVIDIA driver at all. Every other answer, a driver too old for this
// program's CUDA runtime included, is an error that must fail with its message.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace fa {

inline void cuda_check(cudaError_t status, const char* expr, const char* file, int line) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + expr +
                             " failed: " + cudaGetErrorString(status));
  }
}

struct CudaDeviceProbe {
  enum class Outcome {
    kUsable,    // at least one CUDA device
    kNoDevice,  // a driver, but no CUDA device (or none visible: CUDA_VISIBLE_DEVICES)
    kNoDriver,  // no NVIDIA driver library at all
    kError,     // anything else: a driver too old for the runtime, a broken install, ...
  };
  Outcome outcome;
  // One phrase for a "SKIPPED: ..." or "FAILED: ..." line: "no CUDA GPU (...)", "no NVIDIA driver
  // (...)", "the NVIDIA driver is too old (...)", "2 CUDA devices".
  std::string message;

  bool usable() const { return outcome == Outcome::kUsable; }
  // True only where there is nothing to run on; a caller may then skip instead of failing.
  bool nothing_to_run_on() const { return outcome == Outcome::kNoDevice || outcome == Outcome::kNoDriver; }
};

inline std::string cuda_version_text(int version) {  // 12020 -> "12.2"
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The decision alone, from what the runtime reported, so that it can be tested without a GPU:
// `count_status` and `device_count` from cudaGetDeviceCount, `driver_version` from
// cudaDriverGetVersion (0 when the runtime found no driver library, -1 when the call failed),
// `runtime_version` from cudaRuntimeGetVersion. cudaErrorInsufficientDriver means both "no driver"
// and "driver too old"; only the driver version tells them apart.
inline CudaDeviceProbe classify_cuda_device_query(cudaError_t count_status, int device_count,
                                                  int driver_version, int runtime_version) {
  using Outcome = CudaDeviceProbe::Outcome;
  const std::string error =
      std::string(cudaGetErrorName(count_status)) + ": " + cudaGetErrorString(count_status);
  if (count_status == cudaSuccess) {
    if (device_count > 0)
      return {Outcome::kUsable,
              std::to_string(device_count) + (device_count == 1 ? " CUDA device" : " CUDA devices")};
    return {Outcome::kNoDevice, "no CUDA GPU (the driver reports 0 devices)"};
  }
  if (count_status == cudaErrorNoDevice) return {Outcome::kNoDevice, "no CUDA GPU (" + error + ")"};
  if (count_status == cudaErrorInsufficientDriver) {
    if (driver_version == 0)
      return {Outcome::kNoDriver, "no NVIDIA driver (the CUDA runtime found no libcuda.so.1 to load)"};
    if (driver_version > 0) {
      const std::string versions = "it supports CUDA " + cuda_version_text(driver_version) +
                                   ", this program's runtime is CUDA " + cuda_version_text(runtime_version);
      return {Outcome::kError, "the NVIDIA driver is too old (" + versions + "; " + error + ")"};
    }
  }
  return {Outcome::kError, "cudaGetDeviceCount failed (" + error + ")"};
}

// Asks the CUDA runtime; leaves no error behind for later cudaGetLastError() calls.
inline CudaDeviceProbe probe_cuda_device() {
  int device_count = 0, driver_version = 0, runtime_version = 0;
  const cudaError_t count_status = cudaGetDeviceCount(&device_count);
  if (cudaDriverGetVersion(&driver_version) != cudaSuccess) driver_version = -1;
  if (cudaRuntimeGetVersion(&runtime_version) != cudaSuccess) runtime_version = 0;
  cudaGetLastError();
  return classify_cuda_device_query(count_status, device_count, driver_version, runtime_version);
}

}  // namespace fa

#define FA_CUDA_CHECK(expr) ::fa::cuda_check((expr), #expr, __FILE__, __LINE__)
