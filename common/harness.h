// The harness shared by the runner, the tests and the benchmark: make a problem on the GPU, run a
// stage on it, check the result against the fp64 reference, and time it with CUDA events.
#pragma once

#include <cstdint>
#include <memory>

#include "checker.h"
#include "params.h"
#include "tensor.h"

namespace fa {

struct ProblemConfig {
  int64_t batch = 1, heads = 1, seq_q = 128, seq_kv = 128, head_dim = 64;
  DType dtype = DType::kFloat16;
  LayoutKind layout = LayoutKind::kContiguous;
  float softmax_scale = 0.0f;  // 0 means the default, 1/sqrt(head_dim)
  uint64_t seed = 1;
  float q_std = 1.0f, k_std = 1.0f, v_std = 1.0f;  // inputs are N(0, std^2)
};

// Device tensors for one attention call, filled with seeded normal data. Gaps in padded layouts
// are poisoned with NaN, so a kernel that reads them produces NaN and fails its check.
class Problem {
 public:
  explicit Problem(const ProblemConfig& config);

  const ProblemConfig& config() const { return config_; }
  float softmax_scale() const { return scale_; }
  AttentionParams params() const;

  // Host copies of the inputs (downloaded once, kept for every check of this problem).
  const HostTensor& host_q();
  const HostTensor& host_k();
  const HostTensor& host_v();
  // Replace inputs with edited host copies (adversarial data); the cache follows.
  void set_inputs(const HostTensor& q, const HostTensor& k, const HostTensor& v);

  void poison_output() { o_.fill_bytes(0xFF); }

  // The fp64 reference of the rows `options` selects, computed once per problem and options and
  // shared by every stage that runs on it.
  const ReferenceRows& reference(const CheckOptions& options);

  DeviceTensor& q() { return q_; }
  DeviceTensor& k() { return k_; }
  DeviceTensor& v() { return v_; }
  DeviceTensor& o() { return o_; }

 private:
  ProblemConfig config_;
  float scale_;
  DeviceTensor q_, k_, v_, o_;
  std::unique_ptr<HostTensor> host_q_, host_k_, host_v_;
  std::unique_ptr<ReferenceRows> reference_;
  CheckOptions reference_options_;
};

struct RunResult {
  Status status;      // the launcher's answer; if not ok, nothing ran and `check` is empty
  CheckResult check;  // valid when status.ok()
  HostTensor output;  // the output that was checked
  bool passed() const { return status.ok() && check.passed; }
};

// Poison O, launch, wait, download the output; `check` stays empty (for repeated launches, and for
// checks against inputs other than the problem's cached host copies).
RunResult launch_and_download(const StageInfo& stage, Problem& problem);

// launch_and_download, then check every output element that the options ask for.
RunResult run_and_check(const StageInfo& stage, Problem& problem, const CheckOptions& options = {});

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
  int reps = 0;
};

// Warm-up launches, then `reps` launches each timed by its own pair of CUDA events; median and min.
Timing time_stage(const StageInfo& stage, Problem& problem, int warmup, int reps);

// FLOPs of one forward pass: two matmuls of 2 * seq_q * seq_kv * head_dim each, per batch and head.
inline double attention_flops(const ProblemConfig& c) {
  return 4.0 * static_cast<double>(c.batch) * c.heads * c.seq_q * c.seq_kv * c.head_dim;
}

}  // namespace fa
