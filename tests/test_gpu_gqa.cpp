// Grouped-query and multi-query attention (GitHub issue 12): every registered stage that declares
// "gqa" in its stage.json, with 8 query heads and 8, 4, 2 or 1 key/value heads (group sizes 1, 2,
// 4 and 8 = heads: multi-query), groups of 3, and 32 query heads on one, on lengths that are and
// are not tile multiples, causal and not, fp16/bf16 x head_dim 64/128, in the contiguous and the
// mixed layout, against the fp64 reference (which reads key/value head h / (heads / kv_heads) for
// query head h).
//
// What would show a wrong key/value head:
//   * random data: every head of K and V holds different values, so a query head that reads
//     another group's head fails the reference check;
//   * "each key/value head's V is its number": V[b, j, g, :] = g + 1 for every key j, so a row's
//     output is exactly the number of the head it read (softmax weights sum to 1), whatever the
//     scores; h % kv_heads instead of h / group, or a batch offset taken from the query heads,
//     shows as another integer;
//   * the mixed layout: K is head-major, so the head stride is the large one there and a head index
//     off by one group lands in another head's rows;
//   * groups of 3 (6 query heads on 2, 24 on 8): a key/value head computed with a shift by
//     log2(group) instead of a division is right for every power-of-two group and wrong here;
//   * many tiles per persistent block (batch 4, 32 or 48 query heads), and the 192-row tile of the
//     Hopper stages at head_dim 64 (batch 3, 33 query heads: the launcher's choice is asserted).
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
                      const fa_test::CheckOutput& check_output = nullptr, int64_t heads = kHeads,
                      int64_t batch = 2) {
  fa_test::check_general_stages(
      gqa_stages(), scenario, seq_q, seq_kv, causal, edit,
      [&](const fa::RunResult& run) {
        if (check_output) check_output(run);
      },
      [&](ProblemConfig& c) {
        c.batch = batch;
        c.heads = heads;
        c.kv_heads = kv_heads;
      });
}

std::string group_name(int64_t heads, int64_t kv_heads) {
  return std::to_string(heads) + " query heads on " + std::to_string(kv_heads) + " key/value heads";
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

// Groups of 3 query heads (6 on 2, 24 on 8): a key/value head computed with a shift by log2(group)
// instead of a division is right for every power-of-two group above and wrong here. Multi-query with
// 8 and 32 query heads on one key/value head.
TEST_CASE("gqa: groups of 3 (6:2, 24:8) and multi-query (8:1, 32:1), any length, causal and not",
          "[gpu][gqa]") {
  const std::pair<int64_t, int64_t> groups[] = {{6, 2}, {24, 8}, {8, 1}, {32, 1}};
  const std::pair<int64_t, int64_t> shapes[] = {{65, 129}, {129, 65}, {300, 300}};
  for (const auto& [heads, kv_heads] : groups)
    for (bool causal : {false, true}) {
      for (const auto& [seq_q, seq_kv] : shapes)
        check_gqa_stages(group_name(heads, kv_heads) + ", seq_q " + std::to_string(seq_q) + ", seq_kv " +
                             std::to_string(seq_kv) + (causal ? ", causal" : ""),
                         seq_q, seq_kv, causal, kv_heads, nullptr, nullptr, heads);
      check_gqa_stages(
          "V = key/value head number, " + group_name(heads, kv_heads) +
              (causal ? ", causal, seq_q 200 > seq_kv 129" : ", seq_q 200, seq_kv 129"),
          200, 129, causal, kv_heads, v_holds_its_head_number,
          [kv_heads = kv_heads, causal](const fa::RunResult& run) {
            rows_hold_their_head_number(run, kv_heads, 129, causal);
          },
          heads);
    }
}

// Several tiles per persistent block with grouped heads. The cases above have at most 64 (batch,
// head) pairs of short sequences, so on a GPU of 132 SMs a persistent stage's grouped-head kernel
// (a separate instantiation from the one without GQA) gives each block one tile or one pair. Here
// batch 4 x 32 or 48 query heads x 5 query tiles (seq_q 600): 640 or 960 tiles, several per block,
// with the pairs of causal turns straddling heads of different groups.
TEST_CASE("gqa: many tiles per persistent block (batch 4, 32:8 and 48:16 heads)", "[gpu][gqa]") {
  const struct {
    int64_t heads, kv_heads, seq_kv;
  } cases[] = {{32, 8, fa_test::kManyTilesSeq}, {48, 16, 700}};
  const int64_t seq_q = fa_test::kManyTilesSeq;
  for (const auto& c : cases)
    for (bool causal : {false, true})
      check_gqa_stages("batch 4, " + group_name(c.heads, c.kv_heads) + ", seq_q " + std::to_string(seq_q) +
                           ", seq_kv " + std::to_string(c.seq_kv) + (causal ? ", causal" : ""),
                       seq_q, c.seq_kv, causal, c.kv_heads, nullptr, nullptr, c.heads,
                       fa_test::kManyTilesBatch);
}

// The 192-row tile (three consumer warpgroups, head_dim 64) with grouped heads: batch 3 x 33 query
// heads on 11 (groups of 3) or on 1, seq_q 333 (two 192-row tiles a head, the second with 141 rows:
// the third warpgroup's rows end inside it) or 300; the launcher's choice asserted (general_stages.h).
TEST_CASE("gqa: the 192-row tile at head_dim 64, groups of 3 and multi-query", "[gpu][gqa]") {
  const std::pair<int64_t, int64_t> shapes[] = {{333, 256}, {300, 377}};
  for (int64_t kv_heads : {11, 1})
    for (bool causal : {false, true})
      for (const auto& [seq_q, seq_kv] : shapes) {
        const std::string name = "192-row tile, batch 3, " + group_name(33, kv_heads) + ", seq_q " +
                                 std::to_string(seq_q) + ", seq_kv " + std::to_string(seq_kv) +
                                 (causal ? ", causal" : "");
        const fa_test::Configure shape = [kv_heads](ProblemConfig& c) {
          c.batch = 3;
          c.heads = 33;
          c.kv_heads = kv_heads;
        };
        fa_test::check_192_row_tile(gqa_stages(), name, seq_q, seq_kv, causal, nullptr, nullptr, shape);
        fa_test::check_192_row_tile(
            gqa_stages(), "V = key/value head number, " + name, seq_q, seq_kv, causal,
            v_holds_its_head_number,
            [kv_heads, seq_kv = seq_kv, causal](const fa::RunResult& run) {
              rows_hold_their_head_number(run, kv_heads, seq_kv, causal);
            },
            shape);
      }
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
