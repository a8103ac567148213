// Every stage's shared-memory tile layout (stages/<track>/NN_name/smem_layout.h), checked on the host.
//
// Shared memory has 32 banks of 4 bytes. ldmatrix reads 8 rows of 16 bytes per phase (one 8x8
// matrix): the phase is conflict-free when the 8 row addresses fall in 8 different 16-byte bank
// groups, group = (byte_offset / 16) % 8. A plain row-major tile with 128- or 256-byte rows puts
// the same chunk of 8 consecutive rows in one group: an 8-way conflict. Each stage's smem_layout.h
// declares what its layout costs (kLdmatrixConflictWays: 8 for the plain layout of ampere_01_base
// to ampere_03_eager_kv, which is why ampere_04_swizzle exists; 1 for the swizzle), and every phase
// the kernels issue must cost exactly that.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/fragment_layout.h"
#include "fa_catch.h"
#include "smem_layouts.h"  // every stage's tile_offset(), a table generated from FA_STAGES

namespace {

using smem_layouts::StageLayout;

std::vector<StageLayout> stage_layouts() {
  std::vector<StageLayout> layouts;
  for (int i = 0; i < smem_layouts::kStageLayoutCount; ++i)
    layouts.push_back(*smem_layouts::kStageLayouts[i]);
  return layouts;
}

constexpr int kMaxTileRows = 128;  // the largest tile any stage stages (Br = 128 from ampere_08 on)
constexpr int kElemBytes = 2;      // fp16 / bf16
const int kRowElemsCases[] = {64, 128};

bool swizzle_expected(const StageLayout& s) {
  return s.ldmatrix_conflict_ways == 1;
}

// How many serialized passes ("wavefronts") shared memory needs for accesses of `access_bytes`
// each (4 or 16) issued together: the most distinct addresses that share one bank (4-byte
// accesses) or one 16-byte bank group (16-byte accesses, 8 groups of 4 banks).
int conflict_degree(const std::vector<int>& byte_offsets, int access_bytes) {
  const int units = 128 / access_bytes;  // banks (32) or bank groups (8)
  std::map<int, std::set<int>> by_unit;
  for (int offset : byte_offsets) by_unit[(offset / access_bytes) % units].insert(offset / access_bytes);
  size_t worst = 0;
  for (const auto& entry : by_unit) worst = std::max(worst, entry.second.size());
  return static_cast<int>(worst);
}

struct Addressing {
  const char* what;
  int (*row)(int lane);
  int (*col)(int lane);
};
const Addressing kLdmatrixAddressings[] = {
    {"Q (A fragment)", fa::ldmatrix_a_row, fa::ldmatrix_a_col},
    {"K (B fragments, [n][k] tile)", fa::ldmatrix_bt_row, fa::ldmatrix_bt_col},
    {"V (B fragments via .trans)", fa::ldmatrix_b_trans_row, fa::ldmatrix_b_trans_col},
};

}  // namespace

TEST_CASE("every stage's smem layout is registered", "[smem]") {
  CHECK(smem_layouts::kStageLayoutCount >= 8);
  for (const StageLayout& s : stage_layouts()) {
    INFO("stage " << s.stage);
    CHECK(s.tile_offset != nullptr);
    CHECK((s.ldmatrix_conflict_ways == 1 || s.ldmatrix_conflict_ways == 8));
  }
}

TEST_CASE("tile_offset is a bijection on the tile and keeps 16-byte chunks contiguous", "[smem]") {
  for (const StageLayout& s : stage_layouts()) {
    for (int row_elems : kRowElemsCases) {
      INFO("stage " << s.stage << ", row_elems " << row_elems);
      const int elems = kMaxTileRows * row_elems;
      std::vector<int> hits(elems, 0);
      bool in_range = true, chunks_contiguous = true, chunks_aligned = true;
      for (int row = 0; row < kMaxTileRows; ++row) {
        for (int col = 0; col < row_elems; ++col) {
          const int offset = s.tile_offset(row, col, row_elems);
          if (offset < 0 || offset >= elems) {
            in_range = false;
            continue;
          }
          ++hits[offset];
          const int chunk_start = s.tile_offset(row, col - col % 8, row_elems);
          if (offset != chunk_start + col % 8) chunks_contiguous = false;
          if (chunk_start % 8 != 0) chunks_aligned = false;
        }
      }
      CHECK(in_range);
      CHECK(chunks_contiguous);
      CHECK(chunks_aligned);
      int not_once = 0;
      for (int h : hits) not_once += h != 1;
      CHECK(not_once == 0);
    }
  }
}

