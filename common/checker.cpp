#include "checker.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "reference.h"

namespace fa {

namespace {

using RowId = ReferenceRows::Row;

std::vector<RowId> choose_rows(const TensorLayout& q, const CheckOptions& options) {
  std::vector<RowId> rows;
  const int64_t total = q.batch * q.heads * q.seq;
  if (total <= options.full_check_max_rows) {
    for (int64_t b = 0; b < q.batch; ++b)
      for (int64_t h = 0; h < q.heads; ++h)
        for (int64_t s = 0; s < q.seq; ++s) rows.push_back({b, h, s});
    return rows;
  }
  std::mt19937_64 rng(options.seed);
  for (int64_t b = 0; b < q.batch; ++b) {
    for (int64_t h = 0; h < q.heads; ++h) {
      std::vector<int64_t> picks = {0, q.seq - 1};
      std::uniform_int_distribution<int64_t> pick(0, q.seq - 1);
      while (static_cast<int64_t>(picks.size()) < options.sampled_rows_per_head) picks.push_back(pick(rng));
      std::sort(picks.begin(), picks.end());
      picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
      for (int64_t s : picks) rows.push_back({b, h, s});
    }
  }
  return rows;
}

// Runs body(i) for i in [0, n) on all cores.
template <typename Body>
void parallel_for(int64_t n, Body body) {
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
  std::atomic<int64_t> next{0};
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (int64_t i = next++; i < n; i = next++) body(i);
    });
  }
  for (auto& t : threads) t.join();
}

bool all_finite(const HostTensor& t) {
  std::atomic<bool> finite{true};
  const TensorLayout& l = t.layout;
  parallel_for(l.batch * l.seq, [&](int64_t bs) {
    const int64_t b = bs / l.seq, s = bs % l.seq;
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t d = 0; d < l.head_dim; ++d)
        if (!std::isfinite(t.at(b, s, h, d))) finite = false;
  });
  return finite;
}

// The bit pattern of 0xFF poison bytes: what an output element holds if no thread wrote it.
constexpr uint16_t kPoisonBits = 0xFFFF;

struct UncheckedRows {
  bool poison = false;     // some element still holds the poison bits
  bool nonfinite = false;  // some element is NaN or +-inf (poison included)
};

// Scans the rows of o that are not in `rows` (the ones the element-by-element check skipped).
UncheckedRows scan_unchecked_rows(const HostTensor& o, const std::vector<RowId>& rows) {
  const TensorLayout& l = o.layout;
  auto row_index = [&](int64_t b, int64_t s, int64_t h) { return (b * l.seq + s) * l.heads + h; };
  std::vector<bool> checked(static_cast<size_t>(l.batch * l.seq * l.heads), false);
  for (const RowId& r : rows) checked[static_cast<size_t>(row_index(r.b, r.s, r.h))] = true;
  std::atomic<bool> poison{false}, nonfinite{false};
  parallel_for(l.batch * l.seq, [&](int64_t bs) {
    const int64_t b = bs / l.seq, s = bs % l.seq;
    for (int64_t h = 0; h < l.heads; ++h) {
      if (checked[static_cast<size_t>(row_index(b, s, h))]) continue;
      for (int64_t d = 0; d < l.head_dim; ++d) {
        if (o.raw[static_cast<size_t>(l.offset(b, s, h, d))] == kPoisonBits) poison = true;
        if (!std::isfinite(o.at(b, s, h, d))) nonfinite = true;
      }
    }
  });
  return {poison, nonfinite};
}

// u: the largest relative error of rounding a real number in the normal range to the dtype.
double unit_roundoff(DType dtype) { return dtype == DType::kFloat16 ? 0x1p-11 : 0x1p-8; }
// Below the smallest normal the spacing of the dtype stops shrinking (subnormals): rounding errs by
// at most u * smallest_normal there.
double smallest_normal(DType dtype) { return dtype == DType::kFloat16 ? 0x1p-14 : 0x1p-126; }

