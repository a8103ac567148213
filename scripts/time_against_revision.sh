#!/usr/bin/env bash
# Times stages against their own code at an earlier git revision, in the same shuffled rounds.
#
#   bash scripts/time_against_revision.sh REV STAGE[,STAGE...] [options of tools/interleaved.py]
#
# Each named stage's folder as it was at REV is copied in as a temporary stage of the experiments
# track, stages/experiments/<51..>_b_<id> (its id: experiments_<NN>_b_<id>), the C interface
# (libfa_capi.so) is built with the copies, tools/interleaved.py checks and times the stages and
# their copies launch by launch, and the copies are removed again (also on failure or Ctrl-C).
# A restructuring that should not change speed is shown not to, or caught: for example the Hopper
# stages against their code before it was arranged into named roles,
#
#   bash scripts/time_against_revision.sh 32dbdfc hopper_01,hopper_02 --dtype fp16,bf16 \
#       --head-dim 128,64 --seqs 4096 --references '' --csv /tmp/against_32dbdfc.csv
#
# which is how plots/results/hopper_roles_vs_before_h100.csv was measured (every Hopper stage whose
# machine code changed, and the three experiments). Needs a GPU, PyTorch with CUDA, and a stage
# folder at REV under the same path as today. Environment: BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { printf 'time_against_revision.sh: %s\n' "$1" >&2; exit 2; }
(($# >= 2)) || die "usage: bash scripts/time_against_revision.sh REV STAGE[,STAGE...] [options of tools/interleaved.py]"
rev=$1
names=$2
shift 2
git rev-parse --verify --quiet "${rev}^{commit}" >/dev/null || die "${rev} is not a commit of this repository"
build_dir="${BUILD_DIR:-build}"

# Stage id and folder (relative to the repository) of every name, one "id path" per line.
mapfile -t found < <(python3 - "${names}" <<'PY'
import sys
sys.path.insert(0, "tools")
import stages
known = stages.all_stages()
for name in sys.argv[1].split(","):
    match = [s for s in known if stages.selects(name, s.name)]
    if len(match) != 1:
        sys.exit("time_against_revision.sh: no stage %r (a stage is named by its id or <track>_NN)" % name)
    print(match[0].name, match[0].path.relative_to(stages.REPO))
PY
)

copies=()
cleanup() {
  ((${#copies[@]})) && rm -rf "${copies[@]}"
  # Configure again so that the build directory forgets the copies' targets.
  [[ -f "${build_dir}/CMakeCache.txt" ]] && cmake -S . -B "${build_dir}" >/dev/null 2>&1 || true
}
trap cleanup EXIT

number=51
ids=()
for line in "${found[@]}"; do
  read -r id path <<<"${line}"
  copy="stages/experiments/${number}_b_${id}"
  [[ -e "${copy}" ]] && die "${copy} exists already: remove it first"
  git ls-tree -d --quiet "${rev}" "${path}" | grep -q . || die "${path} does not exist at ${rev}"
  copies+=("${copy}")
  mkdir -p "${copy}"
  git archive "${rev}" "${path}" | tar -x -C "${copy}" --strip-components=3
  ids+=("${id}" "experiments_${number}_b_${id}")
  number=$((number + 1))
done

echo "time_against_revision.sh: ${#copies[@]} stage(s) at ${rev} copied in: ${copies[*]}"
cmake -S . -B "${build_dir}" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "${build_dir}" --target fa_capi --parallel "$(nproc 2>/dev/null || echo 4)"
stage_list=$(IFS=,; echo "${ids[*]}")
python3 tools/interleaved.py --lib "${build_dir}/libfa_capi.so" --stages "${stage_list}" "$@"
