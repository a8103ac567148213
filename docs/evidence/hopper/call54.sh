#!/usr/bin/env bash
# Call 54 (fourteenth session): stage 35_cross_tile's first GPU run.
#   REV=<commit> bash docs/evidence/hopper/call54.sh      (carry .deps; about 5 minutes)
# (1) its GPU suites (stage, causal, any length, GQA, LSE, hardening) and memcheck: the boundary
#     step carries a pending P V from tile to tile (also across tiles without keys, under causal with
#     seq_q > seq_kv) and Q has two slots, so a wrong parity or a lost P V shows there; every test
#     runs under a timeout;
# (2) issue 11's 16 headline shapes in shuffled rounds, stages 21, 30, 34, 35 with FA2 and cuDNN;
#     prediction (page 35): the boundary's GEMM-free time (block 0's S and softmax alone, the Q wait;
#     about 1,000-1,500 of 19,500-24,000 cycles a tile at S = 1024) mostly goes: +4 to +6% over
#     stage 34 at S = 1024, about half at 2048, ~1% above; less (or a loss) at head_dim 64 S >= 2048,
#     where the 192-row tile spills more at the boundary (162 LDL/STL against 85);
# (3) causal, stages 34 and 35 (shorter tiles: a larger gain).
# Output: $OUT/call54.txt (log), the rounds' CSVs beside it.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out54}; mkdir -p $OUT
LOG=$OUT/call54.txt
W=${W:-/tmp/trim54}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/ 2>/dev/null
for s in 21_pingpong 30_lazy_rescale 34_tma_store 35_cross_tile; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure54.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build54.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build54.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0

for test in test_gpu_stages test_gpu_causal test_gpu_any_length test_gpu_gqa test_gpu_lse test_gpu_hardening; do
  FA_TEST_STAGES=35_cross_tile timeout 120 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [35] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A8 -E "FAILED|timed out" /tmp/$test.log >> $LOG
done
(cd $W && timeout 90 bash scripts/sanitize.sh --tool memcheck --stage 35 --fa-run build/fa_run \
  --log-dir /tmp/sanitizer > /tmp/sanitize.log 2>&1)
echo "memcheck [35] rc=$? $(t): $(tail -1 /tmp/sanitize.log)" | tee -a $LOG
grep -E "FAIL|ERROR" /tmp/sanitize.log | head -10 >> $LOG

I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128"
FA_GIT_REV=$REV timeout 160 $I --stages 21,30,34,35 --seqs 1024,2048,4096,8192 --reps 50 \
  --csv $OUT/interleaved_headline_21_30_34_35.csv > /tmp/headline.log 2>&1; echo "headline rounds rc=$? $(t)" | tee -a $LOG
FA_GIT_REV=$REV timeout 120 $I --stages 34,35 --causal --seqs 1024,2048,4096,8192 --reps 40 \
  --csv $OUT/interleaved_causal_34_35.csv > /tmp/causal.log 2>&1; echo "causal rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/headline.log /tmp/causal.log >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "^(fp16|bf16)|^2[1]_|^3[045]_|^fa2|^cudnn" /tmp/headline.log | cut -c1-84
