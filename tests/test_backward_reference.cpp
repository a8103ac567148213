// The backward pass without a GPU: the fp64 reference's dQ, dK, dV are the true gradients (central
// finite differences of the loss L = sum(dO * O) in fp64 agree with them on tiny shapes: seq_q !=
// seq_kv, causal rows that see no key, grouped-query attention), D = rowsum(dO * O) equals
// rowsum(P * dP), the reference's O and LSE are the forward reference's, the gradient check's rule
// (checker.h) passes the low-precision baseline and fails what it must fail, and the backward
// launcher contract (common/backward.h) rejects bad calls.
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/backward.h"
#include "common/checker.h"
#include "common/fragment_layout.h"
#include "common/reference.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "host_tensors.h"

using fa::DType;
using fa::Fp64Tensor;
using fa::HostTensor;

namespace {

struct Shape {
  int64_t batch, heads, kv_heads, seq_q, seq_kv, dim;
  bool causal;
  std::string name() const {
    return "batch " + std::to_string(batch) + ", heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) +
           ", seq_q " + std::to_string(seq_q) + ", seq_kv " + std::to_string(seq_kv) + ", dim " +
           std::to_string(dim) + (causal ? ", causal" : "");
  }
};

Fp64Tensor random_fp64(int64_t b, int64_t s, int64_t h, int64_t d, uint64_t seed) {
  Fp64Tensor t(b, s, h, d);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double& x : t.values) x = normal(rng);
  return t;
}

// L = sum over every element of dO * O, in fp64.
double loss(const Fp64Tensor& q, const Fp64Tensor& k, const Fp64Tensor& v, const Fp64Tensor& d_o, double scale,
            bool causal) {
  const fa::BackwardFp64 r = fa::reference_backward_fp64(q, k, v, d_o, scale, causal);
  double sum = 0.0;
  for (size_t i = 0; i < r.o.values.size(); ++i) sum += d_o.values[i] * r.o.values[i];
  return sum;
}

// Central differences of L in every element of `x` (one of q, k, v), against `analytic`.
void check_finite_differences(const char* name, Fp64Tensor& x, const Fp64Tensor& analytic, const Fp64Tensor& q,
                              const Fp64Tensor& k, const Fp64Tensor& v, const Fp64Tensor& d_o, double scale,
                              bool causal) {
  constexpr double kStep = 1e-5;
  double worst = 0.0;
  for (size_t i = 0; i < x.values.size(); ++i) {
    const double saved = x.values[i];
    x.values[i] = saved + kStep;
    const double up = loss(q, k, v, d_o, scale, causal);
    x.values[i] = saved - kStep;
    const double down = loss(q, k, v, d_o, scale, causal);
    x.values[i] = saved;
    const double numeric = (up - down) / (2.0 * kStep);
    // The central difference's truncation error is O(step^2) ~ 1e-10 here, its rounding ~1e-11.
    const double err = std::fabs(numeric - analytic.values[i]);
    worst = std::max(worst, err / (1e-7 + 1e-6 * std::fabs(analytic.values[i])));
    INFO(name << " element " << i << ": finite difference " << numeric << ", analytic " << analytic.values[i]);
    REQUIRE(err <= 1e-7 + 1e-6 * std::fabs(analytic.values[i]));
  }
  INFO(name << ": worst error over its bound " << worst);
  CHECK(worst <= 1.0);
}

const std::vector<Shape>& tiny_shapes() {
  static const std::vector<Shape> shapes = {
      {1, 2, 2, 3, 5, 4, false},  // seq_q < seq_kv
      {2, 2, 2, 5, 3, 4, false},  // seq_q > seq_kv, batch 2
      {1, 2, 2, 4, 4, 8, true},   // causal, square
      {1, 1, 1, 6, 3, 4, true},   // causal, seq_q > seq_kv: rows 0-2 see no key
      {1, 2, 2, 3, 6, 4, true},   // causal, seq_q < seq_kv
      {1, 4, 2, 3, 4, 4, false},  // grouped-query: two query heads per key/value head
      {2, 3, 1, 4, 5, 4, true},   // multi-query, causal
  };
  return shapes;
}

}  // namespace

