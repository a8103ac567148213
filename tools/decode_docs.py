"""The decoding track's measured results on its stage pages (tools/gen_docs.py's "results" section
for a stage of stages/decode/).

A decoding stage is measured by the decoding benchmark (tools/decode_bench.py), not by the prefill
benchmark whose CSV the other tracks' pages show: its page shows the committed decoding CSV
(plots/results/decode_*.csv) with the latest `# date=` that has rows of the stage and of its parent,
so that every number of the table comes from one run, the two stages and the references timed in the
same shuffled rounds. A CSV with the stage alone is shown (no "against the parent" column) only where
no CSV has both. Files with the same bytes (decode_latest.csv is a copy of a dated file) count once,
under the other name.

The table: the shapes at the headline length (seq_kv 16384, the length every committed run has; the
most measured length where a run has none), a row per (seq_q, batch, K/V heads), each cell the time
and its % of the HBM read bandwidth measured in the same run; then one line per other length, the
range of the stage's time against its parent's and of its % of the read bandwidth.
"""

import glob
import os

from cli_util import REPO
from decode_csv import TIME_COLUMN, DecodeCsvError, passed, read_decode_csv
from results_csv import number
from results_tables import change_cell, source_line

DEFAULT_PATTERN = os.path.join(REPO, "plots", "results", "decode_*.csv")
COMMAND = "python3 tools/decode_bench.py"
HEADLINE_SEQ_KV = 16384
REFERENCES = (("fa2", "FA2"), ("cudnn", "cuDNN"))


class Run:
    """One decoding benchmark CSV: its path, its `# key=value` lines and its rows."""

    def __init__(self, path, meta, rows):
        self.path, self.meta, self.rows = path, meta, rows
        self.date = meta.get("date", "")
        self.passed = {r["impl"] for r in rows if passed(r)}

    def has(self, impl):
        return impl in self.passed


def load_runs(pattern=DEFAULT_PATTERN):
    """[Run] of every file that pattern matches, the same bytes once (a name without 'latest' kept)."""
    runs, seen = [], {}
    paths = sorted(glob.glob(pattern), key=lambda p: ("latest" in os.path.basename(p), p))
    for path in paths:
        with open(path, "rb") as f:
            content = f.read()
        if content in seen:
            continue
        seen[content] = path
        try:
            meta, rows = read_decode_csv(path)
        except DecodeCsvError:
            continue  # another benchmark's CSV that happens to match the pattern
        runs.append(Run(path, meta, rows))
    return runs


def choose_run(runs, stage, parent):
    """(run, with_parent): the latest run with passed rows of stage and parent, else the latest with
    the stage's alone; (None, False) where no run has the stage."""
    both = [r for r in runs if r.has(stage) and parent is not None and r.has(parent)]
    if both:
        return max(both, key=lambda r: (r.date, r.path)), True
    alone = [r for r in runs if r.has(stage)]
    if alone:
        return max(alone, key=lambda r: (r.date, r.path)), False
    return None, False


def time_text(ms):
    return "%.1f us" % (ms * 1000.0) if ms < 1.0 else "%.2f ms" % ms


def config_key(row):
    return (row["dtype"], int(row["head_dim"]), int(row["heads"]), row["causal"], row["cache"])


def config_words(key):
    dtype, head_dim, heads, causal, cache = key
    return "%s, head_dim %d, %d query heads, %s, %s cache" % (
        dtype, head_dim, heads, "causal" if causal in ("1", "True", "true") else "non-causal", cache)


def shape_of(row):
    return (int(row["seq_q"]), int(row["batch"]), -int(row["kv_heads"]), int(row["seq_kv"]))


def cell(row):
    """'97.4 us, 86.8%' (the time and its % of the read bandwidth), or why the row has no time."""
    if row is None:
        return "-"
    if not passed(row):
        return (row.get("status") or "-").split(":")[0] or "-"
    pct = number(row.get("pct_of_read_bw"))
    ms = number(row[TIME_COLUMN])
    return time_text(ms) + (", %.1f%%" % pct if pct is not None else "")


def change(mine, theirs):
    if mine is None or theirs is None or not passed(mine) or not passed(theirs):
        return "-"
    return change_cell(number(mine[TIME_COLUMN]), number(theirs[TIME_COLUMN]))