struct RowTolerance {
  double tolerance;
  double row_scale;            // R_r: the row's largest finite |ref|
  double estimate;             // e_r before the head's relative error is applied
  double baseline_err;         // largest finite |baseline - ref| of the row (0 if none)
  int64_t baseline_nonfinite;  // elements with a finite reference and a non-finite baseline
};

// e_r of the rule in checker.h, for the row whose reference and baseline start at ref, baseline.
RowTolerance row_estimate(const double* ref, const float* baseline, int64_t dim, DType dtype) {
  RowTolerance row{0.0, 0.0, 0.0, 0.0, 0};
  for (int64_t d = 0; d < dim; ++d) {
    if (!std::isfinite(ref[d])) continue;  // compared exactly, no tolerance involved
    row.row_scale = std::max(row.row_scale, std::fabs(ref[d]));
    if (std::isfinite(baseline[d]))
      row.baseline_err = std::max(row.baseline_err, std::fabs(baseline[d] - ref[d]));
    else
      ++row.baseline_nonfinite;
  }
  const double rounding_floor = unit_roundoff(dtype) * std::max(row.row_scale, smallest_normal(dtype));
  row.estimate = std::max(row.baseline_err, rounding_floor);
  if (row.baseline_nonfinite > 0) row.estimate = std::max(row.estimate, 2.0 * rounding_floor);
  return row;
}

// tol_r for every checked row: e_r raised to the head's largest relative error times R_r (the rule
// in checker.h), so a row the plain attention got right by luck is held to what the plain
// attention does on that head, at that row's own scale.
std::vector<RowTolerance> row_tolerances(const ReferenceRows& reference, int64_t dim, DType dtype,
                                         const CheckOptions& options) {
  const std::vector<RowId>& rows = reference.rows;
  std::vector<RowTolerance> tol(rows.size());
  std::map<std::pair<int64_t, int64_t>, double> head_relative;  // (b, h) -> max e_r / R_r
  for (size_t i = 0; i < rows.size(); ++i) {
    tol[i] = row_estimate(&reference.ref[i * dim], &reference.baseline[i * dim], dim, dtype);
    const double scale = std::max(tol[i].row_scale, smallest_normal(dtype));
    double& rel = head_relative[{rows[i].b, rows[i].h}];
    rel = std::max(rel, tol[i].estimate / scale);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const double rel = head_relative[{rows[i].b, rows[i].h}];
    const double estimate = std::max(tol[i].estimate, rel * tol[i].row_scale);
    tol[i].tolerance = options.tolerance_factor * estimate + options.tolerance_epsilon * tol[i].row_scale;
  }
  return tol;
}

std::string describe(const RowId& r, int64_t d) {
  std::ostringstream out;
  out << "(b, s, h, d) = (" << r.b << ", " << r.s << ", " << r.h << ", " << d << ")";
  return out.str();
}

}  // namespace

std::string CheckResult::summary() const {
  std::ostringstream out;
  out << (passed ? "PASS" : "FAIL") << ": " << rows_checked << " rows, max_abs_err " << max_abs_err
      << ", rel_l2_err " << rel_l2_err << ", worst error/tolerance " << max_err_over_tolerance
      << " (tolerance per row from the plain attention's error on it: largest " << tolerance
      << ", plain-attention error up to " << baseline_max_abs_err;
  if (baseline_nonfinite > 0)
    out << ", " << baseline_nonfinite << " plain-attention elements overflowed (unit-roundoff bound used)";
  out << ")";
  if (!passed) out << "; " << bad_elements << " bad elements, first: " << first_failure;
  return out.str();
}

