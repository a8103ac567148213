// hopper_15_lazy_rescale: lazy rescaling -- the running max moves, and O is rescaled, only when a
// block raises it by more than a factor 2^8 in the weights.
//
// The online softmax rescales O (and the row sum) by exp2((m_old - m_new) * scale_log2) after every
// K/V block: at head_dim 64 that is 32 FMUL per thread per block (at 128, 64) plus two
// exponentials, in a loop of 490 instructions whose issue, not the tensor cores, sets the pace at
// head_dim 64 (docs/stages/hopper/09_three_warpgroups.md: tensor pipe 51%, issue 51%, stalls on
// fixed-latency dependencies). After the first few blocks the row max rarely grows, and when it
// grows it usually grows a little. Here the old max stays unless a block's max exceeds it by more
// than 2^8 in the exponent (fa::max_grows_too_far, common/softmax_math.h, modelled on the CPU by
// test_online_softmax): the block's weights are then at most 256, which fp32 sums and O and the
// 16-bit P hold, and the result is the same softmax (everything is relative to one max, whichever
// it is). The decision is per warp (a vote), so that the rescale is a branch the whole warp takes
// or skips. FlashAttention-4 does this on Blackwell.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "common/fragment_layout.h"
#include "common/hopper_encoding.h"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/softmax_math.h"
#include "common/tensor_map.h"
#include "schedule.h"
#include "smem_layout.h"
#include "stage_declaration.h"
#include "tma.cuh"
#include "warp_roles.cuh"
#include "wgmma.cuh"