TEST_CASE("backward reference: dQ, dK, dV are the finite differences of L = sum(dO * O) in fp64",
          "[backward][reference]") {
  uint64_t seed = 1;
  for (const Shape& s : tiny_shapes()) {
    INFO(s.name());
    Fp64Tensor q = random_fp64(s.batch, s.seq_q, s.heads, s.dim, seed++);
    Fp64Tensor k = random_fp64(s.batch, s.seq_kv, s.kv_heads, s.dim, seed++);
    Fp64Tensor v = random_fp64(s.batch, s.seq_kv, s.kv_heads, s.dim, seed++);
    const Fp64Tensor d_o = random_fp64(s.batch, s.seq_q, s.heads, s.dim, seed++);
    const double scale = 0.7;  // not 1/sqrt(d): a scale misplaced in dQ or dK shows
    const fa::BackwardFp64 r = fa::reference_backward_fp64(q, k, v, d_o, scale, s.causal);
    check_finite_differences("dq", q, r.dq, q, k, v, d_o, scale, s.causal);
    check_finite_differences("dk", k, r.dk, q, k, v, d_o, scale, s.causal);
    check_finite_differences("dv", v, r.dv, q, k, v, d_o, scale, s.causal);
  }
}

TEST_CASE("backward reference: causal rows that see no key have O = 0, LSE = -inf and zero dQ",
          "[backward][reference][causal]") {
  // seq_q 6, seq_kv 3, causal (bottom-right): row i sees i - 2 keys, so rows 0, 1, 2 see none and
  // row 3 sees one.
  const Fp64Tensor q = random_fp64(1, 6, 2, 4, 11), k = random_fp64(1, 3, 2, 4, 12), v = random_fp64(1, 3, 2, 4, 13);
  const Fp64Tensor d_o = random_fp64(1, 6, 2, 4, 14);
  const fa::BackwardFp64 r = fa::reference_backward_fp64(q, k, v, d_o, 0.5, true);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 6; ++i) {
      const bool sees_none = i < 3;
      CHECK((r.lse[static_cast<size_t>(h * 6 + i)] == -INFINITY) == sees_none);
      for (int64_t d = 0; d < 4; ++d) {
        if (sees_none) {
          CHECK(r.o.at(0, i, h, d) == 0.0);
          CHECK(r.dq.at(0, i, h, d) == 0.0);
        } else if (i == 3) {
          // One key: P = 1 whatever the scores, so dS = dP - D = 0 and dQ is exactly 0 too.
          CHECK(std::fabs(r.dq.at(0, i, h, d)) <= 1e-15);
        } else {
          CHECK(r.dq.at(0, i, h, d) != 0.0);
        }
      }
    }
  // Keys still get gradients from the rows that see them.
  for (int64_t j = 0; j < 3; ++j) CHECK(r.dv.at(0, j, 0, 0) != 0.0);
}

TEST_CASE("backward reference: D = rowsum(dO * O) equals rowsum(P * dP)", "[backward][reference]") {
  uint64_t seed = 100;
  for (const Shape& s : tiny_shapes()) {
    INFO(s.name());
    const Fp64Tensor q = random_fp64(s.batch, s.seq_q, s.heads, 16, seed++);
    const Fp64Tensor k = random_fp64(s.batch, s.seq_kv + 20, s.kv_heads, 16, seed++);
    const Fp64Tensor v = random_fp64(s.batch, s.seq_kv + 20, s.kv_heads, 16, seed++);
    const Fp64Tensor d_o = random_fp64(s.batch, s.seq_q, s.heads, 16, seed++);
    const fa::BackwardFp64 r = fa::reference_backward_fp64(q, k, v, d_o, 0.25, s.causal);
    for (size_t i = 0; i < r.d_from_o.size(); ++i) {
      INFO("row " << i << ": " << r.d_from_o[i] << " vs " << r.d_from_p[i]);
      CHECK(std::fabs(r.d_from_o[i] - r.d_from_p[i]) <= 1e-12 * (1.0 + std::fabs(r.d_from_o[i])));
    }
  }
}

