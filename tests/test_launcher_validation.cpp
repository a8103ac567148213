// Every registered stage's launcher must reject what the contract rejects, with a message that
// names the problem, before it touches the GPU. No GPU is needed: launch() validates first and a
// rejected call launches nothing, so the tensor pointers below are fake (16-byte aligned, never
// dereferenced). A valid call is never launched here; instead the test checks that the baseline
// parameters pass validate_params, so each case differs from a valid call in exactly one way.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "fa_catch.h"
#include "valid_params.h"

#include "common/params.h"
#include "common/registry.h"

using fa::AttentionParams;
using fa::DType;
using fa::StageInfo;

namespace {

// A valid call for `stage`: 2 query and 3 K/V blocks (tests/valid_params.h).
AttentionParams valid_params(const StageInfo& stage) {
  return fa_test::valid_params(stage, 2, 3, 2 * stage.block_q, 3 * stage.block_kv);
}

struct InvalidCase {
  std::string name;
  std::function<void(AttentionParams&, const StageInfo&)> break_it;
  std::string keyword;  // the message must contain it
  // Feature bits of a stage that accepts the case (any_length: test_any_length_validation; gqa:
  // test_gqa_reference); 0: every stage rejects it.
  unsigned accepted_with = 0;
};

std::vector<InvalidCase> invalid_cases() {
  std::vector<InvalidCase> cases = {
      {"head_dim 96", [](AttentionParams& p, const StageInfo&) { p.head_dim = 96; }, "head_dim 96"},
      {"seq_q not a multiple of block_q",
       [](AttentionParams& p, const StageInfo& s) { p.seq_q = s.block_q + 16; }, "seq_q",
       fa::kFeatureAnyLength},
      {"seq_q smaller than block_q", [](AttentionParams& p, const StageInfo& s) { p.seq_q = s.block_q / 2; },
       "seq_q", fa::kFeatureAnyLength},
      {"seq_kv not a multiple of block_kv",
       [](AttentionParams& p, const StageInfo& s) { p.seq_kv = 2 * s.block_kv + 8; }, "seq_kv",
       fa::kFeatureAnyLength},
      // kv_heads: never unset, never 0, always dividing heads (3 here); fewer than heads only for gqa.
      {"kv_heads 0 (unset)", [](AttentionParams& p, const StageInfo&) { p.kv_heads = 0; }, "kv_heads 0"},
      {"kv_heads -3", [](AttentionParams& p, const StageInfo&) { p.kv_heads = -3; }, "kv_heads -3"},
      {"kv_heads 2 does not divide heads 3", [](AttentionParams& p, const StageInfo&) { p.kv_heads = 2; },
       "divide heads 3"},
      {"kv_heads 6 > heads 3", [](AttentionParams& p, const StageInfo&) { p.kv_heads = 6; },
       "divide heads 3"},
      {"kv_heads 1 < heads 3 (multi-query)", [](AttentionParams& p, const StageInfo&) { p.kv_heads = 1; },
       "\"gqa\"", fa::kFeatureGqa},
      {"invalid dtype value in q",
       [](AttentionParams& p, const StageInfo&) { p.q.dtype = static_cast<DType>(7); }, "dtype"},
      {"invalid dtype value in o",
       [](AttentionParams& p, const StageInfo&) { p.o.dtype = static_cast<DType>(7); }, "dtype"},
      {"mismatched dtypes (v differs)",
       [](AttentionParams& p, const StageInfo&) {
         p.v.dtype = p.q.dtype == DType::kFloat16 ? DType::kBFloat16 : DType::kFloat16;
       },
       "dtype"},
      {"misaligned pointer (0x1008)",
       [](AttentionParams& p, const StageInfo&) { p.k.data = reinterpret_cast<void*>(0x1008); }, "aligned"},
      {"seq stride not a multiple of 8", [](AttentionParams& p, const StageInfo&) { p.q.seq_stride += 4; },
       "multiple"},
      {"head stride not a multiple of 8",
       [](AttentionParams& p, const StageInfo&) { p.v.head_stride = p.head_dim + 1; }, "multiple"},
      {"batch stride not a multiple of 8",
       [](AttentionParams& p, const StageInfo&) { p.o.batch_stride += 2; }, "multiple"},
      {"zero seq stride", [](AttentionParams& p, const StageInfo&) { p.k.seq_stride = 0; }, "positive"},
      {"negative head stride", [](AttentionParams& p, const StageInfo&) { p.q.head_stride = -8; },
       "positive"},
      {"negative batch stride",
       [](AttentionParams& p, const StageInfo&) { p.o.batch_stride = -p.o.batch_stride; }, "positive"},
      {"NaN softmax_scale",
       [](AttentionParams& p, const StageInfo&) {
         p.softmax_scale = std::numeric_limits<float>::quiet_NaN();
       },
       "softmax_scale"},
      {"infinite softmax_scale",
       [](AttentionParams& p, const StageInfo&) { p.softmax_scale = std::numeric_limits<float>::infinity(); },
       "softmax_scale"},
      {"zero softmax_scale", [](AttentionParams& p, const StageInfo&) { p.softmax_scale = 0.0f; },
       "softmax_scale"},
      // The stages from ampere_07_fast_softmax on take the row max of the raw scores, which is only
      // the max of the scaled scores for a positive scale.
      {"negative softmax_scale", [](AttentionParams& p, const StageInfo&) { p.softmax_scale = -0.125f; },
       "softmax_scale"},
      {"grid of more than 2^31-1 blocks",
       [](AttentionParams& p, const StageInfo& s) {
         p.batch = 1024;
         p.heads = p.kv_heads = 1024;
         p.seq_q = int64_t{s.block_q} * 2048;  // 2^31 blocks in all: one too many
         for (fa::TensorView* t : {&p.q, &p.o}) {
           t->batch_stride = p.seq_q * p.heads * p.head_dim;
           t->seq_stride = p.heads * p.head_dim;
         }
       },
       "2^31-1"},
      {"batch beyond int range", [](AttentionParams& p, const StageInfo&) { p.batch = int64_t{1} << 33; },
       "2^31-1"},
      // num_splits: 0 (the stage chooses) everywhere; a forced count only where split_kv is declared,
      // and never negative or above kMaxNumSplits.
      {"num_splits -1", [](AttentionParams& p, const StageInfo&) { p.num_splits = -1; }, "num_splits -1"},
      {"num_splits above kMaxNumSplits",
       [](AttentionParams& p, const StageInfo&) { p.num_splits = fa::kMaxNumSplits + 1; },
       "num_splits " + std::to_string(fa::kMaxNumSplits + 1)},
      {"num_splits 2 (forced split-KV)", [](AttentionParams& p, const StageInfo&) { p.num_splits = 2; },
       "\"split_kv\"", fa::kFeatureSplitKv},
      // seqlens_k: per-sequence key lengths only where the stage declares them; never misaligned.
      // (The pointers are fake: validation reads no length, the host cannot.)
      {"seqlens_k given (per-sequence key lengths)",
       [](AttentionParams& p, const StageInfo&) { p.seqlens_k = reinterpret_cast<const int32_t*>(0x2000); },
       "\"seqlens_k\"", fa::kFeatureSeqlensK},
      {"seqlens_k misaligned (0x2002)",
       [](AttentionParams& p, const StageInfo&) { p.seqlens_k = reinterpret_cast<const int32_t*>(0x2002); },
       "seqlens_k pointer is not 4-byte aligned"},
      // block_table: a paged KV cache only where the stage declares it; never misaligned; page_size
      // and max_pages only with a table. (The table pointer is fake: the host cannot read it.)
      {"block_table given (a paged KV cache)",
       [](AttentionParams& p, const StageInfo&) {
         p.block_table = reinterpret_cast<const int32_t*>(0x3000);
         p.page_size = 16;
         p.max_pages = (p.seq_kv + 15) / 16;
         p.block_table_batch_stride = p.max_pages;
       },
       "\"paged_kv\"", fa::kFeaturePagedKv},
      {"block_table misaligned (0x3002)",
       [](AttentionParams& p, const StageInfo&) {
         p.block_table = reinterpret_cast<const int32_t*>(0x3002);
         p.page_size = 16;
         p.max_pages = (p.seq_kv + 15) / 16;
         p.block_table_batch_stride = p.max_pages;
       },
       "block_table pointer is not 4-byte aligned"},
      {"page_size without a block_table", [](AttentionParams& p, const StageInfo&) { p.page_size = 16; },
       "block_table is null"},
  };
  // Zero and negative sizes, one field at a time.
  const std::pair<const char*, int64_t AttentionParams::*> sizes[] = {
      {"batch", &AttentionParams::batch},
      {"heads", &AttentionParams::heads},
      {"seq_q", &AttentionParams::seq_q},
      {"seq_kv", &AttentionParams::seq_kv},
      {"head_dim", &AttentionParams::head_dim}};
  for (const auto& size : sizes) {
    for (int64_t value : {int64_t{0}, int64_t{-1}, int64_t{-128}}) {
      const auto field = size.second;
      cases.push_back({std::string(size.first) + " = " + std::to_string(value),
                       [field, value](AttentionParams& p, const StageInfo&) { p.*field = value; },
                       "positive"});
    }
  }
  // A null pointer in each tensor.
  for (int i = 0; i < 4; ++i) {
    static const char* names[4] = {"q", "k", "v", "o"};
    cases.push_back({std::string("null ") + names[i] + " pointer",
                     [i](AttentionParams& p, const StageInfo&) {
                       fa::TensorView* tensors[4] = {&p.q, &p.k, &p.v, &p.o};
                       tensors[i]->data = nullptr;
                     },
                     std::string(names[i]) + " is a null pointer"});
  }
  return cases;
}

// `p` differs from a valid call in one way: validation refuses it, and so does the launcher, before
// the launch (the pointers are fake: a call that validation accepts must never reach it), with a
// message that starts with the stage's name and contains `keyword`.
void expect_refused_before_launch(const StageInfo& stage, const AttentionParams& p, const std::string& keyword) {
  const bool accepted = fa::validate_params(p, stage).ok();
  CHECK_FALSE(accepted);
  if (accepted) return;
  const fa::Status status = stage.launch(p, /*stream=*/nullptr);
  INFO("launch() -> \"" << status.message << "\"");
  CHECK_FALSE(status.ok());
  CHECK_THAT(status.message, Catch::Contains(keyword));
  CHECK_THAT(status.message, Catch::StartsWith(stage.name));
}

}  // namespace

