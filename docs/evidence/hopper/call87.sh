#!/usr/bin/env bash
# Call 87 (twenty-third session): the new hardening case "the row maximum rising in every K/V block,
# masked ones too" (tests/test_gpu_hardening.cpp), which takes the masked step's rescale (stages
# 30-41) and the block done again with its mask (40, 41) on the causal diagonal and the partial last
# block, with every general feature each stage declares. Run on stages 30, 38, 40 and 41, and on
# mutant 95 (stage 41 with the redo's mask left out: call87/mutant_no_redo_mask.patch), which must
# FAIL it: the case reaches the masked redo. Needs Catch2 carried:
#   REV=<commit> bash docs/evidence/hopper/call87.sh          (carry [".deps"]; about 2 minutes)
# Prediction: 30, 38, 40, 41 pass (they pass the planted-maximum case and the causal suites); 95
# fails on its causal and any-length problems.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out87}; mkdir -p $OUT
LOG=$OUT/call87.txt
echo "git $REV $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" | tee -a $LOG
W=${W:-/tmp/trim87}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tests scripts tools $W/; cp -r .deps/include .deps/lib $W/.deps/ 2>/dev/null
cp -r stages/30_lazy_rescale stages/38_column_setup stages/40_speculative_max stages/41_warp_redo $W/stages/
cp -r stages/41_warp_redo $W/stages/95_no_redo_mask_mutant
(cd $W/stages/95_no_redo_mask_mutant && patch -s -p1 < $OLDPWD/docs/evidence/hopper/call87/mutant_no_redo_mask.patch) || echo "patch failed" | tee -a $LOG
python3 - "$W/stages/95_no_redo_mask_mutant/stage.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["parent"] = "41_warp_redo"
d["idea"] = "negative control (call 87): stage 41 with the block done again's mask left out"
json.dump(d, open(sys.argv[1], "w"), indent=2)
PY
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure87.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target test_gpu_hardening -- -k 0 > /tmp/build87.log 2>&1
echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build87.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
CASE="general-attention features all on: the row maximum rising*"
for s in 30_lazy_rescale 38_column_setup 40_speculative_max 41_warp_redo 95_no_redo_mask_mutant; do
  FA_TEST_STAGES=$s timeout 120 $W/build/tests/test_gpu_hardening "$CASE" > /tmp/rising_$s.log 2>&1
  echo "rising maximum [$s] rc=$? $(t): $(grep -E 'All tests passed|test cases|assertions' /tmp/rising_$s.log | tail -1)" | tee -a $LOG
  grep -m2 -A8 "FAILED" /tmp/rising_$s.log | cut -c1-170 >> $LOG
done
echo "done $(t)" | tee -a $LOG
