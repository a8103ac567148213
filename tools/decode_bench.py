#!/usr/bin/env python3
"""The decoding benchmark: the split-KV stages against the HBM read bandwidth, FA2 and cuDNN.

Decoding is memory-bound (docs/benchmarking.md, Decoding): one step reads the whole KV cache for a
few query rows, so its figure of merit is bytes per second. For every case (batch, seq_q, 32 query
heads with 32, 8 or 1 K/V heads, seq_kv, head_dim, dtype) this times, in shuffled rounds in one
process (as tools/interleaved.py does, whose machinery it uses):

  the stages     every stage whose stage.json declares the feature "split_kv" (the decoding track),
                 and the non-split stage each of them branched from (its parent outside the
                 track, e.g. ampere_14_lse; --no-parents leaves it out), through build/libfa_capi.so
  fa2, cudnn     torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION)
                 and sdpa_kernel(CUDNN_ATTENTION), on [B, H, S, D] views of the same [B, S, H, D]
                 memory; fewer K/V heads through enable_gqa=True, never by repeating K and V (that
                 would change the bytes); a backend without a kernel for the case is a row saying
                 'unavailable: <why>'

and reports GB/s = (K and V read + Q read + O written) / time (tools/decode_csv.py) and its % of the
HBM read bandwidth that build/fa_microbench hbm-read (tools/microbench/memory_bandwidth.cu: a
checked, read-only sum over 4 GiB) measures in the same run, before the cases and after them.

Contiguous and paged caches (--cache, default both; --page-size, default 16): the stages run on the
contiguous cache [batch, seq_kv, kv_heads, head_dim] (CSV cache "contiguous"), and those declaring
the feature "paged_kv" also, in the same rounds, on a paged one (cache "paged16"): the same keys cut
into pages of 16 rows, the pages shuffled over a pool [num_pages, 16, kv_heads, head_dim], found
through an int32 block table [batch, ceil(seq_kv / 16)] (a random permutation of the pool's pages,
as a server's pages lie). The bytes are the same K and V, Q and O, plus the table's entries (4 bytes
each). FA2 and cuDNN take no block table: they run on the contiguous cache only, so a paged row's
% of FA2 and % of cuDNN compare its time with theirs on the contiguous cache, in the same rounds.
The other stages get no paged rows (the plan and the CSV's header say so).

Cold L2: the launches rotate over copies of K and V, launch n reading copy n mod count, with count
the smallest that makes all copies together at least 4 x the L2 (rotation_copies in
tools/decode_csv.py; the L2 size from the device). Every byte of a cache then has 4 x L2 of other
data read between two of its reads. A paged cache has as many copies, each its own pool (one block
table for all: the same pages in the same places); the launches of both caches share the count n.
A case whose contiguous copies fit but not the pools beside them gets its paged rows 'skipped'.

Correctness first: every implementation's output is checked against fp64 attention (tools/
torch_reference.py's check_output, the rule of common/checker.h) on every query row of sampled
batches (the first, the last and a random one), and must be finite everywhere (a stage's output is
poisoned with 0xFF bytes before that launch); one that fails gets no time. A paged launch's output
is checked against the keys gathered back from its pool through the block table, batch by batch.

Launches shorter than the host's time to issue them (a few microseconds of K and V at batch 1 with
one K/V head) would time the host: before each launch the GPU gets a short spin kernel
(torch.cuda._sleep, --host-gap-us, untimed), so the launch is queued before the GPU reaches it.

    cmake -S . -B build -DCMAKE_CUDA_ARCHITECTURES=90
    cmake --build build --target fa_capi fa_microbench
    python3 tools/decode_bench.py --dry-run     # the cases, the copies, what is skipped, the time it takes
    python3 tools/decode_bench.py --cache paged --page-size 16,64,256 --dry-run   # no contiguous stage rows
    python3 tools/decode_bench.py               # measure: plots/results/decode_<gpu>_<date>.csv and
                                                # decode_latest.csv, then plots/decode_bandwidth/*.png

Exit status: 0 every stage passed its check; 1 a stage failed or could not run; 2 bad options or a
missing build; 3 no GPU or no PyTorch.
"""

import argparse
import collections
import csv
import datetime
import io
import os
import random
import shlex
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import decode_csv  # noqa: E402
import stages as stage_declarations  # noqa: E402
from cli_util import (REPO, cuda_torch, fmt_duration, git_revision, int_list, k_int_list,  # noqa: E402
                      length_text, nvidia_smi_query, report_written, results_paths, results_paths_text, shown_path,
                      split_dtypes_and_references, stage_runs_on)
from decode_csv import (CONTIGUOUS, cache_label, decode_bytes, fmt_bytes, kv_cache_bytes,  # noqa: E402
                        page_size_of, pages_per_sequence, pool_bytes, rotation_copies, row_bytes)

DEFAULT_OUT_DIR = os.path.join(REPO, "plots", "results")
DEFAULT_PLOT_DIR = os.path.join(REPO, "plots", "decode_bandwidth")
PLOT = os.path.join(REPO, "tools", "plot.py")
FEATURE = "split_kv"
PAGED_FEATURE = "paged_kv"
CACHES = ("contiguous", "paged")
# The default: vLLM's default block size (CacheConfig.DEFAULT_BLOCK_SIZE = 16), and the size at which
# the paged stage's translation costs most (a new page every 16 rows: 4 table entries per K/V tile,
# docs/stages/decode/04_paged_kv.md), so the default rows are the hard case. FlashAttention-2's
# flash_attn_with_kvcache wants multiples of 256: --page-size 256 (or 16,64,256 in one run).
DEFAULT_PAGE_SIZE = 16
MAX_SEQ_Q = 128  # one query block of the stages: beyond it the case is prefill (tools/bench.py)
HEAD_DIMS = (64, 128)
REFERENCES = ("fa2", "cudnn")
GIB = 1 << 30

# The time estimate (--dry-run, and printed before a run). Guesses until a run has measured them:
STARTUP_S = 25.0            # importing torch, loading the library, two read-bandwidth measurements
CASE_SETUP_S = 0.3          # per case: tensors, and then...
FILL_BYTES_PER_S = 100e9    # ...random K and V and their copies written at this rate (and freed)
CHECK_S = 0.1               # per implementation and case: the first launch and the check, plus...
CHECK_BYTES_PER_S = 200e9   # ...the fp64 copies of K and V of each checked batch at this rate
LAUNCH_HOST_S = 60e-6       # the host's time to issue one launch (Python, ctypes or SDPA's dispatch)
REFERENCE_FIRST_CALL_S = 0.5  # per reference and case: a new shape's first call (cuDNN builds its plan)
ASSUMED_GBYTES_PER_S = 1500.0  # every implementation's bandwidth (FA2 and cuDNN: 1.0-1.1 TB/s at batch 1)
PARENT_SLOTS = 264          # thread blocks a non-split stage needs to fill an H100 (2 per SM x 132)
# Memory besides the copies of K and V: the outputs, the split workspaces, SDPA's, the allocator.
SLACK_BYTES = 2 * GIB


