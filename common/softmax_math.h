// The two scalar pieces of the online softmax that every stage uses the same way, written for host
// and device so that the CPU model of the online softmax (tests/test_online_softmax.cpp) runs the
// very functions the kernels call.
#pragma once

#include <cmath>

#include "fragment_layout.h"  // FA_HOST_DEVICE

namespace fa {

// The row maximum to subtract before exponentiating. While every score seen so far is -inf (keys
// masked by infinite inputs) it is 0, not -inf: -inf - (-inf) is NaN, but exp(-inf - 0) is the 0
// weight the reference gives those keys, and the rescale factor exp(-inf - 0) = 0 is harmless.
FA_HOST_DEVICE inline float max_for_exp(float row_max) {
  return row_max == -INFINITY ? 0.0f : row_max;
}

// exp2 on the special-function unit: one MUFU.EX2. Flushes subnormal inputs and results to zero
// (.ftz), which softmax weights below 2^-126 can afford. The host version models exactly that
// flush (its rounding is exp2f's, within the instruction's 2 ulp).
FA_HOST_DEVICE inline float exp2_approx(float x) {
#if defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  if (std::fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
  const float y = std::exp2(x);
  return std::fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
#endif
}

// Lazy rescaling (hopper_15_lazy_rescale): the running max is raised -- and O and the row sum
// rescaled to it -- only when a block's max exceeds it by more than 2^kLazyRescaleLog2 in the
// exponent, i.e. when (block_max - row_max) * scale_log2 > kLazyRescaleLog2. Below that the old max
// stays, and the block's weights exp2(s * scale_log2 - row_max * scale_log2) are at most
// 2^kLazyRescaleLog2 = 256: fp32 sums and O hold them, and so do the 16-bit P of P V (fp16 up to
// 65504, bf16 far more) with the same relative rounding as weights below 1. The result is the same
// softmax: every weight, the sum and O are relative to one max, whichever it is. A first block
// (row_max = -inf) and rows that have seen only -inf (NaN difference) count as growing: they take
// the exact path.
constexpr float kLazyRescaleLog2 = 8.0f;
static_assert(kLazyRescaleLog2 <= 15.0f, "weights up to 2^threshold must fit fp16 P (largest finite 65504)");

FA_HOST_DEVICE inline bool max_grows_too_far(float row_max, float block_max, float scale_log2) {
  return !((block_max - row_max) * scale_log2 <= kLazyRescaleLog2);
}

// The row max off the exponentials' path (hopper_16_speculative_max): a block's weights, computed
// against the running max before the block's max is known, are each at most 2^kLazyRescaleLog2 --
// the bound lazy rescaling keeps -- when every partial sum of them is (weights are >= 0). False for
// an inf sum (an exponent that overflowed) and a NaN one: the caller then takes the block again,
// max first. Modelled on the CPU by test_online_softmax.
constexpr float kLargestLazyWeight = 256.0f;
static_assert(kLazyRescaleLog2 == 8.0f, "kLargestLazyWeight is 2^kLazyRescaleLog2");

FA_HOST_DEVICE inline bool weights_fit(float partial_sum) {
  return partial_sum <= kLargestLazyWeight;
}

}  // namespace fa
