// CPU references for one query row of attention: the exact answer in fp64, and a "plain"
// low-precision attention whose error sets the checker's tolerance.
#pragma once

#include <cstdint>

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

}  // namespace fa
