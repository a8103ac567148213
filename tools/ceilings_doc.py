#!/usr/bin/env python3
"""The generated table of docs/ceilings.md, from a CSV that scripts/microbench.sh wrote.

    python3 tools/ceilings_doc.py [--csv PATH]     prints the section (default CSV:
                                                    plots/results/ceilings_latest.csv)

tools/gen_docs.py calls ceilings_section(csv_path) for the part of docs/ceilings.md between
'<!-- ceilings:begin -->' and '<!-- ceilings:end -->'. Every number comes from the CSV; the only
constants here are per-architecture facts (tensor-core FLOP per clock per SM) and datasheet
bandwidths, each with its source, used for the "% of" column.
Standard library only (Python 3.8+).
"""

import argparse
import csv
import os
import sys

from cli_util import REPO
from results_csv import number, read_commented_csv
DEFAULT_CSV = os.path.join(REPO, "plots", "results", "ceilings_latest.csv")

# Dense fp16/bf16 tensor-core FLOP per clock per SM, with fp32 accumulation. sm_90: 989.4 TFLOP/s
# on the H100 SXM's 132 SMs at 1830 MHz (NVIDIA H100 whitepaper) = 4096; the H200 has the same SMs.
# sm_80: 312 TFLOP/s on the A100's 108 SMs at 1410 MHz (NVIDIA A100 whitepaper) = 2048.
TENSOR_FLOP_PER_CLOCK_PER_SM = {"90": 4096, "80": 2048}
# Datasheet HBM bandwidth in GB/s (10^9 bytes/s), by the GPU name the CSV records.
DATASHEET_HBM_GBPS = {
    "NVIDIA H200": (4800, "H200 datasheet: 4.8 TB/s"),
    "NVIDIA H100 80GB HBM3": (3350, "H100 SXM datasheet: 3.35 TB/s"),
}

LABELS = {
    "mma_sync_m16n8k16": "`mma.sync` m16n8k16 peak (operands in registers)",
    "wgmma_m64n256k16_2wg": "`wgmma` m64n256k16 peak, 2 warpgroups per SM",
    "wgmma_m64n256k16_1wg": "`wgmma` m64n256k16 peak, 1 warpgroup per SM",
    "hbm_read": "HBM streaming read (bytes read)",
    "d2d_copy_memcpy": "device-to-device copy, `cudaMemcpyAsync` (read + write)",
    "d2d_copy_kernel": "device-to-device copy, 16-byte copy kernel (read + write)",
}
NO_RESULTS = ("No ceilings measured yet: run `bash scripts/microbench.sh` on the GPU, commit "
              "`plots/results/ceilings_<gpu>_<date>.csv` and `ceilings_latest.csv`, then "
              "`python3 tools/gen_docs.py`.")


def read_ceilings_csv(path):
    """(meta: {key: value} from the '# key=value' lines, first one wins; rows: [dict]): the file
    scripts/microbench.sh writes."""
    meta, lines = read_commented_csv(path)
    return meta, list(csv.DictReader(lines))


def sm_clocks(rows):
    """{(result name, dtype): MHz}: the SM clock measured during each MMA result (the rows
    sm_clock_during_<name>, same dtype; sm_clock_during_mma_sync is mma_sync_m16n8k16's)."""
    clocks = {}
    for row in rows:
        if row["name"].startswith("sm_clock_during_"):
            name = row["name"][len("sm_clock_during_"):]
            clocks[("mma_sync_m16n8k16" if name == "mma_sync" else name, row["dtype"])] = number(row["value"])
    return clocks


def rel(path):
    return os.path.relpath(os.path.abspath(path), REPO)


def fmt(value, unit):
    if value is None:
        return "-"
    return "%.0f %s" % (value, unit) if unit in ("GB/s", "MHz") else "%.1f %s" % (value, unit)


def percent_of(row, clocks, meta):
    """'NN% of ...' for a row, or '' where no reference applies."""
    value = number(row.get("value"))
    if value is None:
        return ""
    if row["unit"] == "TFLOP/s":
        per_clock = TENSOR_FLOP_PER_CLOCK_PER_SM.get(meta.get("compute_capability", ""))
        sms = number(meta.get("sms"))
        clock = clocks.get((row["name"], row["dtype"]))
        if not (per_clock and sms and clock):
            return ""
        peak = per_clock * sms * clock * 1e6 / 1e12
        return "%.0f%% of %.0f (dense peak at %.0f MHz)" % (100 * value / peak, peak, clock)
    if row["unit"] == "GB/s" and meta.get("gpu") in DATASHEET_HBM_GBPS:
        gbps, source = DATASHEET_HBM_GBPS[meta["gpu"]]
        return "%.0f%% of %s" % (100 * value / gbps, source)
    return ""


def ceilings_section(csv_path=DEFAULT_CSV):
    """The markdown between the ceilings markers of docs/ceilings.md, from `csv_path`."""
    if not os.path.exists(csv_path):
        return NO_RESULTS + "\n"
    meta, rows = read_ceilings_csv(csv_path)
    clocks = sm_clocks(rows)
    lines = [
        "Measured on %s (driver %s, CUDA %s, %s SMs, power limit %s W), %s, git `%s`; SM clock %s MHz at "
        "start, %s MHz at the end (max %s). Source: `%s`."
        % (meta.get("gpu", "?"), meta.get("driver", "?"), meta.get("cuda", "?"), meta.get("sms", "?"),
           meta.get("power_limit_w", "?"), meta.get("date", "?"), meta.get("git", "?"),
           meta.get("sm_clock_mhz_at_start", "?"), meta.get("sm_clock_mhz_at_end", "?"),
           meta.get("sm_clock_max_mhz", "?"), rel(csv_path)),
        "",
        "| Ceiling | dtype | Measured | SM clock during | Compared with |",
        "|---|---|---:|---:|---|",
    ]
    for row in rows:
        if row["name"].startswith("sm_clock_during_"):
            continue
        clock = clocks.get((row["name"], row["dtype"]))
        lines.append("| %s | %s | %s | %s | %s |" % (
            LABELS.get(row["name"], "`%s`" % row["name"]), row["dtype"], fmt(number(row["value"]), row["unit"]),
            fmt(clock, "MHz") if clock else "", percent_of(row, clocks, meta)))
    for key, title in (("skipped", "Skipped"), ("failed", "FAILED (no number reported)")):
        if meta.get(key):
            lines += ["", "%s: %s." % (title, meta[key])]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--csv", default=DEFAULT_CSV, help="ceilings CSV (default plots/results/ceilings_latest.csv)")
    args = p.parse_args(argv)
    sys.stdout.write(ceilings_section(args.csv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
