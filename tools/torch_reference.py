#!/usr/bin/env python3
"""Times PyTorch's fused attention backends on the benchmark's shapes: the references of every result.

    fa2    F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.FLASH_ATTENTION):
           FlashAttention-2 as shipped inside PyTorch ("official" in STAGES.md)
    cudnn  the same under sdpa_kernel(SDPBackend.CUDNN_ATTENTION): cuDNN's fused attention

The cases, each a row per backend (its `series`, as in tools/results_csv.py):
    --seqs             headline: non-causal, as many K/V heads as query heads
    --causal-seqs      causal: is_causal=True at seq_q = seq_kv (where SDPA's top-left alignment and
                       the project's bottom-right one agree); FLOPs halved
    --any-length-seqs  any_length: non-causal, lengths that are not multiples of a tile
    --gqa-seqs         gqa: --kv-heads K/V heads shared by heads / kv_heads query heads each, through
                       enable_gqa=True (a backend that has no kernel for it is a row saying why)

Same method as the C++ runner (tools/fa_run.cpp, common/harness.cu):
  * fresh seeded normal inputs in the project's [batch, seq, heads, head_dim] layout, handed to SDPA
    as q.transpose(1, 2) views (the [batch, heads, seq, head_dim] shape SDPA expects, same memory);
    a backend that has no kernel for those strides gets contiguous [B, H, S, D] copies instead, and
    the header line says which operands each backend was timed with (<name>_operands=...);
  * one call whose output is checked; a backend that fails its check gets no time;
  * `warmup` launches, then `reps` launches each timed by its own pair of CUDA events; median, min.

The check is common/checker.h's rule: on sampled query rows (first, last and random ones) of every
(batch, head), each row's largest error against an fp64 attention (with the case's causal mask and
K/V head of each query head) may be at most 2x the error of a plain low-precision attention (scores
and softmax in fp32, probabilities rounded to the input dtype before P V, output rounded to the
dtype) on that row -- counted as at least the dtype's rounding of the row's largest output, raised
to the head's largest relative error -- plus 1e-5 of the row's scale. NaN fails, and every output
element must be finite.

Writes the runner's CSV format: one '# key=value; ...' line, then
    impl,series,dtype,head_dim,batch,heads,kv_heads,causal,seq_q,seq_kv,median_ms,min_ms,tflops,max_abs_err,rel_l2_err,tolerance,status
with status PASS, "FAIL: ...", "ERROR: ..." or "unavailable: <reason>" (no time unless PASS).
tools/bench.py runs it in its own process, so the C++ side never imports torch. Without torch (or
without a CUDA device) it still writes one row per case and backend, marked unavailable, and exits 0.
"""

import argparse
import csv
import datetime
import math
import re
import sys
import warnings

from cli_util import int_list
from results_csv import attention_flops

BACKENDS = ("fa2", "cudnn")
COLUMNS = ["impl", "series", "dtype", "head_dim", "batch", "heads", "kv_heads", "causal", "seq_q", "seq_kv",
           "median_ms", "min_ms", "tflops", "max_abs_err", "rel_l2_err", "tolerance", "status"]
TOLERANCE_FACTOR = 2.0
TOLERANCE_EPSILON = 1e-5


