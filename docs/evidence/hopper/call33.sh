#!/usr/bin/env bash
# Ninth session, call 33: the full benchmark (stages 1-30), both parts in one call: the build once,
# then the fp16 part, then the bf16 part in the time left (if it is cut short, it runs alone in the
# next call). Run as: REV=<commit> bash docs/evidence/hopper/call33.sh. Each part's CSV and its log
# (compressed) go to $OUT as soon as the part ends; merge here with python3 tools/bench.py --merge.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
for dt in fp16 bf16; do
  left=$(( 585 - ($(date +%s) - T0) ))
  FA_GIT_REV=$REV CMAKE_CUDA_ARCHITECTURES=90 timeout $left bash scripts/run_all.sh --part --dtypes $dt \
    --feature-stages newest > /tmp/run_all_$dt.log 2>&1
  echo "run_all $dt rc=$? $(t) (limit ${left}s)"
  cp plots/results/parts/part_${dt}_d64_d128.csv $OUT/ 2>/dev/null
  gzip -c /tmp/run_all_$dt.log > $OUT/run_all_$dt.log.gz
  echo "  PASS rows: $(grep -c PASS /tmp/run_all_$dt.log)"; grep -E "FAIL|measured" /tmp/run_all_$dt.log | tail -3
done
