// backward_11_three_slots: backward_10_dq_bulk_reduce's backward with a third slot for the query
// blocks (backward.cuh: kSlots). The parent loads the next query block's Q, dO, LSE and D one
// iteration ahead, and its profile put 17% of the warps' stall samples at the wait for those copies
// at the top of the loop: one iteration (about 3.5 us at head_dim 128) was not enough for them to
// land while the dQ bulk reductions stream into L2. Here each block is loaded two iterations ahead,
// into the slot the previous block has just left; 32 KB more shared memory at head_dim 128.
// Everything else is the parent's.
//
// The forward is ampere_14_lse's, unchanged (built for sm_90a with the rest of the stage): it writes
// the LSE that the backward reads to recompute P without a pass over the keys. The stage's StageInfo
// gains its BackwardInfo (common/backward.h), whose launcher runs three kernels: D = rowsum(dO * O),
// the main kernel (one thread block per K/V block, looping over the query blocks; dK and dV in
// registers, dQ added across thread blocks by bulk reductions into a workspace) and the conversion of
// dQ to the input dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "bulk_reduce.cuh"
#include "common/backward.h"
#include "common/fragment_layout.h"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/softmax_math.h"
#include "smem_layout.h"
#include "stage_declaration.h"
#include "wgmma.cuh"