Case = collections.namedtuple("Case", "dtype head_dim batch heads kv_heads seq_q seq_kv causal")


def case_label(case):
    return "%s d%d b%d q%d h%d/%d kv%s%s" % (case.dtype, case.head_dim, case.batch, case.seq_q, case.heads,
                                            case.kv_heads, length_text(case.seq_kv), " causal" if case.causal else "")


def lengths(text):
    """argparse type: '4k,16k,65536' -> [4096, 16384, 65536] (k = 1024)."""
    return k_int_list(text, bad="expected lengths such as 4k,16k,65536, got %r", small="lengths must be >= 1, got %r",
                      empty="expected at least one length, got %r")


def byte_count(text):
    """argparse type: '4G', '512M', '1073741824' -> bytes (binary units), as fa_microbench --bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    scale = units.get(text[-1:].upper(), 1)
    try:
        value = int(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError("expected a byte count such as 4G, got %r" % text)
    if value < 1 << 20:
        raise argparse.ArgumentTypeError("at least 1M, got %r" % text)
    return value


def page_sizes(text):
    """argparse type: '16' or '16,64,256' -> [16, 64, 256], each a positive multiple of 16 rows (what
    every paged launch needs, common/params.cpp check_block_table; a size the stage's launcher refuses
    besides is an ERROR row with its message)."""
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected page sizes such as 16 or 16,64,256, got %r" % text)
    if not values:
        raise argparse.ArgumentTypeError("expected at least one page size, got %r" % text)
    for value in values:
        if value < 16 or value % 16:
            raise argparse.ArgumentTypeError("page size %d: pages hold a positive multiple of 16 rows (16, 32, 64, "
                                             "256, ...)" % value)
    return list(dict.fromkeys(values))


def shape_error(heads, kv_heads, seq_q, seq_kv, head_dim):
    """Why a case cannot be measured, or None."""
    if heads % kv_heads:
        return "--kv-heads %d does not divide --heads %d (each K/V head serves heads / kv_heads query heads)" % (
            kv_heads, heads)
    if head_dim not in HEAD_DIMS:
        return "--head-dims: the stages compute head_dim 64 and 128, not %d" % head_dim
    if seq_q > MAX_SEQ_Q:
        return ("--seq-qs: seq_q %d is not a decoding shape (at most %d query rows per sequence; tools/bench.py "
                "measures prefill)" % (seq_q, MAX_SEQ_Q))
    if seq_q > seq_kv:
        return ("seq_q %d is longer than seq_kv %d: a decoding step's queries are the last of the sequence, "
                "so seq_q <= seq_kv" % (seq_q, seq_kv))
    return None


def parse_args(argv):
    p = argparse.ArgumentParser(prog="tools/decode_bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=os.path.join(REPO, "build", "libfa_capi.so"), help="the C interface's library")
    p.add_argument("--microbench", default=os.path.join(REPO, "build", "fa_microbench"),
                   help="fa_microbench, whose hbm-read measures the read bandwidth in the same run")
    p.add_argument("--stages", default=None,
                   help="comma-separated stage ids or <track>_NN (default: every stage declaring split_kv, and the "
                        "non-split stage each branched from; '' for none)")
    p.add_argument("--no-parents", action="store_true", help="without the non-split stages the track branched from")
    p.add_argument("--references", default="fa2,cudnn", help="comma-separated subset of fa2,cudnn ('' for none)")
    p.add_argument("--dtypes", default="fp16", help="fp16, bf16 or fp16,bf16 (default fp16)")
    p.add_argument("--head-dims", type=int_list, default=[128], help="64, 128 or 64,128 (default 128)")
    p.add_argument("--batches", type=int_list, default=[1, 16, 64], help="default 1,16,64")
    p.add_argument("--seq-qs", type=int_list, default=[1, 8], help="query rows per sequence (default 1,8)")
    p.add_argument("--heads", type=int, default=32, help="query heads (default 32)")
    p.add_argument("--kv-heads", type=int_list, default=[32, 8, 1], help="K/V heads (default 32,8,1)")
    p.add_argument("--seq-kvs", type=lengths, default=lengths("4k,16k,64k,128k"),
                   help="KV cache lengths, k = 1024 (default 4k,16k,64k,128k)")
    p.add_argument("--cache", default="contiguous,paged",
                   help="contiguous, paged or contiguous,paged (default): the stages on the contiguous cache, and "
                        "those declaring paged_kv on a paged one (pages shuffled over a pool, a block table), in the "
                        "same rounds; FA2 and cuDNN always on the contiguous cache")
    p.add_argument("--page-size", type=page_sizes, default=[DEFAULT_PAGE_SIZE],
                   help="rows per page of the paged cache, a multiple of 16: 16 (default: vLLM's default block "
                        "size, and the paged stage's costliest), 64, 256, ...; a list (16,64,256) times each, one "
                        "pool per size, in the same rounds")
    p.add_argument("--causal", choices=("off", "on", "both"), default="off",
                   help="the cases with seq_q > 1: without a mask (off, the default), with the causal mask aligned "
                        "to the bottom-right (on: query i sees keys j <= i + seq_kv - seq_q), or both")
    p.add_argument("--warmup", type=int, default=5, help="untimed rounds per case (default 5)")
    p.add_argument("--reps", type=int, default=20, help="timed rounds per case (default 20)")
    p.add_argument("--check-batches", type=int, default=3,
                   help="batches checked against fp64 (the first, the last, random ones; default 3)")
    p.add_argument("--check-rows", type=int, default=16, help="query rows checked per (batch, head) (default 16)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--host-gap-us", type=float, default=50.0,
                   help="a spin kernel of about this long before every launch, untimed, so that the launch is "
                        "queued before the GPU reaches it (default 50; 0: none)")
    p.add_argument("--read-bytes", type=byte_count, default=byte_count("4G"),
                   help="the buffer fa_microbench hbm-read sums (default 4G)")
    p.add_argument("--l2-factor", type=int, default=decode_csv.L2_FACTOR,
                   help="the copies of K and V hold at least this many times the L2 (default %d)" % decode_csv.L2_FACTOR)
    p.add_argument("--out-dir", default=DEFAULT_OUT_DIR,
                   help="where decode_<gpu>_<date>.csv and decode_latest.csv go (default plots/results)")
    p.add_argument("--csv", help="write the CSV here only (no dated file, no decode_latest.csv)")
    p.add_argument("--plot-dir", default=DEFAULT_PLOT_DIR, help="where the plots go (default plots/decode_bandwidth)")
    p.add_argument("--no-plot", action="store_true", help="do not run tools/plot.py --decode afterwards")
    p.add_argument("--dry-run", action="store_true",
                   help="print the cases, implementations, copies, skipped cases and the estimated time; no GPU")
    p.add_argument("--assume-l2-mib", type=float, default=50.0,
                   help="--dry-run: the L2 to plan the copies with (default 50: the H100's; the H200 has 60)")
    p.add_argument("--assume-memory-gib", type=float, default=79.0,
                   help="--dry-run: the GPU memory free at the start (default 79: an H100 80GB; H200: 139)")
    p.add_argument("--compute-capability", type=int, default=90, help="--dry-run: the GPU's (default 90)")
    args = p.parse_args(argv)
    split_dtypes_and_references(p, args, REFERENCES)
    args.cache_list = list(dict.fromkeys(c for c in args.cache.split(",") if c))
    if not args.cache_list or any(c not in CACHES for c in args.cache_list):
        p.error("--cache takes contiguous, paged or contiguous,paged, not %r" % args.cache)
    # The cache labels of the stage rows, in the order they are planned: contiguous first, so that a
    # case whose pools do not fit beside its contiguous copies keeps the contiguous rows.
    args.layouts = ([CONTIGUOUS] if "contiguous" in args.cache_list else []) + \
        ([cache_label(n) for n in args.page_size] if "paged" in args.cache_list else [])
    if args.heads < 1:
        p.error("--heads must be >= 1")
    if args.warmup < 0 or args.reps < 1:
        p.error("--warmup must be >= 0 and --reps >= 1")
    if args.check_batches < 1 or args.check_rows < 1:
        p.error("--check-batches and --check-rows must be >= 1")
    if args.host_gap_us < 0:
        p.error("--host-gap-us must be >= 0")
    if args.l2_factor < 1:
        p.error("--l2-factor must be >= 1")
    for kv_heads in args.kv_heads:
        for head_dim in args.head_dims:
            for seq_q in args.seq_qs:
                for seq_kv in args.seq_kvs:
                    why = shape_error(args.heads, kv_heads, seq_q, seq_kv, head_dim)
                    if why:
                        p.error(why)
    args.cases = cases(args)
    return args


def cases(args):
    """[Case] in the order they are measured: smallest K and V first within each (dtype, head_dim), so
    that a case that runs out of memory comes after the ones that fit."""
    out = []
    causal_values = {"off": [False], "on": [True], "both": [False, True]}[args.causal]
    for dtype in args.dtype_list:
        for head_dim in args.head_dims:
            group = []
            for batch in args.batches:
                for seq_q in args.seq_qs:
                    for kv_heads in args.kv_heads:
                        for seq_kv in args.seq_kvs:
                            for causal in (causal_values if seq_q > 1 else [False]):
                                group.append(Case(dtype, head_dim, batch, args.heads, kv_heads, seq_q, seq_kv, causal))
            group.sort(key=lambda c: (kv_cache_bytes(c.batch, c.kv_heads, c.seq_kv, c.head_dim, c.dtype), c))
            out += group
    return out


# ------------------------------------------------------------------------------------------------
# What runs, and what it costs


def decode_stages(all_stages, selection=None, parents=True, gpu_cc=None):
    """[(stage id, role)] in track order: role 'split_kv' for the stages declaring the feature, 'parent'
    for the non-split stage one of them branched from. selection: the --stages items (ids or
    <track>_NN) instead of the default; gpu_cc: leave out what that GPU cannot run. Raises
    ValueError for an item that names no stage."""
    by_name = {s.name: s for s in all_stages}
    if selection is None:
        chosen = [s.name for s in all_stages if FEATURE in s.features]
        if parents:
            outside = [by_name[s].parent for s in chosen
                       if by_name[s].parent in by_name and FEATURE not in by_name[by_name[s].parent].features]
            chosen = list(dict.fromkeys(outside)) + chosen
    else:
        chosen = []
        for item in selection:
            names = [s.name for s in all_stages if stage_declarations.selects(item, s.name)]
            if not names:
                raise ValueError("--stages: no stage is called %r (stage ids or <track>_NN, e.g. decode_01)" % item)
            chosen += names
        chosen = list(dict.fromkeys(chosen))
    if gpu_cc is not None:
        chosen = [n for n in chosen
                  if stage_runs_on(by_name[n].min_compute_capability, by_name[n].target.endswith("a"), gpu_cc)]
    return [(n, "split_kv" if FEATURE in by_name[n].features else "parent") for n in chosen]


Impl = collections.namedtuple("Impl", "name kind role cache")


def paged_stages(stage_roles, by_name):
    """The stages of stage_roles that declare "paged_kv" (they also run on the paged caches)."""
    return [n for n, _ in stage_roles if n in by_name and PAGED_FEATURE in by_name[n].features]


def implementations(stage_roles, paged_names, args):
    """[Impl] of every case, in the order of its rows: the stages on the contiguous cache (--cache
    contiguous), the paged_kv stages on each page size's pool (--cache paged), then FA2 and cuDNN,
    which always read the contiguous cache."""
    out = []
    for label in args.layouts:
        if label == CONTIGUOUS:
            out += [Impl(n, "stage", role, CONTIGUOUS) for n, role in stage_roles]
        else:
            out += [Impl(n, "stage", "paged", label) for n in paged_names]
    return out + [Impl(r, "reference", "reference", CONTIGUOUS) for r in args.reference_list]


def timed_name(impl):
    """The name of an implementation in the rounds: the stage or reference, '<stage>@paged16' on a pool."""
    return impl.name if impl.cache == CONTIGUOUS else "%s@%s" % (impl.name, impl.cache)


def layouts_of(impls):
    """The caches that impls read, contiguous first, then the page sizes in --page-size's order."""
    labels = list(dict.fromkeys(i.cache for i in impls))
    return sorted(labels, key=lambda label: (label != CONTIGUOUS, labels.index(label)))


