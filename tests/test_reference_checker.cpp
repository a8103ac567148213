// The fp64 reference and the checker are what every kernel result is judged by, so they are
// tested first, on cases small enough to work out by hand.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/checker.h"
#include "common/reference.h"
#include "host_tensors.h"

using fa::DType;
using fa::HostTensor;
using fa::LayoutKind;
using fa_test::fill_normal;
using fa_test::make_host_tensor;

namespace {

constexpr int64_t kDim = 8;  // small head_dim for the hand-checked cases

std::vector<double> reference_row(const HostTensor& q, const HostTensor& k, const HostTensor& v, int64_t s,
                                  double scale, int64_t b = 0, int64_t h = 0) {
  std::vector<double> out(q.layout.head_dim);
  fa::reference_row_fp64(q, k, v, b, h, s, scale, out.data());
  return out;
}

// q = (1, 0, ..., 0) and k_j = (score_j, 0, ..., 0): q . k_j is exactly score_j.
void set_scores(HostTensor& q, HostTensor& k, const std::vector<float>& scores) {
  for (int64_t d = 0; d < kDim; ++d) q.set(0, 0, 0, d, d == 0 ? 1.0f : 0.0f);
  for (size_t j = 0; j < scores.size(); ++j)
    for (int64_t d = 0; d < kDim; ++d) k.set(0, static_cast<int64_t>(j), 0, d, d == 0 ? scores[j] : 0.0f);
}

// The exact answer of every row, rounded to the dtype: what a perfect kernel would write.
HostTensor exact_output(const HostTensor& q, const HostTensor& k, const HostTensor& v, float scale,
                        LayoutKind kind) {
  const fa::TensorLayout& l = q.layout;
  HostTensor o = make_host_tensor(l.batch, l.seq, l.heads, l.head_dim, q.dtype, kind);
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t s = 0; s < l.seq; ++s) {
        const std::vector<double> row = reference_row(q, k, v, s, scale, b, h);
        for (int64_t d = 0; d < l.head_dim; ++d) o.set(b, s, h, d, static_cast<float>(row[d]));
      }
  return o;
}

struct RandomProblem {
  HostTensor q, k, v;
  float scale;
};

RandomProblem random_problem(DType dtype, int64_t seq_kv = 48) {
  RandomProblem p{make_host_tensor(2, 16, 2, 64, dtype), make_host_tensor(2, seq_kv, 2, 64, dtype),
                  make_host_tensor(2, seq_kv, 2, 64, dtype), 0.125f};
  fill_normal(p.q, 1);
  fill_normal(p.k, 2);
  fill_normal(p.v, 3);
  return p;
}

constexpr uint16_t kPoison = 0xFFFF;   // NaN in fp16 and bf16: what an unwritten element holds
constexpr uint16_t kFp16NaN = 0x7E00;  // a quiet NaN in fp16

}  // namespace

TEST_CASE("fp64 reference: a single key gives exactly its value row", "[reference]") {
  HostTensor q = make_host_tensor(1, 1, 1, kDim, DType::kFloat16);
  HostTensor k = make_host_tensor(1, 1, 1, kDim, DType::kFloat16);
  HostTensor v = make_host_tensor(1, 1, 1, kDim, DType::kFloat16);
  fill_normal(q, 11);
  fill_normal(k, 12, 5.0f);  // any score: softmax over one key is 1
  fill_normal(v, 13);
  const std::vector<double> out = reference_row(q, k, v, 0, 0.7);
  for (int64_t d = 0; d < kDim; ++d) CHECK(out[d] == v.at(0, 0, 0, d));
}

TEST_CASE("fp64 reference: two keys with known scores", "[reference]") {
  HostTensor q = make_host_tensor(1, 1, 1, kDim, DType::kFloat16);
  HostTensor k = make_host_tensor(1, 2, 1, kDim, DType::kFloat16);
  HostTensor v = make_host_tensor(1, 2, 1, kDim, DType::kFloat16);
  set_scores(q, k, {1.0f, 3.0f});
  for (int64_t d = 0; d < kDim; ++d) {
    v.set(0, 0, 0, d, static_cast<float>(d));
    v.set(0, 1, 0, d, -2.0f);
  }
  for (double scale : {1.0, 0.5, 0.25}) {
    // softmax(scale * (1, 3)) = (1, e^{2 scale}) / (1 + e^{2 scale})
    const double p1 = std::exp(2.0 * scale) / (1.0 + std::exp(2.0 * scale));
    const double p0 = 1.0 - p1;
    const std::vector<double> out = reference_row(q, k, v, 0, scale);
    for (int64_t d = 0; d < kDim; ++d) {
      INFO("scale " << scale << ", d " << d);
      CHECK(out[d] == Approx(p0 * d + p1 * -2.0).epsilon(1e-14).margin(1e-14));
    }
  }
}

