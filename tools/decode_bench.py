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

Cold L2: the launches rotate over copies of K and V, launch n reading copy n mod count, with count
the smallest that makes all copies together at least 4 x the L2 (rotation_copies in
tools/decode_csv.py; the L2 size from the device). Every byte of a cache then has 4 x L2 of other
data read between two of its reads.

Correctness first: every implementation's output is checked against fp64 attention (tools/
torch_reference.py's check_output, the rule of common/checker.h) on every query row of sampled
batches (the first, the last and a random one), and must be finite everywhere (a stage's output is
poisoned with 0xFF bytes before that launch); one that fails gets no time.

Launches shorter than the host's time to issue them (a few microseconds of K and V at batch 1 with
one K/V head) would time the host: before each launch the GPU gets a short spin kernel
(torch.cuda._sleep, --host-gap-us, untimed), so the launch is queued before the GPU reaches it.

    cmake -S . -B build -DCMAKE_CUDA_ARCHITECTURES=90
    cmake --build build --target fa_capi fa_microbench
    python3 tools/decode_bench.py --dry-run     # the cases, the copies, what is skipped, the time it takes
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
from decode_csv import decode_bytes, fmt_bytes, kv_cache_bytes, rotation_copies  # noqa: E402

DEFAULT_OUT_DIR = os.path.join(REPO, "plots", "results")
DEFAULT_PLOT_DIR = os.path.join(REPO, "plots", "decode_bandwidth")
PLOT = os.path.join(REPO, "tools", "plot.py")
FEATURE = "split_kv"
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


def memory_need(case, impl_count, copies):
    """Bytes a case takes on the GPU: the copies of K and V, Q and one output per implementation, the
    fp64 check of one batch (K and V of one sequence repeated to every query head, and its
    conversion), and SLACK_BYTES."""
    elem = decode_csv.element_bytes(case.dtype)
    q_bytes = case.batch * case.seq_q * case.heads * case.head_dim * elem
    check = (2 * case.heads + case.kv_heads) * case.seq_kv * case.head_dim * 8
    return copies * kv_cache_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype) + \
        (1 + impl_count) * q_bytes + check + SLACK_BYTES


def plan_case(case, impl_count, l2_bytes, free_bytes, l2_factor=decode_csv.L2_FACTOR):
    """(copies, None) or (0, why it is skipped): the copies that keep K and V cold in L2, if they fit
    beside everything else the case needs in free_bytes."""
    kv = kv_cache_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype)
    others = memory_need(case, impl_count, 0)
    copies, why = rotation_copies(kv, l2_bytes, max(0, free_bytes - others), l2_factor)
    if why:
        return 0, "skipped: %s beside the %s the rest of the case needs (%s free)" % (
            why, fmt_bytes(others), fmt_bytes(free_bytes))
    return copies, None


def launch_seconds(case, role):
    """The estimate's time of one launch of an implementation (role 'parent': a stage that runs one
    thread block per (batch, head), which fills PARENT_SLOTS only from batch x heads that large)."""
    nbytes = decode_bytes(case.batch, case.heads, case.kv_heads, case.seq_q, case.seq_kv, case.head_dim, case.dtype)
    rate = ASSUMED_GBYTES_PER_S * 1e9
    if role == "parent":
        rate *= min(1.0, case.batch * case.heads / PARENT_SLOTS)
    return nbytes / rate


def estimate_case_seconds(case, roles, copies, args):
    """Seconds one case takes (the constants above): setup, one checked launch per implementation,
    then warmup + reps rounds of every implementation, each launch after its spin kernel."""
    kv = kv_cache_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype)
    checked = min(args.check_batches, case.batch)
    check_bytes = checked * (2 * case.heads + case.kv_heads) * case.seq_kv * case.head_dim * 8
    seconds = CASE_SETUP_S + copies * kv / FILL_BYTES_PER_S
    seconds += len(roles) * (CHECK_S + check_bytes / CHECK_BYTES_PER_S)
    seconds += sum(REFERENCE_FIRST_CALL_S for role in roles if role == "reference")
    gap = args.host_gap_us * 1e-6
    per_round = sum(max(LAUNCH_HOST_S, gap + launch_seconds(case, role)) for role in roles)
    return seconds + (args.warmup + args.reps) * per_round


def plan(args, stage_roles, l2_bytes, free_bytes):
    """[(case, copies, skip reason or None, estimated seconds)] and the total estimated seconds."""
    roles = [role for _, role in stage_roles] + ["reference"] * len(args.reference_list)
    out, total = [], STARTUP_S
    for case in args.cases:
        copies, why = plan_case(case, len(roles), l2_bytes, free_bytes, args.l2_factor)
        seconds = 0.0 if why else estimate_case_seconds(case, roles, copies, args)
        total += seconds
        out.append((case, copies, why, seconds))
    return out, total