namespace FA_STAGE_NAMESPACE {

using namespace fa;

// ================================ config ================================
constexpr int kBlockKV = 128;  // Bc: key/value rows per iteration (the n of S = Q K^T's wgmma)
constexpr int kStages = 2;     // K/V ring slots: block j + 1 loads while block j is computed
static_assert((kStages & (kStages - 1)) == 0, "a power of two: the ring position may wrap around 2^32");
static_assert(kBlockKV % kWgmmaK == 0, "P V consumes keys 16 at a time");
// Named barrier ids (0 is __syncthreads'): per consumer warpgroup c = 0 .. 2, its turn on the tensor
// cores (kTurnBarrier + c: it and the warpgroup before it in the ring) and its epilogue
// (kEpilogueBarrier + c, its own warps).
enum NamedBarrier : int {
  kTurnBarrier = 1,      // 1, 2, 3
  kEpilogueBarrier = 4,  // 4, 5, 6
};
constexpr int kTurnThreads = 2 * kWarpgroupThreads;  // the one who waits and the one who passes
// Within its warpgroup's 64 rows, warp w holds rows 16w .. 16w+15 of every accumulator, and a
// thread two of them: row lane/4 (entries 0, 1 of each n8 block) and row lane/4 + 8 (entries 2, 3);
// see wgmma_acc_row in hopper_encoding.h.
constexpr int kRowsPerThread = 2;

// How many consumer warpgroups take turns on the tensor cores (hopper_09_three_warpgroups). Per K/V
// block a warpgroup's two GEMMs take the tensor cores for a time G, and its softmax for X; while one
// warpgroup's GEMMs run, the others do their softmax, so n warpgroups keep the tensor cores busy
// while X <= (n - 1) G. The softmax's work is 64 x kBlockKV scores whatever the head
// dimension, the GEMMs' is proportional to it: at head_dim 128 two warpgroups suffice (X < G, and
// their 240 registers each leave room for no third); at head_dim 64 G halves and X does not, so a
// third warpgroup of 64 rows (Br = 192) gets 160 registers, enough for accumulators half as wide.
// From this stage on head_dim 64 has both tiles, and the launcher picks one per call (launcher).

// Everything else follows from the element type, the head dimension and the tile.
template <typename T, int kHeadDim_, bool kThreeWarpgroups_>
struct Config {
  using Elem = T;
  static constexpr int kHeadDim = kHeadDim_;
  static_assert(!kThreeWarpgroups_ || kHeadDim == 64, "a third consumer warpgroup fits the registers at head_dim 64 only");
  static constexpr int kConsumerWarpgroups = kThreeWarpgroups_ ? 3 : 2;  // each owns 64 query rows: one wgmma m
  static constexpr int kBlockQ = kConsumerWarpgroups * kWgmmaM;                 // Br: query rows per thread block
  static constexpr int kWarpgroups = 1 + kConsumerWarpgroups;                   // warpgroup 0 is the producer
  static constexpr int kWarps = kWarpgroups * kWarpgroupThreads / 32;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kConsumerWarps = kConsumerWarpgroups * kWarpgroupThreads / 32;
  static constexpr int kConsumerThreads = kConsumerWarps * 32;
  // Registers per thread after setmaxnreg: the block was launched with 65536 / kThreads each (rounded
  // down to a multiple of 8: 168 for 3 warpgroups, 128 for 4); what the producer returns, the
  // consumers take.
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = kConsumerWarpgroups == 2 ? 240 : 160;
  static_assert(kWarpgroupThreads * (kProducerRegisters + kConsumerWarpgroups * kConsumerRegisters) <= 65536,
                "the roles' registers fit the register file");
  static_assert(kEpilogueBarrier >= kTurnBarrier + kConsumerWarpgroups && kEpilogueBarrier + kConsumerWarpgroups <= 16,
                "a turn and an epilogue barrier per consumer warpgroup, all of them different");
  static constexpr int kElemsPer16B = 16 / sizeof(T);  // one 16-byte copy
  static constexpr int kChunksPerRow = kHeadDim / kElemsPer16B;
  static constexpr int kPanels = kHeadDim / kTmaBoxCols;  // TMA boxes per tile: one 64-column panel each
  static constexpr int kDimSteps = kHeadDim / kWgmmaK;  // k-steps of S = Q K^T
  static constexpr int kKeySteps = kBlockKV / kWgmmaK;  // k-steps of O += P V
  static constexpr int kKeyTiles = kBlockKV / kMmaN;    // n8 blocks of S
  static constexpr int kDimTiles = kHeadDim / kMmaN;    // n8 blocks of O
  static_assert(sizeof(T) == 2, "the descriptors are written for 16-bit elements");
};

// ========================= shared-memory layout =========================
// [ Q tile | K slot 0 .. kStages-1 | V slot 0 .. kStages-1 | O tile | barriers ], Q, K and V in
// wgmma's 128B-swizzle layout (smem_layout.h: operand_offset), 64-column panels of rows x 128 bytes,
// which is also what a TMA box with the 128-byte swizzle writes. O has a tile of its own
// (tile_offset): the next tile's Q lands while this tile's O is written out.
// The swizzle repeats every 1024 bytes from a 1024-byte boundary (the descriptors' base offset is 0,
// and TMA requires it), so the tiles start on one: every tile and panel is a multiple of 1024
// bytes, and the base is aligned up at run time (kAlignSlack). The mbarriers (8 bytes each) follow.
template <typename Cfg>
struct SharedTiles {
  using T = typename Cfg::Elem;
  static constexpr int kQElems = Cfg::kBlockQ * Cfg::kHeadDim;
  static constexpr int kKVElems = kBlockKV * Cfg::kHeadDim;
  static constexpr uint32_t kQPanelBytes = Cfg::kBlockQ * kSwizzle128RowBytes;  // one 64-column panel
  static constexpr uint32_t kKVPanelBytes = kBlockKV * kSwizzle128RowBytes;
  static constexpr uint32_t kQBytes = kQElems * sizeof(T);  // what the Q barrier expects
  static constexpr uint32_t kKVBytes = kKVElems * sizeof(T);
  static constexpr int kBarriers = 2 + 4 * kStages;  // Q full, Q empty; K full, V full, K empty, V empty per slot
  static constexpr int kAlignSlack = kSwizzle128AtomBytes;
  static constexpr size_t kBytes =
      2 * kQBytes + 2 * kStages * kKVBytes + kBarriers * sizeof(uint64_t) + Cfg::kConsumerThreads * sizeof(float) + kAlignSlack;  // O is Q's size
  static_assert(kQBytes % kSwizzle128AtomBytes == 0 && kKVBytes % kSwizzle128AtomBytes == 0,
                "every tile starts on a swizzle atom");
  static_assert(kQBytes == Cfg::kPanels * kQPanelBytes && kKVBytes == Cfg::kPanels * kKVPanelBytes,
                "a tile is exactly its TMA boxes: the expect_tx byte counts are the tiles' sizes");
  // Slots are picked at run time (kv_iteration % kStages): computed from one base, not kept in
  // arrays, which a run-time index would move to local memory.
  T* q;
  T* o;
  uint64_t* q_full;
  uint64_t* q_empty;
  uint64_t* k_full;   // [kStages]
  uint64_t* v_full;   // [kStages]
  uint64_t* k_empty;  // [kStages]
  uint64_t* v_empty;  // [kStages]
  float* softmax_fence;  // [kConsumerThreads]: see softmax_before_wait
  __device__ explicit SharedTiles(unsigned char* raw) {
    const uint32_t raw_address = smem_u32(raw);
    const uint32_t aligned = (raw_address + kAlignSlack - 1) & ~static_cast<uint32_t>(kAlignSlack - 1);
    q = reinterpret_cast<T*>(raw + (aligned - raw_address));
    o = q + kQElems + 2 * kStages * kKVElems;
    q_full = reinterpret_cast<uint64_t*>(o + kQElems);
    q_empty = q_full + 1;
    k_full = q_empty + 1;
    v_full = k_full + kStages;
    k_empty = v_full + kStages;
    v_empty = k_empty + kStages;
    softmax_fence = reinterpret_cast<float*>(v_empty + kStages);
  }
  __device__ T* k(int slot) const { return q + kQElems + slot * kKVElems; }
  __device__ T* v(int slot) const { return q + kQElems + (kStages + slot) * kKVElems; }
};

// The three tensor maps (tma.cuh, hopper_encoding.h section 7), passed by value as one
// __grid_constant__ kernel parameter: the copy engine reads them from parameter memory.
struct TensorMaps {
  CUtensorMap q, k, v;
};

// ============================== load tiles ==============================
// Global -> shared, by the copy engine: one thread announces the tile's bytes on its barrier and
// issues one box per 64-column panel, at coordinates {64 p, first row, head, batch}. The barrier's
// phase completes when the last byte has landed.
template <typename Cfg, int kRows>
__device__ __forceinline__ void load_tile(typename Cfg::Elem* tile_smem, const CUtensorMap* map, uint64_t* barrier,
                                          int row0, int head, int batch) {
  constexpr uint32_t kPanelBytes = kRows * kSwizzle128RowBytes;
  const uint32_t barrier_address = smem_u32(barrier);
  mbarrier_arrive_expect_tx(barrier_address, Cfg::kPanels * kPanelBytes);
#pragma unroll
  for (int panel = 0; panel < Cfg::kPanels; ++panel)
    tma_load_box(smem_u32(tile_smem) + panel * kPanelBytes, map, barrier_address, panel * kTmaBoxCols, row0, head,
                 batch);
}

// Shared -> tensor cores: no loads into registers. A wgmma reads its shared operands through a
// 64-bit matrix descriptor (hopper_encoding.h): start address, the byte offsets between 8-row
// groups and between 64-column panels, the swizzle mode.
//   Q (A of S, K-major): the warpgroup's 64 rows, head dims [16 kk, 16 kk + 16).
//   K (B of S, K-major): all kBlockKV keys, head dims [16 kk, 16 kk + 16).
//   V (B of P V, N-major): keys [16 kk, 16 kk + 16), all head dims.
template <typename Cfg>
__device__ __forceinline__ uint64_t q_descriptor(uint32_t q_rows_address, int kk) {
  return wgmma_descriptor_k_major_sw128_panels(q_rows_address, SharedTiles<Cfg>::kQPanelBytes, kk);
}
template <typename Cfg>
__device__ __forceinline__ uint64_t k_descriptor(uint32_t k_address, int kk) {
  return wgmma_descriptor_k_major_sw128_panels(k_address, SharedTiles<Cfg>::kKVPanelBytes, kk);
}
template <typename Cfg>
__device__ __forceinline__ uint64_t v_descriptor(uint32_t v_address, int kk) {
  return wgmma_descriptor_mn_major_sw128(v_address, SharedTiles<Cfg>::kKVPanelBytes, kk);
}

// ============================ the masked keys ===========================
// Key j of a K/V block is masked in row i of the tile where it is past the end of the sequence
// (j >= keys) or above the diagonal (j > i + diagonal): the score -inf, which no row maximum takes
// and exp2 turns into the probability 0. A row may lose every key of the block. Entry e of n8 block
// n of the thread's S accumulators is row wgmma_acc_row(thread, e) of the warpgroup's 64 and key
// wgmma_acc_col(thread, 4n + e) of the block (hopper_encoding.h, section 3).
template <typename Cfg>
__device__ __forceinline__ void mask_scores(float (&s_acc)[Cfg::kKeyTiles][4], int keys, int diagonal,
                                            int warpgroup_row0, int thread_in_warpgroup) {
#pragma unroll
  for (int n = 0; n < Cfg::kKeyTiles; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = wgmma_acc_col(thread_in_warpgroup, 4 * n + e);
      const int row = warpgroup_row0 + wgmma_acc_row(thread_in_warpgroup, e);
      if (key >= keys || key > row + diagonal) s_acc[n][e] = -INFINITY;
    }
}

// ============================== S = Q K^T ===============================
// One m64n128k16 per 16 head dims, all in one commit group; the first overwrites (scale-d = 0),
// so S needs no clearing. Only issued: the caller decides when to wait (and fences before).
template <typename Cfg>
__device__ __forceinline__ void issue_scores(float (&s_acc)[Cfg::kKeyTiles][4], uint32_t q_rows_address,
                                             uint32_t k_address) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kDimSteps; ++kk)
    Wgmma<typename Cfg::Elem, kBlockKV>::ss(s_acc, q_descriptor<Cfg>(q_rows_address, kk),
                                            k_descriptor<Cfg>(k_address, kk), /*scale_d=*/kk > 0);
  wgmma_commit_group();
}

