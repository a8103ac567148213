#!/usr/bin/env python3
"""Renders a benchmark CSV (written by tools/bench.py) as plots and as the README's results table.

    python3 plots/plot.py plots/results/latest.csv [--out-dir plots] [--readme README.md]

For each (dtype, head_dim) in the CSV (slug e.g. fp16_d128):
  <out-dir>/<slug>_hist.png    every stage's % of FlashAttention-2, one bar per sequence length,
                               labeled with its TFLOP/s; FA2 (100%) and cuDNN as horizontal lines
  <out-dir>/<slug>_tflops.png  TFLOP/s against sequence length, every stage and reference
With --readme, the text between <!-- results-table:begin --> and <!-- results-table:end --> is
replaced by one table per (dtype, head_dim); the rest of the file is left byte for byte.

Needs matplotlib (Agg backend, no display); the CSV is read with the standard csv module.
"""

import argparse
import collections
import os
import re
import sys

from results_csv import number, read_results_csv  # plots/results_csv.py, next to this script

BEGIN_MARKER = "<!-- results-table:begin -->"
END_MARKER = "<!-- results-table:end -->"
REFERENCE_LABELS = {"fa2": "FlashAttention-2 (PyTorch flash backend)", "cudnn": "cuDNN (PyTorch cudnn backend)"}
REFERENCE_SHORT = {"fa2": "FA2", "cudnn": "cuDNN"}


# ------------------------------------------------------------------------------------------------
# Reading


def read_results(path):
    """(meta: {key: value} from the '# key=value' lines, rows: [dict])."""
    meta, rows = read_results_csv(path)
    if not rows:
        print("plot.py: %s has no result rows" % path, file=sys.stderr)
        raise SystemExit(2)
    for row in rows:
        row["status"] = row.get("status") or ""
        if not row.get("kind"):
            row["kind"] = "reference" if row["impl"] in REFERENCE_LABELS else "stage"
        row["seq_q"], row["seq_kv"] = int(row["seq_q"]), int(row["seq_kv"])
        row["passed"] = row["status"] == "PASS"
        # A result without a passed check has no time, whatever a hand-edited CSV says.
        row["ms"] = number(row.get("median_ms")) if row["passed"] else None
        row["tf"] = number(row.get("tflops")) if row["passed"] else None
    # pct_of_fa2 is in bench.py's CSV; recompute it when the column is absent.
    if "pct_of_fa2" not in rows[0]:
        fa2 = {(r["dtype"], r["head_dim"], r["batch"], r["heads"], r["seq_q"], r["seq_kv"]): r["ms"]
               for r in rows if r["impl"] == "fa2" and r["ms"]}
        for r in rows:
            ref = fa2.get((r["dtype"], r["head_dim"], r["batch"], r["heads"], r["seq_q"], r["seq_kv"]))
            r["pct_of_fa2"] = "%.2f" % (100.0 * ref / r["ms"]) if ref and r["ms"] else ""
    for row in rows:
        row["pct"] = number(row.get("pct_of_fa2")) if row["passed"] else None
    return meta, rows


class Group:
    """The results of one (dtype, head_dim, batch, heads): one histogram, one line chart, one table."""

    def __init__(self, key, rows, slug):
        self.dtype, self.head_dim, self.batch, self.heads = key
        self.slug = slug
        self.seqs = sorted({(r["seq_q"], r["seq_kv"]) for r in rows})
        self.stages = list(collections.OrderedDict.fromkeys(r["impl"] for r in rows if r["kind"] == "stage"))
        refs = list(collections.OrderedDict.fromkeys(r["impl"] for r in rows if r["kind"] != "stage"))
        self.references = [r for r in REFERENCE_LABELS if r in refs] + [r for r in refs if r not in REFERENCE_LABELS]
        self.cell = {(r["impl"], r["seq_q"], r["seq_kv"]): r for r in rows}
        self.have_fa2 = any(self.get("fa2", s) and self.get("fa2", s)["ms"] for s in self.seqs)

    def get(self, impl, seq):
        return self.cell.get((impl, seq[0], seq[1]))

    def title(self):
        return "%s, head_dim %s, batch %s, heads %s" % (self.dtype, self.head_dim, self.batch, self.heads)


def seq_label(seq):
    return "S=%d" % seq[0] if seq[0] == seq[1] else "Sq=%d Skv=%d" % seq


