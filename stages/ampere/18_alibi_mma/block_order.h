// Which (batch x head, query block) each thread block computes: this file is the whole story of the
// order in which the GPU starts them. Host and device: tests/test_block_order.cpp checks on the CPU
// that every block comes exactly once, that without causal the order is the parent's, and that
// under causal each group's blocks come longest first and its K and V fit in the budget.
//
// Under causal masking the query blocks of a head have different lengths: query block b visits the
// K/V blocks up to its last row's diagonal, about (b + 1) x Br / Bc of them. The hardware starts
// thread blocks in the order of blockIdx.x as SMs free up (a list scheduler), so the kernel ends
// when the last block started ends. The earlier order, longest first within each head (n - 1, ...,
// 0, then the next head), ends with one head's blocks of every length: the longest of them starts
// near the end and runs alone. Longest first over all heads (the list scheduler's LPT rule) ends
// with the shortest blocks instead -- but then every head's K and V are read at n different times
// with all heads in flight, far more than L2 holds. So the heads are taken in groups whose K and V
// fit in a share of L2, and within a group the query blocks go longest first over all its heads:
// query block n - 1 of each head of the group, then n - 2 of each, and so on. Each group ends with
// its shortest blocks, and only the last group's end is the kernel's; the first group takes the
// remainder heads, so that the last one is whole.
//
// Without causal every block has the same length, and the kernel keeps ampere_16_skip_padding's
// order without calling block_coordinates (group_heads says one head).
#pragma once

#include <cstdint>

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

namespace FA_STAGE_NAMESPACE {

// The share of L2 one group's K and V may fill: the rest holds the Q and O tiles in flight, and on
// the H100/H200 a line read by SMs of both L2 partitions may be held twice.
constexpr int64_t kL2ShareDivisor = 2;

struct BlockCoordinates {
  int q_block, batch_head;
};

// Heads per group: as many as keep their K and V (bytes_per_kv_row per key and head, for K and V
// together) within the L2 share; at least one. Without causal, one.
FA_HOST_DEVICE inline int64_t group_heads(bool causal, int64_t batch_heads, int64_t seq_kv,
                                          int64_t bytes_per_kv_row, int64_t l2_bytes) {
  if (!causal) return 1;
  const int64_t kv_bytes_per_head = seq_kv * bytes_per_kv_row;
  const int64_t heads = kv_bytes_per_head > 0 ? l2_bytes / kL2ShareDivisor / kv_bytes_per_head : batch_heads;
  return heads < 1 ? 1 : heads < batch_heads ? heads : batch_heads;
}

// Thread block `block` (0 .. batch_heads x num_q_blocks - 1) in groups of `group` heads (>= 1). In
// 32 bits: a grid has fewer than 2^31 blocks, and a 64-bit division is a subroutine call (with these
// four in 64 bits the fp16 head_dim 128 kernel had 8,876 SASS instructions, in 32 bits 8,738;
// ampere_16_skip_padding, one 64-bit division and remainder, 8,684).
FA_HOST_DEVICE inline BlockCoordinates block_coordinates(int block, int num_q_blocks, int batch_heads,
                                                         int group) {
  const int first_group = batch_heads - (batch_heads - 1) / group * group;  // 1 .. group heads
  int first_head = 0, heads = first_group, position = block;                // position within the group
  if (block >= first_group * num_q_blocks) {
    const int rest = block - first_group * num_q_blocks;
    first_head = first_group + rest / (group * num_q_blocks) * group;
    heads = group;
    position = rest % (group * num_q_blocks);
  }
  return {num_q_blocks - 1 - position / heads, first_head + position % heads};
}

}  // namespace FA_STAGE_NAMESPACE
