#!/usr/bin/env bash
# Call 74 (twentieth session): the compile-time causal switch carried into stages 32, 33, 36, 37 and
# 38 (without causal: stage 32's whole-block loop with the partial last block peeled, the query
# blocks in stage 32's order), on the H200.
#   REV=<commit> bash docs/evidence/ampere/call74.sh      (carry .deps: Catch2)
# (1) a build with stages 32, 33, 36, 37 and 38 only (sm_90, tests on); (2) memcheck on them, every
# shape sanitize.sh has; (3) the GPU suites on them, as many as the time allows (causal and any
# length first); (4) racecheck if time is left.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-360} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out74}; mkdir -p $OUT
LOG=$OUT/call74.txt
echo "git $REV" | tee -a $LOG
STAGES="32_skip_padding 33_lpt_order 36_alibi_mma 37_xor_lane_address 38_column_setup"
for s in $STAGES; do sha256sum stages/$s/kernel.cu; done | tee -a $LOG
W=${W:-/tmp/trim74}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tests scripts tools $W/; cp -r .deps/include .deps/lib $W/.deps/ 2>/dev/null
for s in $STAGES; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure74.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build74.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build74.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
(cd $W/build && ctest -R "test_alibi_column_term|test_block_order" --output-on-failure > /tmp/cpu74.log 2>&1)
echo "cpu tests rc=$? $(t): $(grep -E 'tests passed' /tmp/cpu74.log)" | tee -a $LOG
(cd $W && timeout 60 bash scripts/sanitize.sh --tool memcheck --stage 32,33,36,37,38 --fa-run build/fa_run \
  --log-dir /tmp/sanitizer > $OUT/memcheck_32_38.txt 2>&1)
echo "memcheck [32-38] rc=$? $(t): $(tail -1 $OUT/memcheck_32_38.txt)" | tee -a $LOG
grep -E "exit [0-9]+, errors" $OUT/memcheck_32_38.txt | sed 's/.*\] //' | tee -a $LOG
TS=32_skip_padding,33_lpt_order,36_alibi_mma,37_xor_lane_address,38_column_setup
for test in test_gpu_causal test_gpu_any_length test_gpu_stages test_gpu_lse test_gpu_gqa test_gpu_alibi \
            test_gpu_hardening; do
  limit=$(left); [ "$limit" -lt 40 ] && { echo "$test: not run (time)" | tee -a $LOG; continue; }
  FA_TEST_STAGES=$TS timeout $(( limit - 20 )) $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [32-38] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A12 FAILED /tmp/$test.log >> $LOG
done
limit=$(left)
if [ "$limit" -ge 50 ]; then
  (cd $W && timeout $(( limit - 10 )) bash scripts/sanitize.sh --tool racecheck --stage 32,33,36,37,38 \
    --fa-run build/fa_run --log-dir /tmp/sanitizer > $OUT/racecheck_32_38.txt 2>&1)
  echo "racecheck [32-38] rc=$? $(t): $(tail -1 $OUT/racecheck_32_38.txt)" | tee -a $LOG
  grep -E "exit [0-9]+, errors" $OUT/racecheck_32_38.txt | sed 's/.*\] //' | tee -a $LOG
fi
echo "done $(t)" | tee -a $LOG
