#!/usr/bin/env bash
# Call 61 (sixteenth session): a probe for ALiBi at head_dim 128 -- stage 36 with the column term
# at both head dims, the left and right blocks through ONE compiled one-sided step (the A operand's
# sign chosen at run time) inside the one unmasked loop, next to the per-score step
# (call61/one_sided_one_loop.patch, applied here to a trimmed copy; not a stage). Statically
# (CUDA 13.0, sm_90): kernel spills 50 LDL + 44 STL at head_dim 128 against 72-80 + 45-51 for the
# three-loop form that call 58 timed and 37 + 32 for stage 33. Timed: its ALiBi cost in shuffled
# rounds at head_dim 128 (stage 33's kernel there: +4.8 to +5.9% in call 58).
#   REV=<commit> bash docs/evidence/ampere/call61.sh        (no carry needed; about 1.5 minutes)
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out61}; mkdir -p $OUT
LOG=$OUT/call61.txt
echo "git $REV + docs/evidence/ampere/call61/one_sided_one_loop.patch" | tee -a $LOG
W=${W:-/tmp/trim61}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests scripts $W/
cp -r stages/36_alibi_mma $W/stages/
(cd $W && patch -p1 < $OLDPWD/docs/evidence/ampere/call61/one_sided_one_loop.patch > /dev/null) || { echo "patch failed" | tee -a $LOG; exit 1; }
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFA_BUILD_TESTS=OFF > /tmp/configure61.log 2>&1
cmake --build $W/build --parallel 16 --target fa_capi > /tmp/build61.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
FA_GIT_REV="$REV+one_sided_one_loop.patch" timeout 100 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so \
  --stages 36 --alibi --dtype fp16,bf16 --head-dim 128,64 --seqs 1024,2048,4096,8192 --reps 30 --references "" \
  --csv $OUT/interleaved_alibi_probe.csv > /tmp/alibi.log 2>&1; echo "alibi rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/alibi.log >> $LOG
grep -hE "ALiBi costs|^(fp16|bf16)" /tmp/alibi.log | cut -c1-100
