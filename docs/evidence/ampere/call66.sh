#!/usr/bin/env bash
# Call 66 (prepared in the seventeenth session, not run: the device time was spent): a candidate
# stage 37 for head_dim 64, ALiBi's column-term B registers built once per thread block through a
# 1 KiB shared-memory table (thread c writes column c's parts, then two ldmatrix.x4 per lane)
# instead of by every thread; the loop stays stage 36's (737 / 774 / 716 / 956 SASS instructions,
# sm_90 fp16, against 36's 737 / 773 / 717 / 956), the ALiBi kernel 7,887 instructions against
# 9,032, 238 registers, no spills. Call 63's tables version (B per block) measured what the set-up
# costs: 2-2.6 points at S = 1024. Prediction: the slopes' cost at head_dim 64, S = 1024 from
# +3.4 / +4.0% (36) to about +1.5%, unchanged at S >= 2048; head_dim 128 untouched (stage 36's).
# To run it, make the stage first (then write its stage.json: parent 36_alibi_mma, idea, checks):
#   cp -r stages/36_alibi_mma stages/37_column_setup
#   patch -p1 -d stages/37_column_setup < docs/evidence/ampere/call66/stage37_column_setup_vs_36.patch
#   git archive HEAD tools | tar -x -C .deps/call63 ; REV=<commit> bash docs/evidence/ampere/call66.sh
# (carry .deps). Then as call 64: stage 37's suites and sanitizers, then 40 shuffled rounds of
# stages 36 and 37 each without and with slopes.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine}"
sed -e 's/37_column_ffma/37_column_setup/g' -e 's/call64/call66/g; s/trim64/trim66/g; s/out64/out66/g' \
    -e 's/configure64/configure66/g; s/build64/build66/g' docs/evidence/ampere/call64.sh > /tmp/call66_body.sh
REV=$REV bash /tmp/call66_body.sh
