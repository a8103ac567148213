// The fp64 reference and the checker are what every kernel result is judged by, so they are
// tested first, on cases small enough to work out by hand.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/checker.h"
#include "common/reference.h"
#include "fa_catch.h"
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

// The plain low-precision attention of query row 0 of a one-row, one-head problem.
std::vector<float> baseline_row(const HostTensor& q, const HostTensor& k, const HostTensor& v, float scale) {
  std::vector<float> out(q.layout.head_dim);
  fa::baseline_row_lowp(q, k, v, 0, 0, 0, scale, out.data());
  return out;
}

// A one-row problem, kDim wide, for the checker with a hand-made reference: the error of every
// output element and the row's tolerance are then exactly known, not blurred by any rounding.
struct HandMadeRow {
  fa::ReferenceRows reference;
  HostTensor o;
  explicit HandMadeRow(DType dtype) : o(make_host_tensor(1, 1, 1, kDim, dtype)) {
    reference.rows = {{0, 0, 0}};
    reference.ref.assign(kDim, 0.0);
    reference.baseline.assign(kDim, 0.0f);
    for (int64_t d = 0; d < kDim; ++d) o.set(0, 0, 0, d, 0.0f);
  }
  fa::CheckResult check(const fa::CheckOptions& options = {}) const {
    return fa::check_against_reference(reference, o, options);
  }
};

double unit_roundoff(DType dtype) { return dtype == DType::kFloat16 ? 0x1p-11 : 0x1p-8; }

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

// The plain attention sets every tolerance, so it is pinned to the exact 16-bit values it must
// produce on cases worked out by hand, in both dtypes: a baseline that is off (even by 0.3%) would
// widen or narrow every tolerance without any other test noticing.
TEST_CASE("plain low-precision attention of a single key is exactly its value row", "[reference]") {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    INFO("dtype " << fa::dtype_name(dtype));
    HostTensor q = make_host_tensor(1, 1, 1, kDim, dtype);
    HostTensor k = make_host_tensor(1, 1, 1, kDim, dtype);
    HostTensor v = make_host_tensor(1, 1, 1, kDim, dtype);
    fill_normal(q, 31);
    fill_normal(k, 32);
    fill_normal(v, 33);
    // p = exp(0) / exp(0) = 1 exactly, 1 * v is exact in fp32, and v is already in the dtype.
    const std::vector<float> out = baseline_row(q, k, v, 0.3f);
    for (int64_t d = 0; d < kDim; ++d) CHECK(out[d] == v.at(0, 0, 0, d));
  }
}

TEST_CASE("plain low-precision attention of two keys with known scores, to the bit", "[reference]") {
  // Scores (1, 3): softmax = (0.1192029..., 0.8807970...), computed in fp32 and rounded to the
  // dtype (each lies at least 0.02 of a 16-bit ulp from a rounding boundary, far more than fp32's
  // error):
  //   fp16: p0 = 1953 * 2^-14 = 0.11920166015625, p1 = 1804 * 2^-11 = 0.880859375
  //   bf16: p0 =  244 * 2^-11 = 0.119140625,      p1 =  225 * 2^-8  = 0.87890625
  // v0[d] = 2d + 1, v1[d] = 3: p0 v0 + p1 v1 is exact in fp32 (integers times 2^-14), and its
  // rounding to the dtype is never a tie. The expected outputs, exact 16-bit values:
  const std::vector<float> expected_fp16 = {2.76171875f, 3.0f,       3.23828125f, 3.4765625f,
                                            3.71484375f, 3.953125f, 4.19140625f, 4.4296875f};
  const std::vector<float> expected_bf16 = {2.75f,     3.0f,     3.234375f, 3.46875f,
                                            3.703125f, 3.953125f, 4.1875f,  4.4375f};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    INFO("dtype " << fa::dtype_name(dtype));
    HostTensor q = make_host_tensor(1, 1, 1, kDim, dtype);
    HostTensor k = make_host_tensor(1, 2, 1, kDim, dtype);
    HostTensor v = make_host_tensor(1, 2, 1, kDim, dtype);
    set_scores(q, k, {1.0f, 3.0f});
    for (int64_t d = 0; d < kDim; ++d) {
      v.set(0, 0, 0, d, static_cast<float>(2 * d + 1));
      v.set(0, 1, 0, d, 3.0f);
    }
    const std::vector<float> out = baseline_row(q, k, v, 1.0f);
    const std::vector<float>& expected = dtype == DType::kFloat16 ? expected_fp16 : expected_bf16;
    for (int64_t d = 0; d < kDim; ++d) {
      INFO("d " << d);
      CHECK(out[d] == expected[d]);
    }
  }
}

