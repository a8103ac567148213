// Helpers shared by the GPU test programs: which registered stages this GPU can run, what each
// stage supports, and how a case that cannot run on this machine says so.
//
// Include it in exactly one source file of a test program (it registers a Catch2 listener), after
//   #define CATCH_CONFIG_EXTERNAL_INTERFACES   (Catch2 2.x compiles its listener interface only then)
//   #include "fa_catch.h"
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#if FA_CATCH2_MAJOR == 3
#include <catch2/reporters/catch_reporter_event_listener.hpp>
#include <catch2/reporters/catch_reporter_registrars.hpp>
#elif !defined(CATCH_CONFIG_EXTERNAL_INTERFACES)
#error "define CATCH_CONFIG_EXTERNAL_INTERFACES before including fa_catch.h (Catch2 2.x listeners need it)"
#endif

#include "common/cuda_check.h"
#include "common/registry.h"

namespace fa_test {

inline int device_compute_capability(int device) {
  int major = 0, minor = 0;
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return 10 * major + minor;
}

inline int device_compute_capability() {
  int device = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  return device_compute_capability(device);
}

// ------------------------------------------------------------------------------------------------
// Skips. Catch2 2.x has no "skipped" result: a test case that returns early passes. So every case
// (or part of one) that cannot run here goes through skip(), which WARNs at the place (Catch prints
// WARN messages even for passing tests), and at the end of the run the listener below prints
//
//   SKIPPED: <n> part(s) of this run did not run on this machine: <what>; <what>; ...
//
// as one line, where CTest's SKIP_REGULAR_EXPRESSION "SKIPPED:" (the same word gpu_main.cpp prints
// without a GPU) can turn it into a reported skip. That line is printed only when no assertion
// failed: CTest lets a matching SKIP_REGULAR_EXPRESSION win over a failing exit code, so a failed run
// says "NOTE: besides the failures, ..." instead and stays failed.
// ------------------------------------------------------------------------------------------------

inline std::set<std::string>& skipped_parts() {
  static std::set<std::string> parts;
  return parts;
}

inline void skip(const std::string& what) {
  WARN("not run: " << what);
  skipped_parts().insert(what);
}

#if FA_CATCH2_MAJOR == 3
using ListenerBase = Catch::EventListenerBase;
#else
using ListenerBase = Catch::TestEventListenerBase;
#endif

// Listeners hear of the end of the run before the reporter prints its totals, so this line comes
// just above them, on the standard output like the reporter's.
class SkipSummary : public ListenerBase {
 public:
  using ListenerBase::ListenerBase;
  void testRunEnded(const Catch::TestRunStats& stats) override {
    if (skipped_parts().empty()) return;
    std::string parts;
    for (const std::string& part : skipped_parts()) parts += (parts.empty() ? "" : "; ") + part;
    std::cout << (stats.totals.assertions.failed == 0 ? "SKIPPED: " : "NOTE: besides the failures, ")
              << skipped_parts().size() << " part(s) of this run did not run on this machine: " << parts
              << std::endl;
  }
};
CATCH_REGISTER_LISTENER(SkipSummary)

// ------------------------------------------------------------------------------------------------
// Stages
// ------------------------------------------------------------------------------------------------

// FA_TEST_STAGES=name,name,... limits a run to those stages (scripts/mutation_check.sh tests one
// mutated stage at a time). Every name must be a registered stage: a typo must not test nothing.
inline std::vector<const fa::StageInfo*> stages_under_test() {
  const char* env = std::getenv("FA_TEST_STAGES");
  if (env == nullptr || *env == '\0') return fa::registered_stages();
  std::vector<const fa::StageInfo*> stages;
  std::stringstream names(env);
  std::string name;
  while (std::getline(names, name, ',')) {
    if (name.empty()) continue;
    const fa::StageInfo* stage = fa::find_stage(name);
    INFO("FA_TEST_STAGES names " << name << ", which is not a registered stage");
    REQUIRE(stage != nullptr);
    stages.push_back(stage);
  }
  REQUIRE_FALSE(stages.empty());
  return stages;
}

// The stages under test that the current GPU runs (fa::stage_runs_on); the others are skipped by
// name, never counted as passed.
inline std::vector<const fa::StageInfo*> runnable_stages() {
  std::vector<const fa::StageInfo*> stages;
  const int cc = device_compute_capability();
  for (const fa::StageInfo* stage : stages_under_test()) {
    if (fa::stage_runs_on(*stage, cc)) {
      stages.push_back(stage);
    } else {
      std::ostringstream why;
      why << "stage " << stage->name << " (target " << stage->target << ") on a GPU of compute capability "
          << cc / 10 << "." << cc % 10;
      skip(why.str());
    }
  }
  REQUIRE_FALSE(stages.empty());
  return stages;
}

inline bool supports(const fa::StageInfo& stage, fa::DType dtype, int64_t head_dim) {
  return std::count(stage.dtypes.begin(), stage.dtypes.end(), dtype) > 0 &&
         std::count(stage.head_dims.begin(), stage.head_dims.end(), head_dim) > 0;
}

// A stream that neither waits for the legacy default stream nor makes it wait.
class NonBlockingStream {
 public:
  NonBlockingStream() { FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~NonBlockingStream() { cudaStreamDestroy(stream_); }
  NonBlockingStream(const NonBlockingStream&) = delete;
  NonBlockingStream& operator=(const NonBlockingStream&) = delete;
  operator cudaStream_t() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace fa_test
