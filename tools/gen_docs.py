#!/usr/bin/env python3
"""Regenerates the generated sections of the docs from the source tree, the build and the benchmark CSV.

    python3 tools/gen_docs.py [--build-dir build] [--csv PATH] [--ceilings-csv PATH]
                              [--sections diff,results,sass,headline,ceilings] [--check]

The stages are those of tools/stages.py (stages/*/stage.json); each page compares a stage with its
declared parent. Sections (everything between the markers is replaced; the rest of each page is
hand-written):

  docs/stages/NN_name.md
    <!-- diff:begin --> ... <!-- diff:end -->                                      (section "diff")
        the unified diff of stages/<parent>/ -> stages/NN_name/ (difflib, paths relative to the
        repository) in a ```diff fence; for the first stage of a track (no parent), its file list
    <!-- results:begin --> ... <!-- results:end -->                                (section "results")
        from the benchmark CSV, for this stage and its parent: per configuration and sequence
        length, median ms, TFLOP/s, % of FA2 and the change in time against the parent; the
        causal, any-length, grouped-query and ALiBi rows (tools/results_csv.py SERIES) in one table
        per series, with the parent only where it has such rows (declares the feature too); for an
        sm_90a stage also its % of cuDNN in every table and, in the headline tables, its % of the
        measured wgmma dense peak of the same dtype (row wgmma_m64n256k16_2wg of --ceilings-csv,
        read with tools/ceilings_doc.py; left out, and the page says why, when that CSV is missing,
        has no row for the dtype or was measured on another GPU); where the
        numbers come from (GPU, date, git revision, CSV); and whether stages/<stage>/,
        stages/<parent>/ or common/ changed since the CSV's git revision (git diff against the
        working tree; said so plainly when git or the revision is not available). A page whose
        prose discusses one particular run pins its tables to that run's CSV with a line
        '<!-- results-csv: plots/results/<file>.csv -->' (outside the markers); otherwise the
        tables come from --csv
    <!-- sass:begin --> ... <!-- sass:end -->                                      (section "sass")
        static SASS counts of the main K/V loop of this stage's and its parent's fp16, head_dim 128
        kernel (sm_90 code; sm_90a for sm_90a stages), with registers and spills, disassembled from
        the stage libraries of --build-dir (tools/sass.py). The section records the CUDA compiler
        version it came from (<!-- sass-build: ... -->)
  docs/ceilings.md
    <!-- ceilings:begin --> ... <!-- ceilings:end -->                              (section "ceilings")
        the measured hardware ceilings of --ceilings-csv (tools/ceilings_doc.py)
  docs/performance_log.md
    <!-- headline:begin --> ... <!-- headline:end -->                             (section "headline")
        every stage and reference from the CSV: TFLOP/s and % of FA2 per sequence length, and which
        stage folders changed since the CSV's revision

The CSV is what tools/bench.py writes (default plots/results/latest.csv), read with
tools/results_csv.py. Without a CSV the results sections say so. The ceilings CSV is what
scripts/microbench.sh writes (default plots/results/ceilings_latest.csv); a change to it changes the
sm_90a stages' results sections too, so --check reports them as stale until they are regenerated.

Without cuobjdump/nvdisasm, or without the stage libraries (or their sm_90 code) in --build-dir,
the SASS sections cannot be regenerated: writing leaves them as they are and says so; --check
reports them as not checked. A build by another CUDA compiler version than the one a page's SASS
section records is not compared either (its code differs for reasons no page
discusses): regenerate with that build to adopt it.

--check writes nothing. Exit status: 0 if every requested section is up to date; 1 if any differs
from what the tree, the build and the CSV give now (or a stage has no page, a page lacks its
markers, a pinned CSV is missing); 77 if nothing is stale but a requested SASS section could not
be checked (CTest reports 77 as skipped). Standard library only.
"""

import argparse
import collections
import difflib
import glob
import os
import re
import subprocess
import sys

import ceilings_doc  # the ceilings CSV's reader and docs/ceilings.md's table (tools/ceilings_doc.py)
import sass
import stages as stage_declarations
from cli_util import REPO, shown_path
from results_csv import fmt_ms, number, reference_label, statistic_word, timing_of
from results_tables import ResultsError, load_results, make_groups, seq_label

