#!/usr/bin/env bash
# Call 28: where do stage 28's 2-3% against stage 23 go at head_dim 64 with the same 128-row tile
# (call 27)? Leave-one-out probes, uncommitted copies of stage 28 (stages/9x_probe_*, removed after
# the call): 91 without the tile-order rotation of stage 25, 92 without the group-head division of
# stage 26 (kv_head = head), 93 without the LSE of stage 27 (no LSE pointer), 94 without all three
# (its SASS is stage 23's size: 3388 instructions against 3382; 28 has 3696). Built in a trimmed
# tree (stages 23, 28, 91-94 only) to save device time; every stage timed twice, 100 launches each.
set -o pipefail
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
W=/tmp/trim; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests $W/
cp -r stages/23_causal stages/28_tile_choice stages/9[1-4]_probe_* $W/stages/
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFA_BUILD_TESTS=OFF > /tmp/configure.log 2>&1
cmake --build $W/build --parallel 16 --target fa_run > /tmp/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -E "error|FAILED" /tmp/build.log
R="$W/build/fa_run --stage 23,28,91,92,93,94 --warmup 10 --reps 100"
for round in 1 2; do
  echo "=== round $round"
  $R --dtype fp16 --head-dim 64 --seq 1024,2048 --causal
  $R --dtype fp16 --head-dim 64 --seq 1024
  $R --dtype fp16 --head-dim 128 --seq 1024 --causal
  $R --dtype fp16 --head-dim 128 --seq 1024
done 2>&1 | grep -E "^(===|[0-9][0-9]_)" | awk '{print $1,$2,$3,$6,$7,$8,$9,$10}' | tee $OUT/call28_probes.txt
echo "done $(t)"
