#!/usr/bin/env bash
# Call 62 (prepared in the sixteenth session, not run: 113 s of device time were left): issue 11's
# and issue 12's target cells at the final revision in shuffled rounds (tools/interleaved.py), the
# protocol that decides margins under the series' spread (docs/benchmarking.md):
# (1) issue 11's 16 headline shapes, the Hopper stages that lead somewhere in the series (17, 21,
#     30, 34, 35) with FA2 and cuDNN, 50 rounds;
# (2) stage 36's ALiBi cost, both head dims (head_dim 128 is stage 33's kernel: +4.8 to +5.9% in
#     call 58), 40 rounds;
# (3) stage 36's GQA 32:8 against FA2 and cuDNN with enable_gqa, 30 rounds.
# (Stage 36's causal and any-length cells were measured in rounds in call 60, same kernels.)
#   REV=<commit> bash docs/evidence/hopper/call62.sh        (no carry needed; about 4-5 minutes)
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out62}; mkdir -p $OUT
LOG=$OUT/call62.txt
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim62}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests scripts $W/
for s in 17_tma_ring 21_pingpong 30_lazy_rescale 34_tma_store 35_cross_tile 36_alibi_mma; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFA_BUILD_TESTS=OFF > /tmp/configure62.log 2>&1
cmake --build $W/build --parallel 16 --target fa_capi > /tmp/build62.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build62.log | tee -a $LOG
I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128"
FA_GIT_REV=$REV timeout 200 $I --stages 17,21,30,34,35 --seqs 1024,2048,4096,8192 --reps 50 \
  --csv $OUT/interleaved_headline_17_21_30_34_35.csv > /tmp/headline.log 2>&1; echo "headline rounds rc=$? $(t)" | tee -a $LOG
FA_GIT_REV=$REV timeout 90 $I --stages 36 --alibi --seqs 1024,2048,4096,8192 --reps 40 --references "" \
  --csv $OUT/interleaved_alibi_36.csv > /tmp/alibi.log 2>&1; echo "alibi rounds rc=$? $(t)" | tee -a $LOG
FA_GIT_REV=$REV timeout 120 $I --stages 36 --kv-heads 8 --seqs 1024,2048,4096,8192 --reps 30 \
  --csv $OUT/interleaved_gqa_36.csv > /tmp/gqa.log 2>&1; echo "gqa rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/headline.log /tmp/alibi.log /tmp/gqa.log >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "^(fp16|bf16)|^1[7]_|^2[1]_|^3[0456]_|^cudnn|ALiBi costs" /tmp/headline.log /tmp/alibi.log /tmp/gqa.log | cut -c1-100
