// hopper_02_tma_ring: TMA and an mbarrier ring for K and V.
//
// The parent copied every tile with cp.async: each of the 256 threads computed addresses and issued
// 16-byte copies (8 per thread and K or V tile at head_dim 128), then the block met at
// __syncthreads three times per K/V block to learn that the copies had landed and that a buffer was
// free. Here the copy engine does it (tma.cuh):
//   * one thread issues a tile as one or two cp.async.bulk.tensor boxes (64 columns x all rows, a
//     128-byte-swizzled panel each) from a tensor map encoded on the host (common/tensor_map.h,
//     geometry in hopper_encoding.h section 7); the copy engine writes the exact layout wgmma's
//     descriptors read, and counts the delivered bytes against an mbarrier;
//   * K and V live in a ring of kStages slots. A slot has three barriers: "K full" and "V full"
//     (the copy's bytes have arrived) and "empty" (every warp has finished reading it). Consumers
//     wait on full, compute, arrive on empty; thread 0 waits on empty and refills the slot with the
//     block kStages ahead. So the next block's K and V are in flight during the whole of this one,
//     not just during its second half, and no __syncthreads is left in the loop;
//   * phases are tracked with one parity bit: the n-th use of a slot waits for parity n % 2.
// What does not change: the wgmmas, the softmax, O staged through shared memory. Thread 0 is also
// a consumer: while it waits for the other warpgroup to free a slot, its own warpgroup waits too.
// Giving the copies a warp of their own is the next stage.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "common/fragment_layout.h"
#include "common/hopper_encoding.h"
#include "common/params.h"
#include "common/ptx.cuh"
#include "common/softmax_math.h"
#include "common/tensor_map.h"
#include "smem_layout.h"
#include "stage_declaration.h"
#include "tma.cuh"
#include "wgmma.cuh"

