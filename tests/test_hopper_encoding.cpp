// The Hopper encodings of common/hopper_encoding.h, checked on the host:
//   - the wgmma matrix descriptor: every field round-trips and lands in exactly the bits the PTX
//     ISA's "Matrix Descriptor Format" gives it, and nothing else is set;
//   - the 128-byte swizzle: a bijection within each 1024-byte atom that moves whole 16-byte chunks
//     inside their own row, and spreads the 8 rows of a core matrix over all 32 banks;
//   - the wgmma m64nNk16 accumulator map: covers the 64 x N tile exactly once for every N, each
//     warp owns 16 rows, and each n8 slice of a warp is an mma.sync m16n8 C fragment.
// The GPU check of the same encodings is the wgmma microbenchmark's tile check
// (tools/microbench/wgmma_peak.cu, run by scripts/microbench.sh).
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