def layout_bytes(case, label):
    """Bytes of one copy of a cache: K and V, or the pools of K and V pages (the last page of each
    sequence whole)."""
    page_size = page_size_of(label)
    if not page_size:
        return kv_cache_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype)
    return pool_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype, page_size)


def case_bytes(case, label):
    """The row's bytes column (decode_csv.row_bytes): K and V, Q and O, and a paged cache's table."""
    return row_bytes(case.batch, case.heads, case.kv_heads, case.seq_q, case.seq_kv, case.head_dim, case.dtype,
                     page_size_of(label))


def memory_need(case, impl_count, copies, page_sizes=()):
    """Bytes a case takes on the GPU: the copies of K and V, Q and one output per implementation, the
    fp64 check of one batch (K and V of one sequence repeated to every query head, and its
    conversion), and SLACK_BYTES; with page_sizes (its paged caches'), also their block tables and
    one sequence's K and V gathered from a pool for the check."""
    elem = decode_csv.element_bytes(case.dtype)
    q_bytes = case.batch * case.seq_q * case.heads * case.head_dim * elem
    check = (2 * case.heads + case.kv_heads) * case.seq_kv * case.head_dim * 8
    paged = sum(decode_csv.block_table_bytes(case.batch, case.seq_kv, n) for n in page_sizes)
    if page_sizes:
        paged += pool_bytes(1, case.kv_heads, case.seq_kv, case.head_dim, case.dtype, max(page_sizes))
    return copies * kv_cache_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype) + \
        (1 + impl_count) * q_bytes + check + paged + SLACK_BYTES


