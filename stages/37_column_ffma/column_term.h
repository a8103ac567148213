// ALiBi's column term as the operands of one m16n8k8 MMA per n-tile (head_dim 64), or as one FFMA
// per score with a constant of the instruction (head_dim 128, at the end). Host and device:
// tests/test_alibi_column_term.cpp multiplies these fragments out on the CPU, lane by lane, and
// checks that the product is sign * a * c in every row and column of the tile, and that the FFMAs'
// constants and the row term add up to the bias at every entry a lane holds.
//
// In a K/V block that lies wholly on one side of the diagonal for every row of the thread block,
// ALiBi's bias -a |i + off - j| (a: the slope in raw-score units, off = seq_kv - seq_q) splits into
// a term of the key's column c = j - kv0 in the block and a term of the row:
//   left of the diagonal  (j <= i + off):  -a (i + off - j) = +a c - a (i + off - kv0),
//   right of it           (j >= i + off):  -a (j - i - off) = -a c - a (kv0 - i - off),
// so bias = sign * a c + rho_i with rho_i = -a |i + off - kv0|, the bias of the block's first key.
// The column part sign * a c is the same in every block of a side, and it is a matrix product:
//   A (16 x 8) = sign in columns k < kParts of every row, 0 in the others;
//   B (8 x 8)  = the kParts 16-bit parts of a c in rows k < kParts of column c, 0 below;
//   (A B)(row, c) = sign * (part_0 + ... + part_{kParts-1})(a c) = sign * a c.
// One MMA with these operands, accumulated into the scores of n-tile n (B for columns 8 n .. 8 n + 7),
// adds the column term to all 16 x 8 of them; the row term rides in the running maximum (kernel.cu).
//
// A 16-bit number holds 11 (fp16) or 8 (bf16) significant bits, so a c (fp32) is split into parts
// that each take the rounding error of the ones before: 2 in fp16, 3 in bf16, which add up to a c
// within 2^-22 of it. fp16's range ends at 65504: the kernel takes this path only where
// |a| (kBlockKV - 1) stays below kMaxColumnTerm, and the per-score bias elsewhere.
//
// Fragments (PTX ISA, m16n8k8 with 16-bit inputs; the first k-half of m16n8k16's, fragment_layout.h):
// lane l holds A's rows l / 4 and l / 4 + 8 at columns k = 2 (l % 4) + {0, 1}, one register each,
// and B's column l / 4 at rows k = 2 (l % 4) + {0, 1} in one register (the lower k in the low half).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

namespace FA_STAGE_NAMESPACE {

template <typename T>
struct ColumnTermFormat;
template <>
struct ColumnTermFormat<__half> {
  static constexpr int kParts = 2;                // 2 x 11 bits
  static constexpr float kMaxColumnTerm = 32768;  // below fp16's 65504, with room for the rounding
  static FA_HOST_DEVICE uint16_t bits(float x, float& rounded) {
    const __half h = __float2half_rn(x);
    rounded = __half2float(h);
    return static_cast<__half_raw>(h).x;
  }
};
template <>
struct ColumnTermFormat<__nv_bfloat16> {
  static constexpr int kParts = 3;  // 3 x 8 bits
  static constexpr float kMaxColumnTerm = 1e30f;
  static FA_HOST_DEVICE uint16_t bits(float x, float& rounded) {
    const __nv_bfloat16 h = __float2bfloat16_rn(x);
    rounded = __bfloat162float(h);
    return static_cast<__nv_bfloat16_raw>(h).x;
  }
};

// The 16-bit pattern of part `part` of x (0 where part >= kParts): x rounded, then what is left
// of x rounded, and so on.
template <typename T>
FA_HOST_DEVICE inline uint16_t column_term_part(float x, int part) {
  if (part >= ColumnTermFormat<T>::kParts) return 0;
  float rest = x, rounded = 0.0f;
  uint16_t bits = 0;
  for (int i = 0; i <= part; ++i) {
    bits = ColumnTermFormat<T>::bits(rest, rounded);
    rest -= rounded;
  }
  return bits;
}

// Lane `lane`'s B register for n-tile n: the parts k = 2 (lane % 4), 2 (lane % 4) + 1 of a * c,
// c = 8 n + lane / 4 (the lower k in the low half).
template <typename T>
FA_HOST_DEVICE inline uint32_t column_term_b(float slope_raw, int n, int lane) {
  const float x = slope_raw * static_cast<float>(8 * n + lane / 4);
  const int k = 2 * (lane % 4);
  return static_cast<uint32_t>(column_term_part<T>(x, k)) | (static_cast<uint32_t>(column_term_part<T>(x, k + 1)) << 16);
}

// Lane `lane`'s A register (the same for its two rows): sign in columns k = 2 (lane % 4) + {0, 1}
// that are below kParts, 0 in the others.
template <typename T>
FA_HOST_DEVICE inline uint32_t column_term_a(float sign, int lane) {
  float rounded = 0.0f;
  const uint32_t one = ColumnTermFormat<T>::bits(sign, rounded);
  const int k = 2 * (lane % 4);
  return (k < ColumnTermFormat<T>::kParts ? one : 0u) | (k + 1 < ColumnTermFormat<T>::kParts ? one << 16 : 0u);
}

// The column term without the tensor cores (head_dim 128, whose kernel has no registers for the
// operands above). Lane l's accumulator entry e of key n-tile n lies in column
// mma_c_col(l, 0) + column_offset(n, e) of the block and in the row of its row state mr = 2 m + r
// at mma_c_row(l, 0) + row_offset(mr) of the warp's rows: both offsets are the same for every lane
// (fragment_layout.h), so they are constants of the unrolled code. In a block on one side of the
// diagonal, the bias of entry (mr, n, e) is then
//   -a |i + off - j| = sign * a * column_offset(n, e) + rho,
//   rho = -a |i + off - j0|, j0 = kv0 + mma_c_col(l, 0): the bias of the row at the lane's first key,
// one FFMA per score (none where the offset is 0) and a row term that differs between the lanes of a
// quad (j0 does), which the kernel adds to each lane's maximum before the quad's.
FA_HOST_DEVICE constexpr int column_offset(int n, int e) { return n * fa::kMmaN + fa::mma_c_col(0, e) - fa::mma_c_col(0, 0); }
FA_HOST_DEVICE constexpr int row_offset(int mr) {
  return (mr / 2) * fa::kMmaM + fa::mma_c_row(0, 2 * (mr % 2)) - fa::mma_c_row(0, 0);
}

}  // namespace FA_STAGE_NAMESPACE
