#!/usr/bin/env bash
# Call 18: stage 24 (three consumer warpgroups at head_dim 64) first run: build; the causal test's
# many-tiles case (written after call 17) for 13/23/24; stage and any-length tests for 23/24; then
# stages 17, 22, 23, 24 against FA2 and cuDNN at head_dim 64 (headline and causal, both dtypes).
set -o pipefail
export PYTHONUNBUFFERED=1
L=$OUT/logs; mkdir -p $L
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > $L/configure.log 2>&1
cmake --build build --parallel 16 --target fa_run test_gpu_causal test_gpu_stages test_gpu_any_length > $L/build.log 2>&1
echo "build rc=$? $(t)"; grep -m5 -iE "error|FAILED" $L/build.log
run_test() {  # name stages
  FA_TEST_STAGES=$2 timeout 240 build/tests/$1 > $L/$1.log 2>&1; echo "$1 [$2] rc=$? $(t)"; tail -3 $L/$1.log
}
run_test test_gpu_causal 13_causal,23_causal,24_three_warpgroups
run_test test_gpu_stages 23_causal,24_three_warpgroups
run_test test_gpu_any_length 24_three_warpgroups
FA_GIT_REV=${FA_GIT_REV:-unknown} timeout 300 python3 tools/bench.py --stages 17,22,23,24 --dtypes fp16,bf16 --head-dims 64 \
  --series headline,causal --out-dir $OUT/bench --no-readme --no-plots --no-docs > $L/bench.log 2>&1
echo "bench rc=$? $(t)"
python3 - "$OUT/bench" <<'PY'
import csv, glob, io, sys
path = sorted(glob.glob(sys.argv[1] + "/results_*.csv"))[-1]
rows = list(csv.DictReader(io.StringIO("".join(l for l in open(path) if not l.startswith("#")))))
for r in rows:
    print(r["impl"], r["series"], r["dtype"], r["head_dim"], r["seq_q"], "%.0f" % float(r["tflops"] or 0),
          r["pct_of_fa2"], r["pct_of_cudnn"], r["status"])
PY
