#!/usr/bin/env python3
"""The backward benchmark: every stage's backward pass against FlashAttention-2's and cuDNN's, in
the same run (issue 42, "Measured" and "Targets"; STAGES.md, How performance is counted).

Tested on a CPU with a fake PyTorch and a fake library (tests/test_backward_bench.py); run on an
H100 for plots/results/backward_h100-80gb-hbm3_20261207-145212.csv, whose rates the time estimate
(--dry-run) assumes.

For every case (batch 16, 32 heads, seq_q = seq_kv = S, head_dim 64 or 128, fp16 or bf16, by
default S = 1024..8192, without and with the causal mask) this times, in shuffled rounds in one
process (tools/interleaved.py's machinery: every implementation once per round, in an order
shuffled afresh each round, each launch between its own pair of CUDA events):

  the stages   every stage with a backward pass (stage.json's "backward", tools/stages.py's
               backward_features: the backward track), through build/libfa_capi.so: first the
               stage's own forward with the LSE (fa_capi_launch, untimed), then ONLY its backward
               call (fa_capi_launch_backward, common/c_api_backward.h) is timed. Causal cases only
               for a stage whose backward declares "causal"; others get a row 'unsupported: ...'.
               With --deterministic both, a stage whose backward declares "deterministic" runs a
               second time in its deterministic mode, as the implementation <stage>+deterministic.
  fa2, cudnn   torch.nn.functional.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION)
               and sdpa_kernel(CUDNN_ATTENTION) on [B, H, S, D] views of the same inputs, which
               require grad: the forward runs once, untimed, keeping its graph; the timed call is
               torch.autograd.grad(o, (q, k, v), dO, retain_graph=True), which runs the backend's
               backward kernel(s) and nothing of the forward. dO is given with the output's strides
               (a copy made before timing), so that no backend copies it inside the timed region.

Correctness first. dQ, dK and dV of every implementation are checked against an fp64 reference on
sampled (batch, head) slices (the first, the last and random ones; each slice in full), with
FlashAttention's rule for gradients as common/checker.h's check_gradient states it: per slice and
gradient, with R the largest |reference| and u the dtype's unit roundoff, the error may be at most
2 x max(u R, the largest error of the same backward computed in the input dtype) + 1e-5 R. That
baseline (reference.h's baseline_backward_lowp) uses fp32 products of the 16-bit operands, P and dS
rounded to the dtype before the products they enter, and its own O rounded to the dtype for D. NaN
fails, as does an element the implementation never wrote (a stage's outputs are poisoned with
0xFFFF before its checked launch). An implementation that fails its check gets no time.

Metrics: backward FLOPs = 2.5 x the forward's 4 * batch * heads * seq_q * seq_kv * head_dim, halved
for causal (fa::backward_flops); TFLOP/s from the minimum over the timed rounds; % of FA2's and of
cuDNN's backward from the same rounds (their minimum time over the implementation's).

Launches shorter than the host's time to issue them would time the host (autograd's engine takes
tens of microseconds to issue a backward): before each launch the GPU gets a short spin kernel
(torch.cuda._sleep, --host-gap-us, untimed), so that the launch is queued before the GPU reaches it.

    cmake -S . -B build -DCMAKE_CUDA_ARCHITECTURES=90
    cmake --build build --target fa_capi
    python3 tools/backward_bench.py --dry-run   # the cases, the implementations, the estimated time
    python3 tools/backward_bench.py             # plots/results/backward_<gpu>_<date>.csv and backward_latest.csv

Exit status: 0 every stage passed its check; 1 a stage failed or could not run; 2 bad options or a
missing build; 3 no GPU or no PyTorch.
"""

import argparse
import collections
import csv
import ctypes
import datetime
import math
import os
import random
import shlex
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import stages as stage_declarations  # noqa: E402
from fa_capi import DLOPEN_MODE, FaCapi, FaCapiBackwardParams  # noqa: E402  (standard library only)
from cli_util import (REPO, cuda_torch, fmt_duration, git_revision, k_int_list, length_text,  # noqa: E402
                      nvidia_smi_query, report_written, results_paths, results_paths_text, shown_path,
                      split_dtypes_and_references, stage_runs_on)

DEFAULT_OUT_DIR = os.path.join(REPO, "plots", "results")
REFERENCES = ("fa2", "cudnn")
DETERMINISTIC_SUFFIX = "+deterministic"  # the implementation name of a stage's deterministic mode
HEAD_DIMS = (64, 128)
TOLERANCE_FACTOR = 2.0
TOLERANCE_EPSILON = 1e-5
UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
SMALLEST_NORMAL = {"fp16": 2.0 ** -14, "bf16": 2.0 ** -126}

