// The fragment maps of common/fragment_layout.h, checked on the host against a simulation of the
// two instructions as the PTX ISA defines them:
//
//   ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lane l supplies the address of row l%8 of
//     matrix l/8 (8 contiguous 16-bit elements). Without .trans, thread t receives in register i
//     the elements [row t/4][cols 2*(t%4), 2*(t%4)+1] of matrix i; with .trans it receives
//     [rows 2*(t%4), 2*(t%4)+1][col t/4] (the matrix transposed).
//   mma.sync.aligned.m16n8k16: D (16x8) = A (16x16) * B (16x8) + C, each operand spread over the
//     warp's 32 lanes as the mma_* maps say.
//
// If the maps and the addressing agree, loading random Q, K, V tiles the way the kernels do and
// multiplying the fragments gives exactly Q K^T and P V. Small integer inputs keep every product
// and sum exact, so the comparisons are equalities.
#include <array>
#include <random>
#include <set>
#include <utility>

#include "common/fragment_layout.h"
#include "fa_catch.h"

namespace {

constexpr int kLanes = 32;

using Tile16x16 = std::array<std::array<double, 16>, 16>;  // [row][col]
using Tile16x8 = std::array<std::array<double, 8>, 16>;

// What one lane holds: a 32-bit register as its two 16-bit halves, low half first.
using Reg = std::array<double, 2>;
template <int kRegs>
using WarpRegs = std::array<std::array<Reg, kRegs>, kLanes>;  // [lane][register]

Tile16x16 random_tile(uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> small(-8, 8);
  Tile16x16 t{};
  for (auto& row : t)
    for (double& x : row) x = small(rng);
  return t;
}

// ldmatrix.x4 from a 16x16 tile in "shared memory". `row_of(lane)` / `col_of(lane)` is the
// addressing under test: the lane's row address is &tile[row][col], and the hardware reads the 8
// elements tile[row][col .. col+7] as one row of matrix lane/8.
template <typename RowFn, typename ColFn>
WarpRegs<4> ldmatrix_x4(const Tile16x16& tile, RowFn row_of, ColFn col_of, bool trans) {
  // rows[m][r] = the 8 elements of row r of matrix m, as the addresses say.
  std::array<std::array<std::array<double, 8>, 8>, 4> rows{};
  for (int lane = 0; lane < kLanes; ++lane) {
    const int row = row_of(lane), col = col_of(lane);
    REQUIRE(row >= 0);
    REQUIRE(row < 16);
    REQUIRE(col % 8 == 0);  // a row address must be 16-byte aligned
    REQUIRE(col + 8 <= 16);
    for (int j = 0; j < 8; ++j) rows[lane / 8][lane % 8][j] = tile[row][col + j];
  }
  WarpRegs<4> regs{};
  for (int t = 0; t < kLanes; ++t) {
    for (int m = 0; m < 4; ++m) {
      for (int half = 0; half < 2; ++half) {
        regs[t][m][half] = trans ? rows[m][2 * (t % 4) + half][t / 4] : rows[m][t / 4][2 * (t % 4) + half];
      }
    }
  }
  return regs;
}

// An A operand (4 registers, element e = register e/2, half e%2) back to the 16x16 matrix it
// represents, through mma_a_row/col. Every element must be covered exactly once.
Tile16x16 a_matrix(const WarpRegs<4>& a) {
  Tile16x16 m{};
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int e = 0; e < 8; ++e) {
      const int row = fa::mma_a_row(lane, e), col = fa::mma_a_col(lane, e);
      REQUIRE(seen.insert({row, col}).second);
      m[row][col] = a[lane][e / 2][e % 2];
    }
  }
  REQUIRE(seen.size() == 256);
  return m;
}

// A B operand (2 registers) back to its 16x8 (K x N) matrix, through mma_b_k/n.
std::array<std::array<double, 8>, 16> b_matrix(const std::array<std::array<Reg, 2>, kLanes>& b) {
  std::array<std::array<double, 8>, 16> m{};
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int e = 0; e < 4; ++e) {
      const int k = fa::mma_b_k(lane, e), n = fa::mma_b_n(lane, e);
      REQUIRE(seen.insert({k, n}).second);
      m[k][n] = b[lane][e / 2][e % 2];
    }
  }
  REQUIRE(seen.size() == 128);
  return m;
}

