// The Hopper encodings of common/hopper_encoding.h, checked on the host:
//   - the wgmma matrix descriptor: every field round-trips and lands in exactly the bits the PTX
//     ISA's "Matrix Descriptor Format" gives it, and nothing else is set;
//   - the 128-byte swizzle: a bijection within each 1024-byte atom that moves whole 16-byte chunks
//     inside their own row, and spreads the 8 rows of a core matrix over all 32 banks;
//   - the wgmma m64nNk16 accumulator map: covers the 64 x N tile exactly once for every N, each
//     warp owns 16 rows, and each n8 slice of a warp is an mma.sync m16n8 C fragment.
//   - 64-column panels (head_dim 128): the K-major panel descriptors and the MN-major descriptor of
//     V (B of O += P V, read N-major through imm-trans-b = 1) address exactly the bytes where the
//     tile layout stores each element, under a model of the hardware's address generation written
//     from the PTX ISA's canonical layouts;
//   - the A operand from registers: the S accumulators, repacked as the kernels do, are exactly
//     the A fragment of P V;
//   - the TMA tile geometry: the tensor map's dimensions and strides address what a TensorView
//     addresses, and a tile's boxes land, swizzled by the copy engine, where the panels expect them.
// The GPU check of the same encodings is the wgmma microbenchmark's tile check
// (tools/microbench/wgmma_peak.cu, run by scripts/microbench.sh: K-major, one panel) and, for the
// panels, the MN-major descriptor and the register A operand, the fp64-checked attention of stage
// hopper_01_wgmma (tests/test_gpu_stages.cpp).
#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include "common/fragment_layout.h"
#include "common/hopper_encoding.h"
#include "fa_catch.h"

namespace {

// Bits first..last (inclusive) set.
constexpr uint64_t bit_range(int first, int last) {
  return ((last == 63) ? ~uint64_t{0} : ((uint64_t{1} << (last + 1)) - 1)) & ~((uint64_t{1} << first) - 1);
}

// A model of where a 16-bit wgmma operand in the 128B swizzle mode reads element (mn, k) of one
// k16 step, from its descriptor alone: the PTX ISA's canonical layouts ("Canonical Layouts", T = 8
// elements of 16 bits = 16 bytes), in bytes,
//   K-major  ((8, m), (T, 2)) : ((8T, SBO), (1, T))        row mn: (mn % 8) * 128 + (mn / 8) * SBO,
//                                                          k: 2 k bytes (16 elements < one row)
//   MN-major ((T, 8, m), (8, 2)) : ((1, T, LBO), (8T, SBO)) mn: 2 (mn % 64) + (mn / 64) * LBO,
//                                                          k: (k % 8) * 128 + (k / 8) * SBO
// added to the start address, then the 128-byte swizzle on the address: bits [4,7) ^= bits [7,10)
// (the pattern repeats every 1024 bytes from a 1024-byte boundary: base offset 0).
enum class Major { kK, kMN };
uint32_t model_wgmma_byte_address(uint64_t desc, Major major, int mn, int k) {
  const uint32_t start = fa::wgmma_desc_start_address(desc);
  const uint32_t lbo = fa::wgmma_desc_leading_byte_offset(desc);
  const uint32_t sbo = fa::wgmma_desc_stride_byte_offset(desc);
  const uint32_t linear =
      major == Major::kK
          ? start + (mn % 8) * 128u + (mn / 8) * sbo + 2u * k
          : start + 2u * (mn % 64) + (mn / 64) * lbo + (k % 8) * 128u + (k / 8) * sbo;
  return linear ^ (((linear >> 7) & 7u) << 4);
}

}  // namespace

