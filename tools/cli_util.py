"""Small pieces every command-line tool in tools/ shares: the repository root, how a path is shown,
how a list option is parsed, and which GPU runs which stage.

Scripts in tools/ import it directly (Python puts a script's own folder on sys.path).
Standard library only.
"""

import argparse
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shown_path(path):
    """A path as the user would type it: relative inside the repository, absolute outside."""
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def int_list(text):
    """argparse type: '1024,2048' -> [1024, 2048]; positive integers only."""
    try:
        values = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("expected a comma-separated list of integers, got %r" % text)
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("expected positive integers, got %r" % text)
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
