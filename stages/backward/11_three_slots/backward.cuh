// backward_11_three_slots' backward pass: dQ, dK, dV of O = softmax(scale * Q K^T) V
// (common/backward.h), FlashAttention-2's algorithm with its five matrix products on wgmma (sm_90a),
// each waited for only where its result is read, 128 keys per thread block (two warpgroups of 64),
// the query block after next's Q, dO, LSE and D loaded while this one is computed, for any seq_q and seq_kv, with or without causal masking, with
// grouped-query attention, and on request deterministic. Included at the end of kernel.cu, inside the
// stage's namespace: it reuses smem_layout.h's wgmma operand layout and the PTX wrappers (wgmma.cuh),
// and adds three kernels:
//
//   dot_do_o_kernel   D[i] = sum_d dO[i, d] * O[i, d], one fp32 per query row (the preprocessing)
//   backward_kernel   one thread block per (K/V block, batch * key/value head), looping over the query
//                     blocks of every query head of its group:
//                     S^T = K Q^T, P^T = exp(scale S^T - lse) from the forward's LSE, dV += P^T dO,
//                     dP^T = V dO^T, dS^T = P^T * (dP^T - D), dK += dS^T Q, and dQ += dS K added to an
//                     fp32 workspace by bulk reductions from shared memory (other thread blocks add to
//                     the same rows; in the deterministic mode one after another, in the order of
//                     their keys)
//   convert_dq_kernel dQ = scale * the workspace (kept in the reductions' order), rounded to the input
//                     dtype
//
// Everything a warpgroup computes is transposed against the forward: a warpgroup owns 64 keys (the
// rows of its dK and dV accumulators; warp w of it keys 16w .. 16w+15, mma.sync's layout per warp),
// so S and dP are computed as S^T and dP^T with the keys as wgmma's M, and P^T and dS^T come out of
// the accumulators in exactly the register A-operand layout that dV and dK need (the forward's
// P-in-registers trick, hopper_encoding.h section 6). The operands in shared memory are read by the
// tensor cores through matrix descriptors, with no ldmatrix: K, V, Q and dO K-major for S^T and
// dP^T, dO and Q N-major for dV and dK, and for dQ = dS K the stored dS^T M-major and K N-major.
//
// Supported: fp16 and bf16, head_dim 64 and 128, any seq_q and seq_kv >= 1 (the last query block and
// the last K/V block may overhang the sequences' ends: see backward_kernel), causal or not
// (bottom-right aligned, as the forward), any kv_heads dividing heads, deterministic or not;
// validate_backward_params rejects everything else before anything launches.

