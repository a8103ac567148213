#!/usr/bin/env python3
"""The main benchmark: every stage against PyTorch's FlashAttention-2 and cuDNN, in one CSV.

For each (dtype, head_dim) it runs the C++ runner (build/fa_run: check against fp64, then time)
on every sequence length, with the stages that declare that dtype and head_dim and that this GPU
can run (an sm_90a stage is skipped, with a message, on any GPU but compute capability 9.0); then
tools/torch_reference.py (a separate process, so nothing here imports torch) on the same shapes.
It merges both into one CSV with % of FA2 and % of cuDNN per row, prints a compact table, renders
the plots and the README's results (tools/plot.py) and, when it wrote plots/results/latest.csv,
refreshes the generated sections of docs/ (tools/gen_docs.py), so that every check of the
generated text passes after the run.

Progress: one line per result as it finishes (the runner's own row), led by how many are done,
the time so far and an estimate of the time left.

Output: <out-dir>/results_<gpu>_<YYYYmmdd-HHMMSS>.csv (UTC), copied to <out-dir>/latest.csv.
Exit status: 0 if every stage and every available reference passed its check; 1 if any failed or
could not run (it has no time in the CSV), or a later step failed; 2 for bad options or a missing
build; 3 if no GPU.

Usually started by scripts/run_all.sh, which builds build/fa_run first.
"""

import argparse
import collections
import datetime
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import stages as stage_declarations
from cli_util import REPO, compute_capability, int_list, shown_path, stage_runs_on
from results_csv import COLUMNS, REFERENCES, fill_reference_ratios, normalize_row, number, write_results_csv

TORCH_REFERENCE = os.path.join(REPO, "tools", "torch_reference.py")
PLOT = os.path.join(REPO, "tools", "plot.py")
GEN_DOCS = os.path.join(REPO, "tools", "gen_docs.py")
DEFAULT_OUT_DIR = os.path.join(REPO, "plots", "results")  # the CSV the README and docs/ are generated from
DTYPES = ["fp16", "bf16"]
HEAD_DIMS = [64, 128]


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
               "  python3 tools/bench.py --stages 07,08 --dtypes fp16 --head-dims 128\n"
               "  python3 tools/bench.py --dry-run            print the commands it would run (no GPU needed)\n\n"
               "Exit status: 0 all passed; 1 a result failed or did not run, or a later step failed; "
               "2 bad options or no build; 3 no GPU.")
    p.add_argument("--stages", default="all",
                   help="'all' or a comma-separated list of stage names or numbers, e.g. 04,05_interleave (default all)")
    p.add_argument("--dtypes", default="all", help="comma-separated fp16,bf16, or 'all' (default all)")
    p.add_argument("--head-dims", default="all", help="comma-separated 64,128, or 'all' (default all)")
    p.add_argument("--seqs", type=int_list, default=None,
                   help="sequence lengths, seq_q = seq_kv (default 1024,2048,4096,8192; --quick: 1024)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 16; --quick: 4)")
    p.add_argument("--heads", type=int, default=None, help="heads (default 32)")
    p.add_argument("--reps", type=int, default=None, help="timed launches per result (default 20; --quick: 5)")
    p.add_argument("--warmup", type=int, default=None, help="untimed launches first (default 5; --quick: 2)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: seq 1024, batch 4, 5 reps; results and plots go to build/bench-quick and the "
                        "README and docs/ are left alone unless --out-dir/--readme say otherwise")
    p.add_argument("--out-dir", default=None, help="where the CSV goes (default plots/results)")
    p.add_argument("--plots-dir", default=None, help="where the PNGs go (default plots; --quick: the out-dir)")
    p.add_argument("--readme", default=None,
                   help="README whose results sections tools/plot.py rewrites (default README.md; --quick: none)")
    p.add_argument("--no-readme", action="store_true", help="do not touch any README")
    p.add_argument("--no-plots", action="store_true", help="no PNGs (the README's tables are still rewritten)")
    p.add_argument("--no-docs", action="store_true",
                   help="do not run tools/gen_docs.py afterwards (then its --check fails if latest.csv changed)")
    p.add_argument("--no-reference", action="store_true",
                   help="skip PyTorch (reference rows say 'unavailable: skipped (--no-reference)')")
    p.add_argument("--build-dir", default=os.path.join(REPO, "build"), help="where fa_run was built (default build)")
    p.add_argument("--compute-capability", default=None, metavar="CC",
                   help="the GPU's compute capability, e.g. 90 or 8.6 (default: asked from nvidia-smi); decides "
                        "which stages are skipped, e.g. to see what --dry-run would run on another GPU")
    p.add_argument("--dry-run", action="store_true",
                   help="print the stages that would run or be skipped and every command, run nothing (no GPU or "
                        "build needed)")
    args = p.parse_args(argv)

    defaults = dict(seqs=[1024, 2048, 4096, 8192], batch=16, heads=32, reps=20, warmup=5)
    if args.quick:
        defaults.update(seqs=[1024], batch=4, reps=5, warmup=2)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.reps < 1 or args.warmup < 0 or args.batch < 1 or args.heads < 1:
        p.error("--reps, --batch and --heads must be >= 1 and --warmup >= 0")

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
    if args.no_readme or (args.quick and args.readme is None):
        args.readme = None
    elif args.readme is None:
        args.readme = os.path.join(REPO, "README.md")
    return args


