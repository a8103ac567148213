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
// Every stage that does not declare split_kv must reject num_splits != 0 and write nothing.
// Per-sequence key lengths (AttentionParams::seqlens_k; decode_03_seqlens_k on): lengths 0, 1, 63,
// 64, 65 and longer mixed in one batch, causal at seq_q 1 and 8 (lengths below seq_q: rows that see
// no key), GQA packed, forced split counts, the LSE, out-of-range lengths (clamped), each sequence
// checked against the fp64 reference of its own length; the K/V rows past a sequence's length hold
// NaN, so a kernel that reads one fails. Every stage that does not declare seqlens_k must reject it
// and write nothing. A paged KV cache (AttentionParams::block_table; decode_04_paged_kv on; tag
// [paged_kv]): pages of 16, 64 and 256 rows scattered over a pool in a random order, so a wrong
// translation reads another sequence's keys; the pool's rows that hold no key (past a sequence's
// length, and spare pages no sequence uses) NaN; mixed lengths with 0 and lengths that are not
// multiples of the page size; causal at seq_q 1 and 8; GQA packed; forced split counts; the LSE;
// each sequence against the fp64 reference on its gathered contiguous keys. Without a GPU this
// program exits with 77 (skipped).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
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
// With per-sequence lengths (seqlens_k, clamped as the kernel does; empty: seq_kv), the keys each
// sequence's own length lets a row see.
void rows_pick_keys_within(fa::Problem& problem, const std::vector<int32_t>& seqlens) {
  fa::HostTensor q = problem.host_q();
  const fa::HostTensor& k = problem.host_k();
  const fa::TensorLayout& l = q.layout;
  const ProblemConfig& c = problem.config();
  const int64_t group = c.heads / problem.kv_heads();
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t t = 0; t < l.seq; ++t) {
      const int64_t seq_kv =
          seqlens.empty()
              ? c.seq_kv
              : std::min<int64_t>(std::max<int64_t>(seqlens[static_cast<size_t>(b)], 0), c.seq_kv);
      const int64_t keys_seen = c.causal ? std::min(t + seq_kv - c.seq_q + 1, seq_kv) : seq_kv;
      for (int64_t h = 0; h < l.heads; ++h) {
        if (keys_seen <= 0) continue;  // a row that sees no key: O = 0 whatever Q is
        const int64_t key = (37 * h + 11 * t) % keys_seen;
        for (int64_t d = 0; d < l.head_dim; ++d) q.set(b, t, h, d, 2.0f * k.at(b, key, h / group, d));
      }
    }
  problem.set_inputs(q, problem.host_k(), problem.host_v());
}

void rows_pick_their_own_keys(fa::Problem& problem) {
  rows_pick_keys_within(problem, {});
}

int64_t written_elements(const HostTensor& o) {
  return static_cast<int64_t>(o.raw.size()) - std::count(o.raw.begin(), o.raw.end(), uint16_t{0xFFFF});
}

// ------------------------------ per-sequence key lengths ------------------------------

std::vector<const StageInfo*> seqlens_stages() {
  return fa_test::stages_with(fa::kFeatureSeqlensK, "seqlens_k");
}

// The length the kernel uses for a requested one: clamped to [0, seq_kv] (params.h).
int64_t clamped_length(int32_t requested, int64_t seq_kv) {
  return std::min<int64_t>(std::max<int64_t>(requested, 0), seq_kv);
}

// Batch b's first `seq` rows of a [batch, seq, heads, head_dim] host tensor, as a contiguous batch of
// one (seq may be 0).
HostTensor sequence_rows(const HostTensor& t, int64_t b, int64_t seq) {
  HostTensor out;
  out.dtype = t.dtype;
  fa::TensorLayout& l = out.layout;
  l.batch = 1;
  l.seq = seq;
  l.heads = t.layout.heads;
  l.head_dim = t.layout.head_dim;
  l.head_stride = l.head_dim;
  l.seq_stride = l.heads * l.head_dim;
  l.batch_stride = seq * l.seq_stride;
  l.storage_elems = l.batch_stride;
  out.raw.resize(static_cast<size_t>(l.storage_elems));
  for (int64_t s = 0; s < seq; ++s)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t d = 0; d < l.head_dim; ++d)
        out.raw[static_cast<size_t>(l.offset(0, s, h, d))] =
            t.raw[static_cast<size_t>(t.layout.offset(b, s, h, d))];
  return out;
}

