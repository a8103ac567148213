// A host model of the kernels' online softmax against the fp64 reference. The form of
// ampere_01_base to ampere_06_double_buffer runs in double precision; the exp2 form of
// ampere_07_fast_softmax and later runs in fp32 through the functions the kernels call
// (fa::max_for_exp, the -inf guard, and fa::exp2_approx, common/softmax_math.h).
//
// The kernels never see a whole row of scores: they walk the keys in blocks of Bc, keep a running
// max m and running sum l, and rescale what they accumulated whenever m grows. This test runs that
// algorithm exactly as the kernels order it (both the scale-then-exp form and the exp2 form) and
// shows it equals plain softmax for several block sizes, including the cases where the row maximum
// sits in the first block (every later block is tiny against it) and in the last block (everything
// accumulated so far must be rescaled at the very end).
#include <cmath>
#include <limits>
#include <vector>

#include "common/reference.h"
#include "common/softmax_math.h"
#include "fa_catch.h"
#include "host_tensors.h"

using fa::DType;
using fa::HostTensor;

namespace {

constexpr int64_t kSeqKv = 256, kDim = 64, kSeqQ = 4;

enum class SoftmaxForm {
  kScaleThenExp,  // ampere 01-06: s *= scale; p = exp(s - m); l, O rescaled by exp(m_old - m_new)
  kFusedExp2,     // ampere 07 on: m on raw scores; p = exp2(s * scale*log2e - m * scale*log2e);
                  // per-lane partial row sums, added once at the end
  kNoRescale,     // a deliberately broken variant: forgets to rescale O and l when m grows
  kLazyRescale,   // hopper 15: kFusedExp2, but m (and with it O and l) moves only when a block's max
                  // exceeds it by more than 2^kLazyRescaleLog2 in the exponent (fa::max_grows_too_far)
  kSpeculativeMax,  // hopper 16: after the first block, p against the running max before the block's
                    // max; kept if every lane's partial block sum fits (fa::weights_fit), else the
                    // block is done again as kLazyRescale does it
};

// What the lazy form did on a row: rescales taken and skipped, and its largest weight; for the
// speculative form also the blocks whose speculative weights were kept and those done again.
struct LazyStats {
  int taken = 0, skipped = 0;
  int kept = 0, redone = 0;
  double max_weight = 0.0;
};

// One query row, keys in blocks of `block_kv`, as the kernels do it.
std::vector<double> online_softmax_row(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                       int64_t s, double scale, int64_t block_kv, SoftmaxForm form,
                                       LazyStats* lazy = nullptr) {
  const double log2e = 1.0 / std::log(2.0);
  const double scale_log2 = scale * log2e;
  double row_max = -std::numeric_limits<double>::infinity();
  // The 4 lanes of a quad each hold 2 of every 8 key columns, and sum only those
  // (ampere_07_fast_softmax keeps the partial sums apart until the epilogue).
  double lane_sum[4] = {0.0, 0.0, 0.0, 0.0};
  std::vector<double> o_acc(kDim, 0.0);

  for (int64_t kv0 = 0; kv0 < kSeqKv; kv0 += block_kv) {
    std::vector<double> scores(block_kv);
    for (int64_t j = 0; j < block_kv; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < kDim; ++d)
        dot += static_cast<double>(q.at(0, s, 0, d)) * k.at(0, kv0 + j, 0, d);
      scores[j] = form == SoftmaxForm::kScaleThenExp || form == SoftmaxForm::kNoRescale ? dot * scale : dot;
    }
    double block_max = -std::numeric_limits<double>::infinity();
    for (double x : scores) block_max = std::max(block_max, x);
    double new_max = std::max(row_max, block_max);
    double correction;
    std::vector<double> p(block_kv);
    bool speculated = false;  // kSpeculativeMax: this block's weights were kept without its max
    if (form == SoftmaxForm::kSpeculativeMax && kv0 > 0) {
      // The kernel's fp32 arithmetic against the running max; each lane sums its own keys in fp32.
      const float scale_log2_f = static_cast<float>(scale_log2);
      const float max_scaled = fa::max_for_exp(static_cast<float>(row_max)) * scale_log2_f;
      float lane_block_sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int64_t j = 0; j < block_kv; ++j) {
        p[j] = fa::exp2_approx(std::fma(static_cast<float>(scores[j]), scale_log2_f, -max_scaled));
        lane_block_sum[(j % 8) / 2] += static_cast<float>(p[j]);
      }
      speculated = true;
      for (float x : lane_block_sum) speculated = speculated && fa::weights_fit(x);
      if (lazy) ++(speculated ? lazy->kept : lazy->redone);
      if (speculated) {
        new_max = row_max;
        correction = 1.0;
        if (lazy)
          for (double x : p) lazy->max_weight = std::max(lazy->max_weight, x);
      }
    }
    if (speculated) {
      // kept: nothing rescaled
    } else if (form == SoftmaxForm::kLazyRescale || form == SoftmaxForm::kSpeculativeMax) {
      // The kernel's fp32 arithmetic, with the old max kept while the block's max stays within
      // 2^kLazyRescaleLog2 of it (correction 1: nothing rescaled).
      const float scale_log2_f = static_cast<float>(scale_log2);
      const bool grows = fa::max_grows_too_far(static_cast<float>(row_max), static_cast<float>(block_max), scale_log2_f);
      if (!grows) new_max = row_max;
      const float max_scaled = fa::max_for_exp(static_cast<float>(new_max)) * scale_log2_f;
      correction = grows ? fa::exp2_approx(static_cast<float>(row_max) * scale_log2_f - max_scaled) : 1.0;
      for (int64_t j = 0; j < block_kv; ++j) {
        p[j] = fa::exp2_approx(std::fma(static_cast<float>(scores[j]), scale_log2_f, -max_scaled));
        if (lazy) lazy->max_weight = std::max(lazy->max_weight, p[j]);
      }
      if (lazy && kv0 > 0) ++(grows ? lazy->taken : lazy->skipped);
    } else if (form == SoftmaxForm::kFusedExp2) {
      // The kernels' fp32 arithmetic: max_scaled = max_for_exp(new_max) * scale_log2, one FFMA and
      // one exp2_approx per score, the correction from the old max.
      const float scale_log2_f = static_cast<float>(scale_log2);
      const float max_scaled = fa::max_for_exp(static_cast<float>(new_max)) * scale_log2_f;
      correction = fa::exp2_approx(static_cast<float>(row_max) * scale_log2_f - max_scaled);
      for (int64_t j = 0; j < block_kv; ++j)
        p[j] = fa::exp2_approx(std::fma(static_cast<float>(scores[j]), scale_log2_f, -max_scaled));
    } else if (form == SoftmaxForm::kScaleThenExp) {
      // fa::max_for_exp's rule, in fp64 (the fp32 function would round the max).
      const double max_for_exp = new_max == -std::numeric_limits<double>::infinity() ? 0.0 : new_max;
      correction = std::exp(row_max - max_for_exp);
      for (int64_t j = 0; j < block_kv; ++j) p[j] = std::exp(scores[j] - max_for_exp);
    } else {
      correction = 1.0;
      for (int64_t j = 0; j < block_kv; ++j) p[j] = std::exp(scores[j] - new_max);
    }
    row_max = new_max;
    for (double& x : lane_sum) x *= correction;
    for (double& x : o_acc) x *= correction;
    for (int64_t j = 0; j < block_kv; ++j) {
      lane_sum[(j % 8) / 2] += p[j];
      for (int64_t d = 0; d < kDim; ++d) o_acc[d] += p[j] * v.at(0, kv0 + j, 0, d);
    }
  }
  const double row_sum = lane_sum[0] + lane_sum[1] + lane_sum[2] + lane_sum[3];
  for (double& x : o_acc) x /= row_sum;
  return o_acc;
}

