#!/usr/bin/env python3
"""The main benchmark: every stage against PyTorch's FlashAttention-2 and cuDNN, in one CSV.

For each (dtype, head_dim) it checks and times the stages that declare that dtype and head_dim and
that this GPU can run (an sm_90a stage is skipped, with a message, on any GPU but compute
capability 9.0), in these series of rows (tools/results_csv.py SERIES):

  headline    every stage, non-causal, at --seqs (S = 1024..8192)
  causal      the stages whose stage.json features include "causal": causal at --seqs
              (seq_q = seq_kv); FLOPs are half the non-causal count
  any_length  the stages declaring "any_length": --any-length-seqs (S = 1000, 4000), compared
              with the same stage's headline rows at 1024 and 4096
  gqa         the stages declaring "gqa": --kv-heads 8 (32 query heads share 8 K/V heads)
  alibi       the stages declaring "alibi": with ALiBi slopes, compared with the same stage's
              headline rows (PyTorch's fused backends take no ALiBi, so there is no reference)

How (--timing; docs/benchmarking.md, Timing):

  rounds      (the default) the C++ runner checks every result against fp64 (build/fa_run
              --no-time, once per series); then tools/interleaved.py (build/libfa_capi.so, in
              PyTorch's process) times the stages that passed together with FA2 and cuDNN: per
              shape, warm-up and timed rounds, each round launching every implementation once in
              an order shuffled afresh, each launch between its own CUDA events (each output
              checked again on sampled rows first). One process per (dtype, head_dim) for the
              headline shapes, whose rounds also hold the ALiBi rows and the any-length rows (S =
              1000 in the rounds of 1024, 4000 in those of 4096, with FA2 and cuDNN there), one
              for the causal and one for the gqa shapes. A stage's row passes only if both checks
              passed. Under --no-reference, or without PyTorch or build/libfa_capi.so, it times
              separately instead, and says why.
  separate    the protocol of the CSVs before rounds: fa_run checks and then times each result in
              a series of its own (warm-up, then timed launches), one process per series; then
              tools/torch_reference.py times FA2 and cuDNN the same way in one process per
              (dtype, head_dim), for every series that has a reference.

Nothing here imports torch. It merges everything into one CSV with % of FA2 and % of cuDNN per
row, prints a compact table, renders the plots, the README's results and docs/results.md (tools/plot.py) and, when
it wrote plots/results/latest.csv, refreshes the generated sections of docs/ (tools/gen_docs.py),
so that every check of the generated text passes after the run.

A job too long for one command (a machine that limits how long one command may run) runs in parts, each a
complete run of some dtypes / head_dims with its own FA2 and cuDNN references:
  bench.py --part --dtypes fp16     writes <out-dir>/parts/part_fp16_d64_d128.csv, nothing else
  bench.py --part --dtypes bf16     the same for bf16
  bench.py --merge                  one results CSV from every <out-dir>/parts/*.csv (each row keeps
                                    the ratios of its own part; GPU, driver, CUDA, git revision and
                                    timing recorded per part and required to agree), then the
                                    plots, README and docs as after a one-piece run; needs no GPU

Progress: one line per result as it finishes (a check: fa_run's row; a time: interleaved.py's or
the runner's row), led by how many are done, the time so far and an estimate of the time left.

Output: <out-dir>/results_<gpu>_<YYYYmmdd-HHMMSS>.csv (UTC), copied to <out-dir>/latest.csv.
Exit status: 0 if every stage and every available reference passed its check; 1 if any failed or
could not run (it has no time in the CSV), or a later step failed; 2 for bad options, a missing
build or parts that cannot be merged; 3 if no GPU.

Usually started by scripts/run_all.sh, which builds build/fa_run and build/libfa_capi.so first.
Decoding shapes (1 to a few query rows against a long KV cache, measured in GB/s against the read
bandwidth) have a benchmark of their own: tools/decode_bench.py (docs/benchmarking.md, Decoding).
"""

import argparse
import collections
import datetime
import glob
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import stages as stage_declarations
from cli_util import (REPO, compute_capability, git_revision, int_list, nvidia_smi_query, run_quiet,
                      shown_path, stage_runs_on)
from results_csv import (COLUMNS, REFERENCES, SERIES, attention_flops, derive_from_time, fill_reference_ratios,
                         normalize_row, number, pair_lengths, read_results_csv, shape_key, timing_of,
                         write_results_csv)

TORCH_REFERENCE = os.path.join(REPO, "tools", "torch_reference.py")
INTERLEAVED = os.path.join(REPO, "tools", "interleaved.py")
PLOT = os.path.join(REPO, "tools", "plot.py")
GEN_DOCS = os.path.join(REPO, "tools", "gen_docs.py")
DEFAULT_OUT_DIR = os.path.join(REPO, "plots", "results")  # the CSV the README and docs/ are generated from
DTYPES = ["fp16", "bf16"]
HEAD_DIMS = [64, 128]
PARTS_DIR = "parts"  # under --out-dir: the CSVs of a job run in parts, until --merge
# The series that torch_reference.py measures FA2 and cuDNN for (ALiBi has no fused reference),
# each with its option there.
REFERENCE_SERIES_OPTIONS = collections.OrderedDict(
    [("headline", "--seqs"), ("causal", "--causal-seqs"), ("any_length", "--any-length-seqs"), ("gqa", "--gqa-seqs")])
# Rounds: the inputs' seed (torch_reference.py's default, so the references see the data they see
# there) and the query rows per (batch, head) interleaved.py checks again after fa_run's check.
ROUNDS_SEED = 1
ROUNDS_CHECK_ROWS = 4


