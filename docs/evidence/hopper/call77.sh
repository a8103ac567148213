#!/usr/bin/env bash
# Call 77 (prepared in the twentieth session, not run): stage 39_wide_kv's first GPU run, on branch
# next/hopper-39-wide-kv. Needs Catch2 carried: here, mkdir -p .deps/include .deps/lib/cmake &&
# cp -r /usr/include/catch2 .deps/include/ && cp -r /usr/lib/cmake/Catch2 .deps/lib/cmake/ (and
# /usr/lib/libCatch2WithMain.a if the build links it), then run with carry [".deps"]:
#   REV=<commit> bash docs/evidence/hopper/call77.sh
# (1) a build of stages 30 and 39 (sm_90a, tests on); (2) the GPU suites on stage 39 (its lengths pick
# both K/V blocks: 129-160, 257-320, 385-480 and most lengths from 2048 take 160 keys, at head_dim 128
# without causal); (3) memcheck and racecheck on it; (4) shuffled rounds, stages 30 and 39 with FA2 and
# cuDNN, head_dim 128, S = 1024..8192, fp16 and bf16, 30 rounds after 10 warm-up, every output
# checked against fp64 first. Prediction (page 39): 39 against 30 -2 to -2.5% time at S >= 2048, the
# same kernel at 1024; 0 or up to +1.6% if the tensor cores' idle time grows with the keys.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out77}; mkdir -p $OUT
LOG=$OUT/call77.txt
STAGES="30_lazy_rescale 39_wide_kv"
echo "git $REV" | tee -a $LOG
for s in $STAGES; do sha256sum stages/$s/kernel.cu; done | tee -a $LOG
W=${W:-/tmp/trim77}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tests scripts tools $W/; cp -r .deps/include .deps/lib $W/.deps/ 2>/dev/null
for s in $STAGES; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure77.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} -- -k 0 > /tmp/build77.log 2>&1
echo "build rc=$? $(t) (test_alibi_column_term and others that need Ampere stages may fail to build here)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build77.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
(cd $W/build && ctest -R "test_schedule" --output-on-failure > /tmp/cpu77.log 2>&1)
echo "test_schedule rc=$? $(t): $(grep -E 'tests passed' /tmp/cpu77.log)" | tee -a $LOG
(cd $W && python3 tests/check_sass.py --build-dir build --only 39_wide_kv > /tmp/sass77.log 2>&1)
echo "check_sass [39] rc=$? $(t): $(tail -1 /tmp/sass77.log)" | tee -a $LOG
for test in test_gpu_stages test_gpu_any_length test_gpu_gqa test_gpu_lse test_gpu_causal test_gpu_hardening; do
  limit=$(left); [ "$limit" -lt 200 ] && { echo "$test: not run (time)" | tee -a $LOG; continue; }
  FA_TEST_STAGES=39_wide_kv timeout $(( limit - 150 )) $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [39] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A12 FAILED /tmp/$test.log >> $LOG
done
I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --head-dim 128 --seqs 1024,2048,4096,8192"
for dt in fp16 bf16; do
  limit=$(left); [ "$limit" -lt 60 ] && { echo "rounds $dt: not run (time)" | tee -a $LOG; continue; }
  FA_GIT_REV=$REV timeout $(( limit - 30 )) $I --dtype $dt --stages 30,39 --warmup 10 --reps 30 \
    --csv $OUT/interleaved_30_39_$dt.csv > $OUT/rounds_$dt.txt 2>&1
  echo "rounds $dt rc=$? $(t)" | tee -a $LOG
  grep -E "^(30_|39_|cudnn|fa2|fp16|bf16)" $OUT/rounds_$dt.txt | cut -c1-110 | tee -a $LOG
done
limit=$(left)
if [ "$limit" -ge 50 ]; then
  (cd $W && timeout $(( limit - 10 )) bash scripts/sanitize.sh --tool memcheck,racecheck --stage 39 \
    --fa-run build/fa_run --log-dir /tmp/sanitizer > $OUT/sanitize_39.txt 2>&1)
  echo "sanitize [39] rc=$? $(t): $(tail -1 $OUT/sanitize_39.txt)" | tee -a $LOG
fi
echo "done $(t)" | tee -a $LOG