// ======================== online softmax update =========================
// The running state of the rows this thread holds, in fp32.
struct RowState {
  float max[kRowsPerThread];  // the largest raw (unscaled) score seen so far
  float sum[kRowsPerThread];  // this thread's share of the row sum; the quad adds them at the end
};

__device__ __forceinline__ void init_row_state(RowState& state) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    state.max[r] = -INFINITY;
    state.sum[r] = 0.0f;
  }
}

// Row r's largest score in this K/V block, over the whole row (its 4 lanes).
template <typename Cfg>
__device__ __forceinline__ float block_row_max(const float (&s_acc)[Cfg::kKeyTiles][4], int r) {
  float block_max = -INFINITY;
#pragma unroll
  for (int n = 0; n < Cfg::kKeyTiles; ++n) block_max = fmaxf(block_max, fmaxf(s_acc[n][2 * r], s_acc[n][2 * r + 1]));
  return quad_allreduce_max(block_max);
}

// Turn the scores into unnormalized probabilities P = exp2(s * scale_log2 - max * scale_log2), one
// FFMA feeding one MUFU.EX2 per score, against the running max -- raised first, with the row sums
// rescaled to it, only if some row of the warp's grows too far (fa::max_grows_too_far); then every
// row of the warp moves to its new max, as before. Returns whether it did: O, which the previous
// block's P V may still be adding to, then needs rescale_o with `correction` after that P V's wait.
template <typename Cfg>
__device__ __forceinline__ bool online_softmax_scores(float (&s_acc)[Cfg::kKeyTiles][4], RowState& state,
                                                      float scale_log2, float (&correction)[kRowsPerThread]) {
  float block_max[kRowsPerThread];
  bool grows = false;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    block_max[r] = block_row_max<Cfg>(s_acc, r);
    grows = grows || max_grows_too_far(state.max[r], block_max[r], scale_log2);
  }
  const bool rescale = __any_sync(0xffffffffu, grows);  // one decision per warp: no divergence
  if (rescale) {
#pragma unroll
    for (int r = 0; r < kRowsPerThread; ++r) {
      const float new_max = fmaxf(state.max[r], block_max[r]);
      correction[r] = exp2_approx(state.max[r] * scale_log2 - max_for_exp(new_max) * scale_log2);  // 0 on the first block
      state.max[r] = new_max;
      state.sum[r] *= correction[r];
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const float max_scaled = max_for_exp(state.max[r]) * scale_log2;  // the -inf guard (softmax_math.h)
    float block_sum = 0.0f;
#pragma unroll
    for (int n = 0; n < Cfg::kKeyTiles; ++n) {
      s_acc[n][2 * r] = exp2_approx(fmaf(s_acc[n][2 * r], scale_log2, -max_scaled));
      s_acc[n][2 * r + 1] = exp2_approx(fmaf(s_acc[n][2 * r + 1], scale_log2, -max_scaled));
      block_sum += s_acc[n][2 * r] + s_acc[n][2 * r + 1];
    }
    state.sum[r] += block_sum;
  }
  return rescale;
}

// O was accumulated under the old max: scale it to the new one.
template <typename Cfg>
__device__ __forceinline__ void rescale_o(float (&o_acc)[Cfg::kDimTiles][4], const float (&correction)[kRowsPerThread]) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r)
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d) {
      o_acc[d][2 * r] *= correction[r];
      o_acc[d][2 * r + 1] *= correction[r];
    }
}

