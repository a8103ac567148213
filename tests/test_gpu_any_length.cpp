// Any sequence length (GitHub issue 12): every registered stage that declares "any_length" in its
// stage.json, on lengths that are and are not multiples of its tiles (1, 7, 63, 64, 65, 127, 129,
// 1000, 4097; seq_q == seq_kv and both ways apart), fp16/bf16 x head_dim 64/128, in the contiguous
// layout and in the mixed one (ProblemLayout::mixed()), against the fp64 reference.
//
// What would show a wrong partial block:
//   * reading rows past seq_kv: in the mixed layout V's rows are followed by NaN-poisoned gaps, so
//     a row read instead of zero-filled makes the output NaN even where its probability is 0;
//   * keys past seq_kv not masked: with every real score negative (q >= 0, k <= 0), a zero-filled
//     key's score 0 would outweigh them all;
//   * a mask one key too early: the row maximum is planted on the last key, seq_kv - 1;
//   * rows past seq_q written: in the mixed layout O is head-major with gaps after every row and
//     head, so row seq_q of a head lands in a poisoned gap; the checker fails a gap that lost its
//     poison, and here every element outside the tensor's rows must still hold it.
//   * a tile left out: batch x heads 1 and 3 with odd tile counts, so a persistent stage's last
//     block takes a lone tile; its rows would keep the poison.
// Without a GPU this program exits with 77 (skipped); without a stage that declares any_length
// under test (FA_TEST_STAGES) its cases say so in a "SKIPPED:" line (tests/gpu_stages.h).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/harness.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "general_stages.h"
#include "gpu_stages.h"

using fa::DType;
using fa::HostTensor;
using fa::LayoutKind;
using fa::Problem;
using fa::ProblemConfig;
using fa::ProblemLayout;
using fa::StageInfo;

namespace {

constexpr int64_t kLengths[] = {1, 7, 63, 64, 65, 127, 129, 1000, 4097};

std::vector<const StageInfo*> any_length_stages() {
  return fa_test::stages_with(fa::kFeatureAnyLength, "any_length");
}

// Every any_length stage on (seq_q, seq_kv) in fp16/bf16 x head_dim 64/128, in the contiguous and the mixed
// layout. CHECK, not REQUIRE, so one run lists every failing configuration.
void check_any_length_stages(const std::string& scenario, int64_t seq_q, int64_t seq_kv,
                             const fa_test::EditInputs& edit = nullptr,
                             const fa_test::Configure& configure = nullptr) {
  fa_test::check_general_stages(
      any_length_stages(), scenario, seq_q, seq_kv, /*causal=*/false, edit,
      [&](const fa::RunResult& run) {
        // Nothing outside the tensor's rows was written: exactly its elements lost the poison
        // (0xFFFF, which no conversion to 16 bits produces).
        const int64_t written = static_cast<int64_t>(run.output.raw.size()) -
                                std::count(run.output.raw.begin(), run.output.raw.end(), uint16_t{0xFFFF});
        CHECK(written == run.output.layout.logical_elems());
      },
      configure);
}

// q >= 0 and k = -2 |k| everywhere: every real score is negative (about -1.28 sqrt(D) at the
// default scale: -10 at D = 64, -14.5 at D = 128), so a key past seq_kv that is zero-filled but not
// masked (score 0) would take nearly all of its row's weight.
void every_real_score_negative(Problem& problem) {
  HostTensor q = problem.host_q(), k = problem.host_k();
  const HostTensor& v = problem.host_v();
  for (HostTensor* t : {&q, &k}) {
    const fa::TensorLayout& l = t->layout;
    const float sign = t == &q ? 1.0f : -2.0f;
    for (int64_t b = 0; b < l.batch; ++b)
      for (int64_t s = 0; s < l.seq; ++s)
        for (int64_t h = 0; h < l.heads; ++h)
          for (int64_t d = 0; d < l.head_dim; ++d) t->set(b, s, h, d, sign * std::fabs(t->at(b, s, h, d)));
  }
  problem.set_inputs(q, k, v);
}

// q >= 0 and key seq_kv - 1 = (2, ..., 2): the last real key is every row's maximum by far (score
// about 1.6 |q|_2 sqrt(D) against about 3.3 |q|_2 for the largest random key), so a mask that
// starts one key early changes every row.
void row_max_on_the_last_key(Problem& problem) {
  HostTensor q = problem.host_q(), k = problem.host_k();
  const HostTensor& v = problem.host_v();
  const fa::TensorLayout& l = q.layout;
  const int64_t last_key = k.layout.seq - 1;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < l.heads; ++h) {
      for (int64_t s = 0; s < l.seq; ++s)
        for (int64_t d = 0; d < l.head_dim; ++d) q.set(b, s, h, d, std::fabs(q.at(b, s, h, d)));
      for (int64_t d = 0; d < l.head_dim; ++d) k.set(b, last_key, h, d, 2.0f);
    }
  problem.set_inputs(q, k, v);
}

}  // namespace