namespace bwd {

// ================================ config ================================
constexpr int kBlockKV = 128;  // Bc: keys per thread block (the rows of its dK and dV)
constexpr int kBlockQ = 64;    // Br: query rows per iteration (the N of S^T and dP^T, the M of dQ)
constexpr int kWarpgroups = kBlockKV / kWgmmaM;  // each owns 64 keys: one wgmma M
constexpr int kWarps = kWarpgroups * kWarpgroupThreads / 32;
constexpr int kThreads = kWarps * 32;
constexpr int kKeysPerWarp = kMmaM;  // within its warpgroup's accumulators, warp w holds rows 16w..16w+15
static_assert(kWarpgroups == 2, "two warpgroups of 64 keys");
static_assert(kBlockQ == kWgmmaM, "dQ = dS K: one wgmma M of query rows per query block");
// dQ (Br x D) is split across the warpgroups by head-dim half: warpgroup g computes every query row
// and the columns g * D / 2 .. (g + 1) * D / 2 - 1.
constexpr int kDqDimSplit = kWarpgroups;
static_assert(kThreads >= 2 * kBlockQ, "one thread per LSE and per D value of a query block");
constexpr float kLog2e = 1.44269504088896340736f;

template <typename T, int kHeadDim_>
struct Config {
  using Elem = T;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kElemsPer16B = 16 / sizeof(T);  // one 16-byte copy, one ldmatrix row
  static constexpr int kChunksPerRow = kHeadDim / kElemsPer16B;
  static constexpr int kDimSteps = kHeadDim / kWgmmaK;   // k-steps of S^T = K Q^T and dP^T = V dO^T
  static constexpr int kDimTiles = kHeadDim / kMmaN;     // n8 blocks of dK, dV
  static constexpr int kQuerySteps = kBlockQ / kWgmmaK;  // k-steps of dV += P^T dO and dK += dS^T Q
  static constexpr int kQueryTiles = kBlockQ / kMmaN;    // n8 blocks of S^T and dP^T
  static constexpr int kKeySteps = kBlockKV / kWgmmaK;   // k-steps of dQ = dS K
  // A warpgroup's share of dQ: all Br rows times D / 2 columns (the N of its wgmma: 64 or 32), 32 or
  // 16 floats a thread, beside dK's and dV's 64 or 32 each.
  static constexpr int kDqDims = kHeadDim / kDqDimSplit;
  static constexpr int kDqDimTiles = kDqDims / kMmaN;
  // A warp's share: its 16 query rows of its warpgroup's D / 2 columns, one float4 per n8 block and
  // lane. The unit of dQ's bulk reduction (4 KB at head_dim 128, 2 KB at 64).
  static constexpr int kWarpDqFloats = kMmaM * kDqDims;
  static_assert(kWarpDqFloats == kDqDimTiles * 32 * 4, "a warp's dQ share is its lanes' accumulators");
  static_assert(sizeof(T) == 2, "the descriptors are written for 16-bit elements");
};

// ========================= shared-memory layout =========================
// [ K: Bc x D | V: Bc x D | 3 x (Q: Br x D | dO: Br x D) | dS^T: Bc x Br | dQ: Br x D fp32 |
//   3 x (lse * log2(e): Br | D: Br) ]
// K and V stay for the whole kernel; Q, dO, the LSE and D of a query block live in one of three slots
// (iteration % 3), and the block two after it is loaded into the third; dS^T is written by every warp and
// read by both warpgroups (dQ's rows are queries, split across them differently from the keys).
// Every 16-bit tile is in wgmma's 128B-swizzle layout (smem_layout.h: operand_offset), 64-column
// panels of rows x 128 bytes; dS^T's 64 query columns are one panel. The swizzle repeats every 1024
// bytes from a 1024-byte boundary (the descriptors' base offset is 0), so every tile starts on one:
// each is a multiple of 1024 bytes, and the base is aligned up at run time (kAlignSlack). dQ's fp32
// tile is the dQ accumulators on their way to global memory, each warp's share contiguous, in the
// workspace's order (see accumulate_dq).
constexpr int kSlots = 3;  // this block, the next, and the one after it in flight
template <typename Cfg>
struct SharedTiles {
  using T = typename Cfg::Elem;
  static constexpr int kKvElems = kBlockKV * Cfg::kHeadDim;
  static constexpr int kQElems = kBlockQ * Cfg::kHeadDim;
  static constexpr int kDsElems = kBlockKV * kBlockQ;
  static constexpr int kDqFloats = kBlockQ * Cfg::kHeadDim;
  static constexpr uint32_t kKvPanelBytes = kBlockKV * kSwizzle128RowBytes;  // one 64-column panel
  static constexpr uint32_t kQPanelBytes = kBlockQ * kSwizzle128RowBytes;
  static constexpr uint32_t kDsPanelBytes = kBlockKV * kSwizzle128RowBytes;  // the whole dS^T tile
  static constexpr int kAlignSlack = kSwizzle128AtomBytes;
  static constexpr size_t kBytes = (2 * kKvElems + kSlots * 2 * kQElems + kDsElems) * sizeof(T) +
                                   (kDqFloats + kSlots * 2 * kBlockQ) * sizeof(float) + kAlignSlack;
  static_assert((kQElems * sizeof(T)) % kSwizzle128AtomBytes == 0 && (kKvElems * sizeof(T)) % kSwizzle128AtomBytes == 0 &&
                    (kDsElems * sizeof(T)) % kSwizzle128AtomBytes == 0,
                "every tile starts on a swizzle atom");
  T* k;
  T* v;
  T* slots;  // slot s: Q at slots + s * 2 * kQElems, dO right after it
  T* ds;
  float* dq;     // 16-byte aligned: it follows 1024-byte multiples
  float* stats;  // slot s: lse * log2(e) at stats + s * 2 * kBlockQ, D right after it
  __device__ explicit SharedTiles(unsigned char* raw) {
    const uint32_t raw_address = smem_u32(raw);
    const uint32_t aligned = (raw_address + kAlignSlack - 1) & ~static_cast<uint32_t>(kAlignSlack - 1);
    k = reinterpret_cast<T*>(raw + (aligned - raw_address));
    v = k + kKvElems;
    slots = v + kKvElems;
    ds = slots + kSlots * 2 * kQElems;
    dq = reinterpret_cast<float*>(ds + kDsElems);
    stats = dq + kDqFloats;
  }
  // Computed, not arrays of pointers: an array indexed by the loop's slot would live in local memory.
  __device__ T* q(int slot) const { return slots + slot * 2 * kQElems; }
  __device__ T* d_o(int slot) const { return q(slot) + kQElems; }
  __device__ float* lse_log2(int slot) const { return stats + slot * 2 * kBlockQ; }
  __device__ float* d_row(int slot) const { return lse_log2(slot) + kBlockQ; }
};

// ============================== load tiles ==============================
// Global -> shared: the forward's copy_tile_to_smem with the backward's thread count (the forward
// has 4 warps, this kernel 8), each chunk landing where wgmma's swizzle expects it. A tile of kRows x
// D elements moves in 16-byte chunks, consecutive threads taking consecutive chunks of a row; each
// step moves whole rows, a multiple of the swizzle period, so a thread's chunk keeps its panel and
// swizzled column and its shared address advances by a constant. Rows at or past `rows` (past the
// sequence's end) are filled with zeros, from a valid source address (the tile's first row).
template <typename Cfg, int kRows>
__device__ __forceinline__ void copy_rows_to_smem(typename Cfg::Elem* tile_smem, const typename Cfg::Elem* tile_gmem,
                                                  int64_t row_stride, int rows) {
  using T = typename Cfg::Elem;
  constexpr int kRowsPerStep = kThreads / Cfg::kChunksPerRow;
  static_assert(kThreads % Cfg::kChunksPerRow == 0 && kRowsPerStep % 8 == 0 && kRows % kRowsPerStep == 0,
                "every step copies whole rows, a multiple of the swizzle period");
  const int row = threadIdx.x / Cfg::kChunksPerRow;
  const int col = (threadIdx.x % Cfg::kChunksPerRow) * Cfg::kElemsPer16B;
  const uint32_t dst = smem_u32(tile_smem + operand_offset(row, col, kRows));
  const T* src = tile_gmem + row * row_stride + col;
#pragma unroll
  for (int step = 0; step < kRows / kRowsPerStep; ++step) {
    const bool row_exists = row + step * kRowsPerStep < rows;
    cp_async_16_zfill(dst + step * kRowsPerStep * kSwizzle128RowBytes, row_exists ? src : tile_gmem, row_exists);
    src += kRowsPerStep * row_stride;
  }
}

// Shared -> tensor cores: no loads into registers. A wgmma reads its shared operands through a
// 64-bit matrix descriptor (hopper_encoding.h): start address, the byte offsets between 8-row
// groups and between 64-column panels, the swizzle mode. `tile_address` is a tile's shared address
// (for K and V: at the warpgroup's first key row, in the first panel), `panel_bytes` the distance
// between its panels.
//   K-major (K and V as A, Q and dO as B of S^T and dP^T): head dims [16 kk, 16 kk + 16) of each row;
//   MN-major (dO and Q as B of dV and dK, dS^T as A and K as B of dQ): rows [16 kk, 16 kk + 16),
//     every column.
__device__ __forceinline__ uint64_t k_major(uint32_t tile_address, uint32_t panel_bytes, int kk) {
  return wgmma_descriptor_k_major_sw128_panels(tile_address, panel_bytes, kk);
}
__device__ __forceinline__ uint64_t mn_major(uint32_t tile_address, uint32_t panel_bytes, int kk) {
  return wgmma_descriptor_mn_major_sw128(tile_address, panel_bytes, kk);
}

// A query block's LSE (as lse * log2(e), for exp2) and D, one value per thread of the first 2 Br, in
// two halves: the load into a register, issued a whole query block ahead of its use so that its
// latency hides behind that block's products, and the store into the block's slot. A row that saw
// no key in the forward has lse = -inf; +inf here makes its P exactly 0 (exp2(s - inf)), not NaN.
// Rows at or past `rows` (past seq_q) are not read: they get +inf too, so their P is 0, and D = 0.
__device__ __forceinline__ float load_row_stat(const float* lse_gmem, const float* d_rows_gmem, int rows) {
  const int t = threadIdx.x;
  if (t < kBlockQ) {
    const float lse = t < rows ? lse_gmem[t] : -INFINITY;
    return lse == -INFINITY ? INFINITY : lse * kLog2e;
  }
  return t < 2 * kBlockQ && t - kBlockQ < rows ? d_rows_gmem[t - kBlockQ] : 0.0f;
}
__device__ __forceinline__ void store_row_stat(float* lse_log2_smem, float* d_row_smem, float stat) {
  const int t = threadIdx.x;
  if (t < kBlockQ)
    lse_log2_smem[t] = stat;
  else if (t < 2 * kBlockQ)
    d_row_smem[t - kBlockQ] = stat;
}

// ======================== S^T = K Q^T, dP^T = V dO^T ========================
// acc (64 keys x Br queries) = A B^T with A the warpgroup's 64 rows of K (or V) and B the Br rows of
// Q (or dO), both K-major: the forward's S = Q K^T with the roles of the two tiles swapped. One
// m64n64k16 per 16 head dims, the first overwriting the accumulators (scale-d 0), as one commit
// group. Only issued: the caller waits for it where it needs the result (the main loop).
template <typename Cfg>
__device__ __forceinline__ void issue_transposed(float (&acc)[Cfg::kQueryTiles][4], uint32_t a_rows_address,
                                                 uint32_t b_address) {
  using Smem = SharedTiles<Cfg>;
#pragma unroll
  for (int kk = 0; kk < Cfg::kDimSteps; ++kk)
    Wgmma<typename Cfg::Elem, kBlockQ>::ss(acc, k_major(a_rows_address, Smem::kKvPanelBytes, kk),
                                           k_major(b_address, Smem::kQPanelBytes, kk), /*scale_d=*/kk > 0);
  wgmma_commit_group();
}

// ========================= P^T from the saved LSE ========================
// P[i, j] = exp(scale * s_ij - lse_i) = exp2(s_ij * scale * log2(e) - lse_i * log2(e)): the forward's
// normalized probabilities, recomputed from the raw scores with one FFMA and one MUFU.EX2 each. No
// row max and no row sum: the LSE already holds both. Entry i of n-tile n is query column
// n * 8 + mma_c_col(lane, i) (the warp's rows are keys).
template <typename Cfg>
__device__ __forceinline__ void recompute_probabilities(float (&s_acc)[Cfg::kQueryTiles][4], const float* lse_log2_smem,
                                                        float scale_log2, int lane) {
#pragma unroll
  for (int n = 0; n < Cfg::kQueryTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      s_acc[n][i] = exp2_approx(fmaf(s_acc[n][i], scale_log2, -lse_log2_smem[n * kMmaN + mma_c_col(lane, i)]));
}

// Causal: query i sees key j only where j <= i + diagonal (diagonal = seq_kv - seq_q, the forward's
// bottom-right alignment); elsewhere the forward's P is 0, and so must the recomputed one be (the
// exponential of a masked score is not 0: its score was never -inf here). Entry i of n-tile n is key
// `key0 + mma_c_row(lane, i)` (the warp's first key in the sequence: key0) and query
// `query0 + n * 8 + mma_c_col(lane, i)`. With P^T = 0 there, dS^T = P^T * (dP^T - D) is 0 too.
template <typename Cfg>
__device__ __forceinline__ void mask_above_diagonal(float (&p_acc)[Cfg::kQueryTiles][4], int64_t key0, int64_t query0,
                                                    int64_t diagonal, int lane) {
#pragma unroll
  for (int n = 0; n < Cfg::kQueryTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (key0 + mma_c_row(lane, i) > query0 + n * kMmaN + mma_c_col(lane, i) + diagonal) p_acc[n][i] = 0.0f;
}

// =================== dV += P^T dO, dK += dS^T Q (the same GEMM) ===================
// acc (64 keys x D) += X^T Y, with X^T (64 keys x Br queries) in the warpgroup's accumulators: the
// accumulators of n8 blocks 2kk and 2kk+1, packed to 16 bits, are the register A operand of k-step
// kk (hopper_encoding.h section 6: the same repack as mma.sync's, fragment_layout.h's p_frag_s_*). Y
// ([query][dim] = [k][n]) is read N-major from shared memory, like the forward's V. Two steps: the
// packing, then the products, issued as one commit group and not waited for. Until the caller's
// wait, nothing may write `acc` or `x_frag`: the tensor cores read and write them asynchronously.
template <typename Cfg>
__device__ __forceinline__ void pack_fragments(uint32_t (&x_frag)[Cfg::kQuerySteps][4],
                                               const float (&x_acc)[Cfg::kQueryTiles][4]) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kQuerySteps; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float* pair = &x_acc[p_frag_s_tile(kk, j)][p_frag_s_entry(j)];
      x_frag[kk][j] = pack2<typename Cfg::Elem>(pair[0], pair[1]);
    }
}
template <typename Cfg>
__device__ __forceinline__ void issue_transposed_product(float (&acc)[Cfg::kDimTiles][4],
                                                         const uint32_t (&x_frag)[Cfg::kQuerySteps][4],
                                                         uint32_t y_address) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kQuerySteps; ++kk)
    Wgmma<typename Cfg::Elem, Cfg::kHeadDim>::rs(acc, x_frag[kk], mn_major(y_address, SharedTiles<Cfg>::kQPanelBytes, kk));
  wgmma_commit_group();
}

