// Split-KV (Flash-Decoding): which K/V blocks each split takes, how many splits a launch uses, and
// the exact merge of the splits' partial results. Host and device: the kernels call these, and
// tests/test_split_kv_combine.cpp runs the same functions on the CPU against an fp64 softmax.
//
// Split s of S, over the keys K_s of one query row, leaves (the attention kernel writes them, fp32)
//   lse_s = log(sum_{j in K_s} exp(t_j))        t_j = softmax_scale * q . k_j; -inf if K_s sees no key
//   O_s   = sum_{j in K_s} exp(t_j - lse_s) v_j  normalized by its own sum; 0 if it sees no key
// and the whole row is their weighted sum, exactly (the page derives it):
//   M = max_s lse_s,  Z = sum_s exp(lse_s - M),  lse = M + log Z,  O = sum_s exp(lse_s - M) / Z * O_s
#pragma once

#include <cmath>
#include <cstdint>

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

namespace FA_STAGE_NAMESPACE {

// ============================ which keys a split takes ============================
// The kv_blocks K/V blocks that a query block visits, cut into num_splits runs of whole blocks whose
// lengths differ by at most one: split s takes blocks [s n / S, (s + 1) n / S). With more splits
// than blocks some runs are empty (begin == end); the kernel then writes only lse_s = -inf.
struct KvBlockRange {
  int begin;
  int end;
};

FA_HOST_DEVICE constexpr KvBlockRange split_kv_blocks(int kv_blocks, int num_splits, int split) {
  return {static_cast<int>(int64_t{split} * kv_blocks / num_splits),
          static_cast<int>((int64_t{split} + 1) * kv_blocks / num_splits)};
}

// ============================ how many splits ============================
// The launcher's choice where AttentionParams::num_splits is 0 (host code).
// A grid of `work_blocks` thread blocks (batch x heads x query blocks) on a GPU that holds
// `resident_blocks` of them at once (SMs x blocks per SM, from the occupancy calculator) runs in
// waves; S splits make S times as many blocks, each 1/S as long. The efficiency of S is the
// fraction of the slots the waves keep busy, waves / ceil(waves) with waves = work_blocks S /
// resident_blocks, and the choice is the smallest S within 95% of the best one's efficiency.
// FlashAttention-2's heuristic, which the parent follows, runs every grid of at least 80% of one
// wave unsplit and settles for 85% of the best: a grid of 1.29 waves (512 blocks on 396 slots) then
// runs its second wave 29% full, and a decoding kernel's blocks stream keys for their whole life, so
// the slots that wave leaves empty are bandwidth lost. Here:
//   * a grid of 80% to 100% of one wave still runs unsplit (one wave, nearly full);
//   * above one wave the waves are counted like any other grid's (512 blocks on 396 slots: 3
//     splits, 3.88 waves, 97%), and 95% of the best: a split costs a partial O of head_dim floats
//     per row, written and read back once, nothing beside the keys' bytes a decoding step reads;
//   * no split shorter than kMinBlocksPerSplit blocks (each split waits for its first K block with
//     nothing to overlap it), nor more than kMaxHeuristicSplits (FA2's bound) or resident_blocks;
//   * S is skipped where the longest split is as long as with S - 1 splits (ceil(n / S) ==
//     ceil(n / (S - 1))): the same critical path for more partial results.
constexpr int kMaxHeuristicSplits = 128;
constexpr int kMinBlocksPerSplit = 2;

inline int choose_num_splits(int64_t work_blocks, int64_t resident_blocks, int64_t kv_blocks) {
  if (resident_blocks <= 0 || (10 * work_blocks >= 8 * resident_blocks && work_blocks <= resident_blocks)) return 1;
  int64_t max_splits = kv_blocks / kMinBlocksPerSplit;
  if (max_splits > kMaxHeuristicSplits) max_splits = kMaxHeuristicSplits;
  if (max_splits > resident_blocks) max_splits = resident_blocks;
  if (max_splits <= 1) return 1;
  const auto longest_split = [&](int64_t splits) { return (kv_blocks + splits - 1) / splits; };
  const auto eligible = [&](int64_t splits) {
    return splits == 1 || longest_split(splits) != longest_split(splits - 1);
  };
  const auto efficiency = [&](int64_t splits) {
    const double waves = static_cast<double>(work_blocks * splits) / static_cast<double>(resident_blocks);
    return waves / std::ceil(waves);
  };
  double best = 0.0;
  for (int64_t splits = 1; splits <= max_splits; ++splits)
    if (eligible(splits) && efficiency(splits) > best) best = efficiency(splits);
  for (int64_t splits = 1; splits <= max_splits; ++splits)
    if (eligible(splits) && efficiency(splits) >= 0.95 * best) return static_cast<int>(splits);
  return 1;
}

// ============================ merging the splits ============================
// The larger of two LSEs, NaN if either is: fmaxf would drop a NaN (a split that read a NaN key),
// and the merged row must be NaN, as the reference's is.
FA_HOST_DEVICE inline float lse_max(float a, float b) {
  return (a > b || a != a) ? a : b;
}

// exp(lse_s - max): split s's weight before normalization. A split that saw no key of the row
// (lse_s = -inf) weighs 0, also when no split saw one (max = -inf, where -inf - -inf is NaN).
FA_HOST_DEVICE inline float split_weight(float lse_split, float max_lse) {
  return lse_split == -INFINITY ? 0.0f : expf(lse_split - max_lse);
}

// Merges split 0 .. num_splits-1 of one row: writes the kDims elements of O this caller holds into
// o and returns the row's LSE. Split s's LSE is lse_split[s * lse_stride], its O elements
// o_split[s * o_stride + d]. The weights are exp(lse_s - M) / Z rather than exp(lse_s - lse): the
// same numbers, without rounding lse = M + log Z (a whole fp32 ulp of |lse|, 2^-10 near 10^4) into
// every weight. A split of weight 0 is not read: an empty split writes only its LSE. A row that no
// split saw (every lse_s = -inf) gets O = 0 and lse = -inf + log(0) = -inf, as the unsplit kernel's.
template <int kDims>
FA_HOST_DEVICE inline float merge_splits(int num_splits, const float* lse_split, int64_t lse_stride,
                                         const float* o_split, int64_t o_stride, float (&o)[kDims]) {
  float max_lse = -INFINITY;
  for (int s = 0; s < num_splits; ++s) max_lse = lse_max(max_lse, lse_split[s * lse_stride]);
  float sum = 0.0f;
  for (int s = 0; s < num_splits; ++s) sum += split_weight(lse_split[s * lse_stride], max_lse);
  const float inv_sum = 1.0f / sum;
  for (int d = 0; d < kDims; ++d) o[d] = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float weight = split_weight(lse_split[s * lse_stride], max_lse);
    if (weight == 0.0f) continue;
    const float scale = weight * inv_sum;
    for (int d = 0; d < kDims; ++d) o[d] += scale * o_split[s * o_stride + d];
  }
  return max_lse + logf(sum);
}

}  // namespace FA_STAGE_NAMESPACE
