"""The benchmark's results CSV: its columns, how to read it, and how its numbers are printed.

One home for what tools/bench.py (writes it), tools/plot.py and tools/results_tables.py (the plots
and the README's results) and tools/gen_docs.py (the tables in docs/) must agree on.

    from results_csv import read_results_csv, number, fmt_ms, reference_label

The file: '# key=value' header lines (GPU, driver, CUDA, git revision, ...), then a CSV header and
one row per result. Files written by older versions of bench.py stay readable: a column they lack
gets its default (normalize_row: non-causal, kv_heads = heads, no ALiBi, the series those imply),
a column this version does not know is kept as it is.
Standard library only.
"""

import csv
import math

# The columns bench.py writes, in order. Every row read has all of them.
#   series    which comparison the row belongs to (SERIES)
#   kv_heads  key/value heads (= heads, or fewer: grouped-query attention)
#   causal    1: causal masking (aligned to the bottom-right; bench.py runs it at seq_q = seq_kv only)
#   alibi     1: ALiBi position bias added to the scores
#   part      the part of a job run in parts (bench.py --part, then --merge); empty for one-piece runs
COLUMNS = ["impl", "kind", "series", "dtype", "head_dim", "batch", "heads", "kv_heads", "causal", "alibi", "seq_q",
           "seq_kv", "median_ms", "min_ms", "tflops", "pct_of_fa2", "pct_of_cudnn", "max_abs_err", "rel_l2_err",
           "status", "part"]

# What makes two rows the same problem (a stage and its references share it).
SHAPE_COLUMNS = ["dtype", "head_dim", "batch", "heads", "kv_heads", "causal", "alibi", "seq_q", "seq_kv"]

# The comparisons a run measures, each a set of rows with a table of its own: series -> (stage.json
# feature a stage must declare to be run in it, or None for every stage; what it compares).
SERIES = {
    "headline": (None, "non-causal attention at the headline lengths, every stage against FA2 and cuDNN"),
    "causal": ("causal", "causal attention at seq_q = seq_kv against FA2 and cuDNN with is_causal=True"),
    "any_length": ("any_length", "lengths that are not multiples of any tile (S = 1000, 4000): TFLOP/s per useful "
                                 "FLOP against the same stage at 1024 and 4096"),
    "gqa": ("gqa", "grouped-query attention (fewer K/V heads than query heads) against FA2 and cuDNN with "
                   "enable_gqa=True"),
    "alibi": ("alibi", "ALiBi against the same stage without it (PyTorch's fused backends take no ALiBi)"),
}

# The references measured in the same run as the stages: impl name -> (long, short) label.
REFERENCES = {"fa2": ("FlashAttention-2 (PyTorch flash backend)", "FA2"),
              "cudnn": ("cuDNN (PyTorch cudnn backend)", "cuDNN")}

# pct_of_<impl> = 100 * that reference's median / this row's median, same shape, same run.
RATIO_COLUMNS = {"pct_of_fa2": "fa2", "pct_of_cudnn": "cudnn"}


def reference_label(impl, short=False):
    """'FlashAttention-2 (PyTorch flash backend)' / 'FA2' for fa2; the name itself for an unknown impl."""
    labels = REFERENCES.get(impl)
    return labels[1 if short else 0] if labels else impl


def number(text):
    """A CSV cell as a float, or None for an empty, non-numeric or NaN cell."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value else None


def fmt_ms(ms):
    """A time in milliseconds to 4 significant digits, without an exponent: 0.4480, 3.493, 13.54, 331.2, 1234."""
    if ms <= 0:
        return "%.4f" % ms
    decimals = max(0, 3 - math.floor(math.log10(ms)))
    return "%.*f" % (decimals, ms)


def attention_flops(batch, heads, seq_q, seq_kv, head_dim, causal=False):
    """FLOPs of one forward pass: 4 * batch * heads * (query, key) pairs * head_dim (two matmuls).
    Causal (aligned to the bottom-right) counts only the pairs on and below the diagonal as a
    continuous area, so that seq_q = seq_kv gives half the non-causal count, the FlashAttention
    papers' convention. Mirrors fa::attention_flops in common/harness.h."""
    if not causal:
        pairs = float(seq_q) * seq_kv
    elif seq_q <= seq_kv:
        pairs = float(seq_q) * seq_kv - float(seq_q) * seq_q / 2.0
    else:
        pairs = float(seq_kv) * seq_kv / 2.0
    return 4.0 * batch * heads * pairs * head_dim


def timing_of(meta):
    """How a CSV's rows were timed: 'rounds' (every implementation of a shape once per round, tools/
    interleaved.py) or 'separate' (each in a series of its own); a CSV from before its '# timing='
    line: separate."""
    return meta.get("timing", "separate")


# The time of a row that its TFLOP/s and every comparison (% of FA2 and cuDNN, ALiBi's cost, the
# any-length ratio, the change against the parent) come from: the median of its launches where each
# result was timed separately; the minimum over the rounds where all were timed in the same rounds.
# In a full run's rounds the launches of one implementation spread by 8-10% at S >= 4096 (its
# predecessor's power draw sets its clock), and medians of 20 rounds left two kernels with the same
# SASS up to 7.3% apart on the H200 while their minima agreed within 0.8% (docs/benchmarking.md,
# "The statistic").
STATISTIC = {"separate": ("median_ms", "median"), "rounds": ("min_ms", "minimum")}


