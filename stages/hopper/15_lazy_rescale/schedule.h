// Which tile a persistent block computes at each turn: this file is the whole story of the tile
// order, and (from hopper_13_tile_choice on) of the tile's height at head_dim 64. Host and device:
// tests/test_schedule.cpp checks on the CPU that every tile comes exactly once and that, under
// causal, the two tiles of every turn add up to the same work (within one K/V block) for any
// sequence length and tile height.
//
// Tile number `tile` is the (batch, head, query block) below: query blocks fastest, so that tiles
// with neighbouring numbers share one head's K and V in L2. Under causal a head's query blocks come
// longest and shortest alternately: n - 1, 0, n - 2, 1, ..., so that tiles 2u and 2u + 1 (one turn)
// add up to the same work (n + 1 K/V blocks at seq_q == seq_kv with tiles as tall as the K/V
// blocks; within one block of each other when they are not). With n odd the middle query block
// comes last and would pair with the next head's longest, shifting every pair of that head by one
// (192-row tiles at S = 2048: pairs of 17 to 25 blocks). So in every second head the order
// starts with the middle block: the middle blocks of two heads pair with each other, and every other
// pair stays within its head.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/fragment_layout.h"  // FA_HOST_DEVICE
#include "common/params.h"

namespace FA_STAGE_NAMESPACE {

struct TileCoordinates {
  int q_block, head, batch;
};

// In 32 bits (the launcher keeps the tile count below 2^30): a 64-bit division is a subroutine call,
// and ptxas no longer proves what depends on its result the same in every thread. Here the tile's
// K/V block count does, and with it the ring positions and the wgmma descriptors: they left the
// uniform registers for the ordinary ones, and the loop ran 6-8% slower (H200).
FA_HOST_DEVICE inline TileCoordinates tile_coordinates(int tile, int num_q_blocks, int heads, bool causal) {
  const int batch_head = tile / num_q_blocks;
  int k = tile % num_q_blocks;
  if (causal && num_q_blocks % 2 == 1 && batch_head % 2 == 1) k = (k + num_q_blocks - 1) % num_q_blocks;
  const int q_block = !causal ? k : k % 2 == 0 ? num_q_blocks - 1 - k / 2 : k / 2;
  return {q_block, batch_head % heads, batch_head / heads};
}

// ========================= choosing the tile (host) ========================
// Both tiles measured at head_dim 64 (H200): the 192-row tile with three consumer warpgroups is
// faster where the tiles divide the work evenly over the SMs, the 128-row tile with two where they
// do not (S = 1024; causal S <= 2048, and S = 4096 about even). What decides it is the busiest
// persistent block's work, which the launcher can count before the launch, as
// tools/schedule_model.py does: the turns go round-robin, so the busiest block takes
// ceil(turns / blocks) of them, and a turn is one tile (every K/V block, without causal) or a pair
// of schedule.h (counted as the heaviest pair: the pairs differ by one K/V block at most). A 192-row
// step costs kStep192 times a 128-row step: hopper_09_three_warpgroups against hopper_08_causal at
// head_dim 64, S = 8192, not causal (fp16 454 and 424 TFLOP/s: (192 / 454) / (128 / 424) = 1.40;
// bf16 1.38). tests/test_schedule.cpp checks the choice at the benchmark's shapes against what
// those two stages measured there.
constexpr double kStep192 = 1.40;

// K/V blocks the tile of query block q_block visits (tile_work, on the host, in 64 bits).
inline int64_t tile_blocks(const fa::AttentionParams& p, int64_t q_block, int block_q, int block_kv) {
  const int64_t q0 = q_block * block_q;
  const int64_t q_rows = std::min(p.seq_q - q0, int64_t{block_q});
  const int64_t keys_seen =
      p.causal ? std::min(std::max(q0 + q_rows + p.seq_kv - p.seq_q, int64_t{0}), p.seq_kv) : p.seq_kv;
  return (keys_seen + block_kv - 1) / block_kv;
}

// K/V-block steps of the busiest persistent block with tiles of block_q rows.
inline double busiest_steps(const fa::AttentionParams& p, int block_q, int block_kv, int sm_count) {
  const int64_t n = (p.seq_q + block_q - 1) / block_q;  // query tiles per head
  int64_t heaviest_turn = 0;
  if (!p.causal) {
    heaviest_turn = tile_blocks(p, 0, block_q, block_kv);
  } else {
    // A head's pairs (n - 1 - i, i); with n odd its middle tile pairs with another head's.
    for (int64_t i = 0; i <= (n - 1) / 2; ++i) {
      const int64_t j = n - 1 - i;
      const int64_t turn = i == j ? 2 * tile_blocks(p, i, block_q, block_kv)
                                  : tile_blocks(p, i, block_q, block_kv) + tile_blocks(p, j, block_q, block_kv);
      heaviest_turn = std::max(heaviest_turn, turn);
    }
  }
  const int64_t tiles = n * p.heads * p.batch;
  const int64_t turns = p.causal ? (tiles + 1) / 2 : tiles;
  const int64_t blocks = std::min<int64_t>(turns, sm_count);
  return static_cast<double>((turns + blocks - 1) / blocks) * static_cast<double>(heaviest_turn);
}

// Whether the 192-row tile's busiest block finishes first (the launcher's choice at head_dim 64).
inline bool three_warpgroups_faster(const fa::AttentionParams& p, int block_kv, int sm_count) {
  return kStep192 * busiest_steps(p, 192, block_kv, sm_count) < busiest_steps(p, 128, block_kv, sm_count);
}

}  // namespace FA_STAGE_NAMESPACE
