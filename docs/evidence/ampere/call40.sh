#!/usr/bin/env bash
# Call 40 (tenth session): stage 32 rewritten after call 39 (which had the masked step compiled once
# per count of live 16-key groups, 4 copies, and ran 2.6-2.9% behind stage 16 at head_dim 128 on
# tile multiples: ptxas gave the main loop 54 more instructions). Now one masked step that skips
# the MMAs of dead groups under a run-time count. Trimmed tree (16, 32): build; stage 32's GPU
# suites; interleaved (shuffled rounds) 16 vs 32 at the headline shapes and any length; memcheck.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
LOG=$OUT/call40.txt
W=/tmp/trim40; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/
for s in 16_alibi 32_skip_padding; do cp -r stages/$s $W/stages/; done
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
FA_GIT_REV=$REV $I --stages 16,32 --seqs 2048,8192 --reps 40 --references fa2 \
  --csv $OUT/interleaved_headline_16_32.csv > /tmp/headline.log 2>&1; echo "headline rc=$? $(t)" | tee -a $LOG
cat /tmp/anylength.log /tmp/headline.log >> $LOG
(cd $W && timeout 100 bash scripts/sanitize.sh --tool memcheck --stage 32 --fa-run build/fa_run \
  --log-dir /tmp/sanitizer > /tmp/sanitize.log 2>&1)
echo "memcheck [32] rc=$? $(t): $(tail -1 /tmp/sanitize.log)" | tee -a $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "^(fp16|bf16)|^16_|^32_|^fa2" /tmp/anylength.log /tmp/headline.log | grep -v "runs at" | cut -c1-84
