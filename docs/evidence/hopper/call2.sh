#!/usr/bin/env bash
set -o pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_run test_gpu_stages test_gpu_hardening > $L/build.log 2>&1; echo "build rc=$? $(t)"
for st in 18_warp_specialized 19_overlap; do
FA_TEST_STAGES=$st timeout 100 build/tests/test_gpu_stages "~[multi_gpu]" > $L/stages_$st.log 2>&1; echo "test_gpu_stages $st rc=$? $(t)"; tail -2 $L/stages_$st.log
FA_TEST_STAGES=$st timeout 100 build/tests/test_gpu_hardening > $L/hard_$st.log 2>&1; echo "hardening $st rc=$? $(t)"; tail -2 $L/hard_$st.log
done
for tool in memcheck synccheck racecheck; do
timeout 100 compute-sanitizer --tool $tool build/fa_run --no-time --stage 17,18,19 --dtype fp16,bf16 --head-dim all --layout mixed --batch 1 --heads 2 --seq 256 --seq-kv 384 > $L/$tool.log 2>&1; echo "$tool rc=$? $(t)"; grep -c PASS $L/$tool.log; tail -1 $L/$tool.log
done
timeout 150 python3 tools/bench.py --stages 17,18,19 --dtypes fp16 --out-dir /tmp/q --no-readme --no-plots --no-docs > $L/bench.log 2>&1; echo "bench rc=$? $(t)"
timeout 60 ncu --clock-control none -k regex:attention_kernel -c 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats \
  build/fa_run --stage 19 --dtype fp16 --head-dim 128 --seq 4096 --batch 16 --heads 32 --warmup 0 --reps 1 > $L/ncu_19.log 2>&1; echo "ncu rc=$? $(t)"
cp /tmp/q/latest.csv $OUT/bench2.csv 2>/dev/null
tar czf $OUT/logs2.tgz -C /tmp logs
python3 - <<'PY'
import csv
rows=list(csv.DictReader(l for l in open('/tmp/q/latest.csv') if not l.startswith('#')))
for r in rows:
    print(r.get('impl'), r.get('dtype'), r.get('head_dim'), r.get('seq_q'), r.get('tflops'), r.get('pct_of_fa2'), r.get('pct_of_cudnn'), r.get('status'))
PY