def parse_args(argv):
    p = argparse.ArgumentParser(prog="tools/torch_reference.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Example: python3 tools/torch_reference.py --dtype bf16 --head-dim 64 --seqs 1024 "
                                       "--csv /tmp/refs.csv   (exit status 0 unless the options are bad: a backend "
                                       "that fails or is unavailable is a row, not an error)")
    p.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16", help="input dtype (default fp16)")
    p.add_argument("--head-dim", type=int, default=128, help="head_dim (default 128)")
    p.add_argument("--seqs", type=int_list, default=int_list("1024,2048,4096,8192"),
                   help="headline cases: query lengths, seq_kv = seq_q (default 1024,2048,4096,8192)")
    p.add_argument("--no-headline", action="store_true", help="no headline cases (only the ones below)")
    p.add_argument("--causal-seqs", type=int_list, default=[],
                   help="causal cases (is_causal=True), seq_kv = seq_q (default none)")
    p.add_argument("--any-length-seqs", type=int_list, default=[],
                   help="any-length cases (non-causal), seq_kv = seq_q (default none)")
    p.add_argument("--gqa-seqs", type=int_list, default=[],
                   help="grouped-query cases (non-causal, --kv-heads K/V heads, enable_gqa=True) (default none)")
    p.add_argument("--kv-heads", type=int, default=8, help="K/V heads of the --gqa-seqs cases (default 8)")
    p.add_argument("--batch", type=int, default=16, help="batch size (default 16)")
    p.add_argument("--heads", type=int, default=32, help="heads (default 32)")
    p.add_argument("--warmup", type=int, default=5, help="untimed launches before timing (default 5)")
    p.add_argument("--reps", type=int, default=20, help="timed launches, each between its own CUDA events (default 20)")
    p.add_argument("--launch-times", action="store_true",
                   help="print every timed launch's ms in the order they ran (a drift, e.g. of the clocks, shows there)")
    p.add_argument("--backends", default=",".join(BACKENDS),
                   help="comma-separated subset of %s (default all)" % ",".join(BACKENDS))
    p.add_argument("--seed", type=int, default=1, help="seed of the random inputs (default 1)")
    p.add_argument("--check-rows", type=int, default=16,
                   help="query rows checked against fp64 per (batch, head) (default 16)")
    p.add_argument("--csv", required=True, help="where to write the rows (the runner's CSV format, above)")
    args = p.parse_args(argv)
    args.backends = [b for b in args.backends.split(",") if b]
    for b in args.backends:
        if b not in BACKENDS:
            p.error("unknown backend %r (known: %s)" % (b, ", ".join(BACKENDS)))
    if args.reps < 1 or args.warmup < 0:
        p.error("--reps must be >= 1 and --warmup >= 0")
    if args.kv_heads < 1 or args.heads % args.kv_heads:
        p.error("--kv-heads must divide --heads (%d), got %d" % (args.heads, args.kv_heads))
    args.cases = cases(args)
    if not args.cases:
        p.error("no cases: --no-headline without --causal-seqs, --any-length-seqs or --gqa-seqs")
    return args


def cases(args):
    """[(series, seq, causal, kv_heads)] in the order they are measured; the grouped-query cases last,
    so that a backend that crashes on them cannot cost the others their rows."""
    out = [] if args.no_headline else [("headline", s, False, args.heads) for s in args.seqs]
    out += [("causal", s, True, args.heads) for s in args.causal_seqs]
    out += [("any_length", s, False, args.heads) for s in args.any_length_seqs]
    out += [("gqa", s, False, args.kv_heads) for s in args.gqa_seqs]
    return out


def clean(text, limit=300):
    """One CSV-safe line: no commas or newlines, as the C++ runner writes its status."""
    text = re.sub(r"\s+", " ", str(text).replace(",", ";")).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def base_row(args, impl, case):
    series, seq, causal, kv_heads = case
    return {"impl": impl, "series": series, "dtype": args.dtype, "head_dim": args.head_dim, "batch": args.batch,
            "heads": args.heads, "kv_heads": kv_heads, "causal": int(causal), "seq_q": seq, "seq_kv": seq,
            "median_ms": "", "min_ms": "", "tflops": "", "max_abs_err": "", "rel_l2_err": "", "tolerance": "",
            "status": ""}


def write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        f.write("# " + header + "\n")
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


def progress(row):
    if row["median_ms"] != "":
        timing = "%10.4f %10.4f %9.1f" % (float(row["median_ms"]), float(row["min_ms"]), float(row["tflops"]))
    else:
        timing = "%10s %10s %9s" % ("-", "-", "-")
    errors = "%11s %11s" % (row["max_abs_err"] or "-", row["rel_l2_err"] or "-")
    print("%-18s %-5s %4s %5s %5s %6s %6s %s %s  %s" % (
        row["impl"], row["dtype"], row["head_dim"], row["batch"], row["heads"], row["seq_q"], row["seq_kv"],
        timing, errors, row["status"]), flush=True)


