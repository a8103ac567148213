// Hardening: every registered stage at the edges of its contract (GitHub issue "Hardening every
// stage").
//
//   1. Huge tensors: q/o with more than 2^31 elements, k/v with more than 2^31 elements, and
//      batch x heads far beyond 65535 (the kernels put every block in gridDim.x). Each huge problem
//      is built once and every stage runs on it.
//   2. Numerics: scores reaching +/-1e4, every score of a row near +1e4 or -1e4, all scores of a
//      row equal, the row maximum planted in the first, middle and last K/V block, the row maximum
//      rising in every K/V block (with each stage's general features on, masked blocks included),
//      and NaN / Inf inputs that must reach exactly the output elements the fp64 reference says
//      they reach.
//   3. Determinism: bit-identical outputs across launches and across problems with the same seed.
//   4. Invalid inputs: every way of breaking the launcher contract returns an error that names the
//      problem, and the (poisoned) output buffer is left untouched, with real device buffers.
//
// Run with:  ctest --test-dir build -L hardening --output-on-failure
// or:        build/tests/test_gpu_hardening "[huge]"      (one group: [huge] [numerics] [nonfinite]
//                                                          [determinism] [invalid])
// Without a GPU the program exits with 77 (skipped). The huge tests need about 9 GB of GPU memory
// and 9 GB of host memory at a time (one huge problem at a time); where there is less, each says so
// (WARN) and does not run, and the run ends with a "SKIPPED: ..." line naming them (printed only
// when nothing failed; tests/gpu_stages.h says why), which CTest can report as a skip.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "common/checker.h"
#include "common/cuda_check.h"
#include "common/harness.h"
#include "common/reference.h"
#include "common/registry.h"
#include "fa_catch.h"
#include "gpu_stages.h"

using fa::AttentionParams;
using fa::CheckOptions;
using fa::DType;
using fa::HostTensor;
using fa::LayoutKind;
using fa::Problem;
using fa::ProblemConfig;
using fa::StageInfo;
using fa_test::runnable_stages;
using fa_test::supports;

namespace {

constexpr int64_t kTwoPow31 = int64_t{1} << 31;
constexpr DType kDTypes[] = {DType::kFloat16, DType::kBFloat16};
constexpr int kHeadDims[] = {64, 128};

// ------------------------------------------------------------------------------------------------
// Stages and shapes
// ------------------------------------------------------------------------------------------------

// A sequence length every stage accepts: a multiple of every stage's block size.
int64_t common_block_q(const std::vector<const StageInfo*>& stages) {
  int64_t m = 1;
  for (const StageInfo* s : stages) m = std::lcm(m, int64_t{s->block_q});
  return m;
}
int64_t common_block_kv(const std::vector<const StageInfo*>& stages) {
  int64_t m = 1;
  for (const StageInfo* s : stages) m = std::lcm(m, int64_t{s->block_kv});
  return m;
}
int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

ProblemConfig shape(int64_t batch, int64_t heads, int64_t seq_q, int64_t seq_kv, DType dtype,
                    int64_t head_dim, uint64_t seed) {
  ProblemConfig c;
  c.batch = batch;
  c.heads = heads;
  c.seq_q = seq_q;
  c.seq_kv = seq_kv;
  c.dtype = dtype;
  c.head_dim = head_dim;
  c.seed = seed;
  return c;
}

std::string describe(const ProblemConfig& c) {
  std::ostringstream out;
  out << fa::dtype_name(c.dtype) << ", D " << c.head_dim << ", B " << c.batch << ", H " << c.heads
      << ", seq_q " << c.seq_q << ", seq_kv " << c.seq_kv;
  return out.str();
}

std::string describe(const fa::RunResult& run) {
  if (!run.status.ok()) return "launch error: " + run.status.message;
  return "check: " + run.check.summary();
}

// ------------------------------------------------------------------------------------------------
// Memory guards and timing for the huge problems
// ------------------------------------------------------------------------------------------------

double gib(double bytes) {
  return bytes / (1024.0 * 1024.0 * 1024.0);
}

// MemAvailable from /proc/meminfo; "plenty" where it cannot be read.
double host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    long long kib = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %lld kB", &kib) == 1)
      return 1024.0 * static_cast<double>(kib);
  }
  return 1e18;
}

// False where the GPU or the host has too little free memory; the case is then skipped by name
// (fa_test::skip), with the shortfall.
bool enough_memory(const char* what, double device_bytes, double host_bytes) {
  size_t free_bytes = 0, total_bytes = 0;
  FA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const double host_free = host_available_bytes();
  if (static_cast<double>(free_bytes) < device_bytes * 1.05 || host_free < host_bytes * 1.05) {
    std::ostringstream why;
    why << what << " (needs " << gib(device_bytes) << " GiB of GPU memory, " << gib(free_bytes) << " free, and "
        << gib(host_bytes) << " GiB of host memory, " << gib(host_free) << " available)";
    fa_test::skip(why.str());
    return false;
  }
  return true;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ------------------------------------------------------------------------------------------------
// Launching and host-side helpers
// ------------------------------------------------------------------------------------------------

using Launch = fa::RunResult;
using fa::launch_and_download;

// Rows [s_begin, s_end) of every (batch, head) of `t`, as a contiguous host tensor.
HostTensor slice_seq(const HostTensor& t, int64_t s_begin, int64_t s_end) {
  HostTensor out;
  out.dtype = t.dtype;
  const fa::TensorLayout& l = t.layout;
  out.layout = fa::TensorLayout::make(l.batch, s_end - s_begin, l.heads, l.head_dim, LayoutKind::kContiguous);
  out.raw.resize(static_cast<size_t>(out.layout.storage_elems));
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = s_begin; s < s_end; ++s)
      for (int64_t h = 0; h < l.heads; ++h)
        std::copy_n(t.raw.begin() + l.offset(b, s, h, 0), l.head_dim,
                    out.raw.begin() + out.layout.offset(b, s - s_begin, h, 0));
  return out;
}

// Every scaled score q_s . k_j * scale of the problem, in fp64: (min, max).
std::pair<double, double> score_range(const HostTensor& q, const HostTensor& k, double scale) {
  double lo = INFINITY, hi = -INFINITY;
  const fa::TensorLayout& l = q.layout;
  std::vector<double> q_row(static_cast<size_t>(l.head_dim));
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t h = 0; h < l.heads; ++h)
      for (int64_t s = 0; s < l.seq; ++s) {
        for (int64_t d = 0; d < l.head_dim; ++d) q_row[d] = q.at(b, s, h, d);
        for (int64_t j = 0; j < k.layout.seq; ++j) {
          double dot = 0.0;
          for (int64_t d = 0; d < l.head_dim; ++d) dot += q_row[d] * k.at(b, j, h, d);
          lo = std::min(lo, dot * scale);
          hi = std::max(hi, dot * scale);
        }
      }
  return {lo, hi};
}

// The fp64 reference of every output element, indexed like a contiguous [b, s, h, d] tensor.
std::vector<double> reference_all(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                                  double scale) {
  const fa::TensorLayout& l = q.layout;
  std::vector<double> ref(static_cast<size_t>(l.logical_elems()));
  for (int64_t b = 0; b < l.batch; ++b)
    for (int64_t s = 0; s < l.seq; ++s)
      for (int64_t h = 0; h < l.heads; ++h)
        fa::reference_row_fp64(q, k, v, b, h, s, scale,
                               &ref[static_cast<size_t>(((b * l.seq + s) * l.heads + h) * l.head_dim)]);
  return ref;
}

// Counts output elements that are off from an expected value by more than `tolerance` (NaN counts
// as off), and describes the first.
struct Mismatches {
  int64_t count = 0;
  std::string first;
  void add(int64_t b, int64_t s, int64_t h, int64_t d, double got, double expected, const char* what) {
    if (count++ == 0) {
      std::ostringstream out;
      out << what << " at (b, s, h, d) = (" << b << ", " << s << ", " << h << ", " << d << "): got " << got
          << ", expected " << expected;
      first = out.str();
    }
  }
};

// ------------------------------------------------------------------------------------------------
// Runs a scenario (edited inputs) on every stage for the given dtypes and head dims: one problem
// per (dtype, head_dim), shared by all stages. `extra` adds explicit assertions on the output.
// ------------------------------------------------------------------------------------------------