class Abort(Exception):
    """Stops the run with an exit code and a message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="tools/bench.py", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n"
               "  python3 tools/bench.py                      everything the README shows (fp16/bf16 x head_dim 64/128)\n"
               "  python3 tools/bench.py --quick              smoke run (S=1024, batch 4; README and docs left alone)\n"
               "  python3 tools/bench.py --stages ampere_07,ampere_08 --dtypes fp16 --head-dims 128\n"
               "  python3 tools/bench.py --series headline    the non-causal rows only\n"
               "  python3 tools/bench.py --part --dtypes fp16 then --part --dtypes bf16, then --merge\n"
               "  python3 tools/bench.py --dry-run            print the commands it would run (no GPU needed)\n\n"
               "Exit status: 0 all passed; 1 a result failed or did not run, or a later step failed; "
               "2 bad options, no build or parts that cannot be merged; 3 no GPU.")
    p.add_argument("--stages", default="all",
                   help="'all' or a comma-separated list of stage ids or <track>_NN, e.g. ampere_04,ampere_05_interleave "
                        "(default all)")
    p.add_argument("--dtypes", default="all", help="comma-separated fp16,bf16, or 'all' (default all)")
    p.add_argument("--head-dims", default="all", help="comma-separated 64,128, or 'all' (default all)")
    p.add_argument("--series", default="all",
                   help="'all' or a comma-separated list of %s (default all); every series but headline runs "
                        "only the stages that declare its feature" % ", ".join(SERIES))
    p.add_argument("--seqs", type=int_list, default=None,
                   help="sequence lengths of the headline, causal, gqa and alibi rows, seq_q = seq_kv "
                        "(default 1024,2048,4096,8192; --quick: 1024)")
    p.add_argument("--any-length-seqs", type=int_list, default=None,
                   help="sequence lengths of the any_length rows (default 1000,4000, compared with 1024,4096; "
                        "--quick: 1000)")
    p.add_argument("--kv-heads", type=int, default=None,
                   help="K/V heads of the gqa rows; must divide --heads (default 8: 32 query heads share 8)")
    p.add_argument("--feature-stages", choices=["all", "newest"], default="all",
                   help="which declaring stages the causal, any_length, gqa and alibi series run: all of them "
                        "(default), or only the newest of each target (sm_80, sm_90a) per feature, to save time")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 16; --quick: 4)")
    p.add_argument("--heads", type=int, default=None, help="heads (default 32)")
    p.add_argument("--reps", type=int, default=None,
                   help="timed launches per result, in rounds one per round (default 20; --quick: 5)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed launches (rounds) first (default 5; --quick: 2)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: seq 1024, batch 4, 5 reps; results and plots go to build/bench-quick and the "
                        "README and docs/ are left alone unless --out-dir/--readme say otherwise")
    p.add_argument("--part", action="store_true",
                   help="this run is one part of a job run in parts: its CSV goes to <out-dir>/parts/part_<dtypes>_"
                        "<head_dims>.csv (replacing an earlier one of the same name) and nothing else is written; "
                        "--merge makes the results CSV, plots, README and docs from the parts")
    p.add_argument("--merge", nargs="*", metavar="PART_CSV", default=None,
                   help="measure nothing: merge these part CSVs (default: every <out-dir>/parts/*.csv) into one "
                        "results CSV, then plots, README and docs as after a run; no GPU or build needed")
    p.add_argument("--out-dir", default=None, help="where the CSV goes (default plots/results)")
    p.add_argument("--plots-dir", default=None, help="where the PNGs go (default plots; --quick: the out-dir)")
    p.add_argument("--readme", default=None,
                   help="README whose tracks section tools/plot.py rewrites, with the docs/results.md beside it "
                        "(default README.md; --quick: none)")
    p.add_argument("--no-readme", action="store_true", help="do not touch any README or docs/results.md")
    p.add_argument("--no-plots", action="store_true",
                   help="no PNGs (the README's tables and docs/results.md are still rewritten)")
    p.add_argument("--no-docs", action="store_true",
                   help="do not run tools/gen_docs.py afterwards (then its --check fails if latest.csv changed)")
    p.add_argument("--no-reference", action="store_true",
                   help="skip PyTorch (reference rows say 'unavailable: skipped (--no-reference)'); times separately")
    p.add_argument("--timing", choices=["rounds", "separate"], default="rounds",
                   help="rounds (default): fa_run checks, then tools/interleaved.py times every implementation of "
                        "a shape in the same shuffled rounds; separate: each result in a series of its own, the "
                        "stages in fa_run, FA2 and cuDNN in tools/torch_reference.py (the CSVs before rounds). "
                        "Rounds fall back to separate, with a line saying why, under --no-reference, without "
                        "PyTorch or without <build-dir>/libfa_capi.so")
    p.add_argument("--build-dir", default=os.path.join(REPO, "build"),
                   help="where fa_run and libfa_capi.so were built (default build)")
    p.add_argument("--compute-capability", default=None, metavar="CC",
                   help="the GPU's compute capability, e.g. 90 or 8.6 (default: asked from nvidia-smi); decides "
                        "which stages are skipped, e.g. to see what --dry-run would run on another GPU")
    p.add_argument("--dry-run", action="store_true",
                   help="print the stages that would run or be skipped, how many results of each series, and "
                        "every command; run nothing (no GPU or build needed)")
    args = p.parse_args(argv)

    defaults = dict(seqs=[1024, 2048, 4096, 8192], any_length_seqs=[1000, 4000], batch=16, heads=32, kv_heads=8,
                    reps=20, warmup=5)
    if args.quick:
        defaults.update(seqs=[1024], any_length_seqs=[1000], batch=4, reps=5, warmup=2)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.reps < 1 or args.warmup < 0 or args.batch < 1 or args.heads < 1:
        p.error("--reps, --batch and --heads must be >= 1 and --warmup >= 0")
    if args.kv_heads < 1 or args.heads % args.kv_heads:
        p.error("--kv-heads must divide --heads (%d), got %d" % (args.heads, args.kv_heads))
    if args.part and args.merge is not None:
        p.error("--part measures one part; --merge merges parts: one or the other")

    every_series = args.series == "all"
    args.series = list(SERIES) if every_series else [s for s in args.series.split(",") if s]
    for s in args.series:
        if s not in SERIES:
            p.error("unknown series %r (%s, or all)" % (s, ", ".join(SERIES)))
    if "gqa" in args.series and args.kv_heads == args.heads:
        # Rows with as many K/V heads as query heads are the headline rows again.
        if not every_series:
            p.error("the gqa series needs --kv-heads smaller than --heads (%d)" % args.heads)
        args.series.remove("gqa")
        print("bench.py: no gqa rows: --kv-heads %d is --heads, so they would be the headline rows" % args.kv_heads)
    args.dtypes = list(DTYPES) if args.dtypes == "all" else [d for d in args.dtypes.split(",") if d]
    for d in args.dtypes:
        if d not in DTYPES:
            p.error("unknown dtype %r (fp16, bf16 or all)" % d)
    try:
        args.head_dims = list(HEAD_DIMS) if args.head_dims == "all" else int_list(args.head_dims)
    except argparse.ArgumentTypeError as e:
        p.error("--head-dims: %s" % e)
    if args.compute_capability is not None:
        args.compute_capability_value = compute_capability(args.compute_capability)
        if args.compute_capability_value is None:
            p.error("--compute-capability: expected e.g. 90 or 9.0, got %r" % args.compute_capability)

    if args.out_dir is None:
        args.out_dir = os.path.join(REPO, "build", "bench-quick") if args.quick else DEFAULT_OUT_DIR
    if args.plots_dir is None:
        args.plots_dir = args.out_dir if args.quick else os.path.join(REPO, "plots")
    if args.no_readme or args.part or (args.quick and args.readme is None):
        args.readme = None
    elif args.readme is None:
        args.readme = os.path.join(REPO, "README.md")
    args.part_name = part_name(args.dtypes, args.head_dims) if args.part else ""
    return args


def part_name(dtypes, head_dims):
    """'part_fp16_d64_d128': what a part measures, and its CSV's name."""
    return "part_" + "_".join(dtypes) + "_" + "_".join("d%d" % d for d in head_dims)


# ------------------------------------------------------------------------------------------------
# The machine and the tree


def slug(text):
    out = "".join(c if c.isalnum() else "-" for c in text.lower())
    out = "-".join(part for part in out.split("-") if part)
    if out.startswith("nvidia-"):
        out = out[len("nvidia-"):]
    return out or "unknown-gpu"


def parse_kv_line(line):
    """'# a=1; b=two' -> {'a': '1', 'b': 'two'}."""
    fields = {}
    for part in line.lstrip("#").split(";"):
        if "=" in part:
            key, value = part.split("=", 1)
            fields[key.strip()] = value.strip()
    return fields


def read_runner_csv(path):
    """(header without '# ', rows) of a CSV written by fa_run, torch_reference.py or interleaved.py
    (whose header lines are joined with '; '); the rows written before a crash are kept."""
    import csv
    header, lines = [], []
    if not os.path.exists(path):
        return "", []
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("#"):
                header.append(line[1:].strip())
            elif line.strip():
                lines.append(line)
    rows = [r for r in csv.DictReader(lines) if (r.get("seq_q") or "").isdigit() and r.get("status")]
    return "; ".join(header), rows  # a line cut short by a crash has no status and is dropped


# ------------------------------------------------------------------------------------------------
# Which stages run


def stage_catalogue(fa_run):
    """[{name, target, min_compute_capability, arch_specific, features, dtypes, head_dims}] in
    registry order: what `fa_run --list --json` says (the build's own declarations), or, without a
    build that answers it, the stages/<track>/*/stage.json declarations, which every stage's contract fills
    in with both dtypes and both head_dims."""
    out = run_quiet([fa_run, "--list", "--json"]) if os.access(fa_run, os.X_OK) else None
    if out:
        try:
            listed = json.loads(out)
            return [dict(name=s["name"], target=s.get("target", ""),
                         min_compute_capability=compute_capability(s.get("min_compute_capability", 80)),
                         arch_specific=bool(s.get("arch_specific", False)), features=list(s.get("features", [])),
                         dtypes=list(s.get("dtypes", DTYPES)), head_dims=[int(d) for d in s.get("head_dims", HEAD_DIMS)])
                    for s in listed]
        except (ValueError, KeyError, TypeError) as e:
            print("bench.py: '%s --list --json' gave no stage list (%s); reading stages/<track>/*/stage.json"
                  % (shown_path(fa_run), e), flush=True)
    return [dict(name=s.name, target=s.target, min_compute_capability=s.min_compute_capability,
                 arch_specific=s.target.endswith("a"), features=list(s.features), dtypes=list(DTYPES),
                 head_dims=list(HEAD_DIMS))
            for s in stage_declarations.all_stages()]


def forward_stages(catalogue):
    """The catalogue less the backward track: a backward stage's forward is its parent's, unchanged
    (its SASS is checked identical), and what it adds is timed by tools/fa_backward_run.cpp."""
    return [s for s in catalogue if s["name"].split("_", 1)[0] not in BACKWARD_TRACKS]


def resolve_stages(selection, catalogue):
    names = [s["name"] for s in catalogue]
    if selection == "all":
        return list(catalogue)
    chosen = []
    for item in [s.strip() for s in selection.split(",") if s.strip()]:
        matches = [s for s in names if stage_declarations.selects(item, s)]
        if not matches:
            raise Abort(2, "bench.py: no stage %r: name one by its id or <track>_NN (the stages: %s)"
                        % (item, ", ".join(names)))
        chosen += [m for m in matches if m not in chosen]
    return [s for s in catalogue if s["name"] in chosen]


