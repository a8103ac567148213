#!/usr/bin/env python3
"""Regenerates the generated sections of the docs from the source tree and the benchmark CSV.

    python3 tools/gen_docs.py [--csv PATH] [--check]

Sections (everything between the markers is replaced; the rest of each page is hand-written):

  docs/stages/NN_name.md
    <!-- diff:begin --> ... <!-- diff:end -->
        the unified diff of stages/NN_name/ against the previous stage's folder (difflib, paths
        relative to the repository), in a ```diff fence; for the first stage, its file list
    <!-- results:begin --> ... <!-- results:end -->
        from the benchmark CSV: for this stage and the previous one, per (dtype, head_dim, batch,
        heads) and sequence length, median ms, TFLOP/s, % of FA2 and the change in time against the
        previous stage, plus where the numbers come from (GPU, date, git revision, CSV path).
        A page whose prose discusses one particular run pins its tables to that run's CSV with a
        line '<!-- results-csv: plots/results/<file>.csv -->' (outside the markers); otherwise
        the tables come from --csv
    <!-- sass:begin --> ... <!-- sass:end -->
        static SASS counts of this stage's and the previous stage's main loop (fp16, head_dim 128,
        sm_90) and their registers, parsed from docs/evidence/sass_sm90_fp16_d128.txt (written by
        tools/sass_counts.py)
  docs/performance_log.md
    <!-- headline:begin --> ... <!-- headline:end -->
        every stage and reference from the CSV: TFLOP/s and % of FA2 per sequence length

The CSV is what tools/bench.py writes (default plots/results/latest.csv): '# key=value' header
lines, then the columns impl,kind,dtype,head_dim,batch,heads,seq_q,seq_kv,median_ms,min_ms,tflops,
pct_of_fa2,max_abs_err,rel_l2_err,status. Without a CSV the results sections say so.

--check writes nothing and exits 1 if any generated section differs from what the tree and the
CSV give now (or a stage has no page, or a page lacks its markers); 0 if all are up to date.
Standard library only (Python 3.8+).
"""

import argparse
import csv
import difflib
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "plots"))
from results_csv import number, read_results_csv  # noqa: E402  (plots/results_csv.py)
STAGES_DIR = os.path.join(REPO, "stages")
STAGE_DOCS = os.path.join(REPO, "docs", "stages")
PERF_LOG = os.path.join(REPO, "docs", "performance_log.md")
DEFAULT_CSV = os.path.join(REPO, "plots", "results", "latest.csv")
SASS_EVIDENCE = os.path.join(REPO, "docs", "evidence", "sass_sm90_fp16_d128.txt")
SASS_COLUMNS = ["HMMA", "LDSM", "LDSM.T", "LDGSTS", "LDG", "STS", "MUFU.EX2", "FMUL", "FFMA", "FADD", "FMNMX",
                "SHFL", "BAR.SYNC", "LDL", "STL", "total"]
NO_RESULTS = "No benchmark results committed yet; run `bash scripts/run_all.sh`."
REFERENCE_LABELS = {"fa2": "FA2 (PyTorch flash backend)", "cudnn": "cuDNN (PyTorch cudnn backend)"}


class DocError(Exception):
    pass


def rel(path):
    path = os.path.abspath(path)
    return os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else path


def stage_folders():
    """Stage folder names (NN_name), in order."""
    return sorted(d for d in os.listdir(STAGES_DIR)
                  if re.match(r"^\d\d_", d) and os.path.isdir(os.path.join(STAGES_DIR, d)))


def files_of(stage):
    root = os.path.join(STAGES_DIR, stage)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            if f.startswith(".") or f.endswith((".pyc", "~")):
                continue
            out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(out)


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def fenced(lang, text):
    """A code fence longer than any run of backticks inside the text."""
    longest = max([len(m) for m in re.findall(r"`+", text)] + [2])
    fence = "`" * max(3, longest + 1)
    return "%s%s\n%s\n%s" % (fence, lang, text, fence)


# ------------------------------------------------------------------------------------------------
# The diff section


