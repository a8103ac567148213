# Tests of the backward track (GitHub issue 42). Included from tests/CMakeLists.txt after
# fa_add_cpu_test and fa_add_gpu_test are defined, with include(${CMAKE_CURRENT_SOURCE_DIR}/backward.cmake).
#
#   ctest --test-dir build -R backward --output-on-failure

# The backward's algebra, no GPU: the fp64 reference's dQ, dK, dV against central finite differences
# of L = sum(dO * O) (seq_q != seq_kv, causal rows that see no key, grouped-query attention), D both
# ways, the gradient check's rule, and every backward launcher's validation (common/backward.h).
fa_add_cpu_test(test_backward_reference test_backward_reference.cpp)

# Every stage with a backward launcher: the forward (ampere_14_lse's kernel, with the LSE) and then
# the backward on the GPU, dQ, dK and dV against the fp64 reference with FlashAttention's rule
# (checker.h: check_gradient), outputs poisoned before every launch; batch and heads > 1, both
# dtypes and head dims, seq_q != seq_kv, the mixed layout. Skipped without a GPU.
fa_add_gpu_test(test_gpu_backward test_gpu_backward.cpp)