TEST_CASE("wgmma descriptor: each field lands in its PTX bit range", "[hopper][descriptor]") {
  // A field at its largest value sets exactly its bits.
  CHECK(fa::wgmma_descriptor(0x3FFF0, 0, 0, fa::WgmmaSwizzle::kNone) == bit_range(0, 13));
  CHECK(fa::wgmma_descriptor(0, 0x3FFF0, 0, fa::WgmmaSwizzle::kNone) == bit_range(16, 29));
  CHECK(fa::wgmma_descriptor(0, 0, 0x3FFF0, fa::WgmmaSwizzle::kNone) == bit_range(32, 45));
  CHECK(fa::wgmma_descriptor(0, 0, 0, fa::WgmmaSwizzle::kNone, 7) == bit_range(49, 51));
  CHECK(fa::wgmma_descriptor(0, 0, 0, fa::WgmmaSwizzle::k32B) == bit_range(62, 63));

  // The swizzle codes of the PTX ISA.
  CHECK(fa::wgmma_descriptor(0, 0, 0, fa::WgmmaSwizzle::k128B) == uint64_t{1} << 62);
  CHECK(fa::wgmma_descriptor(0, 0, 0, fa::WgmmaSwizzle::k64B) == uint64_t{2} << 62);
  CHECK(fa::wgmma_descriptor(0, 0, 0, fa::WgmmaSwizzle::k32B) == uint64_t{3} << 62);

  // Addresses and offsets are stored in 16-byte units.
  CHECK(fa::wgmma_descriptor(16, 0, 0, fa::WgmmaSwizzle::kNone) == 1);
  CHECK(fa::wgmma_descriptor(0, 16, 0, fa::WgmmaSwizzle::kNone) == uint64_t{1} << 16);
  CHECK(fa::wgmma_descriptor(0, 0, 1024, fa::WgmmaSwizzle::kNone) == uint64_t{64} << 32);

  // All fields at their maximum leave every reserved bit clear.
  const uint64_t all = fa::wgmma_descriptor(0x3FFF0, 0x3FFF0, 0x3FFF0, fa::WgmmaSwizzle::k32B, 7);
  const uint64_t fields =
      bit_range(0, 13) | bit_range(16, 29) | bit_range(32, 45) | bit_range(49, 51) | bit_range(62, 63);
  CHECK(all == fields);
  CHECK((all & ~fields) == 0);
}

TEST_CASE("wgmma descriptor: fields round-trip", "[hopper][descriptor]") {
  const fa::WgmmaSwizzle swizzles[] = {fa::WgmmaSwizzle::kNone, fa::WgmmaSwizzle::k128B,
                                       fa::WgmmaSwizzle::k64B, fa::WgmmaSwizzle::k32B};
  // Every 16-byte aligned address of 228 KiB of shared memory, with a few offsets.
  for (uint32_t address = 0; address < 228 * 1024; address += 16) {
    const uint32_t leading = (address * 7u) % 0x40000u & ~0xFu;
    const uint32_t stride = (address * 13u + 1024u) % 0x40000u & ~0xFu;
    const uint32_t base_offset = (address >> 7) % 8;
    const fa::WgmmaSwizzle swizzle = swizzles[(address >> 4) % 4];
    const uint64_t desc = fa::wgmma_descriptor(address, leading, stride, swizzle, base_offset);
    REQUIRE(fa::wgmma_desc_start_address(desc) == address);
    REQUIRE(fa::wgmma_desc_leading_byte_offset(desc) == leading);
    REQUIRE(fa::wgmma_desc_stride_byte_offset(desc) == stride);
    REQUIRE(fa::wgmma_desc_base_offset(desc) == base_offset);
    REQUIRE(fa::wgmma_desc_swizzle(desc) == swizzle);
  }
  // The 4 low bits of a byte quantity are not stored.
  CHECK(fa::wgmma_desc_start_address(fa::wgmma_descriptor(0x123F, 0, 0, fa::WgmmaSwizzle::kNone)) == 0x1230);
}

TEST_CASE("wgmma descriptor: K-major 128B-swizzled tile", "[hopper][descriptor]") {
  const uint32_t tile = 0x2400;  // 1024-byte aligned
  for (int k_step = 0; k_step < 4; ++k_step) {
    const uint64_t desc = fa::wgmma_descriptor_k_major_sw128(tile, k_step);
    CHECK(fa::wgmma_desc_start_address(desc) == tile + 32u * k_step);  // 16 elements of 2 bytes
    CHECK(fa::wgmma_desc_stride_byte_offset(desc) == 1024);            // next 8-row atom
    CHECK(fa::wgmma_desc_leading_byte_offset(desc) == 16);             // unused; PTX's "assumed 1"
    CHECK(fa::wgmma_desc_base_offset(desc) == 0);
    CHECK(fa::wgmma_desc_swizzle(desc) == fa::WgmmaSwizzle::k128B);
  }
  // Advancing K moves only the start address field: adding 2 (32 bytes) to the descriptor.
  CHECK(fa::wgmma_descriptor_k_major_sw128(tile, 3) - fa::wgmma_descriptor_k_major_sw128(tile, 0) == 6);
}

