#!/usr/bin/env bash
# Call 38 (tenth session): why call 34 (rounds) and the ninth session's full run (series) disagree at
# head_dim 128, S = 8192 (cuDNN 26.6 ms launch after launch against 30.4 ms in its own series; stage 30
# 28.2 against 28.7). tools/interleaved.py with --readings reads the SM clock, power and temperature
# through NVML halfway through every launch, so each time can also be stated in cycles; --order series
# times each implementation in a row of its own as bench.py does, in the same process. Read only:
# nothing on the GPU is set. Then stage 16 at S = 1000 / 4000 against 1024 / 4096 in the same rounds
# (--any-length: issue 12's any-length rule). Trimmed tree, library only.
set -o pipefail
export PYTHONUNBUFFERED=1
: "${REV:?set REV to the commit under test, from this machine: the device copy's git log is not this tree's}"
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
W=/tmp/trim38; rm -rf $W; mkdir -p $W/stages
cp -r CMakeLists.txt common tools tests scripts $W/
for s in 16_alibi 21_pingpong 30_lazy_rescale; do cp -r stages/$s $W/stages/; done
cmake -S $W -B $W/build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFA_BUILD_TESTS=OFF > /tmp/configure.log 2>&1
cmake --build $W/build --parallel 16 --target fa_capi > /tmp/build.log 2>&1; echo "build rc=$? $(t)"
I="timeout 200 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --stages 21,30 --head-dim 128"
run() { local tag=$1; shift; FA_GIT_REV=$REV $I "$@" --csv $OUT/call38_$tag.csv > $OUT/call38_$tag.txt 2>&1
        echo "$tag rc=$? $(t)"; }
run rounds_readings_8192 --dtype fp16,bf16 --seqs 8192 --warmup 3 --reps 30 --readings --launch-times
run series_readings_8192 --dtype fp16,bf16 --seqs 8192 --warmup 10 --reps 30 --readings --order series --launch-times
run rounds_plain_8192 --dtype fp16 --seqs 8192 --warmup 10 --reps 60 --launch-times
run rounds_nofa2_8192 --dtype fp16 --seqs 8192 --warmup 10 --reps 60 --references cudnn
run rounds_readings_1024_4096 --dtype fp16 --seqs 1024,4096 --warmup 10 --reps 100 --readings
run series_readings_1024_4096 --dtype fp16 --seqs 1024,4096 --warmup 5 --reps 20 --readings --order series
FA_GIT_REV=$REV timeout 200 python3 $W/tools/interleaved.py --lib $W/build/libfa_capi.so --stages 16 \
  --dtype fp16,bf16 --head-dim 64,128 --seqs 1024,4096 --any-length 1000,4000 --references "" --reps 100 \
  --csv $OUT/call38_anylength_16.csv > $OUT/call38_anylength_16.txt 2>&1; echo "anylength rc=$? $(t)"
grep -h "runs at" $OUT/call38_anylength_16.txt
for f in $OUT/call38_*.txt; do echo "== $(basename $f)"; grep -vE "^  (launch ms|SM MHz)" $f | grep -vE "^#|^impl|^$"; done | cut -c1-130
echo "done $(t)"