ReferenceRows compute_reference_rows(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                     float softmax_scale, const CheckOptions& options, bool causal,
                                     const std::vector<float>& alibi_slopes) {
  ReferenceRows r;
  const int64_t dim = q.layout.head_dim;
  // Shapes first, in this thread: an exception in the workers below would end the program.
  if (k.layout.heads != v.layout.heads)
    throw std::invalid_argument("k and v have different head counts (" + std::to_string(k.layout.heads) +
                                " and " + std::to_string(v.layout.heads) + ")");
  kv_head_of(0, q.layout.heads, k.layout.heads);  // throws where kv_heads does not divide heads
  if (!alibi_slopes.empty() && alibi_slopes.size() != static_cast<size_t>(q.layout.batch * q.layout.heads))
    throw std::invalid_argument("alibi_slopes holds " + std::to_string(alibi_slopes.size()) +
                                " slopes, not one per (batch, head)");
  r.rows = choose_rows(q.layout, options);
  r.ref.resize(r.rows.size() * dim);
  r.baseline.resize(r.rows.size() * dim);
  r.lse.resize(r.rows.size());
  r.max_score.resize(r.rows.size());
  r.baseline_lse.resize(r.rows.size());
  parallel_for(static_cast<int64_t>(r.rows.size()), [&](int64_t i) {
    const RowId& row = r.rows[i];
    const float slope =
        alibi_slopes.empty() ? 0.0f : alibi_slopes[static_cast<size_t>(row.b * q.layout.heads + row.h)];
    const RowLogSumExp exact =
        reference_row_fp64(q, k, v, row.b, row.h, row.s, softmax_scale, &r.ref[i * dim], causal, slope);
    r.lse[i] = exact.lse;
    r.max_score[i] = exact.max_score;
    r.baseline_lse[i] =
        baseline_row_lowp(q, k, v, row.b, row.h, row.s, softmax_scale, &r.baseline[i * dim], causal, slope);
  });
  r.inputs_finite = all_finite(q) && all_finite(k) && all_finite(v);
  return r;
}

CheckResult check_attention(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                            const HostTensor& o, float softmax_scale, const CheckOptions& options) {
  return check_against_reference(compute_reference_rows(q, k, v, softmax_scale, options), o, options);
}