// ======================== dS^T = P^T * (dP^T - D) ========================
// In place over P^T (still fp32: dS takes the unrounded P). D of query column n * 8 + mma_c_col.
template <typename Cfg>
__device__ __forceinline__ void score_gradients(float (&p_acc)[Cfg::kQueryTiles][4],
                                                const float (&dp_acc)[Cfg::kQueryTiles][4], const float* d_row_smem,
                                                int lane) {
#pragma unroll
  for (int n = 0; n < Cfg::kQueryTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) p_acc[n][i] *= dp_acc[n][i] - d_row_smem[n * kMmaN + mma_c_col(lane, i)];
}

// dS^T to shared memory in 16 bits, [key][query]: dQ = dS K needs dS as an operand in shared memory
// (its M, the queries, is not how the warpgroups split the keys), which wgmma reads M-major from
// this tile. Stored from dK's A fragments, before dK's wgmma reads them: each 32-bit word is a pair
// of neighbouring queries of one key (entries e and e + 1 of n8 block t, pack_fragments' pairs).
template <typename Cfg>
__device__ __forceinline__ void store_score_gradients(typename Cfg::Elem* ds_smem,
                                                      const uint32_t (&ds_frag)[Cfg::kQuerySteps][4], int warp_key0,
                                                      int lane) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kQuerySteps; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int key = warp_key0 + mma_c_row(lane, p_frag_s_entry(j));
      const int query = p_frag_s_tile(kk, j) * kMmaN + mma_c_col(lane, p_frag_s_entry(j));
      *reinterpret_cast<uint32_t*>(ds_smem + operand_offset(key, query, kBlockKV)) = ds_frag[kk][j];
    }
}