TEST_CASE("every registered stage declares a usable launcher and what STAGES.md promises", "[validation]") {
  const auto& stages = fa::registered_stages();
  REQUIRE_FALSE(stages.empty());
  for (const StageInfo* stage : stages) {
    INFO("stage " << stage->name);
    CHECK(stage->block_q > 0);
    CHECK(stage->block_kv > 0);
    CHECK(stage->launch != nullptr);
    CHECK(fa::find_stage(stage->name) == stage);
    const std::string id = stage->name;  // <track>_NN_name: also found as <track>_NN
    CHECK(fa::find_stage(id.substr(0, id.find('_', id.find('_') + 1))) == stage);
    // A parent, where declared, is a registered stage that comes earlier in the book (the registry's
    // order: track by track, in number order), so tracks branch and never loop.
    if (*stage->parent != '\0') {
      const StageInfo* parent = fa::find_stage(stage->parent);
      INFO("parent " << stage->parent);
      REQUIRE(parent != nullptr);
      CHECK(std::find(stages.begin(), stages.end(), parent) < std::find(stages.begin(), stages.end(), stage));
    }
    // Every stage supports what STAGES.md promises.
    for (int d : {64, 128}) CHECK(std::count(stage->head_dims.begin(), stage->head_dims.end(), d) == 1);
    for (DType t : {DType::kFloat16, DType::kBFloat16})
      CHECK(std::count(stage->dtypes.begin(), stage->dtypes.end(), t) == 1);
  }
}

