#!/usr/bin/env bash
# NOT RUN YET: prepared in the twelfth session for the next one (its CPU part -- the probes' edits,
# configure and build of the trimmed tree -- checked with MAKE_ONLY=1 ARCH=80 JOBS=2 HOPPER=0;
# trace_summary.py checked on a synthetic trace).
# Call 49, three questions, about 4-5 minutes:
# (1) Stage 33 gained about half of what tools/schedule_model.py --dispatch predicted (call 45; its
#     page). Does the GPU start thread blocks in blockIdx.x order on whichever slot frees first, with
#     two blocks per SM? Schedule-trace probes of stages 33 (95) and 32 (96) (trace_probe.py: each
#     block's start, end and SM from %globaltimer / %smid) at the causal shapes of the page, one
#     non-causal control; trace_summary.py prints order, residency, idle end, and the list scheduler
#     replayed with the measured durations.
# (2) Issue 11's pages 18, 20, 22-29: call 46 profiled tensor-pipe use but not the stall reasons; here
#     the same shapes with every per-reason stall metric this ncu has
#     (smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio: cycles per issued
#     instruction spent in each reason, the breakdown of "Warp Cycles Per Issued Instruction").
# (3) Issue 11's head_dim 128 S = 1024 margin: the persistent grid's last, 4-tile round (see (3) below).
# Run as: REV=<commit> bash docs/evidence/ampere/call49.sh. Output: $OUT/call49.txt (log and summaries),
# $OUT/traces.tar.gz (the trace CSVs), $OUT/ncu_stalls.txt (every report).
set -o pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out49}; mkdir -p $OUT
LOG=$OUT/call49.txt
HERE=$(cd "$(dirname "$0")" && pwd)
W=${W:-/tmp/trim49}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests $W/
HOPPER_STAGES="17_tma_ring 18_warp_specialized 19_overlap 20_persistent 21_pingpong 22_any_length 23_causal
  24_three_warpgroups 25_balanced_pairs 26_gqa 27_lse 28_tile_choice 29_feature_switches 30_lazy_rescale"
[ "${HOPPER:-1}" = 1 ] && for s in $HOPPER_STAGES; do cp -r stages/$s $W/stages/; done
for s in 32_skip_padding 33_lpt_order; do cp -r stages/$s $W/stages/; done
cp -r stages/33_lpt_order $W/stages/95_probe_trace33 && python3 $HERE/trace_probe.py $W/stages/95_probe_trace33 33_lpt_order || exit 2
cp -r stages/32_skip_padding $W/stages/96_probe_trace32 && python3 $HERE/trace_probe.py $W/stages/96_probe_trace32 32_skip_padding || exit 2
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure49.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run fa_capi > /tmp/build49.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build49.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0

# (1) Traces: the last timed launch of each run is in the file.
TR=/tmp/traces49; rm -rf $TR; mkdir -p $TR
R="$W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 3 --reps 5"
for spec in "64 1024 --causal" "64 2048 --causal" "128 1024 --causal" "128 2048 --causal" "64 8192 --causal" "128 2048"; do
  set -- $spec; d=$1; s=$2; shift 2
  for st in 95_probe_trace33 96_probe_trace32; do
    f=$TR/${st}_d${d}_s${s}${1:+_causal}.csv
    FA_TRACE=$f timeout 60 $R --stage $st --head-dim $d --seq $s "$@" > /tmp/trace_run.log 2>&1
    # (the probe's launcher waits for the kernel and writes the file before the end event: its
    # fa_run times are not the kernel's; the trace's span is)
    echo "trace $st d$d S$s $* rc=$? $(t): check $(grep -E "^9[56]_" /tmp/trace_run.log | tr -s ' ' | cut -d' ' -f13)" | tee -a $LOG
  done
