// Every registered stage, on the GPU, against the fp64 reference (common/checker.h), for fp16 and
// bf16, head_dim 64 and 128, on shapes and data chosen to expose the usual bugs: batch and head
// strides (B, H > 1 with distinct data), seq_q != seq_kv, padded and head-major layouts, large
// logits, the row maximum in the first or the last K/V block (the online-softmax rescale), a
// non-default scale, constant and one-hot V columns. The output is poisoned before every launch,
// so an element a kernel never writes fails. Without a GPU this program exits with 77 (skipped).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/harness.h"
#include "common/registry.h"
#include "gpu_stages.h"

using fa::DType;
using fa::LayoutKind;
using fa::Problem;
using fa::ProblemConfig;
using fa::StageInfo;
using fa_test::runnable_stages;
using fa_test::supports;

namespace {

const char* layout_name(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kContiguous:
      return "contiguous";
    case LayoutKind::kPadded:
      return "padded";
    case LayoutKind::kHeadMajor:
      return "head-major";
  }
  return "?";
}

std::string describe(const ProblemConfig& c) {
  std::ostringstream out;
  out << fa::dtype_name(c.dtype) << ", D " << c.head_dim << ", B " << c.batch << ", H " << c.heads
      << ", seq_q " << c.seq_q << ", seq_kv " << c.seq_kv << ", " << layout_name(c.layout) << ", q/k std "
      << c.q_std << "/" << c.k_std;
  if (c.softmax_scale != 0.0f) out << ", scale " << c.softmax_scale;
  return out.str();
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
                    LayoutKind layout = LayoutKind::kContiguous) {
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
    };
    const Bad bad[] = {
        {"seq_q not a multiple of block_q", [](fa::AttentionParams& p) { p.seq_q -= 8; }},
        {"misaligned q", [](fa::AttentionParams& p) { p.q.data = static_cast<char*>(p.q.data) + 8; }},
        {"head_dim 96", [](fa::AttentionParams& p) { p.head_dim = 96; }},
        {"null o", [](fa::AttentionParams& p) { p.o.data = nullptr; }},
        {"NaN scale", [](fa::AttentionParams& p) { p.softmax_scale = NAN; }},
    };
    for (const Bad& b : bad) {
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
