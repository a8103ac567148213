#!/usr/bin/env bash
# Call 85 (twenty-third session): stage 41's first GPU run. Stage 41 is stage 40 with the block done
# again on the warp alone (mma.sync from the swizzled Q and K tiles), so the decision is each warp's
# __all_sync and the warpgroup's bar.red.and goes. Call 84's probe 93 (a warp's vote, timing only)
# bounded the gain: -2 to -6% against stage 40.
#   REV=<commit> bash docs/evidence/hopper/call85.sh          (carry [".deps"]; about 5 minutes)
# (1) build stages 30, 40, 41 and mutant 94 (41 with the two n8 tiles' B fragments swapped in the
# block done again: call85/mutant_swapped_b.patch) with the GPU suites; (2) test_gpu_hardening on 41
# (its planted maxima and ramps, scores of +/-1e4 take the warp's redo), then its planted-maximum
# case on mutant 94, which must FAIL (the suite reaches the redo); the causal, stages, any-length,
# GQA and LSE suites on 41; (3) shuffled rounds of 30, 40, 41 with cuDNN, fp16 and bf16, head_dim 64
# and 128, S = 1024..8192, every output checked against fp64 first; (4) memcheck and racecheck on
# 41; (5) ncu source counters on 41 (fp16 [16, 4096, 32, 128]).
# Prediction: every suite passes on 41 and the mutant fails; 41 against 40: -2 to -5% at head_dim
# 128 (probe 93: -1.9 to -5.0% by median), at head_dim 64 less than probe 93's -3 to -6% (the
# 192-row tile's kernel reloads 8 spilled values a block that stage 40 kept in registers).
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-570} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out85}; mkdir -p $OUT
LOG=$OUT/call85.txt
echo "git $REV $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" | tee -a $LOG
W=${W:-/tmp/trim85}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tests scripts tools $W/; cp -r .deps/include .deps/lib $W/.deps/ 2>/dev/null
cp -r stages/30_lazy_rescale stages/40_speculative_max stages/41_warp_redo $W/stages/
cp -r stages/41_warp_redo $W/stages/94_warp_redo_mutant
(cd $W/stages/94_warp_redo_mutant && patch -s -p1 < $OLDPWD/docs/evidence/hopper/call85/mutant_swapped_b.patch) || echo "patch failed" | tee -a $LOG
python3 - "$W/stages/94_warp_redo_mutant/stage.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["parent"] = "41_warp_redo"
d["idea"] = "negative control (call 85): stage 41 with the two n8 tiles' B fragments swapped in the block done again"
json.dump(d, open(sys.argv[1], "w"), indent=2)
PY
TESTS="test_gpu_hardening test_gpu_causal test_gpu_stages test_gpu_any_length test_gpu_gqa test_gpu_lse"
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure85.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run fa_capi $TESTS -- -k 0 > /tmp/build85.log 2>&1
echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build85.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
FA_TEST_STAGES=41_warp_redo timeout 150 $W/build/tests/test_gpu_hardening > /tmp/hardening41.log 2>&1
echo "test_gpu_hardening [41] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/hardening41.log | tail -1)" | tee -a $LOG
grep -m3 -B2 -A12 FAILED /tmp/hardening41.log >> $LOG
FA_TEST_STAGES=94_warp_redo_mutant timeout 60 $W/build/tests/test_gpu_hardening "the row maximum planted*" > /tmp/mutant94.log 2>&1
echo "test_gpu_hardening planted [94, must fail] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/mutant94.log | tail -1)" | tee -a $LOG
grep -m1 -A6 "FAILED" /tmp/mutant94.log | cut -c1-160 >> $LOG
for test in test_gpu_causal test_gpu_stages test_gpu_any_length test_gpu_gqa test_gpu_lse; do
  FA_TEST_STAGES=41_warp_redo timeout 100 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [41] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m3 -B2 -A12 FAILED /tmp/$test.log >> $LOG
done
for dt in fp16 bf16; do
  FA_GIT_REV=$REV timeout 100 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --head-dim 64,128 \
    --seqs 1024,2048,4096,8192 --dtype $dt --stages 30,40,41 --references cudnn --warmup 10 --reps 30 \
    --csv $OUT/interleaved_30_40_41_$dt.csv > /tmp/rounds85_$dt.txt 2>&1
  echo "rounds $dt rc=$? $(t)" | tee -a $LOG
  grep -E "^(30_|40_|41_|cudnn|fp16|bf16)" /tmp/rounds85_$dt.txt | cut -c1-110 | tee -a $LOG
done
limit=$(left)
(cd $W && timeout $(( limit > 140 ? 100 : limit - 40 )) bash scripts/sanitize.sh --tool memcheck,racecheck \
  --stage 41 --fa-run build/fa_run --log-dir /tmp/sanitizer > $OUT/sanitize_41.txt 2>&1)
echo "sanitize [41] rc=$? $(t): $(tail -1 $OUT/sanitize_41.txt)" | tee -a $LOG
limit=$(left)
if [ "$limit" -ge 40 ]; then
  timeout $(( limit - 10 )) ncu --clock-control none -k regex:attention_kernel -c 1 --section SourceCounters \
    --section WarpStateStats --section ComputeWorkloadAnalysis --warp-sampling-interval 0 --import-source no \
    -f -o /tmp/ncu85 $W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1 --head-dim 128 \
    --seq 4096 --stage 41_warp_redo > /tmp/ncu85_run.txt 2>&1
  echo "ncu [41] rc=$? $(t)" | tee -a $LOG
  ncu -i /tmp/ncu85.ncu-rep --page source --csv --print-source sass > /tmp/source85.csv 2>/dev/null && \
    gzip -c /tmp/source85.csv > $OUT/source_41_warp_redo_s4096.csv.gz && \
    python3 docs/evidence/hopper/loop_phases.py /tmp/source85.csv 4063232 > $OUT/loop_phases_41.txt 2>&1
  cut -c1-150 $OUT/loop_phases_41.txt | tee -a $LOG
fi
echo "done $(t)" | tee -a $LOG
