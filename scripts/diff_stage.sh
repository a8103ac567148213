#!/usr/bin/env bash
# The one idea of a stage, as code: `diff -ru` of its parent's folder and its own.
#
#   bash scripts/diff_stage.sh STAGE [diff options...]
#
# STAGE is a stage id (hopper_05_persistent), its track and number (hopper_05) or its folder
# (stages/hopper/05_persistent). The parent is the one its stage.json declares: the stage before it
# in its track, or for the first stage of a track (and for an experiment) a stage of another track.
# Extra arguments go to diff (e.g. --stat is not diff's; try -q, or pipe to diffstat). Exit status:
# diff's (0 identical, 1 different), 2 for a stage or parent that does not exist.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() { printf 'diff_stage.sh: %s\n' "$1" >&2; exit 2; }
(($#)) || die "usage: bash scripts/diff_stage.sh STAGE [diff options...] (e.g. hopper_05_persistent)"
arg=${1%/}
shift

folder_of() {  # folder_of ID_OR_TRACK_NN_OR_PATH: the stage's folder, or nothing
  local a=$1 track rest
  if [[ -f $a/stage.json ]]; then echo "$a"; return; fi
  track=${a%%_*} rest=${a#*_}
  [[ $track != "$a" && -d stages/$track ]] || return 0
  if [[ -f stages/$track/$rest/stage.json ]]; then echo "stages/$track/$rest"; return; fi
  local matches=(stages/"$track"/"$rest"_*/stage.json)  # track_NN
  [[ ${#matches[@]} == 1 && -f ${matches[0]} ]] && dirname "${matches[0]}"
  return 0
}

stage=$(folder_of "$arg")
[[ -n $stage ]] || die "no stage '$arg' (an id such as hopper_05_persistent; the stages: ls stages/*/)"
parent_id=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("parent") or "")' "$stage/stage.json")
[[ -n $parent_id ]] || die "$stage has no parent (the first stage of the book): nothing to diff against"
parent=$(folder_of "$parent_id")
[[ -n $parent ]] || die "$stage/stage.json names parent '$parent_id', which is not a stage"
set +e
diff -ru "$@" "$parent" "$stage"
exit $?
