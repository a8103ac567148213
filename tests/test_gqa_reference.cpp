// Grouped-query attention without a GPU: which key/value head a query head reads (kv_head_of), the
// fp64 reference and the plain low-precision attention with fewer key/value heads than query heads
// (each query head must equal multi-head attention on K and V with the group's head repeated), and
// the launcher contract for kv_heads (never unset, always dividing heads, fewer than heads only
// for a stage that declares "gqa").
#include <cstdint>
#include <stdexcept>
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

// K or V with kv_heads heads, expanded to `heads` heads: head h holds kv head h / (heads / kv_heads).
HostTensor repeat_heads(const HostTensor& t, int64_t heads) {
  const fa::TensorLayout& l = t.layout;
  HostTensor out = make_host_tensor(l.batch, l.seq, heads, l.head_dim, t.dtype);
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < l.head_dim; ++d) out.set(b, s, h, d, t.at(b, s, h / (heads / l.heads), d));
  return out;
}

}  // namespace

TEST_CASE("gqa: query head h reads key/value head h / (heads / kv_heads)", "[reference][gqa]") {
  // 32 query heads, 8 key/value heads: groups of 4 consecutive query heads.
  CHECK(fa::kv_head_of(0, 32, 8) == 0);
  CHECK(fa::kv_head_of(3, 32, 8) == 0);
  CHECK(fa::kv_head_of(4, 32, 8) == 1);
  CHECK(fa::kv_head_of(31, 32, 8) == 7);
  // Multi-query: one key/value head for all; multi-head: each its own.
  for (int64_t h = 0; h < 12; ++h) {
    CHECK(fa::kv_head_of(h, 12, 1) == 0);
    CHECK(fa::kv_head_of(h, 12, 12) == h);
  }
  CHECK_THROWS_AS(fa::kv_head_of(0, 12, 5), std::invalid_argument);
  CHECK_THROWS_AS(fa::kv_head_of(0, 12, 0), std::invalid_argument);
  CHECK_THROWS_AS(fa::kv_head_of(0, 12, 24), std::invalid_argument);
}

TEST_CASE("gqa reference: each query head is multi-head attention on its group's key/value head",
          "[reference][gqa]") {
  const int64_t heads = 8, seq_q = 5, seq_kv = 7;
  for (int64_t kv_heads : {8, 4, 2, 1}) {
    for (bool causal : {false, true}) {
      HostTensor q = make_host_tensor(2, seq_q, heads, kDim, DType::kFloat16);
      HostTensor k = make_host_tensor(2, seq_kv, kv_heads, kDim, DType::kFloat16);
      HostTensor v = make_host_tensor(2, seq_kv, kv_heads, kDim, DType::kFloat16);
      fill_normal(q, 1);
      fill_normal(k, 2, 2.0f);
      fill_normal(v, 3);
      const HostTensor k_full = repeat_heads(k, heads), v_full = repeat_heads(v, heads);
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t s = 0; s < seq_q; ++s) {
            std::vector<double> got(kDim), expected(kDim);
            std::vector<float> got_lowp(kDim), expected_lowp(kDim);
            fa::reference_row_fp64(q, k, v, b, h, s, 0.5, got.data(), causal);
            fa::reference_row_fp64(q, k_full, v_full, b, h, s, 0.5, expected.data(), causal);
            fa::baseline_row_lowp(q, k, v, b, h, s, 0.5f, got_lowp.data(), causal);
            fa::baseline_row_lowp(q, k_full, v_full, b, h, s, 0.5f, expected_lowp.data(), causal);
            INFO("kv_heads " << kv_heads << (causal ? ", causal" : "") << ", b " << b << ", h " << h << ", s "
                             << s);
            for (int64_t d = 0; d < kDim; ++d) {
              CHECK(got[d] == expected[d]);
              CHECK(got_lowp[d] == expected_lowp[d]);
            }
          }
    }
  }
}

TEST_CASE("gqa reference: a head count that does not divide is an error, not a wrong answer",
          "[reference][gqa]") {
  HostTensor q = make_host_tensor(1, 4, 6, kDim, DType::kFloat16);
  HostTensor k = make_host_tensor(1, 4, 4, kDim, DType::kFloat16);
  HostTensor v = make_host_tensor(1, 4, 4, kDim, DType::kFloat16);
  fill_normal(q, 1);
  fill_normal(k, 2);
  fill_normal(v, 3);
  CHECK_THROWS_AS(fa::compute_reference_rows(q, k, v, 0.5f), std::invalid_argument);
  HostTensor v3 = make_host_tensor(1, 4, 3, kDim, DType::kFloat16);
  fill_normal(v3, 3);
  CHECK_THROWS_AS(fa::compute_reference_rows(q, make_host_tensor(1, 4, 2, kDim, DType::kFloat16), v3, 0.5f),
                  std::invalid_argument);
}

TEST_CASE("gqa: kv_heads is never unset, always divides heads, and differs from heads only with gqa",
          "[validation][gqa]") {
  int declaring = 0;
  for (const fa::StageInfo* stage : fa::registered_stages()) {
    const int64_t seq = 2 * stage->block_q * stage->block_kv;
    fa::AttentionParams p = fa_test::valid_params(*stage, 2, 8, seq, seq);
    INFO("stage " << stage->name);
    REQUIRE(fa::validate_params(p, *stage).ok());
    const bool gqa = (stage->features & fa::kFeatureGqa) != 0;
    declaring += gqa ? 1 : 0;
    for (int64_t kv_heads : {4, 2, 1}) {
      p.kv_heads = kv_heads;
      const fa::Status status = fa::validate_params(p, *stage);
      INFO("kv_heads " << kv_heads << ": \"" << status.message << "\"");
      if (gqa) {
        CHECK(status.ok());
      } else {
        REQUIRE_FALSE(status.ok());
        CHECK(status.message.find(stage->name) != std::string::npos);
        CHECK(status.message.find("\"gqa\"") != std::string::npos);
      }
    }
    for (int64_t kv_heads : {0, -8, 3, 16}) {
      p.kv_heads = kv_heads;
      const fa::Status status = fa::validate_params(p, *stage);
      INFO("kv_heads " << kv_heads << ": \"" << status.message << "\"");
      REQUIRE_FALSE(status.ok());
      CHECK(status.message.find("kv_heads " + std::to_string(kv_heads)) != std::string::npos);
      CHECK(status.message.find("divide heads 8") != std::string::npos);
    }
  }
  CHECK(declaring >= 1);
}