TEST_CASE("plain low-precision attention of equal scores, to the bit: P = 1/3 rounded", "[reference]") {
  // Three keys with equal scores: p = 1/3 in fp32, rounded to the dtype:
  //   fp16: 1365 * 2^-12 = 0.333251953125 (3p = 0.99976 < 1)
  //   bf16:  171 * 2^-9  = 0.333984375    (3p = 1.00195 > 1)
  // V: v0[d] = 16d + 3, v1[d] = v2[d] = 16d + 1, so the exact output is the mean 16d + 5/3, and
  // p v0 + p v1 + p v2 = p (48d + 5) is exact in fp32; rounded to the dtype (never a tie) it is
  // not the mean rounded to the dtype (1.6669921875 / 1.6640625 at d = 0): the rounding of P shows.
  const std::vector<float> expected_fp16 = {1.666015625f, 17.65625f, 33.65625f, 49.65625f,
                                            65.625f,      81.625f,   97.625f,   113.625f};
  const std::vector<float> expected_bf16 = {1.671875f, 17.75f, 33.75f, 49.75f, 66.0f, 82.0f, 98.0f, 114.0f};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    INFO("dtype " << fa::dtype_name(dtype));
    HostTensor q = make_host_tensor(1, 1, 1, kDim, dtype);
    HostTensor k = make_host_tensor(1, 3, 1, kDim, dtype);
    HostTensor v = make_host_tensor(1, 3, 1, kDim, dtype);
    set_scores(q, k, {7.0f, 7.0f, 7.0f});
    for (int64_t d = 0; d < kDim; ++d) {
      v.set(0, 0, 0, d, static_cast<float>(16 * d + 3));
      v.set(0, 1, 0, d, static_cast<float>(16 * d + 1));
      v.set(0, 2, 0, d, static_cast<float>(16 * d + 1));
    }
    const std::vector<float> out = baseline_row(q, k, v, 1.0f);
    const std::vector<float>& expected = dtype == DType::kFloat16 ? expected_fp16 : expected_bf16;
    for (int64_t d = 0; d < kDim; ++d) {
      INFO("d " << d);
      CHECK(out[d] == expected[d]);
    }
  }
}

// Equal scores over n keys with every V element at the dtype's maximum: the exact answer is that
// maximum, but the plain attention's rounded P sums to more than 1, so it overflows to +inf.
//   fp16, n = 27: p = 1214 * 2^-15 (27 p = 1.00024), sum 27 p * 65504 ~ 65524 >= 65520 -> +inf
//   bf16, n = 13: p =  158 * 2^-11 (13 p = 1.00293), sum = 261885 * 2^110 (exact in fp32), which
//                 rounds to 256 * 2^120 = 2^128 -> +inf
namespace {

struct OverflowCase {
  DType dtype;
  int64_t keys;
  float dtype_max;
};
const OverflowCase kOverflowCases[] = {{DType::kFloat16, 27, 65504.0f}, {DType::kBFloat16, 13, 0x1.FEp127f}};

struct OverflowProblem {
  HostTensor q, k, v;
};
OverflowProblem overflow_problem(const OverflowCase& c) {
  OverflowProblem p{make_host_tensor(1, 1, 1, kDim, c.dtype), make_host_tensor(1, c.keys, 1, kDim, c.dtype),
                    make_host_tensor(1, c.keys, 1, kDim, c.dtype)};
  set_scores(p.q, p.k, std::vector<float>(static_cast<size_t>(c.keys), 0.5f));
  for (int64_t j = 0; j < c.keys; ++j)
    for (int64_t d = 0; d < kDim; ++d) p.v.set(0, j, 0, d, c.dtype_max);
  return p;
}

}  // namespace

