#!/usr/bin/env bash
# Call 21: the full benchmark's fp16 part at 44db310 (stages 1-24; stage 24 is new), then the
# hardening tests of stage 24 (huge tensors, numerics, determinism, invalid input).
set -o pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
FA_GIT_REV=44db310 CMAKE_CUDA_ARCHITECTURES=90 timeout 470 bash scripts/run_all.sh --part --dtypes fp16 --feature-stages newest > $L/run_all_fp16.log 2>&1
echo "run_all fp16 rc=$? $(t)"
mkdir -p $OUT/parts; cp plots/results/parts/part_fp16_*.csv $OUT/parts/
grep -c PASS $L/run_all_fp16.log; grep -E "FAIL|measured" $L/run_all_fp16.log | tail -5
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target test_gpu_hardening > $L/build_tests.log 2>&1; echo "build tests rc=$? $(t)"
FA_TEST_STAGES=24_three_warpgroups timeout $(( 585 - ($(date +%s) - T0) )) build/tests/test_gpu_hardening > $L/test_gpu_hardening_24.log 2>&1
echo "test_gpu_hardening [24] rc=$? $(t)"; tail -3 $L/test_gpu_hardening_24.log