COLUMNS = ["impl", "kind", "dtype", "head_dim", "batch", "heads", "seq_q", "seq_kv", "causal", "flops", "median_ms",
           "min_ms", "tflops", "pct_of_fa2", "pct_of_cudnn", "max_abs_err", "max_err_over_tolerance", "status"]

# The time estimate (--dry-run, and printed before a run). Guesses until a run has measured them:
STARTUP_S = 20.0             # importing torch, loading the library
CASE_SETUP_S = 0.5           # per case: the inputs, the outputs, the stages' forwards
CHECK_SLICE_FLOP_RATE = 5e12  # the fp64 reference and the low-precision baseline of one slice, at this rate
CHECK_S = 0.05               # per implementation and slice: copying its gradients and comparing
REFERENCE_FIRST_CALL_S = 1.0  # per reference and case: the forward and the first backward (cuDNN's plans)
LAUNCH_HOST_S = 150e-6       # the host's time to issue one backward (autograd's engine for the references)
# Backward TFLOP/s, rounded down from the H100 runs above (stages 123-250: backward_01 to
# backward_08, the later ones faster; FA2 about 310, cuDNN about 550 at S >= 4096; lower at S = 1024).
ASSUMED_TFLOPS = {"stage": 170.0, "fa2": 280.0, "cudnn": 450.0}

Case = collections.namedtuple("Case", "dtype head_dim batch heads seq causal")


def backward_flops(batch, heads, seq_q, seq_kv, head_dim, causal=False):
    """FLOPs of one backward call, as fa::backward_flops (common/backward.h) counts them: 2.5 x the
    forward's 4 * batch * heads * seq_q * seq_kv * head_dim, halved for causal at seq_q == seq_kv."""
    forward = 4.0 * batch * heads * seq_q * seq_kv * head_dim
    return 2.5 * forward * (0.5 if causal and seq_q == seq_kv else 1.0)


def case_label(case):
    return "%s d%d b%d h%d s%s%s" % (case.dtype, case.head_dim, case.batch, case.heads, length_text(case.seq),
                                     " causal" if case.causal else "")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="tools/backward_bench.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=os.path.join(REPO, "build", "libfa_capi.so"), help="the C interface's library")
    p.add_argument("--stages", default=None,
                   help="comma-separated stage ids or <track>_NN (default: every stage with a backward pass; '' for none)")
    p.add_argument("--references", default="fa2,cudnn", help="comma-separated subset of fa2,cudnn ('' for none)")
    p.add_argument("--dtypes", default="fp16,bf16", help="fp16, bf16 or fp16,bf16 (default both)")
    p.add_argument("--head-dims", type=k_int_list, default=[64, 128], help="64, 128 or 64,128 (default both)")
    p.add_argument("--seqs", type=k_int_list, default=[1024, 2048, 4096, 8192],
                   help="seq_q = seq_kv (default 1024,2048,4096,8192)")
    p.add_argument("--batch", type=int, default=16, help="default 16")
    p.add_argument("--heads", type=int, default=32, help="default 32")
    p.add_argument("--deterministic", choices=("off", "both"), default="off",
                   help="both: also time the deterministic mode of the stages that have one, as <stage>%s "
                        "(default off)" % DETERMINISTIC_SUFFIX)
    p.add_argument("--causal", choices=("off", "on", "both"), default="both",
                   help="without the causal mask, with it, or both (default both; causal rows time the references "
                        "and the stages whose backward declares causal)")
    p.add_argument("--warmup", type=int, default=5, help="untimed rounds per case (default 5)")
    p.add_argument("--reps", type=int, default=20, help="timed rounds per case (default 20)")
    p.add_argument("--check-slices", type=int, default=3,
                   help="(batch, head) slices checked in full against fp64: the first, the last, random ones (default 3)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--host-gap-us", type=float, default=100.0,
                   help="a spin kernel of about this long before every launch, untimed (default 100; 0: none)")
    p.add_argument("--out-dir", default=DEFAULT_OUT_DIR,
                   help="where backward_<gpu>_<date>.csv and backward_latest.csv go (default plots/results)")
    p.add_argument("--csv", help="write the CSV here only (no dated file, no backward_latest.csv)")
    p.add_argument("--dry-run", action="store_true", help="print the cases, implementations and estimated time; no GPU")
    p.add_argument("--compute-capability", type=int, default=90, help="--dry-run: the GPU's (default 90)")
    args = p.parse_args(argv)
    split_dtypes_and_references(p, args, REFERENCES)
    for d in args.head_dims:
        if d not in HEAD_DIMS:
            p.error("--head-dims: the stages compute head_dim 64 and 128, not %d" % d)
    if args.batch < 1 or args.heads < 1:
        p.error("--batch and --heads must be >= 1")
    if args.warmup < 0 or args.reps < 1:
        p.error("--warmup must be >= 0 and --reps >= 1")
    if args.check_slices < 1:
        p.error("--check-slices must be >= 1")
    if args.host_gap_us < 0:
        p.error("--host-gap-us must be >= 0")
    args.cases = cases(args)
    return args