namespace FA_STAGE_NAMESPACE {

using namespace fa;

// ================================ config ================================
constexpr int kBlockQ = 128;   // Br: query rows per thread block
constexpr int kBlockKV = 128;  // Bc: key/value rows per iteration (the n of S = Q K^T's wgmma)
constexpr int kStages = 2;     // K/V ring slots: block j + 1 loads while block j is computed
constexpr int kWarpgroups = kBlockQ / kWgmmaM;  // each owns 64 query rows: one wgmma m
constexpr int kWarps = kWarpgroups * kWarpgroupThreads / 32;
constexpr int kThreads = kWarps * 32;
static_assert(kWarpgroups == 2, "two warpgroups of 64 rows");
static_assert(kBlockKV % kWgmmaK == 0, "P V consumes keys 16 at a time");
// Within its warpgroup's 64 rows, warp w holds rows 16w .. 16w+15 of every accumulator, and a
// thread two of them: row lane/4 (entries 0, 1 of each n8 block) and row lane/4 + 8 (entries 2, 3);
// see wgmma_acc_row in hopper_encoding.h.
constexpr int kRowsPerThread = 2;

// Everything else follows from the element type and the head dimension.
template <typename T, int kHeadDim_>
struct Config {
  using Elem = T;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kElemsPer16B = 16 / sizeof(T);  // one 16-byte copy
  static constexpr int kChunksPerRow = kHeadDim / kElemsPer16B;
  static constexpr int kPanels = kHeadDim / kTmaBoxCols;  // TMA boxes per tile: one 64-column panel each
  static constexpr int kDimSteps = kHeadDim / kWgmmaK;  // k-steps of S = Q K^T
  static constexpr int kKeySteps = kBlockKV / kWgmmaK;  // k-steps of O += P V
  static constexpr int kKeyTiles = kBlockKV / kMmaN;    // n8 blocks of S
  static constexpr int kDimTiles = kHeadDim / kMmaN;    // n8 blocks of O
  // Blocks an SM must hold at once (__launch_bounds__). At head_dim 64 the shared tiles fit twice,
  // and so do the registers if a thread keeps to 128 (65,536 / (2 x 256)): ptxas is held to that,
  // since one register more halves the blocks per SM. At 128 the accumulators alone need more than
  // 128: 0 asks for no minimum, and one block fits.
  static constexpr int kMinBlocksPerSM = kHeadDim == 64 ? 2 : 0;
  static_assert(sizeof(T) == 2, "the descriptors are written for 16-bit elements");
};

// ========================= shared-memory layout =========================
// [ Q tile | K slot 0 .. kStages-1 | V slot 0 .. kStages-1 | barriers ], each tile in wgmma's
// 128B-swizzle layout (smem_layout.h: operand_offset), 64-column panels of rows x 128 bytes, which is
// also what a TMA box with the 128-byte swizzle writes; the O tile reuses Q's space (tile_offset).
// The swizzle repeats every 1024 bytes from a 1024-byte boundary (the descriptors' base offset is 0,
// and TMA requires it), so the tiles start on one: every tile and panel is a multiple of 1024
// bytes, and the base is aligned up at run time (kAlignSlack). The mbarriers (8 bytes each) follow.
template <typename Cfg>
struct SharedTiles {
  using T = typename Cfg::Elem;
  static constexpr int kQElems = kBlockQ * Cfg::kHeadDim;
  static constexpr int kKVElems = kBlockKV * Cfg::kHeadDim;
  static constexpr uint32_t kQPanelBytes = kBlockQ * kSwizzle128RowBytes;  // one 64-column panel
  static constexpr uint32_t kKVPanelBytes = kBlockKV * kSwizzle128RowBytes;
  static constexpr uint32_t kQBytes = kQElems * sizeof(T);  // what the Q barrier expects
  static constexpr uint32_t kKVBytes = kKVElems * sizeof(T);
  static constexpr int kBarriers = 1 + 3 * kStages;  // Q full; K full, V full, empty per slot
  static constexpr int kAlignSlack = kSwizzle128AtomBytes;
  static constexpr size_t kBytes = kQBytes + 2 * kStages * kKVBytes + kBarriers * sizeof(uint64_t) + kAlignSlack;
  static_assert(kQBytes % kSwizzle128AtomBytes == 0 && kKVBytes % kSwizzle128AtomBytes == 0,
                "every tile starts on a swizzle atom");
  static_assert(kQBytes == Cfg::kPanels * kQPanelBytes && kKVBytes == Cfg::kPanels * kKVPanelBytes,
                "a tile is exactly its TMA boxes: the expect_tx byte counts are the tiles' sizes");
  // Slots are picked at run time (kv_block % kStages): computed from one base, not kept in arrays,
  // which a run-time index would move to local memory.
  T* q;
  uint64_t* q_full;
  uint64_t* k_full;  // [kStages]
  uint64_t* v_full;  // [kStages]
  uint64_t* empty;   // [kStages]
  __device__ explicit SharedTiles(unsigned char* raw) {
    const uint32_t raw_address = smem_u32(raw);
    const uint32_t aligned = (raw_address + kAlignSlack - 1) & ~static_cast<uint32_t>(kAlignSlack - 1);
    q = reinterpret_cast<T*>(raw + (aligned - raw_address));
    q_full = reinterpret_cast<uint64_t*>(q + kQElems + 2 * kStages * kKVElems);
    k_full = q_full + 1;
    v_full = k_full + kStages;
    empty = v_full + kStages;
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

// ============================== S = Q K^T ===============================
// One m64n128k16 per 16 head dims, all in one commit group; the first overwrites (scale-d = 0),
// so S needs no clearing. Waited for at once: the softmax needs all of S.
template <typename Cfg>
__device__ __forceinline__ void compute_scores(float (&s_acc)[Cfg::kKeyTiles][4], uint32_t q_rows_address,
                                               uint32_t k_address) {
  wgmma_fence();  // S's registers: the previous block's P V read P packed from them
#pragma unroll
  for (int kk = 0; kk < Cfg::kDimSteps; ++kk)
    Wgmma<typename Cfg::Elem, kBlockKV>::ss(s_acc, q_descriptor<Cfg>(q_rows_address, kk),
                                            k_descriptor<Cfg>(k_address, kk), /*scale_d=*/kk > 0);
  wgmma_commit_group();
  wgmma_wait_group<0>();
  pin_registers(s_acc);  // nothing reads S before the wait
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
__device__ __forceinline__ void online_softmax_update(float (&s_acc)[Cfg::kKeyTiles][4],
                                                      float (&o_acc)[Cfg::kDimTiles][4], RowState& state,
                                                      float scale_log2) {
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const float new_max = fmaxf(state.max[r], block_row_max<Cfg>(s_acc, r));
    const float max_scaled = max_for_exp(new_max) * scale_log2;                 // the -inf guard (softmax_math.h)
    const float correction = exp2_approx(state.max[r] * scale_log2 - max_scaled);  // 0 on the first block
    state.max[r] = new_max;
    float block_sum = 0.0f;
#pragma unroll
    for (int n = 0; n < Cfg::kKeyTiles; ++n) {
      s_acc[n][2 * r] = exp2_approx(fmaf(s_acc[n][2 * r], scale_log2, -max_scaled));
      s_acc[n][2 * r + 1] = exp2_approx(fmaf(s_acc[n][2 * r + 1], scale_log2, -max_scaled));
      block_sum += s_acc[n][2 * r] + s_acc[n][2 * r + 1];
    }
    state.sum[r] = state.sum[r] * correction + block_sum;
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d) {
      o_acc[d][2 * r] *= correction;
      o_acc[d][2 * r + 1] *= correction;
    }
  }
}

// =============================== O += P V ===============================
// P never leaves registers: the S accumulators of n8 blocks 2kk and 2kk+1 are exactly wgmma's
// register A fragment of P for k-step kk, after packing pairs of floats to 16 bits
// (fragment_layout.h: p_frag_s_*; hopper_encoding.h, section 6).
template <typename Cfg>
__device__ __forceinline__ void p_fragment(uint32_t (&p_frag)[4], const float (&s_acc)[Cfg::kKeyTiles][4], int kk) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float* pair = &s_acc[p_frag_s_tile(kk, j)][p_frag_s_entry(j)];
    p_frag[j] = pack2<typename Cfg::Elem>(pair[0], pair[1]);
  }
}

