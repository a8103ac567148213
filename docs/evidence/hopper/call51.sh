#!/usr/bin/env bash
# Call 51 (thirteenth session), two questions, about 3 minutes:
# (A) Stage 31 (the next tile's Q in a second slot) was measured 0.3-1.8% slower than stage 30
#     (call 50), where it was predicted 2-4% faster at S = 1024: so where do a tile's boundary cycles go?
#     Probes 97 (of stage 30) and 98 (of 31), boundary_probe.py: each consumer warpgroup's cycles per
#     tile in the Q wait, the first K wait, block 0 (its S alone and its softmax), the loop (per K/V
#     block), the last P V, the epilogue, and between tiles; summarized by phases_summary.py. The
#     probes' times against their stages' in shuffled rounds say how much the clock reads disturb.
# (B) Issue 12's features-off cost at head_dim 64 (stages 13-16 against 11, +0.9 to +4.5% in the full
#     runs with the same loop instructions): call36.sh's four one-line probes of stage 13/11 (never
#     run), now in shuffled rounds instead of series:
#       91 = 13 with stage 11's query-block order, 92 = 11 with 13's order (the last block first),
#       93 = 13 without the epilogue's zero-sum guard, 94 = 13 with one loop (the mask a run-time branch).
# Run as: REV=<commit> bash docs/evidence/hopper/call51.sh (carry .deps). Output: $OUT/call51.txt,
# the phase files ($OUT/phases/*.csv) and the rounds' CSVs.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out51}; mkdir -p $OUT/phases
LOG=$OUT/call51.txt
HERE=$(cd "$(dirname "$0")" && pwd)
W=${W:-/tmp/trim51}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests $W/
for s in 11_any_length 13_causal 16_alibi 30_lazy_rescale 31_q_prefetch; do cp -r stages/$s $W/stages/; done
cp -r stages/30_lazy_rescale $W/stages/97_probe_phases30 && python3 $HERE/boundary_probe.py $W/stages/97_probe_phases30 30_lazy_rescale || exit 2
cp -r stages/31_q_prefetch $W/stages/98_probe_phases31 && python3 $HERE/boundary_probe.py $W/stages/98_probe_phases31 31_q_prefetch || exit 2
probe() {  # probe NAME SOURCE SED_SCRIPT: a copy of SOURCE with one edit, which must change the kernel
  cp -r stages/$2 $W/stages/$1
  sed -i "$3" $W/stages/$1/kernel.cu
  if cmp -s stages/$2/kernel.cu $W/stages/$1/kernel.cu; then echo "probe $1: the edit matched nothing" >&2; exit 2; fi
}
probe 91_probe_order 13_causal 's/const int64_t q_block = num_q_blocks - 1 - blockIdx.x % num_q_blocks;/const int64_t q_block = blockIdx.x % num_q_blocks;/'
probe 92_probe_reversed 11_any_length 's/const int64_t q_block = blockIdx.x % num_q_blocks;/const int64_t q_block = num_q_blocks - 1 - blockIdx.x % num_q_blocks;/'
probe 93_probe_noguard 13_causal 's/const float inv_sum = sum == 0.0f ? 0.0f : 1.0f \/ sum;/const float inv_sum = 1.0f \/ sum;/'
probe 94_probe_oneloop 13_causal 's/for (; kv_block < unmasked_blocks; ++kv_block) step(kv_block, false);/for (; kv_block < num_kv_blocks; ++kv_block) step(kv_block, kv_block >= unmasked_blocks);/'
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure51.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run fa_capi > /tmp/build51.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build51.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0

# (A) the phases: the last of 3 + 10 launches of each probe, fp16
R="$W/build/fa_run --dtype fp16 --batch 16 --heads 32 --warmup 3 --reps 10"
for spec in "128 1024" "128 2048" "128 4096" "128 1024 --causal" "64 1024" "64 4096"; do
  set -- $spec; d=$1; s=$2; shift 2
  for st in 97_probe_phases30 98_probe_phases31; do
    f=$OUT/phases/${st}_d${d}_s${s}${1:+_causal}.csv
    FA_PHASES=$f timeout 60 $R --stage $st --head-dim $d --seq $s "$@" > /tmp/phase_run.log 2>&1
    echo "phases $st d$d S$s $* rc=$? $(t): check $(grep -E "^9[78]_" /tmp/phase_run.log | tr -s ' ' | cut -d' ' -f13)" | tee -a $LOG
  done
done
python3 $HERE/phases_summary.py $OUT/phases/*.csv | tee -a $LOG
FA_GIT_REV=$REV timeout 90 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16 --references "" \
  --stages 30,31,97,98 --head-dim 64,128 --seqs 1024,4096 --reps 40 --csv $OUT/interleaved_probes_97_98.csv \
  > /tmp/probe_rounds.log 2>&1; echo "probe rounds rc=$? $(t)" | tee -a $LOG

# (B) issue 12's features-off probes, shuffled rounds
FA_GIT_REV=$REV timeout 200 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --references "" \
  --stages 11,13,16,91,92,93,94 --head-dim 64 --seqs 1024,2048,4096,8192 --reps 40 --csv $OUT/interleaved_features_off.csv \
  > /tmp/features_off.log 2>&1; echo "features-off rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/probe_rounds.log /tmp/features_off.log >> $LOG
echo "done $(t)" | tee -a $LOG
python3 $HERE/phases_summary.py $OUT/phases/*.csv
grep -hE "^(fp16|bf16)|^(30|31|97|98)_" /tmp/probe_rounds.log | cut -c1-60
grep -hE "^(fp16|bf16)|^(11|13|16|9[1-4])_" /tmp/features_off.log | cut -c1-60
