#!/usr/bin/env python3
"""Times stages and PyTorch's attention backends in one process, launch after launch, so that every
implementation is timed under the same clocks (docs/benchmarking.md: the power cap inside a series).

tools/bench.py --timing separate (the protocol of the results CSVs before rounds) times each
implementation in a series of its own (5 warm-up, 20 timed launches), the stages in fa_run and the
references minutes later in tools/torch_reference.py. On the H200 the board reaches its power limit
within a tenth of a second of load and the clock drops by 6-7%, so a series that straddles the drop
has a median that depends on where it started, and two series compare different clocks. Here the
launches take turns instead: round r launches every implementation once, in an order shuffled
afresh each round (so that each follows each other one about equally often: a kernel starts at the
clock its predecessor left), each launch between its own pair of CUDA events. Launch i of
one implementation and launch i of another run within a few milliseconds of each other, at the
same clock.

    cmake --build build --target fa_capi          # build/libfa_capi.so (common/c_api.h)
    python3 tools/interleaved.py --stages hopper_16,hopper_17 --dtype bf16 --head-dim 64 --seqs 4096
    python3 tools/interleaved.py --stages ampere_10,hopper_06,hopper_15 --dtype fp16,bf16 --head-dim 64,128 \
        --seqs 1024,2048,4096,8192 --csv interleaved.csv   # the headline shapes

A stage is named by its id (hopper_17_warp_redo) or its <track>_NN (hopper_17), as fa_run --stage
takes it.

Every implementation's output is checked first (tools/torch_reference.py's check_output, the rule
of common/checker.h, on sampled rows); one that fails gets no time. Inputs are torch_reference's
(same seeds), in the project's [batch, seq, heads, head_dim] layout; SDPA gets transposed views.
Prints one table per case: median and minimum ms, TFLOP/s, and % of FA2 and of cuDNN (their median
over this implementation's, and the same of the minima); --csv also writes the rows, after '#'
header lines that say where and what was measured (GPU, driver, PyTorch, cuDNN, git revision from
FA_GIT_REV or git, the command).

--any-length 1000,4000 (one length per --seqs value, 0 for none) also runs the stages at that length
in the same rounds and gives their TFLOP/s there (useful FLOPs) as a % of the TFLOP/s at the --seqs
length (a length that is a multiple of no tile should run at the speed of the padded length,
per useful FLOP), without two series between them. --any-length-stages runs only
some stages there; --any-length-references runs FA2 and cuDNN there too (fa2@1000, cudnn@1000), so
that the stages at that length get their % of FA2 and cuDNN from the same rounds.

--order series times each implementation in a row of its own (warm-up, then the timed launches), one
after another in this process, as bench.py --timing separate does across processes; --readings reads the SM
clock, power, temperature and clock-event reasons through NVML (tools/nvml.py, read only) halfway
through every launch, waiting for each launch to end, and states each time also in cycles (ms x the
clock read), which a clock that differs between implementations does not move.

PyTorch's fused backends take no ALiBi, so --alibi compares each stage with itself: every stage runs
twice per round, without and with FlashAttention's geometric slopes (the second checked against
fp64 attention with the bias), and a line per stage gives the slopes' cost in the same rounds.
--alibi-stages gives only the stages it names the slopes, at the --seqs lengths only.

tools/bench.py times its results this way (--timing rounds, the default): after fa_run has checked
every stage, one process per (dtype, head_dim) for the headline shapes, with --alibi-stages, and
--any-length, --any-length-stages and --any-length-references for the rows compared with them, one
for the causal and one for the grouped-query shapes (docs/benchmarking.md, Timing).
"""

