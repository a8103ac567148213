#!/usr/bin/env bash
# Calls 42 and 43 (eleventh session): the full benchmark with stages 1-32 (stage 32 with its last K/V
# block peeled out of the masked loop), one dtype per call, then -- in the second call, with the time
# left -- stage 32's GPU suites, hardening and memcheck (the peeled loop is new control flow).
#   REV=<commit> DT=fp16 bash docs/evidence/ampere/call42.sh            # call 42: build + fp16 part
#   REV=<commit> DT=bf16 SUITES=1 bash docs/evidence/ampere/call42.sh   # call 43: bf16 part + suites
# then here: python3 tools/bench.py --merge (both part CSVs in plots/results/parts/).
# Each part's CSV and its compressed log go to $OUT as soon as the part ends.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
: "${DT:?set DT to fp16 or bf16}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
LOG=$OUT/call42_$DT.txt
FA_GIT_REV=$REV CMAKE_CUDA_ARCHITECTURES=90 timeout $(left) bash scripts/run_all.sh --part --dtypes $DT \
  --feature-stages newest > /tmp/run_all_$DT.log 2>&1
echo "run_all $DT rc=$? $(t)" | tee -a $LOG
cp plots/results/parts/part_${DT}_d64_d128.csv $OUT/ 2>/dev/null
gzip -c /tmp/run_all_$DT.log > $OUT/run_all_$DT.log.gz
echo "  PASS rows: $(grep -c ' PASS$' /tmp/run_all_$DT.log)" | tee -a $LOG
grep -E "FAIL|measured|error" /tmp/run_all_$DT.log | tail -5 | tee -a $LOG
if [ -n "$SUITES" ]; then
  W=/tmp/trim42; rm -rf $W; mkdir -p $W/stages $W/.deps
  cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/
  for s in 16_alibi 32_skip_padding; do cp -r stages/$s $W/stages/; done
  cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/configure42.log 2>&1
  cmake --build $W/build --parallel 16 > /tmp/build42.log 2>&1; echo "suites build rc=$? $(t)" | tee -a $LOG
  for test in test_gpu_stages test_gpu_any_length test_gpu_causal test_gpu_alibi test_gpu_lse test_gpu_gqa \
              test_gpu_hardening; do
    limit=$(left); [ "$limit" -lt 20 ] && { echo "$test: not run (time)" | tee -a $LOG; continue; }
    FA_TEST_STAGES=32_skip_padding timeout $(( limit < 120 ? limit : 120 )) $W/build/tests/$test > /tmp/$test.log 2>&1
    echo "$test [32] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
    grep -m5 -B2 -A8 FAILED /tmp/$test.log >> $LOG
  done
  limit=$(left)
  if [ "$limit" -ge 20 ]; then
    (cd $W && timeout $limit bash scripts/sanitize.sh --tool memcheck --stage 32 --fa-run build/fa_run \
      --log-dir /tmp/sanitizer > /tmp/sanitize.log 2>&1)
    echo "memcheck [32] rc=$? $(t): $(tail -1 /tmp/sanitize.log)" | tee -a $LOG
    grep -E "FAIL|ERROR" /tmp/sanitize.log | head -10 >> $LOG
  else
    echo "memcheck: not run (time)" | tee -a $LOG
  fi
fi
echo "done $(t)" | tee -a $LOG
grep -E "^\[ *[0-9]+/[0-9]+ " /tmp/run_all_$DT.log | grep -E " (21_pingpong|30_lazy_rescale|32_skip_padding|16_alibi|fa2|cudnn) " \
  | grep -E " (1024|8192) " | cut -c1-120 | tail -40
