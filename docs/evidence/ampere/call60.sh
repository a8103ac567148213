#!/usr/bin/env bash
# Call 60 (sixteenth session): stage 36's issue-12 cells that the series of call 59 put below their
# targets, in shuffled rounds (tools/interleaved.py): causal against FA2 and cuDNN, and any length
# (S = 1000 / 4000 against 1024 / 4096), fp16 and bf16, head_dim 64 and 128.
#   REV=<commit> bash docs/evidence/ampere/call60.sh        (carry .deps; about 2 minutes)
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out60}; mkdir -p $OUT
LOG=$OUT/call60.txt
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim60}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests scripts $W/
cp -r stages/36_alibi_mma $W/stages/
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFA_BUILD_TESTS=OFF > /tmp/configure60.log 2>&1
cmake --build $W/build --parallel 16 --target fa_capi > /tmp/build60.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128 --stages 36"
FA_GIT_REV=$REV timeout 150 $I --causal --seqs 1024,2048,4096,8192 --reps 30 \
  --csv $OUT/interleaved_causal_36.csv > /tmp/causal.log 2>&1; echo "causal rounds rc=$? $(t)" | tee -a $LOG
FA_GIT_REV=$REV timeout 60 $I --seqs 1024,4096 --any-length 1000,4000 --references "" --reps 40 \
  --csv $OUT/interleaved_any_length_36.csv > /tmp/anylen.log 2>&1; echo "any-length rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/causal.log /tmp/anylen.log >> $LOG
echo "done $(t)" | tee -a $LOG
grep -hE "^(fp16|bf16)|^36_|runs at" /tmp/causal.log /tmp/anylen.log | cut -c1-110