def runnable(chosen, gpu_cc):
    """(stages this GPU runs, messages for those it does not); all of them when the GPU is unknown."""
    if gpu_cc is None:
        return list(chosen), []
    keep, skipped = [], []
    for s in chosen:
        if stage_runs_on(s["min_compute_capability"], s["arch_specific"], gpu_cc):
            keep.append(s)
        else:
            need = ("exactly compute capability %.1f" if s["arch_specific"] else "compute capability %.1f or newer") \
                % (s["min_compute_capability"] / 10.0)
            skipped.append("bench.py: skipping %s: built for %s, which needs %s; this GPU is %.1f"
                           % (s["name"], s["target"] or "its target", need, gpu_cc / 10.0))
    return keep, skipped


# ------------------------------------------------------------------------------------------------
# Which rows run: one fa_run process per (dtype, head_dim, series), one torch_reference.py process
# per (dtype, head_dim)

StageRun = collections.namedtuple("StageRun", "series dtype head_dim names seqs")

# Tracks whose stages --feature-stages newest passes over (see series_stages).
NOT_NEWEST_TRACKS = ("experiments", "decode", "backward")
# Tracks whose stages are not timed here at all (forward_stages).
BACKWARD_TRACKS = ("backward",)


def series_shape(series, args):
    """(causal, kv_heads, alibi) of every row of a series."""
    return series == "causal", (args.kv_heads if series == "gqa" else args.heads), series == "alibi"


def series_seqs(series, args):
    return args.any_length_seqs if series == "any_length" else args.seqs


def series_stages(series, stages, feature_stages):
    """The stages (catalogue entries, registry order) a series runs: every one for the headline;
    for the others those that declare the series' feature, or with feature_stages 'newest' only
    the last of them per target (the newest of the Ampere track and of the Hopper track). The
    experiments (not adopted), the decoding track (timed at its own shapes by
    tools/decode_bench.py) and the backward track are never the newest: they come after the main
    tracks in the registry."""
    feature = SERIES[series][0]
    if feature is None:
        return list(stages)
    declaring = [s for s in stages if feature in s["features"]]
    if feature_stages == "newest":
        main_line = [s for s in declaring if s["name"].split("_", 1)[0] not in NOT_NEWEST_TRACKS]
        newest = {s["target"]: s["name"] for s in main_line}  # registry order: the last one wins
        declaring = [s for s in declaring if s["name"] in newest.values()]
    return declaring


def plan_runs(args, to_run):
    """[StageRun] in the order they run: per dtype and head_dim, the series in SERIES order."""
    runs = []
    for dtype in args.dtypes:
        for head_dim in args.head_dims:
            fit = [s for s in to_run if dtype in s["dtypes"] and head_dim in s["head_dims"]]
            for series in SERIES:
                names = [s["name"] for s in series_stages(series, fit, args.feature_stages)] if series in args.series else []
                if names:
                    runs.append(StageRun(series, dtype, head_dim, names, series_seqs(series, args)))
    return runs


def reference_plan(args, runs):
    """{(dtype, head_dim): {series: seqs}} of the FA2/cuDNN rows: the headline whenever it is asked
    for, and each other series that has a reference where some stage runs it, in the order
    torch_reference.py measures them."""
    plan = collections.OrderedDict()
    for dtype in args.dtypes:
        for head_dim in args.head_dims:
            cases = collections.OrderedDict()
            for series in REFERENCE_SERIES_OPTIONS:
                wanted = series == "headline" and series in args.series
                if wanted or any(r.series == series and (r.dtype, r.head_dim) == (dtype, head_dim) for r in runs):
                    cases[series] = series_seqs(series, args)
            if cases:
                plan[(dtype, head_dim)] = cases
    return plan


def planned_results(args, runs, references):
    """Every result the run will produce, as progress keys (impl, series, dtype, head_dim, seq), in
    the order each process reports them."""
    keys = [(name, run.series, run.dtype, run.head_dim, seq) for run in runs for seq in run.seqs for name in run.names]
    if not args.no_reference:
        keys += [(ref, series, dtype, head_dim, seq) for (dtype, head_dim), cases in references.items()
                 for series, seqs in cases.items() for seq in seqs for ref in REFERENCES]
    return keys


# Rounds: one tools/interleaved.py process per (dtype, head_dim) and group of series. At each of its
# lengths `seqs` it times `stages` (rows of `series`), `alibi_stages` with ALiBi slopes (alibi rows)
# and, with `references`, FA2 and cuDNN; where `any_length` (one entry per length, 0 for none) names
# a length, `any_length_stages` at that length (any_length rows), with FA2 and cuDNN there too.
RoundsRun = collections.namedtuple("RoundsRun", "series dtype head_dim seqs stages alibi_stages any_length "
                                                "any_length_stages references")


def plan_rounds(args, runs):
    """[RoundsRun] in the order they run, per dtype and head_dim: the headline process, whose rounds
    also hold the alibi rows and the any-length rows of the paired lengths (pair_lengths); then, each
    in rounds of their own, the causal shapes, the any-length lengths without a partner, the gqa
    shapes and, without the headline series, the alibi rows."""
    pairs = pair_lengths(args.seqs, args.any_length_seqs)
    partner_of = {headline: length for length, headline in pairs.items() if headline is not None}
    plan = []
    for dtype in args.dtypes:
        for head_dim in args.head_dims:
            names = {r.series: r.names for r in runs if (r.dtype, r.head_dim) == (dtype, head_dim)}
            alibi, any_length = names.get("alibi", []), names.get("any_length", [])
            alone = args.any_length_seqs if any_length else []  # the any-length lengths without a partner
            if "headline" in args.series:
                beside = [partner_of.get(seq, 0) if any_length else 0 for seq in args.seqs]
                plan.append(RoundsRun("headline", dtype, head_dim, args.seqs, names.get("headline", []), alibi,
                                      beside, any_length if any(beside) else [], True))
                alone = [length for length in alone if pairs[length] is None]
                alibi = []
            for series, seqs, stages, alibi_stages, references in (
                    ("causal", args.seqs, names.get("causal"), [], True),
                    ("any_length", alone, any_length, [], True),
                    ("gqa", args.seqs, names.get("gqa"), [], True),
                    ("alibi", args.seqs, [], alibi, False)):
                if seqs and (stages or alibi_stages):
                    plan.append(RoundsRun(series, dtype, head_dim, seqs, stages, alibi_stages, [0] * len(seqs), [],
                                          references))
    return plan


def rounds_results(run):
    """Progress keys (impl, series, dtype, head_dim, seq) of every row a RoundsRun times."""
    references = list(REFERENCES) if run.references else []
    keys = []
    for seq, other in zip(run.seqs, run.any_length):
        keys += [(name, run.series, run.dtype, run.head_dim, seq) for name in run.stages + references]
        keys += [(name, "alibi", run.dtype, run.head_dim, seq) for name in run.alibi_stages]
        if other:
            keys += [(name, "any_length", run.dtype, run.head_dim, other) for name in run.any_length_stages + references]
    return keys


def checked_rounds(run, passed):
    """The RoundsRuns that time what of `run` passed fa_run's check (`passed`: progress keys): one per
    set of lengths at which the same stages passed (all of them, as a rule: one process)."""
    groups = []  # [stages, alibi_stages, any_length_stages (None: no length paired yet), [(seq, other)]]
    for seq, other in zip(run.seqs, run.any_length):
        stages = [n for n in run.stages if (n, run.series, run.dtype, run.head_dim, seq) in passed]
        alibi = [n for n in run.alibi_stages if (n, "alibi", run.dtype, run.head_dim, seq) in passed]
        beside = [n for n in run.any_length_stages if (n, "any_length", run.dtype, run.head_dim, other) in passed] \
            if other else None
        group = next((g for g in groups if g[:2] == [stages, alibi] and (None in (g[2], beside) or g[2] == beside)),
                     None)
        if group is None:
            groups.append([stages, alibi, beside, [(seq, other)]])
        else:
            group[2] = group[2] if beside is None else beside
            group[3].append((seq, other))
    return [run._replace(stages=stages, alibi_stages=alibi, any_length_stages=beside or [],
                         seqs=[seq for seq, _ in cases], any_length=[other for _, other in cases])
            for stages, alibi, beside, cases in groups if stages or alibi or beside or run.references]


def check_key(key):
    """The progress key of fa_run's check of a result that is timed in rounds."""
    return (key[0] + " (check)",) + key[1:]


# ------------------------------------------------------------------------------------------------
# Progress


def fmt_duration(seconds):
    seconds = int(round(seconds))
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, (seconds % 3600) // 60)


