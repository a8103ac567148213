#!/usr/bin/env python3
"""Every registered stage is documented: a test that fails when a stage is left out of the docs.

    python3 tests/test_docs_coverage.py [--repo DIR]

The stages are those of tools/stages.py (every stages/<track>/NN_name/stage.json, the list CMake
builds), named by their ids, <track>_NN_name (e.g. `ampere_07_fast_softmax`). For each one:

  * its page docs/stages/<track>/NN_name.md exists (the idea, the diff against its parent, the
    numbers);
  * the README's tracks section (between <!-- tracks:begin --> and <!-- tracks:end -->, generated
    by tools/plot.py) has, under its track's heading, a table with exactly one row naming it, the
    rows in track order, the tracks in the order of stages/tracks.json;
  * docs/algorithm.md names it (where the algorithm explains what each stage changes).

And the other way round: a README row or a page under docs/stages/ of no stage is reported too,
so a renamed or removed stage leaves nothing stale behind.

Exit 0 if all hold, 1 otherwise (each missing piece listed). Needs no build and no GPU; CTest label
cpu;docs. Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import stages  # noqa: E402  (tools/stages.py)

STAGE_ID = re.compile(r"\b[a-z]+_\d\d_[a-z0-9_]*[a-z0-9]\b")


def readme_tracks(readme: str) -> list[tuple[str, list[str]]] | None:
    """[(heading, table rows)] of the README's tracks section, a heading per '### ' line; the rows
    without the header and separator. None without the section."""
    begin, end = "<!-- tracks:begin -->", "<!-- tracks:end -->"
    if readme.count(begin) != 1 or readme.count(end) != 1:
        return None
    section = readme.split(begin, 1)[1].split(end, 1)[0]
    parts = re.split(r"^### (.+)$", section, flags=re.M)
    out = []
    for heading, body in zip(parts[1::2], parts[2::2]):
        table = [line for line in body.splitlines() if line.startswith("|")]
        out.append((heading.strip(), table[2:]))
    return out


def check(repo: Path) -> list[str]:
    declared = stages.all_stages(repo / "stages")
    names = [s.name for s in declared]
    problems: list[str] = []
    if not declared:
        return ["no stages/<track>/*/stage.json in %s" % repo]

    pages = {(repo / s.page).resolve() for s in declared}
    for stage in declared:
        if not (repo / stage.page).is_file():
            problems.append("%s: missing (every stage needs a page)" % stage.page)
    for page in sorted((repo / "docs" / "stages").glob("**/*.md")):
        if page.resolve() not in pages:
            problems.append("%s: no stage has this page (stages/<track>/NN_name/stage.json)"
                            % page.relative_to(repo))

    readme_path = repo / "README.md"
    tracks = readme_tracks(readme_path.read_text(encoding="utf-8")) if readme_path.is_file() else None
    if tracks is None:
        problems.append("README.md: no tracks section (<!-- tracks:begin --> ... <!-- tracks:end -->)")
    else:
        expected = [t for t in stages.tracks(repo / "stages") if any(s.track == t.name for s in declared)]
        if [h for h, _ in tracks] != [t.title for t in expected]:
            problems.append("README.md: the tracks section's headings are %s, not the tracks %s"
                            % ([h for h, _ in tracks], [t.title for t in expected]))
        for track, (heading, rows) in zip(expected, tracks):
            mine = [s.name for s in declared if s.track == track.name]
            named = [STAGE_ID.findall(row.split("|")[1]) for row in rows]
            listed = [n[0] for n in named if n]
            if listed != mine:
                problems.append("README.md: the %s table has the rows %s, not one per stage in track order %s"
                                % (heading, listed, mine))
        for heading, rows in tracks:
            for row in rows:
                for name in sorted(set(STAGE_ID.findall(row.split("|")[1])) - set(names)):
                    problems.append("README.md: the %s table names %s, which is not a stage" % (heading, name))

    algorithm_path = repo / "docs" / "algorithm.md"
    if not algorithm_path.is_file():
        problems.append("docs/algorithm.md: missing")
    else:
        mentioned = set(STAGE_ID.findall(algorithm_path.read_text(encoding="utf-8")))
        for name in names:
            if name not in mentioned:
                problems.append("docs/algorithm.md: does not name %s" % name)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository to check (default: this one)")
    args = parser.parse_args(argv)
    problems = check(args.repo)
    count = len(stages.all_stages(args.repo / "stages"))
    for p in problems:
        print("FAIL: %s" % p)
    if problems:
        print("\n%d problem(s) in the docs of %d stages" % (len(problems), count))
        return 1
    print("every one of the %d stages has its page, its row in its track's README table and its place in "
          "docs/algorithm.md" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
