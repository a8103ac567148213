#!/usr/bin/env bash
# Run in the twelfth session (REV=c5627e7, output in call45/). Prepared in the eleventh (its CPU part -- the trimmed tree,
# the probes' edits, configure and build -- checked on the CPU with MAKE_ONLY=1 ARCH=80 JOBS=2).
# Call 45: (1) stage 33_lpt_order's first GPU run: its stage, causal, any-length, GQA, LSE, ALiBi and
# hardening suites and memcheck on every general shape; (2) stages 32 and 33 with FA2 and cuDNN in
# shuffled rounds, causal at S = 1024-8192 (the prediction: 33 faster by 4.2-5.3% at 1024, 2.0-3.3%
# at 2048, 1.5-1.7% at 4096, 0.7-0.8% at 8192; docs/stages/33_lpt_order.md), both dtypes and head
# dims, with two probes of the L2 share that sizes the groups: 93 = a quarter of L2, 94 = all of
# it; (3) 32 and 33 without causal (the same order: equal within the rounds' spread). About 5
# minutes. (The Hopper pages' ncu profiles are call46.sh.)
# Run as: REV=<commit> bash docs/evidence/ampere/call45.sh (pass REV from this machine: the device
# copy's git log is not this tree's). Trimmed tree; everything appended to $OUT/call45.txt, the
# interleaved CSVs beside it.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
LOG=${OUT:-/tmp}/call45.txt
W=${W:-/tmp/trim45}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/ 2>/dev/null
for s in 32_skip_padding 33_lpt_order; do
  cp -r stages/$s $W/stages/
done
probe() {  # probe NAME DIVISOR: stage 33 with another share of L2 for a group's K and V
  cp -r stages/33_lpt_order $W/stages/$1
  sed -i "s/constexpr int64_t kL2ShareDivisor = 2;/constexpr int64_t kL2ShareDivisor = $2;/" $W/stages/$1/block_order.h
  if cmp -s stages/33_lpt_order/block_order.h $W/stages/$1/block_order.h; then echo "probe $1: the edit matched nothing" >&2; exit 2; fi
  sed -i 's/"parent": "32_skip_padding"/"parent": "33_lpt_order"/' $W/stages/$1/stage.json
}
probe 93_probe_quarter_l2 4
probe 94_probe_whole_l2 1
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure45.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build45.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build45.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0

# (1) The suites over stage 33 (and the probes: the same kernel with other groups).
for test in test_gpu_stages test_gpu_causal test_gpu_any_length test_gpu_gqa test_gpu_lse test_gpu_alibi; do
  FA_TEST_STAGES=33_lpt_order,93_probe_quarter_l2,94_probe_whole_l2 timeout 120 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [33,93,94] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A8 FAILED /tmp/$test.log >> $LOG
done
FA_TEST_STAGES=33_lpt_order timeout 100 $W/build/tests/test_gpu_hardening > /tmp/hard.log 2>&1
echo "test_gpu_hardening [33] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/hard.log | tail -1)" | tee -a $LOG
grep -m5 -B2 -A8 FAILED /tmp/hard.log >> $LOG
(cd $W && timeout 60 bash scripts/sanitize.sh --tool memcheck --stage 33 --fa-run build/fa_run \
  --log-dir /tmp/sanitizer > /tmp/sanitize.log 2>&1)
echo "memcheck [33] rc=$? $(t): $(tail -1 /tmp/sanitize.log)" | tee -a $LOG

# (2), (3) Shuffled rounds.
I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128 --seqs 1024,2048,4096,8192"
FA_GIT_REV=$REV timeout 200 $I --stages 32,33,93,94 --causal --reps 60 --csv $OUT/interleaved_causal_32_33.csv \
  > /tmp/causal.log 2>&1; echo "causal rounds rc=$? $(t)" | tee -a $LOG
FA_GIT_REV=$REV timeout 150 $I --stages 32,33 --references fa2 --reps 40 --csv $OUT/interleaved_headline_32_33.csv \
  > /tmp/headline.log 2>&1; echo "headline rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/causal.log /tmp/headline.log >> $LOG

echo "done $(t)" | tee -a $LOG
grep -hE "^(fp16|bf16)|^3[23]_|^9[34]_|^fa2|^cudnn" /tmp/causal.log | cut -c1-84
