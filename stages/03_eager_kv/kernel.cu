// Stage 03: eager K/V loads.
//
// Stage 2 issued each copy and waited for it at once, so every warp of a block stalled for a full
// global-memory latency twice per K/V block, with only the SM's other resident block to cover
// the gap. Now each copy is issued one phase before its data is needed: the V
// block is requested before S = Q K^T and lands while the QK^T MMAs run, and the next K block is
// requested as soon as every warp has read the current one, landing while softmax and P V run.
// K and V still have one shared-memory buffer each.
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
constexpr int kBlockQ = 64;   // Br: query rows per thread block
constexpr int kBlockKV = 32;  // Bc: key/value rows per iteration
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kBlockQ / kWarps;
static_assert(kRowsPerWarp == 16, "each warp owns exactly one 16-row mma tile");
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
// The copies are only issued here: the caller commits them as a group and waits for the group.
template <typename T, int kRows, int kHeadDim>
__device__ __forceinline__ void copy_tile_to_smem(T* tile_smem, const T* tile_gmem, int64_t row_stride) {
  constexpr int kChunksPerRow = kHeadDim / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "every thread copies the same number of chunks");
#pragma unroll
  for (int step = 0; step < kChunks / kThreads; ++step) {
    const int i = step * kThreads + threadIdx.x;
    const int row = i / kChunksPerRow;
    const int col = (i % kChunksPerRow) * 8;
    cp_async_16(smem_u32(tile_smem + tile_offset(row, col, kHeadDim)), tile_gmem + row * row_stride + col);
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
// Q: the A fragments of this warp's 16 rows for head dims [16*kk, 16*kk + 16).
template <typename T, int kHeadDim>
__device__ __forceinline__ void load_q_fragment(uint32_t (&q_frag)[4], const T* q_smem, int warp_row0, int kk,
                                                int lane) {
  const int row = warp_row0 + ldmatrix_a_row(lane);
  const int col = kk * 16 + ldmatrix_a_col(lane);
  ldmatrix_x4(q_frag, smem_u32(q_smem + tile_offset(row, col, kHeadDim)));
}

// K: the B fragments of all kBlockKV keys for head dims [16*kk, 16*kk + 16), two keys-tiles of 8
// per ldmatrix.x4.
template <typename T, int kHeadDim>
__device__ __forceinline__ void load_k_fragments(uint32_t (&k_frag)[kBlockKV / 8][2], const T* k_smem, int kk,
                                                 int lane) {
#pragma unroll
  for (int n_pair = 0; n_pair < kBlockKV / 16; ++n_pair) {
    const int row = n_pair * 16 + ldmatrix_bt_row(lane);
    const int col = kk * 16 + ldmatrix_bt_col(lane);
    uint32_t regs[4];
    ldmatrix_x4(regs, smem_u32(k_smem + tile_offset(row, col, kHeadDim)));
    k_frag[2 * n_pair][0] = regs[0];
    k_frag[2 * n_pair][1] = regs[1];
    k_frag[2 * n_pair + 1][0] = regs[2];
    k_frag[2 * n_pair + 1][1] = regs[3];
  }
}

// V: the B fragments of all head dims for keys [16*kk, 16*kk + 16), transposed on the fly by
// ldmatrix.trans (V is stored [key][dim] but P V reads it down a column).
template <typename T, int kHeadDim>
__device__ __forceinline__ void load_v_fragments(uint32_t (&v_frag)[kHeadDim / 8][2], const T* v_smem, int kk,
                                                 int lane) {
#pragma unroll
  for (int d_pair = 0; d_pair < kHeadDim / 16; ++d_pair) {
    const int row = kk * 16 + ldmatrix_b_trans_row(lane);
    const int col = d_pair * 16 + ldmatrix_b_trans_col(lane);
    uint32_t regs[4];
    ldmatrix_x4_trans(regs, smem_u32(v_smem + tile_offset(row, col, kHeadDim)));
    v_frag[2 * d_pair][0] = regs[0];
    v_frag[2 * d_pair][1] = regs[1];
    v_frag[2 * d_pair + 1][0] = regs[2];
    v_frag[2 * d_pair + 1][1] = regs[3];
  }
}

// ================================ kernel ================================
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads) attention_kernel(const AttentionParams p) {
  constexpr int kDimSteps = kHeadDim / 16;  // k-steps of S = Q K^T
  constexpr int kKeySteps = kBlockKV / 16;  // k-steps of O += P V
  constexpr int kKeyTiles = kBlockKV / 8;   // n-tiles of S
  constexpr int kDimTiles = kHeadDim / 8;   // n-tiles of O

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

  // Q is read once and stays in registers for the whole loop over K/V. The first K block is
  // requested with it.
  copy_tile_to_smem<T, kBlockQ, kHeadDim>(smem.q, q_gmem, p.q.seq_stride);
  copy_tile_to_smem<T, kBlockKV, kHeadDim>(smem.k, k_gmem, p.k.seq_stride);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  uint32_t q_frag[kDimSteps][4];
#pragma unroll
  for (int kk = 0; kk < kDimSteps; ++kk)
    load_q_fragment<T, kHeadDim>(q_frag[kk], smem.q, warp_row0, kk, lane);

  // Each thread holds 2 rows of the warp's 16: row lane/4 (accumulator entries 0,1) and row
  // lane/4 + 8 (entries 2,3). Their softmax state, in fp32:
  float o_acc[kDimTiles][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};

  const int64_t num_kv_blocks = p.seq_kv / kBlockKV;
  for (int64_t kv_block = 0; kv_block < num_kv_blocks; ++kv_block) {
    // This block's V lands while S = Q K^T runs. (The K block is already in shared memory.)
    copy_tile_to_smem<T, kBlockKV, kHeadDim>(smem.v, v_gmem + kv_block * kBlockKV * p.v.seq_stride,
                                             p.v.seq_stride);
    cp_async_commit();

    // ============================ S = Q K^T =============================
    // All of the K block's fragments are loaded before the first MMA.
    uint32_t k_frag[kDimSteps][kKeyTiles][2];
#pragma unroll
    for (int kk = 0; kk < kDimSteps; ++kk) load_k_fragments<T, kHeadDim>(k_frag[kk], smem.k, kk, lane);
    float s_acc[kKeyTiles][4] = {};
#pragma unroll
    for (int kk = 0; kk < kDimSteps; ++kk) {
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) mma_m16n8k16<T>(s_acc[n], q_frag[kk], k_frag[kk][n]);
    }
    __syncthreads();  // every warp has read this K block: its buffer is free

    // The next K block lands while softmax and P V run. On the last block the group is empty, which
    // keeps the count of groups in flight the same in every iteration.
    if (kv_block + 1 < num_kv_blocks) {
      copy_tile_to_smem<T, kBlockKV, kHeadDim>(smem.k, k_gmem + (kv_block + 1) * kBlockKV * p.k.seq_stride,
                                               p.k.seq_stride);
    }
    cp_async_commit();

    // ========================== online softmax ==========================
    // Scale the scores, raise the running max, rescale what was accumulated under the old max,
    // and turn the scores into unnormalized probabilities exp(s - max).
#pragma unroll
    for (int n = 0; n < kKeyTiles; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s_acc[n][i] *= p.softmax_scale;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float block_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n)
        block_max = fmaxf(block_max, fmaxf(s_acc[n][2 * r], s_acc[n][2 * r + 1]));
      // The 4 lanes of a quad (lane/4 equal) hold the same row.
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 1));
      block_max = fmaxf(block_max, __shfl_xor_sync(0xffffffffu, block_max, 2));
      const float new_max = fmaxf(row_max[r], block_max);
      // While every score so far is -inf (keys masked by infinite inputs) subtract 0, not the max:
      // -inf - (-inf) is NaN, but exp(-inf - 0) is the 0 weight the reference gives those keys.
      const float max_for_exp = new_max == -INFINITY ? 0.0f : new_max;
      const float correction = expf(row_max[r] - max_for_exp);  // 0 on the first block (max was -inf)
      row_max[r] = new_max;
      float block_sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeyTiles; ++n) {
        s_acc[n][2 * r] = expf(s_acc[n][2 * r] - max_for_exp);
        s_acc[n][2 * r + 1] = expf(s_acc[n][2 * r + 1] - max_for_exp);
        block_sum += s_acc[n][2 * r] + s_acc[n][2 * r + 1];
      }
      block_sum += __shfl_xor_sync(0xffffffffu, block_sum, 1);
      block_sum += __shfl_xor_sync(0xffffffffu, block_sum, 2);
      row_sum[r] = row_sum[r] * correction + block_sum;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        o_acc[d][2 * r] *= correction;
        o_acc[d][2 * r + 1] *= correction;
      }
    }

    cp_async_wait<1>();  // this block's V has landed; the next K may still be in flight
    __syncthreads();     // ... for every thread's copies

    // ============================ O += P V ==============================
    // P never leaves registers: the accumulator layout of S (n-tiles 2kk and 2kk+1) is exactly
    // the A-fragment layout of P for k-step kk, after packing pairs of floats to 16 bits.
    uint32_t v_frag[kKeySteps][kDimTiles][2];
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) load_v_fragments<T, kHeadDim>(v_frag[kk], smem.v, kk, lane);
#pragma unroll
    for (int kk = 0; kk < kKeySteps; ++kk) {
      uint32_t p_frag[4];
      p_frag[0] = pack2<T>(s_acc[2 * kk][0], s_acc[2 * kk][1]);
      p_frag[1] = pack2<T>(s_acc[2 * kk][2], s_acc[2 * kk][3]);
      p_frag[2] = pack2<T>(s_acc[2 * kk + 1][0], s_acc[2 * kk + 1][1]);
      p_frag[3] = pack2<T>(s_acc[2 * kk + 1][2], s_acc[2 * kk + 1][3]);
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) mma_m16n8k16<T>(o_acc[d], p_frag, v_frag[kk][d]);
    }
    cp_async_wait<0>();  // the next K block has landed
    __syncthreads();     // ... for every thread, and every warp is done with V before it is overwritten
  }

  // =============================== epilogue ===============================
  // Normalize, convert to 16 bits, stage the tile in shared memory (over Q, which every warp has
  // finished reading) and write it out in coalesced 16-byte chunks.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv_sum = 1.0f / row_sum[r];
    const int row = warp_row0 + lane / 4 + 8 * r;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      const int col = d * 8 + 2 * (lane % 4);
      *reinterpret_cast<uint32_t*>(smem.q + tile_offset(row, col, kHeadDim)) =
          pack2<T>(o_acc[d][2 * r] * inv_sum, o_acc[d][2 * r + 1] * inv_sum);
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
