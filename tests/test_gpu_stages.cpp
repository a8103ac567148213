// Every registered stage, on the GPU, against the fp64 reference (common/checker.h), for fp16 and
// bf16, head_dim 64 and 128, on shapes and data chosen to expose the usual bugs: batch and head
// strides (B, H > 1 with distinct data), seq_q != seq_kv, a single query block and a single K/V
// block, padded and head-major layouts, every tensor in a layout of its own (so a stride taken from
// the wrong tensor shows), large logits, the row maximum in the first or the last K/V block (the
// online-softmax rescale), a non-default scale, constant and one-hot V columns; launches on
// non-default streams, on two streams at once, and on a second GPU; and that every registered
// stage runs on a GPU of compute capability 9.0. The output is poisoned before every launch, so an
// element a kernel never writes fails. Without a GPU this program exits with 77 (skipped); a part
// that cannot run on this machine (a second GPU, a stage for another architecture) is named in a
// "SKIPPED:" line at the end (tests/gpu_stages.h).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/harness.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "gpu_stages.h"

using fa::DType;
using fa::LayoutKind;
using fa::Problem;
using fa::ProblemConfig;
using fa::ProblemLayout;
using fa::StageInfo;
using fa_test::runnable_stages;
using fa_test::supports;

namespace {

std::string describe(const ProblemConfig& c) {
  std::ostringstream out;
  out << fa::dtype_name(c.dtype) << ", D " << c.head_dim << ", B " << c.batch << ", H " << c.heads
      << ", seq_q " << c.seq_q << ", seq_kv " << c.seq_kv << ", " << c.layout.name() << ", q/k std "
      << c.q_std << "/" << c.k_std;
  if (c.softmax_scale != 0.0f) out << ", scale " << c.softmax_scale;
  return out.str();
}

// The first stride value that two of q, k, v and o share, or "" if there is none. Where every
// stride is different, a kernel that takes one tensor's stride for another's addresses other
// elements (or the NaN-poisoned gaps) and fails its check; equal strides would hide it.
std::string shared_stride(const fa::AttentionParams& p) {
  const fa::TensorView* views[4] = {&p.q, &p.k, &p.v, &p.o};
  const char* const tensor_names[4] = {"q", "k", "v", "o"};
  const char* const stride_names[3] = {"batch", "seq", "head"};
  const auto stride = [](const fa::TensorView& t, int i) {
    return i == 0 ? t.batch_stride : i == 1 ? t.seq_stride : t.head_stride;
  };
  for (int a = 0; a < 4; ++a)
    for (int b = a + 1; b < 4; ++b)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 3; ++j)
          if (stride(*views[a], i) == stride(*views[b], j)) {
            std::ostringstream out;
            out << tensor_names[a] << "." << stride_names[i] << "_stride == " << tensor_names[b] << "."
                << stride_names[j] << "_stride == " << stride(*views[a], i);
            return out.str();
          }
  return "";
}

void require_distinct_strides(const Problem& problem) {
  const std::string shared = shared_stride(problem.params());
  INFO("layout " << problem.config().layout.name() << ": " << shared);
  REQUIRE(shared.empty());
}

using EditInputs = std::function<void(Problem&)>;

// Runs every stage on `base` for fp16/bf16 x head_dim 64/128 (one problem per combination, shared
// by all stages) and checks each result. CHECK, not REQUIRE, so one run lists every failing stage.
void check_all_stages(const std::string& scenario, const ProblemConfig& base,
                      const EditInputs& edit = nullptr, bool check_repeatable = false) {
  const std::vector<const StageInfo*> stages = runnable_stages();
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (int head_dim : {64, 128}) {
      ProblemConfig config = base;
      config.dtype = dtype;
      config.head_dim = head_dim;
      Problem problem(config);
      if (!config.layout.all_same()) require_distinct_strides(problem);
      if (edit) edit(problem);
      for (const StageInfo* stage : stages) {
        if (!supports(*stage, dtype, head_dim)) continue;
        const fa::RunResult run = fa::run_and_check(*stage, problem);
        INFO(scenario << " | stage " << stage->name << " | " << describe(config));
        INFO("launch: " << (run.status.ok() ? std::string("ok") : run.status.message));
        INFO("check: " << run.check.summary());
        CHECK(run.passed());
        if (check_repeatable && run.passed()) {
          // Same inputs, same launch configuration: the output must be the same, bit for bit.
          const fa::RunResult again = fa::run_and_check(*stage, problem);
          CHECK(again.passed());
          CHECK(again.output.raw == run.output.raw);
        }
      }
    }
  }
}