// Keeps the softmax above the wait for the previous P V. ptxas keeps a wgmma wait after the
// thread's earlier shared-memory stores, but is free to hoist it above arithmetic it does not
// depend on -- and it does: without this, 56 of a block's 66 exponentials ran after the wait
// (cuobjdump -sass), i.e. not under P V. One store of the row sums, which need every exponential,
// is the fence; the word (one per consumer thread) is never read.
__device__ __forceinline__ void softmax_before_wait(uint32_t fence_address, const RowState& state) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(fence_address), "f"(state.sum[0] + state.sum[1]) : "memory");
}

// =============================== O += P V ===============================
// P never leaves registers: the S accumulators of n8 blocks 2kk and 2kk+1 are exactly wgmma's
// register A fragment of P for k-step kk, after packing pairs of floats to 16 bits
// (fragment_layout.h: p_frag_s_*; hopper_encoding.h, section 6). Packed before the next S = Q K^T
// overwrites the accumulators.
template <typename Cfg>
__device__ __forceinline__ void pack_p(uint32_t (&p_frag)[Cfg::kKeySteps][4], const float (&s_acc)[Cfg::kKeyTiles][4]) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float* pair = &s_acc[p_frag_s_tile(kk, j)][p_frag_s_entry(j)];
      p_frag[kk][j] = pack2<typename Cfg::Elem>(pair[0], pair[1]);
    }
}

// One m64nDk16 per 16 keys, all in one commit group. Only issued: the caller waits, and keeps P's
// registers pinned until then.
template <typename Cfg>
__device__ __forceinline__ void issue_pv(float (&o_acc)[Cfg::kDimTiles][4], const uint32_t (&p_frag)[Cfg::kKeySteps][4],
                                         uint32_t v_address) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk)
    Wgmma<typename Cfg::Elem, Cfg::kHeadDim>::rs(o_acc, p_frag[kk], v_descriptor<Cfg>(v_address, kk));
  wgmma_commit_group();
}

// ========================= normalize and write O ========================
// Add up each row's sum over its quad (every lane of the quad keeps the total, for write_lse),
// divide by it, convert to 16 bits, stage the warpgroup's 64 rows in shared memory (its
// half of O's tile, once its warps have written the previous tile's rows out) and write out those
// of the tile's first `rows` rows (the others are past seq_q) in coalesced 16-byte chunks. Only the
// warpgroup's own warps meet: the other runs on.
template <typename Cfg>
__device__ __forceinline__ void normalize_and_write_o(float (&o_acc)[Cfg::kDimTiles][4], RowState& state,
                                                      typename Cfg::Elem* o_smem, typename Cfg::Elem* o_gmem,
                                                      int64_t row_stride, int rows, int consumer_warpgroup,
                                                      int thread_in_warpgroup) {
  using T = typename Cfg::Elem;
  const int warpgroup_row0 = consumer_warpgroup * kWgmmaM;
  named_barrier_sync<kWarpgroupThreads>(kEpilogueBarrier + consumer_warpgroup);  // the previous rows have left
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    // A row that saw no key has the sum 0 and an O of 0: it writes zeros. (NaN sums still divide.)
    state.sum[r] = quad_allreduce_sum(state.sum[r]);
    const float sum = state.sum[r];
    const float inv_sum = sum == 0.0f ? 0.0f : 1.0f / sum;
    const int row = warpgroup_row0 + wgmma_acc_row(thread_in_warpgroup, 2 * r);
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d) {
      const int col = wgmma_acc_col(thread_in_warpgroup, 4 * d + 2 * r);
      *reinterpret_cast<uint32_t*>(o_smem + tile_offset(row, col, Cfg::kHeadDim)) =
          pack2<T>(o_acc[d][2 * r] * inv_sum, o_acc[d][2 * r + 1] * inv_sum);
    }
  }
  named_barrier_sync<kWarpgroupThreads>(kEpilogueBarrier + consumer_warpgroup);  // the 64 rows are staged
  constexpr int kChunks = kWgmmaM * Cfg::kChunksPerRow;
  static_assert(kChunks % kWarpgroupThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int step = 0; step < kChunks / kWarpgroupThreads; ++step) {
    const int i = step * kWarpgroupThreads + thread_in_warpgroup;
    const int row = warpgroup_row0 + i / Cfg::kChunksPerRow;
    const int col = (i % Cfg::kChunksPerRow) * Cfg::kElemsPer16B;
    if (row < rows)
      *reinterpret_cast<uint4*>(o_gmem + row * row_stride + col) =
          *reinterpret_cast<const uint4*>(o_smem + tile_offset(row, col, Cfg::kHeadDim));
  }
}

// ============================== write LSE ===============================
// lse = softmax_scale * max + log(sum) for each of the thread's two rows that exist, written by the
// quad's first lane (after normalize_and_write_o every lane of the quad holds the row's total). The
// max is of the raw scores and the sum of exp(softmax_scale * (s - max)), so this is the log of the
// sum of exp(softmax_scale * s). A row that saw no key has max = -inf and sum = 0: -inf.
__device__ __forceinline__ void write_lse(const RowState& state, float* lse_gmem, float softmax_scale, int rows,
                                          int warpgroup_row0, int thread_in_warpgroup) {
  if (thread_in_warpgroup % 4 != 0) return;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const int row = warpgroup_row0 + wgmma_acc_row(thread_in_warpgroup, 2 * r);
    if (row < rows) lse_gmem[row] = state.max[r] * softmax_scale + logf(state.sum[r]);
  }
}

