// Split-KV's algebra on the CPU (stages/decode/01_split_kv/split_kv.h and the merge in parts of
// stages/decode/07_parallel_combine/split_kv.h, the very functions the kernels call): the merge of any partition of a row's keys into splits equals the softmax over all
// of them, in fp64, within what the fp32 arithmetic of the merge can cost; empty splits and splits
// whose keys are all masked contribute nothing (never NaN); a row that no split sees gets O = 0 and
// LSE -inf; a NaN stays NaN. Also: which K/V blocks each split takes, and the split-count heuristic.
//
// The partial results fed to the merge are what an exact split kernel stores: lse_s and O_s (O
// normalized by the split's own sum) computed in fp64 and rounded to fp32 once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "fa_catch.h"

#define FA_STAGE_NAMESPACE split_kv_01
#include "stages/decode/01_split_kv/split_kv.h"
#undef FA_STAGE_NAMESPACE
// decode_07_parallel_combine's merge in parts (a thread block a row, its warps the parts).
#define FA_STAGE_NAMESPACE split_kv_07
#include "stages/decode/07_parallel_combine/split_kv.h"
#undef FA_STAGE_NAMESPACE

namespace {

using split_kv_01::choose_num_splits;
using split_kv_01::KvBlockRange;
using split_kv_01::merge_splits;
using split_kv_01::split_kv_blocks;

constexpr int kDims = 8;  // elements of O per row in these tests
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kU32 = 1.0 / (1 << 24);  // fp32's unit roundoff, 2^-24

// One row: n keys with scores t_j (-inf where masked) and values v_j[kDims].
struct Row {
  std::vector<double> scores;
  std::vector<std::vector<double>> values;
};

// The softmax over keys [begin, end) of the row in fp64: its LSE (-inf if no key is seen) and O
// (0 if none).
void softmax(const Row& row, size_t begin, size_t end, double* lse, double (&o)[kDims]) {
  double max_score = -kInf;
  for (size_t j = begin; j < end; ++j) max_score = std::max(max_score, row.scores[j]);
  for (double& x : o) x = 0.0;
  if (max_score == -kInf) {
    *lse = -kInf;
    return;
  }
  double sum = 0.0;
  for (size_t j = begin; j < end; ++j) {
    const double w = std::exp(row.scores[j] - max_score);
    sum += w;
    for (int d = 0; d < kDims; ++d) o[d] += w * row.values[j][d];
  }
  for (double& x : o) x /= sum;
  *lse = max_score + std::log(sum);
}

// The partial results of a partition of the row (cuts: the first key of every split after the
// first, non-decreasing, so that splits may be empty), as fp32 arrays laid out like the workspace:
// split s's LSE at lse[s], its O at o[s * kDims]. An empty split writes no O (the kernel skips it):
// NaN there must not reach the merge.
struct Partials {
  int splits = 0;
  std::vector<float> lse, o;
};

Partials split_row(const Row& row, const std::vector<size_t>& cuts) {
  Partials p;
  p.splits = static_cast<int>(cuts.size()) + 1;
  p.lse.resize(p.splits);
  p.o.resize(static_cast<size_t>(p.splits) * kDims);
  for (int s = 0; s < p.splits; ++s) {
    const size_t begin = s == 0 ? 0 : cuts[s - 1], end = s + 1 < p.splits ? cuts[s] : row.scores.size();
    double lse, o[kDims];
    softmax(row, begin, end, &lse, o);
    p.lse[s] = static_cast<float>(lse);
    for (int d = 0; d < kDims; ++d)
      p.o[s * kDims + d] = begin == end ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(o[d]);
  }
  return p;
}

// What the fp32 merge may be off by. Each weight exp(lse_s - M) / Z carries the rounding of lse_s to
// fp32 (|lse_s| u absolute) and of M (the same), of the difference, of exp and of the sum Z over S
// splits (about S u relative); O adds its own accumulation over S terms. So, relative to max |v|:
//   O:   2 u (2 max|lse| + 2 S + 8)          LSE:   u (3 max|lse| + 2 S + 8)   (absolute)
// twice the first-order bounds. A merge that forgets a weight, or counts a split twice, is off by
// about max |v| and the LSE by log(2) or more.
struct Tolerance {
  double o, lse;
};

Tolerance tolerance(const Partials& p, double max_abs_v) {
  double max_lse = 0.0;
  for (float x : p.lse)
    if (std::isfinite(x)) max_lse = std::max(max_lse, std::fabs(static_cast<double>(x)));
  return {2 * kU32 * (2 * max_lse + 2 * p.splits + 8) * max_abs_v, kU32 * (3 * max_lse + 2 * p.splits + 8)};
}

Row random_row(std::mt19937_64& rng, size_t n, double score_std, double score_offset,
               double masked_fraction) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Row row;
  for (size_t j = 0; j < n; ++j) {
    row.scores.push_back(uniform(rng) < masked_fraction ? -kInf : score_offset + score_std * normal(rng));
    row.values.emplace_back(kDims);
    for (double& x : row.values.back()) x = normal(rng);
  }
  return row;
}