// ======================= dQ += dS K, across thread blocks =======================
// The warpgroup's share of dQ, all Br query rows times the head-dim columns of part `part` (D / 2 of
// them), summed over this block's Bc keys, added to the fp32 workspace: every K/V block's thread
// block adds its share to the same rows, in an order no one controls (unless the deterministic mode
// orders them). A = dS (Br x Bc) is the dS^T tile read M-major: its rows are the keys, wgmma's K, and
// the queries run along them; B = K ([key][dim] = [k][n]) is read N-major from column part * D / 2 on
// (at head_dim 128 the second panel; at 64, 64 bytes into the 128-byte rows, which the hardware
// swizzles like any other address). m64n(D/2)k16, one per 16 keys. Warp w of the warpgroup holds
// query rows 16w .. 16w+15, mma.sync's C layout.
//
// The adds: the parent's threads issued one fp32 reduction each per accumulator, 32 (head_dim 128)
// a thread and iteration, each warp-wide instruction touching 8 rows of 8 columns. Here each warp
// stores its accumulators to its share of dQ's shared tile, one float4 per n8 block and lane (512
// contiguous bytes a store, no bank conflict), and one lane hands the whole share to the TMA unit:
// one cp.reduce.async.bulk adds 4 KB (2 KB at head_dim 64) to the workspace and the warp goes on.
// For the share to be one contiguous run in the workspace too, the workspace keeps each query block
// in the order of the stores, [warp][n8 block][lane][entry] (dq_workspace_offset), and
// convert_dq_kernel reads it in that order. The lane's previous reduction must have read the share
// before it is overwritten: a whole iteration ago, so the wait costs nothing.
template <typename Cfg>
__device__ __forceinline__ void accumulate_dq(float* dq_block_gmem, float* dq_smem, uint32_t ds_address,
                                              uint32_t k_part_address, int warp, int lane) {
  using Smem = SharedTiles<Cfg>;
  float dq_acc[Cfg::kDqDimTiles][4];
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Cfg::kKeySteps; ++kk)
    Wgmma<typename Cfg::Elem, Cfg::kDqDims>::ss_transposed(dq_acc, mn_major(ds_address, Smem::kDsPanelBytes, kk),
                                                          mn_major(k_part_address, Smem::kKvPanelBytes, kk),
                                                          /*scale_d=*/kk > 0);
  wgmma_commit_group();
  if (lane == 0) bulk_wait_read();  // the previous block's reduction has read this warp's share
  __syncwarp();
  wgmma_wait_group<0>();
  pin_registers(dq_acc);
  float* share = dq_smem + warp * Cfg::kWarpDqFloats;
#pragma unroll
  for (int d = 0; d < Cfg::kDqDimTiles; ++d)
    *reinterpret_cast<float4*>(share + (d * 32 + lane) * 4) = make_float4(dq_acc[d][0], dq_acc[d][1], dq_acc[d][2], dq_acc[d][3]);
  fence_proxy_async_shared();  // this thread's stores, visible to the bulk reduction (the async proxy)
  __syncwarp();
  if (lane == 0) {
    bulk_reduce_add_f32(dq_block_gmem + warp * Cfg::kWarpDqFloats, smem_u32(share), Cfg::kWarpDqFloats * sizeof(float));
    bulk_commit_group();
  }
}

// Where element (row, col) of a query block's dQ (row < Br, col < D) lies in the workspace's copy of
// the block: the inverse of accumulate_dq's stores, for convert_dq_kernel. Warp w = g * 4 + v holds
// rows 16v .. 16v+15 of the columns of part g; within them, row r and column c are entry i of n8 block
// c / 8 in lane `lane`, by mma.sync's C layout (mma_c_row, mma_c_col).
template <int kHeadDim>
__host__ __device__ constexpr int dq_workspace_offset(int row, int col) {
  constexpr int kDqDims = kHeadDim / kDqDimSplit;
  const int warp = (col / kDqDims) * (kWgmmaM / kMmaM) + row / kMmaM;
  const int r = row % kMmaM, c = col % kDqDims;
  const int lane = (r % 8) * 4 + (c % kMmaN) / 2, i = (r / 8) * 2 + c % 2;
  return warp * kMmaM * kDqDims + ((c / kMmaN) * 32 + lane) * 4 + i;
}
// Checked here, at compile time, against the stores' own map: every lane's every entry.
template <int kHeadDim>
constexpr bool dq_workspace_offset_inverts_the_stores() {
  constexpr int kDqDims = kHeadDim / kDqDimSplit, kWarpsPerGroup = kWgmmaM / kMmaM;
  for (int warp = 0; warp < kWarps; ++warp)
    for (int d = 0; d < kDqDims / kMmaN; ++d)
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
          const int row = (warp % kWarpsPerGroup) * kMmaM + mma_c_row(lane, i);
          const int col = (warp / kWarpsPerGroup) * kDqDims + d * kMmaN + mma_c_col(lane, i);
          if (dq_workspace_offset<kHeadDim>(row, col) != warp * kMmaM * kDqDims + (d * 32 + lane) * 4 + i) return false;
        }
  return true;
}
static_assert(dq_workspace_offset_inverts_the_stores<64>() && dq_workspace_offset_inverts_the_stores<128>(),
              "convert_dq_kernel reads the workspace in the order accumulate_dq writes it");

// ================== the deterministic mode: dQ's turns ==================
// dQ's rows of one query block receive a share from every K/V block that sees them, and float
// addition is not associative: with the adds in whatever order the thread blocks arrive, dQ's last
// bits change from run to run. In the deterministic mode (BackwardParams::deterministic) each
// (query head, query block) has a counter in the workspace, starting at 0, and the K/V blocks that
// see the query block, 0..n_max, add their shares from the last keys to the first: K/V block n
// waits until the counter reads n_max - n, adds its share, and increments it. The shares arrive in
// the same order every run. (Under causal n_max depends on the query block: the first query block a
// K/V block sees never decreases with its keys, so the blocks that see query block m are 0..n_max(m).)
//
// Why the last keys first: under causal, K/V block n starts its loop about 2n query blocks in, so at
// any query block the K/V block with more keys got there earlier. In the keys' own order, block n
// would wait at every query block for block n - 1, which started further back: each block would take
// as long as the longest. Last-first, the block with the later keys is the one that goes first.
//
// One thread waits for the turn of its thread block, and the barrier after it holds the others. To
// pass the turn on, every thread fences its own adds (a fence orders only the calling thread's
// memory operations: the reductions must be performed at L2 before the counter moves), the barrier
// waits for all of them, and one thread increments the counter.
// Forward progress: a thread block waits only for K/V blocks of later keys, and in this mode those
// have the lower block indices (backward_kernel numbers a head's K/V blocks backwards), so the GPU
// dispatched them no later than the waiting one.
__device__ __forceinline__ int load_acquire(const int* address) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}
__device__ __forceinline__ void wait_for_turn(const int* turn, int64_t position) {
  while (load_acquire(turn) != position) {
  }
  __threadfence();
}
__device__ __forceinline__ void pass_turn(int* turn) {
  atomicAdd(turn, 1);
}

