// The backward track (GitHub issue 42): every registered stage with a backward launcher
// (StageInfo::backward, common/backward.h) runs its forward with the LSE (the stage's own forward,
// AttentionParams::lse) and then its backward, and dQ, dK, dV are checked against the fp64
// reference with FlashAttention's rule for gradients (checker.h: check_gradient, twice the error
// of the same backward computed in the input dtype, per batch and head), on both dtypes and head
// dims, batch and heads > 1 with distinct data, seq_q != seq_kv both ways, one tensor layout per
// tensor, and large scores; the features a stage's backward declares (any length, causal, GQA) on
// shapes of their own, and the deterministic mode's repeatability (bit for bit over three runs). Every output buffer is poisoned (0xFF bytes) before the launch, so an
// element the backward never wrote fails, and so does a write into a gap between rows. A call the
// backward's validation rejects must launch nothing: the outputs keep their poison. Without a GPU
// this program exits with 77 (skipped).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common/backward.h"
#include "common/checker.h"
#include "common/cuda_check.h"
#include "common/harness.h"
#include "common/reference.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "general_stages.h"
#include "gpu_stages.h"

using fa::DType;
using fa::HostTensor;
using fa::Problem;
using fa::ProblemConfig;
using fa::StageInfo;

namespace {

std::vector<const StageInfo*> backward_stages() {
  std::vector<const StageInfo*> out;
  for (const StageInfo* stage : fa_test::runnable_stages())
    if (stage->backward != nullptr) out.push_back(stage);
  return out;
}

bool backward_supports(const StageInfo& stage, DType dtype, int64_t head_dim) {
  const fa::BackwardInfo& bwd = *stage.backward;
  return std::count(bwd.dtypes.begin(), bwd.dtypes.end(), dtype) > 0 &&
         std::count(bwd.head_dims.begin(), bwd.head_dims.end(), head_dim) > 0;
}

// The stages whose backward declares `feature` (stage.json's "backward": {"features": [...]}).
std::vector<const StageInfo*> backward_stages_with(unsigned feature) {
  std::vector<const StageInfo*> out;
  for (const StageInfo* stage : backward_stages())
    if ((stage->backward->features & feature) == feature) out.push_back(stage);
  return out;
}

// dO and the three gradients of one problem, in device memory, each with a layout of its own.
struct GradientBuffers {
  fa::DeviceTensor d_o, dq, dk, dv;
  GradientBuffers(const Problem& problem, const fa::LayoutSpec& d_o_layout, const fa::LayoutSpec& grad_layout,
                  uint64_t seed) {
    const ProblemConfig& c = problem.config();
    const int64_t kv_heads = problem.kv_heads();
    d_o = fa::DeviceTensor(fa::TensorLayout::make(c.batch, c.seq_q, c.heads, c.head_dim, d_o_layout), c.dtype);
    dq = fa::DeviceTensor(fa::TensorLayout::make(c.batch, c.seq_q, c.heads, c.head_dim, grad_layout), c.dtype);
    const fa::LayoutSpec kv_layout = grad_layout.padded() ? fa::LayoutSpec(grad_layout.kind, grad_layout.gap_elems + 8)
                                                          : grad_layout;
    dk = fa::DeviceTensor(fa::TensorLayout::make(c.batch, c.seq_kv, kv_heads, c.head_dim, kv_layout), c.dtype);
    dv = fa::DeviceTensor(fa::TensorLayout::make(c.batch, c.seq_kv, kv_heads, c.head_dim, grad_layout), c.dtype);
    d_o.fill_bytes(0xFF);  // gaps stay NaN: a kernel that reads them fails its check
    d_o.fill_normal(seed, 1.0f);
    poison();
  }
  void poison() {
    dq.fill_bytes(0xFF);
    dk.fill_bytes(0xFF);
    dv.fill_bytes(0xFF);
  }
};

fa::BackwardParams backward_params(Problem& problem, const GradientBuffers& g) {
  const fa::AttentionParams f = problem.params();
  fa::BackwardParams p;
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.o = f.o;
  p.d_o = g.d_o.view();
  p.dq = g.dq.view();
  p.dk = g.dk.view();
  p.dv = g.dv.view();
  p.lse.data = f.lse.data;
  p.lse.batch_stride = f.lse.batch_stride;
  p.lse.head_stride = f.lse.head_stride;
  p.batch = f.batch;
  p.heads = f.heads;
  p.kv_heads = f.kv_heads;
  p.seq_q = f.seq_q;
  p.seq_kv = f.seq_kv;
  p.head_dim = f.head_dim;
  p.softmax_scale = f.softmax_scale;
  p.causal = f.causal;
  return p;
}

std::string describe(const ProblemConfig& c) {
  return fa_test::describe_general(c);
}

// dQ, dK and dV of `problem` (its forward's O, given dO) against the fp64 reference, with the rule of
// check_gradient. CHECK, not REQUIRE, so that one run lists every failing configuration.
void check_gradients(Problem& problem, const HostTensor& d_o, const HostTensor& dq, const HostTensor& dk,
                     const HostTensor& dv) {
  const HostTensor& q = problem.host_q();
  const HostTensor& k = problem.host_k();
  const HostTensor& v = problem.host_v();
  const bool causal = problem.config().causal;
  const fa::BackwardFp64 ref =
      fa::reference_backward_fp64(fa::Fp64Tensor::from(q), fa::Fp64Tensor::from(k), fa::Fp64Tensor::from(v),
                                  fa::Fp64Tensor::from(d_o), problem.softmax_scale(), causal);
  const fa::BackwardLowp baseline =
      fa::baseline_backward_lowp(q, k, v, problem.o().download(), d_o, problem.softmax_scale(), causal);
  const fa::CheckResult dq_check = fa::check_gradient("dq", ref.dq, baseline.dq, dq, {}, &ref.dq_terms);
  const fa::CheckResult dk_check = fa::check_gradient("dk", ref.dk, baseline.dk, dk, {}, &ref.dk_terms);
  const fa::CheckResult dv_check = fa::check_gradient("dv", ref.dv, baseline.dv, dv, {}, &ref.dv_terms);
  INFO("dq: " << dq_check.summary());
  INFO("dk: " << dk_check.summary());
  INFO("dv: " << dv_check.summary());
  CHECK(dq_check.passed);
  CHECK(dk_check.passed);
  CHECK(dv_check.passed);
}

// The stage's forward (with the LSE), then its backward; dQ, dK, dV checked.
void run_forward_and_backward(const StageInfo& stage, Problem& problem, const fa::LayoutSpec& d_o_layout,
                              const fa::LayoutSpec& grad_layout, const std::string& scenario) {
  INFO(scenario << " | stage " << stage.name << " | " << describe(problem.config()));
  problem.poison_output();
  const fa::Status forward = stage.launch(problem.params(), nullptr);
  INFO("forward: " << (forward.ok() ? std::string("ok") : forward.message));
  REQUIRE(forward.ok());
  FA_CUDA_CHECK(cudaDeviceSynchronize());

  GradientBuffers g(problem, d_o_layout, grad_layout, problem.config().seed + 1000);
  const fa::Status backward = stage.backward->launch(backward_params(problem, g), nullptr);
  INFO("backward: " << (backward.ok() ? std::string("ok") : backward.message));
  REQUIRE(backward.ok());
  FA_CUDA_CHECK(cudaDeviceSynchronize());
  FA_CUDA_CHECK(cudaGetLastError());

  check_gradients(problem, g.d_o.download(), g.dq.download(), g.dk.download(), g.dv.download());
}

ProblemConfig shape(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, DType dtype, int head_dim) {
  ProblemConfig c;
  c.batch = batch;
  c.heads = heads;
  c.kv_heads = heads;
  c.seq_q = seq_q;
  c.seq_kv = seq_kv;
  c.dtype = dtype;
  c.head_dim = head_dim;
  c.lse = true;
  c.seed = static_cast<uint64_t>(seq_q * 7919 + seq_kv * 31 + heads * 3 + batch + head_dim);
  return c;
}

}  // namespace

