// What the general-attention GPU tests (tests/test_gpu_any_length.cpp, tests/test_gpu_causal.cpp,
// tests/test_gpu_gqa.cpp, ...) share: the stages declaring a feature, the shapes, and the loop that
// checks each of them on one problem in fp16/bf16 x head_dim 64/128 and in the contiguous and the
// mixed layout; with FA_TEST_SCHEDULES defined (tests/general.cmake), also the 192-row tile's case.
// Include it after gpu_stages.h, in one source file of a test program.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "common/harness.h"
#include "common/registry.h"
#include "gpu_stages.h"

namespace fa_test {

// The stages under test that this GPU runs and that declare `feature`; none is a skip, not a pass.
inline std::vector<const fa::StageInfo*> stages_with(unsigned feature, const char* feature_name) {
  std::vector<const fa::StageInfo*> stages;
  for (const fa::StageInfo* stage : runnable_stages())
    if (stage->features & feature) stages.push_back(stage);
  if (stages.empty()) skip(std::string("no stage under test declares ") + feature_name);
  return stages;
}

// Every row where there are few, else the first, the last and 32 random rows of every (batch, head):
// the last row of a sequence is always checked, and with it the partial query block.
inline fa::CheckOptions general_check_options() {
  fa::CheckOptions options;
  options.full_check_max_rows = 4096;
  options.sampled_rows_per_head = 32;
  return options;
}

inline std::string describe_general(const fa::ProblemConfig& c) {
  std::ostringstream out;
  out << fa::dtype_name(c.dtype) << ", D " << c.head_dim << ", B " << c.batch << ", H " << c.heads
      << ", seq_q " << c.seq_q << ", seq_kv " << c.seq_kv << ", " << c.layout.name()
      << (c.causal ? ", causal" : "");
  if (c.kv_heads > 0) out << ", kv_heads " << c.kv_heads;
  return out.str();
}

// Small batch and heads where the sequences are long, so that the fp64 reference stays quick.
inline fa::ProblemConfig general_shape(int64_t seq_q, int64_t seq_kv, const fa::ProblemLayout& layout,
                                       bool causal) {
  fa::ProblemConfig c;
  const bool long_sequences = std::max(seq_q, seq_kv) >= 1000;
  c.batch = long_sequences ? 1 : 2;
  c.heads = long_sequences ? 2 : 3;
  c.seq_q = seq_q;
  c.seq_kv = seq_kv;
  c.layout = layout;
  c.causal = causal;
  c.seed = static_cast<uint64_t>(seq_q * 7919 + seq_kv);
  return c;
}

using EditInputs = std::function<void(fa::Problem&)>;
using CheckOutput = std::function<void(const fa::RunResult&)>;  // more assertions on a launched run
using Configure = std::function<void(fa::ProblemConfig&)>;      // heads, kv_heads, ... of a test's own

// Every stage of `stages` on (seq_q, seq_kv) in fp16/bf16 x head_dim 64/128, in the contiguous and
// the mixed layout, each checked against the fp64 reference; `check_output` adds the test's own
// assertions on every run that launched; `configure` may change the shape's other fields (after
// general_shape). CHECK, not REQUIRE, so one run lists every failing configuration.
inline void check_general_stages(const std::vector<const fa::StageInfo*>& stages, const std::string& scenario,
                                 int64_t seq_q, int64_t seq_kv, bool causal, const EditInputs& edit,
                                 const CheckOutput& check_output, const Configure& configure = nullptr) {
  for (const fa::ProblemLayout& layout :
       {fa::ProblemLayout(fa::LayoutKind::kContiguous), fa::ProblemLayout::mixed()}) {
    for (fa::DType dtype : {fa::DType::kFloat16, fa::DType::kBFloat16}) {
      for (int head_dim : {64, 128}) {
        fa::ProblemConfig config = general_shape(seq_q, seq_kv, layout, causal);
        config.dtype = dtype;
        config.head_dim = head_dim;
        if (configure) configure(config);
        fa::Problem problem(config);
        if (edit) edit(problem);
        for (const fa::StageInfo* stage : stages) {
          if (!supports(*stage, dtype, head_dim)) continue;
          const fa::RunResult run = fa::run_and_check(*stage, problem, general_check_options());
          INFO(scenario << " | stage " << stage->name << " | " << describe_general(config));
          INFO("launch: " << (run.status.ok() ? std::string("ok") : run.status.message));
          INFO("check: " << run.check.summary());
          CHECK(run.passed());
          if (!run.status.ok()) continue;
          check_output(run);
        }
      }
    }
  }
}

// The SMs of the current device: what a persistent launcher sizes its grid by.
inline int device_sm_count() {
  int device = 0, sm_count = 0;
  FA_CUDA_CHECK(cudaGetDevice(&device));
  FA_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  return sm_count;
}

// Persistent stages give a block several tiles only where the grid has more tiles than the GPU has
// SMs (twice as many under causal: a turn is a pair). Batch 4 x 32 heads x 5 query tiles of 128
// rows (seq_q 600) is 640 tiles: several per block on any GPU of up to 320 SMs (causal: 160).
constexpr int64_t kManyTilesBatch = 4;
constexpr int64_t kManyTilesSeq = 600;

// Problem edits shared by the general tests: q = 0 makes every score 0, so each row's weights are
// uniform and its LSE is log(keys seen); K times 8 makes large scores (exp2 near its range).
inline void q_zero(fa::Problem& problem) {
  fa::HostTensor q = problem.host_q();
  const fa::TensorLayout& l = q.layout;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      for (int64_t h = 0; h < l.heads; ++h)
        for (int64_t d = 0; d < l.head_dim; ++d) q.set(b, s, h, d, 0.0f);
  problem.set_inputs(q, problem.host_k(), problem.host_v());
}

inline void k_times_8(fa::Problem& problem) {
  fa::HostTensor k = problem.host_k();
  const fa::TensorLayout& l = k.layout;
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      for (int64_t h = 0; h < l.heads; ++h)
        for (int64_t d = 0; d < l.head_dim; ++d) k.set(b, s, h, d, 8.0f * k.at(b, s, h, d));
  problem.set_inputs(problem.host_q(), k, problem.host_v());
}

}  // namespace fa_test