TEST_CASE("fp64 reference: equal scores give the mean of V", "[reference]") {
  const int64_t seq_kv = 5;
  HostTensor q = make_host_tensor(1, 1, 1, kDim, DType::kBFloat16);
  HostTensor k = make_host_tensor(1, seq_kv, 1, kDim, DType::kBFloat16);
  HostTensor v = make_host_tensor(1, seq_kv, 1, kDim, DType::kBFloat16);
  set_scores(q, k, std::vector<float>(seq_kv, 7.0f));
  fill_normal(v, 21);
  const std::vector<double> out = reference_row(q, k, v, 0, 1.0);
  for (int64_t d = 0; d < kDim; ++d) {
    double mean = 0.0;
    for (int64_t j = 0; j < seq_kv; ++j) mean += v.at(0, j, 0, d);
    mean /= seq_kv;
    CHECK(out[d] == Approx(mean).epsilon(1e-14).margin(1e-14));
  }
}

TEST_CASE("fp64 reference: the scale multiplies the scores, and huge scores do not overflow", "[reference]") {
  HostTensor q = make_host_tensor(1, 1, 1, kDim, DType::kFloat16);
  HostTensor k = make_host_tensor(1, 2, 1, kDim, DType::kFloat16);
  HostTensor v = make_host_tensor(1, 2, 1, kDim, DType::kFloat16);
  for (int64_t d = 0; d < kDim; ++d) {
    v.set(0, 0, 0, d, 1.0f);
    v.set(0, 1, 0, d, 0.0f);
  }
  // Scores (2, 1) at scale 4 are the same softmax as scores (8, 4) at scale 1.
  set_scores(q, k, {2.0f, 1.0f});
  const double at_scale_4 = reference_row(q, k, v, 0, 4.0)[0];
  set_scores(q, k, {8.0f, 4.0f});
  const double at_scale_1 = reference_row(q, k, v, 0, 1.0)[0];
  CHECK(at_scale_4 == Approx(at_scale_1).epsilon(1e-14));
  CHECK(at_scale_1 == Approx(1.0 / (1.0 + std::exp(-4.0))).epsilon(1e-14));

  // Scores 60000 apart: exp(60000) overflows any float; the max subtraction must avoid it.
  set_scores(q, k, {-30000.0f, 30000.0f});
  const std::vector<double> out = reference_row(q, k, v, 0, 1.0);
  for (int64_t d = 0; d < kDim; ++d) CHECK(out[d] == 0.0);
}

TEST_CASE("plain low-precision attention is close to the fp64 reference and rounded to the dtype",
          "[reference]") {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    INFO("dtype " << fa::dtype_name(dtype));
    const RandomProblem p = random_problem(dtype);
    const double unit_roundoff = dtype == DType::kFloat16 ? 1.0 / 2048 : 1.0 / 256;
    double max_err = 0.0;
    std::vector<float> low(64);
    for (int64_t s = 0; s < p.q.layout.seq; ++s) {
      fa::baseline_row_lowp(p.q, p.k, p.v, 1, 1, s, p.scale, low.data());
      const std::vector<double> ref = reference_row(p.q, p.k, p.v, s, p.scale, 1, 1);
      for (int64_t d = 0; d < 64; ++d) {
        CHECK(fa::round_to_dtype(low[d], dtype) == low[d]);  // the output is in the dtype
        max_err = std::max(max_err, std::fabs(low[d] - ref[d]));
      }
    }
    // Outputs are averages of N(0,1) values, |o| < 4: a few unit roundoffs of error, not zero.
    CHECK(max_err > 0.0);
    CHECK(max_err < 8.0 * unit_roundoff);
  }
}

TEST_CASE("plain low-precision attention of a single key is exact", "[reference]") {
  HostTensor q = make_host_tensor(1, 1, 1, kDim, DType::kBFloat16);
  HostTensor k = make_host_tensor(1, 1, 1, kDim, DType::kBFloat16);
  HostTensor v = make_host_tensor(1, 1, 1, kDim, DType::kBFloat16);
  fill_normal(q, 31);
  fill_normal(k, 32);
  fill_normal(v, 33);
  std::vector<float> out(kDim);
  fa::baseline_row_lowp(q, k, v, 0, 0, 0, 0.3f, out.data());
  for (int64_t d = 0; d < kDim; ++d) CHECK(out[d] == v.at(0, 0, 0, d));
}

