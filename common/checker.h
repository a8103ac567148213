// The correctness check every stage result goes through before anyone may time it.
//
// Rule (FlashAttention's own): the kernel's largest error against the fp64 reference may be at
// most `tolerance_factor` (2) times the largest error of a plain low-precision attention
// (reference.h) on the same rows, plus a tiny absolute epsilon. Written as !(err <= tol) so that
// NaN fails. Where the fp64 reference itself is NaN (NaN inputs), the output must be NaN too.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor.h"

namespace fa {

struct CheckOptions {
  int64_t full_check_max_rows = 16384;  // check every row when batch*heads*seq_q is at most this
  int64_t sampled_rows_per_head = 4;    // else: first, last and random rows of every (batch, head)
  uint64_t seed = 12345;                // which random rows
  double tolerance_factor = 2.0;
  double tolerance_epsilon = 1e-5;
  // The output buffer was poisoned (0xFF bytes) before the launch: gaps between rows must still
  // hold the poison (nothing wrote outside the tensor's rows).
  bool check_gaps_untouched = true;
};

struct CheckResult {
  bool passed = false;
  int64_t rows_checked = 0;
  double max_abs_err = 0.0;           // over checked rows with a finite reference
  double rel_l2_err = 0.0;            // ||out - ref|| / ||ref|| over the same elements
  double baseline_max_abs_err = 0.0;  // the plain low-precision attention's error
  double tolerance = 0.0;
  int64_t bad_elements = 0;   // checked elements out of tolerance, plus non-finite outputs
  std::string first_failure;  // "(b, s, h, d) = (...): got x, expected y" or another reason
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
  std::vector<double> ref;      // rows.size() x head_dim, fp64 reference
  std::vector<float> baseline;  // rows.size() x head_dim, plain low-precision attention
  bool inputs_finite = true;    // q, k and v hold no NaN or Inf
};
ReferenceRows compute_reference_rows(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                     float softmax_scale, const CheckOptions& options = {});
CheckResult check_against_reference(const ReferenceRows& reference, const HostTensor& o,
                                    const CheckOptions& options = {});

}  // namespace fa
