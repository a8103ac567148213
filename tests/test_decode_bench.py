#!/usr/bin/env python3
"""CPU test of the decoding benchmark (tools/decode_bench.py, tools/decode_csv.py, tools/plot.py
--decode), without a GPU or PyTorch.

  bytes           decode_bytes and kv_cache_bytes for MHA, GQA and MQA caches, seq_q 1 and 8, fp16
                  and bf16: K/V heads counted once, Q read and O written added; a paged row's bytes:
                  the same plus the block table's entries, and its pools' size
  cold L2         rotation_copies: the smallest count holding factor x L2, 1 for a cache that large,
                  no copies (and a reason) where they do not fit; the Rotation's launch order
  CSV             the columns, written and read back; GB/s, % of read bandwidth and % of FA2 and
                  cuDNN from the minimum (a paged row's against their contiguous time); none for a row
                  that failed; a CSV without the columns refused; an older CSV without `cache` read
                  as contiguous
  options         bad shapes and values exit 2 with a message naming the problem
  dry run         the cases, the implementations (every stage declaring split_kv, and the non-split
                  parent; decode_04_paged_kv also on a paged cache, the others named as not), the
                  copies, a skipped case, a case whose pools do not fit, and the estimated time, from
                  stage.json alone; --cache and --page-size
  paged cache     paged_cache and random_paged_cache on numpy stand-ins for tensors: the block table a
                  permutation of the pool's pages, every sequence's keys gathered back from the pool
                  equal to its contiguous keys, a last page's rows past seq_kv NaN; check() on a pool
                  hands check_output the gathered keys (skipped without numpy, exit 77)
  stage choice    decode_stages on made-up declarations: parents, selection by id or <track>_NN, an
                  unknown name, an sm_90a stage on another GPU
  read bandwidth  fa_microbench's info and hbm-read rows parsed (a fake program), a missing one named
  causal          FA2 through causal_lower_right only where can_use_flash_attention says the flash
                  kernel takes the case (else unavailable); cuDNN with is_causal=True, its output
                  called unavailable (not failed) where it is the top-left mask's
  a whole run     decode_bench.py's measure() on a fake PyTorch, library and fa_microbench: every
                  output checked before it is timed, a failing stage and an unavailable backend
                  without times, consecutive launches on consecutive copies of K and V, the spin
                  kernel before every launch, the CSV's header lines and rows; a second run with
                  decode_04_paged_kv on a paged cache: the block table, its batch stride, max_pages,
                  page_size and seq_kv in the launch's parameters, the pools rotated as the copies,
                  the check on the paged output and its pools, the paged row's bytes and % of FA2
  the library     where build/libfa_capi.so is built: paged_params' struct (seq_kv, the block table,
                  its batch stride, max_pages, page_size, the pool's strides) passes the launcher's
                  block-table checks at pages of 16, 64 and 256 rows, pages of 24 and a stage without
                  paged_kv refused (an invalid softmax scale keeps every call from launching)
  the plot        tools/plot.py --decode on a synthetic CSV: one PNG per configuration, the same
                  bytes twice; a paged series; an older CSV without `cache` (skipped, exit 77, where
                  matplotlib is not installed)

The numbers are FAKE. Exit codes: 0 pass, 1 fail, 77 matplotlib or numpy missing (everything else
passed).
"""

import contextlib
import io
import os
import stat
import subprocess
import sys
import tempfile
import types
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOOLS = os.path.join(REPO, "tools")
sys.path.insert(0, TOOLS)
import decode_bench  # noqa: E402
import decode_csv  # noqa: E402
import stages  # noqa: E402
from decode_csv import decode_bytes, kv_cache_bytes, rotation_copies  # noqa: E402

failures = []


def check(what, ok):
    if not ok:
        failures.append(what)


# --- bytes --------------------------------------------------------------------------------------
# The page of decode_01_split_kv: batch 1, 32 query heads, head_dim 128, seq_kv 16384, fp16.
for kv_heads, want in ((32, 268435456), (8, 67108864), (1, 8388608)):
    got = kv_cache_bytes(1, kv_heads, 16384, 128, "fp16")
    check("kv_cache_bytes, %d K/V heads: %d, want %d" % (kv_heads, got, want), got == want)
    q_and_o = 2 * 1 * 1 * 32 * 128 * 2
    check("decode_bytes at seq_q 1 adds Q read and O written (%d K/V heads)" % kv_heads,
          decode_bytes(1, 32, kv_heads, 1, 16384, 128, "fp16") == want + q_and_o)
    check("decode_bytes at seq_q 8: 8 query rows of Q and O per sequence (%d K/V heads)" % kv_heads,
          decode_bytes(1, 32, kv_heads, 8, 16384, 128, "fp16") == want + 8 * q_and_o)
check("bf16 counts 2 bytes as fp16", decode_bytes(16, 32, 8, 8, 4096, 64, "bf16")
      == decode_bytes(16, 32, 8, 8, 4096, 64, "fp16") == 16 * 8 * 4096 * 64 * 4 + 2 * 16 * 8 * 32 * 64 * 2)
check("MQA reads 1/32 of MHA's K and V", kv_cache_bytes(64, 1, 131072, 128, "fp16") * 32
      == kv_cache_bytes(64, 32, 131072, 128, "fp16"))
try:
    decode_bytes(1, 32, 8, 1, 4096, 128, "fp8")
    failures.append("decode_bytes took dtype fp8")
except ValueError:
    pass
# A paged cache: the same K and V, Q and O, plus the block table's entries (4 bytes each).
check("block table: batch x ceil(seq_kv / page_size) int32",
      decode_csv.block_table_bytes(16, 16384, 16) == 16 * 1024 * 4
      and decode_csv.block_table_bytes(1, 1000, 64) == 16 * 4)
check("a paged row's bytes: decode_bytes + the table's",
      decode_csv.row_bytes(16, 32, 8, 1, 16384, 128, "fp16", 16)
      == decode_bytes(16, 32, 8, 1, 16384, 128, "fp16") + 16 * 1024 * 4
      and decode_csv.row_bytes(16, 32, 8, 1, 16384, 128, "fp16") == decode_bytes(16, 32, 8, 1, 16384, 128, "fp16"))
check("pools: whole pages (1000 keys in pages of 64: 16 pages, 1024 rows)",
      decode_csv.pool_bytes(2, 8, 1000, 128, "fp16", 64) == kv_cache_bytes(2, 8, 1024, 128, "fp16")
      and decode_csv.pool_bytes(2, 8, 4096, 128, "fp16", 16) == kv_cache_bytes(2, 8, 4096, 128, "fp16"))
check("cache labels", (decode_csv.cache_label(0), decode_csv.cache_label(16), decode_csv.page_size_of("paged256"),
                       decode_csv.page_size_of("contiguous")) == ("contiguous", "paged16", 256, 0))
for bad in ("paged", "pagedx", "paged0", "flat"):
    try:
        decode_csv.page_size_of(bad)
        failures.append("page_size_of took %r" % bad)
    except ValueError:
        pass

# --- cold L2 ------------------------------------------------------------------------------------
L2 = 50 * 2 ** 20  # the H100's
for kv in (2097152, 8388608, 33554432, 67108864, 52428800, 134217728, 209715200, 268435456, 34359738368):
    count, why = rotation_copies(kv, L2)
    check("rotation_copies(%d): %r, %r" % (kv, count, why),
          why is None and count * kv >= 4 * L2 and (count == 1 or (count - 1) * kv < 4 * L2))
check("MQA, batch 1, seq_kv 4k (2 MiB of K and V): 100 copies on a 50 MiB L2",
      rotation_copies(kv_cache_bytes(1, 1, 4096, 128, "fp16"), L2) == (100, None))