struct Inputs {
  HostTensor q, k, v;
};

// Random inputs; with `planted_key` >= 0, that key is made every query's maximum by far:
// q >= 0 and k[planted] = (c, ..., c), so its score c * |q|_1 beats any random key's.
Inputs make_inputs(uint64_t seed, float qk_std, int64_t planted_key) {
  Inputs in{fa_test::make_host_tensor(1, kSeqQ, 1, kDim, DType::kFloat16),
            fa_test::make_host_tensor(1, kSeqKv, 1, kDim, DType::kFloat16),
            fa_test::make_host_tensor(1, kSeqKv, 1, kDim, DType::kFloat16)};
  fa_test::fill_normal(in.q, seed, qk_std);
  fa_test::fill_normal(in.k, seed + 1, qk_std);
  fa_test::fill_normal(in.v, seed + 2);
  if (planted_key >= 0) {
    for (int64_t s = 0; s < kSeqQ; ++s)
      for (int64_t d = 0; d < kDim; ++d) in.q.set(0, s, 0, d, std::fabs(in.q.at(0, s, 0, d)));
    for (int64_t d = 0; d < kDim; ++d) in.k.set(0, planted_key, 0, d, 2.0f * qk_std);
  }
  return in;
}

double max_rel_diff(const std::vector<double>& got, const std::vector<double>& want) {
  double err = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    norm = std::max(norm, std::fabs(want[i]));
  }
  return err / norm;
}

// Index of the maximum score of query row s, to confirm where the test put it.
int64_t argmax_key(const Inputs& in, int64_t s) {
  int64_t best = 0;
  double best_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < kSeqKv; ++j) {
    double dot = 0.0;
    for (int64_t d = 0; d < kDim; ++d) dot += static_cast<double>(in.q.at(0, s, 0, d)) * in.k.at(0, j, 0, d);
    if (dot > best_score) best_score = dot, best = j;
  }
  return best;
}