STAGE_DOCS = os.path.join(REPO, "docs", "stages")
PERF_LOG = os.path.join(REPO, "docs", "performance_log.md")
DEFAULT_CSV = os.path.join(REPO, "plots", "results", "latest.csv")
DEFAULT_BUILD = os.path.join(REPO, "build")
CEILINGS_PAGE = os.path.join(REPO, "docs", "ceilings.md")
DEFAULT_CEILINGS_CSV = ceilings_doc.DEFAULT_CSV
# The ceiling of the Hopper track: the dense wgmma peak with 2 warpgroups per SM (docs/ceilings.md).
WGMMA_PEAK = "wgmma_m64n256k16_2wg"
SECTIONS = ("diff", "results", "sass", "headline", "ceilings")
SKIP = 77
NO_RESULTS = "No benchmark results committed yet; run `bash scripts/run_all.sh`."
SASS_COLUMNS = ["HMMA", "HGMMA", "LDSM", "LDSM.T", "LDGSTS", "LDG", "STS", "MUFU.EX2", "FMUL", "FFMA", "FADD", "FMNMX",
                "SHFL", "BAR.SYNC", "LDL", "STL", "total"]
SASS_DTYPE, SASS_HEAD_DIM = "fp16", 128
SASS_BUILD = re.compile(r"<!-- sass-build: (.*?) -->")
PINNED_CSV = re.compile(r"<!-- results-csv: (\S+) -->")
# The one line of a results or headline section that says whether the source changed since the run.
FRESHNESS_LINE = re.compile(r"^Measured at git .*$", re.M)


class DocError(Exception):
    pass


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def fenced(lang, text):
    """A code fence longer than any run of backticks inside the text."""
    longest = max([len(m) for m in re.findall(r"`+", text)] + [2])
    fence = "`" * max(3, longest + 1)
    return "%s%s\n%s\n%s" % (fence, lang, text, fence)


def files_of(stage):
    root = os.path.join(REPO, "stages", stage)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            if f.startswith(".") or f.endswith((".pyc", "~")):
                continue
            out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(out)


# ------------------------------------------------------------------------------------------------
# The diff section


def diff_section(stage, parent):
    if parent is None:
        lines = ["`%s` is the first stage of its track: no parent to diff against. Its files:" % stage, ""]
        for f in files_of(stage):
            path = os.path.join(REPO, "stages", stage, f)
            lines.append("- `stages/%s/%s` (%d lines)" % (stage, f, len(read_lines(path))))
        return "\n".join(lines)
    out, changed = [], []
    for f in sorted(set(files_of(parent)) | set(files_of(stage))):
        old_path = os.path.join(REPO, "stages", parent, f)
        new_path = os.path.join(REPO, "stages", stage, f)
        old = read_lines(old_path) if os.path.exists(old_path) else []
        new = read_lines(new_path) if os.path.exists(new_path) else []
        old_name = "stages/%s/%s" % (parent, f) if os.path.exists(old_path) else "/dev/null"
        new_name = "stages/%s/%s" % (stage, f) if os.path.exists(new_path) else "/dev/null"
        d = list(difflib.unified_diff(old, new, old_name, new_name, n=3, lineterm=""))
        if d:
            changed.append(f)
            out += d
    if not out:
        return "`stages/%s/` and its parent `stages/%s/` are identical." % (stage, parent)
    added = sum(1 for l in out if l.startswith("+") and not l.startswith("+++"))
    removed = sum(1 for l in out if l.startswith("-") and not l.startswith("---"))
    head = "`diff -u stages/%s stages/%s` (against its parent; %s; %d lines added, %d removed):" % (
        parent, stage, ", ".join(changed), added, removed)
    return head + "\n\n" + fenced("diff", "\n".join(out))


# ------------------------------------------------------------------------------------------------
# Did the measured code change since the CSV's revision?