TEST_CASE("every launcher rejects invalid parameters before touching the GPU", "[validation]") {
  const std::vector<InvalidCase> cases = invalid_cases();
  for (const StageInfo* stage : fa::registered_stages()) {
    for (int head_dim : stage->head_dims) {
      for (DType dtype : stage->dtypes) {
        AttentionParams valid = valid_params(*stage);
        valid.head_dim = head_dim;
        valid.softmax_scale = fa::default_softmax_scale(head_dim);
        for (fa::TensorView* t : {&valid.q, &valid.k, &valid.v, &valid.o}) {
          t->dtype = dtype;
          t->head_stride = head_dim;
          t->seq_stride = valid.heads * head_dim;
          t->batch_stride = (t == &valid.q || t == &valid.o ? valid.seq_q : valid.seq_kv) * t->seq_stride;
        }
        {
          INFO("stage " << stage->name << ": the baseline parameters must be valid");
          const fa::Status baseline = fa::validate_params(valid, *stage);
          INFO(baseline.message);
          REQUIRE(baseline.ok());
        }
        for (const InvalidCase& c : cases) {
          if (stage->features & c.accepted_with) continue;
          AttentionParams p = valid;
          c.break_it(p, *stage);
          INFO("stage " << stage->name << ", head_dim " << head_dim << ", " << fa::dtype_name(dtype) << ": "
                        << c.name);
          expect_refused_before_launch(*stage, p, c.keyword);
        }
      }
    }
  }
}

