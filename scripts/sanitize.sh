#!/usr/bin/env bash
# compute-sanitizer over every stage: memcheck (out-of-bounds and misaligned accesses, leaks),
# racecheck (shared-memory races), synccheck (barrier misuse) and initcheck (reads of
# uninitialized global memory). Each tool runs the runner over all stages, both dtypes and both head
# dims, on two small shapes (the sanitizers slow kernels down by orders of magnitude): contiguous
# tensors with twice as many keys as queries, and the mixed layout (Q, K, V and O each laid out
# differently, with gaps: common/harness.h) with 1.5 times as many (shapes every stage's tiles divide):
#
#   contiguous: fa_run --no-time --stage all --dtype all --head-dim all --layout contiguous --batch 2 --heads 2 --seq 128 --seq-kv 256
#   mixed:      fa_run --no-time --stage all --dtype all --head-dim all --layout mixed --batch 2 --heads 3 --seq 256 --seq-kv 384
#
# and lengths that are not tile multiples with each feature of the general-attention track, each on
# the selected stages that declare all it asks for (fa_run --list --json; any_length, then the
# features its flags name): the partial tiles, the causal rows that see no key, the key/value head
# of a group, the LSE writes and the ALiBi slope read are what these add:
#
#   any_length: --layout mixed --batch 2 --heads 3 --seq 200 --seq-kv 333
#   causal:     --layout contiguous --batch 2 --heads 2 --seq 333 --seq-kv 200 --causal
#   gqa:        --layout mixed --batch 2 --heads 4 --kv-heads 1 --seq 200 --seq-kv 333 --causal
#   lse:        --layout contiguous --batch 2 --heads 4 --kv-heads 2 --seq 333 --seq-kv 200 --causal --lse
#   alibi:      --layout mixed --batch 2 --heads 4 --kv-heads 2 --seq 333 --seq-kv 400 --lse --alibi
#               (K/V blocks left of, across and right of the diagonal: ampere_18_alibi_mma's three kinds of step)
#
# and the backward of the selected stages that have one, through fa_backward_run (built beside
# fa_run; its forward with the LSE, then the backward, dQ, dK and dV checked against fp64):
#
#   backward:   fa_backward_run --stages <those> --dtypes fp16,bf16 --head-dims 64,128 --seqs 192
#               --batch 2 --heads 2 --warmup 0 --reps 1 --check-heads 1
#               (192 keys: a last K/V block of 64 behind a whole one of 128, as backward_02 on cut it)
#
# Usage:
#   scripts/sanitize.sh                          every tool; builds fa_run first (incremental)
#   scripts/sanitize.sh --tool racecheck         one tool (repeat it, or give a comma list)
#   scripts/sanitize.sh --stage ampere_04,hopper_17_warp_redo   some stages (fa_run's --stage syntax)
#   scripts/sanitize.sh --fa-run build/fa_run    use this runner as it is, build nothing
#   scripts/sanitize.sh --log-dir DIR            full logs there (default: <build dir>/sanitizer)
#
# Environment: FA_BUILD_DIR (build directory, default build), COMPUTE_SANITIZER (the tool's path;
# otherwise PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin and nvcc's folder are
# searched), FA_SANITIZER_ARGS (extra compute-sanitizer options), CMAKE_CUDA_ARCHITECTURES (for a
# first configure, e.g. 90), BUILD_JOBS (default: all cores).
#
# It prints a table (tool, shape, exit status, errors, warnings, the runner's own check) and exits
#   0   every tool reported 0 errors and every stage passed its check, on every shape
#   1   something failed (the table and the log excerpts below it say what), a compute-sanitizer
#       that is there but does not run included
#   2   bad usage, or the build failed
#   77  skipped: nothing to run on (no CUDA device, or no NVIDIA driver: fa_run exits 3), or no
#       compute-sanitizer anywhere (CTest reports "skipped"). Every other CUDA error fails.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

say() { printf '[sanitize.sh] %s\n' "$*"; }
usage() {  # usage [STATUS]: the header comment; 0 and stdout for --help, 2 and stderr for a bad call
  local status=${1:-2}
  if [[ $status == 0 ]]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
  else
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
  fi
  exit "$status"
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
    -h | --help) usage 0 ;;
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