def git(*args):
    """git's stdout, or None if git is missing or fails."""
    try:
        done = subprocess.run(["git", "-C", REPO] + list(args), capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


class Freshness:
    """Which of some paths differ now (working tree) from the revision a CSV was measured at."""

    def __init__(self, meta):
        revision = (meta or {}).get("git", "").strip()
        self.dirty = revision.endswith("-dirty")
        self.revision = revision[:-len("-dirty")] if self.dirty else revision
        self.unknown = None  # why it cannot be told, or None
        self.cache = {}
        if not self.revision or self.revision == "unknown":
            self.unknown = "the CSV names no git revision"
        elif git("rev-parse", "--git-dir") is None:
            self.unknown = "this copy of the project has no git history"
        elif git("rev-parse", "--verify", "--quiet", self.revision + "^{commit}") is None:
            self.unknown = "revision %s is not in this clone" % self.revision

    def changed(self, path):
        """True if `path` (relative to the repository) differs from the measured revision, tracked
        or untracked."""
        if path not in self.cache:
            tracked = git("diff", "--name-only", self.revision, "--", path)
            untracked = git("ls-files", "--others", "--exclude-standard", "--", path)
            self.cache[path] = bool((tracked or "").strip() or (untracked or "").strip())
        return self.cache[path]

    def line(self, folders):
        """The one FRESHNESS_LINE paragraph for these folders (e.g. ['stages/ampere/09_two_mtiles/', 'common/'])."""
        named = ", ".join("`%s`" % f for f in folders)
        revision = self.revision or "unknown"
        if self.unknown:
            return ("Measured at git %s; whether %s changed since cannot be told here (%s)."
                    % (revision, named, self.unknown))
        dirty = (" The run's tree also had uncommitted changes, which git cannot show." if self.dirty else "")
        changed = [f for f in folders if self.changed(f)]
        if not changed:
            return "Measured at git %s; %s are unchanged since.%s" % (revision, named, dirty)
        return ("Measured at git %s. **The source changed since that run:** %s differ%s from it "
                "(`git diff %s -- %s`), so these numbers are of the code as it was then.%s"
                % (revision, ", ".join("`%s`" % f for f in changed), "s" if len(changed) == 1 else "",
                   revision, " ".join(f.rstrip("/") for f in changed), dirty))


# ------------------------------------------------------------------------------------------------
# The results sections


def source_line(meta, csv_path):
    parts = ["GPU %s" % meta.get("gpu", "unknown")]
    for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "PyTorch")):
        if meta.get(key):
            parts.append("%s %s" % (label, meta[key]))
    parts.append("date %s" % meta.get("date", "unknown"))
    parts.append("git %s" % meta.get("git", "unknown"))
    if timing_of(meta) == "rounds":
        parts.append("timed in shuffled rounds, times the minimum over the rounds")
    return "Source: `%s` (%s)." % (shown_path(csv_path), "; ".join(parts))


def status_word(row):
    if row is None:
        return "-"
    status = (row.get("status") or "").strip()
    if status.startswith("unavailable"):
        return "n/a"
    return status.split(":")[0] or "-"


def cell(row, field, fmt):
    if row is None or row[field] is None:
        return status_word(row) if row is None or row["ms"] is None else "-"
    return fmt(row[field])


# The title of a series' one table on a stage page (the headline has one table per configuration).
SERIES_TITLES = {"causal": "Causal (seq_q = seq_kv; % of FA2 run with is_causal=True)",
                 "any_length": "Any length (lengths that are multiples of no tile; % of FA2 at the same length)",
                 "gqa": "Grouped-query attention (% of FA2 run with enable_gqa=True)",
                 "alibi": "ALiBi (no FA2 with ALiBi to compare with)"}


def results_table(title, cells, stage, versus, with_cudnn=False, peak=None):
    """One table of a stage page: a row per (configuration, S) in `cells` [(group, seq)], the
    configuration as a first column where the cells span several; with `versus` (the parent) its
    time, TFLOP/s and % of FA2 beside the stage's; with_cudnn (a Hopper-track stage) adds the
    stage's % of cuDNN; peak (TFLOP/s of the wgmma ceiling of the table's dtype) adds the stage's
    % of it."""
    spans = len({g.key for g, _ in cells}) > 1
    first = "| configuration | S |" if spans else "| S |"
    rule = "|---|---:|" if spans else "|---:|"
    lines = ["**%s**" % title, ""]
    if versus:
        lines.append(first + " %s ms | %s ms | time vs %s | %s TFLOP/s | %s TFLOP/s | %s %% of FA2 | %s %% of FA2 |"
                     % (versus, stage, versus[:2], versus, stage, versus, stage))
        lines.append(rule + "---:|---:|---:|---:|---:|---:|---:|")
    else:
        lines.append(first + " %s ms | %s TFLOP/s | %s %% of FA2 |" % (stage, stage, stage))
        lines.append(rule + "---:|---:|---:|")
    if with_cudnn:
        lines[-2] += " %s %% of cuDNN |" % stage
        lines[-1] += "---:|"
    if peak:
        lines[-2] += " %s %% of wgmma peak |" % stage
        lines[-1] += "---:|"
    ms = lambda r: cell(r, "ms", fmt_ms)
    tf = lambda r: cell(r, "tf", lambda v: "%.1f" % v)
    pct = lambda r: cell(r, "pct", lambda v: "%.1f" % v)
    pct_cudnn = lambda r: cell(r, "pct_cudnn", lambda v: "%.1f" % v)
    for g, s in cells:
        lead = "| %s, %s | %s |" % (g.dtype, g.config(with_series=False), seq_label(s)) if spans else "| %s |" % seq_label(s)
        this, prev = g.get(stage, s), g.get(versus, s) if versus else None
        if versus:
            change = "-"
            if this["ms"] is not None and prev is not None and prev["ms"] is not None:
                change = "%+.1f%%" % (100.0 * (this["ms"] / prev["ms"] - 1.0))
            lines.append("%s %s | %s | %s | %s | %s | %s | %s |" % (
                lead, ms(prev), ms(this), change, tf(prev), tf(this), pct(prev), pct(this)))
        else:
            lines.append("%s %s | %s | %s |" % (lead, ms(this), tf(this), pct(this)))
        if with_cudnn:
            lines[-1] += " %s |" % pct_cudnn(this)
        if peak:
            lines[-1] += " %s |" % cell(this, "tf", lambda v: "%.1f" % (100.0 * v / peak))
    return "\n".join(lines)


