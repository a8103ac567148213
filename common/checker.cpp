#include "checker.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <sstream>
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

std::string describe(const RowId& r, int64_t d, double got, double expected) {
  std::ostringstream out;
  out << "(b, s, h, d) = (" << r.b << ", " << r.s << ", " << r.h << ", " << d << "): got " << got
      << ", expected " << expected;
  return out.str();
}

}  // namespace

std::string CheckResult::summary() const {
  std::ostringstream out;
  out << (passed ? "PASS" : "FAIL") << ": " << rows_checked << " rows, max_abs_err " << max_abs_err
      << " (tolerance " << tolerance << " = 2 x plain-attention error " << baseline_max_abs_err
      << " + eps), rel_l2_err " << rel_l2_err;
  if (!passed) out << "; " << bad_elements << " bad elements, first: " << first_failure;
  return out.str();
}

ReferenceRows compute_reference_rows(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                     float softmax_scale, const CheckOptions& options) {
  ReferenceRows r;
  const int64_t dim = q.layout.head_dim;
  r.rows = choose_rows(q.layout, options);
  r.ref.resize(r.rows.size() * dim);
  r.baseline.resize(r.rows.size() * dim);
  parallel_for(static_cast<int64_t>(r.rows.size()), [&](int64_t i) {
    const RowId& row = r.rows[i];
    reference_row_fp64(q, k, v, row.b, row.h, row.s, softmax_scale, &r.ref[i * dim]);
    baseline_row_lowp(q, k, v, row.b, row.h, row.s, softmax_scale, &r.baseline[i * dim]);
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
  const std::vector<float>& baseline = reference.baseline;
  result.rows_checked = static_cast<int64_t>(rows.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isfinite(ref[i]))
      result.baseline_max_abs_err = std::max(result.baseline_max_abs_err, std::fabs(baseline[i] - ref[i]));
  }
  result.tolerance = options.tolerance_factor * result.baseline_max_abs_err + options.tolerance_epsilon;

  double err_sq = 0.0, ref_sq = 0.0;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t d = 0; d < dim; ++d) {
      const double expected = ref[i * dim + d];
      const double got = o.at(rows[i].b, rows[i].s, rows[i].h, d);
      bool ok;
      if (std::isnan(expected)) {
        ok = std::isnan(got);
      } else if (std::isinf(expected)) {
        ok = got == expected;
      } else {
        const double err = std::fabs(got - expected);
        ok = err <= result.tolerance;  // false for NaN
        if (std::isfinite(err)) {
          result.max_abs_err = std::max(result.max_abs_err, err);
          err_sq += err * err;
        } else {
          result.max_abs_err = INFINITY;
        }
        ref_sq += expected * expected;
      }
      if (!ok) {
        if (result.bad_elements == 0) result.first_failure = describe(rows[i], d, got, expected);
        ++result.bad_elements;
      }
    }
  }
  result.rel_l2_err = ref_sq > 0.0 ? std::sqrt(err_sq / ref_sq) : std::sqrt(err_sq);
  if (!std::isfinite(result.max_abs_err)) result.rel_l2_err = INFINITY;

  // Rows outside the sample: with finite inputs every output must be finite, so an element the
  // kernel never wrote (still NaN poison) fails even when it was not sampled.
  if (static_cast<int64_t>(rows.size()) < o.layout.batch * o.layout.heads * o.layout.seq &&
      reference.inputs_finite && !all_finite(o)) {
    ++result.bad_elements;
    if (result.first_failure.empty())
      result.first_failure = "non-finite output outside the sampled rows (unwritten or overflowed)";
  }

  if (options.check_gaps_untouched && o.layout.storage_elems > o.layout.logical_elems()) {
    std::vector<bool> logical(static_cast<size_t>(o.layout.storage_elems), false);
    const TensorLayout& l = o.layout;
    for (int64_t b = 0; b < l.batch; ++b)
      for (int64_t s = 0; s < l.seq; ++s)
        for (int64_t h = 0; h < l.heads; ++h)
          for (int64_t d = 0; d < l.head_dim; ++d) logical[static_cast<size_t>(l.offset(b, s, h, d))] = true;
    for (size_t i = 0; i < logical.size(); ++i) {
      if (!logical[i] && o.raw[i] != 0xFFFF) {
        ++result.bad_elements;
        if (result.first_failure.empty())
          result.first_failure =
              "the kernel wrote into a gap between output rows (element " + std::to_string(i) + ")";
        break;
      }
    }
  }
  result.passed = result.bad_elements == 0;
  return result;
}

}  // namespace fa
