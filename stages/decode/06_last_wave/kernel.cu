// decode_06_last_wave: splits that fill the last wave (split_kv.h's choose_num_splits).
//
// The parent's launcher takes FlashAttention-2's split heuristic: a grid of at least 80% of one
// wave of resident blocks runs unsplit, and a split count is taken at 85% of the best wave
// efficiency. With the parent's short tile, 3 blocks fit an SM where the 128-row tile fit 2, and a
// grid of 512 tiles (batch 16 with 32 heads, batch 64 with 8 K/V heads) became 1.29 waves of 396:
// unsplit, its second wave 29% full, 8-10% slower than with the 128-row tile. Here a grid above one
// wave is split like any other, at 95% of the best efficiency. The kernels are the parent's.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "common/fragment_layout.h"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/softmax_math.h"
#include "gqa_packing.h"
#include "smem_layout.h"
#include "split_kv.h"
#include "stage_declaration.h"

namespace FA_STAGE_NAMESPACE {

using namespace fa;

// ================================ config ================================
// Br, query rows per thread block: 128 (the parent's tile), or 64 where a tile group's packed rows
// fit in 64 (the launcher's choice, below: decoding's 1 to 64 rows fill at most half of a 128-row
// tile, and the MMAs of the empty half are work for nothing).
constexpr int kBlockQ = 128;
constexpr int kShortBlockQ = 64;
constexpr int kBlockKV = 64;  // Bc: key/value rows per iteration
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
static_assert(kBlockKV % kMmaK == 0, "P V consumes keys 16 at a time");

// Everything else follows from the element type, the head dimension and the tile's rows.
template <typename T, int kHeadDim_, int kBlockQ_>
struct Config {
  using Elem = T;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockQ = kBlockQ_;
  static constexpr int kRowsPerWarp = kBlockQ / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / kMmaM;  // 16-row mma tiles per warp: 2, or 1 in the short tile
  static_assert(kMTiles * kMmaM * kWarps == kBlockQ, "each warp owns whole 16-row mma tiles");
  // A thread holds 2 rows of each of its warp's m-tiles: in m-tile m, row lane/4 (accumulator
  // entries 0, 1) and row lane/4 + 8 (entries 2, 3); see mma_c_row in fragment_layout.h. Row state
  // index mr = 2 * m + r.
  static constexpr int kRowsPerThread = 2 * kMTiles;
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
  static constexpr int kQElems = Cfg::kBlockQ * Cfg::kHeadDim;
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

// Paged (kPaged): the same tile, K/V block kv_block of one sequence, from a pool of pages. Row r of
// the block is the sequence's key kv_block * kBlockKV + r, row key % page_size of page
// pages[key / page_size] (`pages`: the sequence's row of the block table; `pool`: the pool's first
// row of this K/V head, page_stride elements from one page to the next). The page size is a multiple
// of 16 (validate_params), and a thread's rows advance by kRowsPerStep (8 or 16) per step, so a step
// crosses at most one page boundary: one 32-bit division per tile for the thread's first row
// (its slot in the table and its row in that page), then per step a compare, a subtract and an add
// to move on, a table read and two multiply-adds before its cp.async can be issued -- the parent's
// running pointer was one add. Every thread of a step reads the same entry (a step's 8 or 16 rows
// are an aligned group inside one 16-row span, and page boundaries are multiples of 16): a
// broadcast, from L1 after the first warp; but the copy waits on it, a dependent load in front of
// every step. Rows past `rows` read no entry (their slot may lie past the table's row) and are
// zero-filled.
template <typename Cfg>
__device__ __forceinline__ void copy_paged_tile_to_smem(typename Cfg::Elem* tile_smem, const typename Cfg::Elem* pool,
                                                        const int32_t* pages, int64_t page_stride, int64_t row_stride,
                                                        int page_size, int kv_block, int rows) {
  using T = typename Cfg::Elem;
  constexpr int kRowsPerStep = kThreads / Cfg::kChunksPerRow;
  static_assert(16 % kRowsPerStep == 0, "a step's rows lie inside one 16-row span: one page");
  const int row = threadIdx.x / Cfg::kChunksPerRow;
  const int col = (threadIdx.x % Cfg::kChunksPerRow) * Cfg::kElemsPer16B;
  const uint32_t dst = smem_u32(tile_smem + tile_offset(row, col, Cfg::kHeadDim));
  const int first_key = kv_block * kBlockKV + row;  // < 2^31: validate_params bounds max_pages * page_size
  int slot = first_key / page_size;                   // this thread's row: its entry of the table ...
  int row_in_page = first_key - slot * page_size;     // ... and its row in that page
#pragma unroll
  for (int step = 0; step < kBlockKV / kRowsPerStep; ++step) {
    const bool row_exists = row + step * kRowsPerStep < rows;
    const T* src = pool + col;  // a missing row still needs a valid source address: the pool's first row
    if (row_exists) {
      const int64_t page = pages[slot];
      src += page * page_stride + static_cast<int64_t>(row_in_page) * row_stride;
    }
    cp_async_16_zfill(dst + step * kRowsPerStep * Cfg::kHeadDim * sizeof(T), src, row_exists);
    row_in_page += kRowsPerStep;  // kRowsPerStep <= 16 <= page_size: at most one page boundary
    if (row_in_page >= page_size) {
      row_in_page -= page_size;
      ++slot;
    }
  }
}

// The Q tile, gathered: packed, consecutive rows are different heads' (or tokens') rows, so there is
// no one row stride; each row's address is row_offset(row) from the tile's first (token, head).
// Loaded once per thread block, so each of a thread's rows pays its own offset (gqa_packing.h's
// PackedRows) rather than the K/V tiles' running pointer. Rows past `rows` are zero-filled.
template <typename Cfg, typename RowOffset>
__device__ __forceinline__ void copy_q_tile_to_smem(typename Cfg::Elem* tile_smem, const typename Cfg::Elem* tile_gmem,
                                                    RowOffset row_offset, int rows) {
  constexpr int kRowsPerStep = kThreads / Cfg::kChunksPerRow;
  const int row = threadIdx.x / Cfg::kChunksPerRow;
  const int col = (threadIdx.x % Cfg::kChunksPerRow) * Cfg::kElemsPer16B;
  const uint32_t dst = smem_u32(tile_smem + tile_offset(row, col, Cfg::kHeadDim));
#pragma unroll
  for (int step = 0; step < Cfg::kBlockQ / kRowsPerStep; ++step) {
    const bool row_exists = row + step * kRowsPerStep < rows;
    cp_async_16_zfill(dst + step * kRowsPerStep * Cfg::kHeadDim * sizeof(typename Cfg::Elem),
                      row_exists ? tile_gmem + row_offset(row + step * kRowsPerStep) + col : tile_gmem, row_exists);
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
__device__ __forceinline__ void compute_scores(float (&s_acc)[Cfg::kMTiles][Cfg::kKeyTiles][4],
                                               const LaneAddress<Cfg>& q_addr, const LaneAddress<Cfg>& k_addr) {
  uint32_t k_frag[2][Cfg::kKeyTiles][2];
  load_k_fragments<Cfg>(k_frag[0], k_addr, 0);
#pragma unroll
  for (int kk = 0; kk < Cfg::kDimSteps; ++kk) {
    if (kk + 1 < Cfg::kDimSteps) load_k_fragments<Cfg>(k_frag[(kk + 1) % 2], k_addr, kk + 1);
    uint32_t q_frag[Cfg::kMTiles][4];
#pragma unroll
    for (int m = 0; m < Cfg::kMTiles; ++m) load_q_fragment<Cfg>(q_frag[m], q_addr, m, kk);
#pragma unroll
    for (int m = 0; m < Cfg::kMTiles; ++m)
#pragma unroll
      for (int n = 0; n < Cfg::kKeyTiles; ++n)
        mma_m16n8k16<typename Cfg::Elem>(s_acc[m][n], q_frag[m], k_frag[kk % 2][n]);
  }
}

// ======================== online softmax update =========================
// The running state of the rows this thread holds, in fp32.
template <typename Cfg>
struct RowState {
  float max[Cfg::kRowsPerThread];  // the largest raw (unscaled) score seen so far
  float sum[Cfg::kRowsPerThread];  // this thread's share of the row sum; the quad adds them at the end
};

template <typename Cfg>
__device__ __forceinline__ void init_row_state(RowState<Cfg>& state) {
#pragma unroll
  for (int r = 0; r < Cfg::kRowsPerThread; ++r) {
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
// (j >= keys) or, under causal, above the diagonal of the row's token (j > token(i) + diagonal,
// tested without a division: above_diagonal in gqa_packing.h): the score -inf, which no row maximum
// takes and exp2 turns into the probability 0. Under causal a row may lose every key of the block.
// warp_row0 here is the warp's first row plus first_in_group (PackedRows): the row's place in its
// tile group's packed order, whose quotient by heads_per_tile is the row's token.
template <typename Cfg, bool kCausal>
__device__ __forceinline__ void mask_scores(float (&s_acc)[Cfg::kMTiles][Cfg::kKeyTiles][4], int keys, int diagonal,
                                            int heads_per_tile, int warp_row0, int lane) {
#pragma unroll
  for (int m = 0; m < Cfg::kMTiles; ++m)
#pragma unroll
    for (int n = 0; n < Cfg::kKeyTiles; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int key = n * kMmaN + mma_c_col(lane, i);
        if (key >= keys ||
            (kCausal && above_diagonal(key, diagonal, heads_per_tile, warp_row0 + m * kMmaM + mma_c_row(lane, i))))
          s_acc[m][n][i] = -INFINITY;
      }
}

// Raise the running max (of raw scores: a positive scale keeps their order), rescale what was
// accumulated under the old max (the sum and O), and turn the scores into unnormalized
// probabilities P = exp(scale * (s - max)) = exp2(s * scale_log2 - max * scale_log2): one FFMA
// feeding one MUFU.EX2 per score.
template <typename Cfg>
__device__ __forceinline__ void online_softmax_update(float (&s_acc)[Cfg::kMTiles][Cfg::kKeyTiles][4],
                                                      float (&o_acc)[Cfg::kMTiles][Cfg::kDimTiles][4], RowState<Cfg>& state,
                                                      float scale_log2) {
#pragma unroll
  for (int mr = 0; mr < Cfg::kRowsPerThread; ++mr) {
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
__device__ __forceinline__ void accumulate_pv(float (&o_acc)[Cfg::kMTiles][Cfg::kDimTiles][4],
                                              const float (&s_acc)[Cfg::kMTiles][Cfg::kKeyTiles][4],
                                              const LaneAddress<Cfg>& v_addr) {
  uint32_t v_frag[2][Cfg::kDimTiles][2];
  load_v_fragments<Cfg>(v_frag[0], v_addr, 0);
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk) {
    if (kk + 1 < Cfg::kKeySteps) load_v_fragments<Cfg>(v_frag[(kk + 1) % 2], v_addr, kk + 1);
    uint32_t p_frag[Cfg::kMTiles][4];
#pragma unroll
    for (int m = 0; m < Cfg::kMTiles; ++m) p_fragment<Cfg>(p_frag[m], s_acc[m], kk);
#pragma unroll
    for (int m = 0; m < Cfg::kMTiles; ++m)
#pragma unroll
      for (int d = 0; d < Cfg::kDimTiles; ++d)
        mma_m16n8k16<typename Cfg::Elem>(o_acc[m][d], p_frag[m], v_frag[kk % 2][d]);
  }
}

// ========================= normalize and write O ========================
// Add up each row's sum over its quad (every lane of the quad keeps the total, for write_lse),
// divide by it, convert to 16 bits, stage the tile in shared memory (over Q, which every warp has
// finished reading) and write out its first `rows` rows (the others are past the tile group's rows)
// in 16-byte chunks, each row to its own (token, head): row_offset(row) from the tile's first.
template <typename Cfg, bool kCausal, typename RowOffset>
__device__ __forceinline__ void normalize_and_write_o(float (&o_acc)[Cfg::kMTiles][Cfg::kDimTiles][4], RowState<Cfg>& state,
                                                      typename Cfg::Elem* o_smem, typename Cfg::Elem* o_gmem,
                                                      RowOffset row_offset, int rows, int warp_row0, int lane) {
  using T = typename Cfg::Elem;
#pragma unroll
  for (int mr = 0; mr < Cfg::kRowsPerThread; ++mr) {
    const int m = mr / 2, r = mr % 2;
    // A row that saw no key has the sum 0 and an O of 0: it writes zeros. Not only under causal
    // now: a sequence of length 0 sees no key at all. (NaN sums still divide.)
    state.sum[mr] = quad_allreduce_sum(state.sum[mr]);
    const float sum = state.sum[mr];
    const float inv_sum = sum == 0.0f ? 0.0f : 1.0f / sum;
    const int row = warp_row0 + m * kMmaM + mma_c_row(lane, 2 * r);
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d) {
      const int col = d * kMmaN + mma_c_col(lane, 2 * r);
      *reinterpret_cast<uint32_t*>(o_smem + tile_offset(row, col, Cfg::kHeadDim)) =
          pack2<T>(o_acc[m][d][2 * r] * inv_sum, o_acc[m][d][2 * r + 1] * inv_sum);
    }
  }
  __syncthreads();  // the whole O tile is staged
  constexpr int kChunks = Cfg::kBlockQ * Cfg::kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int step = 0; step < kChunks / kThreads; ++step) {
    const int i = step * kThreads + threadIdx.x;
    const int row = i / Cfg::kChunksPerRow;
    const int col = (i % Cfg::kChunksPerRow) * Cfg::kElemsPer16B;
    if (row < rows)
      *reinterpret_cast<uint4*>(o_gmem + row_offset(row) + col) =
          *reinterpret_cast<const uint4*>(o_smem + tile_offset(row, col, Cfg::kHeadDim));
  }
}

// ============================== write LSE ===============================
// lse = softmax_scale * max + log(sum) for each of the thread's rows that exist, written by the
// quad's first lane (after normalize_and_write_o, the sum is the row's total in every lane), at
// row_offset(row) from the tile's first row. A row that saw no key has max = -inf and sum = 0:
// -inf + log(0) = -inf.
template <typename Cfg, typename RowOffset>
__device__ __forceinline__ void write_lse(const RowState<Cfg>& state, float* lse_gmem, RowOffset row_offset,
                                          float softmax_scale, int rows, int warp_row0, int lane) {
  if (lane % 4 != 0) return;
#pragma unroll
  for (int mr = 0; mr < Cfg::kRowsPerThread; ++mr) {
    const int row = warp_row0 + (mr / 2) * kMmaM + mma_c_row(lane, 2 * (mr % 2));
    if (row < rows) lse_gmem[row_offset(row)] = state.max[mr] * softmax_scale + logf(state.sum[mr]);
  }
}

// ===================== write the split's partial O =====================
// With several splits, a split writes its rows' O divided by its own row sum, in fp32, to the
// workspace (rows of kHeadDim floats, [split][batch][tile group][packed row]); write_lse then writes
// its LSE, and combine_kernel merges the splits. Normalized, so that one float per row (the LSE) is all the
// merge needs besides O, and every O_s is a convex combination of V rows: no overflow in fp32.
// Straight from the accumulators, no staging in shared memory: a quad's 4 lanes write 8 consecutive
// floats of a row per n-tile, a whole 32-byte sector.
template <typename Cfg, bool kCausal>
__device__ __forceinline__ void write_partial_o(const float (&o_acc)[Cfg::kMTiles][Cfg::kDimTiles][4], RowState<Cfg>& state,
                                                float* o_part, int rows, int warp_row0, int lane) {
#pragma unroll
  for (int mr = 0; mr < Cfg::kRowsPerThread; ++mr) {
    const int m = mr / 2, r = mr % 2;
    state.sum[mr] = quad_allreduce_sum(state.sum[mr]);
    const float sum = state.sum[mr];
    const float inv_sum = kCausal && sum == 0.0f ? 0.0f : 1.0f / sum;  // a row with no key here: O_s = 0
    const int row = warp_row0 + m * kMmaM + mma_c_row(lane, 2 * r);
    if (row >= rows) continue;
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d) {
      const int col = d * kMmaN + mma_c_col(lane, 2 * r);
      *reinterpret_cast<float2*>(o_part + row * Cfg::kHeadDim + col) =
          make_float2(o_acc[m][d][2 * r] * inv_sum, o_acc[m][d][2 * r + 1] * inv_sum);
    }
  }
}

// The workspace of a launch with several splits: split s's partial O of row r = (b * groups + tile
// group) * (seq_q * heads_per_tile) + packed row (gqa_packing.h's unpack_row reads it back) at
// o[(s * rows + r) * head_dim], its LSE at lse[s * rows + r].
struct SplitWorkspace {
  int num_splits = 1;
  int64_t rows = 0;  // batch * heads * seq_q
  float* o = nullptr;
  float* lse = nullptr;
};

// ================================ kernel ================================
template <typename T, int kHeadDim, bool kCausal, bool kSplit, bool kPaged, bool kShortTile>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const AttentionParams p, const SplitWorkspace ws, const int heads_per_tile) {
  using Cfg = Config<T, kHeadDim, kShortTile ? kShortBlockQ : kBlockQ>;
  constexpr int kBlockQ = Cfg::kBlockQ;  // this kernel's tile: 64 or 128 rows

  // One thread block per (batch, tile group, query block) in x -- a tile group is heads_per_tile
  // query heads of one K/V head, packed (gqa_packing.h), or one head -- query blocks fastest so that
  // the blocks running at the same time share one head's K and V in L2; under causal the last query
  // block first, as it has the most K/V blocks to visit. The split in y: the splits of one K/V range
  // are a grid row apart, and the blocks running at the same time read the same split of every head.
  const int64_t group_rows = p.seq_q * heads_per_tile;  // the tile group's packed rows
  const int64_t num_q_blocks = (group_rows + kBlockQ - 1) / kBlockQ;
  const int64_t q_block = kCausal ? num_q_blocks - 1 - blockIdx.x % num_q_blocks : blockIdx.x % num_q_blocks;
  const int64_t batch_head = blockIdx.x / num_q_blocks;
  const int64_t batch = batch_head / (p.heads / heads_per_tile);
  const int64_t head = batch_head % (p.heads / heads_per_tile) * heads_per_tile;  // the tile group's first head
  // Tile row r is token first_token + tile_rows.token(r) of head head + tile_rows.head(r).
  const PackedRows tile_rows = packed_rows(q_block * kBlockQ, heads_per_tile);
  const int64_t first_token = q_block * kBlockQ / heads_per_tile;
  const T* q_gmem = static_cast<const T*>(p.q.data) + batch * p.q.batch_stride + head * p.q.head_stride +
                    first_token * p.q.seq_stride;
  const int64_t kv_head = head / (p.heads / p.kv_heads);  // the key/value head of the tile group's heads
  // Paged, K and V are pools of pages, and batch_stride steps from page to page: the pointers start
  // at the pool's first row of the K/V head, and the sequence's pages are its row of the block table.
  const int64_t kv_batch = kPaged ? 0 : batch;
  const T* k_gmem = static_cast<const T*>(p.k.data) + kv_batch * p.k.batch_stride + kv_head * p.k.head_stride;
  const T* v_gmem = static_cast<const T*>(p.v.data) + kv_batch * p.v.batch_stride + kv_head * p.v.head_stride;
  T* o_gmem = static_cast<T*>(p.o.data) + batch * p.o.batch_stride + head * p.o.head_stride +
              first_token * p.o.seq_stride;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  SharedTiles<Cfg> smem(smem_raw);

  const int lane = threadIdx.x % 32;
  const int warp_row0 = (threadIdx.x / 32) * Cfg::kRowsPerWarp;
  const LaneAddress<Cfg> q_addr(smem.q, warp_row0 + ldmatrix_a_row(lane), ldmatrix_a_col(lane));
  const LaneAddress<Cfg> k_addr(smem.k, ldmatrix_bt_row(lane), ldmatrix_bt_col(lane));
  const LaneAddress<Cfg> v_addr(smem.v, ldmatrix_b_trans_row(lane), ldmatrix_b_trans_col(lane));

  // This sequence's keys: rows 0 .. seq_kv - 1 of its K and V. One load per thread block, the same
  // address in every thread. The host cannot check a length in device memory; clamped here, a value
  // outside [0, p.seq_kv] reads nothing past the cache (a negative one is a sequence of length 0).
  const int64_t seq_kv =
      p.seqlens_k == nullptr ? p.seq_kv : min(max(int64_t{p.seqlens_k[batch]}, int64_t{0}), p.seq_kv);

  // Only the last query block and the last K/V block may be partial: the rows of this query block
  // that exist, and the keys of K/V block b (the last block holds the 1..kBlockKV that are left).
  const int64_t q_rows_left = group_rows - q_block * kBlockQ;
  const int q_rows = q_rows_left < kBlockQ ? static_cast<int>(q_rows_left) : kBlockQ;
  // Causal: the keys this block's last row sees (0 to seq_kv), and the blocks holding them; the
  // blocks past them lie above the diagonal for every row. Rows are token-major: the last row holds
  // the tile's last token. < 2^31 blocks: K alone would need 2^44 bytes otherwise.
  const int64_t diagonal_offset = seq_kv - p.seq_q;  // query i sees keys j <= i + diagonal_offset
  const int64_t last_row_keys = first_token + tile_rows.token(q_rows - 1) + 1 + diagonal_offset;
  const int64_t keys_seen = kCausal ? min(max(last_row_keys, int64_t{0}), seq_kv) : seq_kv;
  const int num_kv_blocks = static_cast<int>((keys_seen + kBlockKV - 1) / kBlockKV);
  const auto keys_in_block = [&](int block) {
    if constexpr (kCausal)  // the last block visited need not be the sequence's last
      return static_cast<int>(min(seq_kv - static_cast<int64_t>(block) * kBlockKV, int64_t{kBlockKV}));
    return block + 1 < num_kv_blocks ? kBlockKV : static_cast<int>(seq_kv - static_cast<int64_t>(block) * kBlockKV);
  };
  // This thread block's share of those blocks: split blockIdx.y's run (split_kv.h), all of them
  // unsplit. The launcher chose S = ws.num_splits from the longest sequence's n = ceil(p.seq_kv /
  // kBlockKV) blocks; this sequence has n_b = ceil(seq_kv / kBlockKV) <= n (fewer under causal, as in
  // the parent) and cuts them into S runs the same way, split s taking [s n_b / S, (s + 1) n_b / S):
  // no split longer than ceil(n_b / S) <= ceil(n / S), the launcher's longest. Where n_b < S, S - n_b
  // splits are empty and, below, write only lse_s = -inf, weight 0 in the merge (merge_splits); a
  // sequence of length 0 has n_b = 0: every split empty, and the merge gives O = 0, LSE = -inf.
  // E.g. S = 29 planned for 16384 keys (256 blocks, 8 or 9 a split): a sequence of 1000 keys (16
  // blocks) has 16 splits of one block and 13 empty ones; one of 64 keys, 1 split of one block.
  // Unsplit, n_b = 0 leaves the loops below empty: the sum 0, O = 0 (normalize_and_write_o).
  const KvBlockRange range =
      kSplit ? split_kv_blocks(num_kv_blocks, ws.num_splits, blockIdx.y) : KvBlockRange{0, num_kv_blocks};
  // This thread block's first row in the workspace.
  const auto workspace_row = [&] { return blockIdx.y * ws.rows + batch_head * group_rows + q_block * kBlockQ; };
  if constexpr (kSplit) {
    if (range.begin == range.end) {  // no key of this query block in this split: weight 0 in the merge
      for (int row = threadIdx.x; row < q_rows; row += kThreads) ws.lse[workspace_row() + row] = -INFINITY;
      return;
    }
  }
  if constexpr (!kPaged) {  // the parent's running pointers; a paged block finds its pages itself
    k_gmem += static_cast<int64_t>(range.begin) * kBlockKV * p.k.seq_stride;
    v_gmem += static_cast<int64_t>(range.begin) * kBlockKV * p.v.seq_stride;
  }
  // Global -> shared for K/V block kv_block: contiguous from the running pointer, or from its pages.
  const auto copy_kv_block = [&](T* tile_smem, const T* kv_gmem, const TensorView& kv, int kv_block) {
    // Paged: the sequence's row of the block table, recomputed from the kernel parameters (constant
    // memory) at every copy: held in registers across the loop (with the earlier version's page
    // shift), it made the head_dim 128 paged kernels spill 2-3x the parent's (ptxas -v, sm_80).
    if constexpr (kPaged)
      copy_paged_tile_to_smem<Cfg>(tile_smem, kv_gmem, p.block_table + batch * p.block_table_batch_stride,
                                   kv.batch_stride, kv.seq_stride, p.page_size, kv_block, keys_in_block(kv_block));
    else
      copy_tile_to_smem<Cfg, kBlockKV>(tile_smem, kv_gmem, kv.seq_stride, keys_in_block(kv_block));
  };

  // Q stays in shared memory for the whole loop over K/V. The first K block is requested with it.
  const auto q_row_offset = [&](int row) { return tile_rows.offset(row, p.q.seq_stride, p.q.head_stride); };
  copy_q_tile_to_smem<Cfg>(smem.q, q_gmem, q_row_offset, q_rows);
  copy_kv_block(smem.k, k_gmem, p.k, range.begin);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  float o_acc[Cfg::kMTiles][Cfg::kDimTiles][4] = {};
  RowState<Cfg> state;
  init_row_state(state);
  const float scale_log2 = p.softmax_scale * 1.44269504088896340736f;  // softmax_scale * log2(e)

  // One step of the loop over K/V: block kv_block's scores, softmax and P V. The mask is applied
  // where the caller asks for it (under causal: the blocks the diagonal crosses, and the last) and,
  // without causal, in a partial block (the last).
  const auto step = [&](int kv_block, bool masked) {
    // This block's V lands while S = Q K^T runs. (The K block is already in shared memory.)
    copy_kv_block(smem.v, v_gmem, p.v, kv_block);
    cp_async_commit();
    if constexpr (!kPaged) {
      v_gmem += kBlockKV * p.v.seq_stride;
      k_gmem += kBlockKV * p.k.seq_stride;
    }

    float s_acc[Cfg::kMTiles][Cfg::kKeyTiles][4] = {};
    compute_scores<Cfg>(s_acc, q_addr, k_addr);
    __syncthreads();  // every warp has read this K block: its buffer is free

    // The next K block lands while softmax and P V run. On the last block the group is empty, which
    // keeps the count of groups in flight the same in every iteration.
    if (kv_block + 1 < range.end)
      copy_kv_block(smem.k, k_gmem, p.k, kv_block + 1);
    cp_async_commit();

    const int keys = keys_in_block(kv_block);
    if (masked || (!kCausal && keys < kBlockKV)) {
      // Under causal, row i of the query block sees key j of this block where j <= i + diagonal; only
      // the keys below `keys` exist.
      const int64_t block_diagonal = first_token + diagonal_offset - static_cast<int64_t>(kv_block) * kBlockKV;
      const int diagonal = kCausal ? static_cast<int>(min(block_diagonal, int64_t{kBlockKV})) : kBlockKV;
      mask_scores<Cfg, kCausal>(s_acc, keys, diagonal, heads_per_tile, tile_rows.first_in_group + warp_row0, lane);
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
    const int64_t first_row_keys = max(first_token + diagonal_offset + 1, int64_t{0});
    const int unmasked_blocks = static_cast<int>(min(first_row_keys, seq_kv) / kBlockKV);
    // (Unsplit, range.end = num_kv_blocks >= unmasked_blocks already.)
    const int unmasked_end = kSplit ? min(unmasked_blocks, range.end) : unmasked_blocks;
    int kv_block = range.begin;
    for (; kv_block < unmasked_end; ++kv_block) step(kv_block, false);
    for (; kv_block < range.end; ++kv_block) step(kv_block, true);
  } else {
    // ampere_11_any_length's loop: the step masks the last block where it is partial.
    for (int kv_block = range.begin; kv_block < range.end; ++kv_block) step(kv_block, false);
  }

  if constexpr (kSplit) {
    // The merge needs every split's LSE, asked for or not.
    const int64_t row0 = workspace_row();
    write_partial_o<Cfg, kCausal>(o_acc, state, ws.o + row0 * kHeadDim, q_rows, warp_row0, lane);
    write_lse(state, ws.lse + row0, [](int row) { return row; }, p.softmax_scale, q_rows, warp_row0, lane);
  } else {
    const auto o_row_offset = [&](int row) { return tile_rows.offset(row, p.o.seq_stride, p.o.head_stride); };
    normalize_and_write_o<Cfg, kCausal>(o_acc, state, smem.q, o_gmem, o_row_offset, q_rows, warp_row0, lane);
    if (p.lse.data != nullptr) {
      float* lse_gmem = p.lse.data + batch * p.lse.batch_stride + head * p.lse.head_stride + first_token;
      const auto lse_row_offset = [&](int row) { return tile_rows.offset(row, 1, p.lse.head_stride); };
      write_lse(state, lse_gmem, lse_row_offset, p.softmax_scale, q_rows, warp_row0, lane);
    }
  }
}

// ============================ combine the splits ============================
// One warp per row r of the workspace: each lane merges its kHeadDim / 32 consecutive elements of O
// over the splits (split_kv.h's merge_splits: every lane takes the row's maximum and sum over the
// splits' LSEs itself, reading them from L1, rather than shuffling them across the warp), then
// writes them to O in the output's dtype at the row's (batch, head, token), unpacked, and lane 0
// writes the row's LSE. Templated on the head dimension alone: the dtype is a branch at the store
// (one kernel for fp16 and bf16, and the SASS tools, which read a kernel's dtype and head_dim from
// its template arguments, see no attention kernel in it).
constexpr int kCombineWarps = 4;
constexpr int kCombineThreads = kCombineWarps * 32;

template <int kHeadDim>
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const AttentionParams p, const SplitWorkspace ws, const int heads_per_tile) {
  constexpr int kDimsPerLane = kHeadDim / 32;
  static_assert(kHeadDim % 64 == 0, "each lane holds an even number of elements: pairs of 16-bit values");
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kCombineWarps + threadIdx.x / 32;
  if (row >= ws.rows) return;
  const int lane = threadIdx.x % 32;
  float o[kDimsPerLane];
  const float lse = merge_splits<kDimsPerLane>(ws.num_splits, ws.lse + row, ws.rows,
                                               ws.o + row * kHeadDim + lane * kDimsPerLane, ws.rows * kHeadDim, o);
  const QueryRow query = unpack_row(row, p.seq_q, p.heads, heads_per_tile);  // the workspace's rows are packed
  const int64_t i = query.token, batch = query.batch, head = query.head;
  const int64_t o_offset = batch * p.o.batch_stride + i * p.o.seq_stride + head * p.o.head_stride + lane * kDimsPerLane;
  uint32_t* const o_pairs = reinterpret_cast<uint32_t*>(
      p.o.dtype == DType::kFloat16 ? static_cast<void*>(static_cast<__half*>(p.o.data) + o_offset)
                                   : static_cast<void*>(static_cast<__nv_bfloat16*>(p.o.data) + o_offset));
#pragma unroll
  for (int d = 0; d < kDimsPerLane; d += 2)
    o_pairs[d / 2] = p.o.dtype == DType::kFloat16 ? pack2<__half>(o[d], o[d + 1]) : pack2<__nv_bfloat16>(o[d], o[d + 1]);
  if (p.lse.data != nullptr && lane == 0) p.lse.data[batch * p.lse.batch_stride + head * p.lse.head_stride + i] = lse;
}

// =============================== launcher ===============================
Status launch(const AttentionParams& params, cudaStream_t stream);

// clang-format off
extern const StageInfo info = {
    FA_STAGE_DECLARATION,  // from stage.json
    kBlockQ, kBlockKV, kWarps,
    /*head_dims=*/{64, 128}, /*dtypes=*/{DType::kFloat16, DType::kBFloat16},
    &launch};
// clang-format on

// The workspace comes from a memory pool of the stage's own, one per device, made on first use and
// kept for the process: cudaMallocFromPoolAsync and cudaFreeAsync on the launch stream, so the
// workspace lives exactly from this launch's attention kernel to its combine in the stream's order,
// costs no device-wide synchronization, and two launches on two streams at once never share one
// (a buffer kept in the stage would need a lock or one copy per stream). Why not the device's
// default pool (plain cudaMallocAsync): it may reuse memory freed on another stream by making this
// stream wait for that one (cudaMemPoolReuseAllowInternalDependencies, on by default), which would
// tie a launch to unrelated work on another stream; and it returns its memory to the driver at every
// synchronization (release threshold 0), so a caller that synchronizes after each decoding step
// would map the workspace anew each time. This pool allows neither, and keeps up to
// kPoolKeepBytes reserved between launches.
constexpr uint64_t kPoolKeepBytes = uint64_t{64} << 20;

Status workspace_pool(cudaMemPool_t* pool) {
  const auto failed = [](const char* what, cudaError_t e) {
    return Status::error(std::string(info.name) + ": " + what + ": " + cudaGetErrorString(e));
  };
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return failed("cannot get the current device", e);
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;  // by device; never destroyed (they outlive any launch)
  const std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<int>(pools.size()) <= device) pools.resize(device + 1, nullptr);
  if (pools[device] == nullptr) {
    int supported = 0;
    e = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device);
    if (e != cudaSuccess) return failed("cannot query memory-pool support", e);
    if (!supported)
      return Status::error(std::string(info.name) +
                           ": the split-KV workspace needs stream-ordered memory pools, which this device or "
                           "driver does not support (num_splits = 1 needs no workspace)");
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t created = nullptr;
    e = cudaMemPoolCreate(&created, &props);
    if (e != cudaSuccess) return failed("cannot create the workspace memory pool", e);
    int no_internal_dependencies = 0;
    uint64_t keep = kPoolKeepBytes;
    e = cudaMemPoolSetAttribute(created, cudaMemPoolReuseAllowInternalDependencies, &no_internal_dependencies);
    if (e == cudaSuccess) e = cudaMemPoolSetAttribute(created, cudaMemPoolAttrReleaseThreshold, &keep);
    if (e != cudaSuccess) {
      cudaMemPoolDestroy(created);
      return failed("cannot configure the workspace memory pool", e);
    }
    pools[device] = created;
  }
  *pool = pools[device];
  return Status::success();
}

// The attention kernel of a launch: causal or not, paged (a block table) or not.
template <typename T, int kHeadDim, bool kSplit, bool kShortTile>
auto kernel_for(bool causal, bool paged) {
  return causal ? (paged ? attention_kernel<T, kHeadDim, true, kSplit, true, kShortTile>
                         : attention_kernel<T, kHeadDim, true, kSplit, false, kShortTile>)
                : (paged ? attention_kernel<T, kHeadDim, false, kSplit, true, kShortTile>
                         : attention_kernel<T, kHeadDim, false, kSplit, false, kShortTile>);
}

// A launch with tiles of 128 rows, or of 64 (kShortTile), heads_per_tile heads to a tile group.
template <typename T, int kHeadDim, bool kShortTile>
Status launch_tiles(const AttentionParams& params, int heads_per_tile, cudaStream_t stream) {
  constexpr int kBlockQ = kShortTile ? kShortBlockQ : ::FA_STAGE_NAMESPACE::kBlockQ;
  constexpr size_t smem_bytes = SharedTiles<Config<T, kHeadDim, kBlockQ>>::kBytes;
  const auto failed = [](const char* what, cudaError_t e) {
    return Status::error(std::string(info.name) + ": " + what + ": " + cudaGetErrorString(e));
  };
  const auto kernel = kernel_for<T, kHeadDim, false, kShortTile>(params.causal, params.block_table != nullptr);
  const auto split_kernel = kernel_for<T, kHeadDim, true, kShortTile>(params.causal, params.block_table != nullptr);
  const int64_t q_blocks = (params.seq_q * heads_per_tile + kBlockQ - 1) / kBlockQ;
  const int64_t blocks = q_blocks * (params.heads / heads_per_tile) * params.batch;

  // How many splits. The heuristic needs the split kernel's occupancy, and the occupancy calculator
  // needs its shared-memory attribute set first.
  int num_splits = params.num_splits;
  if (num_splits == 0) {
    // Dynamic shared memory above 48 KB needs an explicit opt-in. The attribute belongs to the
    // current device, so it is set on every launch (a process may launch on several GPUs).
    cudaError_t e = cudaFuncSetAttribute(split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (e != cudaSuccess) return failed("cannot configure the kernel", e);
    int device = 0, sms = 0, blocks_per_sm = 0;
    e = cudaGetDevice(&device);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess)
      e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, split_kernel, kThreads, smem_bytes);
    if (e != cudaSuccess) return failed("cannot query the SM count and occupancy", e);
    // The longest visit of any query block: every key (causal shortens the others'), of the longest
    // sequence the cache holds: seqlens_k is in device memory, so the host plans for seq_kv and the
    // shorter sequences' splits come out shorter or empty (the kernel's comment on KvBlockRange).
    const int64_t kv_blocks = (params.seq_kv + kBlockKV - 1) / kBlockKV;
    num_splits = choose_num_splits(blocks, int64_t{sms} * blocks_per_sm, kv_blocks);
  }

