#!/usr/bin/env python3
"""CPU test of the results pipeline's Python tools, without a GPU.

  tools/plot.py          renders a synthetic CSV and the committed one (plots/results/latest.csv),
                         twice each, to the same bytes; rewrites only the marked sections of a
                         README copy; --check passes on what it wrote and fails on an edited cell
                         or sentence
  the stage pages        each sm_90a page's % of wgmma peak is its TFLOP/s over the committed
                         ceiling (plots/results/ceilings_latest.csv) of the same dtype (a page
                         whose results are of another GPU than the ceilings has no such column
                         and says why), no other page has it, and gen_docs.py --check sees a
                         changed ceilings CSV
  tools/results_tables   the generated sentences say faster/slower/within where the numbers do;
                         sm_90a stages get % of cuDNN; an old CSV (fewer columns), a newer one
                         (causal, kv_heads, unknown columns), a stage the tree no longer has and
                         a stage the CSV lacks are all shown, not crashed on
  the series            a synthetic CSV with causal, any-length, grouped-query and ALiBi rows:
                         each its own README part (causal against FA2 causal with half the FLOPs,
                         any length against the same stage at the next headline length, GQA with
                         an unavailable cuDNN, ALiBi against the stage itself), headline sentences
                         over headline rows only, plots only where there are references, stage
                         pages (tools/gen_docs.py) with one table per series and % of cuDNN for
                         the Hopper track, and its % of wgmma peak in the headline tables (or
                         why not); the causal FLOP count; torch_reference.py's fp64 check
                         of causal and GQA cases (where torch is installed, on the CPU)
  tools/bench.py         with a fake fa_run: one progress line per result with an estimate of the
                         time left, an sm_90a stage skipped with a message on a compute capability
                         8.0 GPU, the CSV with pct_of_cudnn and the new columns, every series run
                         only for the stages declaring its feature (--dry-run lists the commands
                         and counts, of either timing: rounds with fa_run --no-time and
                         tools/interleaved.py, separate with tools/torch_reference.py), the README
                         rewritten, --no-reference timing separately with a line saying why; --part
                         and --merge (ratios kept per part, per-part facts, parts that are not one
                         run refused, a different timing among them); the README's and the stage
                         pages' words following the CSV's timing (tests/test_bench_rounds.py tests
                         the rounds themselves)
  every script           answers --help with its options

The numbers below are FAKE (made up for this test, not measured). Exit codes: 0 pass, 1 fail,
77 skipped (matplotlib is not installed; CTest reports it as skipped through SKIP_RETURN_CODE).
"""

import csv
import importlib.util
import io
import os
import re
import stat
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOOLS = os.path.join(REPO, "tools")
PLOT = os.path.join(TOOLS, "plot.py")
BENCH = os.path.join(TOOLS, "bench.py")
COMMITTED_CSV = os.path.join(REPO, "plots", "results", "latest.csv")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
sys.path.insert(0, TOOLS)
from results_csv import COLUMNS as COLUMNS_FOR_TESTS  # noqa: E402  (the columns bench.py writes)

# Same format as tools/bench.py writes. 02_fake fails its check at S=256 (no time), as a real
# failing stage would; the values are deliberately odd so that they can be found in the output.
FAKE_CSV = """\
# gpu=FAKE GPU (synthetic test data)
# driver=000.00
# cuda=0.0
# torch=0.0.0+fake
# sm_clock_mhz_at_start=1234
# date=2000-01-01T00:00:00Z
# git=0000000
# command=tests/test_plots.py
impl,kind,dtype,head_dim,batch,heads,seq_q,seq_kv,median_ms,min_ms,tflops,pct_of_fa2,max_abs_err,rel_l2_err,status
01_fake,stage,fp16,128,2,4,128,128,0.5,0.49,0.0268435,25.00,0.0001,0.0002,PASS
02_fake,stage,fp16,128,2,4,128,128,0.25,0.24,0.0536871,50.00,0.0001,0.0002,PASS
01_fake,stage,fp16,128,2,4,256,256,1.6,1.55,0.0335544,31.25,0.0001,0.0002,PASS
02_fake,stage,fp16,128,2,4,256,256,,,,,nan,nan,FAIL: 3 bad elements; first: (b; s; h; d) = (0; 1; 2; 3): got nan
fa2,reference,fp16,128,2,4,128,128,0.125,0.12,0.107374,100.00,0.0002,0.0003,PASS
fa2,reference,fp16,128,2,4,256,256,0.5,0.48,0.107374,100.00,0.0002,0.0003,PASS
cudnn,reference,fp16,128,2,4,128,128,0.0625,0.06,0.214748,200.00,0.0002,0.0003,PASS
cudnn,reference,fp16,128,2,4,256,256,,,,,,,unavailable: fake reason for the test
"""

README_BEFORE = "# Fake project\n\nText above the table.\n\n<!-- results-table:begin -->\n"
README_PLACEHOLDER = "no results yet\n"
README_MIDDLE = "<!-- results-table:end -->\n\nText between.\n\n<!-- results-summary:begin -->\n"
README_AFTER = "<!-- results-summary:end -->\n\nText below, kept as is.\n"

failures = []
passes = []


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    (passes if condition else failures).append(what)


def run(cmd):
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return done.returncode, done.stdout


def run_plot(args, quiet=False):
    rc, out = run([sys.executable, PLOT] + args)
    if not quiet:
        sys.stdout.write(out)
    return rc


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def check_png(path):
    ok = os.path.isfile(path) and os.path.getsize(path) > 1000 and read(path, "rb")[:8] == PNG_MAGIC
    check(ok, "%s is a non-empty PNG" % os.path.basename(path))


def pngs(folder):
    return sorted(f for f in os.listdir(folder) if f.endswith(".png")) if os.path.isdir(folder) else []


def same_bytes(dir_a, dir_b):
    names = pngs(dir_a)
    return bool(names) and names == pngs(dir_b) and all(
        read(os.path.join(dir_a, n), "rb") == read(os.path.join(dir_b, n), "rb") for n in names)


# ------------------------------------------------------------------------------------------------


