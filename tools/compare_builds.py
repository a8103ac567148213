#!/usr/bin/env python3
"""Did a change that should not touch the machine code touch it? Compares the SASS of every stage
library of two builds, kernel by kernel.

    python3 tools/compare_builds.py BUILD_BEFORE BUILD_AFTER [--stages ID,...] [--renamed FILE]

For each stage (every stage of this tree, or --stages) and each kernel of each architecture it
prints the instruction count and the LDL + STL count before and after, and one verdict:
  identical       the same instructions, operands and guards in the same order (registers too;
                  the NOPs of alignment padding left out);
  reordered       the same instructions but in another order or with other registers (ptxas
                  scheduled the same work differently: time it before calling it equal);
  different       other instructions.
Kernels are matched by their name without the stage's namespace, so a renamed stage still
compares. --renamed FILE maps the before build's library names to this tree's ids, one
'<old name> <track> <NN_name>' per line (how the stages were renumbered into tracks).

Exit status: 0 every kernel identical; 1 something differs or is missing; 2 bad usage or no
cuobjdump/nvdisasm (sass.py says where it looks). Standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

import sass
import stages


def kernel_key(kernel: sass.Kernel) -> tuple:
    return (kernel.arch, sass.unqualified(kernel.name))


def normalized(kernel: sass.Kernel, registers: bool) -> list[tuple]:
    """The instructions without addresses (branch targets are addresses too); without register
    numbers if `registers` is False."""
    out = []
    for i in kernel.instructions:
        if i.opcode == "NOP":  # alignment padding after branches: not work the kernel does
            continue
        operands = re.sub(r"0x[0-9a-f]+", "X", i.operands) if i.opcode.startswith(("BRA", "BSSY", "CALL")) else i.operands
        if not registers:
            operands = re.sub(r"\bU?R\d+\b", "R", operands)
        out.append((i.guard, i.opcode, operands.strip()))
    return out


def spills(kernel: sass.Kernel) -> int:
    return kernel.count("LDL") + kernel.count("STL")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--stages", default="", help="comma-separated ids (default: every stage of this tree)")
    ap.add_argument("--renamed", type=Path, help="'<old name> <track> <NN_name>' lines: the before build's names")
    args = ap.parse_args()
    tools = sass.find_tools()
    if tools is None:
        print("compare_builds.py: " + sass.missing_tools_message(), file=sys.stderr)
        return 2
    ids = [s for s in args.stages.split(",") if s] or [s.name for s in stages.all_stages()]
    old_name = {i: i for i in ids}
    if args.renamed:
        for line in args.renamed.read_text().splitlines():
            if line.strip():
                old, track, folder = line.split()
                old_name[stages.stage_id(track, folder)] = old
    verdicts: Counter = Counter()
    for sid in ids:
        before_lib = sass.library_of(args.before, old_name.get(sid, sid))
        after_lib = sass.library_of(args.after, sid)
        if not before_lib.is_file() or not after_lib.is_file():
            print("%-32s missing: %s" % (sid, before_lib if not before_lib.is_file() else after_lib))
            verdicts["missing"] += 1
            continue
        before = {kernel_key(k): k for k in sass.disassemble(before_lib, tools)}
        after = {kernel_key(k): k for k in sass.disassemble(after_lib, tools)}
        for key in sorted(set(before) | set(after)):
            b, a = before.get(key), after.get(key)
            if b is None or a is None:
                verdict = "missing"
                line = "only %s" % ("after" if b is None else "before")
            else:
                if normalized(b, True) == normalized(a, True):
                    verdict = "identical"
                elif sorted(normalized(b, False)) == sorted(normalized(a, False)):
                    verdict = "reordered"
                else:
                    verdict = "different"
                line = "instructions %6d -> %6d   LDL+STL %3d -> %3d" % (
                    len(b.instructions), len(a.instructions), spills(b), spills(a))
            verdicts[verdict] += 1
            label = (b or a).label
            print("%-32s %-7s %-22s %s  %s" % (sid, key[0], label, line, verdict))
    print("; ".join("%d %s" % (n, v) for v, n in sorted(verdicts.items())) + " (kernels)")
    return 0 if set(verdicts) <= {"identical"} else 1


if __name__ == "__main__":
    sys.exit(main())