TEST_CASE("plain low-precision attention of equal scores overflows at the dtype's maximum", "[reference]") {
  for (const OverflowCase& c : kOverflowCases) {
    INFO("dtype " << fa::dtype_name(c.dtype) << ", " << c.keys << " keys");
    const OverflowProblem p = overflow_problem(c);
    REQUIRE(p.v.at(0, 0, 0, 0) == c.dtype_max);  // the maximum itself, not rounded to inf
    const std::vector<float> out = baseline_row(p.q, p.k, p.v, 1.0f);
    const std::vector<double> ref = reference_row(p.q, p.k, p.v, 0, 1.0);
    for (int64_t d = 0; d < kDim; ++d) {
      CHECK(out[d] == INFINITY);
      CHECK(ref[d] == Approx(c.dtype_max).epsilon(1e-12));
    }
  }
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
      CHECK(r.baseline_nonfinite == 0);
      // The worst row's tolerance is at least twice the plain attention's largest error.
      CHECK(r.tolerance >= 2.0 * r.baseline_max_abs_err);
      CHECK(r.max_abs_err <= r.tolerance);
      CHECK(r.max_err_over_tolerance > 0.0);
      CHECK(r.max_err_over_tolerance <= 1.0);
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

TEST_CASE("checker: a head with large V values does not widen another head's tolerance", "[checker]") {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    INFO("dtype " << fa::dtype_name(dtype));
    RandomProblem p = random_problem(dtype);
    // Head 1's V times 256 (exact: a power of two): its outputs, errors and tolerances are ~256x
    // those of head 0, whose outputs are of order 1.
    const fa::TensorLayout& l = p.v.layout;
    for (int64_t b = 0; b < l.batch; ++b)
      for (int64_t j = 0; j < l.seq; ++j)
        for (int64_t d = 0; d < l.head_dim; ++d) p.v.set(b, j, 1, d, 256.0f * p.v.at(b, j, 1, d));
    HostTensor o = exact_output(p.q, p.k, p.v, p.scale, LayoutKind::kContiguous);
    const fa::CheckResult exact = fa::check_attention(p.q, p.k, p.v, o, p.scale);
    INFO(exact.summary());
    REQUIRE(exact.passed);
    // A quarter of the worst row's tolerance (a head-1 row's) is still dozens of times head 0's
    // own, so it must fail there, although one problem-wide tolerance would let it through.
    o.set(1, 5, 0, 17, o.at(1, 5, 0, 17) + static_cast<float>(exact.tolerance / 4));
    const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
    INFO(r.summary());
    REQUIRE(r.max_abs_err < exact.tolerance);
    CHECK_FALSE(r.passed);
    CHECK(r.bad_elements == 1);
    CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (1, 5, 0, 17)"));
  }
}

TEST_CASE("checker: the tolerance is per row, not per head", "[checker]") {
  // One head, two query rows: row 0 attends to key 0 (V of order 256), row 1 to key 1 (V of order
  // 1); scores +-20 make each softmax one-hot to within e^-40.
  const DType dtype = DType::kFloat16;
  HostTensor q = make_host_tensor(1, 2, 1, kDim, dtype);
  HostTensor k = make_host_tensor(1, 2, 1, kDim, dtype);
  HostTensor v = make_host_tensor(1, 2, 1, kDim, dtype);
  for (int64_t d = 0; d < kDim; ++d) {
    q.set(0, 0, 0, d, d == 0 ? 1.0f : 0.0f);
    q.set(0, 1, 0, d, d == 0 ? -1.0f : 0.0f);
    k.set(0, 0, 0, d, d == 0 ? 20.0f : 0.0f);
    k.set(0, 1, 0, d, d == 0 ? -20.0f : 0.0f);
    v.set(0, 0, 0, d, 256.0f + 16.0f * d);
    v.set(0, 1, 0, d, 1.0f + 0.125f * d);
  }
  HostTensor o = exact_output(q, k, v, 1.0f, LayoutKind::kContiguous);
  REQUIRE(fa::check_attention(q, k, v, o, 1.0f).passed);
  // Off by 1/16 in row 1 (values 1..2): over 60 times its tolerance (2 u max|ref| = 0.002), but
  // less than row 0's (2 u 368 = 0.36).
  o.set(0, 1, 0, 4, o.at(0, 1, 0, 4) + 0.0625f);
  const fa::CheckResult r = fa::check_attention(q, k, v, o, 1.0f);
  INFO(r.summary());
  CHECK_FALSE(r.passed);
  CHECK(r.tolerance > 0.0625);  // the worst row's (row 0's) tolerance would have let it through
  CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (0, 1, 0, 4)"));
}

