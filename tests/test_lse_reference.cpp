// The log-sum-exp output without a GPU: the fp64 reference's LSE on answers known by hand, the
// LSE check (checker.h states the rule: what passes, what fails, and that an unwritten, misplaced
// or wrong-signed infinity fails), and the launcher contract for AttentionParams::lse (alignment,
// strides that overlap, and only stages that declare "lse" accept it).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/checker.h"
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

Inputs random_inputs(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, float k_std = 1.0f) {
  Inputs in{make_host_tensor(batch, seq_q, heads, kDim, DType::kFloat16),
            make_host_tensor(batch, seq_kv, heads, kDim, DType::kFloat16),
            make_host_tensor(batch, seq_kv, heads, kDim, DType::kFloat16)};
  fill_normal(in.q, 1);
  fill_normal(in.k, 2, k_std);
  fill_normal(in.v, 3);
  return in;
}

// The reference's LSE as a packed HostLse, rounded to float: what a perfect kernel would write.
fa::HostLse lse_from(const fa::ReferenceRows& rows, int64_t batch, int64_t heads, int64_t seq) {
  fa::HostLse lse;
  lse.batch = batch;
  lse.heads = heads;
  lse.seq = seq;
  lse.head_stride = seq;
  lse.batch_stride = heads * seq;
  lse.values.assign(static_cast<size_t>(batch * heads * seq), std::numeric_limits<float>::quiet_NaN());
  for (size_t i = 0; i < rows.rows.size(); ++i) {
    const auto& r = rows.rows[i];
    lse.values[static_cast<size_t>(r.b * lse.batch_stride + r.h * lse.head_stride + r.s)] =
        static_cast<float>(rows.lse[i]);
  }
  return lse;
}

float poison() {
  const uint32_t bits = 0xFFFFFFFFu;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

}  // namespace

TEST_CASE("lse reference: log of the number of keys when every score is 0; the one key's score alone",
          "[reference][lse]") {
  Inputs in = random_inputs(1, 1, 6, 5);
  for (int64_t s = 0; s < 6; ++s)
    for (int64_t d = 0; d < kDim; ++d) in.q.set(0, s, 0, d, 0.0f);
  std::vector<double> out(kDim);
  std::vector<float> out_lowp(kDim);
  for (int64_t s = 0; s < 6; ++s) {
    const fa::RowLogSumExp all = fa::reference_row_fp64(in.q, in.k, in.v, 0, 0, s, 0.5, out.data());
    CHECK(all.lse == std::log(5.0));
    CHECK(all.max_score == 0.0);
    CHECK(fa::baseline_row_lowp(in.q, in.k, in.v, 0, 0, s, 0.5f, out_lowp.data()) == std::log(5.0f));
    // Causal, seq_q 6 > seq_kv 5: row s sees s keys (row 0 none).
    const fa::RowLogSumExp causal = fa::reference_row_fp64(in.q, in.k, in.v, 0, 0, s, 0.5, out.data(), true);
    if (s == 0) {
      CHECK(causal.lse == -std::numeric_limits<double>::infinity());
      CHECK(fa::baseline_row_lowp(in.q, in.k, in.v, 0, 0, s, 0.5f, out_lowp.data(), true) == -INFINITY);
    } else {
      CHECK(causal.lse == std::log(static_cast<double>(s)));
    }
  }
  // Row 1 (causal) sees key 0 alone: its LSE is that key's scaled score.
  Inputs random = random_inputs(1, 1, 6, 5);
  double dot = 0.0;
  for (int64_t d = 0; d < kDim; ++d)
    dot += static_cast<double>(random.q.at(0, 1, 0, d)) * random.k.at(0, 0, 0, d);
  const fa::RowLogSumExp one =
      fa::reference_row_fp64(random.q, random.k, random.v, 0, 0, 1, 0.5, out.data(), true);
  CHECK(one.lse == 0.5 * dot);
  CHECK(one.max_score == 0.5 * dot);
}

TEST_CASE("lse reference: log(sum exp) however the sum is shifted", "[reference][lse]") {
  const Inputs in = random_inputs(1, 1, 4, 50, 3.0f);
  std::vector<double> out(kDim);
  for (int64_t s = 0; s < 4; ++s) {
    const fa::RowLogSumExp got = fa::reference_row_fp64(in.q, in.k, in.v, 0, 0, s, 0.25, out.data());
    long double sum = 0.0L;  // no shift: the scores here are small enough for exp
    for (int64_t j = 0; j < 50; ++j) {
      long double dot = 0.0L;
      for (int64_t d = 0; d < kDim; ++d)
        dot += static_cast<long double>(in.q.at(0, s, 0, d)) * in.k.at(0, j, 0, d);
      sum += std::exp(0.25L * dot);
    }
    CHECK(std::fabs(got.lse - static_cast<double>(std::log(sum))) <= 1e-12 * std::fabs(got.lse) + 1e-13);
  }
}