def diff_section(stage, previous):
    if previous is None:
        lines = ["The first stage has no previous stage to diff against. Its files:", ""]
        for f in files_of(stage):
            path = os.path.join(STAGES_DIR, stage, f)
            lines.append("- `stages/%s/%s` (%d lines)" % (stage, f, len(read_lines(path))))
        return "\n".join(lines)
    out = []
    changed = []
    for f in sorted(set(files_of(previous)) | set(files_of(stage))):
        old_path = os.path.join(STAGES_DIR, previous, f)
        new_path = os.path.join(STAGES_DIR, stage, f)
        old = read_lines(old_path) if os.path.exists(old_path) else []
        new = read_lines(new_path) if os.path.exists(new_path) else []
        old_name = "stages/%s/%s" % (previous, f) if os.path.exists(old_path) else "/dev/null"
        new_name = "stages/%s/%s" % (stage, f) if os.path.exists(new_path) else "/dev/null"
        d = list(difflib.unified_diff(old, new, old_name, new_name, n=3, lineterm=""))
        if d:
            changed.append(f)
            out += d
    if not out:
        return "`stages/%s/` and `stages/%s/` are identical." % (previous, stage)
    added = sum(1 for l in out if l.startswith("+") and not l.startswith("+++"))
    removed = sum(1 for l in out if l.startswith("-") and not l.startswith("---"))
    head = "`diff -u stages/%s stages/%s` (%s; %d lines added, %d removed):" % (
        previous, stage, ", ".join(changed), added, removed)
    return head + "\n\n" + fenced("diff", "\n".join(out))


# ------------------------------------------------------------------------------------------------
# The SASS evidence section


def load_sass(path):
    """({stage: {column: count}} of the main loops, {stage: res-usage text}) or (None, None)."""
    if not os.path.exists(path):
        return None, None
    loops, usage, header = {}, {}, None
    for line in read_lines(path):
        parts = line.split()
        if line.startswith("stage / part"):
            header = parts[3:]
        elif header and len(parts) == len(header) + 2 and parts[1] == "loop":
            loops[parts[0]] = dict(zip(header, parts[2:]))
        elif len(parts) >= 2 and parts[1].startswith("REG:"):
            usage[parts[0]] = dict(p.split(":", 1) for p in parts[1:] if ":" in p)
    return loops, usage


def sass_section(stage, previous, loops, usage):
    evidence = rel(SASS_EVIDENCE)
    if loops is None:
        return "No SASS evidence file (`%s`); run `python3 tools/sass_counts.py --order > %s`." % (evidence, evidence)
    shown = [s for s in (previous, stage) if s]
    if stage not in loops:
        return "`%s` has no counts for `%s`; regenerate it with `python3 tools/sass_counts.py --order`." % (
            evidence, stage)
    cols = [c for c in SASS_COLUMNS if any(c in loops.get(s, {}) for s in shown)]
    lines = ["| main loop, static count | " + " | ".join(cols) + " | registers |",
             "|---|" + "---:|" * (len(cols) + 1)]
    for s in shown:
        row = loops.get(s, {})
        regs = usage.get(s, {}).get("REG", "?") if usage else "?"
        lines.append("| `%s` | %s | %s |" % (s, " | ".join(row.get(c, "-") for c in cols), regs))
    note = ("Static counts: instructions in the SASS of the fp16, head_dim 128 kernel for sm_90, in the "
            "body of the main K/V loop (runs once per K/V block); `LDSM.T` counts the `.trans` ones "
            "among `LDSM`; `total` is every instruction of the loop except NOPs; registers per thread from "
            "`cuobjdump -res-usage`. Source: `%s` (`tools/sass_counts.py`)." % evidence)
    return "\n".join(lines) + "\n\n" + note


# ------------------------------------------------------------------------------------------------
# The benchmark CSV


def load_csv(path):
    """(meta dict, rows) or (None, None) if the file does not exist."""
    if not os.path.exists(path):
        return None, None
    meta, rows = read_results_csv(path)
    need = {"impl", "dtype", "head_dim", "batch", "heads", "seq_q", "seq_kv", "median_ms", "tflops", "status"}
    if rows and not need <= set(rows[0]):
        raise DocError("%s lacks the columns %s" % (rel(path), ", ".join(sorted(need - set(rows[0])))))
    return meta, rows


def group_key(row):
    return (row["dtype"], int(row["head_dim"]), int(row["batch"]), int(row["heads"]))


def group_order(key):
    dtype, head_dim, batch, heads = key
    # The headline first: fp16, head_dim 128; then the others.
    return (dtype != "fp16", dtype, -head_dim, -batch, -heads)


def group_title(key):
    dtype, head_dim, batch, heads = key
    return "%s, head_dim %d, batch %d, heads %d" % (dtype, head_dim, batch, heads)


def index_rows(rows):
    """{group: {(impl, seq_q, seq_kv): row}} keeping the first row of each key."""
    out = {}
    for r in rows:
        try:
            g = group_key(r)
            cell = (r["impl"], int(r["seq_q"]), int(r["seq_kv"]))
        except (KeyError, TypeError, ValueError):
            continue
        out.setdefault(g, {}).setdefault(cell, r)
    return out