TEST_CASE("checker: an error just inside the tolerance passes, just outside fails", "[checker]") {
  // A hand-made row: baseline 1 everywhere, reference 1 - x, so the plain attention's error is x
  // on every element (x ~ 2^-6 is above the rounding floor u (1 - x)), the row's scale is 1 - x and
  // tol = f x + eps (1 - x). The output is exactly 1, except element 3: 1 + 2^-6 (exact in both
  // dtypes), whose error is 2^-6 + x. It equals tol at x* = (2^-6 - eps) / (f - 1 - eps); a relative
  // step of 1e-9 in x, far above double rounding, puts the error on either side of the boundary.
  const fa::CheckOptions options;
  const double f = options.tolerance_factor, eps = options.tolerance_epsilon;
  const double x_boundary = (0x1p-6 - eps) / (f - 1.0 - eps);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (double step : {1e-9, -1e-9}) {
      const bool inside = step > 0;
      INFO("dtype " << fa::dtype_name(dtype) << (inside ? ", just inside" : ", just outside"));
      const double x = x_boundary * (1.0 + step);
      HandMadeRow row(dtype);
      for (int64_t d = 0; d < kDim; ++d) {
        row.reference.ref[d] = 1.0 - x;
        row.reference.baseline[d] = 1.0f;
        row.o.set(0, 0, 0, d, d == 3 ? 1.0f + 0x1p-6f : 1.0f);
      }
      const fa::CheckResult r = row.check(options);
      INFO(r.summary());
      CHECK(r.tolerance == Approx(f * x + eps * (1.0 - x)).epsilon(1e-12));
      CHECK(r.max_abs_err == Approx(0x1p-6 + x).epsilon(1e-12));
      CHECK(r.passed == inside);
      CHECK(r.bad_elements == (inside ? 0 : 1));
      if (!inside) CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (0, 0, 0, 3)"));
    }
  }
}

TEST_CASE("checker: a row the plain attention gets exactly right still allows rounding", "[checker]") {
  // A hand-made row whose baseline equals the reference (error 0): element 0 is R (a float, the
  // row's largest |ref|), the rest 0. The rule's floor makes tol = f u R + eps R, u the dtype's
  // unit roundoff. The output is element 0 rounded to the dtype (error <= u R) and t = 2^-4 at
  // element 1: it passes just above R* = t / (f u + eps) and fails just below (relative step 1e-6,
  // far above float's rounding of R).
  const fa::CheckOptions options;
  const double f = options.tolerance_factor, eps = options.tolerance_epsilon;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const double u = unit_roundoff(dtype);
    const double row_scale_boundary = 0x1p-4 / (f * u + eps);
    for (double step : {1e-6, -1e-6}) {
      const bool inside = step > 0;
      INFO("dtype " << fa::dtype_name(dtype) << (inside ? ", just inside" : ", just outside"));
      const float row_scale = static_cast<float>(row_scale_boundary * (1.0 + step));
      HandMadeRow row(dtype);
      row.reference.ref[0] = row_scale;
      row.reference.baseline[0] = row_scale;
      row.o.set(0, 0, 0, 0, row_scale);
      row.o.set(0, 0, 0, 1, 0x1p-4f);
      const fa::CheckResult r = row.check(options);
      INFO(r.summary());
      CHECK(r.baseline_max_abs_err == 0.0);
      CHECK(r.tolerance == Approx((f * u + eps) * row_scale).epsilon(1e-12));
      CHECK(r.passed == inside);
      if (!inside) CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (0, 0, 0, 1)"));
    }
  }
}