namespace FA_STAGE_NAMESPACE {

using namespace fa;

// ================================ config ================================
constexpr int kBlockQ = 128;  // Br: query rows per thread block
constexpr int kBlockKV = 64;  // Bc: key/value rows per iteration
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kBlockQ / kWarps;
constexpr int kMTiles = kRowsPerWarp / kMmaM;  // 16-row mma tiles per warp
static_assert(kMTiles == 2, "each warp owns two 16-row mma tiles");
static_assert(kBlockKV % kMmaK == 0, "P V consumes keys 16 at a time");
// A thread holds 2 rows of each of its warp's m-tiles: in m-tile m, row lane/4 (accumulator
// entries 0, 1) and row lane/4 + 8 (entries 2, 3); see mma_c_row in fragment_layout.h. Row state
// index mr = 2 * m + r.
constexpr int kRowsPerThread = 2 * kMTiles;

// Everything else follows from the element type and the head dimension.
template <typename T, int kHeadDim_>
struct Config {
  using Elem = T;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kElemsPer16B = 16 / sizeof(T);  // one 16-byte copy, one ldmatrix row
  static constexpr int kChunksPerRow = kHeadDim / kElemsPer16B;
  static constexpr int kDimSteps = kHeadDim / kMmaK;  // k-steps of S = Q K^T
  static constexpr int kKeySteps = kBlockKV / kMmaK;  // k-steps of O += P V
  static constexpr int kKeyTiles = kBlockKV / kMmaN;  // n-tiles of S
  static constexpr int kDimTiles = kHeadDim / kMmaN;  // n-tiles of O
};

// ========================= shared-memory layout =========================
// [ Q tile: kBlockQ x D | K tile: kBlockKV x D | V tile: kBlockKV x D ]; the O tile reuses Q's space.
// Where element (row, col) of a tile lives is smem_layout.h's tile_offset().
template <typename Cfg>
struct SharedTiles {
  using T = typename Cfg::Elem;
  static constexpr int kQElems = kBlockQ * Cfg::kHeadDim;
  static constexpr int kKElems = kBlockKV * Cfg::kHeadDim;
  static constexpr int kVElems = kBlockKV * Cfg::kHeadDim;
  static constexpr size_t kBytes = (kQElems + kKElems + kVElems) * sizeof(T);
  T* q;
  T* k;
  T* v;
  __device__ explicit SharedTiles(unsigned char* base)
      : q(reinterpret_cast<T*>(base)), k(q + kQElems), v(k + kKElems) {}
};

// ============================== load tiles ==============================
// Global -> shared: a tile of kRows x D elements moves in 16-byte chunks; consecutive threads take
// consecutive chunks of a row, so a warp reads whole rows (coalesced 128-byte transactions).
// Each step moves kRowsPerStep whole rows, a multiple of the swizzle period (8 rows), so a thread's
// chunk keeps its swizzled column and its shared address advances by a constant: one running
// global pointer and one shared base per thread.
// Only the first `rows` rows of the tile exist (the sequence ends there): the others are
// zero-filled, reading nothing, and a whole tile takes the unchecked path.
// The copies are only issued here: the caller commits them as a group and waits for the group.
template <typename Cfg, int kRows>
__device__ __forceinline__ void copy_tile_to_smem(typename Cfg::Elem* tile_smem, const typename Cfg::Elem* tile_gmem,
                                                  int64_t row_stride, int rows) {
  using T = typename Cfg::Elem;
  constexpr int kRowsPerStep = kThreads / Cfg::kChunksPerRow;
  static_assert(kThreads % Cfg::kChunksPerRow == 0 && kRowsPerStep % 8 == 0 && kRows % kRowsPerStep == 0,
                "every step copies whole rows, a multiple of the swizzle period");
  const int row = threadIdx.x / Cfg::kChunksPerRow;
  const int col = (threadIdx.x % Cfg::kChunksPerRow) * Cfg::kElemsPer16B;
  const uint32_t dst = smem_u32(tile_smem + tile_offset(row, col, Cfg::kHeadDim));
  const T* src = tile_gmem + row * row_stride + col;
  if (rows >= kRows) {
#pragma unroll
    for (int step = 0; step < kRows / kRowsPerStep; ++step) {
      cp_async_16(dst + step * kRowsPerStep * Cfg::kHeadDim * sizeof(T), src);
      src += kRowsPerStep * row_stride;
    }
  } else {
#pragma unroll
    for (int step = 0; step < kRows / kRowsPerStep; ++step) {
      // A missing row still needs a valid source address: the tile's first row.
      const bool row_exists = row + step * kRowsPerStep < rows;
      cp_async_16_zfill(dst + step * kRowsPerStep * Cfg::kHeadDim * sizeof(T), row_exists ? src : tile_gmem,
                        row_exists);
      src += kRowsPerStep * row_stride;
    }
  }
}

// Shared -> registers. A lane's ldmatrix row address for the 16 x 16 sub-tile at (row0 + 16 i, 16 j)
// of a tile. Chunk 8h + c of a row is stored at chunk 8h + (c ^ (row % 8)) (smem_layout.h), and
// row0 + 16 i has the same row % 8 as row0, so 4 bases (j % 4 = 0..3) plus compile-time offsets
// reach every sub-tile: +128 bytes per 4 j, +16 rows per i (tests/test_smem_layout.cpp checks it).
template <typename Cfg>
struct LaneAddress {
  uint32_t base[4];
  __device__ LaneAddress(const typename Cfg::Elem* tile, int row, int col) {
#pragma unroll
    for (int j = 0; j < 4; ++j) base[j] = smem_u32(tile + tile_offset(row, j * kMmaK + col, Cfg::kHeadDim));
  }
  __device__ __forceinline__ uint32_t at(int i, int j) const {
    return base[j % 4] + (j / 4) * 128 + i * kMmaM * Cfg::kHeadDim * static_cast<int>(sizeof(typename Cfg::Elem));
  }
};

// Q: the A fragment of the warp's m-tile m for head dims [16*kk, 16*kk + 16).
template <typename Cfg>
__device__ __forceinline__ void load_q_fragment(uint32_t (&q_frag)[4], const LaneAddress<Cfg>& q_addr, int m, int kk) {
  ldmatrix_x4(q_frag, q_addr.at(m, kk));
}

// K: the B fragments of all kBlockKV keys for head dims [16*kk, 16*kk + 16), two key n-tiles of 8
// per ldmatrix.x4.
template <typename Cfg>
__device__ __forceinline__ void load_k_fragments(uint32_t (&k_frag)[Cfg::kKeyTiles][2], const LaneAddress<Cfg>& k_addr,
                                                 int kk) {
#pragma unroll
  for (int n_pair = 0; n_pair < Cfg::kKeyTiles / 2; ++n_pair) {
    uint32_t regs[4];
    ldmatrix_x4(regs, k_addr.at(n_pair, kk));
    k_frag[2 * n_pair][0] = regs[0];
    k_frag[2 * n_pair][1] = regs[1];
    k_frag[2 * n_pair + 1][0] = regs[2];
    k_frag[2 * n_pair + 1][1] = regs[3];
  }
}

// V: the B fragments of all head dims for keys [16*kk, 16*kk + 16), transposed on the fly by
// ldmatrix.trans (V is stored [key][dim] but P V reads it down a column).
template <typename Cfg>
__device__ __forceinline__ void load_v_fragments(uint32_t (&v_frag)[Cfg::kDimTiles][2], const LaneAddress<Cfg>& v_addr,
                                                 int kk) {
#pragma unroll
  for (int d_pair = 0; d_pair < Cfg::kDimTiles / 2; ++d_pair) {
    uint32_t regs[4];
    ldmatrix_x4_trans(regs, v_addr.at(kk, d_pair));
    v_frag[2 * d_pair][0] = regs[0];
    v_frag[2 * d_pair][1] = regs[1];
    v_frag[2 * d_pair + 1][0] = regs[2];
    v_frag[2 * d_pair + 1][1] = regs[3];
  }
}

// ============================== S = Q K^T ===============================
// K fragments are loaded one k-step (16 head dims) at a time, one k-step ahead of their MMAs; the
// m-tiles' Q fragments of the k-step come from shared memory right before them. Each K fragment
// feeds both m-tiles.
template <typename Cfg>
__device__ __forceinline__ void compute_scores(float (&s_acc)[kMTiles][Cfg::kKeyTiles][4],
                                               const LaneAddress<Cfg>& q_addr, const LaneAddress<Cfg>& k_addr) {
  uint32_t k_frag[2][Cfg::kKeyTiles][2];
  load_k_fragments<Cfg>(k_frag[0], k_addr, 0);
#pragma unroll
  for (int kk = 0; kk < Cfg::kDimSteps; ++kk) {
    if (kk + 1 < Cfg::kDimSteps) load_k_fragments<Cfg>(k_frag[(kk + 1) % 2], k_addr, kk + 1);
    uint32_t q_frag[kMTiles][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) load_q_fragment<Cfg>(q_frag[m], q_addr, m, kk);
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int n = 0; n < Cfg::kKeyTiles; ++n)
        mma_m16n8k16<typename Cfg::Elem>(s_acc[m][n], q_frag[m], k_frag[kk % 2][n]);
  }
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

// Key j of the block is masked in row i of the query block where it is past the end of the sequence
// (j >= keys) or, under causal, above the diagonal (j > i + diagonal): the score -inf, which no row
// maximum takes and exp2 turns into the probability 0. Under causal a row may lose every key of the
// block.
template <typename Cfg, bool kCausal>
__device__ __forceinline__ void mask_scores(float (&s_acc)[kMTiles][Cfg::kKeyTiles][4], int keys, int diagonal,
                                            int warp_row0, int lane) {
#pragma unroll
  for (int m = 0; m < kMTiles; ++m)
#pragma unroll
    for (int n = 0; n < Cfg::kKeyTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = n * kMmaN + mma_c_col(lane, i);
        if (key >= keys || (kCausal && key > warp_row0 + m * kMmaM + mma_c_row(lane, i) + diagonal))
          s_acc[m][n][i] = -INFINITY;
      }
}

// Raise the running max (of raw scores: a positive scale keeps their order), rescale what was
// accumulated under the old max (the sum and O), and turn the scores into unnormalized
// probabilities P = exp(scale * (s - max)) = exp2(s * scale_log2 - max * scale_log2): one FFMA
// feeding one MUFU.EX2 per score.
template <typename Cfg>
__device__ __forceinline__ void online_softmax_update(float (&s_acc)[kMTiles][Cfg::kKeyTiles][4],
                                                      float (&o_acc)[kMTiles][Cfg::kDimTiles][4], RowState& state,
                                                      float scale_log2) {
#pragma unroll
  for (int mr = 0; mr < kRowsPerThread; ++mr) {
    const int m = mr / 2, r = mr % 2;
    const float new_max = fmaxf(state.max[mr], block_row_max<Cfg>(s_acc[m], r));
    const float max_scaled = max_for_exp(new_max) * scale_log2;                  // the -inf guard (softmax_math.h)
    const float correction = exp2_approx(state.max[mr] * scale_log2 - max_scaled);  // 0 on the first block
    state.max[mr] = new_max;
    float block_sum = 0.0f;
#pragma unroll
    for (int n = 0; n < Cfg::kKeyTiles; ++n) {
      s_acc[m][n][2 * r] = exp2_approx(fmaf(s_acc[m][n][2 * r], scale_log2, -max_scaled));
      s_acc[m][n][2 * r + 1] = exp2_approx(fmaf(s_acc[m][n][2 * r + 1], scale_log2, -max_scaled));
      block_sum += s_acc[m][n][2 * r] + s_acc[m][n][2 * r + 1];
    }
    state.sum[mr] = state.sum[mr] * correction + block_sum;
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d) {
      o_acc[m][d][2 * r] *= correction;
      o_acc[m][d][2 * r + 1] *= correction;
    }
  }
}

