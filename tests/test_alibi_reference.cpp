// ALiBi without a GPU: the bias FlashAttention-2 defines (-slope * |i + seq_kv - seq_q - j|, aligned
// to the bottom-right like the causal mask), the fp64 reference and the plain attention with it on
// answers computed by hand, the per-(batch, head) slopes the checker passes down, the harness's test
// slopes, and the launcher contract for AttentionParams::alibi (only stages that declare "alibi";
// aligned pointer; a batch stride of 0 or at least heads; lengths at most 2^23).
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/checker.h"
#include "common/fragment_layout.h"
#include "common/harness.h"
#include "common/params.h"
#include "common/reference.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "valid_params.h"
#include "host_tensors.h"

using fa::DType;
using fa::HostTensor;
using fa_test::fill_normal;
using fa_test::make_host_tensor;

namespace {

constexpr int64_t kDim = 8;

struct Inputs {
  HostTensor q, k, v;
};

// q = 0, so every score is the bias alone; random v.
Inputs zero_q(int64_t heads, int64_t seq_q, int64_t seq_kv) {
  Inputs in{make_host_tensor(2, seq_q, heads, kDim, DType::kFloat16),
            make_host_tensor(2, seq_kv, heads, kDim, DType::kFloat16),
            make_host_tensor(2, seq_kv, heads, kDim, DType::kFloat16)};
  fill_normal(in.q, 1);
  fill_normal(in.k, 2);
  fill_normal(in.v, 3);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < seq_q; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < kDim; ++d) in.q.set(b, s, h, d, 0.0f);
  return in;
}

}  // namespace

TEST_CASE("alibi: the bias is -slope * |i + seq_kv - seq_q - j|, aligned to the bottom-right",
          "[reference][alibi]") {
  CHECK(fa::alibi_bias(0.5, 2, 2, 4, 4) == 0.0);
  CHECK(fa::alibi_bias(0.5, 2, 0, 4, 4) == -1.0);
  CHECK(fa::alibi_bias(0.5, 2, 3, 4, 4) == -0.5);  // a key after the query counts its distance too
  // 2 queries, 5 keys: query 0 sits at key 3, query 1 at key 4 (the last).
  CHECK(fa::alibi_bias(1.0, 0, 3, 2, 5) == 0.0);
  CHECK(fa::alibi_bias(1.0, 0, 4, 2, 5) == -1.0);
  CHECK(fa::alibi_bias(1.0, 1, 4, 2, 5) == 0.0);
  CHECK(fa::alibi_bias(1.0, 1, 0, 2, 5) == -4.0);
  // 5 queries, 2 keys: query 3 sits at key 0; query 0 is 3 before key 0.
  CHECK(fa::alibi_bias(1.0, 3, 0, 5, 2) == 0.0);
  CHECK(fa::alibi_bias(1.0, 0, 0, 5, 2) == -3.0);
  CHECK(fa::alibi_bias(0.0, 0, 1, 5, 2) == 0.0);
  CHECK(fa::alibi_bias(-0.25, 0, 1, 5, 2) == 1.0);  // a negative slope favours far keys
}

TEST_CASE("alibi reference: with every q . k = 0 the weights are exp(-slope |distance|)",
          "[reference][alibi]") {
  for (const auto& [seq_q, seq_kv] : {std::pair<int64_t, int64_t>{6, 6}, {3, 7}, {7, 3}}) {
    for (bool causal : {false, true}) {
      const Inputs in = zero_q(1, seq_q, seq_kv);
      const double slope = 0.75;
      for (int64_t s = 0; s < seq_q; ++s) {
        const int64_t keys = fa::visible_keys(s, seq_q, seq_kv, causal);
        std::vector<double> got(kDim), expected(kDim, 0.0);
        const fa::RowLogSumExp lse =
            fa::reference_row_fp64(in.q, in.k, in.v, 1, 0, s, 0.5, got.data(), causal, slope);
        double sum = 0.0;
        for (int64_t j = 0; j < keys; ++j)
          sum += std::exp(-slope * std::fabs(double(s + seq_kv - seq_q - j)));
        for (int64_t j = 0; j < keys; ++j) {
          const double w = std::exp(-slope * std::fabs(double(s + seq_kv - seq_q - j))) / sum;
          for (int64_t d = 0; d < kDim; ++d) expected[d] += w * in.v.at(1, j, 0, d);
        }
        INFO("seq_q " << seq_q << ", seq_kv " << seq_kv << (causal ? ", causal" : "") << ", row " << s);
        for (int64_t d = 0; d < kDim; ++d) CHECK(std::fabs(got[d] - expected[d]) <= 1e-12);
        if (keys == 0) {
          CHECK(lse.lse == -std::numeric_limits<double>::infinity());
        } else {
          CHECK(std::fabs(lse.lse - std::log(sum)) <= 1e-12);
          // The largest score is the nearest visible key's bias: 0 on the diagonal, else its distance.
          const int64_t diagonal = s + seq_kv - seq_q;
          const double nearest = diagonal < 0       ? double(-diagonal)
                                 : diagonal >= keys ? double(diagonal - keys + 1)
                                                    : 0.0;
          CHECK(lse.max_score == -slope * nearest);
        }
        // The plain fp32 attention agrees to fp16 precision.
        std::vector<float> lowp(kDim);
        fa::baseline_row_lowp(in.q, in.k, in.v, 1, 0, s, 0.5f, lowp.data(), causal,
                              static_cast<float>(slope));
        for (int64_t d = 0; d < kDim; ++d)
          CHECK(std::fabs(lowp[d] - expected[d]) <= 2e-3 * (1.0 + std::fabs(expected[d])));
      }
    }
  }
}

