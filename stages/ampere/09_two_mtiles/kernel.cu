// ampere_09_two_mtiles: two m-tiles per warp, FlashAttention-2's warp layout.
//
// The parent's warps each own one 16-row mma tile, so every K and V fragment a warp loads with
// ldmatrix feeds MMAs for 16 query rows only. Per K/V block the 8 warps read 8 x 32 KB from shared
// memory: 2,048 cycles at 128 B/cycle, more than the ~1,700 cycles the tensor cores need for the
// block's MMAs, so the parent is bound by shared memory, not by math. Here each warp owns 32 rows (two
// m16 tiles) and 4 warps cover the same Br = 128: every K/V fragment now feeds two MMAs, one per
// m-tile, and the shared -> register traffic per FLOP halves.
//
// What that forces: a thread holds twice the O accumulators (128 fp32 at head_dim 128) and twice
// the scores (64), which leaves no room to keep Q in registers, so each k-step re-reads its Q
// fragments from shared memory. Nothing else changes, and at head_dim 128 that is not enough:
// ptxas needs more than 255 registers and spills (docs/stages/ampere/09_two_mtiles.md). The next
// stage puts the registers on a diet until the idea pays there too.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "common/fragment_layout.h"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/softmax_math.h"
#include "smem_layout.h"
#include "stage_declaration.h"

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
// The copies are only issued here: the caller commits them as a group and waits for the group.
template <typename Cfg, int kRows>
__device__ __forceinline__ void copy_tile_to_smem(typename Cfg::Elem* tile_smem, const typename Cfg::Elem* tile_gmem,
                                                  int64_t row_stride) {
  constexpr int kChunks = kRows * Cfg::kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int step = 0; step < kChunks / kThreads; ++step) {
    const int i = step * kThreads + threadIdx.x;
    const int row = i / Cfg::kChunksPerRow;
    const int col = (i % Cfg::kChunksPerRow) * Cfg::kElemsPer16B;
    cp_async_16(smem_u32(tile_smem + tile_offset(row, col, Cfg::kHeadDim)), tile_gmem + row * row_stride + col);
  }
}

// Shared -> registers. Q: the A fragment of the 16 rows from row0 for head dims [16*kk, 16*kk + 16).
template <typename Cfg>
__device__ __forceinline__ void load_q_fragment(uint32_t (&q_frag)[4], const typename Cfg::Elem* q_smem, int row0,
                                                int kk, int lane) {
  const int row = row0 + ldmatrix_a_row(lane);
  const int col = kk * kMmaK + ldmatrix_a_col(lane);
  ldmatrix_x4(q_frag, smem_u32(q_smem + tile_offset(row, col, Cfg::kHeadDim)));
}

// K: the B fragments of all kBlockKV keys for head dims [16*kk, 16*kk + 16), two key n-tiles of 8
// per ldmatrix.x4.
template <typename Cfg>
__device__ __forceinline__ void load_k_fragments(uint32_t (&k_frag)[Cfg::kKeyTiles][2],
                                                 const typename Cfg::Elem* k_smem, int kk, int lane) {
#pragma unroll
  for (int n_pair = 0; n_pair < Cfg::kKeyTiles / 2; ++n_pair) {
    const int row = n_pair * 2 * kMmaN + ldmatrix_bt_row(lane);
    const int col = kk * kMmaK + ldmatrix_bt_col(lane);
    uint32_t regs[4];
    ldmatrix_x4(regs, smem_u32(k_smem + tile_offset(row, col, Cfg::kHeadDim)));
    k_frag[2 * n_pair][0] = regs[0];
    k_frag[2 * n_pair][1] = regs[1];
    k_frag[2 * n_pair + 1][0] = regs[2];
    k_frag[2 * n_pair + 1][1] = regs[3];
  }
}