check("a cache of 4 x L2 needs no second copy", rotation_copies(4 * L2, L2) == (1, None))
check("factor 2 halves the copies", rotation_copies(2097152, L2, factor=2) == (50, None))
count, why = rotation_copies(2097152, L2, budget_bytes=100 * 2097152)
check("100 copies fit in 100 copies' bytes", (count, why) == (100, None))
count, why = rotation_copies(2097152, L2, budget_bytes=99 * 2097152)
check("99 copies' bytes: none, and why (%r)" % why, count == 0 and "100 copies" in why and "do not fit" in why)
count, why = rotation_copies(137438953472, L2, budget_bytes=80 * 10 ** 9)
check("a 137 GB cache on an 80 GB card: skipped (%r)" % why, count == 0 and "1 copy" in why)
for bad in ((0, L2), (L2, 0)):
    try:
        rotation_copies(*bad)
        failures.append("rotation_copies%r accepted" % (bad,))
    except ValueError:
        pass
rotation = decode_bench.Rotation(3)
check("Rotation: launch n reads copy n mod count", [rotation.next() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0])
picks = decode_bench.sampled_batches(64, 3, 5)
check("sampled batches: the first, the last and one more (%r)" % picks, len(picks) == 3 and picks[0] == 0
      and picks[-1] == 63 and picks == decode_bench.sampled_batches(64, 3, 5))
check("sampled batches: every batch of a small one", decode_bench.sampled_batches(2, 3, 5) == [0, 1])

# --- CSV ----------------------------------------------------------------------------------------
check("the CSV's columns", decode_csv.COLUMNS == [
    "impl", "kind", "dtype", "head_dim", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "causal", "cache", "kv_copies",
    "bytes", "median_ms", "min_ms", "gbytes_per_s", "pct_of_read_bw", "pct_of_fa2", "pct_of_cudnn", "max_abs_err",
    "status"])


def row(impl, kind, min_ms, status="PASS", kv_heads=8, seq_kv=16384, batch=1, cache="contiguous"):
    r = {c: "" for c in decode_csv.COLUMNS}
    nbytes = decode_csv.row_bytes(batch, 32, kv_heads, 1, seq_kv, 128, "fp16", decode_csv.page_size_of(cache))
    r.update(impl=impl, kind=kind, dtype="fp16", head_dim=128, batch=batch, heads=32, kv_heads=kv_heads, seq_q=1,
             seq_kv=seq_kv, causal=0, cache=cache, kv_copies=4, bytes=nbytes, status=status,
             median_ms="" if min_ms is None else min_ms * 1.1, min_ms="" if min_ms is None else min_ms)
    return r


rows = [row("decode_01_split_kv", "stage", 0.025), row("ampere_14_lse", "stage", None, "FAIL: made up"),
        row("fa2", "reference", 0.0625), row("cudnn", "reference", 0.05),
        row("decode_01_split_kv", "stage", 0.1, kv_heads=32),
        row("decode_04_paged_kv", "stage", 0.03125, cache="paged16"),
        row("fa2", "reference", 0.001, cache="paged16")]  # never written; were it, it is not a reference time
decode_csv.fill_metrics(rows, 4000.0)
paged_row = rows.pop(5)
rows.pop(5)
check("a paged row: GB/s from its own bytes (with the table's), %% of FA2 and cuDNN against their contiguous "
      "time (%r)" % paged_row, paged_row["gbytes_per_s"] == "%.1f" % (int(paged_row["bytes"]) / 0.03125e-3 / 1e9)
      and int(paged_row["bytes"]) == decode_bytes(1, 32, 8, 1, 16384, 128, "fp16") + 1024 * 4
      and (paged_row["pct_of_fa2"], paged_row["pct_of_cudnn"]) == ("200.00", "160.00"))
nbytes = decode_bytes(1, 32, 8, 1, 16384, 128, "fp16")
check("GB/s = bytes / minimum time (%r)" % rows[0]["gbytes_per_s"],
      rows[0]["gbytes_per_s"] == "%.1f" % (nbytes / 0.025e-3 / 1e9))
check("%% of read bandwidth (%r)" % rows[0]["pct_of_read_bw"],
      rows[0]["pct_of_read_bw"] == "%.2f" % (100 * nbytes / 0.025e-3 / 1e9 / 4000.0))
check("% of FA2 and cuDNN from the minima of the same shape",
      (rows[0]["pct_of_fa2"], rows[0]["pct_of_cudnn"], rows[3]["pct_of_fa2"]) == ("250.00", "200.00", "125.00"))
check("a failed row has no metrics", all(rows[1][c] == "" for c in ("gbytes_per_s", "pct_of_read_bw", "pct_of_fa2")))
check("no reference of another shape is used", rows[4]["pct_of_fa2"] == "" and rows[4]["gbytes_per_s"] != "")
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "d.csv")
    decode_csv.write_decode_csv(path, [("gpu", "FAKE GPU"), ("empty", ""), ("read_bw_gbytes_per_s", "4000.0")], rows)
    text = open(path).read()
    check("header lines, an empty value left out (%r)" % text[:80],
          text.startswith("# gpu=FAKE GPU\n# read_bw_gbytes_per_s=4000.0\n" + ",".join(decode_csv.COLUMNS) + "\n"))
    meta, back = decode_csv.read_decode_csv(path)
    check("read back: meta and rows", meta["gpu"] == "FAKE GPU" and len(back) == 5
          and back[0]["gbytes_per_s"] == rows[0]["gbytes_per_s"])
    # A CSV written before the cache column: every row reads as contiguous.
    old_columns = [c for c in decode_csv.COLUMNS if c != "cache"]
    with open(path, "w") as f:
        f.write("# gpu=OLD GPU\n" + ",".join(old_columns) + "\n")
        for r in rows[:3]:
            f.write(",".join(str(r[c]) for c in old_columns) + "\n")
    meta, back = decode_csv.read_decode_csv(path)
    check("an older CSV without `cache`: read, its rows contiguous (%r)" % [r.get("cache") for r in back],
          meta["gpu"] == "OLD GPU" and len(back) == 3 and all(r["cache"] == "contiguous" for r in back)
          and back[0]["gbytes_per_s"] == rows[0]["gbytes_per_s"])
    decode_csv.fill_metrics(back, 4000.0)
    check("an older CSV's % of FA2 computed again the same", back[0]["pct_of_fa2"] == "250.00")
    with open(path, "w") as f:
        f.write("# gpu=x\nimpl,kind,median_ms\na,stage,1\n")
    try:
        decode_csv.read_decode_csv(path)
        failures.append("read_decode_csv took a CSV without the decoding columns")
    except decode_csv.DecodeCsvError as e:
        check("the refusal names a missing column (%s)" % e, "gbytes_per_s" in str(e))

# --- options ------------------------------------------------------------------------------------
for argv, words in ((["--kv-heads", "5"], "does not divide"), (["--seq-qs", "300"], "not a decoding shape"),
                    (["--seq-qs", "8", "--seq-kvs", "4"], "seq_q <= seq_kv"), (["--head-dims", "96"], "64 and 128"),
                    (["--dtypes", "fp8"], "--dtypes"), (["--reps", "0"], "--reps"), (["--seq-kvs", "4q"], "4k"),
                    (["--batches", "0"], ">= 1"), (["--references", "flex"], "unknown"),
                    (["--read-bytes", "12"], "at least 1M"), (["--causal", "maybe"], "invalid choice"),
                    (["--host-gap-us", "-1"], "--host-gap-us"), (["--cache", "flat"], "--cache takes"),
                    (["--cache", ""], "--cache takes"), (["--page-size", "24"], "multiple of 16"),
                    (["--page-size", "8"], "multiple of 16"), (["--page-size", "0"], "multiple of 16"),
                    (["--page-size", "16,x"], "page sizes such as"), (["--page-size", "16,40"], "page size 40")):
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        try:
            decode_bench.parse_args(argv)
            failures.append("parse_args accepted %r" % argv)
        except SystemExit as e:
            check("parse_args %r exits 2 (%s)" % (argv, e.code), e.code == 2)
    check("parse_args %r says %r (%r)" % (argv, words, said.getvalue()[-200:]), words in said.getvalue())
