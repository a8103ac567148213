"""A results CSV as the README shows it: one table per configuration, and the sentences that say
where each stage stands, both generated between markers in the README and checkable against it.

    <!-- results-table:begin -->   ... <!-- results-table:end -->     the tables (and which CSV)
    <!-- results-summary:begin --> ... <!-- results-summary:end -->   per stage: % of FA2, and
                                                                      faster/slower than its parent where

The headline tables (non-causal, every stage) come first; after them, only where the CSV has such
rows, the other series of tools/results_csv.py: causal and grouped-query tables against FA2 and
cuDNN run the same way, the any-length table (TFLOP/s at S = 1000 / 4000 as a percentage of the
same stage's at the next headline length), and the ALiBi table (each stage against itself without
ALiBi: PyTorch's fused backends take no ALiBi). A CSV without them gives the same text as before
these series existed.

tools/plot.py is the command (it also renders the plots from the same groups); this module needs
no matplotlib, so the README check runs anywhere. Standard library only.
"""

import collections
import os
import re

import stages as stage_declarations
from cli_util import REPO
from results_csv import (fmt_ms, number, pair_lengths, passed, read_results_csv, reference_label, statistic_word,
                         time_column, timing_of, REFERENCES, SERIES)

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
            for column in ("head_dim", "batch", "heads", "kv_heads", "causal", "alibi", "seq_q", "seq_kv"):
                row[column] = int(row[column])
        except ValueError:
            raise ResultsError("%s: a row has a non-integer shape: %s" % (path, row))
        ok = passed(row)  # a result without a passed check has no time, whatever a hand-edited CSV says
        row["ms"] = number(row[time_column(timing_of(meta))]) if ok else None  # the statistic compared
        row["statistic"] = statistic_word(timing_of(meta))
        row["tf"] = number(row["tflops"]) if ok else None
        row["pct"] = number(row["pct_of_fa2"]) if ok else None
        row["pct_cudnn"] = number(row["pct_of_cudnn"]) if ok else None
    return meta, rows


# The series that get plots and a table of their own per configuration (they have references);
# any_length and alibi are compared with the same stage's headline rows in one table each.
PLOTTED_SERIES = ("headline", "causal", "gqa")


class Group:
    """The results of one configuration (series, dtype, head_dim, batch, heads, kv_heads, causal,
    alibi): one README table and, for PLOTTED_SERIES, one histogram and one line chart."""

    def __init__(self, key, rows, slug):
        self.key = key
        self.series, self.dtype, self.head_dim, self.batch, self.heads, self.kv_heads, self.causal, self.alibi = key
        self.slug = slug
        self.statistic = rows[0].get("statistic", "median")  # of every time shown (results_csv.STATISTIC)
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

    def config(self, with_series=True):
        """Everything but the dtype: 'head_dim 128', plus kv_heads/causal and (with_series) ALiBi/any
        length where they apply."""
        text = "head_dim %d" % self.head_dim
        if self.kv_heads != self.heads:
            text += ", kv_heads %d" % self.kv_heads
        text += ", causal" if self.causal else ""
        if with_series:
            text += (", ALiBi" if self.alibi else "") + (", any length" if self.series == "any_length" else "")
        return text

    def plotted(self):
        return self.series in PLOTTED_SERIES

    def title(self):
        return "%s, %s, batch %d, heads %d" % (self.dtype, self.config(), self.batch, self.heads)


def seq_label(seq):
    return "%d" % seq[0] if seq[0] == seq[1] else "%d/%d" % seq


def make_groups(rows):
    """One Group per configuration: the series in SERIES order (headline first), then the headline
    configuration (fp16, head_dim 128) first, larger head_dim first."""
    by_key = collections.OrderedDict()
    for r in rows:
        key = (r["series"], r["dtype"], r["head_dim"], r["batch"], r["heads"], r["kv_heads"], r["causal"], r["alibi"])
        by_key.setdefault(key, []).append(r)
    per_config = collections.Counter(k[:3] + (k[5] != k[4],) + k[6:] for k in by_key)
    groups = []
    for key, group_rows in by_key.items():
        series, dtype, head_dim, batch, heads, kv_heads, causal, alibi = key
        slug = "%s_d%d" % (dtype, head_dim)
        if kv_heads != heads:
            slug += "_kv%d" % kv_heads
        slug += ("_causal" if causal else "") + ("_alibi" if alibi else "")
        slug += "_any_length" if series == "any_length" else ""
        slug += "_" + series if series not in SERIES else ""  # a series this version does not know
        if per_config[key[:3] + (kv_heads != heads,) + key[6:]] > 1:
            slug += "_b%d_h%d" % (batch, heads)
        groups.append(Group(key, group_rows, re.sub(r"[^A-Za-z0-9_.-]", "-", slug)))
    series_order = list(SERIES)
    groups.sort(key=lambda g: (series_order.index(g.series) if g.series in series_order else len(series_order),
                               g.dtype != "fp16", g.dtype, g.causal, -g.head_dim, g.kv_heads != g.heads))
    return groups


