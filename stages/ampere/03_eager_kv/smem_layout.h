// Where element (row, col) of a shared-memory tile lives: this file is the whole story of the tile
// layout. Every shared-memory address of the kernel comes from tile_offset() (from
// ampere_10_lane_addresses on, a lane's address base comes from it and constant offsets are added
// that rely on its period; see LaneAddress and tests/test_smem_layout.cpp).
#pragma once

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

namespace FA_STAGE_NAMESPACE {

// Plain row-major: rows of head_dim elements, one after the other, no padding.
// A row of 64 or 128 half-precision elements is 128 or 256 bytes, a multiple of the 128 bytes
// that the 32 banks cover, so the same column of 8 consecutive rows sits in the same banks:
// an ldmatrix phase (8 row addresses) is an 8-way bank conflict. ampere_04_swizzle fixes that.
FA_HOST_DEVICE constexpr int tile_offset(int row, int col, int row_elems) {
  return row * row_elems + col;
}

// What this layout costs an ldmatrix phase (8 rows of 16 bytes): all 8 rows in one 16-byte bank
// group, so 8 serialized passes. tests/test_smem_layout.cpp checks it against every phase.
constexpr int kLdmatrixConflictWays = 8;

}  // namespace FA_STAGE_NAMESPACE
