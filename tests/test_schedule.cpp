// The persistent Hopper stages' tile order (stages/<track>/<stage>/schedule.h, from
// hopper_10_balanced_pairs on), on the CPU: every tile comes exactly once, and under causal the two
// tiles of a turn add up to the same work, within one K/V block, for any sequence length and tile
// height. The second property is about speed, not results: a persistent block takes one turn after
// another, and the SMs that draw turns of more work than the others finish last
// (hopper_09_three_warpgroups at S = 2048: turns of 17 to 25 K/V blocks, the busiest SM 40% above
// the mean).
#include <algorithm>
#include <vector>

#include "fa_catch.h"
#include "schedules.h"

namespace {

using schedules::StageSchedule;
using schedules::Tile;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// K/V blocks the causal tile of query block b visits at seq_q == seq_kv == seq: up to the last key
// its last row sees (the stages' tile_work).
int kv_blocks(int b, int block_q, int block_kv, int seq) {
  const int last_row_end = std::min((b + 1) * block_q, seq);
  return ceil_div(last_row_end, block_kv);
}

// max - min over the turns (tiles 2u, 2u + 1) of their K/V blocks; a lone last tile is no turn.
template <typename TileFn>
int turn_spread(TileFn tile_coordinates, int batch_heads, int block_q, int block_kv, int seq) {
  const int n = ceil_div(seq, block_q);
  const int tiles = n * batch_heads;
  int lo = 1 << 30, hi = -1;
  for (int t = 0; t + 1 < tiles; t += 2) {
    const Tile a = tile_coordinates(t, n, batch_heads, true);
    const Tile b = tile_coordinates(t + 1, n, batch_heads, true);
    const int work = kv_blocks(a.q_block, block_q, block_kv, seq) + kv_blocks(b.q_block, block_q, block_kv, seq);
    lo = std::min(lo, work);
    hi = std::max(hi, work);
  }
  return hi < 0 ? 0 : hi - lo;
}

// The order of hopper_08_causal and hopper_09_three_warpgroups (before schedule.h): a head's query
// blocks n - 1, 0, n - 2, 1, ..., the pairs straddling two heads when n is odd. Here only to show
// that the property above has teeth.
Tile stage24_order(int tile, int n, int heads, bool causal) {
  const int batch_head = tile / n;
  const int k = tile % n;
  const int q_block = !causal ? k : k % 2 == 0 ? n - 1 - k / 2 : k / 2;
  return {q_block, batch_head % heads, batch_head / heads};
}

}  // namespace

TEST_CASE("schedule: every (batch, head, query block) comes exactly once") {
  REQUIRE(schedules::kStageScheduleCount > 0);
  for (int s = 0; s < schedules::kStageScheduleCount; ++s) {
    const StageSchedule& stage = *schedules::kStageSchedules[s];
    INFO("stage " << stage.stage);
    for (bool causal : {false, true})
      for (int batch : {1, 2, 3})
        for (int heads : {1, 2, 3, 7, 32})
          for (int n = 1; n <= 45; ++n) {
            INFO("causal " << causal << ", batch " << batch << ", heads " << heads << ", " << n << " query blocks");
            std::vector<int> seen(static_cast<size_t>(batch * heads * n), 0);
            bool in_range = true;
            for (int t = 0; t < batch * heads * n; ++t) {
              const Tile c = stage.tile_coordinates(t, n, heads, causal);
              if (c.q_block < 0 || c.q_block >= n || c.head < 0 || c.head >= heads || c.batch < 0 || c.batch >= batch) {
                in_range = false;
                break;
              }
              ++seen[static_cast<size_t>((c.batch * heads + c.head) * n + c.q_block)];
            }
            REQUIRE(in_range);
            REQUIRE(std::all_of(seen.begin(), seen.end(), [](int count) { return count == 1; }));
          }
  }
}

TEST_CASE("schedule: under causal, the two tiles of a turn add up to the same work within one K/V block") {
  for (int s = 0; s < schedules::kStageScheduleCount; ++s) {
    const StageSchedule& stage = *schedules::kStageSchedules[s];
    INFO("stage " << stage.stage);
    for (int block_q : {64, 128, 192})
      for (int batch_heads : {1, 2, 3, 6, 69})
        for (int seq = 1; seq <= 8192; seq += (seq < 600 ? 1 : 37)) {
          INFO("Br " << block_q << ", Bc 128, batch x heads " << batch_heads << ", seq_q = seq_kv = " << seq);
          REQUIRE(turn_spread(stage.tile_coordinates, batch_heads, block_q, 128, seq) <= 1);
        }
  }
}

