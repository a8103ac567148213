"""Summarize ncu's source page (ncu -i REP --page source --csv --print-source sass): where a kernel's
warp-state samples sit, by instruction and by kind of instruction. Call 79 (issue 11's chain).
    python3 source_stalls.py source.csv [--top 40]
Standard library only. The columns are found by name, so the summary says what it could not find.
"""
import csv
import re
import sys
from collections import Counter, defaultdict

KINDS = [  # (kind, opcode regex), first match wins
    ("wgmma wait (WARPGROUP.DEPBAR)", r"^WARPGROUP\.DEPBAR"),
    ("wgmma issue (HGMMA)", r"^HGMMA"),
    ("warpgroup arrive (WARPGROUP.ARRIVE)", r"^WARPGROUP\.ARRIVE"),
    ("mbarrier wait/arrive (SYNCS)", r"^SYNCS"),
    ("named barrier (BAR)", r"^BAR"),
    ("shuffle (SHFL)", r"^SHFL"),
    ("max (FMNMX)", r"^FMNMX"),
    ("exp2 (MUFU.EX2)", r"^MUFU\.EX2"),
    ("other MUFU", r"^MUFU"),
    ("fp32 math (FFMA/FMUL/FADD)", r"^(FFMA|FMUL|FADD|FSEL|FSETP)"),
    ("pack (F2FP)", r"^F2FP"),
    ("shared/local memory (LDS/STS/LDL/STL/STSM/LDSM)", r"^(LDS|STS|LDL|STL|STSM|LDSM)"),
    ("global (LDG/STG/UTMA*)", r"^(LDG|STG|UTMA|UBLKCP)"),
    ("branch (BRA/BSYNC/...)", r"^(BRA|BSYNC|BSSY|WARPSYNC|EXIT|CALL|RET|YIELD)"),
    ("uniform/int (U*/I*/MOV/...)", r"."),
]


def opcode(source: str) -> str:
    s = source.strip()
    s = re.sub(r"^@!?U?P(T|\d+)\s+", "", s)
    return s.split()[0] if s else ""


def kind_of(op: str) -> str:
    for name, rx in KINDS:
        if re.match(rx, op):
            return name
    return "?"


def number(text: str) -> float:
    try:
        return float(text.replace(",", "")) if text not in ("", None) else 0.0
    except ValueError:
        return 0.0


def main(argv):
    path = argv[1]
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else 40
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head_i = next((i for i, r in enumerate(rows) if any(c.strip() == "Source" for c in r)), None)
    if head_i is None:
        print("no header with a 'Source' column; first lines:", rows[:3])
        return 1
    head = [c.strip() for c in rows[head_i]]
    body = [r for r in rows[head_i + 1:] if len(r) == len(head)]
    col = {c: i for i, c in enumerate(head)}
    print("columns:", head)
    all_c = next((c for c in head if c.startswith("Warp Stall Sampling (All")), None)
    ni_c = next((c for c in head if c.startswith("Warp Stall Sampling (Not")), None)
    ex_c = next((c for c in head if c.startswith("Instructions Executed")), None)
    addr_c = next((c for c in head if "Address" in c), None)
    reason_cs = [c for c in head if re.search(r"stall", c, re.I) and c not in (all_c, ni_c)]
    if all_c is None:
        print("no 'Warp Stall Sampling (All Samples)' column")
        return 1
    total = sum(number(r[col[all_c]]) for r in body)
    print(f"instructions {len(body)}, samples (all) {total:.0f}")
    by_kind = Counter()
    by_kind_ni = Counter()
    by_kind_n = Counter()
    reasons_by_kind = defaultdict(Counter)
    items = []
    for r in body:
        op = opcode(r[col["Source"]])
        k = kind_of(op)
        s = number(r[col[all_c]])
        by_kind[k] += s
        by_kind_n[k] += number(r[col[ex_c]]) if ex_c else 0
        if ni_c:
            by_kind_ni[k] += number(r[col[ni_c]])
        for c in reason_cs:
            reasons_by_kind[k][c] += number(r[col[c]])
        items.append((s, r[col[addr_c]] if addr_c else "", r[col["Source"]].strip(), r))
    print("\nby kind: samples (all), % of all, not-issued samples, warp instructions executed")
    for k, s in by_kind.most_common():
        ni = by_kind_ni[k]
        rs = ", ".join(f"{c} {v / max(s, 1) * 100:.0f}%" for c, v in reasons_by_kind[k].most_common(3) if v)
        print(f"  {k:48s} {s:10.0f} {s / total * 100:5.1f}%  {ni:10.0f}  {by_kind_n[k]:12.0f}  {rs}")
    print(f"\ntop {top} instructions by samples (address, samples, % of all, top reasons)")
    for s, a, src, r in sorted(items, key=lambda x: -x[0])[:top]:
        rs = sorted(((number(r[col[c]]), c) for c in reason_cs), reverse=True)[:2]
        rs = ", ".join(f"{c} {v:.0f}" for v, c in rs if v)
        print(f"  {a:>8s} {s:8.0f} {s / total * 100:5.1f}%  {src[:60]:60s} {rs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
