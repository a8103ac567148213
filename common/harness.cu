#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "cuda_check.h"
#include "harness.h"

namespace fa {

ProblemLayout ProblemLayout::mixed() {
  ProblemLayout layout;
  layout.q = LayoutSpec(LayoutKind::kPadded, 8);
  layout.k = LayoutSpec(LayoutKind::kHeadMajor);
  layout.v = LayoutSpec(LayoutKind::kPadded, 24);
  layout.o = LayoutSpec(LayoutKind::kHeadMajorPadded, 16);
  return layout;
}

bool ProblemLayout::all_same() const {
  const auto same = [](const LayoutSpec& a, const LayoutSpec& b) {
    return a.kind == b.kind && (!a.padded() || a.gap_elems == b.gap_elems);
  };
  return same(q, k) && same(q, v) && same(q, o);
}

std::string ProblemLayout::name() const {
  if (all_same()) return q.name();
  return "q " + q.name() + ", k " + k.name() + ", v " + v.name() + ", o " + o.name();
}

Problem::Problem(const ProblemConfig& config)
    : config_(config),
      scale_(config.softmax_scale != 0.0f ? config.softmax_scale : default_softmax_scale(config.head_dim)),
      q_(TensorLayout::make(config.batch, config.seq_q, config.heads, config.head_dim, config.layout.q),
         config.dtype),
      k_(TensorLayout::make(config.batch, config.seq_kv, kv_heads(), config.head_dim, config.layout.k),
         config.dtype),
      v_(TensorLayout::make(config.batch, config.seq_kv, kv_heads(), config.head_dim, config.layout.v),
         config.dtype),
      o_(TensorLayout::make(config.batch, config.seq_q, config.heads, config.head_dim, config.layout.o),
         config.dtype) {
  if (config.lse) {
    const int64_t row_gap = config.layout.o.padded() ? 4 : 0, batch_gap = config.layout.o.padded() ? 8 : 0;
    lse_view_.head_stride = config.seq_q + row_gap;
    lse_view_.batch_stride = config.heads * lse_view_.head_stride + batch_gap;
    lse_ = DeviceFloats(config.batch * lse_view_.batch_stride);
    lse_view_.data = lse_.data();
  }
  if (config.alibi != AlibiKind::kNone) {
    std::vector<float> table(static_cast<size_t>(config.batch * config.heads));
    for (int64_t b = 0; b < config.batch; ++b)
      for (int64_t h = 0; h < config.heads; ++h)
        table[static_cast<size_t>(b * config.heads + h)] =
            alibi_slope_value(b, h, config.heads, config.alibi);
    set_alibi_slopes(table);
  }
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
  p.kv_heads = kv_heads();
  p.seq_q = config_.seq_q;
  p.seq_kv = config_.seq_kv;
  p.head_dim = config_.head_dim;
  p.softmax_scale = scale_;
  p.causal = config_.causal;
  p.lse = lse_view_;
  p.alibi = alibi_view_;
  p.num_splits = config_.num_splits;
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
    reference_ = std::make_unique<ReferenceRows>(
        compute_reference_rows(host_q(), host_k(), host_v(), scale_, o, config_.causal, alibi_table_));
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

RunResult finish_launch(const StageInfo& stage, Problem& problem, const Status& launched, cudaStream_t stream) {
  RunResult result;
  result.status = launched;
  if (!result.status.ok()) return result;
  const cudaError_t sync = cudaStreamSynchronize(stream);
  if (sync != cudaSuccess) {
    result.status = Status::error(std::string(stage.name) + ": kernel failed: " + cudaGetErrorString(sync));
    return result;
  }
  result.output = problem.o().download();
  if (problem.config().lse) {
    result.lse_requested = true;
    result.lse = problem.download_lse();
  }
  return result;
}

float alibi_slope_value(int64_t b, int64_t h, int64_t heads, AlibiKind kind) {
  if (kind == AlibiKind::kNone) return 0.0f;
  const float per_head = std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(heads));
  return kind == AlibiKind::kPerHead ? per_head : per_head * static_cast<float>(b + 1);
}

void Problem::set_alibi_slopes(const std::vector<float>& table) {
  const int64_t batch = config_.batch, heads = config_.heads;
  if (config_.alibi == AlibiKind::kNone || table.size() != static_cast<size_t>(batch * heads))
    throw std::invalid_argument(
        "set_alibi_slopes: the problem has no ALiBi, or not one slope per (batch, head)");
  const bool shared = config_.alibi == AlibiKind::kPerHead;
  for (int64_t b = 1; shared && b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      if (table[static_cast<size_t>(b * heads + h)] != table[static_cast<size_t>(h)])
        throw std::invalid_argument("set_alibi_slopes: per-head slopes must be the same for every batch");
  alibi_view_.batch_stride = shared ? 0 : heads + 1;
  const int64_t rows = shared ? 1 : batch;
  std::vector<float> device(static_cast<size_t>(rows * (shared ? heads : heads + 1)),
                            std::numeric_limits<float>::quiet_NaN());
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t h = 0; h < heads; ++h)
      device[static_cast<size_t>(b * alibi_view_.batch_stride + h)] =
          table[static_cast<size_t>(b * heads + h)];
  if (alibi_.count() != static_cast<int64_t>(device.size()))
    alibi_ = DeviceFloats(static_cast<int64_t>(device.size()));
  alibi_.upload(device);
  alibi_view_.data = alibi_.data();
  alibi_table_ = table;
  reference_.reset();
}

HostLse Problem::download_lse() const {
  HostLse host;
  host.batch = config_.batch;
  host.heads = config_.heads;
  host.seq = config_.seq_q;
  host.batch_stride = lse_view_.batch_stride;
  host.head_stride = lse_view_.head_stride;
  host.values = lse_.download();
  return host;
}

RunResult launch_and_download(const StageInfo& stage, Problem& problem, cudaStream_t stream) {
  problem.poison_output();
  return finish_launch(stage, problem, stage.launch(problem.params(), stream), stream);
}

RunResult run_and_check(const StageInfo& stage, Problem& problem, const CheckOptions& options,
                        cudaStream_t stream) {
  RunResult result = launch_and_download(stage, problem, stream);
  if (!result.status.ok()) return result;
  result.check = check_against_reference(problem.reference(options), result.output, options);
  if (result.lse_requested)
    result.lse_check = check_lse_against_reference(problem.reference(options), result.lse, options);
  return result;
}

namespace {

// Spins until the host sets flags[0] or `timeout_ns` of the GPU's global timer have passed; in the
// second case it sets flags[1]. __nanosleep keeps the polling of host memory over the bus sparse.
__global__ void stream_gate_kernel(volatile int* flags, unsigned long long timeout_ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (flags[0] == 0) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) {
      flags[1] = 1;
      break;
    }
    __nanosleep(10000);
  }
  __threadfence_system();
}

}  // namespace

