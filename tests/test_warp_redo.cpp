// hopper_17_warp_redo's block done again on one warp (stages/hopper/17_warp_redo/smem_layout.h),
// checked on the host: the warp loads mma.sync fragments with ldmatrix.x4 straight from the wgmma
// operand tiles (Q and K in the 128B-swizzled 64-column panels), so each lane's address must name
// the element the fragment maps of common/fragment_layout.h put in its registers, at every row
// block, key block and k-step of both head dims and both tile heights (128 and 192 query rows; 128
// keys). And the kernel's shortcut, every address reached from the lane's one at row 0, column 0 by
// one XOR and added constants (ldmatrix_offset_from), must give the same offsets.
//
// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (PTX ISA): lane l supplies the address of row l % 8 of
// matrix l / 8, 8 contiguous 16-bit elements; thread t receives in register i the elements
// [row t / 4][cols 2 (t % 4), 2 (t % 4) + 1] of matrix i. The tile here holds in each element a
// number that names its row and column, so a wrong address shows as a wrong name.
// That the warp's m16n8 C fragments are its part of the wgmma accumulator is
// tests/test_hopper_encoding.cpp's ("registers 4j..4j+3 are an mma.sync m16n8 C fragment").
#include <array>
#include <vector>

#include "common/fragment_layout.h"
#include "fa_catch.h"

#define FA_STAGE_NAMESPACE stage41_warp_redo
#include "stages/hopper/17_warp_redo/smem_layout.h"
#undef FA_STAGE_NAMESPACE

namespace {

constexpr int kLanes = 32;
constexpr int kBlockKV = 128;

// The element (row, col) of a tile, as the number stored in it.
constexpr int name_of(int row, int col) {
  return row * 1000 + col;
}

// A [rows x head_dim] operand tile in operand_offset's layout, each element holding its name.
std::vector<int> named_tile(int rows, int head_dim) {
  std::vector<int> tile(static_cast<size_t>(rows * head_dim), -1);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < head_dim; ++c) {
      const int at = stage41_warp_redo::operand_offset(r, c, rows);
      REQUIRE(at >= 0);
      REQUIRE(at < rows * head_dim);
      tile[static_cast<size_t>(at)] = name_of(r, c);
    }
  return tile;
}

// What ldmatrix.x4 delivers: regs[t][i][h] = half h of register i of thread t, when lane l points
// at element offset `offset_of(l)` of `tile`.
template <typename OffsetFn>
std::array<std::array<std::array<int, 2>, 4>, kLanes> ldmatrix_x4(const std::vector<int>& tile, OffsetFn offset_of) {
  std::array<std::array<std::array<int, 8>, 8>, 4> rows{};  // [matrix][row][element]
  for (int lane = 0; lane < kLanes; ++lane) {
    const int at = offset_of(lane);
    REQUIRE(at % 8 == 0);  // a row address is 16-byte aligned
    REQUIRE(at + 8 <= static_cast<int>(tile.size()));
    for (int j = 0; j < 8; ++j) rows[lane / 8][lane % 8][j] = tile[static_cast<size_t>(at + j)];
  }
  std::array<std::array<std::array<int, 2>, 4>, kLanes> regs{};
  for (int t = 0; t < kLanes; ++t)
    for (int i = 0; i < 4; ++i)
      for (int h = 0; h < 2; ++h) regs[t][i][h] = rows[i][t / 4][2 * (t % 4) + h];
  return regs;
}

}  // namespace

TEST_CASE("hopper_17_warp_redo: ldmatrix from the swizzled Q panels gives every warp's mma.sync A fragments", "[warp_redo]") {
  for (int head_dim : {64, 128})
    for (int q_rows : {128, 192}) {
      const std::vector<int> q = named_tile(q_rows, head_dim);
      for (int row0 = 0; row0 < q_rows; row0 += fa::kMmaM)
        for (int k0 = 0; k0 < head_dim; k0 += fa::kMmaK) {
          const auto a = ldmatrix_x4(q, [&](int lane) {
            const int direct = stage41_warp_redo::ldmatrix_a_offset(row0, k0, lane, q_rows);
            const int origin = stage41_warp_redo::ldmatrix_a_offset(0, 0, lane, q_rows);
            CHECK(stage41_warp_redo::ldmatrix_offset_from(origin, row0, k0, q_rows) == direct);
            return direct;
          });
          int wrong = 0;
          for (int t = 0; t < kLanes; ++t)
            for (int e = 0; e < 8; ++e)
              wrong += a[t][e / 2][e % 2] != name_of(row0 + fa::mma_a_row(t, e), k0 + fa::mma_a_col(t, e));
          INFO("head_dim " << head_dim << ", " << q_rows << " rows, row0 " << row0 << ", k0 " << k0);
          CHECK(wrong == 0);
        }
    }
}

TEST_CASE("hopper_17_warp_redo: ldmatrix from the swizzled K panels gives the B fragments of every n8 pair", "[warp_redo]") {
  for (int head_dim : {64, 128}) {
    const std::vector<int> k = named_tile(kBlockKV, head_dim);
    for (int key0 = 0; key0 < kBlockKV; key0 += 2 * fa::kMmaN)
      for (int k0 = 0; k0 < head_dim; k0 += fa::kMmaK) {
        const auto b = ldmatrix_x4(k, [&](int lane) {
          const int direct = stage41_warp_redo::ldmatrix_bt_offset(key0, k0, lane, kBlockKV);
          const int origin = stage41_warp_redo::ldmatrix_bt_offset(0, 0, lane, kBlockKV);
          CHECK(stage41_warp_redo::ldmatrix_offset_from(origin, key0, k0, kBlockKV) == direct);
          return direct;
        });
        int wrong = 0;
        for (int t = 0; t < kLanes; ++t)
          for (int half = 0; half < 2; ++half)  // registers 0-1: keys key0 .. key0 + 7; 2-3: the next 8
            for (int e = 0; e < 4; ++e)
              wrong += b[t][2 * half + e / 2][e % 2] !=
                       name_of(key0 + fa::kMmaN * half + fa::mma_b_n(t, e), k0 + fa::mma_b_k(t, e));
        INFO("head_dim " << head_dim << ", key0 " << key0 << ", k0 " << k0);
        CHECK(wrong == 0);
      }
  }
}

TEST_CASE("hopper_17_warp_redo: the check can fail (A addressing used for K's B fragments)", "[warp_redo]") {
  const std::vector<int> k = named_tile(kBlockKV, 128);
  const auto b = ldmatrix_x4(k, [&](int lane) { return stage41_warp_redo::ldmatrix_a_offset(0, 0, lane, kBlockKV); });
  int wrong = 0;
  for (int t = 0; t < kLanes; ++t)
    for (int half = 0; half < 2; ++half)
      for (int e = 0; e < 4; ++e)
        wrong += b[t][2 * half + e / 2][e % 2] != name_of(fa::kMmaN * half + fa::mma_b_n(t, e), fa::mma_b_k(t, e));
  CHECK(wrong > 0);
}
