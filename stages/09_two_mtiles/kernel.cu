// Stage 09: two m-tiles per warp, FlashAttention-2's warp layout.
//
// Stage 8's warps each own one 16-row mma tile, so every K and V fragment a warp loads with
// ldmatrix feeds MMAs for 16 query rows only. Per K/V block the 8 warps read 8 x 32 KB from shared
// memory: 2,048 cycles at 128 B/cycle, more than the ~1,700 cycles the tensor cores need for the
// block's MMAs, so stage 8 is bound by shared memory, not by math. Here each warp owns 32 rows (two
// m16 tiles) and 4 warps cover the same Br = 128: every K/V fragment now feeds two MMAs, one per
// m-tile, and the shared -> register traffic per FLOP halves.
//
// What that forces is a register budget. A thread now holds twice the O accumulators (128 fp32 at
// head_dim 128) and twice the scores (64), which leaves no room to keep Q in registers:
//   * Q fragments are re-read from shared memory at every k-step (8 KB per warp per K/V block, on top
//     of 32 KB of K and V; still 160 KB per block against stage 8's 256 KB);
//   * K and V fragments are loaded one ldmatrix.x4 at a time, one ahead of their MMAs (stage 6's
//     double buffer at the grain of a single load);
//   * shared-memory addresses are 4 per-lane bases plus compile-time offsets, global addresses a
//     running pointer per tile, so ptxas does not keep dozens of precomputed addresses alive.
// 128 threads at <= 255 registers let two blocks share an SM (8 warps, as in stage 8).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "common/fragment_layout.h"
#include "common/params.h"
#include "common/ptx.cuh"
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
constexpr int kMTiles = kRowsPerWarp / 16;  // 16-row mma tiles per warp
static_assert(kMTiles == 2, "each warp owns two 16-row mma tiles");
static_assert(kBlockKV % 16 == 0, "P V consumes keys 16 at a time");

// ========================= shared-memory layout =========================
// [ Q tile: kBlockQ x D | K tile: kBlockKV x D | V tile: kBlockKV x D ]; the O tile reuses Q's space.
template <typename T, int kHeadDim>
struct SharedTiles {
  static constexpr int kQElems = kBlockQ * kHeadDim;
  static constexpr int kKElems = kBlockKV * kHeadDim;
  static constexpr int kVElems = kBlockKV * kHeadDim;
  static constexpr size_t kBytes = (kQElems + kKElems + kVElems) * sizeof(T);
  T* q;
  T* k;
  T* v;
  __device__ explicit SharedTiles(unsigned char* base)
      : q(reinterpret_cast<T*>(base)), k(q + kQElems), v(k + kKElems) {}
};

// ======================== global -> shared copies ========================
// A tile of kRows x kHeadDim elements moves in 16-byte chunks; consecutive threads take
// consecutive chunks of a row, so a warp reads whole rows (coalesced 128-byte transactions).
// Each step moves kRowsPerStep whole rows, a multiple of 8, so a thread's chunk keeps its
// swizzled column and its shared address advances by a constant: one running global pointer and
// one shared base per thread.
// The copies are only issued here: the caller commits them as a group and waits for the group.
template <typename T, int kRows, int kHeadDim>
__device__ __forceinline__ void copy_tile_to_smem(T* tile_smem, const T* tile_gmem, int64_t row_stride) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  constexpr int kRowsPerStep = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0 && kRowsPerStep % 8 == 0 && kRows % kRowsPerStep == 0,
                "every step copies whole rows, a multiple of the swizzle period");
  const int row = threadIdx.x / kChunksPerRow;
  const int col = (threadIdx.x % kChunksPerRow) * 8;
  const uint32_t dst = smem_u32(tile_smem + tile_offset(row, col, kHeadDim));
  const T* src = tile_gmem + row * row_stride + col;
#pragma unroll
  for (int step = 0; step < kRows / kRowsPerStep; ++step) {
    cp_async_16(dst + step * kRowsPerStep * kHeadDim * sizeof(T), src);
    src += kRowsPerStep * row_stride;
  }
}

// The epilogue's shared -> global copy of the O tile, chunked the same way.
template <typename T, int kRows, int kHeadDim>
__device__ __forceinline__ void copy_tile_to_gmem(T* tile_gmem, const T* tile_smem, int64_t row_stride) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int step = 0; step < kChunks / kThreads; ++step) {
    const int i = step * kThreads + threadIdx.x;
    const int row = i / kChunksPerRow;
    const int col = (i % kChunksPerRow) * 8;
    *reinterpret_cast<uint4*>(tile_gmem + row * row_stride + col) =
        *reinterpret_cast<const uint4*>(tile_smem + tile_offset(row, col, kHeadDim));
  }
}

