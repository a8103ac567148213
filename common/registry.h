// The list of stages that a program was linked with. The list itself is the FA_STAGES variable in
// CMakeLists.txt (adding a stage is one line there); CMake generates the definition of
// registered_stages() for each program, so a single-stage runner links only its own kernel.
#pragma once

#include <string>
#include <vector>

#include "params.h"

namespace fa {

const std::vector<const StageInfo*>& registered_stages();

// nullptr if no stage of that name (or "NN" number prefix, e.g. "04") was linked in.
const StageInfo* find_stage(const std::string& name_or_number);

}  // namespace fa
