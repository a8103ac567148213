#!/usr/bin/env bash
# Call 11: the full benchmark, bf16 part (scripts/run_all.sh --part), after a correctness check of stage 22.
set -o pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -i "error" $L/build.log
FA_GIT_REV=bb00a1b CMAKE_CUDA_ARCHITECTURES=90 timeout 500 bash scripts/run_all.sh --part --dtypes bf16 --feature-stages newest > $L/run_all.log 2>&1; echo "run_all bf16 rc=$? $(t)"; tail -4 $L/run_all.log
mkdir -p $OUT/parts; cp plots/results/parts/*.csv $OUT/parts/ 2>/dev/null; ls $OUT/parts
tar czf $OUT/logs11.tgz -C /tmp logs