TEST_CASE("ldmatrix phases cost exactly what each layout declares (8-way or conflict-free)", "[smem]") {
  for (const StageLayout& s : stage_layouts()) {
    for (int row_elems : kRowElemsCases) {
      for (const Addressing& a : kLdmatrixAddressings) {
        INFO("stage " << s.stage << ", row_elems " << row_elems << ", loading " << a.what);
        // Every 16x16 sub-tile an ldmatrix.x4 of the kernels reads: rows start at multiples of 16
        // (warp rows, key pairs), columns at multiples of 16 (k-steps, head-dim pairs).
        int best = 8, worst = 1;
        for (int row0 = 0; row0 < kMaxTileRows; row0 += 16) {
          for (int col0 = 0; col0 < row_elems; col0 += 16) {
            for (int matrix = 0; matrix < 4; ++matrix) {  // one phase per 8x8 matrix
              std::vector<int> bytes;
              for (int lane = 8 * matrix; lane < 8 * matrix + 8; ++lane)
                bytes.push_back(kElemBytes *
                                s.tile_offset(row0 + a.row(lane), col0 + a.col(lane), row_elems));
              const int degree = conflict_degree(bytes, 16);
              best = std::min(best, degree);
              worst = std::max(worst, degree);
            }
          }
        }
        if (swizzle_expected(s)) {
          CHECK(worst == 1);
        } else {
          CHECK(best == 8);  // every phase serializes into 8 passes
        }
      }
    }
  }
}

TEST_CASE("epilogue 4-byte stores of O: conflict-free in every swizzled layout", "[smem]") {
  // Each thread writes the pairs of its accumulators: rows lane/4 (+8), cols d*8 + 2*(lane%4).
  for (const StageLayout& s : stage_layouts()) {
    for (int row_elems : kRowElemsCases) {
      INFO("stage " << s.stage << ", row_elems " << row_elems);
      int worst = 1;
      for (int warp_row0 = 0; warp_row0 < kMaxTileRows; warp_row0 += 16) {
        for (int half = 0; half < 2; ++half) {
          for (int d = 0; d < row_elems / 8; ++d) {
            std::vector<int> bytes;
            for (int lane = 0; lane < 32; ++lane) {
              // The kernels' normalize_and_write_o: row entries 2*half, 2*half+1 of n-tile d.
              const int row = warp_row0 + fa::mma_c_row(lane, 2 * half);
              const int col = d * fa::kMmaN + fa::mma_c_col(lane, 2 * half);
              bytes.push_back(kElemBytes * s.tile_offset(row, col, row_elems));
            }
            worst = std::max(worst, conflict_degree(bytes, 4));
          }
        }
      }
      if (swizzle_expected(s)) {
        CHECK(worst == 1);
      } else {
        CHECK(worst == 8);
      }
    }
  }
}

TEST_CASE("16-byte global->shared copies are conflict-free in every stage", "[smem]") {
  // copy_tile_to_smem: thread i of the block stores chunk i (row i / chunks_per_row). A warp's 32
  // 16-byte stores go in 4 phases of 8 consecutive threads; this holds with or without swizzle, so
  // ampere_04_swizzle is about ldmatrix and the epilogue, not about the copies.
  for (const StageLayout& s : stage_layouts()) {
    for (int row_elems : kRowElemsCases) {
      INFO("stage " << s.stage << ", row_elems " << row_elems);
      const int chunks_per_row = row_elems / 8;
      int worst = 1;
      for (int first = 0; first < kMaxTileRows * chunks_per_row; first += 8) {
        std::vector<int> bytes;
        for (int i = first; i < first + 8; ++i)
          bytes.push_back(kElemBytes *
                          s.tile_offset(i / chunks_per_row, (i % chunks_per_row) * 8, row_elems));
        worst = std::max(worst, conflict_degree(bytes, 16));
      }
      CHECK(worst == 1);
    }
  }
}