// =============================== O += P V ===============================
// P never leaves registers: the S accumulators of n-tiles 2kk and 2kk+1 are exactly the A fragment
// of P for k-step kk, after packing pairs of floats to 16 bits (fragment_layout.h: p_frag_s_*).
template <typename Cfg>
__device__ __forceinline__ void p_fragment(uint32_t (&p_frag)[4], const float (&s_acc)[Cfg::kKeyTiles][4], int kk) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float* pair = &s_acc[p_frag_s_tile(kk, j)][p_frag_s_entry(j)];
    p_frag[j] = pack2<typename Cfg::Elem>(pair[0], pair[1]);
  }
}

// V fragments are loaded one k-step (16 keys) at a time, one k-step ahead of their MMAs; each V
// fragment feeds both m-tiles.
template <typename Cfg>
__device__ __forceinline__ void accumulate_pv(float (&o_acc)[kMTiles][Cfg::kDimTiles][4],
                                              const float (&s_acc)[kMTiles][Cfg::kKeyTiles][4],
                                              const LaneAddress<Cfg>& v_addr) {
  uint32_t v_frag[2][Cfg::kDimTiles][2];
  load_v_fragments<Cfg>(v_frag[0], v_addr, 0);
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk) {
    if (kk + 1 < Cfg::kKeySteps) load_v_fragments<Cfg>(v_frag[(kk + 1) % 2], v_addr, kk + 1);
    uint32_t p_frag[kMTiles][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) p_fragment<Cfg>(p_frag[m], s_acc[m], kk);
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int d = 0; d < Cfg::kDimTiles; ++d)
        mma_m16n8k16<typename Cfg::Elem>(o_acc[m][d], p_frag[m], v_frag[kk % 2][d]);
  }
}