def make_groups(rows):
    by_key = collections.OrderedDict()
    for r in rows:
        by_key.setdefault((r["dtype"], r["head_dim"], r["batch"], r["heads"]), []).append(r)
    shapes_per_dtype_dim = collections.Counter((k[0], k[1]) for k in by_key)
    groups = []
    for key, group_rows in by_key.items():
        slug = "%s_d%s" % (key[0], key[1])
        if shapes_per_dtype_dim[(key[0], key[1])] > 1:
            slug += "_b%s_h%s" % (key[2], key[3])
        groups.append(Group(key, group_rows, re.sub(r"[^A-Za-z0-9_.-]", "-", slug)))
    # The headline configuration of the project (fp16, head_dim 128) first, then the rest in CSV order.
    groups.sort(key=lambda g: (g.dtype, g.head_dim) != ("fp16", "128"))
    return groups


def provenance(meta, csv_path):
    parts = [meta.get("gpu", "unknown GPU")]
    for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "PyTorch"), ("date", ""), ("git", "git")):
        if meta.get(key):
            parts.append((label + " " if label else "") + meta[key])
    return ", ".join(parts) + "; from " + os.path.basename(csv_path)


# ------------------------------------------------------------------------------------------------
# Plots


def fmt_tflops(value):
    return "%.0f" % value if value >= 10 else "%.2g" % value


def colormap(name):
    import matplotlib
    try:
        return matplotlib.colormaps[name]
    except AttributeError:  # matplotlib < 3.5
        import matplotlib.pyplot as plt
        return plt.get_cmap(name)