std::vector<size_t> random_cuts(std::mt19937_64& rng, size_t n, int splits) {
  std::uniform_int_distribution<size_t> key(0, n);
  std::vector<size_t> cuts(static_cast<size_t>(splits - 1));
  for (size_t& c : cuts) c = key(rng);
  std::sort(cuts.begin(), cuts.end());
  return cuts;
}

// decode_07's merge in parts: 4 parts (its warps), 8 splits in flight and 3 (a last round that runs
// past the end), against the fp64 softmax within the same bounds as the one-thread merge.
void check_merge_in_parts(const Partials& p, double ref_lse, const double (&ref_o)[kDims], const Tolerance& tol) {
  float parts_o[kDims], parts3_o[kDims];
  const float parts_lse = split_kv_07::merge_splits<kDims, 4, 8>(p.splits, p.lse.data(), 1, p.o.data(), kDims, parts_o);
  const float parts3_lse =
      split_kv_07::merge_splits<kDims, 4, 3>(p.splits, p.lse.data(), 1, p.o.data(), kDims, parts3_o);
  if (ref_lse == -kInf) {
    CHECK(parts_lse == -std::numeric_limits<float>::infinity());
    CHECK(parts3_lse == -std::numeric_limits<float>::infinity());
    for (int d = 0; d < kDims; ++d) CHECK((parts_o[d] == 0.0f && parts3_o[d] == 0.0f));
    return;
  }
  CHECK(std::fabs(parts_lse - ref_lse) <= tol.lse);
  CHECK(parts3_lse == parts_lse);  // M and Z do not depend on the rounds
  for (int d = 0; d < kDims; ++d) {
    INFO("d " << d << ": merged in parts " << parts_o[d] << " and " << parts3_o[d] << ", reference " << ref_o[d]);
    CHECK(std::fabs(parts_o[d] - ref_o[d]) <= tol.o);
    CHECK(std::fabs(parts3_o[d] - ref_o[d]) <= tol.o);
  }
}

// Merges the partials as the combine kernel does and compares with the fp64 softmax of the row.
void check_merge(const Row& row, const std::vector<size_t>& cuts) {
  const Partials p = split_row(row, cuts);
  float o[kDims];
  const float lse = merge_splits<kDims>(p.splits, p.lse.data(), 1, p.o.data(), kDims, o);
  double ref_lse, ref_o[kDims];
  softmax(row, 0, row.scores.size(), &ref_lse, ref_o);
  double max_abs_v = 0.0;
  for (const auto& v : row.values)
    for (double x : v) max_abs_v = std::max(max_abs_v, std::fabs(x));
  const Tolerance tol = tolerance(p, max_abs_v);
  INFO(row.scores.size() << " keys in " << p.splits << " splits; reference lse " << ref_lse << ", merged "
                         << lse);
  check_merge_in_parts(p, ref_lse, ref_o, tol);
  if (ref_lse == -kInf) {
    CHECK(lse == -std::numeric_limits<float>::infinity());
    for (float x : o) CHECK(x == 0.0f);
    return;
  }
  CHECK(std::fabs(lse - ref_lse) <= tol.lse);
  for (int d = 0; d < kDims; ++d) {
    INFO("d " << d << ": merged " << o[d] << ", reference " << ref_o[d] << ", tolerance " << tol.o);
    CHECK(std::fabs(o[d] - ref_o[d]) <= tol.o);
  }
  // The kernel merges a row in 32 lanes, each over its own slice of O: the same numbers.
  float halves[2][kDims / 2];
  for (int h = 0; h < 2; ++h)
    CHECK(merge_splits<kDims / 2>(p.splits, p.lse.data(), 1, p.o.data() + h * kDims / 2, kDims, halves[h]) ==
          lse);
  for (int d = 0; d < kDims; ++d) CHECK(halves[d / (kDims / 2)][d % (kDims / 2)] == o[d]);
}

