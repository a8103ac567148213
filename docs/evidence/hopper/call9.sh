#!/usr/bin/env bash
# Call 9 (probes, not committed as stages): stage 22's cost at S = 1024 against 21 -- 23 = 22 without
# the key mask, 24 = 22 without the row guard; the warp skip's effect -- 26 = stage 13 before it.
set -o pipefail
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_run > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -i "error" $L/build.log
for rep in 1 2; do
timeout 60 build/fa_run --stage 21,22,23,24 --dtype fp16 --head-dim all --batch 16 --heads 32 --seq 1024 --reps 30 2>&1 | grep -v "^stage"
done
timeout 60 build/fa_run --stage 13,26 --dtype fp16 --head-dim all --batch 16 --heads 32 --seq 1024,2048,4096 --causal --reps 20 2>&1 | grep -v "^stage"
timeout 60 build/fa_run --stage 11,13,26 --dtype fp16 --head-dim 64 --batch 16 --heads 32 --seq 1024,4096 --reps 20 2>&1 | grep -v "^stage"
timeout 60 build/fa_run --stage 13,26 --dtype fp16 --head-dim all --batch 16 --heads 32 --seq 2048,4096 --causal --reps 20 2>&1 | grep -v "^stage"
echo "done $(t)"
