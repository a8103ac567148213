#!/usr/bin/env bash
# Call 12: the mutation check of stage 16's general-attention mutants (tests/mutants/16_alibi), never run on a GPU before.
set -o pipefail
T0=$(date +%s); t() { echo "$(( $(date +%s) - T0 ))s"; }
cmake -S . -B build -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/configure.log 2>&1
cmake --build build --parallel 16 > /tmp/build.log 2>&1; echo "build rc=$? $(t)"
timeout 450 bash scripts/mutation_check.sh --build-dir build --stage 16_alibi --mutants tests/mutants/16_alibi \
  --checks gqa,lse,alibi --jobs 6 --timeout 90 --log-dir $OUT/mutlogs 2>&1 | tee $OUT/mutation_check_16.txt | tail -30
echo "mutation_check rc=${PIPESTATUS[0]} $(t)"