using EditInputs = std::function<void(HostTensor& q, HostTensor& k, HostTensor& v)>;
using ExtraCheck = std::function<void(const fa::RunResult& run, const HostTensor& q, const HostTensor& k,
                                      const HostTensor& v)>;
using CheckConfig = std::function<void(const HostTensor& q, const HostTensor& k, float scale)>;

void run_scenario(const std::string& scenario, ProblemConfig base, const EditInputs& edit,
                  const CheckConfig& check_inputs = nullptr, const ExtraCheck& extra = nullptr) {
  const std::vector<const StageInfo*> stages = runnable_stages();
  for (DType dtype : kDTypes) {
    for (int head_dim : kHeadDims) {
      ProblemConfig config = base;
      config.dtype = dtype;
      config.head_dim = head_dim;
      Problem problem(config);
      HostTensor q = problem.host_q(), k = problem.host_k(), v = problem.host_v();
      edit(q, k, v);
      problem.set_inputs(q, k, v);
      INFO(scenario << " | " << describe(config));
      if (check_inputs) check_inputs(problem.host_q(), problem.host_k(), problem.softmax_scale());
      for (const StageInfo* stage : stages) {
        if (!supports(*stage, dtype, head_dim)) continue;
        const fa::RunResult run = fa::run_and_check(*stage, problem);
        INFO("stage " << stage->name << " | " << describe(run));
        CHECK(run.passed());
        if (run.status.ok() && extra) extra(run, problem.host_q(), problem.host_k(), problem.host_v());
      }
    }
  }
}

}  // namespace

// ================================================================================================
// 1. Huge tensors
// ================================================================================================

TEST_CASE("huge q and o: more than 2^31 elements, every stage, rows beyond element 2^31 checked",
          "[gpu][hardening][huge]") {
  const std::vector<const StageInfo*> stages = runnable_stages();
  const int64_t heads = 16, head_dim = 128;
  int64_t max_block_q = 0;
  for (const StageInfo* s : stages) max_block_q = std::max<int64_t>(max_block_q, s->block_q);
  // Two query blocks (of the largest stage) past element 2^31, in a length every stage accepts.
  const int64_t seq_q = round_up(kTwoPow31 / (heads * head_dim) + 2 * max_block_q, common_block_q(stages));
  const int64_t seq_kv = round_up(128, common_block_kv(stages));
  ProblemConfig config = shape(1, heads, seq_q, seq_kv, DType::kFloat16, head_dim, 2031);
  const double q_bytes = 2.0 * static_cast<double>(seq_q * heads * head_dim);
  // GPU: q and o. Host: the cached copy of q plus one downloaded output at a time.
  if (!enough_memory("huge q/o test", 2 * q_bytes, 2 * q_bytes)) return;

  const auto build_start = std::chrono::steady_clock::now();
  Problem problem(config);
  const HostTensor& q = problem.host_q();
  const HostTensor& k = problem.host_k();
  const HostTensor& v = problem.host_v();
  std::printf("[hardening] huge q/o: %s (q and o %.2f GiB each) built in %.1f s\n", describe(config).c_str(),
              gib(q_bytes), seconds_since(build_start));
  REQUIRE(q.layout.logical_elems() > kTwoPow31);

  // The last three query blocks of 128 rows, in every head: they straddle element 2^31 of q and o.
  const int64_t tail_begin = seq_q - 3 * 128;
  REQUIRE(q.layout.offset(0, tail_begin, 0, 0) < kTwoPow31);
  REQUIRE(q.layout.offset(0, seq_q - 1, 0, 0) >= kTwoPow31);
  int64_t tail_rows_beyond = 0;
  for (int64_t s = tail_begin; s < seq_q; ++s)
    for (int64_t h = 0; h < heads; ++h) tail_rows_beyond += q.layout.offset(0, s, h, 0) >= kTwoPow31;
  REQUIRE(tail_rows_beyond >= 2 * max_block_q * heads);

  CheckOptions sampled;  // batch*heads*seq_q is far above full_check_max_rows: rows are sampled
  sampled.sampled_rows_per_head = 16;
  CheckOptions full;
  full.full_check_max_rows = INT64_MAX;
  // Their fp64 reference is computed once and shared by every stage.
  const fa::ReferenceRows tail_reference =
      fa::compute_reference_rows(slice_seq(q, tail_begin, seq_q), k, v, problem.softmax_scale(), full);

  for (const StageInfo* stage : stages) {
    if (!supports(*stage, config.dtype, head_dim)) continue;
    const auto start = std::chrono::steady_clock::now();
    INFO("stage " << stage->name << " | " << describe(config));
    // Sampled rows of every head (first, last, random), and every element finite (unwritten rows
    // would still hold the NaN poison).
    const fa::RunResult run = fa::run_and_check(*stage, problem, sampled);
    INFO(describe(run));
    CHECK(run.passed());
    if (!run.status.ok()) continue;
    // Every row of the tail, against the fp64 reference with the checker's own rule.
    const fa::CheckResult tail =
        fa::check_against_reference(tail_reference, slice_seq(run.output, tail_begin, seq_q), full);
    INFO("rows " << tail_begin << ".." << seq_q - 1 << " of every head (" << tail_rows_beyond
                 << " of them start beyond element 2^31): " << tail.summary());
    CHECK(tail.passed);
    CHECK(tail.rows_checked == 3 * 128 * heads);
    std::printf("[hardening] huge q/o: %-18s %s (%.1f s)\n", stage->name,
                run.passed() && tail.passed ? "PASS" : "FAIL", seconds_since(start));
  }
}

TEST_CASE("huge k and v: more than 2^31 elements, every stage, keys beyond element 2^31 decide rows",
          "[gpu][hardening][huge]") {
  const std::vector<const StageInfo*> stages = runnable_stages();
  const int64_t heads = 16, head_dim = 128;
  int64_t max_block_kv = 0;
  for (const StageInfo* s : stages) max_block_kv = std::max<int64_t>(max_block_kv, s->block_kv);
  const int64_t seq_q = common_block_q(stages);
  const int64_t seq_kv = round_up(kTwoPow31 / (heads * head_dim) + 2 * max_block_kv, common_block_kv(stages));
  ProblemConfig config = shape(1, heads, seq_q, seq_kv, DType::kFloat16, head_dim, 2032);
  const double kv_bytes = 2.0 * static_cast<double>(seq_kv * heads * head_dim);
  if (!enough_memory("huge k/v test", 2 * kv_bytes, 2 * kv_bytes)) return;

  const auto build_start = std::chrono::steady_clock::now();
  Problem problem(config);
  const HostTensor& k = problem.host_k();
  const HostTensor& v = problem.host_v();
  REQUIRE(k.layout.logical_elems() > kTwoPow31);

  // Rows 0, 1, 2 of every head are made to attend (almost) only to one key: q_s = 12 k_j, so that
  // key's score (~12 |k_j|^2 / sqrt(D), about 136) beats the largest of the other ~1M random scores
  // (~5.3 x 12 = 64) by a margin whose exp(-margin) x 1M is negligible. The output row is then v_j,
  // which only a correct read of k and v at element offsets beyond 2^31 gives.
  //   row 0 -> the last key (beyond 2^31 in every head; also checked against the fp64 reference)
  //   row 1 -> the first key whose rows all lie beyond element 2^31
  //   row 2 -> the last key whose rows all lie below element 2^31
  const int64_t first_key_beyond = kTwoPow31 / (heads * head_dim);
  const int64_t planted_key[3] = {seq_kv - 1, first_key_beyond, first_key_beyond - 1};
  REQUIRE(k.layout.offset(0, first_key_beyond, 0, 0) >= kTwoPow31);
  REQUIRE(k.layout.offset(0, first_key_beyond - 1, heads - 1, head_dim - 1) < kTwoPow31);
  HostTensor q = problem.host_q();  // small: seq_q rows
  for (int64_t h = 0; h < heads; ++h)
    for (int r = 0; r < 3; ++r)
      for (int64_t d = 0; d < head_dim; ++d) q.set(0, r, h, d, 12.0f * k.at(0, planted_key[r], h, d));
  // Only q changed: upload it alone and check against this copy, rather than set_inputs(), which
  // would copy and upload the 4 GB k and v again.
  problem.q().upload(q);
  std::printf("[hardening] huge k/v: %s (k and v %.2f GiB each) built in %.1f s\n", describe(config).c_str(),
              gib(kv_bytes), seconds_since(build_start));

  // Each checked row costs ~seq_kv x head_dim x 4 operations on the CPU, so only rows 0 and
  // seq_q-1 of every head go through the fp64 reference (32 rows, on all cores, once for all
  // stages); the checker also requires every output element to be finite.
  CheckOptions sampled;
  sampled.full_check_max_rows = 0;
  sampled.sampled_rows_per_head = 2;

  const auto reference_start = std::chrono::steady_clock::now();
  const fa::ReferenceRows reference = fa::compute_reference_rows(q, k, v, problem.softmax_scale(), sampled);
  std::printf("[hardening] huge k/v: fp64 reference of %zu rows in %.1f s\n", reference.rows.size(),
              seconds_since(reference_start));

  for (const StageInfo* stage : stages) {
    if (!supports(*stage, config.dtype, head_dim)) continue;
    const auto start = std::chrono::steady_clock::now();
    INFO("stage " << stage->name << " | " << describe(config));
    const Launch launch = launch_and_download(*stage, problem);
    INFO("launch: " << (launch.status.ok() ? std::string("ok") : launch.status.message));
    CHECK(launch.status.ok());
    if (!launch.status.ok()) continue;
    const fa::CheckResult check = fa::check_against_reference(reference, launch.output, sampled);
    INFO("rows 0 and " << seq_q - 1 << " of every head: " << check.summary());
    CHECK(check.passed);
    CHECK(check.rows_checked == 2 * heads);

    Mismatches planted, nonfinite;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t s = 0; s < seq_q; ++s)
        for (int64_t d = 0; d < head_dim; ++d) {
          const double got = launch.output.at(0, s, h, d);
          if (!std::isfinite(got)) nonfinite.add(0, s, h, d, got, 0.0, "non-finite output (unwritten?)");
          if (s < 3) {
            const double expected = v.at(0, planted_key[s], h, d);
            if (!(std::fabs(got - expected) <= check.tolerance))
              planted.add(0, s, h, d, got, expected, "planted row is not v of its key");
          }
        }
    }
    INFO(nonfinite.first);
    CHECK(nonfinite.count == 0);
    INFO(planted.first << " (tolerance " << check.tolerance << ")");
    CHECK(planted.count == 0);
    std::printf("[hardening] huge k/v: %-18s %s (%.1f s)\n", stage->name,
                check.passed && planted.count == 0 && nonfinite.count == 0 ? "PASS" : "FAIL",
                seconds_since(start));
  }
}

