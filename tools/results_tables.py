"""A results CSV as the README shows it: one table per configuration, and the sentences that say
where each stage stands, both generated between markers in the README and checkable against it.

    <!-- results-table:begin -->   ... <!-- results-table:end -->     the tables (and which CSV)
    <!-- results-summary:begin --> ... <!-- results-summary:end -->   per stage: % of FA2, and
                                                                      faster/slower than its parent where

tools/plot.py is the command (it also renders the plots from the same groups); this module needs
no matplotlib, so the README check runs anywhere. Standard library only.
"""

import collections
import os
import re

import stages as stage_declarations
from cli_util import REPO
from results_csv import fmt_ms, number, passed, read_results_csv, reference_label, REFERENCES

SECTIONS = ("results-table", "results-summary")
GENERATOR = "tools/plot.py"
# A change of time smaller than this (in %) is reported as neither faster nor slower: stages
# measured in one run differ by about that much when the code of the loop did not change.
SAME_TIME_PCT = 1.0


class ResultsError(Exception):
    """A CSV or README that cannot be turned into results (exit status 2 in tools/plot.py)."""


# ------------------------------------------------------------------------------------------------
# Reading and grouping


def load_results(path):
    """(meta, rows) with ints for the shape and ms/tf/pct/pct_cudnn numbers (None without a passed check)."""
    try:
        meta, rows = read_results_csv(path)
    except OSError as e:
        raise ResultsError("cannot read %s: %s" % (path, e))
    if not rows:
        raise ResultsError("%s has no result rows" % path)
    for row in rows:
        try:
            for column in ("head_dim", "batch", "heads", "kv_heads", "causal", "seq_q", "seq_kv"):
                row[column] = int(row[column])
        except ValueError:
            raise ResultsError("%s: a row has a non-integer shape: %s" % (path, row))
        ok = passed(row)  # a result without a passed check has no time, whatever a hand-edited CSV says
        row["ms"] = number(row["median_ms"]) if ok else None
        row["tf"] = number(row["tflops"]) if ok else None
        row["pct"] = number(row["pct_of_fa2"]) if ok else None
        row["pct_cudnn"] = number(row["pct_of_cudnn"]) if ok else None
    return meta, rows


class Group:
    """The results of one configuration (dtype, head_dim, batch, heads, kv_heads, causal): one
    histogram, one line chart and one README table."""

    def __init__(self, key, rows, slug):
        self.key = key
        self.dtype, self.head_dim, self.batch, self.heads, self.kv_heads, self.causal = key
        self.slug = slug
        self.seqs = sorted({(r["seq_q"], r["seq_kv"]) for r in rows})
        self.stages = list(collections.OrderedDict.fromkeys(r["impl"] for r in rows if r["kind"] == "stage"))
        refs = list(collections.OrderedDict.fromkeys(r["impl"] for r in rows if r["kind"] != "stage"))
        self.references = [r for r in REFERENCES if r in refs] + [r for r in refs if r not in REFERENCES]
        self.cell = {}
        for r in rows:
            self.cell.setdefault((r["impl"], r["seq_q"], r["seq_kv"]), r)  # the first row of a duplicate wins
        self.have_fa2 = any(self.get("fa2", s) and self.get("fa2", s)["ms"] for s in self.seqs)

    def get(self, impl, seq):
        return self.cell.get((impl, seq[0], seq[1]))

    def config(self):
        """Everything but the dtype: 'head_dim 128', plus batch/heads/causal where they vary."""
        text = "head_dim %d" % self.head_dim
        if self.kv_heads != self.heads:
            text += ", kv_heads %d" % self.kv_heads
        return text + (", causal" if self.causal else "")

    def title(self):
        return "%s, %s, batch %d, heads %d" % (self.dtype, self.config(), self.batch, self.heads)


def seq_label(seq):
    return "%d" % seq[0] if seq[0] == seq[1] else "%d/%d" % seq