class WgmmaPeaks:
    """The wgmma dense peak (WGMMA_PEAK) per dtype from a ceilings CSV (scripts/microbench.sh), read
    with tools/ceilings_doc.py, for the Hopper stages' % of wgmma peak; or why there is none."""

    def __init__(self, csv_path=DEFAULT_CEILINGS_CSV):
        self.csv_path = csv_path
        self.meta, self.peaks = {}, {}  # peaks: dtype -> (TFLOP/s, SM clock in MHz or None)
        self.missing = None  # why the CSV gives no ceiling at all, or None
        if not os.path.exists(csv_path):
            self.missing = "`%s` does not exist (`bash scripts/microbench.sh` measures it on the GPU)" % (
                shown_path(csv_path))
            return
        self.meta, rows = ceilings_doc.read_ceilings_csv(csv_path)
        clocks = ceilings_doc.sm_clocks(rows)
        for row in rows:
            value = number(row.get("value"))
            if row.get("name") == WGMMA_PEAK and row.get("unit") == "TFLOP/s" and value:
                self.peaks.setdefault(row["dtype"], (value, clocks.get((WGMMA_PEAK, row["dtype"]))))

    def why_not(self, meta):
        """Why no table of a results CSV with this meta gets the column, or None."""
        if self.missing:
            return self.missing
        ours, theirs = (meta or {}).get("gpu"), self.meta.get("gpu")
        if not ours or not theirs or ours != theirs:
            return "the ceilings in `%s` were measured on %s, these results on %s" % (
                shown_path(self.csv_path), theirs or "an unrecorded GPU", ours or "an unrecorded GPU")
        return None

    def peak(self, dtype, meta):
        """TFLOP/s of the ceiling for a table of `dtype` from a results CSV with `meta`, or None."""
        if self.why_not(meta):
            return None
        return self.peaks.get(dtype, (None, None))[0]

    def sentence(self, dtypes, meta):
        """The one sentence under a Hopper page's headline tables (of these dtypes): where the
        ceiling of its % of wgmma peak column comes from, or why the column is left out."""
        link = "[docs/ceilings.md](../ceilings.md)"
        why = self.why_not(meta)
        if why:
            return "No %% of wgmma peak column: %s; the ceiling is explained in %s." % (why, link)
        shown = [d for d in dtypes if d in self.peaks]
        lacking = [d for d in dtypes if d not in self.peaks]
        if not shown:
            return "No %% of wgmma peak column: `%s` has no `%s` row for %s; the ceiling is explained in %s." % (
                shown_path(self.csv_path), WGMMA_PEAK, " or ".join(dtypes), link)
        values = []
        for d in shown:
            tflops, clock = self.peaks[d]
            values.append("%s for %s (SM clock %s during that run)" % (
                ceilings_doc.fmt(tflops, "TFLOP/s"), d, ceilings_doc.fmt(clock, "MHz") if clock else "not recorded"))
        text = ("%% of wgmma peak = this stage's TFLOP/s / the `wgmma` m64n256k16 dense peak of the same dtype "
                "with 2 warpgroups per SM, measured on the %s: %s; rows `%s` of `%s` (%s)"
                % (self.meta.get("gpu", "?"), ", ".join(values), WGMMA_PEAK, shown_path(self.csv_path), link))
        if lacking:
            text += "; that CSV has no such row for %s, so the %s tables have no %% of wgmma peak column" % (
                " or ".join(lacking), " and ".join(lacking))
        return text + "."