CheckResult check_against_reference(const ReferenceRows& reference, const HostTensor& o,
                                    const CheckOptions& options) {
  CheckResult result;
  const int64_t dim = o.layout.head_dim;
  const std::vector<RowId>& rows = reference.rows;
  const std::vector<double>& ref = reference.ref;
  result.rows_checked = static_cast<int64_t>(rows.size());

  // Counts a bad element; only the first one's description is built (a full check visits millions).
  auto fail = [&](auto describe_failure) {
    if (result.bad_elements++ == 0) result.first_failure = describe_failure();
  };

  double err_sq = 0.0, ref_sq = 0.0;
  const std::vector<RowTolerance> tolerances = row_tolerances(reference, dim, o.dtype, options);
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowId& row = rows[i];
    const RowTolerance& tol = tolerances[i];
    result.baseline_max_abs_err = std::max(result.baseline_max_abs_err, tol.baseline_err);
    result.baseline_nonfinite += tol.baseline_nonfinite;
    result.tolerance = std::max(result.tolerance, tol.tolerance);
    for (int64_t d = 0; d < dim; ++d) {
      const double expected = ref[i * dim + d];
      const double got = o.at(row.b, row.s, row.h, d);
      auto got_instead_of_expected = [&, d] {
        std::ostringstream out;
        out << describe(row, d) << ": got " << got << ", expected " << expected;
        return out.str();
      };
      if (o.raw[static_cast<size_t>(o.layout.offset(row.b, row.s, row.h, d))] == kPoisonBits) {
        fail([&, d] { return describe(row, d) + ": never written (still the 0xFFFF poison)"; });
        if (std::isfinite(expected)) result.max_abs_err = result.max_err_over_tolerance = INFINITY;
      } else if (std::isnan(expected)) {
        if (!std::isnan(got)) fail(got_instead_of_expected);
      } else if (std::isinf(expected)) {
        if (got != expected) fail(got_instead_of_expected);
      } else {
        const double err = std::fabs(got - expected);
        if (!(err <= tol.tolerance)) {  // NaN fails too
          fail([&] {
            std::ostringstream out;
            out << got_instead_of_expected() << ", error " << err << " > row tolerance " << tol.tolerance;
            return out.str();
          });
        }
        if (std::isfinite(err)) {
          result.max_abs_err = std::max(result.max_abs_err, err);
          result.max_err_over_tolerance = std::max(result.max_err_over_tolerance, err / tol.tolerance);
          err_sq += err * err;
        } else {
          result.max_abs_err = result.max_err_over_tolerance = INFINITY;
        }
        ref_sq += expected * expected;
      }
    }
  }
  result.rel_l2_err = ref_sq > 0.0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
  if (!std::isfinite(result.max_abs_err)) result.rel_l2_err = INFINITY;

  // Rows outside the sample: an element no thread wrote (the exact poison bits) fails whatever the
  // inputs; with finite inputs every output must moreover be finite (an overflow fails).
  if (static_cast<int64_t>(rows.size()) < o.layout.batch * o.layout.heads * o.layout.seq) {
    const UncheckedRows unchecked = scan_unchecked_rows(o, rows);
    if (unchecked.poison)
      fail([] { return std::string("an element outside the sampled rows was never written (0xFFFF poison)"); });
    else if (reference.inputs_finite && unchecked.nonfinite)
      fail([] { return std::string("non-finite output outside the sampled rows (overflowed)"); });
  }

  if (options.check_gaps_untouched && o.layout.storage_elems > o.layout.logical_elems()) {
    std::vector<bool> logical(static_cast<size_t>(o.layout.storage_elems), false);
    const TensorLayout& l = o.layout;
    for (int64_t b = 0; b < l.batch; ++b)
      for (int64_t s = 0; s < l.seq; ++s)
        for (int64_t h = 0; h < l.heads; ++h)
          for (int64_t d = 0; d < l.head_dim; ++d) logical[static_cast<size_t>(l.offset(b, s, h, d))] = true;
    for (size_t i = 0; i < logical.size(); ++i) {
      if (!logical[i] && o.raw[i] != kPoisonBits) {
        fail([i] { return "the kernel wrote into a gap between output rows (element " + std::to_string(i) + ")"; });
        break;
      }
    }
  }
  result.passed = result.bad_elements == 0;
  return result;
}

namespace {

constexpr uint32_t kLsePoisonBits = 0xFFFFFFFFu;  // 0xFF bytes: what an LSE element holds if never written

uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

std::string describe_lse(const RowId& r) {
  std::ostringstream out;
  out << "lse (b, h, s) = (" << r.b << ", " << r.h << ", " << r.s << ")";
  return out.str();
}

}  // namespace