// ============================ the tile scheduler ============================
// Which tiles this block computes, in which order (the tile numbering and why: schedule.h). A
// persistent block takes `per_turn` consecutive tiles at a time (2 under causal: one pair, 1
// without), turns round-robin: tiles per_turn * u .. per_turn * u + per_turn - 1 for
// u = blockIdx.x, blockIdx.x + gridDim.x, ... The producer and the consumers each walk the same
// sequence.
struct TileScheduler {
  int num_q_blocks;  // the last may be partial
  int num_tiles;     // < 2^30: the launcher checks
  int per_turn;      // tiles a block takes at a time
  template <typename Cfg>
  __device__ static TileScheduler of(const AttentionParams& p) {
    const int num_q_blocks = static_cast<int>((p.seq_q + Cfg::kBlockQ - 1) / Cfg::kBlockQ);
    return {num_q_blocks, num_q_blocks * static_cast<int>(p.heads * p.batch), p.causal ? 2 : 1};
  }
  __device__ int first() const { return static_cast<int>(blockIdx.x) * per_turn; }
  __device__ int next(int tile) const {
    return (tile + 1) % per_turn != 0 ? tile + 1 : tile + 1 + static_cast<int>(gridDim.x - 1) * per_turn;
  }
  __device__ TileCoordinates at(int tile, const AttentionParams& p) const {
    return tile_coordinates(tile, num_q_blocks, static_cast<int>(p.heads), p.causal);
  }
};

// The K/V blocks a tile visits: up to the last key its last row sees (all of them without causal).
// The first unmasked_blocks of them are whole and below the diagonal for every row: the tile's first
// row already sees all their keys. < 2^31 blocks: K alone would need 2^44 bytes otherwise.
struct TileWork {
  int kv_blocks, unmasked_blocks;
  int64_t diagonal;  // row i of the tile sees key j where j <= i + diagonal (seq_kv: every key)
};
template <typename Cfg>
__device__ __forceinline__ TileWork tile_work(const AttentionParams& p, int q_block) {
  const int64_t q0 = static_cast<int64_t>(q_block) * Cfg::kBlockQ;
  const int64_t q_rows = min(p.seq_q - q0, int64_t{Cfg::kBlockQ});
  const int64_t diagonal = q0 + p.seq_kv - p.seq_q;  // query i sees keys j <= i + seq_kv - seq_q
  const int64_t keys_seen = p.causal ? min(max(diagonal + q_rows, int64_t{0}), p.seq_kv) : p.seq_kv;
  const int64_t first_row_keys = p.causal ? min(max(diagonal + 1, int64_t{0}), p.seq_kv) : p.seq_kv;
  return {static_cast<int>((keys_seen + kBlockKV - 1) / kBlockKV), static_cast<int>(first_row_keys / kBlockKV),
          p.causal ? diagonal : p.seq_kv};
}

// Where a K/V block sits in the ring: its position counts on through all of this block's tiles.
__device__ __forceinline__ int slot_of(uint32_t position) { return static_cast<int>(position % kStages); }
__device__ __forceinline__ uint32_t use_of(uint32_t position) { return position / kStages; }  // earlier fills

// ============================ the producer's loop ============================
// Warpgroup 0, one thread: every tile's K and V blocks into the ring, and the tile's Q, each as soon
// as the consumers have released the slot (or Q) it goes to.
template <typename Cfg, bool kGeneral>
__device__ __forceinline__ void producer_loop(const AttentionParams& p, const TensorMaps& maps,
                                              const SharedTiles<Cfg>& smem, const TileScheduler& tiles) {
  constexpr int kBlockQ = Cfg::kBlockQ;
  const int group = kGeneral ? static_cast<int>(p.heads / p.kv_heads) : 1;  // query heads per key/value head
  uint32_t position = 0;
  int q_loads = 0;  // tiles this block has loaded: those that see a key
  for (int tile = tiles.first(); tile < tiles.num_tiles; tile = tiles.next(tile)) {
    const TileCoordinates at = tiles.at(tile, p);
    const TileWork work = tile_work<Cfg>(p, at.q_block);
    const int kv_head = kGeneral ? at.head / group : at.head;  // the key/value head of this query head's group
    for (int kv_block = 0; kv_block < work.kv_blocks; ++kv_block, ++position) {
      const int slot = slot_of(position);
      const uint32_t use = use_of(position);
      // From the second use on, wait until the consumers released the previous one: its phase
      // (use - 1) completed, parity (use - 1) % 2. K is released an iteration before V.
      if (use > 0) mbarrier_wait(smem_u32(&smem.k_empty[slot]), (use - 1) % 2);
      load_tile<Cfg, kBlockKV>(smem.k(slot), &maps.k, &smem.k_full[slot], kv_block * kBlockKV, kv_head, at.batch);
      if (kv_block == 0) {  // the tile's Q, once the previous tile's last S has read the old one
        if (q_loads > 0) mbarrier_wait(smem_u32(smem.q_empty), (q_loads - 1) % 2);
        load_tile<Cfg, kBlockQ>(smem.q, &maps.q, smem.q_full, at.q_block * kBlockQ, at.head, at.batch);
        ++q_loads;
      }
      if (use > 0) mbarrier_wait(smem_u32(&smem.v_empty[slot]), (use - 1) % 2);
      load_tile<Cfg, kBlockKV>(smem.v(slot), &maps.v, &smem.v_full[slot], kv_block * kBlockKV, kv_head, at.batch);
    }
  }
}

// ================== the consumer's tile and its K/V step ==================
// A consumer warpgroup (1 .. kConsumerWarpgroups): its 64 rows of every tile. What it keeps for all
// its tiles is here; a tile's accumulators and row state are the tile's (TileRegisters).
template <typename Cfg>
struct TileRegisters {
  float o_acc[Cfg::kDimTiles][4];
  float s_acc[Cfg::kKeyTiles][4];     // S of the block in flight, then its P
  uint32_t p_frag[Cfg::kKeySteps][4];  // the previous block's P, packed for P V
  float correction[kRowsPerThread];
  RowState state;
};

