"""Issues 11 and 12's targets, read from one results CSV of tools/bench.py (calls 80 and 81: the full
run on an H100, git 3aacbf4). Standard library only.
    python3 docs/evidence/ampere/call80/targets.py RESULTS.csv
Every number is a ratio inside the CSV's one run (each row passed its fp64 check first: rows whose
status is not PASS are skipped). Percent changes are of time: + is slower.
"""
import csv
import json
import os
import sys

SEQS = [1024, 2048, 4096, 8192]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..")


def load(path):
    with open(path) as f:
        rows = [r for r in csv.DictReader(l for l in f if not l.startswith("#")) if r["status"] == "PASS"]
    return {(r["impl"], r["series"], r["dtype"], int(r["head_dim"]), int(r["seq_q"])): r for r in rows}


def parents():
    out = {}
    for d in sorted(os.listdir(os.path.join(ROOT, "stages"))):
        p = os.path.join(ROOT, "stages", d, "stage.json")
        if os.path.exists(p):
            out[d] = json.load(open(p)).get("parent")
    return out


def main(path):
    rows = load(path)
    par = parents()
    cells = [(dt, hd) for dt in ("fp16", "bf16") for hd in (64, 128)]
    print("Non-causal, each stage against its parent, time change by median and by minimum over the 16 cells")
    print("(fp16/bf16 x head_dim 64/128 x S = 1024..8192): the worst cell, and how many cells exceed +2%.")
    for st, p in par.items():
        ch = []
        for dt, hd in cells:
            for s in SEQS:
                a, b = rows.get((st, "headline", dt, hd, s)), rows.get((p, "headline", dt, hd, s))
                if a and b:
                    ch.append((100 * (float(a["median_ms"]) / float(b["median_ms"]) - 1),
                               100 * (float(a["min_ms"]) / float(b["min_ms"]) - 1), f"{dt} d{hd} S={s}"))
        if not ch:
            continue
        wm, wn = max(ch, key=lambda c: c[0]), max(ch, key=lambda c: c[1])
        print(f"  {st:22s} vs {p:22s} median {wm[0]:+5.1f}% ({wm[2]}), min {wn[1]:+5.1f}% ({wn[2]});"
              f" > +2%: {sum(c[0] > 2 for c in ch)} / {sum(c[1] > 2 for c in ch)} of {len(ch)}")
    newest = sorted({k[0] for k in rows if k[1] == "causal" and rows[k]["kind"] == "stage"})
    for st in newest:
        print(f"\nFeature rows of {st} (issue 12's targets: causal and GQA >= 100% of FA2, any length >= 95%"
              f" of the TFLOP/s at the tile multiple, ALiBi within +5% time)")
        for dt, hd in cells:
            c = [float(rows[(st, "causal", dt, hd, s)]["pct_of_fa2"]) for s in SEQS if (st, "causal", dt, hd, s) in rows]
            g = [float(rows[(st, "gqa", dt, hd, s)]["pct_of_fa2"]) for s in SEQS if (st, "gqa", dt, hd, s) in rows]
            al = [100 * (float(rows[(st, "alibi", dt, hd, s)]["median_ms"]) / float(rows[(st, "headline", dt, hd, s)]["median_ms"]) - 1)
                  for s in SEQS if (st, "alibi", dt, hd, s) in rows]
            an = [100 * float(rows[(st, "any_length", dt, hd, a)]["tflops"]) / float(rows[(st, "headline", dt, hd, b)]["tflops"])
                  for a, b in ((1000, 1024), (4000, 4096)) if (st, "any_length", dt, hd, a) in rows]
            line = f"  {dt} d{hd:<3d}"
            if c: line += f" causal {min(c):.1f}-{max(c):.1f}% of FA2;"
            if g: line += f" GQA 32:8 {min(g):.1f}-{max(g):.1f}% of FA2;"
            if an: line += " any length " + " / ".join(f"{x:.1f}%" for x in an) + " (1000, 4000);"
            if al: line += " ALiBi time " + " ".join(f"{x:+.1f}%" for x in al)
            print(line)
    hopper = [s for s in par if rows.get((s, "headline", "fp16", 128, 1024)) and
              json.load(open(os.path.join(ROOT, "stages", s, "stage.json"))).get("target") == "sm_90a"]
    print("\nIssue 11: the fastest Hopper stage at each cell (by TFLOP/s, from its minimum time): % of cuDNN (minima), TFLOP/s")
    for dt, hd in cells:
        out = []
        for s in SEQS:
            found = [rows[(h, "headline", dt, hd, s)] for h in hopper if (h, "headline", dt, hd, s) in rows]
            if not found:  # a part CSV holds one dtype only
                continue
            best = max(found, key=lambda r: float(r["tflops"]))
            out.append(f"S={s} {best['impl'][:2]} {float(best['pct_of_cudnn']):.1f}% {float(best['tflops']):.0f}")
        if out:
            print(f"  {dt} d{hd:<3d} " + "; ".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
