// ALiBi (GitHub issue 12): every registered stage that declares "alibi" in its stage.json, with
// -slope * |i + seq_kv - seq_q - j| added to the scaled score of query i and key j, slopes per head
// (shared by the batch: batch stride 0) and per (batch, head) (a NaN gap after every batch's row),
// causal and not, on lengths that are and are not tile multiples with seq_q != seq_kv both ways,
// with the LSE checked too, fp16/bf16 x head_dim 64/128, in the contiguous and the mixed layout,
// against the fp64 reference.
//
// What would show a wrong bias:
//   * q = 0 with a steep slope (8 per unit of distance): every score is the bias alone, each row's
//     weight sits on its diagonal key (e^-8 on each neighbour), so a distance off by one, a
//     top-left instead of a bottom-right alignment, or a bias taken after the scale, moves every
//     row to another key's value;
//   * negative slopes: the farthest keys weigh most, so a bias added after the row maximum (or
//     clamped) overflows or misses them;
//   * GQA (4 query heads, 2 key/value heads) with per-(batch, head) slopes: a slope read by the
//     key/value head or with the wrong batch stride is another head's (or NaN);
//   * the LSE includes the bias: it is checked against the reference's biased log-sum-exp;
//   * a softmax scale of 0.5 or 0.05: a slope converted to raw-score units with 1/sqrt(head_dim)
//     instead of the caller's scale is off by a factor of 4 or more.
// Every stage that does not declare alibi must reject slopes and write nothing. Without a GPU this
// program exits with 77 (skipped).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/harness.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "general_stages.h"
#include "gpu_stages.h"

using fa::AlibiKind;
using fa::HostTensor;
using fa::Problem;
using fa::ProblemConfig;
using fa::StageInfo;

namespace {

std::vector<const StageInfo*> alibi_stages() {
  return fa_test::stages_with(fa::kFeatureAlibi, "alibi");
}

struct AlibiCase {
  AlibiKind kind = AlibiKind::kPerHead;
  int64_t heads = 0, kv_heads = 0;  // 0: general_shape's
  float softmax_scale = 0.0f;       // 0: the default, 1/sqrt(head_dim)
};

void check_alibi_stages(const std::string& scenario, int64_t seq_q, int64_t seq_kv, bool causal,
                        const AlibiCase& alibi, const fa_test::EditInputs& edit = nullptr) {
  fa_test::check_general_stages(
      alibi_stages(), scenario, seq_q, seq_kv, causal, edit,
      [&](const fa::RunResult& run) {
        INFO("lse check: " << run.lse_check.summary());
        CHECK(run.lse_check.passed);
      },
      [&](ProblemConfig& c) {
        c.alibi = alibi.kind;
        c.lse = true;
        c.softmax_scale = alibi.softmax_scale;
        if (alibi.heads > 0) {
          c.heads = alibi.heads;
          c.kv_heads = alibi.kv_heads;
        }
      });
}

std::string shape_name(int64_t seq_q, int64_t seq_kv, bool causal, AlibiKind kind) {
  return "seq_q " + std::to_string(seq_q) + ", seq_kv " + std::to_string(seq_kv) +
         (causal ? ", causal" : "") +
         (kind == AlibiKind::kPerHead ? ", slopes [heads]" : ", slopes [batch, heads]");
}

// Every slope of the problem set to `slope` (the same for every batch, so per-head problems take it).
fa_test::EditInputs slopes_all(float slope, bool zero_q) {
  return [slope, zero_q](Problem& problem) {
    problem.set_alibi_slopes(std::vector<float>(problem.alibi_slopes().size(), slope));
    if (!zero_q) return;
    HostTensor q = problem.host_q();
    const fa::TensorLayout& l = q.layout;
    for (int64_t b = 0; b < l.batch; ++b)
      for (int64_t s = 0; s < l.seq; ++s)
        for (int64_t h = 0; h < l.heads; ++h)
          for (int64_t d = 0; d < l.head_dim; ++d) q.set(b, s, h, d, 0.0f);
    problem.set_inputs(q, problem.host_k(), problem.host_v());
  };
}

}  // namespace

TEST_CASE("alibi: lengths 1 to 1000, seq_q != seq_kv both ways, causal and not, both kinds of slopes",
          "[gpu][alibi]") {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1},     {64, 64},   {65, 65}, {129, 129}, {1000, 1000},
                                                {63, 1000}, {1000, 63}, {7, 129}, {129, 7}};
  for (AlibiKind kind : {AlibiKind::kPerHead, AlibiKind::kPerBatchHead})
    for (bool causal : {false, true})
      for (const auto& [seq_q, seq_kv] : shapes)
        check_alibi_stages(shape_name(seq_q, seq_kv, causal, kind), seq_q, seq_kv, causal, {kind});
}

