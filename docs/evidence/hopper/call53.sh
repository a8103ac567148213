#!/usr/bin/env bash
# Call 53 (fourteenth session): why stage 34 is slower than stage 30 at head_dim 128, S >= 2048, and
# a first look at the cross-tile experiment.
#   REV=<commit> bash docs/evidence/hopper/call53.sh      (carry .deps; about 5 minutes)
# (1) ncu, fp16 [16, 4096, 32, 128], one launch each of stages 30 and 34: every per-reason stall,
#     the tensor pipe, instructions executed and cycles. Hypothesis (page 34): the K/V loop is the
#     same instructions in another order (ptxas), so instructions executed agree within 1% while the
#     cycles per issued instruction grow by about the time lost (2-3%); if the instructions differ or
#     the cycles agree, the loop order is not the cause.
# (2) The cross-tile experiment (call53/stage35_cross_tile, parent 34; not a stage): a tile's last
#     P V waits for the next tile's S_0 and is issued with it, the next Q in a second slot. Its loop
#     lost the uniform-register descriptors (ptxas: 624 instructions at head_dim 128 against 578, 542
#     against 502 at 64), so the boundary's gain (up to ~5% at S = 1024) competes with a longer loop.
#     Its GPU suites first (stage, any length, causal, GQA, LSE, under timeouts), then shuffled
#     rounds of 30, 34 and 35 at S = 1024, 2048, 4096, fp16 and bf16, head_dim 64 and 128.
# Output: $OUT/call53.txt (log), $OUT/ncu_30_34.txt, the rounds' CSV.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out53}; mkdir -p $OUT
LOG=$OUT/call53.txt
W=${W:-/tmp/trim53}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/ 2>/dev/null
for s in 30_lazy_rescale 34_tma_store; do cp -r stages/$s $W/stages/; done
cp -r stages/34_tma_store $W/stages/35_cross_tile
# the experiment: stage 34's kernel with the first version's changes (kept as a patch against it)
cp docs/evidence/hopper/call53/stage35_cross_tile/stage.json $W/stages/35_cross_tile/
patch -s $W/stages/35_cross_tile/kernel.cu < docs/evidence/hopper/call53/stage35_cross_tile/kernel_from_34.patch
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure53.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build53.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build53.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0

# (1)
ncu --query-metrics --chip gh100 > /tmp/ncu_all_metrics.txt 2>&1
P=smsp__average_warps_issue_stalled_; S=_per_issue_active
M=$(grep -oE "^${P}[a-z_]+${S}" /tmp/ncu_all_metrics.txt | sort -u | sed 's/$/.ratio/' | paste -sd, -)
M+=",sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_per_inst_issued.ratio"
M+=",smsp__inst_executed.sum,sm__cycles_elapsed.max,smsp__issue_active.avg.pct_of_peak_sustained_active"
R="$W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1 --head-dim 128 --seq 4096"
for st in 30_lazy_rescale 34_tma_store; do
  echo "=== ncu $st" >> $OUT/ncu_30_34.txt
  timeout 60 ncu --clock-control none -k regex:attention_kernel -c 1 --section WarpStateStats --metrics $M \
    $R --stage $st >> $OUT/ncu_30_34.txt 2>&1
  echo "ncu $st rc=$? $(t)" | tee -a $LOG
done
grep -E "^=== |inst_executed.sum|cycles_elapsed.max|pipe_shared|latency_per_inst|issue_active|stalled_(wait|barrier|long_scoreboard|dispatch_stall|not_selected|math_pipe_throttle|short_scoreboard|mio_throttle|gmma|selected)_per" \
  $OUT/ncu_30_34.txt | sed 's/  */ /g' | tee -a $LOG

# (2)
for test in test_gpu_stages test_gpu_any_length test_gpu_causal test_gpu_gqa test_gpu_lse; do
  FA_TEST_STAGES=35_cross_tile timeout 120 $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [35] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A8 -E "FAILED|timed out" /tmp/$test.log >> $LOG
done
I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128"
limit=$(left); [ "$limit" -gt 40 ] && FA_GIT_REV=$REV timeout $(( limit - 10 )) $I --stages 30,34,35 --seqs 1024,2048,4096 --reps 40 \
  --csv $OUT/interleaved_30_34_35.csv > /tmp/rounds.log 2>&1; echo "rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/rounds.log >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "^(fp16|bf16)|^3[045]_" /tmp/rounds.log | cut -c1-84
