#!/usr/bin/env bash
# Call 72 (nineteenth session), two measurements in shuffled rounds, every result checked first:
# (A) a probe, not a stage: stage 13 with stage 11's form of keys_in_block (a choice between kBlockKV
#     and the last block's count instead of a 64-bit min; call72/keys_in_block_choice_13.patch, probe
#     stage 92), 4 of the 15 instructions a block that stage 13's unmasked loop has over stage 11's
#     (665 -> 661 on the whole-block path, fp16, head_dim 64, sm_90): 11, 13, 92 without slopes,
#     fp16 and bf16, head_dim 64 and 128, S = 1024..8192, 30 rounds;
# (B) issue 11's tightest cells again at the same code as calls 68/69 (no Hopper stage changed since):
#     stages 30 and 34 with FA2 and cuDNN, head_dim 128, S = 1024 and 4096, fp16 and bf16, 50 rounds.
#   REV=<commit> bash docs/evidence/ampere/call72.sh      (about 3 minutes)
set -o pipefail
export PYTHONUNBUFFERED=1
[ -n "$MAKE_ONLY" ] || : "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-330} - ($(date +%s) - T0) )); }
OUT=${OUT:-/tmp/out72}; mkdir -p $OUT
LOG=$OUT/call72.txt
echo "git $REV" | tee -a $LOG
W=${W:-/tmp/trim72}; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tests scripts tools $W/
for s in 11_any_length 13_causal 30_lazy_rescale 34_tma_store; do cp -r stages/$s $W/stages/; done
cp -r stages/13_causal $W/stages/92_keys13
(cd $W/stages/92_keys13 && patch -s -p1 < $OLDPWD/docs/evidence/ampere/call72/keys_in_block_choice_13.patch) ||
  echo "patch failed" | tee -a $LOG
python3 - "$W/stages/92_keys13/stage.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["parent"] = "13_causal"
d["idea"] = "probe: stage 13 with stage 11's keys_in_block (call 72)"
json.dump(d, open(sys.argv[1], "w"), indent=2)
PY
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-90} -DFA_BUILD_TESTS=OFF > /tmp/configure72.log 2>&1
cmake --build $W/build --parallel ${JOBS:-16} > /tmp/build72.log 2>&1; echo "build rc=$? $(t)" | tee -a $LOG
grep -m5 -E "error|FAILED" /tmp/build72.log | tee -a $LOG
[ -n "$MAKE_ONLY" ] && exit 0
I="python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --dtype fp16,bf16"
limit=$(left)
FA_GIT_REV=$REV timeout $(( limit / 2 )) $I --head-dim 64,128 --seqs 1024,2048,4096,8192 --stages 11,13,92 \
  --references "" --reps 30 --csv $OUT/interleaved_keys13.csv > /tmp/a72.log 2>&1; echo "rounds A rc=$? $(t)" | tee -a $LOG
cat /tmp/a72.log >> $LOG
limit=$(left)
FA_GIT_REV=$REV timeout $(( limit - 5 )) $I --head-dim 128 --seqs 1024,4096 --stages 30,34 --reps 50 \
  --csv $OUT/interleaved_issue11_d128.csv > /tmp/b72.log 2>&1; echo "rounds B rc=$? $(t)" | tee -a $LOG
cat /tmp/b72.log >> $LOG
echo "done $(t)" | tee -a $LOG
python3 - $OUT/interleaved_keys13.csv $OUT/interleaved_issue11_d128.csv <<'PY' | tee -a $LOG
import csv, sys
def load(p):
    try: return {(r["impl"], r["dtype"], r["head_dim"], r["seq_q"]): r
                 for r in csv.DictReader(l for l in open(p) if not l.startswith("#"))}
    except FileNotFoundError: return {}
a, b = load(sys.argv[1]), load(sys.argv[2])
ms = lambda m, k: float(m[k]["min_ms"])
print("A: time ratio by minimum, %: dtype d S | 13/11 | 92/11 | 92/13")
for dt in ("fp16", "bf16"):
    for d in ("64", "128"):
        for s in ("1024", "2048", "4096", "8192"):
            k = lambda i: (i, dt, d, s)
            if all(k(i) in a for i in ("11_any_length", "13_causal", "92_keys13")):
                x, y, z = ms(a, k("11_any_length")), ms(a, k("13_causal")), ms(a, k("92_keys13"))
                print(dt, d, s, "| %+.1f | %+.1f | %+.1f" % ((y / x - 1) * 100, (z / x - 1) * 100, (z / y - 1) * 100))
print("B: by minimum: stage ms, TFLOP/s, % of cuDNN (cuDNN's time / the stage's)")
for dt in ("fp16", "bf16"):
    for s in ("1024", "4096"):
        cud = [v for kk, v in b.items() if kk[1:] == (dt, "128", s) and "cudnn" in kk[0].lower()]
        for st in ("30_lazy_rescale", "34_tma_store"):
            kk = (st, dt, "128", s)
            if kk in b and cud:
                t, c = float(b[kk]["min_ms"]), float(cud[0]["min_ms"])
                flops = 4 * 16 * 32 * int(s) ** 2 * 128
                print(dt, s, st, "%.4f ms, %.1f TFLOP/s, %.2f%% of cuDNN (cuDNN %.4f ms)" % (t, flops / t / 1e9, c / t * 100, c))
PY
