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
//   * rows past seq_q: the poisoned LSE gaps and the unsampled rows must stay as they should;
//   * a softmax scale of 0.5 or 0.05: an LSE that takes 1/sqrt(head_dim) for the caller's scale
//     fails (the case first confirms that the reference takes the caller's);
//   * many tiles per persistent block, groups of 3, and the 192-row tile of the Hopper stages at
//     head_dim 64 (its rows at q_block x 192; the launcher's choice is asserted).
// Every stage that does not declare lse must reject a non-null pointer and write neither O nor
// the LSE. Without a GPU this program exits with 77 (skipped).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

std::vector<const StageInfo*> lse_stages() {
  return fa_test::stages_with(fa::kFeatureLse, "lse");
}

void check_lse(const fa::RunResult& run) {
  INFO("lse check: " << run.lse_check.summary());
  REQUIRE(run.lse_requested);
  CHECK(run.lse_check.passed);
}

// kv_heads > 0: 4 query heads on kv_heads; `more` changes the shape further (after that).
void check_lse_stages(const std::string& scenario, int64_t seq_q, int64_t seq_kv, bool causal,
                      const fa_test::EditInputs& edit = nullptr, int64_t kv_heads = 0,
                      const fa_test::Configure& more = nullptr) {
  fa_test::check_general_stages(lse_stages(), scenario, seq_q, seq_kv, causal, edit, check_lse,
                                [&](ProblemConfig& c) {
                                  c.lse = true;
                                  if (kv_heads > 0) {
                                    c.heads = 4;
                                    c.kv_heads = kv_heads;
                                  }
                                  if (more) more(c);
                                });
}


// Row (b, h, s)'s log-sum-exp at softmax scale `scale`, straight from the inputs in long double:
// log sum_j exp(scale q_s . k_j) over the keys the row sees; -inf where it sees none.
long double direct_lse(Problem& problem, int64_t b, int64_t h, int64_t s, long double scale) {
  const HostTensor& q = problem.host_q();
  const HostTensor& k = problem.host_k();
  const int64_t keys = fa::visible_keys(s, q.layout.seq, k.layout.seq, problem.config().causal);
  if (keys == 0) return -std::numeric_limits<long double>::infinity();
  const int64_t kv_h = fa::kv_head_of(h, q.layout.heads, k.layout.heads);
  std::vector<long double> scores(static_cast<size_t>(keys));
  long double max_score = -std::numeric_limits<long double>::infinity();
  for (int64_t j = 0; j < keys; ++j) {
    long double dot = 0.0L;
    for (int64_t d = 0; d < q.layout.head_dim; ++d)
      dot += static_cast<long double>(q.at(b, s, h, d)) * static_cast<long double>(k.at(b, j, kv_h, d));
    scores[static_cast<size_t>(j)] = scale * dot;
    max_score = std::max(max_score, scale * dot);
  }
  long double sum = 0.0L;
  for (long double t : scores) sum += std::exp(t - max_score);
  return max_score + std::log(sum);
}

// Not a scale of 1/sqrt(head_dim): the reference that the LSE check holds every stage to takes the
// caller's. Its LSE of the first rows it checks is direct_lse at that scale, and far (more than
// 0.05) from direct_lse at 1/sqrt(head_dim) on at least one of them, so a kernel that scaled its
// LSE by 1/sqrt(head_dim) would fail the check.
void reference_takes_the_callers_scale(Problem& problem) {
  const fa::ReferenceRows& reference = problem.reference(fa_test::general_check_options());
  const long double scale = problem.softmax_scale();
  const long double default_scale = fa::default_softmax_scale(problem.config().head_dim);
  REQUIRE(scale != default_scale);
  long double largest_gap = 0.0L;
  int compared = 0;
  for (size_t i = 0; i < reference.rows.size() && compared < 16; ++i) {
    const auto& row = reference.rows[i];
    if (!std::isfinite(reference.lse[i])) continue;
    const long double expected = direct_lse(problem, row.b, row.h, row.s, scale);
    INFO("reference LSE of (b, h, s) = (" << row.b << ", " << row.h << ", " << row.s
                                          << "): " << reference.lse[i] << ", at the caller's scale "
                                          << static_cast<double>(expected));
    CHECK(std::fabs(static_cast<long double>(reference.lse[i]) - expected) <=
          1e-9L * std::max(1.0L, std::fabs(expected)));
    largest_gap =
        std::max(largest_gap, std::fabs(expected - direct_lse(problem, row.b, row.h, row.s, default_scale)));
    ++compared;
  }
  CHECK(compared > 0);
  CHECK(largest_gap > 0.05L);
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
      check_lse_stages("q = 0, " + shape_name(seq_q, seq_kv, causal), seq_q, seq_kv, causal, fa_test::q_zero);
}

