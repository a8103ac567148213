// Where element (row, col) of a shared-memory tile lives: this file is the whole story of the tile
// layouts. Two of them:
//   * tile_offset(): the forward's tiles (ampere_14_lse's kernel, unchanged), read by ldmatrix (a
//     lane's address base comes from it and constant offsets are added that rely on its period; see
//     LaneAddress and tests/test_smem_layout.cpp);
//   * operand_offset(): the backward's tiles (K, V, Q, dO and dS^T), which wgmma reads through matrix
//     descriptors, in the layout the hardware's 128-byte swizzle mode defines
//     (common/hopper_encoding.h, sections 2 and 4): 64-column panels of [rows x 128 B], chunk c of
//     row r stored at chunk c ^ (r % 8).
#pragma once

#include "common/fragment_layout.h"  // FA_HOST_DEVICE
#include "common/hopper_encoding.h"

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

// A wgmma operand tile of `tile_rows` rows of 16-bit elements: where element (row, col) lives, in
// elements from the tile's 1024-byte aligned start. The same bytes as swizzle128_panel_offset, the
// function the descriptor tests of tests/test_hopper_encoding.cpp read through.
FA_HOST_DEVICE constexpr int operand_offset(int row, int col, int tile_rows) {
  return static_cast<int>(fa::swizzle128_panel_offset(row, 2 * col, tile_rows)) / 2;
}

}  // namespace FA_STAGE_NAMESPACE
