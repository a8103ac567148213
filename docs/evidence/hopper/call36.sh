#!/usr/bin/env bash
# NOT RUN YET: prepared in the ninth session.
# Call 36: issue 12's features-off cost at head_dim 64 -- stage 16 (and already 13) is 1.9-4.1% slower
# than stage 11 without causal at head_dim 64 in the ninth session's full run, though the main
# loops' instruction counts are the same (tools/sass_counts.py). Probes, made here from the committed
# stages by one-line edits (never committed), each timed against 11 and 13 in one fa_run process:
#   91 = 13 with stage 11's query-block order (not the last block first)
#   92 = 11 with stage 13's order (the last block first)
#   93 = 13 without the zero-sum guard of the epilogue (stage 11's 1 / sum)
#   94 = 13 with one loop over the K/V blocks, the mask a run-time branch (stage 11's structure)
# Run as: bash docs/evidence/hopper/call36.sh (MAKE_ONLY=1 only creates the probes and builds, for a
# CPU check). Trimmed tree; fa_run only. Output: $OUT/call36.txt.
set -o pipefail
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
W=${W:-/tmp/trim36}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests $W/
for s in 10_lane_addresses 11_any_length 13_causal; do cp -r stages/$s $W/stages/; done
probe() {  # probe NAME SOURCE SED_SCRIPT: a copy of SOURCE with one edit, which must change the kernel
  cp -r stages/$2 $W/stages/$1
  sed -i "$3" $W/stages/$1/kernel.cu
  if cmp -s stages/$2/kernel.cu $W/stages/$1/kernel.cu; then echo "probe $1: the edit matched nothing" >&2; exit 2; fi
}
probe 91_probe_order 13_causal 's/const int64_t q_block = num_q_blocks - 1 - blockIdx.x % num_q_blocks;/const int64_t q_block = blockIdx.x % num_q_blocks;/'
probe 92_probe_reversed 11_any_length 's/const int64_t q_block = blockIdx.x % num_q_blocks;/const int64_t q_block = num_q_blocks - 1 - blockIdx.x % num_q_blocks;/'
probe 93_probe_noguard 13_causal 's/const float inv_sum = sum == 0.0f ? 0.0f : 1.0f \/ sum;/const float inv_sum = 1.0f \/ sum;/'
probe 94_probe_oneloop 13_causal 's/for (; kv_block < unmasked_blocks; ++kv_block) step(kv_block, false);/for (; kv_block < num_kv_blocks; ++kv_block) step(kv_block, kv_block >= unmasked_blocks);/'
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure36.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run > /tmp/build36.log 2>&1; echo "build rc=$? $(t)"
grep -m5 -E "error|FAILED" /tmp/build36.log
[ -n "$MAKE_ONLY" ] && exit 0
LOG=$OUT/call36.txt
R="timeout 90 $W/build/fa_run --stage 11,13,91,92,93,94 --warmup 10 --reps 100 --batch 16 --heads 32"
for round in 1 2; do
  echo "=== round $round"
  for dt in fp16 bf16; do
    $R --dtype $dt --head-dim 64 --seq 1024,2048,4096,8192
  done
  $R --dtype fp16 --head-dim 128 --seq 1024,4096
done 2>&1 | grep -E "^(===|[0-9][0-9]_)" | awk '{print $1,$2,$3,$6,$8,$9,$10,$13}' | tee $LOG
echo "done $(t)" | tee -a $LOG
