"""Small pieces every command-line tool in tools/ shares: the repository root, how a path is shown,
how a list option is parsed, and which GPU runs which stage.

Scripts in tools/ import it directly (Python puts a script's own folder on sys.path).
Standard library only.
"""

import argparse
import os
import subprocess

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