// ========================= normalize and write O ========================
// Add up each row's sum over its quad (every lane of the quad keeps the total, for write_lse),
// divide by it, convert to 16 bits, stage the tile in shared memory (over Q, which every warp has
// finished reading) and write out its first `rows` rows (the others are past seq_q) in coalesced
// 16-byte chunks.
template <typename Cfg, bool kCausal>
__device__ __forceinline__ void normalize_and_write_o(float (&o_acc)[kMTiles][Cfg::kDimTiles][4], RowState& state,
                                                      typename Cfg::Elem* o_smem, typename Cfg::Elem* o_gmem,
                                                      int64_t row_stride, int rows, int warp_row0, int lane) {
  using T = typename Cfg::Elem;
#pragma unroll
  for (int mr = 0; mr < kRowsPerThread; ++mr) {
    const int m = mr / 2, r = mr % 2;
    // Under causal a row that saw no key has the sum 0 and an O of 0: it writes zeros. (NaN sums
    // still divide.)
    state.sum[mr] = quad_allreduce_sum(state.sum[mr]);
    const float sum = state.sum[mr];
    const float inv_sum = kCausal && sum == 0.0f ? 0.0f : 1.0f / sum;
    const int row = warp_row0 + m * kMmaM + mma_c_row(lane, 2 * r);
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d) {
      const int col = d * kMmaN + mma_c_col(lane, 2 * r);
      *reinterpret_cast<uint32_t*>(o_smem + tile_offset(row, col, Cfg::kHeadDim)) =
          pack2<T>(o_acc[m][d][2 * r] * inv_sum, o_acc[m][d][2 * r + 1] * inv_sum);
    }
  }
  __syncthreads();  // the whole O tile is staged
  constexpr int kChunks = kBlockQ * Cfg::kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int step = 0; step < kChunks / kThreads; ++step) {
    const int i = step * kThreads + threadIdx.x;
    const int row = i / Cfg::kChunksPerRow;
    const int col = (i % Cfg::kChunksPerRow) * Cfg::kElemsPer16B;
    if (row < rows)
      *reinterpret_cast<uint4*>(o_gmem + row * row_stride + col) =
          *reinterpret_cast<const uint4*>(o_smem + tile_offset(row, col, Cfg::kHeadDim));
  }
}

