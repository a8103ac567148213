// CPU references for one query row of attention: the exact answer in fp64, and a "plain"
// low-precision attention whose error sets the checker's tolerance.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor.h"

namespace fa {

// The keys query row s sees: all of seq_kv, or with causal masking (aligned to the bottom-right, as
// in FlashAttention >= 2.1) the first s + seq_kv - seq_q + 1 of them, between 0 and seq_kv.
int64_t visible_keys(int64_t s, int64_t seq_q, int64_t seq_kv, bool causal);

// The key/value head that query head h reads with grouped-query attention: heads / kv_heads
// consecutive query heads share one (AttentionParams::kv_heads). The reference takes heads from q
// and kv_heads from k and v; it throws std::invalid_argument where kv_heads does not divide heads.
int64_t kv_head_of(int64_t h, int64_t heads, int64_t kv_heads);

// ALiBi's bias of query s and key j, -slope * |s + seq_kv - seq_q - j| (params.h), in fp64.
double alibi_bias(double slope, int64_t s, int64_t j, int64_t seq_q, int64_t seq_kv);

// The log-sum-exp of a row's scaled scores t_j = scale * q_s . k_j (+ the ALiBi bias) over the keys it sees,
// log(sum_j exp(t_j)), and its largest score max_j t_j (the checker's scale for the LSE's error);
// both -inf for a row that sees no key.
struct RowLogSumExp {
  double lse;
  double max_score;
};

// out[d] = sum_j softmax_j(scale * q_s . k_j + alibi_bias(alibi_slope, s, j, ...)) v_j[d] over the
// keys j the row sees, everything in double precision; k and v are those of query head h's
// key/value head (kv_head_of); alibi_slope 0 is no ALiBi. A row that sees no key outputs 0 (as
// FlashAttention-2 does). Returns the row's log-sum-exp.
RowLogSumExp reference_row_fp64(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t b,
                                int64_t h, int64_t s, double scale, double* out, bool causal = false,
                                double alibi_slope = 0.0);

// What a straightforward fp16/bf16 attention computes (the baseline of FlashAttention's own
// tolerance rule): scores (with the ALiBi bias, computed in fp32) and softmax in fp32, the probabilities
// rounded to the input dtype before P V (as every tensor-core kernel must feed them), P V accumulated in
// fp32, and the output rounded to the dtype. The rounded probabilities may sum to slightly more than 1, so
// with V near the dtype's maximum the output can overflow to inf where the exact answer is finite (the
// checker then bounds that element's error from the unit roundoff instead: checker.h). Returns the
// row's log-sum-exp as that attention has it, max + log(sum) in fp32 (-inf for a row that sees no key).
float baseline_row_lowp(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t b, int64_t h,
                        int64_t s, float scale, float* out, bool causal = false, float alibi_slope = 0.0f);

// ------------------------------------------------------------------------------------------------
// The backward pass (common/backward.h), on the CPU.

// An fp64 tensor [batch, seq, heads, head_dim], densely packed: the working form of the fp64
// references, so that a test can also build one from exact (not 16-bit) values.
struct Fp64Tensor {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  std::vector<double> values;

  Fp64Tensor() = default;
  Fp64Tensor(int64_t b, int64_t s, int64_t h, int64_t d)
      : batch(b), seq(s), heads(h), head_dim(d), values(static_cast<size_t>(b * s * h * d), 0.0) {}
  static Fp64Tensor from(const HostTensor& t);  // the 16-bit values, exactly
  size_t index(int64_t b, int64_t s, int64_t h, int64_t d) const {
    return static_cast<size_t>(((b * seq + s) * heads + h) * head_dim + d);
  }
  double& at(int64_t b, int64_t s, int64_t h, int64_t d) { return values[index(b, s, h, d)]; }
  double at(int64_t b, int64_t s, int64_t h, int64_t d) const { return values[index(b, s, h, d)]; }
};

// The exact gradients of a loss L with dL/dO = d_o, everything in fp64, by the algebra of
// common/backward.h: P = softmax(scale * Q K^T) over the keys each row sees (visible_keys, so causal
// rows that see no key have O = 0 and zero gradients), dV = P^T dO, dP = dO V^T,
// D = rowsum(dO * O), dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q. k and v may have fewer
// heads than q (grouped-query attention: kv_head_of); dK and dV of a key/value head are then sums
// over the query heads of its group. Also returns O and the LSE (natural log, -inf for a row that
// sees no key; [batch][heads][seq_q]), and D computed both ways: rowsum(dO * O) and rowsum(P * dP),
// equal in exact arithmetic (sum_j P_ij dP_ij = dO_i . sum_j P_ij v_j = dO_i . o_i).
// And, for the checker's fp32 floor (check_gradient), the size of what each gradient element sums,
// with dS's two dot products taken term by term: dq_terms = scale sum_j P_ij (|dO_i|.|v_j| +
// |dO_i|.|o_i|) |k_j|, dk_terms the same with |q_i|, dv_terms = sum_i P_ij |dO_i| (|x|.|y| the dot
// product of absolute values).
struct BackwardFp64 {
  Fp64Tensor o, dq, dk, dv;
  Fp64Tensor dq_terms, dk_terms, dv_terms;
  std::vector<double> lse, d_from_o, d_from_p;  // [batch][heads][seq_q]
};
BackwardFp64 reference_backward_fp64(const Fp64Tensor& q, const Fp64Tensor& k, const Fp64Tensor& v,
                                     const Fp64Tensor& d_o, double scale, bool causal = false);

// What a straightforward fp16/bf16 backward computes, the baseline of FlashAttention's tolerance
// rule for gradients: the same algebra with every matrix product fed 16-bit operands and
// accumulated in fp32, as a tensor-core kernel must do it. The scores, the row's LSE (its own, fp32)
// and P in fp32; D = rowsum(dO * O) in fp32 from the 16-bit O the backward is given (`o`, the
// forward's output); dP in fp32; dS = P * (dP - D) in fp32; P and dS rounded to the dtype where they
// enter dV = P^T dO, dK = dS^T Q and dQ = dS K; the scale applied to the fp32 sums; dQ, dK, dV
// rounded to the dtype at the end. Returns densely packed tensors of q's dtype (k's heads for dK, dV).
struct BackwardLowp {
  HostTensor dq, dk, dv;
};
BackwardLowp baseline_backward_lowp(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                    const HostTensor& o, const HostTensor& d_o, float scale, bool causal = false);

}  // namespace fa
