// Every stage's tile order (stages/<track>/<stage>/schedule.h, from hopper_10_balanced_pairs on),
// for tests/test_schedule.cpp.
//
// Each schedule.h defines tile_coordinates() in namespace FA_STAGE_NAMESPACE. CMake generates one
// small translation unit per stage that has one and registers it here (one per stage, as for
// smem_layouts.h: identical headers of different stages must not be skipped by #pragma once).
#pragma once

#include "common/params.h"

namespace schedules {

struct Tile {
  int q_block, head, batch;
};
using TileCoordinatesFn = Tile (*)(int tile, int num_q_blocks, int heads, bool causal);
// From hopper_13_tile_choice on: whether the launcher takes the 192-row tile at head_dim 64.
using TileChoiceFn = bool (*)(const fa::AttentionParams& p, int block_kv, int sm_count);
// experiments_03_wide_kv: whether the launcher takes the 160-key K/V block at head_dim 128.
using KVChoiceFn = bool (*)(int64_t seq_kv, bool causal);

struct StageSchedule {
  const char* stage;  // folder name, e.g. "hopper_10_balanced_pairs"
  TileCoordinatesFn tile_coordinates;
  TileChoiceFn three_warpgroups_faster;  // nullptr where the stage's schedule.h has no tile choice
  KVChoiceFn wide_kv_pays;               // nullptr where it has no K/V block choice
};

// Generated from FA_STAGES (tests/CMakeLists.txt), in registry order; only stages with a schedule.h.
extern const StageSchedule* const kStageSchedules[];
extern const int kStageScheduleCount;

}  // namespace schedules
