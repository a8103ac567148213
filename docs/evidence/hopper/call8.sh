#!/usr/bin/env bash
# Call 8: the causal warp skip in stages 13-16, stage 22_any_length (Hopper) first run; hardening of
# 19/20 after the fence; initcheck on 17-22; a causal/any-length benchmark against FA2/cuDNN.
set -o pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -i "error" $L/build.log
timeout 40 build/fa_run --no-time --stage 22 --dtype all --head-dim all --layout mixed --batch 2 --heads 3 --seq 200 --seq-kv 333 > $L/smoke22.log 2>&1; echo "smoke 22 rc=$? pass=$(grep -c PASS $L/smoke22.log)"; grep -v PASS $L/smoke22.log | head -5
timeout 40 build/fa_run --no-time --stage 22 --dtype fp16 --head-dim all --batch 1 --heads 12 --seq 9 --seq-kv 9 > $L/gpt2.log 2>&1; echo "gpt2 22 rc=$? pass=$(grep -c PASS $L/gpt2.log)"
FA_TEST_STAGES=13_causal,14_gqa,15_lse,16_alibi,22_any_length timeout 150 build/tests/test_gpu_stages "~[multi_gpu]" > $L/stages.log 2>&1; echo "test_gpu_stages 13-16,22 rc=$? $(t)"; tail -2 $L/stages.log
for tst in test_gpu_any_length test_gpu_causal test_gpu_gqa test_gpu_lse test_gpu_alibi; do timeout 120 build/tests/$tst > $L/$tst.log 2>&1; echo "$tst rc=$? $(t) $(tail -1 $L/$tst.log)"; done
FA_TEST_STAGES=22_any_length,19_overlap,20_persistent timeout 200 build/tests/test_gpu_hardening > $L/hard.log 2>&1; echo "hardening 22,19,20 rc=$? $(t)"; tail -2 $L/hard.log
timeout 90 bash scripts/sanitize.sh --tool memcheck --fa-run build/fa_run --stage 13,16,22 --log-dir $L/san > $L/memcheck.log 2>&1; echo "memcheck 13,16,22 rc=$? $(t)"; tail -6 $L/memcheck.log
for tool in synccheck racecheck; do
timeout 60 compute-sanitizer --tool $tool build/fa_run --no-time --stage 22 --dtype fp16,bf16 --head-dim all --layout mixed --batch 1 --heads 2 --seq 200 --seq-kv 333 > $L/$tool.log 2>&1; echo "$tool 22 rc=$? pass=$(grep -c PASS $L/$tool.log) $(tail -1 $L/$tool.log)"
done
timeout 90 compute-sanitizer --tool initcheck build/fa_run --no-time --stage 17,18,19,20,21,22 --dtype fp16 --head-dim all --layout mixed --batch 1 --heads 2 --seq 256 --seq-kv 384 > $L/initcheck.log 2>&1; echo "initcheck 17-22 rc=$? pass=$(grep -c PASS $L/initcheck.log) $(tail -1 $L/initcheck.log)"
timeout 60 build/fa_run --stage 21,22 --dtype fp16 --head-dim all --batch 16 --heads 32 --seq 1024,4096 --reps 10 > $L/time_21_22.log 2>&1; echo "time 21 vs 22 rc=$? $(t)"; cat $L/time_21_22.log
timeout 200 python3 tools/bench.py --stages 13,16,22 --dtypes fp16 --series causal,any_length --out-dir /tmp/q --no-readme --no-plots --no-docs > $L/bench.log 2>&1; echo "bench rc=$? $(t)"
cp /tmp/q/latest.csv $OUT/bench8.csv 2>/dev/null
tar czf $OUT/logs8.tgz -C /tmp logs
python3 - <<'PY'
import csv
rows=list(csv.DictReader(l for l in open('/tmp/q/latest.csv') if not l.startswith('#')))
for r in rows:
    if r.get('impl') in ('fa2','cudnn'): continue
    print(r.get('series'), r.get('impl'), r.get('head_dim'), r.get('seq_q'), r.get('causal'), r.get('tflops'), r.get('pct_of_fa2'), r.get('pct_of_cudnn'), r.get('status'))
PY
