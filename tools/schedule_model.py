#!/usr/bin/env python3
"""The persistent Hopper stages' static schedules, replayed on the CPU: how many K/V-block steps the
busiest SM takes against the mean, for a tile order, tile height and sequence length.

A persistent kernel (hopper_05_persistent and later) launches one thread block per SM; block u takes turns u, u + SMs,
u + 2 SMs, ... of a fixed order and finishes when its last turn is done, so the kernel takes as long
as the busiest block. A turn is one tile (round_robin, longest_first) or two (the causal pairs).
The work of a tile is the number of K/V blocks it visits: all of them without causal; under causal
(bottom-right aligned, query i sees keys j <= i + seq_kv - seq_q) those up to the last key its last
row sees. The orders:

  round_robin    query blocks 0, 1, ..., n - 1 of each head, one tile per turn (hopper_05 to hopper_07)
  longest_first  n - 1, ..., 0, one tile per turn (what ampere_12_causal does for its independent blocks)
  pairs          n - 1, 0, n - 2, 1, ..., two tiles per turn (hopper_08_causal, hopper_09)
  pairs_odd      the same, but with n odd every second head starts with its middle block, so that
                 the middle blocks of two heads pair with each other (hopper_10_balanced_pairs'
                 schedule.h)

The pages of hopper_08_causal and hopper_09_three_warpgroups quote its tables ("Why pairs", and the
causal rows of hopper_09):

  python3 tools/schedule_model.py --block-q 128 --orders round_robin,longest_first,pairs
  python3 tools/schedule_model.py --block-q 128,192 --orders pairs,pairs_odd

A non-persistent grid (the Ampere stages) is another kind of schedule: one thread block per tile,
started in the order of blockIdx.x as slots free up (--dispatch: `slots` blocks resident per SM,
each slot taking the next block when its block ends), and the kernel ends when the last block
does. The orders there:

  longest_first  a head's query blocks n - 1, ..., 0, one head after another (ampere_12 to ampere_16)
  lpt_groups     the heads in groups whose K and V fit in half of L2, the first group taking the
                 remainder; within a group query block n - 1 of every head, then n - 2, ... (ampere_17_lpt_order's
                 block_order.h; --l2-mib and --kv-bytes-per-key size the groups)

--lone-speed says how much faster a block runs while it is alone on its SM (1: no faster, each
slot a fixed half of the SM; 2: it takes the whole SM). The page of ampere_17_lpt_order quotes:

  python3 tools/schedule_model.py --dispatch --block-q 128 --block-kv 64 --kv-bytes-per-key 256 --lone-speed 1,1.4

Counts only: how long a K/V-block step takes (it depends on the tile height, the mask, the head
dimension) is for the reader to measure; hopper_09's page takes the ratio of two steps from the
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


DISPATCH_ORDERS = ("longest_first", "lpt_groups")


def group_heads(batch_heads, seq_kv, kv_bytes_per_key, l2_bytes, causal):
    """Heads per group of lpt_groups (ampere_17_lpt_order's group_heads): K and V within half of L2."""
    if not causal:
        return 1
    return max(1, min(batch_heads, l2_bytes // 2 // max(1, seq_kv * kv_bytes_per_key)))


def dispatch_order(order, n, batch_heads, group):
    """(batch_head, query block) of each thread block, in the order blockIdx.x starts them."""
    if order == "longest_first":
        return [(bh, n - 1 - k) for bh in range(batch_heads) for k in range(n)]
    first = batch_heads - (batch_heads - 1) // group * group
    out, head0 = [], 0
    while head0 < batch_heads:
        size = first if head0 == 0 else group
        out += [(head0 + r % size, n - 1 - r // size) for r in range(size * n)]
        head0 += size
    return out


def dispatch(works, sms, slots, lone_speed):
    """When the last block ends: blocks of the given works started in order on `slots` slots per SM.

    An SM does one unit of work per unit of time when it holds `slots` blocks, shared equally; a
    block alone on its SM runs lone_speed times as fast as a slot (at most the whole SM)."""
    pending = list(reversed(works))
    running = [[] for _ in range(sms)]
    for sm in running:
        while len(sm) < slots and pending:
            sm.append(pending.pop())
    alone = min(1.0, lone_speed / slots)
    now = 0.0
    while any(running):
        rates = [(1.0 / slots if len(sm) == slots else alone) if sm else 0.0 for sm in running]
        step = min(min(sm) / r for sm, r in zip(running, rates) if sm)
        now += step
        for i, sm in enumerate(running):
            if not sm:
                continue
            left = [w - step * rates[i] for w in sm]
            running[i] = [w for w in left if w > 1e-9]
            while len(running[i]) < slots and pending:
                running[i].append(pending.pop())
    return now


def replay_dispatch(order, block_q, block_kv, seq_q, seq_kv, batch, heads, sms, slots, lone_speed, causal,
                    kv_bytes_per_key, l2_bytes):
    """(ideal, end, group): the perfect split of the work over the SMs, the list scheduler's end."""
    n = math.ceil(seq_q / block_q)
    group = group_heads(batch * heads, seq_kv, kv_bytes_per_key, l2_bytes, causal)
    works = [tile_blocks(q, block_q, block_kv, seq_q, seq_kv, causal)
             for _, q in dispatch_order(order, n, batch * heads, group)]
    return sum(works) / sms, dispatch(works, sms, slots, lone_speed), group


def float_list(text):
    return [float(x) for x in text.split(",") if x]


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
    p.add_argument("--orders", default=None,
                   help="comma list of %s (default pairs); with --dispatch of %s (default both)"
                   % (", ".join(ORDERS), ", ".join(DISPATCH_ORDERS)))
    p.add_argument("--not-causal", action="store_true", help="every tile visits every K/V block")
    p.add_argument("--dispatch", action="store_true",
                   help="a non-persistent grid: orders longest_first,lpt_groups (default both)")
    p.add_argument("--slots", type=int, default=2, help="--dispatch: blocks resident per SM (default 2)")
    p.add_argument("--lone-speed", type=float_list, default=[1.0],
                   help="--dispatch: speed of a block alone on its SM, in slots (default 1)")
    p.add_argument("--kv-bytes-per-key", type=int, default=256,
                   help="--dispatch: K and V bytes of one key and head (default 256: head_dim 64, 16 bit)")
    p.add_argument("--l2-mib", type=int, default=60, help="--dispatch: L2 size in MiB (default 60, the H200)")
    a = p.parse_args(argv)
    if a.dispatch:
        return main_dispatch(p, a)
    orders = [o for o in (a.orders or "pairs").split(",") if o]
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


def main_dispatch(p, a):
    orders = [o for o in a.orders.split(",") if o] if a.orders else list(DISPATCH_ORDERS)
    bad = [o for o in orders if o not in DISPATCH_ORDERS]
    if bad:
        p.error("unknown --dispatch order %s (known: %s)" % (", ".join(bad), ", ".join(DISPATCH_ORDERS)))
    if min(a.block_q + [a.block_kv, a.batch, a.heads, a.sms, a.slots, a.kv_bytes_per_key, a.l2_mib]
           + a.seqs) < 1 or a.seq_kv < 0 or min(a.lone_speed) <= 0:
        p.error("sizes must be positive")
    causal = not a.not_causal
    print("A grid of one thread block per tile, batch %d x heads %d, %d SMs x %d slots, Bc %d, %s; "
          "K/V-block steps until the last block ends (ideal: the work over the SMs)"
          % (a.batch, a.heads, a.sms, a.slots, a.block_kv, "causal" if causal else "not causal"))
    print("%6s %5s %-14s %6s %6s %10s %10s %10s" % ("S", "Br", "order", "group", "lone", "ideal", "end",
                                                     "end/ideal"))
    for seq in a.seqs:
        for block_q in a.block_q:
            for lone in a.lone_speed:
                for order in orders:
                    ideal, end, group = replay_dispatch(order, block_q, a.block_kv, seq, a.seq_kv or seq, a.batch,
                                                        a.heads, a.sms, a.slots, lone, causal, a.kv_bytes_per_key,
                                                        a.l2_mib << 20)
                    shown = group if order == "lpt_groups" else 1
                    print("%6d %5d %-14s %6d %6.2f %10.1f %10.1f %10.3f" % (seq, block_q, order, shown, lone, ideal,
                                                                            end, end / ideal))
    return 0


if __name__ == "__main__":
    sys.exit(main())
