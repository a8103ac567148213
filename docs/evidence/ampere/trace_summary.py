#!/usr/bin/env python3
"""Summarize schedule traces written by the probes of trace_probe.py (call49.sh); pure Python.

For each trace CSV (block, start_ns, end_ns, sm, group), one line:
  span       first start to last end, microseconds
  sms        SMs that ran a block; peak  the most blocks resident on one SM at once
  in_order   % of blocks that started no earlier than every block before them in blockIdx.x order
             (100 = the hardware started them strictly in blockIdx.x order), within 1 us
  last_start when the last block started, % of the span
  idle_end   the SMs' mean idle time at the end (span minus each SM's last end), % of the span:
             the tail the order is meant to shorten
  replay     the list scheduler of tools/schedule_model.py --dispatch fed the measured block
             durations in blockIdx.x order, on sms x peak slots: its end, % of the measured span
             (about 100: the model's premise holds; a block's duration is taken as measured,
             so co-residency effects are in it)

  python3 trace_summary.py TRACE.csv [...]
"""
import csv
import heapq
import sys


def summarize(path):
    with open(path) as f:
        rows = [(int(r["block"]), int(r["start_ns"]), int(r["end_ns"]), int(r["sm"]), int(r["group"]))
                for r in csv.DictReader(f)]
    rows.sort()
    t0 = min(r[1] for r in rows)
    t1 = max(r[2] for r in rows)
    span = t1 - t0
    sms = sorted({r[3] for r in rows})
    # peak residency per SM: sweep of start/end events
    peak = 0
    for sm in sms:
        events = sorted([(r[1], 1) for r in rows if r[3] == sm] + [(r[2], -1) for r in rows if r[3] == sm],
                        key=lambda e: (e[0], e[1]))
        live = 0
        for _, d in events:
            live += d
            peak = max(peak, live)
    in_order, latest = 0, -1
    for r in rows:
        if r[1] + 1000 >= latest:
            in_order += 1
        latest = max(latest, r[1])
    last_start = max(r[1] for r in rows) - t0
    last_end = {}
    for r in rows:
        last_end[r[3]] = max(last_end.get(r[3], 0), r[2])
    idle_end = sum(t1 - e for e in last_end.values()) / len(sms)
    # replay: slots free at their earliest time take the next block in blockIdx.x order
    slots = [0.0] * (len(sms) * max(1, peak))
    heapq.heapify(slots)
    end = 0.0
    for r in rows:
        free = heapq.heappop(slots)
        done = free + (r[2] - r[1])
        end = max(end, done)
        heapq.heappush(slots, done)
    return ("%-44s blocks %6d group %4d span %9.1f us sms %3d peak %d in_order %5.1f%% last_start %5.1f%% "
            "idle_end %4.1f%% replay %5.1f%%" % (path.split("/")[-1], len(rows), rows[0][4], span / 1e3, len(sms),
                                                 peak, 100.0 * in_order / len(rows), 100.0 * last_start / span,
                                                 100.0 * idle_end / span, 100.0 * end / span))


if __name__ == "__main__":
    for p in sys.argv[1:]:
        try:
            print(summarize(p))
        except (OSError, ValueError, KeyError) as e:
            print("%s: %s" % (p, e))