TEST_CASE("backward reference: its O and LSE are the forward reference's", "[backward][reference]") {
  for (bool causal : {false, true}) {
    HostTensor q = fa_test::make_host_tensor(2, 7, 3, 16, DType::kFloat16);
    HostTensor k = fa_test::make_host_tensor(2, 9, 3, 16, DType::kFloat16);
    HostTensor v = fa_test::make_host_tensor(2, 9, 3, 16, DType::kFloat16);
    HostTensor d_o = fa_test::make_host_tensor(2, 7, 3, 16, DType::kFloat16);
    fa_test::fill_normal(q, 1);
    fa_test::fill_normal(k, 2);
    fa_test::fill_normal(v, 3);
    fa_test::fill_normal(d_o, 4);
    const double scale = 0.25;
    const fa::BackwardFp64 r = fa::reference_backward_fp64(Fp64Tensor::from(q), Fp64Tensor::from(k),
                                                           Fp64Tensor::from(v), Fp64Tensor::from(d_o), scale, causal);
    std::vector<double> row(16);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t s = 0; s < 7; ++s) {
          const fa::RowLogSumExp lse = fa::reference_row_fp64(q, k, v, b, h, s, scale, row.data(), causal);
          CHECK(r.lse[static_cast<size_t>((b * 3 + h) * 7 + s)] == Approx(lse.lse).epsilon(1e-12));
          for (int64_t d = 0; d < 16; ++d) CHECK(std::fabs(r.o.at(b, s, h, d) - row[d]) <= 1e-12);
        }
  }
}

namespace {

// A problem in 16 bits with its fp64 reference and low-precision baseline.
struct LowpProblem {
  HostTensor q, k, v, o, d_o;
  fa::BackwardFp64 ref;
  fa::BackwardLowp baseline;

  LowpProblem(DType dtype, int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_kv,
              int64_t dim, bool causal, uint64_t seed) {
    q = fa_test::make_host_tensor(batch, seq_q, heads, dim, dtype);
    k = fa_test::make_host_tensor(batch, seq_kv, kv_heads, dim, dtype);
    v = fa_test::make_host_tensor(batch, seq_kv, kv_heads, dim, dtype);
    d_o = fa_test::make_host_tensor(batch, seq_q, heads, dim, dtype);
    fa_test::fill_normal(q, seed);
    fa_test::fill_normal(k, seed + 1);
    fa_test::fill_normal(v, seed + 2);
    fa_test::fill_normal(d_o, seed + 3);
    const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
    ref = fa::reference_backward_fp64(Fp64Tensor::from(q), Fp64Tensor::from(k), Fp64Tensor::from(v),
                                      Fp64Tensor::from(d_o), scale, causal);
    // O in 16 bits, as the forward would hand it to the backward.
    o = fa_test::make_host_tensor(batch, seq_q, heads, dim, dtype);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t s = 0; s < seq_q; ++s)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < dim; ++d) o.set(b, s, h, d, static_cast<float>(ref.o.at(b, s, h, d)));
    baseline = fa::baseline_backward_lowp(q, k, v, o, d_o, static_cast<float>(scale), causal);
  }
};

}  // namespace

TEST_CASE("gradient check: the low-precision baseline passes and is close to fp64; wrong outputs fail",
          "[backward][checker]") {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (bool causal : {false, true}) {
      LowpProblem p(dtype, 2, 3, 3, 24, 40, 16, causal, 7);
      const double u = dtype == DType::kFloat16 ? 0x1p-11 : 0x1p-8;
      INFO(fa::dtype_name(dtype) << (causal ? ", causal" : ""));
      const fa::Fp64Tensor* refs[3] = {&p.ref.dq, &p.ref.dk, &p.ref.dv};
      const HostTensor* outs[3] = {&p.baseline.dq, &p.baseline.dk, &p.baseline.dv};
      const char* names[3] = {"dq", "dk", "dv"};
      for (int t = 0; t < 3; ++t) {
        const fa::CheckResult self = fa::check_gradient(names[t], *refs[t], *outs[t], *outs[t]);
        INFO(names[t] << ": " << self.summary());
        CHECK(self.passed);
        // The baseline's error is a few units of the dtype's rounding, relative to the tensor's size.
        double scale = 0.0;
        for (double x : refs[t]->values) scale = std::max(scale, std::fabs(x));
        CHECK(self.baseline_max_abs_err <= 64 * u * scale);
        CHECK(self.baseline_max_abs_err > 0.0);

        // One element off by 3x its head's tolerance fails.
        HostTensor wrong = *outs[t];
        wrong.set(1, 5, 2, 3, static_cast<float>(refs[t]->at(1, 5, 2, 3) + 3.0 * self.tolerance));
        CHECK_FALSE(fa::check_gradient(names[t], *refs[t], *outs[t], wrong).passed);
        // An element never written (the poison) fails, and so does NaN.
        HostTensor unwritten = *outs[t];
        unwritten.raw[static_cast<size_t>(unwritten.layout.offset(0, 0, 0, 0))] = 0xFFFF;
        CHECK_FALSE(fa::check_gradient(names[t], *refs[t], *outs[t], unwritten).passed);
        HostTensor nan = *outs[t];
        nan.set(0, 1, 1, 1, NAN);
        CHECK_FALSE(fa::check_gradient(names[t], *refs[t], *outs[t], nan).passed);
        // Heads swapped (a stride bug) fails.
        HostTensor swapped = *outs[t];
        for (int64_t s = 0; s < swapped.layout.seq; ++s)
          for (int64_t d = 0; d < swapped.layout.head_dim; ++d) {
            swapped.set(0, s, 0, d, outs[t]->at(0, s, 1, d));
            swapped.set(0, s, 1, d, outs[t]->at(0, s, 0, d));
          }
        CHECK_FALSE(fa::check_gradient(names[t], *refs[t], *outs[t], swapped).passed);
      }
    }
  }
}