def test_synthetic_render_and_readme(tmp):
    csv_path = os.path.join(tmp, "results_fake.csv")
    write(csv_path, FAKE_CSV)
    readme = os.path.join(tmp, "README.md")
    write(readme, README_BEFORE + README_PLACEHOLDER + README_MIDDLE + README_PLACEHOLDER + README_AFTER)
    out_dir = os.path.join(tmp, "plots")

    check(run_plot([csv_path, "--out-dir", out_dir, "--readme", readme]) == 0, "plot.py exits 0")
    check_png(os.path.join(out_dir, "fp16_d128_hist.png"))
    check_png(os.path.join(out_dir, "fp16_d128_tflops.png"))
    again = os.path.join(tmp, "plots_again")
    run_plot([csv_path, "--out-dir", again, "--no-readme"], quiet=True)
    check(same_bytes(out_dir, again), "rendering the same CSV twice gives byte-identical PNGs")

    text = read(readme)
    check(text.startswith(README_BEFORE), "README text above the first begin marker is unchanged")
    check(text.endswith(README_AFTER), "README text from the last end marker on is unchanged")
    check("\nText between.\n" in text, "README text between the two sections is unchanged")
    table = text[len(README_BEFORE): text.find("<!-- results-table:end -->")]
    summary = text[text.find("<!-- results-summary:begin -->"):]
    check(README_PLACEHOLDER.strip() not in text, "both placeholders were replaced")
    check("0.5000 / " in table, "the table holds a time from the CSV (FA2 at S=256: 0.5000 ms)")
    check("25.0%" in table and "50.0%" in table, "the table holds % of FA2 from the CSV")
    check("FAKE GPU" in table and "0000000" in table, "the table names the GPU and git revision of the CSV")
    check("**FAIL** (no time)" in table, "a stage that failed its check is shown without a time")
    check("results_fake.csv" in table, "the table says which CSV it came from")
    check("`01_fake` (not a stage of this tree)" in table, "a stage the tree does not have is named as such")
    check("Stages of this tree without results in this CSV:" in table, "stages the CSV lacks are named")
    check("`01_fake` (not a stage of this tree): 25.0-31.2% of FA2" in summary,
          "the summary gives a stage's range of % of FA2")

    # --check: passes on what plot.py wrote; fails on an edited cell and on an edited sentence.
    check(run_plot(["--check", "--readme", readme, "--out-dir", out_dir]) == 0,
          "--check passes on the README plot.py wrote (the CSV named in it)")
    for old, new, what in (("0.5000 / ", "0.5001 / ", "a table cell"), ("25.0-31.2% of FA2", "25.0-31.3% of FA2", "a sentence")):
        edited = os.path.join(tmp, "EDITED.md")
        write(edited, text.replace(old, new, 1))
        check(run_plot(["--check", "--readme", edited, csv_path, "--out-dir", out_dir], quiet=True) == 1,
              "--check fails when %s of the README was edited" % what)
    os.remove(os.path.join(out_dir, "fp16_d128_tflops.png"))
    check(run_plot(["--check", "--readme", readme, "--out-dir", out_dir], quiet=True) == 1,
          "--check fails when a plot the README links to is missing")

    # Without a FA2 time there is no % of FA2: the plots fall back to TFLOP/s instead of failing.
    no_fa2 = os.path.join(tmp, "no_fa2.csv")
    write(no_fa2, "".join(line + "\n" for line in FAKE_CSV.splitlines() if not line.startswith("fa2,")))
    out2 = os.path.join(tmp, "plots_no_fa2")
    check(run_plot([no_fa2, "--out-dir", out2, "--no-readme"]) == 0, "plot.py exits 0 without an FA2 reference")
    check_png(os.path.join(out2, "fp16_d128_hist.png"))

    # A README without the markers is an error, and stays untouched.
    plain = os.path.join(tmp, "PLAIN.md")
    write(plain, "no markers here\n")
    check(run_plot([csv_path, "--out-dir", out_dir, "--readme", plain], quiet=True) == 2, "a README without markers is refused")
    check(read(plain) == "no markers here\n", "a README without markers is left as it was")


def test_committed_csv(tmp):
    """The CSV the README is generated from renders, twice to the same bytes."""
    if not os.path.exists(COMMITTED_CSV):
        check(False, "%s exists" % os.path.relpath(COMMITTED_CSV, REPO))
        return
    first, second = os.path.join(tmp, "committed_1"), os.path.join(tmp, "committed_2")
    check(run_plot([COMMITTED_CSV, "--out-dir", first, "--no-readme"]) == 0, "plot.py renders plots/results/latest.csv")
    run_plot([COMMITTED_CSV, "--out-dir", second, "--no-readme"], quiet=True)
    check(len(pngs(first)) >= 2, "the committed CSV gives plots (%d PNGs)" % len(pngs(first)))
    for name in pngs(first):
        check_png(os.path.join(first, name))
    check(same_bytes(first, second), "rendering the committed CSV twice gives byte-identical PNGs")


def stale_pages(args):
    """The pages `tools/gen_docs.py --check` reports stale with these extra arguments, and its rc."""
    rc, out = run([sys.executable, os.path.join(TOOLS, "gen_docs.py"), "--check"] + args)
    return rc, set(re.findall(r"stale generated section\(s\) in (\S+)", out))


def test_committed_wgmma_peak(tmp):
    """The committed stage pages: every sm_90a stage's headline tables have its % of wgmma peak, equal
    to its TFLOP/s in the page's results CSV over wgmma_m64n256k16_2wg of the same dtype in
    plots/results/ceilings_latest.csv; no other stage's page has that column; and a changed or
    missing ceilings CSV makes `gen_docs.py --check` report the Hopper pages (and only those) stale."""
    sys.path.insert(0, TOOLS)
    import ceilings_doc
    import results_csv
    import stages
    ceilings_csv = os.path.join(REPO, "plots", "results", "ceilings_latest.csv")
    if not os.path.exists(ceilings_csv):
        check(False, "plots/results/ceilings_latest.csv exists")
        return
    ceiling_meta, ceiling_rows = ceilings_doc.read_ceilings_csv(ceilings_csv)
    peaks = {r["dtype"]: float(r["value"]) for r in ceiling_rows if r["name"] == "wgmma_m64n256k16_2wg"}
    clocks = ceilings_doc.sm_clocks(ceiling_rows)
    hopper, others, others_with_column = [], [], []
    for stage in stages.all_stages():
        page_path = os.path.join(REPO, "docs", "stages", stage.name + ".md")
        text = read(page_path)
        section = text.split("<!-- results:begin -->")[1].split("<!-- results:end -->")[0]
        if stage.target != "sm_90a":
            others.append(stage.name)
            if "wgmma peak" in section:
                others_with_column.append(stage.name)
            continue
        pinned = re.search(r"<!-- results-csv: (\S+) -->", text)
        csv_path = os.path.join(REPO, pinned.group(1) if pinned else os.path.join("plots", "results", "latest.csv"))
        results_meta, rows = results_csv.read_results_csv(csv_path)
        results = [r for r in rows if r["impl"] == stage.name and r["series"] == "headline"]
        if not results:  # a stage newer than the CSV: its page says so, and has no % of peak to check
            check("has no rows for `%s`" % stage.name in section and "wgmma peak" not in section,
                  "%s: not in %s, and its page's results say so (no %% of wgmma peak)"
                  % (stage.name, os.path.relpath(csv_path, REPO)))
            continue
        results_gpu = results_meta.get("gpu")
        if results_gpu != ceiling_meta.get("gpu"):
            # Results from another card than the ceilings': no column, and the sentence says why
            # (gen_docs.py's Ceilings.why_not), rather than a % of a peak the card did not have.
            why = "No %% of wgmma peak column: the ceilings in `plots/results/ceilings_latest.csv` were " \
                  "measured on %s, these results on %s" % (ceiling_meta.get("gpu") or "an unrecorded GPU",
                                                          results_gpu or "an unrecorded GPU")
            hopper.append(stage.name)
            check("wgmma peak |" not in section and why in section,
                  "%s: %s is of %s, the ceilings of %s: no %% of wgmma peak column, and the page says why"
                  % (stage.name, os.path.relpath(csv_path, REPO), results_gpu, ceiling_meta.get("gpu")))
            continue
        compared, wrong, dtypes = 0, [], set()
        for title, table in re.findall(r"^\*\*(.*?)\*\*\n\n((?:\|.*\n?)+)", section, re.M):
            m = re.match(r"(fp16|bf16), head_dim (\d+), batch (\d+), heads (\d+)$", title)
            if not m:
                if "wgmma peak" in table:
                    wrong.append("%s: a %% of wgmma peak column in a table that is not a headline one" % title)
                continue
            dtype, head_dim, batch, heads = m.group(1), m.group(2), m.group(3), m.group(4)
            dtypes.add(dtype)
            lines = table.strip().splitlines()
            header = [c.strip() for c in lines[0].strip("|").split("|")]
            column = "%s %% of wgmma peak" % stage.name
            if column not in header:
                wrong.append("%s: no column" % title)
                continue
            for line in lines[2:]:
                cells = [c.strip() for c in line.strip("|").split("|")]
                row = [r for r in results if (r["dtype"], r["head_dim"], r["batch"], r["heads"], r["seq_q"], r["seq_kv"])
                       == (dtype, head_dim, batch, heads, cells[0], cells[0])]
                if len(row) != 1 or not row[0]["tflops"]:
                    wrong.append("%s S=%s: %d CSV rows" % (title, cells[0], len(row)))
                    continue
                want = "%.1f" % (100.0 * float(row[0]["tflops"]) / peaks[dtype])
                compared += 1
                if cells[header.index(column)] != want:
                    wrong.append("%s S=%s: %s, not %s" % (title, cells[0], cells[header.index(column)], want))
        hopper.append(stage.name)
        sentence_ok = all("%s for %s (SM clock %s during that run)" % (
            ceilings_doc.fmt(peaks[d], "TFLOP/s"), d, ceilings_doc.fmt(clocks[("wgmma_m64n256k16_2wg", d)], "MHz"))
            in section for d in dtypes) and "`plots/results/ceilings_latest.csv`" in section and "(../ceilings.md)" in section
        check(compared > 0 and not wrong and sentence_ok,
              "%s: %% of wgmma peak = TFLOP/s of %s / wgmma_m64n256k16_2wg of %s in %d cells, and the sentence "
              "names the ceiling%s" % (stage.name, os.path.relpath(csv_path, REPO), "/".join(sorted(dtypes)), compared,
                                       " (%s)" % "; ".join(wrong[:3]) if wrong else ""))
    check(hopper and others and not others_with_column,
          "no %% of wgmma peak on the pages of the %d stages that are not sm_90a (%d sm_90a pages have it)%s"
          % (len(others), len(hopper), ": %s" % ", ".join(others_with_column) if others_with_column else ""))

    # --check depends on the ceilings CSV for the Hopper pages only: compared with the committed
    # ceilings (whatever else may be stale in this tree), halved peaks or no ceilings CSV at all make
    # exactly the Hopper pages stale.
    _, baseline = stale_pages(["--sections", "results", "--ceilings-csv", ceilings_csv])
    halved = os.path.join(tmp, "ceilings_halved.csv")
    with open(ceilings_csv) as f:
        write(halved, "".join(re.sub(r"^(wgmma_m64n256k16_2wg,\w+,)([0-9.]+)",
                                     lambda m: m.group(1) + "%.1f" % (float(m.group(2)) / 2), line) for line in f))
    hopper_pages = {"docs/stages/%s.md" % s for s in hopper}
    for what, ceilings in (("halved wgmma peaks", halved), ("no ceilings CSV", os.path.join(tmp, "no_ceilings.csv"))):
        rc, stale = stale_pages(["--sections", "results", "--ceilings-csv", ceilings])
        check(rc == 1 and stale - baseline == hopper_pages - baseline and not (stale - baseline - hopper_pages),
              "gen_docs.py --check with %s: the Hopper pages are stale, no other (%d new)" % (what, len(stale - baseline)))