// ============================ write dK and dV ============================
// Straight from the accumulators, one 32-bit pair per store: once per thread block, after a loop
// over every query block, so the uncoalesced stores cost little here (a later stage stages them).
// Rows at or past `keys` (past seq_kv) are not written.
template <typename Cfg>
__device__ __forceinline__ void write_key_gradients(typename Cfg::Elem* out_gmem, int64_t row_stride,
                                                    const float (&acc)[Cfg::kDimTiles][4], float scale, int warp_key0,
                                                    int keys, int lane) {
#pragma unroll
  for (int d = 0; d < Cfg::kDimTiles; ++d)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp_key0 + mma_c_row(lane, 2 * r);
      const int col = d * kMmaN + mma_c_col(lane, 2 * r);
      if (row < keys)
        *reinterpret_cast<uint32_t*>(out_gmem + row * row_stride + col) =
            pack2<typename Cfg::Elem>(acc[d][2 * r] * scale, acc[d][2 * r + 1] * scale);
    }
}

// Keys past the sequence's end (rows at or past `keys` of the thread block's tile, zeros in shared
// memory) have the score 0 and so the probability exp(-lse), not 0: their dS^T rows must be zeroed
// before dQ = dS K reads them. (Their dV and dK rows are never written, so P^T needs no mask.)
template <typename Cfg>
__device__ __forceinline__ void zero_keys_past_end(float (&ds_acc)[Cfg::kQueryTiles][4], int warp_key0, int keys,
                                                   int lane) {
#pragma unroll
  for (int n = 0; n < Cfg::kQueryTiles; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (warp_key0 + mma_c_row(lane, i) >= keys) ds_acc[n][i] = 0.0f;
}

// ================================ kernels ================================
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t bits);
template <>
__device__ __forceinline__ float2 unpack2<__half>(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}
template <>
__device__ __forceinline__ float2 unpack2<__nv_bfloat16>(uint32_t bits) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
}

// D[row] = sum_d dO[row, d] * O[row, d] in fp32, one warp per query row (rows numbered
// [batch][head][seq_q], the workspace's order), each lane two neighbouring elements at a time.
// Why D: dS = P * (dP - D) needs, for every row, sum_j P_ij dP_ij, a sum over all the keys that no
// single K/V block's thread block sees; it equals dO_i . O_i, which is a sum over head_dim only.
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads) dot_do_o_kernel(const BackwardParams p, float* d_rows) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (row >= p.batch * p.heads * p.seq_q) return;
  const int lane = threadIdx.x % 32;
  const int64_t s = row % p.seq_q, batch_head = row / p.seq_q;
  const int64_t b = batch_head / p.heads, h = batch_head % p.heads;
  const T* o = static_cast<const T*>(p.o.data) + b * p.o.batch_stride + s * p.o.seq_stride + h * p.o.head_stride;
  const T* d_o = static_cast<const T*>(p.d_o.data) + b * p.d_o.batch_stride + s * p.d_o.seq_stride + h * p.d_o.head_stride;
  float sum = 0.0f;
#pragma unroll
  for (int d = 2 * lane; d < kHeadDim; d += 64) {
    const float2 o2 = unpack2<T>(*reinterpret_cast<const uint32_t*>(o + d));
    const float2 d_o2 = unpack2<T>(*reinterpret_cast<const uint32_t*>(d_o + d));
    sum = fmaf(o2.x, d_o2.x, fmaf(o2.y, d_o2.y, sum));
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) d_rows[row] = sum;
}

// The dQ workspace holds each head's rows rounded up to whole query blocks: the last query block's
// rows past seq_q add their dS K (zeros: their P is 0) to padding rows that nothing reads, so the
// atomics need no bounds check.
__host__ __device__ inline int64_t padded_seq_q(int64_t seq_q) { return (seq_q + kBlockQ - 1) / kBlockQ * kBlockQ; }

