#!/usr/bin/env bash
# Call 56 (fourteenth session): the sanitizers pages 34 and 35 list as not run.
#   REV=<commit> bash docs/evidence/hopper/call56.sh      (carry .deps; about 2 minutes)
# scripts/sanitize.sh with memcheck, racecheck, synccheck and initcheck on stages 34 and 35, every
# shape it has (contiguous, mixed, any_length, causal, gqa, lse). Stage 34 stages O for a TMA store
# (a proxy fence, a bulk group, the slab reused a tile later), stage 35 adds a P V carried across
# tiles and a throw-away P = 0 wgmma that reads whatever a V slot holds.
set -o pipefail
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out56}; mkdir -p $OUT
LOG=$OUT/call56.txt
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim56}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tools tests scripts $W/; cp -r .deps/include $W/.deps/ 2>/dev/null
for s in 34_tma_store 35_cross_tile; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure56.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_run > /tmp/build56.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
(cd $W && timeout 400 bash scripts/sanitize.sh --tool memcheck,racecheck,synccheck,initcheck --stage 34,35 \
  --fa-run build/fa_run --log-dir /tmp/sanitizer > $OUT/sanitize_34_35.txt 2>&1)
echo "sanitize rc=$? $(t): $(tail -1 $OUT/sanitize_34_35.txt)" | tee -a $LOG
grep -E "exit [0-9]+, errors" $OUT/sanitize_34_35.txt | sed 's/.*\] //' | tee -a $LOG
