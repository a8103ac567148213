#!/usr/bin/env python3
"""CPU test of tools/schedule_model.py, the replay of the stages' static schedules that the pages of
hopper_08_causal, hopper_09_three_warpgroups and ampere_17_lpt_order quote. It checks the counts
those pages print (busiest and mean K/V-block steps per SM, [16, S, 32, D], 132 SMs, Bc 128), a
hand-countable small case, that every order covers every tile once, and that the script answers
--help and refuses an unknown order.
Exit codes: 0 pass, 1 fail.
"""
import contextlib
import io
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import schedule_model as sm  # noqa: E402

failures = []


def check(what, got, want):
    if got != want:
        failures.append("%s: got %r, want %r" % (what, got, want))


def busiest(order, block_q, seq, causal=True):
    mean, most, _ = sm.replay(order, block_q, 128, seq, seq, 16, 32, 132, causal)
    return round(mean, 1), most


# docs/stages/hopper/08_causal.md, "Why pairs": mean, round-robin's busiest, pairs' busiest.
for seq, mean, rr, pairs in ((1024, 139.6, 192, 144), (2048, 527.5, 636, 544), (4096, 2048.0, 2280, 2079),
                             (8192, 8067.9, 8592, 8125)):
    check("hopper_08 page, S=%d round_robin" % seq, busiest("round_robin", 128, seq), (mean, rr))
    check("hopper_08 page, S=%d longest_first" % seq, busiest("longest_first", 128, seq), (mean, rr))
    check("hopper_08 page, S=%d pairs" % seq, busiest("pairs", 128, seq), (mean, pairs))

# docs/stages/hopper/09_three_warpgroups.md, the causal table: 192-row tiles under hopper_08_causal's pairs.
for seq, mean, most in ((1024, 124.1, 132), (2048, 391.8, 550), (4096, 1489.5, 1505), (8192, 5542.8, 5586)):
    check("hopper_09 page, S=%d pairs, Br 192" % seq, busiest("pairs", 192, seq), (mean, most))
# The odd-count fix (hopper_10_balanced_pairs): S = 2048 from 550 to 418.
check("pairs_odd, S=2048, Br 192", busiest("pairs_odd", 192, 2048), (391.8, 418))
# Not causal, S = 1024: 3072 tiles of 192 rows (8 blocks each) on 132 SMs, the busiest takes 24 of them.
check("not causal, S=1024, Br 192", sm.replay("round_robin", 192, 128, 1024, 1024, 16, 32, 132, False)[1], 24 * 8)

# By hand: one head, S = 512, Br = Bc = 128, causal: tiles of 1, 2, 3, 4 blocks; 2 SMs.
# round_robin: SM 0 gets tiles 0, 2 (1 + 3), SM 1 tiles 1, 3 (2 + 4); pairs (3, 0) and (2, 1): 5 each.
check("hand, round_robin", sm.replay("round_robin", 128, 128, 512, 512, 1, 1, 2, True)[:2], (5.0, 6))
check("hand, pairs", sm.replay("pairs", 128, 128, 512, 512, 1, 1, 2, True)[:2], (5.0, 5))

# Every order visits every (head, query block) once.
for order in sm.ORDERS:
    for n in range(1, 14):
        for heads in (1, 2, 3):
            seen = sorted((bh, sm.query_block(order, k, n, bh)) for bh in range(heads) for k in range(n))
            check("%s covers n=%d heads=%d" % (order, n, heads), seen,
                  sorted((bh, q) for bh in range(heads) for q in range(n)))

# The non-persistent grids (--dispatch, ampere_17_lpt_order's page): by hand first.
# One SM with 2 slots, blocks of 2 and 1 steps: both at half speed until t = 2, then the longer one alone
# for its last step: at half speed (lone_speed 1) it ends at 4, with the whole SM (2) at 3.
check("dispatch by hand, lone 1", sm.dispatch([2, 1], 1, 2, 1.0), 4.0)
check("dispatch by hand, lone 2", sm.dispatch([2, 1], 1, 2, 2.0), 3.0)
# Two SMs of one slot, one head of S = 512, Br 128, Bc 64, causal: blocks of 8, 6, 4, 2 steps; the SM
# that took 6 takes 4 (ends at 10), the one that took 8 takes 2 (ends at 10).
check("dispatch by hand, one head", sm.replay_dispatch("longest_first", 128, 64, 512, 512, 1, 1, 2, 1, 1.0, True,
                                                       256, 60 << 20)[:2], (10.0, 10.0))
# The groups: K and V within half of L2; [16, 2048, 32, 64] at 16 bits: 512 KiB a head, 60 heads in 30 MiB.
check("group_heads S=2048 d64", sm.group_heads(512, 2048, 256, 60 << 20, True), 60)
check("group_heads not causal", sm.group_heads(512, 2048, 256, 60 << 20, False), 1)
for order in sm.DISPATCH_ORDERS:
    for n in (1, 5, 16):
        for bh, group in ((1, 1), (7, 3), (69, 30), (5, 100)):
            got = sorted(sm.dispatch_order(order, n, bh, group))
            check("%s covers n=%d heads=%d group=%d" % (order, n, bh, group), got,
                  sorted((h, q) for h in range(bh) for q in range(n)))
# ampere_17_lpt_order's prediction, [16, 2048, 32, 64] causal on 132 SMs x 2 slots: 1096 steps with ampere_16's
# order, 1060 with the groups of 60 heads (ideal 1055).
ideal, end, _ = sm.replay_dispatch("longest_first", 128, 64, 2048, 2048, 16, 32, 132, 2, 1.0, True, 256, 60 << 20)
check("ampere_17 page, S=2048 longest_first", (round(ideal, 1), round(end, 1)), (1055.0, 1096.0))
ideal, end, group = sm.replay_dispatch("lpt_groups", 128, 64, 2048, 2048, 16, 32, 132, 2, 1.0, True, 256, 60 << 20)
check("ampere_17 page, S=2048 lpt_groups", (round(end, 1), group), (1060.0, 60))

# The command line.
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        sm.main(["--help"])
    except SystemExit as e:
        check("--help exit", e.code, 0)
if "pairs_odd" not in out.getvalue():
    failures.append("--help does not list the orders")
err = io.StringIO()
with contextlib.redirect_stderr(err):
    try:
        sm.main(["--orders", "spiral"])
        failures.append("an unknown order was accepted")
    except SystemExit as e:
        check("unknown order exit", e.code, 2)
out = io.StringIO()
with contextlib.redirect_stdout(out):
    check("a table", sm.main(["--block-q", "192", "--seqs", "2048", "--orders", "pairs"]), 0)
if "1.404" not in out.getvalue():
    failures.append("the table lacks busiest/mean 1.404 for S=2048, Br 192, pairs:\n" + out.getvalue())

out = io.StringIO()
with contextlib.redirect_stdout(out):
    check("a dispatch table", sm.main(["--dispatch", "--seqs", "1024", "--block-kv", "64"]), 0)
if "lpt_groups" not in out.getvalue() or "longest_first" not in out.getvalue():
    failures.append("the --dispatch table lacks an order:\n" + out.getvalue())

for f in failures:
    print("FAIL:", f)
print("%s: %d failure(s)" % (pathlib.Path(__file__).name, len(failures)))
sys.exit(1 if failures else 0)