// ======================= shared -> register loads =======================
// A lane's ldmatrix row address for the 16 x 16 sub-tile at (row0 + 16 i, 16 j) of a tile. Chunk
// 8h + c of a row is stored at chunk 8h + (c ^ (row % 8)) (smem_layout.h), and row0 + 16 i has the
// same row % 8 as row0, so 4 bases (j % 4 = 0..3) plus compile-time offsets reach every sub-tile:
// +128 bytes per 4 j, +16 rows per i.
template <typename T, int kHeadDim>
struct LaneAddress {
  uint32_t base[4];
  __device__ LaneAddress(const T* tile, int row, int col) {
#pragma unroll
    for (int j = 0; j < 4; ++j) base[j] = smem_u32(tile + tile_offset(row, j * 16 + col, kHeadDim));
  }
  __device__ __forceinline__ uint32_t at(int i, int j) const {
    return base[j % 4] + (j / 4) * 128 + i * 16 * kHeadDim * static_cast<int>(sizeof(T));
  }
};

// Q: the A fragment of the warp's m-tile m for head dims [16*kk, 16*kk + 16).
template <typename T, int kHeadDim>
__device__ __forceinline__ void load_q_fragment(uint32_t (&q_frag)[4], const LaneAddress<T, kHeadDim>& q_addr,
                                                int m, int kk) {
  ldmatrix_x4(q_frag, q_addr.at(m, kk));
}

// K: the B fragments of keys [16*n_pair, 16*n_pair + 16) (two n-tiles of 8) for head dims
// [16*kk, 16*kk + 16).
template <typename T, int kHeadDim>
__device__ __forceinline__ void load_k_fragments(uint32_t (&k_frag)[2][2], const LaneAddress<T, kHeadDim>& k_addr,
                                                 int kk, int n_pair) {
  uint32_t regs[4];
  ldmatrix_x4(regs, k_addr.at(n_pair, kk));
  k_frag[0][0] = regs[0];
  k_frag[0][1] = regs[1];
  k_frag[1][0] = regs[2];
  k_frag[1][1] = regs[3];
}

// V: the B fragments of head dims [16*d_pair, 16*d_pair + 16) (two n-tiles of 8) for keys
// [16*kk, 16*kk + 16), transposed on the fly by ldmatrix.trans (V is stored [key][dim]).
template <typename T, int kHeadDim>
__device__ __forceinline__ void load_v_fragments(uint32_t (&v_frag)[2][2], const LaneAddress<T, kHeadDim>& v_addr,
                                                 int kk, int d_pair) {
  uint32_t regs[4];
  ldmatrix_x4_trans(regs, v_addr.at(kk, d_pair));
  v_frag[0][0] = regs[0];
  v_frag[0][1] = regs[1];
  v_frag[1][0] = regs[2];
  v_frag[1][1] = regs[3];
}

