// The list of stages that a program was linked with. The list itself is FA_STAGES in CMakeLists.txt,
// read from the folders stages/<track>/NN_name/ (adding a stage is adding its folder); CMake generates
// the definition of registered_stages() for each program, so a single-stage runner links only its own kernel.
#pragma once

#include <string>
#include <vector>

#include "params.h"

namespace fa {

const std::vector<const StageInfo*>& registered_stages();

// nullptr if no stage of that id (ampere_04_swizzle) or track and number (ampere_04) was linked in.
const StageInfo* find_stage(const std::string& id_or_track_number);

}  // namespace fa