class Progress:
    """Counts finished results and estimates the time left.

    A result still to come takes as long as the same implementation in the same series at the same
    length took at another dtype or head_dim (scaled by head_dim); one with no such sibling yet
    takes as long per FLOP as everything so far. Early estimates are rough: the first lengths are
    the shortest."""

    def __init__(self, planned, batch, heads):
        # (impl, series, dtype, head_dim, seq) -> None, in the order the processes report them
        self.pending = collections.OrderedDict((key, None) for key in planned)
        self.total = len(self.pending)
        self.batch, self.heads = batch, heads
        self.done = {}  # key -> seconds it took
        self.started = time.monotonic()
        self.last = self.started

    def flops(self, key):
        _, series, _, head_dim, seq = key
        return attention_flops(self.batch, self.heads, seq, seq, head_dim, causal=series == "causal")

    def restart_clock(self):
        """A new process starts: the time until its first row is that row's."""
        self.last = time.monotonic()

    def finish(self, key):
        """key's series may be None (torch_reference.py's lines do not say it): then the first
        pending result that matches the rest, which is the one its process measures next."""
        now = time.monotonic()
        if key[1] is None:
            key = next((k for k in self.pending if (k[0],) + k[2:] == (key[0],) + key[2:]), key)
        if key in self.pending:
            del self.pending[key]
            self.done[key] = now - self.last
        self.last = now

    def estimate_left(self):
        if not self.done:
            return None
        per_flop = sum(self.done.values()) / sum(self.flops(k) for k in self.done)
        left = 0.0
        for key in self.pending:
            impl, series, _, head_dim, seq = key
            siblings = [secs * head_dim / k[3] for k, secs in self.done.items()
                        if (k[0], k[1], k[4]) == (impl, series, seq)]
            left += sum(siblings) / len(siblings) if siblings else per_flop * self.flops(key)
        return left

    def prefix(self):
        left = self.estimate_left()
        return "[%*d/%d %s, %s left]" % (len(str(self.total)), len(self.done), self.total,
                                         fmt_duration(time.monotonic() - self.started),
                                         "~" + fmt_duration(left) if left is not None else "?")


def result_key(line, dtypes, series):
    """(impl, series, dtype, head_dim, seq_q) of a runner's result row ('ampere_07_fast_softmax fp16 128 16 32
    1024 ...'), else None; series as given (None: the reference script's, which does not say)."""
    parts = line.split()
    if len(parts) < 6 or parts[1] not in dtypes:
        return None
    try:
        return parts[0], series, parts[1], int(parts[2]), int(parts[5])
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------------
# Running the runner and the reference


def show_command(cmd):
    """A command as the user would type it: python3 for this interpreter, paths relative to the repository."""
    shown = ["python3" if c == sys.executable else shown_path(c) if os.path.isabs(c) else c for c in cmd]
    return "$ " + " ".join(shlex.quote(c) for c in shown)


class RoundsTable:
    """Progress keys from the tables tools/interleaved.py prints, one per case after its rounds: a
    title ('fp16, head_dim 128, [16, 1024, 32, 128]...'), then a line per implementation whose second
    field is its median or '-'."""

    TITLE = re.compile(r"(fp16|bf16), head_dim (\d+), \[\d+, (\d+), ")

    def __init__(self, series):
        self.series, self.case = series, None

    def __call__(self, line):
        title = self.TITLE.match(line)
        if title:
            self.case = (title.group(1), int(title.group(2)), int(title.group(3)))
            return None
        parts = line.split()
        if self.case is None or len(parts) < 3 or (parts[1] != "-" and number(parts[1]) is None):
            return None
        impl, series, seq = rounds_impl(parts[0], self.series)
        return impl, series, self.case[0], self.case[1], seq or self.case[2]


def rounds_impl(name, series):
    """(impl, series, seq or None) of a row name of tools/interleaved.py in a process timing `series`:
    <stage>+alibi is an alibi row, <impl>@<length> an any_length row at that length, any other name
    a row of `series` at its case's length."""
    if "@" in name:
        impl, length = name.rsplit("@", 1)
        return impl, "any_length", int(length) if length.isdigit() else None
    if name.endswith("+alibi"):
        return name[:-len("+alibi")], "alibi", None
    return name, series, None


def stream(cmd, env=None, progress=None, result=None):
    """Runs cmd, echoing its output live; a line that `result` turns into a progress key is led by the
    progress. Returns (exit code, last lines)."""
    print(show_command(cmd), flush=True)
    tail = collections.deque(maxlen=12)
    if progress:
        progress.restart_clock()
    try:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1, errors="replace")
    except OSError as e:
        return 127, [str(e)]
    for line in proc.stdout:
        key = result(line) if progress else None
        if key:
            progress.finish(key)
            sys.stdout.write("%s %s" % (progress.prefix(), line))
        else:
            sys.stdout.write("  " + line)
        sys.stdout.flush()
        if line.strip():
            tail.append(line.rstrip())
    return proc.wait(), list(tail)


def fa_run_command(args, fa_run, run, csv_path):
    """The runner's command of a StageRun: check and time, or in rounds check only (--no-time)."""
    causal, kv_heads, alibi = series_shape(run.series, args)
    cmd = [fa_run, "--stage", ",".join(run.names), "--dtype", run.dtype, "--head-dim", str(run.head_dim),
           "--seq", ",".join(map(str, run.seqs)), "--batch", str(args.batch), "--heads", str(args.heads)]
    cmd += (["--causal"] if causal else []) + (["--kv-heads", str(kv_heads)] if kv_heads != args.heads else [])
    cmd += ["--alibi"] if alibi else []
    cmd += ["--no-time"] if args.timing == "rounds" else ["--warmup", str(args.warmup), "--reps", str(args.reps)]
    return cmd + ["--csv", csv_path]


def interleaved_command(args, run, csv_path):
    causal, kv_heads, _ = series_shape(run.series, args)
    cmd = [sys.executable, INTERLEAVED, "--lib", capi_library(args), "--stages", ",".join(run.stages),
           "--dtype", run.dtype, "--head-dim", str(run.head_dim), "--seqs", ",".join(map(str, run.seqs))]
    cmd += ["--alibi-stages", ",".join(run.alibi_stages)] if run.alibi_stages else []
    if any(run.any_length):
        cmd += ["--any-length", ",".join(map(str, run.any_length)),
                "--any-length-stages", ",".join(run.any_length_stages)]
        cmd += ["--any-length-references"] if run.references else []
    cmd += [] if run.references else ["--references", ""]
    cmd += (["--causal"] if causal else []) + (["--kv-heads", str(kv_heads)] if kv_heads != args.heads else [])
    return cmd + ["--batch", str(args.batch), "--heads", str(args.heads), "--warmup", str(args.warmup),
                  "--reps", str(args.reps), "--seed", str(ROUNDS_SEED), "--check-rows", str(ROUNDS_CHECK_ROWS),
                  "--csv", csv_path]


def capi_library(args):
    return os.path.join(os.path.abspath(args.build_dir), "libfa_capi.so")


def reference_command(args, dtype, head_dim, cases, csv_path):
    cmd = [sys.executable, TORCH_REFERENCE, "--dtype", dtype, "--head-dim", str(head_dim)]
    if "headline" not in cases:
        cmd.append("--no-headline")
    for series, seqs in cases.items():
        cmd += [REFERENCE_SERIES_OPTIONS[series], ",".join(map(str, seqs))]
    if "gqa" in cases:
        cmd += ["--kv-heads", str(args.kv_heads)]
    return cmd + ["--batch", str(args.batch), "--heads", str(args.heads), "--warmup", str(args.warmup),
                  "--reps", str(args.reps), "--csv", csv_path]


def label_rows(rows, series, causal, kv_heads, alibi):
    """Gives a process's rows their series and shape columns (fa_run's CSV may lack kv_heads and
    alibi: its command says them); a passed row whose own columns say otherwise is an error."""
    for row in rows:
        row["series"] = series
        for column, expected in (("causal", int(causal)), ("kv_heads", kv_heads), ("alibi", int(alibi))):
            written = row.get(column)
            if written in (None, ""):
                row[column] = str(expected)
            elif str(written).strip() != str(expected) and row.get("status") == "PASS":
                row["status"] = "ERROR: the row says %s=%s in a run with %s=%s" % (column, written, column, expected)
    return rows


