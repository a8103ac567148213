#!/usr/bin/env python3
"""Regenerates the generated sections of the docs from the source tree, the build and the benchmark CSV.

    python3 tools/gen_docs.py [--build-dir build] [--csv PATH] [--backward-csv PATH] [--decode-csvs GLOB]
                              [--ceilings-csv PATH]
                              [--sections diff,results,sass,headline,ceilings] [--check]

The stages are those of tools/stages.py (stages/<track>/NN_name/stage.json); each page compares a
stage with its declared parent. Sections (everything between the markers is replaced; the rest of
each page is hand-written):

  docs/stages/<track>/NN_name.md
    <!-- diff:begin --> ... <!-- diff:end -->                                      (section "diff")
        a diffstat of stages/<parent's folder>/ -> stages/<track>/NN_name/ (per file, lines added
        and removed, as `diff -ru` counts them) and the command that shows the whole diff,
        `bash scripts/diff_stage.sh <id>`; for a stage without a parent, its files
    <!-- results:begin --> ... <!-- results:end -->                                (section "results")
        from the benchmark CSV, one compact table of the headline rows (fp16 and bf16, head_dim
        128 and 64, every S): this stage's TFLOP/s, its time against its parent's in the same run
        and its % of FA2 and of cuDNN; a line per other series the stage has rows in (causal,
        grouped-query, any length, ALiBi: tools/results_csv.py SERIES); where the numbers come from
        (CSV, GPU, git revision, date); every table of the CSV is in docs/results.md
        (tools/plot.py). A backward-track page (a stage that declares a backward pass) shows the
        backward benchmark's CSV instead (--backward-csv, default plots/results/backward_latest.csv,
        tools/backward_bench.py): a row per dtype, head_dim and S of the stage (non-causal and causal
        in one cell where both have results), its TFLOP/s, its time against its parent's where the
        parent has rows in that CSV, its % of FA2's and cuDNN's backward and, where the CSV has
        <stage>+deterministic rows, that mode's time against the default mode's. A decoding-track
        page shows the decoding benchmark's CSVs instead (--decode-csvs, tools/decode_docs.py): the
        latest that has rows of the stage and its parent, a row per shape at seq_kv 16k (time and %
        of the read bandwidth of the parent, the stage, FA2 and cuDNN) and a line per other length
    <!-- sass:begin --> ... <!-- sass:end -->                                      (section "sass")
        static SASS counts of the main K/V loop of this stage's and its parent's fp16, head_dim 128
        kernel (sm_90 code; sm_90a for sm_90a stages), with registers and spills, disassembled from
        the stage libraries of --build-dir (tools/sass.py). The section records the CUDA compiler
        version it came from (<!-- sass-build: ... -->)
  docs/ceilings.md
    <!-- ceilings:begin --> ... <!-- ceilings:end -->                              (section "ceilings")
        the measured hardware ceilings of --ceilings-csv (tools/ceilings_doc.py)
  docs/performance.md, where it has the markers
    <!-- headline:begin --> ... <!-- headline:end -->                             (section "headline")
        per track, every stage's TFLOP/s at S = 4096 and its time against its parent's, for each
        dtype and head_dim of the CSV

The CSV is what tools/bench.py writes (default plots/results/latest.csv), read with
tools/results_csv.py. Without a CSV the results sections say so (the backward track's: without
the backward CSV). The ceilings CSV is what scripts/microbench.sh writes (default
plots/results/ceilings_latest.csv).

Without cuobjdump/nvdisasm, or without the stage libraries (or their sm_90 code) in --build-dir,
the SASS sections cannot be regenerated: writing leaves them as they are and says so; --check
reports them as not checked. A build by another CUDA compiler version than the one a page's SASS
section records is not compared either (its code differs for reasons no page
discusses): regenerate with that build to adopt it.

--check writes nothing. Exit status: 0 if every requested section is up to date; 1 if any differs
from what the tree, the build and the CSV give now (or a stage has no page, a page lacks its
markers, a page under docs/stages/ is of no stage); 77 if nothing is stale but a requested SASS
section could not be checked (CTest reports 77 as skipped). Standard library only.
"""

import argparse
import collections
import difflib
import glob
import os
import re
import sys

