// Every stage's thread-block order (stages/<track>/<stage>/block_order.h, from ampere_17_lpt_order
// on), for tests/test_block_order.cpp.
//
// Each block_order.h defines block_coordinates() and group_heads() in namespace FA_STAGE_NAMESPACE.
// CMake generates one small translation unit per stage that has one and registers it here (as for
// schedules.h: identical headers of different stages must not be skipped by #pragma once).
#pragma once

#include <cstdint>

namespace block_orders {

struct Block {
  int q_block, batch_head;
};
using BlockCoordinatesFn = Block (*)(int block, int num_q_blocks, int batch_heads, int group);
using GroupHeadsFn = int64_t (*)(bool causal, int64_t batch_heads, int64_t seq_kv, int64_t bytes_per_kv_row,
                                 int64_t l2_bytes);

struct StageBlockOrder {
  const char* stage;  // folder name, e.g. "ampere_17_lpt_order"
  BlockCoordinatesFn block_coordinates;
  GroupHeadsFn group_heads;
  int64_t l2_share_divisor;  // the stage's kL2ShareDivisor
};

// Generated from FA_STAGES (tests/CMakeLists.txt), in registry order; only stages with a block_order.h.
extern const StageBlockOrder* const kStageBlockOrders[];
extern const int kStageBlockOrderCount;

}  // namespace block_orders