// ============================== write LSE ===============================
// lse = softmax_scale * max + log(sum) for each of the thread's rows that exist, written by the
// quad's first lane (after normalize_and_write_o, the sum is the row's total in every lane). A row
// that saw no key has max = -inf and sum = 0: -inf + log(0) = -inf.
__device__ __forceinline__ void write_lse(const RowState& state, float* lse_gmem, float softmax_scale, int rows,
                                          int warp_row0, int lane) {
  if (lane % 4 != 0) return;
#pragma unroll
  for (int mr = 0; mr < kRowsPerThread; ++mr) {
    const int row = warp_row0 + (mr / 2) * kMmaM + mma_c_row(lane, 2 * (mr % 2));
    if (row < rows) lse_gmem[row] = state.max[mr] * softmax_scale + logf(state.sum[mr]);
  }
}

// ================================ kernel ================================
template <typename T, int kHeadDim, bool kCausal>
__global__ void __launch_bounds__(kThreads) attention_kernel(const AttentionParams p) {
  using Cfg = Config<T, kHeadDim>;

  // One thread block per (batch, head, query block), query blocks fastest so that the blocks
  // running at the same time share one head's K and V in L2; under causal the last query block
  // first, as it has the most K/V blocks to visit.
  const int64_t num_q_blocks = (p.seq_q + kBlockQ - 1) / kBlockQ;
  const int64_t q_block = kCausal ? num_q_blocks - 1 - blockIdx.x % num_q_blocks : blockIdx.x % num_q_blocks;
  const int64_t batch_head = blockIdx.x / num_q_blocks;
  const int64_t batch = batch_head / p.heads;
  const int64_t head = batch_head % p.heads;
  const T* q_gmem = static_cast<const T*>(p.q.data) + batch * p.q.batch_stride + head * p.q.head_stride +
                    q_block * kBlockQ * p.q.seq_stride;
  const int64_t kv_head = head / (p.heads / p.kv_heads);  // the key/value head of this query head's group
  const T* k_gmem = static_cast<const T*>(p.k.data) + batch * p.k.batch_stride + kv_head * p.k.head_stride;
  const T* v_gmem = static_cast<const T*>(p.v.data) + batch * p.v.batch_stride + kv_head * p.v.head_stride;
  T* o_gmem = static_cast<T*>(p.o.data) + batch * p.o.batch_stride + head * p.o.head_stride +
              q_block * kBlockQ * p.o.seq_stride;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  SharedTiles<Cfg> smem(smem_raw);

  const int lane = threadIdx.x % 32;
  const int warp_row0 = (threadIdx.x / 32) * kRowsPerWarp;
  const LaneAddress<Cfg> q_addr(smem.q, warp_row0 + ldmatrix_a_row(lane), ldmatrix_a_col(lane));
  const LaneAddress<Cfg> k_addr(smem.k, ldmatrix_bt_row(lane), ldmatrix_bt_col(lane));
  const LaneAddress<Cfg> v_addr(smem.v, ldmatrix_b_trans_row(lane), ldmatrix_b_trans_col(lane));

  // Only the last query block and the last K/V block may be partial: the rows of this query block
  // that exist, and the keys of K/V block b (the last block holds the 1..kBlockKV that are left).
  const int64_t q_rows_left = p.seq_q - q_block * kBlockQ;
  const int q_rows = q_rows_left < kBlockQ ? static_cast<int>(q_rows_left) : kBlockQ;
  // Causal: the keys this block's last row sees (0 to seq_kv), and the blocks holding them; the
  // blocks past them lie above the diagonal for every row. < 2^31 blocks: K alone would need 2^44
  // bytes otherwise.
  const int64_t diagonal_offset = p.seq_kv - p.seq_q;  // query i sees keys j <= i + diagonal_offset
  const int64_t last_row_keys = q_block * kBlockQ + q_rows + diagonal_offset;
  const int64_t keys_seen = kCausal ? min(max(last_row_keys, int64_t{0}), p.seq_kv) : p.seq_kv;
  const int num_kv_blocks = static_cast<int>((keys_seen + kBlockKV - 1) / kBlockKV);
  const auto keys_in_block = [&](int block) {
    if constexpr (kCausal)  // the last block visited need not be the sequence's last
      return static_cast<int>(min(p.seq_kv - static_cast<int64_t>(block) * kBlockKV, int64_t{kBlockKV}));
    return block + 1 < num_kv_blocks ? kBlockKV : static_cast<int>(p.seq_kv - static_cast<int64_t>(block) * kBlockKV);
  };

  // Q stays in shared memory for the whole loop over K/V. The first K block is requested with it.
  copy_tile_to_smem<Cfg, kBlockQ>(smem.q, q_gmem, p.q.seq_stride, q_rows);
  copy_tile_to_smem<Cfg, kBlockKV>(smem.k, k_gmem, p.k.seq_stride, keys_in_block(0));
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  float o_acc[kMTiles][Cfg::kDimTiles][4] = {};
  RowState state;
  init_row_state(state);
  const float scale_log2 = p.softmax_scale * 1.44269504088896340736f;  // softmax_scale * log2(e)

  // One step of the loop over K/V: block kv_block's scores, softmax and P V. The mask is applied
  // where the caller asks for it (under causal: the blocks the diagonal crosses, and the last) and,
  // without causal, in a partial block (the last).
  const auto step = [&](int kv_block, bool masked) {
    // This block's V lands while S = Q K^T runs. (The K block is already in shared memory.)
    copy_tile_to_smem<Cfg, kBlockKV>(smem.v, v_gmem, p.v.seq_stride, keys_in_block(kv_block));
    cp_async_commit();
    v_gmem += kBlockKV * p.v.seq_stride;
    k_gmem += kBlockKV * p.k.seq_stride;

    float s_acc[kMTiles][Cfg::kKeyTiles][4] = {};
    compute_scores<Cfg>(s_acc, q_addr, k_addr);
    __syncthreads();  // every warp has read this K block: its buffer is free

    // The next K block lands while softmax and P V run. On the last block the group is empty, which
    // keeps the count of groups in flight the same in every iteration.
    if (kv_block + 1 < num_kv_blocks)
      copy_tile_to_smem<Cfg, kBlockKV>(smem.k, k_gmem, p.k.seq_stride, keys_in_block(kv_block + 1));
    cp_async_commit();

    const int keys = keys_in_block(kv_block);
    if (masked || (!kCausal && keys < kBlockKV)) {
      // Under causal, row i of the query block sees key j of this block where j <= i + diagonal; only
      // the keys below `keys` exist.
      const int64_t block_diagonal = q_block * kBlockQ + diagonal_offset - static_cast<int64_t>(kv_block) * kBlockKV;
      const int diagonal = kCausal ? static_cast<int>(min(block_diagonal, int64_t{kBlockKV})) : kBlockKV;
      mask_scores<Cfg, kCausal>(s_acc, keys, diagonal, warp_row0, lane);
    }
    online_softmax_update<Cfg>(s_acc, o_acc, state, scale_log2);

    cp_async_wait<1>();  // this block's V has landed; the next K may still be in flight
    __syncthreads();     // ... for every thread's copies

    accumulate_pv<Cfg>(o_acc, s_acc, v_addr);
    cp_async_wait<0>();  // the next K block has landed
    __syncthreads();     // ... for every thread, and every warp is done with V before it is overwritten
  };

  if constexpr (kCausal) {
    // The blocks before unmasked_blocks are whole and below the diagonal for every row: the first
    // row of the query block already sees all their keys. The rest -- the blocks the diagonal
    // crosses, and the last block if it is partial -- take the masked step, in a second copy of the
    // loop: a mask behind a branch in one loop, even never taken, makes ptxas schedule the whole
    // loop worse at head_dim 128 (as on the Hopper track: docs/stages/hopper/07_any_length.md).
    const int64_t first_row_keys = max(q_block * kBlockQ + diagonal_offset + 1, int64_t{0});
    const int unmasked_blocks = static_cast<int>(min(first_row_keys, p.seq_kv) / kBlockKV);
    int kv_block = 0;
    for (; kv_block < unmasked_blocks; ++kv_block) step(kv_block, false);
    for (; kv_block < num_kv_blocks; ++kv_block) step(kv_block, true);
  } else {
    // ampere_11_any_length's loop: the step masks the last block where it is partial.
    for (int kv_block = 0; kv_block < num_kv_blocks; ++kv_block) step(kv_block, false);
  }

  normalize_and_write_o<Cfg, kCausal>(o_acc, state, smem.q, o_gmem, p.o.seq_stride, q_rows, warp_row0, lane);
  if (p.lse.data != nullptr) {
    float* lse_gmem = p.lse.data + batch * p.lse.batch_stride + head * p.lse.head_stride + q_block * kBlockQ;
    write_lse(state, lse_gmem, p.softmax_scale, q_rows, warp_row0, lane);
  }
}