TEST_CASE("batch x heads far beyond 65535 (everything in gridDim.x)", "[gpu][hardening][huge]") {
  const std::vector<const StageInfo*> stages = runnable_stages();
  const int64_t batch = 2, heads = 40000, head_dim = 64;
  const int64_t seq = common_block_q(stages);
  ProblemConfig config =
      shape(batch, heads, seq, round_up(seq, common_block_kv(stages)), DType::kFloat16, head_dim, 65536);
  REQUIRE(batch * heads > 65535);
  const double tensor_bytes = 2.0 * static_cast<double>(batch * heads * seq * head_dim);
  if (!enough_memory("batch x heads test", 4 * tensor_bytes, 4 * tensor_bytes)) return;

  const auto build_start = std::chrono::steady_clock::now();
  Problem problem(config);
  // Download the host copies now, so the per-stage times below are the stage's.
  (void)problem.host_q();
  (void)problem.host_k();
  (void)problem.host_v();
  std::printf("[hardening] batch x heads: %s (%.2f GiB per tensor) built in %.1f s\n",
              describe(config).c_str(), gib(tensor_bytes), seconds_since(build_start));

  CheckOptions sampled;  // first and last row of every one of the 80000 (batch, head) pairs
  sampled.sampled_rows_per_head = 2;
  for (const StageInfo* stage : stages) {
    if (!supports(*stage, config.dtype, head_dim)) continue;
    const auto start = std::chrono::steady_clock::now();
    INFO("stage " << stage->name << " | " << describe(config) << " | "
                  << batch * heads * (seq / stage->block_q) << " thread blocks");
    const fa::RunResult run = fa::run_and_check(*stage, problem, sampled);
    INFO(describe(run));
    CHECK(run.passed());
    CHECK(run.check.rows_checked == 2 * batch * heads);
    std::printf("[hardening] batch x heads: %-18s %s (%.1f s)\n", stage->name, run.passed() ? "PASS" : "FAIL",
                seconds_since(start));
  }
}

// ================================================================================================
// 2. Numerics
// ================================================================================================

TEST_CASE("scores reaching +/-1e4", "[gpu][hardening][numerics]") {
  // Scaled scores are q.k / sqrt(D) ~ N(0, (q_std k_std)^2) = N(0, 2500^2): over 2 x 256 x 512
  // scores per problem they reach beyond +/-1e4 (4 sigma; the test confirms it), with inputs of at
  // most about +/-250, far inside the fp16 range; the raw dot products (up to ~1.3e5) stay exact
  // enough in fp32. The softmax of such rows is nearly one-hot: near ties decide the error. The
  // stages from ampere_07_fast_softmax on carry an extra error of up to ~3.4e-4 relative on rows
  // dominated by one key (exp2 of s * c - round(m * c) is 2^r, not 1, at the maximum; see the
  // equal-scores test below), which can bring them close to the tolerance here.
  ProblemConfig config = shape(1, 2, 256, 512, DType::kFloat16, 64, 104);
  config.q_std = 50.0f;
  config.k_std = 50.0f;
  run_scenario(
      "q_std = k_std = 50", config, [](HostTensor&, HostTensor&, HostTensor&) {},
      [](const HostTensor& q, const HostTensor& k, float scale) {
        const auto range = score_range(q, k, scale);
        INFO("scaled scores span [" << range.first << ", " << range.second << "]");
        REQUIRE(range.first <= -1e4);
        REQUIRE(range.second >= 1e4);
      });
}

TEST_CASE("every score of a row near +1e4 or near -1e4 (a large common offset)",
          "[gpu][hardening][numerics]") {
  // q[0] = +/-Q and k[0] = C for every key, with Q C / sqrt(D) = 1e4: every score of a row is
  // +/-1e4 plus the N(0, 1) of the other dimensions. Without subtracting the row maximum,
  // exp(+1e4) overflows and exp(-1e4) underflows (inf/inf or 0/0); with it, the softmax is the
  // ordinary one of the N(0, 1) parts. Rows alternate between the two signs.
  ProblemConfig config = shape(2, 2, 256, 512, DType::kFloat16, 64, 105);
  run_scenario(
      "common offset +/-1e4", config,
      [](HostTensor& q, HostTensor& k, HostTensor&) {
        const double head_dim = static_cast<double>(q.layout.head_dim);
        const float offset_factor = static_cast<float>(std::sqrt(1e4 * std::sqrt(head_dim)));  // Q = C
        for (int64_t b = 0; b < q.layout.batch; ++b)
          for (int64_t h = 0; h < q.layout.heads; ++h) {
            for (int64_t s = 0; s < q.layout.seq; ++s)
              q.set(b, s, h, 0, s % 2 ? -offset_factor : offset_factor);
            for (int64_t j = 0; j < k.layout.seq; ++j) k.set(b, j, h, 0, offset_factor);
          }
      },
      [](const HostTensor& q, const HostTensor& k, float scale) {
        const fa::TensorLayout& l = q.layout;
        double min_abs = INFINITY, max_abs = 0.0;
        std::vector<double> q_row(static_cast<size_t>(l.head_dim));
        for (int64_t b = 0; b < l.batch; ++b)
          for (int64_t h = 0; h < l.heads; ++h)
            for (int64_t s = 0; s < l.seq; ++s) {
              for (int64_t d = 0; d < l.head_dim; ++d) q_row[d] = q.at(b, s, h, d);
              for (int64_t j = 0; j < k.layout.seq; ++j) {
                double dot = 0.0;
                for (int64_t d = 0; d < l.head_dim; ++d) dot += q_row[d] * k.at(b, j, h, d);
                min_abs = std::min(min_abs, std::fabs(dot * scale));
                max_abs = std::max(max_abs, std::fabs(dot * scale));
              }
            }
        INFO("|scaled score| spans [" << min_abs << ", " << max_abs << "]");
        REQUIRE(min_abs >= 0.99e4 - 10.0);
        REQUIRE(max_abs <= 1.01e4 + 10.0);
      });
}