// One m64nDk16 per 16 keys, all in one commit group, waited for at once (the next block's softmax
// rescales O). The fence orders the softmax's writes of O and P before the wgmmas read them.
template <typename Cfg>
__device__ __forceinline__ void accumulate_pv(float (&o_acc)[Cfg::kDimTiles][4],
                                              const float (&s_acc)[Cfg::kKeyTiles][4], uint32_t v_address) {
  uint32_t p_frag[Cfg::kKeySteps][4];
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk) p_fragment<Cfg>(p_frag[kk], s_acc, kk);
  pin_registers(o_acc);  // the rescale and the packing happen before the fence
  pin_registers(p_frag);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk)
    Wgmma<typename Cfg::Elem, Cfg::kHeadDim>::rs(o_acc, p_frag[kk], v_descriptor<Cfg>(v_address, kk));
  wgmma_commit_group();
  wgmma_wait_group<0>();
  pin_registers(o_acc);  // nothing reads O before the wait
}

// ========================= normalize and write O ========================
// Divide by the row sums, convert to 16 bits, stage the tile in shared memory (over Q, which every
// warpgroup's wgmmas have finished reading) and write it out in coalesced 16-byte chunks.
template <typename Cfg>
__device__ __forceinline__ void normalize_and_write_o(float (&o_acc)[Cfg::kDimTiles][4], RowState& state,
                                                      typename Cfg::Elem* o_smem, typename Cfg::Elem* o_gmem,
                                                      int64_t row_stride, int warpgroup_row0, int thread_in_warpgroup) {
  using T = typename Cfg::Elem;
#pragma unroll
  for (int r = 0; r < kRowsPerThread; ++r) {
    const float inv_sum = 1.0f / quad_allreduce_sum(state.sum[r]);
    const int row = warpgroup_row0 + wgmma_acc_row(thread_in_warpgroup, 2 * r);
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d) {
      const int col = wgmma_acc_col(thread_in_warpgroup, 4 * d + 2 * r);
      *reinterpret_cast<uint32_t*>(o_smem + tile_offset(row, col, Cfg::kHeadDim)) =
          pack2<T>(o_acc[d][2 * r] * inv_sum, o_acc[d][2 * r + 1] * inv_sum);
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

// ============================ the tile scheduler ============================
// Which tile this block computes: one thread block per (batch, head, query block), query blocks
// fastest so that the blocks running at the same time share one head's K and V in L2.
struct TileCoordinates {
  int q_block, head, batch;
};
struct TileScheduler {
  TileCoordinates block_tile;  // the block's one tile
  __device__ static TileScheduler of(const AttentionParams& p) {
    const int64_t num_q_blocks = p.seq_q / kBlockQ;
    const int q_block = static_cast<int>(blockIdx.x % num_q_blocks);
    const int64_t batch_head = blockIdx.x / num_q_blocks;
    const int batch = static_cast<int>(batch_head / p.heads);
    const int head = static_cast<int>(batch_head % p.heads);
    return {{q_block, head, batch}};
  }
};

// The K/V blocks a tile visits: all of them. < 2^31: K alone would need 2^44 bytes.
struct TileWork {
  int kv_blocks;
};
__device__ __forceinline__ TileWork tile_work(const AttentionParams& p) {
  return {static_cast<int>(p.seq_kv / kBlockKV)};
}

// Where a K/V block sits in the ring: its slot, and the parity of the slot's use (fills before it, mod 2).
__device__ __forceinline__ int slot_of(int kv_block) { return kv_block % kStages; }
__device__ __forceinline__ uint32_t parity_of(int kv_block) { return (kv_block / kStages) % 2; }

// ================== the consumer's tile and its K/V step ==================
// A warpgroup (0 or 1): its 64 rows of the block's tile. What it keeps throughout is here; the
// tile's accumulators and row state are the tile's (TileRegisters). Every warpgroup computes, and
// thread 0 is also the loader.
template <typename Cfg>
struct TileRegisters {
  float o_acc[Cfg::kDimTiles][4];
  RowState state;
};

template <typename Cfg>
struct Consumer {
  using T = typename Cfg::Elem;
  const AttentionParams& p;
  const TensorMaps& maps;
  const SharedTiles<Cfg>& smem;
  int consumer_warpgroup;  // 0 or 1
  int thread_in_warpgroup;
  int warpgroup_row0;
  // The warpgroup's 64 rows of Q start 64 rows into each panel (operand_offset's row stride is 128 B).
  uint32_t q_rows_address;
  float scale_log2;  // softmax_scale * log2(e)
  bool is_loader;    // the one thread that issues the copies

  __device__ Consumer(const AttentionParams& p_, const TensorMaps& maps_, const SharedTiles<Cfg>& smem_, int warpgroup)
      : p(p_), maps(maps_), smem(smem_), consumer_warpgroup(warpgroup), thread_in_warpgroup(threadIdx.x % kWarpgroupThreads) {
    warpgroup_row0 = consumer_warpgroup * kWgmmaM;
    q_rows_address = smem_u32(smem.q) + warpgroup_row0 * kSwizzle128RowBytes;
    scale_log2 = p.softmax_scale * 1.44269504088896340736f;
    is_loader = threadIdx.x == 0;
  }

  // One K/V step: S = Q K^T, the softmax, O += P V.
  __device__ void kv_step(TileRegisters<Cfg>& t, const TileWork& work, int kv_block) {
    const int slot = slot_of(kv_block);
    const uint32_t parity = parity_of(kv_block);

    mbarrier_wait(smem_u32(&smem.k_full[slot]), parity);
    float s_acc[Cfg::kKeyTiles][4];  // not cleared: the first wgmma of compute_scores overwrites it
    compute_scores<Cfg>(s_acc, q_rows_address, smem_u32(smem.k(slot)));

    online_softmax_update<Cfg>(s_acc, t.o_acc, t.state, scale_log2);

    mbarrier_wait(smem_u32(&smem.v_full[slot]), parity);  // has landed during Q K^T and the softmax
    accumulate_pv<Cfg>(t.o_acc, s_acc, smem_u32(smem.v(slot)));

    // This warp's wgmmas have finished reading the slot (accumulate_pv waited for them).
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbarrier_arrive(smem_u32(&smem.empty[slot]));
  }

  // Where the tile's rows of O go.
  struct TileOutput {
    T* o_gmem;
  };
  __device__ TileOutput output_of(const TileCoordinates& at) const {
    T* o_gmem = static_cast<T*>(p.o.data) + at.batch * p.o.batch_stride + at.head * p.o.head_stride +
                static_cast<int64_t>(at.q_block) * kBlockQ * p.o.seq_stride;
    return {o_gmem};
  }

  // The epilogue: O normalized and written.
  __device__ void epilogue(TileRegisters<Cfg>& t, const TileOutput& out) {
    __syncthreads();  // every warpgroup's wgmmas are done with Q before O is staged over it
    normalize_and_write_o<Cfg>(t.o_acc, t.state, smem.q, out.o_gmem, p.o.seq_stride, warpgroup_row0,
                               thread_in_warpgroup);
  }

  // One tile: the K/V steps, each followed by the loader's refill of its slot, the epilogue.
  __device__ void tile(TileRegisters<Cfg>& t, const TileCoordinates& at) {
    const TileWork work = tile_work(p);
    const TileOutput out = output_of(at);
    // Q stays in shared memory for the whole loop; the ring starts full.
    if (is_loader) {
      load_tile<Cfg, kBlockQ>(smem.q, &maps.q, smem.q_full, at.q_block * kBlockQ, at.head, at.batch);
      for (int s = 0; s < kStages && s < work.kv_blocks; ++s) {
        load_tile<Cfg, kBlockKV>(smem.k(s), &maps.k, &smem.k_full[s], s * kBlockKV, at.head, at.batch);
        load_tile<Cfg, kBlockKV>(smem.v(s), &maps.v, &smem.v_full[s], s * kBlockKV, at.head, at.batch);
      }
    }
#pragma unroll
    for (int d = 0; d < Cfg::kDimTiles; ++d)
#pragma unroll
      for (int e = 0; e < 4; ++e) t.o_acc[d][e] = 0.0f;
    init_row_state(t.state);
    mbarrier_wait(smem_u32(smem.q_full), 0);
    for (int kv_block = 0; kv_block < work.kv_blocks; ++kv_block) {
      kv_step(t, work, kv_block);
      // Refill the slot with the block kStages ahead, once every warp is done with it.
      if (is_loader && kv_block + kStages < work.kv_blocks) {
        const int slot = slot_of(kv_block);
        mbarrier_wait(smem_u32(&smem.empty[slot]), parity_of(kv_block));
        load_tile<Cfg, kBlockKV>(smem.k(slot), &maps.k, &smem.k_full[slot], (kv_block + kStages) * kBlockKV, at.head,
                                 at.batch);
        load_tile<Cfg, kBlockKV>(smem.v(slot), &maps.v, &smem.v_full[slot], (kv_block + kStages) * kBlockKV, at.head,
                                 at.batch);
      }
    }
    epilogue(t, out);
  }

  __device__ void loop(const TileScheduler& tiles) {
    // The tile registers: one set for all the tiles, which each set them up afresh. Declared per tile,
    // the first S of a tile would be new registers to ptxas, and some kernels spill more.
    TileRegisters<Cfg> t;
    tile(t, tiles.block_tile);
  }
};

// ================================ kernel ================================
// Every warpgroup computes its rows of the tile the scheduler gives this block; thread 0 also loads.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads, Config<T, kHeadDim>::kMinBlocksPerSM)
    attention_kernel(const AttentionParams p, const __grid_constant__ TensorMaps maps) {
  using Cfg = Config<T, kHeadDim>;
  const TileScheduler tiles = TileScheduler::of(p);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  SharedTiles<Cfg> smem(smem_raw);

  // Barriers: a full barrier completes when its one arrival (the loader's expect_tx) and all the
  // bytes have come; an empty barrier when every warp has arrived.
  if (threadIdx.x == 0) {
    prefetch_tensor_map(&maps.q);
    prefetch_tensor_map(&maps.k);
    prefetch_tensor_map(&maps.v);
    mbarrier_init(smem_u32(smem.q_full), 1);
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(smem_u32(&smem.k_full[s]), 1);
      mbarrier_init(smem_u32(&smem.v_full[s]), 1);
      mbarrier_init(smem_u32(&smem.empty[s]), kWarps);
    }
    fence_mbarrier_init();
  }
  __syncthreads();  // the barriers exist before anyone waits on them

  const int warpgroup = threadIdx.x / kWarpgroupThreads;
  Consumer<Cfg>(p, maps, smem, warpgroup).loop(tiles);
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
  // The tensor maps describe this call's tensors (address, shape, strides): encoded per launch.
  TensorMaps maps;
  const struct {
    CUtensorMap* map;
    const TensorView& view;
    int64_t seq;
    int box_rows;
    const char* what;
  } operands[] = {{&maps.q, params.q, params.seq_q, kBlockQ, "Q"},
                  {&maps.k, params.k, params.seq_kv, kBlockKV, "K"},
                  {&maps.v, params.v, params.seq_kv, kBlockKV, "V"}};
  for (const auto& operand : operands) {
    const Status encoded = encode_attention_tensor_map(operand.map, operand.view, params.batch, operand.seq,
                                                       params.heads, kHeadDim, operand.box_rows, operand.what,
                                                       info.name);
    if (!encoded.ok()) return encoded;
  }
  const int64_t blocks = (params.seq_q / kBlockQ) * params.heads * params.batch;
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem_bytes, stream>>>(params, maps);
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
