#!/usr/bin/env bash
set -o pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -i "error" $L/build.log
st=20_persistent
FA_TEST_STAGES=$st timeout 100 build/tests/test_gpu_stages "~[multi_gpu]" > $L/stages_$st.log 2>&1; echo "test_gpu_stages $st rc=$? $(t)"; tail -2 $L/stages_$st.log
FA_TEST_STAGES=$st timeout 100 build/tests/test_gpu_hardening > $L/hard_$st.log 2>&1; echo "hardening $st rc=$? $(t)"; tail -2 $L/hard_$st.log
for tool in memcheck synccheck racecheck; do
timeout 100 compute-sanitizer --tool $tool build/fa_run --no-time --stage 20 --dtype fp16,bf16 --head-dim all --layout mixed --batch 1 --heads 2 --seq 256 --seq-kv 384 > $L/$tool.log 2>&1; echo "$tool rc=$? $(t)"; grep -c PASS $L/$tool.log; tail -1 $L/$tool.log
done
# many tiles per block with few K/V blocks each (the ring and Q phases across tiles): batch 4, heads 40 -> 160 tiles of 1 K/V block
timeout 60 build/fa_run --no-time --stage 20 --dtype all --head-dim all --layout mixed --batch 4 --heads 40 --seq 128 --seq-kv 128 > $L/tiles1.log 2>&1; echo "many 1-block tiles rc=$?"; grep -c PASS $L/tiles1.log
timeout 60 build/fa_run --no-time --stage 20 --dtype all --head-dim all --batch 3 --heads 100 --seq 384 --seq-kv 640 > $L/tiles2.log 2>&1; echo "many 5-block tiles rc=$?"; grep -c PASS $L/tiles2.log
st=14_gqa
FA_TEST_STAGES=$st timeout 100 build/tests/test_gpu_stages "~[multi_gpu]" > $L/stages_$st.log 2>&1; echo "test_gpu_stages $st rc=$? $(t)"; tail -2 $L/stages_$st.log
FA_TEST_STAGES=$st timeout 100 build/tests/test_gpu_gqa > $L/gqa_$st.log 2>&1; echo "test_gpu_gqa $st rc=$? $(t)"; tail -2 $L/gqa_$st.log
for tst in test_gpu_any_length test_gpu_causal; do timeout 100 build/tests/$tst > $L/$tst.log 2>&1; echo "$tst rc=$? $(t)"; tail -2 $L/$tst.log; done
timeout 150 python3 tools/bench.py --stages 19,20 --dtypes fp16 --out-dir /tmp/q --no-readme --no-plots --no-docs > $L/bench.log 2>&1; echo "bench rc=$? $(t)"
timeout 60 ncu --clock-control none -k regex:attention_kernel -c 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
  build/fa_run --stage 20 --dtype fp16 --head-dim 128 --seq 1024 --batch 16 --heads 32 --warmup 0 --reps 1 > $L/ncu_20.log 2>&1; echo "ncu rc=$? $(t)"
cp /tmp/q/latest.csv $OUT/bench3.csv 2>/dev/null
tar czf $OUT/logs3.tgz -C /tmp logs
python3 - <<'PY'
import csv
rows=list(csv.DictReader(l for l in open('/tmp/q/latest.csv') if not l.startswith('#')))
for r in rows:
    print(r.get('impl'), r.get('dtype'), r.get('head_dim'), r.get('seq_q'), r.get('tflops'), r.get('pct_of_fa2'), r.get('pct_of_cudnn'), r.get('status'))
PY