# ------------------------------------------------------------------------------------------------
# The machine and the tree


def run_quiet(cmd, cwd=REPO):
    """stdout of a command, or None if it cannot run or fails."""
    try:
        done = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_revision():
    # A copy of the tree without .git (e.g. one shipped to a remote GPU machine) can say which
    # revision it is through FA_GIT_REV.
    if os.environ.get("FA_GIT_REV"):
        return os.environ["FA_GIT_REV"]
    rev = run_quiet(["git", "rev-parse", "--short", "HEAD"])
    if rev is None:
        return "unknown"
    rev = rev.strip()
    dirty = run_quiet(["git", "status", "--porcelain", "--untracked-files=no"])
    return rev + ("-dirty" if dirty else "")


def nvidia_smi_query():
    """{'sm_clock_mhz', 'max_sm_clock_mhz', 'driver', 'compute_cap', 'name'} of the GPU the runner
    will use (the first one CUDA_VISIBLE_DEVICES names, else the first one); {} without nvidia-smi."""
    fields = ["sm_clock_mhz", "max_sm_clock_mhz", "driver", "compute_cap", "name"]
    base = ["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,driver_version,compute_cap,name",
            "--format=csv,noheader,nounits"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    out = (run_quiet(base + ["-i", visible]) if visible else None) or run_quiet(base)
    if not out or not out.strip():
        return {}
    parts = [x.strip() for x in out.strip().splitlines()[0].split(",")]
    if len(parts) < len(fields):
        return {}
    return dict(zip(fields[:-1], parts[:len(fields) - 1]), name=",".join(parts[len(fields) - 1:]))


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
    """(header line without '# ', rows) of a CSV written by fa_run or torch_reference.py; the rows
    written before a crash are kept."""
    import csv
    header, lines = "", []
    if not os.path.exists(path):
        return header, []
    with open(path, newline="") as f:
        for line in f:
            if line.startswith("#"):
                header = header or line[1:].strip()
            elif line.strip():
                lines.append(line)
    rows = [r for r in csv.DictReader(lines) if (r.get("seq_q") or "").isdigit() and r.get("status")]
    return header, rows  # a line cut short by a crash has no status and is dropped


# ------------------------------------------------------------------------------------------------
# Which stages run


def stage_catalogue(fa_run):
    """[{name, target, min_compute_capability, arch_specific, features, dtypes, head_dims}] in
    registry order: what `fa_run --list --json` says (the build's own declarations), or, without a
    build that answers it, the stages/*/stage.json declarations, which every stage's contract fills
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
            print("bench.py: '%s --list --json' gave no stage list (%s); reading stages/*/stage.json"
                  % (shown_path(fa_run), e), flush=True)
    return [dict(name=s.name, target=s.target, min_compute_capability=s.min_compute_capability,
                 arch_specific=s.target.endswith("a"), features=list(s.features), dtypes=list(DTYPES),
                 head_dims=list(HEAD_DIMS))
            for s in stage_declarations.all_stages()]


def resolve_stages(selection, catalogue):
    names = [s["name"] for s in catalogue]
    if selection == "all":
        return list(catalogue)
    chosen = []
    for item in [s.strip() for s in selection.split(",") if s.strip()]:
        matches = [s for s in names if s == item or (item.isdigit() and s.split("_")[0] == item.zfill(2))]
        if not matches:
            raise Abort(2, "bench.py: no stage %r (the stages: %s)" % (item, ", ".join(names)))
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
# Progress


def attention_flops(batch, heads, seq_q, seq_kv, head_dim):
    return 4.0 * batch * heads * seq_q * seq_kv * head_dim


def fmt_duration(seconds):
    seconds = int(round(seconds))
    if seconds < 60:
        return "%ds" % seconds
    if seconds < 3600:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, (seconds % 3600) // 60)


class Progress:
    """Counts finished results and estimates the time left.

    A result still to come takes as long as the same implementation at the same length took at
    another dtype or head_dim (scaled by head_dim); one with no such sibling yet takes as long per
    FLOP as everything so far. Early estimates are rough: the first lengths are the shortest."""

    def __init__(self, planned, batch, heads):
        self.pending = collections.OrderedDict((key, None) for key in planned)  # (impl, dtype, head_dim, seq)
        self.total = len(self.pending)
        self.batch, self.heads = batch, heads
        self.done = {}  # key -> seconds it took
        self.started = time.monotonic()
        self.last = self.started

    def flops(self, key):
        _, _, head_dim, seq = key
        return attention_flops(self.batch, self.heads, seq, seq, head_dim)

    def restart_clock(self):
        """A new process starts: the time until its first row is that row's."""
        self.last = time.monotonic()

    def finish(self, key):
        now = time.monotonic()
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
            impl, _, head_dim, seq = key
            siblings = [secs * head_dim / k[2] for k, secs in self.done.items() if k[0] == impl and k[3] == seq]
            left += sum(siblings) / len(siblings) if siblings else per_flop * self.flops(key)
        return left

    def prefix(self):
        left = self.estimate_left()
        return "[%*d/%d %s, %s left]" % (len(str(self.total)), len(self.done), self.total,
                                         fmt_duration(time.monotonic() - self.started),
                                         "~" + fmt_duration(left) if left is not None else "?")


def result_key(line, dtypes):
    """(impl, dtype, head_dim, seq_q) of a runner's result row ('07_fast_softmax fp16 128 16 32 1024 ...'), else None."""
    parts = line.split()
    if len(parts) < 6 or parts[1] not in dtypes:
        return None
    try:
        return parts[0], parts[1], int(parts[2]), int(parts[5])
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------------
# Running the runner and the reference


def show_command(cmd):
    """A command as the user would type it: python3 for this interpreter, paths relative to the repository."""
    shown = ["python3" if c == sys.executable else shown_path(c) if os.path.isabs(c) else c for c in cmd]
    return "$ " + " ".join(shlex.quote(c) for c in shown)


def stream(cmd, env=None, progress=None, dtypes=()):
    """Runs cmd, echoing its output live; a result row is led by the progress. Returns (exit code,
    last lines)."""
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
        key = result_key(line, dtypes) if progress else None
        if key:
            progress.finish(key)
            sys.stdout.write("%s %s" % (progress.prefix(), line))
        else:
            sys.stdout.write("  " + line)
        sys.stdout.flush()
        if line.strip():
            tail.append(line.rstrip())
    return proc.wait(), list(tail)


def fa_run_command(args, fa_run, names, dtype, head_dim, seqs, csv_path):
    return [fa_run, "--stage", ",".join(names), "--dtype", dtype, "--head-dim", str(head_dim),
            "--seq", ",".join(map(str, seqs)), "--batch", str(args.batch), "--heads", str(args.heads),
            "--warmup", str(args.warmup), "--reps", str(args.reps), "--csv", csv_path]


def reference_command(args, dtype, head_dim, csv_path):
    return [sys.executable, TORCH_REFERENCE, "--dtype", dtype, "--head-dim", str(head_dim),
            "--seqs", ",".join(map(str, args.seqs)), "--batch", str(args.batch), "--heads", str(args.heads),
            "--warmup", str(args.warmup), "--reps", str(args.reps), "--csv", csv_path]


def run_stages(args, fa_run, names, dtype, head_dim, workdir, env, progress):
    """Rows of every (stage, seq) for one dtype and head_dim; a crash of the runner does not lose the
    other stages: the missing ones are run again one stage per process."""
    def runner(stage_list, seqs, csv_path):
        rc, tail = stream(fa_run_command(args, fa_run, stage_list, dtype, head_dim, seqs, csv_path), env,
                          progress, args.dtypes)
        if rc == 3:  # fa_run's own message above says why
            raise Abort(3, "bench.py: no usable CUDA GPU; nothing was measured.")
        if rc == 2:
            raise Abort(2, "bench.py: fa_run rejected its options: %s" % (tail[-1] if tail else "?"))
        header, rows = read_runner_csv(csv_path)
        return rc, tail, header, rows

    csv_path = os.path.join(workdir, "stages_%s_d%d.csv" % (dtype, head_dim))
    rc, tail, header, rows = runner(names, args.seqs, csv_path)
    have = {(r["impl"], int(r["seq_q"])) for r in rows}
    missing = [(s, q) for q in args.seqs for s in names if (s, q) not in have]
    if missing and rc not in (0, 1):
        print("bench.py: fa_run exited with code %d before finishing; running the %d missing result(s) one "
              "stage per process" % (rc, len(missing)), flush=True)
        for stage in [s for s in names if any(m[0] == s for m in missing)]:
            seqs = [q for (s, q) in missing if s == stage]
            retry_path = os.path.join(workdir, "retry_%s_%s_d%d.csv" % (stage, dtype, head_dim))
            rc2, tail2, header2, rows2 = runner([stage], seqs, retry_path)
            header = header or header2
            rows += rows2
            if rc2 not in (0, 1):
                rc, tail = rc2, tail2
        have = {(r["impl"], int(r["seq_q"])) for r in rows}
        missing = [(s, q) for q in args.seqs for s in names if (s, q) not in have]
    for stage, seq in missing:
        why = tail[-1] if tail else "no output"
        progress.finish((stage, dtype, head_dim, seq))
        rows.append({"impl": stage, "dtype": dtype, "head_dim": head_dim, "batch": args.batch, "heads": args.heads,
                     "seq_q": seq, "seq_kv": seq,
                     "status": "ERROR: not run: fa_run exited with code %d (%s)" % (rc, why)})
    return header, rows


def run_references(args, dtype, head_dim, workdir, progress):
    def unavailable(status):
        return [{"impl": name, "dtype": dtype, "head_dim": head_dim, "batch": args.batch, "heads": args.heads,
                 "seq_q": seq, "seq_kv": seq, "status": status} for seq in args.seqs for name in REFERENCES]

    if args.no_reference:
        return "", unavailable("unavailable: skipped (--no-reference)")
    csv_path = os.path.join(workdir, "reference_%s_d%d.csv" % (dtype, head_dim))
    rc, tail = stream(reference_command(args, dtype, head_dim, csv_path), None, progress, args.dtypes)
    header, rows = read_runner_csv(csv_path)
    have = {(r["impl"], int(r["seq_q"])) for r in rows}
    for row in unavailable("ERROR: torch_reference.py exited with code %d (%s)" % (rc, tail[-1] if tail else "no output")):
        if (row["impl"], row["seq_q"]) not in have:
            progress.finish((row["impl"], dtype, head_dim, row["seq_q"]))
            rows.append(row)
    return header, rows


# ------------------------------------------------------------------------------------------------
# Merging, the table, the plots and the docs


def merge(stage_rows, reference_rows):
    merged = []
    for kind, rows in (("stage", stage_rows), ("reference", reference_rows)):
        for r in rows:
            row = {c: r.get(c, "") for c in COLUMNS}
            row["kind"] = kind
            row["status"] = " ".join(str(row["status"] or "ERROR: no status").replace(",", ";").split())
            if row["status"] != "PASS":  # a result without a passed check has no time, whatever was written
                row.update(median_ms="", min_ms="", tflops="")
            row.update(pct_of_fa2="", pct_of_cudnn="")  # from the references of this run only
            merged.append(normalize_row({k: str(v) for k, v in row.items()}))
    return fill_reference_ratios(merged)


def print_table(rows, seqs):
    groups = collections.OrderedDict()
    for row in rows:
        groups.setdefault((row["dtype"], row["head_dim"], row["batch"], row["heads"]), []).append(row)
    for (dtype, head_dim, batch, heads), group in groups.items():
        cell = {(r["impl"], int(r["seq_q"])): r for r in group}
        impls = list(collections.OrderedDict.fromkeys(r["impl"] for r in group if r["kind"] == "stage"))
        width = max([18] + [len(i) + 2 for i in impls])
        have_fa2 = any(r["impl"] == "fa2" and r["pct_of_fa2"] for r in group)
        field, what = ("pct_of_fa2", "% of FlashAttention-2 (its median time / the stage's)") if have_fa2 else \
            ("tflops", "TFLOP/s (no FA2 reference, so no % of FA2)")
        print("\n%s, head_dim %s, batch %s, heads %s: %s" % (dtype, head_dim, batch, heads, what))
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
            print("%-*s" % (width, label) + "".join("%10s" % show(cell.get((ref, s)), "tflops", "%.1f") for s in seqs))


def later_steps(args, csv_path):
    """The commands after the measurement: plots and README (tools/plot.py), then docs/ (tools/gen_docs.py)
    when this run's CSV is the one they are generated from. [(what, command)]."""
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


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    fa_run = os.path.join(os.path.abspath(args.build_dir), "fa_run")
    if not args.dry_run and not os.access(fa_run, os.X_OK):
        print("bench.py: %s not found. Build it first:\n  cmake -S . -B build && cmake --build build --target fa_run\n"
              "or run everything with: bash scripts/run_all.sh" % shown_path(fa_run), file=sys.stderr)
        return 2
    try:
        chosen = resolve_stages(args.stages, stage_catalogue(fa_run))
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
    # Per (dtype, head_dim): the stages that declare it.
    plan = [(dtype, head_dim, [s["name"] for s in to_run if dtype in s["dtypes"] and head_dim in s["head_dims"]])
            for dtype in args.dtypes for head_dim in args.head_dims]
    planned = [(name, dtype, head_dim, seq) for dtype, head_dim, names in plan for seq in args.seqs for name in names]
    if not args.no_reference:
        planned += [(ref, dtype, head_dim, seq) for dtype, head_dim, _ in plan for seq in args.seqs for ref in REFERENCES]
    print("bench.py: stages %s; dtypes %s; head_dims %s; seqs %s; batch %d; heads %d; %d warm-up + %d timed "
          "launches; %d results to measure"
          % (",".join(s["name"] for s in to_run) or "none", ",".join(args.dtypes), ",".join(map(str, args.head_dims)),
             ",".join(map(str, args.seqs)), args.batch, args.heads, args.warmup, args.reps, len(planned)), flush=True)

    if args.dry_run:
        placeholder = os.path.join(tempfile.gettempdir(), "fa_bench_XXXX")
        print("bench.py: dry run, nothing is run; the commands:")
        for dtype, head_dim, names in plan:
            if names:
                print(show_command(fa_run_command(args, fa_run, names, dtype, head_dim, args.seqs,
                                                  os.path.join(placeholder, "stages_%s_d%d.csv" % (dtype, head_dim)))))
            if not args.no_reference:
                print(show_command(reference_command(args, dtype, head_dim,
                                                     os.path.join(placeholder, "reference_%s_d%d.csv" % (dtype, head_dim)))))
        out_csv = os.path.join(args.out_dir, "results_<gpu>_<date>.csv")
        print("then: write %s and %s" % (shown_path(out_csv), shown_path(os.path.join(args.out_dir, "latest.csv"))))
        for what, cmd in later_steps(args, out_csv):
            print(show_command(cmd))
        return 0

    started = datetime.datetime.now(datetime.timezone.utc)
    git = git_revision()
    env = dict(os.environ, FA_GIT_REV=git)
    command = " ".join(shlex.quote(a) for a in [os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:])
    if not args.no_reference and importlib.util.find_spec("torch") is None:
        print("bench.py: PyTorch is not installed for %s: the reference rows (FA2, cuDNN) will say "
              "'torch unavailable' and there is no %% of FA2." % sys.executable, flush=True)

    progress = Progress(planned, args.batch, args.heads)
    stage_rows, reference_rows = [], []
    runner_header = reference_header = ""
    with tempfile.TemporaryDirectory(prefix="fa_bench_") as workdir:
        try:
            for dtype, head_dim, names in plan:
                if names:
                    header, rows = run_stages(args, fa_run, names, dtype, head_dim, workdir, env, progress)
                    runner_header = runner_header or header
                    stage_rows += rows
                header, rows = run_references(args, dtype, head_dim, workdir, progress)
                reference_header = reference_header or header
                reference_rows += rows
        except Abort as e:
            print(e, file=sys.stderr)
            return e.code
    smi_end = nvidia_smi_query()
    print("bench.py: measured %d results in %s" % (len(progress.done), fmt_duration(time.monotonic() - progress.started)),
          flush=True)

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
        ("method", "each result checked against fp64 attention first (no time if it fails); then %d warm-up "
                   "and %d timed launches, each between its own CUDA events; median_ms/min_ms over those; "
                   "tflops = 4*batch*heads*seq_q*seq_kv*head_dim / median; pct_of_fa2 (pct_of_cudnn) = "
                   "100 * FA2's (cuDNN's) median / median" % (args.warmup, args.reps)),
        ("fa_run", runner_header or "none"),
        ("torch_reference", reference_header or "none"),
    ]
    rows = merge(stage_rows, reference_rows)
    # One block per (dtype, head_dim): stages in registry order, then the references; seq ascending.
    order = {name: i for i, name in enumerate([s["name"] for s in to_run] + list(REFERENCES))}
    rows.sort(key=lambda r: (args.dtypes.index(r["dtype"]), args.head_dims.index(int(r["head_dim"])),
                             r["kind"] != "stage", order.get(r["impl"], len(order)), int(r["seq_q"])))

    os.makedirs(args.out_dir, exist_ok=True)
    out_csv = os.path.join(args.out_dir, "results_%s_%s.csv" % (slug(gpu), started.strftime("%Y%m%d-%H%M%S")))
    write_results_csv(out_csv, meta, rows)
    latest = os.path.join(args.out_dir, "latest.csv")
    shutil.copyfile(out_csv, latest)

    print_table(rows, args.seqs)
    print("\nbench.py: wrote %s (and %s)" % (shown_path(out_csv), shown_path(latest)))

    exit_code = 0
    failed_stages = [r for r in rows if r["kind"] == "stage" and r["status"] != "PASS"]
    failed_refs = [r for r in rows if r["kind"] == "reference" and r["status"].split(":")[0] in ("FAIL", "ERROR")]
    unavailable = sorted({"%s: %s" % (r["impl"], r["status"]) for r in rows if r["status"].startswith("unavailable")})
    for r in failed_stages + failed_refs:
        print("bench.py: %s %s d%s S=%s: %s" % (r["impl"], r["dtype"], r["head_dim"], r["seq_q"], r["status"]))
    for line in unavailable[:6]:
        print("bench.py: reference %s" % line)
    if failed_stages or failed_refs:
        print("bench.py: %d result(s) failed their check or did not run; they have no time." % (len(failed_stages) + len(failed_refs)))
        exit_code = 1

    for what, cmd in later_steps(args, out_csv):
        if "--no-plots" in cmd and not args.no_plots:
            print("bench.py: matplotlib is not installed for %s, so there are no plots (pip install matplotlib; then "
                  "python3 tools/plot.py %s)" % (sys.executable, shown_path(out_csv)))
        rc, _ = stream(cmd)
        if rc != 0:
            print("bench.py: the %s step failed (exit code %d): %s" % (what, rc, show_command(cmd)), file=sys.stderr)
            exit_code = exit_code or 1
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