TEST_CASE("all scores of a row equal: the output is the mean of V", "[gpu][hardening][numerics]") {
  // Every key row of a (batch, head) is a copy of its key 0, so every score of a row is equal and
  // the row maximum is in every K/V block (the online softmax's rescale factor is exp(0) = 1 at
  // each block). Query rows: s % 3 == 0 random (moderate equal scores), s % 3 == 1 zero (all
  // scores 0), s % 3 == 2 a multiple of key 0 (all scores ~500: exp(500) overflows even fp64, so
  // without the max subtraction the row would be inf / inf). In every case the output is the plain
  // mean of V over the keys.
  //
  // Why 500 and not 1e4: the stages from ampere_07_fast_softmax on compute
  // p = exp2(s * c - round(m * c)), so at equal scores every p is 2^r with r the rounding error of
  // m * c (up to 2^-11 at m * c ~ 1.4e4). P V uses p rounded to 16 bits (1 or a neighbour of 1) but
  // the row sum adds the fp32 p, so the output is off by up to ~3.4e-4 relative: about one fp16
  // ulp, as large as this case's whole tolerance (the plain attention's P = 1/seq_kv is exact here,
  // so its error is only the final rounding). At ~500 (m * c ~ 720) the effect is 16 times smaller.
  // Scores near +/-1e4 are tested above.
  ProblemConfig config = shape(2, 2, 256, 512, DType::kFloat16, 64, 106);
  run_scenario(
      "equal scores", config,
      [](HostTensor& q, HostTensor& k, HostTensor&) {
        const fa::TensorLayout& l = q.layout;
        // |k_0|^2 ~ D, so q = c k_0 scores c |k_0|^2 / sqrt(D) ~ c sqrt(D) = 500.
        const float c = static_cast<float>(500.0 / std::sqrt(static_cast<double>(l.head_dim)));
        for (int64_t b = 0; b < l.batch; ++b)
          for (int64_t h = 0; h < l.heads; ++h) {
            for (int64_t j = 1; j < k.layout.seq; ++j)
              for (int64_t d = 0; d < l.head_dim; ++d) k.set(b, j, h, d, k.at(b, 0, h, d));
            for (int64_t s = 0; s < l.seq; ++s)
              for (int64_t d = 0; d < l.head_dim; ++d) {
                if (s % 3 == 1) q.set(b, s, h, d, 0.0f);
                if (s % 3 == 2) q.set(b, s, h, d, c * k.at(b, 0, h, d));
              }
          }
      },
      nullptr,
      [](const fa::RunResult& run, const HostTensor& q, const HostTensor&, const HostTensor& v) {
        // Explicitly: every output element is mean_j v[j] within the checker's tolerance.
        const fa::TensorLayout& l = q.layout;
        Mismatches off;
        for (int64_t b = 0; b < l.batch; ++b)
          for (int64_t h = 0; h < l.heads; ++h)
            for (int64_t d = 0; d < l.head_dim; ++d) {
              double mean = 0.0;
              for (int64_t j = 0; j < v.layout.seq; ++j) mean += v.at(b, j, h, d);
              mean /= static_cast<double>(v.layout.seq);
              for (int64_t s = 0; s < l.seq; ++s) {
                const double got = run.output.at(b, s, h, d);
                if (!(std::fabs(got - mean) <= run.check.tolerance))
                  off.add(b, s, h, d, got, mean, "not the mean of V");
              }
            }
        INFO(off.first << " (tolerance " << run.check.tolerance << ")");
        CHECK(off.count == 0);
      });
}