def of_series(groups, series):
    return [g for g in groups if g.series == series]


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


def group_table(group, declared, readme_dir, plots_dir, expected):
    """The lines of one configuration's table: every stage of the group, then the references;
    notes for results without a time and for the `expected` stages the group lacks."""
    hopper = [s for s in group.stages if is_hopper(s, declared)]
    legend = "%s ms / TFLOP/s / %% of FA2" % group.statistic + (" (sm_90a stages: / % of cuDNN)" if hopper else "")
    out = ["", "**%s** (each cell: %s)" % (group.title(), legend), ""]
    out.append("| | " + " | ".join("S=" + seq_label(s) for s in group.seqs) + " |")
    out.append("|---|" + "---:|" * len(group.seqs))
    for stage in group.stages:
        cells = [table_cell(group.get(stage, s), with_cudnn=stage in hopper) for s in group.seqs]
        out.append("| %s | %s |" % (stage_name_cell(stage, declared, readme_dir), " | ".join(cells)))
    for ref in group.references:
        cells = [table_cell(group.get(ref, s), is_fa2=ref == "fa2") for s in group.seqs]
        out.append("| %s | %s |" % (reference_label(ref), " | ".join(cells)))
    out += notes_lines(group, group.stages + group.references, expected)
    if group.plotted():
        hist = os.path.join(plots_dir, group.slug + "_hist.png")
        line = os.path.join(plots_dir, group.slug + "_tflops.png")
        out += ["", "Plots: [%% of FA2 by stage](%s), [TFLOP/s by sequence length](%s)."
                % (relative_link(hist, readme_dir), relative_link(line, readme_dir))]
    return out


def notes_lines(group, impls, expected):
    """'- <impl>: <status>' for each result without a time, and the expected stages the group lacks."""
    notes = collections.OrderedDict()
    for impl in impls:
        for s in group.seqs:
            row = group.get(impl, s)
            if row is not None and row["ms"] is None:
                notes.setdefault("%s: %s" % (impl, row["status"][:160]), None)
    missing = [s for s in expected if s not in group.stages]
    if missing:
        notes["Stages of this tree without results in this CSV: %s." % ", ".join(missing)] = None
    out = []
    for note in list(notes)[:8]:
        out += ["", "- " + note.replace("|", "\\|")]
    return out


def declaring(declared, series):
    """The stages of this tree (registry order) that declare the feature of a series; all for the headline."""
    feature = SERIES.get(series, (None,))[0]
    return [name for name, stage in declared.items() if feature is None or feature in stage.features]


# The words that say how a CSV was timed (results_csv.timing_of): {same} is what a comparison shares,
# {partner} the headline length an any-length row is compared with (pair_lengths in rounds).
TIMING_WORDS = {
    "separate": {"same": "same run", "partner": "the next headline length", "statistic": "median"},
    "rounds": {"same": "same rounds", "partner": "the next headline length that no shorter length took",
               "statistic": "minimum"},
}

# What each series' part of the README compares, in a sentence ({heads}, {kv_heads}, {group}: from the
# rows; {same}, {partner}: TIMING_WORDS).
SERIES_INTRO = {
    "causal": "**Causal attention**, the stages that declare `causal`, at seq_q = seq_kv: TFLOP/s count half "
              "the non-causal FLOPs (2 · batch · heads · S² · head_dim, the FlashAttention papers' convention); "
              "FA2 and cuDNN run with `is_causal=True`.",
    "gqa": "**Grouped-query attention**, the stages that declare `gqa`: {heads} query heads share {kv_heads} K/V "
           "heads (query head h reads K/V head h / {group}); FA2 and cuDNN run with `enable_gqa=True`; TFLOP/s "
           "count the query heads, as for the headline.",
    "any_length": "**Any length**, the stages that declare `any_length`: lengths that are multiples of no tile, "
                  "against the same stage at {partner} (what a caller would otherwise pad to), "
                  "{same}. Each cell: TFLOP/s at that length (FLOPs of the real length) / TFLOP/s at the headline "
                  "length = the first as a % of the second (100%: the partial tiles cost nothing).",
    "alibi": "**ALiBi**, the stages that declare `alibi`: each stage with ALiBi against the same stage without it "
             "(its headline row, {same}). PyTorch's fused backends (FA2 and cuDNN) take no ALiBi slopes, so "
             "there is no library reference here. Each cell: {statistic} ms with ALiBi / its speed as a % of the speed "
             "without (100%: ALiBi costs nothing).",
}