// kDeterministic: dQ added in a fixed order, with dq_turns, the counters ([batch][heads][query
// block], zeros); without it the kernel is the parent's (and dq_turns is nullptr).
template <typename T, int kHeadDim, bool kCausal, bool kDeterministic>
__global__ void __launch_bounds__(kThreads) backward_kernel(const BackwardParams p, float* dq_accum,
                                                            const float* d_rows, int* dq_turns) {
  using Cfg = Config<T, kHeadDim>;

  // One thread block per (batch, key/value head, K/V block), K/V blocks fastest so that the blocks
  // running at the same time read one head's Q and dO (from L2) and add to one head's dQ rows. The
  // last block may overhang seq_kv (keys_here < 128). Grouped-query attention: the `group` query
  // heads that share this key/value head all contribute to its dK and dV, so the thread block loops
  // over each of them in turn and its registers hold the sum; no other thread block writes these
  // rows of dK and dV, so they need no atomics and no second pass. (The price: a grid `group` times
  // smaller than the query heads', fewer thread blocks to fill the GPU with at small batches.)
  const int64_t num_kv_blocks = (p.seq_kv + kBlockKV - 1) / kBlockKV;
  // In the deterministic mode a head's K/V blocks are numbered backwards: the last keys first (see
  // dQ's turns).
  const int64_t kv_block = kDeterministic ? num_kv_blocks - 1 - blockIdx.x % num_kv_blocks : blockIdx.x % num_kv_blocks;
  const int64_t batch_kv_head = blockIdx.x / num_kv_blocks;
  const int64_t batch = batch_kv_head / p.kv_heads;
  const int64_t kv_head = batch_kv_head % p.kv_heads;
  const int64_t group = p.heads / p.kv_heads;
  const int64_t key0 = kv_block * kBlockKV;
  const int keys_here = static_cast<int>(p.seq_kv - key0 < kBlockKV ? p.seq_kv - key0 : kBlockKV);
  const T* k_gmem = static_cast<const T*>(p.k.data) + batch * p.k.batch_stride + kv_head * p.k.head_stride +
                    key0 * p.k.seq_stride;
  const T* v_gmem = static_cast<const T*>(p.v.data) + batch * p.v.batch_stride + kv_head * p.v.head_stride +
                    key0 * p.v.seq_stride;
  T* dk_gmem = static_cast<T*>(p.dk.data) + batch * p.dk.batch_stride + kv_head * p.dk.head_stride +
               key0 * p.dk.seq_stride;
  T* dv_gmem = static_cast<T*>(p.dv.data) + batch * p.dv.batch_stride + kv_head * p.dv.head_stride +
               key0 * p.dv.seq_stride;
  // The query side of the group's query heads: Q, dO, the LSE, D and the dQ workspace rows of the
  // first one (query head kv_head * group), and of member `h` of the group, h heads further on.
  struct QueryHead {
    const T* q;
    const T* d_o;
    const float* lse;
    const float* d_rows;
    float* dq_accum;
  };
  const int64_t first_head = kv_head * group, first_batch_head = batch * p.heads + first_head;
  const QueryHead group0{
      static_cast<const T*>(p.q.data) + batch * p.q.batch_stride + first_head * p.q.head_stride,
      static_cast<const T*>(p.d_o.data) + batch * p.d_o.batch_stride + first_head * p.d_o.head_stride,
      p.lse.data + batch * p.lse.batch_stride + first_head * p.lse.head_stride, d_rows + first_batch_head * p.seq_q,
      dq_accum + first_batch_head * padded_seq_q(p.seq_q) * kHeadDim};
  const auto member = [&](int h) {
    return QueryHead{group0.q + h * p.q.head_stride, group0.d_o + h * p.d_o.head_stride,
                     group0.lse + h * p.lse.head_stride, group0.d_rows + h * p.seq_q,
                     group0.dq_accum + h * padded_seq_q(p.seq_q) * kHeadDim};
  };

  extern __shared__ __align__(128) unsigned char smem_raw[];
  SharedTiles<Cfg> smem(smem_raw);

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warp_key0 = warp * kKeysPerWarp;  // warpgroup g's keys are 64g .. 64g+63, warp w of it 16w more
  const int warpgroup = warp / (kWarpgroupThreads / 32), warp_in_group = warp % (kWarpgroupThreads / 32);
  // A operands: the warpgroup's 64 keys of K (for S^T) and V (for dP^T), from the first panel on.
  const uint32_t k_rows_address = smem_u32(smem.k + operand_offset(warpgroup * kWgmmaM, 0, kBlockKV));
  const uint32_t v_rows_address = smem_u32(smem.v + operand_offset(warpgroup * kWgmmaM, 0, kBlockKV));
  // dQ's operands: dS^T (A) and the warpgroup's part of K's columns (B), from column dq_part * D / 2 on.
  const int dq_part = warpgroup;
  const uint32_t ds_address = smem_u32(smem.ds);
  const uint32_t k_part_address = smem_u32(smem.k + operand_offset(0, dq_part * Cfg::kDqDims, kBlockKV));

  // K and V stay in shared memory for the whole loop; they land with the first query block. Rows
  // past the sequence's end are zeros; their dS^T rows are set to 0 before dQ reads them, and their
  // dK and dV are never written. The first query block goes into slot 0 with them. A query block's
  // rows past seq_q are zeros too, with P = 0 (load_row_stat), so they add nothing to dV and dK.
  const auto rows_of = [&](int q_block) {
    return static_cast<int>(min(p.seq_q - static_cast<int64_t>(q_block) * kBlockQ, int64_t{kBlockQ}));
  };
  const auto load_query_block = [&](const QueryHead& h, int q_block, int slot) {
    const int64_t query0 = static_cast<int64_t>(q_block) * kBlockQ;
    const int rows = rows_of(q_block);
    copy_rows_to_smem<Cfg, kBlockQ>(smem.q(slot), h.q + query0 * p.q.seq_stride, p.q.seq_stride, rows);
    copy_rows_to_smem<Cfg, kBlockQ>(smem.d_o(slot), h.d_o + query0 * p.d_o.seq_stride, p.d_o.seq_stride, rows);
  };
  const auto load_stats = [&](const QueryHead& h, int q_block) {
    return load_row_stat(h.lse + q_block * kBlockQ, h.d_rows + q_block * kBlockQ, rows_of(q_block));
  };
  // Causal: query i sees key j where j <= i + diagonal, so the first row that sees this block's first
  // key is key0 - diagonal; the query blocks before the one holding it see none of its keys and are
  // skipped. A block that no row sees (key0 - diagonal >= seq_q) runs no iteration and writes
  // dK = dV = 0, which is their value.
  const int64_t diagonal = p.seq_kv - p.seq_q;
  const int num_q_blocks = static_cast<int>((p.seq_q + kBlockQ - 1) / kBlockQ);
  const int first_q_block =
      kCausal ? static_cast<int>(min(max(key0 - diagonal, int64_t{0}) / kBlockQ, int64_t{num_q_blocks})) : 0;
  // The loop's iterations: the query blocks first_q_block.. of each head of the group in turn, the
  // iteration's (member h, q_block) stepped along with it.
  const int iterations = static_cast<int>(group) * (num_q_blocks - first_q_block);
  // The iterations' (member h, q_block), one step at a time: the heads' query blocks in turn.
  const auto advance = [&](int& member_h, int& member_q_block) {
    if (member_q_block + 1 == num_q_blocks) {
      ++member_h;
      member_q_block = first_q_block;
    } else {
      ++member_q_block;
    }
  };
  copy_rows_to_smem<Cfg, kBlockKV>(smem.k, k_gmem, p.k.seq_stride, keys_here);
  copy_rows_to_smem<Cfg, kBlockKV>(smem.v, v_gmem, p.v.seq_stride, keys_here);
  if (iterations > 0) {
    load_query_block(group0, first_q_block, 0);
    store_row_stat(smem.lse_log2(0), smem.d_row(0), load_stats(group0, first_q_block));
  }
  cp_async_commit();
  // The second query block in its own commit group: the loop waits for each block's group alone.
  int ahead_h = 0, ahead_q_block = first_q_block;  // the block two iterations ahead of the loop's
  advance(ahead_h, ahead_q_block);
  if (iterations > 1) {
    const QueryHead second = member(ahead_h);
    load_query_block(second, ahead_q_block, 1);
    store_row_stat(smem.lse_log2(1), smem.d_row(1), load_stats(second, ahead_q_block));
  }
  cp_async_commit();
  advance(ahead_h, ahead_q_block);

  float dk_acc[Cfg::kDimTiles][4] = {};
  float dv_acc[Cfg::kDimTiles][4] = {};
  const float scale_log2 = p.softmax_scale * kLog2e;
  int h = 0, q_block = first_q_block;
  for (int it = 0; it < iterations; ++it) {
    const int slot = it % kSlots, ahead_slot = (it + 2) % kSlots;
    const int64_t query0 = static_cast<int64_t>(q_block) * kBlockQ;
    // This block's copies were issued two iterations ago; the next block's, one iteration ago, may
    // still be in flight (every iteration commits one group, the prologue two).
    cp_async_wait<1>();
    fence_proxy_async_shared();  // this thread's copies, visible to wgmma (the async proxy)
    __syncthreads();  // this block's tiles and row statistics are in; every warpgroup's wgmmas of the
                      // last block are done (each waited for all of them before its dQ atomics)
    // The query block two ahead goes into the third slot, whose Q, dO, LSE and D nothing reads any
    // more: they were the previous block's, and its last readers, the dV and dK products still in
    // flight at the barrier ahead of its dQ, were waited for before the barrier above. Its row
    // statistics wait in a register until this block's dQ is issued.
    const bool has_ahead = it + 2 < iterations;
    float ahead_stat = 0.0f;
    if (has_ahead) {
      const QueryHead ahead = member(ahead_h);
      load_query_block(ahead, ahead_q_block, ahead_slot);
      ahead_stat = load_stats(ahead, ahead_q_block);
    }
    cp_async_commit();

    // This block's slot: Q and dO, K-major as B of S^T = K Q^T and dP^T = V dO^T, N-major as B of
    // dV += P^T dO and dK += dS^T Q (the same tiles, two descriptors).
    const uint32_t q_address = smem_u32(smem.q(slot)), d_o_address = smem_u32(smem.d_o(slot));

    // The products in flight: each is issued as soon as its operands exist and waited for only where
    // its result is read, so that the tensor cores run one product while the warps compute the
    // element-wise work of another. Commit groups complete in order: wait_group<1> waits for all but
    // the newest. Both products that read only shared memory go first, S^T ahead of dP^T.
    float s_acc[Cfg::kQueryTiles][4];
    float dp_acc[Cfg::kQueryTiles][4];
    wgmma_fence();
    issue_transposed<Cfg>(s_acc, k_rows_address, q_address);     // S^T = K Q^T (raw scores)
    issue_transposed<Cfg>(dp_acc, v_rows_address, d_o_address);  // dP^T = V dO^T
    wgmma_wait_group<1>();  // S^T is done; dP^T may still run
    pin_registers(s_acc);
    recompute_probabilities<Cfg>(s_acc, smem.lse_log2(slot), scale_log2, lane);  // P^T, under dP^T
    // Only where the diagonal crosses this block: its last key lies past the first row's diagonal.
    if (kCausal && key0 + kBlockKV - 1 > query0 + diagonal)
      mask_above_diagonal<Cfg>(s_acc, key0 + warp_key0, query0, diagonal, lane);
    uint32_t p_frag[Cfg::kQuerySteps][4];
    pack_fragments<Cfg>(p_frag, s_acc);
    pin_registers(p_frag);
    pin_registers(dv_acc);
    wgmma_fence();
    issue_transposed_product<Cfg>(dv_acc, p_frag, d_o_address);  // dV += P^T dO

    wgmma_wait_group<1>();  // dP^T is done; dV may still run
    pin_registers(dp_acc);
    score_gradients<Cfg>(s_acc, dp_acc, smem.d_row(slot), lane);  // dS^T = P^T * (dP^T - D), under dV
    // The last K/V block: rows past seq_kv to 0 for dQ (their dK rows are never written).
    if (keys_here < kBlockKV) zero_keys_past_end<Cfg>(s_acc, warp_key0, keys_here, lane);
    uint32_t ds_frag[Cfg::kQuerySteps][4];
    pack_fragments<Cfg>(ds_frag, s_acc);
    store_score_gradients<Cfg>(smem.ds, ds_frag, warp_key0, lane);  // dS^T for dQ, under dV
    pin_registers(ds_frag);
    pin_registers(dk_acc);
    wgmma_fence();
    issue_transposed_product<Cfg>(dk_acc, ds_frag, q_address);  // dK += dS^T Q (scaled at the end)
    fence_proxy_async_shared();  // this thread's dS^T stores, visible to wgmma
    int* turn = nullptr;  // the deterministic mode's counter of these dQ rows
    if (kDeterministic) {
      // n_max: the last K/V block that sees this query block (under causal, that of its last row).
      const int64_t n_max =
          kCausal ? min(max(query0 + kBlockQ - 1 + diagonal, int64_t{0}) / kBlockKV, num_kv_blocks - 1)
                  : num_kv_blocks - 1;
      turn = dq_turns + (first_batch_head + h) * num_q_blocks + q_block;
      if (threadIdx.x == 0) wait_for_turn(turn, n_max - kv_block);
    }
    __syncthreads();  // dS^T is whole: dQ's rows need every warp's keys (and, deterministic, it is our turn)
    // dQ += dS K; its wait (for all groups) is also dV's and dK's.
    accumulate_dq<Cfg>(member(h).dq_accum + query0 * kHeadDim, smem.dq, ds_address, k_part_address, warp, lane);
    pin_registers(dv_acc);
    pin_registers(dk_acc);
    pin_registers(p_frag);   // P^T's and dS^T's fragments stay untouched until the wgmmas that read
    pin_registers(ds_frag);  // them are done
    if (kDeterministic) {
      if (lane == 0) {
        bulk_wait_all();             // this warp's reduction is performed
        fence_proxy_async_global();  // and ordered before the generic proxy's fence and counter
      }
      __threadfence();
      __syncthreads();  // every warp's is
      if (threadIdx.x == 0) pass_turn(turn);
    }
    if (has_ahead) store_row_stat(smem.lse_log2(ahead_slot), smem.d_row(ahead_slot), ahead_stat);
    advance(h, q_block);
    advance(ahead_h, ahead_q_block);
  }

  if (lane == 0) bulk_wait_read();  // the last reduction has read its share before the block's memory goes

  // dK = scale * dS^T Q: the softmax scale of S = scale * Q K^T, applied once to the sum.
  write_key_gradients<Cfg>(dk_gmem, p.dk.seq_stride, dk_acc, p.softmax_scale, warp_key0, keys_here, lane);
  write_key_gradients<Cfg>(dv_gmem, p.dv.seq_stride, dv_acc, 1.0f, warp_key0, keys_here, lane);
}