CheckResult check_lse_against_reference(const ReferenceRows& reference, const HostLse& lse,
                                        const CheckOptions& options, const LseCheckOptions& lse_options) {
  CheckResult result;
  const std::vector<RowId>& rows = reference.rows;
  result.rows_checked = static_cast<int64_t>(rows.size());
  auto fail = [&](auto describe_failure) {
    if (result.bad_elements++ == 0) result.first_failure = describe_failure();
  };
  std::vector<bool> checked(static_cast<size_t>(lse.batch * lse.heads * lse.seq), false);
  double err_sq = 0.0, ref_sq = 0.0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowId& row = rows[i];
    checked[static_cast<size_t>((row.b * lse.heads + row.h) * lse.seq + row.s)] = true;
    const double expected = reference.lse[i];
    const float got = lse.at(row.b, row.h, row.s);
    auto got_instead_of_expected = [&] {
      std::ostringstream out;
      out << describe_lse(row) << ": got " << got << ", expected " << expected;
      return out.str();
    };
    if (float_bits(got) == kLsePoisonBits) {
      fail([&] { return describe_lse(row) + ": never written (still the 0xFFFFFFFF poison)"; });
      if (std::isfinite(expected)) result.max_abs_err = result.max_err_over_tolerance = INFINITY;
      continue;
    }
    if (!std::isfinite(expected)) {  // -inf (no key), NaN (NaN inputs), +inf (inf inputs): exactly that
      const bool same = std::isnan(expected) ? std::isnan(got) : static_cast<double>(got) == expected;
      if (!same) fail(got_instead_of_expected);
      continue;
    }
    const double row_scale = std::max({1.0, std::fabs(reference.max_score[i]), std::fabs(expected)});
    const double baseline_err = std::fabs(static_cast<double>(reference.baseline_lse[i]) - expected);
    const double estimate =
        std::isfinite(baseline_err) ? std::max(baseline_err, 0x1p-24 * row_scale) : 0x1p-24 * row_scale;
    const double tolerance =
        lse_options.lse_tolerance_factor * estimate + lse_options.lse_tolerance_epsilon * row_scale;
    if (std::isfinite(baseline_err))
      result.baseline_max_abs_err = std::max(result.baseline_max_abs_err, baseline_err);
    result.tolerance = std::max(result.tolerance, tolerance);
    const double err = std::fabs(static_cast<double>(got) - expected);
    if (!(err <= tolerance)) {
      fail([&] {
        std::ostringstream out;
        out << got_instead_of_expected() << ", error " << err << " > row tolerance " << tolerance;
        return out.str();
      });
    }
    if (std::isfinite(err)) {
      result.max_abs_err = std::max(result.max_abs_err, err);
      result.max_err_over_tolerance = std::max(result.max_err_over_tolerance, err / tolerance);
      err_sq += err * err;
    } else {
      result.max_abs_err = result.max_err_over_tolerance = INFINITY;
    }
    ref_sq += expected * expected;
  }
  result.rel_l2_err = ref_sq > 0.0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
  if (!std::isfinite(result.max_abs_err)) result.rel_l2_err = INFINITY;

  // Rows outside the sample: never the poison; with finite inputs, finite or -inf (a row with no key).
  for (int64_t b = 0; b < lse.batch; ++b)
    for (int64_t h = 0; h < lse.heads; ++h)
      for (int64_t s = 0; s < lse.seq; ++s) {
        if (checked[static_cast<size_t>((b * lse.heads + h) * lse.seq + s)]) continue;
        const float got = lse.at(b, h, s);
        const RowId row{b, h, s};
        if (float_bits(got) == kLsePoisonBits)
          fail([&] { return describe_lse(row) + ": never written (still the 0xFFFFFFFF poison)"; });
        else if (reference.inputs_finite && !(std::isfinite(got) || got == -INFINITY))
          fail([&] { return describe_lse(row) + ": " + std::to_string(got) + " with finite inputs"; });
      }

  if (options.check_gaps_untouched) {
    std::vector<bool> logical(lse.values.size(), false);
    for (int64_t b = 0; b < lse.batch; ++b)
      for (int64_t h = 0; h < lse.heads; ++h)
        for (int64_t s = 0; s < lse.seq; ++s)
          logical[static_cast<size_t>(b * lse.batch_stride + h * lse.head_stride + s)] = true;
    for (size_t i = 0; i < logical.size(); ++i) {
      if (!logical[i] && float_bits(lse.values[i]) != kLsePoisonBits) {
        fail([i] {
          return "the kernel wrote into a gap of the lse buffer (element " + std::to_string(i) + ")";
        });
        break;
      }
    }
  }
  result.passed = result.bad_elements == 0;
  return result;
}

