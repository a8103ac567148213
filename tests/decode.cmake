# Tests of the decoding track (GitHub issue 40). Included from tests/CMakeLists.txt after
# fa_add_cpu_test and fa_add_gpu_test are defined, with include(${CMAKE_CURRENT_SOURCE_DIR}/decode.cmake).
#
#   ctest --test-dir build -R "split_kv|gqa_packing|decode" --output-on-failure

# Split-KV's algebra, no GPU: stages/decode/01_split_kv/split_kv.h (the functions the kernels call)
# on the CPU. The merge of any partition of a row's keys equals the fp64 softmax of the whole row,
# with empty splits, all-masked splits, rows no split sees and NaN; which K/V blocks each split
# takes; the split-count heuristic.
fa_add_cpu_test(test_split_kv_combine test_split_kv_combine.cpp)

# GQA packing's index arithmetic, no GPU: stages/decode/02_gqa_packing/gqa_packing.h on the CPU. The
# division by the group as a multiplication, exact wherever the kernel uses it; the rows of every
# tile, decoded as the kernel decodes them, are each (batch, head, token) once, in its own K/V
# head's tile, and come back from the split workspace to the same place; the causal test without a
# division; where the launcher packs.
fa_add_cpu_test(test_gqa_packing test_gqa_packing.cpp)

# Every stage that declares split_kv at decoding shapes (seq_q 1..16, seq_kv 1..16384) with every
# kind of split count forced (1, 2, 3, 7, 64, more than the K/V blocks) and the stage's own choice,
# O and the LSE against the fp64 reference: causal (rows and whole splits that see no key), GQA
# 32:8 and MQA 32:1, the mixed layout, two streams at once; every other stage rejects num_splits.
# GQA packing: groups of 1 to 32 query heads at seq_q 1 to 16, causal, groups that do not divide the
# tile, every (head, token) row attending to a key of its own. Per-sequence key lengths
# (decode_03_seqlens_k on; tag [seqlens_k]): lengths 0, 1, 63, 64, 65 and longer mixed in one batch,
# causal, GQA packed, forced split counts, the LSE, out-of-range lengths, each sequence against the
# fp64 reference of its own length; every other stage rejects seqlens_k. A paged KV cache
# (decode_04_paged_kv on; tag [paged_kv]): pages of 16, 48, 64, 80 and 256 rows shuffled in the pool, NaN in
# every pool row that holds no key, mixed lengths with 0, causal at seq_q 1 and 8, GQA packed, forced
# split counts, the LSE, against the fp64 reference on each sequence's gathered keys. Skipped without
# a GPU.
fa_add_gpu_test(test_gpu_decode test_gpu_decode.cpp)
