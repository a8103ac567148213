// Helpers shared by the GPU test programs: which registered stages this GPU can run, and what
// each stage supports. Catch2 must be included before this header (WARN, REQUIRE_FALSE).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/cuda_check.h"
#include "common/registry.h"

namespace fa_test {

inline int device_compute_capability() {
  int device = 0, major = 0, minor = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return 10 * major + minor;
}

// The stages this GPU can run; the others are named as skipped, never counted as passed.
inline std::vector<const fa::StageInfo*> runnable_stages() {
  std::vector<const fa::StageInfo*> stages;
  const int cc = device_compute_capability();
  for (const fa::StageInfo* stage : fa::registered_stages()) {
    if (cc >= stage->min_compute_capability) {
      stages.push_back(stage);
    } else {
      WARN("stage " << stage->name << " skipped: needs sm_" << stage->min_compute_capability << ", GPU is sm_"
                    << cc);
    }
  }
  REQUIRE_FALSE(stages.empty());
  return stages;
}

inline bool supports(const fa::StageInfo& stage, fa::DType dtype, int64_t head_dim) {
  return std::count(stage.dtypes.begin(), stage.dtypes.end(), dtype) > 0 &&
         std::count(stage.head_dims.begin(), stage.head_dims.end(), head_dim) > 0;
}

}  // namespace fa_test
