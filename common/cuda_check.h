// Every CUDA call in the harness goes through FA_CUDA_CHECK, which throws with the failing
// expression and location. (The stage launchers return fa::Status instead; see params.h.)
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

// True if a CUDA device is usable; fills `why` otherwise (for "skipped" messages).
bool cuda_device_available(std::string* why = nullptr);

}  // namespace fa

#define FA_CUDA_CHECK(expr) ::fa::cuda_check((expr), #expr, __FILE__, __LINE__)
