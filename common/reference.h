// CPU references for one query row of attention: the exact answer in fp64, and a "plain"
// low-precision attention whose error sets the checker's tolerance.
#pragma once

#include <cstdint>

#include "tensor.h"

namespace fa {

// out[d] = sum_j softmax_j(scale * q_s . k_j) v_j[d], everything in double precision.
void reference_row_fp64(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t b, int64_t h,
                        int64_t s, double scale, double* out);

// What a straightforward fp16/bf16 attention computes (the baseline of FlashAttention's own
// tolerance rule): scores and softmax in fp32, the probabilities rounded to the input dtype
// before P V (as every tensor-core kernel must feed them), P V accumulated in fp32, and the
// output rounded to the dtype. The rounded probabilities may sum to slightly more than 1, so with V
// near the dtype's maximum the output can overflow to inf where the exact answer is finite (the
// checker then bounds that element's error from the unit roundoff instead: checker.h).
void baseline_row_lowp(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t b, int64_t h,
                       int64_t s, float scale, float* out);

}  // namespace fa
