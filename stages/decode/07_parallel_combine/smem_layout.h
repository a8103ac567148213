// Where element (row, col) of a shared-memory tile lives: this file is the whole story of the tile
// layout. Every shared-memory address of the kernel comes from tile_offset() (from
// ampere_10_lane_addresses on, a lane's address base comes from it and constant offsets are added
// that rely on its period; see LaneAddress and tests/test_smem_layout.cpp).
#pragma once

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

namespace FA_STAGE_NAMESPACE {

// XOR swizzle of 16-byte chunks. A row of 64 or 128 half-precision elements is 8 or 16 chunks
// (128 or 256 bytes), so in a plain row-major tile the same chunk of 8 consecutive rows falls in
// the same 4 banks, and each 8-address phase of ldmatrix is an 8-way bank conflict. XOR-ing the
// chunk index with (row % 8) sends those 8 rows to 8 different chunk positions, i.e. 8 disjoint
// groups of 4 banks: conflict-free. Within a row the XOR only permutes chunks (a bijection), and
// the 8 elements of a chunk stay together, so 16-byte copies and ldmatrix rows stay contiguous.
FA_HOST_DEVICE constexpr int tile_offset(int row, int col, int row_elems) {
  const int chunk = col / 8;
  const int swizzled_chunk = chunk ^ (row % 8);
  return row * row_elems + swizzled_chunk * 8 + col % 8;
}

// What this layout costs an ldmatrix phase (8 rows of 16 bytes): 1 = conflict-free.
// tests/test_smem_layout.cpp checks it against every phase the kernel issues.
constexpr int kLdmatrixConflictWays = 1;

}  // namespace FA_STAGE_NAMESPACE