def span(values, fmt):
    lo, hi = min(values), max(values)
    return fmt % lo if fmt % lo == fmt % hi else (fmt % lo) + ".." + (fmt % hi)


def length_label(seq_kv):
    return "%dk" % (seq_kv // 1024) if seq_kv % 1024 == 0 else str(seq_kv)


def results_section(stage, parent, runs):
    """The markdown of a decoding stage's results section (stage and parent: ids; parent may be None)."""
    run, with_parent = choose_run(runs, stage, parent)
    if run is None:
        return ("No committed decoding benchmark CSV has rows of `%s`; measure it with `%s --stages %s%s`."
                % (stage, COMMAND, stage, "," + parent if parent else ""))
    by_shape = {}
    for r in run.rows:
        by_shape[(r["impl"], config_key(r), shape_of(r))] = r
    mine = [r for r in run.rows if r["impl"] == stage]
    lines = ["The decoding benchmark (`%s`): each cell the minimum time over shuffled rounds, with K and V cold in "
             "L2, and its %% of the HBM read bandwidth (the bytes of K and V as stored, Q and O, over the time, "
             "against the %s GB/s that `fa_microbench hbm-read` measured in the same run); %s and the references "
             "in the same rounds, every output checked against fp64 first."
             % (COMMAND, run.meta.get("read_bw_gbytes_per_s", "?"),
                "this stage, its parent" if with_parent else "this stage"), ""]
    for key in sorted({config_key(r) for r in mine}):
        rows = [r for r in mine if config_key(r) == key]
        lengths = sorted({int(r["seq_kv"]) for r in rows})
        headline = HEADLINE_SEQ_KV if HEADLINE_SEQ_KV in lengths else \
            max(lengths, key=lambda n: (sum(1 for r in rows if int(r["seq_kv"]) == n), n))
        lines.append("%s, seq_kv %s:" % (config_words(key), length_label(headline)))
        lines.append("")
        head = ["seq_q", "batch", "K/V heads"] + (["`%s`" % parent] if with_parent else []) + ["this stage"] + \
            (["vs parent"] if with_parent else []) + [label for _, label in REFERENCES]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "---:|" * len(head))
        for r in sorted((r for r in rows if int(r["seq_kv"]) == headline), key=shape_of):
            s = shape_of(r)
            other = {impl: by_shape.get((impl, key, s)) for impl in ([parent] if with_parent else []) +
                     [ref for ref, _ in REFERENCES]}
            cells = [r["seq_q"], r["batch"], r["kv_heads"]]
            if with_parent:
                cells.append(cell(other[parent]))
            cells.append(cell(r))
            if with_parent:
                cells.append(change(r, other[parent]))
            cells += [cell(other[ref]) for ref, _ in REFERENCES]
            lines.append("| " + " | ".join(cells) + " |")
        for n in lengths:
            if n == headline:
                continue
            at = [r for r in rows if int(r["seq_kv"]) == n and passed(r)]
            if not at:
                continue
            pcts = [number(r["pct_of_read_bw"]) for r in at if number(r.get("pct_of_read_bw")) is not None]
            words = ["%d shapes" % len(at)]
            if with_parent:
                pairs = [(r, by_shape.get((parent, key, shape_of(r)))) for r in at]
                changes = [100.0 * (number(r[TIME_COLUMN]) / number(p[TIME_COLUMN]) - 1.0)
                           for r, p in pairs if p is not None and passed(p)]
                if changes:
                    words.append("time against the parent %s" % span(changes, "%+.1f%%"))
            if pcts:
                words.append("%s of the read bandwidth" % span(pcts, "%.1f%%"))
            if not lines[-1].startswith("- "):
                lines.append("")
            lines.append("- seq_kv %s: %s." % (length_label(n), "; ".join(words)))
        lines.append("")
    lines.append(source_line(run.meta, run.path))
    if run.meta.get("tree"):
        lines.append("The run's tree: %s." % run.meta["tree"].rstrip("."))
    lines.append("Every decoding result: [docs/results.md](../../results.md#decoding-benchmark).")
    return "\n".join(lines)
