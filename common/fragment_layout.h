// Index maps of mma.sync.m16n8k16 fragments and of the ldmatrix addressing that fills them.
// Written once, as constexpr functions usable on host and device, so a CPU test can check that
// the ldmatrix addressing below produces exactly the fragments the MMA expects
// (tests/test_fragment_layout.cpp simulates both instructions from the PTX ISA's definitions).
//
// mma.sync.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), per lane (0..31):
//   A (16x16, row-major), 8 x 16-bit elements in 4 registers:  a[e] = A[row][col] with
//       row = lane/4 + 8*((e/2)%2),  col = 2*(lane%4) + e%2 + 8*(e/4)
//   B (16x8, K x N),      4 x 16-bit elements in 2 registers:  b[e] = B[k][n] with
//       k = 2*(lane%4) + e%2 + 8*(e/2),  n = lane/4
//   C/D (16x8, fp32),     4 floats:                            c[i] = C[row][col] with
//       row = lane/4 + 8*(i/2),  col = 2*(lane%4) + i%2
//
//        C fragment of one warp (16 x 8), entries = lane owning c[0..1] / c[2..3]
//             col: 0 1 | 2 3 | 4 5 | 6 7
//        row 0:   L0   | L1  | L2  | L3        (c0 c1)
//        row 1:   L4   | L5  | L6  | L7
//        ...
//        row 7:   L28  | L29 | L30 | L31
//        row 8:   L0   | L1  | L2  | L3        (c2 c3)
//        ...
//
// ldmatrix.m8n8.x4 (non-transposed): lane l supplies the address of row l%8 of matrix l/8 and
// receives, for each matrix i, the two 16-bit elements at [row l/4][cols 2*(l%4), +1] in register i.
// With .trans it receives [rows 2*(l%4), +1][col l/4] instead (the matrix transposed).
#pragma once

namespace fa {

#if defined(__CUDACC__)
#define FA_HOST_DEVICE __host__ __device__
#else
#define FA_HOST_DEVICE
#endif

// The shape of one mma.sync.m16n8k16: A is kMmaM x kMmaK, B is kMmaK x kMmaN, C is kMmaM x kMmaN.
constexpr int kMmaM = 16;
constexpr int kMmaN = 8;
constexpr int kMmaK = 16;

// ---- the MMA's own fragments ------------------------------------------------------------------
FA_HOST_DEVICE constexpr int mma_a_row(int lane, int e) {
  return lane / 4 + 8 * ((e / 2) % 2);
}
FA_HOST_DEVICE constexpr int mma_a_col(int lane, int e) {
  return 2 * (lane % 4) + e % 2 + 8 * (e / 4);
}
FA_HOST_DEVICE constexpr int mma_b_k(int lane, int e) {
  return 2 * (lane % 4) + e % 2 + 8 * (e / 2);
}
FA_HOST_DEVICE constexpr int mma_b_n(int lane, int /*e*/) {
  return lane / 4;
}
FA_HOST_DEVICE constexpr int mma_c_row(int lane, int i) {
  return lane / 4 + 8 * (i / 2);
}
FA_HOST_DEVICE constexpr int mma_c_col(int lane, int i) {
  return 2 * (lane % 4) + i % 2;
}

// ---- P = the S accumulators, repacked as the A operand of O += P V -----------------------------
// For k-step kk of P V (keys 16 kk .. 16 kk + 15), register j (0..3) of P's A fragment holds the
// accumulator entries {e, e + 1} of S n-tile t, converted to 16 bits, with
//     t = p_frag_s_tile(kk, j) = 2 kk + j / 2,   e = p_frag_s_entry(j) = 2 (j % 2).
// That is the whole trick of keeping P in registers: the C layout of two neighbouring n-tiles is
// the A layout of one k-step (tests/test_fragment_layout.cpp checks it against both definitions).
FA_HOST_DEVICE constexpr int p_frag_s_tile(int kk, int j) {
  return 2 * kk + j / 2;
}
FA_HOST_DEVICE constexpr int p_frag_s_entry(int j) {
  return 2 * (j % 2);
}

// ---- ldmatrix addressing ------------------------------------------------------------------------
// Which row and column of a 16x16 tile lane `lane` points at, so that one ldmatrix.x4 fills:
//
// (1) an A fragment (Q: 16 query rows x 16 head dims):
//     matrix 0 = rows 0-7 / cols 0-7, 1 = rows 8-15 / cols 0-7, 2 = rows 0-7 / cols 8-15, 3 = rows 8-15 /
//     cols 8-15
FA_HOST_DEVICE constexpr int ldmatrix_a_row(int lane) {
  return lane % 8 + 8 * ((lane / 8) % 2);
}
FA_HOST_DEVICE constexpr int ldmatrix_a_col(int lane) {
  return 8 * (lane / 16);
}

// (2) the B fragments of two neighbouring n-tiles from a tile stored [n][k] (K: 16 keys x 16 head
//     dims, for S = Q K^T): registers 0,1 = B of keys 0-7, registers 2,3 = B of keys 8-15.
//     matrix 0 = keys 0-7 / dims 0-7, 1 = keys 0-7 / dims 8-15, 2 = keys 8-15 / dims 0-7, 3 = keys 8-15 /
//     dims 8-15
FA_HOST_DEVICE constexpr int ldmatrix_bt_row(int lane) {
  return lane % 8 + 8 * (lane / 16);
}
FA_HOST_DEVICE constexpr int ldmatrix_bt_col(int lane) {
  return 8 * ((lane / 8) % 2);
}

// (3) with .trans, the B fragments of two neighbouring n-tiles from a tile stored [k][n] (V: 16 keys
//     x 16 head dims, for O += P V): registers 0,1 = B of dims 0-7, registers 2,3 = B of dims 8-15.
//     The addressing is the same as for (1): matrix 0 = keys 0-7 / dims 0-7, 1 = keys 8-15 / dims 0-7, ...
FA_HOST_DEVICE constexpr int ldmatrix_b_trans_row(int lane) {
  return ldmatrix_a_row(lane);
}
FA_HOST_DEVICE constexpr int ldmatrix_b_trans_col(int lane) {
  return ldmatrix_a_col(lane);
}

}  // namespace fa
