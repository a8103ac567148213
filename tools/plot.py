#!/usr/bin/env python3
"""Renders a benchmark CSV (written by tools/bench.py) as plots and as the README's results.

    python3 tools/plot.py                  # again from the CSV the README names: plots/*.png and the README
    python3 tools/plot.py CSV              # from another CSV (tools/bench.py does this after a run)
    python3 tools/plot.py --check          # exit 1 if the README's results differ from that CSV

For each configuration in the CSV (dtype, head_dim, ...; slug e.g. fp16_d128) of the headline,
causal and grouped-query series (fp16_d128_causal, fp16_d128_kv8):
  <out-dir>/<slug>_hist.png    every stage's % of FlashAttention-2, one bar per sequence length,
                               labeled with its TFLOP/s; FA2 (100%) and cuDNN as horizontal lines
  <out-dir>/<slug>_tflops.png  TFLOP/s against sequence length, every stage and reference
and in the README, between its markers (tools/results_tables.py): the tables, one per
configuration, and one generated sentence per stage on where it stands; the rest of the README
is left byte for byte.

The PNGs are deterministic: run twice on the same CSV with the same matplotlib, they are the same
bytes (matplotlib's own defaults, not the user's matplotlibrc; no version or date in the file).
Plots need matplotlib (Agg backend, no display); --check and --no-plots do not.
Exit status: 0 done (or up to date), 1 stale (--check), 2 bad CSV or README, 3 no matplotlib.
"""

import argparse
import difflib
import os
import sys

from cli_util import REPO, shown_path
from results_csv import reference_label
import results_tables
from results_tables import ResultsError, seq_label

DPI = 130
# Every stage line gets its own marker and line style (hollow markers, so that lines lying on top
# of each other, as stages 1-3 and 4-6 do, still show every stage).
MARKERS = ["o", "s", "^", "v", "D", "P", "X", "*", "h", "<", ">", "p"]
LINESTYLES = ["-", "--", "-.", ":"]
LABEL_FONT_PT = 8
# How far apart (in octaves of the sequence length, over all stages) the line chart spreads the
# stages' points sideways.
DODGE_OCTAVES = 0.16


# ------------------------------------------------------------------------------------------------
# Plots


