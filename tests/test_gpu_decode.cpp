// The decoding track (GitHub issue 40): every registered stage that declares "split_kv" in its
// stage.json, at decoding shapes -- 1 to 16 query rows against 1 to 16384 keys -- with the number
// of splits forced to every kind of value (AttentionParams::num_splits: 1, the unsplit kernel; 2, 3
// and 7, runs of unequal length; 64; more splits than K/V blocks, so some splits are empty) and left
// to the stage (0), each run's O and LSE checked against the fp64 reference with the rule of
// checker.h: causal with the bottom-right alignment, seq_q < seq_kv and > seq_kv (rows that see no
// key: O = 0, LSE = -inf, in every split), GQA 32:8 and MQA 32:1, batch x heads of 1 and odd, both
// dtypes and head dims, the mixed layout (every tensor its own strides, the LSE padded with poisoned
// gaps).
//
// What would show a wrong split:
//   * a key dropped or counted twice at a split's border: the q = 0 case makes every LSE exactly
//     log(keys seen), which that moves by about 1/n (the LSE tolerance is 1e-5 relative);
//   * a wrong weight in the merge (a missing rescale): O off by about the size of V;
//   * an empty or all-masked split that is not weighted 0: NaN or a wrong row;
//   * a workspace shared by two launches: the two-stream case below.
// And GQA packing (decode_02_gqa_packing on; every split stage runs these cases): query groups of 1,
// 2, 4, 8 and 32 heads on one K/V head at seq_q 1, 3, 8 and 16, causal with the bottom-right
// alignment, groups that fill one tile, several and a part of one; the case where every (head,
// token) row attends to a key of its own, so a row read, masked or written as another head's or
// token's fails by the size of V.
// Every stage that does not declare split_kv must reject num_splits != 0 and write nothing. Without
// a GPU this program exits with 77 (skipped).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/cuda_check.h"
#include "common/harness.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "general_stages.h"
#include "gpu_stages.h"

using fa::DType;
using fa::HostTensor;
using fa::Problem;
using fa::ProblemConfig;
using fa::StageInfo;

namespace {

std::vector<const StageInfo*> split_stages() {
  return fa_test::stages_with(fa::kFeatureSplitKv, "split_kv");
}

// Launches `stage` on the problem with `num_splits` forced (0: the stage's choice), waits, and
// checks O and the LSE against the problem's fp64 reference (computed once per problem).
fa::RunResult run_with_splits(const StageInfo& stage, Problem& problem, int num_splits,
                              const fa::CheckOptions& options = fa_test::general_check_options(),
                              cudaStream_t stream = nullptr) {
  problem.poison_output();
  fa::AttentionParams params = problem.params();
  params.num_splits = num_splits;
  fa::RunResult run = fa::finish_launch(stage, problem, stage.launch(params, stream), stream);
  if (!run.status.ok()) return run;
  run.check = fa::check_against_reference(problem.reference(options), run.output, options);
  if (run.lse_requested)
    run.lse_check = fa::check_lse_against_reference(problem.reference(options), run.lse, options);
  return run;
}

// The split counts for keys seq_kv in blocks of block_kv: the stage's choice (0), one (the unsplit
// kernel, O written directly), runs of unequal length (2, 3, 7), 64, and more splits than blocks.
std::vector<int> split_counts(int64_t seq_kv, int block_kv) {
  std::vector<int> counts = {0, 1, 2, 3, 7, 64};
  const int64_t blocks = (seq_kv + block_kv - 1) / block_kv;
  const int more = static_cast<int>(std::min<int64_t>(blocks + 5, fa::kMaxNumSplits));
  if (more > 64) counts.push_back(more);  // below that, 64 is already more splits than blocks
  return counts;
}

std::string describe(const ProblemConfig& c) {
  return fa_test::describe_general(c) + (c.lse ? ", lse" : "");
}

// Every split stage on the problem `config` describes, at every split count (or `counts`), in both
// dtypes and head dims: O and the LSE must pass their checks. CHECK, not REQUIRE, so that one run
// lists every failing configuration.
void check_split_stages(const std::string& scenario, ProblemConfig config,
                        const fa_test::EditInputs& edit = nullptr, std::vector<int> counts = {}) {
  config.lse = true;
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (int head_dim : {64, 128}) {
      config.dtype = dtype;
      config.head_dim = head_dim;
      Problem problem(config);
      if (edit) edit(problem);
      for (const StageInfo* stage : split_stages()) {
        if (!fa_test::supports(*stage, dtype, head_dim)) continue;
        for (int num_splits : counts.empty() ? split_counts(config.seq_kv, stage->block_kv) : counts) {
          const fa::RunResult run = run_with_splits(*stage, problem, num_splits);
          INFO(scenario << " | stage " << stage->name << " | " << describe(config) << " | num_splits "
                        << num_splits);
          INFO("launch: " << (run.status.ok() ? std::string("ok") : run.status.message));
          INFO("check: " << run.check.summary());
          INFO("lse check: " << run.lse_check.summary());
          CHECK(run.passed());
        }
      }
    }
  }
}