ProblemConfig shape(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv,
                    const ProblemLayout& layout = LayoutKind::kContiguous) {
  ProblemConfig c;
  c.batch = batch;
  c.heads = heads;
  c.seq_q = seq_q;
  c.seq_kv = seq_kv;
  c.layout = layout;
  c.seed = static_cast<uint64_t>(batch * 1000003 + heads * 1009 + seq_q * 31 + seq_kv);
  return c;
}

// Makes key `key` every query's maximum, in every (batch, head): q >= 0 (abs) and
// k[key] = (c, ..., c) with c = 2 k_std, so its score c * |q|_1 (about 1.6 k_std |q|_2 sqrt(D))
// is far above the largest random key's (about 3.3 k_std |q|_2).
EditInputs plant_row_max_at_key(int64_t key) {
  return [key](Problem& problem) {
    fa::HostTensor q = problem.host_q(), k = problem.host_k(), v = problem.host_v();
    const fa::TensorLayout& ql = q.layout;
    const float planted = 2.0f * problem.config().k_std;
    for (int64_t b = 0; b < ql.batch; ++b)
      for (int64_t s = 0; s < ql.seq; ++s)
        for (int64_t h = 0; h < ql.heads; ++h)
          for (int64_t d = 0; d < ql.head_dim; ++d) q.set(b, s, h, d, std::fabs(q.at(b, s, h, d)));
    for (int64_t b = 0; b < ql.batch; ++b)
      for (int64_t h = 0; h < ql.heads; ++h)
        for (int64_t d = 0; d < ql.head_dim; ++d) k.set(b, key, h, d, planted);
    problem.set_inputs(q, k, v);
  };
}

// V column 0 constant (the output there is that constant), column 1 one-hot on one key (the output
// is that key's probability), column 2 a large constant (normalization errors show as offsets).
void constant_and_one_hot_v(Problem& problem) {
  const fa::HostTensor q = problem.host_q(), k = problem.host_k();
  fa::HostTensor v = problem.host_v();
  const fa::TensorLayout& l = v.layout;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      for (int64_t h = 0; h < l.heads; ++h) {
        v.set(b, s, h, 0, 1.0f);
        v.set(b, s, h, 1, s == l.seq / 3 ? 1.0f : 0.0f);
        v.set(b, s, h, 2, -24.0f);
      }
  problem.set_inputs(q, k, v);
}


// Elements of a downloaded output that no longer hold the 0xFFFF poison.
int64_t written_elements(const fa::HostTensor& o) {
  return static_cast<int64_t>(o.raw.size()) - std::count(o.raw.begin(), o.raw.end(), uint16_t{0xFFFF});
}

// A problem of the given shape in the mixed layout, in the given dtype and head_dim where the stage
// supports them (every stage today supports all of them), else in the stage's first ones.
ProblemConfig stage_problem(const StageInfo& stage, DType dtype, int64_t head_dim, int64_t batch, int64_t heads,
                            int64_t seq_q, int64_t seq_kv) {
  ProblemConfig config = shape(batch, heads, seq_q, seq_kv, ProblemLayout::mixed());
  config.dtype = supports(stage, dtype, head_dim) ? dtype : stage.dtypes.front();
  config.head_dim = supports(stage, dtype, head_dim) ? head_dim : stage.head_dims.front();
  return config;
}

}  // namespace

TEST_CASE("batch and heads > 1, seq_q != seq_kv, and repeatable output", "[gpu]") {
  check_all_stages("B=2 H=3 seq_q=256 seq_kv=384", shape(2, 3, 256, 384), nullptr, /*check_repeatable=*/true);
}

TEST_CASE("few queries, many keys", "[gpu]") {
  check_all_stages("seq_q=128 seq_kv=1024", shape(1, 2, 128, 1024));
}

TEST_CASE("more queries than keys", "[gpu]") {
  check_all_stages("seq_q=512 seq_kv=128", shape(2, 1, 512, 128));
}

TEST_CASE("padded layout: strides with gaps, and the gaps of O stay untouched", "[gpu]") {
  check_all_stages("padded", shape(2, 3, 128, 256, LayoutKind::kPadded));
}