def layouts_need(case, labels, copies):
    """Bytes of the copies of these caches (without the contiguous cache, the pools are filled with
    keys of their own: no contiguous K and V beside them)."""
    return copies * sum(layout_bytes(case, label) for label in labels)


def copies_text(copies):
    return "%d %s" % (copies, "copy" if copies == 1 else "copies")


Planned = collections.namedtuple("Planned", "case copies why seconds layouts dropped")


def plan_case(case, impls, l2_bytes, free_bytes, l2_factor=decode_csv.L2_FACTOR):
    """(copies, caches kept, {cache dropped: why}, None), or (0, [], {}, why the case is skipped): the
    copies that keep K and V cold in L2 (the count of the contiguous K and V, for every cache), if
    they fit beside everything else the case needs in free_bytes. Where the copies of every cache do
    not fit, the paged caches are dropped from the last, each with its reason; where the first
    cache's alone do not fit, the case is skipped."""
    kv = layout_bytes(case, CONTIGUOUS)
    copies, _ = rotation_copies(kv, l2_bytes, None, l2_factor)

    def others(labels):  # everything but the copies, for the implementations on these caches
        return memory_need(case, sum(1 for i in impls if i.cache in labels), 0,
                           [page_size_of(label) for label in labels if label != CONTIGUOUS])
    kept, dropped = layouts_of(impls), {}
    while kept and layouts_need(case, kept, copies) > max(0, free_bytes - others(kept)):
        budget = max(0, free_bytes - others(kept))
        if len(kept) == 1:
            if kept[0] == CONTIGUOUS:
                _, why = rotation_copies(kv, l2_bytes, budget, l2_factor)
            else:
                why = "%s of the %s pools (%s) %s in the %s available" % (
                    copies_text(copies), kept[0], fmt_bytes(layouts_need(case, kept, copies)),
                    "does not fit" if copies == 1 else "do not fit", fmt_bytes(budget))
            return 0, [], {}, "skipped: %s beside the %s the rest of the case needs (%s free)" % (
                why, fmt_bytes(others(kept)), fmt_bytes(free_bytes))
        label = kept.pop()
        dropped[label] = ("skipped: %s of the %s pools (%s) %s beside %s (%s) in the %s available beside the %s "
                          "the rest of the case needs%s" % (
                              copies_text(copies), label, fmt_bytes(layouts_need(case, [label], copies)),
                              "does not fit" if copies == 1 else "do not fit",
                              " and ".join("the contiguous K and V" if k == CONTIGUOUS else "the %s pools" % k
                                           for k in kept),
                              fmt_bytes(layouts_need(case, kept, copies)), fmt_bytes(budget),
                              fmt_bytes(others(kept + [label])),
                              "; --cache paged --references '' times the paged rows alone" if CONTIGUOUS in kept
                              else ""))
    return copies, kept, dropped, None


def launch_seconds(case, role):
    """The estimate's time of one launch of an implementation (role 'parent': a stage that runs one
    thread block per (batch, head), which fills PARENT_SLOTS only from batch x heads that large)."""
    nbytes = decode_bytes(case.batch, case.heads, case.kv_heads, case.seq_q, case.seq_kv, case.head_dim, case.dtype)
    rate = ASSUMED_GBYTES_PER_S * 1e9
    if role == "parent":
        rate *= min(1.0, case.batch * case.heads / PARENT_SLOTS)
    return nbytes / rate


def estimate_case_seconds(case, impls, copies, args, layouts=None):
    """Seconds one case takes (the constants above): setup (the copies of every cache written), one
    checked launch per implementation, then warmup + reps rounds of every implementation, each
    launch after its spin kernel."""
    layouts = layouts_of(impls) if layouts is None else layouts
    impls = [i for i in impls if i.cache in layouts]
    checked = min(args.check_batches, case.batch)
    check_bytes = checked * (2 * case.heads + case.kv_heads) * case.seq_kv * case.head_dim * 8
    seconds = CASE_SETUP_S + layouts_need(case, layouts, copies) / FILL_BYTES_PER_S
    seconds += len(impls) * (CHECK_S + check_bytes / CHECK_BYTES_PER_S)
    seconds += sum(REFERENCE_FIRST_CALL_S for i in impls if i.role == "reference")
    gap = args.host_gap_us * 1e-6
    per_round = sum(max(LAUNCH_HOST_S, gap + launch_seconds(case, i.role)) for i in impls)
    return seconds + (args.warmup + args.reps) * per_round


def plan(args, impls, l2_bytes, free_bytes):
    """[Planned(case, copies, skip reason or None, estimated seconds, caches kept, {cache dropped:
    why})] and the total estimated seconds."""
    out, total = [], STARTUP_S
    for case in args.cases:
        copies, kept, dropped, why = plan_case(case, impls, l2_bytes, free_bytes, args.l2_factor)
        seconds = 0.0 if why else estimate_case_seconds(case, impls, copies, args, kept)
        total += seconds
        out.append(Planned(case, copies, why, seconds, kept, dropped))
    return out, total


def describe_caches(impls, stage_roles, paged_names, args):
    """Lines saying which stages run on which cache, and which do not run on a paged one and why."""
    lines = []
    if "paged" not in args.cache_list:
        return lines
    sizes = ", ".join(str(n) for n in args.page_size)
    if paged_names:
        lines.append("paged caches: pages of %s rows, shuffled over a pool (block table: a random permutation), "
                     "for %s" % (sizes, ", ".join(paged_names)))
    else:
        lines.append("paged caches: none of the stages declares \"%s\": no paged rows" % PAGED_FEATURE)
    others = [n for n, _ in stage_roles if n not in paged_names]
    if others:
        lines.append("not on a paged cache (no \"%s\" in stage.json): %s" % (PAGED_FEATURE, ", ".join(others)))
    if args.reference_list and paged_names:
        lines.append("%s: on the contiguous cache only (SDPA takes no block table); a paged row's %% of them "
                     "compares with their contiguous time in the same rounds" % ", ".join(args.reference_list))
    return lines


