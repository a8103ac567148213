#!/usr/bin/env bash
# Run in the eleventh session (REV=e1c1197; log and CSVs in call41/). Pass REV=<commit> from this machine:
# the device copy's git log is not this tree's.
# Call 41: (1) the new test_gpu_any_length case (last K/V blocks of 16/17, 32/33, 48/49 keys) over
# stages 11, 16, 32; (2) issue 11's 16 headline shapes with the order shuffled every round (call 34
# rotated it: cuDNN after FA2, call 38): stages 17, 21, 30 with FA2 and cuDNN; (3) stage 16's and 32's
# ALiBi cost in shuffled rounds; (4) probe 91 = stage 32 with the masked step compiled for 3 and 4
# live groups only (1-3 take 3; main loop 1,158 instructions at head_dim 128 against 1,181 for stage
# 32 and 1,127 for stage 16, sm_90 ptxas), and probe 92 = stage 32 with the last K/V block peeled out
# of the masked loop (the diagonal blocks before it take the 4-group step in the loop, the last one
# after it takes the switch: main loop 1,141, 56 IMAD.MOV.U32 against 94), against 16 and 32, tile
# multiples and any length. Trimmed
# tree; everything appended to $OUT/call41.txt, CSVs beside it (at most 8 files come back).
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
LOG=$OUT/call41.txt
W=/tmp/trim41; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/
for s in 11_any_length 16_alibi 17_tma_ring 21_pingpong 30_lazy_rescale 32_skip_padding; do cp -r stages/$s $W/stages/; done
P=$W/stages/91_probe_groups34; cp -r stages/32_skip_padding $P
python3 - "$P/kernel.cu" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
old = """      case 1: step(kv_block, true, KeyGroups<1>{}); break;
      case 2: step(kv_block, true, KeyGroups<2>{}); break;
      case 3: step(kv_block, true, KeyGroups<3>{}); break;"""
assert s.count(old) == 1
open(p, "w").write(s.replace(old, "      case 1: case 2: case 3: step(kv_block, true, KeyGroups<3>{}); break;"))
PY
sed -i 's/"parent": "16_alibi"/"parent": "32_skip_padding"/' $P/stage.json
P2=$W/stages/92_probe_peel; cp -r stages/32_skip_padding $P2
python3 - "$P2/kernel.cu" <<'PY'
import sys
p = sys.argv[1]; s = open(p).read()
old = """  for (; kv_block < num_kv_blocks; ++kv_block) {
    switch"""
new = """  for (; kv_block < num_kv_blocks - 1; ++kv_block) step(kv_block, true, KeyGroups<4>{});
  if (kv_block < num_kv_blocks) {
    switch"""
assert s.count(old) == 1
open(p, "w").write(s.replace(old, new))
PY
sed -i 's/"parent": "16_alibi"/"parent": "32_skip_padding"/' $P2/stage.json
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/configure.log 2>&1
cmake --build $W/build --parallel 16 --target fa_capi test_gpu_any_length > /tmp/build.log 2>&1
echo "build rc=$? $(t)" | tee -a $LOG; grep -m5 -E "error|FAILED" /tmp/build.log | tee -a $LOG
FA_TEST_STAGES=11_any_length,16_alibi,32_skip_padding,91_probe_groups34,92_probe_peel timeout 150 $W/build/tests/test_gpu_any_length \
  > /tmp/anylen_test.log 2>&1
echo "test_gpu_any_length [11,16,32,91,92] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/anylen_test.log | tail -1)" | tee -a $LOG
grep -m5 -B2 -A8 FAILED /tmp/anylen_test.log >> $LOG
I="timeout 170 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128"
FA_GIT_REV=$REV $I --stages 17,21,30 --seqs 1024,2048,4096,8192 --reps 60 \
  --csv $OUT/interleaved_hopper_headline.csv > /tmp/hopper.log 2>&1; echo "hopper headline rc=$? $(t)" | tee -a $LOG
FA_GIT_REV=$REV $I --stages 16,32 --alibi --seqs 1024,2048,4096,8192 --reps 40 --references "" \
  --csv $OUT/interleaved_alibi_16_32.csv > /tmp/alibi.log 2>&1; echo "alibi rc=$? $(t)" | tee -a $LOG
grep -h "ALiBi costs" /tmp/alibi.log | tee -a $LOG
FA_GIT_REV=$REV $I --stages 16,32,91,92 --seqs 1024,4096 --any-length 1000,4000 --references fa2 --reps 80 \
  --csv $OUT/interleaved_probes.csv > /tmp/probe.log 2>&1; echo "probes 91 92 rc=$? $(t)" | tee -a $LOG
grep -h "runs at" /tmp/probe.log | tee -a $LOG
cat /tmp/hopper.log /tmp/alibi.log /tmp/probe.log >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "^(fp16|bf16)|^17_|^21_|^30_|^fa2|^cudnn" /tmp/hopper.log | cut -c1-84
