#!/usr/bin/env bash
# Call 67 (nineteenth session): stage 37 with stage 36's four lane bases kept in the head_dim 64
# ALiBi kernel (Config::kOneLaneBase; that kernel is then SASS-identical to stage 36's), and stage 38
# (ALiBi's column-term B operands built once per thread block, through shared memory) on the H200.
#   REV=<commit> bash docs/evidence/ampere/call67.sh      (carry .deps: Catch2)
# (1) a build with stages 36, 37 and 38 only (sm_90, tests on); (2) the GPU suites on 37 and 38;
# (3) memcheck and racecheck on 37 and 38, every shape sanitize.sh has; (4) shuffled rounds, stages
# 36, 37 and 38 each without and with ALiBi slopes, issue 12's shapes: the slopes' cost in the same
# rounds (36 and 37 with slopes at head_dim 64 are one kernel: their difference is the noise).
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out67}; mkdir -p $OUT
LOG=$OUT/call67.txt
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim67}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tests scripts tools $W/; cp -r .deps/include .deps/lib $W/.deps/ 2>/dev/null
STAGES="36_alibi_mma 37_xor_lane_address 38_column_setup"
for s in $STAGES; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure67.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build67.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
tail -3 /tmp/build67.log >> $LOG
[ -n "$MAKE_ONLY" ] && exit 0
(cd $W/build && ctest -R "test_alibi_column_term|test_smem_layout" --output-on-failure > /tmp/cpu67.log 2>&1)
echo "cpu tests rc=$? $(t): $(grep -E 'tests passed' /tmp/cpu67.log)" | tee -a $LOG
for test in test_gpu_alibi test_gpu_stages test_gpu_any_length test_gpu_causal test_gpu_lse test_gpu_gqa \
            test_gpu_hardening; do
  limit=$(left); [ "$limit" -lt 260 ] && { echo "$test: not run (time)" | tee -a $LOG; continue; }
  FA_TEST_STAGES=37_xor_lane_address,38_column_setup timeout 200 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [37,38] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A12 FAILED /tmp/$test.log >> $LOG
done
limit=$(left)
if [ "$limit" -ge 200 ]; then
  (cd $W && timeout 120 bash scripts/sanitize.sh --tool memcheck,racecheck --stage 37,38 --fa-run build/fa_run \
    --log-dir /tmp/sanitizer > $OUT/sanitize_37_38.txt 2>&1)
  echo "sanitize [37,38] rc=$? $(t): $(tail -1 $OUT/sanitize_37_38.txt)" | tee -a $LOG
  grep -E "exit [0-9]+, errors" $OUT/sanitize_37_38.txt | sed 's/.*\] //' | tee -a $LOG
fi
limit=$(left)
I="timeout $(( limit - 10 )) python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128"
FA_GIT_REV=$REV $I --stages 36,37,38 --alibi --seqs 1024,2048,4096,8192 --reps 40 --references "" \
  --csv $OUT/interleaved_alibi_36_37_38.csv > /tmp/alibi.log 2>&1; echo "alibi rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/alibi.log >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "ALiBi costs|^(fp16|bf16)" /tmp/alibi.log | cut -c1-110