ProblemConfig decode_shape(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq_q, int64_t seq_kv,
                           bool causal) {
  ProblemConfig c;
  c.batch = batch;
  c.heads = heads;
  c.kv_heads = kv_heads;
  c.seq_q = seq_q;
  c.seq_kv = seq_kv;
  c.causal = causal;
  c.seed = static_cast<uint64_t>(seq_q * 7919 + seq_kv * 31 + heads * 3 + kv_heads + (causal ? 1 : 0));
  return c;
}

std::string shape_name(int64_t seq_q, int64_t seq_kv, bool causal) {
  return "seq_q " + std::to_string(seq_q) + ", seq_kv " + std::to_string(seq_kv) + (causal ? ", causal" : "");
}



// Each query row (b, h, t) becomes twice the key it is to pick, key j = (37 h + 11 t) mod (keys t
// sees): its score (2 |k_j|^2 scale, about 23 at head_dim 128 and 16 at 64) leads every other by
// far, so O's row is about V's row j and its LSE about that score. Every (head, token) of a packed
// tile picks another key: a row that takes another row's Q, K/V head, causal bound or place in O or
// the LSE is off by about the size of V, not by rounding.
void rows_pick_their_own_keys(fa::Problem& problem) {
  fa::HostTensor q = problem.host_q();
  const fa::HostTensor& k = problem.host_k();
  const fa::TensorLayout& l = q.layout;
  const ProblemConfig& c = problem.config();
  const int64_t group = c.heads / problem.kv_heads();
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t t = 0; t < l.seq; ++t) {
      const int64_t keys_seen = c.causal ? std::min(t + c.seq_kv - c.seq_q + 1, c.seq_kv) : c.seq_kv;
      for (int64_t h = 0; h < l.heads; ++h) {
        if (keys_seen <= 0) continue;  // a row that sees no key: O = 0 whatever Q is
        const int64_t key = (37 * h + 11 * t) % keys_seen;
        for (int64_t d = 0; d < l.head_dim; ++d) q.set(b, t, h, d, 2.0f * k.at(b, key, h / group, d));
      }
    }
  problem.set_inputs(q, problem.host_k(), problem.host_v());
}

int64_t written_elements(const HostTensor& o) {
  return static_cast<int64_t>(o.raw.size()) - std::count(o.raw.begin(), o.raw.end(), uint16_t{0xFFFF});
}

}  // namespace

TEST_CASE("decode: seq_q 1, 2, 8, 16 against seq_kv 1 to 16384, every split count, causal and not",
          "[gpu][decode]") {
  // batch 1 x 3 heads: an odd number of (batch, head) rows.
  for (int64_t seq_q : {1, 2, 8, 16})
    for (int64_t seq_kv : {1, 63, 1000, 4097, 16384})
      for (bool causal : {false, true})
        check_split_stages(shape_name(seq_q, seq_kv, causal), decode_shape(1, 3, 3, seq_q, seq_kv, causal));
}

TEST_CASE("decode: batch x heads of 1 and of 15 (odd), every split count", "[gpu][decode]") {
  for (bool causal : {false, true}) {
    check_split_stages("batch 1, 1 head, " + shape_name(1, 4097, causal),
                       decode_shape(1, 1, 1, 1, 4097, causal));
    check_split_stages("batch 1, 1 head, " + shape_name(16, 1000, causal),
                       decode_shape(1, 1, 1, 16, 1000, causal));
    check_split_stages("batch 3, 5 heads, " + shape_name(2, 1000, causal),
                       decode_shape(3, 5, 5, 2, 1000, causal));
    check_split_stages("batch 3, 5 heads, " + shape_name(8, 4097, causal),
                       decode_shape(3, 5, 5, 8, 4097, causal));
  }
}

