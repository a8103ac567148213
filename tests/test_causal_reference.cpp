// Causal masking without a GPU: the rule the fp64 reference and the plain low-precision attention
// apply (aligned to the bottom-right, as in FlashAttention >= 2.1: query i sees the keys
// j <= i + seq_kv - seq_q; a query that sees none outputs 0), checked on answers known by hand;
// the launcher contract (a stage that does not declare "causal" rejects it); and the FLOPs a causal
// problem counts.
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/checker.h"
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

// One batch, one head, seeded normal data; k with a large spread, so that any key that leaks into a
// row moves its output far.
Inputs random_inputs(int64_t seq_q, int64_t seq_kv, DType dtype = DType::kFloat16) {
  Inputs in{make_host_tensor(1, seq_q, 1, kDim, dtype), make_host_tensor(1, seq_kv, 1, kDim, dtype),
            make_host_tensor(1, seq_kv, 1, kDim, dtype)};
  fill_normal(in.q, 1);
  fill_normal(in.k, 2, 4.0f);
  fill_normal(in.v, 3);
  return in;
}

// The first `keys` rows of a [1, seq, 1, kDim] tensor.
HostTensor first_rows(const HostTensor& t, int64_t keys) {
  HostTensor out = make_host_tensor(1, keys, 1, kDim, t.dtype);
  for (int64_t j = 0; j < keys; ++j)
    for (int64_t d = 0; d < kDim; ++d) out.set(0, j, 0, d, t.at(0, j, 0, d));
  return out;
}

std::vector<double> reference_row(const Inputs& in, int64_t s, bool causal) {
  std::vector<double> out(kDim);
  fa::reference_row_fp64(in.q, in.k, in.v, 0, 0, s, 0.5, out.data(), causal);
  return out;
}

std::vector<float> baseline_row(const Inputs& in, int64_t s, bool causal) {
  std::vector<float> out(kDim);
  fa::baseline_row_lowp(in.q, in.k, in.v, 0, 0, s, 0.5f, out.data(), causal);
  return out;
}

}  // namespace

TEST_CASE("causal: the keys a row sees, aligned to the bottom-right", "[reference][causal]") {
  // seq_q == seq_kv: row s sees keys 0..s.
  CHECK(fa::visible_keys(0, 4, 4, true) == 1);
  CHECK(fa::visible_keys(3, 4, 4, true) == 4);
  // Fewer queries than keys: the last query sees every key, the first seq_kv - seq_q + 1.
  CHECK(fa::visible_keys(0, 3, 5, true) == 3);
  CHECK(fa::visible_keys(2, 3, 5, true) == 5);
  // More queries than keys: the first seq_q - seq_kv rows see nothing, the last sees every key.
  CHECK(fa::visible_keys(0, 5, 3, true) == 0);
  CHECK(fa::visible_keys(1, 5, 3, true) == 0);
  CHECK(fa::visible_keys(2, 5, 3, true) == 1);
  CHECK(fa::visible_keys(4, 5, 3, true) == 3);
  // Without causal, every key.
  CHECK(fa::visible_keys(0, 5, 3, false) == 3);
}

TEST_CASE("causal reference: a row that sees exactly one key outputs that key's value row",
          "[reference][causal]") {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    // Row 0 of seq_q == seq_kv == 4, and row 2 of seq_q 5, seq_kv 3, see key 0 alone.
    for (const auto& [seq_q, seq_kv, row] : {std::tuple<int64_t, int64_t, int64_t>{4, 4, 0}, {5, 3, 2}}) {
      const Inputs in = random_inputs(seq_q, seq_kv, dtype);
      const std::vector<double> ref = reference_row(in, row, true);
      const std::vector<float> base = baseline_row(in, row, true);
      const std::vector<double> full = reference_row(in, row, false);
      bool full_differs = false;
      for (int64_t d = 0; d < kDim; ++d) {
        CHECK(ref[d] == in.v.at(0, 0, 0, d));
        CHECK(base[d] == in.v.at(0, 0, 0, d));
        full_differs |= full[d] != ref[d];
      }
      CHECK(full_differs);  // the other keys do matter without the mask
    }
  }
}