TEST_CASE("lse check: the reference passes; a dropped key, a wrong infinity and the poison fail",
          "[checker][lse]") {
  const int64_t batch = 2, heads = 2, seq_q = 9, seq_kv = 6;
  const Inputs in = random_inputs(batch, heads, seq_q, seq_kv);
  const fa::ReferenceRows rows = fa::compute_reference_rows(in.q, in.k, in.v, 0.5f, {}, /*causal=*/true);
  const fa::HostLse perfect = lse_from(rows, batch, heads, seq_q);
  const fa::CheckResult ok = fa::check_lse_against_reference(rows, perfect);
  INFO(ok.summary());
  REQUIRE(ok.passed);
  CHECK(ok.rows_checked == batch * heads * seq_q);

  // Rows 0-2 see no key (seq_q - seq_kv = 3): -inf exactly, not a finite number, not +inf (FA2's
  // non-split forward writes +inf there) and not NaN.
  for (float wrong : {0.0f, INFINITY, std::numeric_limits<float>::quiet_NaN(), -1e30f}) {
    fa::HostLse bad = perfect;
    bad.values[static_cast<size_t>(1 * bad.batch_stride + 1 * bad.head_stride + 2)] = wrong;
    INFO("row with no key holds " << wrong);
    CHECK_FALSE(fa::check_lse_against_reference(rows, bad).passed);
  }
  // A row that dropped one of its 6 keys: off by log(1 - p) for that key's probability p.
  {
    fa::HostLse bad = perfect;
    const int64_t row = seq_q - 1;  // sees every key
    std::vector<double> out(kDim);
    const HostTensor& k = in.k;
    double max_t = -INFINITY;
    std::vector<double> t(seq_kv);
    for (int64_t j = 0; j < seq_kv; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < kDim; ++d) dot += static_cast<double>(in.q.at(0, row, 0, d)) * k.at(0, j, 0, d);
      t[j] = 0.5 * dot;
      max_t = std::max(max_t, t[j]);
    }
    double sum = 0.0;
    for (int64_t j = 1; j < seq_kv; ++j) sum += std::exp(t[j] - max_t);  // key 0 dropped
    bad.values[static_cast<size_t>(row)] = static_cast<float>(max_t + std::log(sum));
    CHECK_FALSE(fa::check_lse_against_reference(rows, bad).passed);
  }
  // Off by 1e-4 relative (the natural log taken as log2, or the scale missing, are far worse).
  {
    fa::HostLse bad = perfect;
    float& x = bad.values[static_cast<size_t>(seq_q - 1)];
    x += 1e-4f * std::max(1.0f, std::fabs(x));
    CHECK_FALSE(fa::check_lse_against_reference(rows, bad).passed);
  }
  // Never written.
  {
    fa::HostLse bad = perfect;
    bad.values[static_cast<size_t>(bad.batch_stride + seq_q - 1)] = poison();
    const fa::CheckResult r = fa::check_lse_against_reference(rows, bad);
    CHECK_FALSE(r.passed);
    CHECK(r.first_failure.find("never written") != std::string::npos);
  }
}

TEST_CASE("lse check: rows outside the sample must be written; gaps must keep the poison", "[checker][lse]") {
  const int64_t batch = 1, heads = 2, seq_q = 40, seq_kv = 12;
  const Inputs in = random_inputs(batch, heads, seq_q, seq_kv);
  fa::CheckOptions sampled;
  sampled.full_check_max_rows = 10;  // 80 rows: sampled
  sampled.sampled_rows_per_head = 4;
  const fa::ReferenceRows rows = fa::compute_reference_rows(in.q, in.k, in.v, 0.5f, sampled);
  REQUIRE(rows.rows.size() < static_cast<size_t>(heads * seq_q));
  const fa::ReferenceRows all = fa::compute_reference_rows(in.q, in.k, in.v, 0.5f);
  // A padded buffer: 3 floats after every row, all poison but the rows.
  fa::HostLse lse;
  lse.batch = batch;
  lse.heads = heads;
  lse.seq = seq_q;
  lse.head_stride = seq_q + 3;
  lse.batch_stride = heads * lse.head_stride;
  lse.values.assign(static_cast<size_t>(lse.batch_stride), poison());
  for (size_t i = 0; i < all.rows.size(); ++i)
    lse.values[static_cast<size_t>(all.rows[i].h * lse.head_stride + all.rows[i].s)] =
        static_cast<float>(all.lse[i]);
  REQUIRE(fa::check_lse_against_reference(rows, lse, sampled).passed);
  // An unsampled row left unwritten.
  int64_t unsampled = -1;
  for (int64_t s = 0; s < seq_q && unsampled < 0; ++s) {
    bool in_sample = false;
    for (const auto& r : rows.rows) in_sample |= r.h == 1 && r.s == s;
    if (!in_sample) unsampled = s;
  }
  REQUIRE(unsampled >= 0);
  fa::HostLse unwritten = lse;
  unwritten.values[static_cast<size_t>(lse.head_stride + unsampled)] = poison();
  CHECK_FALSE(fa::check_lse_against_reference(rows, unwritten, sampled).passed);
  // A write into the gap after row 0's last element.
  fa::HostLse spilled = lse;
  spilled.values[static_cast<size_t>(seq_q)] = 1.0f;
  const fa::CheckResult r = fa::check_lse_against_reference(rows, spilled, sampled);
  CHECK_FALSE(r.passed);
  CHECK(r.first_failure.find("gap") != std::string::npos);
}