StreamGate::StreamGate(cudaStream_t stream, double timeout_s) : stream_(stream) {
  unsigned int stream_flags = 0;
  FA_CUDA_CHECK(cudaStreamGetFlags(stream, &stream_flags));
  if (stream == nullptr || !(stream_flags & cudaStreamNonBlocking)) {
    throw std::invalid_argument(
        "StreamGate: the gated stream must be created with cudaStreamNonBlocking, or the legacy default "
        "stream would wait for the closed gate");
  }
  void* flags = nullptr;
  FA_CUDA_CHECK(cudaHostAlloc(&flags, 2 * sizeof(int), cudaHostAllocMapped));
  flags_ = static_cast<volatile int*>(flags);
  flags_[0] = 0;
  flags_[1] = 0;
  void* device_flags = nullptr;
  FA_CUDA_CHECK(cudaHostGetDevicePointer(&device_flags, flags, 0));
  stream_gate_kernel<<<1, 1, 0, stream>>>(static_cast<volatile int*>(device_flags),
                                          static_cast<unsigned long long>(timeout_s * 1e9));
  FA_CUDA_CHECK(cudaGetLastError());
}

void StreamGate::open() {
  flags_[0] = 1;
  opened_ = true;
}

bool StreamGate::opened_in_time() const {
  return opened_ && flags_[1] == 0;
}

StreamGate::~StreamGate() {
  if (!opened_) open();
  cudaStreamSynchronize(stream_);  // the kernel must be done with the flags before they are freed
  cudaFreeHost(const_cast<int*>(flags_));
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
  Timing t;
  t.launch_ms = ms;
  std::sort(ms.begin(), ms.end());
  t.reps = reps;
  t.min_ms = ms.front();
  t.median_ms = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
  return t;
}

}  // namespace fa
