#!/usr/bin/env bash
# compute-sanitizer over every stage: memcheck (out-of-bounds and misaligned accesses, leaks),
# racecheck (shared-memory races), synccheck (barrier misuse) and initcheck (reads of
# uninitialized global memory). Each tool runs the runner once over all stages, both dtypes and
# both head dims, on small shapes (the sanitizers slow kernels down by orders of magnitude):
#
#   fa_run --no-time --stage all --batch 2 --heads 2 --seq 128 --seq-kv 256 --dtype all --head-dim all
#
# Usage:
#   scripts/sanitize.sh                          every tool; builds fa_run first (incremental)
#   scripts/sanitize.sh --tool racecheck         one tool (repeat it, or give a comma list)
#   scripts/sanitize.sh --stage 04,08            some stages (fa_run's --stage syntax)
#   scripts/sanitize.sh --fa-run build/fa_run    use this runner as it is, build nothing
#   scripts/sanitize.sh --log-dir DIR            full logs there (default: <build dir>/sanitizer)
#
# Environment: FA_BUILD_DIR (build directory, default build), COMPUTE_SANITIZER (the tool's path;
# otherwise PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin and nvcc's folder are
# searched), FA_SANITIZER_ARGS (extra compute-sanitizer options), CMAKE_CUDA_ARCHITECTURES (for a
# first configure, e.g. 90), BUILD_JOBS (default: all cores).
#
# It prints a table (tool, exit status, errors, warnings, the runner's own check) and exits
#   0   every tool reported 0 errors and every stage passed its check
#   1   something failed (the table and the log excerpts below it say what)
#   2   bad usage, or the build failed
#   77  skipped: no usable CUDA GPU, or no compute-sanitizer (CTest reports "skipped")
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

say() { printf '[sanitize.sh] %s\n' "$*"; }
usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
  exit 2
}
skip() {
  echo "SKIPPED: $*"
  exit 77
}

all_tools=(memcheck racecheck synccheck initcheck)
tools=()
stages=all
fa_run=""
log_dir=""
build_dir=${FA_BUILD_DIR:-build}

