// The harness shared by the runner, the tests and the benchmark: make a problem on the GPU, run a
// stage on it, check the result against the fp64 reference, and time it with CUDA events.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "checker.h"
#include "params.h"
#include "tensor.h"

namespace fa {

// The layouts of a problem's four tensors, each its own. Giving every tensor different strides is
// what lets a test see a kernel that uses one tensor's stride for another's (equal strides would
// hide it).
struct ProblemLayout {
  LayoutSpec q, k, v, o;

  ProblemLayout() = default;
  // Implicit, so that one kind or spec still means "all four tensors laid out alike".
  ProblemLayout(LayoutSpec all) : q(all), k(all), v(all), o(all) {}
  ProblemLayout(LayoutKind all) : ProblemLayout(LayoutSpec(all)) {}

  // Every tensor different: q padded (gap unit 8), k head-major, v padded (gap unit 24), o
  // head-major with gaps (unit 16). Seq-major and head-major mix, the gaps differ, and o is not
  // shaped like q, so no stride of one tensor equals a stride of another on the shapes the tests
  // use (tests/test_gpu_stages.cpp checks it), and every gap holds NaN.
  static ProblemLayout mixed();
  bool all_same() const;
  std::string name() const;  // "padded(8)", or "q padded(8), k head-major, ..."
};

enum class AlibiKind { kNone, kPerHead, kPerBatchHead };

// The test and runner slopes: 2^(-8 (h + 1) / heads), ALiBi's geometric sequence (exact for a power
// of two heads), times b + 1 for per-(batch, head) slopes so that every batch differs.
float alibi_slope_value(int64_t b, int64_t h, int64_t heads, AlibiKind kind);

struct ProblemConfig {
  int64_t batch = 1, heads = 1, seq_q = 128, seq_kv = 128, head_dim = 64;
  // Key/value heads (AttentionParams::kv_heads); 0 means as many as heads. The problem allocates K
  // and V with this many heads and passes the same number to the launcher, so the two cannot disagree.
  int64_t kv_heads = 0;
  DType dtype = DType::kFloat16;
  ProblemLayout layout = LayoutKind::kContiguous;
  float softmax_scale = 0.0f;  // 0 means the default, 1/sqrt(head_dim)
  uint64_t seed = 1;
  float q_std = 1.0f, k_std = 1.0f, v_std = 1.0f;  // inputs are N(0, std^2)
  bool causal = false;  // AttentionParams::causal; the reference masks the same keys
  // Ask for the log-sum-exp output (AttentionParams::lse), [batch, heads, seq_q] fp32. Its rows are
  // packed when O's layout is not padded; with a padded O they have poisoned gaps after every row
  // (4 floats) and every batch (8 more), so a write past a row or a wrong stride shows.
  bool lse = false;
  // ALiBi (AttentionParams::alibi): none, one slope per head shared by the batch (batch stride 0),
  // or one per (batch, head) with a batch stride of heads + 1 (a NaN-poisoned gap after every batch's
  // row, so a kernel that strides wrong reads NaN). The slopes are alibi_slope_value's.
  AlibiKind alibi = AlibiKind::kNone;
  // AttentionParams::num_splits: 0 lets the stage choose; > 0 forces that many split-KV thread
  // blocks per query block (stages that declare "split_kv" only).
  int num_splits = 0;
};

// Device tensors for one attention call, filled with seeded normal data. Gaps in padded layouts
// are poisoned with NaN, so a kernel that reads them produces NaN and fails its check.
class Problem {
 public:
  explicit Problem(const ProblemConfig& config);

  const ProblemConfig& config() const { return config_; }
  int64_t kv_heads() const { return config_.kv_heads == 0 ? config_.heads : config_.kv_heads; }
  float softmax_scale() const { return scale_; }
  AttentionParams params() const;

  // Host copies of the inputs (downloaded once, kept for every check of this problem).
  const HostTensor& host_q();
  const HostTensor& host_k();
  const HostTensor& host_v();
  // Replace inputs with edited host copies (adversarial data); the cache follows.
  void set_inputs(const HostTensor& q, const HostTensor& k, const HostTensor& v);

  // O (and the LSE, if asked for) full of 0xFF bytes, which no kernel write produces.
  void poison_output() {
    o_.fill_bytes(0xFF);
    lse_.fill_bytes(0xFF);
  }

  // The fp64 reference of the rows `options` selects, computed once per problem and options and
  // shared by every stage that runs on it.
  const ReferenceRows& reference(const CheckOptions& options);