def headline_partner(group, groups, seq, timing):
    """The headline row set and length a row of `group` at `seq` is compared with: the same
    configuration without the series' option, at seq itself (ALiBi) or, for the any-length
    comparison, at the smallest headline length >= seq; in rounds at the one it shared rounds with
    (pair_lengths). (headline group, its seq) or (None, None)."""
    for g in of_series(groups, "headline"):
        if (g.dtype, g.head_dim, g.batch, g.heads, g.kv_heads, g.causal) == \
                (group.dtype, group.head_dim, group.batch, group.heads, group.kv_heads, group.causal):
            lengths = [s for s in g.seqs if s == seq]
            if group.series == "any_length":
                headline = [s[0] for s in g.seqs if s[0] == s[1]]
                if timing == "rounds":
                    partner = pair_lengths(headline, [s[0] for s in group.seqs])[seq[0]]
                    lengths = [(partner, partner)] if partner else []
                else:
                    lengths = [(h, h) for h in headline if h >= seq[0]]
            return (g, min(lengths)) if lengths else (None, None)
    return None, None


def status_cell(row):
    if row is None:
        return "–"
    if row["status"].startswith("unavailable"):
        return "unavailable"
    return "**%s** (no time)" % (row["status"].split(":")[0] or "no result")


def any_length_cell(row, partner):
    if row is None or row["tf"] is None:
        return status_cell(row)
    if partner is None or partner["tf"] is None:
        return "%.1f / – (%s)" % (row["tf"], "no headline time" if partner is not None else "no headline row")
    return "%.1f / %.1f = %.1f%%" % (row["tf"], partner["tf"], 100.0 * row["tf"] / partner["tf"])


def alibi_cell(row, partner):
    if row is None or row["ms"] is None:
        return status_cell(row)
    if partner is None or partner["ms"] is None:
        return "%s / –" % fmt_ms(row["ms"])
    return "%s / %.1f%%" % (fmt_ms(row["ms"]), 100.0 * partner["ms"] / row["ms"])


def comparison_table(series, groups, declared, readme_dir, timing):
    """One table for every configuration of an any_length or ALiBi series: a row per (implementation,
    configuration), a column per length, each cell against the same implementation's headline row."""
    mine = of_series(groups, series)
    partners = collections.OrderedDict()  # seq -> the headline lengths it is compared with
    for g in mine:
        for seq in g.seqs:
            partners.setdefault(seq, set()).add(headline_partner(g, groups, seq, timing)[1])
    columns = []  # (seq, label): 'S=1000 (vs 1024)' where every configuration compares it with 1024
    for seq in sorted(partners):
        (partner,) = partners[seq] if len(partners[seq]) == 1 else (None,)
        shown = series == "any_length" and partner is not None and partner != seq
        columns.append((seq, "S=" + seq_label(seq) + (" (vs %s)" % seq_label(partner) if shown else "")))
    out = ["", "| | | " + " | ".join(label for _, label in columns) + " |", "|---|---|" + "---:|" * len(columns)]
    make_cell = any_length_cell if series == "any_length" else alibi_cell
    for g in mine:
        for impl in g.stages + g.references:
            name = stage_name_cell(impl, declared, readme_dir) if impl in g.stages else reference_label(impl)
            cells = []
            for seq, _ in columns:
                row = g.get(impl, seq)
                partner_group, partner_seq = headline_partner(g, groups, seq, timing)
                partner = partner_group.get(impl, partner_seq) if partner_group is not None else None
                cells.append(make_cell(row, partner) if row is not None else "–")
            config = "%s, %s, batch %d, heads %d" % (g.dtype, g.config(with_series=False), g.batch, g.heads)
            out.append("| %s | %s | %s |" % (name, config, " | ".join(cells)))
    expected = declaring(declared, series)
    measured = set(s for g in mine for s in g.stages)
    missing = [s for s in expected if s not in measured]
    notes = collections.OrderedDict()
    for g in mine:
        for note in notes_lines(g, g.stages + g.references, []):
            if note:
                notes[note] = None
    lines = [n for n in notes][:8]
    if missing:
        lines.append("- Stages of this tree that declare `%s` without results in this CSV: %s."
                     % (SERIES[series][0], ", ".join(missing)))
    for line in lines:
        out += ["", line]
    return out


