// The order in which a non-persistent stage's thread blocks start
// (stages/<track>/<stage>/block_order.h, from ampere_17_lpt_order on), on the CPU: every
// (batch x head, query block) comes exactly once; groups of one head are the parent's order; under
// causal each group of heads comes longest first and its K and V fit in the stage's share of L2;
// and the reason for it all -- a list scheduler that starts the blocks in this order on the H200's
// slots ends sooner than with the parent's order.
#include <algorithm>
#include <functional>
#include <queue>
#include <vector>

#include "block_orders.h"
#include "fa_catch.h"

namespace {

using block_orders::Block;
using block_orders::StageBlockOrder;

// The parent's order under causal (ampere_16_skip_padding): query blocks fastest, the last first,
// one head after another. (Without causal the kernels keep that order and do not call
// block_coordinates.)
Block parent_order(int block, int n) {
  return {n - 1 - block % n, block / n};
}

// K/V blocks (Bc = 64) that query block b (Br = 128) visits under causal at seq_q == seq_kv == seq.
int64_t causal_work(int64_t b, int64_t seq) {
  const int64_t last_row_end = std::min((b + 1) * 128, seq);
  return (last_row_end + 63) / 64;
}

// When the last block ends, blocks starting in `order` on `slots` equal slots (a slot that frees up
// takes the next block): the hardware's block scheduler with every slot as fast as every other.
int64_t makespan(const std::vector<int64_t>& order, int slots) {
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> free_at;
  for (int s = 0; s < slots; ++s) free_at.push(0);
  int64_t end = 0;
  for (int64_t work : order) {
    const int64_t start = free_at.top();
    free_at.pop();
    end = std::max(end, start + work);
    free_at.push(start + work);
  }
  return end;
}

}  // namespace

TEST_CASE("block order: every (batch x head, query block) comes exactly once") {
  REQUIRE(block_orders::kStageBlockOrderCount > 0);
  for (int s = 0; s < block_orders::kStageBlockOrderCount; ++s) {
    const StageBlockOrder& stage = *block_orders::kStageBlockOrders[s];
    INFO("stage " << stage.stage);
    for (int batch_heads : {1, 2, 3, 7, 32, 69})
      for (int n = 1; n <= 20; ++n)
        for (int group : {1, 2, 3, 5, 8, 32, 100}) {
          INFO(batch_heads << " batch x heads, " << n << " query blocks, groups of " << group);
          std::vector<int> seen(static_cast<size_t>(batch_heads * n), 0);
          bool in_range = true;
          for (int b = 0; b < batch_heads * n; ++b) {
            const Block c = stage.block_coordinates(b, n, batch_heads, group);
            if (c.q_block < 0 || c.q_block >= n || c.batch_head < 0 || c.batch_head >= batch_heads) {
              in_range = false;
              break;
            }
            ++seen[static_cast<size_t>(c.batch_head * n + c.q_block)];
          }
          REQUIRE(in_range);
          REQUIRE(std::all_of(seen.begin(), seen.end(), [](int count) { return count == 1; }));
        }
  }
}

TEST_CASE(
    "block order: groups of one head are the parent's order, and without causal the group is one head") {
  for (int s = 0; s < block_orders::kStageBlockOrderCount; ++s) {
    const StageBlockOrder& stage = *block_orders::kStageBlockOrders[s];
    INFO("stage " << stage.stage);
    for (int batch_heads : {1, 5, 512})
      for (int n : {1, 8, 64})
        for (int b = 0; b < batch_heads * n; b += 7) {
          const Block c = stage.block_coordinates(b, n, batch_heads, 1);
          const Block want = parent_order(b, n);
          REQUIRE(c.q_block == want.q_block);
          REQUIRE(c.batch_head == want.batch_head);
        }
    for (int64_t seq : {1, 1000, 8192})
      CHECK(stage.group_heads(false, 512, seq, 512, int64_t{60} << 20) == 1);
  }
}

