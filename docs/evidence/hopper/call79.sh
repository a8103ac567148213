#!/usr/bin/env bash
# Call 79 (twenty-second session): issue 11's lead from call 78, measured. Where do the cycles of
# one consumer warpgroup's chain go in stage 30's loop (fp16, head_dim 128, [16, 4096, 32, 128])?
#   REV=<commit> bash docs/evidence/hopper/call79.sh        (no carry; about 2 minutes)
# The model (performance log, "Where to go next"): the tensor pipe stays busy only if each
# consumer warpgroup's chain per block (wait for its S, row max, exponentials, row sum, pack P, wait
# for its P V, rescale, hand over the turn) takes at most two GEMM times, ~2,050 cycles at 128 keys;
# call 78's 523 idle cycles a block say it takes ~2,570. ncu's source counters sample each warp's
# state every few cycles and charge the sample to the instruction it waits on, so the loop's
# samples split the chain by instruction: the S wait (wgmma.wait_group), the barrier of the turn,
# the row max's shuffles, MUFU.EX2, the P V wait.
# Prediction: most of the loop's samples sit on the two wgmma waits (the warpgroup waiting for its
# own GEMMs) and on the turn's barrier (waiting for the other's); the softmax's own instructions
# (FMNMX, SHFL, FFMA, MUFU.EX2, F2FP) carry a share that matches ~500 cycles a block out of ~2,570.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out79}; mkdir -p $OUT
LOG=$OUT/call79.txt
STAGE=${STAGE:-30_lazy_rescale}; SEQ=${SEQ:-4096}
echo "git $REV $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" | tee -a $LOG
W=${W:-/tmp/trim79}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tests scripts tools $W/
cp -r stages/$STAGE $W/stages/
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure79.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run > /tmp/build79.log 2>&1
echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build79.log | tee -a $LOG
# One launch (the run checks its output against fp64 on a slice first: fa_run's default).
timeout 240 ncu --clock-control none -k regex:attention_kernel -c 1 \
  --section SourceCounters --section WarpStateStats --section ComputeWorkloadAnalysis \
  --warp-sampling-interval 0 --import-source no -f -o $OUT/ncu_${STAGE}_s${SEQ} \
  $W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1 --head-dim 128 --seq $SEQ \
  --stage $STAGE > $OUT/ncu_run.txt 2>&1
echo "ncu rc=$? $(t)" | tee -a $LOG
tail -5 $OUT/ncu_run.txt | tee -a $LOG
ncu -i $OUT/ncu_${STAGE}_s${SEQ}.ncu-rep --page source --csv --print-source sass > /tmp/source79.csv 2>&1
echo "source page rc=$? lines $(wc -l < /tmp/source79.csv) $(t)" | tee -a $LOG
head -c 600 /tmp/source79.csv | tee -a $LOG; echo | tee -a $LOG
gzip -c /tmp/source79.csv > $OUT/source_${STAGE}_s${SEQ}.csv.gz
ncu -i $OUT/ncu_${STAGE}_s${SEQ}.ncu-rep --page details --print-units base > $OUT/details.txt 2>&1
grep -E "Warp Cycles Per Issued|Issue Slots Busy|Stall|Duration|Elapsed Cycles" $OUT/details.txt | head -30 | tee -a $LOG
python3 docs/evidence/hopper/source_stalls.py /tmp/source79.csv 2>&1 | tee -a $OUT/source_summary.txt | tail -70
echo "done $(t)" | tee -a $LOG