def time_column(timing):
    """'median_ms' or 'min_ms': the column a CSV timed so is compared by (STATISTIC)."""
    return STATISTIC[timing][0]


def statistic_word(timing):
    """'median' or 'minimum', for the text generated from a CSV timed so."""
    return STATISTIC[timing][1]


def derive_from_time(rows, timing):
    """Sets tflops and the pct_of_<reference> columns of every row from its time_column(timing):
    TFLOP/s of the row's useful FLOPs, ratios to the references of the same shape in the same part
    (in place; rows that did not pass have none). bench.py's rows in rounds, and --merge of parts
    timed in rounds, whichever statistic the parts wrote."""
    column = time_column(timing)
    for row in rows:
        ms = number(row.get(column)) if passed(row) else None
        flops = attention_flops(int(row["batch"]), int(row["heads"]), int(row["seq_q"]), int(row["seq_kv"]),
                                int(row["head_dim"]), str(row.get("causal", "0")) == "1")
        row["tflops"] = "%.6g" % (flops / (ms * 1e-3) / 1e12) if ms else ""
        for ratio in RATIO_COLUMNS:
            row[ratio] = ""
    return fill_reference_ratios(rows, column)


def pair_lengths(seqs, any_length_seqs):
    """{any-length value: the headline length whose rounds it shares (bench.py --timing rounds) and
    is compared with in a CSV timed so, or None}: each value, shortest first, takes the shortest
    headline length >= it that no shorter value took (1000 -> 1024, 4000 -> 4096); a value left
    without one has rounds of its own."""
    free = sorted(set(seqs))
    pairs = {}
    for length in sorted(set(any_length_seqs)):
        pairs[length] = next((s for s in free if s >= length), None)
        if pairs[length] is not None:
            free.remove(pairs[length])
    return pairs


def default_series(row):
    """The series of a row from a CSV written before the series column existed."""
    if str(row.get("causal", "0")) not in ("", "0"):
        return "causal"
    if str(row.get("alibi", "0")) not in ("", "0"):
        return "alibi"
    if str(row.get("kv_heads", "")) not in ("", str(row.get("heads", ""))):
        return "gqa"
    return "headline"


def shape_key(row):
    """What makes two rows the same problem (a stage and its references share it)."""
    return tuple(str(row.get(c, "")) for c in SHAPE_COLUMNS)


def passed(row):
    """True for a row that passed its check and has a time."""
    return row is not None and row.get("status") == "PASS" and number(row.get("median_ms")) is not None


def fill_reference_ratios(rows, time="median_ms"):
    """Sets every empty pct_of_<reference> cell that both times allow (a row that did not pass has none),
    from the reference of the same shape in the same part (a run in parts: each row's ratio comes from
    the references measured in its own part), by the column `time` (time_column). bench.py leaves them
    all empty and calls this; a CSV from before pct_of_cudnn existed gets it here."""
    reference_ms = {}
    for row in rows:
        if row.get("impl") in REFERENCES and row.get("kind") == "reference" and passed(row):
            reference_ms[(row["impl"], shape_key(row), row.get("part", ""))] = number(row[time])
    for row in rows:
        for column, reference in RATIO_COLUMNS.items():
            if row.get(column, "") != "":
                continue
            ms = number(row.get(time)) if passed(row) else None
            ref = reference_ms.get((reference, shape_key(row), row.get("part", "")))
            row[column] = "%.2f" % (100.0 * ref / ms) if ms and ref else ""
    return rows


def normalize_row(row):
    """A row as every reader expects it, whichever version of bench.py wrote it (in place)."""
    for column in COLUMNS:
        if row.get(column) is None:
            row[column] = ""
    row["status"] = " ".join(row["status"].split())
    if not row["kind"]:
        row["kind"] = "reference" if row["impl"] in REFERENCES else "stage"
    if not row.get("kv_heads"):
        row["kv_heads"] = row["heads"]
    for flag in ("causal", "alibi"):
        if not row.get(flag):
            row[flag] = "0"
    if not row.get("series"):
        row["series"] = default_series(row)
    return row


def read_commented_csv(path):
    """(meta: {key: value} from the '# key=value' lines, the first one of a key wins; the other
    non-blank lines, for csv.DictReader): the results CSVs of bench.py and decode_bench.py and
    scripts/microbench.sh's ceilings share this layout."""
    meta, lines = {}, []
    with open(path, newline="", encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):
                key, sep, value = line[1:].strip().partition("=")
                if sep:
                    meta.setdefault(key.strip(), value.strip())
            elif line.strip():
                lines.append(line)
    return meta, lines


def read_results_csv(path):
    """(meta: {key: value} from the '# key=value' lines (first one wins), rows: [dict of str]).

    Every row has every column of COLUMNS (normalize_row); pct_of_fa2 and
    pct_of_cudnn are filled in where the file left them out (fill_reference_ratios)."""
    meta, lines = read_commented_csv(path)
    rows = [normalize_row(dict(r)) for r in csv.DictReader(lines)]
    return meta, fill_reference_ratios(rows)


def write_results_csv(path, meta, rows):
    """The file bench.py writes: '# key=value' lines (empty values left out), then COLUMNS."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        for key, value in meta:
            if value == "":
                continue
            f.write("# %s=%s\n" % (key, " ".join(str(value).split())))
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
