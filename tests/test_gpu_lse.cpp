// The log-sum-exp output (GitHub issue 12): every registered stage that declares "lse" in its
// stage.json writes lse[b, h, i] = log(sum_j exp(softmax_scale * q_i . k_j)) over the keys query i
// sees, checked against the fp64 reference with the rule of checker.h, on lengths that are and
// are not tile multiples, seq_q != seq_kv both ways, causal (rows that see no key: exactly -inf)
// and not, with grouped-query attention, fp16/bf16 x head_dim 64/128, in the contiguous layout
// (packed LSE) and the mixed one (the LSE rows padded with poisoned gaps, so a write past a row
// shows).
//
// What would show a wrong LSE:
//   * q = 0: every score is 0 and the LSE of a row is exactly log(number of keys it sees), so a
//     key past seq_kv (zero-filled, score 0 too) or above the diagonal that leaks into the sum, or
//     one that the mask drops, moves it by about 1/n (the checker's tolerance is 1e-5 relative);
//   * large scores (k scaled by 8): the LSE is dominated by the row maximum, so taking the max of
//     the wrong scores, or forgetting the softmax scale or the natural log, fails by far;
//   * rows past seq_q: the poisoned LSE gaps and the unsampled rows must stay as they should.
// Every stage that does not declare lse must reject a non-null pointer and write neither O nor
// the LSE. Without a GPU this program exits with 77 (skipped).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/harness.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "general_stages.h"
#include "gpu_stages.h"

using fa::HostTensor;
using fa::Problem;
using fa::ProblemConfig;
using fa::StageInfo;

namespace {

std::vector<const StageInfo*> lse_stages() {
  return fa_test::stages_with(fa::kFeatureLse, "lse");
}

void check_lse_stages(const std::string& scenario, int64_t seq_q, int64_t seq_kv, bool causal,
                      const fa_test::EditInputs& edit = nullptr, int64_t kv_heads = 0) {
  fa_test::check_general_stages(
      lse_stages(), scenario, seq_q, seq_kv, causal, edit,
      [&](const fa::RunResult& run) {
        INFO("lse check: " << run.lse_check.summary());
        REQUIRE(run.lse_requested);
        CHECK(run.lse_check.passed);
      },
      [&](ProblemConfig& c) {
        c.lse = true;
        if (kv_heads > 0) {
          c.heads = 4;
          c.kv_heads = kv_heads;
        }
      });
}

void q_zero(Problem& problem) {
  HostTensor q = problem.host_q();
  const fa::TensorLayout& l = q.layout;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      for (int64_t h = 0; h < l.heads; ++h)
        for (int64_t d = 0; d < l.head_dim; ++d) q.set(b, s, h, d, 0.0f);
  problem.set_inputs(q, problem.host_k(), problem.host_v());
}

void k_times_8(Problem& problem) {
  HostTensor k = problem.host_k();
  const fa::TensorLayout& l = k.layout;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      for (int64_t h = 0; h < l.heads; ++h)
        for (int64_t d = 0; d < l.head_dim; ++d) k.set(b, s, h, d, 8.0f * k.at(b, s, h, d));
  problem.set_inputs(problem.host_q(), k, problem.host_v());
}

std::string shape_name(int64_t seq_q, int64_t seq_kv, bool causal) {
  return "seq_q " + std::to_string(seq_q) + ", seq_kv " + std::to_string(seq_kv) + (causal ? ", causal" : "");
}

}  // namespace

TEST_CASE("lse: seq_q == seq_kv from 1 to 4097, causal and not", "[gpu][lse]") {
  for (int64_t seq : {1, 7, 63, 64, 65, 127, 129, 1000, 4097})
    for (bool causal : {false, true}) check_lse_stages(shape_name(seq, seq, causal), seq, seq, causal);
}

TEST_CASE("lse: seq_q != seq_kv both ways; causal rows that see no key are -inf", "[gpu][lse]") {
  const std::pair<int64_t, int64_t> pairs[] = {{1, 65}, {65, 1}, {7, 129}, {129, 7}, {63, 1000}, {1000, 63}};
  for (const auto& [seq_q, seq_kv] : pairs)
    for (bool causal : {false, true})
      check_lse_stages(shape_name(seq_q, seq_kv, causal), seq_q, seq_kv, causal);
}

TEST_CASE("lse: every score 0 (q = 0), so each row's LSE is log(keys it sees)", "[gpu][lse]") {
  const std::pair<int64_t, int64_t> pairs[] = {{65, 65}, {129, 63}, {63, 129}, {200, 1000}};
  for (const auto& [seq_q, seq_kv] : pairs)
    for (bool causal : {false, true})
      check_lse_stages("q = 0, " + shape_name(seq_q, seq_kv, causal), seq_q, seq_kv, causal, q_zero);
}

TEST_CASE("lse: large scores (k scaled by 8), the LSE dominated by the row maximum", "[gpu][lse]") {
  for (bool causal : {false, true})
    check_lse_stages("k x 8, " + shape_name(129, 200, causal), 129, 200, causal, k_times_8);
}

TEST_CASE("lse: with grouped-query attention (4 query heads, 2 and 1 key/value heads)", "[gpu][lse][gqa]") {
  for (int64_t kv_heads : {2, 1})
    for (bool causal : {false, true})
      check_lse_stages("kv_heads " + std::to_string(kv_heads) + ", " + shape_name(200, 129, causal), 200, 129,
                       causal, nullptr, kv_heads);
}

TEST_CASE("lse: a stage that does not declare it rejects the pointer and writes nothing", "[gpu][lse]") {
  int rejecting = 0;
  for (const StageInfo* stage : fa_test::runnable_stages()) {
    if (stage->features & fa::kFeatureLse) continue;
    ProblemConfig config;
    config.batch = 1;
    config.heads = 2;
    config.seq_q = config.seq_kv = 2 * std::max(stage->block_q, stage->block_kv);
    config.head_dim = stage->head_dims.front();
    config.dtype = stage->dtypes.front();
    config.lse = true;
    Problem problem(config);
    INFO("stage " << stage->name);
    const fa::RunResult run = fa::launch_and_download(*stage, problem);
    REQUIRE_FALSE(run.status.ok());
    CHECK(run.status.message.find(stage->name) != std::string::npos);
    CHECK(run.status.message.find("\"lse\"") != std::string::npos);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const HostTensor o = problem.o().download();
    CHECK(std::all_of(o.raw.begin(), o.raw.end(), [](uint16_t x) { return x == 0xFFFF; }));
    const std::vector<float> lse = problem.lse().download();
    CHECK(std::all_of(lse.begin(), lse.end(), [](float x) {
      uint32_t bits;
      std::memcpy(&bits, &x, sizeof(bits));
      return bits == 0xFFFFFFFFu;
    }));
    ++rejecting;
  }
  if (rejecting == 0) fa_test::skip("no stage under test lacks lse");
}