TEST_CASE("checker passes the exact answer rounded to the dtype", "[checker]") {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (LayoutKind kind : {LayoutKind::kContiguous, LayoutKind::kPadded, LayoutKind::kHeadMajor}) {
      INFO("dtype " << fa::dtype_name(dtype) << ", layout " << static_cast<int>(kind));
      const RandomProblem p = random_problem(dtype);
      const HostTensor o = exact_output(p.q, p.k, p.v, p.scale, kind);
      const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
      INFO(r.summary());
      CHECK(r.passed);
      CHECK(r.bad_elements == 0);
      CHECK(r.rows_checked == 2 * 2 * 16);
      CHECK(r.baseline_max_abs_err > 0.0);
      CHECK(r.tolerance == Approx(2.0 * r.baseline_max_abs_err + 1e-5));
      CHECK(r.max_abs_err <= r.tolerance);
    }
  }
}

TEST_CASE("checker fails on one wrong element and names it", "[checker]") {
  const RandomProblem p = random_problem(DType::kFloat16);
  HostTensor o = exact_output(p.q, p.k, p.v, p.scale, LayoutKind::kContiguous);
  o.set(1, 5, 0, 17, o.at(1, 5, 0, 17) + 0.25f);
  const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
  INFO(r.summary());
  CHECK_FALSE(r.passed);
  CHECK(r.bad_elements == 1);
  CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (1, 5, 0, 17)"));
  CHECK(r.max_abs_err > 0.2);
}

TEST_CASE("checker fails on a NaN output", "[checker]") {
  const RandomProblem p = random_problem(DType::kFloat16);
  HostTensor o = exact_output(p.q, p.k, p.v, p.scale, LayoutKind::kContiguous);
  o.raw[static_cast<size_t>(o.layout.offset(0, 3, 1, 2))] = kFp16NaN;
  const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (0, 3, 1, 2)"));
}

TEST_CASE("checker fails on an element the kernel never wrote (0xFFFF poison)", "[checker]") {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    INFO("dtype " << fa::dtype_name(dtype));
    const RandomProblem p = random_problem(dtype);
    HostTensor o = exact_output(p.q, p.k, p.v, p.scale, LayoutKind::kContiguous);
    o.raw[static_cast<size_t>(o.layout.offset(1, 15, 1, 63))] = kPoison;
    const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
    CHECK_FALSE(r.passed);
    CHECK(r.bad_elements == 1);
  }
}

TEST_CASE("checker catches poison in a row it did not sample", "[checker]") {
  const RandomProblem p = random_problem(DType::kFloat16);
  HostTensor o = exact_output(p.q, p.k, p.v, p.scale, LayoutKind::kContiguous);
  fa::CheckOptions sampled;
  sampled.full_check_max_rows = 0;    // force sampling
  sampled.sampled_rows_per_head = 2;  // only the first and last row of each head
  REQUIRE(fa::check_attention(p.q, p.k, p.v, o, p.scale, sampled).passed);
  o.raw[static_cast<size_t>(o.layout.offset(0, 7, 1, 0))] = kPoison;  // row 7: never sampled
  const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale, sampled);
  CHECK(r.rows_checked == 2 * 2 * 2);
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.first_failure, Catch::Contains("outside the sampled rows"));
}

TEST_CASE("checker: a NaN reference requires a NaN output", "[checker]") {
  RandomProblem p = random_problem(DType::kFloat16);
  // A NaN in one query row makes that row's reference NaN, and only that row's.
  p.q.raw[static_cast<size_t>(p.q.layout.offset(0, 4, 1, 9))] = kFp16NaN;
  HostTensor o = exact_output(p.q, p.k, p.v, p.scale, LayoutKind::kContiguous);
  REQUIRE(std::isnan(o.at(0, 4, 1, 0)));
  REQUIRE(std::isfinite(o.at(0, 5, 1, 0)));
  {
    const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
    INFO(r.summary());
    CHECK(r.passed);  // NaN where the reference is NaN, correct everywhere else
  }
  o.set(0, 4, 1, 3, 0.5f);  // a finite value where the reference is NaN
  const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (0, 4, 1, 3)"));
}

TEST_CASE("checker: the gaps of a padded output must keep their poison", "[checker]") {
  const RandomProblem p = random_problem(DType::kBFloat16);
  HostTensor o = exact_output(p.q, p.k, p.v, p.scale, LayoutKind::kPadded);
  REQUIRE(o.layout.storage_elems > o.layout.logical_elems());
  REQUIRE(fa::check_attention(p.q, p.k, p.v, o, p.scale).passed);

  // The element just past the head_dim of (b 1, s 2, h 0) is a gap (head_stride = head_dim + 8).
  const size_t gap = static_cast<size_t>(o.layout.offset(1, 2, 0, 63) + 1);
  REQUIRE(o.layout.head_stride > o.layout.head_dim);
  o.raw[gap] = 0;
  const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.first_failure, Catch::Contains("gap"));

  fa::CheckOptions no_gap_check;
  no_gap_check.check_gaps_untouched = false;
  CHECK(fa::check_attention(p.q, p.k, p.v, o, p.scale, no_gap_check).passed);
}