// The lazy forms over random and planted-maximum rows and every block width: each row equals the
// fp64 softmax within 2e-6 and no weight it used exceeds 2^kLazyRescaleLog2 (the bound the kernel's
// 16-bit P relies on). Returns what the form did, summed over the rows.
LazyStats check_lazy_form(SoftmaxForm form) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  LazyStats total;
  for (float qk_std : {1.0f, 6.0f}) {
    for (int64_t planted : {int64_t{-1}, int64_t{0}, kSeqKv - 1}) {
      const Inputs in = make_inputs(11, qk_std, planted);
      for (int64_t block_kv : {8, 16, 32, 64, 128}) {
        for (int64_t s = 0; s < kSeqQ; ++s) {
          INFO("std " << qk_std << ", planted " << planted << ", Bc " << block_kv << ", row " << s);
          std::vector<double> reference(kDim);
          fa::reference_row_fp64(in.q, in.k, in.v, 0, 0, s, scale, reference.data());
          LazyStats stats;
          const std::vector<double> got = online_softmax_row(in.q, in.k, in.v, s, scale, block_kv, form, &stats);
          CHECK(max_rel_diff(got, reference) < 2e-6);
          CHECK(stats.max_weight <= 256.0);
          total.taken += stats.taken;
          total.skipped += stats.skipped;
          total.kept += stats.kept;
          total.redone += stats.redone;
        }
      }
    }
  }
  return total;
}

}  // namespace

TEST_CASE("online softmax over K/V blocks equals plain softmax", "[softmax]") {
  struct Case {
    const char* name;
    float qk_std;
    int64_t planted_key;  // -1: none
  };
  const Case cases[] = {
      {"random inputs", 1.0f, -1},
      {"large logits (q, k ~ N(0, 6^2))", 6.0f, -1},
      {"row max in the first block", 1.0f, 0},
      {"row max in the last block", 1.0f, kSeqKv - 1},
      {"row max in the last block, large logits", 4.0f, kSeqKv - 1},
  };
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  for (const Case& c : cases) {
    const Inputs in = make_inputs(7, c.qk_std, c.planted_key);
    if (c.planted_key >= 0) {
      for (int64_t s = 0; s < kSeqQ; ++s) REQUIRE(argmax_key(in, s) == c.planted_key);
    }
    for (int64_t block_kv : {8, 16, 32, 64, 128, 256}) {
      for (SoftmaxForm form : {SoftmaxForm::kScaleThenExp, SoftmaxForm::kFusedExp2}) {
        for (int64_t s = 0; s < kSeqQ; ++s) {
          INFO(c.name << ", Bc " << block_kv << ", form " << static_cast<int>(form) << ", row " << s);
          std::vector<double> reference(kDim);
          fa::reference_row_fp64(in.q, in.k, in.v, 0, 0, s, scale, reference.data());
          const std::vector<double> online = online_softmax_row(in.q, in.k, in.v, s, scale, block_kv, form);
          // fp32 with ex2.approx (2 ulp) against fp64: a few 1e-7 relative; the fp64 form is exact to rounding.
          CHECK(max_rel_diff(online, reference) < (form == SoftmaxForm::kFusedExp2 ? 2e-6 : 1e-12));
        }
      }
    }
  }
}

// hopper_15_lazy_rescale's lazy rescaling gives the same softmax: the weights, the sum and O are
// relative to one max, whichever it is, as long as no weight exceeds 2^kLazyRescaleLog2. Both paths
// must run for the test to mean something: large logits make the max jump by more than the
// threshold (taken), random ones let most blocks stay under it (skipped).
TEST_CASE("lazy rescaling (hopper_15_lazy_rescale) equals plain softmax, its weights at most 2^8", "[softmax]") {
  const LazyStats total = check_lazy_form(SoftmaxForm::kLazyRescale);
  INFO("rescales after the first block: " << total.taken << " taken, " << total.skipped << " skipped");
  CHECK(total.taken > 0);
  CHECK(total.skipped > 0);
  // The threshold itself: a jump of just under 2^8 keeps the max, just over moves it; -inf and NaN
  // differences (a first block, rows that saw only -inf) take the exact path.
  const float inf = std::numeric_limits<float>::infinity();
  CHECK_FALSE(fa::max_grows_too_far(1.0f, 1.0f + 7.99f, 1.0f));
  CHECK(fa::max_grows_too_far(1.0f, 1.0f + 8.01f, 1.0f));
  CHECK_FALSE(fa::max_grows_too_far(5.0f, -3.0f, 1.0f));
  CHECK(fa::max_grows_too_far(-inf, 0.5f, 0.18f));
  CHECK(fa::max_grows_too_far(-inf, -inf, 0.18f));
}

