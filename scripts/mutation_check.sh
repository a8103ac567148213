#!/usr/bin/env bash
# Mutation check: can the GPU test suite catch plausible bugs in a stage? Each file in tests/mutants/
# plants one bug (a skipped K/V block, a missing rescale, a missing -inf guard, a missing barrier, a
# half quad reduction, a stride of the wrong tensor, a swapped P register, ...) as a unified diff
# against the source tree; this script builds every mutant, runs the GPU checks on it, and reports
# each one as CAUGHT (some check failed, or timed out: a hanging kernel is caught only that way) or
# MISSED (every check passed). docs/mutation_check.md explains the mutants and the results.
#
# For the unmutated source first (the baseline, which must pass: otherwise every mutant would be
# "caught" trivially) and then for every mutant, through the same steps:
#   1. copy common/ and stages/<track>/NN_name/ to a scratch folder and apply the patch there, exactly
#      (patch --fuzz=0, or git apply where there is no patch; a hunk whose text is not found makes
#      the mutant NOT-APPLIED, never caught);
#   2. compile the stage's kernel.cu from the copy with the exact command ninja uses for it in the
#      build directory (only the source path, the two source include paths and the object path
#      changed), confirm from the compiler's dependency file that the copy (every patched file
#      included) is what was compiled, archive it, and relink the test programs and the stage's
#      runner with it in place of the stage library; where cuobjdump is found (as tests/check_sass.py
#      finds it), a mutant whose machine code equals the baseline's is reported EQUIVALENT: it could
#      not fail any test, so it tests nothing;
#   3. run the checks, each under `timeout`, with FA_TEST_STAGES=<stage> (the GPU test programs then
#      test that stage alone):
#        stages     tests/test_gpu_stages
#        hardening  tests/test_gpu_hardening "~[huge]"  (every group but the huge tensors)
#        racecheck  scripts/sanitize.sh --tool racecheck on the stage's own runner (the runner's own
#                   check without a sanitizer too, on a contiguous and on the mixed layout)
#        any_length, causal, gqa, lse, alibi
#                   tests/test_gpu_<check>: the general-attention tests, for a stage that declares
#                   the feature (the mutants in tests/mutants/ampere_15_alibi/ are written for those)
#        decode     tests/test_gpu_decode: the decoding track's tests (split-KV, packing, per-sequence
#                   lengths, paged caches) on a stage that declares split_kv (the mutants in
#                   tests/mutants/decode_*/ are written for it)
#        backward   tests/test_gpu_backward: the stage's forward with the LSE, then its backward, dQ,
#                   dK and dV against the fp64 reference (for a stage with a backward launcher; the
#                   mutants in tests/mutants/backward_01_base/ are written for it)
#        backward_racecheck
#                   compute-sanitizer --tool racecheck on tests/test_gpu_backward's mixed-layout case
#                   (shared-memory races in the forward's and the backward's kernels); without a
#                   compute-sanitizer it is left out, as racecheck is
# Copying the whole build tree per mutant would not work: ninja keeps a hash of every command it
# ran, and every command of a copy names other paths, so the copy would rebuild everything.
#
# Usage: scripts/mutation_check.sh [options]
#   --build-dir DIR    a build directory configured with -G Ninja and the tests on     [build]
#                      (-DCMAKE_CUDA_ARCHITECTURES=90 keeps every compile to one arch);
#                      the programs the checks need are built there first (incremental)
#   --stage NAME       the stage the mutants are written for                    [ampere_10_lane_addresses]
#   --mutants DIR      the folder of *.patch files                                  [tests/mutants]
#   --only A,B         only these mutants (file names without .patch)
#   --checks LIST      comma list of stages, hardening, racecheck, any_length, causal, gqa, lse,
#                      alibi, decode, backward, backward_racecheck      [stages,hardening,racecheck]
#                      (a backward stage's mutants need backward: the others test its forward)
#   --jobs N           mutants built and checked at once                          [number of cores]
#   --timeout S        seconds per check program; a check that runs longer is killed, 10 s after
#                      a TERM, and counts as a hang                                           [120]
#   --log-dir DIR      one log per mutant, <name>.log (patch, build, every check)
#                                                                 [<build dir>/mutation_check]
#   --work-dir DIR     scratch folder for the copies and the programs, emptied first
#                                                       [a new folder under $TMPDIR or /tmp]
#   --keep             keep the scratch folder (it is removed at the end otherwise)
#   --compile-only     apply, compile and link every mutant, run nothing (no GPU needed);
#   --dry-run          the same
#   -h, --help         this text
#
# Exit status: 0 every mutant built and was caught, and the baseline passed (with --compile-only:
# every mutant applied, compiled and linked, and none is equivalent); 1 a mutant was missed, did not
# apply, did not build or is equivalent, or the baseline failed a check; 2 bad usage, or the build
# directory or the baseline build is not usable; 77 skipped: no GPU (the baseline's test programs
# exit 77).

