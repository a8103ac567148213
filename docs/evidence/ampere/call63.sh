#!/usr/bin/env bash
# Call 63 (seventeenth session): stage 37 (the column term's B operands from shared-memory tables, both head dims) on the H200.
#   git archive HEAD tools | tar -x -C .deps/call63     (here: the committed tools, whatever the tree has)
#   REV=03bf8db bash docs/evidence/ampere/call63.sh     (from a checkout of 03bf8db, where stage 37 is
#                                                         the tables version; carry .deps; ~4.5 minutes)
# (1) a build with stages 33, 36 and 37 only (sm_90, tests on); (2) stage 37's GPU suites; (3) memcheck
# and racecheck on stage 37, every shape sanitize.sh has; (4) shuffled rounds, stages 33, 36 and 37
# each without and with ALiBi slopes, issue 12's shapes: the slopes' cost in the same rounds.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out63}; mkdir -p $OUT
LOG=$OUT/call63.txt
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim63}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tests scripts $W/; cp -r ${TOOLS:-.deps/call63/tools} $W/tools; cp -r .deps/include .deps/lib $W/.deps/ 2>/dev/null
for s in 33_lpt_order 36_alibi_mma 37_column_table; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure63.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build63.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
tail -3 /tmp/build63.log >> $LOG
[ -n "$MAKE_ONLY" ] && exit 0
for test in test_gpu_alibi test_gpu_stages test_gpu_any_length test_gpu_causal test_gpu_lse test_gpu_gqa \
            test_gpu_hardening; do
  limit=$(left); [ "$limit" -lt 200 ] && { echo "$test: not run (time)" | tee -a $LOG; continue; }
  FA_TEST_STAGES=37_column_table timeout 150 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [37] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A12 FAILED /tmp/$test.log >> $LOG
done
limit=$(left)
if [ "$limit" -ge 200 ]; then
  (cd $W && timeout 110 bash scripts/sanitize.sh --tool memcheck,racecheck --stage 37 --fa-run build/fa_run \
    --log-dir /tmp/sanitizer > $OUT/sanitize_37.txt 2>&1)
  echo "sanitize [37] rc=$? $(t): $(tail -1 $OUT/sanitize_37.txt)" | tee -a $LOG
  grep -E "exit [0-9]+, errors" $OUT/sanitize_37.txt | sed 's/.*\] //' | tee -a $LOG
fi
limit=$(left)
I="timeout $(( limit - 10 )) python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128"
FA_GIT_REV=$REV $I --stages 33,36,37 --alibi --seqs 1024,2048,4096,8192 --reps 40 --references "" \
  --csv $OUT/interleaved_alibi_33_36_37.csv > /tmp/alibi.log 2>&1; echo "alibi rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/alibi.log >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "ALiBi costs|^(fp16|bf16)" /tmp/alibi.log | cut -c1-100
