#!/usr/bin/env python3
"""The same kernels on two cards: each implementation's time in one results CSV against another's.

    python3 docs/evidence/ampere/call93/compare_cards.py OLD.csv NEW.csv

For every implementation in both CSVs (stages, FA2, cuDNN) and every shape of the headline rows
(non-causal, no ALiBi, kv_heads = heads, tile-multiple S), prints NEW's minimum time over OLD's, in
%, the range over the 16 cells (fp16/bf16 x head_dim 64/128 x S = 1024..8192). A stage whose folder
differs between the two CSVs' git revisions (git diff, run in this repository) is marked "changed"
and left out of the summary line, which is then the cards' difference on the same code. Written
for call 93 (the twenty-fifth session): the H100's full run (git 55a7412) against the H200's of
2026-12-04 (git 2d3322f); between them e97ff4c made causal a compile-time switch in stages 13-16,
32-33 and 36-38."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "tools"))
from results_csv import read_results_csv  # noqa: E402


def load(path):
    """(git revision, {(impl, dtype, head_dim, S): minimum ms}) of the headline rows that passed."""
    meta, rows = read_results_csv(path)
    times = {(r["impl"], r["dtype"], r["head_dim"], r["seq_q"]): float(r["min_ms"]) for r in rows
             if r["series"] == "headline" and r["seq_q"] == r["seq_kv"]
             and r["seq_q"] in ("1024", "2048", "4096", "8192") and r["status"] == "PASS"}
    return meta.get("git"), times


def changed(impl, a, b):
    d = os.path.join("stages", impl)
    if not os.path.isdir(d):  # fa2, cudnn: the same PyTorch build on both cards
        return False
    return subprocess.run(["git", "diff", "--quiet", a, b, "--", d]).returncode != 0


(ra, old), (rb, new) = load(sys.argv[1]), load(sys.argv[2])
impls = sorted({k[0] for k in old} & {k[0] for k in new})
print("time on %s / time on %s - 1, %%, by minimum, headline cells (git %s / %s)"
      % (sys.argv[2], sys.argv[1], rb, ra))
allv = []
for impl in impls:
    v = sorted((new[k] / old[k] - 1) * 100 for k in old if k[0] == impl and k in new)
    c = changed(impl, ra, rb)
    if not c:
        allv += v
    print("%-22s %+5.1f .. %+5.1f  (median %+5.1f, %d cells)%s"
          % (impl, v[0], v[-1], v[len(v) // 2], len(v), "  changed" if c else ""))
allv.sort()
print("unchanged code, %d cells: %+.1f .. %+.1f, median %+.1f; within +-2%%: %d"
      % (len(allv), allv[0], allv[-1], allv[len(allv) // 2], sum(abs(x) <= 2 for x in allv)))