// V: the B fragments of all head dims for keys [16*kk, 16*kk + 16), transposed on the fly by
// ldmatrix.trans (V is stored [key][dim] but P V reads it down a column).
template <typename Cfg>
__device__ __forceinline__ void load_v_fragments(uint32_t (&v_frag)[Cfg::kDimTiles][2],
                                                 const typename Cfg::Elem* v_smem, int kk, int lane) {
#pragma unroll
  for (int d_pair = 0; d_pair < Cfg::kDimTiles / 2; ++d_pair) {
    const int row = kk * kMmaK + ldmatrix_b_trans_row(lane);
    const int col = d_pair * 2 * kMmaN + ldmatrix_b_trans_col(lane);
    uint32_t regs[4];
    ldmatrix_x4_trans(regs, smem_u32(v_smem + tile_offset(row, col, Cfg::kHeadDim)));
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
                                               const typename Cfg::Elem* q_smem, const typename Cfg::Elem* k_smem,
                                               int warp_row0, int lane) {
  uint32_t k_frag[2][Cfg::kKeyTiles][2];
  load_k_fragments<Cfg>(k_frag[0], k_smem, 0, lane);
#pragma unroll
  for (int kk = 0; kk < Cfg::kDimSteps; ++kk) {
    if (kk + 1 < Cfg::kDimSteps) load_k_fragments<Cfg>(k_frag[(kk + 1) % 2], k_smem, kk + 1, lane);
    uint32_t q_frag[kMTiles][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m) load_q_fragment<Cfg>(q_frag[m], q_smem, warp_row0 + m * kMmaM, kk, lane);
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
                                              const typename Cfg::Elem* v_smem, int lane) {
  uint32_t v_frag[2][Cfg::kDimTiles][2];
  load_v_fragments<Cfg>(v_frag[0], v_smem, 0, lane);
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk) {
    if (kk + 1 < Cfg::kKeySteps) load_v_fragments<Cfg>(v_frag[(kk + 1) % 2], v_smem, kk + 1, lane);
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
// Divide by the row sums, convert to 16 bits, stage the tile in shared memory (over Q, which every
// warp has finished reading) and write it out in coalesced 16-byte chunks.
template <typename Cfg>
__device__ __forceinline__ void normalize_and_write_o(float (&o_acc)[kMTiles][Cfg::kDimTiles][4], RowState& state,
                                                      typename Cfg::Elem* o_smem, typename Cfg::Elem* o_gmem,
                                                      int64_t row_stride, int warp_row0, int lane) {
  using T = typename Cfg::Elem;
#pragma unroll
  for (int mr = 0; mr < kRowsPerThread; ++mr) {
    const int m = mr / 2, r = mr % 2;
    const float inv_sum = 1.0f / quad_allreduce_sum(state.sum[mr]);
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
    *reinterpret_cast<uint4*>(o_gmem + row * row_stride + col) =
        *reinterpret_cast<const uint4*>(o_smem + tile_offset(row, col, Cfg::kHeadDim));
  }
}

// ================================ kernel ================================
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads) attention_kernel(const AttentionParams p) {
  using Cfg = Config<T, kHeadDim>;

  // One thread block per (batch, head, query block), query blocks fastest so that the blocks
  // running at the same time share one head's K and V in L2.
  const int64_t num_q_blocks = p.seq_q / kBlockQ;
  const int64_t q_block = blockIdx.x % num_q_blocks;
  const int64_t batch_head = blockIdx.x / num_q_blocks;
  const int64_t batch = batch_head / p.heads;
  const int64_t head = batch_head % p.heads;
  const T* q_gmem = static_cast<const T*>(p.q.data) + batch * p.q.batch_stride + head * p.q.head_stride +
                    q_block * kBlockQ * p.q.seq_stride;
  const T* k_gmem = static_cast<const T*>(p.k.data) + batch * p.k.batch_stride + head * p.k.head_stride;
  const T* v_gmem = static_cast<const T*>(p.v.data) + batch * p.v.batch_stride + head * p.v.head_stride;
  T* o_gmem = static_cast<T*>(p.o.data) + batch * p.o.batch_stride + head * p.o.head_stride +
              q_block * kBlockQ * p.o.seq_stride;

  extern __shared__ __align__(128) unsigned char smem_raw[];
  SharedTiles<Cfg> smem(smem_raw);

  const int lane = threadIdx.x % 32;
  const int warp_row0 = (threadIdx.x / 32) * kRowsPerWarp;

  // Q stays in shared memory for the whole loop over K/V. The first K block is requested with it.
  copy_tile_to_smem<Cfg, kBlockQ>(smem.q, q_gmem, p.q.seq_stride);
  copy_tile_to_smem<Cfg, kBlockKV>(smem.k, k_gmem, p.k.seq_stride);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  float o_acc[kMTiles][Cfg::kDimTiles][4] = {};
  RowState state;
  init_row_state(state);
  const float scale_log2 = p.softmax_scale * 1.44269504088896340736f;  // softmax_scale * log2(e)

  const int64_t num_kv_blocks = p.seq_kv / kBlockKV;
  for (int64_t kv_block = 0; kv_block < num_kv_blocks; ++kv_block) {
    // This block's V lands while S = Q K^T runs. (The K block is already in shared memory.)
    copy_tile_to_smem<Cfg, kBlockKV>(smem.v, v_gmem + kv_block * kBlockKV * p.v.seq_stride, p.v.seq_stride);
    cp_async_commit();

    float s_acc[kMTiles][Cfg::kKeyTiles][4] = {};
    compute_scores<Cfg>(s_acc, smem.q, smem.k, warp_row0, lane);
    __syncthreads();  // every warp has read this K block: its buffer is free

    // The next K block lands while softmax and P V run. On the last block the group is empty, which
    // keeps the count of groups in flight the same in every iteration.
    if (kv_block + 1 < num_kv_blocks)
      copy_tile_to_smem<Cfg, kBlockKV>(smem.k, k_gmem + (kv_block + 1) * kBlockKV * p.k.seq_stride, p.k.seq_stride);
    cp_async_commit();

    online_softmax_update<Cfg>(s_acc, o_acc, state, scale_log2);

    cp_async_wait<1>();  // this block's V has landed; the next K may still be in flight
    __syncthreads();     // ... for every thread's copies

    accumulate_pv<Cfg>(o_acc, s_acc, smem.v, lane);
    cp_async_wait<0>();  // the next K block has landed
    __syncthreads();     // ... for every thread, and every warp is done with V before it is overwritten
  }

  normalize_and_write_o<Cfg>(o_acc, state, smem.q, o_gmem, p.o.seq_stride, warp_row0, lane);
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

template <typename T, int kHeadDim>
Status launch_typed(const AttentionParams& params, cudaStream_t stream) {
  constexpr size_t smem_bytes = SharedTiles<Config<T, kHeadDim>>::kBytes;
  const auto kernel = attention_kernel<T, kHeadDim>;
  // Dynamic shared memory above 48 KB needs an explicit opt-in. The attribute belongs to the
  // current device, so it is set on every launch (a process may launch on several GPUs).
  const cudaError_t attr_status =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (attr_status != cudaSuccess) {
    return Status::error(std::string(info.name) +
                         ": cannot configure the kernel: " + cudaGetErrorString(attr_status));
  }
  const int64_t blocks = (params.seq_q / kBlockQ) * params.heads * params.batch;
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

}  // namespace FA_STAGE_NAMESPACE