TEST_CASE(
    "lse: only a stage that declares it accepts an output pointer; alignment and overlapping strides "
    "are rejected",
    "[validation][lse]") {
  int declaring = 0;
  for (const fa::StageInfo* stage : fa::registered_stages()) {
    const int64_t seq = 2 * stage->block_q * stage->block_kv;
    fa::AttentionParams p = fa_test::valid_params(*stage, 2, 3, seq, seq);
    INFO("stage " << stage->name);
    REQUIRE(fa::validate_params(p, *stage).ok());
    p.lse.data = reinterpret_cast<float*>(uintptr_t{0x20000000});
    p.lse.head_stride = p.seq_q;
    p.lse.batch_stride = p.heads * p.seq_q;
    const fa::Status packed = fa::validate_params(p, *stage);
    INFO("packed [batch, heads, seq_q]: \"" << packed.message << "\"");
    if ((stage->features & fa::kFeatureLse) == 0) {
      REQUIRE_FALSE(packed.ok());
      CHECK(packed.message.find(stage->name) != std::string::npos);
      CHECK(packed.message.find("\"lse\"") != std::string::npos);
      continue;
    }
    ++declaring;
    CHECK(packed.ok());
    // [heads, batch, seq_q] and padded rows are fine; a batch of 1 may have any batch stride.
    fa::AttentionParams other = p;
    other.lse.batch_stride = p.seq_q;
    other.lse.head_stride = p.batch * p.seq_q;
    CHECK(fa::validate_params(other, *stage).ok());
    other = p;
    other.lse.head_stride = p.seq_q + 5;
    other.lse.batch_stride = p.heads * (p.seq_q + 5) + 1;
    CHECK(fa::validate_params(other, *stage).ok());
    other = p;
    other.batch = 1;
    other.lse.batch_stride = 1;
    CHECK(fa::validate_params(other, *stage).ok());
    // Rejected: each with the word that names what is wrong.
    struct Bad {
      const char* what;
      int64_t batch_stride, head_stride;
      uintptr_t address;
      const char* keyword;
    };
    const Bad bad[] = {
        {"misaligned pointer", p.lse.batch_stride, p.lse.head_stride, 0x20000002, "4-byte aligned"},
        {"zero head stride", p.lse.batch_stride, 0, 0x20000000, "positive"},
        {"negative batch stride", -p.lse.batch_stride, p.lse.head_stride, 0x20000000, "positive"},
        {"rows overlap (head stride seq_q - 1)", p.lse.batch_stride, p.seq_q - 1, 0x20000000, "overlap"},
        {"batches overlap (batch stride < heads * seq_q)", p.lse.batch_stride - 1, p.lse.head_stride,
         0x20000000, "overlap"},
        {"heads on top of each other (equal strides)", p.seq_q, p.seq_q, 0x20000000, "overlap"},
    };
    for (const Bad& b : bad) {
      fa::AttentionParams broken = p;
      broken.lse.data = reinterpret_cast<float*>(b.address);
      broken.lse.batch_stride = b.batch_stride;
      broken.lse.head_stride = b.head_stride;
      const fa::Status status = fa::validate_params(broken, *stage);
      INFO(b.what << ": \"" << status.message << "\"");
      REQUIRE_FALSE(status.ok());
      CHECK(status.message.find(b.keyword) != std::string::npos);
      CHECK(status.message.find("lse") != std::string::npos);
    }
  }
  CHECK(declaring >= 1);
}
