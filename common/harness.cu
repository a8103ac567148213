#include <algorithm>
#include <stdexcept>
#include <vector>

#include "cuda_check.h"
#include "harness.h"

namespace fa {

Problem::Problem(const ProblemConfig& config)
    : config_(config),
      scale_(config.softmax_scale != 0.0f ? config.softmax_scale : default_softmax_scale(config.head_dim)),
      q_(TensorLayout::make(config.batch, config.seq_q, config.heads, config.head_dim, config.layout),
         config.dtype),
      k_(TensorLayout::make(config.batch, config.seq_kv, config.heads, config.head_dim, config.layout),
         config.dtype),
      v_(TensorLayout::make(config.batch, config.seq_kv, config.heads, config.head_dim, config.layout),
         config.dtype),
      o_(TensorLayout::make(config.batch, config.seq_q, config.heads, config.head_dim, config.layout),
         config.dtype) {
  // Distinct seeds per tensor, so q, k and v never share values.
  DeviceTensor* inputs[3] = {&q_, &k_, &v_};
  const float stds[3] = {config.q_std, config.k_std, config.v_std};
  for (int i = 0; i < 3; ++i) {
    if (inputs[i]->layout().storage_elems != inputs[i]->layout().logical_elems()) inputs[i]->fill_bytes(0xFF);
    inputs[i]->fill_normal(config.seed * 3 + i, stds[i]);
  }
  poison_output();
}

AttentionParams Problem::params() const {
  AttentionParams p;
  p.q = q_.view();
  p.k = k_.view();
  p.v = v_.view();
  p.o = o_.view();
  p.batch = config_.batch;
  p.heads = config_.heads;
  p.seq_q = config_.seq_q;
  p.seq_kv = config_.seq_kv;
  p.head_dim = config_.head_dim;
  p.softmax_scale = scale_;
  return p;
}

const HostTensor& Problem::host_q() {
  if (!host_q_) host_q_ = std::make_unique<HostTensor>(q_.download());
  return *host_q_;
}
const HostTensor& Problem::host_k() {
  if (!host_k_) host_k_ = std::make_unique<HostTensor>(k_.download());
  return *host_k_;
}
const HostTensor& Problem::host_v() {
  if (!host_v_) host_v_ = std::make_unique<HostTensor>(v_.download());
  return *host_v_;
}

const ReferenceRows& Problem::reference(const CheckOptions& o) {
  const CheckOptions& c = reference_options_;
  const bool same = reference_ && c.full_check_max_rows == o.full_check_max_rows &&
                    c.sampled_rows_per_head == o.sampled_rows_per_head && c.seed == o.seed;
  if (!same) {
    reference_ =
        std::make_unique<ReferenceRows>(compute_reference_rows(host_q(), host_k(), host_v(), scale_, o));
    reference_options_ = o;
  }
  return *reference_;
}

void Problem::set_inputs(const HostTensor& q, const HostTensor& k, const HostTensor& v) {
  reference_.reset();
  q_.upload(q);
  k_.upload(k);
  v_.upload(v);
  host_q_ = std::make_unique<HostTensor>(q);
  host_k_ = std::make_unique<HostTensor>(k);
  host_v_ = std::make_unique<HostTensor>(v);
}

RunResult launch_and_download(const StageInfo& stage, Problem& problem) {
  RunResult result;
  problem.poison_output();
  result.status = stage.launch(problem.params(), nullptr);
  if (!result.status.ok()) return result;
  const cudaError_t sync = cudaDeviceSynchronize();
  if (sync != cudaSuccess) {
    result.status = Status::error(std::string(stage.name) + ": kernel failed: " + cudaGetErrorString(sync));
    return result;
  }
  result.output = problem.o().download();
  return result;
}

RunResult run_and_check(const StageInfo& stage, Problem& problem, const CheckOptions& options) {
  RunResult result = launch_and_download(stage, problem);
  if (!result.status.ok()) return result;
  result.check = check_against_reference(problem.reference(options), result.output, options);
  return result;
}

Timing time_stage(const StageInfo& stage, Problem& problem, int warmup, int reps) {
  const AttentionParams params = problem.params();
  for (int i = 0; i < warmup; ++i) {
    const Status s = stage.launch(params, nullptr);
    if (!s.ok()) throw std::runtime_error(s.message);
  }
  std::vector<cudaEvent_t> events(2 * reps);
  for (auto& e : events) FA_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < reps; ++i) {
    FA_CUDA_CHECK(cudaEventRecord(events[2 * i]));
    const Status s = stage.launch(params, nullptr);
    if (!s.ok()) throw std::runtime_error(s.message);
    FA_CUDA_CHECK(cudaEventRecord(events[2 * i + 1]));
  }
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<double> ms(reps);
  for (int i = 0; i < reps; ++i) {
    float elapsed = 0.0f;
    FA_CUDA_CHECK(cudaEventElapsedTime(&elapsed, events[2 * i], events[2 * i + 1]));
    ms[i] = elapsed;
  }
  for (auto& e : events) cudaEventDestroy(e);
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.reps = reps;
  t.min_ms = ms.front();
  t.median_ms = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
  return t;
}

}  // namespace fa
