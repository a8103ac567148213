# Tests of the general-attention track (GitHub issue 12): what a stage promises by declaring a
# feature in its stage.json. Included from tests/CMakeLists.txt after fa_add_cpu_test and
# fa_add_gpu_test are defined, with include(${CMAKE_CURRENT_SOURCE_DIR}/general.cmake).
#
#   ctest --test-dir build -R any_length --output-on-failure

# Validation, no GPU: a stage that declares any_length accepts every length, the others reject what
# is not a multiple of their tiles; the grid limit counts the partial query block.
fa_add_cpu_test(test_any_length_validation test_any_length_validation.cpp)

# Every stage that declares any_length, on lengths from 1 to 4097 (seq_q and seq_kv each), batch x
# heads 1 and 3 among them (odd tile counts), against the fp64 reference; skipped without a GPU.
fa_add_gpu_test(test_gpu_any_length test_gpu_any_length.cpp)

# Causal masking, no GPU: the reference's rule on answers known by hand, the launcher contract
# (only a stage that declares "causal" accepts it) and the FLOPs a causal problem counts.
fa_add_cpu_test(test_causal_reference test_causal_reference.cpp)

# Every stage that declares causal, seq_q == seq_kv and both ways apart (rows that see no key
# included), with scores that would let a key above the diagonal take its row if it leaked, at
# batch x heads 1, 3 (odd tile counts) and up to 276; every other stage rejects causal and writes
# nothing. Skipped without a GPU.
fa_add_gpu_test(test_gpu_causal test_gpu_causal.cpp)

# Grouped-query attention, no GPU: which key/value head a query head reads, the reference with
# fewer key/value heads (equal to multi-head attention on K and V with each head repeated), and the
# launcher contract for kv_heads.
fa_add_cpu_test(test_gqa_reference test_gqa_reference.cpp)

# Every stage that declares gqa, with 8 query heads and 8, 4, 2 or 1 key/value heads, groups of 3
# (6:2, 24:8) and 32:1, any length, causal and not; V set to each head's number, so the output names
# the head a row read; several tiles per persistent block (batch 4, 32 and 48 heads) and the 192-row
# tile; every other stage rejects kv_heads != heads and writes nothing. Skipped without a GPU.
fa_add_gpu_test(test_gpu_gqa test_gpu_gqa.cpp)

# The log-sum-exp output, no GPU: the reference's LSE on answers known by hand, the LSE check
# (checker.h: what passes and what fails) and the launcher contract for AttentionParams::lse.
fa_add_cpu_test(test_lse_reference test_lse_reference.cpp)

# Every stage that declares lse, any length, causal (rows with no key: -inf) and not, with GQA
# (groups of 3 too), packed and padded LSE buffers; q = 0 (each LSE is log(keys seen)), large scores,
# softmax scales 0.5 and 0.05, several tiles per persistent block and the 192-row tile; every other
# stage rejects the pointer and writes nothing. Skipped without a GPU.
fa_add_gpu_test(test_gpu_lse test_gpu_lse.cpp)

# ALiBi, no GPU: the bias and its bottom-right alignment, the reference with it on answers computed
# by hand (q = 0: the weights are exp(-slope |distance|)), per-(batch, head) slopes, the harness's
# slopes, and the launcher contract for AttentionParams::alibi.
fa_add_cpu_test(test_alibi_reference test_alibi_reference.cpp)

# Every stage that declares alibi, slopes per head and per (batch, head), causal and not, any
# length, with the LSE; q = 0 with slope 8 (each row on its diagonal key), negative slopes, GQA,
# softmax scales 0.5 and 0.05; every other stage rejects slopes and writes nothing. Skipped without
# a GPU.
fa_add_gpu_test(test_gpu_alibi test_gpu_alibi.cpp)

# The 192-row tile's cases of test_gpu_gqa and test_gpu_lse assert that the launcher takes that tile
# (general_stages.h: check_192_row_tile): both programs compile every stage's schedule.h through the
# generated table of tests/schedules.h (schedule_sources and schedule_table, from tests/CMakeLists.txt),
# the same header each launcher calls.
foreach(program test_gpu_gqa test_gpu_lse)
  target_sources(${program} PRIVATE ${schedule_sources} ${schedule_table})
  target_include_directories(${program} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(${program} PRIVATE FA_TEST_SCHEDULES=1)
endforeach()