// The wave rule of choose_num_splits, restated: `splits` must be the smallest eligible count (one
// whose longest split, ceil(kv_blocks / n), is shorter than with n - 1) whose wave efficiency is
// within `fraction` of the best eligible count's, among 1 .. most.
void check_smallest_within(int64_t work, int64_t resident, int64_t kv_blocks, int64_t most, int splits,
                           double fraction) {
  const auto longest = [&](int64_t n) { return (kv_blocks + n - 1) / n; };
  const auto eligible = [&](int64_t n) { return n == 1 || longest(n) != longest(n - 1); };
  const auto efficiency = [&](int64_t n) {
    const double waves = static_cast<double>(work * n) / static_cast<double>(resident);
    return waves / std::ceil(waves);
  };
  double best = 0.0;
  for (int64_t n = 1; n <= most; ++n)
    if (eligible(n)) best = std::max(best, efficiency(n));
  CHECK(eligible(splits));
  CHECK(efficiency(splits) >= fraction * best);
  for (int64_t n = 1; n < splits; ++n) CHECK(!(eligible(n) && efficiency(n) >= fraction * best));
}

}  // namespace

TEST_CASE("split_kv_blocks: whole blocks, every block in exactly one split, lengths within one",
          "[split_kv]") {
  for (int blocks = 0; blocks <= 300; blocks += blocks < 20 ? 1 : 37)
    for (int splits = 1; splits <= 70; ++splits) {
      INFO(blocks << " blocks, " << splits << " splits");
      int next = 0, shortest = blocks, longest = 0;
      for (int s = 0; s < splits; ++s) {
        const KvBlockRange r = split_kv_blocks(blocks, splits, s);
        CHECK(r.begin == next);
        CHECK(r.end >= r.begin);
        next = r.end;
        shortest = std::min(shortest, r.end - r.begin);
        longest = std::max(longest, r.end - r.begin);
      }
      CHECK(next == blocks);
      CHECK(longest - shortest <= 1);
      CHECK(longest == (blocks + splits - 1) / splits);  // the critical path: ceil(n / S) blocks
      CHECK((shortest == 0) == (splits > blocks));       // empty splits only with more splits than blocks
    }
}

TEST_CASE("merge of random partitions equals the softmax of the whole row", "[split_kv]") {
  std::mt19937_64 rng(40);
  const double stds[] = {0.5, 3.0, 30.0};
  const double offsets[] = {0.0, -80.0, 1e4};  // exp(-80) underflows fp32's exp; 1e4: lse's ulp is 2^-10
  for (size_t n : {1, 2, 7, 64, 65, 1000})
    for (int splits : {1, 2, 3, 7, 64, 200})
      for (double std_dev : stds)
        for (double offset : offsets) {
          INFO("score std " << std_dev << ", offset " << offset);
          check_merge(random_row(rng, n, std_dev, offset, 0.0), random_cuts(rng, n, splits));
        }
}

