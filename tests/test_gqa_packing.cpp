// GQA packing's index arithmetic on the CPU (stages/decode/02_gqa_packing/gqa_packing.h, the very
// functions the kernels call): the division by heads_per_tile done as a multiplication is exact
// wherever the kernel uses it; the rows of the tiles of a tile group, decoded as the attention
// kernel decodes them, are every (query head, token) of the group exactly once, each in the tile
// group of its own K/V head; the split workspace's packed rows read back by the combine kernel's
// unpack_row land on the same (batch, head, token); the causal test without a division is the one
// with it; and the launcher packs exactly where that makes fewer query tiles.
#include <algorithm>
#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "fa_catch.h"

#define FA_STAGE_NAMESPACE gqa_packing_02
#include "stages/decode/02_gqa_packing/gqa_packing.h"
#undef FA_STAGE_NAMESPACE

namespace {

using gqa_packing_02::above_diagonal;
using gqa_packing_02::choose_heads_per_tile;
using gqa_packing_02::packed_rows;
using gqa_packing_02::PackedRows;
using gqa_packing_02::query_tiles;
using gqa_packing_02::QueryRow;
using gqa_packing_02::unpack_row;

constexpr int kBlockQ = 128;  // the stage's query tile (kernel.cu)

// Where the attention kernel sends row `row` of thread block `block_x` (query blocks fastest, as in
// its decode of blockIdx.x; the causal order only permutes the blocks): (batch, query head, token),
// the K/V head it reads, and the row's packed index in its tile group (its workspace row).
struct KernelRow {
  int64_t batch, head, token, kv_head, workspace_row;
};

KernelRow kernel_row(int64_t block_x, int row, int64_t heads, int64_t kv_heads, int64_t seq_q, int hpt) {
  const int64_t group_rows = seq_q * hpt;
  const int64_t num_q_blocks = (group_rows + kBlockQ - 1) / kBlockQ;
  const int64_t q_block = block_x % num_q_blocks, batch_head = block_x / num_q_blocks;
  const int64_t batch = batch_head / (heads / hpt);
  const int64_t head = batch_head % (heads / hpt) * hpt;
  const PackedRows tile_rows = packed_rows(q_block * kBlockQ, hpt);
  const int64_t first_token = q_block * kBlockQ / hpt;
  return {batch, head + tile_rows.head(row), first_token + tile_rows.token(row), head / (heads / kv_heads),
          batch_head * group_rows + q_block * kBlockQ + row};
}

}  // namespace

TEST_CASE("gqa packing: n / h as (n * ceil(2^16 / h)) >> 16 is exact for every n and h the kernel has",
          "[cpu][gqa_packing]") {
  // h = heads_per_tile <= kBlockQ; n = first_in_group + row < h + kBlockQ.
  for (int h = 1; h <= kBlockQ; ++h) {
    const PackedRows rows = packed_rows(0, h);
    for (int n = 0; n < h + kBlockQ; ++n) {
      INFO("h " << h << ", n " << n);
      REQUIRE(((n * rows.reciprocal) >> gqa_packing_02::kReciprocalShift) == n / h);
    }
  }
}

TEST_CASE("gqa packing: a tile's rows are (token, head) = divmod of their packed index",
          "[cpu][gqa_packing]") {
  for (int h : {1, 2, 3, 4, 5, 7, 8, 16, 31, 32, 64, 127, 128})
    for (int64_t first_row : {int64_t{0}, int64_t{128}, int64_t{256}, int64_t{128} * 1000003}) {
      const PackedRows rows = packed_rows(first_row, h);
      const int64_t first_token = first_row / h;
      for (int row = 0; row < kBlockQ; ++row) {
        INFO("h " << h << ", first row " << first_row << ", row " << row);
        CHECK(first_token + rows.token(row) == (first_row + row) / h);
        CHECK(rows.head(row) == (first_row + row) % h);
        CHECK(rows.offset(row, 1000, 7) == rows.token(row) * 1000 + rows.head(row) * 7);
      }
    }
}

