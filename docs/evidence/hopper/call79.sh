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
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out79}; mkdir -p $OUT
LOG=$OUT/call79.txt
SEQ=${SEQ:-4096}
echo "git $REV $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)" | tee -a $LOG
W=${W:-/tmp/trim79}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tests scripts tools $W/
cp -r stages/30_lazy_rescale $W/stages/
# Probe 91 (not a stage): stage 30 with S = Q K^T issued as two commit groups of 64 keys
# (m64n64k16), each half's softmax after its own wait, so the softmax of keys 0-63 runs while the
# tensor pipe computes keys 64-127 (call79/split_scores.patch).
cp -r stages/30_lazy_rescale $W/stages/91_split_scores
(cd $W/stages/91_split_scores && patch -s -p1 < $OLDPWD/docs/evidence/hopper/call79/split_scores.patch) || echo "patch failed" | tee -a $LOG
python3 - "$W/stages/91_split_scores/stage.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["parent"] = "30_lazy_rescale"
d["idea"] = "probe: stage 30 with S in two commit groups of 64 keys, each half's softmax after its own wait (call 79)"
json.dump(d, open(sys.argv[1], "w"), indent=2)
PY
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure79.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run fa_capi > /tmp/build79.log 2>&1
echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED|warning" /tmp/build79.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
# Probe 91 against stage 30 (and cuDNN), shuffled rounds, every output checked against fp64 first.
# Prediction for the probe: if the chain is what leaves the tensor pipe idle (~523 cycles a block
# at 128 keys, call 78), starting the softmax ~256 cycles earlier (the second half's GEMM time)
# takes up to half of that idle: -5 to -10% time at head_dim 128, S >= 2048; m64n64k16 reads Q
# once per 64 keys instead of 128 (smem 128 B/clk for the S GEMM against 96), which may cost some.
for dt in fp16 bf16; do
  FA_GIT_REV=$REV timeout 150 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --head-dim 64,128 \
    --seqs 1024,2048,4096,8192 --dtype $dt --stages 30,91 --references cudnn --warmup 10 --reps 30 \
    --csv $OUT/interleaved_30_91_$dt.csv > $OUT/rounds_$dt.txt 2>&1
  echo "rounds $dt rc=$? $(t)" | tee -a $LOG
  grep -E "^(30_|91_|cudnn|fp16|bf16)" $OUT/rounds_$dt.txt | cut -c1-110 | tee -a $LOG
  cat $OUT/rounds_$dt.txt >> /tmp/rounds79.txt; rm $OUT/rounds_$dt.txt
done
# One launch each (fa_run checks its output against fp64 on a slice first), source counters:
# every warp's state sampled, charged to the instruction it sits at. Reports stay in /tmp (size);
# the source pages come back compressed, the summaries in source_summary.txt.
for st in 30_lazy_rescale 91_split_scores; do
  R=/tmp/ncu79_${st}_s${SEQ}
  timeout 150 ncu --clock-control none -k regex:attention_kernel -c 1 \
    --section SourceCounters --section WarpStateStats --section ComputeWorkloadAnalysis \
    --warp-sampling-interval 0 --import-source no -f -o $R \
    $W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1 --head-dim 128 --seq $SEQ \
    --stage $st > /tmp/ncu79_run.txt 2>&1
  echo "ncu $st rc=$? $(t)" | tee -a $LOG
  grep -E "PASS|FAIL|rror" /tmp/ncu79_run.txt | cut -c1-130 | tee -a $LOG
  ncu -i $R.ncu-rep --page source --csv --print-source sass > /tmp/source79_$st.csv 2>&1
  echo "source page rc=$? lines $(wc -l < /tmp/source79_$st.csv) $(t)" | tee -a $LOG
  gzip -c /tmp/source79_$st.csv > $OUT/source_${st}_s${SEQ}.csv.gz
  echo "=== $st" >> $OUT/details.txt
  ncu -i $R.ncu-rep --page details --print-units base >> $OUT/details.txt 2>&1
  echo "=== $st" >> $OUT/source_summary.txt
  python3 docs/evidence/hopper/source_stalls.py /tmp/source79_$st.csv >> $OUT/source_summary.txt 2>&1
done
head -c 400 /tmp/source79_30_lazy_rescale.csv; echo
grep -E "^=== |Warp Cycles Per Issued|Issue Slots Busy|Duration|Elapsed Cycles" $OUT/details.txt | tee -a $LOG
grep -vE "^columns:" $OUT/source_summary.txt | grep -E "^=== |^instructions|^  [a-z]" | cut -c1-150 | tee -a $LOG
grep -A25 "^top" $OUT/source_summary.txt | cut -c1-150 | head -60
echo "done $(t)" | tee -a $LOG
