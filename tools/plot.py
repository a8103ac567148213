#!/usr/bin/env python3
"""Renders a benchmark CSV (written by tools/bench.py) as plots, the README's results and
docs/results.md.

    python3 tools/plot.py                  # again from the CSV the README names
    python3 tools/plot.py CSV              # from another CSV (tools/bench.py does this after a run)
    python3 tools/plot.py --check          # exit 1 if the README or docs/results.md differ from that CSV

Writes (tools/results_tables.py says what each section holds):
  README.md, between <!-- tracks:begin --> and <!-- tracks:end -->
      per track one short table at the headline shape (fp16, head_dim 128, S = 4096) and its plot;
      the backward track's table from the backward benchmark's CSV instead (--backward-csv, default
      plots/results/backward_latest.csv, written by tools/backward_bench.py): fp16, head_dim 128,
      non-causal, its largest S; a note under it names the CSV, its GPU and the case
  docs/results.md (beside the README), between <!-- all-results:begin --> and <!-- all-results:end -->
      every table of the CSV, by track and by series (the file is created if it does not exist);
      the backward track's table as in the README
  <out-dir>/<track>.png              the README's plot of a track: TFLOP/s per stage at the headline
                                     shape (the parents from other tracks in grey), FA2 and cuDNN lines
  <out-dir>/<track>_<config>.png     per track and headline configuration (e.g. ampere_fp16_d128.png):
                                     % of FA2 per stage, one bar per sequence length, labeled with
                                     its TFLOP/s; FA2 (100%) and cuDNN as lines
  <out-dir>/<config>.png             the same for a causal or grouped-query configuration
                                     (fp16_d128_causal.png, fp16_d128_kv8.png), every stage in it
The rest of the README and of docs/results.md is left byte for byte.

    python3 tools/plot.py --decode [CSV]   # the decoding benchmark's plots (tools/decode_bench.py),
                                           # from plots/results/decode_latest.csv by default:
  <out-dir>/<dtype>_d<head_dim>_q<seq_q>[_causal].png   (out-dir plots/decode_bandwidth/): per batch
                                     (rows) and K/V heads (columns), GB/s against seq_kv for every
                                     stage and reference, the HBM read bandwidth measured in the
                                     same run as a line (its % on the right-hand axis); a stage on
                                     a paged cache is a dashed series of its own, '<stage> (paged16)

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
# The README shows a track's plot at its full width: at most about 1000 pixels.
TRACK_WIDTH_IN = 7.2
BARS_WIDTH_IN = 7.4
TRACK_COLOR = "#2e6f9e"
LABEL_FONT_PT = 8


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
    text = ", ".join(parts) + "; from " + os.path.basename(csv_path)
    # One line up to what fits under a 1000-pixel plot at this size; else the source on a line of its own.
    return text if len(text) <= PROVENANCE_LINE_CHARS else ", ".join(parts) + ";\nfrom " + os.path.basename(csv_path)


PROVENANCE_LINE_CHARS = 150


def fmt_tflops(value):
    return "%.0f" % value if value >= 10 else "%.2g" % value


def colormap(name):
    import matplotlib
    try:
        return matplotlib.colormaps[name]
    except AttributeError:  # matplotlib < 3.5
        return pyplot().get_cmap(name)


def reference_values(group, seq):
    """[(label, TFLOP/s)] of the references of a group at one length."""
    out = []
    for name in group.references:
        row = group.get(name, seq)
        if row is not None and row["tf"] is not None:
            out.append((reference_label(name, short=True), row["tf"]))
    return out


def finish(fig, ax, height_in, meta, csv_path, fontsize):
    """The legend (two columns) and the CSV's provenance under the axes, at fixed distances in
    inches whatever the figure's height; then the layout."""
    handles, labels = ax.get_legend_handles_labels()
    legend_in = 0.22 * ((len(handles) + 1) // 2) * fontsize / 8.0 if handles else 0.0
    source = provenance(meta, csv_path)
    source_in = 0.11 * source.count("\n")  # a second line of 6.5-point text
    if handles:
        fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, (0.2 + source_in) / height_in), ncol=2,
                   fontsize=fontsize, frameon=False)
    fig.text(0.01, 0.03 / height_in, source, fontsize=6.5, color="#666666", ha="left", va="bottom")
    fig.tight_layout(rect=(0, (0.25 + source_in + legend_in) / height_in, 1, 1))