def series_markdown(series, groups, declared, readme_dir, plots_dir, timing):
    """The README's part for one series other than the headline ([] without such rows)."""
    mine = of_series(groups, series)
    if not mine:
        return []
    words = dict(TIMING_WORDS[timing])
    gqa = [g for g in mine if g.kv_heads != g.heads]
    if gqa:
        words.update(heads=gqa[0].heads, kv_heads=gqa[0].kv_heads, group=gqa[0].heads // gqa[0].kv_heads)
    out = ["", SERIES_INTRO.get(series, "**%s** rows." % series).format(**words)]
    if series in ("any_length", "alibi"):
        return out + comparison_table(series, groups, declared, readme_dir, timing)
    for group in mine:
        out += group_table(group, declared, readme_dir, plots_dir, declaring(declared, series))
    return out


def table_markdown(groups, meta, csv_path, readme_path, plots_dir, declared):
    readme_dir = os.path.dirname(os.path.abspath(readme_path))
    out = ["_Generated by `%s` from `%s`; do not edit by hand._" % (GENERATOR, relative_link(csv_path, readme_dir)), ""]
    facts = ["GPU: %s" % meta.get("gpu", "unknown")]
    for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "PyTorch"), ("date", "date"), ("git", "git")):
        facts.append("%s %s" % (label, meta.get(key, "unknown")))
    if meta.get("sm_clock_mhz_at_start"):
        facts.append("SM clock at start %s MHz" % meta["sm_clock_mhz_at_start"])
    if meta.get("parts"):
        # A job run in parts: each part measured its own references; the CSV says when each ran.
        facts.append("measured in parts (%s), each with its own FA2 and cuDNN rows" % meta["parts"])
    if timing_of(meta) == "rounds":
        facts.append("timed in rounds: per shape, every implementation launched once a round in a shuffled order, "
                     "each time the minimum over the rounds ([docs/benchmarking.md](%s#the-statistic))"
                     % relative_link(os.path.join(REPO, "docs", "benchmarking.md"), readme_dir))
    out.append(", ".join(facts) + ".")
    for group in of_series(groups, "headline"):
        out += group_table(group, declared, readme_dir, plots_dir, list(declared))
    for series in [s for s in SERIES if s != "headline"] + sorted({g.series for g in groups if g.series not in SERIES}):
        out += series_markdown(series, groups, declared, readme_dir, plots_dir, timing_of(meta))
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


def tf_range(values):
    low, high = min(values), max(values)
    return "%.1f" % low if "%.1f" % low == "%.1f" % high else "%.1f-%.1f" % (low, high)


def change_range(values):
    low, high = min(values), max(values)
    return "%+.1f%%" % low if "%.1f" % low == "%.1f" % high else "%+.1f%% to %+.1f%%" % (low, high)


def stage_link(stage, declared, readme_dir):
    """A stage's name for a sentence: linked to its page where it has one."""
    page = os.path.join(REPO, "docs", "stages", stage + ".md")
    name = "[`%s`](%s)" % (stage, relative_link(page, readme_dir)) if os.path.exists(page) else "`%s`" % stage
    return name + ("" if stage in declared else " (not a stage of this tree)")


def stage_sentence(stage, groups, declared, readme_dir, parent_if_measured=False):
    """One stage's sentence over `groups`: its range of % of FA2 (and of cuDNN for sm_90a stages),
    and faster/slower than its parent; with parent_if_measured, a parent without rows in `groups`
    (a series it does not declare) is not mentioned."""
    cells = [(g, s, g.get(stage, s)) for g in groups for s in g.seqs if g.get(stage, s) is not None]
    timed = [(g, s, r) for g, s, r in cells if r["ms"] is not None]
    name = stage_link(stage, declared, readme_dir)
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
    tflops = [r["tf"] for _, _, r in timed if r["tf"] is not None]
    if not with_fa2 and tflops:
        words.append("%s TFLOP/s (no FA2 time in this CSV to compare with)" % tf_range(tflops))
    untimed = [(g, s) for g, s, r in cells if r["ms"] is None]
    if untimed:
        words.append("no time at %s (see the table)" % describe_shapes(untimed, [(g, s) for g, s, _ in cells]))
    sentence = "- %s: %s." % (name, "; ".join(words))

    parent = declared[stage].parent if stage in declared else None
    if parent_if_measured and not any(g.get(parent, s) is not None for g in groups for s in g.seqs):
        parent = None
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