import argparse
import csv
import datetime
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch_reference as ref  # noqa: E402
from cli_util import cuda_torch, git_revision, int_list, nvidia_smi_query  # noqa: E402
from fa_capi import FaCapi, FaCapiError  # noqa: E402
from nvml import Nvml, NvmlError  # noqa: E402
from results_csv import attention_flops  # noqa: E402
import stages as stage_declarations  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv):
    p = argparse.ArgumentParser(prog="tools/interleaved.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default=str(ROOT / "build" / "libfa_capi.so"), help="the C interface's library")
    p.add_argument("--stages", required=True,
                   help="comma-separated stage ids or <track>_NN ('' for none: only --alibi-stages and the "
                        "references)")
    p.add_argument("--references", default="fa2,cudnn", help="comma-separated subset of fa2,cudnn ('' for none)")
    p.add_argument("--dtype", default="fp16", help="fp16, bf16 or both, comma-separated")
    p.add_argument("--head-dim", type=int_list, default=int_list("128"), help="head dims, comma-separated")
    p.add_argument("--seqs", type=int_list, default=int_list("4096"), help="seq_q = seq_kv values")
    p.add_argument("--any-length", type=lengths_or_none, default=[],
                   help="one length per --seqs value (0: none for that value): the stages also run at it, in the "
                        "same rounds, and a line gives their TFLOP/s there as a %% of the TFLOP/s at the --seqs value")
    p.add_argument("--any-length-stages", default=None,
                   help="comma-separated: only these stages run at the --any-length lengths (default: --stages)")
    p.add_argument("--any-length-references", action="store_true",
                   help="also run the references at the --any-length lengths (fa2@<length>, cudnn@<length>)")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=0, help="K/V heads (default: --heads)")
    p.add_argument("--alibi", action="store_true",
                   help="also time each stage with ALiBi slopes (<stage>+alibi; the references take none)")
    p.add_argument("--alibi-stages", default=None,
                   help="comma-separated: only these stages with ALiBi slopes, at the --seqs lengths only "
                        "(they need not be in --stages)")
    p.add_argument("--warmup", type=int, default=10, help="untimed rounds (each launches every implementation)")
    p.add_argument("--reps", type=int, default=100, help="timed rounds")
    p.add_argument("--check-rows", type=int, default=16)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--launch-times", action="store_true", help="print each implementation's launches in order")
    p.add_argument("--order", choices=("rounds", "series"), default="rounds",
                   help="rounds (default): every implementation once per round, shuffled each round; series: each "
                        "implementation's warm-up and timed launches in a row, as tools/bench.py --timing separate "
                        "does, but one after another in this process")
    p.add_argument("--readings", action="store_true",
                   help="read the SM clock, power and temperature through NVML during every launch (the host "
                        "waits for each launch) and report the time in cycles and its %% of cuDNN's")
    p.add_argument("--csv", help="also write the rows here")
    args = p.parse_args(argv)
    args.kv_heads = args.kv_heads or args.heads
    args.dtypes = [d for d in args.dtype.split(",") if d]
    if not args.dtypes or any(d not in ("fp16", "bf16") for d in args.dtypes):
        p.error("--dtype takes fp16, bf16 or fp16,bf16, not %r" % args.dtype)
    if args.any_length and len(args.any_length) != len(args.seqs):
        p.error("--any-length takes one length per --seqs value")
    if args.alibi and args.alibi_stages is not None:
        p.error("--alibi (every stage) or --alibi-stages (these), not both")
    args.stage_list = name_list(args.stages)
    args.alibi_list = args.stage_list if args.alibi else name_list(args.alibi_stages or "")
    args.any_length_list = args.stage_list if args.any_length_stages is None else name_list(args.any_length_stages)
    if args.warmup < 0 or args.reps < 1:
        p.error("--warmup must be >= 0 and --reps >= 1")
    return args


def lengths_or_none(text):
    """argparse type of --any-length: '1000,0,4000' -> [1000, 0, 4000]; 0 means none."""
    return int_list(text, minimum=0)


def name_list(text):
    return [n for n in text.split(",") if n]