def plot_track(plot, meta, csv_path, path):
    """The README's plot of a track: one horizontal bar per stage (track order, top down) of its
    TFLOP/s at one shape, the parents from other tracks first in grey; FA2 and cuDNN as lines."""
    plt = pyplot()
    group, seq = plot.group, plot.seq
    names = plot.outside + plot.stages
    height = 1.7 + 0.3 * len(names)
    fig, ax = plt.subplots(figsize=(TRACK_WIDTH_IN, height))
    ys = list(range(len(names)))[::-1]
    values, colors = [], []
    for name in names:
        row = group.get(name, seq)
        values.append(row["tf"] if row is not None and row["tf"] is not None else 0.0)
        colors.append("#b0b0b0" if name in plot.outside else TRACK_COLOR)
    ax.barh(ys, values, 0.7, color=colors, zorder=2)
    top = max(values + [v for _, v in reference_values(group, seq)] + [1.0])
    for y, name, value in zip(ys, names, values):
        row = group.get(name, seq)
        text = fmt_tflops(value) if value else ("failed" if row is not None else "no result")
        ax.text(value + top * 0.01, y, text, va="center", ha="left", fontsize=LABEL_FONT_PT, color="#333333")
    styles = {"FA2": dict(color="black", linestyle="-"), "cuDNN": dict(color="#c0392b", linestyle="--")}
    for label, value in reference_values(group, seq):
        ax.axvline(value, linewidth=1.4, zorder=3, label="%s %s TFLOP/s" % (label, fmt_tflops(value)),
                   **styles.get(label, dict(color="grey", linestyle=":")))
    ax.set_yticks(ys)
    ax.set_yticklabels([n + (" (parent)" if n in plot.outside else "") for n in names], fontsize=8)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_xlim(0, top * 1.12)
    ax.set_xlabel("TFLOP/s (%s / %s time), higher is better" % (flops_formula(group), group.statistic), fontsize=9)
    ax.grid(axis="x", color="#dddddd", zorder=0)
    ax.set_axisbelow(True)
    ax.set_title("%s\n%s" % (plot.title, meta.get("gpu", "unknown GPU")), fontsize=10)
    finish(fig, ax, height, meta, csv_path, 8)
    save(fig, path)
    plt.close(fig)


def plot_bars(plot, meta, csv_path, path):
    """docs/results.md's plot of a configuration: per stage (top down) one bar per sequence length,
    its % of FA2 (TFLOP/s without FA2), labeled with its TFLOP/s; FA2 (100%) and cuDNN per length
    as vertical lines."""
    plt = pyplot()
    group = plot.group
    names = plot.stages
    use_pct = group.have_fa2
    value_of = (lambda r: r["pct"]) if use_pct else (lambda r: r["tf"])
    n_seq = len(group.seqs)
    cmap = colormap("viridis")
    colors = [cmap(0.15 + 0.7 * i / max(1, n_seq - 1)) for i in range(n_seq)]
    slot = 0.8 / max(1, n_seq)
    height = 1.9 + len(names) * (0.13 * n_seq + 0.1)
    fig, ax = plt.subplots(figsize=(BARS_WIDTH_IN, height))
    top = 0.0
    for j, seq in enumerate(group.seqs):
        refs = ", ".join("%s %s" % (label, fmt_tflops(value)) for label, value in reference_values(group, seq))
        label = "S=%s" % seq_label(seq) + (" (%s TFLOP/s)" % refs if refs else "")
        ys, widths, texts = [], [], []
        for i, name in enumerate(names):
            y = (len(names) - 1 - i) + 0.4 - slot * (j + 0.5)
            row = group.get(name, seq)
            if row is None:
                continue
            value = value_of(row)
            if value is None:  # failed its check (or did not run): no bar, say so
                ax.text(0, y, " failed" if row["status"].startswith("FAIL") else " no result", va="center",
                        fontsize=6.5, color="#c0392b")
                continue
            ys.append(y)
            widths.append(value)
            texts.append(fmt_tflops(row["tf"]) if row["tf"] is not None else "")
        ax.barh(ys, widths, slot * 0.92, color=colors[j], label=label, zorder=2)
        for y, width, text in zip(ys, widths, texts):
            ax.text(width, y, " " + text, va="center", ha="left", fontsize=6.5, color="#333333")
        top = max([top] + widths)
    if use_pct:
        ax.axvline(100.0, color="black", linewidth=1.3, zorder=3)
    for j, seq in enumerate(group.seqs):
        row = group.get("cudnn", seq)
        if row is not None and (row["pct"] if use_pct else row["tf"]):
            value = row["pct"] if use_pct else row["tf"]
            ax.axvline(value, color=colors[j], linestyle="--", linewidth=1.0, zorder=3)
            top = max(top, value)
    ax.set_xlim(0, (top or 100.0) * 1.15)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([n + (" (parent)" if n in plot.outside else "") for n in names][::-1], fontsize=8)
    ax.set_xlabel(("%% of FlashAttention-2 (solid line; cuDNN dashed, per S); bar labels: TFLOP/s = %s / %s time"
                   % (flops_formula(group), group.statistic)) if use_pct else "TFLOP/s (no FA2 time in this CSV)",
                  fontsize=8)
    ax.grid(axis="x", color="#dddddd", zorder=0)
    ax.set_axisbelow(True)
    ax.set_title("%s\n%s" % (plot.title, meta.get("gpu", "unknown GPU")), fontsize=10)
    finish(fig, ax, height, meta, csv_path, 7)
    save(fig, path)
    plt.close(fig)


