#!/usr/bin/env bash
# Call 73 (twentieth session): the compile-time causal switch in stages 13-16 (without causal each
# launches stage 11's loop; 13's kernels without causal are SASS-identical to 11's) and two forms of
# stage 32's loop without causal, on the H200.
#   REV=<commit> bash docs/evidence/ampere/call73.sh      (carry .deps: Catch2)
# (1) a build with stages 11, 13, 14, 15, 16, 32 and probe 92 (sm_90, tests on); probe 92 is stage
#     32 with stage 16's check for a partial block kept in the step (call73/check_in_loop_32.patch):
#     its head_dim 64 loop is 652 instructions on the whole-block path against 32's 665 (16: 651);
# (2) shuffled rounds without causal: 11, 13, 16, 32, 92, fp16 and bf16, head_dim 64 and 128,
#     S = 1024..8192, 30 rounds, every result checked first;
# (3) the GPU suites on 13, 14, 15 and 16; (4) memcheck and racecheck on them.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out73}; mkdir -p $OUT
LOG=$OUT/call73.txt
echo "git $REV" | tee -a $LOG
sha256sum stages/{11_any_length,13_causal,14_gqa,15_lse,16_alibi,32_skip_padding}/kernel.cu | tee -a $LOG
W=${W:-/tmp/trim73}; rm -rf $W; mkdir -p $W/stages $W/.deps
cp -r CMakeLists.txt common tests scripts tools $W/; cp -r .deps/include .deps/lib $W/.deps/ 2>/dev/null
for s in 11_any_length 13_causal 14_gqa 15_lse 16_alibi 32_skip_padding; do cp -r stages/$s $W/stages/; done
cp -r stages/32_skip_padding $W/stages/92_check32
(cd $W/stages/92_check32 && patch -s -p1 < $OLDPWD/docs/evidence/ampere/call73/check_in_loop_32.patch) ||
  echo "patch failed" | tee -a $LOG
python3 - "$W/stages/92_check32/stage.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["parent"] = "32_skip_padding"
d["idea"] = "probe: stage 32 with stage 16's check for a partial block in the step (call 73)"
json.dump(d, open(sys.argv[1], "w"), indent=2)
PY
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} > /tmp/configure73.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} -- -k 0 > /tmp/build73.log 2>&1; echo "build rc=$? $(t) (test_alibi_column_term needs stages 36 and 38: not in this build)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build73.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16"
FA_GIT_REV=$REV timeout 150 $I --head-dim 64,128 --seqs 1024,2048,4096,8192 --stages 11,13,16,32,92 \
  --references "" --reps 30 --csv $OUT/interleaved_noncausal.csv > /tmp/a73.log 2>&1; echo "rounds rc=$? $(t)" | tee -a $LOG
cat /tmp/a73.log >> $LOG
python3 - $OUT/interleaved_noncausal.csv <<'PY' | tee -a $LOG
import csv, sys
a = {(r["impl"], r["dtype"], r["head_dim"], r["seq_q"]): r
     for r in csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("#"))}
names = {"11": "11_any_length", "13": "13_causal", "16": "16_alibi", "32": "32_skip_padding", "92": "92_check32"}
pairs = [("13", "11"), ("16", "11"), ("32", "16"), ("92", "16"), ("92", "32")]
for stat in ("min_ms", "median_ms"):
    print("time ratio by %s, %%: dtype d S | %s" % (stat, " | ".join("%s/%s" % p for p in pairs)))
    for dt in ("fp16", "bf16"):
        for d in ("64", "128"):
            for s in ("1024", "2048", "4096", "8192"):
                v = lambda i: float(a[(names[i], dt, d, s)][stat]) if (names[i], dt, d, s) in a else float("nan")
                print(dt, d, s, "| " + " | ".join("%+.1f" % ((v(x) / v(y) - 1) * 100) for x, y in pairs))
PY
for test in test_gpu_stages test_gpu_causal test_gpu_any_length test_gpu_gqa test_gpu_lse test_gpu_alibi \
            test_gpu_hardening; do
  limit=$(left); [ "$limit" -lt 100 ] && { echo "$test: not run (time)" | tee -a $LOG; continue; }
  FA_TEST_STAGES=13_causal,14_gqa,15_lse,16_alibi timeout $(( limit - 60 )) $W/build/tests/$test > /tmp/$test.log 2>&1
  echo "$test [13-16] rc=$? $(t): $(grep -E 'All tests passed|test cases' /tmp/$test.log | tail -1)" | tee -a $LOG
  grep -m5 -B2 -A12 FAILED /tmp/$test.log >> $LOG
done
limit=$(left)
if [ "$limit" -ge 60 ]; then
  (cd $W && timeout $(( limit - 10 )) bash scripts/sanitize.sh --tool memcheck,racecheck --stage 13,14,15,16 \
    --fa-run build/fa_run --log-dir /tmp/sanitizer > $OUT/sanitize_13_16.txt 2>&1)
  echo "sanitize [13-16] rc=$? $(t): $(tail -1 $OUT/sanitize_13_16.txt)" | tee -a $LOG
  grep -E "exit [0-9]+, errors" $OUT/sanitize_13_16.txt | sed 's/.*\] //' | tee -a $LOG
fi
echo "done $(t)" | tee -a $LOG
grep -A20 "time ratio by min_ms" $LOG | head -18