import ceilings_doc  # the ceilings CSV's reader and docs/ceilings.md's table (tools/ceilings_doc.py)
import decode_docs  # the decoding track's results sections, from the decoding benchmark's CSVs
import results_tables
import sass
import stages as stage_declarations
from cli_util import REPO, shown_path
from results_csv import statistic_word, timing_of
from results_tables import ResultsError, load_results, make_groups, seq_label, source_line

STAGE_DOCS = os.path.join(REPO, "docs", "stages")
PERFORMANCE_PAGE = os.path.join(REPO, "docs", "performance.md")
RESULTS_PAGE = os.path.join(REPO, "docs", "results.md")
DEFAULT_CSV = os.path.join(REPO, "plots", "results", "latest.csv")
DEFAULT_BUILD = os.path.join(REPO, "build")
CEILINGS_PAGE = os.path.join(REPO, "docs", "ceilings.md")
DEFAULT_CEILINGS_CSV = ceilings_doc.DEFAULT_CSV
SECTIONS = ("diff", "results", "sass", "headline", "ceilings")
SKIP = 77
NO_RESULTS = "No benchmark results committed yet; run `bash scripts/run_all.sh`."
SASS_COLUMNS = ["HMMA", "HGMMA", "LDSM", "LDSM.T", "LDGSTS", "LDG", "STS", "MUFU.EX2", "FMUL", "FFMA", "FADD", "FMNMX",
                "SHFL", "BAR.SYNC", "LDL", "STL", "total"]
SASS_DTYPE, SASS_HEAD_DIM = "fp16", 128
SASS_BUILD = re.compile(r"<!-- sass-build: (.*?) -->")
# A page may not take its numbers from another CSV than the committed one (pages once could).
PINNED_CSV = re.compile(r"<!-- results-csv: (\S+) -->")


class DocError(Exception):
    pass


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def files_of(folder):
    """The files of a folder (relative paths, sorted), as `diff -ru` sees them."""
    out = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        for f in sorted(filenames):
            if f.startswith(".") or f.endswith((".pyc", "~")):
                continue
            out.append(os.path.relpath(os.path.join(dirpath, f), folder))
    return sorted(out)


def page_link(stage, from_page):
    """A stage's id linked to its page, relative to another page."""
    return "[`%s`](%s)" % (stage.name, os.path.relpath(os.path.join(REPO, stage.page),
                                                       os.path.dirname(from_page)).replace(os.sep, "/"))


# ------------------------------------------------------------------------------------------------
# The diff section


def diffstat(old_folder, new_folder):
    """[(file, lines added, lines removed, 'new'/'removed'/None)] of the files that differ."""
    out = []
    for f in sorted(set(files_of(old_folder)) | set(files_of(new_folder))):
        old_path, new_path = os.path.join(old_folder, f), os.path.join(new_folder, f)
        old = read_lines(old_path) if os.path.exists(old_path) else []
        new = read_lines(new_path) if os.path.exists(new_path) else []
        added = removed = 0
        for line in difflib.unified_diff(old, new, n=0, lineterm=""):
            if line.startswith("+") and not line.startswith("+++"):
                added += 1
            elif line.startswith("-") and not line.startswith("---"):
                removed += 1
        if added or removed:
            state = "new" if not os.path.exists(old_path) else "removed" if not os.path.exists(new_path) else None
            out.append((f, added, removed, state))
    return out


def diff_section(stage, parent):
    """The diff section of a stage page: its diffstat against its parent and the command that shows
    the diff (stage and parent: stages.Stage; parent None for a stage without one)."""
    if parent is None:
        lines = ["`%s` has no parent to diff against. Its files:" % stage.name, ""]
        for f in files_of(stage.folder):
            lines.append("- `%s/%s` (%d lines)" % (stage.path, f, len(read_lines(os.path.join(stage.folder, f)))))
        return "\n".join(lines)
    command = "`bash scripts/diff_stage.sh %s` shows the whole diff against its parent `%s` (`diff -ru %s %s`)" % (
        stage.name, parent.name, parent.path, stage.path)
    changed = diffstat(parent.folder, stage.folder)
    if not changed:
        return "`%s/` and its parent's `%s/` are identical; %s." % (stage.path, parent.path, command.split(" shows")[0])
    lines = [command + ":", "", "| file | lines added | lines removed |", "|---|---:|---:|"]
    for f, added, removed, state in changed:
        lines.append("| `%s`%s | %d | %d |" % (f, " (%s)" % state if state else "", added, removed))
    lines.append("| %d file%s changed | %d | %d |" % (len(changed), "" if len(changed) == 1 else "s",
                                                     sum(c[1] for c in changed), sum(c[2] for c in changed)))
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# The results sections