TEST_CASE(
    "block order: under causal the groups come longest first, whole but the first, their K and V in L2") {
  for (int s = 0; s < block_orders::kStageBlockOrderCount; ++s) {
    const StageBlockOrder& stage = *block_orders::kStageBlockOrders[s];
    INFO("stage " << stage.stage);
    for (int batch_heads : {1, 3, 32, 69, 512})
      for (int n : {1, 2, 9, 16})
        for (int group : {1, 2, 4, 30, 600}) {
          INFO(batch_heads << " batch x heads, " << n << " query blocks, groups of " << group);
          // The groups: the first holds the remainder heads (1 .. group), every later one `group` heads,
          // so that the last group, whose end is the kernel's, is whole.
          const int whole = std::min(group, batch_heads);
          const int first_size = batch_heads - (batch_heads - 1) / whole * whole;
          REQUIRE(first_size >= 1);
          REQUIRE(first_size <= whole);
          for (int head0 = 0; head0 < batch_heads; head0 += head0 == 0 ? first_size : whole) {
            const int size = head0 == 0 ? first_size : whole;
            int previous_q = n - 1;
            for (int b = head0 * n; b < (head0 + size) * n; ++b) {
              const Block c = stage.block_coordinates(b, n, batch_heads, group);
              INFO("block " << b << " (group of heads " << head0 << " .. " << head0 + size - 1 << ")");
              REQUIRE(c.batch_head >= head0);  // the group's blocks name its heads only
              REQUIRE(c.batch_head < head0 + size);
              REQUIRE(c.q_block <= previous_q);  // longest first within the group
              previous_q = c.q_block;
            }
          }
        }

    // The group's K and V fill at most the L2 share (or it is one head), and one head more would not fit.
    const int64_t l2 = int64_t{60} << 20;  // the H200
    for (int64_t seq : {1, 9, 1000, 2048, 8192, 1 << 20})
      for (int64_t row_bytes : {256, 512}) {  // K and V of one key: head_dim 64 / 128, fp16 or bf16
        const int64_t g = stage.group_heads(true, 512, seq, row_bytes, l2);
        INFO("seq_kv " << seq << ", " << row_bytes << " bytes a key: groups of " << g);
        REQUIRE(g >= 1);
        REQUIRE(g <= 512);
        if (g > 1) REQUIRE(g * seq * row_bytes <= l2 / stage.l2_share_divisor);
        if (g < 512) REQUIRE((g + 1) * seq * row_bytes > l2 / stage.l2_share_divisor);
      }
  }
}

TEST_CASE("block order: a list scheduler ends sooner with the groups than with the parent's order") {
  // [16, S, 32, D] causal, 128-row query blocks, 64-key K/V blocks; two thread blocks per SM on the
  // H200's 132 SMs (ampere_16_skip_padding's registers and shared memory), each slot as fast as any
  // other.
  for (int s = 0; s < block_orders::kStageBlockOrderCount; ++s) {
    const StageBlockOrder& stage = *block_orders::kStageBlockOrders[s];
    INFO("stage " << stage.stage);
    const int batch_heads = 16 * 32;
    for (int64_t seq : {1024, 2048, 4096, 8192})
      for (int64_t row_bytes : {256, 512}) {
        const int n = static_cast<int>(seq / 128);
        const int group =
            static_cast<int>(stage.group_heads(true, batch_heads, seq, row_bytes, int64_t{60} << 20));
        std::vector<int64_t> grouped, parent;
        int64_t total = 0;
        for (int b = 0; b < batch_heads * n; ++b) {
          grouped.push_back(causal_work(stage.block_coordinates(b, n, batch_heads, group).q_block, seq));
          parent.push_back(causal_work(parent_order(b, n).q_block, seq));
          total += parent.back();
        }
        const int slots = 2 * 132;
        const int64_t ideal = (total + slots - 1) / slots;
        const int64_t grouped_end = makespan(grouped, slots), parent_end = makespan(parent, slots);
        INFO("S " << seq << ", " << row_bytes << " bytes a key, groups of " << group << ": ideal " << ideal
                  << ", grouped " << grouped_end << ", parent " << parent_end);
        CHECK(grouped_end < parent_end);
        // Within 2% of a perfect split (plus one block) where the last group spans two waves or more.
        if (group * n >= 2 * slots) CHECK(grouped_end <= ideal + ideal / 50 + causal_work(0, seq));
      }
  }
}
