#!/usr/bin/env bash
# NOT RUN YET: prepared in the ninth session for the next one.
# Call 34: issue 11's headline shapes judged launch after launch (tools/interleaved.py): the fastest
# Hopper stages of the ninth session's full run (17: 64-row tiles, best at head_dim 64 S = 1024;
# 21: best at head_dim 128 S = 1024; 24; 30: best elsewhere) with FA2 and cuDNN, fp16 and bf16,
# head_dim 64 and 128, S = 1024..8192, 100 timed rounds; then issue 12's causal and features-off
# shapes of the Ampere track (stages 11 and 16) the same way, and stage 16's ALiBi cost (--alibi:
# the stage with and without slopes in the same rounds; the references take none). Trimmed tree,
# library only.
# The CSVs and a short log come back; commit them under plots/results/ (interleaved_*.csv).
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
W=/tmp/trim34; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests scripts $W/
for s in 11_any_length 16_alibi 17_tma_ring 21_pingpong 24_three_warpgroups 30_lazy_rescale; do
  cp -r stages/$s $W/stages/
done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFA_BUILD_TESTS=OFF > /tmp/configure.log 2>&1
cmake --build $W/build --parallel 16 --target fa_capi > /tmp/build.log 2>&1; echo "build rc=$? $(t)"
grep -m5 -E "error|FAILED" /tmp/build.log
I="timeout 250 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --warmup 10 --reps 100"
FA_GIT_REV=$REV $I --stages 17,21,24,30 --dtype fp16,bf16 --head-dim 64,128 --seqs 1024,2048,4096,8192 \
  --csv $OUT/interleaved_hopper_headline.csv > /tmp/hopper.log 2>&1; echo "hopper headline rc=$? $(t)"
AMPERE=11,16
FA_GIT_REV=$REV $I --stages $AMPERE --dtype fp16,bf16 --head-dim 64,128 --seqs 1024,2048,4096,8192 \
  --csv $OUT/interleaved_ampere_headline.csv > /tmp/ampere.log 2>&1; echo "ampere headline rc=$? $(t)"
FA_GIT_REV=$REV $I --stages $AMPERE --dtype fp16,bf16 --head-dim 64,128 --seqs 1024,2048,4096,8192 --causal \
  --csv $OUT/interleaved_ampere_causal.csv > /tmp/causal.log 2>&1; echo "ampere causal rc=$? $(t)"
FA_GIT_REV=$REV $I --stages 16 --alibi --dtype fp16,bf16 --head-dim 64,128 --seqs 1024,2048,4096,8192 \
  --csv $OUT/interleaved_ampere_alibi.csv > /tmp/alibi.log 2>&1; echo "ampere alibi rc=$? $(t)"
grep -h "ALiBi costs" /tmp/alibi.log
cat /tmp/hopper.log /tmp/ampere.log /tmp/causal.log /tmp/alibi.log | gzip > $OUT/call34_logs.gz
grep -hE "^(fp16|bf16)|^[0-9][0-9]_|^cudnn|^fa2" /tmp/hopper.log | cut -c1-100
echo "done $(t)"
