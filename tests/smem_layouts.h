// Every stage's shared-memory tile layout, for tests/test_smem_layout.cpp.
//
// Each stage's smem_layout.h defines tile_offset() in namespace FA_STAGE_NAMESPACE. CMake generates
// one small translation unit per stage in FA_STAGES that includes it under its own namespace and
// registers it here. (One translation unit per stage, not one for all: stages 4-8 share a
// byte-identical smem_layout.h, and GCC's #pragma once treats identical files with the same
// modification time as one file, so later includes would be silently skipped.)
#pragma once

namespace smem_layouts {

using TileOffsetFn = int (*)(int row, int col, int row_elems);

struct StageLayout {
  const char* stage;  // folder name, e.g. "04_swizzle"
  TileOffsetFn tile_offset;
  int ldmatrix_conflict_ways;  // the layout's declared kLdmatrixConflictWays (1 or 8)
};

// Generated from FA_STAGES (tests/CMakeLists.txt), in registry order.
extern const StageLayout* const kStageLayouts[];
extern const int kStageLayoutCount;

}  // namespace smem_layouts