def test_sentences_and_columns():
    """results_tables on in-memory data: parents, Hopper stages, old and new CSV formats."""
    sys.path.insert(0, TOOLS)
    import results_tables
    import stages
    from results_csv import COLUMNS

    def declared(name, parent, target="sm_80"):
        return stages.Stage(name=name, parent=parent, idea="fake", target=target, features=(), sass={}, spill_budget={})

    decl = {"01_a": declared("01_a", None), "02_b": declared("02_b", "01_a"),
            "03_h": declared("03_h", "02_b", "sm_90a"), "04_new": declared("04_new", "03_h")}
    # Old format: no kind, no pct columns, no kv_heads/causal; plus a stage the tree does not have.
    old_csv = ("# gpu=FAKE\nimpl,dtype,head_dim,batch,heads,seq_q,seq_kv,median_ms,tflops,status\n"
               "01_a,fp16,128,1,1,1024,1024,2.0,1,PASS\n01_a,fp16,128,1,1,2048,2048,8.0,1,PASS\n"
               "02_b,fp16,128,1,1,1024,1024,1.0,2,PASS\n02_b,fp16,128,1,1,2048,2048,8.05,1,PASS\n"
               "03_h,fp16,128,1,1,1024,1024,0.5,4,PASS\n03_h,fp16,128,1,1,2048,2048,9.0,1,PASS\n"
               "99_gone,fp16,128,1,1,1024,1024,3.0,1,PASS\n99_gone,fp16,128,1,1,2048,2048,3.0,1,PASS\n"
               "fa2,fp16,128,1,1,1024,1024,1.0,2,PASS\nfa2,fp16,128,1,1,2048,2048,4.0,2,PASS\n"
               "cudnn,fp16,128,1,1,1024,1024,0.25,8,PASS\ncudnn,fp16,128,1,1,2048,2048,2.0,4,PASS\n")
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(old_csv)
    try:
        meta, rows = results_tables.load_results(f.name)
    finally:
        os.remove(f.name)
    check(all(r["kind"] == ("reference" if r["impl"] in ("fa2", "cudnn") else "stage") for r in rows),
          "an old CSV without 'kind' gets it from the name")
    check(all(r["causal"] == 0 and r["kv_heads"] == r["heads"] and r["alibi"] == 0 and r["series"] == "headline"
              and r["part"] == "" for r in rows),
          "an old CSV without causal/kv_heads/alibi/series/part reads as non-causal headline rows with kv_heads = heads")
    b = [r for r in rows if r["impl"] == "02_b" and r["seq_q"] == 1024][0]
    check(b["pct"] == 100.0 and b["pct_cudnn"] == 25.0, "pct_of_fa2 and pct_of_cudnn are computed when the CSV lacks them")

    groups = results_tables.make_groups(rows)
    bodies = results_tables.readme_bodies(groups, meta, "/x/r.csv", "/x/README.md", "/x/plots", decl)
    summary, table = bodies["results-summary"], bodies["results-table"]
    print(summary)
    check("Against its parent `01_a`: faster (time -50.0%) at S = 1024; within 1% elsewhere" in summary.replace("head_dim 128, ", ""),
          "02_b is faster than its parent at S=1024 and within 1% (+0.6%) at S=2048")
    check("Against its parent `02_b`: faster (time -50.0%) at S = 1024; slower (time +11.8%) at S = 2048" in summary.replace("head_dim 128, ", ""),
          "03_h is faster at S=1024 and slower at S=2048 than its parent")
    check("22.2-50.0% of cuDNN" in summary, "an sm_90a stage's sentence gives its % of cuDNN")
    check("/ 50.0%" in table.split("| [03_h]")[1].split("\n")[0] and "sm_90a stages: / % of cuDNN" in table,
          "an sm_90a stage's table cells add its % of cuDNN")
    check("/ 25.0%" not in table.split("| [02_b]")[1].split("\n")[0], "an sm_80 stage's cells have no % of cuDNN")
    check("`99_gone` (not a stage of this tree)" in table and "`99_gone`" in summary,
          "a stage the tree no longer has is shown and said so")
    check("No results in this CSV for `04_new`" in summary and "04_new" in table,
          "a declared stage the CSV lacks is named in the table and the summary")
    check("faster than FA2 at S = 1024" in summary.replace("head_dim 128, ", ""), "faster than FA2 is said where it is")

    # New format: extra columns, causal and GQA rows form their own configurations.
    new_csv = io.StringIO()
    columns = COLUMNS + ["causal", "kv_heads", "future_column"]
    writer = csv.DictWriter(new_csv, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for causal, kv_heads in ((0, 8), (1, 8), (0, 2)):
        for impl in ("01_a", "fa2"):
            writer.writerow(dict(impl=impl, kind="stage" if impl != "fa2" else "reference", dtype="bf16", head_dim=64,
                                 batch=2, heads=8, seq_q=512, seq_kv=512, median_ms=1.0, tflops=1.0, status="PASS",
                                 causal=causal, kv_heads=kv_heads, future_column="x"))
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(new_csv.getvalue())
    try:
        meta, rows = results_tables.load_results(f.name)
    finally:
        os.remove(f.name)
    titles = sorted(g.title() for g in results_tables.make_groups(rows))
    slugs = sorted(g.slug for g in results_tables.make_groups(rows))
    check(titles == ["bf16, head_dim 64, batch 2, heads 8", "bf16, head_dim 64, causal, batch 2, heads 8",
                     "bf16, head_dim 64, kv_heads 2, batch 2, heads 8"],
          "causal and kv_heads rows form configurations of their own (%s)" % titles)
    check(slugs == ["bf16_d64", "bf16_d64_causal", "bf16_d64_kv2"], "and plots of their own (%s)" % slugs)


def general_csv():
    """A synthetic CSV (FAKE numbers) with every series: the headline rows of three stages and the
    references, then causal, any-length, grouped-query and ALiBi rows."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS_FOR_TESTS, lineterminator="\n")
    out.write("# gpu=FAKE GPU\n# git=0000000\n")
    writer.writeheader()

    def row(impl, series, seq, ms, heads=32, kv_heads=32, causal=0, alibi=0, status="PASS"):
        kind = "reference" if impl in ("fa2", "cudnn") else "stage"
        flops = 4.0 * 16 * heads * seq * seq * 128 / (2.0 if causal else 1.0)
        writer.writerow(dict(impl=impl, kind=kind, series=series, dtype="fp16", head_dim=128, batch=16, heads=heads,
                             kv_heads=kv_heads, causal=causal, alibi=alibi, seq_q=seq, seq_kv=seq,
                             median_ms=ms if status == "PASS" else "", min_ms=ms if status == "PASS" else "",
                             tflops="%g" % (flops / (ms * 1e-3) / 1e12) if status == "PASS" else "", status=status))

    for seq, scale in ((1024, 1.0), (4096, 16.0)):
        for impl, ms in (("11_g", 0.80), ("13_g", 0.78), ("14_g", 0.77), ("fa2", 0.82), ("cudnn", 0.45)):
            row(impl, "headline", seq, ms * scale)
        for impl, ms in (("13_g", 0.40), ("14_g", 0.50), ("fa2", 0.44), ("cudnn", 0.25)):
            row(impl, "causal", seq, ms * scale, causal=1)
        for impl, ms in (("14_g", 0.70), ("fa2", 0.75)):
            row(impl, "gqa", seq, ms * scale, kv_heads=8)
        row("cudnn", "gqa", seq, "", kv_heads=8, status="unavailable: fake reason: no GQA kernel")
        row("14_g", "alibi", seq, 0.77 * scale * 1.04, alibi=1)
    # S = 1000 against 1024: 11_g at 0.80 ms for 1024 runs 1000 in 0.80 ms too (no gain from fewer FLOPs).
    for seq, impl, ms in ((1000, "11_g", 0.80), (1000, "14_g", 0.74), (4000, "11_g", 12.4), (4000, "14_g", 12.0)):
        row(impl, "any_length", seq, ms)
    row("fa2", "any_length", 1000, 0.80)
    return out.getvalue()


def test_general_series(tmp):
    """The causal, any-length, grouped-query and ALiBi parts of the README, from a synthetic CSV."""
    sys.path.insert(0, TOOLS)
    import results_tables
    import stages

    def declared(name, parent, features):
        return stages.Stage(name=name, parent=parent, idea="fake", target="sm_80", features=tuple(features), sass={},
                            spill_budget={})

    decl = {"11_g": declared("11_g", None, ["any_length"]), "13_g": declared("13_g", "11_g", ["any_length", "causal"]),
            "14_g": declared("14_g", "13_g", ["any_length", "causal", "gqa", "alibi"]),
            "15_g": declared("15_g", "14_g", ["any_length", "causal", "gqa", "alibi"])}
    path = os.path.join(tmp, "general.csv")
    write(path, general_csv())
    meta, rows = results_tables.load_results(path)
    groups = results_tables.make_groups(rows)
    check([g.slug for g in groups] == ["fp16_d128", "fp16_d128_causal", "fp16_d128_any_length", "fp16_d128_kv8",
                                       "fp16_d128_alibi"],
          "one configuration per series, headline first (%s)" % [g.slug for g in groups])
    check([g.slug for g in groups if g.plotted()] == ["fp16_d128", "fp16_d128_causal", "fp16_d128_kv8"],
          "plots for the headline, causal and grouped-query configurations only")
    bodies = results_tables.readme_bodies(groups, meta, path, os.path.join(tmp, "README.md"), os.path.join(tmp, "plots"),
                                          decl)
    table, summary = bodies["results-table"], bodies["results-summary"]
    print(table)
    print(summary)
    headline_table = table.split("**Causal attention**")[0]
    check("**fp16, head_dim 128, batch 16, heads 32**" in headline_table and "causal" not in headline_table.lower(),
          "the headline table holds no causal rows")
    causal = table.split("**fp16, head_dim 128, causal, batch 16, heads 32**")[1].split("**Any length**")[0]
    # 13_g causal at S=1024: 0.40 ms against FA2 causal's 0.44 ms = 110.0%; TFLOP/s with half the FLOPs.
    check("| [13_g]" in causal and "0.4000 / 343.6 / 110.0%" in causal,
          "causal table: % of FA2 run causal (0.44 / 0.40 = 110.0%), TFLOP/s of half the FLOPs (343.6)")
    check("`is_causal=True`" in table and "2 · batch · heads · S² · head_dim" in table,
          "the causal part says FA2/cuDNN ran with is_causal=True and how FLOPs are counted")
    check("Stages of this tree without results in this CSV: 15_g." in causal,
          "the causal table names the declaring stages without rows (and only those)")
    any_length = table.split("**Any length**")[1].split("**Grouped-query attention**")[0]
    check("S=1000 (vs 1024)" in any_length and "S=4000 (vs 4096)" in any_length,
          "any-length columns name the headline length they are compared with")
    # 11_g: 1000 in 0.80 ms = 327.7 TFLOP/s against 1024 in 0.80 ms = 343.6: 95.4%.
    check("327.7 / 343.6 = 95.4%" in any_length, "any-length cell: TFLOP/s per useful FLOP against the headline's")
    check("| FlashAttention-2 (PyTorch flash backend) | fp16, head_dim 128, batch 16, heads 32 | 327.7 / 335.2 = 97.8% | – |"
          in any_length, "the references' own any-length cost is shown where measured, '–' where not")
    gqa = table.split("**Grouped-query attention**")[1].split("**ALiBi**")[0]
    check("32 query heads share 8 K/V heads (query head h reads K/V head h / 4)" in gqa and "`enable_gqa=True`" in gqa,
          "the GQA part says the ratio and that FA2/cuDNN ran with enable_gqa=True")
    check("0.7000 / 392.7 / 107.1%" in gqa and "| cuDNN (PyTorch cudnn backend) | unavailable | unavailable |" in gqa
          and "cudnn: unavailable: fake reason: no GQA kernel" in gqa,
          "GQA table: % of FA2 with enable_gqa; a reference without a kernel is shown unavailable with its reason")
    alibi = table.split("**ALiBi**")[1]
    check("take no ALiBi slopes" in alibi and "0.8008 / 96.2%" in alibi,
          "ALiBi: the stage against itself without ALiBi (0.77 / 0.8008 = 96.2%), and why there is no library reference")
    check("- 14_g: 107.1% of FA2, faster than FA2 at every shape measured" in summary.replace("`", "")
          and "- 11_g: 97.6% of FA2. " not in summary.replace("`", ""), "the GQA summary gives % of FA2 with enable_gqa")
    headline_sentences = summary.split("**Causal**")[0]
    check("- `13_g` (not a stage of this tree)" not in headline_sentences and "`13_g`: 105.1% of FA2" in headline_sentences,
          "headline sentences are over headline rows only (13_g: 0.82 / 0.78 = 105.1%)")
    causal_summary = summary.split("**Causal**")[1].split("**Any length**")[0]
    check("`13_g`: 110.0% of FA2, faster than FA2 at every shape measured." in causal_summary
          and "Against its parent `11_g`" not in causal_summary
          and "`14_g`: 88.0% of FA2. Against its parent `13_g`: slower (time +25.0%) at every shape measured."
          in causal_summary, "causal sentences: % of FA2 causal, the parent only where it has causal rows")
    check("`11_g`: 95.4-98.4% of its TFLOP/s at the headline length; lowest at fp16, head_dim 128, S = 1000." in summary,
          "the any-length sentence gives the range and where it is lowest")
    check("`14_g`: 96.2% of its speed without ALiBi (time +4.0%)." in summary, "the ALiBi sentence gives the cost")

    # A stage page (tools/gen_docs.py): the headline per configuration; each other series in one
    # table, against the parent only where the parent has rows of that series.
    import gen_docs
    page = gen_docs.results_section("14_g", "13_g", (meta, groups), path, gen_docs.Freshness(meta))
    check("**fp16, head_dim 128, batch 16, heads 32**" in page and "| S | 13_g ms | 14_g ms | time vs 13 |" in page,
          "stage page: the headline table against the parent")
    check("**Causal (seq_q = seq_kv; % of FA2 run with is_causal=True), batch 16, heads 32**" in page
          and "| 1024 | 0.4000 | 0.5000 | +25.0% |" in page, "stage page: the causal table against a parent with causal rows")
    alibi_page = page.split("**ALiBi")[1] if "**ALiBi" in page else ""
    check("| S | 14_g ms | 14_g TFLOP/s | 14_g % of FA2 |" in alibi_page and "13_g" not in alibi_page.split("Median")[0],
          "stage page: the ALiBi table without a parent that has no ALiBi rows")
    check("compared with FA2 run with is_causal=True" in page and "enable_gqa=True" in page,
          "stage page: the legend says what the causal and grouped-query rows are compared with")
    hopper_page = gen_docs.results_section("14_g", "13_g", (meta, groups), path, gen_docs.Freshness(meta), hopper=True)
    check("| 14_g % of FA2 | 14_g % of cuDNN |" in hopper_page and "| 106.5 | 58.4 |" in hopper_page
          and "% of cuDNN" not in page, "stage page: a Hopper-track stage gets its % of cuDNN (0.45 / 0.77 = 58.4%)")

    # The Hopper stage's % of the wgmma peak (FAKE ceilings): in the headline tables only, the stage's
    # TFLOP/s over the ceiling of the table's dtype, with one sentence saying where the ceiling comes
    # from; left out, with the reason, where the ceilings CSV is missing, lacks the dtype or is of
    # another GPU.
    def ceilings(name, text):
        target = os.path.join(tmp, name)
        write(target, text)
        return target

    fp16_ceiling = ceilings("ceilings_fp16.csv", "# gpu=FAKE GPU\nname,dtype,value,unit,method\n"
                            "wgmma_m64n256k16_2wg,fp16,800.0,TFLOP/s,fake\n"
                            "sm_clock_during_wgmma_m64n256k16_2wg,fp16,1500.0,MHz,fake\n"
                            "wgmma_m64n256k16_1wg,fp16,700.0,TFLOP/s,fake\n")
    peak_page = gen_docs.results_section("14_g", "13_g", (meta, groups), path, gen_docs.Freshness(meta), hopper=True,
                                         peaks=gen_docs.WgmmaPeaks(fp16_ceiling))
    headline_part, series_part = peak_page.split("**Causal")[0], "**Causal" + peak_page.split("**Causal")[1]
    expected = ["%.1f" % (100.0 * groups[0].get("14_g", (s, s))["tf"] / 800.0) for s in (1024, 4096)]
    rows = {line.split("|")[1].strip(): line for line in headline_part.splitlines() if line.startswith("| ")}
    check("| 14_g % of cuDNN | 14_g % of wgmma peak |" in headline_part
          and rows["1024"].endswith("| 106.5 | 58.4 | %s |" % expected[0]) and rows["4096"].endswith("| %s |" % expected[1]),
          "stage page: the headline table gets the Hopper stage's %% of wgmma peak (TFLOP/s / 800.0 = %s, %s)"
          % tuple(expected))
    check("wgmma peak" not in series_part.split("Median of the timed")[0] and "wgmma peak" not in page,
          "stage page: no % of wgmma peak in the series tables, nor for a stage that is not Hopper")
    check(("800.0 TFLOP/s for fp16 (SM clock 1500 MHz during that run)" in peak_page
           and "`wgmma_m64n256k16_2wg`" in peak_page and "`%s`" % fp16_ceiling in peak_page
           and "(../ceilings.md)" in peak_page and "700.0" not in peak_page),
          "stage page: the sentence gives the 2-warpgroup ceiling's value, dtype, SM clock, CSV and the ceilings page")
    for what, peaks, reason in (
            ("a missing ceilings CSV", gen_docs.WgmmaPeaks(os.path.join(tmp, "no_such_ceilings.csv")), "does not exist"),
            ("a ceilings CSV without fp16", gen_docs.WgmmaPeaks(ceilings("ceilings_bf16.csv", "# gpu=FAKE GPU\n"
                                                                        "name,dtype,value,unit,method\n"
                                                                        "wgmma_m64n256k16_2wg,bf16,900.0,TFLOP/s,x\n")),
             "has no `wgmma_m64n256k16_2wg` row for fp16"),
            ("ceilings of another GPU", gen_docs.WgmmaPeaks(ceilings("ceilings_other.csv", "# gpu=OTHER GPU\n"
                                                                    "name,dtype,value,unit,method\n"
                                                                    "wgmma_m64n256k16_2wg,fp16,800.0,TFLOP/s,x\n")),
             "were measured on OTHER GPU, these results on FAKE GPU")):
        without = gen_docs.results_section("14_g", "13_g", (meta, groups), path, gen_docs.Freshness(meta), hopper=True,
                                           peaks=peaks)
        check("% of wgmma peak |" not in without and "No % of wgmma peak column: " in without and reason in without
              and "| 106.5 | 58.4 |" in without,
              "stage page with %s: no %% of wgmma peak column, and the sentence says why (%s)" % (what, reason))

    # The plots: rendered for the plotted configurations, --check passes, and an old-format README
    # check (no such rows) is not disturbed by the code path.
    readme = os.path.join(tmp, "GENERAL_README.md")
    write(readme, README_BEFORE + README_MIDDLE + README_AFTER)
    out_dir = os.path.join(tmp, "general_plots")
    check(run_plot([path, "--out-dir", out_dir, "--readme", readme], quiet=True) == 0, "plot.py renders every series")
    check(pngs(out_dir) == sorted("fp16_d128%s_%s.png" % (suffix, kind) for suffix in ("", "_causal", "_kv8")
                                  for kind in ("hist", "tflops")),
          "PNGs for the headline, causal and grouped-query configurations (%s)" % pngs(out_dir))
    check(run_plot(["--check", "--readme", readme, "--out-dir", out_dir], quiet=True) == 0,
          "--check passes on a README with every series")


def test_timing_words(tmp):
    """The generated words follow the CSV's timing: a CSV timed in rounds says 'same rounds' where one
    timed separately (or without a timing line) says 'same run', and its any-length rows are compared
    with the headline length they shared rounds with (S = 1020 with 4096 once 1000 took 1024)."""
    sys.path.insert(0, TOOLS)
    import gen_docs
    import results_tables
    text = general_csv()
    odd = next(line for line in text.splitlines() if line.startswith("11_g,stage,any_length,fp16,128,16,32,32,0,0,1000,"))
    words = {}
    for timing, csv_text in (("separate", text), ("rounds", text.replace("# git=0000000\n", "# git=0000000\n# timing=rounds\n"))):
        path = os.path.join(tmp, "timing_%s.csv" % timing)
        write(path, csv_text + odd.replace(",1000,1000,", ",1020,1020,") + "\n")
        meta, rows = results_tables.load_results(path)
        groups = results_tables.make_groups(rows)
        bodies = results_tables.readme_bodies(groups, meta, path, os.path.join(tmp, "README.md"),
                                              os.path.join(tmp, "plots"), declared={})
        page = gen_docs.results_section("14_g", "13_g", (meta, groups), path, gen_docs.Freshness(meta))
        words[timing] = bodies["results-table"] + bodies["results-summary"] + page
    separate, rounds = words["separate"], words["rounds"]
    check("same rounds" not in separate and "timed in rounds" not in separate and "S=1020 (vs 1024)" in separate
          and "Median of the timed launches" in separate and "(same run, same GPU)" in separate,
          "a CSV without a timing line: 'same run', the timed launches, S = 1020 against the next length, 1024")
    check("(its headline row, same rounds)" in rounds and "pad to), same rounds." in rounds
          and "without, same rounds):" in rounds and "timed in rounds: per shape" in rounds
          and "S=1020 (vs 4096)" in rounds and "same run" not in rounds,
          "a CSV timed in rounds: 'same rounds' in the README's words, and S = 1020 against 4096 (its rounds)")
    check("Minimum of the timed rounds (per shape" in rounds and "(same rounds, same GPU)" in rounds
          and "timed in shuffled rounds" in rounds, "a CSV timed in rounds: the stage page's legend and source say so")


def test_flops_and_reference_check():
    """The causal FLOP count, and torch_reference.py's check of causal and grouped-query cases."""
    sys.path.insert(0, TOOLS)
    from results_csv import attention_flops
    full = attention_flops(16, 32, 4096, 4096, 128)
    check(full == 4.0 * 16 * 32 * 4096 * 4096 * 128, "non-causal FLOPs: 4 B H Sq Skv D")
    check(attention_flops(16, 32, 4096, 4096, 128, causal=True) == full / 2,
          "causal FLOPs at seq_q = seq_kv: half the non-causal count (the papers' convention)")
    check(attention_flops(1, 1, 2, 6, 1, causal=True) == 4.0 * (2 * 6 - 2 * 2 / 2.0)
          and attention_flops(1, 1, 6, 2, 1, causal=True) == 4.0 * (2 * 2 / 2.0),
          "causal FLOPs with seq_q != seq_kv: the area below the bottom-right diagonal, as common/harness.h counts")
    import torch_reference
    check(torch_reference.attention_flops is attention_flops, "torch_reference.py counts FLOPs with the same function")
    options = torch_reference.sdpa_options(32, 8, True)
    check(options == {"is_causal": True, "enable_gqa": True} and torch_reference.sdpa_options(32, 32, False) ==
          {"is_causal": False}, "SDPA options: is_causal always, enable_gqa only where K/V heads are shared")
    try:
        import torch
    except ImportError:
        print("skip  torch_reference.py's causal/GQA check (no torch here; not counted as passed)")
        return
    torch.manual_seed(0)
    batch, seq, heads, kv_heads, head_dim = 2, 70, 8, 2, 64
    q = torch.randn(batch, seq, heads, head_dim, dtype=torch.float16)
    k, v = (torch.randn(batch, seq, kv_heads, head_dim, dtype=torch.float16) for _ in range(2))

    def sdpa(k_, v_, causal, gqa=True):
        return torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2).float(), k_.transpose(1, 2).float(), v_.transpose(1, 2).float(), is_causal=causal,
            enable_gqa=gqa).to(torch.float16)

    for causal in (False, True):
        out = sdpa(k, v, causal)
        check(torch_reference.check_output(torch, q, k, v, out, causal, 16, 1)[0],
              "the reference check passes a correct %s GQA output" % ("causal" if causal else "non-causal"))
        check(not torch_reference.check_output(torch, q, k, v, out, not causal, 16, 1)[0],
              "and fails it when checked %s" % ("without the mask" if causal else "with a causal mask"))
    # K/V head h % kv_heads instead of h / (heads / kv_heads): the wrong grouping fails.
    wrong = sdpa(k.repeat(1, 1, heads // kv_heads, 1), v.repeat(1, 1, heads // kv_heads, 1), False, gqa=False)
    check(not torch_reference.check_output(torch, q, k, v, wrong, False, 16, 1)[0],
          "the reference check fails an output with the wrong query-to-K/V head mapping")


def part_csv(name, dtype, git="0000000", gpu="FAKE GPU", stage_pct="50.00", timing=None):
    """A part as bench.py --part writes it (FAKE numbers): a stage whose stored % of FA2 (stage_pct)
    differs from what its times would give (100%), so that a merge that recomputed it would show.
    timing None: no '# timing=' line, as before that line existed (separate)."""
    lines = ["# gpu=%s" % gpu, "# driver=000.00", "# cuda=0.0", "# torch=0.0.0+fake", "# sm_clock_mhz_at_start=100",
             "# sm_clock_mhz_at_end=200", "# date=2000-01-01T00:0%d:00Z" % (0 if dtype == "fp16" else 5),
             "# git=%s" % git, "# command=tools/bench.py --part --dtypes %s" % dtype]
    lines += ["# timing=%s" % timing] if timing else []
    lines += ["# method=fake", "# part=%s" % name, ",".join(COLUMNS_FOR_TESTS)]
    for impl, kind, pct in (("01_a", "stage", stage_pct), ("fa2", "reference", "100.00")):
        lines.append(",".join(str(x) for x in (impl, kind, "headline", dtype, 128, 2, 4, 4, 0, 0, 256, 256, 1.0, 1.0,
                                               0.0537, pct, "", 1e-4, 1e-4, "PASS", name)))
    return "\n".join(lines) + "\n"


def test_merge(tmp):
    """bench.py --merge: parts become one CSV, each row keeping its part's ratios; parts that are not
    one run are refused with nothing written."""
    build = fake_build(tmp)
    out_dir = os.path.join(tmp, "merge_out")
    parts = os.path.join(out_dir, "parts")
    os.makedirs(parts)
    readme = os.path.join(tmp, "MERGE_README.md")
    write(readme, README_BEFORE + README_MIDDLE + README_AFTER)
    common = ["--build-dir", build, "--out-dir", out_dir, "--plots-dir", os.path.join(tmp, "merge_plots"),
              "--readme", readme, "--no-docs"]
    write(os.path.join(parts, "part_fp16_d128.csv"), part_csv("part_fp16_d128", "fp16"))
    write(os.path.join(parts, "part_bf16_d128.csv"), part_csv("part_bf16_d128", "bf16", stage_pct="60.00",
                                                              timing="separate"))
    rc, out = run([sys.executable, BENCH, "--merge"] + common)
    sys.stdout.write(out)
    latest = os.path.join(out_dir, "latest.csv")
    check(rc == 0 and os.path.exists(latest), "bench.py --merge merges every parts/*.csv and exits 0")
    text = read(latest) if os.path.exists(latest) else ""
    rows = list(csv.DictReader(line for line in text.splitlines() if not line.startswith("#")))
    pct = {(r["impl"], r["dtype"]): r["pct_of_fa2"] for r in rows}
    check(pct.get(("01_a", "fp16")) == "50.00" and pct.get(("01_a", "bf16")) == "60.00",
          "each row keeps the %% of FA2 of its own part (%s)" % pct)
    check("# parts=part_fp16_d128, part_bf16_d128" in text and re.search(
        r"# part_bf16_d128=date=2000-01-01T00:05:00Z; git=0000000; gpu=FAKE GPU; driver=000.00; cuda=0.0;", text),
        "the merged CSV records each part's date, git revision, GPU, driver and CUDA version")
    check("# date=2000-01-01T00:00:00Z" in text and "# sm_clock_mhz_at_end=200" in text
          and re.search(r"results_fake-gpu_20000101-000000\.csv", read(readme)) is not None,
          "the merged CSV is dated by its first part and the README is generated from it")
    check("measured in parts (part_fp16_d128, part_bf16_d128)" in read(readme), "the README says it was run in parts")
    check("# timing=separate" in text, "a part without a timing line merges with a separate one, as separate")

    refused = [
        ("part_fp16_d128_again.csv", part_csv("part_fp16_d128_again", "fp16"), "both measured fp16"),
        ("part_bf16_d64.csv", part_csv("part_bf16_d64", "fp16", git="1111111"), "differ in git"),
        ("part_fp16_d64.csv", part_csv("part_fp16_d64", "fp16", timing="rounds"), "differ in timing"),
        ("not_a_part.csv", part_csv("x", "fp16").replace("# part=x\n", ""), "is not a part"),
    ]
    for name, content, reason in refused:
        extra = os.path.join(parts, name)
        write(extra, content)
        before = sorted(os.listdir(out_dir))
        rc, out = run([sys.executable, BENCH, "--merge"] + common)
        check(rc == 2 and reason in out and sorted(os.listdir(out_dir)) == before,
              "--merge refuses parts that are not one run (%s): exit 2, nothing written" % reason)
        os.remove(extra)

    # A real part through the fake runner: --part writes only its part CSV.
    rc, out = run([sys.executable, BENCH, "--part", "--dtypes", "bf16", "--head-dims", "64", "--seqs", "128",
                   "--series", "headline", "--compute-capability", "80", "--no-reference"] + common)
    check(rc == 0 and os.path.exists(os.path.join(parts, "part_bf16_d64.csv")) and "tools/bench.py --merge" in out,
          "bench.py --part writes parts/part_<dtypes>_<head_dims>.csv and says how to merge")
    check("results-table" in read(readme) and "part_bf16_d64" not in read(readme),
          "a part leaves the README alone")


FAKE_FA_RUN = r'''#!%(python)s
# A stand-in for build/fa_run (made-up numbers): --list --json, and rows as the runner prints them;
# --causal halves the time, --alibi adds 2%%, --kv-heads is accepted, --no-time checks only. Its CSV
# has a causal column but no kv_heads or alibi column, as the real runner's: bench.py takes those
# from the command. FAKE_FA_RUN_FAIL=<stage>@<seq>,... fails those checks.
import json, os, sys
args = sys.argv[1:]
if args[:2] == ["--list", "--json"]:
    print(json.dumps([
        {"name": "01_fake", "parent": None, "target": "sm_80", "min_compute_capability": 80, "arch_specific": False,
         "features": [], "dtypes": ["fp16", "bf16"], "head_dims": [64, 128]},
        {"name": "02_fake", "parent": "01_fake", "target": "sm_80", "min_compute_capability": 80, "arch_specific": False,
         "features": ["any_length", "causal"], "dtypes": ["fp16"], "head_dims": [64, 128]},
        {"name": "03_fake_hopper", "parent": "02_fake", "target": "sm_90a", "min_compute_capability": 90,
         "arch_specific": True, "features": [], "dtypes": ["fp16", "bf16"], "head_dims": [64, 128]},
        {"name": "04_fake_general", "parent": "02_fake", "target": "sm_80", "min_compute_capability": 80,
         "arch_specific": False, "features": ["any_length", "causal", "gqa", "alibi"], "dtypes": ["fp16", "bf16"],
         "head_dims": [64, 128]}]))
    sys.exit(0)
flags = {"--causal", "--alibi", "--no-time"}
opt, i = {}, 0
while i < len(args):
    if args[i] in flags:
        opt[args[i]] = True
        i += 1
    else:
        opt[args[i]] = args[i + 1]
        i += 2
causal = 1 if opt.get("--causal") else 0
print("stage dtype D B H Sq Skv median_ms min_ms TFLOP/s max_abs_err rel_l2_err check")
with open(opt["--csv"], "w") as f:
    f.write("# gpu=FAKE GPU; sm=80; sms=1; cuda_driver=0.0; cuda_runtime=0.0; git=fake\n")
    f.write("impl,dtype,head_dim,batch,heads,causal,seq_q,seq_kv,median_ms,min_ms,tflops,max_abs_err,rel_l2_err,tolerance,status\n")
    for seq in opt["--seq"].split(","):
        for i, stage in enumerate(opt["--stage"].split(",")):
            ms = 0.001 * int(seq) / (i + 1) * (0.5 if causal else 1.0) * (1.02 if opt.get("--alibi") else 1.0)
            failing = os.environ.get("FAKE_FA_RUN_FAIL", "").split(",")
            status = "FAIL: fake bad element" if "%%s@%%s" %% (stage, seq) in failing else "PASS"
            times = ("%%g" %% ms, "%%g" %% ms, "1.0") if status == "PASS" and not opt.get("--no-time") else ("-",) * 3
            print("%%-18s %%s %%s %%s %%s %%s %%s %%s %%s %%s 1e-4 1e-4  %%s" %% ((
                stage, opt["--dtype"], opt["--head-dim"], opt["--batch"], opt["--heads"], seq, seq) + times + (status,)),
                flush=True)
            f.write("%%s,%%s,%%s,%%s,%%s,%%d,%%s,%%s,%%s,%%s,%%s,1e-4,1e-4,2e-4,%%s\n" %% ((
                stage, opt["--dtype"], opt["--head-dim"], opt["--batch"], opt["--heads"], causal, seq, seq)
                + tuple(t.replace("-", "") for t in times) + (status,)))
'''


def fake_build(tmp):
    build = os.path.join(tmp, "build")
    os.makedirs(build, exist_ok=True)
    fa_run = os.path.join(build, "fa_run")
    write(fa_run, FAKE_FA_RUN % {"python": sys.executable})
    os.chmod(fa_run, os.stat(fa_run).st_mode | stat.S_IXUSR)
    return build


def test_bench(tmp):
    build = fake_build(tmp)
    out_dir = os.path.join(tmp, "bench_out")
    readme = os.path.join(tmp, "BENCH_README.md")
    write(readme, README_BEFORE + README_MIDDLE + README_AFTER)
    common = ["--build-dir", build, "--compute-capability", "80", "--seqs", "128,256", "--any-length-seqs", "100",
              "--no-reference", "--out-dir", out_dir, "--plots-dir", os.path.join(tmp, "bench_plots"), "--readme", readme]

    rc, out = run([sys.executable, BENCH, "--dry-run", "--series", "headline"] + common)
    check(rc == 0 and "dry run" in out and out.count("fa_run --stage") == 4,
          "bench.py --dry-run --series headline prints one fa_run command per (dtype, head_dim) and exits 0")
    check("--stage 01_fake,04_fake_general --dtype bf16" in out and "--stage 01_fake,02_fake,04_fake_general --dtype fp16" in out,
          "a stage is run only at the dtypes it declares")
    check(not os.path.exists(out_dir), "--dry-run writes nothing")

    rc, out = run([sys.executable, BENCH, "--dry-run"] + common)
    commands = [line for line in out.splitlines() if "fa_run --stage" in line]
    print("\n".join(commands))
    check(rc == 0 and len(commands) == 20, "--dry-run: one fa_run command per (dtype, head_dim, series) that has "
                                           "stages (%d of 20)" % len(commands))
    check("--stage 02_fake,04_fake_general --dtype fp16 --head-dim 128 --seq 128,256 --batch 16 --heads 32 --causal "
          "--warmup" in out and "--stage 04_fake_general --dtype bf16 --head-dim 64 --seq 128,256 --batch 16 --heads 32 "
          "--causal --warmup" in out, "causal rows: fa_run --causal, only the stages that declare causal")
    check("--stage 02_fake,04_fake_general --dtype fp16 --head-dim 64 --seq 100 --batch" in out,
          "any-length rows: the --any-length-seqs, only the stages that declare any_length")
    check("--stage 04_fake_general --dtype fp16 --head-dim 64 --seq 128,256 --batch 16 --heads 32 --kv-heads 8 "
          "--warmup" in out, "gqa rows: fa_run --kv-heads 8, only the stages that declare gqa")
    check("--stage 04_fake_general --dtype bf16 --head-dim 128 --seq 128,256 --batch 16 --heads 32 --alibi --warmup"
          in out, "alibi rows: fa_run --alibi, only the stages that declare alibi")
    check("series causal: 12 results; stages declaring causal: 02_fake, 04_fake_general" in out,
          "--dry-run counts the results of each series and names its stages")
    check(re.search(r"the launches alone .* for the \d+ of 54 results that", out) is not None,
          "--dry-run sums the launch time from an earlier CSV's medians, counting what it has none for")
    rc, out = run([sys.executable, BENCH, "--dry-run", "--feature-stages", "newest"] + common)
    check("series causal: 8 results; stages declaring causal (the newest per target): 04_fake_general" in out
          and "--stage 02_fake,04_fake_general --dtype fp16 --head-dim 128 --seq 128,256 --batch 16 --heads 32 --causal"
          not in out, "--feature-stages newest runs only the newest declaring stage per target")
    with_references = [a for a in common if a != "--no-reference"]
    rc, out = run([sys.executable, BENCH, "--dry-run", "--timing", "separate"] + with_references)
    separate_counts = [line for line in out.splitlines() if line.startswith("bench.py: series ")]
    check("torch_reference.py --dtype fp16 --head-dim 128 --seqs 128,256 --causal-seqs 128,256 --any-length-seqs 100 "
          "--gqa-seqs 128,256 --kv-heads 8 --batch" in out,
          "--timing separate: one torch_reference.py command per (dtype, head_dim) with the causal, any-length and "
          "gqa cases, no ALiBi")

    # Rounds (the default): fa_run checks only, then interleaved.py per (dtype, head_dim) and series group.
    write(os.path.join(build, "libfa_capi.so"), "")  # a real run would also need PyTorch; a dry run says so
    rc, out = run([sys.executable, BENCH, "--dry-run"] + with_references)
    lib = os.path.join(build, "libfa_capi.so")
    rounds_commands = [line for line in out.splitlines() if "interleaved.py --lib %s " % lib in line]
    check(rc == 0 and "(timing: rounds)" in out and "torch_reference.py" not in out
          and len([line for line in out.splitlines() if "fa_run --stage" in line and line.endswith(".csv")
                   and " --no-time --csv " in line]) == 20,
          "--dry-run in rounds: the same fa_run commands, each --no-time, and no torch_reference.py")
    check(len(rounds_commands) == 12 and "--stages 01_fake,02_fake,04_fake_general --dtype fp16 --head-dim 128 --seqs "
          "128,256 --alibi-stages 04_fake_general --any-length 100,0 --any-length-stages 02_fake,04_fake_general "
          "--any-length-references --batch 16 --heads 32 --warmup 5 --reps 20 --seed 1 --check-rows 4 --csv" in out
          and "--stages 02_fake,04_fake_general --dtype fp16 --head-dim 64 --seqs 128,256 --causal --batch" in out
          and "--stages 04_fake_general --dtype bf16 --head-dim 64 --seqs 128,256 --kv-heads 8 --batch" in out,
          "--dry-run in rounds: per (dtype, head_dim) one interleaved.py command for the headline shapes with the "
          "ALiBi and any-length rows (S = 100 beside 128), one for causal, one for gqa (%d)" % len(rounds_commands))
    check(len(separate_counts) == 5 and separate_counts == [line for line in out.splitlines()
                                                            if line.startswith("bench.py: series ")],
          "--dry-run in rounds: as many results per series as separately")
    check(("PyTorch is not importable" in out) == (importlib.util.find_spec("torch") is None),
          "--dry-run in rounds says when a real run on this machine would time separately (no PyTorch)")
    os.remove(os.path.join(build, "libfa_capi.so"))

    rc, out = run([sys.executable, BENCH] + common)
    sys.stdout.write(out)
    check(rc == 0, "bench.py with a fake fa_run exits 0")
    check("bench.py: timing each result in a series of its own (--timing separate), not in rounds: --no-reference"
          in out, "--no-reference times separately, with a line saying why")
    check("skipping 03_fake_hopper: built for sm_90a" in out and "this GPU is 8.0" in out,
          "an sm_90a stage is skipped on compute capability 8.0, with a message")
    progress = [line for line in out.splitlines() if line.startswith("[") and " left]" in line]
    total = 20 + 12 + 6 + 8 + 8  # headline, causal, any_length, gqa, alibi
    check(len(progress) == total, "one progress line per result (%d of %d)" % (len(progress), total))
    check(progress and progress[-1].startswith("[%d/%d" % (total, total)) and "~0s left" in progress[-1],
          "the last progress line counts %d/%d with nothing left" % (total, total))
    latest = os.path.join(out_dir, "latest.csv")
    rows = []
    if os.path.exists(latest):
        rows = list(csv.DictReader(line for line in read(latest).splitlines() if not line.startswith("#")))
    header = list(rows[0].keys()) if rows else []
    check(all(c in header for c in ("pct_of_fa2", "pct_of_cudnn", "series", "causal", "kv_heads", "alibi", "part")),
          "the CSV has pct_of_fa2, pct_of_cudnn, series, causal, kv_heads, alibi and part (%s)" % header)
    gqa = [r for r in rows if r["series"] == "gqa" and r["kind"] == "stage"]
    check(gqa and all(r["kv_heads"] == "8" and r["heads"] == "32" and r["causal"] == "0" for r in gqa),
          "gqa rows say kv_heads 8 (taken from the command: the runner's CSV has no such column)")
    causal = [r for r in rows if r["series"] == "causal"]
    check(causal and all(r["causal"] == "1" for r in causal), "causal rows say causal 1")
    check(all(r["alibi"] == ("1" if r["series"] == "alibi" else "0") for r in rows), "only alibi rows say alibi 1")
    check("skipped=03_fake_hopper" in (read(latest) if os.path.exists(latest) else ""), "the CSV says what was skipped")
    text = read(readme)
    # The CSV is named after the GPU bench.py finds (nvidia-smi: a real one on a GPU machine).
    check(re.search(r"results_[A-Za-z0-9.-]+_\d{8}-\d{6}\.csv", text) is not None and "| [01_fake]" not in text and "`02_fake` (not a stage of this tree)" in text,
          "bench.py rewrote the README's results from its CSV")
    check("**Causal attention**" in text and "**ALiBi**" in text and "**Any length**" in text
          and "**Grouped-query attention**" in text, "the README got the causal, any-length, GQA and ALiBi parts")


def test_help():
    for cmd in (["bash", os.path.join(REPO, "scripts", "run_all.sh"), "--help"],
                [sys.executable, BENCH, "--help"], [sys.executable, PLOT, "--help"],
                [sys.executable, os.path.join(TOOLS, "torch_reference.py"), "--help"]):
        rc, out = run(cmd)
        name = os.path.basename(cmd[1])
        check(rc == 0 and "--" in out and "usage" in out.lower(), "%s --help lists its options" % name)


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIPPED: matplotlib is not installed (python3 -m pip install matplotlib)")
        return 77
    with tempfile.TemporaryDirectory(prefix="test_plots_") as tmp:
        test_synthetic_render_and_readme(tmp)
        test_committed_csv(tmp)
        test_committed_wgmma_peak(tmp)
        test_sentences_and_columns()
        test_general_series(tmp)
        test_timing_words(tmp)
        test_flops_and_reference_check()
        test_merge(tmp)
        test_bench(tmp)
        test_help()
    print("%d passed, %d failed" % (len(passes), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
