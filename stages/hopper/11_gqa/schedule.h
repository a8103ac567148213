// Which tile a persistent block computes at each turn: this file is the whole story of the tile
// order. Host and device: tests/test_schedule.cpp checks on the CPU that every tile comes exactly
// once and that, under causal, the two tiles of every turn add up to the same work (within one K/V
// block) for any sequence length and tile height.
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

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

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

}  // namespace FA_STAGE_NAMESPACE
