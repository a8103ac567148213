"""The decoding benchmark's arithmetic and CSV: the bytes a decoding step must move, the copies of
the KV cache that keep it cold in L2, the columns, and how the file is read and written.

One home for what tools/decode_bench.py (measures, writes) and tools/plot.py --decode (draws) must
agree on. Standard library only, so that the CPU tests run it without PyTorch.

    from decode_csv import decode_bytes, kv_cache_bytes, rotation_copies, read_decode_csv

Decoding is memory-bound (docs/benchmarking.md, Decoding): its figure of merit is bytes per second.
The bytes counted are those any implementation must move at least once per step:

    K and V read   batch * kv_heads * seq_kv * head_dim * 2 (K and V) * element bytes
    Q read         batch * seq_q * heads * head_dim * element bytes
    O written      batch * seq_q * heads * head_dim * element bytes

so a grouped-query or multi-query cache counts its K/V heads once, however many query heads read
them, and a causal mask aligned to the bottom-right changes nothing (the last query row sees every
key). Workspace traffic (split-KV's partial O and LSE) is not counted: it is the implementation's
cost, and shows as a lower GB/s. A paged cache (cache "paged<N>": pages of N rows in a pool, found
through a block table) moves the same K and V, plus the block table's entries that the sequences'
keys use, 4 bytes each (block_table_bytes; a row of the pool past a sequence's end is not read).
"""

import csv
import math

from results_csv import number, read_commented_csv

ELEMENT_BYTES = {"fp16": 2, "bf16": 2}

# The columns tools/decode_bench.py writes, in order.
#   kind            stage (this project's) or reference (fa2, cudnn: PyTorch's SDPA backends)
#   causal          1: bottom-right causal mask (only for seq_q > 1; at seq_q = 1 it masks nothing)
#   cache           contiguous: K and V [batch, seq_kv, kv_heads, head_dim]; paged<N> (e.g. paged16):
#                   pools of pages of N rows, [num_pages, N, kv_heads, head_dim], the pages in a random
#                   order, found through a block table (only stages declaring "paged_kv"). fa2 and
#                   cudnn rows are always contiguous (SDPA takes no block table), and a paged row's
#                   pct_of_fa2 and pct_of_cudnn compare it with their contiguous time in the same
#                   rounds. A CSV without the column (before paged caches) reads as contiguous
#   kv_copies       the copies of K and V that the launches rotate over (cold L2; rotation_copies)
#   bytes           decode_bytes: K and V read + Q read + O written, once (+ the block table's
#                   entries in use, for a paged row)
#   median_ms       median over the timed rounds
#   min_ms          minimum over the timed rounds: the row's time (the statistic of rounds, as in
#                   tools/results_csv.py STATISTIC), from which the next four columns come
#   gbytes_per_s    bytes / min_ms, in 10^9 bytes per second
#   pct_of_read_bw  gbytes_per_s as a % of the HBM read bandwidth measured in the same run
#                   (header read_bw_gbytes_per_s)
#   pct_of_fa2      100 * FA2's min_ms / this row's min_ms, same shape, same rounds (and pct_of_cudnn)
#   max_abs_err     against fp64 attention on the sampled rows
#   status          PASS, FAIL: ..., ERROR: ..., unavailable: ... (a backend without a kernel for
#                   the case), skipped: ... (the case does not fit in the GPU's memory); only PASS
#                   rows have times
COLUMNS = ["impl", "kind", "dtype", "head_dim", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "causal",
           "cache", "kv_copies", "bytes", "median_ms", "min_ms", "gbytes_per_s", "pct_of_read_bw", "pct_of_fa2",
           "pct_of_cudnn", "max_abs_err", "status"]

# Columns an older CSV may lack, and the value its rows read as.
OPTIONAL_COLUMNS = {"cache": "contiguous"}
CONTIGUOUS = "contiguous"

# What makes two rows the same problem (the cache is not part of it: a paged row is the same
# attention as the contiguous one, and is compared with the references' contiguous time).
SHAPE_COLUMNS = ["dtype", "head_dim", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "causal"]

REFERENCES = ("fa2", "cudnn")
TIME_COLUMN = "min_ms"

# Cold L2: the copies of K and V that the launches rotate over hold at least L2_FACTOR x the L2
# together, so that much data goes through the cache between two reads of one byte (rotation_copies).
L2_FACTOR = 4


def element_bytes(dtype):
    try:
        return ELEMENT_BYTES[dtype]
    except KeyError:
        raise ValueError("dtype must be one of %s, not %r" % (", ".join(ELEMENT_BYTES), dtype))


def kv_cache_bytes(batch, kv_heads, seq_kv, head_dim, dtype):
    """Bytes of K and V together: batch * kv_heads * seq_kv * head_dim * 2 * element bytes."""
    return batch * kv_heads * seq_kv * head_dim * 2 * element_bytes(dtype)


def decode_bytes(batch, heads, kv_heads, seq_q, seq_kv, head_dim, dtype):
    """The bytes one decoding step moves at least once: K and V read, Q read, O written."""
    q_or_o = batch * seq_q * heads * head_dim * element_bytes(dtype)
    return kv_cache_bytes(batch, kv_heads, seq_kv, head_dim, dtype) + 2 * q_or_o


def cache_label(page_size):
    """The cache column: 'contiguous' for page_size 0 or None, else 'paged<page_size>'."""
    return "paged%d" % page_size if page_size else CONTIGUOUS


def page_size_of(label):
    """cache_label's inverse: 'paged16' -> 16, 'contiguous' (or '') -> 0; ValueError otherwise."""
    if label in (CONTIGUOUS, ""):
        return 0
    if label.startswith("paged") and label[5:].isdigit() and int(label[5:]) > 0:
        return int(label[5:])
    raise ValueError("cache must be contiguous or paged<rows per page>, not %r" % label)