def implementations(torch, lib, args, q, k, v, seq, stages, alibi_stages, tag="", references=True):
    """[(name, kind, launch, status, max_abs_err)]: launch is None where the first call failed its
    check or could not run (status says why). `stages` run as they are, `alibi_stages` with ALiBi
    slopes (<stage>+alibi); every name gets `tag` appended, the references' too."""
    out = []
    stream = torch.cuda.current_stream().cuda_stream
    # ALiBi: FlashAttention's geometric slopes 2^(-8 (h + 1) / heads) per head (as fa_run --alibi).
    slopes = [2.0 ** (-8.0 * (h + 1) / args.heads) for h in range(args.heads)]
    slopes_gpu = torch.tensor(slopes, dtype=torch.float32, device=q.device)
    for stage in dict.fromkeys(stages + alibi_stages):  # each once, in order: without, then with slopes
        names = [n for n in lib.stage_names() if stage_declarations.selects(stage, n)]
        variants = ([("", None)] if stage in stages else []) + ([("+alibi", slopes_gpu)] if stage in alibi_stages else [])
        for suffix, alibi in variants:
            o = torch.empty_like(q)
            params = lib.params(q, k, v, o, causal=args.causal, alibi=alibi)
            name = (names[0] if names else stage) + suffix + tag
            try:
                lib.launch(stage, params, stream)
                torch.cuda.synchronize()
                passed, err, _, _, summary = ref.check_output(torch, q, k, v, o.transpose(1, 2), args.causal,
                                                              args.check_rows, args.seed + seq,
                                                              alibi_slopes=slopes if alibi is not None else None)
            except FaCapiError as e:
                out.append((name, "stage", None, "ERROR: " + ref.clean(str(e)), None))
                continue
            # The launch keeps its output and slopes alive through its default arguments.
            launch = (lambda s=stage, p=params, o=o, a=alibi: lib.launch(s, p, stream))
            out.append((name, "stage", launch if passed else None, "PASS" if passed else "FAIL: " + summary, err))
    if not references:
        return out
    backends = ref.sdpa_backend_enums(torch, [r for r in args.references.split(",") if r])
    options = ref.sdpa_options(args.heads, args.kv_heads, args.causal)
    for name, backend in backends.items():
        if isinstance(backend, str):
            out.append((name + tag, "reference", None, "unavailable: " + backend, None))
            continue
        operands = ref.sdpa_inputs(q, k, v, contiguous=False)
        result, why = ref.first_call(torch, backend, operands, options)
        if result is None:
            out.append((name + tag, "reference", None, why, None))
            continue
        passed, err, _, _, summary = ref.check_output(torch, q, k, v, result, args.causal, args.check_rows,
                                                      args.seed + seq)

        def launch(b=backend, ops=operands):
            from torch.nn.attention import sdpa_kernel
            with sdpa_kernel(b):
                torch.nn.functional.scaled_dot_product_attention(*ops, **options)
        out.append((name + tag, "reference", launch if passed else None, "PASS" if passed else "FAIL: " + summary, err))
    return out


def launch_plan(names, warmup, reps, order, seed=1):
    """[(name, timed)] in launch order. rounds: every round launches every implementation once, in an
    order shuffled afresh each round (seeded), so that each follows each other one about equally
    often; series: each implementation's warm-up and timed launches in a row, one after another.
    (Rotating one list instead keeps who follows whom: with four implementations cuDNN follows FA2
    in three rounds of four, starting at the clock FA2 had left, which moved its median by 10% on
    the H200.)"""
    if order == "series":
        return [(n, i >= warmup) for n in names for i in range(warmup + reps)]
    shuffle = random.Random(seed).shuffle
    plan = []
    for r in range(warmup + reps):
        round_names = list(names)
        shuffle(round_names)
        plan += [(n, r >= warmup) for n in round_names]
    return plan


def time_launches(torch, timed, warmup, reps, order, nvml=None, seed=1, before_launch=None):
    """({name: [ms of each timed launch]}, {name: [NVML reading]}). With nvml, the host waits half of
    the implementation's previous launch, reads the clock while the kernel runs, then synchronizes
    (so launches no longer queue back to back, and gaps of well under a millisecond open between them).
    before_launch: called before each launch's start event, untimed (tools/decode_bench.py queues a
    short spin kernel there, so that a launch shorter than the host's time to issue it is queued
    before the GPU reaches it, and its events time the kernel, not the host)."""
    launch = dict(timed)
    events = {name: [] for name, _ in timed}
    readings = {name: [] for name, _ in timed}
    half_ms = {}
    for name, is_timed in launch_plan([n for n, _ in timed], warmup, reps, order, seed):
        if before_launch is not None:
            before_launch()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch[name]()
        end.record()
        if nvml is not None:
            time.sleep(half_ms.get(name, 0.0) / 1000.0)
            reading = nvml.reading()
            end.synchronize()
            half_ms[name] = start.elapsed_time(end) / 2
            if is_timed:
                readings[name].append(reading)
        if is_timed:
            events[name].append((start, end))
    torch.cuda.synchronize()
    return {name: [s.elapsed_time(e) for s, e in pairs] for name, pairs in events.items()}, readings


def spin_kernel(torch, gap_us, clock_mhz):
    """(before_launch for time_launches, its description): torch.cuda._sleep for gap_us at clock_mhz,
    or None (tools/decode_bench.py, tools/backward_bench.py: --host-gap-us)."""
    if gap_us <= 0:
        return None, "none"
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is None:
        return None, "none (this PyTorch has no torch.cuda._sleep)"
    cycles = int(gap_us * clock_mhz)
    return (lambda: sleep(cycles)), "torch.cuda._sleep(%d) before every launch (%.0f us at %d MHz)" % (
        cycles, gap_us, clock_mhz)