def cases(args):
    """[Case] in the order they are measured: per (dtype, head_dim), the shortest first, non-causal
    before causal, so that a case that runs out of memory comes after the ones that fit."""
    causal_values = {"off": [False], "on": [True], "both": [False, True]}[args.causal]
    return [Case(dtype, head_dim, args.batch, args.heads, seq, causal)
            for dtype in args.dtype_list for head_dim in args.head_dims
            for causal in causal_values for seq in sorted(args.seqs)]


# ------------------------------------------------------------------------------------------------
# What runs


def backward_stages(all_stages, selection=None, gpu_cc=None):
    """[stage] in track order with a backward pass (backward_features is not None). selection: the
    --stages items (ids or <track>_NN); gpu_cc: leave out what that GPU cannot run. Raises
    ValueError for an item that names no stage or a stage without a backward."""
    if selection is None:
        chosen = [s for s in all_stages if s.backward_features is not None]
    else:
        chosen = []
        for item in selection:
            named = [s for s in all_stages if stage_declarations.selects(item, s.name)]
            if not named:
                raise ValueError("--stages: no stage is called %r (stage ids or <track>_NN, e.g. backward_01)" % item)
            for s in named:
                if s.backward_features is None:
                    raise ValueError("--stages: %s has no backward pass (no \"backward\" in its stage.json)" % s.name)
            chosen += [s for s in named if s not in chosen]
    if gpu_cc is not None:
        chosen = [s for s in chosen if stage_runs_on(s.min_compute_capability, s.target.endswith("a"), gpu_cc)]
    return chosen


def unsupported(stage, case):
    """Why a stage's backward does not take the case, or None."""
    if case.causal and "causal" not in stage.backward_features:
        return "unsupported: the stage's backward does not declare the feature causal"
    return None


def implementations(case, stage_list, reference_list, deterministic=False):
    """[(name, kind, why not or None)] of one case; with deterministic, also <stage>+deterministic for
    every stage whose backward declares "deterministic"."""
    out = [(s.name, "stage", unsupported(s, case)) for s in stage_list]
    if deterministic:
        out += [(s.name + DETERMINISTIC_SUFFIX, "stage", unsupported(s, case)) for s in stage_list
                if "deterministic" in s.backward_features]
    return out + [(r, "reference", None) for r in reference_list]


def stage_and_mode(name):
    """(the stage's id, True for its deterministic mode) of an implementation name."""
    if name.endswith(DETERMINISTIC_SUFFIX):
        return name[:-len(DETERMINISTIC_SUFFIX)], True
    return name, False


def check_flops(case):
    """FLOPs of one slice's fp64 reference and low-precision baseline (five products each, twice)."""
    return 2 * 5 * 2.0 * case.seq * case.seq * case.head_dim


def estimate_case_seconds(case, impls, args):
    flops = backward_flops(case.batch, case.heads, case.seq, case.seq, case.head_dim, case.causal)
    running = [(n, k) for n, k, why in impls if why is None]
    slices = min(args.check_slices, case.batch * case.heads)
    seconds = CASE_SETUP_S + slices * check_flops(case) / CHECK_SLICE_FLOP_RATE
    seconds += len(running) * slices * CHECK_S
    seconds += sum(REFERENCE_FIRST_CALL_S for _, k in running if k == "reference")
    per_round = 0.0
    for name, kind in running:
        rate = ASSUMED_TFLOPS["stage" if kind == "stage" else name] * 1e12
        per_round += max(LAUNCH_HOST_S, args.host_gap_us * 1e-6 + flops / rate)
    return seconds + (1 + args.warmup + args.reps) * per_round


def plan(args, stage_list):
    """[(case, impls, estimated seconds)] and the total estimated seconds."""
    out, total = [], STARTUP_S
    for case in args.cases:
        impls = implementations(case, stage_list, args.reference_list, args.deterministic == "both")
        seconds = estimate_case_seconds(case, impls, args)
        total += seconds
        out.append((case, impls, seconds))
    return out, total