# shellcheck disable=SC2317 # (file-wide) build_mutant, check_mutant, rewrite, cleanup are called indirectly
set -uo pipefail

say() { printf '[mutation_check] %s\n' "$*"; }
die() { # die STATUS MESSAGE
  printf 'mutation_check.sh: %s\n' "$2" >&2
  exit "$1"
}
usage() {
  awk 'NR > 1 && !/^#/ { exit } /^# Usage:/ { on = 1 } on { sub(/^# ?/, ""); print }' "$0"
  exit "${1:-2}"
}

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P) || exit 2
build_dir=build
stage=ampere_10_lane_addresses
mutants_dir=""
only=""
checks_arg=stages,hardening,racecheck
jobs=$(nproc 2>/dev/null || echo 4)
timeout_s=120
log_dir=""
work_dir=""
keep=0
compile_only=0

while (($#)); do
  case $1 in
    --build-dir | --stage | --mutants | --only | --checks | --jobs | --timeout | --log-dir | --work-dir)
      [[ $# -ge 2 ]] || die 2 "$1 needs a value"
      case $1 in
        --build-dir) build_dir=$2 ;;
        --stage) stage=$2 ;;
        --mutants) mutants_dir=$2 ;;
        --only) only=$2 ;;
        --checks) checks_arg=$2 ;;
        --jobs) jobs=$2 ;;
        --timeout) timeout_s=$2 ;;
        --log-dir) log_dir=$2 ;;
        --work-dir) work_dir=$2 ;;
      esac
      shift 2
      ;;
    --keep) keep=1 && shift ;;
    --compile-only | --dry-run) compile_only=1 && shift ;;
    -h | --help) usage 0 ;;
    *)
      echo "mutation_check.sh: unknown option $1" >&2
      usage 2
      ;;
  esac