template <typename Cfg, bool kGeneral>
struct Consumer {
  using T = typename Cfg::Elem;
  static constexpr int kConsumers = Cfg::kConsumerWarpgroups;
  const AttentionParams& p;
  const SharedTiles<Cfg>& smem;
  int consumer_warpgroup;  // 0 .. kConsumers - 1
  int thread_in_warpgroup;
  int warpgroup_row0;
  // The warpgroup's 64 rows of Q start 64 rows into each panel (operand_offset's row stride is 128 B).
  uint32_t q_rows_address;
  float scale_log2;  // softmax_scale * log2(e)
  uint32_t fence_address;
  uint32_t first = 0;  // ring position of the tile's first K/V block
  int q_loads = 0;     // the producer's count: tiles that see a key

  __device__ Consumer(const AttentionParams& p_, const SharedTiles<Cfg>& smem_, int warpgroup)
      : p(p_), smem(smem_), consumer_warpgroup(warpgroup - 1), thread_in_warpgroup(threadIdx.x % kWarpgroupThreads) {
    warpgroup_row0 = consumer_warpgroup * kWgmmaM;
    q_rows_address = smem_u32(smem.q) + warpgroup_row0 * kSwizzle128RowBytes;
    scale_log2 = p.softmax_scale * 1.44269504088896340736f;
    fence_address = smem_u32(smem.softmax_fence + threadIdx.x - kWarpgroupThreads);
  }

  // A warp releases Q, or a slot's K or V, once its warpgroup's wgmmas have read it (after their wait).
  __device__ void release(uint64_t* empty_barrier) const {
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbarrier_arrive(smem_u32(empty_barrier));
  }
  // Turns on the tensor cores: wait for this warpgroup's, issue one step's GEMMs, hand the turn over
  // to the next warpgroup of the ring 0 -> 1 (-> 2) -> 0.
  __device__ void wait_turn() const { named_barrier_sync<kTurnThreads>(kTurnBarrier + consumer_warpgroup); }
  __device__ void pass_turn() const {
    named_barrier_arrive<kTurnThreads>(kTurnBarrier + (consumer_warpgroup + 1) % kConsumers);
  }

  // The keys of K/V block b that exist: kBlockKV but in the last block of the sequence.
  __device__ int keys_in_block(int block) const {
    return static_cast<int>(min(p.seq_kv - static_cast<int64_t>(block) * kBlockKV, int64_t{kBlockKV}));
  }
  // Row i of the tile sees key j of K/V block b where j <= i + diagonal_of(b) (kBlockKV or more:
  // every key of the block).
  __device__ int diagonal_of(const TileWork& work, int kv_block) const {
    return static_cast<int>(min(work.diagonal - static_cast<int64_t>(kv_block) * kBlockKV, int64_t{kBlockKV}));
  }
  __device__ void mask(TileRegisters<Cfg>& t, const TileWork& work, int kv_block) const {
    mask_scores<Cfg>(t.s_acc, keys_in_block(kv_block), diagonal_of(work, kv_block), warpgroup_row0, thread_in_warpgroup);
  }

  // Block 0's scores, alone: there is no P V to overlap them with yet.
  __device__ void first_block(TileRegisters<Cfg>& t, const TileWork& work) {
    mbarrier_wait(smem_u32(smem.q_full), q_loads % 2);
    mbarrier_wait(smem_u32(&smem.k_full[slot_of(first)]), use_of(first) % 2);
    wgmma_fence();
    wait_turn();
    issue_scores<Cfg>(t.s_acc, q_rows_address, smem_u32(smem.k(slot_of(first))));
    pass_turn();
    wgmma_wait_group<0>();
    pin_registers(t.s_acc);  // nothing reads S before the wait
    release(&smem.k_empty[slot_of(first)]);
    if (work.unmasked_blocks == 0) mask(t, work, 0);
    online_softmax_scores<Cfg>(t.s_acc, t.state, scale_log2, t.correction);  // O is zero: no rescale
  }

  // One K/V step: S_j with P_{j-1} V_{j-1}, then block j's softmax. The blocks that need the mask
  // take a copy of the step of their own (masked = true, after the loop), so that the loop has no
  // mask's branch (with it, 2-5% slower although never taken; H200).
  __device__ void kv_step(TileRegisters<Cfg>& t, const TileWork& work, int kv_block, bool masked) {
    const uint32_t position = first + kv_block;
    const int slot = slot_of(position), prev = slot_of(position - 1);
    pack_p<Cfg>(t.p_frag, t.s_acc);  // block j - 1's P leaves S's registers
    pin_registers(t.o_acc);          // the rescale and the packing happen before the fence
    pin_registers(t.p_frag);
    mbarrier_wait(smem_u32(&smem.k_full[slot]), use_of(position) % 2);
    mbarrier_wait(smem_u32(&smem.v_full[prev]), use_of(position - 1) % 2);
    wgmma_fence();
    wait_turn();
    issue_scores<Cfg>(t.s_acc, q_rows_address, smem_u32(smem.k(slot)));  // S_j = Q K_j^T
    issue_pv<Cfg>(t.o_acc, t.p_frag, smem_u32(smem.v(prev)));            // O += P_{j-1} V_{j-1}
    pass_turn();

    wgmma_wait_group<1>();  // S_j is done; P_{j-1} V_{j-1} may still run
    pin_registers(t.s_acc);
    release(&smem.k_empty[slot]);
    if (masked) mask(t, work, kv_block);
    const bool rescale = online_softmax_scores<Cfg>(t.s_acc, t.state, scale_log2, t.correction);

    softmax_before_wait(fence_address, t.state);
    wgmma_wait_group<0>();    // P_{j-1} V_{j-1} is done
    pin_registers(t.o_acc);   // nothing reads O before the wait
    pin_registers(t.p_frag);  // P's registers stay untouched until the wgmmas that read them are done
    release(&smem.v_empty[prev]);
    if (rescale) rescale_o<Cfg>(t.o_acc, t.correction);  // the whole warp, or none of it
  }

