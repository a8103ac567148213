#!/usr/bin/env bash
# Prepared in the seventh session (branch next/hopper-25-27), run in the eighth (call24_tests_sanitize_time_25_28.txt).
# Call 24: the first GPU run of stages 25-28: build everything, the GPU suites limited to 24-27
# (stages, causal, any-length, GQA, LSE, hardening; the sanitizers over 25-27), then fa_run timing
# of 23, 24, 25 causal at head_dim 64 (the prediction: 25 at S = 2048 about 1.32x stage 24) and of
# 24, 26, 27 with and without --kv-heads 8 / --lse. Only a few files under $OUT (the device returns
# a limited number): logs in one tarball, a short summary printed last.
set -o pipefail
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -iE "error|FAILED" $L/build.log
S=24_three_warpgroups,25_balanced_pairs,26_gqa,27_lse,28_tile_choice
for test in test_gpu_stages test_gpu_causal test_gpu_any_length test_gpu_gqa test_gpu_lse test_gpu_hardening; do
  FA_TEST_STAGES=$S timeout 300 build/tests/$test > $L/$test.log 2>&1; echo "$test rc=$? $(t): $(tail -2 $L/$test.log | head -1)"
done
timeout 200 bash scripts/sanitize.sh --tool memcheck,racecheck,synccheck,initcheck --stage 25,26,27,28 --fa-run build/fa_run --log-dir $L/sanitizer > $L/sanitize.log 2>&1
echo "sanitize rc=$? $(t): $(tail -1 $L/sanitize.log)"
timeout 90 build/fa_run --stage 23,24,25,28 --dtype fp16,bf16 --head-dim 64 --batch 16 --heads 32 --seq 1024,2048,4096,8192 --causal --reps 20 2>&1 | grep -v "^stage" | tee $L/time_causal.log
timeout 60 build/fa_run --stage 24,26,27 --dtype fp16 --head-dim all --batch 16 --heads 32 --seq 1024,4096 --reps 20 2>&1 | grep -v "^stage" | tee $L/time_plain.log
timeout 60 build/fa_run --stage 26,27 --dtype fp16 --head-dim all --batch 16 --heads 32 --kv-heads 8 --seq 1024,4096 --reps 20 2>&1 | grep -v "^stage" | tee $L/time_gqa.log
timeout 60 build/fa_run --stage 27 --dtype fp16 --head-dim all --batch 16 --heads 32 --seq 1024,4096 --lse --reps 20 2>&1 | grep -v "^stage" | tee $L/time_lse.log
timeout 90 build/fa_run --stage 23,24,28 --dtype fp16,bf16 --head-dim 64 --batch 16 --heads 32 --seq 1024,2048,4096,8192 --reps 20 2>&1 | grep -v "^stage" | tee $L/time_d64.log
tar czf $OUT/call24_logs.tgz -C /tmp logs; echo "done $(t)"