  if (num_splits == 1) {  // the parent's launch: O written by the kernel itself
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (e != cudaSuccess) return failed("cannot configure the kernel", e);
    kernel<<<static_cast<unsigned>(blocks), kThreads, smem_bytes, stream>>>(params, SplitWorkspace{}, heads_per_tile);
    return launch_status(info.name);
  }

  SplitWorkspace ws;
  ws.num_splits = num_splits;
  ws.rows = params.batch * params.heads * params.seq_q;
  const int64_t combine_blocks = (ws.rows + kCombineWarps - 1) / kCombineWarps;
  if (combine_blocks > INT_MAX)
    return Status::error(std::string(info.name) + ": " + std::to_string(ws.rows) +
                         " rows need more than 2^31-1 combine thread blocks");
  const size_t o_bytes = static_cast<size_t>(num_splits) * ws.rows * kHeadDim * sizeof(float);
  const size_t lse_bytes = static_cast<size_t>(num_splits) * ws.rows * sizeof(float);
  cudaError_t e = cudaFuncSetAttribute(split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (e != cudaSuccess) return failed("cannot configure the kernel", e);
  cudaMemPool_t pool = nullptr;
  const Status have_pool = workspace_pool(&pool);
  if (!have_pool.ok()) return have_pool;
  void* workspace = nullptr;
  e = cudaMallocFromPoolAsync(&workspace, o_bytes + lse_bytes, pool, stream);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky: clear it for launch_status's next caller
    return Status::error(std::string(info.name) + ": cannot allocate the split-KV workspace (" +
                         std::to_string(o_bytes + lse_bytes) + " bytes for " + std::to_string(num_splits) +
                         " splits): " + cudaGetErrorString(e));
  }
  ws.o = static_cast<float*>(workspace);
  ws.lse = reinterpret_cast<float*>(static_cast<char*>(workspace) + o_bytes);  // o_bytes: a multiple of 256

  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(num_splits));
  split_kernel<<<grid, kThreads, smem_bytes, stream>>>(params, ws, heads_per_tile);
  Status status = launch_status(info.name);
  if (status.ok()) {  // nothing is launched after a failed launch
    combine_kernel<kHeadDim>
        <<<static_cast<unsigned>(combine_blocks), kCombineThreads, 0, stream>>>(params, ws, heads_per_tile);
    status = launch_status(info.name);
  }
  // Freed in stream order, after the combine (or at once, where nothing was launched).
  e = cudaFreeAsync(workspace, stream);
  if (e != cudaSuccess && status.ok())
    status = Status::error(std::string(info.name) + ": cannot free the split-KV workspace: " + cudaGetErrorString(e));
  return status;
}