CheckResult check_gradient(const char* name, const Fp64Tensor& reference, const HostTensor& baseline,
                           const HostTensor& out, const CheckOptions& options, const Fp64Tensor* terms) {
  CheckResult result;
  const TensorLayout& l = out.layout;
  if (l.batch != reference.batch || l.seq != reference.seq || l.heads != reference.heads ||
      l.head_dim != reference.head_dim || baseline.layout.batch != l.batch || baseline.layout.seq != l.seq ||
      baseline.layout.heads != l.heads || baseline.layout.head_dim != l.head_dim ||
      (terms != nullptr && (terms->batch != l.batch || terms->seq != l.seq || terms->heads != l.heads ||
                            terms->head_dim != l.head_dim))) {
    result.first_failure = std::string(name) + ": the output, the reference and the baseline differ in shape";
    return result;
  }
  const DType dtype = out.dtype;
  const auto fail = [&](const std::string& what) {
    ++result.bad_elements;
    if (result.first_failure.empty()) result.first_failure = what;
  };
  const auto where = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
    std::ostringstream text;
    text << name << " (b, s, h, d) = (" << b << ", " << s << ", " << h << ", " << d << ")";
    return text.str();
  };
  double err_sq = 0.0, ref_sq = 0.0;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < l.heads; ++h) {
      double scale = 0.0, baseline_err = 0.0, term_size = 0.0;
      for (int64_t s = 0; s < l.seq; ++s)
        for (int64_t d = 0; d < l.head_dim; ++d) {
          if (terms != nullptr && std::isfinite(terms->at(b, s, h, d)))
            term_size = std::max(term_size, terms->at(b, s, h, d));
          const double ref = reference.at(b, s, h, d);
          if (!std::isfinite(ref)) continue;
          scale = std::max(scale, std::fabs(ref));
          const double base = baseline.at(b, s, h, d);
          if (std::isfinite(base)) {
            baseline_err = std::max(baseline_err, std::fabs(base - ref));
            result.baseline_max_abs_err = std::max(result.baseline_max_abs_err, std::fabs(base - ref));
          } else {
            ++result.baseline_nonfinite;
          }
        }
      const double floor = unit_roundoff(dtype) * std::max(scale, smallest_normal(dtype));
      const double accumulation = static_cast<double>(l.head_dim) * std::ldexp(1.0, -24) * term_size;
      const double tol = options.tolerance_factor * std::max({floor, accumulation, baseline_err}) +
                         options.tolerance_epsilon * scale;
      result.tolerance = std::max(result.tolerance, tol);
      for (int64_t s = 0; s < l.seq; ++s) {
        ++result.rows_checked;
        for (int64_t d = 0; d < l.head_dim; ++d) {
          const double ref = reference.at(b, s, h, d);
          if (out.raw[static_cast<size_t>(l.offset(b, s, h, d))] == kPoisonBits) {
            fail(where(b, s, h, d) + ": never written (still the 0xFFFF poison)");
            continue;
          }
          const double got = out.at(b, s, h, d);
          if (!std::isfinite(ref)) {
            if (!(got == ref || (std::isnan(ref) && std::isnan(got))))
              fail(where(b, s, h, d) + ": the reference is not finite and the output differs");
            continue;
          }
          const double err = std::fabs(got - ref);
          err_sq += std::isfinite(err) ? err * err : 0.0;
          ref_sq += ref * ref;
          result.max_abs_err = std::isfinite(err) ? std::max(result.max_abs_err, err) : INFINITY;
          result.max_err_over_tolerance = std::max(result.max_err_over_tolerance, tol > 0.0 ? err / tol : INFINITY);
          if (!(err <= tol)) {
            std::ostringstream text;
            text << where(b, s, h, d) << ": got " << got << ", expected " << ref << ", error " << err
                 << " > head tolerance " << tol;
            fail(text.str());
          }
        }
      }
    }
  result.rel_l2_err = ref_sq > 0.0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
  if (options.check_gaps_untouched) {
    std::vector<bool> logical(out.raw.size(), false);
    for (int64_t b = 0; b < l.batch; ++b)
      for (int64_t s = 0; s < l.seq; ++s)
        for (int64_t h = 0; h < l.heads; ++h)
          for (int64_t d = 0; d < l.head_dim; ++d) logical[static_cast<size_t>(l.offset(b, s, h, d))] = true;
    for (size_t i = 0; i < out.raw.size(); ++i)
      if (!logical[i] && out.raw[i] != kPoisonBits) {
        fail(std::string(name) + ": a gap between rows was written (element " + std::to_string(i) + " of the buffer)");
        break;
      }
  }
  result.passed = result.bad_elements == 0;
  return result;
}

}  // namespace fa
