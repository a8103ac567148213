#!/usr/bin/env bash
# Call 16: the full benchmark's fp16 part at a127911 (stages 1-23; stage 23 and the loop split of 13-16 are new).
set -o pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
FA_GIT_REV=a127911 CMAKE_CUDA_ARCHITECTURES=90 timeout 560 bash scripts/run_all.sh --part --dtypes fp16 --feature-stages newest > $OUT/run_all_fp16.log 2>&1
echo "run_all fp16 rc=$? $(t)"
mkdir -p $OUT/parts; cp plots/results/parts/part_fp16_*.csv $OUT/parts/
grep -c PASS $OUT/run_all_fp16.log; grep -E "FAIL|measured" $OUT/run_all_fp16.log | tail -5