  DeviceTensor& q() { return q_; }
  DeviceTensor& k() { return k_; }
  DeviceTensor& v() { return v_; }
  DeviceTensor& o() { return o_; }
  // The LSE buffer and its layout (values empty) when config().lse, else empty.
  const DeviceFloats& lse() const { return lse_; }
  HostLse download_lse() const;
  // The slope of every (batch, head) at b * heads + h, as the reference takes them; empty without ALiBi.
  const std::vector<float>& alibi_slopes() const { return alibi_table_; }
  // Replaces the slopes: one per (batch, head), at b * heads + h; the same for every batch with
  // AlibiKind::kPerHead. Throws std::invalid_argument for a problem without ALiBi.
  void set_alibi_slopes(const std::vector<float>& table);

 private:
  ProblemConfig config_;
  float scale_;
  DeviceTensor q_, k_, v_, o_;
  LseOutput lse_view_;
  DeviceFloats lse_;
  AlibiSlopes alibi_view_;
  DeviceFloats alibi_;
  std::vector<float> alibi_table_;
  std::unique_ptr<HostTensor> host_q_, host_k_, host_v_;
  std::unique_ptr<ReferenceRows> reference_;
  CheckOptions reference_options_;
};

struct RunResult {
  Status status;      // the launcher's answer; if not ok, nothing ran and `check` is empty
  CheckResult check;  // valid when status.ok()
  HostTensor output;  // the output that was checked
  bool lse_requested = false;  // the problem asked for the LSE: lse and lse_check below are valid
  HostLse lse;
  CheckResult lse_check;
  bool passed() const { return status.ok() && check.passed && (!lse_requested || lse_check.passed); }
};

// Poison O (and the LSE), launch on `stream`, wait for that stream, download the output (and the
// LSE); `check` stays empty (for
// repeated launches, and for checks against inputs other than the problem's cached host copies).
RunResult launch_and_download(const StageInfo& stage, Problem& problem, cudaStream_t stream = nullptr);

// launch_and_download, then check every output element that the options ask for (and the LSE of the
// same rows, when the problem asks for it).
RunResult run_and_check(const StageInfo& stage, Problem& problem, const CheckOptions& options = {},
                        cudaStream_t stream = nullptr);

// The second half of launch_and_download, for a caller that launched by hand: given the launcher's
// answer, wait for `stream` and download O (a kernel error becomes the result's status).
RunResult finish_launch(const StageInfo& stage, Problem& problem, const Status& launched, cudaStream_t stream);

// Holds back the work enqueued on a stream after it until the host opens it: a one-thread kernel on
// the stream spins on a flag in mapped host memory. A test uses it to see where a launch went: while
// the gate is closed, a kernel launched on the gated stream cannot have run, and one launched
// anywhere else (the legacy default stream, say) can. The stream must be non-blocking
// (cudaStreamNonBlocking), so that the legacy default stream, which the test uses to look at the
// output, never waits for it; and nothing may synchronize the whole device while the gate is closed.
// The spin gives up after `timeout_s`, so a gate that is never opened (or a launcher that waits for
// the device) cannot hang a test: opened_in_time() then says false.
class StreamGate {
 public:
  StreamGate(cudaStream_t stream, double timeout_s = 20.0);
  ~StreamGate();  // opens the gate if it is still closed and waits for the stream
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void open();
  // Whether the host opened the gate before the spin gave up; valid once the stream has been waited for.
  bool opened_in_time() const;

 private:
  cudaStream_t stream_;
  volatile int* flags_ = nullptr;  // [0]: opened by the host, [1]: the spin timed out
  bool opened_ = false;
};

struct Timing {
  double median_ms = 0.0;
  double min_ms = 0.0;
  int reps = 0;
  std::vector<double> launch_ms;  // each timed launch, in the order they ran (a drift shows here)
};

// Warm-up launches, then `reps` launches each timed by its own pair of CUDA events; median and min.
Timing time_stage(const StageInfo& stage, Problem& problem, int warmup, int reps);

// FLOPs of one forward pass: two matmuls of 2 * seq_q * seq_kv * head_dim each, per batch and head.
// Causal counts the area of the seq_q x seq_kv score matrix on or below the bottom-right diagonal:
// half of it at seq_q == seq_kv, FlashAttention's benchmark convention (the exact count of visible
// (query, key) pairs, seq_q (seq_q + 1) / 2, is more by a factor 1 + 1/seq_q).
inline double attention_flops(const ProblemConfig& c) {
  const double q = static_cast<double>(c.seq_q), kv = static_cast<double>(c.seq_kv);
  const double pairs = !c.causal ? q * kv : q <= kv ? q * kv - q * q / 2 : kv * kv / 2;
  return 4.0 * static_cast<double>(c.batch) * c.heads * pairs * c.head_dim;
}

}  // namespace fa