TEST_CASE("backward: dQ, dK, dV against the fp64 reference, both dtypes and head dims, seq_q != seq_kv",
          "[gpu][backward]") {
  const std::vector<const StageInfo*> stages = backward_stages();
  REQUIRE_FALSE(stages.empty());
  struct Sizes {
    int64_t batch, heads, seq_q, seq_kv;
  };
  // batch x heads > 1 everywhere (distinct data per head shows stride bugs); one query block and
  // one K/V block; more query blocks than K/V blocks and the other way round.
  const Sizes sizes[] = {{2, 3, 128, 128}, {1, 2, 64, 64}, {2, 2, 64, 256}, {1, 3, 320, 64}, {2, 2, 192, 320}};
  for (const StageInfo* stage : stages)
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      for (int head_dim : {64, 128}) {
        if (!backward_supports(*stage, dtype, head_dim)) continue;
        for (const Sizes& s : sizes) {
          Problem problem(shape(s.batch, s.heads, s.seq_q, s.seq_kv, dtype, head_dim));
          run_forward_and_backward(*stage, problem, fa::LayoutKind::kContiguous, fa::LayoutKind::kContiguous,
                                   "contiguous");
        }
      }
}

TEST_CASE("backward: every tensor its own strides (padded and head-major, poisoned gaps)", "[gpu][backward]") {
  for (const StageInfo* stage : backward_stages())
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      for (int head_dim : {64, 128}) {
        if (!backward_supports(*stage, dtype, head_dim)) continue;
        ProblemConfig config = shape(2, 3, 128, 192, dtype, head_dim);
        config.layout = fa::ProblemLayout::mixed();
        Problem problem(config);
        run_forward_and_backward(*stage, problem, fa::LayoutSpec(fa::LayoutKind::kPadded, 16),
                                 fa::LayoutSpec(fa::LayoutKind::kHeadMajorPadded, 8), "mixed layout");
      }
}