SERIES_SUMMARY_HEAD = {
    "causal": "**Causal** (% of FA2 and cuDNN with `is_causal=True`; against its parent where the parent declares "
              "`causal` too):",
    "gqa": "**Grouped-query attention** (% of FA2 and cuDNN with `enable_gqa=True`; against its parent where the "
           "parent declares `gqa` too):",
    "any_length": "**Any length** (TFLOP/s at a length that is a multiple of no tile, as a % of the same stage's "
                  "at {partner}):",
    "alibi": "**ALiBi** (speed with ALiBi as a % of the same stage's without, {same}):",
}


def versus_headline_sentence(stage, series, groups, declared, readme_dir, timing):
    """Where an any_length or ALiBi stage stands against its own headline rows, in one line."""
    pairs = []  # (group, seq, % of the headline speed, time change in %)
    for g in of_series(groups, series):
        for seq in g.seqs:
            row = g.get(stage, seq)
            partner_group, partner_seq = headline_partner(g, groups, seq, timing)
            partner = partner_group.get(stage, partner_seq) if partner_group is not None else None
            if row is None or row["ms"] is None or partner is None or partner["ms"] is None:
                continue
            if series == "any_length":
                pairs.append((g, seq, 100.0 * row["tf"] / partner["tf"], None))
            else:
                pairs.append((g, seq, 100.0 * partner["ms"] / row["ms"], 100.0 * (row["ms"] / partner["ms"] - 1.0)))
    name = stage_link(stage, declared, readme_dir)
    if not pairs:
        return "- %s: no time to compare (see the table)." % name
    text = "- %s: %s" % (name, pct_range([p[2] for p in pairs]))
    if series == "any_length":
        text += " of its TFLOP/s at the headline length"
        lowest = min(pairs, key=lambda p: p[2])
        if len(pairs) > 1:
            text += "; lowest at %s, %s, S = %s" % (lowest[0].dtype, lowest[0].config(with_series=False),
                                                   seq_label(lowest[1]))
    else:
        text += " of its speed without ALiBi (time %s)" % change_range([p[3] for p in pairs])
    return text + "."


def series_summary(series, groups, declared, readme_dir, timing):
    """The lines for one series other than the headline ([] without such rows)."""
    mine = of_series(groups, series)
    if not mine:
        return []
    stages = list(collections.OrderedDict.fromkeys(s for g in mine for s in g.stages))
    lines = ["", SERIES_SUMMARY_HEAD.get(series, "**%s**:" % series).format(**TIMING_WORDS[timing]), ""]
    for stage in stages:
        if series in ("any_length", "alibi"):
            lines.append(versus_headline_sentence(stage, series, groups, declared, readme_dir, timing))
        else:
            lines.append(stage_sentence(stage, mine, declared, readme_dir, parent_if_measured=True))
    return lines


def summary_markdown(groups, declared, readme_path, timing):
    readme_dir = os.path.dirname(os.path.abspath(readme_path))
    headline = of_series(groups, "headline")
    csv_stages = list(collections.OrderedDict.fromkeys(s for g in headline for s in g.stages))
    lines = ["_Generated by `%s` from the CSV of the tables above; do not edit by hand. Ranges are over "
             "every dtype, head_dim and S there; time changes of %g%% or less count as neither faster nor "
             "slower._" % (GENERATOR, SAME_TIME_PCT), ""]
    lines += [stage_sentence(stage, headline, declared, readme_dir) for stage in csv_stages]
    missing = [s for s in declared if s not in csv_stages]
    if missing:
        lines += ["", "No results in this CSV for %s." % ", ".join("`%s`" % s for s in missing)]
    for series in [s for s in SERIES if s != "headline"] + sorted({g.series for g in groups if g.series not in SERIES}):
        lines += series_summary(series, groups, declared, readme_dir, timing)
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
            "results-summary": summary_markdown(groups, declared, readme_path, timing_of(meta))}
