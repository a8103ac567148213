# The Python package (python/flash_stages) and its examples. Included from tests/CMakeLists.txt.
#
#   test_python_args      the argument checks and the stage choice, with stand-in tensors, and the
#                         library's loading and errors: no PyTorch, no GPU (label cpu)
#   test_python_gpu       flash_stages.attention against an fp64 reference and PyTorch, every stage
#                         by name, torch.compile, streams, errors (label gpu)
#   example_gpt2_generate, example_llama_generate
#                         the transformers examples: the same greedy tokens as sdpa (label gpu)
#   example_gpt2_train_step
#                         one training step through the kernels' forward and backward: the loss
#                         and every gradient as close to sdpa's as 16-bit arithmetic allows (label gpu)
#
# The GPU ones exit 77, reported skipped, where PyTorch, a CUDA GPU or (the examples) transformers
# is missing, and the training step where the library has no backward stage with "causal". All of
# them load this build's libfa_capi.so (FLASH_STAGES_LIB).

find_package(Python3 COMPONENTS Interpreter QUIET)
if(NOT Python3_Interpreter_FOUND)
  message(STATUS "python3 not found: the Python package's tests are not registered")
  return()
endif()

set(fa_python_env "FLASH_STAGES_LIB=$<TARGET_FILE:fa_capi>")

add_test(NAME test_python_args
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_python_args.py $<TARGET_FILE:fa_capi>)
set_tests_properties(test_python_args PROPERTIES LABELS cpu ENVIRONMENT "${fa_python_env}")

add_test(NAME test_python_gpu COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_python_gpu.py)
set_tests_properties(test_python_gpu PROPERTIES
  LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900 ENVIRONMENT "${fa_python_env}")

foreach(example gpt2 llama)
  add_test(NAME example_${example}_generate
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples/${example}_generate.py)
  set_tests_properties(example_${example}_generate PROPERTIES
    LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900 ENVIRONMENT "${fa_python_env}")
endforeach()

add_test(NAME example_gpt2_train_step COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/examples/gpt2_train_step.py)
set_tests_properties(example_gpt2_train_step PROPERTIES
  LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900 ENVIRONMENT "${fa_python_env}")
