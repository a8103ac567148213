// The correctness check every stage result goes through before anyone may time it.
//
// Rule (FlashAttention's own, applied row by row): on each checked query row r, the kernel's
// largest error against the fp64 reference may be at most `tolerance_factor` (2) times the error a
// plain low-precision attention (reference.h) makes on that row, at that row's scale:
//
//   R_r     = max over d of |ref[r, d]|                      (the row's scale; finite entries only)
//   floor_r = u * max(R_r, smallest normal of the dtype)    (u: 2^-11 fp16, 2^-8 bf16)
//   e_r     = max(floor_r, max over d of |baseline[r, d] - ref[r, d]|)
//   rel_h   = max over the checked rows j of r's (batch, head) of e_j / R_j
//   tol_r   = tolerance_factor * max(e_r, rel_h * R_r) + tolerance_epsilon * R_r
//
// and every element d of row r passes iff |o[r, d] - ref[r, d]| <= tol_r.
//
// Why per row: one problem-wide maximum lets a head (or row) with large V values set the tolerance
// of every other row, so a head of unit-size outputs could be off by 100x its own error and pass.
// The plain attention's error is a property of each row (its V magnitudes, how peaked its softmax
// is), and so is the tolerance.
//
// Why rel_h: the plain attention and the kernel round their fp32 scores in different orders, and on
// one row the plain attention can be luckier than its usual self (seen on the H200:
// ampere_07_fast_softmax at scores near 1e4, error 1.05 x its row's tolerance and far inside its
// head's). Its largest error relative to the row's scale over the head's rows is a steadier measure
// of what a correct computation errs by there, and it still scales with each row's own R_r, so a
// row of small outputs is not held to a large row's absolute error.
//
// Why the floor: the plain attention's error on a row can be exactly 0 by luck (one key, or
// probabilities that are exact in 16 bits), while a correct kernel that rounds in another order is
// off by an ulp. Rounding the row's largest output to the dtype alone may cost u * R_r (u times the
// smallest normal below the normal range, where the spacing of the dtype stops shrinking), so the
// plain attention's error is never counted as less than that.
//
// Why epsilon is relative to R_r: it stands for the fp32 accumulation-order differences between
// two correct computations, which scale with the row's values; an absolute epsilon would let a
// head with tiny V values pass any output near zero.
//
// Where the plain attention is not finite but the reference is (it overflowed: probabilities
// rounded up, V near the dtype's maximum), its error says nothing and must not widen the tolerance
// to inf. That element counts as an error of 2 * floor_r instead: the bound of the plain
// attention's two roundings (P to the dtype, then the output), had it not overflowed.
//
// Comparisons are written !(err <= tol), so NaN fails. Where the fp64 reference is NaN (NaN inputs)
// the output must be NaN; where it is +-inf, exactly that. An element holding 0xFFFF, the poison
// the harness fills output buffers with (a NaN in fp16 and bf16 that no conversion produces: they
// write canonical NaNs such as 0x7FFF or 0x7E00), was never written and fails everywhere, even
// where NaN is expected and in rows the check did not sample.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "reference.h"  // Fp64Tensor
#include "tensor.h"