template <typename T, int kHeadDim>
Status launch_typed(const AttentionParams& params, cudaStream_t stream) {
  // GQA packing (gqa_packing.h): a tile takes the group of query heads of one K/V head where that
  // makes fewer query tiles -- every decoding shape with kv_heads < heads -- and otherwise (MHA, a
  // group above kBlockQ heads, prefill at multiples of kBlockQ) one head per tile, the parent's
  // mapping. Fewer tiles is fewer work blocks for the split heuristic below, which then takes more
  // splits. Batch 1, 32 query heads, seq_kv 16384 (256 K/V blocks), 264 resident blocks (132 SMs x
  // 2): 8 K/V heads at seq_q 1..16 make 8 tiles instead of 32, and S goes from 7 (224 blocks of 37
  // K/V blocks) to 29 (232 blocks of 9); 1 K/V head at seq_q 1 makes 1 tile, S = 128 (the bound,
  // 128 blocks of 2), at seq_q 8, 2 tiles (256 rows), S = 128. At batch 16 and 8 K/V heads, 128
  // tiles (under 80% of a wave, where the parent's 512 ran unsplit) take S = 2.
  const int heads_per_tile = choose_heads_per_tile(params.heads, params.kv_heads, params.seq_q, kBlockQ);
  // The tile's rows: where a tile group's packed rows (seq_q * heads_per_tile) fit in 64, a 64-row
  // tile makes exactly as many tiles as the 128-row one, each reading the same keys, with half of the
  // 128-row tile's empty rows (and their MMAs) gone: every decoding shape up to 64 rows (MHA and GQA
  // at seq_q 1..8 with groups up to 8; 32:1 heads at seq_q 1 and 2).
  if (params.seq_q * heads_per_tile <= kShortBlockQ) return launch_tiles<T, kHeadDim, true>(params, heads_per_tile, stream);
  return launch_tiles<T, kHeadDim, false>(params, heads_per_tile, stream);
}

Status launch(const AttentionParams& params, cudaStream_t stream) {
  const Status valid = validate_params(params, info);
  if (!valid.ok()) return valid;
  const bool fp16 = params.q.dtype == DType::kFloat16;
  if (params.head_dim == 64)
    return fp16 ? launch_typed<__half, 64>(params, stream) : launch_typed<__nv_bfloat16, 64>(params, stream);
  return fp16 ? launch_typed<__half, 128>(params, stream) : launch_typed<__nv_bfloat16, 128>(params, stream);
}

}  // namespace FA_STAGE_NAMESPACE