TEST_CASE("empty splits and splits whose keys are all masked contribute nothing, never NaN", "[split_kv]") {
  std::mt19937_64 rng(41);
  // Masked keys (causal: -inf scores) in runs and at random; more splits than keys (empty ones).
  for (size_t n : {1, 5, 64, 300})
    for (int splits : {2, 3, 7, 64, 400})
      for (double masked : {0.3, 0.9}) {
        Row row = random_row(rng, n, 2.0, 0.0, masked);
        check_merge(row, random_cuts(rng, n, splits));
        // A run of masked keys in the middle: the splits inside it see nothing.
        for (size_t j = n / 4; j < 3 * n / 4; ++j) row.scores[j] = -kInf;
        check_merge(row, random_cuts(rng, n, splits));
      }
  // One split holds every visible key, the others are all masked or empty.
  Row row = random_row(rng, 100, 1.0, 0.0, 0.0);
  for (size_t j = 0; j < 100; ++j)
    if (j < 40 || j >= 60) row.scores[j] = -kInf;
  check_merge(row, {40, 40, 60, 80, 100});
}

TEST_CASE("a row that no split sees: O = 0 and LSE = -inf, as the unsplit kernel writes", "[split_kv]") {
  std::mt19937_64 rng(42);
  for (int splits : {1, 2, 7, 64}) {
    Row row = random_row(rng, 50, 1.0, 0.0, 1.0);  // every key masked
    check_merge(row, random_cuts(rng, 50, splits));
    // Every split empty: the query block saw no K/V block (causal, seq_q > seq_kv).
    std::vector<float> lse(static_cast<size_t>(splits), -std::numeric_limits<float>::infinity());
    std::vector<float> o(static_cast<size_t>(splits) * kDims, std::numeric_limits<float>::quiet_NaN());
    float merged[kDims];
    const float merged_lse = merge_splits<kDims>(splits, lse.data(), 1, o.data(), kDims, merged);
    CHECK(merged_lse == -std::numeric_limits<float>::infinity());
    for (float x : merged) CHECK(x == 0.0f);
    CHECK(split_kv_07::merge_splits<kDims, 4, 8>(splits, lse.data(), 1, o.data(), kDims, merged) ==
          -std::numeric_limits<float>::infinity());
    for (float x : merged) CHECK(x == 0.0f);  // and no empty split's NaN O was read
  }
}

TEST_CASE("one split: the merge returns it unchanged, bit for bit", "[split_kv]") {
  std::mt19937_64 rng(43);
  for (double offset : {0.0, 1e4, -50.0}) {
    const Partials p = split_row(random_row(rng, 33, 2.0, offset, 0.0), {});
    float o[kDims];
    CHECK(merge_splits<kDims>(1, p.lse.data(), 1, p.o.data(), kDims, o) == p.lse[0]);
    for (int d = 0; d < kDims; ++d) CHECK(o[d] == p.o[d]);
    CHECK(split_kv_07::merge_splits<kDims, 4, 8>(1, p.lse.data(), 1, p.o.data(), kDims, o) == p.lse[0]);
    for (int d = 0; d < kDims; ++d) CHECK(o[d] == p.o[d]);
  }
}

TEST_CASE("a NaN split (a NaN key) makes the merged row NaN, wherever it is", "[split_kv]") {
  std::mt19937_64 rng(44);
  for (int nan_split : {0, 1, 4}) {
    Partials p = split_row(random_row(rng, 40, 1.0, 0.0, 0.0), {8, 16, 24, 32});
    for (int s = 0; s < p.splits; ++s)
      if (s != nan_split) p.lse[s] = -std::numeric_limits<float>::infinity();  // the others see nothing
    p.lse[nan_split] = std::numeric_limits<float>::quiet_NaN();
    float o[kDims];
    INFO("NaN in split " << nan_split);
    CHECK(std::isnan(merge_splits<kDims>(p.splits, p.lse.data(), 1, p.o.data(), kDims, o)));
    for (float x : o) CHECK(std::isnan(x));
    CHECK(std::isnan(split_kv_07::merge_splits<kDims, 4, 8>(p.splits, p.lse.data(), 1, p.o.data(), kDims, o)));
    for (float x : o) CHECK(std::isnan(x));
  }
}