def run_stages(args, fa_run, run, workdir, env, progress):
    """Rows of every (stage, seq) of one StageRun; a crash of the runner does not lose the other
    stages: the missing ones are run again one stage per process."""
    def key(line):
        found = result_key(line, args.dtypes, run.series)
        return check_key(found) if found and args.timing == "rounds" else found

    def runner(stage_list, seqs, csv_path):
        cmd = fa_run_command(args, fa_run, run._replace(names=stage_list, seqs=seqs), csv_path)
        rc, tail = stream(cmd, env, progress, key)
        if rc == 3:  # fa_run's own message above says why
            raise Abort(3, "bench.py: no usable CUDA GPU; nothing was measured.")
        if rc == 2 and run.series == "headline":
            raise Abort(2, "bench.py: fa_run rejected its options: %s" % (tail[-1] if tail else "?"))
        header, rows = read_runner_csv(csv_path)
        return rc, tail, header, rows

    tag = "%s_%s_d%d" % (run.series, run.dtype, run.head_dim)
    rc, tail, header, rows = runner(run.names, run.seqs, os.path.join(workdir, "stages_%s.csv" % tag))
    have = {(r["impl"], int(r["seq_q"])) for r in rows}
    missing = [(s, q) for q in run.seqs for s in run.names if (s, q) not in have]
    # Exit code 2 (options refused: a runner without this series' option) is not retried.
    if missing and rc not in (0, 1, 2):
        print("bench.py: fa_run exited with code %d before finishing; running the %d missing result(s) one "
              "stage per process" % (rc, len(missing)), flush=True)
        for stage in [s for s in run.names if any(m[0] == s for m in missing)]:
            seqs = [q for (s, q) in missing if s == stage]
            rc2, tail2, header2, rows2 = runner([stage], seqs, os.path.join(workdir, "retry_%s_%s.csv" % (stage, tag)))
            header = header or header2
            rows += rows2
            if rc2 not in (0, 1):
                rc, tail = rc2, tail2
        have = {(r["impl"], int(r["seq_q"])) for r in rows}
        missing = [(s, q) for q in run.seqs for s in run.names if (s, q) not in have]
    for stage, seq in missing:
        why = tail[-1] if tail else "no output"
        done = (stage, run.series, run.dtype, run.head_dim, seq)
        progress.finish(check_key(done) if args.timing == "rounds" else done)
        rows.append({"impl": stage, "dtype": run.dtype, "head_dim": run.head_dim, "batch": args.batch,
                     "heads": args.heads, "seq_q": seq, "seq_kv": seq,
                     "status": "ERROR: not run: fa_run exited with code %d (%s)" % (rc, why)})
    return header, label_rows(rows, run.series, *series_shape(run.series, args))


def run_references(args, dtype, head_dim, cases, workdir, progress):
    def expected_rows(status):
        rows = []
        for series, seqs in cases.items():
            causal, kv_heads, _ = series_shape(series, args)
            rows += [{"impl": name, "series": series, "dtype": dtype, "head_dim": head_dim, "batch": args.batch,
                      "heads": args.heads, "kv_heads": kv_heads, "causal": int(causal), "alibi": 0, "seq_q": seq,
                      "seq_kv": seq, "status": status} for seq in seqs for name in REFERENCES]
        return rows

    if args.no_reference:
        return "", expected_rows("unavailable: skipped (--no-reference)")
    csv_path = os.path.join(workdir, "reference_%s_d%d.csv" % (dtype, head_dim))
    rc, tail = stream(reference_command(args, dtype, head_dim, cases, csv_path), None, progress,
                      lambda line: result_key(line, args.dtypes, None))
    header, rows = read_runner_csv(csv_path)
    for row in rows:
        row.setdefault("series", "headline")  # a reference script without series writes headline rows only
    have = {(r["impl"], r["series"], int(r["seq_q"])) for r in rows}
    for row in expected_rows("ERROR: torch_reference.py exited with code %d (%s)" % (rc, tail[-1] if tail else "no output")):
        if (row["impl"], row["series"], row["seq_q"]) not in have:
            progress.finish((row["impl"], row["series"], dtype, head_dim, row["seq_q"]))
            rows.append(row)
    return header, rows


def run_rounds(args, run, workdir, env, progress):
    """(interleaved.py's header, {progress key: row}) of one RoundsRun (rounds_rows)."""
    tag = "%s_%s_d%d_%d" % (run.series, run.dtype, run.head_dim, run.seqs[0])
    csv_path = os.path.join(workdir, "rounds_%s.csv" % tag)
    rc, tail = stream(interleaved_command(args, run, csv_path), env, progress, RoundsTable(run.series))
    header, rows = read_runner_csv(csv_path)
    return header, rounds_rows(args, run, rows, "ERROR: not run: interleaved.py exited with code %d (%s)"
                               % (rc, tail[-1] if tail else "no output"))


def rounds_rows(args, run, rows, missing_status):
    """{progress key: row} of every result of a RoundsRun: interleaved.py's rows in bench.py's terms
    (impl and series from the name, rounds_impl; the shape columns of the series), and a row with
    `missing_status` for each result it did not write."""
    timed = {}
    for row in rows:
        impl, series, _ = rounds_impl(row["impl"], run.series)
        row = label_rows([dict(row, impl=impl)], series, *series_shape(series, args))[0]
        timed[(impl, series, run.dtype, run.head_dim, int(row["seq_q"]))] = row
    for key in rounds_results(run):
        if key not in timed:
            impl, series, dtype, head_dim, seq = key
            causal, kv_heads, alibi = series_shape(series, args)
            timed[key] = {"impl": impl, "kind": "reference" if impl in REFERENCES else "stage", "series": series,
                          "dtype": dtype, "head_dim": head_dim, "batch": args.batch, "heads": args.heads,
                          "kv_heads": kv_heads, "causal": int(causal), "alibi": int(alibi), "seq_q": seq,
                          "seq_kv": seq, "status": missing_status}
    return timed


def rounds_stage_row(check, timed):
    """A stage's row in rounds: fa_run's check (status, errors), the time of its rounds. It passes only
    if fa_run's check and interleaved.py's passed; otherwise the status names the one that did not."""
    row = dict(check, median_ms="", min_ms="", tflops="")
    for source, result in (("fa_run's check", check), ("interleaved.py's check", timed)):
        if result["status"] != "PASS":
            kind, _, why = result["status"].partition(": ")
            row["status"] = result["status"] if why.startswith("not run") else "%s: %s: %s" % (kind, source, why)
            return row
    # tflops and the ratios follow in merge(), from the rounds' statistic (derive_from_time).
    row.update(median_ms=timed["median_ms"], min_ms=timed["min_ms"])
    return row


def measure_separately(args, fa_run, runs, references, workdir, env, progress):
    """(stage rows, reference rows, fa_run's header, torch_reference.py's header): per (dtype,
    head_dim), fa_run checks and times each series' stages, then torch_reference.py the references."""
    stage_rows, reference_rows = [], []
    runner_header = reference_header = ""
    for dtype in args.dtypes:
        for head_dim in args.head_dims:
            for run in [r for r in runs if (r.dtype, r.head_dim) == (dtype, head_dim)]:
                header, rows = run_stages(args, fa_run, run, workdir, env, progress)
                runner_header = runner_header or header
                stage_rows += rows
            if (dtype, head_dim) in references:
                header, rows = run_references(args, dtype, head_dim, references[(dtype, head_dim)], workdir, progress)
                reference_header = reference_header or header
                reference_rows += rows
    return stage_rows, reference_rows, runner_header, reference_header


def measure_in_rounds(args, fa_run, runs, rounds, workdir, env, progress):
    """(stage rows, reference rows, fa_run's header, interleaved.py's header): per (dtype, head_dim),
    fa_run checks every result, then the RoundsRuns time what passed."""
    stage_rows, reference_rows = [], []
    runner_header = rounds_header = ""
    for dtype in args.dtypes:
        for head_dim in args.head_dims:
            checks = []
            for run in [r for r in runs if (r.dtype, r.head_dim) == (dtype, head_dim)]:
                header, rows = run_stages(args, fa_run, run, workdir, env, progress)
                runner_header = runner_header or header
                checks += rows
            passed = {(r["impl"], r["series"], dtype, head_dim, int(r["seq_q"])) for r in checks if r["status"] == "PASS"}
            timed = {}
            for run in [r for r in rounds if (r.dtype, r.head_dim) == (dtype, head_dim)]:
                for part in checked_rounds(run, passed):
                    header, rows = run_rounds(args, part, workdir, env, progress)
                    rounds_header = rounds_header or header
                    timed.update(rows)
                for key in rounds_results(run):
                    if key in progress.pending:  # not timed: its fa_run check failed, or the process did not get to it
                        progress.finish(key)
            unplanned = {"status": "ERROR: not run: bench.py planned no rounds for it"}
            for row in checks:
                key = (row["impl"], row["series"], dtype, head_dim, int(row["seq_q"]))
                stage_rows.append(rounds_stage_row(row, timed.get(key, unplanned)))
            reference_rows += [row for row in timed.values() if row["kind"] == "reference"]
    return stage_rows, reference_rows, runner_header, rounds_header


# ------------------------------------------------------------------------------------------------
# Merging, the table, the plots and the docs


