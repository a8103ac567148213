#!/usr/bin/env bash
set -o pipefail
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_run test_gpu_stages test_gpu_hardening > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m3 -i error $L/build.log
FA_TEST_STAGES=20_persistent,21_pingpong timeout 30 build/tests/test_gpu_stages "~[multi_gpu]" > $L/stages.log 2>&1; echo "test_gpu_stages 20,21 rc=$? $(t)"; tail -1 $L/stages.log
timeout 20 build/fa_run --no-time --stage 21 --dtype all --head-dim all --layout mixed --batch 4 --heads 40 --seq 128 --seq-kv 128 > $L/tiles1.log 2>&1; echo "1-block tiles rc=$? pass=$(grep -c PASS $L/tiles1.log)"
for tool in memcheck synccheck racecheck; do
timeout 30 compute-sanitizer --tool $tool build/fa_run --no-time --stage 20,21 --dtype fp16,bf16 --head-dim all --layout mixed --batch 1 --heads 2 --seq 256 --seq-kv 384 > $L/$tool.log 2>&1; echo "$tool 20,21 rc=$? pass=$(grep -c PASS $L/$tool.log) $(tail -1 $L/$tool.log)"
done
timeout 60 build/fa_run --stage 20,21 --dtype fp16 --head-dim 128,64 --seq 1024,2048,4096,8192 --reps 10 > $L/time.log 2>&1; echo "time rc=$? $(t)"
FA_TEST_STAGES=21_pingpong timeout 70 build/tests/test_gpu_hardening > $L/hard.log 2>&1; echo "hardening 21 rc=$? $(t)"; tail -1 $L/hard.log
tar czf $OUT/logs7.tgz -C /tmp logs
grep -E "^(20|21)_" $L/time.log | awk '{print $1, $3, $6, $10}'