args = decode_bench.parse_args(["--seq-kvs", "4k,16K,65536"])
check("lengths: k = 1024", args.seq_kvs == [4096, 16384, 65536])
check("the default grid: 3 batches x 2 seq_q x 3 K/V heads x 4 lengths, fp16, head_dim 128",
      len(decode_bench.parse_args([]).cases) == 72)
both = decode_bench.parse_args(["--causal", "both", "--seq-qs", "1,8", "--batches", "1", "--kv-heads", "8",
                                "--seq-kvs", "4k"]).cases
check("--causal both: causal only where seq_q > 1 (%r)" % (both,),
      sorted((c.seq_q, c.causal) for c in both) == [(1, False), (8, False), (8, True)])
ordered = [kv_cache_bytes(c.batch, c.kv_heads, c.seq_kv, c.head_dim, c.dtype) for c in decode_bench.parse_args([]).cases]
check("cases from the smallest K and V to the largest", ordered == sorted(ordered))
check("--cache and --page-size by default: contiguous, then pages of 16 rows",
      decode_bench.parse_args([]).layouts == ["contiguous", "paged16"])
check("--cache paged --page-size 256,16,256: paged only, each size once, in their order",
      decode_bench.parse_args(["--cache", "paged", "--page-size", "256,16,256"]).layouts == ["paged256", "paged16"])
check("--cache contiguous: no paged cache", decode_bench.parse_args(["--cache", "contiguous"]).layouts == ["contiguous"])
check("page sizes: multiples of 16 rows (16, 32, 48, 64, 128, 192, 256)",
      decode_bench.page_sizes("16,32,48,64,128,192,256") == [16, 32, 48, 64, 128, 192, 256])

# --- stage choice ---------------------------------------------------------------------------------
def fake_stage(name, parent, target="sm_80", *features):
    track, _, folder = name.partition("_")
    return stages.Stage(name=name, track=track, folder_name=folder, parent=parent, idea="", target=target,
                        features=tuple(features), sass={}, spill_budget={})


made_up = [fake_stage("ampere_14_lse", "ampere_13_gqa", "sm_80", "lse"),
           fake_stage("hopper_09_x", None, "sm_90a"),
           fake_stage("decode_01_split_kv", "ampere_14_lse", "sm_80", "split_kv"),
           fake_stage("decode_02_pack", "decode_01_split_kv", "sm_80", "split_kv"),
           fake_stage("decode_03_tma", "hopper_09_x", "sm_90a", "split_kv")]
check("default: the non-split parents first, then the split_kv stages",
      decode_bench.decode_stages(made_up) == [("ampere_14_lse", "parent"), ("hopper_09_x", "parent"),
                                              ("decode_01_split_kv", "split_kv"), ("decode_02_pack", "split_kv"),
                                              ("decode_03_tma", "split_kv")])
check("--no-parents", [n for n, _ in decode_bench.decode_stages(made_up, parents=False)]
      == ["decode_01_split_kv", "decode_02_pack", "decode_03_tma"])
check("compute capability 8.0 runs no sm_90a stage",
      [n for n, _ in decode_bench.decode_stages(made_up, gpu_cc=80)]
      == ["ampere_14_lse", "decode_01_split_kv", "decode_02_pack"])
check("--stages by <track>_NN and id", decode_bench.decode_stages(made_up, ["decode_02", "ampere_14_lse"])
      == [("decode_02_pack", "split_kv"), ("ampere_14_lse", "parent")])
try:
    decode_bench.decode_stages(made_up, ["decode_09"])
    failures.append("decode_stages took an unknown stage")
except ValueError as e:
    check("an unknown stage is named (%s)" % e, "decode_09" in str(e))

# --- dry run (the tree's own declarations) -------------------------------------------------------
declared = stages.all_stages()
splitters = [s.name for s in declared if "split_kv" in s.features]
parents = {s.parent for s in declared if s.name in splitters} - set(splitters)
out = io.StringIO()
with contextlib.redirect_stdout(out):
    status = decode_bench.main(["--dry-run", "--batches", "1,64", "--kv-heads", "32,1", "--seq-kvs", "4k,128k"])
text = out.getvalue()
check("--dry-run exits 0 (%r)" % status, status == 0)
check("--dry-run names every stage declaring split_kv and its non-split parent (%s, %s)" % (splitters, parents),
      bool(splitters) and all(n in text.splitlines()[0] for n in splitters + sorted(parents)))
check("--dry-run names the references", "fa2 (SDPA)" in text and "cudnn (SDPA)" in text)
check("--dry-run: 16 cases, one line each", text.count("fp16 d128 b") == 16)
check("--dry-run: MQA batch 1, 4k: 100 copies on the H100's L2",
      any(line.startswith("fp16 d128 b1 q1 h32/1 kv4k") and " 100 " in line for line in text.splitlines()))
check("--dry-run: batch 64, 32 K/V heads, 128k (137 GB) skipped on an 80 GB card",
      any(line.startswith("fp16 d128 b64 q1 h32/32 kv128k") and "skipped: 1 copy" in line for line in text.splitlines()))
check("--dry-run: the estimate and what it would run (%r)" % text[-400:],
      "14 cases measured (14 with a paged cache), 2 skipped; estimated time" in text and "hbm-read" in text
      and "decode_latest.csv" in text)
paged_stage_names = [s.name for s in declared if "paged_kv" in s.features]
unpaged = [n for n in splitters + sorted(parents) if n not in paged_stage_names]
check("--dry-run: the paged_kv stages also on pages of 16 rows (%s)" % paged_stage_names,
      bool(paged_stage_names) and all("%s (paged16)" % n in text.splitlines()[0] for n in paged_stage_names)
      and "paged caches: pages of 16 rows" in text)
not_on = [line for line in text.splitlines() if "not on a paged cache" in line]
check("--dry-run: the stages without paged_kv named, and why (%r)" % not_on,
      len(not_on) == 1 and all(n in not_on[0] for n in unpaged) and 'no "paged_kv" in stage.json' in not_on[0])
check("--dry-run: FA2 and cuDNN on the contiguous cache only, said so",
      "fa2, cudnn: on the contiguous cache only (SDPA takes no block table)" in text)
check("--dry-run: each measured case lists its caches",
      sum(1 for line in text.splitlines() if line.endswith("caches: contiguous+paged16")) == 14)
big = io.StringIO()
with contextlib.redirect_stdout(big):
    decode_bench.main(["--dry-run", "--batches", "64", "--kv-heads", "32", "--seq-kvs", "128k", "--seq-qs", "1",
                       "--assume-memory-gib", "139"])
check("--dry-run on an H200's memory: the 137 GB case still does not fit beside the rest",
      "skipped" in big.getvalue())
contiguous_only = io.StringIO()
with contextlib.redirect_stdout(contiguous_only):
    decode_bench.main(["--dry-run", "--cache", "contiguous"])
check("--cache contiguous: no paged implementation, no paged note",
      "paged16" not in contiguous_only.getvalue() and "not on a paged cache" not in contiguous_only.getvalue()
      and "70 cases measured (0 with a paged cache), 2 skipped" in contiguous_only.getvalue())
default = io.StringIO()
with contextlib.redirect_stdout(default):
    decode_bench.main(["--dry-run"])
lines = default.getvalue().splitlines()
mha64 = [line for line in lines if line.startswith("fp16 d128 b64 q1 h32/32 kv64k")]
check("the default dry run: batch 64, 32/32 heads, 64k keeps its contiguous rows, its pools do not fit beside "
      "them, said so (%r)" % mha64, len(mha64) == 1 and "caches: contiguous (paged16 skipped: 1 copy of the "
      "paged16 pools (68.72 GB) does not fit beside the contiguous K and V" in mha64[0]
      and "--cache paged --references ''" in mha64[0])
