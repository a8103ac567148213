#!/usr/bin/env bash
# Call 91 (prepared in the twenty-fourth session, whose device time was spent before it began):
# the tests the H200 has not yet run. Stages 39, 40 and 41 passed their GPU suites and the
# sanitizers on H100s only (calls 77, 82/83, 85), and the hardening case "the row maximum rising in
# every K/V block, masked ones too" (twenty-third session) ran only on stages 30, 38, 40 and 41
# (call 87, an H100). Needs Catch2 carried:
#   REV=<commit> bash docs/evidence/hopper/call91.sh          (carry [".deps"]; about 6 minutes)
# (1) the whole tree built for sm_90 (Hopper stages sm_90a) with the GPU suites; (2) the rising-
# maximum case on every stage that declares any length (11-41), one process; (3) the hardening,
# causal, stages, any-length, GQA and LSE suites on 39, 40 and 41; (4) memcheck and racecheck on
# 39, 40 and 41 as long as time is left. The card is printed first.
# Prediction: everything passes (the same sm_90 machine code as on the H100s); the rising case
# on stages 11-29 and 31-37 passes too, since their masked steps rescale like stage 30's or
# without lazy rescaling at all.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-570} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out91}; mkdir -p $OUT
LOG=$OUT/call91.txt
echo "git $REV $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" | tee -a $LOG
TESTS="test_gpu_hardening test_gpu_causal test_gpu_stages test_gpu_any_length test_gpu_gqa test_gpu_lse"
B=${B:-/tmp/build91}
cmake -S . -B $B -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} \
  > /tmp/configure91.log 2>&1
cmake --build $B --parallel ${JOBS:-16} --target fa_run $TESTS -- -k 0 > /tmp/build91.log 2>&1
echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build91.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
timeout 150 $B/tests/test_gpu_hardening "general-attention features all on: the row maximum rising*" \
  > /tmp/rising_all.log 2>&1
echo "rising maximum [every any-length stage] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/rising_all.log | tail -1)" | tee -a $LOG
grep -m3 -B2 -A12 FAILED /tmp/rising_all.log | cut -c1-170 >> $LOG
NEW=39_wide_kv,40_speculative_max,41_warp_redo
for test in $TESTS; do
  FA_TEST_STAGES=$NEW timeout 150 $B/tests/$test > /tmp/$test.log 2>&1
  echo "$test [39, 40, 41] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m3 -B2 -A12 FAILED /tmp/$test.log | cut -c1-170 >> $LOG
done
gzip -c /tmp/rising_all.log > $OUT/rising_all.log.gz
for s in 39 40 41; do
  limit=$(left)
  [ "$limit" -ge 90 ] || { echo "sanitize [$s] not run: $limit s left" | tee -a $LOG; continue; }
  timeout $(( limit - 30 )) bash scripts/sanitize.sh --tool memcheck,racecheck --stage $s --fa-run $B/fa_run \
    --log-dir /tmp/sanitizer$s > $OUT/sanitize_$s.txt 2>&1
  echo "sanitize [$s] rc=$? $(t): $(tail -1 $OUT/sanitize_$s.txt)" | tee -a $LOG
done
echo "done $(t)" | tee -a $LOG
