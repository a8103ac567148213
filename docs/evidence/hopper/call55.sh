#!/usr/bin/env bash
# Call 55 (fourteenth session): why stage 35 (the cross-tile step) is slower than stage 34.
#   REV=<commit> bash docs/evidence/hopper/call55.sh      (carry .deps; about 3 minutes)
# ncu, one launch each of stages 34 and 35, fp16 [16, 1024, 32, D] at D = 128 and 64 (where 35 lost
# 2.8% and 0.5% in call 54): every per-reason stall, the tensor pipe, instructions executed, cycles,
# local-memory traffic. Expectations if the boundary step worked as designed: fewer cycles at equal
# instructions; what call 54 measured instead (more time) says the step costs more than it hides:
# more instructions (the spills, the P = 0 wgmmas), or a longer wait somewhere (the stall reasons).
set -o pipefail
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out55}; mkdir -p $OUT
LOG=$OUT/call55.txt
W=${W:-/tmp/trim55}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/ 2>/dev/null
for s in 30_lazy_rescale 34_tma_store 35_cross_tile; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure55.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run > /tmp/build55.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build55.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
ncu --query-metrics --chip gh100 > /tmp/ncu_all_metrics.txt 2>&1
P=smsp__average_warps_issue_stalled_; S=_per_issue_active
M=$(grep -oE "^${P}[a-z_]+${S}" /tmp/ncu_all_metrics.txt | sort -u | sed 's/$/.ratio/' | paste -sd, -)
M+=",sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_per_inst_issued.ratio"
M+=",smsp__inst_executed.sum,sm__cycles_elapsed.max,smsp__issue_active.avg.pct_of_peak_sustained_active"
M+=",smsp__sass_inst_executed_op_local_ld.sum,smsp__sass_inst_executed_op_local_st.sum"
for d in 128 64; do
  for st in 34_tma_store 35_cross_tile; do
    echo "=== ncu $st head_dim $d" >> $OUT/ncu_34_35.txt
    timeout 90 ncu --clock-control none -k regex:attention_kernel -c 1 --section WarpStateStats --metrics $M \
      $W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1 --head-dim $d --seq 1024 --stage $st \
      >> $OUT/ncu_34_35.txt 2>&1
    echo "ncu $st d$d rc=$? $(t)" | tee -a $LOG
  done
done
grep -E "^=== |inst_executed.sum|op_local|cycles_elapsed.max|pipe_shared|latency_per_inst|issue_active|stalled_(wait|barrier|long_scoreboard|dispatch_stall|not_selected|math_pipe_throttle|short_scoreboard|mio_throttle|gmma|selected|membar)_per" \
  $OUT/ncu_34_35.txt | sed 's/  */ /g' | tee -a $LOG