def flops_formula(group):
    """The FLOP count of the group's TFLOP/s: causal rows (seq_q = seq_kv) count half."""
    return "2*B*H*S^2*D" if group.causal else "4*B*H*Sq*Skv*D"


def render(plot, meta, csv_path, path):
    (plot_track if plot.kind == "track" else plot_bars)(plot, meta, csv_path, path)


# ------------------------------------------------------------------------------------------------
# The decoding benchmark (tools/decode_bench.py, tools/decode_csv.py)

DECODE_STYLES = {"fa2": dict(color="black", linestyle="-", marker="s"),
                 "cudnn": dict(color="#c0392b", linestyle="--", marker="^")}
PANEL_IN = 2.4


def decode_configs(rows):
    """[(dtype, head_dim, seq_q, causal)] of the rows, in the CSV's order: one plot each."""
    return list(dict.fromkeys((r["dtype"], int(r["head_dim"]), int(r["seq_q"]), r["causal"] == "1") for r in rows))


def decode_plot_name(config):
    dtype, head_dim, seq_q, causal = config
    return "%s_d%d_q%d%s.png" % (dtype, head_dim, seq_q, "_causal" if causal else "")


def decode_series(row):
    """A decoding plot's series: the implementation, with its cache where that is not contiguous
    ('decode_04_paged_kv (paged16)'); a row without a cache (an older CSV) is contiguous."""
    cache = row.get("cache") or "contiguous"
    return row["impl"] if cache == "contiguous" else "%s (%s)" % (row["impl"], cache)