def readings_summary(readings):
    """(median SM MHz, median W, median C, the most frequent clock-event reasons) of NVML readings."""
    reasons = [r[3] for r in readings]
    return (statistics.median(r[0] for r in readings), statistics.median(r[1] for r in readings),
            statistics.median(r[2] for r in readings), max(set(reasons), key=reasons.count))


def time_case(torch, lib, args, dtype_name, head_dim, seq, nvml=None):
    """([row], failed) of one shape: checks, then interleaved timing, then its printed table."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
    rows, failed = [], False
    q, k, v = ref.case_inputs(torch, args.seed, args.batch, seq, args.heads, args.kv_heads, head_dim, dtype)
    impls = implementations(torch, lib, args, q, k, v, seq, args.stage_list, args.alibi_list)
    seq_of = {name: seq for name, *_ in impls}
    # --any-length: the stages also at the paired length, in the same rounds (named <stage>@<length>;
    # with --any-length-references, fa2@<length> and cudnn@<length> too).
    other = dict(zip(args.seqs, args.any_length)).get(seq) or None
    if other is not None:
        q2, k2, v2 = ref.case_inputs(torch, args.seed, args.batch, other, args.heads, args.kv_heads, head_dim, dtype)
        more = implementations(torch, lib, args, q2, k2, v2, other, args.any_length_list,
                               args.any_length_list if args.alibi else [], tag="@%d" % other,
                               references=args.any_length_references)
        seq_of.update((name, other) for name, *_ in more)
        impls += more
    timed = [(name, launch) for name, _, launch, _, _ in impls if launch is not None]
    times, readings = time_launches(torch, timed, args.warmup, args.reps, args.order, nvml, args.seed) if timed else ({}, {})
    flops = {n: attention_flops(args.batch, args.heads, s, s, head_dim, args.causal) for n, s in seq_of.items()}
    stats = {n: (statistics.median(t), min(t)) for n, t in times.items()}

    def same_length(reference, name):
        """The reference's name at the length of implementation `name` (fa2 or fa2@<length>)."""
        return reference if seq_of[name] == seq else "%s@%d" % (reference, other)
    # With --readings: the median over launches of ms x the SM clock read during the launch, a time
    # in cycles that a clock difference between launches does not move.
    cycles = {n: statistics.median(ms * r[0] / 1000 for ms, r in zip(times[n], readings[n]))
              for n in times if readings.get(n)}
    print("\n%s, head_dim %d, [%d, %d, %d, %d]%s%s" % (
        dtype_name, head_dim, args.batch, seq, args.heads, head_dim,
        ", kv_heads %d" % args.kv_heads if args.kv_heads != args.heads else "", ", causal" if args.causal else ""))
    print("%-34s %10s %10s %8s %13s %13s  %s" % ("impl", "median_ms", "min_ms", "TFLOP/s",
                                               "% FA2 med/min", "% cuDNN m/m", "status"))
    for name, kind, launch, status, err in impls:
        row = {"impl": name, "kind": kind, "dtype": dtype_name, "head_dim": head_dim, "batch": args.batch,
               "heads": args.heads, "kv_heads": args.kv_heads, "causal": int(args.causal),
               "alibi": int("+alibi" in name), "seq_q": seq_of[name],
               "seq_kv": seq_of[name], "median_ms": "", "min_ms": "", "tflops": "", "pct_of_fa2": "", "pct_of_cudnn": "",
               "pct_of_fa2_min": "", "pct_of_cudnn_min": "", "sm_clock_mhz": "", "power_w": "", "mcycles": "",
               "pct_of_cudnn_cycles": "", "max_abs_err": "" if err is None else "%.6g" % err, "status": status}
        failed = failed or (kind == "stage" and status != "PASS")
        if name in stats:
            med, low = stats[name]
            row.update(median_ms="%.6g" % med, min_ms="%.6g" % low,
                       tflops="%.6g" % (flops[name] / (med * 1e-3) / 1e12))
            for r in ("fa2", "cudnn"):
                if same_length(r, name) in stats:
                    ref_med, ref_low = stats[same_length(r, name)]
                    row["pct_of_%s" % r] = "%.2f" % (100 * ref_med / med)
                    row["pct_of_%s_min" % r] = "%.2f" % (100 * ref_low / low)

        def pct(key):
            return "%.1f" % float(row[key]) if row[key] else "-"
        print("%-34s %10s %10s %8s %6s/%-6s %6s/%-6s  %s" % (
            name, row["median_ms"] or "-", row["min_ms"] or "-", "%.1f" % float(row["tflops"]) if row["tflops"] else "-",
            pct("pct_of_fa2"), pct("pct_of_fa2_min"), pct("pct_of_cudnn"), pct("pct_of_cudnn_min"), status[:60]))
        if name in cycles:
            clock, power, temp, reasons = readings_summary(readings[name])
            row.update(sm_clock_mhz="%d" % clock, power_w="%.0f" % power, mcycles="%.4g" % cycles[name])
            if same_length("cudnn", name) in cycles:
                row["pct_of_cudnn_cycles"] = "%.2f" % (100 * cycles[same_length("cudnn", name)] / cycles[name])
            print("%-34s   SM clock %d MHz, %.0f W, %d C, %s; %.4g Mcycles = %s%% of cuDNN's" % (
                "", clock, power, temp, reasons, cycles[name], row["pct_of_cudnn_cycles"] or "-"))
        if args.launch_times and name in times:
            print("  launch ms: " + " ".join("%.4g" % t for t in times[name]))
            if readings.get(name):
                print("  SM MHz:    " + " ".join("%d" % r[0] for r in readings[name]))
        rows.append(row)
    if args.alibi_list:  # the cost of the slopes: each stage against itself without them, same rounds
        for name in [n for n in stats if n + "+alibi" in stats]:
            with_alibi = stats[name + "+alibi"]
            print("%-34s ALiBi costs %+.1f%% (medians), %+.1f%% (minima)" % (
                name, 100 * (with_alibi[0] / stats[name][0] - 1), 100 * (with_alibi[1] / stats[name][1] - 1)))
    if other is not None:  # the any-length rule: TFLOP/s (useful FLOPs) at the odd length over the even one
        for name in [n for n in stats if n + "@%d" % other in stats]:
            rate = {n: (flops[n] / stats[n][0], flops[n] / stats[n][1]) for n in (name, name + "@%d" % other)}
            odd, even = rate[name + "@%d" % other], rate[name]
            print("%-34s S = %d runs at %.1f%% (medians), %.1f%% (minima) of the TFLOP/s at S = %d" % (
                name, other, 100 * odd[0] / even[0], 100 * odd[1] / even[1], seq))
    return rows, failed