TEST_CASE("lse: large scores (k scaled by 8), the LSE dominated by the row maximum", "[gpu][lse]") {
  for (bool causal : {false, true})
    check_lse_stages("k x 8, " + shape_name(129, 200, causal), 129, 200, causal, fa_test::k_times_8);
}

TEST_CASE("lse: with grouped-query attention (4 query heads, 2 and 1 key/value heads)", "[gpu][lse][gqa]") {
  for (int64_t kv_heads : {2, 1})
    for (bool causal : {false, true})
      check_lse_stages("kv_heads " + std::to_string(kv_heads) + ", " + shape_name(200, 129, causal), 200, 129,
                       causal, nullptr, kv_heads);
}

// The LSE is softmax_scale * max + log(sum): a kernel that scales the max by 1/sqrt(head_dim)
// instead of the caller's scale is right at the default scale, which every case above uses.
TEST_CASE("lse: the caller's softmax scale, 0.5 and 0.05 (not 1/sqrt(head_dim)), causal and not, with GQA",
          "[gpu][lse]") {
  const std::pair<int64_t, int64_t> pairs[] = {{129, 200}, {200, 129}};
  for (float scale : {0.5f, 0.05f})
    for (int64_t kv_heads : {0, 2})
      for (bool causal : {false, true})
        for (const auto& [seq_q, seq_kv] : pairs)
          check_lse_stages("softmax scale " + std::to_string(scale) +
                               (kv_heads > 0 ? ", 4 query heads on 2 key/value heads, " : ", ") +
                               shape_name(seq_q, seq_kv, causal),
                           seq_q, seq_kv, causal, reference_takes_the_callers_scale, kv_heads,
                           [scale](ProblemConfig& c) { c.softmax_scale = scale; });
}

// Groups of 3 query heads (6 on 2): the LSE row of each query head, whichever key/value head it read.
TEST_CASE("lse: with groups of 3 query heads (6 on 2)", "[gpu][lse][gqa]") {
  for (bool causal : {false, true})
    check_lse_stages("6 query heads on 2 key/value heads, " + shape_name(200, 129, causal), 200, 129, causal,
                     nullptr, 2, [](ProblemConfig& c) { c.heads = 6; });
}

// Several tiles per persistent block. The cases above have at most 8 (batch, head) pairs, so on a
// GPU of 132 SMs a persistent stage's LSE kernel (a separate instantiation from the one without)
// gives each block one tile or one pair. Here batch 4 x 32 heads x 5 query tiles (seq_q 600): 640
// tiles, several per block; and 36 query heads on 12 (groups of 3), 720 tiles.
TEST_CASE("lse: many tiles per persistent block (batch 4, 32 heads; 36 on 12)", "[gpu][lse][gqa]") {
  const int64_t seq_q = fa_test::kManyTilesSeq;
  const struct { int64_t heads, kv_heads, seq_kv; } cases[] = {{32, 0, seq_q}, {36, 12, 700}};
  for (const auto& c : cases)
    for (bool causal : {false, true})
      check_lse_stages("batch 4, " + std::to_string(c.heads) + " query heads" +
                           (c.kv_heads > 0 ? " on " + std::to_string(c.kv_heads) : std::string()) + ", " +
                           shape_name(seq_q, c.seq_kv, causal),
                       seq_q, c.seq_kv, causal, nullptr, 0, [c](ProblemConfig& config) {
                         config.batch = fa_test::kManyTilesBatch;
                         config.heads = c.heads;
                         config.kv_heads = c.kv_heads;
                       });
}

// The 192-row tile (three consumer warpgroups, head_dim 64) with the LSE and grouped heads: batch
// 3 x 33 query heads on 11, seq_q 333 (two 192-row tiles a head, the second partial) or 300. A
// store of the LSE that places a tile's rows at q_block x 128 instead of q_block x 192, or writes
// the third warpgroup's rows past seq_q, shows here; the launcher's choice is asserted
// (general_stages.h).
TEST_CASE("lse: the 192-row tile at head_dim 64, with groups of 3", "[gpu][lse][gqa]") {
  const std::pair<int64_t, int64_t> shapes[] = {{333, 256}, {300, 377}};
  for (bool causal : {false, true})
    for (const auto& [seq_q, seq_kv] : shapes)
      fa_test::check_192_row_tile(
          lse_stages(), "192-row tile, batch 3, 33 query heads on 11, " + shape_name(seq_q, seq_kv, causal),
          seq_q, seq_kv, causal, nullptr, check_lse, [](ProblemConfig& c) {
            c.lse = true;
            c.batch = 3;
            c.heads = 33;
            c.kv_heads = 11;
          });
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