def spread_labels(values, min_gap):
    """y positions for labels at `values`, moved apart so that neighbours are min_gap apart."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    placed = list(values)
    for prev, cur in zip(order, order[1:]):
        placed[cur] = max(placed[cur], placed[prev] + min_gap)
    return placed


def plot_histogram(group, meta, csv_path, path):
    import matplotlib.pyplot as plt

    use_pct = group.have_fa2
    value_of = (lambda r: r["pct"]) if use_pct else (lambda r: r["tf"])
    n_seq = len(group.seqs)
    cmap = colormap("viridis")
    colors = [cmap(0.15 + 0.7 * i / max(1, n_seq - 1)) for i in range(n_seq)]
    width = 0.8 / max(1, n_seq)

    fig, ax = plt.subplots(figsize=(max(9.0, 1.25 * len(group.stages) + 3.5), 6.2))
    top = 0.0
    for j, seq in enumerate(group.seqs):
        fa2, cudnn = group.get("fa2", seq), group.get("cudnn", seq)
        ref_text = ", ".join("%s %s" % (REFERENCE_SHORT[name], fmt_tflops(r["tf"]))
                             for name, r in (("fa2", fa2), ("cudnn", cudnn)) if r and r["tf"])
        label = seq_label(seq) + (" (%s TFLOP/s)" % ref_text if ref_text else "")
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
            short = REFERENCE_SHORT.get(name, name)
            lines.append((y, "%s %s: %s" % (short, seq_label(seq), ("%.0f%%" % y) if use_pct else fmt_tflops(y)), colors[j]))
            top = max(top, y)
    top = top or 100.0
    ax.set_ylim(0, top * 1.22)
    placed = spread_labels([y for y, _, _ in lines], top * 1.22 * 0.035)
    for (y, text, color), y_text in zip(lines, placed):
        ax.annotate(text, xy=(1.0, y), xycoords=ax.get_yaxis_transform(), xytext=(1.01, y_text),
                    textcoords=ax.get_yaxis_transform(), fontsize=8, color=color, va="center",
                    arrowprops=dict(arrowstyle="-", color=color, linewidth=0.6) if abs(y_text - y) > 1e-9 else None)

    ax.set_xticks(range(len(group.stages)))
    ax.set_xticklabels([s.replace("_", "\n", 1) for s in group.stages], fontsize=9)
    ax.set_xlim(-0.6, len(group.stages) - 0.4)
    ax.set_ylabel("% of FlashAttention-2 (PyTorch), higher is better" if use_pct else "TFLOP/s")
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.grid(axis="y", color="#dddddd", zorder=0)
    ax.set_axisbelow(True)
    note = ("bar labels: TFLOP/s = 4*B*H*Sq*Skv*D / median time" if use_pct
            else "FA2 reference unavailable: bars show TFLOP/s")
    ax.set_title("%s: FlashAttention-2 forward, stage by stage\n%s  (%s)"
                 % (meta.get("gpu", "unknown GPU"), group.title(), note), fontsize=11)
    ax.legend(loc="upper left", fontsize=8, frameon=True, ncol=2 if n_seq > 2 else 1)
    fig.text(0.01, 0.005, provenance(meta, csv_path), fontsize=7, color="#666666", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


def plot_tflops(group, meta, csv_path, path):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 5.8))
    # tab10 without its grey (index 7), which would look like the cuDNN line.
    palette = [c for i, c in enumerate(colormap("tab10").colors) if i != 7]
    if len(group.stages) > len(palette):
        palette = list(colormap("tab20").colors)
    xs_all = [seq[0] for seq in group.seqs]

    def series(impl):
        """y per sequence length, NaN where there is no result (a gap in the line, not a bridge)."""
        ys = []
        for seq in group.seqs:
            row = group.get(impl, seq)
            ys.append(row["tf"] if row is not None and row["tf"] is not None else float("nan"))
        return ys

    for i, stage in enumerate(group.stages):
        ys = series(stage)
        failed = [seq[0] for seq, y in zip(group.seqs, ys) if y != y]
        label = stage + (" (no result at S=%s)" % ", ".join(map(str, failed)) if failed else "")
        ax.plot(xs_all, ys, marker="o", markersize=4, linewidth=1.4, color=palette[i % len(palette)], label=label)
    styles = {"fa2": dict(color="black", linestyle="-", marker="s", linewidth=2.4),
              "cudnn": dict(color="#555555", linestyle="--", marker="D", linewidth=2.0)}
    for name in group.references:
        ys = series(name)
        label = REFERENCE_LABELS.get(name, name)
        if all(y != y for y in ys):
            label += " (unavailable)"
        style = styles.get(name, dict(color="grey", linestyle=":", marker="^", linewidth=2.0))
        ax.plot(xs_all, ys, markersize=5, label=label, **style)
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs_all)
    ax.set_xticklabels([str(x) for x in xs_all])
    ax.minorticks_off()
    ax.set_xlabel("sequence length (seq_q = seq_kv)" if all(s[0] == s[1] for s in group.seqs) else "seq_q")
    ax.set_ylabel("TFLOP/s (4*B*H*Sq*Skv*D / median time)")
    ax.set_ylim(bottom=0)
    ax.grid(color="#dddddd")
    ax.set_title("%s: TFLOP/s by sequence length\n%s" % (meta.get("gpu", "unknown GPU"), group.title()), fontsize=11)
    ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=8)
    fig.text(0.01, 0.005, provenance(meta, csv_path), fontsize=7, color="#666666", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


# ------------------------------------------------------------------------------------------------
# The README table


def fmt_ms(ms):
    for limit, fmt in ((1, "%.3f"), (10, "%.2f"), (100, "%.1f")):
        if ms < limit:
            return fmt % ms
    return "%.0f" % ms


def table_cell(row, is_fa2=False):
    if row is None:
        return "–"
    if row["ms"] is None:
        if row["status"].startswith("unavailable"):
            return "unavailable"
        return "**%s** (no time)" % (row["status"].split(":")[0] or "no result")
    pct = "100%" if is_fa2 else ("%.1f%%" % row["pct"] if row["pct"] is not None else "–")
    tf = "%.1f" % row["tf"] if row["tf"] is not None else "–"
    return "%s / %s / %s" % (fmt_ms(row["ms"]), tf, pct)


def relative_link(target, readme_dir):
    return os.path.relpath(target, readme_dir).replace(os.sep, "/")


def results_markdown(groups, meta, csv_path, readme_path, out_dir):
    readme_dir = os.path.dirname(os.path.abspath(readme_path))
    out = []
    out.append("_Generated by `plots/plot.py` from `%s`; do not edit by hand._" % relative_link(os.path.abspath(csv_path), readme_dir))
    out.append("")
    facts = ["GPU: %s" % meta.get("gpu", "unknown")]
    for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "PyTorch"), ("date", "date"), ("git", "git")):
        facts.append("%s %s" % (label, meta.get(key, "unknown")))
    if meta.get("sm_clock_mhz_at_start"):
        facts.append("SM clock at start %s MHz" % meta["sm_clock_mhz_at_start"])
    out.append(", ".join(facts) + ".")
    for group in groups:
        out.append("")
        out.append("**%s** (each cell: median ms / TFLOP/s / %% of FA2)" % group.title())
        out.append("")
        out.append("| | " + " | ".join(seq_label(s) for s in group.seqs) + " |")
        out.append("|---|" + "---:|" * len(group.seqs))
        for stage in group.stages:
            folder = os.path.join(readme_dir, "stages", stage)
            name = "[%s](stages/%s/)" % (stage, stage) if os.path.isdir(folder) else stage
            out.append("| " + name + " | " + " | ".join(table_cell(group.get(stage, s)) for s in group.seqs) + " |")
        for ref in group.references:
            label = REFERENCE_LABELS.get(ref, ref)
            out.append("| " + label + " | " + " | ".join(table_cell(group.get(ref, s), ref == "fa2") for s in group.seqs) + " |")
        notes = collections.OrderedDict()
        for impl in group.stages + group.references:
            for s in group.seqs:
                row = group.get(impl, s)
                if row is not None and row["ms"] is None:
                    notes.setdefault("%s: %s" % (impl, row["status"][:160]), None)
        for note in list(notes)[:8]:
            out.append("")
            out.append("- " + note.replace("|", "\\|"))
        hist = os.path.join(out_dir, group.slug + "_hist.png")
        line = os.path.join(out_dir, group.slug + "_tflops.png")
        out.append("")
        out.append("Plots: [%% of FA2 by stage](%s), [TFLOP/s by sequence length](%s)."
                   % (relative_link(os.path.abspath(hist), readme_dir), relative_link(os.path.abspath(line), readme_dir)))
    return "\n".join(out)


def read_readme(readme_path):
    """(text, begin, end) of a README with a results section; exits (status 2) without one."""
    try:
        with open(readme_path, encoding="utf-8", newline="") as f:
            text = f.read()
    except OSError as e:
        print("plot.py: cannot read %s: %s" % (readme_path, e), file=sys.stderr)
        raise SystemExit(2)
    begin, end = text.find(BEGIN_MARKER), text.find(END_MARKER)
    if begin < 0 or end < 0 or end < begin:
        print("plot.py: %s has no %s ... %s section; nothing was written" % (readme_path, BEGIN_MARKER, END_MARKER),
              file=sys.stderr)
        raise SystemExit(2)
    return text, begin, end


def rewrite_readme(readme_path, markdown):
    text, begin, end = read_readme(readme_path)
    newline = "\r\n" if "\r\n" in text else "\n"
    body = newline + markdown.replace("\n", newline) + newline
    updated = text[: begin + len(BEGIN_MARKER)] + body + text[end:]
    with open(readme_path, "w", encoding="utf-8", newline="") as f:
        f.write(updated)


# ------------------------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(prog="plots/plot.py", description=__doc__.split("\n\n")[0])
    p.add_argument("csv", help="a results CSV from tools/bench.py, e.g. plots/results/latest.csv")
    p.add_argument("--out-dir", default="plots", help="where the PNGs go (default plots)")
    p.add_argument("--readme", default=None, help="rewrite the results section of this README")
    args = p.parse_args(argv)

    try:
        import matplotlib
        matplotlib.use("Agg")
    except ImportError as e:
        print("plot.py: matplotlib is not installed (%s); install it with: python3 -m pip install matplotlib" % e,
              file=sys.stderr)
        return 3

    if args.readme:
        read_readme(args.readme)  # refuse a README without the markers before writing anything
    meta, rows = read_results(args.csv)
    groups = make_groups(rows)
    os.makedirs(args.out_dir, exist_ok=True)
    for group in groups:
        hist = os.path.join(args.out_dir, group.slug + "_hist.png")
        line = os.path.join(args.out_dir, group.slug + "_tflops.png")
        plot_histogram(group, meta, args.csv, hist)
        plot_tflops(group, meta, args.csv, line)
        print("plot.py: wrote %s and %s" % (hist, line))
    if args.readme:
        rewrite_readme(args.readme, results_markdown(groups, meta, args.csv, args.readme, args.out_dir))
        print("plot.py: rewrote the results table in %s" % args.readme)
    return 0


if __name__ == "__main__":
    sys.exit(main())