def method_text(args):
    if args.order == "series":
        text = ("series: each implementation %d warm-up and %d timed launches in a row, one implementation after "
                "another in one process" % (args.warmup, args.reps))
    else:
        text = ("interleaved: %d warm-up and %d timed rounds, every implementation launched once per round in an "
                "order shuffled each round" % (args.warmup, args.reps))
    text += ", each launch between its own CUDA events"
    if args.readings:
        text += ("; NVML SM clock, power and temperature read halfway through each launch, the host waiting for "
                 "each launch to end")
    return text


def write_csv(path, header, driver, args, rows):
    """The rows, after '# key=value' lines: the GPU and software (torch_header), the driver, the date,
    the git revision, the method and the command."""
    facts = [field.split("=", 1) for field in header if "=" in field]
    facts += [("driver", driver),
              ("date", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")),
              ("git", git_revision()),
              ("method", method_text(args) + "; each output checked against fp64 attention on %d sampled rows "
                                             "first (no time if it fails)" % args.check_rows),
              ("command", args.command)]
    with open(path, "w", newline="") as f:
        for key, value in facts:
            f.write("# %s=%s\n" % (key, value))
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["impl"])
        writer.writeheader()
        writer.writerows(rows)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    args.command = "tools/interleaved.py " + " ".join(argv)
    torch = cuda_torch("interleaved.py")
    if torch is None:
        return 3
    lib = FaCapi(args.lib)
    nvml = None
    if args.readings:
        try:
            nvml = Nvml()
        except NvmlError as e:
            print("interleaved.py: --readings needs NVML: %s" % e, file=sys.stderr)
            return 3
    rows, failed = [], False
    header = ref.torch_header(torch)
    driver = nvidia_smi_query().get("driver", "unknown")
    print("# %s; method=%s" % ("; ".join(header), method_text(args)))  # torch_header names the GPU
    for dtype_name in args.dtypes:
        for head_dim in args.head_dim:
            for seq in args.seqs:
                case_rows, case_failed = time_case(torch, lib, args, dtype_name, head_dim, seq, nvml)
                rows += case_rows
                failed = failed or case_failed
                if args.csv:  # after every case, so that a crash keeps the cases before it
                    write_csv(args.csv, header, driver, args, rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