namespace fa {

struct CheckOptions {
  int64_t full_check_max_rows = 16384;  // check every row when batch*heads*seq_q is at most this
  int64_t sampled_rows_per_head = 4;    // else: first, last and random rows of every (batch, head)
  uint64_t seed = 12345;                // which random rows
  double tolerance_factor = 2.0;
  double tolerance_epsilon = 1e-5;  // relative to the row's largest |reference| (see above)
  // The output buffer was poisoned (0xFF bytes) before the launch: gaps between rows must still
  // hold the poison (nothing wrote outside the tensor's rows).
  bool check_gaps_untouched = true;
};

struct CheckResult {
  bool passed = false;
  int64_t rows_checked = 0;
  double max_abs_err = 0.0;           // over checked rows with a finite reference
  double rel_l2_err = 0.0;            // ||out - ref|| / ||ref|| over the same elements
  double baseline_max_abs_err = 0.0;  // the plain low-precision attention's largest finite error
  int64_t baseline_nonfinite = 0;     // its elements that overflowed where the reference is finite
  double tolerance = 0.0;             // the largest row tolerance tol_r (the worst row's)
  // max over checked elements of |o - ref| / tol_r: how close the output came to failing (<= 1
  // passes; inf for a non-finite output where the reference is finite).
  double max_err_over_tolerance = 0.0;
  int64_t bad_elements = 0;   // checked elements out of tolerance, plus non-finite outputs
  // "(b, s, h, d) = (...): got x, expected y, error e > row tolerance t" or another reason
  std::string first_failure;
  std::string summary() const;
};

CheckResult check_attention(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                            const HostTensor& o, float softmax_scale, const CheckOptions& options = {});

// The same check in two steps, so that several outputs of one problem (one per stage) share the
// expensive part: the fp64 reference and the low-precision baseline of the checked rows.
struct ReferenceRows {
  struct Row {
    int64_t b, h, s;
  };
  std::vector<Row> rows;
  std::vector<double> ref;          // rows.size() x head_dim, fp64 reference
  std::vector<float> baseline;      // rows.size() x head_dim, plain low-precision attention
  std::vector<double> lse;          // rows.size(): each row's log-sum-exp, fp64 (reference.h)
  std::vector<double> max_score;    // rows.size(): each row's largest scaled score, fp64
  std::vector<float> baseline_lse;  // rows.size(): the plain attention's fp32 log-sum-exp
  bool inputs_finite = true;        // q, k and v hold no NaN or Inf
};
// causal: the reference and the baseline see only the keys of reference.h's visible_keys().
// alibi_slopes: empty (no ALiBi) or the slope of every (batch, head) of q, at b * heads + h.
ReferenceRows compute_reference_rows(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                     float softmax_scale, const CheckOptions& options = {},
                                     bool causal = false, const std::vector<float>& alibi_slopes = {});
// The output's dtype (o.dtype) sets u and the smallest normal of the rule above.
CheckResult check_against_reference(const ReferenceRows& reference, const HostTensor& o,
                                    const CheckOptions& options = {});

// ------------------------------------------------------------------------------------------------
// The log-sum-exp output (AttentionParams::lse), checked row by row against the fp64 reference:
//
//   R_r   = max(1, |max_j t_j|, |lse_ref_r|)      (t_j the row's scaled scores: the size of the
//                                                  numbers the kernel's fp32 arithmetic rounds)
//   e_r   = max(|lse_plain_r - lse_ref_r|, u32 * R_r)          (u32 = 2^-24, fp32's unit roundoff)
//   tol_r = lse_tolerance_factor * e_r + lse_tolerance_epsilon * R_r
//
// with lse_plain the plain fp32 attention's max + log(sum) (reference.h). It is FlashAttention's
// rule again (twice the plain attention's error), with the floor u32 * R_r for a plain attention
// that is exact by luck, and an epsilon of 1e-5 relative to R_r for what two correct fp32
// computations differ by where the plain one is not the worse: the order of the row sum over up to
// thousands of keys (a relative error of about sqrt(n) * u32 in the sum, i.e. that much absolute in
// its log), ex2.approx's relative error of about 2^-22 per term, and lg2/log's rounding. A kernel
// that drops or double-counts one key of n changes the LSE by about 1/n: 2.4e-4 at n = 4096, beyond
// 1e-5 * R_r for R_r < 24. Where the reference is -inf (a row that sees no key) or NaN, the output
// must be exactly -inf or NaN. An element still holding the poison (bits 0xFFFFFFFF) was never
// written and fails everywhere, in checked and unchecked rows; with finite inputs an unchecked row
// must be finite or -inf.
struct HostLse {
  int64_t batch = 0, heads = 0, seq = 0;
  int64_t batch_stride = 0, head_stride = 0;  // seq contiguous
  std::vector<float> values;                  // the whole buffer, gaps included
  float at(int64_t b, int64_t h, int64_t s) const {
    return values[static_cast<size_t>(b * batch_stride + h * head_stride + s)];
  }
};

struct LseCheckOptions {
  double lse_tolerance_factor = 2.0;
  double lse_tolerance_epsilon = 1e-5;
};

// result.max_abs_err, rel_l2_err (over the finite references), tolerance (largest tol_r),
// max_err_over_tolerance, baseline_max_abs_err (the plain fp32 LSE's largest error) as for O; the
// gaps of the buffer must still hold the poison when options.check_gaps_untouched is set.
CheckResult check_lse_against_reference(const ReferenceRows& reference, const HostLse& lse,
                                        const CheckOptions& options = {},
                                        const LseCheckOptions& lse_options = {});

// ------------------------------------------------------------------------------------------------
// Gradients (common/backward.h): dQ, dK or dV checked against the fp64 reference with
// FlashAttention's rule for gradients (its tests: the kernel's largest error at most twice that of
// the same backward computed in the input dtype), applied per (batch, head) of the tensor:
//
//   R_h     = max over the head's elements of |ref|                 (finite entries only)
//   floor_h = u * max(R_h, smallest normal of the dtype)            (u: 2^-11 fp16, 2^-8 bf16)
//   acc_h   = head_dim * 2^-24 * max over the head's elements of terms   (0 without `terms`)
//   e_h     = max(floor_h, acc_h, max over the head's elements of |baseline - ref|)
//   tol_h   = tolerance_factor * e_h + tolerance_epsilon * R_h
//
// and every element passes iff |out - ref| <= tol_h, written !(err <= tol) so NaN fails. The
// baseline is reference.h's baseline_backward_lowp. Why per head, not per row as for O: a gradient
// row sums over the other sequence (dK and dV rows over every query, dQ rows over every key), so
// the size of its error follows the head's data rather than one row's softmax, and a row of dK
// whose keys took almost no probability has a tiny gradient whose rounding by the baseline can be
// exact by luck; a per-head maximum keeps the rule as strict as FlashAttention's (whose maximum is
// over the whole tensor) while one head of large values cannot loosen another head's. The floor
// and epsilon are those of the O check, for the same reasons. acc_h is the fp32 accumulation's
// own rounding, the bound of a dot product of head_dim terms (head_dim * 2^-24 times the sum of
// their sizes) applied to dS's dP and D: `terms` (reference_backward_fp64's dq_terms, dk_terms,
// dv_terms) holds, per element, the gradient's sum with dP and D taken term by term in absolute
// value. It matters only where dP - D cancels: with one key, dS = 0 and dQ = dK = 0 exactly; the
// baseline computes dP and D as the same sum in the same order and gets 0 exactly too, so its error
// says nothing of a kernel that sums them in two orders (a tensor core's and a warp's), whose dQ
// is then a few fp32 roundings of |dP| away from 0. Elsewhere acc_h is far below floor_h (2^-24
// head_dim against 2^-11 of the gradient's own size). Elements that still hold the 0xFFFF
// poison were never written and fail; with check_gaps_untouched, so does a gap between rows that
// no longer holds it.
CheckResult check_gradient(const char* name, const Fp64Tensor& reference, const HostTensor& baseline,
                           const HostTensor& out, const CheckOptions& options = {},
                           const Fp64Tensor* terms = nullptr);

}  // namespace fa
