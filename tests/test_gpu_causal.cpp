// Causal masking (GitHub issue 12): every registered stage that declares "causal" in its
// stage.json, aligned to the bottom-right as in FlashAttention >= 2.1 (query i sees the keys
// j <= i + seq_kv - seq_q), on seq_q == seq_kv and both ways apart, fp16/bf16 x head_dim 64/128, in
// the contiguous layout and in the mixed one (ProblemLayout::mixed()), against the fp64 reference.
//
// What would show a wrong mask:
//   * a key above the diagonal that leaks: with "scores rising past the diagonal" every key above
//     a row's diagonal scores far above every key the row sees, so one leaked key takes the row;
//   * a diagonal one key off: the same data puts each row's maximum on its diagonal key;
//   * a row that sees no key (seq_q > seq_kv) must write exactly 0, not NaN (0 / 0) and not the
//     poison: it is compared to 0 bit for bit, beyond the checker's tolerance;
//   * a skipped block that should have been visited: the random cases check every row;
//   * a persistent schedule that loses its place over many tiles (wrong tile pairs, a Q barrier
//     parity off after a tile without keys): batch 4 x 69 heads, 828 query tiles.
//   * a persistent schedule that drops the lone last tile of an odd tile count: batch x heads 1
//     and 3 with 1, 3 or 5 query tiles per head.
// Every stage that does not declare causal must reject it with an error that says so and write
// nothing. Without a GPU this program exits with 77 (skipped); without a stage under test
// (FA_TEST_STAGES) that declares causal, its cases say so in a "SKIPPED:" line (tests/gpu_stages.h).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/harness.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "general_stages.h"
#include "gpu_stages.h"

using fa::DType;
using fa::HostTensor;
using fa::LayoutKind;
using fa::Problem;
using fa::ProblemConfig;
using fa::ProblemLayout;
using fa::StageInfo;

namespace {

constexpr int64_t kLengths[] = {1, 7, 64, 65, 128, 129, 1000};

std::vector<const StageInfo*> causal_stages() {
  return fa_test::stages_with(fa::kFeatureCausal, "causal");
}

// Every causal stage on (seq_q, seq_kv) in fp16/bf16 x head_dim 64/128, in the contiguous and the
// mixed layout. CHECK, not REQUIRE, so one run lists every failing configuration.
void check_causal_stages(const std::string& scenario, int64_t seq_q, int64_t seq_kv,
                         const fa_test::EditInputs& edit = nullptr,
                         const fa_test::Configure& configure = nullptr) {
  fa_test::check_general_stages(causal_stages(), scenario, seq_q, seq_kv, /*causal=*/true, edit,
                                [&](const fa::RunResult& run) {
                                  // The rows that see no key (the first seq_q - seq_kv) hold exactly 0.
                                  const fa::TensorLayout& l = run.output.layout;
                                  int64_t nonzero = 0;
                                  for (int64_t b = 0; b < l.batch; ++b)
                                    for (int64_t h = 0; h < l.heads; ++h)
                                      for (int64_t s = 0; s < seq_q - seq_kv; ++s)
                                        for (int64_t d = 0; d < l.head_dim; ++d)
                                          nonzero += run.output.at(b, s, h, d) != 0.0f ? 1 : 0;
                                  CHECK(nonzero == 0);
                                },
                                configure);
}

// Row i's scores are (j - i - seq_kv + seq_q) * softmax_scale exactly: 0 on its diagonal key, falling
// one step per key below it, and rising one step per key above it -- up to several hundred, so a
// leaked key takes the row. Built from integers small enough to be exact in bf16:
// q_i = (64, 1, -64 a, -b, 0, ...) and k_j = (j / 64, j % 64, 1, 1, random...) with
// i + seq_kv - seq_q = 64 a + b (0 <= b < 64), so q_i . k_j = j - (i + seq_kv - seq_q).
void scores_rising_past_the_diagonal(Problem& problem) {
  HostTensor q = problem.host_q(), k = problem.host_k();
  const HostTensor& v = problem.host_v();
  const int64_t seq_q = q.layout.seq, seq_kv = k.layout.seq;
  for (int64_t b = 0; b < q.layout.batch; ++b)
    for (int64_t h = 0; h < q.layout.heads; ++h) {
      for (int64_t i = 0; i < seq_q; ++i) {
        const int64_t last_key = i + seq_kv - seq_q;
        const int64_t high = last_key >= 0 ? last_key / 64 : -((-last_key + 63) / 64);  // floor division
        const int64_t low = last_key - 64 * high;
        const float head[4] = {64.0f, 1.0f, -64.0f * static_cast<float>(high), -static_cast<float>(low)};
        for (int64_t d = 0; d < q.layout.head_dim; ++d) q.set(b, i, h, d, d < 4 ? head[d] : 0.0f);
      }
      for (int64_t j = 0; j < seq_kv; ++j) {
        const float head[4] = {static_cast<float>(j / 64), static_cast<float>(j % 64), 1.0f, 1.0f};
        for (int64_t d = 0; d < 4; ++d) k.set(b, j, h, d, head[d]);
      }
    }
  problem.set_inputs(q, k, v);
}

}  // namespace

TEST_CASE("causal: seq_q == seq_kv", "[gpu][causal]") {
  for (int64_t seq : kLengths) check_causal_stages("seq " + std::to_string(seq), seq, seq);
}

