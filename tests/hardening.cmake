# Hardening tests (GitHub issue "Hardening every stage"). Included from tests/CMakeLists.txt with
# include(${CMAKE_CURRENT_SOURCE_DIR}/hardening.cmake OPTIONAL), after fa_add_gpu_test is defined.
#
#   ctest --test-dir build -L hardening --output-on-failure    huge tensors, numerics, NaN/Inf,
#                                                               determinism, invalid inputs
#   ctest --test-dir build -L sanitizer --output-on-failure    compute-sanitizer: memcheck,
#                                                               racecheck, synccheck, initcheck
#
# Both are GPU tests (label gpu): where there is nothing to run on (no CUDA device, or no NVIDIA
# driver) they exit with 77 and CTest reports them as skipped; any other CUDA error fails them. The
# sanitizer tests are also skipped when there is no compute-sanitizer at all; one that is there but
# does not run fails them.

# ---- test_gpu_hardening: one Catch2 program, every registered stage -------------------------------
fa_add_gpu_test(test_gpu_hardening test_gpu_hardening.cpp)
# LABELS replaces the list that fa_add_gpu_test set, so gpu is repeated here. The huge problems
# take ~9 GB of GPU and host memory each and the checker uses every core: any other test that is
# as heavy can take the same RESOURCE_LOCK, and CTest will not run the two at once.
set_tests_properties(test_gpu_hardening PROPERTIES
  LABELS "gpu;hardening"
  TIMEOUT 1200
  RESOURCE_LOCK fa_gpu_large)

# ---- compute-sanitizer on the runner, one CTest test per tool -------------------------------------
# scripts/sanitize.sh finds compute-sanitizer itself (COMPUTE_SANITIZER, PATH, the CUDA toolkit
# folders); the one next to this build's nvcc is handed to it first.
find_program(FA_COMPUTE_SANITIZER compute-sanitizer
  HINTS ${CUDAToolkit_BIN_DIR} ENV CUDA_HOME ENV CUDA_PATH /usr/local/cuda/bin
  PATH_SUFFIXES bin)
find_program(FA_BASH bash)
if(FA_BASH)
  foreach(tool memcheck racecheck synccheck initcheck)
    add_test(NAME sanitizer_${tool}
      COMMAND ${FA_BASH} ${PROJECT_SOURCE_DIR}/scripts/sanitize.sh
              --tool ${tool}
              --fa-run $<TARGET_FILE:fa_run>
              --log-dir ${CMAKE_CURRENT_BINARY_DIR}/sanitizer)
    # One sanitized process at a time on the GPU (RESOURCE_LOCK), and generous time: racecheck
    # instruments every shared-memory access, and each tool runs the runner on every shape
    # scripts/sanitize.sh lists (two for every stage, five more for the general-attention stages).
    set_tests_properties(sanitizer_${tool} PROPERTIES
      LABELS "gpu;sanitizer"
      SKIP_RETURN_CODE 77
      TIMEOUT 1800
      RESOURCE_LOCK fa_gpu_sanitizer)
    if(FA_COMPUTE_SANITIZER)
      set_property(TEST sanitizer_${tool} APPEND PROPERTY ENVIRONMENT
        "COMPUTE_SANITIZER=${FA_COMPUTE_SANITIZER}")
    endif()
  endforeach()
else()
  message(WARNING "bash not found: the compute-sanitizer tests (scripts/sanitize.sh) are not registered")
endif()
