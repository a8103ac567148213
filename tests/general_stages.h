// What the general-attention GPU tests (tests/test_gpu_any_length.cpp, tests/test_gpu_causal.cpp,
// tests/test_gpu_gqa.cpp, ...) share: the stages declaring a feature, the shapes, and the loop that
// checks each of them on one problem in fp16/bf16 x head_dim 64/128 and in the contiguous and the
// mixed layout. Include it after gpu_stages.h, in one source file of a test program.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

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

}  // namespace fa_test
