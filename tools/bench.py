#!/usr/bin/env python3
"""The main benchmark: every stage against PyTorch's FlashAttention-2 and cuDNN, in one CSV.

For each (dtype, head_dim) it runs the C++ runner (build/fa_run: check against fp64, then time) on
all sequence lengths, then tools/torch_reference.py (a separate process, so nothing here imports
torch) on the same shapes, merges both into one CSV with % of FA2 per row, prints a compact table
and renders the plots with plots/plot.py.

Output: <out-dir>/results_<gpu>_<YYYYmmdd-HHMMSS>.csv (UTC), copied to <out-dir>/latest.csv.
Exit status: 0 if every stage and every available reference passed its check; 1 if any failed or
could not run (it has no time in the CSV); 2 for bad options or a missing build; 3 if no GPU.

Usually started by scripts/run_all.sh, which builds build/fa_run first.
"""

import argparse
import collections
import csv
import datetime
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_REFERENCE = os.path.join(REPO, "tools", "torch_reference.py")
PLOT = os.path.join(REPO, "plots", "plot.py")
REFERENCES = ("fa2", "cudnn")

# The merged CSV's columns, in order.
COLUMNS = ["impl", "kind", "dtype", "head_dim", "batch", "heads", "seq_q", "seq_kv", "median_ms", "min_ms",
           "tflops", "pct_of_fa2", "max_abs_err", "rel_l2_err", "status"]