def results_section(stage, parent, results, csv_path, freshness, hopper=False, peaks=None):
    """The results section of a stage page; hopper (an sm_90a stage, the track measured against
    cuDNN) adds the stage's % of cuDNN to every table and its % of the wgmma peak of `peaks` (a
    WgmmaPeaks; by default from plots/results/ceilings_latest.csv) to the headline tables, with
    one sentence under them saying where that ceiling comes from."""
    if results is None:
        return NO_RESULTS
    meta, groups = results
    blocks = []
    if hopper and peaks is None:
        peaks = WgmmaPeaks()
    # The headline: one table per configuration, against the parent.
    headline_dtypes = []
    for g in [g for g in groups if g.series == "headline"]:
        cells = [(g, s) for s in g.seqs if g.get(stage, s) is not None]
        if cells:
            blocks.append(results_table(g.title(), cells, stage, parent, hopper,
                                        peaks.peak(g.dtype, meta) if hopper else None))
            if g.dtype not in headline_dtypes:
                headline_dtypes.append(g.dtype)
    if hopper and headline_dtypes:
        blocks.append(peaks.sentence(headline_dtypes, meta))
    # Every other series: one table over its configurations; the parent only where it has rows there
    # (it declares the feature too).
    for series in list(collections.OrderedDict.fromkeys(g.series for g in groups if g.series != "headline")):
        mine = [g for g in groups if g.series == series]
        cells = [(g, s) for g in mine for s in g.seqs if g.get(stage, s) is not None]
        if not cells:
            continue
        versus = parent if parent and any(g.get(parent, s) for g, s in cells) else None
        shape = mine[0]
        title = "%s, batch %d, heads %d" % (SERIES_TITLES.get(series, series), shape.batch, shape.heads)
        blocks.append(results_table(title, cells, stage, versus, hopper))
    if not blocks:
        return "The benchmark CSV `%s` has no rows for `%s`; run `bash scripts/run_all.sh`." % (
            shown_path(csv_path), stage)
    rounds = timing_of(meta) == "rounds"
    same = "same rounds" if rounds else "same run"
    stat = statistic_word(timing_of(meta))  # the time shown and compared (results_csv.STATISTIC)
    legend = ("%s of the timed %s; TFLOP/s = 4 * batch * heads * seq_q * seq_kv * head_dim / %s; "
              "%% of FA2 = FA2's %s / this %s (%s, same GPU)"
              % (stat.capitalize(), "rounds (per shape, every implementation launched once a round, in a shuffled "
                 "order)" if rounds else "launches", stat, stat, stat, same))
    if any(g.causal and any(g.get(stage, s) for s in g.seqs) for g in groups):
        legend += ("; causal rows count half the FLOPs (seq_q = seq_kv) and are compared with FA2 run with "
                   "is_causal=True")
    if any(g.kv_heads != g.heads and any(g.get(stage, s) for s in g.seqs) for g in groups):
        legend += "; grouped-query rows are compared with FA2 run with enable_gqa=True"
    if any(g.alibi and any(g.get(stage, s) for s in g.seqs) for g in groups):
        legend += ("; ALiBi rows have no % of FA2 (PyTorch's fused backends take no ALiBi): the README compares "
                   "them with this stage without ALiBi")
    if hopper:
        legend += "; %% of cuDNN = cuDNN's %s / this %s (%s), for this Hopper-track stage" % (stat, stat, same)
    if parent:
        legend += "; time vs %s = this %s / its %s - 1 (negative = faster)" % (parent[:2], stat, stat)
    legend += ". A cell that is not a number is the status of a result that did not pass its check or did not run."
    folders = ["stages/%s/" % s for s in (stage, parent) if s] + ["common/"]
    return "\n\n".join(blocks + [legend, source_line(meta, csv_path), freshness.line(folders)])