TEST_CASE("128B swizzle: a bijection of whole 16-byte chunks within each atom", "[hopper][swizzle]") {
  for (int atom = 0; atom < 4; ++atom) {
    std::set<uint32_t> offsets;
    for (int r = 0; r < fa::kSwizzle128AtomRows; ++r) {
      const int row = atom * fa::kSwizzle128AtomRows + r;
      for (int byte = 0; byte < fa::kSwizzle128RowBytes; ++byte) {
        const uint32_t offset = fa::swizzle128_offset(row, byte);
        // Stays in its own atom and its own 128-byte row.
        REQUIRE(offset / fa::kSwizzle128AtomBytes == static_cast<uint32_t>(atom));
        REQUIRE(offset / fa::kSwizzle128RowBytes == static_cast<uint32_t>(row));
        // A 16-byte chunk moves as a whole: its bytes stay contiguous and in order.
        REQUIRE(offset % fa::kSwizzle128ChunkBytes ==
                static_cast<uint32_t>(byte % fa::kSwizzle128ChunkBytes));
        REQUIRE(offset - byte % 16 == fa::swizzle128_offset(row, byte - byte % 16));
        offsets.insert(offset);
      }
    }
    REQUIRE(offsets.size() == static_cast<size_t>(fa::kSwizzle128AtomBytes));  // one-to-one
  }
  // Row 0 of each atom is not moved; the pattern is chunk ^ (row % 8).
  for (int chunk = 0; chunk < 8; ++chunk) {
    CHECK(fa::swizzle128_chunk(0, chunk) == chunk);
    CHECK(fa::swizzle128_chunk(8, chunk) == chunk);
    CHECK(fa::swizzle128_chunk(13, chunk) == (chunk ^ 5));
  }
}

TEST_CASE("128B swizzle: the 8 rows of a core matrix hit all 32 banks", "[hopper][swizzle]") {
  // A core matrix is 8 rows x 16 bytes of one logical chunk; read together they should be
  // conflict-free (32 banks of 4 bytes, each bank once), which the unswizzled layout is not.
  for (int chunk = 0; chunk < 8; ++chunk) {
    std::set<int> banks;
    for (int row = 0; row < 8; ++row)
      for (int word = 0; word < 4; ++word)
        banks.insert(static_cast<int>(fa::swizzle128_offset(row, 16 * chunk + 4 * word) / 4 % 32));
    CHECK(banks.size() == 32);
  }
}

TEST_CASE("wgmma accumulator: covers 64 x N exactly once", "[hopper][accumulator]") {
  for (int n = 8; n <= 256; n += 8) {
    const int regs = fa::wgmma_acc_regs(n);
    REQUIRE(regs * fa::kWarpgroupThreads == 64 * n);
    std::vector<int> owners(64 * n, 0);
    for (int t = 0; t < fa::kWarpgroupThreads; ++t) {
      for (int i = 0; i < regs; ++i) {
        const int row = fa::wgmma_acc_row(t, i), col = fa::wgmma_acc_col(t, i);
        REQUIRE(row >= 0);
        REQUIRE(row < 64);
        REQUIRE(col >= 0);
        REQUIRE(col < n);
        ++owners[row * n + col];
        // Warp w owns rows 16w .. 16w+15.
        REQUIRE(row / 16 == t / 32);
      }
    }
    for (int count : owners) REQUIRE(count == 1);
  }
}

TEST_CASE("wgmma accumulator: registers 4j..4j+3 are an mma.sync m16n8 C fragment", "[hopper][accumulator]") {
  // So per-row code written for mma.sync fragments (the softmax's row max and sum over the 4
  // threads of a row) carries over to wgmma unchanged.
  for (int t = 0; t < fa::kWarpgroupThreads; ++t) {
    const int lane = t % 32;
    for (int j = 0; j < 32; ++j) {
      for (int c = 0; c < 4; ++c) {
        const int i = 4 * j + c;
        CHECK(fa::wgmma_acc_row(t, i) == 16 * (t / 32) + fa::mma_c_row(lane, c));
        CHECK(fa::wgmma_acc_col(t, i) == 8 * j + fa::mma_c_col(lane, c));
      }
    }
  }
  // Registers i, i+1 (i even) are neighbouring columns of one row: one 8-byte store.
  for (int t = 0; t < fa::kWarpgroupThreads; ++t) {
    for (int i = 0; i < 128; i += 2) {
      CHECK(fa::wgmma_acc_row(t, i + 1) == fa::wgmma_acc_row(t, i));
      CHECK(fa::wgmma_acc_col(t, i + 1) == fa::wgmma_acc_col(t, i) + 1);
    }
  }
}