// The fp64 reference of a batch whose sequences have their own key lengths: each sequence's query
// rows against the first clamped_length(seqlens[b]) keys of its K and V, exactly as the reference
// computes one sequence of that length (causal: bottom-right aligned to it; length 0: O = 0, LSE -inf).
fa::ReferenceRows reference_per_sequence(Problem& problem, const std::vector<int32_t>& seqlens,
                                         const fa::CheckOptions& options) {
  const HostTensor &q = problem.host_q(), &k = problem.host_k(), &v = problem.host_v();
  fa::ReferenceRows all;
  for (int64_t b = 0; b < q.layout.batch; ++b) {
    const int64_t keys = clamped_length(seqlens[static_cast<size_t>(b)], k.layout.seq);
    fa::ReferenceRows one = fa::compute_reference_rows(
        sequence_rows(q, b, q.layout.seq), sequence_rows(k, b, keys), sequence_rows(v, b, keys),
        problem.softmax_scale(), options, problem.config().causal);
    for (auto& row : one.rows) row.b = b;
    all.rows.insert(all.rows.end(), one.rows.begin(), one.rows.end());
    all.ref.insert(all.ref.end(), one.ref.begin(), one.ref.end());
    all.baseline.insert(all.baseline.end(), one.baseline.begin(), one.baseline.end());
    all.lse.insert(all.lse.end(), one.lse.begin(), one.lse.end());
    all.max_score.insert(all.max_score.end(), one.max_score.begin(), one.max_score.end());
    all.baseline_lse.insert(all.baseline_lse.end(), one.baseline_lse.begin(), one.baseline_lse.end());
    all.inputs_finite = all.inputs_finite && one.inputs_finite;
  }
  return all;
}

// K and V rows at and past each sequence's length become NaN: a kernel that reads one (a key it
// should not see, or V behind a probability of 0: 0 x NaN is NaN) writes NaN there.
void poison_past_lengths(Problem& problem, const std::vector<int32_t>& seqlens) {
  HostTensor k = problem.host_k(), v = problem.host_v();
  const fa::TensorLayout& l = k.layout;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = clamped_length(seqlens[static_cast<size_t>(b)], l.seq); s < l.seq; ++s)
      for (int64_t h = 0; h < l.heads; ++h)
        for (int64_t d = 0; d < l.head_dim; ++d) {
          k.set(b, s, h, d, nan);
          v.set(b, s, h, d, nan);
        }
  problem.set_inputs(problem.host_q(), k, v);
}