def print_plan(planned, total, stage_list, args, out=None):
    out = out or sys.stdout
    names = [s.name for s in stage_list] + ["%s (SDPA backward)" % r for r in args.reference_list]
    print("backward_bench: %d cases x %d implementations: %s" % (len(planned), len(names), ", ".join(names) or "none"),
          file=out)
    print("backward_bench: %d warm-up + %d timed rounds per case, %d (batch, head) slices checked per case" % (
        args.warmup, args.reps, args.check_slices), file=out)
    print("%-30s %12s %9s  %s" % ("case", "bwd GFLOP", "est.", "timed"), file=out)
    for case, impls, seconds in planned:
        flops = backward_flops(case.batch, case.heads, case.seq, case.seq, case.head_dim, case.causal)
        timed = ", ".join(n for n, _, why in impls if why is None)
        skipped = ["%s (%s)" % (n, why) for n, _, why in impls if why]
        print("%-30s %12.1f %9s  %s%s" % (case_label(case), flops / 1e9, "%.1f s" % seconds, timed or "-",
                                          ("; not: " + "; ".join(skipped)) if skipped else ""), file=out)
    print("backward_bench: estimated time %s (a guess from assumed rates: backward TFLOP/s %s, %.0f us to issue "
          "one, %.0f s to start; rates from an H100 run)" % (
              fmt_duration(total), ", ".join("%s %.0f" % kv for kv in sorted(ASSUMED_TFLOPS.items())),
              LAUNCH_HOST_S * 1e6, STARTUP_S), file=out)


# ------------------------------------------------------------------------------------------------
# The C interface of the backward (common/c_api_backward.h), through ctypes


class BackwardError(RuntimeError):
    pass


