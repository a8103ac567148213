#!/usr/bin/env python3
"""Every registered stage is documented: a test that fails when a stage is left out of the docs.

    python3 tests/test_docs_coverage.py [--repo DIR]

The stages are those of tools/stages.py (every stages/NN_name/stage.json, the list CMake builds).
For each one:

  * docs/stages/<name>.md exists (its page: the idea, the diff against its parent, the numbers);
  * the stage table of README.md (the first table after the heading "## The stages") has a row
    that names it, and exactly one;
  * docs/algorithm.md names it (where the algorithm explains what each stage changes).

And the other way round: a README table row or a docs/stages/*.md page naming a stage folder
(NN_name) that has no stage.json is reported too, so a renamed or removed stage leaves nothing
stale behind. A stage is "named" by its folder name, e.g. `ampere_07_fast_softmax`.

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

STAGE_NAME = re.compile(r"\b\d\d_[a-z0-9_]*[a-z0-9]\b")


def readme_stage_rows(readme: str) -> list[str] | None:
    """The rows (without the header and separator) of the first table after '## The stages'."""
    heading = re.search(r"^## The stages\s*$", readme, re.M)
    if heading is None:
        return None
    rows: list[str] = []
    for line in readme[heading.end():].splitlines():
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            break  # the table ended
        elif line.startswith("#"):
            return None  # the next section began before any table
    return rows[2:] if len(rows) >= 2 else None


def names_in(text: str) -> set[str]:
    return set(STAGE_NAME.findall(text))


def check(repo: Path) -> list[str]:
    declared = [s.name for s in stages.all_stages(repo / "stages")]
    problems: list[str] = []
    if not declared:
        return ["no stages/*/stage.json in %s" % repo]

    pages = repo / "docs" / "stages"
    for name in declared:
        if not (pages / (name + ".md")).is_file():
            problems.append("docs/stages/%s.md: missing (every stage needs a page)" % name)
    if pages.is_dir():
        for page in sorted(pages.glob("*.md")):
            if page.stem not in declared:
                problems.append("docs/stages/%s: no stages/%s/stage.json" % (page.name, page.stem))

    readme_path = repo / "README.md"
    rows = readme_stage_rows(readme_path.read_text(encoding="utf-8")) if readme_path.is_file() else None
    if rows is None:
        problems.append("README.md: no stage table (a table after the heading '## The stages')")
    else:
        for name in declared:
            hits = sum(1 for row in rows if name in names_in(row))
            if hits != 1:
                problems.append("README.md: the stage table has %d rows naming %s (needs exactly one)" % (hits, name))
        for row in rows:
            for name in sorted(names_in(row) - set(declared)):
                problems.append("README.md: the stage table names %s, which has no stages/%s/stage.json" % (name, name))

    algorithm_path = repo / "docs" / "algorithm.md"
    if not algorithm_path.is_file():
        problems.append("docs/algorithm.md: missing")
    else:
        mentioned = names_in(algorithm_path.read_text(encoding="utf-8"))
        for name in declared:
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
    print("every one of the %d stages has its page, its README row and its place in docs/algorithm.md" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