check("the default dry run: 70 cases, 66 with a paged cache",
      any("70 cases measured (66 with a paged cache), 2 skipped" in line for line in lines))


def estimate_seconds(text):
    line = [x for x in text.splitlines() if "estimated time" in x][0]
    value = line.split("estimated time ")[1].split(" (")[0]
    return sum(int(n) * (60 if unit == "min" else 1) for n, unit in zip(value.split()[::2], value.split()[1::2]))


check("the paged rows add to the estimate, a little (%s, %s)" % (
    estimate_seconds(contiguous_only.getvalue()), estimate_seconds(default.getvalue())),
    estimate_seconds(contiguous_only.getvalue()) < estimate_seconds(default.getvalue())
    < 1.25 * estimate_seconds(contiguous_only.getvalue()))
PAGED_STAGES = [st.name for st in stages.all_stages() if "paged_kv" in st.features]
alone = io.StringIO()
with contextlib.redirect_stdout(alone):
    status = decode_bench.main(["--dry-run", "--cache", "paged", "--references", "", "--page-size", "16,256",
                                "--batches", "64", "--kv-heads", "32", "--seq-kvs", "64k", "--seq-qs", "1"])
check("--cache paged --references '': the paged stage alone on both page sizes; at batch 64, 32/32 heads, 64k "
      "the 16-row pools fit without contiguous copies, the 256-row ones not beside them (%r)" % alone.getvalue(),
      status == 0 and "1 cases x %d implementations: %s" % (
          2 * len(PAGED_STAGES), ", ".join("%s (paged%d)" % (name, size) for size in (16, 256) for name in PAGED_STAGES))
      in alone.getvalue() and "caches: paged16 (paged256 skipped: 1 copy of the paged256 pools" in alone.getvalue()
      and "fa2" not in alone.getvalue().splitlines()[0])
said = io.StringIO()
with contextlib.redirect_stderr(said), contextlib.redirect_stdout(io.StringIO()):
    status = decode_bench.main(["--dry-run", "--cache", "paged", "--stages", "decode_01", "--references", ""])
check("--cache paged without a paged_kv stage or a reference: exit 2, said why (%r)" % said.getvalue(),
      status == 2 and "declares \"paged_kv\"" in said.getvalue())
minutes = [line for line in default.getvalue().splitlines() if "estimated time" in line]
check("the default run's estimate fits a call of 8 minutes (%r)" % minutes,
      minutes and "estimated time" in minutes[0] and (" min " not in minutes[0]
                                                      or int(minutes[0].split("estimated time ")[1].split(" min")[0]) < 8))

# --- the paged cache, on numpy stand-ins for PyTorch's tensors -------------------------------------
try:
    import numpy as np
    have_numpy = True
except ImportError:
    have_numpy = False