TEST_CASE("checker: a row whose answer is 0 allows one step of the dtype's smallest spacing", "[checker]") {
  // Reference and baseline 0 everywhere: the floor is u times the smallest normal, so tol = 2 u
  // 2^-14 = 2^-24 in fp16 and 2 u 2^-126 = 2^-133 in bf16, each the dtype's smallest subnormal
  // (an exact power of two: the comparison at the boundary is exact).
  const fa::CheckOptions options;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    const float smallest_subnormal = dtype == DType::kFloat16 ? 0x1p-24f : 0x1p-133f;
    for (int steps : {1, 2}) {
      INFO("dtype " << fa::dtype_name(dtype) << ", " << steps << " smallest subnormals");
      HandMadeRow row(dtype);
      row.o.set(0, 0, 0, 5, steps * smallest_subnormal);
      REQUIRE(row.o.at(0, 0, 0, 5) == steps * smallest_subnormal);
      const fa::CheckResult r = row.check(options);
      INFO(r.summary());
      CHECK(r.tolerance == options.tolerance_factor * 0.5 * smallest_subnormal);
      CHECK(r.passed == (steps == 1));
    }
  }
}

TEST_CASE("checker: an overflowing plain attention does not make the tolerance infinite", "[checker]") {
  // The plain attention overflows to +inf (see the overflow test above) where the reference is the
  // dtype's maximum M. Its error must not count; the row's tolerance is then the rule's fallback,
  // f * 2 u M + eps M: 4 u M + eps M ~ 2^-9 M, a few ulps of M.
  for (const OverflowCase& c : kOverflowCases) {
    INFO("dtype " << fa::dtype_name(c.dtype) << ", " << c.keys << " keys");
    const OverflowProblem p = overflow_problem(c);
    const fa::CheckOptions options;
    const double u = unit_roundoff(c.dtype), m = c.dtype_max;
    HostTensor o = make_host_tensor(1, 1, 1, kDim, c.dtype);
    for (int64_t d = 0; d < kDim; ++d) o.set(0, 0, 0, d, c.dtype_max);
    {
      const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, 1.0f, options);
      INFO(r.summary());
      CHECK(r.passed);
      CHECK(r.baseline_nonfinite == kDim);
      CHECK(std::isfinite(r.tolerance));
      CHECK(r.tolerance ==
            Approx(options.tolerance_factor * 2.0 * u * m + options.tolerance_epsilon * m).epsilon(1e-9));
    }
    // +inf where the answer is finite: what a kernel that rounds like the plain attention writes.
    o.set(0, 0, 0, 2, INFINITY);
    {
      const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, 1.0f, options);
      INFO(r.summary());
      CHECK_FALSE(r.passed);
      CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (0, 0, 0, 2)"));
    }
    // A finite value 8 u M below (twice the tolerance, rounded to the dtype) fails too.
    o.set(0, 0, 0, 2, static_cast<float>(m * (1.0 - 8.0 * u)));
    {
      const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, 1.0f, options);
      INFO(r.summary());
      CHECK_FALSE(r.passed);
      CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (0, 0, 0, 2)"));
    }
  }
}