TEST_CASE("alibi: q = 0 and slope 8, so every row's weight sits on its diagonal key", "[gpu][alibi]") {
  const std::pair<int64_t, int64_t> shapes[] = {{129, 129}, {65, 200}, {200, 65}};
  for (bool causal : {false, true})
    for (const auto& [seq_q, seq_kv] : shapes)
      check_alibi_stages("q = 0, slope 8, " + shape_name(seq_q, seq_kv, causal, AlibiKind::kPerHead), seq_q,
                         seq_kv, causal, {}, slopes_all(8.0f, true));
}

TEST_CASE("alibi: negative slopes, the farthest keys weigh most", "[gpu][alibi]") {
  for (bool causal : {false, true})
    check_alibi_stages("slope -0.05, " + shape_name(300, 300, causal, AlibiKind::kPerHead), 300, 300, causal,
                       {}, slopes_all(-0.05f, false));
}

TEST_CASE("alibi: K/V blocks wholly left and right of the diagonal, where ampere_18_alibi_mma adds the bias on the tensor cores",
          "[gpu][alibi]") {
  // 640: query blocks whose K/V blocks lie on both sides; 333 / 1000: the diagonal offset moves them
  // (and puts every block of some query blocks on one side). q = 0 with slope 8 leaves only the
  // bias, so a column or row term off by one key moves the row's weight; slope 3000 is past what
  // fp16 parts of the column term hold (the per-score path); -0.05 weighs the far blocks most.
  const std::pair<int64_t, int64_t> shapes[] = {{640, 640}, {333, 1000}, {1000, 333}};
  for (bool causal : {false, true})
    for (const auto& [seq_q, seq_kv] : shapes) {
      const std::string shape = shape_name(seq_q, seq_kv, causal, AlibiKind::kPerHead);
      check_alibi_stages("q = 0, slope 8, " + shape, seq_q, seq_kv, causal, {}, slopes_all(8.0f, true));
      check_alibi_stages("q = 0, slope 3000, " + shape, seq_q, seq_kv, causal, {}, slopes_all(3000.0f, true));
      check_alibi_stages("slope -0.05, " + shape, seq_q, seq_kv, causal, {}, slopes_all(-0.05f, false));
    }
}

TEST_CASE("alibi: with grouped-query attention, the slope is the query head's", "[gpu][alibi][gqa]") {
  for (bool causal : {false, true})
    check_alibi_stages(
        "4 query heads, 2 key/value heads, " + shape_name(200, 129, causal, AlibiKind::kPerBatchHead), 200,
        129, causal, {AlibiKind::kPerBatchHead, 4, 2});
}

// The slope is in units of the scaled score (the bias is added after softmax_scale): a kernel that
// adds it to the raw scores must divide it by the caller's scale, and one that divides by
// 1/sqrt(head_dim) instead is right only at the default scale, which every case above uses. The
// reference adds -slope |distance| to softmax_scale q . k with the caller's scale
// (common/reference.cpp). The LSE, checked too, includes the bias at that scale.
TEST_CASE("alibi: the caller's softmax scale, 0.5 and 0.05, slopes per (batch, head), with the LSE",
          "[gpu][alibi]") {
  const std::pair<int64_t, int64_t> shapes[] = {{200, 129}, {129, 333}};
  for (float scale : {0.5f, 0.05f})
    for (bool causal : {false, true})
      for (const auto& [seq_q, seq_kv] : shapes)
        check_alibi_stages("softmax scale " + std::to_string(scale) + ", " +
                               shape_name(seq_q, seq_kv, causal, AlibiKind::kPerBatchHead),
                           seq_q, seq_kv, causal, {AlibiKind::kPerBatchHead, 0, 0, scale});
}

TEST_CASE("alibi: a stage that does not declare it rejects slopes and writes nothing", "[gpu][alibi]") {
  int rejecting = 0;
  for (const StageInfo* stage : fa_test::runnable_stages()) {
    if (stage->features & fa::kFeatureAlibi) continue;
    ProblemConfig config;
    config.batch = 1;
    config.heads = 2;
    config.seq_q = config.seq_kv = 2 * std::max(stage->block_q, stage->block_kv);
    config.head_dim = stage->head_dims.front();
    config.dtype = stage->dtypes.front();
    config.alibi = AlibiKind::kPerHead;
    Problem problem(config);
    INFO("stage " << stage->name);
    const fa::RunResult run = fa::launch_and_download(*stage, problem);
    REQUIRE_FALSE(run.status.ok());
    CHECK(run.status.message.find(stage->name) != std::string::npos);
    CHECK(run.status.message.find("\"alibi\"") != std::string::npos);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const HostTensor o = problem.o().download();
    CHECK(std::all_of(o.raw.begin(), o.raw.end(), [](uint16_t x) { return x == 0xFFFF; }));
    ++rejecting;
  }
  if (rejecting == 0) fa_test::skip("no stage under test lacks alibi");
}
