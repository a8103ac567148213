#!/usr/bin/env bash
# Call 27: two questions the full run (calls 25-26) left open, answered by timing only.
#  1. Why do identical kernels differ by up to 4% at S = 4096, head_dim 64, and why is the median
#     there 5-10% above the minimum (call 24)? Hypothesis: the clocks drop while a series runs (the
#     GPU's power management), and a 20-launch series of ~5 ms launches straddles the drop. Test:
#     every launch's time in order (--launch-times) for 200 launches of stage 24 and of cuDNN, with
#     nvidia-smi reading the SM clock, power and throttle reasons every 100 ms alongside (reading
#     only; nothing is set).
#  2. Where do stage 28's 2-4% at causal S <= 2048 go (call 24: 28 with stage 23's 128-row tile,
#     behind 23)? At head_dim 128 stages 23-28 all run 128-row tiles: time them in one process, 100
#     launches each, and see at which stage the time moves.
# Logs in one tarball under $OUT; a short summary printed last.
set -o pipefail
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 100 > $L/smi.csv 2>&1 &
SMI=$!
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_run > $L/build.log 2>&1; echo "build rc=$? $(t)"
mark() { echo "=== $(date +%H:%M:%S.%N | cut -c1-12) $*"; }
{
  for dt in bf16 fp16; do
    mark "fa_run 24 $dt d64 S=4096 warmup 5 reps 200"
    build/fa_run --stage 24 --dtype $dt --head-dim 64 --seq 4096 --warmup 5 --reps 200 --launch-times
    mark "cudnn $dt d64 S=4096 warmup 5 reps 200"
    python3 tools/torch_reference.py --backends cudnn --dtype $dt --head-dim 64 --seqs 4096 --warmup 5 \
      --reps 200 --launch-times --csv $L/cudnn_$dt.csv
    sleep 5
  done
  mark "fa_run 24 fp16 d64 S=8192 reps 60"
  build/fa_run --stage 24 --dtype fp16 --head-dim 64 --seq 8192 --warmup 5 --reps 60 --launch-times
  mark "fa_run 24 fp16 d128 S=4096 reps 120"
  build/fa_run --stage 24 --dtype fp16 --head-dim 128 --seq 4096 --warmup 5 --reps 120 --launch-times
  mark "end"
} > $L/drift.log 2>&1
echo "drift $(t)"
{
  mark "causal d128 23-28"
  build/fa_run --stage 23,24,25,26,27,28 --dtype fp16,bf16 --head-dim 128 --seq 1024,2048 --causal --warmup 10 --reps 100
  mark "causal d64 23,28"
  build/fa_run --stage 23,28 --dtype fp16,bf16 --head-dim 64 --seq 1024,2048 --causal --warmup 10 --reps 100
  mark "non-causal S=1024 23-28"
  build/fa_run --stage 23,24,25,26,27,28 --dtype fp16 --head-dim 128,64 --seq 1024 --warmup 10 --reps 100
  mark "end"
} > $L/pertile.log 2>&1
echo "pertile $(t)"
kill $SMI
tar czf $OUT/call27_logs.tgz -C /tmp logs
grep -E "^(===|2[3-8]_)" $L/drift.log | cut -c1-110; grep -E "^2[3-8]_" $L/pertile.log | awk '{print $1,$2,$3,$6,$8,$9,$10}'
echo "done $(t)"
