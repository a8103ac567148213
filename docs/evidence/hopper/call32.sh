#!/usr/bin/env bash
# Ninth session, call 32 (replaces the unrun call30.sh and call31.sh): on the tree of branch
# next/hopper-30-lazy-rescale rebased onto main. Trimmed tree (stages 23, 24, 28, 29, 30). In order of
# what matters most if the time limit cuts the call short: build; stage 30's basic GPU suite; timing
# of 23/28/29/30 in one fa_run process (10 + 100 launches, two rounds); the first GPU run of
# tools/interleaved.py (24, 29, 30 with FA2 and cuDNN, launch after launch) at head_dim 64 and 128,
# S = 4096; stage 30's other GPU suites; hardening of 29 and 30; the four sanitizers over 29 and 30.
# Everything is appended to $OUT/call32.txt as it is written.
set -o pipefail
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
LOG=$OUT/call32.txt
W=/tmp/trim32; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/
for s in 23_causal 24_three_warpgroups 28_tile_choice 29_feature_switches 30_lazy_rescale; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/configure.log 2>&1
cmake --build $W/build --parallel 16 > /tmp/build.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build.log | tee -a $LOG
FA_TEST_STAGES=30_lazy_rescale timeout 100 $W/build/tests/test_gpu_stages > /tmp/stages.log 2>&1
echo "test_gpu_stages [30] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/stages.log | tail -1)" | tee -a $LOG
R="timeout 60 $W/build/fa_run --stage 23,28,29,30 --warmup 10 --reps 100 --batch 16 --heads 32"
for round in 1 2; do
  echo "=== round $round"
  for dt in fp16 bf16; do
    $R --dtype $dt --head-dim 64 --seq 1024,2048,4096,8192
    $R --dtype $dt --head-dim 128 --seq 1024,4096
    $R --dtype $dt --head-dim 64 --seq 1024,2048,8192 --causal
  done
done 2>&1 | grep -E "^(===|[0-9][0-9]_)" | awk '{print $1,$2,$3,$6,$8,$9,$10,$13}' >> $LOG
echo "timing done $(t)" | tee -a $LOG
for dt in bf16 fp16; do for d in 64 128; do
  timeout 60 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --stages 24,29,30 --dtype $dt \
    --head-dim $d --seqs 4096 --warmup 10 --reps 150 >> $LOG 2>&1
  echo "interleaved $dt d$d rc=$? $(t)" | tee -a $LOG
done; done
for test in test_gpu_causal test_gpu_any_length test_gpu_gqa test_gpu_lse; do
  FA_TEST_STAGES=30_lazy_rescale timeout 100 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [30] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
done
FA_TEST_STAGES=29_feature_switches,30_lazy_rescale timeout 200 $W/build/tests/test_gpu_hardening > /tmp/hard.log 2>&1
echo "test_gpu_hardening [29,30] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/hard.log | tail -1)" | tee -a $LOG
grep -m10 -B2 -A8 FAILED /tmp/hard.log /tmp/test_gpu_*.log /tmp/stages.log >> $LOG
(cd $W && timeout 170 bash scripts/sanitize.sh --tool memcheck,racecheck,synccheck,initcheck --stage 29,30 \
  --fa-run build/fa_run --log-dir /tmp/sanitizer > /tmp/sanitize.log 2>&1)
echo "sanitize [29,30] rc=$? $(t): $(tail -1 /tmp/sanitize.log)" | tee -a $LOG
grep -E "FAIL|ERROR" /tmp/sanitize.log | head -10 >> $LOG
echo "done $(t)" | tee -a $LOG
grep -vE "^[0-9][0-9]_" $LOG | grep -vE "launch ms" | tail -60