def print_plan(planned, total, impls, args, l2_bytes, free_bytes, notes=(), out=None):
    out = out or sys.stdout
    names = []
    for i in impls:
        if i.kind == "reference":
            names.append("%s (SDPA)" % i.name)
        elif i.cache != CONTIGUOUS:
            names.append("%s (%s)" % (i.name, i.cache))
        else:
            names.append("%s (%s)" % (i.name, "non-split parent" if i.role == "parent" else i.role))
    print("decode_bench: %d cases x %d implementations: %s" % (len(planned), len(names), ", ".join(names) or "none"),
          file=out)
    for note in notes:
        print("decode_bench: %s" % note, file=out)
    print("decode_bench: L2 %s, %s of GPU memory free; K and V rotated over copies holding >= %d x L2; "
          "%d warm-up + %d timed rounds per case" % (fmt_bytes(l2_bytes), fmt_bytes(free_bytes), args.l2_factor,
                                                     args.warmup, args.reps), file=out)
    print("%-34s %11s %11s %6s %9s  %s" % ("case", "K+V bytes", "bytes", "copies", "est.", "note"), file=out)
    for p in planned:
        case = p.case
        nbytes = decode_bytes(case.batch, case.heads, case.kv_heads, case.seq_q, case.seq_kv, case.head_dim, case.dtype)
        kv = kv_cache_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype)
        note = p.why or " ".join(["caches: " + "+".join(p.layouts)] +
                                 ["(%s %s)" % (label, why) for label, why in p.dropped.items()])
        print("%-34s %11s %11s %6s %9s  %s" % (case_label(case), fmt_bytes(kv), fmt_bytes(nbytes),
                                              p.copies or "-", "%.1f s" % p.seconds if not p.why else "-", note),
              file=out)
    skipped = sum(1 for p in planned if p.why)
    paged = sum(1 for p in planned if any(label != CONTIGUOUS for label in p.layouts))
    print("decode_bench: %d cases measured (%d with a paged cache), %d skipped; estimated time %s (a guess from "
          "assumed rates: %.0f GB/s per launch, %.0f us to issue one, %.0f s to start; not yet calibrated on a GPU)" % (
              len(planned) - skipped, paged, skipped, fmt_duration(total), ASSUMED_GBYTES_PER_S, LAUNCH_HOST_S * 1e6,
              STARTUP_S), file=out)


# ------------------------------------------------------------------------------------------------
# The read bandwidth (fa_microbench)


class MicrobenchError(Exception):
    pass