class BackwardLib:
    """fa_capi_launch_backward and friends of build/libfa_capi.so (the forward stays with
    tools/fa_capi.py's FaCapi; the struct is its, FaCapiBackwardParams)."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path), mode=DLOPEN_MODE)  # the same mode as FaCapi's load of the same library
        try:
            self.lib.fa_capi_backward_params_size.restype = ctypes.c_int
            self.lib.fa_capi_stage_has_backward.restype = ctypes.c_int
            self.lib.fa_capi_stage_has_backward.argtypes = [ctypes.c_char_p]
            self.lib.fa_capi_launch_backward.restype = ctypes.c_int
            self.lib.fa_capi_launch_backward.argtypes = [ctypes.c_char_p, ctypes.POINTER(FaCapiBackwardParams),
                                                         ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        except AttributeError as e:
            raise BackwardError("%s has no backward interface (common/c_api_backward.h): rebuild it (%s)" % (path, e))
        if self.lib.fa_capi_backward_params_size() != ctypes.sizeof(FaCapiBackwardParams):
            raise BackwardError("%s: FaCapiBackwardParams is %d bytes there and %d here: python/flash_stages/"
                                "_capi_structs.py no longer mirrors common/c_api_backward.h" % (
                                    path, self.lib.fa_capi_backward_params_size(),
                                    ctypes.sizeof(FaCapiBackwardParams)))
        self._message = ctypes.create_string_buffer(1024)

    def has_backward(self, stage):
        return self.lib.fa_capi_stage_has_backward(stage.encode()) == 1

    def launch(self, stage, params, stream=None):
        code = self.lib.fa_capi_launch_backward(stage.encode(), ctypes.byref(params), stream, self._message,
                                                len(self._message))
        if code != 0:
            raise BackwardError(self._message.value.decode(errors="replace"))

    tensor = staticmethod(FaCapi.tensor)  # a [B, S, H, D] tensor as FaCapiTensor

    @staticmethod
    def params(q, k, v, o, d_o, dq, dk, dv, lse, causal, softmax_scale, deterministic=False):
        """q, o, d_o, dq [B, S, H, D]; k, v, dk, dv [B, S, KVH, D]; lse [B, H, S] fp32 (the forward's)."""
        t = BackwardLib.tensor
        dtype = 1 if "bfloat16" in str(q.dtype) else 0  # the caller gives fp16 or bf16
        batch, seq_q, heads, head_dim = q.shape
        return FaCapiBackwardParams(
            q=t(q), k=t(k), v=t(v), o=t(o), d_o=t(d_o), dq=t(dq), dk=t(dk), dv=t(dv), dtype=dtype,
            causal=1 if causal else 0, deterministic=1 if deterministic else 0, batch=batch, heads=heads, kv_heads=k.shape[2], seq_q=seq_q,
            seq_kv=k.shape[1], head_dim=head_dim, softmax_scale=softmax_scale, lse=lse.data_ptr(),
            lse_batch_stride=lse.stride(0), lse_head_stride=lse.stride(1))


# ------------------------------------------------------------------------------------------------
# One case on the GPU (everything below needs torch, imported in main())


def sampled_slices(batch, heads, count, seed):
    """The first (0, 0), the last (batch - 1, heads - 1) and random (batch, head) pairs: count of
    them (all if there are no more), sorted."""
    picks = {(0, 0), (batch - 1, heads - 1)}
    rng = random.Random(seed)
    while len(picks) < min(count, batch * heads):
        picks.add((rng.randrange(batch), rng.randrange(heads)))
    return sorted(picks)


def slice_reference(torch, q, k, v, d_o, causal, dtype_name):
    """(fp64 dQ, dK, dV) and (the low-precision baseline's) of one [S, D] slice of each input, by
    common/backward.h's algebra (reference.h's reference_backward_fp64 and baseline_backward_lowp)."""
    seq_q, head_dim = q.shape
    scale = 1.0 / math.sqrt(head_dim)
    masked = None
    if causal:
        rows = torch.arange(seq_q, device=q.device)
        masked = rows[None, :] > rows[:, None] + (k.shape[0] - seq_q)

    def backward(qq, kk, vv, dd, low):
        s = torch.matmul(qq, kk.t()) * scale
        if masked is not None:
            s = s.masked_fill(masked, -math.inf)
        p = torch.softmax(s, dim=-1)
        if low:
            o = torch.matmul(p.to(q.dtype).float(), vv).to(q.dtype).float()  # its own O, rounded
        else:
            o = torch.matmul(p, vv)
        dp = torch.matmul(dd, vv.t())
        d = (dd * o).sum(-1, keepdim=True)
        ds = p * (dp - d)
        pp, dss = (p.to(q.dtype).float(), ds.to(q.dtype).float()) if low else (p, ds)
        dq = torch.matmul(dss, kk) * scale
        dk = torch.matmul(dss.t(), qq) * scale
        dv = torch.matmul(pp.t(), dd)
        if low:
            return tuple(x.to(q.dtype).double() for x in (dq, dk, dv))
        return dq, dk, dv

    exact = backward(q.double(), k.double(), v.double(), d_o.double(), False)
    baseline = backward(q.float(), k.float(), v.float(), d_o.float(), True)
    return exact, baseline


def expected_gradients(torch, q, k, v, d_o, case, args):
    """{(batch, head): [(name, fp64 reference, tolerance tensor-or-scalar)]} for the sampled slices:
    check_gradient's rule, per slice and gradient."""
    u, tiny = UNIT_ROUNDOFF[case.dtype], SMALLEST_NORMAL[case.dtype]
    out = {}
    for b, h in sampled_slices(case.batch, case.heads, args.check_slices, args.seed + case.seq):
        exact, baseline = slice_reference(torch, q[b, :, h], k[b, :, h], v[b, :, h], d_o[b, :, h], case.causal,
                                          case.dtype)
        entries = []
        for name, ref, base in zip(("dQ", "dK", "dV"), exact, baseline):
            r = float(ref.abs().max().item())
            floor = u * max(r, tiny)
            diff = (base - ref).abs()
            diff = torch.where(torch.isfinite(diff), diff, torch.zeros_like(diff))
            e = max(floor, float(diff.max().item()))
            entries.append((name, ref, TOLERANCE_FACTOR * e + TOLERANCE_EPSILON * r))
        out[(b, h)] = entries
    return out


def check_gradients(torch, expected, dq, dk, dv):
    """(passed, max_abs_err, max err/tol, summary) of [B, S, H, D] gradients against expected_gradients."""
    worst = ratio = 0.0
    failures = []
    for (b, h), entries in expected.items():
        for (name, ref, tol), got in zip(entries, (dq, dk, dv)):
            err = (got[b, :, h].double() - ref).abs()
            bad = ~(err <= tol)  # NaN fails
            if bool(bad.any().item()):
                finite = err[torch.isfinite(err)]
                failures.append("%s of (batch %d, head %d): %d elements over the tolerance %.3e (largest finite "
                                "error %.3e)" % (name, b, h, int(bad.sum().item()), tol,
                                                 float(finite.max().item()) if finite.numel() else float("nan")))
                worst = math.inf if finite.numel() < err.numel() else max(worst, float(err.max().item()))
            else:
                worst = max(worst, float(err.max().item()))
            ratio = max(ratio, float(err.max().item()) / tol if tol > 0 else math.inf)
    summary = "; ".join(failures[:3]) if failures else "%d slices passed" % len(expected)
    return not failures, worst, ratio, summary


def stage_forward(torch, lib, stage, q, k, v, case, stream):
    """The stage's own forward with the LSE (fa_capi_launch), untimed: (o, lse)."""
    o = torch.empty_like(q)
    lse = torch.empty((case.batch, case.heads, case.seq), device=q.device, dtype=torch.float32)
    params = lib.params(q, k, v, o, causal=case.causal)
    params.lse = lse.data_ptr()
    params.lse_batch_stride, params.lse_head_stride = lse.stride(0), lse.stride(1)
    lib.launch(stage, params, stream)
    return o, lse


def reference_forward(torch, backend, q, k, v, case):
    """SDPA's forward under `backend`, untimed, on views of leaves that require grad: (o [B, H, S, D],
    (q, k, v leaves)), or (None, 'unavailable: why')."""
    import torch_reference as ref
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out, why = ref.first_call(torch, backend, [t.transpose(1, 2) for t in leaves], {"is_causal": bool(case.causal)})
    if out is None:
        return None, why
    return out, leaves


def reference_backward(torch, o, leaves, d_o):
    """The timed call of a reference: its backward kernel(s) only (the graph kept for the next call)."""
    return torch.autograd.grad(o, leaves, d_o, retain_graph=True)


def measure_case(torch, lib, bwd, args, case, stage_list, stream, before_launch):
    """[row] of one case: inputs, every implementation's forward (untimed) and checked backward, then
    the backward calls timed in rounds."""
    import interleaved
    import torch_reference as ref
    from fa_capi import FaCapiError
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[case.dtype]
    q, k, v = ref.case_inputs(torch, args.seed, case.batch, case.seq, case.heads, case.heads, case.head_dim, dtype)
    d_o = torch.randn(q.shape, device=q.device, dtype=dtype)
    expected = expected_gradients(torch, q, k, v, d_o, case, args)
    scale = 1.0 / math.sqrt(case.head_dim)
    entries = []  # (name, kind, launch or None, status, max_abs_err, err/tol)
    for name, kind, why in implementations(case, stage_list, [], args.deterministic == "both"):
        if why:
            entries.append((name, kind, None, why, None, None))
            continue
        stage, deterministic = stage_and_mode(name)
        try:
            o, lse = stage_forward(torch, lib, stage, q, k, v, case, stream)
            grads = [torch.empty_like(t) for t in (q, k, v)]
            for g in grads:
                g.view(torch.int16).fill_(-1)  # 0xFFFF: NaN in fp16 and bf16, never a result
            params = bwd.params(q, k, v, o, d_o, *grads, lse, case.causal, scale, deterministic)
            bwd.launch(stage, params, stream)
            torch.cuda.synchronize()
        except (FaCapiError, BackwardError) as e:
            entries.append((name, kind, None, "ERROR: " + ref.clean(str(e)), None, None))
            continue
        passed, err, ratio, summary = check_gradients(torch, expected, *grads)

        def launch(s=stage, p=params, keep=(o, lse, grads)):  # keeps its tensors alive
            bwd.launch(s, p, stream)
        entries.append((name, kind, launch if passed else None, "PASS" if passed else "FAIL: " + summary, err, ratio))
    backends = ref.sdpa_backend_enums(torch, args.reference_list)
    for name in args.reference_list:
        backend = backends[name]
        if isinstance(backend, str):
            entries.append((name, "reference", None, "unavailable: " + backend, None, None))
            continue
        try:
            o, leaves = reference_forward(torch, backend, q, k, v, case)
            if o is None:
                entries.append((name, "reference", None, leaves, None, None))
                continue
            grad_out = torch.empty_like(o).copy_(d_o.transpose(1, 2))  # the output's strides: no copy when timed
            grads = reference_backward(torch, o, leaves, grad_out)
            torch.cuda.synchronize()
            passed, err, ratio, summary = check_gradients(torch, expected, *grads)
        except Exception as e:  # out of memory, a CUDA error, no backward kernel for the case
            entries.append((name, "reference", None, "ERROR: " + ref.clean("%s: %s" % (type(e).__name__, e)), None,
                            None))
            continue
        grads = None

        def launch(o=o, leaves=leaves, g=grad_out):
            reference_backward(torch, o, leaves, g)
        entries.append((name, "reference", launch if passed else None, "PASS" if passed else "FAIL: " + summary, err,
                        ratio))
    timed = [(name, launch) for name, _, launch, _, _, _ in entries if launch is not None]
    times = {}
    if timed:
        times, _ = interleaved.time_launches(torch, timed, args.warmup, args.reps, "rounds", None, args.seed,
                                             before_launch=before_launch)
    rows = []
    for name, kind, _, status, err, ratio in entries:
        row = base_row(case, name, kind, status)
        row["max_abs_err"] = "" if err is None else "%.6g" % err
        row["max_err_over_tolerance"] = "" if ratio is None else "%.4g" % ratio
        if name in times:
            row.update(median_ms="%.6g" % statistics.median(times[name]), min_ms="%.6g" % min(times[name]))
        rows.append(row)
    fill_metrics(rows)
    return rows


def base_row(case, impl, kind, status):
    row = {c: "" for c in COLUMNS}
    row.update(impl=impl, kind=kind, dtype=case.dtype, head_dim=case.head_dim, batch=case.batch, heads=case.heads,
               seq_q=case.seq, seq_kv=case.seq, causal=int(case.causal),
               flops="%.0f" % backward_flops(case.batch, case.heads, case.seq, case.seq, case.head_dim, case.causal),
               status=status)
    return row


def fill_metrics(rows):
    """TFLOP/s from the minimum time, and % of FA2's and cuDNN's backward (their minimum over the
    row's) among the rows of the same case; nothing for a row without a time."""
    def key(r):
        return tuple(str(r[c]) for c in ("dtype", "head_dim", "batch", "heads", "seq_q", "seq_kv", "causal"))
    best = {}
    for r in rows:
        if r["kind"] == "reference" and r["min_ms"] != "":
            best[(key(r), r["impl"])] = float(r["min_ms"])
    for r in rows:
        if r["min_ms"] == "":
            r.update(tflops="", pct_of_fa2="", pct_of_cudnn="")
            continue
        ms = float(r["min_ms"])
        r["tflops"] = "%.1f" % (float(r["flops"]) / (ms * 1e-3) / 1e12)
        for ref_name in REFERENCES:
            other = best.get((key(r), ref_name))
            r["pct_of_" + ref_name] = "%.2f" % (100.0 * other / ms) if other else ""
    return rows


def write_csv(path, meta, rows):
    """'# key=value' header lines (empty values left out), then the columns."""
    with open(path, "w", newline="") as f:
        for key, value in meta:
            if value not in ("", None):
                f.write("# %s=%s\n" % (key, str(value).replace("\n", " ")))
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row.get(c, "") for c in COLUMNS})