def plot_decode(meta, rows, csv_path, config, path):
    """One configuration's plot: a panel per (batch, K/V heads), GB/s against seq_kv (log scale) per
    implementation; a row that failed its check is an x on the axis; the measured read bandwidth as a
    dotted line, and its % on the right-hand axis."""
    from decode_csv import number, passed
    plt = pyplot()
    dtype, head_dim, seq_q, causal = config
    mine = [r for r in rows if (r["dtype"], int(r["head_dim"]), int(r["seq_q"]), r["causal"] == "1") == config]
    batches = sorted({int(r["batch"]) for r in mine})
    kv_heads = sorted({int(r["kv_heads"]) for r in mine}, reverse=True)
    # A series per implementation and cache: a stage on a paged cache is a series of its own, named
    # '<stage> (paged16)', in its contiguous series' color, dashed (an older CSV: every row contiguous).
    impls = list(dict.fromkeys(decode_series(r) for r in mine))
    stages = list(dict.fromkeys(r["impl"] for r in mine if r["impl"] not in DECODE_STYLES))
    cmap = colormap("viridis")
    colors = {name: cmap(0.1 + 0.65 * i / max(1, len(stages) - 1)) for i, name in enumerate(stages)}
    styles = {}
    for series in impls:
        impl, _, cache = series.partition(" (")
        if impl in DECODE_STYLES:
            styles[series] = DECODE_STYLES[impl]
        elif cache:
            styles[series] = dict(color=colors[impl], linestyle="--", marker="D", markerfacecolor="white")
        else:
            styles[series] = dict(color=colors[impl], linestyle="-", marker="o")
    read_bw = number(meta.get("read_bw_gbytes_per_s"))
    top = max([number(r["gbytes_per_s"]) or 0.0 for r in mine] + [read_bw or 0.0, 1.0]) * 1.12
    height = 1.3 + PANEL_IN * 0.8 * len(batches)
    fig, axes = plt.subplots(len(batches), len(kv_heads), figsize=(PANEL_IN * len(kv_heads) + 0.6, height),
                             squeeze=False, sharex=True, sharey=True)
    for i, batch in enumerate(batches):
        for j, kvh in enumerate(kv_heads):
            ax = axes[i][j]
            cell = [r for r in mine if int(r["batch"]) == batch and int(r["kv_heads"]) == kvh]
            for name in impls:
                points = sorted((int(r["seq_kv"]), number(r["gbytes_per_s"])) for r in cell
                                if decode_series(r) == name and passed(r))
                style = styles[name]
                if points:
                    ax.plot([x for x, _ in points], [y for _, y in points], linewidth=1.2, markersize=3.5,
                            label=name if i == 0 and j == 0 else None, **style)
                failed = sorted(int(r["seq_kv"]) for r in cell if decode_series(r) == name
                                and r["status"].split(":")[0] in ("FAIL", "ERROR"))
                if failed:
                    ax.plot(failed, [0.0] * len(failed), linestyle="none", marker="x", color=style["color"],
                            markersize=6, clip_on=False)
            if read_bw:
                ax.axhline(read_bw, color="#7f7f7f", linestyle=":", linewidth=1.2,
                           label="HBM read, measured: %.0f GB/s" % read_bw if i == 0 and j == 0 else None)
            ax.set_xscale("log", base=2)
            seqs = sorted({int(r["seq_kv"]) for r in mine})
            ax.set_xticks(seqs)
            ax.set_xticklabels(["%dk" % (s // 1024) if s % 1024 == 0 else str(s) for s in seqs], fontsize=7)
            ax.minorticks_off()
            ax.set_ylim(0, top)
            ax.tick_params(labelsize=7)
            ax.grid(color="#dddddd")
            ax.set_title("batch %d, %d/%d heads" % (batch, int(cell[0]["heads"]) if cell else 0, kvh), fontsize=8)
            if read_bw and j == len(kv_heads) - 1:
                right = ax.secondary_yaxis("right", functions=(lambda y, bw=read_bw: 100.0 * y / bw,
                                                               lambda p, bw=read_bw: p * bw / 100.0))
                right.tick_params(labelsize=7)
                right.set_ylabel("% of read bandwidth", fontsize=7)
            if j == 0:
                ax.set_ylabel("GB/s", fontsize=8)
            if i == len(batches) - 1:
                ax.set_xlabel("seq_kv", fontsize=8)
    fig.suptitle("Decoding, %s, head_dim %d, seq_q %d%s: GB/s = (K, V and Q read + O written) / minimum time\n%s" % (
        dtype, head_dim, seq_q, ", causal (bottom-right)" if causal else "", meta.get("gpu", "unknown GPU")),
        fontsize=9)
    finish(fig, axes[0][0], height, meta, csv_path, 7)
    save(fig, path)
    plt.close(fig)


def decode_main(args):
    """tools/plot.py --decode: every configuration's plot of a decoding benchmark CSV."""
    from decode_csv import DecodeCsvError, read_decode_csv
    csv_path = os.path.abspath(args.csv or os.path.join(REPO, "plots", "results", "decode_latest.csv"))
    if not os.path.exists(csv_path):
        print("plot.py: %s does not exist (python3 tools/decode_bench.py writes it)" % shown_path(csv_path),
              file=sys.stderr)
        return 2
    try:
        meta, rows = read_decode_csv(csv_path)
    except DecodeCsvError as e:
        print("plot.py: %s" % e, file=sys.stderr)
        return 2
    try:
        pyplot()
    except ImportError as e:
        print("plot.py: matplotlib is not installed (%s); install it with python3 -m pip install matplotlib" % e,
              file=sys.stderr)
        return 3
    out_dir = args.out_dir if args.out_dir_given else os.path.join(REPO, "plots", "decode_bandwidth")
    os.makedirs(out_dir, exist_ok=True)
    for config in decode_configs(rows):
        path = os.path.join(out_dir, decode_plot_name(config))
        plot_decode(meta, rows, csv_path, config, path)
        print("plot.py: wrote %s" % shown_path(path), flush=True)
    return 0


# ------------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="tools/plot.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("csv", nargs="?", default=None,
                   help="a results CSV from tools/bench.py (default: the CSV the README's tracks section names)")
    p.add_argument("--out-dir", default=None, help="where the PNGs go (default plots/; with --decode "
                                                   "plots/decode_bandwidth/)")
    p.add_argument("--decode", action="store_true",
                   help="the decoding benchmark's plots from CSV (default plots/results/decode_latest.csv); nothing "
                        "else is written")
    p.add_argument("--backward-csv", default=results_tables.DEFAULT_BACKWARD_CSV,
                   help="the backward benchmark's CSV (tools/backward_bench.py) that the backward track's table comes "
                        "from (default plots/results/backward_latest.csv; where it does not exist, that track's "
                        "table comes from CSV as every track's)")
    p.add_argument("--readme", default=os.path.join(REPO, "README.md"),
                   help="the README whose tracks section is rewritten or checked (default README.md); "
                        "docs/results.md beside it too")
    p.add_argument("--no-readme", action="store_true", help="leave the README and docs/results.md alone (plots only)")
    p.add_argument("--no-plots", action="store_true", help="rewrite the README and docs/results.md only (needs no "
                                                           "matplotlib)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the README's tracks section or docs/results.md differ from what the "
                        "CSV gives (or a plot they show is missing); needs no matplotlib")
    args = p.parse_args(argv)
    args.out_dir_given = args.out_dir is not None
    if args.out_dir is None:
        args.out_dir = os.path.join(REPO, "plots")
    if args.decode and (args.check or args.no_plots):
        p.error("--decode draws the decoding plots only: no --check or --no-plots")
    if args.no_readme and (args.check or args.csv is None):
        p.error("--no-readme needs a CSV argument and cannot be combined with --check")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.decode:
        return decode_main(args)
    page = results_tables.results_page_of(args.readme)
    try:
        texts = {}
        if not args.no_readme:
            texts[os.path.abspath(args.readme)] = results_tables.read_marked(args.readme, results_tables.README_SECTION)
            texts[page] = results_tables.read_marked(page, results_tables.PAGE_SECTION,
                                                     None if args.check else results_tables.PAGE_TEMPLATE)
        csv_path = os.path.abspath(args.csv) if args.csv else results_tables.csv_named_by(
            args.readme, texts[os.path.abspath(args.readme)])
        meta, rows = results_tables.load_results(csv_path)
        backward = None if args.no_readme else results_tables.load_backward(os.path.abspath(args.backward_csv))
    except ResultsError as e:
        print("plot.py: %s" % e, file=sys.stderr)
        return 2
    groups = results_tables.make_groups(rows)
    declared = results_tables.declared_stages()
    plots = results_tables.plot_list(groups, declared)
    expected = {}
    if not args.no_readme:
        for path, (section, body) in results_tables.generated_texts(groups, meta, csv_path, os.path.abspath(args.readme),
                                                                    args.out_dir, declared, backward=backward).items():
            expected[path] = results_tables.replace_section(texts[path], section, body)

    if args.check:
        stale = False
        missing = [shown_path(os.path.join(args.out_dir, p.name)) for p in plots
                   if not os.path.exists(os.path.join(args.out_dir, p.name))]
        for path in missing:
            print("plot.py: %s is missing (run python3 tools/plot.py %s)" % (path, shown_path(csv_path)), file=sys.stderr)
        for path, text in expected.items():
            if text != texts[path]:
                stale = True
                diff = difflib.unified_diff(texts[path].splitlines(), text.splitlines(), shown_path(path),
                                            "generated from " + shown_path(csv_path), lineterm="")
                print("\n".join(list(diff)[:80]), file=sys.stderr)
                print("plot.py: the results in %s differ from %s (above: what the CSV gives); run python3 tools/plot.py %s"
                      % (shown_path(path), shown_path(csv_path), shown_path(csv_path)), file=sys.stderr)
        if stale or missing:
            return 1
        print("plot.py: the results in %s match %s" % (" and ".join(shown_path(p) for p in expected),
                                                      shown_path(csv_path)))
        return 0

    if not args.no_plots:
        try:
            pyplot()
        except ImportError as e:
            print("plot.py: matplotlib is not installed (%s); install it with python3 -m pip install matplotlib, "
                  "or pass --no-plots to rewrite only the README and docs/results.md" % e, file=sys.stderr)
            return 3
        os.makedirs(args.out_dir, exist_ok=True)
        for plot in plots:
            path = os.path.join(args.out_dir, plot.name)
            render(plot, meta, csv_path, path)
            print("plot.py: wrote %s" % shown_path(path), flush=True)
    for path, text in expected.items():
        if text != texts[path] or not os.path.exists(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8", newline="") as f:
                f.write(text)
            print("plot.py: rewrote the results in %s from %s" % (shown_path(path), shown_path(csv_path)))
        else:
            print("plot.py: the results in %s were already up to date" % shown_path(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
