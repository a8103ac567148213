#!/usr/bin/env python3
"""Static SASS instruction counts of every stage's attention kernel: the evidence tables in docs/stages.

    python3 tools/sass_counts.py [--build-dir build] [--arch sm_90] [--dtype fp16] [--head-dim 128] [--order]

Reads the stage libraries a build left behind (libstage_NN_name.a), disassembles them with
cuobjdump -sass, picks the kernel instantiation for the dtype and head_dim asked for, and counts
opcodes twice: in the whole kernel, and in the main K/V loop. The main loop is found without
source-line information: it is the longest backward branch whose body contains an HMMA.
These are static counts (instructions in the code), not executed counts: the loop body runs once
per K/V block, the rest once per thread block. Resource usage (registers, stack, local memory)
comes from cuobjdump -res-usage. --order also prints, per stage, the order of the main loop's
ldmatrix, MMA, exp2 and barrier instructions as one line: L = LDSM, T = LDSM .trans, H = HMMA,
e = MUFU.EX2, | = BAR.SYNC (other instructions are left out), and says when a stage's loop has
exactly the opcode sequence (operands aside) of an earlier stage's loop.

Columns: HMMA (mma.sync), LDSM (ldmatrix, all), LDSM.T (ldmatrix .trans), LDGSTS (cp.async),
LDG/STS (stage 1's copies through registers), LDS (plain shared loads, not counting the
`@!PT LDS RZ, [RZ]` that ptxas places before LDGSTS groups: predicated off, they never execute),
MUFU.EX2, FMUL, FFMA, FADD, FMNMX, SHFL, F2FP (fp32 pairs -> 16 bit), BAR.SYNC, LDL/STL (spills).

Needs cuobjdump (from $CUOBJDUMP, PATH, /usr/local/cuda/bin or the nvidia-cuda-cuobjdump pip
package). Standard library only.
"""

import argparse
import collections
import glob
import os
import re
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMNS = ["HMMA", "LDSM", "LDSM.T", "LDGSTS", "LDG", "STS", "LDS", "MUFU.EX2", "FMUL", "FFMA", "FADD",
           "FMNMX", "SHFL", "F2FP", "BAR.SYNC", "LDL", "STL"]
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)([^;]*);")


def find_cuobjdump():
    candidates = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"]
    try:
        import nvidia  # the nvidia-cuda-cuobjdump pip package
        for base in nvidia.__path__:
            candidates += sorted(glob.glob(os.path.join(base, "*", "bin", "cuobjdump")))
    except ImportError:
        pass
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    return None


def kernel_text(sass, dtype, head_dim):
    """(mangled name, SASS text) of attention_kernel<T, head_dim> in one library's disassembly."""
    t = "6__half" if dtype == "fp16" else "13__nv_bfloat16"
    m = re.search(r"Function : (\S*attention_kernelI%sLi%dE\S*)" % (t, head_dim), sass)
    if not m:
        return None, ""
    end = sass.find("Function :", m.end())
    return m.group(1), sass[m.end(): end if end > 0 else len(sass)]


def instructions(text):
    return [(int(a, 16), op, rest.strip()) for a, op, rest in INSTRUCTION.findall(text)]


def main_loop(ins):
    """The body of the longest backward branch that contains an HMMA."""
    best = []
    for addr, op, rest in ins:
        if op != "BRA":
            continue
        target = re.search(r"0x([0-9a-f]+)", rest)
        if not target or int(target.group(1), 16) >= addr:
            continue
        body = [i for i in ins if int(target.group(1), 16) <= i[0] <= addr]
        if any(i[1].startswith("HMMA") for i in body) and len(body) > len(best):
            best = body
    return best


def count(ins):
    c = collections.Counter()
    for _, op, rest in ins:
        base = op.split(".")[0]
        if op == "NOP":
            continue
        c["total"] += 1
        if base == "LDSM":
            c["LDSM"] += 1
            if op.startswith("LDSM.16.MT"):
                c["LDSM.T"] += 1
        elif base == "LDS":
            if not rest.startswith("RZ, [RZ]"):
                c["LDS"] += 1
        elif op.startswith("MUFU.EX2"):
            c["MUFU.EX2"] += 1
        elif op.startswith("BAR.SYNC"):
            c["BAR.SYNC"] += 1
        elif base in COLUMNS:
            c[base] += 1
    return c


def order(ins):
    out = []
    for _, op, _ in ins:
        if op.startswith("LDSM.16.MT"):
            out.append("T")
        elif op.startswith("LDSM"):
            out.append("L")
        elif op.startswith("HMMA"):
            out.append("H")
        elif op.startswith("MUFU.EX2"):
            out.append("e")
        elif op.startswith("BAR.SYNC"):
            out.append("|")
    return "".join(out)


def res_usage(cuobjdump, lib, arch, mangled):
    out = subprocess.run([cuobjdump, "-res-usage", "-arch", arch, lib], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout
    m = re.search(re.escape(mangled) + r":\s*\n\s*(REG:\d+ STACK:\d+ SHARED:\d+ LOCAL:\d+)", out)
    return m.group(1) if m else "?"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--order", action="store_true", help="also print the main loop's LDSM/HMMA/EX2/BAR order")
    args = p.parse_args()
    cuobjdump = find_cuobjdump()
    if not cuobjdump:
        print("sass_counts.py: cuobjdump not found (pip install nvidia-cuda-cuobjdump)", file=sys.stderr)
        return 2
    libs = sorted(glob.glob(os.path.join(args.build_dir, "libstage_*.a")))
    if not libs:
        print("sass_counts.py: no libstage_*.a in %s (build first)" % args.build_dir, file=sys.stderr)
        return 2
    version = subprocess.run([cuobjdump, "--version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             text=True).stdout.strip().splitlines()
    print("# static SASS counts, %s, %s, head_dim %d; cuobjdump %s" % (args.arch, args.dtype, args.head_dim,
                                                                     version[-1] if version else "(version unknown)"))
    print("# 'loop' = main K/V loop body (longest backward branch containing HMMA), 'kernel' = whole kernel")
    width = 26
    print("%-*s" % (width, "stage / part") + "".join("%9s" % c for c in COLUMNS + ["total"]))
    usage, orders, seen = [], [], []
    for lib in libs:
        stage = os.path.basename(lib)[len("libstage_"):-len(".a")]
        sass = subprocess.run([cuobjdump, "-sass", "-arch", args.arch, lib], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout
        mangled, text = kernel_text(sass, args.dtype, args.head_dim)
        if not mangled:
            print("%-*s no %s code for this kernel" % (width, stage, args.arch))
            continue
        ins = instructions(text)
        loop_ops = [op for _, op, _ in main_loop(ins)]
        same = [st for st, ops in seen if ops == loop_ops]
        seen.append((stage, loop_ops))
        orders.append((stage, order(main_loop(ins)) + ("   (opcode sequence of the loop identical to %s's)" % same[0] if same else "")))
        for part, body in (("loop", main_loop(ins)), ("kernel", ins)):
            c = count(body)
            print("%-*s" % (width, "%s %s" % (stage, part)) + "".join("%9d" % c[k] for k in COLUMNS + ["total"]))
        usage.append((stage, res_usage(cuobjdump, lib, args.arch, mangled)))
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