if have_numpy:
    class NT(np.ndarray):
        """The few tensor methods paged_cache, random_paged_cache, gather_pages and check() use."""

        def long(self):
            return self.astype(np.int64).view(NT)

        def to(self, device=None, dtype=None):
            return self if dtype is None else self.astype(dtype).view(NT)

        def contiguous(self):
            return np.ascontiguousarray(self).view(NT)

    def nt(array):
        return np.asarray(array).view(NT)

    np_torch = types.SimpleNamespace(
        int32=np.int32, float16=np.float16,
        Generator=lambda: types.SimpleNamespace(manual_seed=lambda seed: np.random.RandomState(seed)),
        randperm=lambda n, generator: nt(generator.permutation(n)),
        empty=lambda shape, dtype, device: nt(np.empty(shape, dtype)),
        manual_seed=lambda seed: np_seed.__setitem__(0, seed),
        randn=lambda shape, device, dtype: nt(np.random.RandomState(np_seed[0]).standard_normal(shape).astype(dtype)),
        isfinite=lambda t: nt(np.isfinite(t)))
    np_seed = [0]
    for batch, seq_kv, page_size in ((3, 128, 16), (3, 100, 16), (2, 1000, 64), (2, 40, 256), (1, 512, 256)):
        rng = np.random.RandomState(seq_kv)
        k = nt(rng.standard_normal((batch, seq_kv, 2, 8)).astype(np.float16))
        v = nt(rng.standard_normal((batch, seq_kv, 2, 8)).astype(np.float16))
        pool_k, pool_v, table = decode_bench.paged_cache(np_torch, k, v, page_size, seed=5)
        pages = -(-seq_kv // page_size)
        what = "paged_cache(batch %d, seq_kv %d, pages of %d)" % (batch, seq_kv, page_size)
        check(what + ": pools [batch x pages, page_size, kv_heads, head_dim], an int32 table [batch, pages]",
              pool_k.shape == (batch * pages, page_size, 2, 8) and table.shape == (batch, pages)
              and table.dtype == np.int32)
        check(what + ": the table is a permutation of the pool's pages",
              sorted(table.reshape(-1).tolist()) == list(range(batch * pages)))
        check(what + ": the pages are scattered (not in order)",
              batch * pages < 3 or table.reshape(-1).tolist() != list(range(batch * pages)))
        gathered = all(np.array_equal(decode_bench.gather_pages(pool, table, b, seq_kv), t[b:b + 1])
                       for pool, t in ((pool_k, k), (pool_v, v)) for b in range(batch))
        check(what + ": every sequence's keys gathered from the pool through the table are its keys", gathered)
        rest = seq_kv % page_size
        nan_rows = int(np.isnan(pool_k).any(axis=(2, 3)).sum())
        check(what + ": the rows of a last page past seq_kv are NaN, and only they (%d)" % nan_rows,
              nan_rows == (batch * (page_size - rest) if rest else 0))
    case = decode_bench.Case("fp16", 8, 3, 4, 2, 2, 100, False)
    pool_k, pool_v, table = decode_bench.random_paged_cache(np_torch, case, np.float16, 16, seed=9)
    check("random_paged_cache: pools of 7 pages per sequence, a permuted table, NaN past seq_kv only",
          pool_k.shape == (21, 16, 2, 8) and sorted(table.reshape(-1).tolist()) == list(range(21))
          and int(np.isnan(pool_k).any(axis=(2, 3)).sum()) == 3 * 12
          and all(np.isfinite(decode_bench.gather_pages(pool_v, table, b, 100)).all() for b in range(3))
          and not np.array_equal(pool_k, pool_v))
    # check() on a paged output: check_output gets each sampled batch's keys gathered from the pools.
    k = nt(np.random.RandomState(1).standard_normal((3, 100, 2, 8)).astype(np.float16))
    v = nt(np.random.RandomState(2).standard_normal((3, 100, 2, 8)).astype(np.float16))
    pool_k, pool_v, table = decode_bench.paged_cache(np_torch, k, v, 16, seed=3)
    seen = []

    def record(torch, q, k_b, v_b, out_b, causal, rows, seed):
        seen.append((k_b, v_b, out_b))
        return True, 0.0, 0.0, 0.0, "passed"
    q = nt(np.zeros((3, 2, 4, 8), np.float16))
    out = nt(np.zeros((3, 4, 2, 8), np.float16))
    check_args = types.SimpleNamespace(check_batches=3, check_rows=16, seed=1)
    passed = decode_bench.check(np_torch, types.SimpleNamespace(check_output=record), q, pool_k, pool_v, out, case,
                                check_args, table=table)
    check("check() on pools: every sampled batch's gathered keys and values, the paged output (%r)" % (passed,),
          passed[0] and len(seen) == 3 and all(np.array_equal(kb, k[b:b + 1]) and np.array_equal(vb, v[b:b + 1])
                                               and ob.shape == (1, 4, 2, 8) for b, (kb, vb, ob) in enumerate(seen)))
    out[1, 2, 1, 3] = np.nan
    check("check() on pools: a non-finite paged output fails",
          not decode_bench.check(np_torch, types.SimpleNamespace(check_output=record), q, pool_k, pool_v, out, case,
                                 check_args, table=table)[0])

# --- read bandwidth (a fake fa_microbench) -------------------------------------------------------
FAKE_MICROBENCH = """#!/bin/sh
# A stand-in for fa_microbench (made-up numbers).
case "$1" in
  info) printf '# gpu=FAKE GPU\\n# compute_capability=90\\n# sms=132\\n# cuda=13.0\\n# cuda_driver_api=13.0\\n# l2_bytes=52428800\\n# memory_bytes=85000000000\\n' ;;
  hbm-read) echo "$@" >> "$(dirname "$0")/calls"
            echo 'hbm_read,-,3210.5,GB/s,"grid-stride sum of a fake buffer, checked"' ;;
  *) exit 2 ;;
esac
"""
with tempfile.TemporaryDirectory() as tmp:
    exe = os.path.join(tmp, "fa_microbench")
    with open(exe, "w") as f:
        f.write(FAKE_MICROBENCH)
    os.chmod(exe, os.stat(exe).st_mode | stat.S_IEXEC)
    info = decode_bench.device_info(exe)
    check("fa_microbench info parsed (%r)" % info, info.get("l2_bytes") == "52428800" and info["gpu"] == "FAKE GPU")
    gbps, method = decode_bench.read_bandwidth(exe, 4 << 30)
    check("hbm-read's row parsed, its quoted method whole (%r, %r)" % (gbps, method),
          gbps == 3210.5 and method == "grid-stride sum of a fake buffer, checked")
    check("hbm-read asked for the buffer", "--bytes 4294967296" in open(os.path.join(tmp, "calls")).read())
    try:
        decode_bench.read_bandwidth(os.path.join(tmp, "missing"), 4 << 30)
        failures.append("a missing fa_microbench was not reported")
    except decode_bench.MicrobenchError as e:
        check("a missing fa_microbench says how to build it (%s)" % e, "cmake --build build --target fa_microbench"
              in str(e))


# --- a whole run on a fake PyTorch, library and fa_microbench --------------------------------------
class FakeTensor:
    def __init__(self, shape, tag="t"):
        self.shape, self.tag = tuple(shape), tag

    def clone(self):  # k0 -> k0#1, k0#2, ...: copy c of K is k0#c
        self.clones = getattr(self, "clones", 0) + 1
        return FakeTensor(self.shape, "%s#%d" % (self.tag, self.clones))

    def view(self, dtype):
        return self

    def fill_(self, value):
        self.poisoned = True
        return self

    def transpose(self, *dims):
        return self

    def __getitem__(self, index):
        return self

    def data_ptr(self):  # a block table's address
        return 0xB10C

    def stride(self, dim):
        return self.shape[1] if dim == 0 else 1


class Clock:
    now = 0.0
    launches = []   # (impl, the K tensor's tag)
    params = []     # (impl, the launch's parameters)
    checks = []     # (stage launched last, K's tag, V's tag, the output's tag, the block table or None)
    pools = []      # paged_cache's arguments: (K's tag, V's tag, page_size)
    spins = 0
    outputs = 0


def new_output(t):
    Clock.outputs += 1
    return FakeTensor(t.shape, "o%d" % Clock.outputs)


free_memory = [80 * 10 ** 9]


def make_torch():
    torch = types.ModuleType("torch")
    torch.float16, torch.bfloat16, torch.int16 = "fp16", "bf16", "int16"
    torch.__version__ = "0.0.0+fake"
    torch.empty_like = new_output
    cuda = types.SimpleNamespace()
    cuda.is_available = lambda: True
    cuda.get_device_capability = lambda: (9, 0)
    cuda.get_device_name = lambda: "FAKE GPU"
    cuda.get_device_properties = lambda i: types.SimpleNamespace(L2_cache_size=52428800, multi_processor_count=132,
                                                                 total_memory=85 * 10 ** 9)
    cuda.mem_get_info = lambda: (free_memory[0], 85 * 10 ** 9)
    cuda.empty_cache = lambda: None
    cuda.synchronize = lambda: None
    cuda.current_stream = lambda: types.SimpleNamespace(cuda_stream=None)

    def sleep(cycles):
        Clock.spins += 1
    cuda._sleep = sleep

    class Event:
        def __init__(self, enable_timing):
            self.t = None

        def record(self):
            self.t = Clock.now

        def elapsed_time(self, end):
            return end.t - self.t
    cuda.Event = Event
    torch.cuda = cuda

    def sdpa(q, k, v, **options):
        Clock.now += {"fa2": 0.04, "cudnn": 0.03}[backend_now[0]]
        Clock.launches.append((backend_now[0], k.tag))
    torch.nn = types.SimpleNamespace(functional=types.SimpleNamespace(scaled_dot_product_attention=sdpa))
    return torch


backend_now = [None]


@contextlib.contextmanager
def sdpa_kernel(backend):
    backend_now[0] = backend[0]
    yield


class FakeLib:
    def __init__(self, path):
        pass

    def stage_names(self):
        return ["ampere_14_lse", "decode_01_split_kv", "decode_04_paged_kv"]

    @staticmethod
    def params(q, k, v, o, causal=False):  # what tools/fa_capi.py's FaCapi.params fills from the tensors
        return types.SimpleNamespace(tag=k.tag, out=o.tag, seq_kv=k.shape[1], kv_heads=k.shape[2], block_table=None,
                                     block_table_batch_stride=0, max_pages=0, page_size=0)

    def launch(self, stage, params, stream):
        Clock.now += {"ampere_14_lse": 0.2, "decode_01_split_kv": 0.02, "decode_04_paged_kv": 0.025}[stage]
        if params.block_table is not None:
            Clock.now += 0.005  # the paged launch: 0.03 ms
        Clock.launches.append((stage, params.tag))
        Clock.params.append((stage, params))


def fake_check(torch, ref, q, k, v, out, case, args):
    return (False, 0.5, "made-up failure") if getattr(out, "tag", "").startswith("o") \
        and checked_stage[0] == "ampere_14_lse" else (True, 1e-4, "passed")


checked_stage = [None]
real_launch = FakeLib.launch


def first_call(torch, backend, operands, options):
    if backend[0] == "cudnn" and "enable_gqa" in options:
        return None, "unavailable: made-up: no cuDNN kernel for GQA"
    return FakeTensor((1,), "out"), None


def fake_paged_cache(torch, k, v, page_size, seed):
    """decode_bench.paged_cache's pools and table as tagged stand-ins (the real one is tested on numpy above)."""
    Clock.pools.append((k.tag, v.tag, page_size))
    batch, seq_kv, kv_heads, head_dim = k.shape
    pages = -(-seq_kv // page_size)
    return (FakeTensor((batch * pages, page_size, kv_heads, head_dim), "pk%d" % page_size),
            FakeTensor((batch * pages, page_size, kv_heads, head_dim), "pv%d" % page_size),
            FakeTensor((batch, pages), "table%d" % page_size))


attention = types.ModuleType("torch.nn.attention")
attention.sdpa_kernel = sdpa_kernel
torch_module = make_torch()
import torch_reference  # noqa: E402
import fa_capi  # noqa: E402


def checking(torch, ref, q, k, v, out, case, args, table=None):
    Clock.checks.append((checked_stage[0], k.tag, v.tag, out.tag, table))
    return fake_check(torch, ref, q, k, v, out, case, args)


def launch_and_note(self, stage, params, stream):
    checked_stage[0] = stage
    real_launch(self, stage, params, stream)


def fake_run(tmp, argv):
    """(exit status, what it printed, the CSV's meta and rows): decode_bench.main on the fakes."""
    Clock.now, Clock.launches, Clock.params, Clock.checks, Clock.pools, Clock.spins = 0.0, [], [], [], [], 0
    exe = os.path.join(tmp, "fa_microbench")
    with open(exe, "w") as f:
        f.write(FAKE_MICROBENCH)
    os.chmod(exe, os.stat(exe).st_mode | stat.S_IEXEC)
    lib = os.path.join(tmp, "libfa_capi.so")
    open(lib, "w").close()
    csv_path = os.path.join(tmp, "decode.csv")
    printed = io.StringIO()
    with mock.patch.dict(sys.modules, {"torch": torch_module, "torch.nn": types.ModuleType("torch.nn"),
                                       "torch.nn.attention": attention}), \
            mock.patch.object(fa_capi, "FaCapi", FakeLib), mock.patch.object(FakeLib, "launch", launch_and_note), \
            mock.patch.object(decode_bench, "check", checking), \
            mock.patch.object(decode_bench, "paged_cache", fake_paged_cache), \
            mock.patch.object(decode_bench, "nvidia_smi_query", lambda: {"driver": "000.00", "max_sm_clock_mhz": "1980",
                                                                        "sm_clock_mhz": "345"}), \
            mock.patch.multiple(torch_reference,
                                case_inputs=lambda torch, seed, batch, seq, heads, kv_heads, head_dim, dtype, seq_kv: (
                                    FakeTensor((batch, seq, heads, head_dim), "q"),
                                    FakeTensor((batch, seq_kv, kv_heads, head_dim), "k0"),
                                    FakeTensor((batch, seq_kv, kv_heads, head_dim), "v0")),
                                sdpa_backend_enums=lambda torch, names: {n: (n,) for n in names},
                                sdpa_inputs=lambda q, k, v, contiguous: (q, k, v),
                                first_call=first_call,
                                torch_header=lambda torch: ["gpu=FAKE GPU", "sm=90", "torch=0.0.0+fake",
                                                            "cudnn=0"]), \
            contextlib.redirect_stdout(printed):
        status = decode_bench.main(["--lib", lib, "--microbench", exe, "--csv", csv_path, "--no-plot"] + argv)
    meta, rows = decode_csv.read_decode_csv(csv_path)
    return status, printed.getvalue(), meta, rows


with tempfile.TemporaryDirectory() as tmp:
    status, printed, meta, got = fake_run(tmp, ["--stages", "ampere_14,decode_01", "--batches", "1", "--seq-qs", "1",
                                                "--kv-heads", "32,8", "--seq-kvs", "4k", "--warmup", "1", "--reps", "3"])
    check("a failing stage: exit 1 (%r)" % status, status == 1)
    check("the header names the GPU, the git revision, the command and the read bandwidth (%r)" % meta,
          meta.get("gpu") == "FAKE GPU" and meta.get("git") and "decode_bench.py" in meta.get("command", "")
          and meta.get("read_bw_gbytes_per_s") == "3210.5" and meta.get("l2_bytes") == "52428800"
          and "hbm-read" not in meta.get("skipped", "") and meta.get("timing") == "rounds"
          and "fake buffer" in meta.get("read_bw_method", "") and meta.get("driver") == "000.00")
    names = [(r["impl"], r["kv_heads"]) for r in got]
    check("rows: per case the stages, then FA2 and cuDNN (%r)" % names,
          names == [("ampere_14_lse", "8"), ("decode_01_split_kv", "8"), ("fa2", "8"), ("cudnn", "8"),
                    ("ampere_14_lse", "32"), ("decode_01_split_kv", "32"), ("fa2", "32"), ("cudnn", "32")])
    check("no paged_kv stage selected: every row contiguous, none paged, and the header says why (%r)"
          % meta.get("skipped"), all(r["cache"] == "contiguous" for r in got) and not Clock.pools
          and "not on a paged cache" in meta.get("skipped", "") and "ampere_14_lse" in meta.get("skipped", ""))
    by = {(r["impl"], r["kv_heads"]): r for r in got}
    check("the failing stage has no time and says why",
          by[("ampere_14_lse", "8")]["status"].startswith("FAIL: made-up") and by[("ampere_14_lse", "8")]["min_ms"] == "")
    check("cuDNN without a GQA kernel: unavailable, no time",
          by[("cudnn", "8")]["status"].startswith("unavailable: made-up") and by[("cudnn", "8")]["min_ms"] == "")
    split = by[("decode_01_split_kv", "32")]
    check("a passing stage: its time, GB/s and %% of the read bandwidth (%r)" % split,
          split["status"] == "PASS" and abs(float(split["min_ms"]) - 0.02) < 1e-9
          and split["gbytes_per_s"] == "%.1f" % (int(split["bytes"]) / 0.02e-3 / 1e9)
          and split["pct_of_read_bw"] == "%.2f" % (100 * int(split["bytes"]) / 0.02e-3 / 1e9 / 3210.5)
          and split["pct_of_fa2"] == "200.00" and split["pct_of_cudnn"] == "150.00")
    copies = {r["kv_heads"]: int(r["kv_copies"]) for r in got}
    check("copies: 4 x L2 over 16.8 MB (13) and 67.1 MB (4) of K and V (%r)" % copies, copies == {"8": 13, "32": 4})
    # Per case: each stage's checked first launch (SDPA's first calls are faked), then the rounds. The
    # 16.8 MB case first: ampere_14 fails its check and cuDNN has no GQA kernel, so 2 implementations
    # x (1 + 3) rounds; then 3 x 4 in the 67.1 MB case.
    case8 = Clock.launches[:2 + 8]
    rotated = [int(tag.partition("#")[2] or 0) for _, tag in case8[2:]]
    check("the timed launches rotate over the copies: launch n reads copy n mod 13 (%r)" % rotated,
          rotated == list(range(8)))
    check("each stage's checked first launch reads copy 0 (%r)" % case8[:2],
          case8[:2] == [("ampere_14_lse", "k0"), ("decode_01_split_kv", "k0")])
    check("the failing stage is never timed", sum(1 for impl, _ in Clock.launches if impl == "ampere_14_lse") == 2)
    check("the timed launches of the second case (%r)" % Clock.launches[10:],
          len(Clock.launches) == 10 + 2 + 12 and sorted(impl for impl, _ in Clock.launches[12:])
          == sorted(["decode_01_split_kv", "fa2", "cudnn"] * 4))
    check("a spin kernel before every timed launch (%d for %d)" % (Clock.spins, 8 + 12), Clock.spins == 8 + 12)
    check("a table per case, with GB/s", "GB/s" in printed and "% read" in printed)
    check("no launch passed a block table", all(p.block_table is None for _, p in Clock.params))

    # The paged cache: decode_04_paged_kv on the contiguous cache and on pages of 16 rows, in the same
    # rounds as decode_01 (no paged_kv: contiguous only) and FA2 (cuDNN has no GQA kernel here).
    status, printed, meta, got = fake_run(tmp, ["--stages", "decode_01,decode_04", "--batches", "2", "--seq-qs", "1",
                                                "--kv-heads", "8", "--seq-kvs", "4k", "--warmup", "1", "--reps", "3"])
    check("the paged run: exit 0 (%r)" % status, status == 0)
    names = [(r["impl"], r["cache"]) for r in got]
    check("rows: the stages on the contiguous cache, the paged_kv stage on pages of 16, then FA2 and cuDNN (%r)"
          % names, names == [("decode_01_split_kv", "contiguous"), ("decode_04_paged_kv", "contiguous"),
                             ("decode_04_paged_kv", "paged16"), ("fa2", "contiguous"), ("cudnn", "contiguous")])
    check("the pools are cut from the case's K and V, pages of 16 rows (%r)" % Clock.pools,
          Clock.pools == [("k0", "v0", 16)])
    paged = got[2]
    want_bytes = decode_bytes(2, 32, 8, 1, 4096, 128, "fp16") + 2 * 256 * 4
    check("the paged row: its time, bytes with the table's 2 x 256 entries, the copies, %% of FA2 against FA2's "
          "contiguous time (%r)" % paged,
          paged["status"] == "PASS" and abs(float(paged["min_ms"]) - 0.03) < 1e-9 and int(paged["bytes"]) == want_bytes
          and paged["kv_copies"] == "7" and paged["pct_of_fa2"] == "133.33" and paged["pct_of_cudnn"] == ""
          and paged["gbytes_per_s"] == "%.1f" % (want_bytes / 0.03e-3 / 1e9))
    check("the contiguous rows: bytes without a table",
          all(int(r["bytes"]) == decode_bytes(2, 32, 8, 1, 4096, 128, "fp16") for r in got if r["cache"] == "contiguous"))
    paged_params = [p for stage, p in Clock.params if p.block_table is not None]
    check("every paged launch: the block table, its batch stride, max_pages, page_size and seq_kv set (%r)"
          % [vars(p) for p in paged_params[:1]],
          len(paged_params) == 1 + 4 and all(
              (p.block_table, p.block_table_batch_stride, p.max_pages, p.page_size, p.seq_kv, p.kv_heads)
              == (0xB10C, 256, 256, 16, 4096, 8) and p.tag.startswith("pk16") for p in paged_params))
    check("the contiguous launches: no block table, no page size",
          all(p.page_size == 0 and p.max_pages == 0 and p.tag.startswith("k0") for stage, p in Clock.params
              if p.block_table is None))
    stage_checks = [c for c in Clock.checks if c[3] != "out"]  # "out": FA2's output (first_call above)
    paged_checks = [c for c in stage_checks if c[4] is not None]
    check("the paged output is checked, on its pools and their block table (%r)" % Clock.checks,
          len(stage_checks) == 3 and len(paged_checks) == 1
          and paged_checks[0][:3] == ("decode_04_paged_kv", "pk16", "pv16")
          and bool(paged_params) and paged_checks[0][3] == paged_params[0].out and paged_checks[0][4].tag == "table16"
          and [c[1] for c in stage_checks if c[4] is None] == ["k0", "k0"]
          and [c[1:3] + (c[4],) for c in Clock.checks if c[3] == "out"] == [("k0", "v0", None)])
    # 3 checked first launches, then 4 implementations x (1 + 3) rounds sharing one launch count: 33.6 MB
    # of K and V, 7 copies; launch n reads copy n mod 7, of the contiguous K or of the pool.
    timed = Clock.launches[3:]
    rotated = [int(tag.partition("#")[2] or 0) for _, tag in timed]
    check("the pools rotate with the copies: launch n reads copy n mod 7 of its cache (%r)" % timed,
          len(timed) == 16 and rotated == [n % 7 for n in range(16)]
          and sorted(impl for impl, tag in timed if tag.startswith("pk16")) == ["decode_04_paged_kv"] * 4)
    check("the header: the caches, what a paged row is, the stage without paged_kv (%r)" % meta,
          meta.get("caches") == "contiguous,paged16" and "block table" in meta.get("paged", "")
          and "page sizes 16" in meta.get("paged", "") and "contiguous cache only" in meta.get("paged", "")
          and "decode_01_split_kv" in meta.get("skipped", "") and "paged_kv" in meta.get("skipped", "")
          and "own pool" in meta.get("cold_l2", ""))
    check("the printed table names the cache", "paged16" in printed and "cache" in printed)

    # Memory for the contiguous copies but not for the pools beside them: the paged row is skipped,
    # said why, and the run still passes.
    case = decode_bench.Case("fp16", 128, 2, 32, 8, 1, 4096, False)
    contiguous_need = decode_bench.memory_need(case, 4, 7)
    free_memory[0] = contiguous_need + 3 * 33554432
    status, printed, meta, got = fake_run(tmp, ["--stages", "decode_01,decode_04", "--batches", "2", "--seq-qs", "1",
                                                "--kv-heads", "8", "--seq-kvs", "4k", "--warmup", "1", "--reps", "3"])
    free_memory[0] = 80 * 10 ** 9
    paged = [r for r in got if r["cache"] == "paged16"]
    check("pools that do not fit: the paged row skipped, said why, no time, exit 0 (%r, %r)" % (status, paged),
          status == 0 and len(paged) == 1 and paged[0]["status"].startswith("skipped: 7 copies of the paged16 pools")
          and paged[0]["min_ms"] == "" and paged[0]["kv_copies"] == "" and not Clock.pools
          and all(r["status"] == "PASS" for r in got if r["cache"] == "contiguous" and r["impl"] != "cudnn"))

# --- paged_params against the real library's checks (where build/libfa_capi.so is built) ------------
# The parameters of a paged launch, built by paged_params on the ctypes struct of common/c_api.h, pass
# the launcher's block-table checks for pages of 16, 64 and 256 rows (and pages of 24 do not). The
# softmax scale is made invalid so that validation, which checks it after the table, refuses every
# call: nothing is launched, with or without a GPU.
LIBRARY = os.path.join(REPO, "build", "libfa_capi.so")
library_checked = False
if os.path.isfile(LIBRARY):
    class PtrTensor:
        def __init__(self, shape, ptr):
            self.shape, self.ptr, self.dtype = tuple(shape), ptr, "fp16"

        def data_ptr(self):
            return self.ptr

        def stride(self, dim):  # contiguous
            n = 1
            for size in self.shape[dim + 1:]:
                n *= size
            return n
    with mock.patch.dict(sys.modules, {"torch": torch_module}):
        try:
            real = fa_capi.FaCapi(LIBRARY)
        except (OSError, fa_capi.FaCapiError) as e:  # a library that does not load, or an older build
            print("test_decode_bench: %s not used: %s" % (LIBRARY, e))
            real = None
        if real is not None and "decode_04_paged_kv" in real.stage_names():
            library_checked = True
            case = decode_bench.Case("fp16", 128, 2, 32, 8, 1, 4096, False)
            q, o = PtrTensor((2, 1, 32, 128), 1 << 16), PtrTensor((2, 1, 32, 128), 2 << 16)
            for page_size in (16, 64, 256, 24):
                pages = 4096 // page_size + (4096 % page_size > 0)
                pool = PtrTensor((2 * pages, page_size, 8, 128), 3 << 16)
                table = PtrTensor((2, pages), 4 << 16)
                params = decode_bench.paged_params(real, q, pool, pool, o, table, case, page_size)
                check("paged_params(pages of %d): the struct's fields" % page_size,
                      (params.seq_kv, params.block_table, params.block_table_batch_stride, params.max_pages,
                       params.page_size, params.kv_heads, params.k.batch_stride, params.k.seq_stride)
                      == (4096, 4 << 16, pages, pages, page_size, 8, page_size * 8 * 128, 8 * 128))
                params.softmax_scale = -1.0
                for stage in ("decode_04_paged_kv", "decode_03_seqlens_k"):
                    try:
                        real.launch(stage, params, None)
                        failures.append("%s took a negative softmax scale" % stage)
                    except fa_capi.FaCapiError as e:
                        said = str(e)
                    if stage == "decode_03_seqlens_k":
                        check("a stage without paged_kv refuses the block table (%s)" % said, "paged_kv" in said)
                    elif page_size == 24:
                        check("pages of 24 rows refused (%s)" % said, "page_size 24" in said)
                    else:
                        check("pages of %d: the block table passes the launcher's checks (%s)" % (page_size, said),
                              "softmax_scale" in said)

# --- the causal mask aligned to the bottom-right, on fake PyTorch modules ------------------------------
bias = types.ModuleType("torch.nn.attention.bias")
bias.causal_lower_right = lambda seq_q, seq_kv: ("lower_right", seq_q, seq_kv)
backends_cuda = types.ModuleType("torch.backends.cuda")
flash_ok = [True]
backends_cuda.SDPAParams = lambda *a: a
backends_cuda.can_use_flash_attention = lambda params, debug: flash_ok[0]
causal = decode_bench.Case("fp16", 128, 1, 32, 8, 8, 4096, True)
with mock.patch.dict(sys.modules, {"torch": torch_module, "torch.nn": types.ModuleType("torch.nn"),
                                   "torch.nn.attention": attention, "torch.nn.attention.bias": bias,
                                   "torch.backends": types.ModuleType("torch.backends"),
                                   "torch.backends.cuda": backends_cuda}):
    ops = ["q", "k", "v"]
    check("FA2, causal: causal_lower_right and enable_gqa (%r)" % (decode_bench.sdpa_options(None, "fa2", causal, ops),),
          decode_bench.sdpa_options(None, "fa2", causal, ops)
          == ({"enable_gqa": True, "attn_mask": ("lower_right", 8, 4096)}, None))
    flash_ok[0] = False
    options, why = decode_bench.sdpa_options(None, "fa2", causal, ops)
    check("FA2, causal, no flash kernel for it: unavailable, never another kernel (%r)" % why,
          options is None and why.startswith("unavailable:") and "can_use_flash_attention" in why)
    check("cuDNN, causal: is_causal=True, its alignment checked afterwards",
          decode_bench.sdpa_options(None, "cudnn", causal, ops) == ({"enable_gqa": True, "is_causal": True}, None))
    check("not causal, as many K/V heads: no options",
          decode_bench.sdpa_options(None, "fa2", causal._replace(causal=False, kv_heads=32), ops) == ({}, None))
calls = []


def top_left_only(torch, ref, q, k, v, out, case, args):
    calls.append(case.seq_kv)
    return (case.seq_kv == case.seq_q, 0.25, "made up")


with mock.patch.object(decode_bench, "check", top_left_only):
    key = FakeTensor((1, 4096, 8, 128), "k")
    verdict = decode_bench.check_reference(None, None, "cudnn", None, key, key, None, causal, None)
    check("cuDNN's output is the top-left mask's: unavailable, said so (%r)" % (verdict,),
          verdict[0] is False and verdict[2].startswith("unavailable:") and "top-left" in verdict[2]
          and calls == [4096, 8])
    check("FA2's failure stays a failure", decode_bench.check_reference(None, None, "fa2", None, key, key, None,
                                                                       causal, None)[2] == "FAIL: made up")

# --- --help -------------------------------------------------------------------------------------
done = subprocess.run([sys.executable, os.path.join(TOOLS, "decode_bench.py"), "--help"], stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True)
check("decode_bench.py --help lists its options", done.returncode == 0 and "--dry-run" in done.stdout
      and "usage" in done.stdout)

# --- the plot -------------------------------------------------------------------------------------
try:
    import matplotlib  # noqa: F401
    have_matplotlib = True
except ImportError:
    have_matplotlib = False
if have_matplotlib:
    with tempfile.TemporaryDirectory() as tmp:
        plot_rows = []
        for seq_q in (1, 8):
            for batch in (1, 16):
                for kv_heads in (32, 8, 1):
                    for seq_kv in (4096, 16384, 65536):
                        for impl, kind, rate, cache in (
                                ("ampere_14_lse", "stage", 0.2, "contiguous"),
                                ("decode_01_split_kv", "stage", 0.8, "contiguous"),
                                ("decode_01_split_kv", "stage", 0.75, "paged16"),
                                ("fa2", "reference", 0.3, "contiguous"), ("cudnn", "reference", 0.35, "contiguous")):
                            nb = decode_csv.row_bytes(batch, 32, kv_heads, seq_q, seq_kv, 128, "fp16",
                                                      decode_csv.page_size_of(cache))
                            r = row(impl, kind, nb / (rate * 3000e9) * 1e3, kv_heads=kv_heads, seq_kv=seq_kv, batch=batch,
                                    cache=cache)
                            r.update(seq_q=seq_q, bytes=nb)
                            if impl == "cudnn" and kv_heads == 1:
                                r.update(status="unavailable: made up", min_ms="", median_ms="")
                            if impl == "decode_01_split_kv" and seq_kv == 4096 and batch == 16:
                                r.update(status="FAIL: made up", min_ms="", median_ms="")
                            plot_rows.append(r)
        decode_csv.fill_metrics(plot_rows, 3000.0)
        path = os.path.join(tmp, "decode_fake.csv")
        decode_csv.write_decode_csv(path, [("gpu", "FAKE GPU"), ("read_bw_gbytes_per_s", "3000.0"),
                                           ("date", "2000-01-01T00:00:00Z"), ("git", "0000000")], plot_rows)
        outputs = []
        for name in ("a", "b"):
            done = subprocess.run([sys.executable, os.path.join(TOOLS, "plot.py"), "--decode", path, "--out-dir",
                                   os.path.join(tmp, name)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            check("plot.py --decode exits 0 (%s)" % done.stdout[-300:], done.returncode == 0)
            folder = os.path.join(tmp, name)
            outputs.append({f: open(os.path.join(folder, f), "rb").read() for f in sorted(os.listdir(folder))}
                           if os.path.isdir(folder) else {})
        check("one PNG per configuration (%r)" % sorted(outputs[0]),
              sorted(outputs[0]) == ["fp16_d128_q1.png", "fp16_d128_q8.png"])
        check("PNGs", all(data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10000 for data in outputs[0].values()))
        check("the same bytes twice", outputs[0] == outputs[1])
        # An older CSV, without the cache column: the same plots, every row contiguous.
        old_path = os.path.join(tmp, "decode_old.csv")
        old_columns = [c for c in decode_csv.COLUMNS if c != "cache"]
        with open(old_path, "w") as f:
            f.write("# gpu=FAKE GPU\n# read_bw_gbytes_per_s=3000.0\n" + ",".join(old_columns) + "\n")
            for r in plot_rows:
                if r["cache"] == "contiguous":
                    f.write(",".join(str(r[c]) for c in old_columns) + "\n")
        done = subprocess.run([sys.executable, os.path.join(TOOLS, "plot.py"), "--decode", old_path, "--out-dir",
                               os.path.join(tmp, "old")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check("plot.py --decode on an older CSV without `cache`: exit 0, the same PNGs (%s)" % done.stdout[-300:],
              done.returncode == 0 and sorted(os.listdir(os.path.join(tmp, "old"))) == sorted(outputs[0])
              and all(outputs[0][f] != open(os.path.join(tmp, "old", f), "rb").read() for f in outputs[0]))
        sys.path.insert(0, TOOLS)
        import plot as plot_module  # noqa: E402
        check("a paged row is a series of its own: '<stage> (paged16)'; a row without a cache is contiguous",
              plot_module.decode_series({"impl": "decode_04_paged_kv", "cache": "paged16"})
              == "decode_04_paged_kv (paged16)" and plot_module.decode_series({"impl": "fa2"}) == "fa2"
              and plot_module.decode_series({"impl": "x", "cache": "contiguous"}) == "x")
        done = subprocess.run([sys.executable, os.path.join(TOOLS, "plot.py"), "--decode",
                               os.path.join(tmp, "missing.csv")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        check("plot.py --decode on a missing CSV: exit 2 and says so (%r)" % done.stdout,
              done.returncode == 2 and "decode_bench.py writes it" in done.stdout)

if failures:
    print("test_decode_bench: %d check(s) failed:" % len(failures))
    for f in failures:
        print("  FAIL: " + f)
    sys.exit(1)
if not have_numpy:
    print("test_decode_bench: every check passed but the paged cache's on numpy: numpy is not installed (skipped)")
    sys.exit(77)
if not have_matplotlib:
    print("test_decode_bench: every check passed but the plot's: matplotlib is not installed (skipped)")
    sys.exit(77)
print("test_decode_bench: bytes, cold-L2 copies, CSV, options, dry run, stage choice, read bandwidth, the paged "
      "cache, a whole run on fakes%s and the plot: all checks passed" % (
          ", paged_params against build/libfa_capi.so" if library_checked else " (build/libfa_capi.so not built: "
          "paged_params not checked against it)"))