TEST_CASE("causal: seq_q < seq_kv and seq_q > seq_kv (rows that see no key)", "[gpu][causal]") {
  const std::pair<int64_t, int64_t> pairs[] = {{1, 65},     {7, 129},   {64, 65},   {63, 1000},
                                               {127, 4097}, {65, 1},    {129, 7},   {65, 64},
                                               {1000, 63},  {300, 129}, {129, 128}, {128, 129}};
  for (const auto& [seq_q, seq_kv] : pairs)
    check_causal_stages("seq_q " + std::to_string(seq_q) + ", seq_kv " + std::to_string(seq_kv), seq_q,
                        seq_kv);
}

TEST_CASE("causal: keys above the diagonal would take their rows if they leaked", "[gpu][causal]") {
  const std::pair<int64_t, int64_t> pairs[] = {{64, 64},  {129, 129}, {1000, 1000}, {65, 200},
                                               {200, 65}, {7, 300},   {300, 7}};
  for (const auto& [seq_q, seq_kv] : pairs)
    check_causal_stages("scores rising past the diagonal, seq_q " + std::to_string(seq_q) + ", seq_kv " +
                            std::to_string(seq_kv),
                        seq_q, seq_kv, scores_rising_past_the_diagonal);
}

// Many tiles per persistent block. The shapes above have few query tiles (at most 18), so on a GPU
// of 100 SMs or more a persistent stage (hopper_08_causal: tiles in pairs, one pair per block per turn)
// gives each block one pair at most. Here batch 4 x 69 heads x 3 query tiles of 128 rows = 828
// tiles, 414 pairs: each block takes several, the pairs straddle heads and batches (3 tiles per
// head is odd), and with seq_q > seq_kv some tiles see no key and load no Q, so the Q barriers'
// parity must count loads, not tiles, across many turns. The other causal stages run it too.
TEST_CASE("causal: many tiles per block, odd tiles per head, tiles that see no key", "[gpu][causal]") {
  const std::pair<int64_t, int64_t> pairs[] = {{300, 300}, {300, 429}, {429, 300}};
  const fa_test::Configure many_tiles = [](ProblemConfig& config) {
    config.batch = 4;
    config.heads = 69;
  };
  for (const auto& [seq_q, seq_kv] : pairs)
    check_causal_stages("batch 4, 69 heads, seq_q " + std::to_string(seq_q) + ", seq_kv " +
                            std::to_string(seq_kv),
                        seq_q, seq_kv, nullptr, many_tiles);
}

// Batch x heads 1 and 3. Every shape above has an even batch x heads (2, 6 or 276), so every
// persistent launch there has an even number of tiles and its pairs all come whole. Here most tile
// counts are odd (seq_q 65, 300, 333, 561: 1, 3, 3, 5 query tiles of 128 rows), so the last turn of
// a persistent schedule is a lone tile: a scheduler or launcher that counts whole pairs (tiles / 2)
// leaves that tile out, and its rows keep the poison; seq_q < and > seq_kv both ways, and keys above
// the diagonal that would take their rows if they leaked.
TEST_CASE("causal: batch x heads 1 and 3, odd tile counts, seq_q < and > seq_kv", "[gpu][causal]") {
  const std::pair<int64_t, int64_t> pairs[] = {{65, 200}, {300, 429}, {333, 129}, {561, 1000}, {1000, 561}};
  const std::pair<int64_t, int64_t> batch_heads[] = {{1, 1}, {1, 3}, {3, 1}};
  for (const auto& [batch, heads] : batch_heads) {
    const fa_test::Configure shape = [batch = batch, heads = heads](ProblemConfig& config) {
      config.batch = batch;
      config.heads = heads;
    };
    const std::string name = "batch " + std::to_string(batch) + ", heads " + std::to_string(heads);
    for (const auto& [seq_q, seq_kv] : pairs) {
      const std::string lengths = ", seq_q " + std::to_string(seq_q) + ", seq_kv " + std::to_string(seq_kv);
      check_causal_stages(name + lengths, seq_q, seq_kv, nullptr, shape);
      check_causal_stages(name + ", scores rising past the diagonal" + lengths, seq_q, seq_kv,
                          scores_rising_past_the_diagonal, shape);
    }
  }
}

TEST_CASE("causal: a stage that does not declare it rejects it and writes nothing", "[gpu][causal]") {
  int rejecting = 0;
  for (const StageInfo* stage : fa_test::runnable_stages()) {
    if (stage->features & fa::kFeatureCausal) continue;
    ProblemConfig config;
    config.batch = 1;
    config.heads = 2;
    config.seq_q = config.seq_kv = 2 * std::max(stage->block_q, stage->block_kv);
    config.head_dim = stage->head_dims.front();
    config.dtype = stage->dtypes.front();
    Problem problem(config);
    INFO("stage " << stage->name);
    REQUIRE(fa::run_and_check(*stage, problem).passed());  // the same problem, without causal, runs
    ProblemConfig causal_config = config;
    causal_config.causal = true;
    Problem causal_problem(causal_config);
    const fa::RunResult run = fa::launch_and_download(*stage, causal_problem);
    REQUIRE_FALSE(run.status.ok());
    CHECK(run.status.message.find(stage->name) != std::string::npos);
    CHECK(run.status.message.find("causal") != std::string::npos);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const HostTensor untouched = causal_problem.o().download();
    CHECK(std::all_of(untouched.raw.begin(), untouched.raw.end(), [](uint16_t x) { return x == 0xFFFF; }));
    ++rejecting;
  }
  if (rejecting == 0) fa_test::skip("no stage under test lacks causal");
}