def seq_label(sq, skv):
    return "%d" % sq if sq == skv else "%d/%d" % (sq, skv)


def passed(row):
    return row is not None and row.get("status") == "PASS" and number(row.get("median_ms")) is not None


def status_word(row):
    if row is None:
        return "-"
    status = (row.get("status") or "").strip()
    if status.startswith("unavailable"):
        return "n/a"
    return status.split(":")[0] or "-"


def fmt_ms(v):
    return "%.3f" % v if v < 10 else ("%.2f" % v if v < 100 else "%.1f" % v)


def source_line(meta, csv_path):
    parts = ["GPU %s" % meta.get("gpu", "unknown")]
    for key, label in (("driver", "driver"), ("cuda", "CUDA"), ("torch", "PyTorch")):
        if meta.get(key):
            parts.append("%s %s" % (label, meta[key]))
    parts.append("date %s" % meta.get("date", "unknown"))
    parts.append("git %s" % meta.get("git", "unknown"))
    return "Source: `%s` (%s)." % (rel(csv_path), "; ".join(parts))


def results_section(stage, previous, meta, rows, csv_path):
    if rows is None:
        return NO_RESULTS
    groups = index_rows(rows)
    blocks = []
    for g in sorted(groups, key=group_order):
        cells = groups[g]
        seqs = sorted({(sq, skv) for (impl, sq, skv) in cells if impl == stage})
        if not seqs:
            continue
        lines = ["**%s**" % group_title(g), ""]
        if previous:
            lines.append("| S | %s ms | %s ms | time vs %s | %s TFLOP/s | %s TFLOP/s | %s %% of FA2 | %s %% of FA2 |"
                         % (previous, stage, previous[:2], previous, stage, previous, stage))
            lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
        else:
            lines.append("| S | %s ms | %s TFLOP/s | %s %% of FA2 |" % (stage, stage, stage))
            lines.append("|---:|---:|---:|---:|")
        for sq, skv in seqs:
            this = cells.get((stage, sq, skv))
            prev = cells.get((previous, sq, skv)) if previous else None

            def col(row, field, fmt):
                if not passed(row):
                    return status_word(row)
                v = number(row.get(field))
                return fmt(v) if v is not None else "-"

            ms = lambda r: col(r, "median_ms", fmt_ms)
            tf = lambda r: col(r, "tflops", lambda v: "%.1f" % v)
            pct = lambda r: col(r, "pct_of_fa2", lambda v: "%.1f" % v)
            if previous:
                change = "-"
                if passed(this) and passed(prev):
                    change = "%+.1f%%" % (100.0 * (number(this["median_ms"]) / number(prev["median_ms"]) - 1.0))
                lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    seq_label(sq, skv), ms(prev), ms(this), change, tf(prev), tf(this), pct(prev), pct(this)))
            else:
                lines.append("| %s | %s | %s | %s |" % (seq_label(sq, skv), ms(this), tf(this), pct(this)))
        blocks.append("\n".join(lines))
    if not blocks:
        return "The benchmark CSV `%s` has no rows for `%s`; run `bash scripts/run_all.sh`." % (rel(csv_path), stage)
    legend = ("Median of the timed launches; TFLOP/s = 4 * batch * heads * seq_q * seq_kv * head_dim / median; "
              "% of FA2 = FA2's median / this median (same run, same GPU)")
    if previous:
        legend += "; time vs %s = this median / its median - 1 (negative = faster)" % previous[:2]
    legend += ". A cell that is not a number is the status of a result that did not pass its check or did not run."
    return "\n\n".join(blocks + [legend, source_line(meta, csv_path)])


def headline_section(stages, meta, rows, csv_path):
    if rows is None:
        return NO_RESULTS
    groups = index_rows(rows)
    blocks = []
    for g in sorted(groups, key=group_order):
        cells = groups[g]
        seqs = sorted({(sq, skv) for (_, sq, skv) in cells})
        impls = [s for s in stages if any(k[0] == s for k in cells)]
        impls += sorted({k[0] for k in cells} - set(stages) - set(REFERENCE_LABELS))
        impls += [r for r in REFERENCE_LABELS if any(k[0] == r for k in cells)]
        lines = ["**%s**: TFLOP/s (%% of FA2)" % group_title(g), "",
                 "| | " + " | ".join("S=%s" % seq_label(*s) for s in seqs) + " |",
                 "|---|" + "---:|" * len(seqs)]
        for impl in impls:
            out = []
            for sq, skv in seqs:
                r = cells.get((impl, sq, skv))
                if not passed(r):
                    out.append(status_word(r))
                    continue
                tf, pct = number(r.get("tflops")), number(r.get("pct_of_fa2"))
                text = "%.1f" % tf if tf is not None else "-"
                if pct is not None and impl != "fa2":
                    text += " (%.1f%%)" % pct
                out.append(text)
            lines.append("| %s | %s |" % (REFERENCE_LABELS.get(impl, impl), " | ".join(out)))
        blocks.append("\n".join(lines))
    if not blocks:
        return "The benchmark CSV `%s` has no rows; run `bash scripts/run_all.sh`." % rel(csv_path)
    return "\n\n".join(blocks + [source_line(meta, csv_path)])