done
python3 $HERE/trace_summary.py $TR/*.csv | tee -a $LOG
tar -czf $OUT/traces.tar.gz -C $TR .

# (3, first, before any ncu) Issue 11's thinnest shape, head_dim 128 S = 1024: 16 x 32 heads x 8 query
# tiles = 4,096 tiles on 132 persistent blocks = 31.03 rounds, so 4 blocks run a 32nd tile alone
# (3.0% of the time, if a tile-time is the unit); 15 x 33 heads = 3,960 tiles = 30 whole rounds.
# Prediction if the quantization is what cuDNN does not pay: stages 21 and 30 gain about 3% of
# TFLOP/s from [16, 1024, 32] to [15, 1024, 33] against cuDNN's change.
if [ "${HOPPER:-1}" = 1 ]; then
  for bh in "16 32" "15 33"; do
    set -- $bh
    FA_GIT_REV=${REV:-unknown} timeout 90 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --stages 21,30 \
      --dtype fp16,bf16 --head-dim 128 --seqs 1024 --batch $1 --heads $2 --reps 60 \
      --csv $OUT/interleaved_quantization_b$1_h$2.csv > /tmp/quant_$1_$2.log 2>&1
    echo "quantization [$1, 1024, $2, 128] rc=$? $(t)" | tee -a $LOG
    grep -E "^(fp16|bf16)|^2[1]_|^30_|^fa2|^cudnn" /tmp/quant_$1_$2.log | cut -c1-84 | tee -a $LOG
  done
fi

# (2) Stall reasons on the Hopper pages.
if [ "${HOPPER:-1}" = 1 ]; then
  ncu --query-metrics --chip gh100 > /tmp/ncu_all_metrics.txt 2>&1
  P=smsp__average_warps_issue_stalled_; S=_per_issue_active
  M=$(grep -oE "^${P}[a-z_]+${S}" /tmp/ncu_all_metrics.txt | sort -u | sed 's/$/.ratio/' | paste -sd, -)
  if [ -z "$M" ]; then  # fallback: the per-warp latency totals (page 17's metrics)
    P=smsp__average_warp_latency_issue_stalled_; S=
    M=$(grep -oE "^${P}[a-z_]+" /tmp/ncu_all_metrics.txt | sort -u | sed 's/$/.ratio/' | paste -sd, -)
  fi
  echo "stall metrics ($P*$S): $(echo $M | tr ',' '\n' | grep -c .)" | tee -a $LOG
  [ -n "$M" ] || { echo "no per-reason stall metric in this ncu" | tee -a $LOG; }
  M+=",sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,smsp__average_warp_latency_per_inst_issued.ratio"
  R="$W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 0 --reps 1"
  N="ncu --clock-control none -k regex:attention_kernel -c 1 --section WarpStateStats --metrics $M"
  for spec in "18_warp_specialized --head-dim 128 --seq 4096" "17_tma_ring --head-dim 128 --seq 4096" \
              "20_persistent --head-dim 128 --seq 1024" "19_overlap --head-dim 128 --seq 1024" \
              "22_any_length --head-dim 128 --seq 1000" "23_causal --head-dim 128 --seq 2048 --causal" \
              "25_balanced_pairs --head-dim 64 --seq 2048 --causal" "24_three_warpgroups --head-dim 64 --seq 2048 --causal" \
              "26_gqa --head-dim 128 --seq 4096 --kv-heads 8" "27_lse --head-dim 128 --seq 4096 --lse" \
              "28_tile_choice --head-dim 64 --seq 1024" "29_feature_switches --head-dim 128 --seq 4096" \
              "28_tile_choice --head-dim 128 --seq 4096"; do
    limit=$(left); [ "$limit" -lt 30 ] && { echo "ncu $spec: not run (time)" | tee -a $LOG; continue; }
    set -- $spec; st=$1; shift
    echo "=== ncu $st $*" >> $OUT/ncu_stalls.txt
    timeout $(( limit < 60 ? limit : 60 )) $N $R --stage $st "$@" >> $OUT/ncu_stalls.txt 2>&1
    echo "ncu $st $* rc=$? $(t)" | tee -a $LOG
  done
  # the three largest reasons of each report
  awk -v P="$P" -v S="$S.ratio" '/^=== /{if(h)print h": "top(); h=$0; n=0; delete v; next}
       index($1, P) == 1 {gsub(",","",$NF); r=$1; sub(P,"",r); sub(S,"",r); v[r]=$NF+0}
       function top(  s,k,b,i,best){s=""; for(i=0;i<3;i++){b=-1; for(k in v) if(v[k]>b){b=v[k]; best=k}; if(b<0)break; s=s best"="b" "; delete v[best]}; return s}
       END{if(h)print h": "top()}' $OUT/ncu_stalls.txt | tee -a $LOG
fi
echo "done $(t)" | tee -a $LOG
