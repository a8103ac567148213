// The Hopper (sm_90a) encodings that are easy to get wrong, written once as constexpr functions
// usable on host and device, and checked on the CPU by tests/test_hopper_encoding.cpp. The wgmma
// microbenchmark (tools/microbench/wgmma_peak.cu) builds its operands and descriptors with them and
// compares one tile against a CPU product, so a GPU run checks them against the hardware too.
//
// 1. The wgmma shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format" of the
//    asynchronous warpgroup-level matrix instructions): a 64-bit value
//        bits  0-13  start address           >> 4   (shared-state-space byte address)
//        bits 16-29  leading dimension byte offset >> 4
//        bits 32-45  stride dimension byte offset  >> 4
//        bits 49-51  matrix base offset (0 when every swizzle atom starts 1024-byte aligned
//                    for 128B swizzling, 512-byte aligned for 64B)
//        bits 62-63  swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
//    and every other bit 0. Byte offsets and addresses lose their 4 low bits: everything the
//    descriptor points at is 16-byte aligned. 14 bits of 16-byte units reach 256 KiB, more than
//    the 228 KiB of shared memory of an sm_90 SM.
//
// 2. The 128-byte swizzle: a K-major operand tile whose rows are 128 bytes (64 16-bit elements)
//    is stored in atoms of 8 rows x 128 bytes = 1024 bytes. Row r's 16-byte chunk c (elements
//    8c .. 8c+7) is stored in chunk c ^ (r % 8) of the same row. wgmma applies the same XOR to the
//    address bits [4,7) from bits [7,10), so the atoms must be 1024-byte aligned (base offset 0).
//    Why: the 8 rows of an 8x8 core matrix read the same logical chunk; unswizzled they would sit
//    in the same 4 banks (128 bytes apart), swizzled they cover all 32 banks once.
//    With this layout a K-major descriptor has stride byte offset 1024 (from one 8-row atom to
//    the next); the leading byte offset is unused for swizzled K-major layouts (set to 16 here,
//    i.e. 1 in the field). Advancing K by 16 elements (32 bytes) inside the 128-byte row is adding
//    32 to the start address: the hardware swizzles the final address.
//
// 3. The fp32 accumulator of wgmma.mma_async m64nNk16 (PTX ISA, "Register Fragments" figure for the
//    wgmma D matrix): N/2 registers per thread of the 128-thread warpgroup; thread t, register i
//    holds D[row][col] with
//        row = 16*(t/32) + (t%32)/4 + 8*((i/2)%2)
//        col = 8*(i/4) + 2*(t%4) + i%2
//    Warp w owns rows 16w .. 16w+15; registers 4j .. 4j+3 of a lane are exactly the mma.sync
//    m16n8 C fragment (fragment_layout.h: mma_c_row/mma_c_col) of the warp's columns 8j .. 8j+7.
//
//        warp 0's part of D (rows 0-15), entries = lane holding d[4j+0..1] / d[4j+2..3]
//                 col: 8j+0 8j+1 | 8j+2 8j+3 | 8j+4 8j+5 | 8j+6 8j+7
//        row 0:        T0        |    T1     |    T2     |    T3        (d[4j], d[4j+1])
//        row 1:        T4        |    T5     |    T6     |    T7
//        ...
//        row 8:        T0        |    T1     |    T2     |    T3        (d[4j+2], d[4j+3])
//
// 4. Tiles wider than one 128-byte row (head_dim 128 in 16 bits: 256 bytes) are stored as 64-column
//    panels: panel p holds columns 64p .. 64p+63 of every row as its own [rows x 128 B] swizzled
//    tile, panel_bytes = rows * 128 after the previous one. The K-major descriptor then steps
//    K by 16 elements as +32 bytes inside a panel and jumps to the next panel every 4 steps.
//
// 5. MN-major operands (PTX ISA, "Shared Memory Matrix Layout", its tables "Leading Dimension Byte
//    Offset", "Stride Dimension Byte Offset" and "Canonical Layouts"). With imm-trans-b = 1 (only
//    for .f16/.bf16) B is read N-major: N contiguous. In the 128B swizzle mode the canonical layout,
//    in elements of T = 128 / bits-per-element (8 for 16-bit types), is
//        ((T, 8, m), (8, k)) : ((1, T, LBO), (8T, SBO))      then the 128B swizzle
//    i.e. along N: 64 contiguous elements (one 128-byte row), then the next 64 at LBO;
//    along K: 8 rows 128 bytes apart (one 1024-byte atom), then the next 8 rows at SBO.
//    So for MN-major, LBO is the offset between 64-element N blocks and SBO the offset between
//    8-row K groups (for K-major, SBO is between 8-row M/N groups and LBO is unused when swizzled).
//    V stored [key][dim] (dims contiguous) is exactly that for B = V of O += P V (K = keys, N =
//    dims): the same physical layout as a K-major tile (row = key, 128-byte rows, chunk ^ row % 8),
//    with SBO = 1024 and LBO = the panel size; a k16 step is 16 rows = 2 atoms = +2048 bytes.
//
// 6. The A operand from registers of wgmma m64nNk16 (.f16/.bf16; PTX ISA figure "WGMMA .m64nNk16
//    register fragment layout for matrix A"; the same map as CUTLASS's ALayout_64x16, which is its
//    64 x 16 accumulator layout): 4 registers of two 16-bit elements, element e (0..7) at
//        row = 16*(t/32) + (t%32)/4 + 8*((e/2)%2),   col = 2*(t%4) + e%2 + 8*(e/4)
//    which is section 3's accumulator map of a 64 x 16 tile, element e = register e. So the fp32 S
//    accumulators of columns 16kk .. 16kk+15 (registers 8kk .. 8kk+7), packed in pairs, are the A
//    operand of P V for k-step kk: mma.sync's P-in-registers repack (fragment_layout.h:
//    p_frag_s_tile, p_frag_s_entry) carries over unchanged.
//
// 7. The TMA tensor map of one [batch, seq, heads, head_dim] operand (CUDA driver API,
//    cuTensorMapEncodeTiled; PTX ISA "Tensor copy": cp.async.bulk.tensor). A rank-4 map whose
//    dimensions run fastest first: {head_dim, seq, heads, batch}; the three outer strides are in
//    bytes (dimension 0 is contiguous) and must be multiples of 16 (so are our strides: multiples
//    of 8 16-bit elements, validate_params). One copy moves a box of {64, rows, 1, 1} elements: 64
//    16-bit elements are one 128-byte swizzled row, so with CU_TENSOR_MAP_SWIZZLE_128B the box lands
//    in shared memory exactly as one panel of section 4 (chunk c of row r at chunk c ^ (r % 8)),
//    provided its destination is 1024-byte aligned. A head_dim-128 tile is two boxes, at head-dim
//    coordinates 0 and 64, one panel apart.
#pragma once