def median(sorted_values):
    n = len(sorted_values)
    return sorted_values[n // 2] if n % 2 else 0.5 * (sorted_values[n // 2 - 1] + sorted_values[n // 2])


def now_utc():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------------------------
# Everything below needs torch; it is imported inside main() so that a missing torch is a result
# ("unavailable"), not a crash.


def sdpa_backend_enums(torch, names):
    """{name: SDPBackend member or a string saying why there is none}."""
    try:
        from torch.nn.attention import SDPBackend
    except Exception as e:  # torch older than 2.3
        return {n: "this PyTorch has no torch.nn.attention.SDPBackend (%s)" % e for n in names}
    wanted = {"fa2": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION"}
    return {n: getattr(SDPBackend, wanted[n], "this PyTorch has no SDPBackend.%s" % wanted[n]) for n in names}


def sdpa_inputs(q, k, v, contiguous):
    """SDPA's [B, H, S, D] operands: transposed views of the [B, S, H, D] tensors (the project's
    layout, same memory), or, as a fallback for a backend that rejects those strides, contiguous
    [B, H, S, D] copies."""
    views = [t.transpose(1, 2) for t in (q, k, v)]
    return [t.contiguous() for t in views] if contiguous else views


def sdpa_options(heads, kv_heads, causal):
    """The keyword arguments of scaled_dot_product_attention for a case. enable_gqa only where K/V
    heads are shared, so that a PyTorch without it (before 2.5) still runs every other case."""
    options = {"is_causal": bool(causal)}
    if kv_heads != heads:
        options["enable_gqa"] = True
    return options


def first_call(torch, backend, operands, options):
    """Returns (output [B, H, S, D], None), or (None, "unavailable: why") when SDPA has no kernel of
    this backend for these operands and options."""
    from torch.nn.attention import sdpa_kernel
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(backend):
                out = torch.nn.functional.scaled_dot_product_attention(*operands, **options)
            torch.cuda.synchronize()
            return out, None
        except TypeError as e:  # an option this PyTorch does not know (enable_gqa before 2.5)
            return None, "unavailable: " + clean("this PyTorch's scaled_dot_product_attention rejects %s (%s)"
                                                 % (", ".join(sorted(options)), e), 250)
        except RuntimeError as e:
            # The wording differs between versions and devices ("No available kernel. Aborting
            # execution." / "No viable backend for scaled_dot_product_attention was found").
            if "No available kernel" not in str(e) and "No viable backend" not in str(e):
                raise
            # SDPA says why through warnings ("Flash attention kernel not used because: ...").
            reasons = []
            for w in caught:
                text = re.sub(r"\s*\(Triggered internally at .*?\)", "", str(w.message), flags=re.S).strip()
                if text and text not in reasons:
                    reasons.append(text)
            return None, "unavailable: " + clean("; ".join(reasons) or str(e), 250)


def case_inputs(torch, seed, batch, seq, heads, kv_heads, head_dim, dtype, seq_kv=None):
    """A case's fresh seeded normal inputs, distinct for q, k and v, on the GPU: q [B, S, H, D], k and v
    [B, S, KVH, D] (also tools/interleaved.py's, so that both check and time the same data); with
    seq_kv (tools/decode_bench.py), k and v [B, seq_kv, KVH, D] and the seed depends on it too."""
    torch.manual_seed(seed * 1000003 + seq + (0 if seq_kv is None else 7919 * seq_kv))
    seq_kv = seq if seq_kv is None else seq_kv
    q = torch.randn((batch, seq, heads, head_dim), device="cuda", dtype=dtype)
    k, v = (torch.randn((batch, seq_kv, kv_heads, head_dim), device="cuda", dtype=dtype) for _ in range(2))
    return q, k, v


def sampled_rows(torch, seq, count, seed):
    gen = torch.Generator().manual_seed(seed)
    picks = {0, seq - 1}
    while len(picks) < min(count, seq):
        picks.add(int(torch.randint(0, seq, (1,), generator=gen).item()))
    return sorted(picks)


def check_output(torch, q, k, v, out_bhsd, causal, rows_per_head, seed, alibi_slopes=None):
    """FlashAttention's tolerance rule on sampled rows of every (batch, head); see the module doc.
    q is [B, Sq, H, D]; k and v are [B, Skv, KVH, D], query head h reading K/V head h / (H / KVH);
    causal: query i sees keys j <= i + Skv - Sq (bottom-right; top-left too where Sq = Skv);
    alibi_slopes: None, or one slope per head (a sequence of H floats, shared by the batch), whose
    -slope * |i + Skv - Sq - j| is added to the scaled score (FlashAttention-2's alibi_slopes)."""
    batch, seq_q, heads, head_dim = q.shape
    seq_kv, kv_heads = k.shape[1], k.shape[2]
    group = heads // kv_heads
    scale = 1.0 / math.sqrt(head_dim)  # SDPA's default, as the C++ harness's
    rows = torch.tensor(sampled_rows(torch, seq_q, rows_per_head, seed), device=q.device)
    masked = None
    keys = torch.arange(seq_kv, device=q.device)
    if causal:
        masked = keys[None, :] > rows[:, None] + (seq_kv - seq_q)          # [R, Skv]
    bias = None
    if alibi_slopes is not None:
        distance = (rows[:, None] + (seq_kv - seq_q) - keys[None, :]).abs().double()  # [R, Skv]
        slopes = torch.tensor([float(x) for x in alibi_slopes], dtype=torch.float64, device=q.device)
        bias = -slopes[:, None, None] * distance[None]                   # [H, R, Skv]
    max_abs_err = baseline_max_abs_err = max_tolerance = 0.0
    err_sq = ref_sq = 0.0
    all_within = True
    # common/checker.h's rule, row by row: u = the dtype's unit roundoff, R = a row's largest |ref|,
    # e = max(u R, the plain attention's largest error on the row; 2 u R where it overflowed),
    # raised to the head's largest e / R times R, tolerance = 2 e + 1e-5 R.
    u = 2.0 ** -11 if q.dtype == torch.float16 else 2.0 ** -8
    tiny = 2.0 ** -14 if q.dtype == torch.float16 else 2.0 ** -126
    finite = bool(torch.isfinite(out_bhsd).all().item())  # every element, sampled or not
    for b in range(batch):  # one batch at a time keeps the fp64 scores small ([H, rows, seq_kv])
        q_rows = q[b].index_select(0, rows).permute(1, 0, 2).double()  # [H, R, D]
        # [H, Skv, D]: each query head's K/V head (the same tensor for every head of a group)
        k_b = k[b].permute(1, 0, 2).double().repeat_interleave(group, dim=0)
        v_b = v[b].permute(1, 0, 2).double().repeat_interleave(group, dim=0)
        scores = torch.matmul(q_rows, k_b.transpose(1, 2)) * scale      # [H, R, Skv], fp64
        if bias is not None:
            scores = scores + bias
        if masked is not None:
            scores = scores.masked_fill(masked, -math.inf)
        ref = torch.matmul(torch.softmax(scores, dim=-1), v_b)          # [H, R, D], fp64
        # The plain low-precision attention whose error sets the tolerance: fp32 scores and softmax,
        # P rounded to the input dtype, P V accumulated in high precision, output rounded to the dtype.
        probs_lowp = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        baseline = torch.matmul(probs_lowp.double(), v_b).to(q.dtype).double()
        got = out_bhsd[b].index_select(1, rows).double()                # [H, R, D]
        err = (got - ref).abs()
        row_scale = ref.abs().amax(-1, keepdim=True)                    # [H, R, 1]
        floor = u * row_scale.clamp(min=tiny)
        base_err = (baseline - ref).abs()
        base_finite = torch.isfinite(base_err)
        estimate = torch.maximum(torch.where(base_finite, base_err, torch.zeros_like(base_err)).amax(-1, keepdim=True),
                                 floor)
        estimate = torch.where((~base_finite).any(-1, keepdim=True), torch.maximum(estimate, 2 * floor), estimate)
        head_rel = (estimate / row_scale.clamp(min=tiny)).amax(1, keepdim=True)  # [H, 1, 1]
        estimate = torch.maximum(estimate, head_rel * row_scale)
        tol = TOLERANCE_FACTOR * estimate + TOLERANCE_EPSILON * row_scale
        max_tolerance = max(max_tolerance, float(tol.max().item()))
        if not bool(torch.isfinite(err).all().item()):
            finite = False
        else:
            max_abs_err = max(max_abs_err, float(err.max().item()))
            err_sq += float((err * err).sum().item())
            all_within = all_within and bool((err <= tol).all().item())
        ref_sq += float((ref * ref).sum().item())
        baseline_max_abs_err = max(baseline_max_abs_err,
                                   float(torch.where(base_finite, base_err, torch.zeros_like(base_err)).max().item()))
    tolerance = max_tolerance
    rel_l2_err = math.sqrt(err_sq / ref_sq) if ref_sq > 0 else math.sqrt(err_sq)
    if not finite:
        max_abs_err = rel_l2_err = math.inf
    passed = finite and all_within
    summary = "%d rows x %d heads x %d batches; max_abs_err %.3e (largest row tolerance %.3e; plain-attention error up to %.3e)" % (
        len(rows), heads, batch, max_abs_err, tolerance, baseline_max_abs_err)
    if not finite:
        summary = "non-finite output; " + summary
    return passed, max_abs_err, rel_l2_err, tolerance, summary


def time_backend(torch, backend, operands, options, warmup, reps):
    """Warm-up launches, then `reps` launches each between its own pair of CUDA events (as
    fa::time_stage does); returns (median_ms, min_ms, the launches' ms in the order they ran)."""
    from torch.nn.attention import sdpa_kernel
    qt, kt, vt = operands
    attention = torch.nn.functional.scaled_dot_product_attention
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    with sdpa_kernel(backend):
        for _ in range(warmup):
            attention(qt, kt, vt, **options)
        for i in range(reps):
            starts[i].record()
            attention(qt, kt, vt, **options)
            ends[i].record()
    torch.cuda.synchronize()
    in_order = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    times = sorted(in_order)
    return median(times), times[0], in_order


def torch_header(torch):
    fields = ["torch=" + torch.__version__, "torch_cuda=" + str(torch.version.cuda)]
    try:
        fields.append("cudnn=" + str(torch.backends.cudnn.version()))
    except Exception:
        fields.append("cudnn=unknown")
    try:
        from torch.nn.attention import current_flash_attention_impl
        impl = current_flash_attention_impl()
        fields.append("flash_impl=" + (str(impl) if impl else "builtin FlashAttention-2"))
    except Exception:
        fields.append("flash_impl=builtin FlashAttention-2")
    if torch.cuda.is_available():
        cc = torch.cuda.get_device_capability()
        fields = ["gpu=" + torch.cuda.get_device_name(), "sm=%d%d" % cc] + fields
    return fields


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rows = []

    def unavailable_everywhere(reason, header):
        for case in args.cases:
            for name in args.backends:
                row = base_row(args, name, case)
                row["status"] = "unavailable: " + clean(reason)
                rows.append(row)
                progress(row)
        write_csv(args.csv, "; ".join(header + ["date=" + now_utc()]), rows)
        return 0

    try:
        import torch
    except Exception as e:
        print("torch_reference.py: PyTorch is not importable (%s: %s); the reference columns will say "
              "'torch unavailable'." % (type(e).__name__, e), file=sys.stderr, flush=True)
        return unavailable_everywhere("torch unavailable (%s: %s)" % (type(e).__name__, e), ["torch=unavailable"])

    header = torch_header(torch)
    started = now_utc()
    if not torch.cuda.is_available():
        return unavailable_everywhere("torch %s sees no CUDA device" % torch.__version__, header)

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    backends = sdpa_backend_enums(torch, args.backends)
    layouts = {}  # backend -> the operand layout it was timed with, for the header

    def write_partial():  # after every row, so a crash keeps what was measured before it
        operand_fields = ["%s_operands=%s" % (n, "+".join(sorted(layouts[n]))) for n in args.backends if n in layouts]
        write_csv(args.csv, "; ".join(header + operand_fields + ["date=" + started]), rows)

    for case in args.cases:
        _, seq, causal, kv_heads = case
        options = sdpa_options(args.heads, kv_heads, causal)
        q = k = v = out = None
        try:
            # Fresh normal inputs per case, distinct for q, k and v, in [B, S, H, D] ([B, S, KVH, D]
            # for k and v).
            q, k, v = case_inputs(torch, args.seed, args.batch, seq, args.heads, kv_heads, args.head_dim, dtype)
        except Exception as e:
            for name in args.backends:
                row = base_row(args, name, case)
                row["status"] = "ERROR: " + clean("%s: %s" % (type(e).__name__, e))
                rows.append(row)
                progress(row)
            write_partial()
            q = k = v = None
            torch.cuda.empty_cache()
            continue
        for name in args.backends:
            row = base_row(args, name, case)
            backend = backends[name]
            try:
                if isinstance(backend, str):
                    row["status"] = "unavailable: " + clean(backend)
                else:
                    operands = sdpa_inputs(q, k, v, contiguous=False)
                    out, why = first_call(torch, backend, operands, options)
                    layout = "bshd-strided-views"
                    if why:  # try contiguous [B, H, S, D] copies before giving up on this backend
                        operands = sdpa_inputs(q, k, v, contiguous=True)
                        out, why_contiguous = first_call(torch, backend, operands, options)
                        layout = "bhsd-contiguous-copies"
                        if why_contiguous:
                            operands = None
                    if out is None:
                        row["status"] = why
                    else:
                        layouts.setdefault(name, set()).add(layout)
                        passed, max_abs, rel_l2, tol, summary = check_output(
                            torch, q, k, v, out, causal, args.check_rows, args.seed + seq)
                        row.update(max_abs_err="%.6g" % max_abs, rel_l2_err="%.6g" % rel_l2, tolerance="%.6g" % tol)
                        out = None
                        if not passed:
                            row["status"] = "FAIL: " + clean(summary)
                        else:
                            median_ms, min_ms, in_order = time_backend(torch, backend, operands, options,
                                                                       args.warmup, args.reps)
                            if args.launch_times:
                                print("%s %s d%d S=%d%s launch ms: %s" % (
                                    name, args.dtype, args.head_dim, seq, " causal" if causal else "",
                                    " ".join("%.4g" % t for t in in_order)), flush=True)
                            flops = attention_flops(args.batch, args.heads, seq, seq, args.head_dim, causal)
                            row.update(median_ms="%.6g" % median_ms, min_ms="%.6g" % min_ms,
                                       tflops="%.6g" % (flops / (median_ms * 1e-3) / 1e12), status="PASS")
            except Exception as e:  # out of memory, a CUDA error, ...: this row has no time
                row.update(median_ms="", min_ms="", tflops="")
                row["status"] = "ERROR: " + clean("%s: %s" % (type(e).__name__, e))
                out = None
                torch.cuda.empty_cache()
            operands = None
            rows.append(row)
            progress(row)
            write_partial()
        q = k = v = out = None
        torch.cuda.empty_cache()

    write_partial()
    return 0


if __name__ == "__main__":
    sys.exit(main())
