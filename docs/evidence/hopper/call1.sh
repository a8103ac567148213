#!/usr/bin/env bash
# Call 1: stage 17 (TMA ring) correctness, sanitizer, speed against 12/FA2/cuDNN, and an ncu look at 12 and 17.
set -o pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_run test_gpu_stages test_gpu_hardening > $L/build.log 2>&1; echo "build rc=$? $(t)"
tail -5 $L/build.log
FA_TEST_STAGES=17_tma_ring timeout 150 build/tests/test_gpu_stages "~[multi_gpu]" > $L/stages17.log 2>&1; echo "test_gpu_stages 17 rc=$? $(t)"; tail -4 $L/stages17.log
FA_TEST_STAGES=17_tma_ring timeout 200 build/tests/test_gpu_hardening > $L/hard17.log 2>&1; echo "hardening 17 rc=$? $(t)"; tail -4 $L/hard17.log
timeout 120 compute-sanitizer --tool memcheck build/fa_run --no-time --stage 17 --dtype all --head-dim all --layout mixed --batch 2 --heads 3 --seq 256 --seq-kv 384 > $L/memcheck17.log 2>&1; echo "memcheck rc=$? $(t)"; tail -3 $L/memcheck17.log
timeout 200 python3 tools/bench.py --stages 10,12,17 --out-dir /tmp/q --no-readme --no-plots --no-docs > $L/bench.log 2>&1; echo "bench rc=$? $(t)"
for st in 12_wgmma 17_tma_ring; do
timeout 90 ncu --clock-control none -k regex:attention_kernel -c 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_issue_stalled_barrier,smsp__average_warp_latency_issue_stalled_long_scoreboard \
  build/fa_run --stage $st --dtype fp16 --head-dim 128 --seq 4096 --batch 16 --heads 32 --warmup 0 --reps 1 > $L/ncu_$st.log 2>&1; echo "ncu $st rc=$? $(t)"
done
cp /tmp/q/latest.csv $OUT/bench1.csv 2>/dev/null
tar czf $OUT/logs1.tgz -C /tmp logs
grep -E "stage|fa2|cudnn|impl" /tmp/q/latest.csv | awk -F, '{print $1","$2","$3","$6","$10","$NF}' | head -5
python3 - <<'PY'
import csv
rows=list(csv.DictReader(l for l in open('/tmp/q/latest.csv') if not l.startswith('#')))
print(list(rows[0].keys()))
for r in rows:
    print(r.get('impl'), r.get('dtype'), r.get('head_dim'), r.get('seq_q'), r.get('tflops'), r.get('pct_fa2') or r.get('pct_of_fa2'), r.get('pct_cudnn') or r.get('pct_of_cudnn'))
PY
