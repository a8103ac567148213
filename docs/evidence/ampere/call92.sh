#!/usr/bin/env bash
# Call 92 (twenty-fifth session): call 75 again with 60 shuffled rounds instead of 20, after call
# 90's run of call 75 (20 rounds, an H100) put 38 against 37 at +2.3 / +2.6% (fp16 / bf16, head_dim
# 128, S = 4096) while 37 against 36 was -3.0 / -1.7% in the same cell: does the "within 2% of the
# parent" rule hold there once the rounds resolve it?
#   REV=<commit> bash docs/evidence/ampere/call92.sh      (no carry; about 200 s)
set -o pipefail
: "${REV:?set REV to the commit under test, from this machine}"
OUT=${OUT:-/tmp/out92} REPS=60 bash docs/evidence/ampere/call75.sh