TEST_CASE("alibi reference: slope 0 is no ALiBi; compute_reference_rows gives each (batch, head) its slope",
          "[reference][alibi]") {
  const int64_t heads = 3;
  Inputs in = zero_q(heads, 5, 9);
  fill_normal(in.q, 7);  // real scores too
  std::vector<double> plain(kDim), zero_slope(kDim);
  fa::reference_row_fp64(in.q, in.k, in.v, 0, 1, 2, 0.5, plain.data(), true);
  fa::reference_row_fp64(in.q, in.k, in.v, 0, 1, 2, 0.5, zero_slope.data(), true, 0.0);
  for (int64_t d = 0; d < kDim; ++d) CHECK(plain[d] == zero_slope[d]);

  std::vector<float> slopes(2 * heads);
  for (int64_t i = 0; i < 2 * heads; ++i) slopes[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i + 1);
  const fa::ReferenceRows rows = fa::compute_reference_rows(in.q, in.k, in.v, 0.5f, {}, false, slopes);
  REQUIRE(rows.rows.size() == static_cast<size_t>(2 * heads * 5));
  for (size_t i = 0; i < rows.rows.size(); ++i) {
    const auto& r = rows.rows[i];
    std::vector<double> expected(kDim);
    const double slope = slopes[static_cast<size_t>(r.b * heads + r.h)];
    const fa::RowLogSumExp lse =
        fa::reference_row_fp64(in.q, in.k, in.v, r.b, r.h, r.s, 0.5, expected.data(), false, slope);
    INFO("b " << r.b << ", h " << r.h << ", s " << r.s);
    for (int64_t d = 0; d < kDim; ++d) CHECK(rows.ref[i * kDim + d] == expected[d]);
    CHECK(rows.lse[i] == lse.lse);
  }
  CHECK_THROWS_AS(
      fa::compute_reference_rows(in.q, in.k, in.v, 0.5f, {}, false, std::vector<float>(heads, 0.5f)),
      std::invalid_argument);
}

TEST_CASE("alibi: the harness's slopes, 2^(-8 (h + 1) / heads), times b + 1 per (batch, head)", "[alibi]") {
  for (int64_t h = 0; h < 8; ++h) {
    CHECK(fa::alibi_slope_value(0, h, 8, fa::AlibiKind::kPerHead) == std::exp2(-static_cast<float>(h + 1)));
    CHECK(fa::alibi_slope_value(3, h, 8, fa::AlibiKind::kPerHead) == std::exp2(-static_cast<float>(h + 1)));
    CHECK(fa::alibi_slope_value(2, h, 8, fa::AlibiKind::kPerBatchHead) ==
          3.0f * std::exp2(-static_cast<float>(h + 1)));
  }
  CHECK(fa::alibi_slope_value(1, 1, 8, fa::AlibiKind::kNone) == 0.0f);
}

