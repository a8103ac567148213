#!/usr/bin/env bash
# Call 84 (twenty-third session): probe 93, not a stage, and not correct in general: stage 40 with
# each warp's own vote (__all_sync) instead of the warpgroup's bar.red.and (call84/warp_vote.patch).
# Call 83's ncu put 6.6% of stage 40's samples on the vote (the BAR.RED, the B2R.RESULT that reads
# it, the first FADD that uses it): a warp waiting there for the slowest of its warpgroup's four.
# A warp's vote is not enough for correctness (a warp failing alone would issue the redo's wgmma
# without the other three), but on randn data no warp fails after the first block, so the probe
# times the step without the barrier: an upper bound on what any cheaper warpgroup decision
# (a flag in shared memory read after a barrier the warps pass anyway) could take back.
#   REV=<commit> bash docs/evidence/hopper/call84.sh          (no carry; about 2 minutes)
# (1) build stages 30, 40 and 93; (2) shuffled rounds of 40 and 93 (30 as well) with cuDNN, fp16,
# head_dim 64 and 128, S = 1024..8192, every output checked against fp64 first; (3) ncu source
# counters on 93 (fp16 [16, 4096, 32, 128]).
# Prediction: if the vote's samples are the warps' drift that the next wgmma (.sync.aligned over
# the warpgroup) would wait for anyway, 93 = 40 within 1% and the samples move to the wgmma issue;
# if the barrier costs more than the alignment, up to -3 to -5% at head_dim 128.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-230} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out84}; mkdir -p $OUT
LOG=$OUT/call84.txt
echo "git $REV $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" | tee -a $LOG
W=${W:-/tmp/trim84}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tests scripts tools $W/
cp -r stages/30_lazy_rescale stages/40_speculative_max $W/stages/
cp -r stages/40_speculative_max $W/stages/93_warp_vote
(cd $W/stages/93_warp_vote && patch -s -p1 < $OLDPWD/docs/evidence/hopper/call84/warp_vote.patch) || echo "patch failed" | tee -a $LOG
python3 - "$W/stages/93_warp_vote/stage.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["parent"] = "40_speculative_max"
d["idea"] = "probe (timing only): stage 40 with each warp's vote instead of the warpgroup's barrier (call 84)"
json.dump(d, open(sys.argv[1], "w"), indent=2)
PY
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure84.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run fa_capi -- -k 0 > /tmp/build84.log 2>&1
echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED|warning" /tmp/build84.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
FA_GIT_REV=$REV timeout 100 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --head-dim 64,128 \
  --seqs 1024,2048,4096,8192 --dtype fp16 --stages 30,40,93 --references cudnn --warmup 10 --reps 30 \
  --csv $OUT/interleaved_30_40_93_fp16.csv > /tmp/rounds84.txt 2>&1
echo "rounds fp16 rc=$? $(t)" | tee -a $LOG
grep -E "^(30_|40_|93_|cudnn|fp16|bf16)" /tmp/rounds84.txt | cut -c1-110 | tee -a $LOG
limit=$(left)
if [ "$limit" -ge 30 ]; then
  timeout $(( limit - 5 )) ncu --clock-control none -k regex:attention_kernel -c 1 --section SourceCounters \
    --section WarpStateStats --section ComputeWorkloadAnalysis --warp-sampling-interval 0 --import-source no \
    -f -o /tmp/ncu84 $W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1 --head-dim 128 \
    --seq 4096 --stage 93_warp_vote > /tmp/ncu84_run.txt 2>&1
  echo "ncu [93] rc=$? $(t)" | tee -a $LOG
  ncu -i /tmp/ncu84.ncu-rep --page source --csv --print-source sass > /tmp/source84.csv 2>/dev/null && \
    gzip -c /tmp/source84.csv > $OUT/source_93_warp_vote_s4096.csv.gz && \
    python3 docs/evidence/hopper/loop_phases.py /tmp/source84.csv 4063232 > $OUT/loop_phases_93.txt 2>&1
  cut -c1-150 $OUT/loop_phases_93.txt | tee -a $LOG
fi
echo "done $(t)" | tee -a $LOG