  // The last block's P V, alone.
  __device__ void last_block(TileRegisters<Cfg>& t, const TileWork& work) {
    const uint32_t last = first + work.kv_blocks - 1;
    pack_p<Cfg>(t.p_frag, t.s_acc);
    pin_registers(t.o_acc);
    pin_registers(t.p_frag);
    mbarrier_wait(smem_u32(&smem.v_full[slot_of(last)]), use_of(last) % 2);
    wgmma_fence();
    wait_turn();
    issue_pv<Cfg>(t.o_acc, t.p_frag, smem_u32(smem.v(slot_of(last))));
    pass_turn();
    wgmma_wait_group<0>();
    pin_registers(t.o_acc);
    pin_registers(t.p_frag);
    release(&smem.v_empty[slot_of(last)]);
  }

  // Where the tile's rows of O (and the LSE) go.
  struct TileOutput {
    T* o_gmem;
    int q_rows;  // rows that exist
    float* lse_gmem;
  };
  __device__ TileOutput output_of(const TileCoordinates& at) const {
    T* o_gmem = static_cast<T*>(p.o.data) + at.batch * p.o.batch_stride + at.head * p.o.head_stride +
                static_cast<int64_t>(at.q_block) * Cfg::kBlockQ * p.o.seq_stride;
    const int64_t q_rows_left = p.seq_q - static_cast<int64_t>(at.q_block) * Cfg::kBlockQ;
    const int q_rows = q_rows_left < Cfg::kBlockQ ? static_cast<int>(q_rows_left) : Cfg::kBlockQ;
    // The tile's rows of the LSE output, [batch, heads, seq_q] with the sequence contiguous (if asked for).
    float* lse_gmem = !kGeneral || p.lse.data == nullptr ? nullptr
                                                         : p.lse.data + at.batch * p.lse.batch_stride + at.head * p.lse.head_stride +
                                                               static_cast<int64_t>(at.q_block) * Cfg::kBlockQ;
    return {o_gmem, q_rows, lse_gmem};
  }

  // The epilogue: O normalized and written, and the LSE (if asked for).
  __device__ void epilogue(TileRegisters<Cfg>& t, const TileOutput& out) {
    normalize_and_write_o<Cfg>(t.o_acc, t.state, smem.o, out.o_gmem, p.o.seq_stride, out.q_rows, consumer_warpgroup,
                               thread_in_warpgroup);
    if (out.lse_gmem != nullptr)
      write_lse(t.state, out.lse_gmem, p.softmax_scale, out.q_rows, warpgroup_row0, thread_in_warpgroup);
  }

  // One tile: the first block, the K/V steps (unmasked, then masked), the last P V, the epilogue.
  __device__ void tile(TileRegisters<Cfg>& t, const TileCoordinates& at) {
    const TileWork work = tile_work<Cfg>(p, at.q_block);
    const TileOutput out = output_of(at);
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) t.o_acc[d][e] = 0.0f;
    init_row_state(t.state);
    if (work.kv_blocks == 0) {  // no row sees a key: nothing was loaded, and O is zeros
      epilogue(t, out);
      return;
    }
    first_block(t, work);
    int kv_block = 1;
    for (; kv_block < work.unmasked_blocks; ++kv_block) kv_step(t, work, kv_block, false);
    for (; kv_block < work.kv_blocks; ++kv_block) kv_step(t, work, kv_block, true);
    release(smem.q_empty);  // every S of the tile is done: the next tile's Q may land
    ++q_loads;
    last_block(t, work);
    epilogue(t, out);
    first += work.kv_blocks;
  }

  __device__ void loop(const TileScheduler& tiles) {
    if (consumer_warpgroup == kConsumers - 1) pass_turn();  // warpgroup 0 goes first
    // The tile registers: one set for all the tiles, which each set them up afresh. Declared per tile,
    // the first S of a tile would be new registers to ptxas, and some kernels spill more.
    TileRegisters<Cfg> t;
    for (int tile_index = tiles.first(); tile_index < tiles.num_tiles; tile_index = tiles.next(tile_index))
      tile(t, tiles.at(tile_index, p));
    if (consumer_warpgroup == 0) wait_turn();  // the last warpgroup's last hand-over: the barriers as they started
  }
};

// ================================ kernel ================================
// The roles: the producer warpgroup's loop and the consumer warpgroups' tiles, each over the tiles
// the scheduler gives this block. kGeneral: the call may have grouped heads (kv_heads < heads) or
// ask for the LSE; without it the kernel assumes kv_heads == heads and no LSE, and has neither in
// its code (the launcher chooses).
template <typename T, int kHeadDim, bool kThreeWarpgroups, bool kGeneral>
__global__ void __launch_bounds__(Config<T, kHeadDim, kThreeWarpgroups>::kThreads, 1) attention_kernel(const AttentionParams p,
                                                             const __grid_constant__ TensorMaps maps) {
  using Cfg = Config<T, kHeadDim, kThreeWarpgroups>;
  const TileScheduler tiles = TileScheduler::of<Cfg>(p);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  SharedTiles<Cfg> smem(smem_raw);

  // Barriers: a full barrier completes when its one arrival (the producer's expect_tx) and all the
  // bytes have come; an empty barrier when every consumer warp has arrived.
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&maps.q);
    prefetch_tensor_map(&maps.k);
    prefetch_tensor_map(&maps.v);
    mbarrier_init(smem_u32(smem.q_full), 1);
    mbarrier_init(smem_u32(smem.q_empty), Cfg::kConsumerWarps);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(smem_u32(&smem.k_full[s]), 1);
      mbarrier_init(smem_u32(&smem.v_full[s]), 1);
      mbarrier_init(smem_u32(&smem.k_empty[s]), Cfg::kConsumerWarps);
      mbarrier_init(smem_u32(&smem.v_empty[s]), Cfg::kConsumerWarps);
    }
    fence_mbarrier_init();
  }
  __syncthreads();  // the barriers exist before anyone waits on them

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  if (warpgroup == 0) {
    setmaxnreg_dec<Cfg::kProducerRegisters>();
    if (threadIdx.x == 0) producer_loop<Cfg, kGeneral>(p, maps, smem, tiles);
  } else {
    setmaxnreg_inc<Cfg::kConsumerRegisters>();
    Consumer<Cfg, kGeneral>(p, smem, warpgroup).loop(tiles);
  }
}