TEST_CASE("gradient check: with one key, dQ = dK = 0 exactly; fp32 rounding of dP - D passes, a real error fails",
          "[backward][checker]") {
  // seq_kv 1: P = 1, dS = dP - D = dO . v - dO . o with o = v, so dQ and dK are 0 in exact arithmetic
  // and in the baseline (which sums dP and D alike). A kernel that sums them in two orders leaves a
  // few fp32 roundings of |dP|: here 2^-23 * |dO| . |v| times scale |k| per element, which the
  // accumulation floor (check_gradient's `terms`) allows and the tolerance without it does not.
  for (const DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    LowpProblem p(dtype, 1, 2, 2, 3, 1, 64, false, 11);
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t d = 0; d < 64; ++d) CHECK(p.ref.dk.at(0, 0, h, d) == 0.0);
    HostTensor noisy = p.baseline.dq, wrong = p.baseline.dq;
    double largest_noise = 0.0;
    for (int64_t s = 0; s < 3; ++s)
      for (int64_t h = 0; h < 2; ++h) {
        double abs_dp = 0.0;
        for (int64_t d = 0; d < 64; ++d)
          abs_dp += std::fabs(static_cast<double>(p.d_o.at(0, s, h, d)) * p.v.at(0, 0, h, d));
        for (int64_t d = 0; d < 64; ++d) {
          const double noise = std::ldexp(abs_dp, -23) * 0.125 * std::fabs(static_cast<double>(p.k.at(0, 0, h, d)));
          noisy.set(0, s, h, d, static_cast<float>(d % 2 ? noise : -noise));
          largest_noise = std::max(largest_noise, std::fabs(static_cast<double>(noisy.at(0, s, h, d))));
          wrong.set(0, s, h, d, 1e-3f);
        }
      }
    INFO("dtype " << fa::dtype_name(dtype) << ", the largest rounding noise " << largest_noise);
    CHECK(largest_noise > 0.0);
    CHECK(fa::check_gradient("dq", p.ref.dq, p.baseline.dq, noisy, {}, &p.ref.dq_terms).passed);
    CHECK_FALSE(fa::check_gradient("dq", p.ref.dq, p.baseline.dq, noisy).passed);
    CHECK_FALSE(fa::check_gradient("dq", p.ref.dq, p.baseline.dq, wrong, {}, &p.ref.dq_terms).passed);
  }
}

