// Every stage's shared-memory tile layout, for tests/test_smem_layout.cpp.
//
// Each stage's smem_layout.h defines tile_offset() in namespace FA_STAGE_NAMESPACE. CMake generates
// one small translation unit per stage in FA_STAGES that includes it under its own namespace and
// registers it here. (One translation unit per stage, not one for all: ampere_04 to ampere_08 share
// a byte-identical smem_layout.h, and GCC's #pragma once treats identical files with the same
// modification time as one file, so later includes would be silently skipped.)
#pragma once

namespace smem_layouts {

using TileOffsetFn = int (*)(int row, int col, int row_elems);

struct StageLayout {
  const char* stage;  // folder name, e.g. "ampere_04_swizzle"
  TileOffsetFn tile_offset;
  int ldmatrix_conflict_ways;  // the layout's declared kLdmatrixConflictWays (1 or 8)
  // The layout's kTileInBoxes: true where the tile is TMA boxes of 64 rows x 64 columns, each a
  // contiguous 8 KB (experiments_01_tma_store on: O leaves through TMA stores); false (the default,
  // for stages whose smem_layout.h does not declare it) for rows of row_elems elements one after
  // the other.
  bool tile_in_boxes;
};

// The default of kTileInBoxes, for the layouts that do not declare it. The generated translation
// unit makes it visible in the stage's namespace through a using-directive: a qualified name finds
// the stage's own declaration first, and this one only where the stage has none.
namespace defaults {
constexpr bool kTileInBoxes = false;
}

// Generated from FA_STAGES (tests/CMakeLists.txt), in registry order.
extern const StageLayout* const kStageLayouts[];
extern const int kStageLayoutCount;

}  // namespace smem_layouts
