#!/usr/bin/env bash
# Call 71 (nineteenth session): a probe, not a stage. ptxas re-derives some of stage 10's four
# ldmatrix lane bases inside the K/V loop (the swizzle's LOP3s and an LEA each) instead of keeping
# them in registers; an empty `asm volatile("" : "+r"(base))` after each base is computed makes the
# value opaque, so ptxas must keep it (or spill it). On the loop's whole-block path (fp16, sm_90):
# stage 10 613 -> 600 (d64) and 930 -> 945 with 5 -> 1 LDL (d128); stage 11 650 -> 612 and 977 -> 966;
# stage 13 665 -> 618 and 961 -> 899 with 7 -> 1 LDL; stage 38 634 -> 624 (d64), 949 -> 949 with
# 7 -> 6 LDL (d128), 1023 -> 1001 (d128 ALiBi), 645 -> 649 (d64 ALiBi, left loop).
#   REV=<commit> bash docs/evidence/ampere/call71.sh      (about 4 minutes)
# Probe stages 88-91 = stages 10, 11, 13, 38 with call71/pinned_bases_NN.patch. Shuffled rounds,
# every result checked against fp64 first: (A) 10, 11, 13, 88, 89, 90 without slopes; (B) 38 and 91
# without and with slopes; fp16 and bf16, head_dim 64 and 128, [16, S, 32, D], S = 1024..8192.
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-585} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out71}; mkdir -p $OUT
LOG=$OUT/call71.txt
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim71}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tests scripts tools $W/
for s in 10_lane_addresses 11_any_length 13_causal 38_column_setup; do cp -r stages/$s $W/stages/; done
probe() {  # probe NN_name SOURCE PATCH
  cp -r stages/$2 $W/stages/$1
  (cd $W/stages/$1 && patch -s -p1 < $OLDPWD/docs/evidence/ampere/call71/$3) || echo "patch $3 failed" | tee -a $LOG
  python3 - "$W/stages/$1/stage.json" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["parent"] = sys.argv[2]
d["idea"] = "probe: " + sys.argv[2] + " with its lane bases pinned by an empty asm volatile (call 71)"
json.dump(d, open(sys.argv[1], "w"), indent=2)
PY
}
probe 88_pin10 10_lane_addresses pinned_bases_10.patch
probe 89_pin11 11_any_length pinned_bases_11.patch
probe 90_pin13 13_causal pinned_bases_13.patch
probe 91_pin38 38_column_setup pinned_bases_38.patch
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure71.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build71.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build71.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16 --head-dim 64,128 --seqs 1024,2048,4096,8192 --references \"\""
limit=$(left)
eval FA_GIT_REV=$REV timeout $(( limit / 2 )) $I --stages 10,11,13,88,89,90 --reps 30 \
  --csv $OUT/interleaved_pinned_10_11_13.csv > /tmp/a71.log 2>&1; echo "rounds A rc=$? $(t)" | tee -a $LOG
cat /tmp/a71.log >> $LOG
limit=$(left)
eval FA_GIT_REV=$REV timeout $(( limit - 10 )) $I --stages 38,91 --alibi --reps 30 \
  --csv $OUT/interleaved_pinned_38.csv > /tmp/b71.log 2>&1; echo "rounds B rc=$? $(t)" | tee -a $LOG
cat /tmp/b71.log >> $LOG
echo "done $(t)" | tee -a $LOG
python3 - $OUT/interleaved_pinned_10_11_13.csv $OUT/interleaved_pinned_38.csv <<'PY' | tee -a $LOG
import csv, sys
def load(p):
    try: return {(r["impl"], r["dtype"], r["head_dim"], r["seq_q"]): float(r["min_ms"])
                 for r in csv.DictReader(l for l in open(p) if not l.startswith("#"))}
    except FileNotFoundError: return {}
a, b = load(sys.argv[1]), load(sys.argv[2])
pairs = [("88_pin10", "10_lane_addresses", a), ("89_pin11", "11_any_length", a), ("90_pin13", "13_causal", a),
         ("13_causal", "11_any_length", a), ("90_pin13", "89_pin11", a), ("91_pin38", "38_column_setup", b),
         ("91_pin38+alibi", "38_column_setup+alibi", b), ("38_column_setup+alibi", "38_column_setup", b),
         ("91_pin38+alibi", "91_pin38", b)]
print("time ratio by minimum, %: dtype d S | " + " | ".join("%s/%s" % (x[:8], y[:8]) for x, y, _ in pairs))
for dt in ("fp16", "bf16"):
    for d in ("64", "128"):
        for s in ("1024", "2048", "4096", "8192"):
            cells = []
            for x, y, m in pairs:
                kx, ky = (x, dt, d, s), (y, dt, d, s)
                cells.append("%+.1f" % ((m[kx] / m[ky] - 1) * 100) if kx in m and ky in m else "-")
            print(dt, d, s, "| " + " | ".join(cells))
PY