def status_word(row):
    if row is None:
        return "-"
    status = (row.get("status") or "").strip()
    if status.startswith("unavailable"):
        return "n/a"
    return status.split(":")[0] or "-"


def pct(value):
    return "%.1f%%" % value if value is not None else "-"


# The words of a series' line on a stage page.
SERIES_WORDS = {"causal": "Causal (FA2 and cuDNN with is_causal=True)",
                "gqa": "Grouped-query (FA2 and cuDNN with enable_gqa=True)",
                "any_length": "Any length (TFLOP/s at S = 1000, 4000 against the headline length)",
                "alibi": "ALiBi (against itself without slopes)"}


def series_lines(stage, declared, groups, timing, page):
    """One line per series other than the headline that has rows of this stage (its range of % of
    FA2 and cuDNN and against its parent; or against its own headline rows)."""
    page_dir = os.path.dirname(page)
    out = []
    for series in collections.OrderedDict.fromkeys(g.series for g in groups if g.series != "headline"):
        mine = [g for g in groups if g.series == series]
        if not any(g.get(stage.name, s) is not None for g in mine for s in g.seqs):
            continue
        if series in ("any_length", "alibi"):
            text = results_tables.versus_headline_sentence(stage.name, series, groups, declared, page_dir, timing)
        else:
            text = results_tables.stage_sentence(stage.name, mine, declared, page_dir, parent_if_measured=True)
        name = results_tables.stage_link(stage.name, declared, page_dir)
        out.append(text.replace("- %s: " % name, "- %s: " % SERIES_WORDS.get(series, series), 1))
    return out


def results_section(stage, declared, results, csv_path, page):
    """The results section of a stage page (stage: stages.Stage; declared: {id: Stage}; results:
    (meta, groups) of the CSV)."""
    if results is None:
        return NO_RESULTS
    meta, groups = results
    headline = [g for g in groups if g.series == "headline"]
    parent = declared.get(stage.parent) if stage.parent else None
    cells = [(g, s) for g in headline for s in g.seqs if g.get(stage.name, s) is not None]
    if not cells:
        return "The benchmark CSV `%s` has no rows for `%s`; run `bash scripts/run_all.sh`." % (
            shown_path(csv_path), stage.name)
    timing = timing_of(meta)
    stat = statistic_word(timing)
    same = "same rounds" if timing == "rounds" else "same run"
    shape = cells[0][0]
    lines = ["Non-causal, batch %d, heads %d; each time the %s over the timed %s, the parent's, FA2's and cuDNN's "
             "from the %s." % (shape.batch, shape.heads, stat, "rounds" if timing == "rounds" else "launches", same), ""]
    head = "| dtype, head_dim | S | TFLOP/s |"
    rule = "|---|---:|---:|"
    if parent is not None:
        head += " time vs `%s` |" % parent.name
        rule += "---:|"
    lines += [head + " % of FA2 | % of cuDNN |", rule + "---:|---:|"]
    last = None
    for g, s in cells:
        row = g.get(stage.name, s)
        config = "%s, %d" % (g.dtype, g.head_dim) if g.key != last else ""
        last = g.key
        if row["ms"] is None:
            text = "| %s | %s | %s |" % (config, seq_label(s), status_word(row))
            text += " - |" * (3 if parent is not None else 2)
            lines.append(text)
            continue
        text = "| %s | %s | %.1f |" % (config, seq_label(s), row["tf"]) if row["tf"] is not None else \
            "| %s | %s | - |" % (config, seq_label(s))
        if parent is not None:
            theirs = g.get(parent.name, s)
            text += " %s |" % (results_tables.change_cell(row["ms"], theirs["ms"])
                               if theirs is not None and theirs["ms"] is not None else status_word(theirs))
        lines.append(text + " %s | %s |" % (pct(row["pct"]), pct(row["pct_cudnn"])))
    if parent is not None:
        lines += ["", "Time vs parent = this %s / the parent's - 1 (negative: faster)." % stat]
    more = series_lines(stage, declared, groups, timing, page)
    if more:
        lines += [""] + more
    lines += ["", "Every shape and series: [docs/results.md](%s). %s" % (
        os.path.relpath(RESULTS_PAGE, os.path.dirname(page)).replace(os.sep, "/"), source_line(meta, csv_path))]
    return "\n".join(lines)


