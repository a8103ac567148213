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
// FlashAttention-2's heuristic, the track's before decode_06_last_wave, runs every grid of at least
// 80% of one wave unsplit and settles for 85% of the best: a grid of 1.29 waves (512 blocks on 396
// slots) then runs its second wave 29% full, and a decoding kernel's blocks stream keys for their
// whole life, so the slots that wave leaves empty are bandwidth lost. Here:
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

// The merge of one row, in parts that run side by side (combine_kernel: one thread block per row,
// the parts its warps). The parent merged a row in one thread's three loops over the splits, each
// iteration a read of the workspace, which the compiler could only partly overlap: at S = 128 some
// hundred trips to L2 one after another, for 32 rows on 8 SMs. Here:
//   1. M = max_s lse_s and Z = sum_s exp(lse_s - M), which every part needs (the kernel: each warp
//      takes them itself, its lanes reading splits l, l + 32, ... at once, then shuffles);
//   2. part w of kParts adds its splits w, w + kParts, ... into its own o (accumulate_splits), with
//      the reads of kInFlight splits issued before any is used;
//   3. the parts' o added (the kernel: through shared memory).
// The same weights exp(lse_s - M) / Z as before, rather than exp(lse_s - lse): lse = M + log Z
// rounded would put a whole fp32 ulp of |lse| (2^-10 near 10^4) into every weight. A split of weight
// 0 is not read: an empty split writes only its LSE. A row that no split saw (every lse_s = -inf)
// gets O = 0 and lse = -inf + log(0) = -inf, as the unsplit kernel's; a NaN LSE makes the row NaN.

// Step 2: o += exp(lse_s - M) / Z * O_s over splits first, first + step, ... below num_splits
// (inv_sum = 1 / Z). Split s's LSE is lse_split[s * lse_stride], its O elements o_split[s * o_stride
// + d]. kInFlight splits at a time: their weights, then their O, loaded before the first is added.
template <int kDims, int kInFlight>
FA_HOST_DEVICE inline void accumulate_splits(int num_splits, int first, int step, const float* lse_split,
                                             int64_t lse_stride, const float* o_split, int64_t o_stride,
                                             float max_lse, float inv_sum, float (&o)[kDims]) {
  for (int s0 = first; s0 < num_splits; s0 += kInFlight * step) {
    float lse[kInFlight], scale[kInFlight];
    for (int u = 0; u < kInFlight; ++u) {  // past the end: s0's LSE read (no branch between the reads)
      const int s = s0 + u * step;
      lse[u] = lse_split[(s < num_splits ? s : s0) * lse_stride];
    }
    for (int u = 0; u < kInFlight; ++u) {
      const float weight = s0 + u * step < num_splits ? split_weight(lse[u], max_lse) : 0.0f;
      scale[u] = weight == 0.0f ? 0.0f : weight * inv_sum;  // not 0 * inf where Z = 0
    }
    float part[kInFlight][kDims];
    for (int u = 0; u < kInFlight; ++u)
      for (int d = 0; d < kDims; ++d) part[u][d] = scale[u] != 0.0f ? o_split[(s0 + u * step) * o_stride + d] : 0.0f;
    for (int u = 0; u < kInFlight; ++u)
      for (int d = 0; d < kDims; ++d) o[d] += scale[u] * part[u][d];
  }
}

// All three steps in one thread, the parts added in order 0 .. kParts - 1: what combine_kernel
// computes, up to the order of the additions in M and Z (tests/test_split_kv_combine.cpp checks it
// against the fp64 softmax). Writes the kDims elements of O into o and returns the row's LSE.
template <int kDims, int kParts, int kInFlight>
FA_HOST_DEVICE inline float merge_splits(int num_splits, const float* lse_split, int64_t lse_stride,
                                         const float* o_split, int64_t o_stride, float (&o)[kDims]) {
  float max_lse = -INFINITY;
  for (int s = 0; s < num_splits; ++s) max_lse = lse_max(max_lse, lse_split[s * lse_stride]);
  float sum = 0.0f;
  for (int s = 0; s < num_splits; ++s) sum += split_weight(lse_split[s * lse_stride], max_lse);
  for (int d = 0; d < kDims; ++d) o[d] = 0.0f;
  for (int w = 0; w < kParts; ++w) {
    float part_o[kDims] = {};
    accumulate_splits<kDims, kInFlight>(num_splits, w, kParts, lse_split, lse_stride, o_split, o_stride, max_lse,
                                        1.0f / sum, part_o);
    for (int d = 0; d < kDims; ++d) o[d] += part_o[d];
  }
  return max_lse + logf(sum);
}

}  // namespace FA_STAGE_NAMESPACE