#if defined(FA_TEST_SCHEDULES)
// ------------------------------------------------------------------------------------------------
// The 192-row tile (three consumer warpgroups at head_dim 64, from hopper_09_three_warpgroups on).
// From hopper_13_tile_choice on the launcher takes it where schedule.h's
// three_warpgroups_faster(params, block_kv, sm_count) says so, and the 128-row tile elsewhere. The
// programs that define FA_TEST_SCHEDULES (tests/general.cmake) link every stage's schedule.h through
// the generated table of tests/schedules.h, the same file the launcher calls, so a case can assert
// that the launcher takes the 192-row tile on its shape on this GPU: if a change of the rule (or a
// GPU with other SM counts) made it take the 128-row tile, the case fails instead of silently
// testing the other tile.
// ------------------------------------------------------------------------------------------------
#include "schedules.h"

namespace fa_test {

// The stage's tile choice at head_dim 64, or nullptr where its schedule.h has none (its tile at
// head_dim 64 is fixed).
inline schedules::TileChoiceFn tile_choice_of(const fa::StageInfo& stage) {
  for (int s = 0; s < schedules::kStageScheduleCount; ++s) {
    const schedules::StageSchedule& schedule = *schedules::kStageSchedules[s];
    if (std::string(schedule.stage) == stage.name) return schedule.three_warpgroups_faster;
  }
  return nullptr;
}

// Every stage of `stages` on (seq_q, seq_kv) at head_dim 64 in fp16/bf16, in the contiguous and the
// mixed layout, against the fp64 reference, as check_general_stages does; for each stage that
// chooses its tile, REQUIREd first: the launcher takes the 192-row tile for this problem on this
// GPU. `configure` sets the shape's batch, heads, ... (after general_shape).
inline void check_192_row_tile(const std::vector<const fa::StageInfo*>& stages, const std::string& scenario,
                               int64_t seq_q, int64_t seq_kv, bool causal, const EditInputs& edit,
                               const CheckOutput& check_output, const Configure& configure) {
  const int sm_count = device_sm_count();
  int choosing = 0;
  for (const fa::StageInfo* stage : stages) choosing += tile_choice_of(*stage) != nullptr ? 1 : 0;
  if (choosing == 0) {
    skip(scenario +
         ": no stage under test chooses its tile at head_dim 64 (schedule.h: three_warpgroups_faster)");
    return;
  }
  for (const fa::ProblemLayout& layout :
       {fa::ProblemLayout(fa::LayoutKind::kContiguous), fa::ProblemLayout::mixed()}) {
    for (fa::DType dtype : {fa::DType::kFloat16, fa::DType::kBFloat16}) {
      fa::ProblemConfig config = general_shape(seq_q, seq_kv, layout, causal);
      config.dtype = dtype;
      config.head_dim = 64;
      if (configure) configure(config);
      fa::Problem problem(config);
      if (edit) edit(problem);
      for (const fa::StageInfo* stage : stages) {
        if (!supports(*stage, dtype, 64)) continue;
        INFO(scenario << " | stage " << stage->name << " | " << describe_general(config) << " | " << sm_count
                      << " SMs");
        if (const schedules::TileChoiceFn three_warpgroups_faster = tile_choice_of(*stage)) {
          INFO(
              "the launcher takes the 128-row tile on this shape: the case no longer covers the 192-row tile "
              "(make the grid larger)");
          REQUIRE(three_warpgroups_faster(problem.params(), stage->block_kv, sm_count));
        }
        const fa::RunResult run = fa::run_and_check(*stage, problem, general_check_options());
        INFO("launch: " << (run.status.ok() ? std::string("ok") : run.status.message));
        INFO("check: " << run.check.summary());
        CHECK(run.passed());
        if (run.status.ok() && check_output) check_output(run);
      }
    }
  }
}

}  // namespace fa_test
#endif  // FA_TEST_SCHEDULES
