#!/usr/bin/env bash
# Measures the hardware ceilings that docs/ceilings.md quotes, on this machine's GPU:
#
#   bash scripts/microbench.sh [options]
#
# Builds tools/microbench on its own (fa_microbench; CMake, Ninja if present, into
# build-microbench/), then runs, each result checked before it is reported:
#   mma-sync   mma.sync m16n8k16 peak, fp16 and bf16 (TFLOP/s)
#   wgmma      wgmma m64n256k16 peak, fp16 and bf16 with 2 warpgroups per CTA, fp16 with 1
#              (TFLOP/s; compute capability 9.0 only, skipped with a message elsewhere)
#   hbm-read   streaming read of 4 GiB (GB/s)
#   copy       device-to-device copy of 2 GiB, cudaMemcpyAsync and a copy kernel (GB/s, read + write)
# and writes plots/results/ceilings_<gpu>_<UTC date>.csv and plots/results/ceilings_latest.csv:
# '# key=value' lines (gpu, driver, cuda, git, date, SM clock at start and end, ...), then
#   name,dtype,value,unit,method
# rows. Prints a table last. About 10 s of GPU time on an H200, after a build of about a minute.
# Needs an NVIDIA GPU (sm_80 or newer), the CUDA toolkit and CMake >= 3.24; no Python, no PyTorch.
#
# Options:
#   --output FILE      write the CSV to FILE only (neither the dated file nor ceilings_latest.csv)
#   --only LIST        comma-separated subset of mma-sync,wgmma,hbm-read,copy (default: all)
#   --reps N           timed repetitions per result; the median is reported (default 30)
#   --build-dir DIR    build directory (default build-microbench)
#   -h, --help         this text, then fa_microbench's options (when it is built)
#
# Environment: CMAKE_CUDA_ARCHITECTURES (e.g. 90; default the project's 80;86;90: the wgmma
# benchmark is built for sm_90a whatever it says), BUILD_JOBS (default: all cores), FA_GIT_REV (the
# revision to record, for a tree copied without .git), CUDA_VISIBLE_DEVICES (the GPU: the first one
# it names).
#
# Exit status: 0 every result measured and checked; 1 a benchmark failed (its check or a CUDA
# error: the other results are still written, but ceilings_latest.csv is left as it was); 2 bad
# usage, missing tools or a failed build; 3 no NVIDIA GPU.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
say() { printf 'microbench.sh: %s\n' "$*"; }
die() { printf 'microbench.sh: %s\n' "$1" >&2; exit "${2:-1}"; }  # die MESSAGE [EXIT_STATUS]

output=""
only="mma-sync,wgmma,hbm-read,copy"
reps=30
build_dir="build-microbench"
while (($#)); do
  case "$1" in
    -h|--help)
      awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
      if [[ -x "${build_dir}/fa_microbench" ]]; then echo; "${build_dir}/fa_microbench" --help; fi
      exit 0 ;;
    --output) output="${2:?--output needs a file}"; shift 2 ;;
    --only) only="${2:?--only needs a list}"; shift 2 ;;
    --reps) reps="${2:?--reps needs a number}"; shift 2 ;;
    --build-dir) build_dir="${2:?--build-dir needs a directory}"; shift 2 ;;
    *) die "unknown option '$1' (see --help)" 2 ;;
  esac
done
[[ "${reps}" =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive whole number" 2
for b in ${only//,/ }; do
  case "$b" in mma-sync|wgmma|hbm-read|copy) ;; *) die "--only: unknown benchmark '$b'" 2 ;; esac
done
wants() { [[ ",${only}," == *",$1,"* ]]; }

# --- A GPU first: without one there is nothing to measure. --------------------------------------
if ! command -v nvidia-smi >/dev/null 2>&1; then
  die "no NVIDIA GPU here (nvidia-smi is not installed), so nothing can be measured. Run this on a machine with an NVIDIA GPU (sm_80 or newer) and its driver." 3
fi
gpu_index=""
first_visible="${CUDA_VISIBLE_DEVICES:-}"
first_visible="${first_visible%%,*}"
[[ -n "${first_visible}" ]] && gpu_index="-i ${first_visible}"
smi() {  # smi FIELD[,FIELD...]: the values for the GPU that CUDA device 0 is, or "unknown"
  local out
  # shellcheck disable=SC2086  # gpu_index is empty or two words
  if out=$(nvidia-smi ${gpu_index} --query-gpu="$1" --format=csv,noheader,nounits 2>/dev/null) && [[ -n "${out}" ]]; then
    echo "${out}" | head -n 1 | sed 's/, */,/g'
  else
    echo "unknown"
  fi
}
if ! gpu_list=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1); then
  die "no usable NVIDIA GPU: nvidia-smi failed: ${gpu_list}" 3
fi

# --- Tools, then the build. ----------------------------------------------------------------------
command -v cmake >/dev/null 2>&1 || die "cmake (>= 3.24) is missing" 2
if ! command -v nvcc >/dev/null 2>&1 && [[ -z "${CUDACXX:-}" ]]; then
  [[ -x /usr/local/cuda/bin/nvcc ]] || die "the CUDA toolkit (nvcc) is missing: put it on PATH or set CUDACXX" 2
  export CUDACXX=/usr/local/cuda/bin/nvcc  # a toolkit in the usual place, just not on PATH
