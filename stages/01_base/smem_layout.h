// Where element (row, col) of a shared-memory tile lives. Every shared-memory access of the
// kernel goes through tile_offset(), so this file is the whole story of the tile layout.
#pragma once

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

namespace FA_STAGE_NAMESPACE {

// Plain row-major: rows of head_dim elements, one after the other, no padding.
// A row of 64 or 128 half-precision elements is 128 or 256 bytes, a multiple of the 128 bytes
// that the 32 banks cover, so the same column of 8 consecutive rows sits in the same banks:
// an ldmatrix phase (8 row addresses) is an 8-way bank conflict. Stage 4 fixes that.
FA_HOST_DEVICE constexpr int tile_offset(int row, int col, int row_elems) {
  return row * row_elems + col;
}

}  // namespace FA_STAGE_NAMESPACE
