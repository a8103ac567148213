// A host model of the kernels' online softmax, in double precision, against the fp64 reference.
//
// The kernels never see a whole row of scores: they walk the keys in blocks of Bc, keep a running
// max m and running sum l, and rescale what they accumulated whenever m grows. This test runs that
// algorithm exactly as the kernels order it (both the stage 1-6 form and the stage 7-8 exp2 form)
// and shows it equals plain softmax for several block sizes, including the cases where the row
// maximum sits in the first block (every later block is tiny against it) and in the last block
// (everything accumulated so far must be rescaled at the very end).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "common/reference.h"
#include "host_tensors.h"

using fa::DType;
using fa::HostTensor;

namespace {

constexpr int64_t kSeqKv = 256, kDim = 64, kSeqQ = 4;

enum class SoftmaxForm {
  kScaleThenExp,  // stages 1-6: s *= scale; p = exp(s - m); l, O rescaled by exp(m_old - m_new)
  kFusedExp2,     // stages 7-8: m on raw scores; p = exp2(s * scale*log2e - m * scale*log2e);
                  // per-lane partial row sums, added once at the end
  kNoRescale,     // a deliberately broken variant: forgets to rescale O and l when m grows
};

// One query row, keys in blocks of `block_kv`, as the kernels do it.
std::vector<double> online_softmax_row(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                       int64_t s, double scale, int64_t block_kv, SoftmaxForm form) {
  const double log2e = 1.0 / std::log(2.0);
  const double scale_log2 = scale * log2e;
  double row_max = -std::numeric_limits<double>::infinity();
  // The 4 lanes of a quad each hold 2 of every 8 key columns, and sum only those (stage 7 keeps
  // the partial sums apart until the epilogue).
  double lane_sum[4] = {0.0, 0.0, 0.0, 0.0};
  std::vector<double> o_acc(kDim, 0.0);

  for (int64_t kv0 = 0; kv0 < kSeqKv; kv0 += block_kv) {
    std::vector<double> scores(block_kv);
    for (int64_t j = 0; j < block_kv; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < kDim; ++d)
        dot += static_cast<double>(q.at(0, s, 0, d)) * k.at(0, kv0 + j, 0, d);
      scores[j] = form == SoftmaxForm::kFusedExp2 ? dot : dot * scale;
    }
    double block_max = -std::numeric_limits<double>::infinity();
    for (double x : scores) block_max = std::max(block_max, x);
    const double new_max = std::max(row_max, block_max);
    double correction;
    if (form == SoftmaxForm::kFusedExp2) {
      correction = std::exp2(row_max * scale_log2 - new_max * scale_log2);  // 0 on the first block
    } else if (form == SoftmaxForm::kScaleThenExp) {
      correction = std::exp(row_max - new_max);
    } else {
      correction = 1.0;
    }
    row_max = new_max;
    for (double& x : lane_sum) x *= correction;
    for (double& x : o_acc) x *= correction;
    for (int64_t j = 0; j < block_kv; ++j) {
      const double p = form == SoftmaxForm::kFusedExp2
                           ? std::exp2(scores[j] * scale_log2 - new_max * scale_log2)
                           : std::exp(scores[j] - new_max);
      lane_sum[(j % 8) / 2] += p;
      for (int64_t d = 0; d < kDim; ++d) o_acc[d] += p * v.at(0, kv0 + j, 0, d);
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
          CHECK(max_rel_diff(online, reference) < 1e-12);
        }
      }
    }
  }
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