TEST_CASE("decode: GQA 32:8 and MQA 32:1, every split count", "[gpu][decode][gqa]") {
  for (int64_t kv_heads : {8, 1})
    for (int64_t seq_q : {1, 8, 16})
      for (int64_t seq_kv : {1000, 4097})
        for (bool causal : {false, true})
          check_split_stages(
              "32 heads, kv_heads " + std::to_string(kv_heads) + ", " + shape_name(seq_q, seq_kv, causal),
              decode_shape(1, 32, kv_heads, seq_q, seq_kv, causal));
}

TEST_CASE("decode: GQA packing, groups of 1, 2, 4, 8 and 32 query heads at seq_q 1, 3, 8, 16",
          "[gpu][decode][gqa][packing]") {
  // 32 query heads on 32, 16, 8, 4 and 1 K/V heads: packed tiles of 2 to 128 rows, and at 32 heads
  // per K/V head with seq_q 8 and 16, 256 and 512 rows in 2 and 4 tiles. seq_kv 77 and 1000: not
  // multiples of the K/V block; under causal at 77 with seq_q 16 every row's bound is in the last
  // block.
  for (int64_t kv_heads : {32, 16, 8, 4, 1})
    for (int64_t seq_q : {1, 3, 8, 16})
      for (int64_t seq_kv : {77, 1000})
        for (bool causal : {false, true})
          check_split_stages("GQA packing, 32 heads, kv_heads " + std::to_string(kv_heads) + ", " +
                                 shape_name(seq_q, seq_kv, causal),
                             decode_shape(1, 32, kv_heads, seq_q, seq_kv, causal), nullptr, {0, 1, 3});
}

TEST_CASE("decode: GQA packing, every (head, token) row picks a key of its own, so a row mixed up fails",
          "[gpu][decode][gqa][packing]") {
  for (int64_t kv_heads : {8, 1})
    for (int64_t seq_q : {3, 16})
      for (bool causal : {false, true})
        check_split_stages("rows pick their own keys, 32 heads, kv_heads " + std::to_string(kv_heads) + ", " +
                               shape_name(seq_q, 1000, causal),
                           decode_shape(2, 32, kv_heads, seq_q, 1000, causal), rows_pick_their_own_keys,
                           {0, 1, 5});
  // The mixed layout: Q, K, V, O and the LSE each with their own strides, so a row sent to the
  // wrong head or token reads or writes another place.
  for (bool causal : {false, true}) {
    ProblemConfig config = decode_shape(2, 32, 4, 8, 1000, causal);
    config.layout = fa::ProblemLayout::mixed();
    check_split_stages(
        "rows pick their own keys, mixed layout, 32 heads, kv_heads 4, " + shape_name(8, 1000, causal),
        config, rows_pick_their_own_keys, {0, 1, 5});
  }
}

TEST_CASE("decode: GQA packing, groups that do not divide the tile (a token's heads over two tiles)",
          "[gpu][decode][gqa][packing]") {
  // Group 3 at seq_q 50 (150 packed rows) and group 6 at seq_q 100 (600): the second tile starts in
  // the middle of a token's group (128 = 42 x 3 + 2), so its rows' tokens and heads start from
  // there; group 5 at seq_q 16 (80 rows, one tile); and prefill lengths where packing saves tiles
  // (group 4 at seq_q 300: 10 tiles instead of 12) and where it does not (seq_q 256: 8 either way,
  // the parent's mapping).
  struct Case {
    int64_t heads, kv_heads, seq_q, seq_kv;
  };
  for (const Case& c : {Case{6, 2, 50, 1000}, Case{12, 2, 100, 1000}, Case{10, 2, 16, 4097},
                        Case{8, 2, 300, 1000}, Case{8, 2, 256, 1000}})
    for (bool causal : {false, true})
      check_split_stages("heads " + std::to_string(c.heads) + ", kv_heads " + std::to_string(c.kv_heads) +
                             ", " + shape_name(c.seq_q, c.seq_kv, causal),
                         decode_shape(1, c.heads, c.kv_heads, c.seq_q, c.seq_kv, causal),
                         rows_pick_their_own_keys, {0, 1, 3});
}

