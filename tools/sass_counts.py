#!/usr/bin/env python3
"""Static SASS instruction counts of every stage's attention kernel: the SASS tables in docs/.

    python3 tools/sass_counts.py [--build-dir build] [--arch sm_90] [--dtype fp16] [--head-dim 128] [--order]
                                 [--switches-on]

Reads the stage libraries a build left behind (libstage_<id>.a, for every stage in
stages/<track>/NN_name/stage.json), disassembles them with cuobjdump -sass, picks the kernel for the dtype and
head_dim asked for, and counts opcodes twice: in the whole kernel, and in the main K/V loop. The
main loop is found without source-line information: it is the innermost backward branch whose body
contains an HMMA or HGMMA and no EXIT (tools/sass.py, main_loop). These are static counts (instructions in the code), not executed counts: the loop
body runs once per K/V block, the rest once per thread block. Resource usage (registers, stack,
local memory) comes from cuobjdump -res-usage. --order also prints, per stage, the order of the
main loop's ldmatrix, MMA, exp2 and barrier instructions as one line: L = LDSM, T = LDSM .trans,
H = HMMA, e = MUFU.EX2, | = BAR.SYNC (other instructions are left out), and says when a stage's
loop has exactly the opcode sequence (operands aside) of an earlier stage's loop.

Columns: HMMA (mma.sync), LDSM (ldmatrix, all), LDSM.T (ldmatrix .trans), LDGSTS (cp.async),
LDG/STS (ampere_01_base's copies through registers), LDS (plain shared loads, not counting the
`@!PT LDS RZ, [RZ]` that ptxas places before LDGSTS groups: predicated off, they never execute),
MUFU.EX2, FMUL, FFMA, FADD, FMNMX, SHFL, F2FP (fp32 pairs -> 16 bit), BAR.SYNC, LDL/STL (spills).
A stage with compile-time feature switches (stage.json "kernel_flags", e.g. ampere_15_alibi's ALiBi) has
one kernel per setting: the one with every switch off is counted, or with --switches-on the one
with every switch on.

The disassembly, the tool lookup and the counting are tools/sass.py's, shared with
tests/check_sass.py and tools/gen_docs.py. Needs cuobjdump and nvdisasm (see tools/sass.py).
Standard library only.
"""

import argparse
import sys
from pathlib import Path

import sass
import stages

REPO = Path(__file__).resolve().parent.parent
ORDER_SYMBOLS = [("LDSM.16.MT", "T"), ("LDSM", "L"), ("HMMA", "H"), ("HGMMA", "G"), ("MUFU.EX2", "e"), ("BAR.SYNC", "|")]


def order(instructions):
    """The loop's LDSM/HMMA/EX2/BAR sequence as one line of symbols (ORDER_SYMBOLS)."""
    out = []
    for ins in instructions:
        for prefix, symbol in ORDER_SYMBOLS:
            if ins.opcode.startswith(prefix):
                out.append(symbol)
                break
    return "".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", type=Path, default=REPO / "build")
    p.add_argument("--arch", default="sm_90", help="SASS architecture (default sm_90)")
    p.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--order", action="store_true", help="also print the main loop's LDSM/HMMA/EX2/BAR order")
    p.add_argument("--switches-on", action="store_true",
                   help="count the kernels with every compile-time feature switch on (e.g. ALiBi)")
    args = p.parse_args()
    tools = sass.find_tools()
    if tools is None:
        print("sass_counts.py: %s" % sass.missing_tools_message(), file=sys.stderr)
        return 2
    libraries = [(s.name, sass.library_of(args.build_dir, s.name)) for s in stages.all_stages()]
    libraries = [(name, lib) for name, lib in libraries if lib.is_file()]
    if not libraries:
        print("sass_counts.py: no stage library (libstage_NAME.a) in %s (build first)" % args.build_dir,
              file=sys.stderr)
        return 2
    print("# static SASS counts, %s, %s, head_dim %d; cuobjdump %s"
          % (args.arch, args.dtype, args.head_dim, tools.version()))
    print("# 'loop' = main K/V loop body (innermost backward branch containing HMMA/HGMMA), 'kernel' = whole kernel")
    columns = sass.TABLE_COLUMNS + ["total"]
    width = 26
    print("%-*s" % (width, "stage / part") + "".join("%9s" % c for c in columns))
    usage, orders, seen = [], [], []
    for stage, lib in libraries:
        kernel = sass.find_kernel(sass.disassemble(lib, tools), args.arch, args.dtype, args.head_dim,
                                  args.switches_on)
        if kernel is None:
            print("%-*s no %s code for this kernel" % (width, stage, args.arch))
            continue
        loop = sass.main_loop(kernel.instructions)
        loop_ops = [i.opcode for i in loop]
        same = [earlier for earlier, ops in seen if ops == loop_ops]
        seen.append((stage, loop_ops))
        orders.append((stage, order(loop) + ("   (opcode sequence of the loop identical to %s's)" % same[0]
                                             if same else "")))
        for part, body in (("loop", loop), ("kernel", kernel.instructions)):
            counts = sass.table_counts(body)
            print("%-*s" % (width, "%s %s" % (stage, part)) + "".join("%9d" % counts[c] for c in columns))
        res = sass.resource_usage(lib, tools).get((args.arch, kernel.name))
        usage.append((stage, " ".join("%s:%d" % (k, res[k]) for k in ("REG", "STACK", "SHARED", "LOCAL"))
                       if res else "?"))
    print("\n# cuobjdump -res-usage (registers per thread, stack and local bytes per thread)")
    for stage, u in usage:
        print("%-*s %s" % (width, stage, u))
    if args.order:
        print("\n# main-loop order: L = LDSM, T = LDSM.trans, H = HMMA, e = MUFU.EX2, | = BAR.SYNC")
        for stage, line in orders:
            print("%-*s %s" % (width, stage, line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