// =============================== launcher ===============================
Status launch(const AttentionParams& params, cudaStream_t stream);

// clang-format off
extern const StageInfo info = {
    FA_STAGE_DECLARATION,  // from stage.json
    /*block_q=*/Config<__half, 128, false>::kBlockQ, kBlockKV, /*warps=*/Config<__half, 128, false>::kWarps,  // or 192 and 16 at head_dim 64
    /*head_dims=*/{64, 128}, /*dtypes=*/{DType::kFloat16, DType::kBFloat16},
    &launch};
// clang-format on

template <typename T, int kHeadDim, bool kThreeWarpgroups, bool kGeneral>
Status launch_typed(const AttentionParams& params, cudaStream_t stream, int sm_count) {
  using Cfg = Config<T, kHeadDim, kThreeWarpgroups>;
  constexpr size_t smem_bytes = SharedTiles<Cfg>::kBytes;
  const auto kernel = attention_kernel<T, kHeadDim, kThreeWarpgroups, kGeneral>;
  // Dynamic shared memory above 48 KB needs an explicit opt-in. The attribute belongs to the
  // current device, so it is set on every launch (a process may launch on several GPUs).
  const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (attr_status != cudaSuccess) {
    return Status::error(std::string(info.name) +
                         ": cannot configure the kernel: " + cudaGetErrorString(attr_status));
  }
  // The tensor maps describe this call's tensors (address, shape, strides): encoded per launch.
  TensorMaps maps;
  // K and V have kv_heads heads: their maps' head dimension is kv_heads, so that a box at a head
  // past them is out of bounds for the copy engine rather than another tensor's memory.
  const struct {
    CUtensorMap* map;
    const TensorView& view;
    int64_t seq, heads;
    int box_rows;
    const char* what;
  } operands[] = {{&maps.q, params.q, params.seq_q, params.heads, Cfg::kBlockQ, "Q"},
                  {&maps.k, params.k, params.seq_kv, params.kv_heads, kBlockKV, "K"},
                  {&maps.v, params.v, params.seq_kv, params.kv_heads, kBlockKV, "V"}};
  for (const auto& operand : operands) {
    const Status encoded = encode_attention_tensor_map(operand.map, operand.view, params.batch, operand.seq,
                                                       operand.heads, kHeadDim, operand.box_rows, operand.what,
                                                       info.name);
    if (!encoded.ok()) return encoded;
  }
  // One block per SM (the kernel's registers and shared memory allow no more), or fewer if there
  // are fewer turns (under causal a turn is a pair of tiles).
  const int64_t tiles = (params.seq_q + Cfg::kBlockQ - 1) / Cfg::kBlockQ * params.heads * params.batch;
  if (tiles >= (int64_t{1} << 30)) {  // the kernel counts tiles in 32 bits (tile_coordinates)
    return Status::error(std::string(info.name) + ": " + std::to_string(tiles) +
                         " query tiles of " + std::to_string(Cfg::kBlockQ) + " rows; at most 2^30 - 1 are supported");
  }
  const int64_t turns = params.causal ? (tiles + 1) / 2 : tiles;
  const int64_t blocks = turns < sm_count ? turns : sm_count;
  kernel<<<static_cast<unsigned>(blocks), Cfg::kThreads, smem_bytes, stream>>>(params, maps);
  return launch_status(info.name);
}

// A call that asks for neither grouped heads nor the LSE runs the kernel without them.
template <typename T, int kHeadDim, bool kThreeWarpgroups>
Status launch_general_or_not(const AttentionParams& params, cudaStream_t stream, int sm_count) {
  if (params.kv_heads != params.heads || params.lse.data != nullptr)
    return launch_typed<T, kHeadDim, kThreeWarpgroups, true>(params, stream, sm_count);
  return launch_typed<T, kHeadDim, kThreeWarpgroups, false>(params, stream, sm_count);
}

Status launch(const AttentionParams& params, cudaStream_t stream) {
  const Status valid = validate_params(params, info);
  if (!valid.ok()) return valid;
  int device = 0, sm_count = 0;
  cudaError_t device_status = cudaGetDevice(&device);
  if (device_status == cudaSuccess)
    device_status = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
  if (device_status != cudaSuccess) {
    return Status::error(std::string(info.name) + ": cannot read the SM count: " + cudaGetErrorString(device_status));
  }
  const bool fp16 = params.q.dtype == DType::kFloat16;
  if (params.head_dim == 128)
    return fp16 ? launch_general_or_not<__half, 128, false>(params, stream, sm_count)
                : launch_general_or_not<__nv_bfloat16, 128, false>(params, stream, sm_count);
  if (three_warpgroups_faster(params, kBlockKV, sm_count))  // schedule.h: choosing the tile
    return fp16 ? launch_general_or_not<__half, 64, true>(params, stream, sm_count)
                : launch_general_or_not<__nv_bfloat16, 64, true>(params, stream, sm_count);
  return fp16 ? launch_general_or_not<__half, 64, false>(params, stream, sm_count)
              : launch_general_or_not<__nv_bfloat16, 64, false>(params, stream, sm_count);
}

}  // namespace FA_STAGE_NAMESPACE