TEST_CASE("the row maximum planted in the first, middle and last K/V block, with large logits",
          "[gpu][hardening][numerics]") {
  // For every block size Bc of the registered stages, keys at the first, middle and last position
  // of blocks 0, 1, n/2, n-2 and n-1; each query row gets one of them (rotating with the row, the
  // head and the batch, so every (batch, head) sees them all) and becomes q = 16 k_key. That key's
  // score (~16 |k|^2 / sqrt(D), 128..181) beats every other (~16 N(0,1), at most ~55) by far, so
  // the output row is v of that key. A wrong rescale when the maximum arrives late (the earlier
  // blocks must shrink by exp(-100)) or early (later blocks must not count) shows here.
  // Rows with (b + h) odd instead get a ramp: k[j][0] = R j / seq_kv, q[0] = +/-Q, so the maximum
  // rises with every K/V block (rescale at each block) or sits in the first block.
  const std::vector<const StageInfo*> stages = runnable_stages();
  const int64_t seq_kv = 512;
  std::vector<int64_t> keys;
  for (const StageInfo* stage : stages) {
    const int64_t bc = stage->block_kv, n = seq_kv / bc;
    for (int64_t block : {int64_t{0}, int64_t{1}, n / 2, n - 2, n - 1})
      for (int64_t offset : {int64_t{0}, bc / 2, bc - 1}) keys.push_back(block * bc + offset);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  const auto planted_key = [keys](int64_t b, int64_t s, int64_t h) {
    return keys[static_cast<size_t>((s + 3 * h + 5 * b) % static_cast<int64_t>(keys.size()))];
  };
  const auto ramp_head = [](int64_t b, int64_t h) { return (b + h) % 2 == 1; };

  ProblemConfig config = shape(2, 2, 256, seq_kv, DType::kFloat16, 64, 107);
  run_scenario(
      "planted row maximum", config,
      [&](HostTensor& q, HostTensor& k, HostTensor&) {
        const fa::TensorLayout& l = q.layout;
        const float ramp = static_cast<float>(std::sqrt(60.0 * std::sqrt(static_cast<double>(l.head_dim))));
        for (int64_t b = 0; b < l.batch; ++b)
          for (int64_t h = 0; h < l.heads; ++h) {
            if (ramp_head(b, h)) {  // scores = +/-60 j / seq_kv + N(0, 1)
              for (int64_t j = 0; j < k.layout.seq; ++j)
                k.set(b, j, h, 0, ramp * static_cast<float>(j) / static_cast<float>(k.layout.seq));
              for (int64_t s = 0; s < l.seq; ++s) q.set(b, s, h, 0, s % 2 ? -ramp : ramp);
              continue;
            }
            for (int64_t s = 0; s < l.seq; ++s)
              for (int64_t d = 0; d < l.head_dim; ++d)
                q.set(b, s, h, d, 16.0f * k.at(b, planted_key(b, s, h), h, d));
          }
      },
      nullptr,
      [&](const fa::RunResult& run, const HostTensor& q, const HostTensor&, const HostTensor& v) {
        const fa::TensorLayout& l = q.layout;
        Mismatches off;
        for (int64_t b = 0; b < l.batch; ++b)
          for (int64_t h = 0; h < l.heads; ++h) {
            if (ramp_head(b, h)) continue;  // the checker covers these
            for (int64_t s = 0; s < l.seq; ++s)
              for (int64_t d = 0; d < l.head_dim; ++d) {
                const double got = run.output.at(b, s, h, d), expected = v.at(b, planted_key(b, s, h), h, d);
                if (!(std::fabs(got - expected) <= run.check.tolerance))
                  off.add(b, s, h, d, got, expected, "not v of the planted key");
              }
          }
        INFO(off.first << " (tolerance " << run.check.tolerance << ")");
        CHECK(off.count == 0);
      });
}

// ------------------------------------------------------------------------------------------------
// NaN and Inf inputs
//
// The fp64 reference (common/reference.cpp) computes, per query row, the scores, their maximum with
// std::max (a NaN score never wins), exp(score - max) and sum, and P V. So, by IEEE arithmetic:
//   * a NaN anywhere in q_s makes every score of row s NaN: max stays -inf, exp(NaN) = NaN, the
//     sum is NaN: output row s is NaN, every other row is untouched;
//   * a NaN in key j of (b, h) makes score j of every row of (b, h) NaN: every output row of that
//     (batch, head) is NaN, other heads are untouched;
//   * +/-Inf in q_s[d] makes every score of row s +/-inf (or NaN where k_j[d] = 0); the maximum is
//     +inf (or the row is all -inf), and exp(inf - inf) = NaN: output row s is NaN;
//   * a NaN in v[j][d] of (b, h) makes column d of every output row of (b, h) NaN (p_j * NaN is
//     NaN even where p_j underflows to 0), and nothing else;
//   * +Inf in k_j[d] makes score j +inf for rows with q_s[d] > 0 (NaN row, as above), NaN for
//     q_s[d] = 0, and -inf for q_s[d] < 0: exp(-inf - max) = 0, key j is simply masked and the
//     row is finite (and must be right).
// The kernels compute the same things in the same order per row: fmaxf ignores NaN like std::max,
// exp/exp2 of NaN is NaN, 0 * NaN = NaN in the tensor-core MMA, so they must agree. The test
// first confirms that the reference really has the NaN pattern stated (so the expectation is the
// reference's, not an opinion), then checks each stage with the checker (NaN exactly where the
// reference is NaN) and, explicitly, that every element expected finite is finite and within
// tolerance of the reference and every element expected NaN is NaN.
// ------------------------------------------------------------------------------------------------

namespace {

struct NonFiniteCase {
  std::string name;
  EditInputs plant;
  // Whether output element (b, s, h, d) must be NaN, given the edited q.
  std::function<bool(const HostTensor& q, int64_t b, int64_t s, int64_t h, int64_t d)> expect_nan;
};

void check_nonfinite_cases(const std::vector<NonFiniteCase>& cases, int64_t seq_kv) {
  const std::vector<const StageInfo*> stages = runnable_stages();
  for (const NonFiniteCase& c : cases) {
    for (DType dtype : kDTypes) {
      for (int head_dim : kHeadDims) {
        const ProblemConfig config = shape(2, 3, 256, seq_kv, dtype, head_dim, 108);
        Problem problem(config);
        HostTensor q = problem.host_q(), k = problem.host_k(), v = problem.host_v();
        c.plant(q, k, v);
        problem.set_inputs(q, k, v);
        INFO(c.name << " | " << describe(config));

        // The expectation is the reference's: confirm the NaN pattern of the fp64 reference.
        const std::vector<double> ref = reference_all(q, k, v, problem.softmax_scale());
        const fa::TensorLayout& l = q.layout;
        const auto index = [&](int64_t b, int64_t s, int64_t h, int64_t d) {
          return static_cast<size_t>(((b * l.seq + s) * l.heads + h) * l.head_dim + d);
        };
        Mismatches model;
        int64_t expected_nan_count = 0;
        for (int64_t b = 0; b < l.batch; ++b)
          for (int64_t s = 0; s < l.seq; ++s)
            for (int64_t h = 0; h < l.heads; ++h)
              for (int64_t d = 0; d < l.head_dim; ++d) {
                const bool nan = c.expect_nan(q, b, s, h, d);
                expected_nan_count += nan;
                const double r = ref[index(b, s, h, d)];
                if (nan != std::isnan(r) || (!nan && !std::isfinite(r)))
                  model.add(b, s, h, d, r, nan ? NAN : 0.0,
                            "the fp64 reference disagrees with the stated pattern");
              }
        {
          INFO(model.first);
          REQUIRE(model.count == 0);
        }

        for (const StageInfo* stage : stages) {
          if (!supports(*stage, dtype, head_dim)) continue;
          const fa::RunResult run = fa::run_and_check(*stage, problem);
          INFO("stage " << stage->name << " | " << describe(run));
          CHECK(run.passed());
          if (!run.status.ok()) continue;
          Mismatches missing_nan, stray_nonfinite, out_of_tolerance;
          int64_t nan_count = 0;
          for (int64_t b = 0; b < l.batch; ++b)
            for (int64_t s = 0; s < l.seq; ++s)
              for (int64_t h = 0; h < l.heads; ++h)
                for (int64_t d = 0; d < l.head_dim; ++d) {
                  const double got = run.output.at(b, s, h, d), expected = ref[index(b, s, h, d)];
                  nan_count += std::isnan(got);
                  if (c.expect_nan(q, b, s, h, d)) {
                    if (!std::isnan(got)) missing_nan.add(b, s, h, d, got, expected, "expected NaN");
                  } else if (!std::isfinite(got)) {
                    stray_nonfinite.add(b, s, h, d, got, expected,
                                        "non-finite where the reference is finite");
                  } else if (!(std::fabs(got - expected) <= run.check.tolerance)) {
                    out_of_tolerance.add(b, s, h, d, got, expected, "out of tolerance");
                  }
                }
          INFO("NaN outputs: " << nan_count << ", expected " << expected_nan_count);
          {
            INFO(missing_nan.first);
            CHECK(missing_nan.count == 0);
          }
          {
            INFO(stray_nonfinite.first);
            CHECK(stray_nonfinite.count == 0);
          }
          {
            INFO(out_of_tolerance.first << " (tolerance " << run.check.tolerance << ")");
            CHECK(out_of_tolerance.count == 0);
          }
        }
      }
    }
  }
}

int64_t largest_block_kv() {
  int64_t bc = 0;
  for (const StageInfo* s : fa::registered_stages()) bc = std::max<int64_t>(bc, s->block_kv);
  return bc;
}

}  // namespace

TEST_CASE("NaN and Inf inputs reach exactly the output elements the reference says, and nowhere else",
          "[gpu][hardening][numerics][nonfinite]") {
  const int64_t bc = largest_block_kv();
  const int64_t seq_kv = std::max<int64_t>(256, 4 * bc);  // so that block 2 is a middle block
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<NonFiniteCase> cases = {
      {"NaN in one q element: only that output row is NaN",
       [&](HostTensor& q, HostTensor&, HostTensor&) { q.set(1, 77, 2, 5, nan); },
       [](const HostTensor&, int64_t b, int64_t s, int64_t h, int64_t) {
         return b == 1 && s == 77 && h == 2;
       }},
      {"NaN in one k element: every output row of that (batch, head) is NaN, other heads are fine",
       [&](HostTensor&, HostTensor& k, HostTensor&) { k.set(0, seq_kv / 2 + 3, 1, 0, nan); },
       [](const HostTensor&, int64_t b, int64_t, int64_t h, int64_t) { return b == 0 && h == 1; }},
      {"+Inf in one q element: only that output row is NaN (inf - inf)",
       [&](HostTensor& q, HostTensor&, HostTensor&) { q.set(0, 130, 0, 3, inf); },
       [](const HostTensor&, int64_t b, int64_t s, int64_t h, int64_t) {
         return b == 0 && s == 130 && h == 0;
       }},
      {"-Inf in one q element: only that output row is NaN",
       [&](HostTensor& q, HostTensor&, HostTensor&) { q.set(1, 255, 1, q.layout.head_dim - 1, -inf); },
       [](const HostTensor&, int64_t b, int64_t s, int64_t h, int64_t) {
         return b == 1 && s == 255 && h == 1;
       }},
      {"NaN in one v element: only that column of that (batch, head) is NaN",
       [&](HostTensor&, HostTensor&, HostTensor& v) { v.set(1, 10, 0, 7, nan); },
       [](const HostTensor&, int64_t b, int64_t, int64_t h, int64_t d) {
         return b == 1 && h == 0 && d == 7;
       }},
      {"+Inf in one k element (the last key): NaN rows where q[d] >= 0, the key masked where q[d] < 0",
       [&](HostTensor&, HostTensor& k, HostTensor&) { k.set(1, seq_kv - 1, 1, 2, inf); },
       [](const HostTensor& q, int64_t b, int64_t s, int64_t h, int64_t) {
         return b == 1 && h == 1 && !(q.at(1, s, 1, 2) < 0.0f);
       }},
      {"+Inf in k[.][0] of a whole middle K/V block, q[0] < 0: those keys masked, every row finite",
       [&](HostTensor& q, HostTensor& k, HostTensor&) {
         for (int64_t j = 2 * bc; j < 3 * bc; ++j) k.set(0, j, 2, 0, inf);
         for (int64_t s = 0; s < q.layout.seq; ++s) q.set(0, s, 2, 0, -std::fabs(q.at(0, s, 2, 0)) - 0.25f);
       },
       [](const HostTensor&, int64_t, int64_t, int64_t, int64_t) { return false; }},
  };
  check_nonfinite_cases(cases, seq_kv);
}

// +Inf in K that masks the whole FIRST K/V block of a row: every score of that block is -inf, so
// the running max is still -inf after it. A kernel that computes exp(s - max) there gets
// exp(-inf - (-inf)) = NaN and poisons the row, while the reference masks those keys and is
// finite. Every stage subtracts 0 instead while the max is -inf (as FlashAttention does).
TEST_CASE("+Inf in k[.][0] of the whole FIRST K/V block, q[0] < 0: keys masked, rows finite",
          "[gpu][hardening][numerics][nonfinite]") {
  const int64_t bc = largest_block_kv();
  const int64_t seq_kv = std::max<int64_t>(256, 4 * bc);
  const float inf = std::numeric_limits<float>::infinity();
  check_nonfinite_cases({{"+Inf in k[.][0] of the first K/V block, q[0] < 0",
                          [&](HostTensor& q, HostTensor& k, HostTensor&) {
                            for (int64_t j = 0; j < bc; ++j) k.set(0, j, 2, 0, inf);
                            for (int64_t s = 0; s < q.layout.seq; ++s)
                              q.set(0, s, 2, 0, -std::fabs(q.at(0, s, 2, 0)) - 0.25f);
                          },
                          [](const HostTensor&, int64_t, int64_t, int64_t, int64_t) { return false; }}},
                        seq_kv);
}

// ================================================================================================
// 3. Determinism
// ================================================================================================

TEST_CASE("determinism: bit-identical outputs across launches, with problems and stages interleaved",
          "[gpu][hardening][determinism]") {
  // Two problems of different shapes, seeds and layouts: A has 4 x 8 x (1024 / Br) thread blocks,
  // more than the GPU runs at once, so blocks are scheduled in varying orders (nothing in a forward
  // pass may depend on that order); B has every tensor in a layout of its own. Round 1 runs and
  // checks every stage on A, then on B, stage after stage. Round 2 launches again in the reverse
  // stage order, B before A; round 3 in the first order. Every output must be bit-identical to
  // round 1's, so each repeat comes after other stages and the other problem ran in between
  // (A-B-A): a kernel that keeps state between launches, or reads what an earlier launch left in
  // memory, shows, and because both problems are checked against the reference, so does a launch
  // that returns the other problem's result. A third problem, A built again from A's seed in other
  // buffers, must give A's bits too (the output may not depend on where the tensors live).
  const std::vector<const StageInfo*> stages = runnable_stages();
  for (DType dtype : kDTypes) {
    for (int head_dim : kHeadDims) {
      const ProblemConfig config_a = shape(4, 8, 1024, 256, dtype, head_dim, 109);
      ProblemConfig config_b = shape(2, 3, 256, 512, dtype, head_dim, 1109);
      config_b.layout = fa::ProblemLayout::mixed();
      Problem a(config_a), b(config_b), a_again(config_a);
      INFO("A: " << describe(config_a) << " | B: " << describe(config_b) << ", " << config_b.layout.name());
      REQUIRE(a_again.host_q().raw == a.host_q().raw);
      Problem* const problems[2] = {&a, &b};
      const char* const problem_names[2] = {"A", "B"};

      // first_output[stage][problem]: round 1's output bits, empty where round 1 failed.
      std::vector<std::vector<std::vector<uint16_t>>> first_output(stages.size(),
                                                                   std::vector<std::vector<uint16_t>>(2));
      for (size_t i = 0; i < stages.size(); ++i) {
        if (!supports(*stages[i], dtype, head_dim)) continue;
        for (int p = 0; p < 2; ++p) {
          const fa::RunResult run = fa::run_and_check(*stages[i], *problems[p]);
          INFO("round 1, stage " << stages[i]->name << ", problem " << problem_names[p] << " | " << describe(run));
          CHECK(run.passed());
          if (run.passed()) first_output[i][p] = run.output.raw;
        }
      }
      const auto repeat = [&](int round, size_t i, int p, Problem& problem) {
        if (first_output[i][p].empty()) return;
        const Launch again = launch_and_download(*stages[i], problem);
        INFO("round " << round << ", stage " << stages[i]->name << ", problem " << problem_names[p]
                      << (&problem == &a_again ? " built again from the same seed" : ""));
        REQUIRE(again.status.ok());
        CHECK(again.output.raw == first_output[i][p]);
      };
      for (size_t n = stages.size(); n-- > 0;) {  // round 2: last stage first, B before A
        repeat(2, n, 1, b);
        repeat(2, n, 0, a);
      }
      for (size_t i = 0; i < stages.size(); ++i) {  // round 3: first stage first, A before B
        repeat(3, i, 0, a);
        repeat(3, i, 1, b);
        repeat(3, i, 0, a_again);
      }
    }
  }
}

// The general-attention features a stage declares (stage.json), all switched on in one problem:
// causal, 4 query heads to 2 key/value heads, the LSE, ALiBi slopes per (batch, head).
ProblemConfig with_declared_features(const StageInfo& stage, ProblemConfig c) {
  c.causal = (stage.features & fa::kFeatureCausal) != 0;
  if (stage.features & fa::kFeatureGqa) c.kv_heads = c.heads / 2;
  c.lse = (stage.features & fa::kFeatureLse) != 0;
  if (stage.features & fa::kFeatureAlibi) c.alibi = fa::AlibiKind::kPerBatchHead;
  return c;
}

constexpr unsigned kGeneralFeatures =
    fa::kFeatureCausal | fa::kFeatureGqa | fa::kFeatureLse | fa::kFeatureAlibi;

TEST_CASE("general-attention features all on: checked, then bit-identical over launches (O and the LSE)",
          "[gpu][hardening][determinism]") {
  // Lengths that are not tile multiples, seq_q < seq_kv, the mixed layout (the LSE padded with
  // poisoned gaps, the slopes with a NaN gap after every batch): the first launch is checked against
  // the reference with every feature the stage declares, and two more must give the same bits,
  // another problem's launch in between.
  int tested = 0;
  for (const StageInfo* stage : runnable_stages()) {
    if ((stage->features & kGeneralFeatures) == 0) continue;
    ++tested;
    for (DType dtype : kDTypes) {
      for (int head_dim : kHeadDims) {
        ProblemConfig config = with_declared_features(*stage, shape(2, 4, 300, 333, dtype, head_dim, 113));
        config.layout = fa::ProblemLayout::mixed();
        Problem problem(config),
            other(with_declared_features(*stage, shape(1, 4, 129, 65, dtype, head_dim, 114)));
        INFO("stage " << stage->name << " | " << describe(config) << (config.causal ? ", causal" : "")
                      << ", kv_heads " << problem.kv_heads() << (config.lse ? ", lse" : "")
                      << (config.alibi != fa::AlibiKind::kNone ? ", alibi" : ""));
        const fa::RunResult first = fa::run_and_check(*stage, problem);
        INFO("first launch | " << describe(first) << " | lse: " << first.lse_check.summary());
        REQUIRE(first.passed());
        for (int round = 0; round < 2; ++round) {
          REQUIRE(launch_and_download(*stage, other).status.ok());
          const Launch again = launch_and_download(*stage, problem);
          REQUIRE(again.status.ok());
          CHECK(again.output.raw == first.output.raw);
          if (config.lse) {
            REQUIRE(again.lse.values.size() == first.lse.values.size());
            CHECK(std::memcmp(again.lse.values.data(), first.lse.values.data(),
                              first.lse.values.size() * sizeof(float)) == 0);
          }
        }
      }
    }
  }
  if (tested == 0) fa_test::skip("no stage under test declares causal, gqa, lse or alibi");
}

TEST_CASE(
    "general-attention features all on: NaN in one K element reaches exactly the rows of its group "
    "that see the key",
    "[gpu][hardening][numerics][nonfinite]") {
  // NaN in K[b 1, key 40, last key/value head, dim 7] makes that key's score NaN in every row that
  // reads it, and so those rows' whole output and LSE: with GQA only the query heads of that
  // key/value head's group, with causal masking only their rows that see key 40 (row s sees it
  // where s + seq_kv - seq_q >= 40; the others mask the NaN score to -inf). The reference says
  // exactly which, and the checker holds every element of O and the LSE to it. (NaN in V would not
  // do: a masked key's V still enters P V as 0 * NaN, outside what the stages promise; page 13.)
  int tested = 0;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const StageInfo* stage : runnable_stages()) {
    if ((stage->features & kGeneralFeatures) == 0) continue;
    ++tested;
    for (DType dtype : kDTypes) {
      for (int head_dim : kHeadDims) {
        const ProblemConfig config =
            with_declared_features(*stage, shape(2, 4, 200, 129, dtype, head_dim, 115));
        Problem problem(config);
        HostTensor k = problem.host_k();
        k.set(1, 40, k.layout.heads - 1, 7, nan);
        problem.set_inputs(problem.host_q(), k, problem.host_v());
        const fa::RunResult run = fa::run_and_check(*stage, problem);
        INFO("stage " << stage->name << " | " << describe(config) << " | " << describe(run)
                      << " | lse: " << run.lse_check.summary());
        CHECK(run.passed());
      }
    }
  }
  if (tested == 0) fa_test::skip("no stage under test declares causal, gqa, lse or alibi");
}