def run_microbench(exe, arguments, timeout=300):
    if not os.path.isfile(exe):
        raise MicrobenchError("%s is not built: cmake --build build --target fa_microbench" % shown_path(exe))
    try:
        done = subprocess.run([exe] + arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        raise MicrobenchError("%s %s: %s" % (shown_path(exe), " ".join(arguments), e))
    if done.returncode != 0:
        raise MicrobenchError("%s %s exited with %d: %s" % (shown_path(exe), " ".join(arguments), done.returncode,
                                                          " ".join(done.stderr.split())[-400:]))
    return done.stdout


def device_info(exe):
    """fa_microbench info's '# key=value' lines as a dict (gpu, compute_capability, sms, cuda,
    cuda_driver_api, l2_bytes, memory_bytes)."""
    info = {}
    for line in run_microbench(exe, ["info"]).splitlines():
        key, sep, value = line.lstrip("# ").partition("=")
        if line.startswith("#") and sep:
            info[key.strip()] = value.strip()
    return info


def read_bandwidth(exe, read_bytes, reps=30):
    """(GB/s, method) of fa_microbench hbm-read: a checked, read-only grid-stride sum over read_bytes."""
    out = run_microbench(exe, ["hbm-read", "--bytes", str(read_bytes), "--warmup", "3", "--reps", str(reps)])
    for row in csv.reader(io.StringIO(out)):
        if len(row) >= 5 and row[0] == "hbm_read":
            return float(row[2]), row[4]
    raise MicrobenchError("%s hbm-read printed no hbm_read row: %r" % (shown_path(exe), out[-300:]))


# ------------------------------------------------------------------------------------------------
# One case on the GPU (everything below needs torch, imported in main())


class Rotation:
    """The copy of K and V each launch reads: launch n of the case, whichever implementation, reads
    copy n mod count."""

    def __init__(self, count):
        self.count = count
        self.launches = 0

    def next(self):
        copy = self.launches % self.count
        self.launches += 1
        return copy


def sampled_batches(batch, count, seed):
    """The first, the last and random batches: count of them (all if batch <= count), sorted."""
    picks = {0, batch - 1}
    rng = random.Random(seed)
    while len(picks) < min(count, batch):
        picks.add(rng.randrange(batch))
    return sorted(picks)


def block_table(torch, batch, max_pages, seed, device):
    """int32 [batch, max_pages] on device: a seeded random permutation of the pool's batch x max_pages
    pages, sequence b's page p at pool page table[b, p] (scattered, as a server's pages lie)."""
    order = torch.randperm(batch * max_pages, generator=torch.Generator().manual_seed(seed))
    return order.reshape(batch, max_pages).to(device=device, dtype=torch.int32).contiguous()


def paged_cache(torch, k, v, page_size, seed):
    """(pool of K, pool of V, block table): the keys of k and v [batch, seq_kv, kv_heads, head_dim] cut
    into pages of page_size rows and scattered over pools [batch * max_pages, page_size, kv_heads,
    head_dim], max_pages = ceil(seq_kv / page_size), through block_table. The rows of a last page past
    seq_kv are NaN (no key; a launch that read one would fail its check). One sequence at a time, so
    that nothing but the pools is allocated."""
    batch, seq_kv, kv_heads, head_dim = k.shape
    max_pages = pages_per_sequence(seq_kv, page_size)
    full, rest = divmod(seq_kv, page_size)
    table = block_table(torch, batch, max_pages, seed, k.device)
    pools = []
    for t in (k, v):
        pool = torch.empty((batch * max_pages, page_size, kv_heads, head_dim), dtype=t.dtype, device=t.device)
        for b in range(batch):
            pages = table[b].long()
            pool[pages[:full]] = t[b, :full * page_size].reshape(full, page_size, kv_heads, head_dim)
            if rest:
                pool[pages[full]] = float("nan")
                pool[pages[full], :rest] = t[b, full * page_size:]
        pools.append(pool)
    return pools[0], pools[1], table


def random_paged_cache(torch, case, dtype, page_size, seed):
    """paged_cache's pools and table without a contiguous K and V to cut (a run without contiguous
    rows): seeded normal keys written straight into the pools, the rows of a last page past seq_kv NaN."""
    max_pages = pages_per_sequence(case.seq_kv, page_size)
    full, rest = divmod(case.seq_kv, page_size)
    table = block_table(torch, case.batch, max_pages, seed, "cuda")
    torch.manual_seed(seed)
    pools = [torch.randn((case.batch * max_pages, page_size, case.kv_heads, case.head_dim), device="cuda",
                         dtype=dtype) for _ in range(2)]
    if rest:
        last = table[:, full].long()
        for pool in pools:
            pool[last, rest:] = float("nan")
    return pools[0], pools[1], table


def gather_pages(pool, table, b, seq_kv):
    """Sequence b's keys gathered from a pool through the block table: [1, seq_kv, kv_heads, head_dim]."""
    pages = pool[table[b].long()]  # [max_pages, page_size, kv_heads, head_dim], a new tensor
    return pages.reshape(1, pages.shape[0] * pages.shape[1], pages.shape[2], pages.shape[3])[:, :seq_kv]


def paged_params(lib, q, pool_k, pool_v, o, table, case, page_size):
    """FaCapiParams of a launch on a paged cache: lib.params on the pools (their batch stride steps
    from page to page, as common/c_api.h wants), then seq_kv, the block table, its batch stride,
    max_pages and page_size (no seqlens_k: every sequence has seq_kv keys)."""
    params = lib.params(q, pool_k, pool_v, o, causal=case.causal)
    params.seq_kv = case.seq_kv
    params.block_table = table.data_ptr()
    params.block_table_batch_stride = table.stride(0)
    params.max_pages = table.shape[1]
    params.page_size = page_size
    return params


def check(torch, ref, q, k, v, out_bhsd, case, args, table=None):
    """(passed, max_abs_err, summary): check_output's rule on every query row (up to --check-rows) of
    the sampled batches, and every element of the output finite. table: k and v are pools of pages,
    and each sampled batch's keys are gathered from them through this block table first."""
    finite = bool(torch.isfinite(out_bhsd).all().item())
    worst, summaries, passed = 0.0, [], finite
    for b in sampled_batches(case.batch, args.check_batches, args.seed + case.seq_kv):
        if table is None:
            k_b, v_b = k[b:b + 1], v[b:b + 1]
        else:
            k_b, v_b = gather_pages(k, table, b, case.seq_kv), gather_pages(v, table, b, case.seq_kv)
        ok, err, _, _, summary = ref.check_output(torch, q[b:b + 1], k_b, v_b, out_bhsd[b:b + 1],
                                                  case.causal, args.check_rows, args.seed + case.seq_q)
        worst = max(worst, err)
        if not ok:
            passed = False
            summaries.append("batch %d: %s" % (b, summary))
    if not finite:
        summaries.insert(0, "non-finite output (a poisoned element never written, or NaN/inf)")
    return passed, worst, "; ".join(summaries) or "passed"


def sdpa_options(torch, name, case, operands):
    """(options for scaled_dot_product_attention, None), or (None, 'unavailable: why'). The causal
    mask aligned to the bottom-right at seq_q > 1: FA2 through torch.nn.attention.bias's
    causal_lower_right, which runs the flash kernel itself (with causal alignment bottom-right) when
    can_use_flash_attention says it can -- checked first, because otherwise it would run another
    kernel whatever backend is selected; cuDNN with is_causal=True, its alignment checked afterwards
    (check_reference)."""
    options = {}
    if case.kv_heads != case.heads:
        options["enable_gqa"] = True
    if not case.causal:
        return options, None
    if name == "cudnn":
        options["is_causal"] = True
        return options, None
    try:
        from torch.nn.attention.bias import causal_lower_right
        from torch.backends.cuda import SDPAParams, can_use_flash_attention
    except Exception as e:
        return None, "unavailable: this PyTorch has no causal_lower_right / can_use_flash_attention (%s)" % e
    try:
        params = SDPAParams(*operands, None, 0.0, False, bool(options.get("enable_gqa")))
    except TypeError:  # PyTorch before enable_gqa
        params = SDPAParams(*operands, None, 0.0, False)
    if not can_use_flash_attention(params, False):
        return None, ("unavailable: the flash kernel does not take this case (can_use_flash_attention), and "
                      "causal_lower_right would run another kernel instead")
    options["attn_mask"] = causal_lower_right(case.seq_q, case.seq_kv)
    return options, None


def check_reference(torch, ref, name, q, k, v, out, case, args):
    """check(), and for cuDNN's causal rows that fail it, whether the output is the top-left-aligned
    mask's (SDPA's is_causal convention): then the row is 'unavailable', not a failure."""
    passed, err, summary = check(torch, ref, q, k, v, out, case, args)
    if passed or not case.causal or name != "cudnn":
        return passed, err, ("PASS" if passed else "FAIL: " + summary)
    top_left = case._replace(seq_kv=case.seq_q)
    if check(torch, ref, q, k[:, :case.seq_q], v[:, :case.seq_q], out, top_left, args)[0]:
        return False, err, ("unavailable: SDPA's cudnn backend aligns is_causal=True to the top-left (its output is "
                            "that mask's), not to the bottom-right that decoding needs")
    return False, err, "FAIL: " + summary


def measure_case(torch, ref, lib, args, planned, impls, stream, before_launch):
    """[row] of one case: inputs and the copies of each cache, every implementation checked, then
    timed in rounds. planned: the case's Planned (its copies, the caches kept and those dropped);
    impls: implementations()."""
    import interleaved
    from fa_capi import FaCapiError
    case, copies = planned.case, planned.copies
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    contiguous = CONTIGUOUS in planned.layouts
    # Without contiguous rows (--cache paged, no references) the keys go straight into the pools, so
    # that a case needs no contiguous K and V beside them; with them, the pools hold the same keys.
    q, k, v = ref.case_inputs(torch, args.seed, case.batch, case.seq_q, case.heads, case.kv_heads, case.head_dim,
                              dtype, seq_kv=case.seq_kv if contiguous else case.seq_q)
    if not contiguous:
        k = v = None
    caches, tables = {}, {}  # cache label -> [(K, V) of each copy]; paged label -> its block table
    for label in planned.layouts:
        page_size = page_size_of(label)
        if page_size:  # every copy its own pool, one table for all (the same pages in the same places)
            seed = args.seed * 1000003 + 7919 * page_size + case.seq_kv
            pool_k, pool_v, tables[label] = (paged_cache(torch, k, v, page_size, seed) if contiguous else
                                             random_paged_cache(torch, case, dtype, page_size, seed))
            caches[label] = [(pool_k, pool_v)] + [(pool_k.clone(), pool_v.clone()) for _ in range(copies - 1)]
    if contiguous:
        caches[CONTIGUOUS] = [(k, v)] + [(k.clone(), v.clone()) for _ in range(copies - 1)]
    rotation = Rotation(copies)
    entries = []  # (impl, launch or None, status, max_abs_err)
    for impl in [i for i in impls if i.kind == "stage"]:
        if impl.cache not in caches:
            entries.append((impl, None, planned.dropped.get(impl.cache, "skipped"), None))
            continue
        table, page_size = tables.get(impl.cache), page_size_of(impl.cache)
        o = torch.empty_like(q)
        o.view(torch.int16).fill_(-1)  # 0xFFFF: NaN in fp16 and bf16, which no result converts to
        if table is None:
            params = [lib.params(q, kc, vc, o, causal=case.causal) for kc, vc in caches[impl.cache]]
        else:
            params = [paged_params(lib, q, kc, vc, o, table, case, page_size) for kc, vc in caches[impl.cache]]
        try:
            lib.launch(impl.name, params[0], stream)
            torch.cuda.synchronize()
        except FaCapiError as e:
            entries.append((impl, None, "ERROR: " + ref.clean(str(e)), None))
            continue
        k0, v0 = caches[impl.cache][0]
        passed, err, summary = check(torch, ref, q, k0, v0, o.transpose(1, 2), case, args, table=table)

        def launch(s=impl.name, p=params, o=o):  # keeps its output alive
            lib.launch(s, p[rotation.next()], stream)
        entries.append((impl, launch if passed else None, "PASS" if passed else "FAIL: " + summary, err))
    references = [i for i in impls if i.kind == "reference"]
    backends = ref.sdpa_backend_enums(torch, [i.name for i in references])
    for impl in references:
        name, backend = impl.name, backends[impl.name]
        if isinstance(backend, str):
            entries.append((impl, None, "unavailable: " + backend, None))
            continue
        operands = [ref.sdpa_inputs(q, kc, vc, contiguous=False) for kc, vc in caches[CONTIGUOUS]]
        try:
            options, why = sdpa_options(torch, name, case, operands[0])
            out = None
            if options is not None:
                out, why = ref.first_call(torch, backend, operands[0], options)
            if out is None:
                entries.append((impl, None, why, None))
                continue
            passed, err, status = check_reference(torch, ref, name, q, k, v, out, case, args)
        except Exception as e:  # out of memory, a CUDA error, an option this PyTorch lacks
            entries.append((impl, None, "ERROR: " + ref.clean("%s: %s" % (type(e).__name__, e)), None))
            continue
        out = None

        def launch(b=backend, ops=operands, opts=options):
            from torch.nn.attention import sdpa_kernel
            with sdpa_kernel(b):
                torch.nn.functional.scaled_dot_product_attention(*ops[rotation.next()], **opts)
        entries.append((impl, launch if passed else None, status, err))
    timed = [(timed_name(impl), launch) for impl, launch, _, _ in entries if launch is not None]
    times = {}
    if timed:
        times, _ = interleaved.time_launches(torch, timed, args.warmup, args.reps, "rounds", None, args.seed,
                                             before_launch=before_launch)
    rows = []
    for impl, _, status, err in entries:
        kept = impl.cache in caches
        row = base_row(case, impl.name, impl.kind, copies if kept else 0, case_bytes(case, impl.cache), status,
                       impl.cache)
        row["max_abs_err"] = "" if err is None else "%.6g" % err
        name = timed_name(impl)
        if name in times:
            row.update(median_ms="%.6g" % statistics.median(times[name]), min_ms="%.6g" % min(times[name]))
        rows.append(row)
    return rows


def case_rows(case, impls, copies, status):
    """The rows of a case that was not measured (skipped, or an error before any time): status each."""
    return [base_row(case, i.name, i.kind, copies, case_bytes(case, i.cache), status, i.cache) for i in impls]


def base_row(case, impl, kind, copies, nbytes, status, cache=CONTIGUOUS):
    row = {c: "" for c in decode_csv.COLUMNS}
    row.update(impl=impl, kind=kind, dtype=case.dtype, head_dim=case.head_dim, batch=case.batch, heads=case.heads,
               kv_heads=case.kv_heads, seq_q=case.seq_q, seq_kv=case.seq_kv, causal=int(case.causal), cache=cache,
               kv_copies=copies or "", bytes=nbytes, status=status)
    return row


def print_case(case, rows, read_bw, out=None):
    out = out or sys.stdout
    decode_csv.fill_metrics(rows, read_bw)
    copies = next((r["kv_copies"] for r in rows if r["kv_copies"]), "")
    print("\n%s: %s of K and V, %s moved per step, %s cop%s" % (
        case_label(case), fmt_bytes(kv_cache_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype)),
        fmt_bytes(case_bytes(case, CONTIGUOUS)), copies or "-", "y" if copies == 1 else "ies"), file=out)
    print("%-28s %-10s %10s %10s %9s %8s %8s %8s  %s" % ("impl", "cache", "median_ms", "min_ms", "GB/s", "% read",
                                                       "% FA2", "% cuDNN", "status"), file=out)
    for row in rows:
        print("%-28s %-10s %10s %10s %9s %8s %8s %8s  %s" % (
            row["impl"], row["cache"], row["median_ms"] or "-", row["min_ms"] or "-", row["gbytes_per_s"] or "-",
            row["pct_of_read_bw"] or "-", row["pct_of_fa2"] or "-", row["pct_of_cudnn"] or "-", row["status"][:90]),
            file=out, flush=True)


