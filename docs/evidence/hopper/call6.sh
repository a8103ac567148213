#!/usr/bin/env bash
set -o pipefail
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
nvcc -gencode=arch=compute_90a,code=sm_90a -o /tmp/probe .deps/probe/mbarrier_race_probe.cu && compute-sanitizer --tool racecheck /tmp/probe > $L/probe.log 2>&1; echo "probe rc=$?"; cat $L/probe.log | tail -6
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_run test_gpu_hardening > $L/build.log 2>&1; echo "build rc=$? $(t)"
timeout 25 ncu --clock-control none -k regex:attention_kernel -c 1 --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \
  build/fa_run --stage 20 --dtype fp16 --head-dim 128 --seq 8192 --batch 16 --heads 32 --warmup 0 --reps 1 > $L/ncu_mem_20.log 2>&1; echo "ncu 20 rc=$? $(t)"; grep -E "dram__bytes|hit_rate|duration" $L/ncu_mem_20.log
timeout 150 build/fa_run --stage 17,19,20,21,22 --dtype fp16 --head-dim 128,64 --seq 1024,2048,4096,8192 > $L/time.log 2>&1; echo "time rc=$? $(t)"
FA_TEST_STAGES=14_gqa,15_lse timeout 150 build/tests/test_gpu_hardening > $L/hard_14_15.log 2>&1; echo "hardening 14,15 rc=$? $(t)"; tail -2 $L/hard_14_15.log
tar czf $OUT/logs6.tgz -C /tmp logs
grep -E "^(17|19|20|21|22)_" $L/time.log | awk '{print $1, $3, $6, $10}'