// mma.m16n8k16 as the ISA defines it: D = A B, returned as each lane's 4 accumulators.
std::array<std::array<double, 4>, kLanes> mma(const WarpRegs<4>& a,
                                              const std::array<std::array<Reg, 2>, kLanes>& b) {
  const Tile16x16 am = a_matrix(a);
  const auto bm = b_matrix(b);
  std::array<std::array<double, 4>, kLanes> c{};
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const int row = fa::mma_c_row(lane, i), col = fa::mma_c_col(lane, i);
      double sum = 0.0;
      for (int k = 0; k < 16; ++k) sum += am[row][k] * bm[k][col];
      c[lane][i] = sum;
    }
  }
  return c;
}

// Registers {2j, 2j+1} of an x4 load: the B operand of n-tile j.
std::array<std::array<Reg, 2>, kLanes> b_operand(const WarpRegs<4>& regs, int j) {
  std::array<std::array<Reg, 2>, kLanes> b{};
  for (int lane = 0; lane < kLanes; ++lane) {
    b[lane][0] = regs[lane][2 * j];
    b[lane][1] = regs[lane][2 * j + 1];
  }
  return b;
}

}  // namespace

TEST_CASE("mma_c_row/col cover the 16x8 accumulator tile exactly once", "[fragment]") {
  std::set<std::pair<int, int>> seen;
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const int row = fa::mma_c_row(lane, i), col = fa::mma_c_col(lane, i);
      CHECK(row >= 0);
      CHECK(row < 16);
      CHECK(col >= 0);
      CHECK(col < 8);
      CHECK(seen.insert({row, col}).second);
    }
  }
  CHECK(seen.size() == 16 * 8);
}

TEST_CASE("ldmatrix_a addressing fills exactly the mma A fragment of a Q tile", "[fragment]") {
  const Tile16x16 q = random_tile(1);
  const WarpRegs<4> a = ldmatrix_x4(q, fa::ldmatrix_a_row, fa::ldmatrix_a_col, /*trans=*/false);
  for (int lane = 0; lane < kLanes; ++lane)
    for (int e = 0; e < 8; ++e)
      CHECK(a[lane][e / 2][e % 2] == q[fa::mma_a_row(lane, e)][fa::mma_a_col(lane, e)]);
  CHECK(a_matrix(a) == q);
}

TEST_CASE("S = Q K^T from ldmatrix-loaded fragments equals the plain matmul", "[fragment]") {
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const Tile16x16 q = random_tile(10 + seed);  // [query row][head dim]
    const Tile16x16 k = random_tile(20 + seed);  // [key][head dim], as K sits in shared memory
    const WarpRegs<4> a = ldmatrix_x4(q, fa::ldmatrix_a_row, fa::ldmatrix_a_col, false);
    const WarpRegs<4> kb = ldmatrix_x4(k, fa::ldmatrix_bt_row, fa::ldmatrix_bt_col, false);
    for (int j = 0; j < 2; ++j) {  // registers 0,1: keys 0-7; registers 2,3: keys 8-15
      const auto s = mma(a, b_operand(kb, j));
      for (int lane = 0; lane < kLanes; ++lane) {
        for (int i = 0; i < 4; ++i) {
          const int row = fa::mma_c_row(lane, i), key = 8 * j + fa::mma_c_col(lane, i);
          double expected = 0.0;
          for (int d = 0; d < 16; ++d) expected += q[row][d] * k[key][d];
          INFO("seed " << seed << ", n-tile " << j << ", lane " << lane << ", c[" << i << "]");
          CHECK(s[lane][i] == expected);
        }
      }
    }
  }
}

