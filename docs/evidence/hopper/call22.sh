#!/usr/bin/env bash
# Call 22: the full benchmark's bf16 part at 44db310, then compute-sanitizer (memcheck, racecheck,
# synccheck, initcheck) over stage 24 on scripts/sanitize.sh's shapes.
set -o pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
FA_GIT_REV=44db310 CMAKE_CUDA_ARCHITECTURES=90 timeout 450 bash scripts/run_all.sh --part --dtypes bf16 --feature-stages newest > $L/run_all_bf16.log 2>&1
echo "run_all bf16 rc=$? $(t)"
mkdir -p $OUT/parts; cp plots/results/parts/part_bf16_*.csv $OUT/parts/
grep -c PASS $L/run_all_bf16.log; grep -E "FAIL|measured" $L/run_all_bf16.log | tail -5
timeout $(( 585 - ($(date +%s) - T0) )) bash scripts/sanitize.sh --tool memcheck,racecheck,synccheck,initcheck --stage 24 --fa-run build/fa_run --log-dir $L/sanitizer > $L/sanitize_24.log 2>&1
echo "sanitize [24] rc=$? $(t)"; tail -8 $L/sanitize_24.log
