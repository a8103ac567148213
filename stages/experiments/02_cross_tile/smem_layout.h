// Where element (row, col) of a shared-memory tile lives: this file is the whole story of the tile
// layouts. Two of them from this stage on:
//   * operand_offset(): Q, K and V, the tiles wgmma reads through matrix descriptors, in the layout
//     the hardware's 128-byte swizzle mode defines (common/hopper_encoding.h, sections 2 and 4):
//     64-column panels of [rows x 128 B], chunk c of row r stored at chunk c ^ (r % 8);
//   * tile_offset(): the O tile that normalize_and_write_o stages. From this stage on the copy
//     engine reads it (a TMA store), so it is in the store's box layout: each warpgroup's 64 rows
//     are the 64-row boxes of O's tensor map, i.e. operand_offset's layout per 64-row slab
//     (tests/test_smem_layout.cpp checks it for every stage, as it checks ampere_10_lane_addresses's).
#pragma once

#include "common/fragment_layout.h"  // FA_HOST_DEVICE
#include "common/hopper_encoding.h"

namespace FA_STAGE_NAMESPACE {

// A wgmma operand tile of `tile_rows` rows of 16-bit elements: where element (row, col) lives, in
// elements from the tile's 1024-byte aligned start. The same bytes as swizzle128_panel_offset, the
// function the descriptor tests of tests/test_hopper_encoding.cpp read through.
FA_HOST_DEVICE constexpr int operand_offset(int row, int col, int tile_rows) {
  return static_cast<int>(fa::swizzle128_panel_offset(row, 2 * col, tile_rows)) / 2;
}

// O's staging tile, rows x row_elems: the slab of 64 rows of warpgroup row / 64 is one TMA store's
// boxes (64 rows x 64 columns each, the 128-byte swizzle: chunk c of row r at chunk c ^ (r % 8)).
// The 8 rows of an accumulator store or an ldmatrix phase keep 8 different chunks: conflict-free,
// as the Ampere track's swizzle, whose XOR this is with 128-byte rows instead of the tile's full rows.
FA_HOST_DEVICE constexpr int tile_offset(int row, int col, int row_elems) {
  return (row / fa::kWgmmaM) * fa::kWgmmaM * row_elems + operand_offset(row % fa::kWgmmaM, col, fa::kWgmmaM);
}

// tile_offset's layout is TMA boxes (tests/test_smem_layout.cpp checks them; the layouts of the
// stages before keep rows whole).
constexpr bool kTileInBoxes = true;

// What tile_offset's layout costs an ldmatrix phase (8 rows of 16 bytes): 1 = conflict-free.
// tests/test_smem_layout.cpp checks it against every phase an ldmatrix kernel issues.
constexpr int kLdmatrixConflictWays = 1;

}  // namespace FA_STAGE_NAMESPACE