# ------------------------------------------------------------------------------------------------
# Rewriting marked sections


PINNED_CSV = re.compile(r"<!-- results-csv: (\S+) -->")


def replace_section(text, name, body, path):
    begin, end = "<!-- %s:begin -->" % name, "<!-- %s:end -->" % name
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise DocError("%s: needs exactly one '%s' followed by one '%s'" % (rel(path), begin, end))
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return head + begin + "\n" + body.rstrip("\n") + "\n" + end + tail


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--csv", default=DEFAULT_CSV, help="benchmark CSV (default plots/results/latest.csv)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated section is stale")
    args = p.parse_args(argv)

    problems, updated, stale = [], [], []
    try:
        meta, rows = load_csv(args.csv)
    except (DocError, csv.Error, OSError) as e:
        print("gen_docs.py: %s" % e, file=sys.stderr)
        return 2

    stages = stage_folders()
    loops, usage = load_sass(SASS_EVIDENCE)
    pages = []
    pinned_csvs = {}  # path -> (meta, rows), each pinned CSV read once
    for i, stage in enumerate(stages):
        previous = stages[i - 1] if i > 0 else None
        path = os.path.join(STAGE_DOCS, stage + ".md")
        if not os.path.exists(path):
            problems.append("%s: missing (every stage needs a page)" % rel(path))
            continue
        page_csv, page_meta, page_rows = args.csv, meta, rows
        with open(path, encoding="utf-8") as f:
            pinned = PINNED_CSV.search(f.read())
        if pinned:
            page_csv = os.path.join(REPO, pinned.group(1))
            try:
                if page_csv not in pinned_csvs:
                    pinned_csvs[page_csv] = load_csv(page_csv)
                page_meta, page_rows = pinned_csvs[page_csv]
            except (DocError, csv.Error, OSError) as e:
                problems.append("%s: %s" % (rel(path), e))
                continue
            if page_rows is None:
                problems.append("%s: pinned CSV %s does not exist" % (rel(path), pinned.group(1)))
                continue
        sections = [("diff", diff_section(stage, previous)),
                    ("results", results_section(stage, previous, page_meta, page_rows, page_csv)),
                    ("sass", sass_section(stage, previous, loops, usage))]
        pages.append((path, sections))
    if os.path.exists(PERF_LOG):
        pages.append((PERF_LOG, [("headline", headline_section(stages, meta, rows, args.csv))]))
    else:
        problems.append("%s: missing" % rel(PERF_LOG))
    known = {s + ".md" for s in stages}
    if os.path.isdir(STAGE_DOCS):
        for f in sorted(os.listdir(STAGE_DOCS)):
            if f.endswith(".md") and f not in known:
                problems.append("%s: no stage folder stages/%s" % (rel(os.path.join(STAGE_DOCS, f)), f[:-3]))

    for path, sections in pages:
        with open(path, encoding="utf-8") as f:
            old = f.read()
        new = old
        try:
            for name, body in sections:
                new = replace_section(new, name, body, path)
        except DocError as e:
            problems.append(str(e))
            continue
        if new != old:
            if args.check:
                stale.append(rel(path))
            else:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
                updated.append(rel(path))

    for msg in problems:
        print("gen_docs.py: %s" % msg, file=sys.stderr)
    source = rel(args.csv) if rows is not None else "no CSV at %s" % rel(args.csv)
    if args.check:
        for path in stale:
            print("gen_docs.py: stale generated section(s) in %s (run python3 tools/gen_docs.py)" % path,
                  file=sys.stderr)
        if stale or problems:
            return 1
        print("gen_docs.py: all generated sections are up to date (%s)" % source)
        return 0
    print("gen_docs.py: %d page(s) updated, %d unchanged (%s)" % (len(updated), len(pages) - len(updated), source))
    for path in updated:
        print("  " + path)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