# The backward track's pages: their results from the backward benchmark's CSV (tools/backward_bench.py).
NO_BACKWARD_RESULTS = "No backward benchmark results committed yet; run `%s`." % results_tables.BACKWARD_COMMAND
CAUSAL_WORDS = {0: "non-causal", 1: "causal"}


def backward_cell(row):
    """A stage's TFLOP/s in its backward table, or why it has none."""
    if row is None:
        return "-"
    if row["ms"] is None or row["tf"] is None:
        return status_word(row)
    return "%.1f" % row["tf"]


def change_or_dash(mine, theirs):
    """Time of `mine` against `theirs` ('-3.2%'); why `theirs` has no time; '-' where `mine` has none."""
    if mine is None or mine["ms"] is None:
        return "-"
    if theirs is None or theirs["ms"] is None:
        return status_word(theirs)
    return results_tables.change_cell(mine["ms"], theirs["ms"])


def backward_results_section(stage, declared, backward, page):
    """The results section of a backward-track page: one row per (dtype, head_dim, S) of the stage's
    rows in the backward CSV, its TFLOP/s, its time against its parent's (where the parent has rows
    in that CSV), its % of FA2's and cuDNN's backward and, where the CSV has the stage's
    <stage>+deterministic rows, that mode's time against the default mode's; non-causal and causal
    in one cell ('a / b') where both have results; a causal setting without any (every row
    'unsupported') is a sentence under the table."""
    if backward is None:
        return NO_BACKWARD_RESULTS
    mine = backward.rows_of(stage.name)
    deterministic = stage.name + results_tables.DETERMINISTIC_SUFFIX
    if not mine:
        return "The backward benchmark CSV `%s` has no rows for `%s`; run `%s`." % (
            shown_path(backward.path), stage.name, results_tables.BACKWARD_COMMAND)
    parent = declared.get(stage.parent) if stage.parent and backward.has(stage.parent) else None
    with_mode = backward.has(deterministic)
    notes = []
    shown = []  # the causal settings with a result that is not 'unsupported'
    for causal in sorted({r["case"].causal for r in mine}):
        rows = [r for r in mine if r["case"].causal == causal]
        if all(r["status"].startswith("unsupported") for r in rows):
            why = rows[0]["status"].partition(":")[2].strip()
            notes.append("%s: unsupported%s." % (CAUSAL_WORDS.get(causal, "causal %d" % causal).capitalize(),
                                                  " (%s)" % why if why else ""))
        else:
            shown.append(causal)
    shapes = sorted({r["case"]._replace(causal=0) for r in mine if r["case"].causal in shown},
                    key=lambda c: (c.dtype != results_tables.BACKWARD_HEADLINE_DTYPE, c.dtype, -c.head_dim, c.batch,
                                   c.heads, c.seq_q, c.seq_kv))
    sizes = sorted({(c.batch, c.heads) for c in shapes})
    stat = backward.statistic
    if not shapes:  # every row 'unsupported'
        return "\n".join(notes + ["", source_line(backward.meta, backward.path)])
    what = "non-causal" if shown == [0] else "causal" if shown == [1] else "each cell non-causal / causal"
    lines = ["The backward pass (dQ, dK, dV) as `%s` times it, %sseq_q = seq_kv = S, %s; TFLOP/s count 2.5x the "
             "forward's FLOPs%s; each time the %s over the timed rounds, %s from the same rounds." % (
                 results_tables.BACKWARD_COMMAND, "batch %d, heads %d, " % sizes[0] if len(sizes) == 1 else "", what,
                 " (half for causal)" if 1 in shown else "", stat,
                 "the parent's, FA2's and cuDNN's backward" if parent is not None else "FA2's and cuDNN's backward"), ""]
    head = "| dtype, head_dim | S | TFLOP/s |"
    rule = "|---|---:|---:|"
    if parent is not None:
        head += " time vs `%s` |" % parent.name
        rule += "---:|"
    head += " % of FA2 | % of cuDNN |"
    rule += "---:|---:|"
    if with_mode:
        head += " deterministic: time vs default |"
        rule += "---:|"
    lines += [head, rule]
    last = None
    for shape in shapes:
        key = (shape.dtype, shape.head_dim, shape.batch, shape.heads)
        config = "%s, %d" % key[:2] + (", batch %d, heads %d" % key[2:] if len(sizes) > 1 else "")
        cells = collections.OrderedDict((name, []) for name in ("tf", "parent", "fa2", "cudnn", "mode"))
        for causal in shown:
            case = shape._replace(causal=causal)
            row = backward.get(stage.name, case)
            timed = row is not None and row["ms"] is not None
            cells["tf"].append(backward_cell(row))
            cells["parent"].append(change_or_dash(row, backward.get(parent.name, case)) if parent is not None else "")
            cells["fa2"].append(pct(row["pct"]) if timed else "-")
            cells["cudnn"].append(pct(row["pct_cudnn"]) if timed else "-")
            mode = backward.get(deterministic, case)  # '-' where the default mode has no time to compare with
            cells["mode"].append(status_word(mode) if mode is not None and mode["ms"] is None
                                 else change_or_dash(mode, row) if timed else "-")
        wanted = ["tf"] + (["parent"] if parent is not None else []) + ["fa2", "cudnn"] + (["mode"] if with_mode else [])
        lines.append("| %s | %s | %s |" % (config if key != last else "", seq_label((shape.seq_q, shape.seq_kv)),
                                          " | ".join(" / ".join(cells[name]) for name in wanted)))
        last = key
    said = []
    if parent is not None:
        said.append("time vs parent = this %s / the parent's - 1 (negative: faster)" % stat)
    if with_mode:
        said.append("deterministic: the stage's deterministic mode (`%s`) against its default mode, the same "
                    "rounds" % deterministic)
    if said:
        text = "; ".join(said)
        lines += ["", text[0].upper() + text[1:] + "."]
    if notes:
        lines += [""] + notes
    lines += ["", "Every backward stage at the track's headline case: [docs/results.md](%s). %s" % (
        os.path.relpath(RESULTS_PAGE, os.path.dirname(page)).replace(os.sep, "/") + "#backward-track",
        source_line(backward.meta, backward.path))]
    return "\n".join(lines)