def make_groups(rows):
    """One Group per configuration: the headline (fp16, head_dim 128) first, larger head_dim first."""
    by_key = collections.OrderedDict()
    for r in rows:
        key = (r["dtype"], r["head_dim"], r["batch"], r["heads"], r["kv_heads"], r["causal"])
        by_key.setdefault(key, []).append(r)
    per_dtype_dim = collections.Counter((k[0], k[1], k[4] != k[3], k[5]) for k in by_key)
    groups = []
    for key, group_rows in by_key.items():
        dtype, head_dim, batch, heads, kv_heads, causal = key
        slug = "%s_d%d" % (dtype, head_dim)
        if kv_heads != heads:
            slug += "_kv%d" % kv_heads
        if causal:
            slug += "_causal"
        if per_dtype_dim[(dtype, head_dim, kv_heads != heads, causal)] > 1:
            slug += "_b%d_h%d" % (batch, heads)
        groups.append(Group(key, group_rows, re.sub(r"[^A-Za-z0-9_.-]", "-", slug)))
    groups.sort(key=lambda g: (g.dtype != "fp16", g.dtype, g.causal, -g.head_dim, g.kv_heads != g.heads))
    return groups


def declared_stages():
    """{name: stages.Stage} of this tree (stages/*/stage.json)."""
    return stage_declarations.by_name()


# ------------------------------------------------------------------------------------------------
# The tables


def relative_link(target, readme_dir):
    return os.path.relpath(os.path.abspath(target), readme_dir).replace(os.sep, "/")


def is_hopper(stage, declared):
    return stage in declared and declared[stage].target == "sm_90a"


def table_cell(row, is_fa2=False, with_cudnn=False):
    if row is None:
        return "–"
    if row["ms"] is None:
        if row["status"].startswith("unavailable"):
            return "unavailable"
        return "**%s** (no time)" % (row["status"].split(":")[0] or "no result")
    pct = "100%" if is_fa2 else ("%.1f%%" % row["pct"] if row["pct"] is not None else "–")
    tf = "%.1f" % row["tf"] if row["tf"] is not None else "–"
    cell = "%s / %s / %s" % (fmt_ms(row["ms"]), tf, pct)
    if with_cudnn:
        cell += " / %s" % ("%.1f%%" % row["pct_cudnn"] if row["pct_cudnn"] is not None else "–")
    return cell


def stage_name_cell(stage, declared, readme_dir):
    if stage in declared:
        return "[%s](%s/)" % (stage, relative_link(declared[stage].folder, readme_dir))
    return "`%s` (not a stage of this tree)" % stage


def table_markdown(groups, meta, csv_path, readme_path, plots_dir, declared):
    readme_dir = os.path.dirname(os.path.abspath(readme_path))
    out = ["_Generated by `%s` from `%s`; do not edit by hand._" % (GENERATOR, relative_link(csv_path, readme_dir)), ""]
    facts = ["GPU: %s" % meta.get("gpu", "unknown")]
    for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "PyTorch"), ("date", "date"), ("git", "git")):
        facts.append("%s %s" % (label, meta.get(key, "unknown")))
    if meta.get("sm_clock_mhz_at_start"):
        facts.append("SM clock at start %s MHz" % meta["sm_clock_mhz_at_start"])
    out.append(", ".join(facts) + ".")
    for group in groups:
        hopper = [s for s in group.stages if is_hopper(s, declared)]
        legend = "median ms / TFLOP/s / % of FA2" + (" (sm_90a stages: / % of cuDNN)" if hopper else "")
        out += ["", "**%s** (each cell: %s)" % (group.title(), legend), ""]
        out.append("| | " + " | ".join("S=" + seq_label(s) for s in group.seqs) + " |")
        out.append("|---|" + "---:|" * len(group.seqs))
        for stage in group.stages:
            cells = [table_cell(group.get(stage, s), with_cudnn=stage in hopper) for s in group.seqs]
            out.append("| %s | %s |" % (stage_name_cell(stage, declared, readme_dir), " | ".join(cells)))
        for ref in group.references:
            cells = [table_cell(group.get(ref, s), is_fa2=ref == "fa2") for s in group.seqs]
            out.append("| %s | %s |" % (reference_label(ref), " | ".join(cells)))
        notes = collections.OrderedDict()
        for impl in group.stages + group.references:
            for s in group.seqs:
                row = group.get(impl, s)
                if row is not None and row["ms"] is None:
                    notes.setdefault("%s: %s" % (impl, row["status"][:160]), None)
        missing = [s for s in declared if s not in group.stages]
        if missing:
            notes["Stages of this tree without results in this CSV: %s." % ", ".join(missing)] = None
        for note in list(notes)[:8]:
            out += ["", "- " + note.replace("|", "\\|")]
        hist = os.path.join(plots_dir, group.slug + "_hist.png")
        line = os.path.join(plots_dir, group.slug + "_tflops.png")
        out += ["", "Plots: [%% of FA2 by stage](%s), [TFLOP/s by sequence length](%s)."
                % (relative_link(hist, readme_dir), relative_link(line, readme_dir))]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------
