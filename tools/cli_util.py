"""Small pieces every command-line tool in tools/ shares: the repository root, how a path, a length
and a duration are shown, how a list option is parsed, which GPU runs which stage, and (for the
benchmarks that time in one PyTorch process: decode_bench.py, backward_bench.py, interleaved.py)
PyTorch with a GPU and where a results CSV goes.

Scripts in tools/ import it directly (Python puts a script's own folder on sys.path).
Standard library only.
"""

import argparse
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shown_path(path):
    """A path as the user would type it: relative inside the repository, absolute outside."""
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def int_list(text, minimum=1):
    """argparse type: '1024,2048' -> [1024, 2048]; integers >= minimum (positive by default)."""
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected a comma-separated list of integers, got %r" % text)
    if not values or min(values) < minimum:
        raise argparse.ArgumentTypeError("expected integers >= %d, got %r" % (minimum, text))
    return values


def k_int_list(text, bad="expected a comma-separated list of integers (k = 1024), got %r",
               small="expected integers >= 1, got %r", empty="expected at least one integer, got %r"):
    """argparse type: '1k,16k,65536' -> [1024, 16384, 65536], positive integers, k = 1024. bad, small
    and empty: the messages (with %r for the text) for an item that is not a number, one below 1, and
    no item at all."""
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        scale = 1024 if item.endswith("k") else 1
        try:
            value = int(item[:-1] if scale > 1 else item) * scale
        except ValueError:
            raise argparse.ArgumentTypeError(bad % text)
        if value < 1:
            raise argparse.ArgumentTypeError(small % text)
        out.append(value)
    if not out:
        raise argparse.ArgumentTypeError(empty % text)
    return out


DTYPES = ("fp16", "bf16")


def split_dtypes_and_references(parser, args, references):
    """args.dtype_list and args.reference_list from the comma-separated --dtypes and --references
    ('' for no reference), or parser.error naming what is not in DTYPES or in references."""
    args.dtype_list = [d for d in args.dtypes.split(",") if d]
    if not args.dtype_list or any(d not in DTYPES for d in args.dtype_list):
        parser.error("--dtypes takes fp16, bf16 or fp16,bf16, not %r" % args.dtypes)
    args.reference_list = [r for r in args.references.split(",") if r]
    for r in args.reference_list:
        if r not in references:
            parser.error("--references: unknown %r (known: %s)" % (r, ", ".join(references)))


def length_text(n):
    """4096 -> '4k' (a multiple of 1024), else the number: a length in a case's label."""
    return "%dk" % (n // 1024) if n % 1024 == 0 else str(n)


def fmt_duration(seconds):
    """'42 s', '3 min 07 s'."""
    seconds = int(round(seconds))
    return "%d min %02d s" % (seconds // 60, seconds % 60) if seconds >= 60 else "%d s" % seconds


def compute_capability(text):
    """'9.0', '90' or 90 -> 90; None for anything else (e.g. '[N/A]')."""
    text = str(text).strip()
    try:
        if "." in text:
            major, minor = text.split(".", 1)
            return int(major) * 10 + int(minor)
        return int(text)
    except ValueError:
        return None


def stage_runs_on(min_compute_capability, arch_specific, gpu_compute_capability):
    """Whether a GPU runs a stage built for min_compute_capability: an arch-specific target
    (sm_90a) runs only on that exact architecture, a plain one (sm_80) on it and every later one.
    Mirrors fa::stage_runs_on in common/params.h."""
    if arch_specific:
        return gpu_compute_capability == min_compute_capability
    return gpu_compute_capability >= min_compute_capability


# The machine and the tree (what a results file records of where it was measured)

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


# The benchmarks that time in one PyTorch process


def cuda_torch(prog):
    """The torch module, or None (after saying why on stderr, naming prog) when PyTorch is not
    importable or sees no CUDA device: the caller times nothing and exits 3."""
    try:
        import torch
    except Exception as e:
        print("%s: PyTorch is not importable (%s); nothing was timed." % (prog, e), file=sys.stderr)
        return None
    if not torch.cuda.is_available():
        print("%s: PyTorch sees no CUDA device; nothing was timed." % prog, file=sys.stderr)
        return None
    return torch


def results_paths(args, prefix, gpu, started):
    """(the CSV to write, the <prefix>_latest.csv to copy it to, or None): args.csv alone when given,
    else <prefix>_<gpu>_<date>.csv and <prefix>_latest.csv in args.out_dir."""
    if args.csv:
        return args.csv, None
    import bench  # its slug() names the results files
    name = "%s_%s_%s.csv" % (prefix, bench.slug(gpu), started.strftime("%Y%m%d-%H%M%S"))
    return os.path.join(args.out_dir, name), os.path.join(args.out_dir, "%s_latest.csv" % prefix)


def results_paths_text(args, prefix):
    """What results_paths will give, for a dry run: 'plots/results/<prefix>_<gpu>_<date>.csv and
    <prefix>_latest.csv', or args.csv."""
    if args.csv:
        return shown_path(args.csv)
    return shown_path(os.path.join(args.out_dir, "%s_<gpu>_<date>.csv" % prefix)) + " and %s_latest.csv" % prefix


def report_written(tag, csv_path, latest, seconds, estimate):
    """Prints where the CSV went, in how long against the estimate, and copies it to latest (if not None)."""
    print("%s: wrote %s in %s (estimated %s)" % (tag, shown_path(csv_path), fmt_duration(seconds),
                                                 fmt_duration(estimate)))
    if latest:
        shutil.copyfile(csv_path, latest)
        print("%s: and %s" % (tag, shown_path(latest)))
