// ALiBi's column term as the operands of one m16n8k8 MMA per n-tile. Host and device:
// tests/test_alibi_column_term.cpp multiplies these fragments out on the CPU, lane by lane, and
// checks that the product is sign * a * c in every row and column of the tile.
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

}  // namespace FA_STAGE_NAMESPACE