TEST_CASE("a stage that declares seqlens_k accepts an aligned pointer (checked, not launched)",
          "[validation]") {
  int declaring = 0;
  for (const StageInfo* stage : fa::registered_stages()) {
    if ((stage->features & fa::kFeatureSeqlensK) == 0) continue;
    AttentionParams p = valid_params(*stage);
    p.seqlens_k = reinterpret_cast<const int32_t*>(0x2000);
    const fa::Status status = fa::validate_params(p, *stage);
    INFO("stage " << stage->name << ": " << status.message);
    CHECK(status.ok());
    ++declaring;
  }
  CHECK(declaring > 0);  // decode_03_seqlens_k at least
}

// A paged call for a stage that declares paged_kv: pages of `page_size` rows, enough of them for seq_kv.
AttentionParams paged_params(const StageInfo& stage, int page_size) {
  AttentionParams p = valid_params(stage);
  p.block_table = reinterpret_cast<const int32_t*>(0x3000);
  p.page_size = page_size;
  p.max_pages = (p.seq_kv + page_size - 1) / page_size;
  p.block_table_batch_stride = p.max_pages;
  return p;
}

TEST_CASE("a stage that declares paged_kv checks its page size, table and lengths (checked, not launched)",
          "[validation][paged_kv]") {
  int declaring = 0;
  for (const StageInfo* stage : fa::registered_stages()) {
    if ((stage->features & fa::kFeaturePagedKv) == 0) continue;
    ++declaring;
    INFO("stage " << stage->name << ", block_kv " << stage->block_kv);
    // Accepted: any multiple of 16, dividing the K/V block or not (48, 80 and block_kv + 16 straddle
    // blocks), with seqlens_k or without, a shared table row (batch stride 0), a longer table.
    for (int page_size : {16, 32, 48, 64, 80, 128, 256, stage->block_kv + 16, 3 * stage->block_kv}) {
      AttentionParams p = paged_params(*stage, page_size);
      const fa::Status status = fa::validate_params(p, *stage);
      INFO("page_size " << page_size << ": " << status.message);
      CHECK(status.ok());
      p.seqlens_k = reinterpret_cast<const int32_t*>(0x2000);
      p.block_table_batch_stride = 0;
      p.max_pages += 5;
      CHECK(fa::validate_params(p, *stage).ok());
    }
    struct Case {
      std::string name;
      std::function<void(AttentionParams&)> break_it;
      std::string keyword;
    };
    const std::vector<Case> cases = {
        {"page_size 0", [](AttentionParams& p) { p.page_size = 0; }, "multiple of 16"},
        {"page_size -16", [](AttentionParams& p) { p.page_size = -16; }, "multiple of 16"},
        {"page_size 8", [](AttentionParams& p) { p.page_size = 8; }, "multiple of 16"},
        {"page_size 24", [](AttentionParams& p) { p.page_size = 24; }, "multiple of 16"},
        {"page_size 40", [](AttentionParams& p) { p.page_size = 40; }, "multiple of 16"},
        {"block_table misaligned (0x3001)",
         [](AttentionParams& p) { p.block_table = reinterpret_cast<const int32_t*>(0x3001); }, "4-byte aligned"},
        {"max_pages 0", [](AttentionParams& p) { p.max_pages = 0; }, "max_pages 0"},
        {"max_pages x page_size < seq_kv", [](AttentionParams& p) { p.max_pages -= 1; }, "fewer than seq_kv"},
        {"max_pages x page_size > 2^31-1", [](AttentionParams& p) { p.max_pages = int64_t{1} << 27; }, "2^31-1"},
        {"table rows overlap (batch stride 1)", [](AttentionParams& p) { p.block_table_batch_stride = 1; },
         "at least max_pages"},
        {"table batch stride -1", [](AttentionParams& p) { p.block_table_batch_stride = -1; },
         "at least max_pages"},
    };
    for (const Case& c : cases) {
      AttentionParams p = paged_params(*stage, 16);
      REQUIRE(p.batch > 1);  // the overlap case needs two rows
      c.break_it(p);
      INFO(c.name);
      expect_refused_before_launch(*stage, p, c.keyword);
    }
  }
  CHECK(declaring > 0);  // decode_04_paged_kv at least
}

