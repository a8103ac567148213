#!/usr/bin/env bash
# Call 39 (tenth session): stage 32_skip_padding's first GPU run, and issue 12's any-length rule judged
# in shared rounds. Trimmed tree (stages 11, 16, 32). In order of what matters most if the time limit
# cuts the call short: build; stage 32's GPU suites; tools/interleaved.py (order shuffled each round)
# with 16 and 32 at S = 1024 / 4096 and, in the same rounds, 1000 / 4000; 11, 16 and 32 at the
# headline shapes without features (the 2% rule) and causal (against FA2); hardening of 32;
# memcheck over 32. Everything is appended to $OUT/call39.txt as it is written.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
LOG=$OUT/call39.txt
W=/tmp/trim39; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/
for s in 11_any_length 16_alibi 32_skip_padding; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/configure.log 2>&1
cmake --build $W/build --parallel 16 > /tmp/build.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build.log | tee -a $LOG
for test in test_gpu_stages test_gpu_any_length test_gpu_causal test_gpu_alibi test_gpu_lse test_gpu_gqa; do
  FA_TEST_STAGES=32_skip_padding timeout 120 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [32] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
done
I="timeout 150 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128"
FA_GIT_REV=$REV $I --stages 16,32 --seqs 1024,4096 --any-length 1000,4000 --references "" --reps 100 \
  --csv $OUT/interleaved_anylength_16_32.csv > /tmp/anylength.log 2>&1; echo "any-length rc=$? $(t)" | tee -a $LOG
grep -h "runs at" /tmp/anylength.log | tee -a $LOG
FA_GIT_REV=$REV $I --stages 11,16,32 --seqs 1024,2048,4096,8192 --reps 60 \
  --csv $OUT/interleaved_ampere_headline.csv > /tmp/headline.log 2>&1; echo "headline rc=$? $(t)" | tee -a $LOG
FA_GIT_REV=$REV $I --stages 16,32 --seqs 1024,2048,4096,8192 --reps 60 --causal \
  --csv $OUT/interleaved_ampere_causal.csv > /tmp/causal.log 2>&1; echo "causal rc=$? $(t)" | tee -a $LOG
cat /tmp/anylength.log /tmp/headline.log /tmp/causal.log >> $LOG
FA_TEST_STAGES=32_skip_padding timeout 150 $W/build/tests/test_gpu_hardening > /tmp/hard.log 2>&1
echo "test_gpu_hardening [32] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/hard.log | tail -1)" | tee -a $LOG
grep -m10 -B2 -A8 FAILED /tmp/hard.log /tmp/test_gpu_*.log >> $LOG
(cd $W && timeout 120 bash scripts/sanitize.sh --tool memcheck --stage 32 --fa-run build/fa_run \
  --log-dir /tmp/sanitizer > /tmp/sanitize.log 2>&1)
echo "memcheck [32] rc=$? $(t): $(tail -1 /tmp/sanitize.log)" | tee -a $LOG
grep -E "FAIL|ERROR" /tmp/sanitize.log | head -10 >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "^(fp16|bf16)|^1[16]_|^32_|^fa2|^cudnn" /tmp/headline.log /tmp/causal.log | cut -c1-84