// dQ = scale * the fp32 workspace, rounded to the dtype: each thread a pair of neighbouring
// elements, grid-stride over all of them (the workspace's padding rows are skipped).
template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kThreads) convert_dq_kernel(const BackwardParams p, const float* dq_accum) {
  const int64_t pairs = p.batch * p.heads * p.seq_q * (kHeadDim / 2);
  for (int64_t pair = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; pair < pairs;
       pair += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t row = pair / (kHeadDim / 2);  // [batch][head][seq_q]
    const int d = static_cast<int>(pair % (kHeadDim / 2)) * 2;
    const int64_t s = row % p.seq_q, batch_head = row / p.seq_q;
    const int64_t b = batch_head / p.heads, h = batch_head % p.heads;
    // The workspace's query block holding row s, and the pair within it (d even: entries i, i + 1).
    const float* block = dq_accum + (batch_head * padded_seq_q(p.seq_q) + s / kBlockQ * kBlockQ) * kHeadDim;
    const float2 acc = *reinterpret_cast<const float2*>(block + dq_workspace_offset<kHeadDim>(static_cast<int>(s % kBlockQ), d));
    T* dq = static_cast<T*>(p.dq.data) + b * p.dq.batch_stride + s * p.dq.seq_stride + h * p.dq.head_stride + d;
    *reinterpret_cast<uint32_t*>(dq) = pack2<T>(acc.x * p.softmax_scale, acc.y * p.softmax_scale);
  }
}