# The sentences


def describe_shapes(chosen, universe):
    """Words for the shapes in `chosen`, out of `universe` (both lists of (group, seq)):
    'every shape measured', or e.g. 'head_dim 128, every S; head_dim 64, S = 1024, 2048 (fp16)'."""
    chosen = set((g.key, s) for g, s in chosen)
    if chosen == set((g.key, s) for g, s in universe):
        return "every shape measured"
    configs = collections.OrderedDict()  # config text -> {dtype: [seqs of the universe]}
    for g, s in universe:
        configs.setdefault(g.config(), collections.OrderedDict()).setdefault(g.dtype, []).append((g.key, s))
    all_dtypes = list(collections.OrderedDict.fromkeys(g.dtype for g, _ in universe))
    parts = []
    for config, per_dtype in configs.items():
        selections = collections.OrderedDict()  # the chosen seqs -> dtypes that have exactly those
        for dtype, cells in per_dtype.items():
            picked = tuple(s for key, s in cells if (key, s) in chosen)
            if picked:
                every = len(picked) == len(cells)
                selections.setdefault((picked, every), []).append(dtype)
        fragments = []
        for (picked, every), dtypes in selections.items():
            text = "every S" if every else "S = " + ", ".join(seq_label(s) for s in picked)
            if dtypes != all_dtypes:
                text += " (%s)" % " and ".join(dtypes)
            fragments.append(text)
        if fragments:
            parts.append("%s, %s" % (config, " and ".join(fragments)))
    return "; ".join(parts)


def pct_range(values):
    low, high = min(values), max(values)
    return "%.1f%%" % low if "%.1f" % low == "%.1f" % high else "%.1f-%.1f%%" % (low, high)


def change_range(values):
    low, high = min(values), max(values)
    return "%+.1f%%" % low if "%.1f" % low == "%.1f" % high else "%+.1f%% to %+.1f%%" % (low, high)


