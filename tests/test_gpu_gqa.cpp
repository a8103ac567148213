// Grouped-query and multi-query attention (GitHub issue 12): every registered stage that declares
// "gqa" in its stage.json, with 8 query heads and 8, 4, 2 or 1 key/value heads (group sizes 1, 2,
// 4 and 8 = heads: multi-query), on lengths that are and are not tile multiples, causal and not,
// fp16/bf16 x head_dim 64/128, in the contiguous and the mixed layout, against the fp64 reference
// (which reads key/value head h / (heads / kv_heads) for query head h).
//
// What would show a wrong key/value head:
//   * random data: every head of K and V holds different values, so a query head that reads
//     another group's head fails the reference check;
//   * "each key/value head's V is its number": V[b, j, g, :] = g + 1 for every key j, so a row's
//     output is exactly the number of the head it read (softmax weights sum to 1), whatever the
//     scores; h % kv_heads instead of h / group, or a batch offset taken from the query heads,
//     shows as another integer;
//   * the mixed layout: K is head-major, so the head stride is the large one there and a head index
//     off by one group lands in another head's rows.
// Every stage that does not declare gqa must reject kv_heads != heads with an error naming the
// feature and write nothing. Without a GPU this program exits with 77 (skipped); without a stage
// under test (FA_TEST_STAGES) that declares gqa, its cases say so in a "SKIPPED:" line.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/harness.h"
#include "common/reference.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "general_stages.h"
#include "gpu_stages.h"

using fa::HostTensor;
using fa::Problem;
using fa::ProblemConfig;
using fa::StageInfo;

namespace {

constexpr int64_t kHeads = 8;
constexpr int64_t kKvHeads[] = {8, 4, 2, 1};  // group sizes 1, 2, 4, 8 (multi-query)

std::vector<const StageInfo*> gqa_stages() {
  return fa_test::stages_with(fa::kFeatureGqa, "gqa");
}

void check_gqa_stages(const std::string& scenario, int64_t seq_q, int64_t seq_kv, bool causal,
                      int64_t kv_heads, const fa_test::EditInputs& edit = nullptr,
                      const fa_test::CheckOutput& check_output = nullptr) {
  fa_test::check_general_stages(
      gqa_stages(), scenario, seq_q, seq_kv, causal, edit,
      [&](const fa::RunResult& run) {
        if (check_output) check_output(run);
      },
      [&](ProblemConfig& c) {
        c.batch = 2;
        c.heads = kHeads;
        c.kv_heads = kv_heads;
      });
}

void v_holds_its_head_number(Problem& problem) {
  const HostTensor& q = problem.host_q();
  const HostTensor& k = problem.host_k();
  HostTensor v = problem.host_v();
  const fa::TensorLayout& l = v.layout;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t j = 0; j < l.seq; ++j)
      for (int64_t g = 0; g < l.heads; ++g)
        for (int64_t d = 0; d < l.head_dim; ++d) v.set(b, j, g, d, static_cast<float>(g + 1));
  problem.set_inputs(q, k, v);
}

// Every row that sees a key holds, to the nearest integer, the number of its query head's key/value
// head + 1 (the probabilities are rounded to 16 bits before P V, so the weights sum to 1 within the
// dtype's unit roundoff, 2^-8 at most: at most 0.04 off for head numbers up to 8); a causal row that
// sees no key holds 0.
void rows_hold_their_head_number(const fa::RunResult& run, int64_t kv_heads, int64_t seq_kv, bool causal) {
  const fa::TensorLayout& l = run.output.layout;
  int64_t wrong = 0;
  std::string first;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t s = 0; s < l.seq; ++s) {
        const bool sees_keys = fa::visible_keys(s, l.seq, seq_kv, causal) > 0;
        const long expected = sees_keys ? static_cast<long>(fa::kv_head_of(h, l.heads, kv_heads) + 1) : 0;
        for (int64_t d = 0; d < l.head_dim; ++d) {
          const float got = run.output.at(b, s, h, d);
          if (std::isfinite(got) && std::lround(got) == expected) continue;
          if (wrong++ == 0)
            first = "(b, s, h, d) = (" + std::to_string(b) + ", " + std::to_string(s) + ", " +
                    std::to_string(h) + ", " + std::to_string(d) + "): " + std::to_string(got) +
                    ", expected " + std::to_string(expected);
        }
      }
  INFO("first wrong element: " << first);
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("gqa: group sizes 1, 2, 4 and 8 (multi-query), any length, causal and not", "[gpu][gqa]") {
  const std::pair<int64_t, int64_t> shapes[] = {{1, 1}, {64, 64}, {65, 129}, {129, 65}, {127, 300}};
  for (int64_t kv_heads : kKvHeads)
    for (bool causal : {false, true})
      for (const auto& [seq_q, seq_kv] : shapes)
        check_gqa_stages("kv_heads " + std::to_string(kv_heads) + ", seq_q " + std::to_string(seq_q) +
                             ", seq_kv " + std::to_string(seq_kv) + (causal ? ", causal" : ""),
                         seq_q, seq_kv, causal, kv_heads);
}

TEST_CASE("gqa: each key/value head's V is its number, so the output names the head each row read",
          "[gpu][gqa]") {
  for (int64_t kv_heads : kKvHeads)
    for (bool causal : {false, true})
      check_gqa_stages("V = key/value head number, kv_heads " + std::to_string(kv_heads) +
                           (causal ? ", causal, seq_q 200 > seq_kv 129" : ", seq_q 200, seq_kv 129"),
                       200, 129, causal, kv_heads, v_holds_its_head_number,
                       [kv_heads, causal](const fa::RunResult& run) {
                         rows_hold_their_head_number(run, kv_heads, 129, causal);
                       });
}

TEST_CASE("gqa: a stage that does not declare it rejects kv_heads != heads and writes nothing",
          "[gpu][gqa]") {
  int rejecting = 0;
  for (const StageInfo* stage : fa_test::runnable_stages()) {
    if (stage->features & fa::kFeatureGqa) continue;
    ProblemConfig config;
    config.batch = 1;
    config.heads = 4;
    config.kv_heads = 2;
    config.seq_q = config.seq_kv = 2 * std::max(stage->block_q, stage->block_kv);
    config.head_dim = stage->head_dims.front();
    config.dtype = stage->dtypes.front();
    Problem problem(config);
    INFO("stage " << stage->name);
    const fa::RunResult run = fa::launch_and_download(*stage, problem);
    REQUIRE_FALSE(run.status.ok());
    CHECK(run.status.message.find(stage->name) != std::string::npos);
    CHECK(run.status.message.find("\"gqa\"") != std::string::npos);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const HostTensor untouched = problem.o().download();
    CHECK(std::all_of(untouched.raw.begin(), untouched.raw.end(), [](uint16_t x) { return x == 0xFFFF; }));
    ++rejecting;
  }
  if (rejecting == 0) fa_test::skip("no stage under test lacks gqa");
}