TEST_CASE("decode: a split whose keys are all masked, and rows that see no key at all",
          "[gpu][decode][causal]") {
  // seq_q 16, seq_kv 4097, causal: K/V block 64 holds key 4096 alone, which rows 0..14 do not see
  // (row i sees keys j <= i + 4081). With 65 splits every block is a split of its own, so that
  // split's every key is masked in those rows (lse_s = -inf, O_s = 0) and not in row 15; with 66
  // and more, some splits are empty as well.
  check_split_stages("the last block's one key masked in 15 of 16 rows",
                     decode_shape(1, 3, 3, 16, 4097, true), nullptr, {2, 64, 65, 66, 100});
  // seq_q > seq_kv under causal: rows 0 .. seq_q - seq_kv - 1 see no key; O = 0, LSE = -inf.
  for (int64_t seq_kv : {1, 8, 15})
    check_split_stages("rows that see no key, " + shape_name(16, seq_kv, true),
                       decode_shape(1, 3, 3, 16, seq_kv, true), nullptr, {1, 2, 3, 64});
  // Prefill-sized: whole query blocks (128 rows) see no key, so every split of them is empty.
  check_split_stages("query blocks that see no key, " + shape_name(300, 10, true),
                     decode_shape(2, 3, 3, 300, 10, true), nullptr, {0, 1, 2, 7});
}

TEST_CASE("decode: q = 0, so every LSE is exactly log(keys seen): no key lost or doubled at a split border",
          "[gpu][decode][lse]") {
  for (int64_t seq_kv : {1000, 4097})
    for (bool causal : {false, true})
      check_split_stages("q = 0, " + shape_name(8, seq_kv, causal), decode_shape(1, 3, 3, 8, seq_kv, causal),
                         fa_test::q_zero);
}

TEST_CASE("decode: large scores (k scaled by 8), the merge dominated by one split", "[gpu][decode][lse]") {
  for (bool causal : {false, true})
    check_split_stages("k x 8, " + shape_name(8, 4097, causal), decode_shape(1, 3, 3, 8, 4097, causal),
                       fa_test::k_times_8);
}

TEST_CASE("decode: the mixed layout (every tensor its own strides, the LSE padded with poisoned gaps)",
          "[gpu][decode]") {
  for (int64_t seq_q : {1, 16})
    for (bool causal : {false, true}) {
      ProblemConfig config = decode_shape(2, 3, 3, seq_q, 1000, causal);
      config.layout = fa::ProblemLayout::mixed();
      check_split_stages("mixed layout, " + shape_name(seq_q, 1000, causal), config);
    }
}

TEST_CASE("decode: prefill shapes with forced splits (several query blocks, causal longest first)",
          "[gpu][decode]") {
  for (bool causal : {false, true}) {
    check_split_stages("prefill, " + shape_name(300, 1000, causal), decode_shape(2, 3, 3, 300, 1000, causal),
                       nullptr, {0, 2, 7, 64});
    check_split_stages("prefill, " + shape_name(1000, 300, causal), decode_shape(1, 2, 2, 1000, 300, causal),
                       nullptr, {0, 3, 64});
  }
}