TEST_CASE("checker: where NaN is expected, the unwritten poison is not accepted as the NaN", "[checker]") {
  // NaN bit patterns a kernel may write (fp32 -> 16-bit conversions give canonical NaNs), and the
  // one it cannot: 0xFFFF, the poison of an element nobody wrote.
  const std::vector<uint16_t> written_nans_fp16 = {0x7FFF, 0x7E00, 0xFE00, 0x7C01};
  const std::vector<uint16_t> written_nans_bf16 = {0x7FFF, 0x7FC0, 0xFFC0, 0x7F81};
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    INFO("dtype " << fa::dtype_name(dtype));
    RandomProblem p = random_problem(dtype);
    p.q.set(0, 4, 1, 9, NAN);  // query row (0, 4, 1): its reference is NaN, only that row's
    HostTensor o = exact_output(p.q, p.k, p.v, p.scale, LayoutKind::kContiguous);
    const size_t element = static_cast<size_t>(o.layout.offset(0, 4, 1, 6));
    for (uint16_t nan_bits : dtype == DType::kFloat16 ? written_nans_fp16 : written_nans_bf16) {
      o.raw[element] = nan_bits;
      REQUIRE(std::isnan(o.at(0, 4, 1, 6)));
      const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
      INFO("NaN bits " << std::hex << nan_bits << ": " << r.summary());
      CHECK(r.passed);
    }
    o.raw[element] = kPoison;
    const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale);
    INFO(r.summary());
    CHECK_FALSE(r.passed);
    CHECK(r.bad_elements == 1);
    CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (0, 4, 1, 6)"));
    CHECK_THAT(r.first_failure, Catch::Contains("never written"));
  }
}

TEST_CASE("checker: poison in a row it did not sample fails even when the inputs hold NaN", "[checker]") {
  // With a NaN input, non-finite outputs outside the sample may be legitimate; the poison is not.
  RandomProblem p = random_problem(DType::kBFloat16);
  p.q.set(0, 7, 1, 0, NAN);  // query row (0, 7, 1): NaN reference, and never sampled below
  HostTensor o = exact_output(p.q, p.k, p.v, p.scale, LayoutKind::kContiguous);
  fa::CheckOptions sampled;
  sampled.full_check_max_rows = 0;    // force sampling
  sampled.sampled_rows_per_head = 2;  // only the first and last row of each head
  REQUIRE(fa::check_attention(p.q, p.k, p.v, o, p.scale, sampled).passed);
  o.raw[static_cast<size_t>(o.layout.offset(0, 7, 1, 5))] = kPoison;
  const fa::CheckResult r = fa::check_attention(p.q, p.k, p.v, o, p.scale, sampled);
  INFO(r.summary());
  CHECK_FALSE(r.passed);
  CHECK_THAT(r.first_failure, Catch::Contains("outside the sampled rows"));
}

TEST_CASE("checker: a row is held to its head's largest relative plain-attention error", "[checker]") {
  // Two hand-made rows of one head (two heads for the control). Row 0: scale 4, plain attention off
  // by 2^-5 (relative 2^-7). Row 1: scale 1, plain attention exact. Row 1's own rule would give
  // tol = f u + eps (the floor); with its head's relative error it is f 2^-7 + eps. An output error
  // of 2^-8 on row 1 lies between the two: it passes when both rows share a head and fails when
  // row 0 belongs to another head.
  const fa::CheckOptions options;
  const DType dtype = DType::kFloat16;
  for (bool same_head : {true, false}) {
    INFO((same_head ? "rows in one head" : "rows in two heads"));
    fa::ReferenceRows reference;
    reference.rows = {{0, 0, 0}, {0, same_head ? 0 : 1, 1}};
    reference.ref.assign(2 * kDim, 0.0);
    reference.baseline.assign(2 * kDim, 0.0f);
    HostTensor o = make_host_tensor(1, 2, 2, kDim, dtype);
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t d = 0; d < kDim; ++d) o.set(0, s, h, d, 0.0f);
    reference.ref[0] = 4.0;
    reference.baseline[0] = 4.0f + 0x1p-5f;
    o.set(0, 0, 0, 0, 4.0f);
    reference.ref[kDim] = 1.0;
    reference.baseline[kDim] = 1.0f;
    o.set(0, 1, same_head ? 0 : 1, 0, 1.0f + 0x1p-8f);
    const fa::CheckResult r = fa::check_against_reference(reference, o, options);
    INFO(r.summary());
    CHECK(r.passed == same_head);
    if (!same_head) CHECK_THAT(r.first_failure, Catch::Contains("(b, s, h, d) = (0, 1, 1, 0)"));
  }
}