TEST_CASE("general-attention features all on: the row maximum rising in every K/V block, masked ones too",
          "[gpu][hardening][numerics]") {
  // The planted-maximum case above rescales in unmasked blocks only (its lengths are tile
  // multiples, without causal). Here every stage that declares any length runs with the features it
  // declares (causal, GQA, the LSE, ALiBi) on lengths that are not tile multiples, and the scores
  // ramp up with the key: k[j][0] = R j / seq_kv, q[0] = +R, so each row's maximum grows by about
  // 60 x 64 / 333 = 11.5 (natural log) from one 64-key block to the next (23 per 128-key block),
  // beyond 2^8 in the weights. Every K/V block then moves the running maximum -- the causal
  // diagonal block and the partial last block as well, which take the masked step: in the stages
  // with lazy rescaling the rescale there, in hopper_16_speculative_max and hopper_17_warp_redo the
  // block done again with its mask (hopper_17_warp_redo: on the warp alone).
  int tested = 0;
  for (const StageInfo* stage : runnable_stages()) {
    if ((stage->features & fa::kFeatureAnyLength) == 0) continue;
    ++tested;
    for (DType dtype : kDTypes) {
      for (int head_dim : kHeadDims) {
        const ProblemConfig config =
            with_declared_features(*stage, shape(2, 4, 300, 333, dtype, head_dim, 116));
        Problem problem(config);
        HostTensor q = problem.host_q(), k = problem.host_k();
        const float ramp = static_cast<float>(std::sqrt(60.0 * std::sqrt(static_cast<double>(head_dim))));
        for (int64_t b = 0; b < k.layout.batch; ++b)
          for (int64_t h = 0; h < k.layout.heads; ++h)
            for (int64_t j = 0; j < k.layout.seq; ++j)
              k.set(b, j, h, 0, ramp * static_cast<float>(j) / static_cast<float>(k.layout.seq));
        for (int64_t b = 0; b < q.layout.batch; ++b)
          for (int64_t h = 0; h < q.layout.heads; ++h)
            for (int64_t s = 0; s < q.layout.seq; ++s) q.set(b, s, h, 0, ramp);
        problem.set_inputs(q, k, problem.host_v());
        const fa::RunResult run = fa::run_and_check(*stage, problem);
        INFO("stage " << stage->name << " | " << describe(config) << (config.causal ? ", causal" : "")
                      << ", kv_heads " << problem.kv_heads() << " | " << describe(run)
                      << " | lse: " << run.lse_check.summary());
        CHECK(run.passed());
      }
    }
  }
  if (tested == 0) fa_test::skip("no stage under test declares any_length");
}

