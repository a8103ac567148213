#!/usr/bin/env bash
# The main job: build every stage, the runner and the stages' C interface, check and time every
# stage against PyTorch's FlashAttention-2 and cuDNN, write the CSV, and regenerate from it
# everything the README and docs/ show: the track tables in README.md, docs/results.md, the plots in
# plots/, and the generated sections of docs/ (tools/gen_docs.py).
#
#   bash scripts/run_all.sh [options of tools/bench.py]
#
# With no options it measures what the README shows: fp16 and bf16, head_dim 64 and 128,
# S = 1024..8192, every stage this GPU can run (the headline rows), plus the causal, any-length
# (S = 1000, 4000), grouped-query (32 : 8 heads) and ALiBi rows of the stages that declare those
# features. Timing (docs/benchmarking.md, "Timing"): build/fa_run checks every result against fp64,
# then tools/interleaved.py times the stages that passed with FA2 and cuDNN in shuffled rounds, every
# implementation of a shape once per round (--timing separate: each result in a series of its own,
# the protocol of the CSVs before rounds). Progress: one line per check and per time as it
# finishes, with the time so far and an estimate of the time left.
# Some options (all listed below): --quick (smoke run; README and docs/ left alone), --stages ampere_07,ampere_08,
# --dtypes fp16 --head-dims 128, --series headline, --dry-run (print the commands, run nothing).
#
# Where one command may run only so long (a shared GPU machine with a time limit per command), run the job in parts
# and merge them (docs/benchmarking.md, "Run length"):
#   bash scripts/run_all.sh --part --dtypes fp16     # build, then fp16 with its own FA2/cuDNN rows
#   bash scripts/run_all.sh --part --dtypes bf16     # bf16 likewise
#   bash scripts/run_all.sh --merge                  # one results CSV, plots, README, docs/ (no GPU)
#
# Needs an NVIDIA GPU (sm_80 or newer), the CUDA toolkit, CMake >= 3.24 and python3. Optional:
# matplotlib (plots; without it the README's tables are still regenerated, without plots), PyTorch
# with CUDA (the FA2/cuDNN reference rows and the rounds; without it the results are timed
# separately, the reference rows say "torch unavailable" and there is no % of FA2). It installs
# nothing.
#
# Environment: CMAKE_CUDA_ARCHITECTURES (e.g. 90) overrides the project's default architectures;
# BUILD_JOBS overrides the number of parallel build jobs (default: all cores); BUILD_DIR the build
# directory (default build).
#
# Exit status: that of tools/bench.py (0 every result passed its check; 1 one failed or did not
# run, or a later step failed; 2 bad options; 3 no GPU), or 2 when a tool is missing.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
build_dir="${BUILD_DIR:-build}"

say() { printf 'run_all.sh: %s\n' "$*"; }
die() { printf 'run_all.sh: %s\n' "$1" >&2; exit "${2:-1}"; }  # die MESSAGE [EXIT_STATUS]

if [[ " $* " == *" --help "* || " $* " == *" -h "* ]]; then
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
  echo
  echo "The options, passed on to tools/bench.py:"
  exec python3 tools/bench.py --help
fi
if [[ " $* " == *" --dry-run "* || " $* " == *" --merge "* ]]; then  # nothing is built or measured: no GPU needed
  exec python3 tools/bench.py --build-dir "${build_dir}" "$@"
fi

# --- A GPU first: without one there is nothing to measure. --------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
  die "no NVIDIA GPU here (nvidia-smi is not installed), so nothing can be measured. Run this on a machine with an NVIDIA GPU (sm_80 or newer) and its driver." 3
fi
if ! gpu_list=$(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1); then
  die "no usable NVIDIA GPU: nvidia-smi failed: ${gpu_list}" 3
fi
say "GPU(s): $(echo "${gpu_list}" | paste -sd ';' -)"

# --- Tools that cannot be replaced. -------------------------------------------------------------
missing=()
command -v cmake >/dev/null 2>&1 || missing+=("cmake (>= 3.24)")
command -v python3 >/dev/null 2>&1 || missing+=("python3")
if ! command -v nvcc >/dev/null 2>&1 && [[ -z "${CUDACXX:-}" ]]; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc  # a toolkit in the usual place, just not on PATH
  else
    missing+=("the CUDA toolkit (nvcc; or set CUDACXX)")
  fi
fi
if ((${#missing[@]})); then
  die "missing: ${missing[*]}. Install them and run again." 2
fi

# --- Optional Python packages: say plainly what their absence costs. ----------------------------
if ! python3 -c 'import matplotlib' >/dev/null 2>&1; then
  say "matplotlib is not installed for $(command -v python3): no plots, only the CSV and the table (python3 -m pip install matplotlib)."
fi
timing=()  # bench.py's default (rounds), unless PyTorch cannot run them; a --timing of the caller's comes later and wins
if ! torch_info=$(python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "without CUDA")' 2>/dev/null); then
  say "PyTorch is not installed for $(command -v python3): the results are timed separately (not in rounds), the FA2 and cuDNN reference rows will say 'torch unavailable' and there is no % of FA2."
elif [[ "${torch_info}" == *"without CUDA"* ]]; then
  say "PyTorch ${torch_info%% *} sees no CUDA device: the results are timed separately (--timing separate, not in rounds) and the FA2 and cuDNN reference rows will be unavailable."
  timing=(--timing separate)
else
  say "PyTorch ${torch_info%% *} (references: FA2 and cuDNN through scaled_dot_product_attention)."
fi

# --- Configure and build. ----------------------------------------------------------------------
configure=(cmake -S . -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release)
if [[ ! -f "${build_dir}/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
  configure+=(-G Ninja)  # a build dir that exists keeps the generator it was made with
fi
if [[ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]]; then
  configure+=("-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}")
fi
jobs="${BUILD_JOBS:-$(nproc 2>/dev/null || echo 4)}"

say "configuring: ${configure[*]}"
if ! "${configure[@]}" -DFA_BUILD_TESTS=ON; then
  # The benchmark needs no test: most often the tests' Catch2 header is what is missing here.
  say "configuring with the tests failed (see above); configuring again without them (-DFA_BUILD_TESTS=OFF), which the benchmark does not need. bash scripts/test.sh turns them back on."
  "${configure[@]}" -DFA_BUILD_TESTS=OFF
fi
say "building fa_run and fa_capi (libfa_capi.so, for tools/interleaved.py) with ${jobs} jobs"
cmake --build "${build_dir}" --target fa_run fa_capi --parallel "${jobs}"

# --- Measure. -----------------------------------------------------------------------------------
say "running: python3 tools/bench.py --build-dir ${build_dir} ${timing[*]+${timing[*]} }$*"
set +e
python3 -u tools/bench.py --build-dir "${build_dir}" ${timing[@]+"${timing[@]}"} "$@"
status=$?
set -e
if ((status == 0)); then
  say "done: every result passed its check; the CSV, plots, README and docs/ were regenerated as bench.py said above."
else
  say "finished with exit status ${status} (see the messages above)."
fi
exit "${status}"
