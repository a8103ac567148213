#!/usr/bin/env python3
"""The book's order, checked without a GPU: every stage folder is stages/<track>/NN_name with a
stage.json, the tracks are those of stages/tracks.json, and within a track the numbers run
01, 02, ... with no gap and stage NN's declared parent is stage NN-1 of the same track, so that
`diff -ru` of two neighbours (scripts/diff_stage.sh) is always one idea. The first stage of a track
names its parent in another track (or none: the first stage of the book); experiments (ideas that
were measured and not adopted) each declare an existing parent, in any track. Every parent exists
and comes earlier in the book (no cycles), and every stage has its page, docs/stages/<track>/NN_name.md.

    python3 tests/test_tracks.py [--repo DIR]

Exit status 0 if every rule holds, 1 otherwise (each broken rule printed).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = re.compile(r"^(\d\d)_[a-z0-9]+(_[a-z0-9]+)*$")
# Tracks whose stages are not a chain: each is one idea on a parent of its own choosing.
UNCHAINED = {"experiments"}


def problems(repo: Path) -> list[str]:
    out: list[str] = []
    stages_dir = repo / "stages"
    tracks = [t["name"] for t in json.loads((stages_dir / "tracks.json").read_text())["tracks"]]
    if len(set(tracks)) != len(tracks):
        out.append("stages/tracks.json names a track twice")
    for d in sorted(p for p in stages_dir.iterdir() if p.is_dir()):
        if d.name not in tracks:
            out.append("stages/%s/: not a track of stages/tracks.json (its stages would not be built)" % d.name)
    order: list[str] = []          # every id, in book order
    parent_of: dict[str, str | None] = {}
    for track in tracks:
        folders = sorted(p for p in (stages_dir / track).iterdir() if p.is_dir()) if (stages_dir / track).is_dir() else []
        if not folders:
            out.append("stages/%s/: a track without stages" % track)
        for i, folder in enumerate(folders, start=1):
            where = "stages/%s/%s" % (track, folder.name)
            m = FOLDER.match(folder.name)
            if not m:
                out.append("%s: a stage folder is NN_name (two digits, lower-case words joined by _)" % where)
                continue
            if int(m.group(1)) != i:
                out.append("%s: expected number %02d (numbers run 01, 02, ... without gaps)" % (where, i))
            if not (folder / "stage.json").is_file():
                out.append("%s: no stage.json" % where)
                continue
            sid = "%s_%s" % (track, folder.name)
            parent = json.loads((folder / "stage.json").read_text()).get("parent") or None
            parent_of[sid] = parent
            order.append(sid)
            if not (repo / "docs" / "stages" / track / (folder.name + ".md")).is_file():
                out.append("%s: no page docs/stages/%s/%s.md" % (where, track, folder.name))
            if track in UNCHAINED:
                if parent is None:
                    out.append("%s: an experiment must declare the stage it was measured against" % where)
            elif i == 1:
                if parent is not None and parent.startswith(track + "_"):
                    out.append("%s: the first stage of a track takes its parent from another track, not %s"
                               % (where, parent))
            else:
                expected = "%s_%s" % (track, folders[i - 2].name)
                if parent != expected:
                    out.append("%s: parent is %s; within a track stage NN's parent is NN-1, %s"
                               % (where, parent, expected))
    for i, sid in enumerate(order):
        parent = parent_of[sid]
        if parent is not None and parent not in parent_of:
            out.append("%s: parent %s is not a stage" % (sid, parent))
        elif parent is not None and parent not in order[:i]:
            out.append("%s: parent %s comes later in the book" % (sid, parent))
    roots = [s for s in order if parent_of[s] is None]
    if len(roots) != 1:
        out.append("exactly one stage (the first of the book) has no parent; these have none: %s" % roots)
    return out


def self_test() -> list[str]:
    """The rules must fail on a tree that breaks them: a small synthetic book in a temporary folder."""
    import tempfile
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        (repo / "stages").mkdir()
        (repo / "stages" / "tracks.json").write_text(json.dumps({"tracks": [{"name": "a"}, {"name": "b"}]}))

        def stage(track, folder, parent):
            (repo / "stages" / track / folder).mkdir(parents=True)
            (repo / "stages" / track / folder / "stage.json").write_text(json.dumps({"parent": parent}))
            (repo / "docs" / "stages" / track).mkdir(parents=True, exist_ok=True)
            (repo / "docs" / "stages" / track / (folder + ".md")).write_text("page")

        stage("a", "01_x", None)
        stage("a", "02_y", "a_01_x")
        stage("b", "01_z", "a_02_y")
        if problems(repo):
            failures.append("a valid synthetic book fails: %s" % problems(repo))
        stage("a", "03_w", "a_01_x")  # a parent that is not NN-1
        if not any("within a track" in p for p in problems(repo)):
            failures.append("a parent that is not NN-1 passed")
        (repo / "stages" / "a" / "03_w" / "stage.json").write_text(json.dumps({"parent": "a_02_y"}))
        stage("a", "05_v", "a_03_w")  # a gap in the numbers
        if not any("without gaps" in p for p in problems(repo)):
            failures.append("a gap in the numbers passed")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=ROOT)
    args = ap.parse_args()
    found = ["self-test: " + f for f in self_test()] + problems(args.repo)
    for p in found:
        print("FAIL: " + p)
    if found:
        return 1
    n = sum(1 for _ in (args.repo / "stages").glob("*/*/stage.json"))
    print("ok: %d stages in track folders, each track numbered without gaps, each stage's parent the one before it" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