TEST_CASE("schedule: the turn property catches the order of hopper_08_causal and hopper_09_three_warpgroups") {
  // 192-row tiles at S = 2048 (hopper_09_three_warpgroups, head_dim 64): 11 per head, turns of 17
  // to 25 K/V blocks.
  CHECK(turn_spread(stage24_order, 2, 192, 128, 2048) == 8);
  // 128-row tiles with an odd count per head (S = 1100: 9 tiles) unbalance hopper_08_causal as
  // well.
  CHECK(turn_spread(stage24_order, 2, 128, 128, 1100) > 1);
  // With an even count per head the old order was exact.
  CHECK(turn_spread(stage24_order, 2, 128, 128, 2048) == 0);
}

TEST_CASE("schedule: at head_dim 64 the launcher takes the tile that hopper_08_causal and hopper_09_three_warpgroups measured faster") {
  // [16, S, 32, 64] on 132 SMs (the H200), fp16 (docs/stages/hopper/09_three_warpgroups.md):
  //   not causal: 128-row tiles (hopper_08_causal) faster at S = 1024, 192-row tiles
  //   (hopper_09_three_warpgroups) at 2048, 4096, 8192;
  //   causal: 128-row tiles faster at S = 1024 and 2048, 192-row tiles at 8192 (S = 4096 even: not asserted).
  // And the GPT-2 call (batch 1, 9 tokens, 12 heads): one tile per SM, the 128-row tile is the cheaper step.
  int stages_with_choice = 0;
  for (int s = 0; s < schedules::kStageScheduleCount; ++s) {
    const StageSchedule& stage = *schedules::kStageSchedules[s];
    if (stage.three_warpgroups_faster == nullptr) continue;
    ++stages_with_choice;
    INFO("stage " << stage.stage);
    const auto params = [](int64_t batch, int64_t heads, int64_t seq, bool causal) {
      fa::AttentionParams p;
      p.batch = batch;
      p.heads = p.kv_heads = heads;
      p.seq_q = p.seq_kv = seq;
      p.head_dim = 64;
      p.causal = causal;
      return p;
    };
    const struct {
      int64_t seq;
      bool causal, three;
    } expected[] = {{1024, false, false}, {2048, false, true}, {4096, false, true}, {8192, false, true},
                    {1024, true, false},  {2048, true, false}, {8192, true, true}};
    for (const auto& e : expected) {
      INFO("S = " << e.seq << (e.causal ? ", causal" : ""));
      CHECK(stage.three_warpgroups_faster(params(16, 32, e.seq, e.causal), 128, 132) == e.three);
    }
    CHECK_FALSE(stage.three_warpgroups_faster(params(1, 12, 9, true), 128, 132));
    CHECK_FALSE(stage.three_warpgroups_faster(params(1, 12, 9, false), 128, 132));
  }
  if (stages_with_choice == 0) SUCCEED("no stage's schedule.h chooses the tile");
}

TEST_CASE("schedule: at head_dim 128 the launcher takes the 160-key K/V block only where its steps cost less") {
  // experiments_03_wide_kv (wide_kv_pays): never under causal; otherwise where kStep160 (1.20, a
  // prediction from hopper_15_lazy_rescale's phases) times the 160-key steps is below the 128-key
  // steps. At the benchmark's lengths: S = 1024 no (7 x 1.20 = 8.4 > 8), 2048, 4096, 8192 yes; 160
  // too (one 160-key step against two 128-key steps).
  int stages_with_choice = 0;
  for (int s = 0; s < schedules::kStageScheduleCount; ++s) {
    const StageSchedule& stage = *schedules::kStageSchedules[s];
    if (stage.wide_kv_pays == nullptr) continue;
    ++stages_with_choice;
    INFO("stage " << stage.stage);
    const struct {
      int64_t seq;
      bool wide;
    } expected[] = {{1, false},     {9, false},     {128, false},   {160, true},   {1000, false}, {1024, false},
                    {2048, true},   {4000, true},   {4096, true},   {8192, true},  {16384, true}};
    for (const auto& e : expected) {
      INFO("seq_kv = " << e.seq);
      CHECK(stage.wide_kv_pays(e.seq, false) == e.wide);
      CHECK_FALSE(stage.wide_kv_pays(e.seq, true));
    }
    // The rule itself, at every length up to 2^14: wide exactly where 1.2 x ceil(S / 160) < ceil(S / 128).
    for (int64_t seq = 1; seq <= (1 << 14); ++seq) {
      const bool cheaper = 6 * ((seq + 159) / 160) < 5 * ((seq + 127) / 128);
      if (stage.wide_kv_pays(seq, false) != cheaper) FAIL_CHECK("seq_kv = " << seq);
    }
  }
  if (stages_with_choice == 0) SUCCEED("no stage's schedule.h chooses the K/V block");
}