TEST_CASE("128B swizzle panels: a bijection, whole chunks, 8 rows of a core matrix on 32 banks", "[hopper][swizzle]") {
  for (int rows : {64, 128}) {
    for (int row_bytes : {128, 256}) {
      INFO("rows " << rows << ", row bytes " << row_bytes);
      std::set<uint32_t> offsets;
      for (int row = 0; row < rows; ++row)
        for (int byte = 0; byte < row_bytes; ++byte) {
          const uint32_t offset = fa::swizzle128_panel_offset(row, byte, rows);
          REQUIRE(offset < static_cast<uint32_t>(rows * row_bytes));
          // Panel byte / 128, row `row` of it; the chunk moves as a whole.
          REQUIRE(offset / (rows * 128u) == static_cast<uint32_t>(byte / 128));
          REQUIRE(offset % (rows * 128u) / 128u == static_cast<uint32_t>(row));
          REQUIRE(offset % 16 == static_cast<uint32_t>(byte % 16));
          offsets.insert(offset);
        }
      REQUIRE(offsets.size() == static_cast<size_t>(rows * row_bytes));
      // The first panel is the one-panel layout (what the microbenchmark verified on the GPU).
      for (int row = 0; row < rows; ++row)
        for (int byte = 0; byte < 128; ++byte)
          REQUIRE(fa::swizzle128_panel_offset(row, byte, rows) == fa::swizzle128_offset(row, byte));
      // The same logical chunk of 8 consecutive rows: 8 different bank groups.
      for (int row0 = 0; row0 < rows; row0 += 8)
        for (int chunk = 0; chunk < row_bytes / 16; ++chunk) {
          std::set<int> banks;
          for (int r = 0; r < 8; ++r)
            for (int word = 0; word < 4; ++word)
              banks.insert(static_cast<int>(fa::swizzle128_panel_offset(row0 + r, 16 * chunk + 4 * word, rows) / 4 % 32));
          REQUIRE(banks.size() == 32);
        }
    }
  }
}

TEST_CASE("wgmma address model reproduces the K-major case the microbenchmark verified", "[hopper][descriptor]") {
  // wgmma_peak.cu's tiles: 64 (A) or 256 (B) rows of 128 bytes at a 1024-byte aligned address,
  // k-steps 0..3 through wgmma_descriptor_k_major_sw128. The model must read each element exactly
  // where swizzle128_offset stored it (on the H200 the products came out exact).
  const uint32_t tile = 0x2400;
  for (int k_step = 0; k_step < 4; ++k_step)
    for (int row = 0; row < 256; ++row)
      for (int k = 0; k < 16; ++k)
        REQUIRE(model_wgmma_byte_address(fa::wgmma_descriptor_k_major_sw128(tile, k_step), Major::kK, row, k) ==
                tile + fa::swizzle128_offset(row, 2 * (16 * k_step + k)));
}