def pyplot():
    """matplotlib.pyplot with matplotlib's own defaults (not the user's matplotlibrc), for the same
    bytes on every run."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcdefaults()
    matplotlib.rcParams.update({"font.family": "DejaVu Sans", "savefig.dpi": DPI})
    import matplotlib.pyplot as plt
    return plt


def save(fig, path):
    # No 'Software' key: it would name the matplotlib version in every PNG.
    fig.savefig(path, dpi=DPI, bbox_inches="tight", metadata={"Software": None})


def provenance(meta, csv_path):
    parts = [meta.get("gpu", "unknown GPU")]
    for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "PyTorch"), ("date", ""), ("git", "git")):
        if meta.get(key):
            parts.append((label + " " if label else "") + meta[key])
    return ", ".join(parts) + "; from " + os.path.basename(csv_path)


def fmt_tflops(value):
    return "%.0f" % value if value >= 10 else "%.2g" % value


def colormap(name):
    import matplotlib
    try:
        return matplotlib.colormaps[name]
    except AttributeError:  # matplotlib < 3.5
        return pyplot().get_cmap(name)


def spread_labels(values, min_gap):
    """Positions for labels at `values`, each at least min_gap above the one below it, kept in the
    same order as the values (so the leader lines do not cross)."""
    order = sorted(range(len(values)), key=lambda i: (values[i], i))
    placed = list(values)
    for prev, cur in zip(order, order[1:]):
        placed[cur] = max(placed[cur], placed[prev] + min_gap)
    return placed


def plot_histogram(group, meta, csv_path, path):
    plt = pyplot()
    use_pct = group.have_fa2
    value_of = (lambda r: r["pct"]) if use_pct else (lambda r: r["tf"])
    n_seq = len(group.seqs)
    cmap = colormap("viridis")
    colors = [cmap(0.15 + 0.7 * i / max(1, n_seq - 1)) for i in range(n_seq)]
    width = 0.8 / max(1, n_seq)

    fig, ax = plt.subplots(figsize=(max(9.0, 1.25 * len(group.stages) + 3.5), 6.2))
    top = 0.0
    for j, seq in enumerate(group.seqs):
        ref_text = ", ".join("%s %s" % (reference_label(name, short=True), fmt_tflops(r["tf"]))
                             for name, r in ((n, group.get(n, seq)) for n in group.references) if r and r["tf"])
        label = "S=" + seq_label(seq) + (" (%s TFLOP/s)" % ref_text if ref_text else "")
        xs, heights, labels = [], [], []
        for i, stage in enumerate(group.stages):
            x = i - 0.4 + width * (j + 0.5)
            row = group.get(stage, seq)
            if row is None:
                continue
            value = value_of(row)
            if value is None:  # failed its check (or did not run): no bar, say so
                ax.text(x, 0, " failed" if row["status"].startswith("FAIL") else " no result", rotation=90,
                        ha="center", va="bottom", fontsize=7, color="#c0392b")
                continue
            xs.append(x)
            heights.append(value)
            labels.append(fmt_tflops(row["tf"]) if row["tf"] is not None else "")
        bars = ax.bar(xs, heights, width * 0.92, color=colors[j], label=label, zorder=2)
        for bar, text in zip(bars, labels):
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), " " + text, rotation=90,
                    ha="center", va="bottom", fontsize=7, color="#333333")
        top = max([top] + heights)

    # References as horizontal lines, labeled in the right margin.
    lines = []  # (y, text, color)
    if use_pct:
        ax.axhline(100.0, color="black", linewidth=1.3, zorder=3)
        lines.append((100.0, "FA2 = 100%", "black"))
    for j, seq in enumerate(group.seqs):
        for name in group.references:
            row = group.get(name, seq)
            if name == "fa2" and use_pct or row is None:
                continue
            y = row["pct"] if use_pct else row["tf"]
            if y is None:
                continue
            ax.axhline(y, color=colors[j], linestyle="--", linewidth=1.1, zorder=3)
            value = ("%.0f%%" % y) if use_pct else fmt_tflops(y)
            lines.append((y, "%s S=%s: %s" % (reference_label(name, short=True), seq_label(seq), value), colors[j]))
            top = max(top, y)
    top = top or 100.0
    y_max = top * 1.22
    ax.set_ylim(0, y_max)

    ax.set_xticks(range(len(group.stages)))
    ax.set_xticklabels([s.replace("_", "\n", 1) for s in group.stages], fontsize=9)
    ax.set_xlim(-0.6, len(group.stages) - 0.4)
    ax.set_ylabel("% of FlashAttention-2 (PyTorch), higher is better" if use_pct else "TFLOP/s")
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.grid(axis="y", color="#dddddd", zorder=0)
    ax.set_axisbelow(True)
    note = ("bar labels: TFLOP/s = %s / %s time" % (flops_formula(group), group.statistic) if use_pct
            else "FA2 reference unavailable: bars show TFLOP/s")
    ax.set_title("%s: FlashAttention-2 forward, stage by stage\n%s  (%s)"
                 % (meta.get("gpu", "unknown GPU"), group.title(), note), fontsize=11)
    ax.legend(loc="upper left", fontsize=8, frameon=True, ncol=2 if n_seq > 2 else 1)
    fig.text(0.01, 0.005, provenance(meta, csv_path), fontsize=7, color="#666666", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))

    # The margin labels go on after the layout, so that their spacing can be set in points: one
    # label line (plus a little air) apart, whatever the axis height, so that two references a
    # percent apart (cuDNN at S = 1024 and 2048) get two readable labels.
    axis_height_pt = ax.get_position().height * fig.get_size_inches()[1] * 72.0
    min_gap = y_max * (LABEL_FONT_PT * 1.45) / axis_height_pt
    placed = spread_labels([y for y, _, _ in lines], min_gap)
    for (y, text, color), y_text in zip(lines, placed):
        ax.annotate(text, xy=(1.0, y), xycoords=ax.get_yaxis_transform(), xytext=(1.03, y_text),
                    textcoords=ax.get_yaxis_transform(), fontsize=LABEL_FONT_PT, color=color, va="center",
                    annotation_clip=False,
                    arrowprops=dict(arrowstyle="-", color=color, linewidth=0.6, shrinkA=0, shrinkB=0))
    save(fig, path)
    plt.close(fig)


def plot_tflops(group, meta, csv_path, path):
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9.5, 5.8))
    # tab10 without its grey (index 7), which would look like the cuDNN line.
    palette = [c for i, c in enumerate(colormap("tab10").colors) if i != 7]
    xs_all = [seq[0] for seq in group.seqs]

    def series(impl):
        """y per sequence length, NaN where there is no result (a gap in the line, not a bridge)."""
        ys = []
        for seq in group.seqs:
            row = group.get(impl, seq)
            ys.append(row["tf"] if row is not None and row["tf"] is not None else float("nan"))
        return ys

    # Stages with nearly equal TFLOP/s (1-3, 4-6) would hide each other's markers: each stage's
    # points sit a little to the side of the true length, in the same order as the legend.
    def dodged(i):
        offset = DODGE_OCTAVES * (i - (len(group.stages) - 1) / 2.0) / max(1, len(group.stages) - 1)
        return [x * 2.0 ** offset for x in xs_all]

    for i, stage in enumerate(group.stages):
        ys = series(stage)
        failed = [seq_label(seq) for seq, y in zip(group.seqs, ys) if y != y]
        label = stage + (" (no result at S=%s)" % ", ".join(failed) if failed else "")
        color = palette[i % len(palette)]
        ax.plot(dodged(i), ys, marker=MARKERS[i % len(MARKERS)], markersize=6, markerfacecolor="none",
                markeredgewidth=1.3, linestyle=LINESTYLES[i % len(LINESTYLES)], linewidth=1.4, color=color,
                label=label)
    styles = {"fa2": dict(color="black", linestyle="-", marker="s", linewidth=2.4),
              "cudnn": dict(color="#555555", linestyle="--", marker="D", linewidth=2.0)}
    for name in group.references:
        ys = series(name)
        label = reference_label(name)
        if all(y != y for y in ys):
            label += " (unavailable)"
        style = styles.get(name, dict(color="grey", linestyle=":", marker="^", linewidth=2.0))
        ax.plot(xs_all, ys, markersize=5, label=label, **style)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs_all)
    ax.set_xticklabels([str(x) for x in xs_all])
    ax.minorticks_off()
    ax.set_xlabel(("sequence length (seq_q = seq_kv)" if all(s[0] == s[1] for s in group.seqs) else "seq_q")
                  + "; stages drawn side by side in legend order around each length")
    ax.set_ylabel("TFLOP/s (%s / %s time)" % (flops_formula(group), group.statistic))
    ax.set_ylim(bottom=0)
    ax.grid(color="#dddddd")
    ax.set_title("%s: TFLOP/s by sequence length\n%s" % (meta.get("gpu", "unknown GPU"), group.title()), fontsize=11)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8, handlelength=3.2)
    fig.text(0.01, 0.005, provenance(meta, csv_path), fontsize=7, color="#666666", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    save(fig, path)
    plt.close(fig)


def flops_formula(group):
    """The FLOP count of the group's TFLOP/s: causal rows (seq_q = seq_kv) count half."""
    return "2*B*H*S^2*D" if group.causal else "4*B*H*Sq*Skv*D"