// ================================================================================================
// 4. Invalid inputs
// ================================================================================================

namespace {

struct InvalidCase {
  std::string name;
  std::function<void(AttentionParams&)> break_it;
  std::vector<std::string> keywords;  // the error message must contain each
};

const char* const kTensorNames[4] = {"q", "k", "v", "o"};
fa::TensorView& tensor(AttentionParams& p, int i) {
  fa::TensorView* views[4] = {&p.q, &p.k, &p.v, &p.o};
  return *views[i];
}

std::vector<InvalidCase> invalid_cases(const StageInfo& stage, const AttentionParams& valid) {
  std::vector<InvalidCase> cases;
  const auto add = [&](std::string name, std::function<void(AttentionParams&)> f,
                       std::vector<std::string> kw) {
    cases.push_back({std::move(name), std::move(f), std::move(kw)});
  };

  // Sizes <= 0, one field at a time.
  const std::pair<const char*, int64_t AttentionParams::*> sizes[] = {
      {"batch", &AttentionParams::batch},
      {"heads", &AttentionParams::heads},
      {"seq_q", &AttentionParams::seq_q},
      {"seq_kv", &AttentionParams::seq_kv},
      {"head_dim", &AttentionParams::head_dim}};
  for (const auto& size : sizes)
    for (int64_t value : {int64_t{0}, int64_t{-1}, -(int64_t{1} << 40)}) {
      const auto field = size.second;
      const std::string text = std::string(size.first) + " " + std::to_string(value);
      add(text, [field, value](AttentionParams& p) { p.*field = value; }, {"sizes must be positive", text});
    }

  // head_dim values this stage does not support.
  for (int64_t d : {8, 16, 32, 48, 80, 96, 112, 160, 192, 256}) {
    if (std::count(stage.head_dims.begin(), stage.head_dims.end(), d)) continue;
    add("head_dim " + std::to_string(d), [d](AttentionParams& p) { p.head_dim = d; },
        {"head_dim " + std::to_string(d), "not supported"});
  }

  // Sequence lengths that are not multiples of the block sizes (and no larger than the buffers),
  // except for a stage that declares any_length (tests/test_gpu_any_length.cpp runs it on them).
  const bool any_length = (stage.features & fa::kFeatureAnyLength) != 0;
  for (int64_t seq_q : {valid.seq_q - stage.block_q / 2, int64_t{stage.block_q / 2}, valid.seq_q - 8}) {
    if (any_length || seq_q <= 0 || seq_q % stage.block_q == 0) continue;
    add("seq_q " + std::to_string(seq_q), [seq_q](AttentionParams& p) { p.seq_q = seq_q; },
        {"seq_q " + std::to_string(seq_q), "multiple", std::to_string(stage.block_q)});
  }
  for (int64_t seq_kv : {valid.seq_kv - stage.block_kv / 2, int64_t{stage.block_kv / 2}, valid.seq_kv - 8}) {
    if (any_length || seq_kv <= 0 || seq_kv % stage.block_kv == 0) continue;
    add("seq_kv " + std::to_string(seq_kv), [seq_kv](AttentionParams& p) { p.seq_kv = seq_kv; },
        {"seq_kv " + std::to_string(seq_kv), "multiple", std::to_string(stage.block_kv)});
  }

  // kv_heads: unset (0), negative, not dividing heads, more than heads; fewer than heads (dividing
  // them) only for a stage that declares gqa (tests/test_gpu_gqa.cpp runs those).
  for (int64_t kv_heads : {int64_t{0}, int64_t{-1}, valid.heads + 1, 2 * valid.heads}) {
    const std::string text = "kv_heads " + std::to_string(kv_heads);
    add(text, [kv_heads](AttentionParams& p) { p.kv_heads = kv_heads; }, {text, "divide heads"});
  }
  if ((stage.features & fa::kFeatureGqa) == 0)
    add("kv_heads 1 (multi-query) without gqa", [](AttentionParams& p) { p.kv_heads = 1; },
        {"kv_heads 1", "\"gqa\""});

  // The LSE output (stage.json feature "lse"), pointed at O's buffer: a launch that validation let
  // through would write floats over the poison. Without the feature any pointer is rejected; with
  // it, a misaligned pointer and strides whose rows overlap.
  const auto lse_into_o = [](AttentionParams& p, int64_t byte_offset, int64_t batch_stride,
                             int64_t head_stride) {
    p.lse.data = reinterpret_cast<float*>(static_cast<char*>(p.o.data) + byte_offset);
    p.lse.batch_stride = batch_stride;
    p.lse.head_stride = head_stride;
  };
  const int64_t lse_row = valid.seq_q, lse_batch = valid.heads * valid.seq_q;
  if ((stage.features & fa::kFeatureLse) == 0) {
    add("lse output without the feature", [=](AttentionParams& p) { lse_into_o(p, 0, lse_batch, lse_row); },
        {"\"lse\""});
  } else {
    add("lse pointer + 2 bytes", [=](AttentionParams& p) { lse_into_o(p, 2, lse_batch, lse_row); },
        {"lse pointer is not 4-byte aligned"});
    add("lse head stride 0", [=](AttentionParams& p) { lse_into_o(p, 0, lse_batch, 0); },
        {"lse strides must be positive"});
    add("lse rows overlapping (head stride seq_q - 1)",
        [=](AttentionParams& p) { lse_into_o(p, 0, lse_batch, lse_row - 1); }, {"lse strides", "overlap"});
    add("lse batches overlapping (batch stride = head stride)",
        [=](AttentionParams& p) { lse_into_o(p, 0, lse_row, lse_row); }, {"lse strides", "overlap"});
  }

  // ALiBi slopes (stage.json feature "alibi"), pointed at O's buffer (never read: validation must
  // stop them). Without the feature any pointer is rejected; with it, a misaligned pointer, a
  // negative batch stride, one smaller than heads (batches sharing slopes they should not), and
  // lengths beyond 2^23 (the kernels' fp32 distances).
  const auto slopes_in_o = [](AttentionParams& p, int64_t byte_offset, int64_t batch_stride) {
    p.alibi.data = reinterpret_cast<const float*>(static_cast<char*>(p.o.data) + byte_offset);
    p.alibi.batch_stride = batch_stride;
  };
  if ((stage.features & fa::kFeatureAlibi) == 0) {
    add("alibi slopes without the feature", [=](AttentionParams& p) { slopes_in_o(p, 0, 0); }, {"\"alibi\""});
  } else {
    add("alibi slopes pointer + 2 bytes", [=](AttentionParams& p) { slopes_in_o(p, 2, 0); },
        {"alibi slopes pointer is not 4-byte aligned"});
    add("alibi slopes batch stride -1", [=](AttentionParams& p) { slopes_in_o(p, 0, -1); },
        {"alibi slopes batch stride -1"});
    add("alibi slopes batch stride 1 < heads", [=](AttentionParams& p) { slopes_in_o(p, 0, 1); },
        {"alibi slopes batch stride 1", "at least heads"});
    add("alibi with seq_kv 2^23 + 1",
        [=](AttentionParams& p) {
          slopes_in_o(p, 0, 0);
          p.seq_kv = (int64_t{1} << 23) + 1;
        },
        {"alibi", "2^23"});
  }

  for (int i = 0; i < 4; ++i) {
    const std::string name = kTensorNames[i];
    // A dtype value that is no DType, in one tensor.
    for (int bad : {7, -1, 2}) {
      add(name + " dtype value " + std::to_string(bad),
          [i, bad](AttentionParams& p) { tensor(p, i).dtype = static_cast<DType>(bad); },
          {name + " has an unsupported dtype"});
    }
    // One tensor of the other dtype.
    if (i > 0) {
      const DType other = valid.q.dtype == DType::kFloat16 ? DType::kBFloat16 : DType::kFloat16;
      add(name + " is " + fa::dtype_name(other) + ", q is not",
          [i, other](AttentionParams& p) { tensor(p, i).dtype = other; },
          {"must share one dtype", name + " is " + fa::dtype_name(other)});
    }
    // Null and misaligned (a real device pointer plus 8 or 2 bytes).
    add(name + " null", [i](AttentionParams& p) { tensor(p, i).data = nullptr; },
        {name + " is a null pointer"});
    for (int bytes : {8, 2}) {
      add(name + " pointer + " + std::to_string(bytes) + " bytes",
          [i, bytes](AttentionParams& p) {
            tensor(p, i).data = static_cast<char*>(tensor(p, i).data) + bytes;
          },
          {name + " pointer is not 16-byte aligned"});
    }
    // Strides: zero, negative, not a multiple of 8 elements (16 bytes).
    const std::pair<const char*, int64_t fa::TensorView::*> strides[] = {
        {"batch_stride", &fa::TensorView::batch_stride},
        {"seq_stride", &fa::TensorView::seq_stride},
        {"head_stride", &fa::TensorView::head_stride}};
    for (const auto& stride : strides) {
      const auto field = stride.second;
      const std::string what = name + "." + stride.first;
      add(what + " = 0", [i, field](AttentionParams& p) { tensor(p, i).*field = 0; },
          {name + " strides must be positive"});
      add(what + " negated", [i, field](AttentionParams& p) { tensor(p, i).*field = -(tensor(p, i).*field); },
          {name + " strides must be positive"});
      for (int64_t extra : {1, 4}) {
        add(what + " + " + std::to_string(extra),
            [i, field, extra](AttentionParams& p) { tensor(p, i).*field += extra; },
            {name + " strides", "multiples of 8"});
      }
    }
  }

  // Dtypes this stage does not support (none today: every stage supports fp16 and bf16).
  for (DType dtype : kDTypes) {
    if (std::count(stage.dtypes.begin(), stage.dtypes.end(), dtype)) continue;
    add(std::string("dtype ") + fa::dtype_name(dtype) + " everywhere",
        [dtype](AttentionParams& p) {
          for (int i = 0; i < 4; ++i) tensor(p, i).dtype = dtype;
        },
        {"not supported by this stage"});
  }

  // softmax_scale: zero, negative zero, non-finite, negative. A negative scale is not a valid
  // softmax temperature for the stages from ampere_07_fast_softmax on, which take the row maximum
  // of the raw (unscaled) scores.
  for (float scale :
       {0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), -0.125f, -1e-30f}) {
    std::ostringstream text;
    text << "softmax_scale " << scale;
    add(text.str(), [scale](AttentionParams& p) { p.softmax_scale = scale; }, {"softmax_scale"});
  }

