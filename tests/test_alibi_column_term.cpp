// ALiBi's column term on the tensor cores (stages/ampere/18_alibi_mma/column_term.h), on the CPU: the
// 16-bit parts of a * c add up to a * c, and the m16n8k8 product of the fragments that each lane
// holds is sign * a * c at every (row, column) of the tile.
//
// The product is formed from the fragments as the PTX ISA lays them out for m16n8k8 (A: lane l,
// register i holds row mma_a_row(l, 2 i), columns mma_a_col(l, 2 i) and + 1; B: lane l holds rows
// mma_b_k(l, 0) and mma_b_k(l, 1) of column mma_b_n(l, 0); fragment_layout.h's m16n8k16 entries 0-3
// and 0-1, the first k-half), so a part in the wrong lane, half or register is caught here rather
// than as a slightly wrong softmax on the GPU. ampere_20_column_setup builds the same B registers
// from a shared-memory table through ldmatrix.x4 (stages/ampere/20_column_setup/column_term.h); the
// last case reads that table as ldmatrix would and compares lane by lane.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "fa_catch.h"

#define FA_STAGE_NAMESPACE stage36_column_term
#include "stages/ampere/18_alibi_mma/column_term.h"
#undef FA_STAGE_NAMESPACE
#define FA_STAGE_NAMESPACE stage38_column_term
#include "stages/ampere/20_column_setup/column_term.h"

namespace {

using stage36_column_term::column_term_a;
using stage36_column_term::column_term_b;
using stage36_column_term::column_term_part;
using stage36_column_term::ColumnTermFormat;

template <typename T>
float to_float(uint16_t bits) {
  if constexpr (std::is_same_v<T, __half>) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  } else {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  }
}

// The slopes in raw-score units the kernels see: FlashAttention's geometric slopes over the
// softmax scales of head_dim 64 and 128, steep and negative ones, and values near fp16's bound.
const float kSlopes[] = {0.0f,   1.0f / 256, 0.0039f, 0.35f, 0.84f / 0.125f, 8.0f / 0.0884f,
                         -0.05f, -90.5f,     1e-7f,   3.3e-5f, 500.0f, 32767.0f / 63};

template <typename T>
void check_parts() {
  for (float a : kSlopes)
    for (int c = 0; c < 64; ++c) {
      const float x = a * static_cast<float>(c);
      double sum = 0.0;
      for (int part = 0; part < 4; ++part) sum += to_float<T>(column_term_part<T>(x, part));
      INFO("a = " << a << ", c = " << c);
      CHECK(std::fabs(sum - x) <= std::ldexp(std::fabs(x), -21) + std::ldexp(1.0, -24));
      CHECK(column_term_part<T>(x, ColumnTermFormat<T>::kParts) == 0);  // no part past kParts
    }
}

// Unpack the fragments that b_reg gives each lane (with column_term_a's A) and multiply them out:
// D(row, col) = sum_k A(row, k) B(k, col). Returns how many of the 16 x 8 entries are off sign * a *
// (8 n_tile + col) by more than the parts' error bound; every A and B element must come from exactly
// one lane.
template <typename T, typename BReg>
int wrong_entries(float slope_raw, float sign, int n_tile, BReg b_reg_of) {
  float a[16][8] = {}, b[8][8] = {};
  bool a_set[16][8] = {}, b_set[8][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const uint32_t a_reg = column_term_a<T>(sign, lane);  // the same register for both rows
    for (int i = 0; i < 2; ++i)
      for (int half = 0; half < 2; ++half) {
        const int row = fa::mma_a_row(lane, 2 * i + half), k = fa::mma_a_col(lane, 2 * i + half);
        REQUIRE_FALSE(a_set[row][k]);
        a_set[row][k] = true;
        a[row][k] = to_float<T>(static_cast<uint16_t>(a_reg >> (16 * half)));
      }
    const uint32_t b_reg = b_reg_of(slope_raw, n_tile, lane);
    for (int half = 0; half < 2; ++half) {
      const int k = fa::mma_b_k(lane, half), col = fa::mma_b_n(lane, half);
      REQUIRE_FALSE(b_set[k][col]);
      b_set[k][col] = true;
      b[k][col] = to_float<T>(static_cast<uint16_t>(b_reg >> (16 * half)));
    }
  }
  int wrong = 0;
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col) {
      REQUIRE(a_set[row][col]);
      REQUIRE(b_set[row % 8][col]);
      double d = 0.0;
      for (int k = 0; k < 8; ++k) d += static_cast<double>(a[row][k]) * b[k][col];
      const double expected = sign * slope_raw * static_cast<float>(8 * n_tile + col);
      if (std::fabs(d - expected) > std::ldexp(std::fabs(expected), -21) + std::ldexp(1.0, -24)) ++wrong;
    }
  return wrong;
}

template <typename T>
void check_product(float slope_raw, float sign, int n_tile) {
  INFO("slope_raw " << slope_raw << ", sign " << sign << ", n-tile " << n_tile);
  CHECK(wrong_entries<T>(slope_raw, sign, n_tile, column_term_b<T>) == 0);
}

