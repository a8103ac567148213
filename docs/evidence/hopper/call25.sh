#!/usr/bin/env bash
# Prepared in the seventh session, run in the eighth at REV=0361214. Call 25: the full benchmark's fp16 part (stages 1-28),
# after call 24's tests passed and the stages were merged. Run as: REV=<commit> bash docs/evidence/hopper/call25.sh
# (the device's copy of .git can be stale, so the revision is given). Two files come back: the part
# CSV and the log, compressed (the device returns a limited number of files; call 22 lost its part).
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test}"
T0=$(date +%s)
FA_GIT_REV=$REV CMAKE_CUDA_ARCHITECTURES=90 timeout 560 bash scripts/run_all.sh --part --dtypes fp16 --feature-stages newest > /tmp/run_all_fp16.log 2>&1
echo "run_all fp16 rc=$? $(( $(date +%s) - T0 ))s"
cp plots/results/parts/part_fp16_d64_d128.csv $OUT/
gzip -c /tmp/run_all_fp16.log > $OUT/run_all_fp16.log.gz
grep -c PASS /tmp/run_all_fp16.log; grep -E "FAIL|measured" /tmp/run_all_fp16.log | tail -5