# ---- compute-sanitizer --------------------------------------------------------------------------------
# Prints the first candidate that exists; fails only when there is none. Whether it runs is checked
# below, after the GPU: a tool that is there but broken is a failure, not a reason to skip.
find_sanitizer() {
  if [[ -n ${COMPUTE_SANITIZER:-} ]]; then # named explicitly: that one, and it must run
    echo "$COMPUTE_SANITIZER"
    return 0
  fi
  local candidates=()
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
    if [[ -e $c ]]; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

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
  say "building fa_run and fa_backward_run in $build_dir"
  cmake --build "$build_dir" --target fa_run fa_backward_run --parallel "$jobs" >/dev/null || {
    echo "sanitize.sh: building fa_run failed (cmake --build $build_dir --target fa_run fa_backward_run)" >&2
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

common_args=(--no-time --dtype all --head-dim all)
shapes=(contiguous mixed)
declare -A shape_args=(
  [contiguous]="--layout contiguous --batch 2 --heads 2 --seq 128 --seq-kv 256"
  [mixed]="--layout mixed --batch 2 --heads 3 --seq 256 --seq-kv 384"
)
declare -A stages_of_shape=([contiguous]=$stages [mixed]=$stages)

# The selected stages (--stage: ids, track_NN, or all) that declare every feature named, comma-
# separated; each stage is one line of fa_run --list --json.
stages_declaring() {
  local line name number feature picked=""
  while IFS= read -r line; do
    for feature in "$@"; do
      [[ $line == *"\"$feature\""* ]] || continue 2
    done
    name=$(sed -nE 's/.*"name": "([^"]+)".*/\1/p' <<<"$line")
    number=${name%_"${name#*_*_}"}  # hopper_05_persistent -> hopper_05
    if [[ $stages == all || ",$stages," == *",$name,"* || ",$stages," == *",$number,"* ]]; then
      picked+=${picked:+,}$name
    fi
  done < <("$fa_run" --list --json)
  echo "$picked"
}
# The general-attention shapes, each on the stages that declare all it asks for (a shape no selected
# stage declares is left out).
general_shapes=(any_length causal gqa lse alibi)
declare -A general_args=(
  [any_length]="--layout mixed --batch 2 --heads 3 --seq 200 --seq-kv 333"
  [causal]="--layout contiguous --batch 2 --heads 2 --seq 333 --seq-kv 200 --causal"
  [gqa]="--layout mixed --batch 2 --heads 4 --kv-heads 1 --seq 200 --seq-kv 333 --causal"
  [lse]="--layout contiguous --batch 2 --heads 4 --kv-heads 2 --seq 333 --seq-kv 200 --causal --lse"
  [alibi]="--layout mixed --batch 2 --heads 4 --kv-heads 2 --seq 333 --seq-kv 400 --lse --alibi"
)
declare -A general_features=(
  [any_length]="any_length"
  [causal]="any_length causal"
  [gqa]="any_length causal gqa"
  [lse]="any_length causal gqa lse"
  [alibi]="any_length gqa lse alibi"
)
for shape in "${general_shapes[@]}"; do
  # shellcheck disable=SC2086 # the feature list is split on purpose
  declaring=$(stages_declaring ${general_features[$shape]})
  [[ -n $declaring ]] || continue
  shapes+=("$shape")
  shape_args[$shape]=${general_args[$shape]}
  stages_of_shape[$shape]=$declaring
done

# The backward shape, where fa_backward_run is beside the runner and a selected stage has a backward.
declare -A runner_of_shape
fa_backward_run=$(dirname "$fa_run")/fa_backward_run
if [[ -x $fa_backward_run ]]; then
  backward_stages=all
  if [[ $stages != all ]]; then
    backward_stages=$(tr , '\n' <<<"$stages" | grep -E '^backward_' | paste -sd, -)
  fi
  if [[ -n $backward_stages ]]; then
    shapes+=(backward)
    runner_of_shape[backward]=$fa_backward_run
    shape_args[backward]="--dtypes fp16,bf16 --head-dims 64,128 --seqs 192 --batch 2 --heads 2 --warmup 0 --reps 1 --check-heads 1"
    stages_of_shape[backward]=$backward_stages
  fi
fi

runner_args() { # runner_args SHAPE -> fills the array `args_of_shape` and `runner` (fa_run or another)
  local shape_part
  read -r -a shape_part <<<"${shape_args[$1]}"
  runner=${runner_of_shape[$1]:-$fa_run}
  if [[ $runner == "$fa_run" ]]; then
    args_of_shape=("${common_args[@]}" --stage "${stages_of_shape[$1]}" "${shape_part[@]}")
  else
    args_of_shape=(--stages "${stages_of_shape[$1]}" "${shape_part[@]}")
  fi
}

# ---- without a sanitizer first: is there a GPU, and does every stage pass? -----------------------------
declare -A plain_rc_of
for shape in "${shapes[@]}"; do
  runner_args "$shape"
  plain_log=$log_dir/no_sanitizer.$shape.log
  "$runner" "${args_of_shape[@]}" >"$plain_log" 2>&1
  plain_rc_of[$shape]=$?
  if ((plain_rc_of[$shape] == 3)); then
    # "fa_run: no CUDA GPU (...); nothing was run." (a single-stage runner says its own name)
    reason=$(tail -n 1 "$plain_log")
    reason=${reason#"$(basename "$fa_run"): "}
    skip "${reason%; nothing was run.}"
  fi
  say "runner ($shape): $runner ${args_of_shape[*]}"
done

# ---- the tool: absent is a skip, present but not running is a failure ----------------------------------
# Without one, the runs above still count: a failing runner fails this test instead of skipping it.
no_sanitizer=""
if sanitizer=$(find_sanitizer); then
  if ! version_text=$("$sanitizer" --version 2>&1); then
    echo "FAILED: compute-sanitizer $sanitizer does not run ('$sanitizer --version' failed):"
    printf '%s\n' "$version_text" | tail -n 5
    exit 1
  fi
  say "compute-sanitizer: $sanitizer ($(grep -Eio 'version [^ ]+' <<<"$version_text" | head -n 1))"
else
  no_sanitizer="no compute-sanitizer (set COMPUTE_SANITIZER, or put the CUDA toolkit's bin folder on PATH; looked in PATH, \$CUDA_HOME/bin, \$CUDA_PATH/bin, /usr/local/cuda/bin, nvcc's folder)"
  tools=()
fi

# ---- one run per tool ---------------------------------------------------------------------------------
error_exit=86 # compute-sanitizer's exit status when it found errors (--error-exitcode)

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

runner_check() { # runner_check LOG -> PASS / FAIL / NONE (the runner's own correctness check)
  # fa_run's rows end in "PASS", "FAIL: ..." or "ERROR: ..."; fa_backward_run's (comma-separated)
  # have ",PASS," or ",FAIL: ..."; the sanitizer's own lines start with "=".
  # NONE: not one row passed (the runner stopped before it ran anything).
  if grep -v '^=' "$1" | grep -qE 'failed their check or could not run|  (FAIL|ERROR): |,FAIL: '; then
    echo FAIL
  elif grep -v '^=' "$1" | grep -qE '  PASS$|,PASS,'; then
    echo PASS
  else
    echo NONE
  fi
}

# Every run is one row: "(none)" is the runner without a sanitizer.
rows=()
declare -A rc_of errors_of warnings_of check_of log_of
for shape in "${shapes[@]}"; do
  row="(none) $shape"
  rows+=("$row")
  rc_of[$row]=${plain_rc_of[$shape]}
  errors_of[$row]=-
  warnings_of[$row]=-
  log_of[$row]=$log_dir/no_sanitizer.$shape.log
  check_of[$row]=$(runner_check "${log_of[$row]}")
done
for tool in ${tools[@]+"${tools[@]}"}; do
  sanitizer_args=(--tool "$tool" --error-exitcode "$error_exit")
  case $tool in
    memcheck) sanitizer_args+=(--leak-check full) ;;
  esac
  # shellcheck disable=SC2206 # FA_SANITIZER_ARGS is a list of options, split on purpose
  extra=(${FA_SANITIZER_ARGS:-})
  for shape in "${shapes[@]}"; do
    row="$tool $shape"
    rows+=("$row")
    log=$log_dir/$tool.$shape.log
    runner_args "$shape"
    say "$tool ($shape): $sanitizer ${sanitizer_args[*]}${extra[*]+ ${extra[*]}} $(basename "$runner") ... (log: $log)"
    start=$SECONDS
    "$sanitizer" "${sanitizer_args[@]}" ${extra[@]+"${extra[@]}"} "$runner" "${args_of_shape[@]}" >"$log" 2>&1
    rc_of[$row]=$?
    read -r errors warnings <<<"$(count_errors "$log")"
    errors_of[$row]=$errors
    warnings_of[$row]=$warnings
    log_of[$row]=$log
    check_of[$row]=$(runner_check "$log")
    say "$tool ($shape): exit ${rc_of[$row]}, errors ${errors_of[$row]}, $((SECONDS - start)) s"
  done
done

row_failed() { # row_failed ROW: a non-zero exit, errors (not "0"; "-" for the plain run), a failed check
  local row=$1
  [[ ${rc_of[$row]} != 0 || ${check_of[$row]} != PASS ]] && return 0
  [[ ${errors_of[$row]} != 0 && ${errors_of[$row]} != - ]]
}

# ---- summary --------------------------------------------------------------------------------------------
echo
printf '%-10s %-11s %5s %7s %9s %13s  %s\n' tool shape exit errors warnings "stage checks" log
failed=0
for row in "${rows[@]}"; do
  read -r tool shape <<<"$row"
  printf '%-10s %-11s %5s %7s %9s %13s  %s\n' "$tool" "$shape" "${rc_of[$row]}" "${errors_of[$row]}" \
    "${warnings_of[$row]}" "${check_of[$row]}" "${log_of[$row]}"
  if row_failed "$row"; then failed=1; fi
done
echo

if ((failed)); then
  # The first reports of every failing run, so a CTest log shows the cause without the files.
  for row in "${rows[@]}"; do
    row_failed "$row" || continue
    echo "---- $row: exit ${rc_of[$row]}, stage checks ${check_of[$row]} (${log_of[$row]}) ----"
    if [[ $row == "(none) "* ]]; then
      tail -n 20 "${log_of[$row]}"
    else
      grep -E '^========= ' "${log_of[$row]}" | head -n 40
      grep -v '^=' "${log_of[$row]}" | grep -E '  (FAIL|ERROR): ' | head -n 10
    fi
  done
  say "FAILED: exit $error_exit = compute-sanitizer found errors; stage checks FAIL = a stage failed its" \
    "correctness check, NONE = the runner ran nothing (its log says why)"
  exit 1
fi
[[ -z $no_sanitizer ]] || skip "$no_sanitizer"
say "every tool clean, every stage passed its check, on every shape (${shapes[*]})"
exit 0