TEST_CASE("backward: large scores (k scaled by 8: a peaked softmax) and a non-default scale", "[gpu][backward]") {
  for (const StageInfo* stage : backward_stages())
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      for (int head_dim : {64, 128}) {
        if (!backward_supports(*stage, dtype, head_dim)) continue;
        Problem peaked(shape(1, 2, 128, 256, dtype, head_dim));
        fa_test::k_times_8(peaked);
        run_forward_and_backward(*stage, peaked, fa::LayoutKind::kContiguous, fa::LayoutKind::kContiguous,
                                 "k x 8");
        ProblemConfig config = shape(2, 2, 64, 128, dtype, head_dim);
        config.softmax_scale = 0.3f;
        Problem scaled(config);
        run_forward_and_backward(*stage, scaled, fa::LayoutKind::kContiguous, fa::LayoutKind::kContiguous,
                                 "softmax_scale 0.3");
      }
}

// Shapes of one feature, on every stage whose backward declares it, both dtypes and head dims.
struct FeatureShape {
  int64_t batch, heads, kv_heads, seq_q, seq_kv;
  bool causal;
};
void run_feature_shapes(unsigned feature, const char* scenario, const std::vector<FeatureShape>& shapes) {
  const std::vector<const StageInfo*> stages = backward_stages_with(feature);
  INFO("the stages whose backward declares " << scenario);
  REQUIRE_FALSE(stages.empty());  // the backward track has one from the stage that adds it on
  for (const StageInfo* stage : stages)
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      for (int head_dim : {64, 128}) {
        if (!backward_supports(*stage, dtype, head_dim)) continue;
        for (const FeatureShape& s : shapes) {
          // A shape that also needs GQA or causal runs where the stage's backward has that too.
          const unsigned features = stage->backward->features;
          if ((s.kv_heads != s.heads && (features & fa::kFeatureGqa) == 0) ||
              (s.causal && (features & fa::kFeatureCausal) == 0))
            continue;
          ProblemConfig config = shape(s.batch, s.heads, s.seq_q, s.seq_kv, dtype, head_dim);
          config.kv_heads = s.kv_heads;
          config.causal = s.causal;
          Problem problem(config);
          run_forward_and_backward(*stage, problem, fa::LayoutKind::kContiguous, fa::LayoutKind::kContiguous,
                                   scenario);
        }
      }
}

TEST_CASE("backward any_length: lengths that are not tile multiples, a single row, a single key", "[gpu][backward]") {
  // Query blocks of 64 and K/V blocks of up to 128 overhanging both ends; one query row; one key;
  // a length one past a block; a K/V block whose overhang cuts a warp's 16 keys.
  run_feature_shapes(fa::kFeatureAnyLength, "any_length",
                     {{2, 3, 1, 1, 1, false},
                      {1, 2, 1, 200, 200, false},
                      {2, 2, 2, 100, 37, false},
                      {1, 3, 3, 65, 129, false},
                      {2, 2, 2, 257, 71, false},
                      {1, 2, 2, 130, 300, false}});
}

TEST_CASE("backward causal: bottom-right diagonal, seq_q == seq_kv and both ways, rows that see no key",
          "[gpu][backward]") {
  // seq_q > seq_kv: the first seq_q - seq_kv rows see no key (O = 0, zero dQ); seq_q < seq_kv: every
  // row sees the keys up to its diagonal; blocks above it skipped, blocks it crosses masked.
  run_feature_shapes(fa::kFeatureCausal, "causal",
                     {{2, 2, 2, 128, 128, true},
                      {1, 3, 3, 256, 256, true},
                      {2, 2, 2, 200, 200, true},
                      {1, 2, 2, 64, 320, true},
                      {2, 2, 2, 320, 64, true},
                      {1, 2, 2, 333, 97, true},
                      {1, 2, 2, 1, 129, true},
                      {2, 2, 2, 77, 300, true}});
}

TEST_CASE("backward gqa: dK and dV summed over the query heads of a group (GQA and MQA)", "[gpu][backward]") {
  run_feature_shapes(fa::kFeatureGqa, "gqa",
                     {{2, 4, 2, 128, 128, false},
                      {1, 6, 1, 192, 256, false},
                      {2, 8, 2, 100, 300, false},
                      {1, 4, 1, 256, 256, true},
                      {2, 6, 3, 150, 70, true}});
}