def headline_section(stage_names, results, csv_path, freshness):
    if results is None:
        return NO_RESULTS
    meta, groups = results
    blocks = []
    for g in groups:
        impls = [s for s in stage_names if s in g.stages]
        impls += [s for s in g.stages if s not in stage_names] + g.references
        lines = ["**%s**: TFLOP/s (%% of FA2)" % g.title(), "",
                 "| | " + " | ".join("S=%s" % seq_label(s) for s in g.seqs) + " |",
                 "|---|" + "---:|" * len(g.seqs)]
        for impl in impls:
            out = []
            for s in g.seqs:
                r = g.get(impl, s)
                if r is None or r["ms"] is None:
                    out.append(status_word(r))
                    continue
                text = "%.1f" % r["tf"] if r["tf"] is not None else "-"
                if r["pct"] is not None and impl != "fa2":
                    text += " (%.1f%%)" % r["pct"]
                out.append(text)
            lines.append("| %s | %s |" % (reference_label(impl), " | ".join(out)))
        blocks.append("\n".join(lines))
    if not blocks:
        return "The benchmark CSV `%s` has no rows; run `bash scripts/run_all.sh`." % shown_path(csv_path)
    measured = [s for s in stage_names if any(s in g.stages for g in groups)]
    folders = ["stages/%s/" % s for s in measured] + ["common/"]
    return "\n\n".join(blocks + [source_line(meta, csv_path), freshness.line(folders)])


def read_results(path):
    """(meta, groups) of a CSV, or None if the file does not exist."""
    if not os.path.exists(path):
        return None
    try:
        meta, rows = load_results(path)
    except ResultsError as e:
        raise DocError(str(e))
    return meta, make_groups(rows)


# ------------------------------------------------------------------------------------------------
# The SASS sections, from the build


def build_facts(build_dir):
    """'nvcc 13.0.88': the CUDA compiler of a configured CMake build folder, or None."""
    for path in sorted(glob.glob(os.path.join(build_dir, "CMakeFiles", "*", "CMakeCUDACompiler.cmake"))):
        with open(path, encoding="utf-8") as f:
            m = re.search(r'set\(CMAKE_CUDA_COMPILER_VERSION "([^"]+)"\)', f.read())
        if m:
            return "nvcc %s" % m.group(1)
    return None


class BuildSass:
    """The main-loop counts of each stage's fp16, head_dim 128 kernel in one build, or why not."""

    def __init__(self, build_dir):
        self.build_dir = build_dir
        self.tools = sass.find_tools()
        self.facts = build_facts(build_dir)
        self.cache = {}
        self.why_not = None  # why no SASS section can be made from this build
        if self.tools is None:
            self.why_not = sass.missing_tools_message()
        elif self.facts is None:
            self.why_not = "%s is not a configured CMake build" % shown_path(build_dir)

    @staticmethod
    def arch_of(stage):
        return "sm_90a" if stage.target == "sm_90a" else "sm_90"

    def row(self, stage):
        """(counts of the main loop, registers, kernel LDL, kernel STL), or a string saying why not."""
        if stage.name not in self.cache:
            library = sass.library_of(self.build_dir, stage.name)
            arch = self.arch_of(stage)
            if not library.is_file():
                self.cache[stage.name] = "%s does not exist (build it first)" % shown_path(str(library))
            else:
                kernel = sass.find_kernel(sass.disassemble(library, self.tools), arch, SASS_DTYPE, SASS_HEAD_DIM)
                if kernel is None:
                    self.cache[stage.name] = "%s has no %s %s head_dim %d kernel" % (
                        shown_path(str(library)), arch, SASS_DTYPE, SASS_HEAD_DIM)
                else:
                    usage = sass.resource_usage(library, self.tools).get((arch, kernel.name), {})
                    self.cache[stage.name] = (sass.table_counts(sass.main_loop(kernel.instructions)),
                                              usage.get("REG", "?"), kernel.count("LDL"), kernel.count("STL"))
        return self.cache[stage.name]