TEST_CASE("head-major layout", "[gpu]") {
  check_all_stages("head-major", shape(2, 3, 256, 128, LayoutKind::kHeadMajor));
}

TEST_CASE("large-magnitude logits", "[gpu]") {
  ProblemConfig config = shape(2, 2, 128, 512);
  config.q_std = 5.0f;
  config.k_std = 5.0f;  // scores ~ N(0, 25^2) at the default scale
  check_all_stages("q_std = k_std = 5", config);
}

TEST_CASE("row maximum in the first K/V block", "[gpu]") {
  check_all_stages("row max at key 0", shape(2, 2, 128, 512), plant_row_max_at_key(0));
}

TEST_CASE("row maximum in the last K/V block", "[gpu]") {
  check_all_stages("row max at the last key", shape(2, 2, 128, 512), plant_row_max_at_key(511));
}

TEST_CASE("row maximum in the last K/V block with large logits", "[gpu]") {
  ProblemConfig config = shape(1, 2, 128, 1024);
  config.q_std = 4.0f;
  config.k_std = 4.0f;
  check_all_stages("row max at the last key, q_std = k_std = 4", config, plant_row_max_at_key(1023));
}

TEST_CASE("non-default softmax scale", "[gpu]") {
  for (float scale : {0.5f, 0.01f}) {  // sharper than the default, and nearly uniform
    ProblemConfig config = shape(2, 2, 128, 256);
    config.softmax_scale = scale;
    check_all_stages("softmax_scale " + std::to_string(scale), config);
  }
}

TEST_CASE("constant and one-hot V columns", "[gpu]") {
  check_all_stages("constant / one-hot V columns", shape(1, 3, 128, 384), constant_and_one_hot_v);
}

TEST_CASE("invalid inputs on the GPU return an error and leave the poisoned output untouched", "[gpu]") {
  for (const StageInfo* stage : runnable_stages()) {
    ProblemConfig config = shape(1, 2, 256, 256);
    config.head_dim = 128;
    Problem problem(config);
    problem.poison_output();
    struct Bad {
      const char* name;
      std::function<void(fa::AttentionParams&)> apply;
      bool needs_tile_multiples = false;  // invalid only for stages without the any_length feature
    };
    const Bad bad[] = {
        {"seq_q not a multiple of block_q", [](fa::AttentionParams& p) { p.seq_q -= 8; }, true},
        {"misaligned q", [](fa::AttentionParams& p) { p.q.data = static_cast<char*>(p.q.data) + 8; }},
        {"head_dim 96", [](fa::AttentionParams& p) { p.head_dim = 96; }},
        {"null o", [](fa::AttentionParams& p) { p.o.data = nullptr; }},
        {"NaN scale", [](fa::AttentionParams& p) { p.softmax_scale = NAN; }},
    };
    for (const Bad& b : bad) {
      if (b.needs_tile_multiples && (stage->features & fa::kFeatureAnyLength)) continue;
      fa::AttentionParams params = problem.params();
      b.apply(params);
      const fa::Status status = stage->launch(params, nullptr);
      INFO("stage " << stage->name << ": " << b.name);
      CHECK_FALSE(status.ok());
    }
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    const fa::HostTensor o = problem.o().download();
    const auto untouched = std::count(o.raw.begin(), o.raw.end(), uint16_t{0xFFFF});
    INFO("stage " << stage->name);
    CHECK(untouched == static_cast<long>(o.raw.size()));
  }
}

TEST_CASE("each tensor its own layout: q padded, k head-major, v padded with other gaps, o head-major with gaps",
          "[gpu][layout]") {
  // With one layout for all four tensors, using K's seq stride for V, V's head stride for K or Q's
  // batch stride for O computes the same addresses and passes. Here every stride differs (checked),
  // so each of those reads other rows or the NaN-poisoned gaps, or writes O's rows elsewhere.
  check_all_stages("mixed layouts", shape(2, 3, 256, 384, ProblemLayout::mixed()), nullptr,
                   /*check_repeatable=*/true);
  check_all_stages("mixed layouts, seq_q == seq_kv", shape(3, 2, 128, 128, ProblemLayout::mixed()));
}

