#!/usr/bin/env bash
# Call 10: the full benchmark, fp16 part (scripts/run_all.sh --part), after a correctness check of stage 22.
set -o pipefail
export PYTHONUNBUFFERED=1
L=/tmp/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 > $L/build.log 2>&1; echo "build rc=$? $(t)"; grep -m5 -i "error" $L/build.log
FA_TEST_STAGES=22_any_length timeout 60 build/tests/test_gpu_stages "~[multi_gpu]" > $L/stages22.log 2>&1; echo "test_gpu_stages 22 rc=$? $(t) $(tail -2 $L/stages22.log | head -1)"
FA_TEST_STAGES=22_any_length timeout 60 build/tests/test_gpu_any_length > $L/any22.log 2>&1; echo "test_gpu_any_length 22 rc=$? $(t) $(tail -2 $L/any22.log | head -1)"
timeout 60 compute-sanitizer --tool racecheck build/fa_run --no-time --stage 22 --dtype fp16 --head-dim all --layout mixed --batch 1 --heads 2 --seq 200 --seq-kv 333 > $L/racecheck22.log 2>&1; echo "racecheck 22 rc=$? pass=$(grep -c PASS $L/racecheck22.log) $(tail -1 $L/racecheck22.log)"
timeout 60 compute-sanitizer --tool synccheck build/fa_run --no-time --stage 22 --dtype bf16 --head-dim all --layout mixed --batch 1 --heads 2 --seq 130 --seq-kv 129 > $L/synccheck22.log 2>&1; echo "synccheck 22 rc=$? pass=$(grep -c PASS $L/synccheck22.log) $(tail -1 $L/synccheck22.log)"
FA_GIT_REV=bb00a1b CMAKE_CUDA_ARCHITECTURES=90 timeout 470 bash scripts/run_all.sh --part --dtypes fp16 --feature-stages newest > $L/run_all.log 2>&1; echo "run_all fp16 rc=$? $(t)"; tail -4 $L/run_all.log
mkdir -p $OUT/parts; cp plots/results/parts/*.csv $OUT/parts/ 2>/dev/null; ls $OUT/parts
tar czf $OUT/logs10.tgz -C /tmp logs