TEST_CASE("causal reference: a row that sees no key outputs exactly 0", "[reference][causal]") {
  const Inputs in = random_inputs(6, 2);  // rows 0..3 see nothing, row 4 key 0, row 5 both
  for (int64_t s = 0; s < 4; ++s) {
    const std::vector<double> ref = reference_row(in, s, true);
    const std::vector<float> base = baseline_row(in, s, true);
    for (int64_t d = 0; d < kDim; ++d) {
      CHECK(ref[d] == 0.0);  // not NaN (0 / 0)
      CHECK(base[d] == 0.0f);
    }
  }
  // compute_reference_rows passes the rule to both: a fully masked row's expected output is 0.
  fa::CheckOptions every_row;
  const fa::ReferenceRows rows = fa::compute_reference_rows(in.q, in.k, in.v, 0.5f, every_row, true);
  REQUIRE(rows.rows.size() == 6);
  for (size_t i = 0; i < rows.rows.size(); ++i)
    for (int64_t d = 0; d < kDim; ++d) {
      if (rows.rows[i].s >= 4) continue;
      CHECK(rows.ref[i * kDim + d] == 0.0);
      CHECK(rows.baseline[i * kDim + d] == 0.0f);
    }
}

TEST_CASE("causal reference: each row is the plain attention over the keys it sees", "[reference][causal]") {
  for (const auto& [seq_q, seq_kv] : {std::pair<int64_t, int64_t>{9, 9}, {4, 11}, {11, 4}}) {
    const Inputs in = random_inputs(seq_q, seq_kv);
    for (int64_t s = 0; s < seq_q; ++s) {
      const int64_t keys = s + seq_kv - seq_q + 1;
      if (keys <= 0) continue;  // the test above
      const Inputs cut{in.q, first_rows(in.k, keys), first_rows(in.v, keys)};
      // The non-causal reference of row s over `keys` keys, with seq_q set to match: the same sums.
      std::vector<double> expected(kDim);
      fa::reference_row_fp64(cut.q, cut.k, cut.v, 0, 0, s, 0.5, expected.data());
      const std::vector<double> got = reference_row(in, s, true);
      INFO("seq_q " << seq_q << ", seq_kv " << seq_kv << ", row " << s);
      for (int64_t d = 0; d < kDim; ++d) CHECK(got[d] == expected[d]);
    }
  }
}

TEST_CASE("causal: a stage that does not declare it rejects it; a stage that does accepts it",
          "[validation][causal]") {
  int declaring = 0;
  for (const fa::StageInfo* stage : fa::registered_stages()) {
    const int64_t seq = 4 * stage->block_q * stage->block_kv;
    fa::AttentionParams p = fa_test::valid_params(*stage, 1, 2, seq, seq);
    INFO("stage " << stage->name);
    REQUIRE(fa::validate_params(p, *stage).ok());
    p.causal = true;
    const fa::Status causal = fa::validate_params(p, *stage);
    if (stage->features & fa::kFeatureCausal) {
      ++declaring;
      CHECK(causal.ok());
    } else {
      REQUIRE_FALSE(causal.ok());
      CHECK(causal.message.find(stage->name) != std::string::npos);
      CHECK(causal.message.find("causal") != std::string::npos);
    }
  }
  CHECK(declaring >= 1);
}

TEST_CASE("causal FLOPs: half of the square at seq_q == seq_kv, the area below the diagonal otherwise",
          "[causal]") {
  fa::ProblemConfig c;
  c.batch = 2;
  c.heads = 3;
  c.head_dim = 64;
  c.seq_q = c.seq_kv = 1000;
  const double full = fa::attention_flops(c);
  CHECK(full == 4.0 * 2 * 3 * 1000 * 1000 * 64);
  c.causal = true;
  CHECK(fa::attention_flops(c) == full / 2);
  c.seq_kv = 3000;  // every query sees 2000 keys and then its share of the 1000 x 1000 triangle
  CHECK(fa::attention_flops(c) == 4.0 * 2 * 3 * 64 * (1000.0 * 2000 + 1000.0 * 1000 / 2));
  c.seq_q = 3000;
  c.seq_kv = 1000;  // the first 2000 queries see nothing
  CHECK(fa::attention_flops(c) == 4.0 * 2 * 3 * 64 * (1000.0 * 1000 / 2));
}