def print_plan(planned, total, stage_roles, args, l2_bytes, free_bytes, out=None):
    out = out or sys.stdout
    impls = ["%s (%s)" % (n, "non-split parent" if r == "parent" else r) for n, r in stage_roles]
    impls += ["%s (SDPA)" % r for r in args.reference_list]
    print("decode_bench: %d cases x %d implementations: %s" % (len(planned), len(impls), ", ".join(impls) or "none"),
          file=out)
    print("decode_bench: L2 %s, %s of GPU memory free; K and V rotated over copies holding >= %d x L2; "
          "%d warm-up + %d timed rounds per case" % (fmt_bytes(l2_bytes), fmt_bytes(free_bytes), args.l2_factor,
                                                     args.warmup, args.reps), file=out)
    print("%-34s %11s %11s %6s %9s  %s" % ("case", "K+V bytes", "bytes", "copies", "est.", "note"), file=out)
    for case, copies, why, seconds in planned:
        nbytes = decode_bytes(case.batch, case.heads, case.kv_heads, case.seq_q, case.seq_kv, case.head_dim, case.dtype)
        kv = kv_cache_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype)
        print("%-34s %11s %11s %6s %9s  %s" % (case_label(case), fmt_bytes(kv), fmt_bytes(nbytes),
                                              copies or "-", "%.1f s" % seconds if not why else "-", why or ""),
              file=out)
    skipped = sum(1 for _, _, why, _ in planned if why)
    print("decode_bench: %d cases measured, %d skipped; estimated time %s (a guess from assumed rates: %.0f GB/s "
          "per launch, %.0f us to issue one, %.0f s to start; not yet calibrated on a GPU)" % (
              len(planned) - skipped, skipped, fmt_duration(total), ASSUMED_GBYTES_PER_S, LAUNCH_HOST_S * 1e6,
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


def check(torch, ref, q, k, v, out_bhsd, case, args):
    """(passed, max_abs_err, summary): check_output's rule on every query row (up to --check-rows) of
    the sampled batches, and every element of the output finite."""
    finite = bool(torch.isfinite(out_bhsd).all().item())
    worst, summaries, passed = 0.0, [], finite
    for b in sampled_batches(case.batch, args.check_batches, args.seed + case.seq_kv):
        ok, err, _, _, summary = ref.check_output(torch, q[b:b + 1], k[b:b + 1], v[b:b + 1], out_bhsd[b:b + 1],
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


def measure_case(torch, ref, lib, args, case, stage_roles, copies, stream, before_launch):
    """[row] of one case: inputs and copies, every implementation checked, then timed in rounds."""
    import interleaved
    from fa_capi import FaCapiError
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    q, k, v = ref.case_inputs(torch, args.seed, case.batch, case.seq_q, case.heads, case.kv_heads, case.head_dim,
                              dtype, seq_kv=case.seq_kv)
    ks = [k] + [k.clone() for _ in range(copies - 1)]
    vs = [v] + [v.clone() for _ in range(copies - 1)]
    rotation = Rotation(copies)
    entries = []  # (name, kind, launch or None, status, max_abs_err)
    for stage, _ in stage_roles:
        o = torch.empty_like(q)
        o.view(torch.int16).fill_(-1)  # 0xFFFF: NaN in fp16 and bf16, which no result converts to
        params = [lib.params(q, ks[c], vs[c], o, causal=case.causal) for c in range(copies)]
        try:
            lib.launch(stage, params[0], stream)
            torch.cuda.synchronize()
        except FaCapiError as e:
            entries.append((stage, "stage", None, "ERROR: " + ref.clean(str(e)), None))
            continue
        passed, err, summary = check(torch, ref, q, k, v, o.transpose(1, 2), case, args)

        def launch(s=stage, p=params, o=o):  # keeps its output alive
            lib.launch(s, p[rotation.next()], stream)
        entries.append((stage, "stage", launch if passed else None, "PASS" if passed else "FAIL: " + summary, err))
    backends = ref.sdpa_backend_enums(torch, args.reference_list)
    for name in args.reference_list:
        backend = backends[name]
        if isinstance(backend, str):
            entries.append((name, "reference", None, "unavailable: " + backend, None))
            continue
        operands = [ref.sdpa_inputs(q, ks[c], vs[c], contiguous=False) for c in range(copies)]
        try:
            options, why = sdpa_options(torch, name, case, operands[0])
            out = None
            if options is not None:
                out, why = ref.first_call(torch, backend, operands[0], options)
            if out is None:
                entries.append((name, "reference", None, why, None))
                continue
            passed, err, status = check_reference(torch, ref, name, q, k, v, out, case, args)
        except Exception as e:  # out of memory, a CUDA error, an option this PyTorch lacks
            entries.append((name, "reference", None, "ERROR: " + ref.clean("%s: %s" % (type(e).__name__, e)), None))
            continue
        out = None

        def launch(b=backend, ops=operands, opts=options):
            from torch.nn.attention import sdpa_kernel
            with sdpa_kernel(b):
                torch.nn.functional.scaled_dot_product_attention(*ops[rotation.next()], **opts)
        entries.append((name, "reference", launch if passed else None, status, err))
    timed = [(name, launch) for name, _, launch, _, _ in entries if launch is not None]
    times = {}
    if timed:
        times, _ = interleaved.time_launches(torch, timed, args.warmup, args.reps, "rounds", None, args.seed,
                                             before_launch=before_launch)
    nbytes = decode_bytes(case.batch, case.heads, case.kv_heads, case.seq_q, case.seq_kv, case.head_dim, case.dtype)
    rows = []
    for name, kind, _, status, err in entries:
        row = base_row(case, name, kind, copies, nbytes, status)
        row["max_abs_err"] = "" if err is None else "%.6g" % err
        if name in times:
            row.update(median_ms="%.6g" % statistics.median(times[name]), min_ms="%.6g" % min(times[name]))
        rows.append(row)
    return rows


def base_row(case, impl, kind, copies, nbytes, status):
    row = {c: "" for c in decode_csv.COLUMNS}
    row.update(impl=impl, kind=kind, dtype=case.dtype, head_dim=case.head_dim, batch=case.batch, heads=case.heads,
               kv_heads=case.kv_heads, seq_q=case.seq_q, seq_kv=case.seq_kv, causal=int(case.causal),
               kv_copies=copies or "", bytes=nbytes, status=status)
    return row


def print_case(case, rows, read_bw, out=None):
    out = out or sys.stdout
    decode_csv.fill_metrics(rows, read_bw)
    print("\n%s: %s of K and V, %s moved per step, %s cop%s" % (
        case_label(case), fmt_bytes(kv_cache_bytes(case.batch, case.kv_heads, case.seq_kv, case.head_dim, case.dtype)),
        fmt_bytes(int(rows[0]["bytes"])), rows[0]["kv_copies"] or "-", "y" if rows[0]["kv_copies"] == 1 else "ies"),
        file=out)
    print("%-28s %10s %10s %9s %8s %8s %8s  %s" % ("impl", "median_ms", "min_ms", "GB/s", "% read", "% FA2",
                                                  "% cuDNN", "status"), file=out)
    for row in rows:
        print("%-28s %10s %10s %9s %8s %8s %8s  %s" % (
            row["impl"], row["median_ms"] or "-", row["min_ms"] or "-", row["gbytes_per_s"] or "-",
            row["pct_of_read_bw"] or "-", row["pct_of_fa2"] or "-", row["pct_of_cudnn"] or "-", row["status"][:90]),
            file=out, flush=True)


def method_text(args, gap_text):
    return ("each implementation's output checked against fp64 attention first (common/checker.h's rule on every "
            "query row up to %d of %d sampled batches; every element finite; a stage's output poisoned before), no "
            "time if it fails; then %d warm-up and %d timed rounds per case, every implementation launched once per "
            "round in an order shuffled each round, each launch between its own CUDA events; K and V rotated over "
            "copies holding >= %d x L2, launch n reading copy n mod copies; spin before launches: %s; the row's time "
            "is the minimum over the rounds; GB/s = (K and V read + Q read + O written) / time, 10^9 bytes" % (
                args.check_rows, args.check_batches, args.warmup, args.reps, args.l2_factor, gap_text))


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
        l2_bytes, free_bytes = int(args.assume_l2_mib * (1 << 20)), int(args.assume_memory_gib * GIB)
        planned, total = plan(args, stage_roles, l2_bytes, free_bytes)
        print_plan(planned, total, stage_roles, args, l2_bytes, free_bytes)
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
    planned, total = plan(args, runnable, l2_bytes, free_bytes)
    print_plan(planned, total, runnable, args, l2_bytes, free_bytes)
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
                        "copies (kv_copies per row)" % (args.l2_factor, l2_bytes)),
            ("stages", " ".join(n for n, _ in runnable)), ("skipped", "; ".join(skipped_stages))]

    def write(read_after=None):
        os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
        decode_csv.fill_metrics(rows, max(read_before, read_after or 0.0))
        decode_csv.write_decode_csv(csv_path, meta(read_after), rows)

    for case, copies, why, _ in planned:
        if why:
            for name in [n for n, _ in runnable] + args.reference_list:
                rows.append(base_row(case, name, "reference" if name in REFERENCES else "stage", 0,
                                     decode_bytes(case.batch, case.heads, case.kv_heads, case.seq_q, case.seq_kv,
                                                  case.head_dim, case.dtype), why))
            print("\n%s: %s" % (case_label(case), why), flush=True)
            continue
        try:
            case_rows = measure_case(torch, ref, lib, args, case, runnable, copies, stream, before_launch)
        except Exception as e:  # out of memory, a CUDA error: the case has no times
            status = "ERROR: " + ref.clean("%s: %s" % (type(e).__name__, e))
            case_rows = [base_row(case, name, "reference" if name in REFERENCES else "stage", copies,
                                  decode_bytes(case.batch, case.heads, case.kv_heads, case.seq_q, case.seq_kv,
                                               case.head_dim, case.dtype), status)
                         for name in [n for n, _ in runnable] + args.reference_list]
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        failed = failed or any(r["kind"] == "stage" and r["status"] != "PASS" for r in case_rows)
        print_case(case, case_rows, read_before)
        rows += case_rows
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