def pages_per_sequence(seq_kv, page_size):
    """ceil(seq_kv / page_size): the block table's entries per sequence (max_pages)."""
    return -(-seq_kv // page_size)


def block_table_bytes(batch, seq_kv, page_size):
    """The block table's entries that the keys use: batch * ceil(seq_kv / page_size) int32."""
    return batch * pages_per_sequence(seq_kv, page_size) * 4


def pool_bytes(batch, kv_heads, seq_kv, head_dim, dtype, page_size):
    """Bytes of the pools of K and V pages together: every sequence's pages, the last one whole
    (its rows past seq_kv are never read)."""
    return kv_cache_bytes(batch, kv_heads, pages_per_sequence(seq_kv, page_size) * page_size, head_dim, dtype)


def row_bytes(batch, heads, kv_heads, seq_q, seq_kv, head_dim, dtype, page_size=0):
    """A row's bytes column: decode_bytes, plus block_table_bytes for a paged cache (page_size > 0)."""
    nbytes = decode_bytes(batch, heads, kv_heads, seq_q, seq_kv, head_dim, dtype)
    return nbytes + (block_table_bytes(batch, seq_kv, page_size) if page_size else 0)


def rotation_copies(kv_bytes, l2_bytes, budget_bytes=None, factor=L2_FACTOR):
    """How many copies of a KV cache of kv_bytes the timed launches rotate over, so that every launch
    reads a copy that is not in an L2 of l2_bytes: the smallest count whose total reaches factor x
    L2 (1 for a cache that large itself). Launch n reads copy n mod count, every byte of it once, so
    between two reads of one byte every other byte of every copy is read once: count x kv_bytes >=
    factor x L2 bytes go through the cache in between, and an LRU-like cache has evicted it.

    budget_bytes: the memory the copies may take (None: no limit). Returns (count, None), or (0,
    reason) when the needed copies do not fit (a smaller count would leave the cache warm)."""
    if kv_bytes <= 0 or l2_bytes <= 0:
        raise ValueError("kv_bytes and l2_bytes must be positive (got %r, %r)" % (kv_bytes, l2_bytes))
    count = max(1, math.ceil(factor * l2_bytes / kv_bytes))
    if budget_bytes is not None and count * kv_bytes > budget_bytes:
        return 0, ("%d %s of K and V (%s) %s in the %s available" % (
            count, "copy" if count == 1 else "copies", fmt_bytes(count * kv_bytes),
            "does not fit" if count == 1 else "do not fit", fmt_bytes(budget_bytes)))
    return count, None


def gbytes_per_s(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def fmt_bytes(n):
    """'268.4 MB', '2.15 GB': decimal units, as bandwidths count."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return "%.4g %s" % (n / scale, unit)
    return "%d B" % n


def passed(row):
    return row.get("status") == "PASS" and number(row.get(TIME_COLUMN)) is not None


def shape_key(row):
    return tuple(str(row.get(c, "")) for c in SHAPE_COLUMNS)


def fill_metrics(rows, read_bw_gbytes_per_s):
    """Sets gbytes_per_s, pct_of_read_bw, pct_of_fa2 and pct_of_cudnn of every row from its bytes and
    min_ms (in place; rows that did not pass get none). read_bw_gbytes_per_s: the measured HBM read
    bandwidth, or None (no pct_of_read_bw). A row's pct_of_fa2 and pct_of_cudnn come from the
    reference's row of the same shape on the contiguous cache, whatever the row's own cache."""
    reference_ms = {(r["impl"], shape_key(r)): number(r[TIME_COLUMN])
                    for r in rows if r.get("kind") == "reference" and r["impl"] in REFERENCES and passed(r)
                    and (r.get("cache") or CONTIGUOUS) == CONTIGUOUS}
    for row in rows:
        for column in ("gbytes_per_s", "pct_of_read_bw", "pct_of_fa2", "pct_of_cudnn"):
            row[column] = ""
        if not passed(row):
            continue
        ms = number(row[TIME_COLUMN])
        rate = gbytes_per_s(int(row["bytes"]), ms)
        row["gbytes_per_s"] = "%.1f" % rate
        if read_bw_gbytes_per_s:
            row["pct_of_read_bw"] = "%.2f" % (100.0 * rate / read_bw_gbytes_per_s)
        for ref in REFERENCES:
            ref_ms = reference_ms.get((ref, shape_key(row)))
            if ref_ms:
                row["pct_of_" + ref] = "%.2f" % (100.0 * ref_ms / ms)
    return rows


def write_decode_csv(path, meta, rows):
    """'# key=value' lines (empty values left out, whitespace folded), then COLUMNS."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        for key, value in meta:
            if value == "" or value is None:
                continue
            f.write("# %s=%s\n" % (key, " ".join(str(value).split())))
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


class DecodeCsvError(Exception):
    pass


def read_decode_csv(path):
    """(meta {key: value}, rows [dict of str]); DecodeCsvError if a column of COLUMNS is missing. A
    column of OPTIONAL_COLUMNS that the file lacks (it was written before the column existed) is
    filled with its value there: every row of a CSV without `cache` is contiguous."""
    meta, lines = read_commented_csv(path)
    reader = csv.DictReader(lines)
    fields = reader.fieldnames or []
    missing = [c for c in COLUMNS if c not in fields and c not in OPTIONAL_COLUMNS]
    if missing:
        raise DecodeCsvError("%s is not a decoding benchmark CSV: no column %s" % (path, ", ".join(missing)))
    rows = [dict(r) for r in reader]
    for column, value in OPTIONAL_COLUMNS.items():
        for r in rows:
            if not r.get(column):
                r[column] = value
    return meta, rows