// ================================ kernel ================================
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads) attention_kernel(const AttentionParams p) {
  constexpr int kDimSteps = kHeadDim / 16;  // k-steps of S = Q K^T
  constexpr int kKeySteps = kBlockKV / 16;  // k-steps of O += P V
  constexpr int kKeyTiles = kBlockKV / 8;   // n-tiles of S
  constexpr int kDimTiles = kHeadDim / 8;   // n-tiles of O
  constexpr int kQkLoads = kDimSteps * (kKeyTiles / 2);  // ldmatrix.x4 of K per block, in MMA order
  constexpr int kPvLoads = kKeySteps * (kDimTiles / 2);  // ldmatrix.x4 of V per block, in MMA order

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
  SharedTiles<T, kHeadDim> smem(smem_raw);

  const int lane = threadIdx.x % 32;
  const int warp_row0 = (threadIdx.x / 32) * kRowsPerWarp;
  const LaneAddress<T, kHeadDim> q_addr(smem.q, warp_row0 + ldmatrix_a_row(lane), ldmatrix_a_col(lane));
  const LaneAddress<T, kHeadDim> k_addr(smem.k, ldmatrix_bt_row(lane), ldmatrix_bt_col(lane));
  const LaneAddress<T, kHeadDim> v_addr(smem.v, ldmatrix_b_trans_row(lane), ldmatrix_b_trans_col(lane));

  // Q stays in shared memory for the whole loop over K/V. The first K block is requested with it.
  copy_tile_to_smem<T, kBlockQ, kHeadDim>(smem.q, q_gmem, p.q.seq_stride);
  copy_tile_to_smem<T, kBlockKV, kHeadDim>(smem.k, k_gmem, p.k.seq_stride);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // Each thread holds 2 rows of each of the warp's two m-tiles: in m-tile m, row lane/4
  // (accumulator entries 0,1) and row lane/4 + 8 (entries 2,3); row state index mr = 2 * m + r.
  // Their softmax state, in fp32:
  float o_acc[kMTiles][kDimTiles][4] = {};
  float row_max[2 * kMTiles];
  float row_sum[2 * kMTiles];  // this thread's share of the row sum; the quad adds them at the end
#pragma unroll
  for (int mr = 0; mr < 2 * kMTiles; ++mr) {
    row_max[mr] = -INFINITY;
    row_sum[mr] = 0.0f;
  }
  const float scale_log2 = p.softmax_scale * 1.44269504088896340736f;  // softmax_scale * log2(e)

  const int num_kv_blocks = static_cast<int>(p.seq_kv / kBlockKV);
  for (int kv_block = 0; kv_block < num_kv_blocks; ++kv_block) {
    // This block's V lands while S = Q K^T runs. (The K block is already in shared memory.)
    copy_tile_to_smem<T, kBlockKV, kHeadDim>(smem.v, v_gmem, p.v.seq_stride);
    cp_async_commit();
    v_gmem += kBlockKV * p.v.seq_stride;
    k_gmem += kBlockKV * p.k.seq_stride;

    // ============================ S = Q K^T =============================
    // For each k-step (16 head dims) the two Q fragments, then the K fragments one ldmatrix.x4
    // (16 keys) at a time, one load ahead of their MMAs; each K fragment feeds both m-tiles.
    float s_acc[kMTiles][kKeyTiles][4] = {};
    uint32_t q_frag[kMTiles][4];
    uint32_t k_frag[2][2][2];
    load_k_fragments<T, kHeadDim>(k_frag[0], k_addr, 0, 0);
#pragma unroll
    for (int i = 0; i < kQkLoads; ++i) {
      const int kk = i / (kKeyTiles / 2), n_pair = i % (kKeyTiles / 2);
      if (n_pair == 0) {
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) load_q_fragment<T, kHeadDim>(q_frag[m], q_addr, m, kk);
      }
      if (i + 1 < kQkLoads)
        load_k_fragments<T, kHeadDim>(k_frag[(i + 1) % 2], k_addr, (i + 1) / (kKeyTiles / 2),
                                      (i + 1) % (kKeyTiles / 2));
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        mma_m16n8k16<T>(s_acc[m][2 * n_pair], q_frag[m], k_frag[i % 2][0]);
        mma_m16n8k16<T>(s_acc[m][2 * n_pair + 1], q_frag[m], k_frag[i % 2][1]);
      }
    }
    __syncthreads();  // every warp has read this K block: its buffer is free

    // The next K block lands while softmax and P V run. On the last block the group is empty, which
    // keeps the count of groups in flight the same in every iteration.
    if (kv_block + 1 < num_kv_blocks) copy_tile_to_smem<T, kBlockKV, kHeadDim>(smem.k, k_gmem, p.k.seq_stride);
    cp_async_commit();

    // ========================== online softmax ==========================
    // Raise the running max (of raw scores), rescale what was accumulated under the old max, and
    // turn the scores into unnormalized probabilities exp2(s * scale_log2 - max * scale_log2).
