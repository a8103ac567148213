#!/usr/bin/env bash
# Call 70 (nineteenth session): why stage 13 (causal, with causal off) is 2.6-4.2% slower than stage
# 11 at head_dim 64 (calls 68/69), when its unmasked loop executes only 15 more instructions on a
# whole block's path (665 against 650, sm_90) and stage 11 runs within 1.7% of stage 10 with 11 more.
#   REV=<commit> bash docs/evidence/ampere/call70.sh      (about 3 minutes)
# ncu, one launch each of stages 10, 11, 13 and 38, fp16 [16, S, 32, 64], S = 1024 and 4096,
# non-causal: every per-reason stall, instructions executed, cycles, issue activity, occupancy and
# the launch's registers. Expectation if the count were the cause: 13's cycles over 11's = its
# instructions over 11's (about +2%); a larger ratio means a latency (a stall reason) or occupancy.
set -o pipefail
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out70}; mkdir -p $OUT
LOG=$OUT/call70.txt
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim70}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/ 2>/dev/null
STAGES="10_lane_addresses 11_any_length 13_causal 38_column_setup"
for s in $STAGES; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure70.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run > /tmp/build70.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build70.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
ncu --query-metrics --chip gh100 > /tmp/ncu_all_metrics.txt 2>&1
P=smsp__average_warps_issue_stalled_; S=_per_issue_active
M=$(grep -oE "^${P}[a-z_]+${S}" /tmp/ncu_all_metrics.txt | sort -u | sed 's/$/.ratio/' | paste -sd, -)
M+=",smsp__average_warp_latency_per_inst_issued.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.max"
M+=",sm__cycles_active.avg,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active"
M+=",sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed_pipe_lsu.sum"
M+=",l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,launch__registers_per_thread,launch__occupancy_limit_registers"
for seq in 1024 4096; do
  for st in $STAGES; do
    echo "=== ncu $st fp16 head_dim 64 seq $seq" >> $OUT/ncu_10_11_13_38.txt
    timeout 90 ncu --clock-control none -k regex:attention_kernel -c 1 --metrics $M \
      $W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1 --head-dim 64 --seq $seq --stage $st \
      >> $OUT/ncu_10_11_13_38.txt 2>&1
    echo "ncu $st s$seq rc=$? $(t)" | tee -a $LOG
  done
done
echo "done $(t)" | tee -a $LOG
grep -E "^=== |inst_executed.sum|cycles_elapsed.max|cycles_active.avg|latency_per_inst|issue_active|warps_active|hmma|registers|occupancy_limit|bank_conflicts|stalled_(wait|barrier|long_scoreboard|dispatch_stall|not_selected|math_pipe_throttle|short_scoreboard|mio_throttle|selected|no_instruction|lg_throttle|tex_throttle|drain|branch_resolving|imc_miss|sleeping|misc)_per" \
  $OUT/ncu_10_11_13_38.txt | sed 's/  */ /g' | tee -a $LOG | cut -c1-110