TEST_CASE("O = P V from the S accumulators and ldmatrix.trans-loaded V equals the plain matmul",
          "[fragment]") {
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const Tile16x16 p = random_tile(30 + seed);  // [query row][key]
    const Tile16x16 v = random_tile(40 + seed);  // [key][head dim], as V sits in shared memory

    // P arrives as the accumulators of two S n-tiles (keys 0-7 and 8-15), not through ldmatrix.
    std::array<std::array<std::array<double, 4>, kLanes>, 2> s_acc{};
    for (int j = 0; j < 2; ++j)
      for (int lane = 0; lane < kLanes; ++lane)
        for (int i = 0; i < 4; ++i)
          s_acc[j][lane][i] = p[fa::mma_c_row(lane, i)][8 * j + fa::mma_c_col(lane, i)];
    // The kernels' repacking (p_fragment() in every stage): register j of P's A fragment for
    // k-step kk = 0 is the pair of entries p_frag_s_entry(j), +1 of S n-tile p_frag_s_tile(0, j).
    // It must be the A fragment of P.
    WarpRegs<4> p_frag{};
    for (int lane = 0; lane < kLanes; ++lane)
      for (int j = 0; j < 4; ++j) {
        const auto& tile = s_acc[fa::p_frag_s_tile(0, j)][lane];
        p_frag[lane][j] = {tile[fa::p_frag_s_entry(j)], tile[fa::p_frag_s_entry(j) + 1]};
      }
    CHECK(a_matrix(p_frag) == p);

    const WarpRegs<4> vb = ldmatrix_x4(v, fa::ldmatrix_b_trans_row, fa::ldmatrix_b_trans_col, /*trans=*/true);
    for (int j = 0; j < 2; ++j) {  // registers 0,1: head dims 0-7; registers 2,3: head dims 8-15
      const auto o = mma(p_frag, b_operand(vb, j));
      for (int lane = 0; lane < kLanes; ++lane) {
        for (int i = 0; i < 4; ++i) {
          const int row = fa::mma_c_row(lane, i), dim = 8 * j + fa::mma_c_col(lane, i);
          double expected = 0.0;
          for (int key = 0; key < 16; ++key) expected += p[row][key] * v[key][dim];
          INFO("seed " << seed << ", n-tile " << j << ", lane " << lane << ", c[" << i << "]");
          CHECK(o[lane][i] == expected);
        }
      }
    }
  }
}

TEST_CASE("P's repacking for k-step kk reads n-tiles 2kk and 2kk+1, each pair once", "[fragment]") {
  for (int kk = 0; kk < 8; ++kk) {
    int uses[2][4] = {};  // [tile - 2kk][entry]
    for (int j = 0; j < 4; ++j) {
      const int t = fa::p_frag_s_tile(kk, j), e = fa::p_frag_s_entry(j);
      INFO("kk " << kk << ", register " << j);
      REQUIRE((t == 2 * kk || t == 2 * kk + 1));
      REQUIRE((e == 0 || e == 2));
      ++uses[t - 2 * kk][e];
      ++uses[t - 2 * kk][e + 1];
    }
    for (auto& tile : uses)
      for (int n : tile) CHECK(n == 1);
  }
}

TEST_CASE("the same tile loaded without .trans would not give P V (the test can fail)", "[fragment]") {
  // Guards the simulation itself: if it ignored .trans, the test above would prove nothing.
  const Tile16x16 p = random_tile(50), v = random_tile(60);
  const WarpRegs<4> plain = ldmatrix_x4(v, fa::ldmatrix_b_trans_row, fa::ldmatrix_b_trans_col, false);
  const WarpRegs<4> trans = ldmatrix_x4(v, fa::ldmatrix_b_trans_row, fa::ldmatrix_b_trans_col, true);
  CHECK(plain != trans);
  const WarpRegs<4> a = ldmatrix_x4(p, fa::ldmatrix_a_row, fa::ldmatrix_a_col, false);
  const auto o = mma(a, b_operand(plain, 0));
  bool all_equal = true;
  for (int lane = 0; lane < kLanes; ++lane) {
    for (int i = 0; i < 4; ++i) {
      double expected = 0.0;
      for (int key = 0; key < 16; ++key)
        expected += p[fa::mma_c_row(lane, i)][key] * v[key][fa::mma_c_col(lane, i)];
      all_equal = all_equal && o[lane][i] == expected;
    }
  }
  CHECK_FALSE(all_equal);
}