// =============================== launcher ===============================
Status launch_backward(const BackwardParams& params, cudaStream_t stream);

// clang-format off
extern const BackwardInfo info = {
    FA_STAGE_BACKWARD_FEATURES,  // from stage.json's "backward"
    kBlockQ, kBlockKV, kWarps,
    /*head_dims=*/{64, 128}, /*dtypes=*/{DType::kFloat16, DType::kBFloat16},
    &launch_backward};
// clang-format on

// The workspace (the fp32 dQ accumulator, [batch][heads][padded_seq_q][head_dim], D, [batch][heads][seq_q],
// and in the deterministic mode dQ's turns, [batch][heads][query block])
// is allocated by the launcher from a memory pool of the stage's own, one per device, made on first
// use and kept for the process: cudaMallocFromPoolAsync before the first kernel and cudaFreeAsync
// after the last, both on the launch stream, so the workspace lives exactly as long as this call's
// kernels in stream order, costs no device-wide synchronization, and two calls on two streams never
// share one. Not the device's default pool: it may hand this stream memory freed on another one by
// making this stream wait for that one, and it unmaps its memory at every synchronization (release
// threshold 0). This pool allows neither and keeps up to kPoolKeepBytes between calls.
constexpr uint64_t kPoolKeepBytes = uint64_t{256} << 20;

Status workspace_pool(cudaMemPool_t* pool) {
  const auto failed = [](const char* what, cudaError_t e) {
    return Status::error(std::string(::FA_STAGE_NAMESPACE::info.name) + " (backward): " + what + ": " +
                         cudaGetErrorString(e));
  };
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return failed("cannot get the current device", e);
  static std::mutex mutex;
  static std::vector<cudaMemPool_t> pools;  // by device; never destroyed (they outlive every call)
  const std::lock_guard<std::mutex> lock(mutex);
  if (static_cast<int>(pools.size()) <= device) pools.resize(device + 1, nullptr);
  if (pools[device] == nullptr) {
    int supported = 0;
    e = cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device);
    if (e != cudaSuccess) return failed("cannot query memory-pool support", e);
    if (!supported)
      return Status::error(std::string(::FA_STAGE_NAMESPACE::info.name) +
                           " (backward): the dQ workspace needs stream-ordered memory pools, which this device "
                           "or driver does not support");
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

template <typename T, int kHeadDim>
Status launch_backward_typed(const BackwardParams& params, cudaStream_t stream) {
  const char* name = ::FA_STAGE_NAMESPACE::info.name;
  const auto failed = [name](const char* what, cudaError_t e) {
    return Status::error(std::string(name) + " (backward): " + what + ": " + cudaGetErrorString(e));
  };
  constexpr size_t smem_bytes = SharedTiles<Config<T, kHeadDim>>::kBytes;
  const auto kernel = params.deterministic
                          ? (params.causal ? backward_kernel<T, kHeadDim, true, true> : backward_kernel<T, kHeadDim, false, true>)
                          : (params.causal ? backward_kernel<T, kHeadDim, true, false>
                                           : backward_kernel<T, kHeadDim, false, false>);
  // Dynamic shared memory above 48 KB needs the opt-in, on the current device, at every launch.
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (e != cudaSuccess) return failed("cannot configure the kernel", e);

  const int64_t rows = params.batch * params.heads * params.seq_q;
  const size_t dq_bytes =
      static_cast<size_t>(params.batch * params.heads * padded_seq_q(params.seq_q) * kHeadDim) * sizeof(float);
  const size_t d_bytes = static_cast<size_t>(rows) * sizeof(float);
  const size_t turn_bytes = params.deterministic ? static_cast<size_t>(params.batch * params.heads *
                                                                       (padded_seq_q(params.seq_q) / kBlockQ)) *
                                                       sizeof(int)
                                                 : 0;
  cudaMemPool_t pool = nullptr;
  const Status have_pool = workspace_pool(&pool);
  if (!have_pool.ok()) return have_pool;
  void* workspace = nullptr;
  e = cudaMallocFromPoolAsync(&workspace, dq_bytes + d_bytes + turn_bytes, pool, stream);
  if (e != cudaSuccess) return failed("cannot allocate the dQ workspace", e);
  float* dq_accum = static_cast<float*>(workspace);
  float* d_rows = reinterpret_cast<float*>(static_cast<char*>(workspace) + dq_bytes);
  int* dq_turns = params.deterministic ? reinterpret_cast<int*>(static_cast<char*>(workspace) + dq_bytes + d_bytes)
                                       : nullptr;

  // Each step only if the one before it was enqueued; the workspace is freed in stream order either way.
  Status status = Status::success();
  e = cudaMemsetAsync(dq_accum, 0, dq_bytes, stream);  // the atomics add to zeros
  if (e == cudaSuccess && dq_turns != nullptr) e = cudaMemsetAsync(dq_turns, 0, turn_bytes, stream);  // turn 0 first
  if (e != cudaSuccess) status = failed("cannot clear the dQ workspace", e);
  if (status.ok()) {
    dot_do_o_kernel<T, kHeadDim><<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
        params, d_rows);
    status = launch_status(name);
  }
  if (status.ok()) {
    const int64_t blocks = (params.seq_kv + kBlockKV - 1) / kBlockKV * params.kv_heads * params.batch;
    kernel<<<static_cast<unsigned>(blocks), kThreads, smem_bytes, stream>>>(params, dq_accum, d_rows, dq_turns);
    status = launch_status(name);
  }
  if (status.ok()) {
    const int64_t pairs = rows * (kHeadDim / 2);
    const int64_t blocks = std::min<int64_t>((pairs + kThreads - 1) / kThreads, int64_t{1} << 16);
    convert_dq_kernel<T, kHeadDim><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(params, dq_accum);
    status = launch_status(name);
  }
  e = cudaFreeAsync(workspace, stream);
  if (e != cudaSuccess && status.ok()) status = failed("cannot free the dQ workspace", e);
  return status;
}

Status launch_backward(const BackwardParams& params, cudaStream_t stream) {
  const Status valid = validate_backward_params(params, ::FA_STAGE_NAMESPACE::info);
  if (!valid.ok()) return valid;
  const bool fp16 = params.q.dtype == DType::kFloat16;
  if (params.head_dim == 64)
    return fp16 ? launch_backward_typed<__half, 64>(params, stream)
                : launch_backward_typed<__nv_bfloat16, 64>(params, stream);
  return fp16 ? launch_backward_typed<__half, 128>(params, stream)
              : launch_backward_typed<__nv_bfloat16, 128>(params, stream);
}

}  // namespace bwd
