#!/usr/bin/env python3
"""Summarize boundary_probe.py's files (call51.sh): per consumer warpgroup, the cycles of each
phase of a tile, per tile (the loop also per K/V block), and the tile boundary in loop blocks.

  python3 phases_summary.py FILE.csv ...   (one file per probe and shape, as call51.sh names them)
"""
import csv
import os
import sys

PHASES = ["q_wait", "k0_wait", "block0", "loop", "last_pv", "epilogue", "between"]
BOUNDARY = ["q_wait", "k0_wait", "block0", "last_pv", "epilogue", "between"]


def main(paths):
    print("%-34s %3s %6s %8s %8s %8s %9s %8s %8s %8s %9s %9s %8s" % (
        "file", "wg", "tiles", "q_wait", "k0_wait", "block0", "loop/blk", "last_pv", "epilog", "between",
        "boundary", "=blocks", "covered"))
    for path in paths:
        with open(path) as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            v = {k: int(x) for k, x in r.items()}
            tiles = max(v["tiles"], 1)
            steps = max(v["loop_steps"], 1)
            per_tile = {k: v[k] / tiles for k in PHASES}
            per_block = v["loop"] / steps  # one K/V block of the loop: its S, the previous P V, a softmax
            boundary = sum(per_tile[k] for k in BOUNDARY)
            covered = sum(v[k] for k in PHASES) / max(v["total"], 1)
            print("%-34s %3d %6d %8.0f %8.0f %8.0f %9.0f %8.0f %8.0f %8.0f %9.0f %9.2f %7.1f%%" % (
                os.path.basename(path)[:34], v["warpgroup"], v["tiles"], per_tile["q_wait"], per_tile["k0_wait"],
                per_tile["block0"], per_block, per_tile["last_pv"], per_tile["epilogue"], per_tile["between"],
                boundary, boundary / per_block, 100 * covered))
    print("(cycles per tile, summed over the grid's blocks and divided by their tiles; loop/blk per K/V block of the "
          "loop; boundary = every phase but the loop, also in loop blocks; covered = the phases' share of the "
          "warpgroup's cycles from its first tile to its exit)")


if __name__ == "__main__":
    main(sys.argv[1:])