TEST_CASE("gradient check: a backward without the D term fails dQ and dK", "[backward][checker]") {
  // dS = P * dP instead of P * (dP - D): the mutation issue 42 asks the tests to catch. With the
  // fp64 reference of a problem whose dO is replaced, dQ and dK move by P * D summed over the keys.
  LowpProblem p(DType::kFloat16, 1, 2, 2, 16, 32, 16, false, 3);
  // Build the mutated gradients in fp64: dQ_i - scale * (-D_i) * sum_j P_ij k_j, i.e. the reference
  // plus scale * D_i * (P K)_i, which is what dropping D adds.
  const Fp64Tensor q = Fp64Tensor::from(p.q), k = Fp64Tensor::from(p.k);
  Fp64Tensor mutated_dq = p.ref.dq;
  const double scale = 1.0 / 4.0;
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 16; ++i) {
      std::vector<double> pk(16, 0.0), s(32);
      double m = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < 32; ++j) {
        double dot = 0.0;
        for (int64_t d = 0; d < 16; ++d) dot += q.at(0, i, h, d) * k.at(0, j, h, d);
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      for (int64_t j = 0; j < 32; ++j) sum += (s[j] = std::exp(s[j] - m));
      for (int64_t j = 0; j < 32; ++j)
        for (int64_t d = 0; d < 16; ++d) pk[d] += s[j] / sum * k.at(0, j, h, d);
      const double d_row = p.ref.d_from_o[static_cast<size_t>(h * 16 + i)];
      for (int64_t d = 0; d < 16; ++d) mutated_dq.at(0, i, h, d) += scale * d_row * pk[d];
    }
  HostTensor out = p.baseline.dq;
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t d = 0; d < 16; ++d) out.set(0, i, h, d, static_cast<float>(mutated_dq.at(0, i, h, d)));
  CHECK_FALSE(fa::check_gradient("dq", p.ref.dq, p.baseline.dq, out).passed);
}

namespace {

// A backward call that `stage`'s validation accepts, at fake aligned addresses never dereferenced.
fa::BackwardParams valid_backward_params(const fa::StageInfo& stage) {
  const fa::BackwardInfo& bwd = *stage.backward;
  fa::BackwardParams p;
  p.batch = 2;
  p.heads = 3;
  p.kv_heads = 3;
  p.seq_q = 2 * bwd.block_q;
  p.seq_kv = 3 * bwd.block_kv;
  p.head_dim = bwd.head_dims.front();
  p.softmax_scale = fa::default_softmax_scale(p.head_dim);
  fa::TensorView* tensors[8] = {&p.q, &p.k, &p.v, &p.o, &p.d_o, &p.dq, &p.dk, &p.dv};
  const int64_t seqs[8] = {p.seq_q, p.seq_kv, p.seq_kv, p.seq_q, p.seq_q, p.seq_q, p.seq_kv, p.seq_kv};
  for (int i = 0; i < 8; ++i) {
    tensors[i]->data = reinterpret_cast<void*>(uintptr_t{0x10000000} + uintptr_t(i + 1) * 0x1000000u);
    tensors[i]->dtype = bwd.dtypes.front();
    tensors[i]->head_stride = p.head_dim;
    tensors[i]->seq_stride = p.heads * p.head_dim;
    tensors[i]->batch_stride = seqs[i] * p.heads * p.head_dim;
  }
  p.lse.data = reinterpret_cast<const float*>(uintptr_t{0x20000000});
  p.lse.head_stride = p.seq_q;
  p.lse.batch_stride = p.heads * p.seq_q;
  return p;
}

std::vector<const fa::StageInfo*> backward_stages() {
  std::vector<const fa::StageInfo*> out;
  for (const fa::StageInfo* stage : fa::registered_stages())
    if (stage->backward != nullptr) out.push_back(stage);
  return out;
}

}  // namespace

