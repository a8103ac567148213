#!/usr/bin/env bash
# Call 75 (twentieth session, second part): the per-stage cost without causal after the compile-time
# switch (e97ff4c) along the Ampere track's chain 16 -> 32 -> 33 -> 36 -> 37 -> 38, and ALiBi's cost
# in 37 and 38, in shuffled rounds on the H200. Call 73 timed 13 and 16 against 11 and the form of
# 32's loop; call 74 ran the GPU suites and the sanitizers on 32-38; this call times them.
#   REV=<commit> bash docs/evidence/ampere/call75.sh      (no Catch2 needed: only libfa_capi.so)
# (1) a build of stages 16, 32, 33, 36, 37 and 38 (sm_90, no tests); (2) shuffled rounds without
#     causal, one process per dtype (fp16 first, so that a cut-off call still returns it), head_dim
#     64 and 128, S = 1024..8192, 20 rounds after 5 warm-up, every result checked against fp64
#     first; 37 and 38 also with ALiBi's slopes in the same rounds. REPS=<n> times n rounds instead
#     of 20 (call 92: REPS=60).
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out75}; mkdir -p $OUT
LOG=$OUT/call75.txt
STAGES="16_alibi 32_skip_padding 33_lpt_order 36_alibi_mma 37_xor_lane_address 38_column_setup"
echo "git $REV" | tee -a $LOG
for s in $STAGES; do sha256sum stages/$s/kernel.cu; done | tee -a $LOG
W=${W:-/tmp/trim75}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tests scripts tools $W/
for s in $STAGES; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF \
  > /tmp/configure75.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} --target fa_capi > /tmp/build75.log 2>&1
echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build75.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
for dt in fp16 bf16; do
  FA_GIT_REV=$REV timeout $(( 100 * ${REPS:-20} / 20 )) python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype $dt \
    --head-dim 64,128 --seqs 1024,2048,4096,8192 --stages 16,32,33,36,37,38 --alibi-stages 37,38 \
    --references "" --warmup 5 --reps ${REPS:-20} --csv $OUT/interleaved_$dt.csv > $OUT/rounds_$dt.txt 2>&1
  echo "rounds $dt rc=$? $(t)" | tee -a $LOG
done
python3 - $OUT/interleaved_fp16.csv $OUT/interleaved_bf16.csv <<'PY' | tee -a $LOG
import csv, os, sys
a = {}
for path in sys.argv[1:]:
    if os.path.exists(path):
        for r in csv.DictReader(l for l in open(path) if not l.startswith("#")):
            a[(r["impl"], r["dtype"], r["head_dim"], r["seq_q"])] = r
print("impls:", sorted({k[0] for k in a}))
names = {"16": "16_alibi", "32": "32_skip_padding", "33": "33_lpt_order", "36": "36_alibi_mma",
         "37": "37_xor_lane_address", "38": "38_column_setup"}
def impl(i):  # "37a": stage 37 with slopes
    n = names[i.rstrip("a")]
    return [k for k in {k[0] for k in a} if k.startswith(n) and ("alibi" in k[len(n):]) == i.endswith("a")]
pairs = [("32", "16"), ("33", "32"), ("36", "33"), ("37", "36"), ("38", "37"), ("38", "16"), ("37a", "37"), ("38a", "38")]
for stat in ("min_ms", "median_ms"):
    print("time ratio by %s, %%: dtype d S | %s" % (stat, " | ".join("%s/%s" % p for p in pairs)))
    for dt in ("fp16", "bf16"):
        for d in ("64", "128"):
            for s in ("1024", "2048", "4096", "8192"):
                def v(i):
                    k = impl(i)
                    r = a.get((k[0], dt, d, s)) if len(k) == 1 else None
                    return float(r[stat]) if r and r.get("status", "PASS") == "PASS" else float("nan")
                print(dt, d, s, "| " + " | ".join("%+.1f" % ((v(x) / v(y) - 1) * 100) for x, y in pairs))
PY
echo "done $(t)" | tee -a $LOG
