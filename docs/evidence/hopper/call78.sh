#!/usr/bin/env bash
# Call 78 (twenty-first session): why stage 39's 160-key block is slower than stage 30's 128
# (call 77: +6.9% time at S = 2048, +3.8% at 4096, +2.3% at 8192 by the minimum, fp16, H100).
#   REV=<commit> bash docs/evidence/hopper/call78.sh      (no carry; about 4 minutes)
# Call 77's times fit, per tile, T = a + b x blocks: stage 30 a = 2.54 us, b = 1.577 us a 128-key
# block; stage 39 a = 4.27 us, b = 1.954 us a 160-key block (1.24 times for 1.25 times the keys,
# predicted 1.20). So two things: a per-tile cost of about 1.7 us more, and almost no gain per key.
# At 2048, 4096 and 8192 every tile of stage 39 ends with a partial block (12.8, 25.6, 51.2 blocks):
# 32 keys computed for nothing and the masked step, which stage 30 never runs there.
# (1) Shuffled rounds of 30 and 39, fp16, head_dim 128, at S = 2048, 2560, 4096, 5120, 8192: 160
#     divides 2560 and 5120 (no masked, no padded block). If the per-tile cost is the masked last
#     block, 39 against 30 is much better there than at 2048 and 4096 (the per-block 1.24 alone
#     gives about -0.8% time).
# (2) ncu, fp16 [16, S, 32, 128], S = 2048 and 4096, one launch each of stages 30 and 39: cycles,
# instructions executed, issue activity, the tensor pipe's (gmma) activity, every per-reason stall.
# Hypotheses (page 39): (a) the loop's fixed cost is not fixed: the tensor pipe is idle longer per
# block (gmma % of cycles drops) because the softmax of 160 keys is on the critical path between
# the two warpgroups' GEMMs; (b) the instructions executed grow (spill traffic, padding) more than
# the static count says. (a) predicts instructions executed -5..-8% per key and cycles up; (b)
# predicts instructions executed up.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out78}; mkdir -p $OUT
LOG=$OUT/call78.txt
STAGES="30_lazy_rescale 39_wide_kv"
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim78}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tests scripts tools $W/
for s in $STAGES; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure78.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run fa_capi > /tmp/build78.log 2>&1
echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build78.log | tee -a $LOG
FA_GIT_REV=$REV timeout 200 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --head-dim 128 \
  --seqs 2048,2560,4096,5120,8192 --dtype fp16 --stages 30,39 --references cudnn --warmup 10 --reps 30 \
  --csv $OUT/interleaved_30_39_divides.csv > $OUT/rounds_divides.txt 2>&1
echo "rounds rc=$? $(t)" | tee -a $LOG
grep -E "^(30_|39_|cudnn|fp16)" $OUT/rounds_divides.txt | cut -c1-110 | tee -a $LOG
# (2) ncu
ncu --query-metrics --chip gh100 > /tmp/ncu_all_metrics.txt 2>&1
P=smsp__average_warps_issue_stalled_; S=_per_issue_active
M=$(grep -oE "^${P}[a-z_]+${S}" /tmp/ncu_all_metrics.txt | sort -u | sed 's/$/.ratio/' | paste -sd, -)
M+=",sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_per_inst_issued.ratio"
M+=",smsp__inst_executed.sum,sm__cycles_elapsed.max,smsp__issue_active.avg.pct_of_peak_sustained_active"
M+=",sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_op_local_ld.sum,smsp__inst_executed_op_local_st.sum"
M+=",launch__registers_per_thread,launch__shared_mem_per_block_dynamic,gpu__time_duration.sum"
for seq in 2048 5120; do
  for st in $STAGES; do
    echo "=== ncu $st S=$seq" >> $OUT/ncu_30_39.txt
    timeout 90 ncu --clock-control none -k regex:attention_kernel -c 1 --section WarpStateStats --metrics $M \
      $W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1 --head-dim 128 --seq $seq \
      --stage $st >> $OUT/ncu_30_39.txt 2>&1
    echo "ncu $st S=$seq rc=$? $(t)" | tee -a $LOG
  done
done
grep -E "^=== |attention_kernel|inst_executed.sum|inst_executed_op_local|cycles_elapsed.max|gmma_cycles|pipe_shared|latency_per_inst|issue_active|gpu__time|registers_per|shared_mem_per|stalled_(wait|barrier|long_scoreboard|dispatch_stall|not_selected|math_pipe_throttle|short_scoreboard|mio_throttle|gmma|selected|sleeping|membar|branch_resolving|no_instruction|lg_throttle)_per" \
  $OUT/ncu_30_39.txt | sed 's/  */ /g' | tee -a $LOG
echo "done $(t)" | tee -a $LOG