// From ampere_10_lane_addresses on, fragment and copy addresses are a per-lane base plus
// compile-time offsets (LaneAddress, copy_tile_to_smem): the sub-tile 16 rows further down, or 64
// columns (8 chunks) further right, is the same swizzle shifted by a constant. This checks that
// identity for every swizzled layout, every lane of every ldmatrix addressing, and both head dims.
TEST_CASE("swizzled layouts: +16 rows and +64 columns are constant shifts (the lane bases of LaneAddress)", "[smem]") {
  for (const StageLayout& s : stage_layouts()) {
    if (!swizzle_expected(s) || s.tile_in_boxes) continue;  // boxes: the next test case
    for (int row_elems : kRowElemsCases) {
      for (const Addressing& a : kLdmatrixAddressings) {
        INFO("stage " << s.stage << ", row_elems " << row_elems << ", loading " << a.what);
        int mismatches = 0;
        for (int row0 = 0; row0 < kMaxTileRows; row0 += 16)
          for (int lane = 0; lane < 32; ++lane) {
            const int row = row0 + a.row(lane);
            const int col_in_pair = a.col(lane);  // 0 or 8
            for (int i = 0; row + 16 * i < kMaxTileRows; ++i)
              for (int j = 0; 16 * j < row_elems; ++j) {
                const int base = s.tile_offset(row, 16 * (j % 4) + col_in_pair, row_elems);
                const int expected = base + (j / 4) * 64 + 16 * i * row_elems;
                if (s.tile_offset(row + 16 * i, 16 * j + col_in_pair, row_elems) != expected) ++mismatches;
              }
          }
        CHECK(mismatches == 0);
      }
    }
  }
}

// From ampere_19_xor_lane_address on, a lane keeps one base per tile instead of 4 (LaneAddress):
// the base of chunk group g = 0..3 (the sub-tile columns 16 g .. 16 g + 15) is the group-0 base XOR
// 32 g bytes. That holds where the lane's column is chunk 0 or 1 of its pair (every ldmatrix
// addressing) and the tile starts on a 128-byte boundary (bits 5 and 6 of the start clear); a start
// 32 bytes off breaks it, which the negative control shows.
TEST_CASE("swizzled layouts: a chunk group's lane base is group 0's XOR 32 g (ampere_19_xor_lane_address's LaneAddress)", "[smem]") {
  const int aligned_starts[] = {0, 128, 1024 + 128, 32768};
  for (const StageLayout& s : stage_layouts()) {
    if (!swizzle_expected(s) || s.tile_in_boxes) continue;
    for (int row_elems : kRowElemsCases) {
      for (const Addressing& a : kLdmatrixAddressings) {
        INFO("stage " << s.stage << ", row_elems " << row_elems << ", loading " << a.what);
        const auto mismatches = [&](int tile_start) {
          int count = 0;
          for (int row0 = 0; row0 < kMaxTileRows; row0 += 16)
            for (int lane = 0; lane < 32; ++lane) {
              const int row = row0 + a.row(lane);
              const int col_in_pair = a.col(lane);  // 0 or 8
              const unsigned base = tile_start + kElemBytes * s.tile_offset(row, col_in_pair, row_elems);
              for (int g = 0; g < 4; ++g) {
                const unsigned group = tile_start + kElemBytes * s.tile_offset(row, 16 * g + col_in_pair, row_elems);
                if (group != (base ^ (32u * g))) ++count;
              }
            }
          return count;
        };
        for (int start : aligned_starts) CHECK(mismatches(start) == 0);
        CHECK(mismatches(32) > 0);  // negative control: a tile start with bit 5 set
      }
    }
  }
}

// From experiments_01_tma_store on, O's staging tile is what a TMA store reads: boxes of 64
// rows x 64 columns, each a contiguous 8 KB (so, from a 1024-byte aligned tile, on a 1024-byte
// boundary: the 128-byte swizzle's period), box (slab s, panel p) at element
// 64 * 64 * (s * panels + p), its rows 128 bytes apart (the box's row pitch).
TEST_CASE("box layouts: every 64 x 64 box is contiguous, 1024-byte aligned, with 128-byte rows", "[smem]") {
  for (const StageLayout& s : stage_layouts()) {
    if (!s.tile_in_boxes) continue;
    for (int row_elems : kRowElemsCases) {
      INFO("stage " << s.stage << ", row_elems " << row_elems);
      const int panels = row_elems / 64;
      int outside_box = 0, off_row = 0;
      for (int row = 0; row < kMaxTileRows; ++row)
        for (int col = 0; col < row_elems; ++col) {
          const int box_start = 64 * 64 * ((row / 64) * panels + col / 64);
          const int offset = s.tile_offset(row, col, row_elems) - box_start;
          if (offset < 0 || offset >= 64 * 64) ++outside_box;
          else if (offset / 64 != row % 64) ++off_row;  // 64 elements = 128 bytes a row
        }
      CHECK(outside_box == 0);
      CHECK(off_row == 0);
    }
  }
}