while (($#)); do
  case $1 in
    --tool)
      [[ $# -ge 2 ]] || usage
      IFS=, read -r -a more <<<"$2"
      tools+=("${more[@]}")
      shift 2
      ;;
    --stage)
      [[ $# -ge 2 ]] || usage
      stages=$2
      shift 2
      ;;
    --fa-run)
      [[ $# -ge 2 ]] || usage
      fa_run=$2
      shift 2
      ;;
    --log-dir)
      [[ $# -ge 2 ]] || usage
      log_dir=$2
      shift 2
      ;;
    -h | --help) usage ;;
    *)
      echo "sanitize.sh: unknown option $1" >&2
      usage
      ;;
  esac
done
((${#tools[@]})) || tools=("${all_tools[@]}")
for tool in "${tools[@]}"; do
  [[ " ${all_tools[*]} " == *" $tool "* ]] || {
    echo "sanitize.sh: unknown tool '$tool' (known: ${all_tools[*]})" >&2
    exit 2
  }
done

# ---- compute-sanitizer ------------------------------------------------------------------------------
find_sanitizer() {
  local candidates=()
  [[ -n ${COMPUTE_SANITIZER:-} ]] && candidates+=("$COMPUTE_SANITIZER")
  local on_path
  on_path=$(command -v compute-sanitizer 2>/dev/null) && candidates+=("$on_path")
  [[ -n ${CUDA_HOME:-} ]] && candidates+=("$CUDA_HOME/bin/compute-sanitizer")
  [[ -n ${CUDA_PATH:-} ]] && candidates+=("$CUDA_PATH/bin/compute-sanitizer")
  candidates+=(/usr/local/cuda/bin/compute-sanitizer)
  local nvcc
  nvcc=$(command -v nvcc 2>/dev/null || echo "${CUDACXX:-}")
  [[ -n $nvcc ]] && candidates+=("$(dirname "$nvcc")/compute-sanitizer")
  local c
  for c in "${candidates[@]}"; do
    # The tool must also run (a broken install fails here, not in the middle of the table).
    if [[ -x $c ]] && "$c" --version >/dev/null 2>&1; then
      echo "$c"
      return 0
    fi
  done
  return 1
}
sanitizer=$(find_sanitizer) ||
  skip "compute-sanitizer not found or not runnable (set COMPUTE_SANITIZER, or put the CUDA toolkit's bin folder on PATH; looked in PATH, \$CUDA_HOME/bin, \$CUDA_PATH/bin, /usr/local/cuda/bin, nvcc's folder)"
say "compute-sanitizer: $sanitizer ($("$sanitizer" --version 2>/dev/null | grep -Eio 'version [^ ]+' | head -n 1))"

# ---- the runner ---------------------------------------------------------------------------------------
if [[ -z $fa_run ]]; then
  if ! command -v nvcc >/dev/null 2>&1 && [[ -z ${CUDACXX:-} && -x /usr/local/cuda/bin/nvcc ]]; then
    export CUDACXX=/usr/local/cuda/bin/nvcc
  fi
  configure=(cmake -S . -B "$build_dir")
  if [[ ! -f $build_dir/CMakeCache.txt ]]; then
    command -v ninja >/dev/null 2>&1 && configure+=(-G Ninja)
    [[ -n ${CMAKE_CUDA_ARCHITECTURES:-} ]] && configure+=("-DCMAKE_CUDA_ARCHITECTURES=$CMAKE_CUDA_ARCHITECTURES")
    say "configuring: ${configure[*]}"
    "${configure[@]}" >/dev/null || {
      echo "sanitize.sh: cmake configure failed" >&2
      exit 2
    }
  fi
  jobs=${BUILD_JOBS:-$(nproc 2>/dev/null || echo 4)}
  say "building fa_run in $build_dir"
  cmake --build "$build_dir" --target fa_run --parallel "$jobs" >/dev/null || {
    echo "sanitize.sh: building fa_run failed (cmake --build $build_dir --target fa_run)" >&2
    exit 2
  }
  fa_run=$build_dir/fa_run
  [[ -x $fa_run ]] || fa_run=$(find "$build_dir" -maxdepth 3 -type f -name fa_run -perm -u+x | head -n 1)
fi
[[ -n $fa_run && -x $fa_run ]] || {
  echo "sanitize.sh: no runnable fa_run (${fa_run:-none found})" >&2
  exit 2
}
[[ -n $log_dir ]] || log_dir=$(dirname "$fa_run")/sanitizer
mkdir -p "$log_dir"

run_args=(--no-time --stage "$stages" --batch 2 --heads 2 --seq 128 --seq-kv 256 --dtype all --head-dim all)

# ---- without a sanitizer first: is there a GPU, and does every stage pass? -----------------------------
plain_log=$log_dir/no_sanitizer.log
"$fa_run" "${run_args[@]}" >"$plain_log" 2>&1
plain_rc=$?
if ((plain_rc == 3)); then
  skip "no usable CUDA GPU ($(tail -n 1 "$plain_log"))"
fi
say "runner: $fa_run ${run_args[*]}"

# ---- one run per tool ---------------------------------------------------------------------------------
error_exit=86 # compute-sanitizer's exit status when it found errors (--error-exitcode)
declare -A rc_of errors_of warnings_of check_of
failed=0

count_errors() { # count_errors LOG -> "errors warnings", "?" where the summary line is missing
  local log=$1 line errors="?" warnings="-"
  line=$(grep -E 'RACECHECK SUMMARY:' "$log" | tail -n 1)
  if [[ -n $line ]]; then
    errors=$(sed -nE 's/.*\(([0-9]+) errors?.*/\1/p' <<<"$line")
    warnings=$(sed -nE 's/.* ([0-9]+) warnings?\).*/\1/p' <<<"$line")
  fi
  line=$(grep -E 'ERROR SUMMARY: [0-9]+ error' "$log" | tail -n 1)
  if [[ -n $line && $errors == "?" ]]; then
    errors=$(sed -nE 's/.*ERROR SUMMARY: ([0-9]+) error.*/\1/p' <<<"$line")
  fi
  echo "${errors:-?} ${warnings:--}"
}

runner_check() { # runner_check LOG -> PASS / FAIL (the runner's own correctness check)
  # fa_run's rows end in "PASS", "FAIL: ..." or "ERROR: ..."; the sanitizer's own lines start with "=".
  if grep -v '^=' "$1" | grep -qE 'failed their check or could not run|  (FAIL|ERROR): '; then
    echo FAIL
  else
    echo PASS
  fi
}

for tool in "${tools[@]}"; do
  log=$log_dir/$tool.log
  args=(--tool "$tool" --error-exitcode "$error_exit")
  case $tool in
    memcheck) args+=(--leak-check full) ;;
  esac
  # shellcheck disable=SC2206 # FA_SANITIZER_ARGS is a list of options, split on purpose
  extra=(${FA_SANITIZER_ARGS:-})
  say "$tool: $sanitizer ${args[*]}${extra[*]+ ${extra[*]}} fa_run ... (log: $log)"
  start=$SECONDS
  "$sanitizer" "${args[@]}" ${extra[@]+"${extra[@]}"} "$fa_run" "${run_args[@]}" >"$log" 2>&1
  rc=$?
  read -r errors warnings <<<"$(count_errors "$log")"
  rc_of[$tool]=$rc
  errors_of[$tool]=$errors
  warnings_of[$tool]=$warnings
  check_of[$tool]=$(runner_check "$log")
  say "$tool: exit $rc, errors $errors, $((SECONDS - start)) s"
  if ((rc != 0)) || [[ $errors != 0 || ${check_of[$tool]} != PASS ]]; then failed=1; fi
done

# ---- summary --------------------------------------------------------------------------------------------
plain_check=$(runner_check "$plain_log")
((plain_rc == 0)) && [[ $plain_check == PASS ]] || failed=1
echo
printf '%-14s %5s %7s %9s %13s  %s\n' tool exit errors warnings "stage checks" log
printf '%-14s %5s %7s %9s %13s  %s\n' "(none)" "$plain_rc" - - "$plain_check" "$plain_log"
for tool in "${tools[@]}"; do
  printf '%-14s %5s %7s %9s %13s  %s\n' "$tool" "${rc_of[$tool]}" "${errors_of[$tool]}" "${warnings_of[$tool]}" \
    "${check_of[$tool]}" "$log_dir/$tool.log"
done
echo

if ((failed)); then
  # The first reports of every failing tool, so a CTest log shows the cause without the files.
  for tool in "${tools[@]}"; do
    if [[ ${rc_of[$tool]} != 0 || ${errors_of[$tool]} != 0 || ${check_of[$tool]} != PASS ]]; then
      echo "---- $tool: first reports ($log_dir/$tool.log) ----"
      grep -E '^========= ' "$log_dir/$tool.log" | head -n 40
      grep -v '^=' "$log_dir/$tool.log" | grep -E '  (FAIL|ERROR): ' | head -n 10
    fi
  done
  if ((plain_rc != 0)) || [[ $plain_check != PASS ]]; then
    echo "---- without a sanitizer, fa_run exited $plain_rc ($plain_log) ----"
    tail -n 20 "$plain_log"
  fi
  say "FAILED: exit $error_exit = compute-sanitizer found errors; stage checks FAIL = a stage failed its correctness check"
  exit 1
fi
say "every tool clean, every stage passed its check"
exit 0
