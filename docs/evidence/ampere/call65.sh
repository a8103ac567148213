#!/usr/bin/env bash
# Calls 65 and 66 (seventeenth session): the first full run timed in rounds (tools/bench.py
# --timing rounds, the default since 06e6b3e), stages 1-36, one dtype per call:
#   REV=<commit> DT=fp16 bash docs/evidence/ampere/call65.sh     # call 65 (no carry)
#   REV=<commit> DT=bf16 bash docs/evidence/ampere/call65.sh     # call 66
# then here: python3 tools/bench.py --merge (both part CSVs in plots/results/parts/).
# Each part's CSV and its compressed log go to $OUT as soon as the part ends; the last lines of
# the log (bench.py's tables) are printed.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
: "${DT:?set DT to fp16 or bf16}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
left() { echo $(( ${LIMIT:-590} - ($(date +%s) - T0) )); }
LOG=$OUT/call65_$DT.txt
FA_GIT_REV=$REV CMAKE_CUDA_ARCHITECTURES=90 timeout $(left) bash scripts/run_all.sh --part --dtypes $DT \
  --feature-stages newest > /tmp/run_all_$DT.log 2>&1
echo "run_all $DT rc=$? $(t)" | tee -a $LOG
cp plots/results/parts/part_${DT}_d64_d128.csv $OUT/ 2>/dev/null
gzip -c /tmp/run_all_$DT.log > $OUT/run_all_$DT.log.gz
grep -E "^bench.py: (measured|wrote|.*failed)|FAIL|Traceback|Error" /tmp/run_all_$DT.log | tail -8 | tee -a $LOG
grep -E "^run_all.sh: (building|running)" /tmp/run_all_$DT.log | tee -a $LOG
echo "done $(t)" | tee -a $LOG
tail -75 /tmp/run_all_$DT.log | cut -c1-110