// hopper_16_speculative_max's speculative exponentials give the same softmax: after the first block
// the weights are computed against the running max before the block's max is known, and kept only
// if every lane's partial block sum fits (fa::weights_fit), which bounds every kept weight by
// 2^kLazyRescaleLog2; otherwise the block is done again as lazy rescaling does it. Both paths must
// run: a late planted key (or large logits) overflows the bound, random ones stay under it.
TEST_CASE("speculative exponentials (hopper_16_speculative_max) equal plain softmax, kept weights at most 2^8", "[softmax]") {
  const LazyStats total = check_lazy_form(SoftmaxForm::kSpeculativeMax);
  INFO("blocks after the first: " << total.kept << " kept, " << total.redone << " done again");
  CHECK(total.kept > 0);
  CHECK(total.redone > 0);
  // The check itself: a partial sum of exactly 2^8 fits, anything above does not, and neither does
  // an overflowed (inf) or NaN sum.
  CHECK(fa::weights_fit(0.0f));
  CHECK(fa::weights_fit(256.0f));
  CHECK_FALSE(fa::weights_fit(256.0001f));
  CHECK_FALSE(fa::weights_fit(std::numeric_limits<float>::infinity()));
  CHECK_FALSE(fa::weights_fit(std::numeric_limits<float>::quiet_NaN()));
}

TEST_CASE("without the rescale the model is wrong when the max arrives late (the test can fail)",
          "[softmax]") {
  const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
  const Inputs in = make_inputs(7, 1.0f, kSeqKv - 1);
  std::vector<double> reference(kDim);
  fa::reference_row_fp64(in.q, in.k, in.v, 0, 0, 0, scale, reference.data());
  // With one block there is nothing to rescale; with several the error is large.
  CHECK(max_rel_diff(online_softmax_row(in.q, in.k, in.v, 0, scale, kSeqKv, SoftmaxForm::kNoRescale),
                     reference) < 1e-12);
  CHECK(max_rel_diff(online_softmax_row(in.q, in.k, in.v, 0, scale, 32, SoftmaxForm::kNoRescale), reference) >
        1e-2);
}

// The -inf guard: keys whose scores are all -inf in the first K/V block (keys masked by infinite
// inputs) must get weight 0, and the row must come out as the softmax over the other keys. With
// the raw max subtracted instead (new_max = -inf), exp2(-inf - -inf) is NaN and poisons the row.
TEST_CASE("the kernels' -inf guard: a first block of -inf scores gives weight 0, not NaN", "[softmax]") {
  const float scale_log2 = 0.125f * 1.4426950408889634f;
  const float inf = std::numeric_limits<float>::infinity();
  // Block 0: every score -inf. Block 1: finite scores. One value column v[j] = j.
  const std::vector<float> block0(8, -inf), block1 = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.5f, 1.0f, 3.0f};
  auto run = [&](bool guard) {
    float row_max = -inf, row_sum = 0.0f, o = 0.0f;
    for (int b = 0; b < 2; ++b) {
      const std::vector<float>& scores = b == 0 ? block0 : block1;
      float block_max = -inf;
      for (float x : scores) block_max = std::max(block_max, x);
      const float new_max = std::max(row_max, block_max);
      const float max_scaled = (guard ? fa::max_for_exp(new_max) : new_max) * scale_log2;
      const float correction = fa::exp2_approx(row_max * scale_log2 - max_scaled);
      row_max = new_max;
      row_sum *= correction;
      o *= correction;
      for (size_t j = 0; j < scores.size(); ++j) {
        const float p = fa::exp2_approx(std::fma(scores[j], scale_log2, -max_scaled));
        row_sum += p;
        o += p * static_cast<float>(8 * b + j);
      }
    }
    return o / row_sum;
  };
  double num = 0.0, den = 0.0;
  for (size_t j = 0; j < block1.size(); ++j) {
    const double w = std::exp(0.125 * block1[j]);
    num += w * (8.0 + j);
    den += w;
  }
  CHECK(std::fabs(run(true) - num / den) < 1e-5 * (num / den));
  CHECK(std::isnan(run(false)));  // the test can fail: without the guard the row is NaN
}

TEST_CASE("exp2_approx on the host flushes subnormal results like ex2.approx.ftz", "[softmax]") {
  CHECK(fa::exp2_approx(-126.0f) == std::ldexp(1.0f, -126));  // the smallest normal survives
  CHECK(fa::exp2_approx(-127.0f) == 0.0f);                     // subnormal: flushed to zero
  CHECK(fa::exp2_approx(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(fa::exp2_approx(0.0f) == 1.0f);
  CHECK(std::fabs(fa::exp2_approx(3.3f) - std::exp2(3.3f)) <= 2e-7f * std::exp2(3.3f));
}