TEST_CASE("wgmma K-major panel descriptors read the panel layout (Q and K at head_dim 64 and 128)", "[hopper][descriptor]") {
  const uint32_t tile = 0x8000;  // 1024-byte aligned
  // Tiles of 64 and 128 rows (Q of one and two warpgroups, K of 128 keys), 160 (K of
  // experiments_03_wide_kv's wide block) and 192 (Q of three warpgroups, hopper_09_three_warpgroups
  // on).
  for (int rows : {64, 128, 160, 192}) {
    for (int head_dim : {64, 128}) {
      INFO("rows " << rows << ", head_dim " << head_dim);
      const uint32_t panel_bytes = rows * 128u;
      // A warpgroup's 64 rows of Q start 64 rows into the tile; K's n = rows keys start at row 0.
      for (int first_row = 0; first_row + 64 <= rows; first_row += 64) {
        const uint32_t start = tile + first_row * 128u;
        for (int k_step = 0; k_step < head_dim / 16; ++k_step) {
          const uint64_t desc = fa::wgmma_descriptor_k_major_sw128_panels(start, panel_bytes, k_step);
          CHECK(fa::wgmma_desc_stride_byte_offset(desc) == 1024);
          CHECK(fa::wgmma_desc_swizzle(desc) == fa::WgmmaSwizzle::k128B);
          CHECK(fa::wgmma_desc_base_offset(desc) == 0);
          int mismatches = 0;
          for (int mn = 0; mn < rows - first_row; ++mn)
            for (int k = 0; k < 16; ++k) {
              const int col = 16 * k_step + k;
              if (model_wgmma_byte_address(desc, Major::kK, mn, k) !=
                  tile + fa::swizzle128_panel_offset(first_row + mn, 2 * col, rows))
                ++mismatches;
            }
          CHECK(mismatches == 0);
        }
      }
    }
  }
}

TEST_CASE("wgmma MN-major descriptor reads V ([key][dim], dims contiguous) as B = K x N of P V", "[hopper][descriptor]") {
  const uint32_t tile = 0x10000;
  for (int keys : {64, 128, 160}) {  // 160: experiments_03_wide_kv's wide K/V block
    for (int head_dim : {64, 128}) {
      INFO("keys " << keys << ", head_dim " << head_dim);
      const uint32_t panel_bytes = keys * 128u;
      for (int k_step = 0; k_step < keys / 16; ++k_step) {
        const uint64_t desc = fa::wgmma_descriptor_mn_major_sw128(tile, panel_bytes, k_step);
        // SBO: the next 8 keys (K); LBO: the next 64 dims (N), one panel further.
        CHECK(fa::wgmma_desc_stride_byte_offset(desc) == 1024);
        CHECK(fa::wgmma_desc_leading_byte_offset(desc) == panel_bytes);
        CHECK(fa::wgmma_desc_start_address(desc) == tile + 2048u * k_step);
        CHECK(fa::wgmma_desc_start_address(desc) % 1024 == 0);  // base offset 0 is right
        CHECK(fa::wgmma_desc_base_offset(desc) == 0);
        CHECK(fa::wgmma_desc_swizzle(desc) == fa::WgmmaSwizzle::k128B);
        int mismatches = 0;
        for (int dim = 0; dim < head_dim; ++dim)  // N
          for (int k = 0; k < 16; ++k) {          // K: key 16 k_step + k
            const int key = 16 * k_step + k;
            if (model_wgmma_byte_address(desc, Major::kMN, dim, k) !=
                tile + fa::swizzle128_panel_offset(key, 2 * dim, keys))
              ++mismatches;
          }
        CHECK(mismatches == 0);
      }
    }
  }
  // The K-major reading of the same bytes would be wrong: the major-ness is not a detail.
  const uint64_t desc = fa::wgmma_descriptor_mn_major_sw128(tile, 128 * 128, 0);
  CHECK(model_wgmma_byte_address(desc, Major::kK, 1, 0) != tile + fa::swizzle128_panel_offset(0, 2, 128));
}

TEST_CASE("wgmma register A operand: the S accumulators repacked are P's A fragment", "[hopper][accumulator]") {
  // The A map covers the 64 x 16 tile once, warp w on rows 16w .. 16w+15.
  std::vector<int> owners(64 * 16, 0);
  for (int t = 0; t < fa::kWarpgroupThreads; ++t)
    for (int e = 0; e < 8; ++e) {
      const int row = fa::wgmma_a_row(t, e), col = fa::wgmma_a_col(t, e);
      REQUIRE(row / 16 == t / 32);
      REQUIRE(col >= 0);
      REQUIRE(col < 16);
      ++owners[row * 16 + col];
      // Per warp it is mma.sync's m16n8k16 A fragment.
      CHECK(row == 16 * (t / 32) + fa::mma_a_row(t % 32, e));
      CHECK(col == fa::mma_a_col(t % 32, e));
    }
  for (int count : owners) REQUIRE(count == 1);
  // Register j of P's A fragment for k-step kk packs S accumulator entries {e, e + 1} of n-tile t
  // (p_frag_s_tile / p_frag_s_entry, as ampere_10_lane_addresses does for mma.sync); in the wgmma
  // accumulator that entry is register 4t + e. It must hold P[row][16 kk + col] for A elements 2j
  // and 2j + 1.
  for (int n = 16; n <= 256; n += 16)
    for (int t = 0; t < fa::kWarpgroupThreads; ++t)
      for (int kk = 0; kk < n / 16; ++kk)
        for (int j = 0; j < 4; ++j)
          for (int half = 0; half < 2; ++half) {
            const int acc = 4 * fa::p_frag_s_tile(kk, j) + fa::p_frag_s_entry(j) + half;
            const int e = 2 * j + half;
            REQUIRE(acc < fa::wgmma_acc_regs(n));
            REQUIRE(fa::wgmma_acc_row(t, acc) == fa::wgmma_a_row(t, e));
            REQUIRE(fa::wgmma_acc_col(t, acc) == 16 * kk + fa::wgmma_a_col(t, e));
          }
}

