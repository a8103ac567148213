#!/usr/bin/env bash
# NOT RUN YET: prepared in the eighth session (branch next/hopper-30-lazy-rescale).
# Call 31: the first GPU run of stage 30 (lazy rescaling). Trimmed tree (stages 23, 28, 29, 30) to
# save device time. First the GPU suites over 30 (stages, causal, any-length, GQA, LSE, hardening:
# the NaN/Inf propagation and huge-score cases matter most for a changed softmax), then the four
# sanitizers, then stage 30 against 29 in one process at both head dims (fa_run, 10 + 100 launches,
# twice: medians and minima), then 24, 29, 30 with FA2 and cuDNN through tools/interleaved.py at
# head_dim 64, S = 4096 (the shape issue 11 misses by median). Logs go to $OUT as they are written.
set -o pipefail
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
LOG=$OUT/call31.txt
W=/tmp/trim31; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/
cp -r stages/23_causal stages/24_three_warpgroups stages/28_tile_choice stages/29_feature_switches stages/30_lazy_rescale $W/stages/
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/configure.log 2>&1
cmake --build $W/build --parallel 16 > /tmp/build.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build.log | tee -a $LOG
for test in test_gpu_stages test_gpu_causal test_gpu_any_length test_gpu_gqa test_gpu_lse test_gpu_hardening; do
  FA_TEST_STAGES=30_lazy_rescale timeout 200 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
done
(cd $W && timeout 150 bash scripts/sanitize.sh --tool memcheck,racecheck,synccheck,initcheck --stage 30 \
  --fa-run build/fa_run --log-dir /tmp/sanitizer > /tmp/sanitize.log 2>&1)
echo "sanitize [30] rc=$? $(t): $(tail -1 /tmp/sanitize.log)" | tee -a $LOG
R="$W/build/fa_run --stage 23,28,29,30 --warmup 10 --reps 100"
for round in 1 2; do
  echo "=== round $round"
  for dt in fp16 bf16; do
    $R --dtype $dt --head-dim 64 --seq 1024,2048,4096,8192
    $R --dtype $dt --head-dim 128 --seq 1024,4096
    $R --dtype $dt --head-dim 64 --seq 1024,2048,8192 --causal
  done
done 2>&1 | grep -E "^(===|[0-9][0-9]_)" | awk '{print $1,$2,$3,$6,$7,$8,$9,$10}' >> $LOG
echo "timing done $(t)" | tee -a $LOG
for dt in bf16 fp16; do
  timeout 90 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --stages 24,29,30 --dtype $dt \
    --head-dim 64 --seqs 4096 --warmup 10 --reps 200 >> $LOG 2>&1
  echo "interleaved $dt rc=$? $(t)" | tee -a $LOG
done
grep -vE "^[0-9][0-9]_.* (64|128) [0-9]+ [0-9]+ [0-9.]+ [0-9.]+ [0-9.]+$" $LOG | tail -30