def headline_section(declared, results, csv_path):
    """docs/performance.md's table: per track, each stage's TFLOP/s at S = 4096 (or the CSV's
    length nearest it) and its time against its parent's, one column per dtype and head_dim."""
    if results is None:
        return NO_RESULTS
    meta, groups = results
    headline = [g for g in groups if g.series == "headline" and g.kv_heads == g.heads and not g.causal]
    if not headline:
        return "The benchmark CSV `%s` has no headline rows; run `bash scripts/run_all.sh`." % shown_path(csv_path)
    seqs = {g.key: min(g.seqs, key=lambda s: (abs(s[0] - results_tables.HEADLINE_SEQ), s)) for g in headline}
    lengths = sorted({seq_label(s) for s in seqs.values()})
    out = ["TFLOP/s at S = %s (batch %d, heads %d, non-causal) and, in brackets, the time against the parent's "
           "in the same %s (negative: faster)." % (" / ".join(lengths), headline[0].batch, headline[0].heads,
                                                   "rounds" if timing_of(meta) == "rounds" else "run")]
    for track in results_tables.track_list(declared):
        names = results_tables.track_stages(track, declared)
        if not names:
            continue
        out += ["", "**%s**" % track.title, "",
                "| stage | " + " | ".join("%s, d%d" % (g.dtype, g.head_dim) for g in headline) + " |",
                "|---|" + "---:|" * len(headline)]
        for name in names:
            cells = []
            for g in headline:
                row, s = g.get(name, seqs[g.key]), seqs[g.key]
                if row is None or row["ms"] is None or row["tf"] is None:
                    cells.append(status_word(row))
                    continue
                text = "%.1f" % row["tf"]
                parent = declared[name].parent
                theirs = g.get(parent, s) if parent else None
                if theirs is not None and theirs["ms"] is not None:
                    text += " (%s)" % results_tables.change_cell(row["ms"], theirs["ms"])
                cells.append(text)
            out.append("| %s | %s |" % (page_link(declared[name], PERFORMANCE_PAGE), " | ".join(cells)))
    return "\n".join(out + ["", source_line(meta, csv_path)])


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
    p.add_argument("--backward-csv", default=results_tables.DEFAULT_BACKWARD_CSV,
                   help="the backward benchmark's CSV (tools/backward_bench.py) whose rows the backward track's "
                        "pages show (default plots/results/backward_latest.csv)")
    p.add_argument("--decode-csvs", default=decode_docs.DEFAULT_PATTERN,
                   help="the decoding benchmark's CSVs (tools/decode_bench.py), a glob pattern: each decoding-track "
                        "page shows the latest that has rows of its stage and its parent (default "
                        "plots/results/decode_*.csv)")
    p.add_argument("--ceilings-csv", default=DEFAULT_CEILINGS_CSV,
                   help="microbenchmark CSV of the ceilings (default plots/results/ceilings_latest.csv): "
                        "docs/ceilings.md's table")
    p.add_argument("--build-dir", default=DEFAULT_BUILD,
                   help="CMake build folder whose stage libraries the SASS sections come from (default build)")
    p.add_argument("--sections", type=section_list, default=list(SECTIONS),
                   help="which sections to regenerate or check (default all: %s)" % ",".join(SECTIONS))
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if a section is stale, 77 if only SASS sections could not be checked")
    args = p.parse_args(argv)
    wanted = set(args.sections)

    problems, updated, stale, sass_skipped = [], [], [], []
    try:
        results = read_results(args.csv)
        backward = results_tables.load_backward(args.backward_csv) if "results" in wanted else None
        decode_runs = decode_docs.load_runs(args.decode_csvs) if "results" in wanted else []
    except (DocError, OSError, ResultsError) as e:
        print("gen_docs.py: %s" % e, file=sys.stderr)
        return 2
    all_stages = stage_declarations.all_stages()
    declared = {s.name: s for s in all_stages}
    build = BuildSass(args.build_dir) if "sass" in wanted else None

    pages = []  # (path, [(section, body or None)])
    for stage in all_stages:
        parent = declared.get(stage.parent) if stage.parent else None
        if stage.parent and parent is None:
            problems.append("%s/stage.json: parent %s is not a stage" % (stage.path, stage.parent))
            continue
        path = os.path.join(REPO, stage.page)
        if not os.path.exists(path):
            problems.append("%s: missing (every stage needs a page)" % stage.page)
            continue
        with open(path, encoding="utf-8") as f:
            text = f.read()
        pinned = PINNED_CSV.search(text)
        if pinned:
            problems.append("%s: '%s': a page's numbers come from the committed CSV (%s), pinned to no other; "
                            "remove the line" % (stage.page, pinned.group(0), shown_path(DEFAULT_CSV)))
        sections = []
        if "diff" in wanted:
            sections.append(("diff", diff_section(stage, parent)))
        if "results" in wanted:
            if stage.backward_features is not None:  # the backward track: the backward benchmark's rows
                sections.append(("results", backward_results_section(stage, declared, backward, path)))
            elif stage.track == "decode":  # the decoding track: the decoding benchmark's rows
                sections.append(("results", decode_docs.results_section(stage.name, stage.parent, decode_runs)))
            else:
                sections.append(("results", results_section(stage, declared, results, args.csv, path)))
        if "sass" in wanted:
            body, why_not = sass_section(stage, parent, build)
            recorded = SASS_BUILD.search(section_body(text, "sass") or "")
            if args.check and body is not None and recorded and recorded.group(1) != build.facts:
                body, why_not = None, "the page's SASS is from %s, this build is %s" % (recorded.group(1), build.facts)
            if body is None:
                sass_skipped.append((stage.page[len("docs/stages/"):], why_not))
            sections.append(("sass", body))
        pages.append((path, sections))
    if "ceilings" in wanted:
        # docs/ceilings.md's table, from the microbenchmark CSV (scripts/microbench.sh).
        pages.append((CEILINGS_PAGE, [("ceilings", ceilings_doc.ceilings_section(args.ceilings_csv))]))
    if "headline" in wanted and os.path.exists(PERFORMANCE_PAGE):
        with open(PERFORMANCE_PAGE, encoding="utf-8") as f:
            if "<!-- headline:begin -->" in f.read():
                pages.append((PERFORMANCE_PAGE, [("headline", headline_section(declared, results, args.csv))]))
    known = {os.path.normpath(os.path.join(REPO, s.page)) for s in all_stages}
    for page in sorted(glob.glob(os.path.join(STAGE_DOCS, "**", "*.md"), recursive=True)):
        if os.path.normpath(page) not in known:
            problems.append("%s: no stage has this page (stages/<track>/NN_name/stage.json for "
                            "docs/stages/<track>/NN_name.md)" % shown_path(page))

    for path, sections in pages:
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
