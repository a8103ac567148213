#!/usr/bin/env python3
"""The repository speaks of the project, not of how the work on it was produced.

    python3 tests/test_no_lab_notebook.py [--repo DIR] [--list-patterns]

What a kernel does and why, what it measured and the command that measures it again belong in
the files; the lab notebook does not: work sessions, numbered GPU calls and probes, which card a
machine pool lent that day, the tools that ran the work, links into a folder of run logs. That
belongs in commit messages. This test reads every text file of the tree (`git ls-files`, tracked
and untracked but not ignored; without git, a walk that skips build*/, .git, .deps and caches)
and prints each line that matches one of PATTERNS as `path:line: text`, with the pattern's name.

A true technical use of such a word (Catch2's `Catch::Session`, PyTorch API names, ...) goes in
ALLOWED: a path pattern, a regular expression for the allowed text on the line, and the reason.
An allowed match is blanked out of the line before the patterns run, so the rest of that line is
still checked.

Before reading the tree the test checks itself: every line of PLANTED must be found, and every
line of ALLOWED_EXAMPLES must not. Exit 0 when the tree is clean, 1 when a line matched, 2 when
the self-check failed. Needs no build and no GPU; CTest label cpu. Standard library only.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
THIS = "tests/test_no_lab_notebook.py"

# (name, regular expression), matched case-insensitively against each line.
PATTERNS = [
    ("work session", r"\bwork[- ]sessions?\b"),
    ("session", r"\bsessions?\b"),
    ("numbered call", r"\bcalls? \d+\b|\bcall\d+\b"),
    ("numbered probe", r"\bprobes? \d+\b|\bprobe\d+\b"),
    ("lent", r"\blent\b"),
    ("the device tool", r"\bdevice tool\b"),
    ("that day", r"\bthat day\b"),
    ("the evidence folder", r"\bdocs/evidence\b|\(evidence/|\]\(\.\./evidence/|\bevidence/(ampere|hopper)\b"),
    ("the performance log", r"\bperformance_log\b"),
]

# (path glob, allowed text as a regular expression, why it is not the lab notebook).
ALLOWED = [
    ("*", r"Catch::Session\b", "Catch2's test-runner class"),
    ("*", r"catch2/catch_session\.hpp", "Catch2's header for its test-runner class"),
    ("*", r"\btorch\.[A-Za-z_.]*[Ss]ession\w*", "PyTorch API names"),
]

# Lines the patterns must find: the self-check's negative controls.
PLANTED = [
    "### Twenty-first session (2026-12-06): stage 39 measured",
    "the work sessions that produced this stage",
    "Measured (call 85, an H100, docs/stages/hopper/17_warp_redo.md): 2.7-6.3% less time",
    "its hardening suite was stopped in calls 77 and 78",
    "`REV=55a7412 bash docs/evidence/ampere/call65.sh`",
    "a warp-level vote in its place (probe 93, correct only while no warp fails)",
    "the H100, the card the pool lent in every call",
    "the only card the device tool had that day",
    "[log](evidence/hopper/call77/call77.txt)",
    "see the [performance log](performance_log.md#the-log)",
]

# Lines the allowlist must let through.
ALLOWED_EXAMPLES = [
    "  const int failed = Catch::Session().run(argc, argv);",
    "#include <catch2/catch_session.hpp>",
]

SKIP_DIRS = {".git", ".deps", "__pycache__", ".pytest_cache", "node_modules"}
BINARY_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".pdf", ".gz", ".tgz", ".zip", ".so", ".a", ".o",
                   ".bin", ".pt", ".npz", ".npy", ".ico"}

COMPILED = [(name, re.compile(rx, re.IGNORECASE)) for name, rx in PATTERNS]
ALLOWED_COMPILED = [(glob, re.compile(rx), why) for glob, rx, why in ALLOWED]


def matches(path: str, line: str) -> list[str]:
    """The names of the patterns `line` of `path` matches, after the allowed uses are blanked."""
    for glob, rx, _ in ALLOWED_COMPILED:
        if fnmatch.fnmatch(path, glob):
            line = rx.sub(" ", line)
    return [name for name, rx in COMPILED if rx.search(line)]


def self_check() -> list[str]:
    problems = []
    for line in PLANTED:
        if not matches("docs/planted.md", line):
            problems.append("self-check: the patterns miss a planted line: %r" % line)
    for line in ALLOWED_EXAMPLES:
        found = matches("tests/planted.cpp", line)
        if found:
            problems.append("self-check: an allowed use is reported (%s): %r" % (", ".join(found), line))
    return problems


def tree_files(repo: Path) -> list[str]:
    """Paths relative to `repo`: git's tracked and untracked-but-not-ignored files, or a walk."""
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], capture_output=True, check=True).stdout
        paths = sorted({p for p in out.decode("utf-8", "replace").split("\0") if p})
        if paths:
            return [p for p in paths if (repo / p).is_file()]
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for root, dirs, files in os.walk(repo):
        rel_root = os.path.relpath(root, repo)
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not (rel_root == "." and d.startswith("build")))
        for f in sorted(files):
            found.append(os.path.normpath(os.path.join(rel_root, f)))
    return found


def text_lines(path: Path) -> list[str] | None:
    """The file's lines, or None for a binary file."""
    if path.suffix.lower() in BINARY_SUFFIXES:
        return None
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", type=Path, default=REPO, help="the tree to read (default: this checkout)")
    parser.add_argument("--list-patterns", action="store_true", help="print the patterns and the allowlist, then exit")
    args = parser.parse_args()

    if args.list_patterns:
        for name, rx in PATTERNS:
            print("pattern  %-20s %s" % (name, rx))
        for glob, rx, why in ALLOWED:
            print("allowed  %-20s %s  (%s)" % (glob, rx, why))
        return 0

    problems = self_check()
    if problems:
        print("\n".join(problems))
        return 2

    repo = args.repo.resolve()
    hits = 0
    files = 0
    for rel in tree_files(repo):
        if rel == THIS:
            continue  # it spells out the patterns it looks for
        lines = text_lines(repo / rel)
        if lines is None:
            continue
        files += 1
        for number, line in enumerate(lines, 1):
            found = matches(rel, line)
            if found:
                hits += 1
                print("%s:%d: %s   [%s]" % (rel, number, line.strip()[:200], ", ".join(found)))
    if hits:
        print("%d line(s) in %d text files speak of how the work was produced, not of the project: "
              "say it as a fact about the code with the card and the command that measures it, or, "
              "for a true technical use, add an entry with its reason to ALLOWED in %s" % (hits, files, THIS))
        return 1
    print("no lab notebook in %d text files" % files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