TEST_CASE("alibi: only a stage that declares it accepts slopes; alignment, batch stride and length limits",
          "[validation][alibi]") {
  int declaring = 0;
  for (const fa::StageInfo* stage : fa::registered_stages()) {
    const int64_t seq = 2 * stage->block_q * stage->block_kv;
    fa::AttentionParams p = fa_test::valid_params(*stage, 2, 4, seq, seq);
    INFO("stage " << stage->name);
    REQUIRE(fa::validate_params(p, *stage).ok());
    p.alibi.data = reinterpret_cast<const float*>(uintptr_t{0x30000000});
    const fa::Status shared = fa::validate_params(p, *stage);
    INFO("slopes [heads], batch stride 0: \"" << shared.message << "\"");
    if ((stage->features & fa::kFeatureAlibi) == 0) {
      REQUIRE_FALSE(shared.ok());
      CHECK(shared.message.find(stage->name) != std::string::npos);
      CHECK(shared.message.find("\"alibi\"") != std::string::npos);
      continue;
    }
    ++declaring;
    CHECK(shared.ok());
    for (int64_t stride : {4, 5, 100}) {
      fa::AttentionParams per_batch = p;
      per_batch.alibi.batch_stride = stride;
      INFO("batch stride " << stride);
      CHECK(fa::validate_params(per_batch, *stage).ok());
    }
    for (int64_t stride : {-4, 1, 3}) {
      fa::AttentionParams bad = p;
      bad.alibi.batch_stride = stride;
      const fa::Status status = fa::validate_params(bad, *stage);
      INFO("batch stride " << stride << ": \"" << status.message << "\"");
      REQUIRE_FALSE(status.ok());
      CHECK(status.message.find("alibi slopes batch stride") != std::string::npos);
      bad.batch = 1;  // one batch: its stride is never used
      bad.q.batch_stride = bad.k.batch_stride = bad.v.batch_stride = bad.o.batch_stride = p.q.batch_stride;
      CHECK(fa::validate_params(bad, *stage).ok() == (stride >= 0));
    }
    fa::AttentionParams misaligned = p;
    misaligned.alibi.data = reinterpret_cast<const float*>(uintptr_t{0x30000002});
    const fa::Status status = fa::validate_params(misaligned, *stage);
    REQUIRE_FALSE(status.ok());
    CHECK(status.message.find("alibi slopes pointer is not 4-byte aligned") != std::string::npos);
    if (stage->features & fa::kFeatureAnyLength) {
      for (int64_t* len : {&p.seq_q, &p.seq_kv}) {
        fa::AttentionParams longer = p;
        int64_t* field = len == &p.seq_q ? &longer.seq_q : &longer.seq_kv;
        *field = (int64_t{1} << 23);
        CHECK(fa::validate_params(longer, *stage).ok());
        *field = (int64_t{1} << 23) + 1;
        const fa::Status too_long = fa::validate_params(longer, *stage);
        REQUIRE_FALSE(too_long.ok());
        CHECK(too_long.message.find("2^23") != std::string::npos);
      }
    }
  }
  CHECK(declaring >= 1);
}

TEST_CASE("alibi: the kernel's distance of each accumulator entry is i + seq_kv - seq_q - j", "[alibi]") {
  // ampere_15_alibi computes, per thread and K/V block, the distance of its entry (m 0, n 0, e 0)
  // and adds a compile-time constant per entry (add_alibi_bias). Here the same arithmetic, for
  // every lane, warp, m-tile, key n-tile and entry of a few blocks, against the row and key the
  // fragment layout says the entry holds.
  constexpr int kBlockQ = 128, kBlockKV = 64, kRowsPerWarp = 32;
  for (const auto& [seq_q, seq_kv] : {std::pair<int64_t, int64_t>{300, 333}, {333, 200}, {1, 1000}}) {
    const int64_t diagonal_offset = seq_kv - seq_q;
    for (int64_t q_block : {0, 2}) {
      for (int warp = 0; warp < 4; ++warp) {
        const int warp_row0 = warp * kRowsPerWarp;
        for (int lane = 0; lane < 32; ++lane) {
          const int distance0 = static_cast<int>(q_block * kBlockQ + diagonal_offset) + warp_row0 +
                                fa::mma_c_row(lane, 0) - fa::mma_c_col(lane, 0);
          for (int kv_block : {0, 1, 4}) {
            const float first_distance = static_cast<float>(distance0 - kv_block * kBlockKV);
            for (int m = 0; m < 2; ++m)
              for (int n = 0; n < 8; ++n)
                for (int e = 0; e < 4; ++e) {
                  const int offset = m * 16 + (fa::mma_c_row(0, e) - fa::mma_c_row(0, 0)) - n * 8 -
                                     (fa::mma_c_col(0, e) - fa::mma_c_col(0, 0));
                  const float distance = first_distance + static_cast<float>(offset);
                  const int64_t row = q_block * kBlockQ + warp_row0 + m * 16 + fa::mma_c_row(lane, e);
                  const int64_t key = int64_t{kv_block} * kBlockKV + n * 8 + fa::mma_c_col(lane, e);
                  if (distance != static_cast<float>(row + diagonal_offset - key)) {
                    FAIL("lane " << lane << ", warp " << warp << ", q_block " << q_block << ", kv_block "
                                 << kv_block << ", m " << m << ", n " << n << ", e " << e << ": " << distance
                                 << " != " << row + diagonal_offset - key);
                  }
                }
          }
        }
      }
    }
  }
  SUCCEED("every entry's distance matches");
}
