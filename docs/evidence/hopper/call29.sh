#!/usr/bin/env bash
# Call 29: stage 29 (GQA and the LSE as a compile-time switch) against stages 23 and 28 with the
# same tiles, in one process, twice (call 28's shapes), then its GPU suites (stages, causal,
# any-length, GQA, LSE, hardening: both instantiations, the lean one without kv_heads != heads or
# an LSE, the general one with them). Trimmed tree (stages 23, 28, 29) to fit the session's last
# device minutes; the log goes to $OUT as it is written, so a timeout still returns it.
set -o pipefail
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
LOG=$OUT/call29.txt
W=/tmp/trim29; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests $W/; cp -r .deps/include $W/.deps/
cp -r stages/23_causal stages/28_tile_choice stages/29_feature_switches $W/stages/
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/configure.log 2>&1
cmake --build $W/build --parallel 16 --target fa_run > /tmp/build.log 2>&1; echo "build fa_run rc=$? $(t)" | tee -a $LOG
R="$W/build/fa_run --stage 23,28,29 --warmup 10 --reps 100"
for round in 1 2; do
  echo "=== round $round"
  $R --dtype fp16 --head-dim 64 --seq 1024,2048 --causal
  $R --dtype fp16 --head-dim 64 --seq 1024
  $R --dtype fp16 --head-dim 128 --seq 1024 --causal
  $R --dtype fp16 --head-dim 128 --seq 1024
done 2>&1 | grep -E "^(===|[0-9][0-9]_)" | awk '{print $1,$2,$3,$6,$7,$8,$9,$10}' >> $LOG
echo "timing done $(t)" | tee -a $LOG
cmake --build $W/build --parallel 16 > /tmp/build_tests.log 2>&1; echo "build tests rc=$? $(t)" | tee -a $LOG
for test in test_gpu_stages test_gpu_gqa test_gpu_lse test_gpu_causal test_gpu_any_length test_gpu_hardening; do
  FA_TEST_STAGES=29_feature_switches timeout 60 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
done
cat $LOG | grep -E "^(2[389]_|===)" | tail -32
