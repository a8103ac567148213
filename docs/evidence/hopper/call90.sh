#!/usr/bin/env bash
# Call 90 (prepared in the twenty-fourth session, whose device time was spent before it began):
# the H200's evidence for issue 12's fine-grained rules and issue 11's fp16 clock question, after
# the H200's full run (call65.sh, one call per dtype). One call, no carry, about 5 minutes:
#   REV=<commit> bash docs/evidence/hopper/call90.sh
# It runs three prepared calls in turn, each in its own trimmed tree and output folder, and packs
# each folder into one archive (a call brings back at most 8 files):
#   (1) call86.sh: stage 41's causal and GQA rows against FA2 and cuDNN, its any-length rows, and
#       ALiBi's cost in stage 38 at head_dim 128 in 60 rounds (issue 12: "within 5%");
#   (2) call75.sh: the Ampere track's chain 16 -> 32 -> 33 -> 36 -> 37 -> 38 without causal in
#       pairwise shuffled rounds (issue 12: "the new stages within 2% of their parent");
#   (3) call76.sh with STAGES="30_lazy_rescale 41_warp_redo": cycles and clock at fp16 and bf16,
#       head_dim 128, S = 1024 and 4096 (does stage 41 pass 700 TFLOP/s at fp16 S = 4096 on the
#       H200, and is a miss the power cap's?).
# Predictions (from the H100's calls 86, 75 and 89): (1) 41 >= 100% of FA2 causal and GQA in every
# cell, any length 90-98% of the tile multiple's TFLOP/s (95.4% is the 128-row tile's bound at
# S = 4000), ALiBi in 38 +3 to +5% by median in every cell; (2) every link within -2..+2% by
# median; (3) fp16 2-3% fewer cycles than bf16 at S = 4096 and a 1-3% lower clock.
# The card is printed first: on a card that is not the H200 this is H100 evidence again (calls 86,
# 75 and 89 exist), so a session that gets an H100 runs something else instead.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
OUT=${OUT:-/tmp/out90}; mkdir -p $OUT
LOG=$OUT/call90.txt
echo "git $REV $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)" | tee -a $LOG
part() {  # name, script, then VAR=value settings for it
  local name=$1 script=$2; shift 2
  mkdir -p /tmp/out90_$name
  env "$@" OUT=/tmp/out90_$name REV=$REV timeout ${PART_LIMIT:-240} bash $script > /tmp/out90_$name/stdout.txt 2>&1
  echo "$name rc=$? $(t)" | tee -a $LOG
  tar -C /tmp -czf $OUT/$name.tar.gz out90_$name
}
part call86 docs/evidence/hopper/call86.sh
grep -hE "^(causal|gqa|alibi|.*of the TFLOP/s|done)" /tmp/out90_call86/call86.txt | cut -c1-120 | tee -a $LOG
part call75 docs/evidence/ampere/call75.sh
sed -n '/^time ratio by median/,/^done/p' /tmp/out90_call75/call75.txt | cut -c1-120 | tee -a $LOG
part call76 docs/evidence/hopper/call76.sh STAGES="30_lazy_rescale 41_warp_redo"
grep -E "^(30_|41_|fa2|cudnn)" /tmp/out90_call76/call76.txt | cut -c1-130 | tee -a $LOG
echo "done $(t)" | tee -a $LOG