TEST_CASE("backward deterministic: bitwise the same dQ, dK, dV on every run, and correct", "[gpu][backward]") {
  // Six K/V blocks per query block (six thread blocks add to the same dQ rows), GQA, a length that
  // is not a tile multiple, with and without causal; three runs, compared bit for bit.
  const std::vector<const StageInfo*> stages = backward_stages_with(fa::kFeatureDeterministic);
  REQUIRE_FALSE(stages.empty());
  for (const StageInfo* stage : stages)
    for (DType dtype : {DType::kFloat16, DType::kBFloat16})
      for (int head_dim : {64, 128}) {
        if (!backward_supports(*stage, dtype, head_dim)) continue;
        for (bool causal : {false, true}) {
          ProblemConfig config = shape(1, 4, 700, 700, dtype, head_dim);
          config.kv_heads = (stage->backward->features & fa::kFeatureGqa) != 0 ? 2 : 4;
          config.causal = causal;
          Problem problem(config);
          INFO("stage " << stage->name << " | " << describe(problem.config()));
          REQUIRE(stage->launch(problem.params(), nullptr).ok());
          FA_CUDA_CHECK(cudaDeviceSynchronize());
          GradientBuffers g(problem, fa::LayoutKind::kContiguous, fa::LayoutKind::kContiguous, config.seed + 7);
          fa::BackwardParams p = backward_params(problem, g);
          p.deterministic = true;
          std::vector<HostTensor> first;
          for (int run = 0; run < 3; ++run) {
            g.poison();
            const fa::Status s = stage->backward->launch(p, nullptr);
            INFO("run " << run << ": " << s.message);
            REQUIRE(s.ok());
            FA_CUDA_CHECK(cudaDeviceSynchronize());
            const HostTensor runs[3] = {g.dq.download(), g.dk.download(), g.dv.download()};
            if (run == 0) {
              first.assign(runs, runs + 3);
              continue;
            }
            for (int t = 0; t < 3; ++t) {
              INFO("tensor " << "qkv"[t] << " of run " << run << " against run 0");
              CHECK(runs[t].raw == first[t].raw);
            }
          }
          // And the gradients are right (the first run's).
          check_gradients(problem, g.d_o.download(), first[0], first[1], first[2]);
        }
      }
}

TEST_CASE("backward: a rejected call launches nothing (the outputs keep their poison)", "[gpu][backward]") {
  for (const StageInfo* stage : backward_stages()) {
    const fa::BackwardInfo& bwd = *stage->backward;
    Problem problem(shape(1, 2, 2 * bwd.block_q, 2 * bwd.block_kv, bwd.dtypes.front(), bwd.head_dims.front()));
    REQUIRE(stage->launch(problem.params(), nullptr).ok());
    FA_CUDA_CHECK(cudaDeviceSynchronize());
    GradientBuffers g(problem, fa::LayoutKind::kContiguous, fa::LayoutKind::kContiguous, 5);
    const auto expect_rejected = [&](const char* what, const fa::BackwardParams& p) {
      g.poison();
      const fa::Status s = bwd.launch(p, nullptr);
      FA_CUDA_CHECK(cudaDeviceSynchronize());
      INFO(stage->name << ": " << what << ": " << s.message);
      CHECK_FALSE(s.ok());
      for (const fa::DeviceTensor* t : {&g.dq, &g.dk, &g.dv}) {
        const HostTensor out = t->download();
        CHECK(std::all_of(out.raw.begin(), out.raw.end(), [](uint16_t x) { return x == 0xFFFF; }));
      }
    };
    fa::BackwardParams p = backward_params(problem, g);
    p.lse.data = nullptr;
    expect_rejected("no LSE", p);
    p = backward_params(problem, g);
    p.seq_kv = bwd.block_kv + 1;  // shorter than the tensors: nothing is read past them
    if ((bwd.features & fa::kFeatureAnyLength) == 0) expect_rejected("seq_kv not a block multiple", p);
    p = backward_params(problem, g);
    p.causal = true;
    if ((bwd.features & fa::kFeatureCausal) == 0) expect_rejected("causal", p);
    p = backward_params(problem, g);
    p.deterministic = true;
    if ((bwd.features & fa::kFeatureDeterministic) == 0) expect_rejected("deterministic", p);
    p = backward_params(problem, g);
    p.kv_heads = 1;  // heads is 2: one key/value head for both
    if ((bwd.features & fa::kFeatureGqa) == 0) expect_rejected("kv_heads < heads", p);
    p = backward_params(problem, g);
    p.head_dim = 96;
    expect_rejected("head_dim 96", p);
    p = backward_params(problem, g);
    p.dk.seq_stride += 4;
    expect_rejected("misaligned dk stride", p);
  }
}