  // Too many thread blocks for gridDim.x (checked before anything is launched, so the strides of
  // the real, small buffers do not matter).
  add("2^31 query blocks",
      [&stage](AttentionParams& p) {
        p.batch = 1024;
        p.heads = p.kv_heads = 1024;
        p.seq_q = int64_t{stage.block_q} * 2048;
      },
      {"exceeds", "2^31-1"});
  add("batch x heads = 2^32",
      [](AttentionParams& p) {
        p.batch = 65536;
        p.heads = p.kv_heads = 65536;
      },
      {"exceeds", "2^31-1"});
  add("batch 2^31", [](AttentionParams& p) { p.batch = kTwoPow31; }, {"exceeds", "2^31-1"});
  add("heads 2^33", [](AttentionParams& p) { p.heads = p.kv_heads = kTwoPow31 * 4; }, {"exceeds", "2^31-1"});
  return cases;
}

}  // namespace

TEST_CASE("invalid inputs: a named error, nothing launched, the poisoned output untouched",
          "[gpu][hardening][invalid]") {
  for (const StageInfo* stage : runnable_stages()) {
    // Real device buffers, so a launch that validation let through would write into O (or fault).
    const ProblemConfig config = shape(2, 2, 2 * stage->block_q, 2 * stage->block_kv, stage->dtypes.front(),
                                       stage->head_dims.front(), 110);
    Problem problem(config);
    const AttentionParams valid = problem.params();
    REQUIRE(fa::validate_params(valid, *stage).ok());
    const std::vector<InvalidCase> cases = invalid_cases(*stage, valid);
    for (const InvalidCase& c : cases) {
      INFO("stage " << stage->name << " | " << describe(config) << " | " << c.name);
      problem.poison_output();
      AttentionParams params = valid;
      c.break_it(params);
      const fa::Status status = stage->launch(params, nullptr);
      INFO("launch() -> \"" << status.message << "\"");
      CHECK_FALSE(status.ok());
      CHECK_THAT(status.message, Catch::StartsWith(std::string(stage->name) + ": "));
      for (const std::string& keyword : c.keywords) CHECK_THAT(status.message, Catch::Contains(keyword));
      // Nothing ran: no launch error is pending, the device is healthy, O holds only the poison.
      CHECK(cudaGetLastError() == cudaSuccess);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      const HostTensor o = problem.o().download();
      const auto poisoned = std::count(o.raw.begin(), o.raw.end(), uint16_t{0xFFFF});
      CHECK(poisoned == static_cast<std::ptrdiff_t>(o.raw.size()));
    }
    // The same buffers with the valid parameters: the launch writes and passes, so the cases
    // above really would have shown a write.
    const fa::RunResult run = fa::run_and_check(*stage, problem);
    INFO("stage " << stage->name << ", valid parameters | " << describe(run));
    CHECK(run.passed());
  }
}