def sass_section(stage, parent, build):
    """The section's text, or (None, why) when this build cannot give it."""
    if build.why_not:
        return None, build.why_not
    shown = [s for s in (parent, stage) if s]
    rows = {}
    for s in shown:
        rows[s.name] = build.row(s)
        if isinstance(rows[s.name], str):
            return None, rows[s.name]
    cols = [c for c in SASS_COLUMNS if any(rows[s.name][0][c] for s in shown)]
    lines = ["<!-- sass-build: %s -->" % build.facts,
             "| main loop, static count | " + " | ".join(cols) + " | registers | kernel LDL/STL |",
             "|---|" + "---:|" * (len(cols) + 2)]
    for s in shown:
        counts, registers, ldl, stl = rows[s.name]
        label = "`%s`%s" % (s.name, " (parent)" if s is parent else "")
        lines.append("| %s | %s | %s | %d/%d |" % (label, " | ".join(str(counts[c]) for c in cols), registers, ldl, stl))
    archs = sorted({build.arch_of(s) for s in shown})
    note = ("Static counts: instructions in the SASS of the %s, head_dim %d kernel for %s, in the body of "
            "the main K/V loop (runs once per K/V block; the innermost backward branch that contains an HMMA or HGMMA and no EXIT); "
            "`LDSM.T` counts the `.trans` ones among `LDSM`; `total` is every instruction of the loop except "
            "NOPs; registers per thread from `cuobjdump -res-usage`; kernel LDL/STL are the spill "
            "instructions of the whole kernel. Generated by `tools/gen_docs.py` from the stage libraries of "
            "a build (%s); `python3 tools/sass_counts.py` prints the same counts for any architecture, "
            "dtype and head_dim. Columns that are 0 in every row are left out."
            % (SASS_DTYPE, SASS_HEAD_DIM, " and ".join(archs), build.facts))
    return "\n".join(lines) + "\n\n" + note, None


# ------------------------------------------------------------------------------------------------
# Rewriting marked sections


def section_body(text, name):
    begin, end = "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        return None
    return text.split(begin, 1)[1].split(end, 1)[0]


def replace_section(text, name, body, path):
    begin, end = "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name
    if section_body(text, name) is None:
        raise DocError("%s: needs exactly one '%s' followed by one '%s'" % (shown_path(path), begin, end))
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n" + body.rstrip("\n") + "\n" + end + tail