TEST_CASE("backward launchers: the stages of the backward track have one, and it rejects bad calls",
          "[backward][validation]") {
  int backward_track = 0;
  for (const fa::StageInfo* stage : fa::registered_stages()) {
    const bool in_track = std::string(stage->name).rfind("backward_", 0) == 0;
    INFO(stage->name);
    CHECK((stage->backward != nullptr) == in_track);
    backward_track += in_track ? 1 : 0;
  }
  CHECK(backward_track >= 1);
  for (const fa::StageInfo* stage : backward_stages()) {
    INFO(stage->name);
    REQUIRE(stage->backward->launch != nullptr);
    const fa::BackwardInfo& bwd = *stage->backward;
    CHECK(fa::validate_backward_params(valid_backward_params(*stage), *stage).ok());
    // Each bad call is rejected by the launcher itself, with a message naming what is wrong, and
    // nothing launched (these addresses are not device memory: a launch would fail differently).
    const auto rejects = [&](const char* what, const fa::BackwardParams& p, const std::string& needle) {
      const fa::Status s = bwd.launch(p, nullptr);
      INFO(what << ": " << s.message);
      CHECK_FALSE(s.ok());
      CHECK(s.message.find(needle) != std::string::npos);
      CHECK_FALSE(fa::validate_backward_params(p, *stage).ok());
    };
    fa::BackwardParams p = valid_backward_params(*stage);
    p.lse.data = nullptr;
    rejects("no lse", p, "lse");
    p = valid_backward_params(*stage);
    p.dq.data = nullptr;
    rejects("no dq", p, "dq is a null pointer");
    p = valid_backward_params(*stage);
    p.dv.seq_stride += 4;
    rejects("misaligned dv stride", p, "dv strides");
    p = valid_backward_params(*stage);
    p.d_o.dtype = p.q.dtype == DType::kFloat16 ? DType::kBFloat16 : DType::kFloat16;
    rejects("mixed dtypes", p, "d_o is");
    p = valid_backward_params(*stage);
    p.kv_heads = 2;
    rejects("kv_heads not dividing heads", p, "kv_heads");
    p = valid_backward_params(*stage);
    p.head_dim = 96;
    rejects("head_dim 96", p, "head_dim 96");
    p = valid_backward_params(*stage);
    p.softmax_scale = -1.0f;
    rejects("negative scale", p, "softmax_scale");
    p = valid_backward_params(*stage);
    p.seq_q = 0;
    rejects("empty", p, "sizes must be positive");
    if ((bwd.features & fa::kFeatureAnyLength) == 0) {
      p = valid_backward_params(*stage);
      p.seq_kv += 1;
      rejects("seq_kv not a block multiple", p, "seq_kv");
      p = valid_backward_params(*stage);
      p.seq_q += 8;
      rejects("seq_q not a block multiple", p, "seq_q");
    }
    if ((bwd.features & fa::kFeatureCausal) == 0) {
      p = valid_backward_params(*stage);
      p.causal = true;
      rejects("causal", p, "causal");
    }
    if ((bwd.features & fa::kFeatureGqa) == 0) {
      p = valid_backward_params(*stage);
      p.kv_heads = 1;
      rejects("grouped-query", p, "gqa");
    }
  }
  // A stage without a backward is refused by the validation, whatever the call.
  for (const fa::StageInfo* stage : fa::registered_stages()) {
    if (stage->backward != nullptr || backward_stages().empty()) continue;
    const fa::Status s = fa::validate_backward_params(valid_backward_params(*backward_stages().front()), *stage);
    CHECK_FALSE(s.ok());
    CHECK(s.message.find("no backward") != std::string::npos);
    break;
  }
}

TEST_CASE("backward_01_base's dS fragment: ldmatrix.trans with the B^T addressing on a [key][query] tile "
          "gives dQ's A fragment of dS [query][key]",
          "[backward][fragments]") {
  // ldmatrix.x4.trans as the PTX ISA defines it (fragment_layout.h): lane l gives the address of row
  // l % 8 of matrix l / 8; register i of lane l receives matrix i's elements at rows 2 (l % 4) and
  // 2 (l % 4) + 1, column l / 4. The tile holds M[key][query] = 100 key + query.
  const auto stored = [](int key, int query) { return 100 * key + query; };
  for (int lane = 0; lane < 32; ++lane) {
    for (int reg = 0; reg < 4; ++reg) {
      // The lane that gives row r of matrix `reg` is 8 reg + r; its address is (row, col) below.
      const int supplier = 8 * reg;
      const int matrix_row0 = fa::ldmatrix_bt_row(supplier), matrix_col0 = fa::ldmatrix_bt_col(supplier);
      for (int r = 0; r < 8; ++r) {
        REQUIRE(fa::ldmatrix_bt_row(supplier + r) == matrix_row0 + r);  // 8 consecutive rows
        REQUIRE(fa::ldmatrix_bt_col(supplier + r) == matrix_col0);
      }
      for (int half = 0; half < 2; ++half) {
        const int got = stored(matrix_row0 + 2 * (lane % 4) + half, matrix_col0 + lane / 4);
        // The A fragment of A[query][key] = M[key][query]: element e = 2 reg + half.
        const int e = 2 * reg + half;
        const int want = stored(fa::mma_a_col(lane, e), fa::mma_a_row(lane, e));
        INFO("lane " << lane << ", register " << reg << ", half " << half);
        CHECK(got == want);
      }
    }
  }
}