TEST_CASE("any length: seq_q == seq_kv from 1 to 4097", "[gpu][any_length]") {
  for (int64_t seq : kLengths) check_any_length_stages("seq " + std::to_string(seq), seq, seq);
}

TEST_CASE("any length: seq_q != seq_kv, both ways", "[gpu][any_length]") {
  const std::pair<int64_t, int64_t> pairs[] = {{1, 65},    {65, 1},     {7, 129},    {129, 7}, {63, 1000},
                                               {1000, 63}, {127, 4097}, {4097, 127}, {65, 64}, {64, 65}};
  for (const auto& [seq_q, seq_kv] : pairs)
    check_any_length_stages("seq_q " + std::to_string(seq_q) + ", seq_kv " + std::to_string(seq_kv), seq_q,
                            seq_kv);
}

// A last K/V block (64 keys in the 128 x 64 stages) holding 16 and 17, 32 and 33, 48 and 49 keys:
// each count of 16-key groups that ampere_16_skip_padding compiles a step for, at both edges of the
// count. (The lengths above leave 1, 40 or 63 keys in the last block: 1, 3 or 4 groups.)
TEST_CASE("any length: every count of 16-key groups in the last K/V block", "[gpu][any_length]") {
  for (int64_t seq_kv : {80, 81, 96, 97, 112, 113})
    check_any_length_stages("seq_q 129, seq_kv " + std::to_string(seq_kv), 129, seq_kv, every_real_score_negative);
}

TEST_CASE("any length: keys past seq_kv would dominate every row if they leaked", "[gpu][any_length]") {
  for (int64_t seq_kv : {1, 7, 63, 65, 127, 1000})
    check_any_length_stages("every real score negative, seq_kv " + std::to_string(seq_kv), 129, seq_kv,
                            every_real_score_negative);
}

TEST_CASE("any length: the row maximum on the last key, seq_kv - 1", "[gpu][any_length]") {
  for (int64_t seq_kv : {1, 7, 63, 65, 127, 1000, 4097})
    check_any_length_stages("row max at key seq_kv - 1, seq_kv " + std::to_string(seq_kv), 65, seq_kv,
                            row_max_on_the_last_key);
}

// Batch x heads 1 and 3 (the shapes above have 2 or 6) with 1, 3, 5 or 8 query tiles of 128 rows a
// head (seq_q 65, 300 and 333, 561, 1000): mostly odd tile counts, so that a persistent stage's last
// block takes a lone tile, and a schedule that counts its tiles wrong leaves one out (its rows keep
// the poison).
TEST_CASE("any length: batch x heads 1 and 3, odd tile counts, seq_q < and > seq_kv", "[gpu][any_length]") {
  const std::pair<int64_t, int64_t> pairs[] = {{65, 200}, {300, 429}, {333, 129}, {561, 1000}, {1000, 561}};
  const std::pair<int64_t, int64_t> batch_heads[] = {{1, 1}, {1, 3}, {3, 1}};
  for (const auto& [batch, heads] : batch_heads)
    for (const auto& [seq_q, seq_kv] : pairs)
      check_any_length_stages("batch " + std::to_string(batch) + ", heads " + std::to_string(heads) +
                                  ", seq_q " + std::to_string(seq_q) + ", seq_kv " + std::to_string(seq_kv),
                              seq_q, seq_kv, nullptr, [batch = batch, heads = heads](ProblemConfig& c) {
                                c.batch = batch;
                                c.heads = heads;
                              });
}