def section_list(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError("sections are %s; got %r" % (", ".join(SECTIONS), text))
    return names


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--csv", default=DEFAULT_CSV, help="benchmark CSV (default plots/results/latest.csv)")
    p.add_argument("--ceilings-csv", default=DEFAULT_CEILINGS_CSV,
                   help="microbenchmark CSV of the ceilings (default plots/results/ceilings_latest.csv): "
                        "docs/ceilings.md's table and the sm_90a stages' %% of wgmma peak")
    p.add_argument("--build-dir", default=DEFAULT_BUILD,
                   help="CMake build folder whose stage libraries the SASS sections come from (default build)")
    p.add_argument("--sections", type=section_list, default=list(SECTIONS),
                   help="which sections to regenerate or check (default all: %s)" % ",".join(SECTIONS))
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a section is stale, 77 if only SASS sections could not be checked")
    args = p.parse_args(argv)
    wanted = set(args.sections)

    problems, updated, stale, sass_skipped = [], [], [], []
    unverified_freshness = []
    try:
        results = read_results(args.csv)
    except (DocError, OSError) as e:
        print("gen_docs.py: %s" % e, file=sys.stderr)
        return 2
    all_stages = stage_declarations.all_stages()
    by_name = {s.name: s for s in all_stages}
    build = BuildSass(args.build_dir) if "sass" in wanted else None
    try:
        peaks = WgmmaPeaks(args.ceilings_csv) if "results" in wanted else None
    except (OSError, KeyError, ValueError) as e:
        print("gen_docs.py: %s: %s" % (shown_path(args.ceilings_csv), e), file=sys.stderr)
        return 2

    pages = []           # (path, [(section, body or None)], freshness that could not be told)
    pinned_results = {}  # path -> (results, Freshness), each pinned CSV read once
    default_freshness = Freshness(results[0] if results else None)
    for stage in all_stages:
        parent = by_name.get(stage.parent) if stage.parent else None
        if stage.parent and parent is None:
            problems.append("stages/%s/stage.json: parent %s is not a stage" % (stage.name, stage.parent))
            continue
        path = os.path.join(STAGE_DOCS, stage.name + ".md")
        if not os.path.exists(path):
            problems.append("%s: missing (every stage needs a page)" % shown_path(path))
            continue
        page_csv, page_results, freshness = args.csv, results, default_freshness
        with open(path, encoding="utf-8") as f:
            text = f.read()
        pinned = PINNED_CSV.search(text)
        if pinned and "results" in wanted:
            page_csv = os.path.join(REPO, pinned.group(1))
            try:
                if page_csv not in pinned_results:
                    pinned_csv_results = read_results(page_csv)
                    pinned_results[page_csv] = (pinned_csv_results,
                                                Freshness(pinned_csv_results[0] if pinned_csv_results else None))
                page_results, freshness = pinned_results[page_csv]
            except (DocError, OSError) as e:
                problems.append("%s: %s" % (shown_path(path), e))
                continue
            if page_results is None:
                problems.append("%s: pinned CSV %s does not exist" % (shown_path(path), pinned.group(1)))
                continue
        sections = []
        if "diff" in wanted:
            sections.append(("diff", diff_section(stage.name, stage.parent)))
        if "results" in wanted:
            sections.append(("results", results_section(stage.name, stage.parent, page_results, page_csv, freshness,
                                                        hopper=stage.target == "sm_90a", peaks=peaks)))
        if "sass" in wanted:
            body, why_not = sass_section(stage, parent, build)
            recorded = SASS_BUILD.search(section_body(text, "sass") or "")
            if args.check and body is not None and recorded and recorded.group(1) != build.facts:
                body, why_not = None, "the page's SASS is from %s, this build is %s" % (recorded.group(1), build.facts)
            if body is None:
                sass_skipped.append((os.path.basename(path), why_not))
            sections.append(("sass", body))
        pages.append((path, sections, freshness.unknown if "results" in wanted and page_results else None))
    if "ceilings" in wanted:
        # docs/ceilings.md's table, from the microbenchmark CSV (scripts/microbench.sh).
        pages.append((CEILINGS_PAGE, [("ceilings", ceilings_doc.ceilings_section(args.ceilings_csv))], None))
    if "headline" in wanted:
        if os.path.exists(PERF_LOG):
            pages.append((PERF_LOG, [("headline", headline_section([s.name for s in all_stages], results, args.csv,
                                                                   default_freshness))],
                          default_freshness.unknown if results else None))
        else:
            problems.append("%s: missing" % shown_path(PERF_LOG))
    known = {s.name + ".md" for s in all_stages}
    if os.path.isdir(STAGE_DOCS):
        for f in sorted(os.listdir(STAGE_DOCS)):
            if f.endswith(".md") and f not in known:
                problems.append("%s: no stages/%s/stage.json" % (shown_path(os.path.join(STAGE_DOCS, f)), f[:-3]))

    for path, sections, freshness_unknown in pages:
        with open(path, encoding="utf-8") as f:
            old = f.read()
        new = old
        try:
            for name, body in sections:
                if body is None:
                    if section_body(new, name) is None:
                        raise DocError("%s: needs one '<!-- %s:begin -->' and one '<!-- %s:end -->'"
                                       % (shown_path(path), name, name))
                    continue
                new = replace_section(new, name, body, path)
        except DocError as e:
            problems.append(str(e))
            continue
        if new == old:
            continue
        if args.check:
            if freshness_unknown:
                # Where git cannot tell, the page's own statement is kept; everything else must match.
                unverified_freshness.append((os.path.basename(path), freshness_unknown))
                if FRESHNESS_LINE.sub("", new) == FRESHNESS_LINE.sub("", old):
                    continue
            stale.append(shown_path(path))
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            updated.append(shown_path(path))

    for msg in problems:
        print("gen_docs.py: %s" % msg, file=sys.stderr)
    skipped_pages = {}  # why -> pages, so that one reason for every page is said once
    for page, why in sass_skipped:
        skipped_pages.setdefault(why, []).append(page)
    for why, skipped in skipped_pages.items():
        print("gen_docs.py: SASS section %s in %s: %s" % ("not checked" if args.check else "left as it is",
                                                        ", ".join(skipped), why))
    unverified_pages = {}
    for page, why in unverified_freshness:
        unverified_pages.setdefault(why, []).append(page)
    for why, unverified in unverified_pages.items():
        print("gen_docs.py: whether the measured source changed since the CSV's revision is not checked in %s: %s"
              % (", ".join(unverified), why))
    source = "%s; sections %s" % (shown_path(args.csv) if results else "no CSV at %s" % shown_path(args.csv),
                                  ",".join(args.sections))
    if args.check:
        for path in stale:
            print("gen_docs.py: stale generated section(s) in %s (run python3 tools/gen_docs.py%s)"
                  % (path, " --build-dir %s" % shown_path(args.build_dir) if "sass" in wanted else ""),
                  file=sys.stderr)
        if stale or problems:
            return 1
        if sass_skipped:
            print("gen_docs.py: SKIP: %d SASS section(s) not checked; everything else checked is up to date (%s)"
                  % (len(sass_skipped), source))
            return SKIP
        print("gen_docs.py: all generated sections are up to date (%s)" % source)
        return 0
    print("gen_docs.py: %d page(s) updated, %d unchanged (%s)" % (len(updated), len(pages) - len(updated), source))
    for path in updated:
        print("  " + path)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
