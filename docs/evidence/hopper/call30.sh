#!/usr/bin/env bash
# NOT RUN YET: prepared in the eighth session for the next one.
# Call 30: (1) the first GPU run of tools/interleaved.py: stages 24 and 29 with FA2 and cuDNN in one
# process, launch after launch (200 rounds), at the shapes where the full run's medians straddle the
# power cap (head_dim 64 and 128, S = 4096, both dtypes) and at S = 1024 / 8192 for contrast, with
# --launch-times so that the clock drop shows in every implementation's column at the same rounds;
# (2) stage 29's hardening suite (stopped by the time limit in call 29) and the four sanitizers.
# Few files under $OUT; the summary is printed last.
set -o pipefail
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_capi fa_run test_gpu_hardening > $L/build.log 2>&1; echo "build rc=$? $(t)"
for dt in bf16 fp16; do
  for d in 64 128; do
    timeout 120 python3 tools/interleaved.py --lib build/libfa_capi.so --stages 24,29 --dtype $dt --head-dim $d \
      --seqs 1024,4096,8192 --warmup 10 --reps 200 --launch-times --csv $L/interleaved_${dt}_d$d.csv \
      > $L/interleaved_${dt}_d$d.log 2>&1
    echo "interleaved $dt d$d rc=$? $(t)"
  done
done
FA_TEST_STAGES=29_feature_switches timeout 240 build/tests/test_gpu_hardening > $L/hardening_29.log 2>&1
echo "test_gpu_hardening [29] rc=$? $(t): $(grep -E 'All tests passed|test cases' $L/hardening_29.log | tail -1)"
timeout 150 bash scripts/sanitize.sh --tool memcheck,racecheck,synccheck,initcheck --stage 29 --fa-run build/fa_run \
  --log-dir $L/sanitizer > $L/sanitize.log 2>&1
echo "sanitize [29] rc=$? $(t): $(tail -1 $L/sanitize.log)"
tar czf $OUT/call30_logs.tgz -C /tmp logs
grep -hvE "launch ms" $L/interleaved_*.log | grep -vE "^#" | cut -c1-120
echo "done $(t)"