def plot_paths(group, out_dir):
    return os.path.join(out_dir, group.slug + "_hist.png"), os.path.join(out_dir, group.slug + "_tflops.png")


# ------------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="tools/plot.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", nargs="?", default=None,
                   help="a results CSV from tools/bench.py (default: the CSV the README's results table names)")
    p.add_argument("--out-dir", default=os.path.join(REPO, "plots"), help="where the PNGs go (default plots/)")
    p.add_argument("--readme", default=os.path.join(REPO, "README.md"),
                   help="the README whose results sections are rewritten or checked (default README.md)")
    p.add_argument("--no-readme", action="store_true", help="leave every README alone (plots only)")
    p.add_argument("--no-plots", action="store_true", help="rewrite the README only (needs no matplotlib)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the README's results sections differ from what the CSV gives "
                        "(or a plot they link to is missing); needs no matplotlib")
    args = p.parse_args(argv)
    if args.no_readme and (args.check or args.csv is None):
        p.error("--no-readme needs a CSV argument and cannot be combined with --check")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        readme_text = None if args.no_readme else results_tables.read_readme(args.readme)
        csv_path = os.path.abspath(args.csv) if args.csv else results_tables.csv_named_by(args.readme, readme_text)
        meta, rows = results_tables.load_results(csv_path)
    except ResultsError as e:
        print("plot.py: %s" % e, file=sys.stderr)
        return 2
    groups = results_tables.make_groups(rows)

    if args.check:
        bodies = results_tables.readme_bodies(groups, meta, csv_path, args.readme, args.out_dir)
        expected = results_tables.replace_sections(readme_text, bodies)
        missing = [shown_path(p) for g in groups if g.plotted() for p in plot_paths(g, args.out_dir)
                   if not os.path.exists(p)]
        for path in missing:
            print("plot.py: %s is missing (run python3 tools/plot.py %s)" % (path, shown_path(csv_path)), file=sys.stderr)
        if expected != readme_text:
            diff = difflib.unified_diff(readme_text.splitlines(), expected.splitlines(),
                                        shown_path(args.readme), "generated from " + shown_path(csv_path), lineterm="")
            print("\n".join(list(diff)[:80]), file=sys.stderr)
            print("plot.py: the results in %s differ from %s (above: what the CSV gives); run python3 tools/plot.py %s"
                  % (shown_path(args.readme), shown_path(csv_path), shown_path(csv_path)), file=sys.stderr)
            return 1
        if missing:
            return 1
        print("plot.py: the results in %s match %s" % (shown_path(args.readme), shown_path(csv_path)))
        return 0

    if not args.no_plots:
        try:
            pyplot()
        except ImportError as e:
            print("plot.py: matplotlib is not installed (%s); install it with python3 -m pip install matplotlib, "
                  "or pass --no-plots to rewrite only the README" % e, file=sys.stderr)
            return 3
        os.makedirs(args.out_dir, exist_ok=True)
        for group in [g for g in groups if g.plotted()]:
            hist, line = plot_paths(group, args.out_dir)
            plot_histogram(group, meta, csv_path, hist)
            plot_tflops(group, meta, csv_path, line)
            print("plot.py: wrote %s and %s" % (shown_path(hist), shown_path(line)), flush=True)
    if readme_text is not None:
        bodies = results_tables.readme_bodies(groups, meta, csv_path, args.readme, args.out_dir)
        updated = results_tables.replace_sections(readme_text, bodies)
        if updated != readme_text:
            with open(args.readme, "w", encoding="utf-8", newline="") as f:
                f.write(updated)
            print("plot.py: rewrote the results in %s from %s" % (shown_path(args.readme), shown_path(csv_path)))
        else:
            print("plot.py: the results in %s were already up to date" % shown_path(args.readme))
    return 0


if __name__ == "__main__":
    sys.exit(main())