#include <cstdint>

#include "common/fragment_layout.h"  // FA_HOST_DEVICE

namespace fa {

// ---- 1. the wgmma shared-memory matrix descriptor ----------------------------------------------
enum class WgmmaSwizzle : uint32_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

constexpr int kWgmmaDescAddressShift = 0;      // bits 0-13
constexpr int kWgmmaDescLeadingShift = 16;     // bits 16-29
constexpr int kWgmmaDescStrideShift = 32;      // bits 32-45
constexpr int kWgmmaDescBaseOffsetShift = 49;  // bits 49-51
constexpr int kWgmmaDescSwizzleShift = 62;     // bits 62-63
constexpr uint64_t kWgmmaDesc14BitMask = (uint64_t{1} << 14) - 1;

// A byte address or offset as the descriptor stores it: in 16-byte units, 14 bits.
FA_HOST_DEVICE constexpr uint64_t wgmma_desc_field(uint32_t bytes) {
  return (bytes >> 4) & kWgmmaDesc14BitMask;
}

FA_HOST_DEVICE constexpr uint64_t wgmma_descriptor(uint32_t start_address_bytes, uint32_t leading_byte_offset,
                                                   uint32_t stride_byte_offset, WgmmaSwizzle swizzle,
                                                   uint32_t base_offset = 0) {
  return (wgmma_desc_field(start_address_bytes) << kWgmmaDescAddressShift) |
         (wgmma_desc_field(leading_byte_offset) << kWgmmaDescLeadingShift) |
         (wgmma_desc_field(stride_byte_offset) << kWgmmaDescStrideShift) |
         (uint64_t{base_offset & 0x7u} << kWgmmaDescBaseOffsetShift) |
         (uint64_t{static_cast<uint32_t>(swizzle) & 0x3u} << kWgmmaDescSwizzleShift);
}

// The fields back, in bytes where they are byte quantities (for tests and debugging).
FA_HOST_DEVICE constexpr uint32_t wgmma_desc_start_address(uint64_t desc) {
  return static_cast<uint32_t>(((desc >> kWgmmaDescAddressShift) & kWgmmaDesc14BitMask) << 4);
}
FA_HOST_DEVICE constexpr uint32_t wgmma_desc_leading_byte_offset(uint64_t desc) {
  return static_cast<uint32_t>(((desc >> kWgmmaDescLeadingShift) & kWgmmaDesc14BitMask) << 4);
}
FA_HOST_DEVICE constexpr uint32_t wgmma_desc_stride_byte_offset(uint64_t desc) {
  return static_cast<uint32_t>(((desc >> kWgmmaDescStrideShift) & kWgmmaDesc14BitMask) << 4);
}
FA_HOST_DEVICE constexpr uint32_t wgmma_desc_base_offset(uint64_t desc) {
  return static_cast<uint32_t>((desc >> kWgmmaDescBaseOffsetShift) & 0x7u);
}
FA_HOST_DEVICE constexpr WgmmaSwizzle wgmma_desc_swizzle(uint64_t desc) {
  return static_cast<WgmmaSwizzle>((desc >> kWgmmaDescSwizzleShift) & 0x3u);
}

// ---- 2. the 128-byte swizzle of a K-major tile with 128-byte rows ------------------------------
constexpr int kSwizzle128RowBytes = 128;   // one row: 64 16-bit elements along K
constexpr int kSwizzle128ChunkBytes = 16;  // the unit that moves: 8 16-bit elements
constexpr int kSwizzle128AtomRows = 8;
constexpr int kSwizzle128AtomBytes = kSwizzle128AtomRows * kSwizzle128RowBytes;  // 1024

// Which 16-byte chunk of its 128-byte row logical chunk `chunk` (0..7) of row `row` is stored in.
FA_HOST_DEVICE constexpr int swizzle128_chunk(int row, int chunk) {
  return chunk ^ (row % kSwizzle128AtomRows);
}

// Byte offset, from the 1024-byte aligned tile start, of byte `byte_in_row` (0..127) of row `row`.
FA_HOST_DEVICE constexpr uint32_t swizzle128_offset(int row, int byte_in_row) {
  return static_cast<uint32_t>(row * kSwizzle128RowBytes +
                               swizzle128_chunk(row, byte_in_row / kSwizzle128ChunkBytes) *
                                   kSwizzle128ChunkBytes +
                               byte_in_row % kSwizzle128ChunkBytes);
}

// The descriptor of a K-major, 128B-swizzled tile (rows of 64 16-bit elements, 8-row atoms stored
// one after the other) for the 16-element K slice `k_step` (0..3) of each row.
FA_HOST_DEVICE constexpr uint64_t wgmma_descriptor_k_major_sw128(uint32_t tile_address_bytes, int k_step) {
  return wgmma_descriptor(tile_address_bytes + static_cast<uint32_t>(k_step) * 32u,
                          /*leading_byte_offset=*/16, /*stride_byte_offset=*/kSwizzle128AtomBytes,
                          WgmmaSwizzle::k128B);
}

// ---- 3. the wgmma m64nNk16 fp32 accumulator fragment --------------------------------------------
constexpr int kWarpgroupThreads = 128;
constexpr int kWgmmaM = 64;

FA_HOST_DEVICE constexpr int wgmma_acc_regs(int n) {
  return kWgmmaM * n / kWarpgroupThreads;
}
FA_HOST_DEVICE constexpr int wgmma_acc_row(int thread, int i) {
  return 16 * (thread / 32) + (thread % 32) / 4 + 8 * ((i / 2) % 2);
}
FA_HOST_DEVICE constexpr int wgmma_acc_col(int thread, int i) {
  return 8 * (i / 4) + 2 * (thread % 4) + i % 2;
}

// ---- 4. 64-column panels of 128B-swizzled rows -------------------------------------------------
// Byte offset, from the 1024-byte aligned tile start, of byte `byte_in_row` of row `row` of a tile
// of `rows` rows whose rows are any multiple of 128 bytes, stored as [rows x 128 B] panels.
FA_HOST_DEVICE constexpr uint32_t swizzle128_panel_offset(int row, int byte_in_row, int rows) {
  return static_cast<uint32_t>(byte_in_row / kSwizzle128RowBytes) * static_cast<uint32_t>(rows) *
             kSwizzle128RowBytes +
         swizzle128_offset(row, byte_in_row % kSwizzle128RowBytes);
}

constexpr int kWgmmaK = 16;  // K of one 16-bit wgmma: 32 bytes of a 128-byte row
constexpr int kSwizzle128KStepsPerRow = kSwizzle128RowBytes / (kWgmmaK * 2);  // 4

// K-major panels: the descriptor of k-step `k_step` (elements 16 k_step .. 16 k_step + 15 of each
// row), `panel_bytes` = rows * 128 apart.
FA_HOST_DEVICE constexpr uint64_t wgmma_descriptor_k_major_sw128_panels(uint32_t tile_address_bytes,
                                                                        uint32_t panel_bytes, int k_step) {
  return wgmma_descriptor_k_major_sw128(
      tile_address_bytes + static_cast<uint32_t>(k_step / kSwizzle128KStepsPerRow) * panel_bytes,
      k_step % kSwizzle128KStepsPerRow);
}

// ---- 5. MN-major (N contiguous) 128B-swizzled B operand ------------------------------------------
// The tile is K rows of N elements (rows = K, 128-byte panels of 64 N elements, `panel_bytes`
// apart); k-step `k_step` reads rows 16 k_step .. 16 k_step + 15 and every N column. Only for
// instructions with imm-trans-b = 1.
FA_HOST_DEVICE constexpr uint64_t wgmma_descriptor_mn_major_sw128(uint32_t tile_address_bytes, uint32_t panel_bytes,
                                                                  int k_step) {
  return wgmma_descriptor(tile_address_bytes + static_cast<uint32_t>(k_step) * kWgmmaK * kSwizzle128RowBytes,
                          /*leading_byte_offset=*/panel_bytes,        // next 64 elements along N
                          /*stride_byte_offset=*/kSwizzle128AtomBytes,  // next 8 rows along K
                          WgmmaSwizzle::k128B);
}

// ---- 6. the A operand of wgmma m64nNk16 from registers (16-bit types) -----------------------------
FA_HOST_DEVICE constexpr int wgmma_a_row(int thread, int e) {
  return 16 * (thread / 32) + (thread % 32) / 4 + 8 * ((e / 2) % 2);
}
FA_HOST_DEVICE constexpr int wgmma_a_col(int thread, int e) {
  return 2 * (thread % 4) + e % 2 + 8 * (e / 4);
}

// ---- 7. the TMA tensor map of a [batch, seq, heads, head_dim] operand -----------------------------
constexpr int kTmaRank = 4;
constexpr int kTmaBoxCols = kSwizzle128RowBytes / 2;  // 64 16-bit elements: one swizzled row

struct TmaTileGeometry {
  uint64_t dims[kTmaRank];               // {head_dim, seq, heads, batch}, elements
  uint64_t strides_bytes[kTmaRank - 1];  // of dims 1..3 (dim 0 is contiguous)
  uint32_t box[kTmaRank];                // {64, box_rows, 1, 1}
  int boxes_per_tile;                    // head_dim / 64: one panel each
  uint32_t box_bytes;                    // what one copy delivers (its expect_tx share)
};

FA_HOST_DEVICE constexpr TmaTileGeometry tma_tile_geometry(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim,
                                                           int64_t batch_stride, int64_t seq_stride,
                                                           int64_t head_stride, int elem_bytes, int box_rows) {
  return TmaTileGeometry{
      {static_cast<uint64_t>(head_dim), static_cast<uint64_t>(seq), static_cast<uint64_t>(heads),
       static_cast<uint64_t>(batch)},
      {static_cast<uint64_t>(seq_stride * elem_bytes), static_cast<uint64_t>(head_stride * elem_bytes),
       static_cast<uint64_t>(batch_stride * elem_bytes)},
      {static_cast<uint32_t>(kSwizzle128RowBytes / elem_bytes), static_cast<uint32_t>(box_rows), 1u, 1u},
      static_cast<int>(head_dim * elem_bytes / kSwizzle128RowBytes),
      static_cast<uint32_t>(box_rows * kSwizzle128RowBytes)};
}

}  // namespace fa