def read_csv(path):
    """(meta dict, [row]) of a CSV write_csv wrote."""
    meta, lines = {}, []
    with open(path) as f:
        for line in f:
            if line.startswith("# "):
                key, _, value = line[2:].rstrip("\n").partition("=")
                meta[key] = value
            else:
                lines.append(line)
    return meta, list(csv.DictReader(lines))


def print_case(case, rows, out=None):
    out = out or sys.stdout
    print("\n%s: %.1f GFLOP per backward" % (case_label(case), float(rows[0]["flops"]) / 1e9), file=out)
    print("%-26s %10s %10s %8s %8s %8s  %s" % ("impl", "median_ms", "min_ms", "TFLOP/s", "% FA2", "% cuDNN", "status"),
          file=out)
    for row in rows:
        print("%-26s %10s %10s %8s %8s %8s  %s" % (
            row["impl"], row["median_ms"] or "-", row["min_ms"] or "-", row["tflops"] or "-", row["pct_of_fa2"] or "-",
            row["pct_of_cudnn"] or "-", row["status"][:100]), file=out, flush=True)


def method_text(args, gap_text):
    return ("every implementation's dQ, dK, dV checked first against fp64 on %d sampled (batch, head) slices in full "
            "(common/checker.h's check_gradient rule: error <= 2 x max(u R, the input-dtype backward's error) + 1e-5 "
            "R per slice and gradient), no time if it fails; the timed region is the backward call only: a stage's "
            "fa_capi_launch_backward after its own forward with the LSE (untimed), a reference's "
            "torch.autograd.grad(o, (q, k, v), dO, retain_graph=True) after its SDPA forward (untimed, graph "
            "kept, dO with the output's strides); %d warm-up and %d timed rounds per case, every implementation "
            "once per round in an order shuffled each round, each launch between its own CUDA events; spin before "
            "launches: %s; the row's time is the minimum over the rounds; backward FLOPs = 2.5 x 4 B H Sq Skv D, "
            "halved for causal" % (args.check_slices, args.warmup, args.reps, gap_text))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    command = "tools/backward_bench.py" + "".join(" " + shlex.quote(a) for a in argv)
    try:
        stage_list = backward_stages(stage_declarations.all_stages(),
                                     None if args.stages is None else [s for s in args.stages.split(",") if s],
                                     gpu_cc=args.compute_capability if args.dry_run else None)
    except ValueError as e:
        print("backward_bench.py: %s" % e, file=sys.stderr)
        return 2
    if args.dry_run:
        planned, total = plan(args, stage_list)
        print_plan(planned, total, stage_list, args)
        print("backward_bench: would write %s" % results_paths_text(args, "backward"))
        return 0
    return measure(args, command, stage_list)