TEST_CASE("a single query block and a single K/V block: seq_q == block_q, seq_kv == block_kv", "[gpu]") {
  // The main loop runs once: no rescale, and a pipelined stage's prologue and epilogue meet.
  for (const StageInfo* stage : runnable_stages()) {
    for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
      for (int head_dim : {64, 128}) {
        if (!supports(*stage, dtype, head_dim)) continue;
        const ProblemConfig config =
            stage_problem(*stage, dtype, head_dim, 2, 3, stage->block_q, stage->block_kv);
        Problem problem(config);
        require_distinct_strides(problem);
        const fa::RunResult run = fa::run_and_check(*stage, problem);
        INFO("stage " << stage->name << " | " << describe(config));
        INFO("launch: " << (run.status.ok() ? std::string("ok") : run.status.message));
        INFO("check: " << run.check.summary());
        CHECK(run.passed());
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Streams. A launcher must put its kernel on the stream it is given. The tests hold that stream
// (non-blocking) with a StreamGate (common/harness.h) while the stage is launched on it, and copy O
// to the host through the legacy default stream, which does not wait for a non-blocking stream. A
// launcher that honours its stream has not run yet: O still holds only the poison. One that ignores
// it launches on the legacy default stream (`<<<grid, block, smem>>>` without a stream), and the
// copy, queued behind that kernel on the same stream, sees the rows it wrote (a launch on the
// per-thread default stream, a blocking stream, shows the same way). A launcher that waits for the
// device stalls until the gate times out (opened_in_time() is false). Then the gate opens and the
// result must pass its check.
//
// Before a gate closes, each stage runs once, unheld, on the same stream and problem (and is
// checked): the first launch of a kernel may load its module, and loading may synchronize the
// context, which a closed gate would stall until its timeout.
// ------------------------------------------------------------------------------------------------

TEST_CASE("a launch goes to the non-default stream it is given", "[gpu][stream]") {
  for (const StageInfo* stage : runnable_stages()) {
    const ProblemConfig config = stage_problem(*stage, DType::kFloat16, 128, 2, 3, 256, 384);
    INFO("stage " << stage->name << " | " << describe(config));
    fa_test::NonBlockingStream stream;
    Problem problem(config);
    const fa::RunResult unheld = fa::run_and_check(*stage, problem, {}, stream);
    INFO("unheld run: " << (unheld.status.ok() ? unheld.check.summary() : unheld.status.message));
    REQUIRE(unheld.passed());

    problem.poison_output();
    fa::StreamGate gate(stream);
    const fa::Status launched = stage->launch(problem.params(), stream);
    INFO("launch: " << (launched.ok() ? std::string("ok") : launched.message));
    REQUIRE(launched.ok());
    {
      INFO("O was written while its stream was held: the kernel did not go to the stream it was given");
      CHECK(written_elements(problem.o().download()) == 0);
    }
    gate.open();
    const fa::RunResult run = fa::finish_launch(*stage, problem, launched, stream);
    CHECK(gate.opened_in_time());
    REQUIRE(run.status.ok());
    const fa::CheckResult check = fa::check_against_reference(problem.reference({}), run.output);
    INFO("check: " << check.summary());
    CHECK(check.passed);
  }
}

TEST_CASE("two problems on two streams at once: each launch goes to its own stream", "[gpu][stream]") {
  for (const StageInfo* stage : runnable_stages()) {
    const ProblemConfig config_a = stage_problem(*stage, DType::kFloat16, 128, 2, 3, 256, 384);
    ProblemConfig config_b = stage_problem(*stage, DType::kBFloat16, 64, 3, 2, 128, 256);
    config_b.layout = LayoutKind::kHeadMajor;
    config_b.seed += 7;
    INFO("stage " << stage->name << " | problem A: " << describe(config_a) << " | problem B: "
                  << describe(config_b));
    fa_test::NonBlockingStream stream_a, stream_b;
    Problem a(config_a), b(config_b);
    REQUIRE(fa::run_and_check(*stage, a, {}, stream_a).passed());
    REQUIRE(fa::run_and_check(*stage, b, {}, stream_b).passed());

    a.poison_output();
    b.poison_output();
    fa::StreamGate gate_a(stream_a), gate_b(stream_b);
    const fa::Status launched_a = stage->launch(a.params(), stream_a);
    const fa::Status launched_b = stage->launch(b.params(), stream_b);
    REQUIRE(launched_a.ok());
    REQUIRE(launched_b.ok());
    CHECK(written_elements(a.o().download()) == 0);
    CHECK(written_elements(b.o().download()) == 0);

    // B's stream first. A launcher that sends both kernels to one stream (the first it saw, say)
    // leaves B unwritten here, or writes A while A's stream is still held.
    gate_b.open();
    const fa::RunResult run_b = fa::finish_launch(*stage, b, launched_b, stream_b);
    CHECK(gate_b.opened_in_time());
    REQUIRE(run_b.status.ok());
    const fa::CheckResult check_b = fa::check_against_reference(b.reference({}), run_b.output);
    INFO("problem B on stream B: " << check_b.summary());
    CHECK(check_b.passed);
    {
      INFO("A's O was written while A's stream was still held");
      CHECK(written_elements(a.o().download()) == 0);
    }

    gate_a.open();
    const fa::RunResult run_a = fa::finish_launch(*stage, a, launched_a, stream_a);
    CHECK(gate_a.opened_in_time());
    REQUIRE(run_a.status.ok());
    const fa::CheckResult check_a = fa::check_against_reference(a.reference({}), run_a.output);
    INFO("problem A on stream A: " << check_a.summary());
    CHECK(check_a.passed);
  }
}

// ------------------------------------------------------------------------------------------------
// Which stages run, and on which device
// ------------------------------------------------------------------------------------------------

TEST_CASE("every stage runs where its target says; on compute capability 9.0, every registered stage",
          "[gpu][registry]") {
  const int cc = fa_test::device_compute_capability();
  for (const StageInfo* stage : fa::registered_stages()) {
    const std::string target = stage->target;
    const bool ampere = target == "sm_80", hopper = target == "sm_90a";
    INFO("stage " << stage->name << ": target " << target << ", minimum compute capability "
                  << stage->min_compute_capability << (stage->arch_specific ? ", arch-specific" : ""));
    // Bounded declarations: two targets, each with its one minimum, so a declaration cannot move a
    // stage off the GPUs its machine code runs on (a minimum of 100 would skip it on the H200).
    CHECK((ampere || hopper));
    CHECK(stage->min_compute_capability == (hopper ? 90 : 80));
    CHECK(stage->arch_specific == hopper);
    CHECK(fa::stage_runs_on(*stage, cc) == (hopper ? cc == 90 : cc >= 80));
  }
  if (cc == 90) {
    // sm_80 code runs on 9.0, and sm_90a code is made for it: here a skipped stage is an untested one.
    CHECK(runnable_stages().size() == fa_test::stages_under_test().size());
  } else {
    fa_test::skip("the every-stage-runs check (needs compute capability 9.0; this GPU is " +
                  std::to_string(cc / 10) + "." + std::to_string(cc % 10) + ")");
  }
}

namespace {

// Makes `device` current, and the previous device current again when it goes out of scope.
class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    FA_CUDA_CHECK(cudaGetDevice(&previous_));
    FA_CUDA_CHECK(cudaSetDevice(device));
  }
  ~CurrentDevice() { cudaSetDevice(previous_); }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

TEST_CASE("every stage on device 0, then on device 1, then on device 0 again", "[gpu][multi_gpu]") {
  // What a launcher configures (the dynamic shared-memory opt-in of cudaFuncSetAttribute, say)
  // belongs to the current device: a launcher that does it once per process fails on the second.
  int devices = 0;
  FA_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices < 2) {
    fa_test::skip("the multi-GPU test (needs 2 CUDA devices; this machine has " + std::to_string(devices) + ")");
    return;
  }
  for (const StageInfo* stage : fa_test::stages_under_test()) {
    for (int device : {0, 1, 0}) {
      const CurrentDevice current(device);
      const int cc = fa_test::device_compute_capability(device);
      if (!fa::stage_runs_on(*stage, cc)) {
        fa_test::skip("stage " + std::string(stage->name) + " on device " + std::to_string(device) +
                      " (compute capability " + std::to_string(cc) + ")");
        continue;
      }
      for (const auto& [dtype, head_dim] : {std::pair{DType::kFloat16, 128}, std::pair{DType::kBFloat16, 64}}) {
        // Built while `device` is current: its buffers live there.
        const ProblemConfig config =
            stage_problem(*stage, dtype, head_dim, 2, 3, 2 * stage->block_q, 3 * stage->block_kv);
        Problem problem(config);
        const fa::RunResult run = fa::run_and_check(*stage, problem);
        INFO("stage " << stage->name << " on device " << device << " | " << describe(config));
        INFO("launch: " << (run.status.ok() ? std::string("ok") : run.status.message));
        INFO("check: " << run.check.summary());
        CHECK(run.passed());
      }
    }
  }
}