TEST_CASE("decode: bit-identical over repeated launches at a fixed split count",
          "[gpu][decode][determinism]") {
  for (const StageInfo* stage : split_stages()) {
    ProblemConfig config = decode_shape(1, 5, 1, 8, 4097, true);
    config.lse = true;
    Problem problem(config);
    for (int num_splits : {3, 64}) {
      INFO("stage " << stage->name << " | " << describe(config) << " | num_splits " << num_splits);
      const fa::RunResult first = run_with_splits(*stage, problem, num_splits);
      REQUIRE(first.passed());
      for (int round = 0; round < 2; ++round) {
        const fa::RunResult again = fa::launch_and_download(*stage, problem);  // the stage's choice between
        REQUIRE(again.status.ok());
        const fa::RunResult repeat = run_with_splits(*stage, problem, num_splits);
        REQUIRE(repeat.status.ok());
        CHECK(repeat.output.raw == first.output.raw);
        REQUIRE(repeat.lse.values.size() == first.lse.values.size());
        CHECK(std::memcmp(repeat.lse.values.data(), first.lse.values.data(),
                          first.lse.values.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("decode: two launches on two streams at once, each with its own workspace",
          "[gpu][decode][stream]") {
  // A is held on its stream (a StreamGate) while B, on another stream, must run to the end: B may
  // not wait for A (a workspace taken from memory A is still to free), nor share A's workspace.
  // Each problem runs once unheld first: a kernel's first launch may load its module, which may
  // synchronize the context.
  for (const StageInfo* stage : split_stages()) {
    ProblemConfig config_a = decode_shape(1, 4, 2, 8, 4097, true),
                  config_b = decode_shape(2, 3, 3, 1, 1000, false);
    config_a.lse = config_b.lse = true;
    config_b.dtype = DType::kBFloat16;
    config_b.seed += 7;
    INFO("stage " << stage->name << " | A: " << describe(config_a) << ", 7 splits | B: " << describe(config_b)
                  << ", 3 splits");
    fa_test::NonBlockingStream stream_a, stream_b;
    Problem a(config_a), b(config_b);
    REQUIRE(run_with_splits(*stage, a, 7, {}, stream_a).passed());
    REQUIRE(run_with_splits(*stage, b, 3, {}, stream_b).passed());

    a.poison_output();
    b.poison_output();
    fa::AttentionParams params_a = a.params(), params_b = b.params();
    params_a.num_splits = 7;
    params_b.num_splits = 3;
    fa::StreamGate gate_a(stream_a);
    const fa::Status launched_a = stage->launch(params_a, stream_a);
    REQUIRE(launched_a.ok());
    const fa::Status launched_b = stage->launch(params_b, stream_b);
    REQUIRE(launched_b.ok());
    const fa::RunResult run_b = fa::finish_launch(*stage, b, launched_b, stream_b);
    REQUIRE(run_b.status.ok());
    const fa::CheckResult check_b = fa::check_against_reference(b.reference({}), run_b.output);
    const fa::CheckResult lse_b = fa::check_lse_against_reference(b.reference({}), run_b.lse);
    INFO("B while A is held: " << check_b.summary() << " | lse: " << lse_b.summary());
    CHECK(check_b.passed);
    CHECK(lse_b.passed);
    {
      INFO("A's O was written while A's stream was held");
      CHECK(written_elements(a.o().download()) == 0);
    }
    gate_a.open();
    const fa::RunResult run_a = fa::finish_launch(*stage, a, launched_a, stream_a);
    CHECK(gate_a.opened_in_time());
    REQUIRE(run_a.status.ok());
    const fa::CheckResult check_a = fa::check_against_reference(a.reference({}), run_a.output);
    const fa::CheckResult lse_a = fa::check_lse_against_reference(a.reference({}), run_a.lse);
    INFO("A: " << check_a.summary() << " | lse: " << lse_a.summary());
    CHECK(check_a.passed);
    CHECK(lse_a.passed);
  }
}

TEST_CASE("decode: a stage that does not declare split_kv rejects num_splits and writes nothing",
          "[gpu][decode]") {
  int rejecting = 0;
  for (const StageInfo* stage : fa_test::runnable_stages()) {
    if (stage->features & fa::kFeatureSplitKv) continue;
    ProblemConfig config;
    config.batch = 1;
    config.heads = 2;
    config.seq_q = config.seq_kv = 2 * std::max(stage->block_q, stage->block_kv);
    config.head_dim = stage->head_dims.front();
    config.dtype = stage->dtypes.front();
    Problem problem(config);
    problem.poison_output();
    fa::AttentionParams params = problem.params();
    params.num_splits = 2;
    const fa::Status status = stage->launch(params, nullptr);
    INFO("stage " << stage->name << ": " << status.message);
    REQUIRE_FALSE(status.ok());
    CHECK(status.message.find(stage->name) != std::string::npos);
    CHECK(status.message.find("\"split_kv\"") != std::string::npos);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(written_elements(problem.o().download()) == 0);
    ++rejecting;
  }
  if (rejecting == 0) fa_test::skip("no stage under test lacks split_kv");
}

TEST_CASE("decode: num_splits out of range is rejected before anything runs", "[gpu][decode]") {
  for (const StageInfo* stage : split_stages()) {
    ProblemConfig config = decode_shape(1, 2, 2, 1, 1000, false);
    Problem problem(config);
    for (int num_splits : {-1, fa::kMaxNumSplits + 1}) {
      problem.poison_output();
      fa::AttentionParams params = problem.params();
      params.num_splits = num_splits;
      const fa::Status status = stage->launch(params, nullptr);
      INFO("stage " << stage->name << ", num_splits " << num_splits << ": " << status.message);
      REQUIRE_FALSE(status.ok());
      CHECK(status.message.find("num_splits " + std::to_string(num_splits)) != std::string::npos);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      CHECK(written_elements(problem.o().download()) == 0);
    }
  }
}