def stage_sentence(stage, groups, declared, readme_dir):
    cells = [(g, s, g.get(stage, s)) for g in groups for s in g.seqs if g.get(stage, s) is not None]
    timed = [(g, s, r) for g, s, r in cells if r["ms"] is not None]
    page = os.path.join(REPO, "docs", "stages", stage + ".md")
    name = "[`%s`](%s)" % (stage, relative_link(page, readme_dir)) if os.path.exists(page) else "`%s`" % stage
    if stage not in declared:
        name += " (not a stage of this tree)"
    if not timed:
        return "- %s: no result passed its check." % name
    words = []
    with_fa2 = [(g, s, r) for g, s, r in timed if r["pct"] is not None]
    if with_fa2:
        text = "%s of FA2" % pct_range([r["pct"] for _, _, r in with_fa2])
        faster = [(g, s) for g, s, r in with_fa2 if r["pct"] > 100.0]
        if faster:
            text += ", faster than FA2 at %s" % describe_shapes(faster, [(g, s) for g, s, _ in with_fa2])
        words.append(text)
    if is_hopper(stage, declared):
        with_cudnn = [r["pct_cudnn"] for _, _, r in timed if r["pct_cudnn"] is not None]
        if with_cudnn:
            words.append("%s of cuDNN" % pct_range(with_cudnn))
    untimed = [(g, s) for g, s, r in cells if r["ms"] is None]
    if untimed:
        words.append("no time at %s (see the table)" % describe_shapes(untimed, [(g, s) for g, s, _ in cells]))
    sentence = "- %s: %s." % (name, "; ".join(words))

    parent = declared[stage].parent if stage in declared else None
    if parent:
        # Rounded as printed, so that a change shown as +1.0% is never called slower.
        pairs = [(g, s, round(100.0 * (r["ms"] / g.get(parent, s)["ms"] - 1.0), 1)) for g, s, r in timed
                 if g.get(parent, s) is not None and g.get(parent, s)["ms"] is not None]
        if not pairs:
            sentence += " Its parent `%s` has no time in this CSV to compare with." % parent
        else:
            universe = [(g, s) for g, s, _ in pairs]
            verdicts = []
            faster = [p for p in pairs if p[2] < -SAME_TIME_PCT]
            slower = [p for p in pairs if p[2] > SAME_TIME_PCT]
            for word, members in (("faster", faster), ("slower", slower)):
                if members:
                    verdicts.append("%s (time %s) at %s" % (word, change_range([c for _, _, c in members]),
                                                            describe_shapes([(g, s) for g, s, _ in members], universe)))
            if len(faster) + len(slower) < len(pairs):
                within = "within %g%%" % SAME_TIME_PCT
                verdicts.append(within + (" elsewhere" if verdicts else " at every shape measured"))
            sentence += " Against its parent `%s`: %s." % (parent, "; ".join(verdicts))
    return sentence


def summary_markdown(groups, declared, readme_path):
    readme_dir = os.path.dirname(os.path.abspath(readme_path))
    csv_stages = list(collections.OrderedDict.fromkeys(s for g in groups for s in g.stages))
    lines = ["_Generated by `%s` from the CSV of the tables above; do not edit by hand. Ranges are over "
             "every dtype, head_dim and S there; time changes of %g%% or less count as neither faster nor "
             "slower._" % (GENERATOR, SAME_TIME_PCT), ""]
    lines += [stage_sentence(stage, groups, declared, readme_dir) for stage in csv_stages]
    missing = [s for s in declared if s not in csv_stages]
    if missing:
        lines += ["", "No results in this CSV for %s." % ", ".join("`%s`" % s for s in missing)]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# The README


def markers(name):
    return "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name


def read_readme(readme_path):
    """The README's text; ResultsError unless it has each section's markers exactly once, in order."""
    try:
        with open(readme_path, encoding="utf-8", newline="") as f:
            text = f.read()
    except OSError as e:
        raise ResultsError("cannot read %s: %s" % (readme_path, e))
    for name in SECTIONS:
        begin, end = markers(name)
        if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
            raise ResultsError("%s needs exactly one '%s' followed by one '%s'; nothing was written"
                               % (readme_path, begin, end))
    return text


def replace_sections(text, bodies):
    """text with the part between each section's markers replaced by bodies[name]."""
    newline = "\r\n" if "\r\n" in text else "\n"
    for name in SECTIONS:
        begin, end = markers(name)
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + newline + bodies[name].replace("\n", newline) + newline + end + tail
    return text


def csv_named_by(readme_path, text):
    """The CSV a README's results table says it was generated from (absolute path)."""
    begin, end = markers("results-table")
    section = text.split(begin, 1)[1].split(end, 1)[0]
    found = re.search(r"_Generated by `[^`]+` from `([^`]+)`", section)
    if not found:
        raise ResultsError("%s: the results table does not name the CSV it was generated from" % readme_path)
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(readme_path)), found.group(1)))


def readme_bodies(groups, meta, csv_path, readme_path, plots_dir, declared=None):
    declared = declared_stages() if declared is None else declared
    return {"results-table": table_markdown(groups, meta, csv_path, readme_path, plots_dir, declared),
            "results-summary": summary_markdown(groups, declared, readme_path)}
