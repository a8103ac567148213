// GQA packing: the query heads that share one key/value head are the rows of one query tile, so a
// thread block reads that K/V head's keys once for all of them. Host and device: the kernels and the
// launcher call these, and tests/test_gqa_packing.cpp runs the same functions on the CPU.
//
// A (batch, K/V head) has group = heads / kv_heads query heads of seq_q tokens each. Packed, their
// group * seq_q rows are numbered token-major, the head fastest, and cut into query tiles of
// kBlockQ rows exactly as one head's seq_q rows are in the parent:
//   packed row R = i * group + g     (token i of query head kv_head * group + g)
// Unpacked, a tile holds one head (heads_per_tile = 1) and R = i: the parent's numbering. Token-major
// keeps a tile's tokens a contiguous run, so its causal bounds are those of its first and last row.
#pragma once

#include <cstdint>

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

namespace FA_STAGE_NAMESPACE {

// ============================ whether to pack ============================
// Query tiles of one batch for heads_per_tile heads to a tile: (heads / heads_per_tile) tile groups
// of ceil(seq_q * heads_per_tile / block_q) tiles each.
FA_HOST_DEVICE constexpr int64_t query_tiles(int64_t heads, int64_t seq_q, int64_t heads_per_tile, int block_q) {
  return heads / heads_per_tile * ((seq_q * heads_per_tile + block_q - 1) / block_q);
}

// The launcher's choice (host code): a tile takes the whole group where that makes fewer query tiles
// than one head per tile -- each tile reads its K/V head's keys once, so fewer tiles read fewer
// bytes -- and the group fits a tile (at most block_q heads, so that a tile holds every head of at
// least one token and the causal mask's arithmetic stays small). Otherwise 1: the parent's mapping.
//   * decoding (seq_q 1..16, group >= 2): always packed; 32 heads on 8 K/V heads at seq_q 1 make 8
//     tiles of 4 rows instead of 32 tiles of 1 row;
//   * prefill at multiples of block_q: the same number of tiles either way, so never packed (the
//     parent's kernel path and numbers);
//   * MHA (group 1): nothing to pack.
inline int choose_heads_per_tile(int64_t heads, int64_t kv_heads, int64_t seq_q, int block_q) {
  const int64_t group = heads / kv_heads;
  if (group <= 1 || group > block_q) return 1;
  const bool fewer_tiles = query_tiles(heads, seq_q, group, block_q) < query_tiles(heads, seq_q, 1, block_q);
  return fewer_tiles ? static_cast<int>(group) : 1;
}

// ============================ the rows of one tile ============================
// Row `row` (0..kBlockQ-1) of the tile whose first packed row is R0: with first_in_group = R0 %
// heads_per_tile, its token is the tile's first token (R0 / heads_per_tile) plus token(row), its
// query head the tile group's first head plus head(row). The kernel asks this of every row it
// loads or writes, so the division n / h (n = first_in_group + row) is a multiplication:
//   n / h = (n * m) >> 16   with m = ceil(2^16 / h) = (2^16 + e) / h, 0 <= e < h,
// exact wherever n * (h - 1) < 2^16: n * m / 2^16 = n / h + n e / (h 2^16), and the fraction of n / h,
// at most (h - 1) / h, plus n e / (h 2^16) < n (h - 1) / (h 2^16) stays below 1. Here n < h + 128
// <= 256 and h <= 128 (choose_heads_per_tile packs no group above the tile's 128 rows): n (h - 1) <
// 2^15. One IMAD and a shift instead of a 32-bit division's ~20 instructions (FA3 packs GQA with a
// precomputed divisor too, CUTLASS's FastDivmod); tests/test_gqa_packing.cpp checks every n and h.
constexpr int kReciprocalShift = 16;

struct PackedRows {
  int heads_per_tile;
  int reciprocal;  // ceil(2^16 / heads_per_tile)
  int first_in_group;
  FA_HOST_DEVICE constexpr int token(int row) const {
    return ((first_in_group + row) * reciprocal) >> kReciprocalShift;
  }
  FA_HOST_DEVICE constexpr int head(int row) const { return first_in_group + row - token(row) * heads_per_tile; }
  // The row's element offset from the tile's (first token, first head) in a tensor with these strides.
  FA_HOST_DEVICE constexpr int64_t offset(int row, int64_t token_stride, int64_t head_stride) const {
    return token(row) * token_stride + head(row) * head_stride;
  }
};

FA_HOST_DEVICE constexpr PackedRows packed_rows(int64_t first_row, int heads_per_tile) {
  return {heads_per_tile, ((1 << kReciprocalShift) + heads_per_tile - 1) / heads_per_tile,
          static_cast<int>(first_row % heads_per_tile)};
}

// Causal: key `key` of a K/V block is above the diagonal of tile row `row` where key > token +
// diagonal (diagonal: the tile's first token, plus seq_kv - seq_q, minus the block's first key).
// With the row's token floor((first_in_group + row) / h), the same test without a division:
//   key - diagonal > floor(x / h)  <=>  (key - diagonal) * h > x      (h > 0, x >= 0 integers)
// since an integer above floor(x / h) is at least floor(x / h) + 1 > x / h, and one at most
// floor(x / h) times h is at most x. With h = 1 it is the parent's key > row + diagonal.
FA_HOST_DEVICE constexpr bool above_diagonal(int key, int diagonal, int heads_per_tile, int packed_row_in_tile) {
  return (key - diagonal) * heads_per_tile > packed_row_in_tile;
}

// ============================ back to (batch, head, token) ============================
// The combine kernel's inverse: the split workspace keeps the rows in packed order, [batch][tile
// group][packed row] (one tile group: heads_per_tile heads x seq_q tokens); row `row` of it is token
// `token` of query head `head` in batch `batch`.
struct QueryRow {
  int64_t batch, head, token;
};

FA_HOST_DEVICE constexpr QueryRow unpack_row(int64_t row, int64_t seq_q, int64_t heads, int heads_per_tile) {
  const int64_t group_rows = seq_q * heads_per_tile;
  const int64_t batch_group = row / group_rows, packed = row % group_rows;
  const int64_t groups = heads / heads_per_tile;
  return {batch_group / groups, batch_group % groups * heads_per_tile + packed % heads_per_tile,
          packed / heads_per_tile};
}

}  // namespace FA_STAGE_NAMESPACE