#pragma unroll
    for (int mr = 0; mr < 2 * kMTiles; ++mr) {
      const int m = mr / 2, r = mr % 2;
      float block_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
        block_max = fmaxf(block_max, fmaxf(s_acc[m][n][2 * r], s_acc[m][n][2 * r + 1]));
      // The 4 lanes of a quad (lane/4 equal) hold the same row.
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
      const float new_max = fmaxf(row_max[mr], block_max);
      // While every score so far is -inf (keys masked by infinite inputs) subtract 0, not the max:
      // -inf - (-inf) is NaN, but exp2(-inf - 0) is the 0 weight the reference gives those keys.
      const float new_max_scaled = (new_max == -INFINITY ? 0.0f : new_max) * scale_log2;
      // 0 on the first block (max was -inf)
      const float correction = exp2_approx(row_max[mr] * scale_log2 - new_max_scaled);
      row_max[mr] = new_max;
      float block_sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        s_acc[m][n][2 * r] = exp2_approx(fmaf(s_acc[m][n][2 * r], scale_log2, -new_max_scaled));
        s_acc[m][n][2 * r + 1] = exp2_approx(fmaf(s_acc[m][n][2 * r + 1], scale_log2, -new_max_scaled));
        block_sum += s_acc[m][n][2 * r] + s_acc[m][n][2 * r + 1];
      }
      row_sum[mr] = row_sum[mr] * correction + block_sum;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        o_acc[m][d][2 * r] *= correction;
        o_acc[m][d][2 * r + 1] *= correction;
      }
    }

    cp_async_wait<1>();  // this block's V has landed; the next K may still be in flight
    __syncthreads();     // ... for every thread's copies

    // ============================ O += P V ==============================
    // P never leaves registers: the accumulator layout of S (n-tiles 2kk and 2kk+1) is exactly
    // the A-fragment layout of P for k-step kk, after packing pairs of floats to 16 bits.
    // V fragments are loaded one ldmatrix.x4 (16 head dims) at a time, one load ahead of their
    // MMAs; each V fragment feeds both m-tiles.
    uint32_t p_frag[kMTiles][kKeySteps][4];
#pragma unroll
    for (int m = 0; m < kMTiles; ++m)
#pragma unroll
      for (int kk = 0; kk < kKeySteps; ++kk) {
        p_frag[m][kk][0] = pack2<T>(s_acc[m][2 * kk][0], s_acc[m][2 * kk][1]);
        p_frag[m][kk][1] = pack2<T>(s_acc[m][2 * kk][2], s_acc[m][2 * kk][3]);
        p_frag[m][kk][2] = pack2<T>(s_acc[m][2 * kk + 1][0], s_acc[m][2 * kk + 1][1]);
        p_frag[m][kk][3] = pack2<T>(s_acc[m][2 * kk + 1][2], s_acc[m][2 * kk + 1][3]);
      }
    uint32_t v_frag[2][2][2];
    load_v_fragments<T, kHeadDim>(v_frag[0], v_addr, 0, 0);
#pragma unroll
    for (int i = 0; i < kPvLoads; ++i) {
      const int kk = i / (kDimTiles / 2), d_pair = i % (kDimTiles / 2);
      if (i + 1 < kPvLoads)
        load_v_fragments<T, kHeadDim>(v_frag[(i + 1) % 2], v_addr, (i + 1) / (kDimTiles / 2),
                                      (i + 1) % (kDimTiles / 2));
#pragma unroll
      for (int m = 0; m < kMTiles; ++m) {
        mma_m16n8k16<T>(o_acc[m][2 * d_pair], p_frag[m][kk], v_frag[i % 2][0]);
        mma_m16n8k16<T>(o_acc[m][2 * d_pair + 1], p_frag[m][kk], v_frag[i % 2][1]);
      }
    }
    cp_async_wait<0>();  // the next K block has landed
    __syncthreads();     // ... for every thread, and every warp is done with V before it is overwritten
  }

  // =============================== epilogue ===============================
  // Normalize, convert to 16 bits, stage the tile in shared memory (over Q, which every warp has
  // finished reading) and write it out in coalesced 16-byte chunks.
#pragma unroll
  for (int mr = 0; mr < 2 * kMTiles; ++mr) {
    const int m = mr / 2, r = mr % 2;
    row_sum[mr] += __shfl_xor_sync(0xffffffffu, row_sum[mr], 1);
    row_sum[mr] += __shfl_xor_sync(0xffffffffu, row_sum[mr], 2);
    const float inv_sum = 1.0f / row_sum[mr];
    const int row = warp_row0 + 16 * m + lane / 4 + 8 * r;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      const int col = d * 8 + 2 * (lane % 4);
      *reinterpret_cast<uint32_t*>(smem.q + tile_offset(row, col, kHeadDim)) =
          pack2<T>(o_acc[m][d][2 * r] * inv_sum, o_acc[m][d][2 * r + 1] * inv_sum);
    }
  }
  __syncthreads();  // the whole O tile is staged
  copy_tile_to_gmem<T, kBlockQ, kHeadDim>(o_gmem, smem.q, p.o.seq_stride);
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
  constexpr size_t smem_bytes = SharedTiles<T, kHeadDim>::kBytes;
  const auto kernel = attention_kernel<T, kHeadDim>;
  // Dynamic shared memory above 48 KB needs an explicit opt-in; set it once per instantiation.
  static const cudaError_t attr_status =
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