def method_text(args, gap_text):
    return ("each implementation's output checked against fp64 attention first (common/checker.h's rule on every "
            "query row up to %d of %d sampled batches; every element finite; a stage's output poisoned before), no "
            "time if it fails; then %d warm-up and %d timed rounds per case, every implementation launched once per "
            "round in an order shuffled each round, each launch between its own CUDA events; K and V rotated over "
            "copies holding >= %d x L2, launch n reading copy n mod copies; spin before launches: %s; the row's time "
            "is the minimum over the rounds; GB/s = (K and V read + Q read + O written) / time, 10^9 bytes%s" % (
                args.check_rows, args.check_batches, args.warmup, args.reps, args.l2_factor, gap_text,
                "; a paged row's output checked against the keys gathered from its pool through the block table, and "
                "its bytes count the table's entries too" if "paged" in args.cache_list else ""))


def paged_text(args):
    """The CSV header's note on the paged rows ('' without --cache paged)."""
    if "paged" not in args.cache_list:
        return ""
    return ("cache=paged<N> rows: the stages declaring paged_kv on the case's K and V cut into pages of N rows, "
            "scattered over a pool [num_pages, N, kv_heads, head_dim] per copy (num_pages = batch x ceil(seq_kv / N), "
            "the rows of a last page past seq_kv NaN), found through one int32 block table [batch, ceil(seq_kv / N)] "
            "holding a random permutation of the pool's pages; no seqlens_k (every sequence seq_kv keys); page sizes "
            "%s; fa2 and cudnn run on the contiguous cache only (SDPA takes no block table), and a paged row's "
            "pct_of_fa2 and pct_of_cudnn compare its time with theirs on the contiguous cache in the same rounds" % (
                ", ".join(str(n) for n in args.page_size)))


def no_work(impls, args):
    """Why there is nothing to time (exit 2), or None."""
    if impls:
        return None
    if args.cache_list == ["paged"]:
        return ("--cache paged: none of the selected stages declares \"%s\" (decode_04_paged_kv does), and "
                "--references is empty: nothing to time" % PAGED_FEATURE)
    return "no stage and no reference selected: nothing to time"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    command = "tools/decode_bench.py" + "".join(" " + shlex.quote(a) for a in argv)
    try:
        stage_roles = decode_stages(stage_declarations.all_stages(),
                                    None if args.stages is None else [s for s in args.stages.split(",") if s],
                                    parents=not args.no_parents,
                                    gpu_cc=args.compute_capability if args.dry_run else None)
    except ValueError as e:
        print("decode_bench.py: %s" % e, file=sys.stderr)
        return 2
    if args.dry_run:
        by_name = stage_declarations.by_name()
        paged_names = paged_stages(stage_roles, by_name)
        impls = implementations(stage_roles, paged_names, args)
        why = no_work(impls, args)
        if why:
            print("decode_bench.py: %s" % why, file=sys.stderr)
            return 2
        l2_bytes, free_bytes = int(args.assume_l2_mib * (1 << 20)), int(args.assume_memory_gib * GIB)
        planned, total = plan(args, impls, l2_bytes, free_bytes)
        print_plan(planned, total, impls, args, l2_bytes, free_bytes,
                   describe_caches(impls, stage_roles, paged_names, args))
        print("decode_bench: would run %s hbm-read --bytes %d before and after the cases, and write %s" % (
            shown_path(args.microbench), args.read_bytes, results_paths_text(args, "decode")))
        return 0
    return measure(args, command, stage_roles)