fi
configure=(cmake -S tools/microbench -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release)
if [[ ! -f "${build_dir}/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
  configure+=(-G Ninja)  # a build dir that exists keeps the generator it was made with
fi
if [[ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]]; then
  configure+=("-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}")
fi
mkdir -p "${build_dir}"
build_log="${build_dir}/microbench_build.log"
say "building fa_microbench in ${build_dir} (log: ${build_log})"
if ! { "${configure[@]}" && cmake --build "${build_dir}" --target fa_microbench --parallel "${BUILD_JOBS:-$(nproc 2>/dev/null || echo 4)}"; } >"${build_log}" 2>&1; then
  tail -n 40 "${build_log}" >&2
  die "the build failed (the end of ${build_log} is above)" 2
fi
exe="${build_dir}/fa_microbench"

# --- What is measured on, for the CSV header. ----------------------------------------------------
if ! info=$("${exe}" info 2>&1); then
  echo "${info}" >&2
  die "fa_microbench found no usable CUDA GPU (above)" 3
fi
info_value() { echo "${info}" | sed -n "s/^# $1=//p" | head -n 1; }
compute_capability=$(info_value compute_capability)
gpu_name=$(info_value gpu)
if [[ -n "${FA_GIT_REV:-}" ]]; then
  git_rev="${FA_GIT_REV}"
elif git_rev=$(git rev-parse --short HEAD 2>/dev/null); then
  [[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] && git_rev="${git_rev}-dirty"
else
  git_rev="unknown"
fi
started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
stamp=$(date -u +%Y%m%d-%H%M%S)
clock_at_start=$(smi clocks.sm)
say "GPU: ${gpu_name} (compute capability ${compute_capability}), SM clock ${clock_at_start} MHz at start; git ${git_rev}"

# --- Measure. ------------------------------------------------------------------------------------
rows=$(mktemp)
trap 'rm -f "${rows}"' EXIT
failed=()
skipped=()
run() {  # run BENCHMARK [OPTIONS...]: rows to ${rows}; a failure is recorded, not fatal
  say "running: fa_microbench $* --warmup 3 --reps ${reps}"
  local status=0
  "${exe}" "$@" --warmup 3 --reps "${reps}" >>"${rows}" || status=$?
  case "${status}" in
    0) ;;
    77) skipped+=("$*") ;;
    *) failed+=("$* (exit status ${status})") ;;
  esac
}
wants mma-sync && run mma-sync --dtype all
if wants wgmma; then
  if [[ "${compute_capability}" == "90" ]]; then
    run wgmma --dtype all --warpgroups 2
    run wgmma --dtype fp16 --warpgroups 1
  else
    say "skipping wgmma: it is built for sm_90a, which runs on compute capability 9.0 only; this GPU is ${compute_capability}"
    skipped+=("wgmma (compute capability ${compute_capability})")
  fi
fi
wants hbm-read && run hbm-read
wants copy && run copy
clock_at_end=$(smi clocks.sm)

# --- The CSV. ------------------------------------------------------------------------------------
slug=$(echo "${gpu_name}" | tr '[:upper:]' '[:lower:]' | sed -e 's/[^a-z0-9]\{1,\}/-/g' -e 's/^-//' -e 's/-$//' -e 's/^nvidia-//')
if [[ -n "${output}" ]]; then
  csv="${output}"
else
  mkdir -p plots/results
  csv="plots/results/ceilings_${slug:-unknown-gpu}_${stamp}.csv"
fi
{
  echo "# gpu=${gpu_name}"
  echo "# driver=$(smi driver_version)"
  echo "# cuda=$(info_value cuda)"
  echo "# cuda_driver_api=$(info_value cuda_driver_api)"
  echo "# compute_capability=${compute_capability}"
  echo "# sms=$(info_value sms)"
  echo "# l2_bytes=$(info_value l2_bytes)"
  echo "# memory_bytes=$(info_value memory_bytes)"
  echo "# sm_clock_mhz_at_start=${clock_at_start}"
  echo "# sm_clock_mhz_at_end=${clock_at_end}"
  echo "# sm_clock_max_mhz=$(smi clocks.max.sm)"
  echo "# power_limit_w=$(smi power.limit)"
  echo "# date=${started}"
  echo "# git=${git_rev}"
  echo "# command=scripts/microbench.sh --only ${only} --reps ${reps}"
  echo "# method=each result checked first (no number for a failed check); CUDA events; median of ${reps} timed launches after 3 warm-up; TFLOP/s = 2*M*N*K per MMA instruction / time; GB/s = 10^9 bytes moved / time; details per row and in docs/ceilings.md"
  if ((${#skipped[@]})); then echo "# skipped=$(IFS=';'; echo "${skipped[*]}")"; fi
  if ((${#failed[@]})); then echo "# failed=$(IFS=';'; echo "${failed[*]}")"; fi
  echo "name,dtype,value,unit,method"
  cat "${rows}"
} >"${csv}"
say "wrote ${csv}"
if [[ -z "${output}" ]]; then
  if ((${#failed[@]} == 0)); then
    cp "${csv}" plots/results/ceilings_latest.csv
    say "and plots/results/ceilings_latest.csv"
  else
    say "plots/results/ceilings_latest.csv left as it was: a benchmark failed"
  fi
fi

# --- The table. ----------------------------------------------------------------------------------
echo
echo "Ceilings on ${gpu_name} (git ${git_rev}, SM clock ${clock_at_start} -> ${clock_at_end} MHz):"
# name, dtype, value and unit hold no commas; the method (last, quoted) is left out.
grep -v '^#' "${csv}" | awk -F, 'NR > 1 { printf "  %-34s %-6s %10s  %s\n", $1, $2, $3, $4 }'
for s in "${skipped[@]+"${skipped[@]}"}"; do echo "  skipped: ${s}"; done
if ((${#failed[@]})); then
  for f in "${failed[@]}"; do echo "  FAILED: ${f}"; done
  exit 1
fi