// =============================== launcher ===============================
Status launch(const AttentionParams& params, cudaStream_t stream);
namespace bwd {
extern const BackwardInfo info;  // backward.cuh
}

// clang-format off
extern const StageInfo info = {
    FA_STAGE_DECLARATION,  // from stage.json
    kBlockQ, kBlockKV, kWarps,
    /*head_dims=*/{64, 128}, /*dtypes=*/{DType::kFloat16, DType::kBFloat16},
    &launch, &bwd::info};
// clang-format on

template <typename T, int kHeadDim>
Status launch_typed(const AttentionParams& params, cudaStream_t stream) {
  constexpr size_t smem_bytes = SharedTiles<Config<T, kHeadDim>>::kBytes;
  const auto kernel = params.causal ? attention_kernel<T, kHeadDim, true> : attention_kernel<T, kHeadDim, false>;
  // Dynamic shared memory above 48 KB needs an explicit opt-in. The attribute belongs to the
  // current device, so it is set on every launch (a process may launch on several GPUs).
  const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (attr_status != cudaSuccess) {
    return Status::error(std::string(info.name) +
                         ": cannot configure the kernel: " + cudaGetErrorString(attr_status));
  }
  const int64_t blocks = (params.seq_q + kBlockQ - 1) / kBlockQ * params.heads * params.batch;
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem_bytes, stream>>>(params);
  return launch_status(info.name);
}

Status launch(const AttentionParams& params, cudaStream_t stream) {
  const Status valid = validate_params(params, info);
  if (!valid.ok()) return valid;
  const bool fp16 = params.q.dtype == DType::kFloat16;
  if (params.head_dim == 64)
    return fp16 ? launch_typed<__half, 64>(params, stream) : launch_typed<__nv_bfloat16, 64>(params, stream);
  return fp16 ? launch_typed<__half, 128>(params, stream) : launch_typed<__nv_bfloat16, 128>(params, stream);
}

// ================================ backward ===============================
#include "backward.cuh"

}  // namespace FA_STAGE_NAMESPACE