def measure(args, command, stage_roles):
    started = datetime.datetime.now(datetime.timezone.utc)
    wall_start = time.time()
    if not os.path.isfile(args.lib):
        print("decode_bench.py: %s is not built: cmake --build build --target fa_capi" % shown_path(args.lib),
              file=sys.stderr)
        return 2
    smi_start = nvidia_smi_query()
    try:
        info = device_info(args.microbench)
        read_before, read_method = read_bandwidth(args.microbench, args.read_bytes)
    except MicrobenchError as e:
        print("decode_bench.py: the read bandwidth cannot be measured: %s" % e, file=sys.stderr)
        return 2 if "not built" in str(e) else 3
    print("decode_bench: HBM read bandwidth %.1f GB/s (fa_microbench hbm-read, before the cases)" % read_before,
          flush=True)
    torch = cuda_torch("decode_bench.py")
    if torch is None:
        return 3
    import interleaved
    import torch_reference as ref
    from fa_capi import FaCapi
    gpu_cc = torch.cuda.get_device_capability()
    gpu_cc = gpu_cc[0] * 10 + gpu_cc[1]
    by_name = stage_declarations.by_name()
    runnable = [(n, r) for n, r in stage_roles
                if stage_runs_on(by_name[n].min_compute_capability, by_name[n].target.endswith("a"), gpu_cc)]
    skipped_stages = ["%s (built for %s; this GPU is compute capability %d)" % (n, by_name[n].target, gpu_cc)
                      for n, _ in stage_roles if (n, _) not in runnable]
    paged_names = paged_stages(runnable, by_name)
    impls = implementations(runnable, paged_names, args)
    why = no_work(impls, args)
    if why:
        print("decode_bench.py: %s" % why, file=sys.stderr)
        return 2
    cache_notes = describe_caches(impls, runnable, paged_names, args)
    lib = FaCapi(args.lib)
    missing = [n for n, _ in runnable if n not in lib.stage_names()]
    if missing:
        print("decode_bench.py: %s lacks %s: rebuild it (cmake --build build --target fa_capi)" % (
            shown_path(args.lib), ", ".join(missing)), file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    l2_bytes = int(getattr(props, "L2_cache_size", 0) or info.get("l2_bytes") or 0)
    if l2_bytes <= 0:
        print("decode_bench.py: neither PyTorch nor fa_microbench info gives the L2 size", file=sys.stderr)
        return 3
    clock_mhz = int(float(smi_start.get("max_sm_clock_mhz") or 2000))
    before_launch, gap_text = interleaved.spin_kernel(torch, args.host_gap_us, clock_mhz)
    torch.cuda.empty_cache()
    free_bytes = torch.cuda.mem_get_info()[0]
    planned, total = plan(args, impls, l2_bytes, free_bytes)
    print_plan(planned, total, impls, args, l2_bytes, free_bytes, cache_notes)
    stream = torch.cuda.current_stream().cuda_stream
    rows, failed = [], False
    csv_path, latest = results_paths(args, "decode", torch.cuda.get_device_name(), started)
    header = ref.torch_header(torch)

    smi_end = {}

    def meta(read_after=None):
        facts = [tuple(f.split("=", 1)) for f in header if "=" in f]
        facts = [("gpu", dict(facts).get("gpu", info.get("gpu", "")))] + [f for f in facts if f[0] != "gpu"]
        read_bw = max(read_before, read_after or 0.0)
        return facts + [
            ("driver", smi_start.get("driver", "")), ("cuda", info.get("cuda", "")),
            ("cuda_driver_api", info.get("cuda_driver_api", "")), ("compute_capability", gpu_cc),
            ("sms", props.multi_processor_count), ("l2_bytes", l2_bytes), ("memory_bytes", props.total_memory),
            ("sm_clock_mhz_at_start", smi_start.get("sm_clock_mhz", "")),
            ("sm_clock_mhz_at_end", smi_end.get("sm_clock_mhz", "")),
            ("sm_clock_max_mhz", smi_start.get("max_sm_clock_mhz", "")),
            ("date", started.strftime("%Y-%m-%dT%H:%M:%SZ")), ("git", git_revision()), ("command", command),
            ("timing", "rounds"), ("statistic", "minimum"), ("method", method_text(args, gap_text)),
            ("read_bw_gbytes_per_s", "%.1f" % read_bw),
            ("read_bw_before_gbytes_per_s", "%.1f" % read_before),
            ("read_bw_after_gbytes_per_s", "%.1f" % read_after if read_after else ""),
            ("read_bw_method", "fa_microbench hbm-read before and after the cases, the larger of the two: "
                               + read_method),
            ("cold_l2", "K and V rotated over copies holding >= %d x the L2 (%d bytes); launch n reads copy n mod "
                        "copies (kv_copies per row)%s" % (
                            args.l2_factor, l2_bytes,
                            "; a paged cache has as many copies, each its own pool, and shares the launch count n"
                            if "paged" in args.cache_list else "")),
            ("caches", ",".join(args.layouts)), ("paged", paged_text(args)),
            ("stages", " ".join(n for n, _ in runnable)),
            ("skipped", "; ".join(skipped_stages + [note for note in cache_notes if note.startswith("not on")]))]

    def write(read_after=None):
        os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
        decode_csv.fill_metrics(rows, max(read_before, read_after or 0.0))
        decode_csv.write_decode_csv(csv_path, meta(read_after), rows)

    for p in planned:
        if p.why:
            rows += case_rows(p.case, impls, 0, p.why)
            print("\n%s: %s" % (case_label(p.case), p.why), flush=True)
            continue
        try:
            got = measure_case(torch, ref, lib, args, p, impls, stream, before_launch)
        except Exception as e:  # out of memory, a CUDA error: the case has no times
            got = case_rows(p.case, impls, p.copies, "ERROR: " + ref.clean("%s: %s" % (type(e).__name__, e)))
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        # A paged cache whose pools did not fit is 'skipped' (planned), not a failure.
        failed = failed or any(r["kind"] == "stage" and r["status"] != "PASS" and not r["status"].startswith("skipped")
                               for r in got)
        print_case(p.case, got, read_before)
        rows += got
        write()  # after every case: a crash keeps what came before it
    smi_end.update(nvidia_smi_query())
    torch.cuda.empty_cache()
    try:
        read_after, _ = read_bandwidth(args.microbench, args.read_bytes)
        print("\ndecode_bench: HBM read bandwidth %.1f GB/s after the cases (%.1f before); the larger is the 100%%"
              % (read_after, read_before))
    except MicrobenchError as e:
        print("decode_bench.py: the read bandwidth after the cases: %s" % e, file=sys.stderr)
        read_after = None
    write(read_after)
    report_written("decode_bench", csv_path, latest, time.time() - wall_start, total)
    if not args.no_plot:
        status = subprocess.call([sys.executable, PLOT, "--decode", csv_path, "--out-dir", args.plot_dir])
        if status != 0:
            print("decode_bench.py: tools/plot.py --decode exited with %d" % status, file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
