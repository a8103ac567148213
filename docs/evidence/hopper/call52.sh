#!/usr/bin/env bash
# Call 52 (fourteenth session): stage 34_tma_store's first GPU run.
#   REV=<commit> bash docs/evidence/hopper/call52.sh      (carry .deps; about 5 minutes)
# (1) its GPU suites (stage, causal, any length, GQA, LSE, hardening) and memcheck: O now leaves
#     through TMA stores (rows past seq_q clipped by the tensor map, the staging tile reused after a
#     bulk wait), so any length and the zero-key tiles matter most; every test runs under a timeout;
# (2) issue 11's 16 headline shapes in shuffled rounds, stages 21, 30, 34 with FA2 and cuDNN;
#     prediction (page 34): the epilogue's copy loop (1,100-2,000 cycles a tile, call 51) shrinks to
#     the staging stores, worth ~3-4% over stage 30 at S = 1024 (head_dim 128), ~2-3% at head_dim
#     64, about half that at 2048, ~1% or less above;
# (3) causal and any length, stages 30 and 34 in the same rounds (causal tiles are shorter, so the
#     gain should be larger there).
# Output: $OUT/call52.txt (log), the rounds' CSVs beside it.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out52}; mkdir -p $OUT
LOG=$OUT/call52.txt
W=${W:-/tmp/trim52}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/ 2>/dev/null
for s in 21_pingpong 30_lazy_rescale 34_tma_store; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure52.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build52.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build52.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0

for test in test_gpu_stages test_gpu_causal test_gpu_any_length test_gpu_gqa test_gpu_lse test_gpu_hardening; do
  FA_TEST_STAGES=34_tma_store timeout 120 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [34] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A8 -E "FAILED|timed out" /tmp/$test.log >> $LOG
done
(cd $W && timeout 90 bash scripts/sanitize.sh --tool memcheck --stage 34 --fa-run build/fa_run \
  --log-dir /tmp/sanitizer > /tmp/sanitize.log 2>&1)
echo "memcheck [34] rc=$? $(t): $(tail -1 /tmp/sanitize.log)" | tee -a $LOG
grep -E "FAIL|ERROR" /tmp/sanitize.log | head -10 >> $LOG

I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128"
FA_GIT_REV=$REV timeout 160 $I --stages 21,30,34 --seqs 1024,2048,4096,8192 --reps 60 \
  --csv $OUT/interleaved_headline_21_30_34.csv > /tmp/headline.log 2>&1; echo "headline rounds rc=$? $(t)" | tee -a $LOG
FA_GIT_REV=$REV timeout 120 $I --stages 30,34 --causal --seqs 1024,2048,4096,8192 --reps 40 \
  --csv $OUT/interleaved_causal_30_34.csv > /tmp/causal.log 2>&1; echo "causal rounds rc=$? $(t)" | tee -a $LOG
FA_GIT_REV=$REV timeout 60 $I --stages 30,34 --seqs 1024,4096 --any-length 1000,4000 --references "" --reps 40 \
  --csv $OUT/interleaved_any_length_30_34.csv > /tmp/anylen.log 2>&1; echo "any-length rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/headline.log /tmp/causal.log /tmp/anylen.log >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "^(fp16|bf16)|^2[1]_|^3[04]_|^fa2|^cudnn" /tmp/headline.log | cut -c1-84
grep -h "runs at" /tmp/anylen.log
