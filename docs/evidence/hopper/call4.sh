#!/usr/bin/env bash
set -o pipefail
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_run > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -i "error" $L/build.log
timeout 60 build/fa_run --no-time --stage 21 --dtype all --head-dim all --layout mixed --batch 1 --heads 3 --seq 256 --seq-kv 384 | grep -c PASS
timeout 60 build/fa_run --no-time --stage 21 --dtype all --head-dim all --layout mixed --batch 4 --heads 40 --seq 128 --seq-kv 128 | grep -c PASS
timeout 60 build/fa_run --no-time --stage 21 --dtype all --head-dim all --batch 3 --heads 100 --seq 384 --seq-kv 640 | grep -c PASS
echo "timing $(t)"
timeout 200 build/fa_run --stage 19,20,21 --dtype fp16 --head-dim 128,64 --seq 1024,2048,4096,8192 > $L/time.log 2>&1; echo "time rc=$? $(t)"
for st in 19 20; do
timeout 60 ncu --clock-control none -k regex:attention_kernel -c 1 --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum,sm__cycles_active.avg \
  build/fa_run --stage $st --dtype fp16 --head-dim 128 --seq 8192 --batch 16 --heads 32 --warmup 0 --reps 1 > $L/ncu_mem_$st.log 2>&1; echo "ncu $st rc=$? $(t)"
grep -E "dram__bytes|hit_rate|duration|cycles_active" $L/ncu_mem_$st.log
done
tar czf $OUT/logs4.tgz -C /tmp logs
grep -E "^(19|20|21)_" $L/time.log | cut -c1-120
