#!/usr/bin/env bash
# Call 5: stages 19-22 after the softmax fence, 21 (tile scheduler) and 22 (ping-pong) first runs,
# general stages 14-16 (GQA, LSE, ALiBi) tests, the new benchmark series end to end.
set -o pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -i "error" $L/build.log
FA_TEST_STAGES=17_tma_ring,18_warp_specialized,19_overlap,20_persistent,21_tile_scheduler,22_pingpong timeout 120 build/tests/test_gpu_stages "~[multi_gpu]" > $L/stages_hopper.log 2>&1; echo "test_gpu_stages 17-22 rc=$? $(t)"; tail -2 $L/stages_hopper.log
timeout 60 build/fa_run --no-time --stage 21,22 --dtype all --head-dim all --layout mixed --batch 4 --heads 40 --seq 128 --seq-kv 128 > $L/tiles1.log 2>&1; echo "1-block tiles rc=$? pass=$(grep -c PASS $L/tiles1.log)"
timeout 60 build/fa_run --no-time --stage 21,22 --dtype all --head-dim all --batch 3 --heads 100 --seq 384 --seq-kv 640 > $L/tiles2.log 2>&1; echo "5-block tiles rc=$? pass=$(grep -c PASS $L/tiles2.log)"
for tool in synccheck racecheck; do
timeout 60 compute-sanitizer --tool $tool build/fa_run --no-time --stage 19,20,21,22 --dtype fp16,bf16 --head-dim all --layout mixed --batch 1 --heads 2 --seq 256 --seq-kv 384 > $L/$tool.log 2>&1; echo "$tool 19-22 rc=$? pass=$(grep -c PASS $L/$tool.log) $(tail -1 $L/$tool.log)"
done
timeout 280 python3 tools/bench.py --stages 13,14,15,16,19,20,21,22 --dtypes fp16 --feature-stages newest --out-dir /tmp/q --no-readme --no-plots --no-docs > $L/bench.log 2>&1; echo "bench rc=$? $(t)"
cp /tmp/q/latest.csv $OUT/bench5.csv 2>/dev/null
for tst in test_gpu_gqa test_gpu_lse test_gpu_alibi; do timeout 60 build/tests/$tst > $L/$tst.log 2>&1; echo "$tst rc=$? $(t)"; tail -1 $L/$tst.log; done
FA_TEST_STAGES=15_lse,16_alibi timeout 40 build/tests/test_gpu_stages "~[multi_gpu]" > $L/stages_15_16.log 2>&1; echo "test_gpu_stages 15,16 rc=$? $(t)"; tail -1 $L/stages_15_16.log
timeout 60 bash scripts/sanitize.sh --tool memcheck --fa-run build/fa_run --stage 14,15,16,19,20,21,22 --log-dir $L/san > $L/memcheck.log 2>&1; echo "memcheck rc=$? $(t)"; tail -12 $L/memcheck.log
FA_TEST_STAGES=21_tile_scheduler,22_pingpong,16_alibi timeout 150 build/tests/test_gpu_hardening > $L/hard.log 2>&1; echo "hardening 21,22,16 rc=$? $(t)"; tail -2 $L/hard.log
timeout 25 ncu --clock-control none -k regex:attention_kernel -c 1 --metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct,gpu__time_duration.sum \
  build/fa_run --stage 21 --dtype fp16 --head-dim 128 --seq 8192 --batch 16 --heads 32 --warmup 0 --reps 1 > $L/ncu_mem_21.log 2>&1; echo "ncu 21 rc=$? $(t)"; grep -E "dram__bytes|hit_rate|duration" $L/ncu_mem_21.log
tar czf $OUT/logs5.tgz -C /tmp logs
python3 - <<'PY'
import csv
rows=list(csv.DictReader(l for l in open('/tmp/q/latest.csv') if not l.startswith('#')))
for r in rows:
    if r.get('status')!='PASS' or r['impl'] in ('19_overlap','20_persistent','21_tile_scheduler','22_pingpong','fa2','cudnn') or r.get('series')!='headline':
        print(r.get('series'), r.get('impl'), r.get('head_dim'), r.get('seq_q'), r.get('kv_heads'), r.get('tflops'), r.get('pct_of_fa2'), r.get('pct_of_cudnn'), r.get('status'))
PY
