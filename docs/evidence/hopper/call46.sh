#!/usr/bin/env bash
# Run in the twelfth session (at c5627e7; output in call46/). Prepared in the eleventh.
# Call 46: issue 11 asks for ncu evidence on every Hopper page (tensor-pipe use and the stall the stage
# attacks); the pages of stages 18, 20, 22, 23 and 25-29 have none that says both. One profile per
# stage at the shape its page is about, fp16, at unmodified clocks (--clock-control none), plus the
# same shape for its parent where the page compares the two. The wgmma pipe's own counter printed
# "n/a" in earlier calls (sm__pipe_tensor_op_gmma_cycles_active), so the call first asks this ncu
# which tensor and gmma metrics it has, and profiles with those that exist, beside the tensor FLOP
# counters (sm__ops_path_tensor_*: achieved FLOP/s, against the committed wgmma ceiling).
# Run as: bash docs/evidence/hopper/call46.sh. Trimmed tree (the Hopper stages only); fa_run only.
# Output: $OUT/call46.txt (the log), $OUT/ncu_metrics.txt (what this ncu offers),
# $OUT/ncu_hopper_pages.txt (every report, one after another).
set -o pipefail
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
LOG=${OUT:-/tmp}/call46.txt
W=${W:-/tmp/trim46}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests $W/
for s in 17_tma_ring 18_warp_specialized 19_overlap 20_persistent 21_pingpong 22_any_length 23_causal 24_three_warpgroups \
         25_balanced_pairs 26_gqa 27_lse 28_tile_choice 29_feature_switches; do
  cp -r stages/$s $W/stages/
done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFA_BUILD_TESTS=OFF > /tmp/configure46.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run > /tmp/build46.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build46.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0

ncu --query-metrics --chip gh100 > /tmp/ncu_all_metrics.txt 2>&1
grep -iE "gmma|tensor|pipe_shared" /tmp/ncu_all_metrics.txt > $OUT/ncu_metrics.txt
echo "ncu metrics with gmma/tensor/pipe_shared in the name: $(wc -l < $OUT/ncu_metrics.txt)" | tee -a $LOG
M=""
for m in sm__pipe_tensor_op_gmma_cycles_active sm__inst_executed_pipe_tensor_op_gmma sm__pipe_shared_cycles_active \
         sm__ops_path_tensor_src_fp16_dst_fp32 smsp__issue_active sm__inst_executed_pipe_xu; do
  grep -qE "^$m[[:space:]]" /tmp/ncu_all_metrics.txt || { echo "no metric $m in this ncu" | tee -a $LOG; continue; }
  case $m in
    sm__ops_path_*|sm__inst_executed_pipe_tensor_op_gmma) M+="$m.sum,$m.sum.per_second," ;;
    *) M+="$m.avg.pct_of_peak_sustained_active," ;;
  esac
done
M=${M%,}; echo "metrics: $M" | tee -a $LOG
R="$W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1"
N="ncu --clock-control none -k regex:attention_kernel -c 1 --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats ${M:+--metrics $M}"
# stage (and the parent its page compares with) and the shape the page is about
for spec in "18_warp_specialized --head-dim 128 --seq 4096" "20_persistent --head-dim 128 --seq 1024" \
            "22_any_length --head-dim 128 --seq 1000" "23_causal --head-dim 128 --seq 2048 --causal" \
            "25_balanced_pairs --head-dim 64 --seq 2048 --causal" "24_three_warpgroups --head-dim 64 --seq 2048 --causal" \
            "26_gqa --head-dim 128 --seq 4096 --kv-heads 8" "27_lse --head-dim 128 --seq 4096 --lse" \
            "28_tile_choice --head-dim 64 --seq 1024" "29_feature_switches --head-dim 128 --seq 4096" \
            "28_tile_choice --head-dim 128 --seq 4096"; do
  limit=$(left); [ "$limit" -lt 40 ] && { echo "ncu $spec: not run (time)" | tee -a $LOG; continue; }
  set -- $spec; st=$1; shift
  echo "=== ncu $st $*" >> $OUT/ncu_hopper_pages.txt
  timeout $(( limit < 90 ? limit : 90 )) $N $R --stage $st "$@" >> $OUT/ncu_hopper_pages.txt 2>&1
  echo "ncu $st $* rc=$? $(t)" | tee -a $LOG
done
echo "done $(t)" | tee -a $LOG
grep -E "^=== |gmma|tensor|pipe_shared|Issue Slots Busy|Compute \(SM\) Throughput|Stall|Warp Cycles Per Issued" \
  $OUT/ncu_hopper_pages.txt | cut -c1-120 | head -120