done
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die 2 "--jobs must be a positive integer"
[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || die 2 "--timeout must be a positive number of seconds"
IFS=, read -r -a checks <<<"$checks_arg"
((${#checks[@]})) || die 2 "--checks is empty"
general_checks=(any_length causal gqa lse alibi decode)
backward_checks=(backward backward_racecheck)
for check in "${checks[@]}"; do
  [[ " stages hardening racecheck ${general_checks[*]} ${backward_checks[*]} " == *" $check "* ]] ||
    die 2 "unknown check '$check' (known: stages, hardening, racecheck, ${general_checks[*]}, ${backward_checks[*]})"
done

# Relative paths are the caller's; everything below uses absolute ones.
[[ -d $build_dir ]] || die 2 "no build directory '$build_dir'"
build_dir=$(cd "$build_dir" && pwd -P)
[[ -n $mutants_dir ]] || mutants_dir=$src/tests/mutants
[[ -d $mutants_dir ]] || die 2 "no mutants folder $mutants_dir"
mutants_dir=$(cd "$mutants_dir" && pwd -P)
[[ -n $log_dir ]] || log_dir=$build_dir/mutation_check
mkdir -p "$log_dir" || die 2 "cannot create the log folder $log_dir"
log_dir=$(cd "$log_dir" && pwd -P)
stage_dir=stages/${stage%%_*}/${stage#*_}  # the id ampere_10_lane_addresses is stages/ampere/10_lane_addresses
[[ -f $src/$stage_dir/kernel.cu ]] || die 2 "no stage $stage ($stage_dir/kernel.cu)"
command -v timeout >/dev/null || die 2 "needs GNU timeout (coreutils)"
if command -v patch >/dev/null; then
  patch_tool="patch"
elif command -v git >/dev/null; then
  patch_tool="git"
else
  die 2 "needs patch (apt-get install patch) or git to apply the mutants"
fi

# ---- the mutants ---------------------------------------------------------------------------------
mutants=()
for patch_file in "$mutants_dir"/*.patch; do
  [[ -e $patch_file ]] || continue
  name=$(basename "$patch_file" .patch)
  [[ -z $only || ",$only," == *",$name,"* ]] && mutants+=("$name")
done
if [[ -n $only ]]; then
  IFS=, read -r -a wanted <<<"$only"
  for name in "${wanted[@]}"; do
    [[ -f $mutants_dir/$name.patch ]] || die 2 "--only: no mutant $mutants_dir/$name.patch"
  done
fi
((${#mutants[@]})) || die 2 "no mutants (*.patch) in $mutants_dir"
baseline=00_baseline # the unmutated source, built and checked like a mutant

# "What: ..." on the first line of a patch says in one line what it changes.
what_of() { sed -n '1s/^What: //p' "$mutants_dir/$1.patch"; }

# ---- the build directory: the exact commands that build the stage and link the programs -----------
cache=$build_dir/CMakeCache.txt
[[ -f $cache ]] || die 2 "$build_dir is not a configured CMake build directory (no CMakeCache.txt)"
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n 1; }
[[ $(cache_value CMAKE_GENERATOR) == Ninja ]] ||
  die 2 "$build_dir was configured with '$(cache_value CMAKE_GENERATOR)'; this script reads ninja's commands: configure with -G Ninja"
# The build directory's commands name the source tree as CMake was given it; use that spelling.
configured_src=$(cache_value CMAKE_HOME_DIRECTORY)
[[ $(cd "$configured_src" 2>/dev/null && pwd -P) == "$src" ]] ||
  die 2 "$build_dir was configured from $configured_src, not from this tree ($src)"
src=$configured_src
ninja_program=$(cache_value CMAKE_MAKE_PROGRAM)
[[ -x $ninja_program ]] || ninja_program=$(command -v ninja) || die 2 "no ninja"

# The program each check runs: its ninja target, and its file name in a mutant's bin/ folder.
declare -A program_of_check=([stages]=test_gpu_stages [hardening]=test_gpu_hardening [racecheck]=$stage)
for check in "${general_checks[@]}"; do program_of_check[$check]=test_gpu_$check; done
for check in "${backward_checks[@]}"; do program_of_check[$check]=test_gpu_backward; done
targets=()
for check in "${checks[@]}"; do
  [[ " ${targets[*]} " == *" ${program_of_check[$check]} "* ]] || targets+=("${program_of_check[$check]}")
done

say "stage $stage; mutants: ${#mutants[@]} from $mutants_dir; $jobs at a time"
say "building ${targets[*]} in $build_dir (incremental; log: $log_dir/build.log)"
cmake --build "$build_dir" --target "${targets[@]}" --parallel "$jobs" >"$log_dir/build.log" 2>&1 ||
  die 2 "building ${targets[*]} failed (tail of $log_dir/build.log below; are the tests on, with Catch2 found?)
$(tail -n 15 "$log_dir/build.log")"

commands_of() { "$ninja_program" -C "$build_dir" -t commands "$1"; }
stage_source=$src/$stage_dir/kernel.cu
stage_commands=$(commands_of "stage_$stage") || die 2 "ninja knows no target stage_$stage"
compile_cmd=$(grep -F -- " -c $stage_source " <<<"$stage_commands")
[[ -n $compile_cmd && $(wc -l <<<"$compile_cmd") -eq 1 ]] ||
  die 2 "not exactly one command compiles $stage_source in $build_dir"
[[ $compile_cmd =~ \ -o\ ([^ ]+) ]] || die 2 "no -o in the compile command: $compile_cmd"
object=${BASH_REMATCH[1]}
archive_cmd=$(grep -F -- " $object" <<<"$stage_commands" | grep -vF -- " -c $stage_source ")
[[ -n $archive_cmd && $(wc -l <<<"$archive_cmd") -eq 1 ]] || die 2 "no single command archives $object"
library=""
read -r -a words <<<"$archive_cmd"
for word in "${words[@]}"; do
  [[ $word == "libstage_$stage.a" || $word == */"libstage_$stage.a" ]] && library=$word
done
[[ -n $library ]] || die 2 "no libstage_$stage.a in the archive command: $archive_cmd"
declare -A link_cmd_of
for target in "${targets[@]}"; do
  link_cmd_of[$target]=$(commands_of "$target" | tail -n 1)
  [[ ${link_cmd_of[$target]} == *" $library "* ]] ||
    die 2 "the last command for $target does not link $library: ${link_cmd_of[$target]}"
done

# rewrite VAR OLD NEW: every OLD in the command held in VAR becomes NEW. An OLD that is not there is
# an error: the build directory's commands no longer look the way this script expects.
rewrite() {
  local -n command_ref=$1
  if [[ $command_ref != *"$2"* ]]; then
    echo "mutation_check.sh: '$2' not found in the command: $command_ref" >&2
    return 1
  fi
  command_ref=${command_ref//"$2"/"$3"}
}

# compute-sanitizer for backward_racecheck, looked for as scripts/sanitize.sh looks for it (COMPUTE_SANITIZER,
# PATH, $CUDA_HOME/bin, $CUDA_PATH/bin, /usr/local/cuda/bin, nvcc's folder); empty when there is none.
find_sanitizer() {
  if [[ -n ${COMPUTE_SANITIZER:-} ]]; then
    echo "$COMPUTE_SANITIZER"
    return
  fi
  local candidates=() c nvcc
  c=$(command -v compute-sanitizer 2>/dev/null) && candidates+=("$c")
  [[ -n ${CUDA_HOME:-} ]] && candidates+=("$CUDA_HOME/bin/compute-sanitizer")
  [[ -n ${CUDA_PATH:-} ]] && candidates+=("$CUDA_PATH/bin/compute-sanitizer")
  candidates+=(/usr/local/cuda/bin/compute-sanitizer)
  nvcc=$(command -v nvcc 2>/dev/null || echo "${CUDACXX:-}")
  [[ -n $nvcc ]] && candidates+=("$(dirname "$nvcc")/compute-sanitizer")
  for c in "${candidates[@]}"; do
    if [[ -e $c ]]; then
      echo "$c"
      return
    fi
  done
}
sanitizer=""
[[ " ${checks[*]} " == *" backward_racecheck "* ]] && sanitizer=$(find_sanitizer)

# ---- scratch ------------------------------------------------------------------------------------------
if [[ -n $work_dir ]]; then
  mkdir -p "$work_dir" || die 2 "cannot create $work_dir"
  work_dir=$(cd "$work_dir" && pwd -P)
  find "$work_dir" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
else
  work_dir=$(mktemp -d "${TMPDIR:-/tmp}/fa_mutation_check.XXXXXX") || die 2 "mktemp failed"
fi
cleanup() { ((keep)) || rm -rf "$work_dir"; }
trap cleanup EXIT

# ---- step 1 and 2: apply and build one mutant ---------------------------------------------------------
# build_mutant NAME: writes <work>/NAME/status: "built", or "NOT-APPLIED <why>" / "NOT-BUILT <why>".
build_mutant() {
  local name=$1
  local dir=$work_dir/$name
  local copy=$dir/src log=$log_dir/$name.log
  mkdir -p "$copy/$(dirname "$stage_dir")" "$dir/bin"
  if ! cp -R "$src/common" "$copy/common" || ! cp -R "$src/$stage_dir" "$copy/$stage_dir"; then
    echo "NOT-BUILT copying the sources failed" >"$dir/status"
    return
  fi
  {
    echo "==== mutant $name (stage $stage), $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    if [[ $name == "$baseline" ]]; then echo "the unmutated source"; else echo "What: $(what_of "$name")"; fi
  } >"$log"

  # Step 1: the patch, exactly, or not at all; then it must have changed the files it names.
  local patched_files=()
  if [[ $name != "$baseline" ]]; then
    local patch_file=$mutants_dir/$name.patch
    mapfile -t patched_files < <(sed -n 's|^+++ b/\([^[:space:]]*\).*|\1|p' "$patch_file")
    local file
    for file in "${patched_files[@]}"; do
      if [[ $file != common/* && $file != "$stage_dir/"* ]]; then
        echo "NOT-APPLIED it edits $file; only common/ and $stage_dir/ are rebuilt" >"$dir/status"
        return
      fi
    done
    ((${#patched_files[@]})) || {
      echo "NOT-APPLIED no '+++ b/<file>' line: not a unified diff" >"$dir/status"
      return
    }
    local applied
    if [[ $patch_tool == patch ]]; then
      local patch_args=(-d "$copy" -p1 --fuzz=0 --batch --forward --no-backup-if-mismatch --reject-file=-)
      applied=$(patch "${patch_args[@]}" --dry-run <"$patch_file" 2>&1 && patch "${patch_args[@]}" <"$patch_file" 2>&1)
    else
      # GIT_CEILING_DIRECTORIES: the scratch folder may lie inside a git work tree; git apply must
      # treat the copy as a plain folder, as patch does.
      applied=$(cd "$copy" && export GIT_CEILING_DIRECTORIES=$dir &&
        git apply -p1 --check "$patch_file" 2>&1 && git apply -p1 "$patch_file" 2>&1)
    fi
    local rc=$?
    printf '%s\n' "---- $patch_tool: $patch_file" "$applied" >>"$log"
    if ((rc != 0)); then
      echo "NOT-APPLIED its text is not in the source any more ($patch_tool failed; see $log)" >"$dir/status"
      return
    fi
    for file in "${patched_files[@]}"; do
      if cmp -s "$src/$file" "$copy/$file"; then
        echo "NOT-APPLIED $file is unchanged after the patch" >"$dir/status"
        return
      fi
      echo "---- the change to $file" >>"$log"
      diff -u --label "a/$file" --label "b/$file" "$src/$file" "$copy/$file" >>"$log"
    done
  fi

  # Step 2: compile the copy, with the build directory's own command.
  local object_copy=$dir/kernel.cu.o library_copy=$dir/libstage_$stage.a
  local cmd=" $compile_cmd "
  {
    rewrite cmd " -I$src " " -I$copy " &&
      rewrite cmd " -I$src/$stage_dir " " -I$copy/$stage_dir " &&
      rewrite cmd " $stage_source " " $copy/$stage_dir/kernel.cu " &&
      rewrite cmd " $object" " $object_copy" # also -MT and -MF's $object.d
  } 2>>"$log" || {
    echo "NOT-BUILT the compile command has an unexpected form (see $log)" >"$dir/status"
    return
  }
  echo "---- compile: $cmd" >>"$log"
  if ! (cd "$build_dir" && sh -c "$cmd") >>"$log" 2>&1; then
    echo "NOT-BUILT it does not compile (see $log)" >"$dir/status"
    return
  fi
  # The dependency file lists every file the compiler read: the copy must be among them, the
  # originals of the copied folders not.
  local depfile=$object_copy.d
  local stale
  stale=$(grep -oF -e "$src/common/" -e "$src/$stage_dir/" "$depfile" 2>/dev/null | head -n 1)
  for file in "$stage_dir/kernel.cu" "${patched_files[@]}"; do
    if ! grep -qF -- "$copy/$file" "$depfile" 2>/dev/null; then
      echo "NOT-BUILT the compile did not read the copy's $file (no $copy/$file in $depfile)" >"$dir/status"
      return
    fi
  done
  if [[ -n $stale ]]; then
    echo "NOT-BUILT the compile read files of the unmutated tree under $stale (see $depfile)" >"$dir/status"
    return
  fi

  cmd=" $archive_cmd "
  { rewrite cmd " $library " " $library_copy " && rewrite cmd " $object " " $object_copy "; } 2>>"$log" || {
    echo "NOT-BUILT the archive command has an unexpected form (see $log)" >"$dir/status"
    return
  }
  echo "---- archive: $cmd" >>"$log"
  (cd "$build_dir" && sh -c "$cmd") >>"$log" 2>&1 || {
    echo "NOT-BUILT archiving failed (see $log)" >"$dir/status"
    return
  }
  local target output
  for target in "${targets[@]}"; do
    cmd=" ${link_cmd_of[$target]} "
    [[ $cmd =~ \ -o\ ([^ ]+)\  ]] || {
      echo "NOT-BUILT no -o in the link command of $target" >"$dir/status"
      return
    }
    output=${BASH_REMATCH[1]}
    { rewrite cmd " $library " " $library_copy " && rewrite cmd " -o $output " " -o $dir/bin/$target "; } 2>>"$log" || {
      echo "NOT-BUILT the link command of $target has an unexpected form (see $log)" >"$dir/status"
      return
    }
    echo "---- link: $cmd" >>"$log"
    (cd "$build_dir" && sh -c "$cmd") >>"$log" 2>&1 || {
      echo "NOT-BUILT linking $target failed (see $log)" >"$dir/status"
      return
    }
  done
  echo built >"$dir/status"
}

# ---- step 3: the checks ---------------------------------------------------------------------------------
# failed_cases LOG: "N test case(s) failed: 'first', 'second', ..." from a Catch2 console log. A failed
# assertion is printed under a header between two lines of 79 dashes: the test case's name, wrapped
# at 79 columns (continued unindented, or indented past its first ": "), then its sections, each
# indented by two spaces.
failed_cases() {
  awk -v quote="'" '
    /^-+$/ && length($0) == 79 { in_header = !in_header; if (in_header) { header = ""; name_done = 0 } next }
    in_header && !name_done {
      if (header == "") { header = $0; next }
      if ($0 ~ /^  [^ ]/) { name_done = 1; next }
      line = $0
      sub(/^ +/, "", line)
      header = header " " line
    }
    / FAILED:$/ && header != "" && !(header in seen) { seen[header] = 1; names[++n] = header }
    END {
      if (n == 0) exit
      out = n " test case" (n > 1 ? "s" : "") " failed: "
      for (i = 1; i <= n && i <= 3; ++i) out = out (i > 1 ? ", " : "") quote names[i] quote
      if (n > 3) out = out ", ..."
      print out
    }' "$1"
}

# sanitizer_failures LOG: the failing rows of sanitize.sh's table ("racecheck mixed: 12 errors").
sanitizer_failures() {
  awk '
    $1 == "tool" && $2 == "shape" { table = 1; next }
    table && NF >= 7 && ($1 == "(none)" || $1 == "racecheck") {
      tool = ($1 == "(none)") ? "runner" : $1
      why = ""
      if ($3 != "0") why = "exit " $3
      if ($4 != "0" && $4 != "-") why = why (why ? ", " : "") $4 " errors"
      if ($6 != "PASS") why = why (why ? ", " : "") "check " $6
      if (why) out = out (out ? "; " : "") tool " " $2 ": " why
    }
    END { print out }' "$1"
}

# run_check NAME CHECK: runs one check on a built mutant and writes <work>/NAME/CHECK.result:
# "passed", "failed <details>", "timeout", or "skipped <why>". Its output goes into the mutant's log.
run_check() {
  local name=$1 check=$2
  local dir=$work_dir/$name
  local out=$dir/$check.out cmd=()
  case $check in
    stages) cmd=("$dir/bin/test_gpu_stages") ;;
    hardening) cmd=("$dir/bin/test_gpu_hardening" "~[huge]") ;;
    any_length | causal | gqa | lse | alibi | decode) cmd=("$dir/bin/test_gpu_$check") ;;
    backward) cmd=("$dir/bin/test_gpu_backward") ;;
    backward_racecheck)
      if [[ -z $sanitizer ]]; then
        echo "skipped no compute-sanitizer (set COMPUTE_SANITIZER, or put the CUDA toolkit's bin folder on PATH)" >"$dir/$check.result"
        echo 0 >"$dir/$check.seconds"
        echo "---- check $check: skipped, no compute-sanitizer" >>"$log_dir/$name.log"
        return
      fi
      # Exit 86 (--error-exitcode) when racecheck reports a hazard; the test's own failures keep theirs.
      cmd=("$sanitizer" --tool racecheck --error-exitcode 86 "$dir/bin/test_gpu_backward"
        "backward: every tensor its own strides*")  # the test's name up to its comma (a comma splits Catch2's test spec)
      ;;
    racecheck)
      cmd=(bash "$src/scripts/sanitize.sh" --tool racecheck --stage "$stage" --fa-run "$dir/bin/$stage"
        --log-dir "$log_dir/$name.racecheck")
      ;;
  esac
  local start=$SECONDS
  FA_TEST_STAGES=$stage timeout --kill-after=10 "$timeout_s" "${cmd[@]}" >"$out" 2>&1
  local rc=$? seconds=$((SECONDS - start))
  local result
  case $rc in
    0) result="passed" ;;
    124 | 137) result="timeout" ;;
    77)
      result=$(grep -m 1 '^SKIPPED' "$out")
      result="skipped ${result#SKIPPED: }"
      ;;
    *)
      local details
      if [[ $check == racecheck ]]; then
        details=$(sanitizer_failures "$out")
      elif [[ $check == backward_racecheck ]]; then
        details=$(grep -m 1 -oE 'RACECHECK SUMMARY: .*' "$out")
        local cases
        cases=$(failed_cases "$out")
        [[ -n $cases ]] && details+="${details:+; }$cases"
      else
        details=$(failed_cases "$out")
      fi
      result="failed exit $rc${details:+, $details}"
      ;;
  esac
  echo "$result" >"$dir/$check.result"
  echo "$seconds" >"$dir/$check.seconds"
  {
    echo "---- check $check: FA_TEST_STAGES=$stage timeout --kill-after=10 $timeout_s ${cmd[*]}"
    cat "$out"
    echo "---- check $check: exit $rc after $seconds s: $result"
  } >>"$log_dir/$name.log"
}

# check_mutant NAME: every selected check on one mutant, one after the other (the mutants themselves
# run side by side, --jobs at a time).
check_mutant() {
  local check
  for check in "${checks[@]}"; do run_check "$1" "$check"; done
}

# run_parallel FUNCTION NAME...: FUNCTION NAME for every name, at most $jobs at a time.
run_parallel() {
  local fn=$1 running=0 name
  shift
  for name; do
    if ((running >= jobs)); then
      wait -n
      ((running--))
    fi
    "$fn" "$name" &
    ((running++))
  done
  wait
}

# ---- the run ------------------------------------------------------------------------------------------------
start_all=$SECONDS
say "applying and building the baseline and every mutant in $work_dir (compile: ninja's command for $stage_dir/kernel.cu)"
run_parallel build_mutant "$baseline" "${mutants[@]}"
status_of() { cat "$work_dir/$1/status" 2>/dev/null || echo "NOT-BUILT no status (the build step died)"; }
[[ $(status_of "$baseline") == built ]] ||
  die 2 "the baseline (unmutated) build failed: $(status_of "$baseline") -- the mechanics, not a mutant, are broken"
say "built in $((SECONDS - start_all)) s"

declare -A verdict_of details_of
for name in "${mutants[@]}"; do
  status=$(status_of "$name")
  if [[ $status == built ]]; then
    verdict_of[$name]=$([[ $compile_only == 1 ]] && echo COMPILED || echo pending)
    details_of[$name]=""
  else
    verdict_of[$name]=${status%% *}
    details_of[$name]=${status#* }
  fi
done

# A mutant the compiler turned into the baseline's machine code cannot fail any test.
cuobjdump=$(python3 "$src/tests/check_sass.py" --check-tools 2>/dev/null | sed -n 's/^cuobjdump: //p')
[[ -n $cuobjdump ]] || cuobjdump=$(command -v cuobjdump)
machine_code() { # machine_code NAME: the SASS of NAME's object, without the lines naming its source path
  "$cuobjdump" -sass "$work_dir/$1/kernel.cu.o" 2>&1 | grep -vF "$work_dir/" >"$work_dir/$1/sass.txt"
}
if [[ -n $cuobjdump ]]; then
  machine_code "$baseline"
  for name in "${mutants[@]}"; do
    [[ ${verdict_of[$name]} == COMPILED || ${verdict_of[$name]} == pending ]] || continue
    machine_code "$name"
    if cmp -s "$work_dir/$baseline/sass.txt" "$work_dir/$name/sass.txt"; then
      verdict_of[$name]=EQUIVALENT
      details_of[$name]="its machine code is the baseline's ($cuobjdump -sass)"
    fi
  done
  say "machine code compared with the baseline's: $cuobjdump -sass"
else
  say "machine code not compared with the baseline's (no cuobjdump found)"
fi

print_table() {
  echo
  printf '%-34s %-11s %s\n' mutant result "details -- what it changes"
  local name
  for name in "${mutants[@]}"; do
    printf '%-34s %-11s %s\n' "$name" "${verdict_of[$name]}" "${details_of[$name]:+${details_of[$name]} -- }$(what_of "$name")"
  done
  echo
}

count_verdict() { # count_verdict VERDICT: how many mutants have it
  local name n=0
  for name in "${mutants[@]}"; do [[ ${verdict_of[$name]} == "$1" ]] && ((n++)); done
  echo "$n"
}

if ((compile_only)); then
  print_table
  unbuilt=$((${#mutants[@]} - $(count_verdict COMPILED)))
  say "--compile-only: $(count_verdict COMPILED) of ${#mutants[@]} mutants applied, compiled${cuobjdump:+ to machine code of their own} and linked; nothing was run" \
    "($((SECONDS - start_all)) s; logs in $log_dir)"
  ((unbuilt == 0)) || exit 1
  exit 0
fi

# The baseline alone first: it must pass every check, or nothing below would mean anything.
say "checking the baseline (unmutated $stage): ${checks[*]}, each under timeout ${timeout_s} s"
check_mutant "$baseline"
kept_checks=()
for check in "${checks[@]}"; do
  result=$(cat "$work_dir/$baseline/$check.result")
  seconds=$(cat "$work_dir/$baseline/$check.seconds")
  say "baseline $check: $result ($seconds s)"
  case $result in
    passed)
      kept_checks+=("$check")
      ((seconds * 4 <= timeout_s)) ||
        say "WARNING: the baseline's $check took $seconds s, more than a quarter of --timeout $timeout_s: a slow mutant under load could read as a hang; raise --timeout"
      ;;
    skipped*)
      # No GPU: nothing can run. No compute-sanitizer: the other checks still can.
      [[ $check == racecheck || $check == backward_racecheck ]] || {
        echo "SKIPPED: the baseline's $check says: ${result#skipped }"
        exit 77
      }
      say "$check is left out: ${result#skipped }"
      ;;
    *)
      die 1 "the baseline (unmutated $stage) fails $check: $result -- every mutant would be 'caught'; see $log_dir/$baseline.log"
      ;;
  esac
done
((${#kept_checks[@]})) || die 1 "no check left to run"
checks=("${kept_checks[@]}")

built=()
for name in "${mutants[@]}"; do [[ ${verdict_of[$name]} == pending ]] && built+=("$name"); done
say "checking ${#built[@]} mutants: ${checks[*]}, each under timeout ${timeout_s} s, $jobs mutants at a time"
run_parallel check_mutant "${built[@]}"

for name in "${built[@]}"; do
  caught=() passed=() skipped=()
  for check in "${checks[@]}"; do
    result=$(cat "$work_dir/$name/$check.result" 2>/dev/null || echo "failed no result (the check died)")
    case $result in
      passed) passed+=("$check") ;;
      timeout) caught+=("$check: timeout after ${timeout_s} s (a hang)") ;;
      skipped*) skipped+=("$check (${result#skipped })") ;;
      *) caught+=("$check: ${result#failed }") ;;
    esac
  done
  if ((${#caught[@]})); then
    verdict_of[$name]=CAUGHT
    details_of[$name]=$(printf '%s; ' "${caught[@]}")
    details_of[$name]=${details_of[$name]%; }
    ((${#passed[@]})) && details_of[$name]+="; passed: ${passed[*]}"
  else
    verdict_of[$name]=MISSED
    details_of[$name]="passed: ${passed[*]}"
  fi
  ((${#skipped[@]})) && details_of[$name]+="; skipped: ${skipped[*]}"
done

print_table
caught_count=$(count_verdict CAUGHT)
say "$caught_count of ${#mutants[@]} mutants caught; $(count_verdict MISSED) missed; $((${#mutants[@]} - caught_count - $(count_verdict MISSED))) not applied, not built or equivalent" \
  "($((SECONDS - start_all)) s in all; logs in $log_dir)"
((caught_count == ${#mutants[@]})) || exit 1
exit 0