TEST_CASE("choose_num_splits: FA2's wave heuristic, bounded as split_kv.h says", "[split_kv]") {
  // An H100 SXM has 132 SMs; 2 thread blocks of the stage fit per SM at head_dim 128 (255 registers
  // x 128 threads), so 264 run at once.
  const int64_t slots = 132 * 2;
  // A grid that fills 80% of one wave runs unsplit: prefill, and decoding at batch 16 x 32 heads.
  CHECK(choose_num_splits(16 * 32, slots, 256) == 1);
  CHECK(choose_num_splits(212, slots, 1 << 20) == 1);
  CHECK(choose_num_splits(211, slots, 1 << 20) > 1);
  // Too few K/V blocks to give every split kMinBlocksPerSplit of them.
  CHECK(choose_num_splits(32, slots, 3) == 1);
  CHECK(choose_num_splits(1, slots, 5) == 2);
  for (int64_t work : {1, 8, 32, 64, 100, 200})
    for (int64_t kv_blocks : {2, 16, 63, 64, 256, 2048})
      for (int64_t resident : {int64_t{108}, slots, int64_t{132 * 5}}) {
        const int splits = choose_num_splits(work, resident, kv_blocks);
        INFO(work << " thread blocks, " << resident << " resident, " << kv_blocks << " K/V blocks: " << splits
                  << " splits");
        CHECK(splits >= 1);
        CHECK(splits <= split_kv_01::kMaxHeuristicSplits);
        CHECK(splits <= std::max<int64_t>(1, kv_blocks / split_kv_01::kMinBlocksPerSplit));
        CHECK(splits <= resident);
        // The rule itself: the smallest eligible count within 85% of the best eligible efficiency.
        const int64_t most = std::min<int64_t>(
            {split_kv_01::kMaxHeuristicSplits, resident, kv_blocks / split_kv_01::kMinBlocksPerSplit});
        if (10 * work < 8 * resident && most > 1) check_smallest_within(work, resident, kv_blocks, most, splits, 0.85);
      }
  // Batch 1, 32 heads, seq_kv 16384 (256 blocks): 32 thread blocks alone use 12% of the slots.
  const int splits = choose_num_splits(32, slots, 256);
  CHECK(splits == 7);  // 224 thread blocks: 85% of one wave, the first count within 85% of the best
}

TEST_CASE("choose_num_splits from decode_06 on: grids past one wave split too, at 95% of the best", "[split_kv]") {
  using split_kv_07::choose_num_splits;
  // The page's table (decode_06_last_wave.md): 396 slots (132 SMs x 3 blocks of the 64-row tile),
  // 256 K/V blocks (seq_kv 16384 in blocks of 64).
  const int64_t slots = 132 * 3;
  CHECK(choose_num_splits(512, slots, 256) == 3);   // 1.29 waves unsplit (65%) -> 3.88 waves (97%)
  CHECK(choose_num_splits(2048, slots, 256) == 3);  // 5.17 waves (86%) -> 15.5 waves (97%)
  CHECK(choose_num_splits(32, slots, 256) == 12);   // FA2's rule: 11 (89%)
  CHECK(choose_num_splits(128, slots, 256) == 3);
  CHECK(choose_num_splits(1, slots, 256) == 128);   // one tile group: the bound
  // A grid of 80% to 100% of one wave still runs unsplit.
  CHECK(choose_num_splits(317, slots, 256) == 1);
  CHECK(choose_num_splits(396, slots, 256) == 1);
  for (int64_t work : {1, 8, 32, 100, 317, 396, 397, 512, 1000, 2048})
    for (int64_t kv_blocks : {2, 16, 63, 256, 2048})
      for (int64_t resident : {int64_t{264}, slots}) {
        const int splits = choose_num_splits(work, resident, kv_blocks);
        INFO(work << " thread blocks, " << resident << " resident, " << kv_blocks << " K/V blocks: " << splits
                  << " splits");
        const int64_t most = std::min<int64_t>(
            {split_kv_07::kMaxHeuristicSplits, resident, kv_blocks / split_kv_07::kMinBlocksPerSplit});
        CHECK(splits >= 1);
        CHECK(splits <= std::max<int64_t>(1, most));
        if (10 * work >= 8 * resident && work <= resident)
          CHECK(splits == 1);  // 80% to 100% of one wave
        else if (most > 1)
          check_smallest_within(work, resident, kv_blocks, most, splits, 0.95);
      }
}