// The negative control: B built for column lane % 8 instead of lane / 4 (the lane's index in its
// quad mixed into its group) puts other columns' terms in most columns.
template <typename T>
void check_wrong_lane_is_caught(float slope_raw, float sign, int n_tile) {
  const auto wrong_lane = [](float a, int n, int lane) {
    return column_term_b<T>(a, n, (lane % 8) * 4 + lane % 4);
  };
  INFO("slope_raw " << slope_raw << ", sign " << sign << ", n-tile " << n_tile);
  CHECK(wrong_entries<T>(slope_raw, sign, n_tile, wrong_lane) > 0);
}

// ampere_20_column_setup's B registers: a table of 64 rows of 4 words (column_term_row, one row per
// column c), read by two ldmatrix.x4 (no .trans). In an x4, matrix j's row r comes from the address
// of lane 8 j + r, and lane l receives word l % 4 of row l / 4 of matrix j in its register j (PTX
// ISA, ldmatrix). The address lane l gives for the x4 of n-tiles 4 h .. 4 h + 3 is row
// column_term_table_row(h, l); `matrix_shift` rotates the matrices (1: the negative control).
template <typename T>
struct TableThroughLdmatrix {
  uint32_t table[64][4];
  int matrix_shift;
  TableThroughLdmatrix(float slope_raw, int shift) : matrix_shift(shift) {
    for (int c = 0; c < 64; ++c) stage38_column_term::column_term_row<T>(slope_raw, c, table[c]);
  }
  uint32_t operator()(float, int n_tile, int lane) const {
    const int h = n_tile / 4, j = (n_tile + matrix_shift) % 4;
    return table[stage38_column_term::column_term_table_row(h, 8 * j + lane / 4)][lane % 4];
  }
};

}  // namespace

TEST_CASE("alibi column term: the 16-bit parts of a * c add up to it within 2^-21 (and fp16's subnormal step)", "[alibi][column_term]") {
  check_parts<__half>();
  check_parts<__nv_bfloat16>();
}

TEST_CASE("alibi column term: each lane's m16n8k8 fragments multiply out to sign * a * c", "[alibi][column_term]") {
  for (float a : kSlopes)
    for (float sign : {1.0f, -1.0f})
      for (int n_tile = 0; n_tile < 8; ++n_tile) {
        check_product<__half>(a, sign, n_tile);
        check_product<__nv_bfloat16>(a, sign, n_tile);
      }
}

TEST_CASE("alibi column term: a B register taken from the wrong lane is caught", "[alibi][column_term]") {
  for (float a : {0.35f, 6.72f, -90.5f})
    for (int n_tile : {0, 7}) {
      check_wrong_lane_is_caught<__half>(a, 1.0f, n_tile);
      check_wrong_lane_is_caught<__nv_bfloat16>(a, -1.0f, n_tile);
    }
}

TEST_CASE("alibi column term: fp16's bound keeps every part finite", "[alibi][column_term]") {
  const float a = ColumnTermFormat<__half>::kMaxColumnTerm / 63;  // the largest the kernel lets through
  for (int part = 0; part < ColumnTermFormat<__half>::kParts; ++part)
    CHECK(std::isfinite(to_float<__half>(column_term_part<__half>(a * 63, part))));
  CHECK(ColumnTermFormat<__half>::kMaxColumnTerm < 65504.0f);
}

TEST_CASE("alibi column term: ampere_20_column_setup's table read by ldmatrix.x4 gives every lane ampere_18_alibi_mma's B register", "[alibi][column_term]") {
  for (float a : kSlopes) {
    const TableThroughLdmatrix<__half> table_fp16(a, 0);
    const TableThroughLdmatrix<__nv_bfloat16> table_bf16(a, 0);
    for (int n_tile = 0; n_tile < 8; ++n_tile) {
      INFO("slope_raw " << a << ", n-tile " << n_tile);
      for (int lane = 0; lane < 32; ++lane) {
        CHECK(table_fp16(a, n_tile, lane) == column_term_b<__half>(a, n_tile, lane));
        CHECK(table_bf16(a, n_tile, lane) == column_term_b<__nv_bfloat16>(a, n_tile, lane));
      }
      CHECK(wrong_entries<__half>(a, -1.0f, n_tile, table_fp16) == 0);
      CHECK(wrong_entries<__nv_bfloat16>(a, 1.0f, n_tile, table_bf16) == 0);
    }
  }
  // The negative control: the x4's matrices taken in the wrong order put other n-tiles' columns in.
  for (float a : {0.35f, -90.5f})
    for (int n_tile : {0, 7}) {
      INFO("slope_raw " << a << ", n-tile " << n_tile);
      CHECK(wrong_entries<__half>(a, 1.0f, n_tile, TableThroughLdmatrix<__half>(a, 1)) > 0);
      CHECK(wrong_entries<__nv_bfloat16>(a, -1.0f, n_tile, TableThroughLdmatrix<__nv_bfloat16>(a, 1)) > 0);
    }
}