def measure(args, command, stage_list):
    started = datetime.datetime.now(datetime.timezone.utc)
    wall_start = time.time()
    if not os.path.isfile(args.lib):
        print("backward_bench.py: %s is not built: cmake --build build --target fa_capi" % shown_path(args.lib),
              file=sys.stderr)
        return 2
    smi_start = nvidia_smi_query()
    torch = cuda_torch("backward_bench.py")
    if torch is None:
        return 3
    import interleaved
    import torch_reference as ref
    import fa_capi
    try:  # the check's low-precision baseline multiplies in fp32, not TF32
        torch.backends.cuda.matmul.allow_tf32 = False
    except AttributeError:
        pass
    gpu_cc = torch.cuda.get_device_capability()
    gpu_cc = gpu_cc[0] * 10 + gpu_cc[1]
    runnable = [s for s in stage_list if stage_runs_on(s.min_compute_capability, s.target.endswith("a"), gpu_cc)]
    skipped = ["%s (built for %s; this GPU is compute capability %d)" % (s.name, s.target, gpu_cc)
               for s in stage_list if s not in runnable]
    try:
        lib = fa_capi.FaCapi(args.lib)
        bwd = BackwardLib(args.lib)
    except (OSError, fa_capi.FaCapiError, BackwardError) as e:
        print("backward_bench.py: %s" % e, file=sys.stderr)
        return 2
    missing = [s.name for s in runnable if s.name not in lib.stage_names() or not bwd.has_backward(s.name)]
    if missing:
        print("backward_bench.py: %s lacks the backward of %s: rebuild it (cmake --build build --target fa_capi)" % (
            shown_path(args.lib), ", ".join(missing)), file=sys.stderr)
        return 2
    clock_mhz = int(float(smi_start.get("max_sm_clock_mhz") or 2000))
    before_launch, gap_text = interleaved.spin_kernel(torch, args.host_gap_us, clock_mhz)
    planned, total = plan(args, runnable)
    print_plan(planned, total, runnable, args)
    stream = torch.cuda.current_stream().cuda_stream
    csv_path, latest = results_paths(args, "backward", torch.cuda.get_device_name(), started)
    header = ref.torch_header(torch)
    rows, failed = [], False
    smi_end = {}

    def meta():
        facts = [tuple(f.split("=", 1)) for f in header if "=" in f]
        return facts + [
            ("driver", smi_start.get("driver", "")), ("cuda", getattr(torch.version, "cuda", "")),
            ("compute_capability", gpu_cc),
            ("sm_clock_mhz_at_start", smi_start.get("sm_clock_mhz", "")),
            ("sm_clock_mhz_at_end", smi_end.get("sm_clock_mhz", "")),
            ("sm_clock_max_mhz", smi_start.get("max_sm_clock_mhz", "")),
            ("date", started.strftime("%Y-%m-%dT%H:%M:%SZ")), ("git", git_revision()), ("command", command),
            ("timing", "rounds"), ("statistic", "minimum"), ("method", method_text(args, gap_text)),
            ("flops", "backward = 2.5 x forward (4 * batch * heads * seq_q * seq_kv * head_dim), halved for causal"),
            ("stages", " ".join(s.name for s in runnable)), ("skipped", "; ".join(skipped))]

    def write():
        os.makedirs(os.path.dirname(os.path.abspath(csv_path)), exist_ok=True)
        write_csv(csv_path, meta(), rows)

    for case, impls, _ in planned:
        try:
            case_rows = measure_case(torch, lib, bwd, args, case, runnable, stream, before_launch)
        except Exception as e:  # out of memory, a CUDA error: the case has no times
            status = "ERROR: " + ref.clean("%s: %s" % (type(e).__name__, e))
            case_rows = [base_row(case, name, kind, why or status) for name, kind, why in impls]
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        failed = failed or any(r["kind"] == "stage" and r["status"] != "PASS" and not r["status"].startswith(
            "unsupported") for r in case_rows)
        print_case(case, case_rows)
        rows.extend(case_rows)
        write()  # after every case: a crash keeps what came before it
    smi_end.update(nvidia_smi_query())
    write()
    report_written("backward_bench", csv_path, latest, time.time() - wall_start, total)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
