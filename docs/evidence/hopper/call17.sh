#!/usr/bin/env bash
# Call 17: the full benchmark's bf16 part at a127911 (same build as call 16, on the same machine).
set -o pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
FA_GIT_REV=a127911 CMAKE_CUDA_ARCHITECTURES=90 timeout 560 bash scripts/run_all.sh --part --dtypes bf16 --feature-stages newest > $OUT/run_all_bf16.log 2>&1
echo "run_all bf16 rc=$? $(t)"
mkdir -p $OUT/parts; cp plots/results/parts/part_bf16_*.csv $OUT/parts/
grep -c PASS $OUT/run_all_bf16.log; grep -E "FAIL|measured" $OUT/run_all_bf16.log | tail -5