def merge(stage_rows, reference_rows, part="", timing="separate"):
    merged = []
    for kind, rows in (("stage", stage_rows), ("reference", reference_rows)):
        for r in rows:
            row = {c: r.get(c, "") for c in COLUMNS}
            row["kind"] = kind
            row["part"] = part
            row["status"] = " ".join(str(row["status"] or "ERROR: no status").replace(",", ";").split())
            if row["status"] != "PASS":  # a result without a passed check has no time, whatever was written
                row.update(median_ms="", min_ms="", tflops="")
            row.update(pct_of_fa2="", pct_of_cudnn="")  # from the references of this run only
            merged.append(normalize_row({k: str(v) for k, v in row.items()}))
    # TFLOP/s and the ratios from the time of the timing's statistic (results_csv.STATISTIC).
    return derive_from_time(merged, timing) if timing == "rounds" else fill_reference_ratios(merged)


class MergeError(Exception):
    """Parts that cannot be one results CSV (exit status 2)."""


# Header values every part must share: one results CSV says one GPU, software and source revision.
PART_AGREE = ("gpu", "driver", "cuda", "torch", "torch_cuda", "cudnn", "flash_impl", "compute_capability", "sms",
              "cuda_driver_api", "git", "timing", "method")
# What each part records of itself in the merged CSV, on a line named after it
# ('# part_fp16_d64_d128=date=...; git=...; ...').
PART_FACTS = ("date", "git", "gpu", "driver", "cuda", "torch", "sm_clock_mhz_at_start", "sm_clock_mhz_at_end",
              "command")


def part_value(meta, key):
    """A part's header value; `timing` is 'separate' in a part written before that key existed."""
    return timing_of(meta) if key == "timing" else meta.get(key, "")


def merge_parts(paths, command):
    """(meta [(key, value)], rows) of one results CSV made of the part CSVs at `paths`, each written
    by bench.py --part. Every row keeps the ratios its own part measured. MergeError if a file is not
    a part, two parts share a name or a shape, or they disagree on a PART_AGREE value."""
    parts = []
    for path in paths:
        try:
            meta, rows = read_results_csv(path)
        except (OSError, ValueError) as e:
            raise MergeError("cannot read %s: %s" % (shown_path(path), e))
        name = meta.get("part", "")
        if not name:
            raise MergeError("%s is not a part (it has no '# part=' line): only CSVs written by bench.py --part "
                             "can be merged" % shown_path(path))
        if any(r["part"] != name for r in rows):
            raise MergeError("%s: its rows do not all belong to its part %s" % (shown_path(path), name))
        parts.append((path, meta, rows))
    if not parts:
        raise MergeError("no part CSVs to merge")
    names = [meta["part"] for _, meta, _ in parts]
    for name in set(names):
        if names.count(name) > 1:
            raise MergeError("two part CSVs are both part %s: %s" % (name, ", ".join(
                shown_path(path) for path, meta, _ in parts if meta["part"] == name)))
    for key in PART_AGREE:
        values = collections.OrderedDict((meta["part"], part_value(meta, key)) for _, meta, _ in parts)
        if len(set(values.values())) > 1:
            raise MergeError("the parts differ in %s, so they are not one run: %s" % (key, "; ".join(
                "%s: %s" % (name, value or "(none)") for name, value in values.items())))
    owner = {}
    for _, meta, rows in parts:
        for row in rows:
            key = shape_key(row)
            if owner.setdefault(key, meta["part"]) != meta["part"]:
                raise MergeError("parts %s and %s both measured %s, head_dim %s, S=%s (series %s): a shape belongs "
                                 "to one part" % (owner[key], meta["part"], row["dtype"], row["head_dim"],
                                                  row["seq_q"], row["series"]))

    parts.sort(key=lambda part: part[1].get("date", ""))
    first, last = parts[0][1], parts[-1][1]
    skipped = collections.OrderedDict()
    for _, meta, _ in parts:
        for item in [s.strip() for s in meta.get("skipped", "").split(";") if s.strip()]:
            skipped[item] = None
    meta = [(key, first.get(key, "")) for key in ("gpu", "driver", "cuda", "torch")]
    meta += [("sm_clock_mhz_at_start", first.get("sm_clock_mhz_at_start", "")),
             ("sm_clock_mhz_at_end", last.get("sm_clock_mhz_at_end", ""))]
    meta += [(key, first.get(key, "")) for key in ("sm_clock_max_mhz", "compute_capability", "sms", "cuda_driver_api",
                                                   "torch_cuda", "cudnn", "flash_impl", "date", "git")]
    meta += [("command", command), ("skipped", "; ".join(skipped)), ("timing", part_value(first, "timing")),
             ("method", first.get("method", "")), ("fa_run", first.get("fa_run", "")),
             ("torch_reference", first.get("torch_reference", "")), ("interleaved", first.get("interleaved", "")),
             ("parts", ", ".join(meta_of["part"] for _, meta_of, _ in parts))]
    for _, part_meta, _ in parts:
        meta.append((part_meta["part"],
                     "; ".join("%s=%s" % (key, part_meta.get(key, "unknown")) for key in PART_FACTS)))
    rows = [row for _, _, part_rows in parts for row in part_rows]
    if part_value(first, "timing") == "rounds":
        # Parts timed in rounds before their statistic was the minimum wrote TFLOP/s and ratios from
        # medians: both are derived again here from min_ms, within each part (results_csv.STATISTIC).
        derive_from_time(rows, "rounds")
        meta = [(key, rounds_method(value) if key == "method" else value) for key, value in meta]
    rows.sort(key=lambda r: (DTYPES.index(r["dtype"]) if r["dtype"] in DTYPES else len(DTYPES),
                             HEAD_DIMS.index(int(r["head_dim"])) if int(r["head_dim"]) in HEAD_DIMS else int(r["head_dim"])))
    return meta, rows


def print_table(rows):
    groups = collections.OrderedDict()
    for row in rows:
        key = (row["series"], row["dtype"], row["head_dim"], row["batch"], row["heads"], row["kv_heads"],
               row["causal"], row["alibi"])
        groups.setdefault(key, []).append(row)
    for (series, dtype, head_dim, batch, heads, kv_heads, causal, alibi), group in groups.items():
        seqs = sorted({int(r["seq_q"]) for r in group})
        cell = {(r["impl"], int(r["seq_q"])): r for r in group}
        impls = list(collections.OrderedDict.fromkeys(r["impl"] for r in group if r["kind"] == "stage"))
        width = max([18] + [len(i) + 2 for i in impls])
        have_fa2 = any(r["impl"] == "fa2" and r["pct_of_fa2"] for r in group)
        field, what = ("pct_of_fa2", "% of FlashAttention-2 (its time / the stage's: medians, minima in rounds)") if have_fa2 else \
            ("tflops", "TFLOP/s (no FA2 reference, so no % of FA2)")
        shape = "" if kv_heads == heads else ", kv_heads %s" % kv_heads
        print("\n%s, head_dim %s, batch %s, heads %s%s (%s): %s" % (dtype, head_dim, batch, heads, shape, series, what))
        print("%-*s" % (width, "") + "".join("%10s" % ("S=%d" % s) for s in seqs))

        def show(row, field, fmt):
            if row is None:
                return "-"
            if row["status"] != "PASS":
                return "n/a" if row["status"].startswith("unavailable") else row["status"].split(":")[0][:9]
            value = number(row[field])
            return fmt % value if value is not None else "-"

        for impl in impls:
            print("%-*s" % (width, impl) + "".join("%10s" % show(cell.get((impl, s)), field, "%.1f") for s in seqs))
        for ref, label in (("fa2", "FA2 TFLOP/s"), ("cudnn", "cuDNN TFLOP/s")):
            if any(r["impl"] == ref for r in group):
                print("%-*s" % (width, label) + "".join("%10s" % show(cell.get((ref, s)), "tflops", "%.1f") for s in seqs))


def later_steps(args, csv_path):
    """The commands after the measurement: plots and README (tools/plot.py), then docs/ (tools/gen_docs.py)
    when this run's CSV is the one they are generated from. [(what, command)]; none for a part."""
    if args.part:
        return []
    steps = []
    no_plots = args.no_plots or importlib.util.find_spec("matplotlib") is None
    if args.readme or not no_plots:
        cmd = [sys.executable, PLOT, csv_path, "--out-dir", args.plots_dir]
        cmd += ["--readme", args.readme] if args.readme else ["--no-readme"]
        steps.append(("plots and README", cmd + (["--no-plots"] if no_plots else [])))
    if not args.no_docs and os.path.abspath(args.out_dir) == DEFAULT_OUT_DIR:
        # It reads plots/results/latest.csv, as its --check does, and this run's build for the SASS sections.
        steps.append(("docs", [sys.executable, GEN_DOCS, "--build-dir", args.build_dir]))
    return steps