class Abort(Exception):
    """Stops the run with an exit code and a message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def int_list(text):
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected a comma-separated list of integers, got %r" % text)
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("expected positive integers, got %r" % text)
    return values


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="tools/bench.py", description=__doc__.split("\n\n")[0],
        epilog="Example: python3 tools/bench.py --dtypes fp16,bf16 --head-dims 64,128   "
               "(smoke test: python3 tools/bench.py --quick)")
    p.add_argument("--stages", default="all",
                   help="'all' or a comma-separated list of stage names or numbers, e.g. 04,05_interleave (default all)")
    p.add_argument("--dtypes", default="fp16", help="comma-separated fp16,bf16, or 'all' (default fp16)")
    p.add_argument("--head-dims", default="128", help="comma-separated 64,128, or 'all' (default 128)")
    p.add_argument("--seqs", type=int_list, default=None,
                   help="sequence lengths, seq_q = seq_kv (default 1024,2048,4096,8192; --quick: 1024)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 16; --quick: 4)")
    p.add_argument("--heads", type=int, default=None, help="heads (default 32)")
    p.add_argument("--reps", type=int, default=None, help="timed launches per result (default 20; --quick: 5)")
    p.add_argument("--warmup", type=int, default=None, help="untimed launches first (default 5; --quick: 2)")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: seq 1024, batch 4, 5 reps; results go to build/bench-quick and the "
                        "README is left alone unless --out-dir/--readme say otherwise")
    p.add_argument("--out-dir", default=None, help="where the CSV goes (default plots/results)")
    p.add_argument("--plots-dir", default=None, help="where the PNGs go (default plots; --quick: the out-dir)")
    p.add_argument("--readme", default=None,
                   help="README whose results table plot.py rewrites (default README.md; --quick: none)")
    p.add_argument("--no-readme", action="store_true", help="do not touch any README")
    p.add_argument("--no-plots", action="store_true", help="write the CSV only")
    p.add_argument("--no-reference", action="store_true",
                   help="skip PyTorch (reference rows say 'unavailable: skipped (--no-reference)')")
    p.add_argument("--build-dir", default=os.path.join(REPO, "build"), help="where fa_run was built (default build)")
    args = p.parse_args(argv)

    defaults = dict(seqs=[1024, 2048, 4096, 8192], batch=16, heads=32, reps=20, warmup=5)
    if args.quick:
        defaults.update(seqs=[1024], batch=4, reps=5, warmup=2)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.reps < 1 or args.warmup < 0 or args.batch < 1 or args.heads < 1:
        p.error("--reps, --batch and --heads must be >= 1 and --warmup >= 0")

    args.dtypes = ["fp16", "bf16"] if args.dtypes == "all" else [d for d in args.dtypes.split(",") if d]
    for d in args.dtypes:
        if d not in ("fp16", "bf16"):
            p.error("unknown dtype %r (fp16, bf16 or all)" % d)
    args.head_dims = [64, 128] if args.head_dims == "all" else int_list(args.head_dims)

    if args.out_dir is None:
        args.out_dir = os.path.join(REPO, "build", "bench-quick") if args.quick else os.path.join(REPO, "plots", "results")
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
    """{'sm_clock_mhz', 'max_sm_clock_mhz', 'driver', 'name'} of the GPU the runner will use (the
    first one CUDA_VISIBLE_DEVICES names, else the first one); {} without nvidia-smi."""
    base = ["nvidia-smi", "--query-gpu=clocks.sm,clocks.max.sm,driver_version,name", "--format=csv,noheader,nounits"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    out = (run_quiet(base + ["-i", visible]) if visible else None) or run_quiet(base)
    if not out or not out.strip():
        return {}
    parts = [x.strip() for x in out.strip().splitlines()[0].split(",")]
    if len(parts) < 4:
        return {}
    return {"sm_clock_mhz": parts[0], "max_sm_clock_mhz": parts[1], "driver": parts[2], "name": ",".join(parts[3:])}


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
# Running the runner and the reference


def stream(cmd, env=None):
    """Runs cmd, echoing its output live (it is the progress report); returns (exit code, last lines)."""
    print("$ " + " ".join(shlex.quote(shown(c) if os.path.isabs(c) else c)
                          for c in cmd), flush=True)
    tail = collections.deque(maxlen=12)
    try:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, bufsize=1, errors="replace")
    except OSError as e:
        return 127, [str(e)]
    for line in proc.stdout:
        sys.stdout.write("  " + line)
        sys.stdout.flush()
        if line.strip():
            tail.append(line.rstrip())
    return proc.wait(), list(tail)


def list_stages(fa_run):
    out = run_quiet([fa_run, "--list"])
    if out is None:
        return None
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def resolve_stages(selection, available):
    if selection == "all":
        return list(available)
    chosen = []
    for item in [s.strip() for s in selection.split(",") if s.strip()]:
        matches = [s for s in available if s == item or (item.isdigit() and s.split("_")[0] == item.zfill(2))]
        if not matches:
            raise Abort(2, "bench.py: no stage %r in fa_run (it has: %s)" % (item, ", ".join(available)))
        chosen += [m for m in matches if m not in chosen]
    return chosen


def run_stages(args, fa_run, stages, dtype, head_dim, workdir, env):
    """Rows of every (stage, seq) for one dtype and head_dim; a crash of the runner does not lose the
    other stages: the missing ones are run again one stage per process."""
    def runner(stage_list, seqs, csv_path):
        cmd = [fa_run, "--stage", ",".join(stage_list), "--dtype", dtype, "--head-dim", str(head_dim),
               "--seq", ",".join(map(str, seqs)), "--batch", str(args.batch), "--heads", str(args.heads),
               "--warmup", str(args.warmup), "--reps", str(args.reps), "--csv", csv_path]
        rc, tail = stream(cmd, env)
        if rc == 3:  # fa_run's own message above says why
            raise Abort(3, "bench.py: no usable CUDA GPU; nothing was measured.")
        if rc == 2:
            raise Abort(2, "bench.py: fa_run rejected its options: %s" % (tail[-1] if tail else "?"))
        header, rows = read_runner_csv(csv_path)
        return rc, tail, header, rows

    csv_path = os.path.join(workdir, "stages_%s_d%d.csv" % (dtype, head_dim))
    rc, tail, header, rows = runner(stages, args.seqs, csv_path)
    have = {(r["impl"], int(r["seq_q"])) for r in rows}
    missing = [(s, q) for q in args.seqs for s in stages if (s, q) not in have]
    if missing and rc not in (0, 1):
        print("bench.py: fa_run exited with code %d before finishing; running the %d missing result(s) one "
              "stage per process" % (rc, len(missing)), flush=True)
        for stage in [s for s in stages if any(m[0] == s for m in missing)]:
            seqs = [q for (s, q) in missing if s == stage]
            retry_path = os.path.join(workdir, "retry_%s_%s_d%d.csv" % (stage, dtype, head_dim))
            rc2, tail2, header2, rows2 = runner([stage], seqs, retry_path)
            header = header or header2
            rows += rows2
            if rc2 not in (0, 1):
                rc, tail = rc2, tail2
        have = {(r["impl"], int(r["seq_q"])) for r in rows}
        missing = [(s, q) for q in args.seqs for s in stages if (s, q) not in have]
    for stage, seq in missing:
        why = tail[-1] if tail else "no output"
        rows.append({"impl": stage, "dtype": dtype, "head_dim": head_dim, "batch": args.batch, "heads": args.heads,
                     "seq_q": seq, "seq_kv": seq,
                     "status": "ERROR: not run: fa_run exited with code %d (%s)" % (rc, why)})
    return header, rows


def run_references(args, dtype, head_dim, workdir):
    def unavailable(status):
        return [{"impl": name, "dtype": dtype, "head_dim": head_dim, "batch": args.batch, "heads": args.heads,
                 "seq_q": seq, "seq_kv": seq, "status": status} for seq in args.seqs for name in REFERENCES]

    if args.no_reference:
        return "", unavailable("unavailable: skipped (--no-reference)")
    csv_path = os.path.join(workdir, "reference_%s_d%d.csv" % (dtype, head_dim))
    cmd = [sys.executable, TORCH_REFERENCE, "--dtype", dtype, "--head-dim", str(head_dim),
           "--seqs", ",".join(map(str, args.seqs)), "--batch", str(args.batch), "--heads", str(args.heads),
           "--warmup", str(args.warmup), "--reps", str(args.reps), "--csv", csv_path]
    rc, tail = stream(cmd)
    header, rows = read_runner_csv(csv_path)
    have = {(r["impl"], int(r["seq_q"])) for r in rows}
    for row in unavailable("ERROR: torch_reference.py exited with code %d (%s)" % (rc, tail[-1] if tail else "no output")):
        if (row["impl"], row["seq_q"]) not in have:
            rows.append(row)
    return header, rows


# ------------------------------------------------------------------------------------------------
# Merging, the table, the plots


def number(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if value == value else None  # NaN is no number here


def merge(stage_rows, reference_rows):
    merged = []
    for kind, rows in (("stage", stage_rows), ("reference", reference_rows)):
        for r in rows:
            row = {c: r.get(c, "") for c in COLUMNS}
            row["kind"] = kind
            row["status"] = " ".join(str(row["status"] or "ERROR: no status").replace(",", ";").split())
            if row["status"] != "PASS":  # a result without a passed check has no time, whatever was written
                row.update(median_ms="", min_ms="", tflops="")
            merged.append(row)
    fa2_ms = {}
    for row in merged:
        if row["impl"] == "fa2" and row["kind"] == "reference" and number(row["median_ms"]):
            fa2_ms[shape_key(row)] = number(row["median_ms"])
    for row in merged:
        ms, ref = number(row["median_ms"]), fa2_ms.get(shape_key(row))
        row["pct_of_fa2"] = "%.2f" % (100.0 * ref / ms) if ms and ref else ""
    return merged


def shape_key(row):
    return (row["dtype"], str(row["head_dim"]), str(row["batch"]), str(row["heads"]), str(row["seq_q"]), str(row["seq_kv"]))


def print_table(rows, seqs):
    groups = collections.OrderedDict()
    for row in rows:
        groups.setdefault((row["dtype"], str(row["head_dim"]), str(row["batch"]), str(row["heads"])), []).append(row)
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


def write_results(path, meta, rows):
    with open(path, "w", newline="") as f:
        for key, value in meta:
            if value == "":
                continue
            f.write("# %s=%s\n" % (key, " ".join(str(value).split())))
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def shown(path):
    """A path as the user would type it: relative inside the repository, absolute outside."""
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    fa_run = os.path.join(os.path.abspath(args.build_dir), "fa_run")
    if not os.access(fa_run, os.X_OK):
        print("bench.py: %s not found. Build it first:\n  cmake -S . -B build && cmake --build build --target fa_run\n"
              "or run everything with: bash scripts/run_all.sh" % shown(fa_run), file=sys.stderr)
        return 2
    available = list_stages(fa_run)
    if not available:
        print("bench.py: '%s --list' failed" % fa_run, file=sys.stderr)
        return 2
    try:
        stages = resolve_stages(args.stages, available)
    except Abort as e:
        print(e, file=sys.stderr)
        return e.code

    started = datetime.datetime.now(datetime.timezone.utc)
    smi_start = nvidia_smi_query()
    git = git_revision()
    env = dict(os.environ, FA_GIT_REV=git)
    command = " ".join(shlex.quote(a) for a in [os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:])
    print("bench.py: stages %s; dtypes %s; head_dims %s; seqs %s; batch %d; heads %d; %d warm-up + %d timed launches"
          % (",".join(stages), ",".join(args.dtypes), ",".join(map(str, args.head_dims)),
             ",".join(map(str, args.seqs)), args.batch, args.heads, args.warmup, args.reps), flush=True)
    if not args.no_reference and importlib.util.find_spec("torch") is None:
        print("bench.py: PyTorch is not installed for %s: the reference rows (FA2, cuDNN) will say "
              "'torch unavailable' and there is no %% of FA2." % sys.executable, flush=True)

    stage_rows, reference_rows = [], []
    runner_header = reference_header = ""
    with tempfile.TemporaryDirectory(prefix="fa_bench_") as workdir:
        try:
            for dtype in args.dtypes:
                for head_dim in args.head_dims:
                    header, rows = run_stages(args, fa_run, stages, dtype, head_dim, workdir, env)
                    runner_header = runner_header or header
                    stage_rows += rows
                    header, rows = run_references(args, dtype, head_dim, workdir)
                    reference_header = reference_header or header
                    reference_rows += rows
        except Abort as e:
            print(e, file=sys.stderr)
            return e.code
    smi_end = nvidia_smi_query()

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
        ("method", "each result checked against fp64 attention first (no time if it fails); then %d warm-up "
                   "and %d timed launches, each between its own CUDA events; median_ms/min_ms over those; "
                   "tflops = 4*batch*heads*seq_q*seq_kv*head_dim / median; pct_of_fa2 = 100 * fa2 median / median"
                   % (args.warmup, args.reps)),
        ("fa_run", runner_header or "none"),
        ("torch_reference", reference_header or "none"),
    ]
    rows = merge(stage_rows, reference_rows)
    # One block per (dtype, head_dim): stages in registry order, then the references; seq ascending.
    order = {name: i for i, name in enumerate(stages + list(REFERENCES))}
    rows.sort(key=lambda r: (args.dtypes.index(r["dtype"]), args.head_dims.index(int(r["head_dim"])),
                             r["kind"] != "stage", order.get(r["impl"], len(order)), int(r["seq_q"])))

    os.makedirs(args.out_dir, exist_ok=True)
    out_csv = os.path.join(args.out_dir, "results_%s_%s.csv" % (slug(gpu), started.strftime("%Y%m%d-%H%M%S")))
    write_results(out_csv, meta, rows)
    latest = os.path.join(args.out_dir, "latest.csv")
    shutil.copyfile(out_csv, latest)

    print_table(rows, args.seqs)
    print("\nbench.py: wrote %s (and %s)" % (shown(out_csv), shown(latest)))

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

    if args.no_plots:
        return exit_code
    if importlib.util.find_spec("matplotlib") is None:
        print("bench.py: matplotlib is not installed for %s, so there are no plots (pip install matplotlib; then "
              "python3 plots/plot.py %s)" % (sys.executable, shown(latest)))
        return exit_code
    cmd = [sys.executable, PLOT, out_csv, "--out-dir", args.plots_dir]
    if args.readme:
        cmd += ["--readme", args.readme]
    rc, _ = stream(cmd)
    if rc != 0:
        print("bench.py: plots/plot.py failed (exit code %d)" % rc, file=sys.stderr)
        exit_code = exit_code or 1
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