// TMA (hopper_encoding.h, section 7): the map's dimensions and byte strides address exactly the
// element a TensorView addresses, and the boxes a tile is loaded as land, under the copy engine's
// 128-byte swizzle (PTX ISA "Tensor copy", swizzle modes: the 16-byte chunk index within each 128-byte
// row XORed with the row's index mod 8, repeating every 1024 bytes), exactly where the panel layout
// that the wgmma descriptors read expects each element.
TEST_CASE("TMA tile geometry: strides address the TensorView's elements, boxes land as the panels", "[hopper][tma]") {
  for (int head_dim : {64, 128}) {
    for (int box_rows : {64, 128}) {
      INFO("head_dim " << head_dim << ", box rows " << box_rows);
      // A layout where every stride differs and none is the contiguous one: [batch, heads, seq, dim]
      // with padding, so that a swapped dimension or stride would show.
      const int64_t batch = 3, seq = 512, heads = 5;
      const int64_t seq_stride = head_dim + 8, head_stride = seq * seq_stride + 16,
                    batch_stride = heads * head_stride + 24;
      const fa::TmaTileGeometry g =
          fa::tma_tile_geometry(batch, seq, heads, head_dim, batch_stride, seq_stride, head_stride, 2, box_rows);
      CHECK(g.dims[0] == static_cast<uint64_t>(head_dim));
      CHECK(g.dims[1] == static_cast<uint64_t>(seq));
      CHECK(g.dims[2] == static_cast<uint64_t>(heads));
      CHECK(g.dims[3] == static_cast<uint64_t>(batch));
      for (uint64_t stride : g.strides_bytes) CHECK(stride % 16 == 0);  // the copy engine's rule
      for (int64_t b : {int64_t{0}, batch - 1})
        for (int64_t s : {int64_t{0}, int64_t{1}, seq - 1})
          for (int64_t h : {int64_t{0}, heads - 1})
            for (int64_t d : {int64_t{0}, int64_t{head_dim - 1}}) {
              const uint64_t map_bytes =
                  2 * d + s * g.strides_bytes[0] + h * g.strides_bytes[1] + b * g.strides_bytes[2];
              CHECK(map_bytes == static_cast<uint64_t>(2 * (b * batch_stride + s * seq_stride + h * head_stride + d)));
            }
      // The box: 64 elements (128 bytes, the swizzle span) by box_rows rows, one head, one batch.
      CHECK(g.box[0] * 2 == 128);
      CHECK(g.box[1] == static_cast<uint32_t>(box_rows));
      CHECK(g.box[2] == 1);
      CHECK(g.box[3] == 1);
      CHECK(g.boxes_per_tile * g.box[0] == static_cast<uint32_t>(head_dim));
      CHECK(g.box_bytes == g.box[0] * g.box[1] * 2);
      // Box p of a tile covers columns 64p.. and is written box_bytes * p after the tile's start.
      int mismatches = 0;
      for (int row = 0; row < box_rows; ++row)
        for (int col = 0; col < head_dim; ++col) {
          const int box = col / static_cast<int>(g.box[0]);
          const uint32_t linear = row * 128u + 2u * (col % g.box[0]);
          const uint32_t tma_byte = box * g.box_bytes + (linear ^ (((linear >> 7) & 7u) << 4));
          if (tma_byte != fa::swizzle128_panel_offset(row, 2 * col, box_rows)) ++mismatches;
        }
      CHECK(mismatches == 0);
    }
  }
}