def results_path(args, gpu, started):
    """Where a run's CSV goes: <out-dir>/results_<gpu>_<date>.csv, or for a part <out-dir>/parts/<part>.csv."""
    if args.part:
        return os.path.join(args.out_dir, PARTS_DIR, args.part_name + ".csv")
    return os.path.join(args.out_dir, "results_%s_%s.csv" % (slug(gpu), started.strftime("%Y%m%d-%H%M%S")))


def publish(args, meta, rows, out_csv):
    """Writes the CSV (and latest.csv unless it is a part), prints the table and what failed, runs the
    later steps. Returns the exit status."""
    os.makedirs(os.path.dirname(out_csv), exist_ok=True)
    write_results_csv(out_csv, meta, rows)
    written = shown_path(out_csv)
    if not args.part:
        latest = os.path.join(args.out_dir, "latest.csv")
        shutil.copyfile(out_csv, latest)
        written += " (and %s)" % shown_path(latest)

    print_table(rows)
    print("\nbench.py: wrote %s" % written)

    exit_code = 0
    failed_stages = [r for r in rows if r["kind"] == "stage" and r["status"] != "PASS"]
    failed_refs = [r for r in rows if r["kind"] == "reference" and r["status"].split(":")[0] in ("FAIL", "ERROR")]
    unavailable = sorted({"%s (%s): %s" % (r["impl"], r["series"], r["status"]) for r in rows
                          if r["status"].startswith("unavailable")})
    for r in failed_stages + failed_refs:
        print("bench.py: %s %s %s d%s S=%s: %s" % (r["impl"], r["series"], r["dtype"], r["head_dim"], r["seq_q"],
                                                    r["status"]))
    for line in unavailable[:6]:
        print("bench.py: reference %s" % line)
    if failed_stages or failed_refs:
        print("bench.py: %d result(s) failed their check or did not run; they have no time." % (len(failed_stages) + len(failed_refs)))
        exit_code = 1
    if args.part:
        print("bench.py: this is part %s; when every part is measured: python3 tools/bench.py --merge%s"
              % (args.part_name, "" if os.path.abspath(args.out_dir) == DEFAULT_OUT_DIR
                 else " --out-dir " + shlex.quote(shown_path(args.out_dir))))

    for what, cmd in later_steps(args, out_csv):
        if "--no-plots" in cmd and not args.no_plots:
            print("bench.py: matplotlib is not installed for %s, so there are no plots (pip install matplotlib; then "
                  "python3 tools/plot.py %s)" % (sys.executable, shown_path(out_csv)))
        rc, _ = stream(cmd)
        if rc != 0:
            print("bench.py: the %s step failed (exit code %d): %s" % (what, rc, show_command(cmd)), file=sys.stderr)
            exit_code = exit_code or 1
    return exit_code