TEST_CASE("a grid of exactly 2^31-1 blocks is still valid (checked, not launched)", "[validation]") {
  for (const StageInfo* stage : fa::registered_stages()) {
    INFO("stage " << stage->name);
    AttentionParams p = valid_params(*stage);
    p.batch = 1;
    p.heads = p.kv_heads = 1;
    p.seq_q = int64_t{stage->block_q} * std::numeric_limits<int32_t>::max();  // 2^31-1 query blocks
    for (fa::TensorView* t : {&p.q, &p.o}) t->batch_stride = p.seq_q * t->seq_stride;
    const fa::Status status = fa::validate_params(p, *stage);
    INFO(status.message);
    CHECK(status.ok());
  }
}

// The registry is generated by CMake from the same glob, so this catches a stale build directory
// (a stage folder added or removed since the last configure), a registry that drops or repeats a
// stage, and a name that is not its folder's. FA_SOURCE_DIR comes from tests/CMakeLists.txt.
TEST_CASE("the registered stages are exactly the folders stages/<track>/*/stage.json", "[validation]") {
  namespace fs = std::filesystem;
  std::set<std::string> folders;  // as ids: <track>_NN_name
  for (const fs::directory_entry& track : fs::directory_iterator(fs::path(FA_SOURCE_DIR) / "stages")) {
    if (!track.is_directory()) continue;
    for (const fs::directory_entry& entry : fs::directory_iterator(track.path()))
      if (entry.is_directory() && fs::exists(entry.path() / "stage.json"))
        folders.insert(track.path().filename().string() + "_" + entry.path().filename().string());
  }
  std::set<std::string> registered;
  for (const StageInfo* stage : fa::registered_stages()) registered.insert(stage->name);
  std::string folder_list, registered_list;
  for (const std::string& f : folders) folder_list += " " + f;
  for (const std::string& r : registered) registered_list += " " + r;
  INFO("folders:" << folder_list << "\nregistered:" << registered_list);
  CHECK(folders.size() >= 8);
  CHECK(registered == folders);
  CHECK(fa::registered_stages().size() == registered.size());  // none registered twice
}

// Every target a stage may declare runs on compute capability 9.0 (sm_80 code runs on every later
// GPU, sm_90a code is made for 9.0), so on the H200 no stage may be skipped. A declaration that
// would (a minimum compute capability of 100, say) fails here, without a GPU.
TEST_CASE("every registered stage runs on compute capability 9.0", "[validation]") {
  for (const StageInfo* stage : fa::registered_stages()) {
    INFO("stage " << stage->name << ": target " << stage->target << ", minimum compute capability "
                  << stage->min_compute_capability);
    CHECK(fa::stage_runs_on(*stage, 90));
  }
}