// The lengths in device memory, for one launch after another.
class DeviceLengths {
 public:
  explicit DeviceLengths(const std::vector<int32_t>& lengths) {
    FA_CUDA_CHECK(cudaMalloc(&data_, lengths.size() * sizeof(int32_t)));
    FA_CUDA_CHECK(
        cudaMemcpy(data_, lengths.data(), lengths.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  ~DeviceLengths() { cudaFree(data_); }
  DeviceLengths(const DeviceLengths&) = delete;
  DeviceLengths& operator=(const DeviceLengths&) = delete;
  const int32_t* data() const { return data_; }

 private:
  int32_t* data_ = nullptr;
};

std::string describe_lengths(const std::vector<int32_t>& seqlens) {
  std::string text = "seqlens_k {";
  for (size_t i = 0; i < seqlens.size(); ++i) text += (i ? ", " : "") + std::to_string(seqlens[i]);
  return text + "}";
}

// Every stage that declares seqlens_k on the problem `config` describes (config.batch sequences of
// seq_kv keys at most) with these per-sequence lengths, at each split count in `counts`, in both
// dtypes and head dims: O and the LSE against the per-sequence fp64 reference.
void check_seqlens_stages(const std::string& scenario, ProblemConfig config,
                          const std::vector<int32_t>& seqlens, const std::vector<int>& counts,
                          const fa_test::EditInputs& edit = nullptr) {
  REQUIRE(static_cast<int64_t>(seqlens.size()) == config.batch);
  config.lse = true;
  const fa::CheckOptions options = fa_test::general_check_options();
  const DeviceLengths lengths(seqlens);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (int head_dim : {64, 128}) {
      config.dtype = dtype;
      config.head_dim = head_dim;
      Problem problem(config);
      if (edit) edit(problem);
      poison_past_lengths(problem, seqlens);
      const fa::ReferenceRows reference = reference_per_sequence(problem, seqlens, options);
      for (const StageInfo* stage : seqlens_stages()) {
        if (!fa_test::supports(*stage, dtype, head_dim)) continue;
        for (int num_splits : counts) {
          problem.poison_output();
          fa::AttentionParams params = problem.params();
          params.num_splits = num_splits;
          params.seqlens_k = lengths.data();
          fa::RunResult run = fa::finish_launch(*stage, problem, stage->launch(params, nullptr), nullptr);
          if (run.status.ok()) {
            run.check = fa::check_against_reference(reference, run.output, options);
            run.lse_check = fa::check_lse_against_reference(reference, run.lse, options);
          }
          INFO(scenario << " | stage " << stage->name << " | " << describe(config) << " | "
                        << describe_lengths(seqlens) << " | num_splits " << num_splits);
          INFO("launch: " << (run.status.ok() ? std::string("ok") : run.status.message));
          INFO("check: " << run.check.summary());
          INFO("lse check: " << run.lse_check.summary());
          CHECK(run.passed());
        }
      }
    }
  }
}

// ------------------------------ paged KV cache ------------------------------

std::vector<const StageInfo*> paged_stages() {
  return fa_test::stages_with(fa::kFeaturePagedKv, "paged_kv");
}

// The problem's K and V cut into pages of page_size rows and scattered over one pool: sequence b's
// slot i (its keys i * page_size ..) is pool page table[b * max_pages + i], a random permutation of
// batch * max_pages pages plus `spare` pages that no sequence uses. Every pool row that holds no key
// of its sequence -- past the sequence's length (the problem's K and V are NaN there already:
// poison_past_lengths) and every row of the spare pages -- is NaN, so a wrong page or row read fails.
class PagedCache {
 public:
  PagedCache(Problem& problem, int page_size, uint64_t seed, int64_t spare = 3) : page_size_(page_size) {
    const HostTensor &k = problem.host_k(), &v = problem.host_v();
    const fa::TensorLayout& l = k.layout;
    max_pages_ = (l.seq + page_size - 1) / page_size;
    const int64_t pages = l.batch * max_pages_ + spare;
    std::vector<int32_t> table(static_cast<size_t>(l.batch * max_pages_));
    std::vector<int32_t> order(static_cast<size_t>(pages));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    std::copy(order.begin(), order.begin() + static_cast<int64_t>(table.size()), table.begin());
    HostTensor k_pool, v_pool;
    for (HostTensor* pool : {&k_pool, &v_pool}) {
      pool->dtype = k.dtype;
      pool->layout = fa::TensorLayout::make(pages, page_size, l.heads, l.head_dim, fa::LayoutSpec());
      pool->raw.assign(static_cast<size_t>(pool->layout.storage_elems), uint16_t{0xFFFF});  // NaN in fp16 and bf16
    }
    for (int64_t b = 0; b < l.batch; ++b)
      for (int64_t s = 0; s < l.seq; ++s) {
        const int64_t page = table[static_cast<size_t>(b * max_pages_ + s / page_size)];
        for (int64_t h = 0; h < l.heads; ++h)
          for (int64_t d = 0; d < l.head_dim; ++d) {
            const auto to = static_cast<size_t>(k_pool.layout.offset(page, s % page_size, h, d));
            k_pool.raw[to] = k.raw[static_cast<size_t>(l.offset(b, s, h, d))];
            v_pool.raw[to] = v.raw[static_cast<size_t>(v.layout.offset(b, s, h, d))];
          }
      }
    k_pool_ = fa::DeviceTensor(k_pool.layout, k.dtype);
    v_pool_ = fa::DeviceTensor(v_pool.layout, v.dtype);
    k_pool_.upload(k_pool);
    v_pool_.upload(v_pool);
    FA_CUDA_CHECK(cudaMalloc(&table_, table.size() * sizeof(int32_t)));
    FA_CUDA_CHECK(cudaMemcpy(table_, table.data(), table.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  ~PagedCache() { cudaFree(table_); }
  PagedCache(const PagedCache&) = delete;
  PagedCache& operator=(const PagedCache&) = delete;

  // The problem's call, on the pools through the block table.
  void apply(fa::AttentionParams& params) const {
    params.k = k_pool_.view();
    params.v = v_pool_.view();
    params.block_table = table_;
    params.block_table_batch_stride = max_pages_;
    params.max_pages = max_pages_;
    params.page_size = page_size_;
  }

 private:
  int page_size_;
  int64_t max_pages_ = 0;
  fa::DeviceTensor k_pool_, v_pool_;
  int32_t* table_ = nullptr;
};

// Every stage that declares paged_kv on the problem `config` describes, its K and V paged at each of
// `page_sizes`, with these per-sequence lengths (passed as seqlens_k, or, with lengths_given false,
// not passed: every sequence then has seq_kv keys and `seqlens` must say so), at each split count in
// `counts`, in both dtypes and head dims: O and the LSE against the per-sequence fp64 reference of
// the problem's contiguous K and V (the keys the pages hold, gathered).
void check_paged_stages(const std::string& scenario, ProblemConfig config, const std::vector<int32_t>& seqlens,
                        const std::vector<int>& page_sizes, const std::vector<int>& counts,
                        const fa_test::EditInputs& edit = nullptr, bool lengths_given = true) {
  REQUIRE(static_cast<int64_t>(seqlens.size()) == config.batch);
  config.lse = true;
  const fa::CheckOptions options = fa_test::general_check_options();
  const DeviceLengths lengths(seqlens);
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    for (int head_dim : {64, 128}) {
      config.dtype = dtype;
      config.head_dim = head_dim;
      Problem problem(config);
      if (edit) edit(problem);
      poison_past_lengths(problem, seqlens);
      const fa::ReferenceRows reference = reference_per_sequence(problem, seqlens, options);
      for (int page_size : page_sizes) {
        const PagedCache cache(problem, page_size, config.seed * 131 + static_cast<uint64_t>(page_size));
        for (const StageInfo* stage : paged_stages()) {
          if (!fa_test::supports(*stage, dtype, head_dim)) continue;
          for (int num_splits : counts) {
            problem.poison_output();
            fa::AttentionParams params = problem.params();
            params.num_splits = num_splits;
            if (lengths_given) params.seqlens_k = lengths.data();
            cache.apply(params);
            fa::RunResult run = fa::finish_launch(*stage, problem, stage->launch(params, nullptr), nullptr);
            if (run.status.ok()) {
              run.check = fa::check_against_reference(reference, run.output, options);
              run.lse_check = fa::check_lse_against_reference(reference, run.lse, options);
            }
            INFO(scenario << " | stage " << stage->name << " | " << describe(config) << " | page_size " << page_size
                          << " | " << (lengths_given ? describe_lengths(seqlens) : std::string("no seqlens_k"))
                          << " | num_splits " << num_splits);
            INFO("launch: " << (run.status.ok() ? std::string("ok") : run.status.message));
            INFO("check: " << run.check.summary());
            INFO("lse check: " << run.lse_check.summary());
            CHECK(run.passed());
          }
        }
      }
    }
  }
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

TEST_CASE(
    "decode: per-sequence key lengths 0, 1, 63, 64, 65 and 1000 in one batch, every kind of split count",
    "[gpu][decode][seqlens_k]") {
  // Around the K/V block of 64: one key, a block but one, a whole block, a block and one key; 0 (O =
  // 0, LSE = -inf); the cache's longest, 1000. Causal at seq_q 8: the sequences of 0, 1 and 3 keys
  // have rows that see no key (query i sees keys j <= i + length - 8). 64 splits: more than any
  // sequence's 16 blocks, so most splits of every sequence are empty; 2, 3, 7: unequal runs of each
  // sequence's own blocks.
  const std::vector<int32_t> lengths = {0, 1, 63, 64, 65, 1000, 3};
  for (int64_t seq_q : {1, 8})
    for (bool causal : {false, true})
      check_seqlens_stages("mixed lengths, " + shape_name(seq_q, 1000, causal),
                           decode_shape(7, 3, 3, seq_q, 1000, causal), lengths, {0, 1, 2, 3, 7, 64});
}

TEST_CASE("decode: per-sequence key lengths, every sequence one length (0, 1, 63, 64, 65, all of seq_kv)",
          "[gpu][decode][seqlens_k]") {
  for (int32_t length : {0, 1, 63, 64, 65, 130})
    for (bool causal : {false, true})
      check_seqlens_stages(
          "every sequence " + std::to_string(length) + " keys, " + shape_name(8, 130, causal),
          decode_shape(2, 3, 3, 8, 130, causal), {length, length}, {0, 1, 3});
}

TEST_CASE("decode: per-sequence key lengths with GQA packing (32 heads on 8 and on 1 K/V head)",
          "[gpu][decode][seqlens_k][gqa][packing]") {
  // Packed tiles of 4 to 256 rows, each row a (head, token) of its sequence; every row picks a key
  // of its own among those its sequence's length lets it see, so a row mixed up fails by the size
  // of V.
  const std::vector<int32_t> lengths = {4097, 0, 65, 1000};
  for (int64_t kv_heads : {8, 1})
    for (int64_t seq_q : {1, 8})
      for (bool causal : {false, true})
        check_seqlens_stages("GQA packing, 32 heads, kv_heads " + std::to_string(kv_heads) + ", " +
                                 shape_name(seq_q, 4097, causal),
                             decode_shape(4, 32, kv_heads, seq_q, 4097, causal), lengths, {0, 1, 3, 64},
                             [&](fa::Problem& problem) { rows_pick_keys_within(problem, lengths); });
}

TEST_CASE("decode: per-sequence key lengths in the mixed layout, and lengths out of range (clamped)",
          "[gpu][decode][seqlens_k]") {
  for (bool causal : {false, true}) {
    ProblemConfig config = decode_shape(3, 4, 2, 8, 1000, causal);
    config.layout = fa::ProblemLayout::mixed();
    check_seqlens_stages("mixed layout, " + shape_name(8, 1000, causal), config, {999, 64, 7}, {0, 1, 5});
    // -5 reads as 0 keys, 5000 as all 1000 (params.h: the kernel clamps to [0, seq_kv]).
    check_seqlens_stages("lengths out of range, " + shape_name(8, 1000, causal),
                         decode_shape(3, 3, 3, 8, 1000, causal), {-5, 5000, 100}, {0, 1, 3});
  }
}

TEST_CASE("decode: q = 0 with per-sequence lengths, so every LSE is exactly log(its own keys seen)",
          "[gpu][decode][seqlens_k][lse]") {
  for (bool causal : {false, true})
    check_seqlens_stages("q = 0, " + shape_name(8, 4097, causal), decode_shape(4, 3, 3, 8, 4097, causal),
                         {4097, 1, 640, 2049}, {0, 1, 2, 7, 64}, fa_test::q_zero);
}

TEST_CASE("decode: a stage that does not declare seqlens_k rejects it and writes nothing", "[gpu][decode]") {
  int rejecting = 0;
  const DeviceLengths lengths({1, 1});
  for (const StageInfo* stage : fa_test::runnable_stages()) {
    if (stage->features & fa::kFeatureSeqlensK) continue;
    ProblemConfig config;
    config.batch = 2;
    config.heads = 2;
    config.seq_q = config.seq_kv = 2 * std::max(stage->block_q, stage->block_kv);
    config.head_dim = stage->head_dims.front();
    config.dtype = stage->dtypes.front();
    Problem problem(config);
    problem.poison_output();
    fa::AttentionParams params = problem.params();
    params.seqlens_k = lengths.data();
    const fa::Status status = stage->launch(params, nullptr);
    INFO("stage " << stage->name << ": " << status.message);
    REQUIRE_FALSE(status.ok());
    CHECK(status.message.find(stage->name) != std::string::npos);
    CHECK(status.message.find("\"seqlens_k\"") != std::string::npos);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(written_elements(problem.o().download()) == 0);
    ++rejecting;
  }
  if (rejecting == 0) fa_test::skip("no stage under test lacks seqlens_k");
}

TEST_CASE("decode: a paged KV cache, pages of 16, 48, 64, 80 and 256 rows shuffled in the pool, mixed lengths",
          "[gpu][decode][paged_kv]") {
  // Lengths 0, 1, 15, 16, 17 (around a page of 16), 65 (a block of 64 and one), 257 (a page of 256
  // and one), 1000 (the longest; 1000 = 62.5 pages of 16, 3.9 of 256): none but 16 a multiple of every
  // page size. Pages of 48 and 80 rows straddle the K/V blocks of 64 (many a block's rows in two
  // pages). Causal at seq_q 8: the sequences of 0, 1 and 3 keys have rows that see no key.
  const std::vector<int32_t> lengths = {0, 1, 15, 16, 17, 65, 257, 1000, 3};
  for (int64_t seq_q : {1, 8})
    for (bool causal : {false, true})
      check_paged_stages("paged, mixed lengths, " + shape_name(seq_q, 1000, causal),
                         decode_shape(9, 3, 3, seq_q, 1000, causal), lengths, {16, 48, 64, 80, 256},
                         {0, 1, 2, 7, 64});
}

TEST_CASE("decode: a paged KV cache without seqlens_k (every sequence seq_kv keys)", "[gpu][decode][paged_kv]") {
  for (bool causal : {false, true})
    check_paged_stages("paged, no seqlens_k, " + shape_name(8, 300, causal), decode_shape(3, 3, 3, 8, 300, causal),
                       {300, 300, 300}, {16, 64, 256}, {0, 1, 3}, nullptr, /*lengths_given=*/false);
}

TEST_CASE("decode: a paged KV cache with GQA packing (32 heads on 8 and on 1 K/V head)",
          "[gpu][decode][paged_kv][gqa][packing]") {
  // Every (head, token) row picks a key of its own among those its sequence's length lets it see:
  // a row that reads another page's keys, or another row's, fails by the size of V.
  const std::vector<int32_t> lengths = {2049, 0, 65, 1000};
  for (int64_t kv_heads : {8, 1})
    for (int64_t seq_q : {1, 8})
      for (bool causal : {false, true})
        check_paged_stages("paged, GQA packing, 32 heads, kv_heads " + std::to_string(kv_heads) + ", " +
                               shape_name(seq_q, 2049, causal),
                           decode_shape(4, 32, kv_heads, seq_q, 2049, causal), lengths, {16, 48, 64, 256},
                           {0, 1, 3, 64}, [&](fa::Problem& problem) { rows_pick_keys_within(problem, lengths); });
}

TEST_CASE("decode: q = 0 on a paged KV cache, so every LSE is exactly log(its own keys seen)",
          "[gpu][decode][paged_kv][lse]") {
  for (bool causal : {false, true})
    check_paged_stages("paged, q = 0, " + shape_name(8, 1025, causal), decode_shape(4, 3, 3, 8, 1025, causal),
                       {1025, 1, 640, 511}, {16, 48, 64, 256}, {0, 1, 2, 7, 64}, fa_test::q_zero);
}