TEST_CASE(
    "gqa packing: every (batch, head, token) once, in its own K/V head's tile, and back through the "
    "workspace",
    "[cpu][gqa_packing]") {
  struct Shape {
    int64_t batch, heads, kv_heads, seq_q;
  };
  const std::vector<Shape> shapes = {{1, 32, 8, 1},  {1, 32, 8, 3},   {2, 32, 8, 16}, {1, 32, 1, 1},
                                     {1, 32, 1, 8},  {2, 32, 1, 16},  {1, 8, 4, 16},  {3, 6, 2, 5},
                                     {1, 8, 8, 3},   {2, 12, 4, 129}, {1, 4, 1, 300}, {1, 128, 1, 3},
                                     {1, 10, 2, 77}, {2, 16, 16, 1},  {1, 64, 8, 16}};
  for (const Shape& s : shapes) {
    const int hpt = choose_heads_per_tile(s.heads, s.kv_heads, s.seq_q, kBlockQ);
    const int64_t group_rows = s.seq_q * hpt;
    const int64_t blocks = s.batch * (s.heads / hpt) * ((group_rows + kBlockQ - 1) / kBlockQ);
    REQUIRE(blocks == s.batch * query_tiles(s.heads, s.seq_q, hpt, kBlockQ));
    std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
    std::set<int64_t> workspace_rows;
    for (int64_t block_x = 0; block_x < blocks; ++block_x) {
      const int64_t q_block = block_x % ((group_rows + kBlockQ - 1) / kBlockQ);
      const int rows = static_cast<int>(std::min<int64_t>(group_rows - q_block * kBlockQ, kBlockQ));
      for (int row = 0; row < rows; ++row) {
        const KernelRow r = kernel_row(block_x, row, s.heads, s.kv_heads, s.seq_q, hpt);
        INFO("batch " << s.batch << ", heads " << s.heads << ":" << s.kv_heads << ", seq_q " << s.seq_q
                      << ", heads_per_tile " << hpt << ", block " << block_x << ", row " << row);
        REQUIRE(r.batch < s.batch);
        REQUIRE(r.head < s.heads);
        REQUIRE(r.token < s.seq_q);
        CHECK(r.kv_head == r.head / (s.heads / s.kv_heads));  // the K/V head the kernel reads is the row's
        CHECK(seen.insert({r.batch, r.head, r.token}).second);
        CHECK(workspace_rows.insert(r.workspace_row).second);
        const QueryRow back = unpack_row(r.workspace_row, s.seq_q, s.heads, hpt);
        CHECK(back.batch == r.batch);
        CHECK(back.head == r.head);
        CHECK(back.token == r.token);
      }
    }
    CHECK(static_cast<int64_t>(seen.size()) == s.batch * s.heads * s.seq_q);
    CHECK(*workspace_rows.rbegin() == s.batch * s.heads * s.seq_q - 1);  // the workspace, dense
  }
}

TEST_CASE("gqa packing: the causal test without a division is key > token + diagonal", "[cpu][gqa_packing]") {
  // diagonal ranges over what the kernel passes for a block it visits (-191..64, kernel.cu); the
  // key over one K/V block.
  for (int h : {1, 2, 3, 4, 8, 32, 128})
    for (int first_in_group = 0; first_in_group < h; first_in_group += (h > 8 ? 7 : 1))
      for (int row = 0; row < kBlockQ; ++row)
        for (int diagonal = -200; diagonal <= 64; ++diagonal)
          for (int key = 0; key < 64; ++key) {
            const int token = (first_in_group + row) / h;
            if (above_diagonal(key, diagonal, h, first_in_group + row) != (key > token + diagonal)) {
              INFO("h " << h << ", first_in_group " << first_in_group << ", row " << row << ", diagonal "
                        << diagonal << ", key " << key);
              FAIL("above_diagonal disagrees with the division");
            }
          }
}

TEST_CASE("gqa packing: the launcher packs where that makes fewer query tiles, else the parent's mapping",
          "[cpu][gqa_packing]") {
  // Decoding: the whole group.
  for (int64_t seq_q : {1, 2, 3, 8, 16}) {
    CHECK(choose_heads_per_tile(32, 8, seq_q, kBlockQ) == 4);
    CHECK(choose_heads_per_tile(32, 1, seq_q, kBlockQ) == 32);
    CHECK(choose_heads_per_tile(32, 16, seq_q, kBlockQ) == 2);
    CHECK(choose_heads_per_tile(128, 1, seq_q, kBlockQ) == 128);
  }
  CHECK(query_tiles(32, 1, 4, kBlockQ) == 8);   // 32 heads on 8 K/V heads, seq_q 1: 8 tiles, not 32
  CHECK(query_tiles(32, 8, 32, kBlockQ) == 2);  // 32 heads on 1, seq_q 8: 256 rows in 2 tiles
  // MHA: nothing to pack.
  for (int64_t seq_q : {1, 16, 4096}) CHECK(choose_heads_per_tile(32, 32, seq_q, kBlockQ) == 1);
  // A group larger than the tile: one head per tile.
  CHECK(choose_heads_per_tile(256, 1, 1, kBlockQ) == 1);
  // Prefill at multiples of the tile: as many tiles either way, so the parent's mapping.
  for (int64_t seq_q : {128, 1024, 4096})
    for (int64_t kv_heads : {1, 8, 16}) CHECK(choose_heads_per_tile(32, kv_heads, seq_q, kBlockQ) == 1);
  // Other lengths: packed exactly where that saves tiles, and never more tiles than unpacked.
  for (int64_t heads : {4, 6, 32})
    for (int64_t kv_heads : {1, 2})
      for (int64_t seq_q = 1; seq_q <= 700; ++seq_q) {
        const int hpt = choose_heads_per_tile(heads, kv_heads, seq_q, kBlockQ);
        INFO("heads " << heads << ":" << kv_heads << ", seq_q " << seq_q);
        const int64_t unpacked = query_tiles(heads, seq_q, 1, kBlockQ);
        const int64_t packed = query_tiles(heads, seq_q, heads / kv_heads, kBlockQ);
        CHECK(hpt == (packed < unpacked ? heads / kv_heads : 1));
        CHECK(query_tiles(heads, seq_q, hpt, kBlockQ) <= unpacked);
      }
}
