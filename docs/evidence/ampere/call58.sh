#!/usr/bin/env bash
# Call 58 (sixteenth session): stage 36 (ALiBi's column term on the tensor cores) on the H200.
#   REV=<commit> bash docs/evidence/ampere/call58.sh        (carry .deps; about 6-7 minutes)
# (1) a build with stages 33 and 36 only (sm_90, tests on); (2) stage 36's GPU suites; (3) memcheck
# and racecheck on stage 36, every shape sanitize.sh has (its ALiBi shape now puts K/V blocks left
# of, across and right of the diagonal); (4) shuffled rounds, stages 33 and 36 each without and with
# ALiBi slopes, issue 12's shapes: the slopes' cost in the same rounds.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out58}; mkdir -p $OUT
LOG=$OUT/call58.txt
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim58}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include .deps/lib $W/.deps/ 2>/dev/null
for s in 33_lpt_order 36_alibi_mma; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure58.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build58.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
tail -3 /tmp/build58.log >> $LOG
[ -n "$MAKE_ONLY" ] && exit 0
for test in test_gpu_alibi test_gpu_stages test_gpu_any_length test_gpu_causal test_gpu_lse test_gpu_gqa \
            test_gpu_hardening; do
  limit=$(left); [ "$limit" -lt 200 ] && { echo "$test: not run (time)" | tee -a $LOG; continue; }
  FA_TEST_STAGES=36_alibi_mma timeout 150 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [36] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A12 FAILED /tmp/$test.log >> $LOG
done
limit=$(left)
if [ "$limit" -ge 200 ]; then
  (cd $W && timeout 110 bash scripts/sanitize.sh --tool memcheck,racecheck --stage 36 --fa-run build/fa_run \
    --log-dir /tmp/sanitizer > $OUT/sanitize_36.txt 2>&1)
  echo "sanitize [36] rc=$? $(t): $(tail -1 $OUT/sanitize_36.txt)" | tee -a $LOG
  grep -E "exit [0-9]+, errors" $OUT/sanitize_36.txt | sed 's/.*\] //' | tee -a $LOG
fi
limit=$(left)
I="timeout $(( limit - 10 )) python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128"
FA_GIT_REV=$REV $I --stages 33,36 --alibi --seqs 1024,2048,4096,8192 --reps 40 --references "" \
  --csv $OUT/interleaved_alibi_33_36.csv > /tmp/alibi.log 2>&1; echo "alibi rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/alibi.log >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "ALiBi costs|^(fp16|bf16)" /tmp/alibi.log | cut -c1-100