def merge_main(args, command):
    paths = args.merge or sorted(glob.glob(os.path.join(args.out_dir, PARTS_DIR, "*.csv")))
    if not paths:
        print("bench.py: no part CSVs in %s (bench.py --part writes them)" % shown_path(os.path.join(args.out_dir, PARTS_DIR)),
              file=sys.stderr)
        return 2
    try:
        meta, rows = merge_parts(paths, command)
    except MergeError as e:
        print("bench.py: cannot merge: %s; nothing was written" % e, file=sys.stderr)
        return 2
    facts = dict(meta)
    print("bench.py: merging %d part(s): %s" % (len(paths), ", ".join(shown_path(p) for p in paths)))
    try:
        started = datetime.datetime.strptime(facts.get("date", ""), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        started = datetime.datetime.now(datetime.timezone.utc)
    return publish(args, meta, rows, results_path(args, facts.get("gpu", "unknown GPU"), started))


def launch_time_estimate(args, planned, csv_path):
    """A line on the GPU time the planned launches alone would take (1 checked + warmup + reps per
    result; in rounds a stage's output is checked twice, by fa_run and by interleaved.py), from the
    medians of an earlier run's CSV; what that CSV lacks is counted, not guessed."""
    if not os.path.exists(csv_path):
        return "bench.py: no %s to estimate the launch time from" % shown_path(csv_path)
    try:
        _, rows = read_results_csv(csv_path)
    except (OSError, ValueError) as e:
        return "bench.py: cannot read %s to estimate the launch time (%s)" % (shown_path(csv_path), e)
    median_ms = {(r["impl"], r["series"], r["dtype"], int(r["head_dim"]), int(r["seq_q"])): number(r["median_ms"])
                 for r in rows if r["status"] == "PASS" and int(r["batch"]) == args.batch and int(r["heads"]) == args.heads}
    known = [key for key in planned if median_ms.get(key)]
    rounds = args.timing == "rounds"

    def launches(key):  # in rounds, interleaved.py checks each stage's output once more
        return 1 + args.warmup + args.reps + (1 if rounds and key[0] not in REFERENCES else 0)
    seconds = sum(median_ms[key] * launches(key) for key in known) / 1000.0
    counted = ("1 checked by fa_run and 1 by interleaved.py + %d warm-up + %d timed rounds per stage result, "
               "1 checked + the rounds per reference" if rounds else "1 checked + %d warm-up + %d timed per result")
    return ("bench.py: the launches alone (%s) take ~%s of GPU time for the %d of %d results that %s has a median "
            "for; each result's check, each shape's data and fp64 reference and each process's start come on top "
            "(docs/benchmarking.md, Run length)"
            % (counted % (args.warmup, args.reps), fmt_duration(seconds), len(known), len(planned),
               shown_path(csv_path)))


def rounds_unavailable(args):
    """Why this machine cannot time in rounds (None: it can): interleaved.py needs PyTorch and the
    stages' C interface."""
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not importable for %s" % sys.executable
    if not os.path.exists(capi_library(args)):
        return "%s is missing (cmake --build %s --target fa_capi)" % (shown_path(capi_library(args)),
                                                                   shown_path(args.build_dir))
    return None


def choose_timing(args):
    """Falls back from rounds to separate (args.timing), with a line saying why, where rounds cannot
    run; a dry run only says what a real run on this machine would do."""
    if args.timing != "rounds":
        return
    why = "--no-reference (the rounds time FA2 and cuDNN beside the stages)" if args.no_reference \
        else rounds_unavailable(args)
    if why is None:
        return
    if args.dry_run and not args.no_reference:
        print("bench.py: the commands below time in rounds; a real run on this machine would time separately "
              "instead: %s" % why, flush=True)
        return
    print("bench.py: timing each result in a series of its own (--timing separate), not in rounds: %s" % why,
          flush=True)
    args.timing = "separate"


def derived_text(statistic):
    """How the CSV's derived columns follow from its times (`statistic`: 'median' or 'min')."""
    return ("tflops = 4*batch*heads*seq_q*seq_kv*head_dim / %s (causal rows: half of that at seq_q = "
            "seq_kv); pct_of_fa2 (pct_of_cudnn) = 100 * FA2's (cuDNN's) %s / %s, same shape and "
            "series options (is_causal, enable_gqa)" % (statistic, statistic, statistic))


def rounds_method(method):
    """A rounds part's method with its derived columns from the minimum (a part written when they
    came from the median says so; merge_parts derives them again)."""
    return method.replace(derived_text("median"), derived_text("min"))


def method_text(args):
    """The CSV's `method`: how its rows were checked and timed."""
    derived = derived_text("median" if args.timing == "separate" else "min")
    if args.timing == "separate":
        return ("each result checked against fp64 attention first (no time if it fails); then %d warm-up "
                "and %d timed launches, each between its own CUDA events; median_ms/min_ms over those; "
                % (args.warmup, args.reps)) + derived
    shared = []
    if "alibi" in args.series and "headline" in args.series:
        shared.append("the alibi rows")
    if "any_length" in args.series and "headline" in args.series:
        pairs = pair_lengths(args.seqs, args.any_length_seqs)
        shared.append("the any_length rows, with FA2 and cuDNN at their length (%s)" % ", ".join(
            "S = %d beside %d" % (length, headline) if headline else "S = %d in rounds of its own" % length
            for length, headline in pairs.items()))
    return ("each stage checked first by fa_run against fp64 attention (common/checker.h: every output element "
            "written, every row or sampled rows; no time if it fails); then tools/interleaved.py, one process per "
            "dtype, head_dim and series (%s), per shape %d warm-up and %d timed rounds, every implementation of the "
            "shape launched once per round in an order shuffled afresh each round, each launch between its own "
            "CUDA events, each output checked again first on %d sampled rows per (batch, head) (no time if it "
            "fails); median_ms/min_ms over the timed rounds; "
            % ("the headline rounds also holding %s" % " and ".join(shared) if shared else "no series sharing rounds",
               args.warmup, args.reps, ROUNDS_CHECK_ROWS)) + derived + ", from the same rounds"


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    command = " ".join(shlex.quote(a) for a in [os.path.relpath(os.path.abspath(sys.argv[0]), REPO)]
                       + (sys.argv[1:] if argv is None else list(argv)))
    if args.merge is not None:
        if args.dry_run:
            paths = args.merge or sorted(glob.glob(os.path.join(args.out_dir, PARTS_DIR, "*.csv")))
            print("bench.py: dry run: would merge %s" % (", ".join(shown_path(p) for p in paths) or "nothing (no parts)"))
            return 0
        return merge_main(args, command)
    fa_run = os.path.join(os.path.abspath(args.build_dir), "fa_run")
    if not args.dry_run and not os.access(fa_run, os.X_OK):
        print("bench.py: %s not found. Build it first:\n  cmake -S . -B build && cmake --build build --target fa_run "
              "fa_capi\nor run everything with: bash scripts/run_all.sh" % shown_path(fa_run), file=sys.stderr)
        return 2
    try:
        chosen = resolve_stages(args.stages, forward_stages(stage_catalogue(fa_run)))
    except Abort as e:
        print(e, file=sys.stderr)
        return e.code

    smi_start = nvidia_smi_query()
    gpu_cc = getattr(args, "compute_capability_value", None) or compute_capability(smi_start.get("compute_cap", ""))
    to_run, skipped = runnable(chosen, gpu_cc)
    for message in skipped:
        print(message, flush=True)
    if gpu_cc is None:
        print("bench.py: the GPU's compute capability is unknown (no nvidia-smi, or it does not say); every "
              "stage is handed to fa_run, which refuses those this GPU cannot run", flush=True)
    choose_timing(args)
    rounds = args.timing == "rounds"
    runs = plan_runs(args, to_run)
    if rounds:
        timed_runs, references = plan_rounds(args, runs), {}
        planned = [key for run in timed_runs for key in rounds_results(run)]
        checks = [check_key(key) for key in planned_results(args, runs, {})]
    else:
        timed_runs, references = [], reference_plan(args, runs)
        planned, checks = planned_results(args, runs, references), []
    print("bench.py: stages %s; dtypes %s; head_dims %s; seqs %s; batch %d; heads %d; %d warm-up + %d timed "
          "%s; %d results to measure%s"
          % (",".join(s["name"] for s in to_run) or "none", ",".join(args.dtypes), ",".join(map(str, args.head_dims)),
             ",".join(map(str, args.seqs)), args.batch, args.heads, args.warmup, args.reps,
             "rounds" if rounds else "launches", len(planned),
             ", each stage's checked by fa_run first" if rounds else ""), flush=True)
    per_series = collections.Counter(key[1] for key in planned)
    for series in args.series:
        names = list(collections.OrderedDict.fromkeys(n for run in runs if run.series == series for n in run.names))
        feature = SERIES[series][0]
        print("bench.py: series %s: %d results%s" % (
            series, per_series[series],
            "" if feature is None else "; stages declaring %s%s: %s" % (
                feature, " (the newest per target)" if args.feature_stages == "newest" else "",
                ", ".join(names) or "none")), flush=True)

    if args.dry_run:
        print(launch_time_estimate(args, planned, os.path.join(DEFAULT_OUT_DIR, "latest.csv")), flush=True)
        placeholder = os.path.join(tempfile.gettempdir(), "fa_bench_XXXX")
        print("bench.py: dry run, nothing is run; the commands (timing: %s):" % args.timing)
        for dtype in args.dtypes:
            for head_dim in args.head_dims:
                for run in [r for r in runs if (r.dtype, r.head_dim) == (dtype, head_dim)]:
                    csv_path = os.path.join(placeholder, "stages_%s_%s_d%d.csv" % (run.series, dtype, head_dim))
                    print(show_command(fa_run_command(args, fa_run, run, csv_path)))
                for run in [r for r in timed_runs if (r.dtype, r.head_dim) == (dtype, head_dim)]:
                    csv_path = os.path.join(placeholder, "rounds_%s_%s_d%d.csv" % (run.series, dtype, head_dim))
                    print(show_command(interleaved_command(args, run, csv_path)))
                if not args.no_reference and (dtype, head_dim) in references:
                    csv_path = os.path.join(placeholder, "reference_%s_d%d.csv" % (dtype, head_dim))
                    print(show_command(reference_command(args, dtype, head_dim, references[(dtype, head_dim)], csv_path)))
        out_csv = (os.path.join(args.out_dir, PARTS_DIR, args.part_name + ".csv") if args.part
                   else os.path.join(args.out_dir, "results_<gpu>_<date>.csv"))
        print("then: write %s%s" % (shown_path(out_csv), "" if args.part else
                                    " and %s" % shown_path(os.path.join(args.out_dir, "latest.csv"))))
        for what, cmd in later_steps(args, out_csv):
            print(show_command(cmd))
        return 0

    started = datetime.datetime.now(datetime.timezone.utc)
    git = git_revision()
    env = dict(os.environ, FA_GIT_REV=git)
    if not args.no_reference and importlib.util.find_spec("torch") is None:
        print("bench.py: PyTorch is not installed for %s: the reference rows (FA2, cuDNN) will say "
              "'torch unavailable' and there is no %% of FA2." % sys.executable, flush=True)

    progress = Progress(checks + planned, args.batch, args.heads)
    with tempfile.TemporaryDirectory(prefix="fa_bench_") as workdir:
        try:
            if rounds:
                stage_rows, reference_rows, runner_header, reference_header = measure_in_rounds(
                    args, fa_run, runs, timed_runs, workdir, env, progress)
            else:
                stage_rows, reference_rows, runner_header, reference_header = measure_separately(
                    args, fa_run, runs, references, workdir, env, progress)
        except Abort as e:
            print(e, file=sys.stderr)
            return e.code
    smi_end = nvidia_smi_query()
    print("bench.py: measured %d results in %s" % (len(planned), fmt_duration(time.monotonic() - progress.started)),
          flush=True)

    # reference_header: torch_reference.py's, or in rounds interleaved.py's (both name the PyTorch)
    runner_meta, torch_meta = parse_kv_line(runner_header), parse_kv_line(reference_header)
    gpu = smi_start.get("name") or runner_meta.get("gpu") or torch_meta.get("gpu") or "unknown GPU"
    meta = [
        ("gpu", gpu),
        ("driver", smi_start.get("driver", "unknown (no nvidia-smi)")),
        ("cuda", runner_meta.get("cuda_runtime", "unknown")),
        ("torch", torch_meta.get("torch", "unavailable" if not args.no_reference else "not run (--no-reference)")),
        ("sm_clock_mhz_at_start", smi_start.get("sm_clock_mhz", "unknown")),
        ("sm_clock_mhz_at_end", smi_end.get("sm_clock_mhz", "unknown")),
        ("sm_clock_max_mhz", smi_start.get("max_sm_clock_mhz", runner_meta.get("sm_clock_max_mhz", "unknown"))),
        ("compute_capability", runner_meta.get("sm", "unknown")),
        ("sms", runner_meta.get("sms", "unknown")),
        ("cuda_driver_api", runner_meta.get("cuda_driver", "unknown")),
        ("torch_cuda", torch_meta.get("torch_cuda", "")),
        ("cudnn", torch_meta.get("cudnn", "")),
        ("flash_impl", torch_meta.get("flash_impl", "")),
        ("date", started.strftime("%Y-%m-%dT%H:%M:%SZ")),
        ("git", git),
        ("command", command),
        ("skipped", "; ".join(m.replace("bench.py: skipping ", "") for m in skipped)),
        ("timing", args.timing),
        ("method", method_text(args)),
        ("fa_run", runner_header or "none"),
        ("interleaved" if rounds else "torch_reference", reference_header or "none"),
        ("part", args.part_name),
    ]
    rows = merge(stage_rows, reference_rows, args.part_name, args.timing)
    # One block per (dtype, head_dim): per series, stages in registry order, then the references; seq ascending.
    order = {name: i for i, name in enumerate([s["name"] for s in to_run] + list(REFERENCES))}
    series_order = list(SERIES)
    rows.sort(key=lambda r: (args.dtypes.index(r["dtype"]), args.head_dims.index(int(r["head_dim"])),
                             series_order.index(r["series"]), r["kind"] != "stage", order.get(r["impl"], len(order)),
                             int(r["seq_q"])))
    return publish(args, meta, rows, results_path(args, gpu, started))


if __name__ == "__main__":
    sys.exit(main())
