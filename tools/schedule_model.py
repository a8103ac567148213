#!/usr/bin/env python3
"""The persistent Hopper stages' static schedules, replayed on the CPU: how many K/V-block steps the
busiest SM takes against the mean, for a tile order, tile height and sequence length.

A persistent kernel (stages 20-24) launches one thread block per SM; block u takes turns u, u + SMs,
u + 2 SMs, ... of a fixed order and finishes when its last turn is done, so the kernel takes as long
as the busiest block. A turn is one tile (round_robin, longest_first) or two (the causal pairs).
The work of a tile is the number of K/V blocks it visits: all of them without causal; under causal
(bottom-right aligned, query i sees keys j <= i + seq_kv - seq_q) those up to the last key its last
row sees. The orders:

  round_robin    query blocks 0, 1, ..., n - 1 of each head, one tile per turn (stages 20-22)
  longest_first  n - 1, ..., 0, one tile per turn (what stage 13 does for its independent blocks)
  pairs          n - 1, 0, n - 2, 1, ..., two tiles per turn (stages 23 and 24)
  pairs_odd      the same, but with n odd every second head starts with its middle block, so that
                 the middle blocks of two heads pair with each other (branch next/hopper-25-27, stage
                 25's schedule.h)

The pages of stages 23 and 24 quote its tables ("Why pairs", and the causal rows of stage 24):

  python3 tools/schedule_model.py --block-q 128 --orders round_robin,longest_first,pairs
  python3 tools/schedule_model.py --block-q 128,192 --orders pairs,pairs_odd

Counts only: how long a K/V-block step takes (it depends on the tile height, the mask, the head
dimension) is for the reader to measure; stage 24's page takes the ratio of two steps from the
non-causal runs.
"""
import argparse
import math
import sys

ORDERS = ("round_robin", "longest_first", "pairs", "pairs_odd")


def tile_blocks(q_block, block_q, block_kv, seq_q, seq_kv, causal):
    """K/V blocks the tile of query block `q_block` visits (the stages' tile_work)."""
    if not causal:
        return math.ceil(seq_kv / block_kv)
    q0 = q_block * block_q
    rows = min(block_q, seq_q - q0)
    keys_seen = min(max(q0 + rows + seq_kv - seq_q, 0), seq_kv)
    return math.ceil(keys_seen / block_kv)


def query_block(order, k, n, batch_head):
    """Query block of position k (0 .. n - 1) of a head, in the given order."""
    if order == "round_robin":
        return k
    if order == "longest_first":
        return n - 1 - k
    if order == "pairs_odd" and n % 2 == 1 and batch_head % 2 == 1:
        k = (k + n - 1) % n
    return n - 1 - k // 2 if k % 2 == 0 else k // 2


def replay(order, block_q, block_kv, seq_q, seq_kv, batch, heads, sms, causal):
    """(mean, busiest) K/V-block steps per thread block, and the number of thread blocks."""
    n = math.ceil(seq_q / block_q)
    work = [tile_blocks(query_block(order, k, n, bh), block_q, block_kv, seq_q, seq_kv, causal)
            for bh in range(batch * heads) for k in range(n)]
    per_turn = 2 if order.startswith("pairs") else 1
    turns = [sum(work[i:i + per_turn]) for i in range(0, len(work), per_turn)]
    blocks = min(sms, len(turns))
    load = [0] * blocks
    for u, w in enumerate(turns):
        load[u % blocks] += w
    return sum(work) / blocks, max(load), blocks


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--block-q", type=int_list, default=[128], help="tile heights, e.g. 128,192 (default 128)")
    p.add_argument("--block-kv", type=int, default=128, help="K/V block (default 128)")
    p.add_argument("--seqs", type=int_list, default=[1024, 2048, 4096, 8192], help="seq_q values (default 1024..8192)")
    p.add_argument("--seq-kv", type=int, default=0, help="seq_kv (default: equal to seq_q)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--sms", type=int, default=132, help="SMs, i.e. persistent thread blocks (default 132, the H200)")
    p.add_argument("--orders", default="pairs", help="comma list of %s (default pairs)" % ", ".join(ORDERS))
    p.add_argument("--not-causal", action="store_true", help="every tile visits every K/V block")
    a = p.parse_args(argv)
    orders = [o for o in a.orders.split(",") if o]
    bad = [o for o in orders if o not in ORDERS]
    if bad:
        p.error("unknown order %s (known: %s)" % (", ".join(bad), ", ".join(ORDERS)))
    if min(a.block_q + [a.block_kv, a.batch, a.heads, a.sms] + a.seqs) < 1 or a.seq_kv < 0:
        p.error("sizes must be positive")
    causal = not a.not_causal
    print("K/V-block steps per persistent thread block, batch %d x heads %d, %d SMs, Bc %d, %s"
          % (a.batch, a.heads, a.sms, a.block_kv, "causal" if causal else "not causal"))
    print("%6s %5s %-14s %10s %10s %13s" % ("S", "Br", "order", "mean", "busiest", "busiest/mean"))
    for seq in a.seqs:
        for block_q in a.block_q:
            for order in orders:
                mean, busiest, _ = replay(order, block_q, a.block_kv, seq, a.seq_kv or seq, a.batch, a.heads,
                                          a.sms, causal)
                print("%6d %5d %-14s %10.1f %10d %13.3f" % (seq, block_q, order, mean, busiest, busiest / mean))
    return 0


if __name__ == "__main__":
    sys.exit(main())
