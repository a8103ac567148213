#!/usr/bin/env python3
"""CPU test of the results pipeline's Python tools, without a GPU.

  tools/plot.py          renders a synthetic CSV and the committed one (plots/results/latest.csv),
                         twice each, to the same bytes; rewrites only the marked sections of a
                         README copy and of the docs/results.md beside it (creating that page);
                         --check passes on what it wrote and fails on an edited cell or sentence,
                         a missing plot or a missing docs/results.md
  the committed README   its tracks section: per track of stages/tracks.json one table with one
                         row per stage, in track order, whose numbers are the CSV's at the headline
                         shape (fp16, head_dim 128, S = 4096) and whose links reach the stage pages;
                         one plot per track, at most about 1000 pixels wide; every PNG in plots/ is
                         shown by the README or docs/results.md and every one they show exists;
                         the backward track's table is the backward benchmark CSV's
                         (plots/results/backward_latest.csv) at fp16, head_dim 128, non-causal,
                         its largest S, with a note under it naming that CSV, its GPU and the case
  the stage pages        each page's results section is compact and its numbers are the committed
                         CSV's (TFLOP/s, time against the parent from the same rounds, % of FA2
                         and cuDNN); its diff section gives the diffstat against the parent and the
                         command that shows the diff; gen_docs.py --check sees a changed CSV;
                         a backward-track page's results are the backward CSV's, per dtype,
                         head_dim and S (a decoding-track page's: tests/test_decode_docs.py)
  the backward tables    a FAKE backward CSV (a failed row, a deterministic mode, causal rows, longer
                         S at other dtypes and head_dims): the README's and docs/results.md's table
                         and note, --backward-csv and --check, and the backward pages' sections
  tools/results_tables   the generated sentences say faster/slower/within where the numbers do;
                         % of cuDNN where cuDNN was measured; an old CSV (fewer columns), a newer
                         one (causal, kv_heads, unknown columns), a stage the tree no longer has and
                         a stage the CSV lacks are all shown, not crashed on; the README's track
                         tables from a made-up stage list (parents across tracks said so)
  the series            a synthetic CSV with causal, any-length, grouped-query and ALiBi rows:
                         each its own part of docs/results.md (causal against FA2 causal with half
                         the FLOPs, any length against the same stage at the next headline length,
                         GQA with an unavailable cuDNN, ALiBi against the stage itself), headline
                         sentences over headline rows only, plots only where there are references,
                         stage pages (tools/gen_docs.py) with the headline table against the parent
                         and one line per other series; the causal FLOP count; torch_reference.py's
                         fp64 check of causal and GQA cases (where torch is installed, on the CPU)
  tools/bench.py         with a fake fa_run: one progress line per result with an estimate of the
                         time left, an sm_90a stage skipped with a message on a compute capability
                         8.0 GPU, the CSV with pct_of_cudnn and the new columns, every series run
                         only for the stages declaring its feature (--dry-run lists the commands
                         and counts, of either timing: rounds with fa_run --no-time and
                         tools/interleaved.py, separate with tools/torch_reference.py), the README
                         and docs/results.md rewritten, --no-reference timing separately with a line
                         saying why; --part and --merge (ratios kept per part, per-part facts,
                         parts that are not one run refused, a different timing among them); the
                         generated words following the CSV's timing (tests/test_bench_rounds.py
                         tests the rounds themselves); a stage selected by id or <track>_NN
  every script           answers --help with its options

The numbers below are FAKE (made up for this test, not measured). Exit codes: 0 pass, 1 fail,
77 skipped (matplotlib is not installed; CTest reports it as skipped through SKIP_RETURN_CODE).
"""

import collections
import csv
import importlib.util
import io
import os
import re
import stat
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOOLS = os.path.join(REPO, "tools")
PLOT = os.path.join(TOOLS, "plot.py")
BENCH = os.path.join(TOOLS, "bench.py")
COMMITTED_CSV = os.path.join(REPO, "plots", "results", "latest.csv")
# The backward benchmark's committed CSV (tools/backward_bench.py): the backward track's numbers.
COMMITTED_BACKWARD_CSV = os.path.join(REPO, "plots", "results", "backward_latest.csv")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
sys.path.insert(0, TOOLS)
from results_csv import COLUMNS as COLUMNS_FOR_TESTS  # noqa: E402  (the columns bench.py writes)
import stages  # noqa: E402  (tools/stages.py)

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

README_BEFORE = "# Fake project\n\nText above the tracks.\n\n<!-- tracks:begin -->\n"
README_PLACEHOLDER = "no results yet\n"
README_AFTER = "<!-- tracks:end -->\n\nText below, kept as is.\n"
README_EMPTY = README_BEFORE + README_AFTER

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


def png_size(path):
    """(width, height) in pixels of a PNG (its IHDR chunk)."""
    data = read(path, "rb")[:24]
    return struct.unpack(">II", data[16:24])


def section(text, name):
    """The text between a section's markers."""
    return text.split("<!-- %s:begin -->" % name, 1)[1].split("<!-- %s:end -->" % name, 1)[0]


def test_synthetic_render_and_readme(tmp):
    csv_path = os.path.join(tmp, "results_fake.csv")
    write(csv_path, FAKE_CSV)
    readme = os.path.join(tmp, "README.md")
    page = os.path.join(tmp, "docs", "results.md")
    write(readme, README_BEFORE + README_PLACEHOLDER + README_AFTER)
    out_dir = os.path.join(tmp, "plots")
    # Without a backward benchmark CSV, the backward track's table comes from this CSV as every track's.
    no_backward = ["--backward-csv", os.path.join(tmp, "no_backward.csv")]

    check(run_plot([csv_path, "--out-dir", out_dir, "--readme", readme] + no_backward) == 0, "plot.py exits 0")
    # Neither fake stage is a stage of this tree: no track plot, one plot of the stages not in it.
    check(pngs(out_dir) == ["untracked_fp16_d128.png"], "the plots of a CSV whose stages this tree lacks (%s)" % pngs(out_dir))
    check_png(os.path.join(out_dir, "untracked_fp16_d128.png"))
    again = os.path.join(tmp, "plots_again")
    run_plot([csv_path, "--out-dir", again, "--no-readme"], quiet=True)
    check(same_bytes(out_dir, again), "rendering the same CSV twice gives byte-identical PNGs")

    text = read(readme)
    check(text.startswith(README_BEFORE) and text.endswith(README_AFTER),
          "README text outside the tracks markers is unchanged")
    tracks = section(text, "tracks")
    check(README_PLACEHOLDER.strip() not in text, "the placeholder was replaced")
    check("results_fake.csv" in tracks and "(docs/results.md)" in tracks,
          "the tracks section names its CSV and links docs/results.md")
    check("In the CSV but not stages of this tree: `01_fake`, `02_fake`." in tracks,
          "the tracks section names the CSV's stages that the tree does not have")
    names = [s.name for s in stages.all_stages()]
    rows = re.findall(r"^\| \[`(\w+)`\]", tracks, re.M)
    check(rows == names and tracks.count("no result in this CSV") == len(names),
          "the tracks section has a row per stage of this tree, in track order, each without a result here "
          "(the backward track's too: without a backward benchmark CSV it comes from this CSV)")
    check("_Backward numbers from" not in tracks, "without a backward benchmark CSV, no note under the backward table")

    check(os.path.exists(page), "plot.py created docs/results.md beside the README")
    full = read(page) if os.path.exists(page) else "<!-- all-results:begin --><!-- all-results:end -->"
    results = section(full, "all-results")
    check("0.5000 / " in results, "docs/results.md holds a time from the CSV (FA2 at S=256: 0.5000 ms)")
    check("25.0%" in results and "50.0%" in results, "docs/results.md holds % of FA2 from the CSV")
    check("FAKE GPU" in results and "0000000" in results, "docs/results.md names the GPU and git revision of the CSV")
    check("**FAIL** (no time)" in results, "a stage that failed its check is shown without a time")
    check("results_fake.csv" in results, "docs/results.md says which CSV it came from")
    check("`01_fake` (not a stage of this tree)" in results, "a stage the tree does not have is named as such")
    check("`01_fake` (not a stage of this tree): 25.0-31.2% of FA2" in results,
          "docs/results.md gives a stage's range of % of FA2")
    check("![" in results and "(../plots/untracked_fp16_d128.png)" in results, "docs/results.md shows the plot")

    # --check: passes on what plot.py wrote; fails on an edited cell, sentence or README row, a
    # missing plot, a missing docs/results.md.
    check(run_plot(["--check", "--readme", readme, "--out-dir", out_dir] + no_backward) == 0,
          "--check passes on the README plot.py wrote (the CSV named in it)")
    edited_dir = os.path.join(tmp, "edited")
    os.makedirs(os.path.join(edited_dir, "docs"))
    for old, new, what in (("0.5000 / ", "0.5001 / ", "a table cell"),
                           ("25.0-31.2% of FA2", "25.0-31.3% of FA2", "a sentence")):
        write(os.path.join(edited_dir, "README.md"), text)
        write(os.path.join(edited_dir, "docs", "results.md"), full.replace(old, new, 1))
        check(run_plot(["--check", "--readme", os.path.join(edited_dir, "README.md"), csv_path, "--out-dir", out_dir]
                       + no_backward, quiet=True) == 1, "--check fails when %s of docs/results.md was edited" % what)
    write(os.path.join(edited_dir, "README.md"), text.replace("no result in this CSV", "no result", 1))
    write(os.path.join(edited_dir, "docs", "results.md"), full)
    check(run_plot(["--check", "--readme", os.path.join(edited_dir, "README.md"), csv_path, "--out-dir", out_dir]
                   + no_backward, quiet=True) == 1, "--check fails when a row of the README's tracks was edited")
    os.remove(os.path.join(edited_dir, "docs", "results.md"))
    write(os.path.join(edited_dir, "README.md"), text)
    check(run_plot(["--check", "--readme", os.path.join(edited_dir, "README.md"), csv_path, "--out-dir", out_dir]
                   + no_backward, quiet=True) == 2, "--check fails (2) when docs/results.md is missing")
    os.remove(os.path.join(out_dir, "untracked_fp16_d128.png"))
    check(run_plot(["--check", "--readme", readme, "--out-dir", out_dir] + no_backward, quiet=True) == 1,
          "--check fails when a plot docs/results.md shows is missing")

    # Without a FA2 time there is no % of FA2: the plots fall back to TFLOP/s instead of failing.
    no_fa2 = os.path.join(tmp, "no_fa2.csv")
    write(no_fa2, "".join(line + "\n" for line in FAKE_CSV.splitlines() if not line.startswith("fa2,")))
    out2 = os.path.join(tmp, "plots_no_fa2")
    check(run_plot([no_fa2, "--out-dir", out2, "--no-readme"]) == 0, "plot.py exits 0 without an FA2 reference")
    check_png(os.path.join(out2, "untracked_fp16_d128.png"))

    # A README without the markers is an error, and stays untouched.
    plain_dir = os.path.join(tmp, "plain")
    os.makedirs(plain_dir)
    plain = os.path.join(plain_dir, "README.md")
    write(plain, "no markers here\n")
    check(run_plot([csv_path, "--out-dir", out_dir, "--readme", plain] + no_backward, quiet=True) == 2, "a README without markers is refused")
    check(read(plain) == "no markers here\n" and not os.path.exists(os.path.join(plain_dir, "docs")),
          "a README without markers is left as it was, and no docs/results.md is written")


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
    check(pngs(first) == pngs(os.path.join(REPO, "plots")),
          "plots/ holds exactly the PNGs the committed CSV gives (%s)" % (set(pngs(first)) ^ set(pngs(os.path.join(REPO, "plots")))))


def headline_rows(rows, dtype="fp16", head_dim="128", seq="4096"):
    return {r["impl"]: r for r in rows if r["series"] == "headline" and (r["dtype"], r["head_dim"], r["seq_q"])
            == (dtype, head_dim, seq) and r["status"] == "PASS"}


def change(mine, theirs):
    """The time change as the generated tables print it (from min_ms: the CSV is timed in rounds)."""
    value = round(100.0 * (float(mine["min_ms"]) / float(theirs["min_ms"]) - 1.0), 1)
    return "%+.1f%%" % (value if value != 0 else 0.0)


def test_committed_readme():
    """The committed README's tracks section, its plots and docs/results.md against the committed CSV."""
    import results_csv
    readme_text = read(os.path.join(REPO, "README.md"))
    if "<!-- tracks:begin -->" not in readme_text:
        check(False, "README.md has a tracks section")
        return
    tracks_text = section(readme_text, "tracks")
    meta, rows = results_csv.read_results_csv(COMMITTED_CSV)
    check(meta.get("timing") == "rounds", "the committed CSV is timed in rounds (its minima are compared)")
    cells = headline_rows(rows)
    declared = stages.by_name()
    parts = re.split(r"^### (.+)$", tracks_text, flags=re.M)
    titles = parts[1::2]
    check(titles == [t.title for t in stages.tracks()], "one part per track, in stages/tracks.json order (%s)" % titles)
    for track, title, body in zip(stages.tracks(), titles, parts[2::2]):
        names = [s.name for s in stages.all_stages() if s.track == track.name]
        table = [line for line in body.splitlines() if line.startswith("| [")]
        ids = [re.match(r"\| \[`(\w+)`\]\(([^)]+)\)", line).groups() for line in table]
        check([i for i, _ in ids] == names, "%s: one row per stage, in track order" % title)
        check(all(link == declared[i].page for i, link in ids) and all(os.path.exists(os.path.join(REPO, link))
                                                                       for _, link in ids),
              "%s: each row links its stage's page, which exists" % title)
        if names and all(declared[n].backward_features is not None for n in names) \
                and os.path.exists(COMMITTED_BACKWARD_CSV):
            check_backward_readme_part(title, body, [i for i, _ in ids], table, declared)
            continue
        wrong = []
        previous = None
        for (name, _), line in zip(ids, table):
            cols = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
            mine = cells.get(name)
            if mine is None:  # a stage newer than the committed run: said so, never a number
                if cols[2:] != ["no result in this CSV", "–", "–", "–"]:
                    wrong.append("%s: not in the CSV, but its row shows %s" % (name, cols[2:]))
                continue
            parent = declared[name].parent
            want = ["%.1f" % float(mine["tflops"]),
                    "–" if not parent else change(mine, cells[parent]) + ("" if parent == previous else
                                                                          " vs " + stages.short_id(parent)),
                    "%.1f%%" % float(mine["pct_of_fa2"]), "%.1f%%" % float(mine["pct_of_cudnn"])]
            if cols[1] != declared[name].idea.replace("|", "\\|") or cols[2:] != want:
                wrong.append("%s: %s, not %s" % (name, cols[2:], want))
            previous = name
        check(not wrong, "%s: idea, TFLOP/s, time vs parent, %% of FA2 and cuDNN are the CSV's at fp16, head_dim 128, "
                         "S = 4096 (%s)" % (title, "; ".join(wrong[:3])))
        plot = os.path.join(REPO, "plots", "%s.png" % track.name)
        if not any(cells.get(name) for name, _ in ids):  # no stage of the track in the committed run
            check("(plots/%s.png)" % track.name not in body and not os.path.exists(plot),
                  "%s: no stage in the CSV yet, so no plot" % title)
            continue
        check("(plots/%s.png)" % track.name in body and os.path.exists(plot) and png_size(plot)[0] <= 1040,
              "%s: its plot plots/%s.png, at most about 1000 pixels wide (%s)"
              % (title, track.name, png_size(plot) if os.path.exists(plot) else "missing"))
    check("fp16, head_dim 128, batch 16, heads 32, S = 4096, non-causal" in tracks_text.split("###")[0],
          "the line above the tables names the headline shape")
    # Every PNG in plots/ is shown somewhere, and everything shown exists.
    page_text = read(os.path.join(REPO, "docs", "results.md"))
    shown = set(re.findall(r"\]\(plots/([\w.-]+\.png)\)", readme_text)) | \
        set(re.findall(r"\]\(\.\./plots/([\w.-]+\.png)\)", page_text))
    present = set(pngs(os.path.join(REPO, "plots")))
    check(shown == present, "every PNG in plots/ is shown by the README or docs/results.md, and every one shown "
                            "exists (%s)" % sorted(shown ^ present))
    check(run_plot(["--check"], quiet=True) == 0, "plot.py --check passes on the committed README and docs/results.md")


def read_backward_csv(path):
    """(meta, rows) of a backward benchmark CSV, read here without tools/results_tables.py."""
    with open(path) as f:
        lines = f.read().splitlines()
    meta = {}
    for line in lines:
        if line.startswith("#"):
            key, _, value = line[1:].strip().partition("=")
            meta.setdefault(key.strip(), value.strip())
    return meta, list(csv.DictReader(line for line in lines if line.strip() and not line.startswith("#")))


def backward_row(rows, impl, dtype, head_dim, seq, causal):
    return next((r for r in rows if (r["impl"], r["dtype"], r["head_dim"], r["seq_q"], r["seq_kv"], r["causal"])
                 == (impl, dtype, str(head_dim), str(seq), str(seq), str(causal))), None)


def pct_text(value, dash="–"):
    return "%.1f%%" % float(value) if value not in ("", None) else dash


def backward_readme_cells(name, previous, rows, declared, seq):
    """A README backward row's cells after the idea, as the backward CSV gives them at fp16, head_dim
    128, S = seq, non-causal."""
    mine = backward_row(rows, name, "fp16", 128, seq, 0)
    if mine is None:
        return ["no result in this CSV", "–", "–", "–"]
    if mine["status"] != "PASS":
        word = mine["status"].split(":")[0]
        return ["unavailable" if word == "unavailable" else "**%s** (no time)" % word, "–", "–", "–"]
    parent = declared[name].parent
    change_text = "–"
    if parent and any(r["impl"] == parent for r in rows):  # a parent outside the backward CSV: no comparison
        theirs = backward_row(rows, parent, "fp16", 128, seq, 0)
        change_text = change(mine, theirs) if theirs is not None and theirs["status"] == "PASS" else "no time"
        change_text += "" if parent == previous else " vs " + stages.short_id(parent)
    return ["%.1f" % float(mine["tflops"]), change_text, pct_text(mine["pct_of_fa2"]), pct_text(mine["pct_of_cudnn"])]


def backward_headline(rows):
    """(seq, batch, heads) of the README's backward case: fp16, head_dim 128, non-causal, largest S."""
    cases = [r for r in rows if (r["dtype"], r["head_dim"], r["causal"]) == ("fp16", "128", "0")
             and r["seq_q"] == r["seq_kv"]]
    if not cases:
        return None, None, None
    seq = max(int(r["seq_q"]) for r in cases)
    first = next(r for r in cases if int(r["seq_q"]) == seq)
    return seq, first["batch"], first["heads"]


def check_backward_readme_part(title, body, ids, table, declared, csv_path=COMMITTED_BACKWARD_CSV):
    """The backward track's part of a README's tracks section against the backward benchmark CSV."""
    meta, rows = read_backward_csv(csv_path)
    seq, batch, heads = backward_headline(rows)
    wrong = []
    previous = None
    for name, line in zip(ids, table):
        cols = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))]
        want = backward_readme_cells(name, previous, rows, declared, seq)
        if cols[1] != declared[name].idea.replace("|", "\\|") or cols[2:] != want:
            wrong.append("%s: %s, not %s" % (name, cols[2:], want))
        previous = name
    check(not wrong, "%s: TFLOP/s, time vs parent, %% of FA2 and cuDNN are the backward CSV's at fp16, head_dim 128, "
                     "S = %s, non-causal (%s)" % (title, seq, "; ".join(wrong[:3])))
    check(not any(DETERMINISTIC in line for line in table), "%s: a stage's deterministic mode is no row of its own"
          % title)
    note = [line for line in body.splitlines() if line.startswith("_Backward numbers from")]
    check(len(note) == 1 and os.path.basename(csv_path) in note[0] and meta.get("gpu", "?") in note[0]
          and "fp16, head_dim 128, batch %s, heads %s, S = %s, non-causal" % (batch, heads, seq) in note[0]
          and body.splitlines().index(note[0]) > body.splitlines().index(table[-1]),
          "%s: one note under the table names the backward CSV, its GPU and the case (%s)" % (title, note))
    check("2.5x the forward's" in body.split("| stage |")[0],
          "%s: the text above the table says its numbers are the backward pass's (2.5x the forward's FLOPs)" % title)


DETERMINISTIC = "+deterministic"


def backward_page_problems(stage, text, rows, declared):
    """What in a backward-track page's results section differs from the backward CSV's rows: per
    (dtype, head_dim, S) its TFLOP/s, time vs parent (where the parent has rows), % of FA2 and cuDNN
    and the deterministic mode against the default, non-causal / causal in one cell where both ran."""
    mine = [r for r in rows if r["impl"] == stage.name]
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    data = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    data = [cols for cols in data if len(cols) >= 4 and cols[1].isdigit()]
    if not mine:
        ok = not data and "has no rows for `%s`" % stage.name in text and "tools/backward_bench.py" in text
        return [] if ok else ["%s: not in the backward CSV, but its page does not say so" % stage.name]
    shown = sorted({int(r["causal"]) for r in mine if not r["status"].startswith("unsupported")})
    parent = stage.parent if any(r["impl"] == stage.parent for r in rows) else None
    mode = stage.name + DETERMINISTIC
    with_mode = any(r["impl"] == mode for r in rows)

    def word(row):
        if row is None:
            return "-"
        return "n/a" if row["status"].startswith("unavailable") else row["status"].split(":")[0] or "-"

    problems, config = [], None
    for cols in data:
        if cols[0]:
            config = cols[0].split(", ")
        want = collections.OrderedDict((k, []) for k in ("tf", "parent", "fa2", "cudnn", "mode"))
        for causal in shown:
            row = backward_row(rows, stage.name, config[0], config[1], cols[1], causal)
            timed = row is not None and row["status"] == "PASS"
            want["tf"].append("%.1f" % float(row["tflops"]) if timed else word(row))
            theirs = backward_row(rows, parent, config[0], config[1], cols[1], causal) if parent else None
            want["parent"].append("-" if not timed else change(row, theirs) if theirs is not None
                                  and theirs["status"] == "PASS" else word(theirs))
            want["fa2"].append(pct_text(row["pct_of_fa2"], "-") if timed else "-")
            want["cudnn"].append(pct_text(row["pct_of_cudnn"], "-") if timed else "-")
            other = backward_row(rows, mode, config[0], config[1], cols[1], causal)
            want["mode"].append(word(other) if other is not None and other["status"] != "PASS"
                                else change(other, row) if timed and other is not None else "-")
        keys = ["tf"] + (["parent"] if parent else []) + ["fa2", "cudnn"] + (["mode"] if with_mode else [])
        expected = [" / ".join(want[k]) for k in keys]
        if cols[2:] != expected:
            problems.append("%s %s S=%s: %s, not %s" % (stage.name, config, cols[1], cols[2:], expected))
    shapes = {(r["dtype"], r["head_dim"], r["seq_q"]) for r in mine if int(r["causal"]) in shown}
    if len(data) != len(shapes):
        problems.append("%s: %d rows, not %d (one per dtype, head_dim and S)" % (stage.name, len(data), len(shapes)))
    if (parent is not None) != ("time vs `%s`" % parent in text if parent else "time vs" in text):
        problems.append("%s: a time vs parent column %s" % (stage.name, "missing" if parent else "without a parent"))
    return problems


def stale_pages(args):
    """The pages `tools/gen_docs.py --check` reports stale with these extra arguments, and its rc."""
    rc, out = run([sys.executable, os.path.join(TOOLS, "gen_docs.py"), "--check"] + args)
    return rc, set(re.findall(r"stale generated section\(s\) in (\S+)", out))


def test_committed_pages(tmp):
    """The committed stage pages: the results section is compact and its numbers are the committed
    CSV's; the diff section is the diffstat against the parent; a changed CSV makes every page
    stale."""
    import difflib
    import results_csv
    meta, rows = results_csv.read_results_csv(COMMITTED_CSV)
    backward_rows = read_backward_csv(COMMITTED_BACKWARD_CSV)[1] if os.path.exists(COMMITTED_BACKWARD_CSV) else None
    declared = stages.by_name()
    long_sections, wrong, diffs_wrong, backward_wrong = [], [], [], []
    for stage in stages.all_stages():
        text = read(os.path.join(REPO, stage.page))
        results = section(text, "results")
        if len(results.strip().splitlines()) > 35:
            long_sections.append("%s (%d lines)" % (stage.name, len(results.strip().splitlines())))
        parent = declared.get(stage.parent)
        config = None
        compared = 0
        backward = stage.backward_features is not None  # its results: the backward benchmark's CSV
        decode = stage.track == "decode"  # its results: the decoding benchmark's (tests/test_decode_docs.py)
        if backward and backward_rows is not None:
            backward_wrong += backward_page_problems(stage, results, backward_rows, declared)
        for line in results.splitlines() if not (backward or decode) else []:
            cols = [c.strip() for c in line.strip("|").split("|")] if line.startswith("| ") else []
            if len(cols) < 5 or not cols[1].isdigit():
                continue
            if cols[0]:
                config = cols[0].split(", ")
            mine = headline_rows(rows, config[0], config[1], cols[1]).get(stage.name)
            theirs = headline_rows(rows, config[0], config[1], cols[1]).get(stage.parent) if parent else None
            want = ["%.1f" % float(mine["tflops"])] + ([change(mine, theirs)] if parent else []) + \
                ["%.1f%%" % float(mine["pct_of_fa2"]), "%.1f%%" % float(mine["pct_of_cudnn"])]
            compared += 1
            if cols[2:] != want:
                wrong.append("%s %s S=%s: %s, not %s" % (stage.name, config, cols[1], cols[2:], want))
        measured = any(r.get("impl") == stage.name for r in rows)
        if backward or decode:
            pass
        elif not measured:  # a stage newer than the committed run: its page says so, with no table
            if compared or "has no rows for `%s`" % stage.name not in results:
                wrong.append("%s: not in the CSV, but its page does not say so" % stage.name)
        elif compared != 16:
            wrong.append("%s: %d cells, not 16 (fp16 and bf16, head_dim 128 and 64, 4 lengths)" % (stage.name, compared))
        diff = section(text, "diff")
        if parent is None:
            if "has no parent" not in diff:
                diffs_wrong.append(stage.name)
            continue
        added = removed = 0
        files = sorted(set(os.listdir(parent.folder)) | set(os.listdir(stage.folder)))
        for f in files:
            old = read(os.path.join(parent.folder, f)).splitlines() if os.path.exists(os.path.join(parent.folder, f)) else []
            new = read(os.path.join(stage.folder, f)).splitlines() if os.path.exists(os.path.join(stage.folder, f)) else []
            for line in difflib.unified_diff(old, new, n=0, lineterm=""):
                added += line.startswith("+") and not line.startswith("+++")
                removed += line.startswith("-") and not line.startswith("---")
        if ("`bash scripts/diff_stage.sh %s`" % stage.name not in diff
                or not re.search(r"\| \d+ files? changed \| %d \| %d \|" % (added, removed), diff)):
            diffs_wrong.append(stage.name)
    check(not long_sections, "every page's results section is at most 35 lines (%s)" % ", ".join(long_sections))
    check(not wrong, "every page's results table is the committed CSV's: TFLOP/s, time vs parent (minima of the same "
                     "rounds), %% of FA2 and cuDNN, 16 cells (%s)" % "; ".join(wrong[:3]))
    check(not backward_wrong, "every backward-track page's results table is the backward CSV's: per dtype, head_dim "
                              "and S its TFLOP/s, time vs parent, %% of FA2 and cuDNN, the deterministic mode against "
                              "the default (%s)" % "; ".join(backward_wrong[:3]))
    check(not diffs_wrong, "every page's diff section: the diffstat against its parent (lines added and removed as "
                           "diff -u counts them) and bash scripts/diff_stage.sh <id> (%s)" % ", ".join(diffs_wrong[:5]))

    # A CSV whose stage times are all 1% longer: every page's results are stale, no other page.
    slower = os.path.join(tmp, "slower.csv")

    def forward_slower(row):
        row["min_ms"] = "%g" % (float(row["min_ms"]) * 1.01)
        row["median_ms"] = "%g" % (float(row["median_ms"]) * 1.01)
        row["tflops"] = "%g" % (float(row["tflops"]) / 1.01)
        row["pct_of_fa2"] = row["pct_of_cudnn"] = ""
    write_with_passed_stage_rows(COMMITTED_CSV, slower, forward_slower)
    rc, stale = stale_pages(["--sections", "results", "--csv", slower])
    every = {s.page for s in stages.all_stages() if s.backward_features is None and s.track != "decode"}
    check(rc == 1 and stale == every, "gen_docs.py --check with a CSV 1%% slower: every stage page outside the "
                                      "backward and decoding tracks is stale, no other (%d of %d)"
          % (len(stale & every), len(every)))
    if backward_rows is None:
        return
    # A backward CSV whose stage times are all 1% longer: the backward pages are stale, no other.
    slower = os.path.join(tmp, "slower_backward.csv")

    def backward_slower(row):
        for column in ("min_ms", "median_ms"):
            row[column] = "%g" % (float(row[column]) * 1.01)
        row["tflops"] = "%.1f" % (float(row["tflops"]) / 1.01)
        row["pct_of_fa2"] = "%.2f" % (float(row["pct_of_fa2"]) / 1.01)
        row["pct_of_cudnn"] = "%.2f" % (float(row["pct_of_cudnn"]) / 1.01)
    write_with_passed_stage_rows(COMMITTED_BACKWARD_CSV, slower, backward_slower)
    rc, stale = stale_pages(["--sections", "results", "--backward-csv", slower])
    backward_pages = {s.page for s in stages.all_stages() if s.backward_features is not None}
    check(rc == 1 and stale == backward_pages and backward_pages,
          "gen_docs.py --check with a backward CSV 1%% slower (at another path, which every backward page names): "
          "every backward-track page is stale, no other (%d of %d)" % (len(stale & backward_pages),
                                                                      len(backward_pages)))


def write_with_passed_stage_rows(source, path, change):
    """Writes `source` (a results CSV: '#' lines, then a header 'impl,...' and rows) to `path` with
    change(row) applied to every passed stage row (a dict by column); a value holding a comma is quoted."""
    with open(source) as f:
        lines = f.read().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("impl,"))
    columns = lines[header].split(",")
    out = lines[:header + 1]
    for line in csv.reader(lines[header + 1:]):
        row = dict(zip(columns, line))
        if row["kind"] == "stage" and row["status"] == "PASS":
            change(row)
        out.append(",".join('"%s"' % row[c] if "," in row[c] else row[c] for c in columns))
    write(path, "\n".join(out) + "\n")


def test_sentences_and_columns():
    """results_tables on in-memory data: parents, old and new CSV formats, the README's tracks."""
    import results_tables
    from results_csv import COLUMNS

    def declared(name, parent, track="fake"):
        return stages.Stage(name=name, track=track, folder_name=name, parent=parent, idea="idea of " + name,
                            target="sm_80", features=(), sass={}, spill_budget={})

    decl = {"01_a": declared("01_a", None), "02_b": declared("02_b", "01_a"),
            "03_h": declared("03_h", "02_b", "other"), "04_new": declared("04_new", "03_h", "other")}
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

    groups = results_tables.make_groups(rows, order=list(decl))
    tracks = [stages.Track("fake", "Fake track", "what the fake track is about"), stages.Track("other", "Other", "")]
    texts = results_tables.generated_texts(groups, meta, "/x/r.csv", "/x/README.md", "/x/plots", decl, tracks)
    readme, page = texts["/x/README.md"][1], texts["/x/docs/results.md"][1]
    print(readme)
    print(page)
    check("Against its parent `01_a`: faster (time -50.0%) at S = 1024; within 1% elsewhere" in page.replace("head_dim 128, ", ""),
          "02_b is faster than its parent at S=1024 and within 1% (+0.6%) at S=2048")
    check("Against its parent `02_b`: faster (time -50.0%) at S = 1024; slower (time +11.8%) at S = 2048" in page.replace("head_dim 128, ", ""),
          "03_h is faster at S=1024 and slower at S=2048 than its parent (in another track)")
    check("22.2-50.0% of cuDNN" in page, "a stage's sentence gives its % of cuDNN")
    check("/ 50.0%" in page.split("| `03_h` |")[1].split("\n")[0] and "/ % of cuDNN" in page
          and "/ 25.0%" in page.split("| `02_b` |")[1].split("\n")[0],
          "every stage's table cells add its % of cuDNN where cuDNN was measured")
    check("`99_gone` (not a stage of this tree)" in page and "## Stages not in this tree" in page
          and "In the CSV but not stages of this tree: `99_gone`." in readme,
          "a stage the tree no longer has is shown and said so")
    check("No results in this CSV for `04_new`" in page and "Stages of this tree without results in this CSV: 04_new."
          in page, "a declared stage the CSV lacks is named in its track's table and sentences")
    check("faster than FA2 at S = 1024" in page.replace("head_dim 128, ", ""), "faster than FA2 is said where it is")
    # The README: per track a table at the CSV's length nearest 4096 (2048 here), in track order;
    # a parent that is not the row above is named (03_h's parent 02_b is in the other track).
    check(readme.split("### ")[1:3] and [p.split("\n")[0] for p in readme.split("### ")[1:]] == ["Fake track", "Other"]
          and "what the fake track is about." in readme, "the README: a part per track, its title and what it is about")
    check("| `01_a` | idea of 01_a | 1.0 | – | 50.0% | 25.0% |" in readme
          and "| `02_b` | idea of 02_b | 1.0 | +0.6% | 49.7% | 24.8% |" in readme
          and "| `03_h` | idea of 03_h | 1.0 | +11.8% vs 02_b | 44.4% | 22.2% |" in readme
          and "| `04_new` | idea of 04_new | no result in this CSV | – | – | – |" in readme,
          "the README's rows: TFLOP/s, time vs the parent (named when not the row above), % of FA2 and cuDNN")
    check("S = 2048, non-causal" in readme, "the README says the shape of its tables")
    plots = results_tables.plot_list(groups, decl, tracks)
    check([(p.name, p.stages, p.outside) for p in plots] ==
          [("fake.png", ["01_a", "02_b"], []), ("other.png", ["03_h"], ["02_b"]),
           ("fake_fp16_d128.png", ["01_a", "02_b"], []), ("other_fp16_d128.png", ["02_b", "03_h"], ["02_b"]),
           ("untracked_fp16_d128.png", ["99_gone"], [])],
          "the plots: a README plot per track (with the parents from other tracks), a plot per track and "
          "configuration (%s)" % [(p.name, p.stages, p.outside) for p in plots])

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


def general_stages():
    """A made-up track 'g' of four stages with the features of the general track."""
    def declared(name, parent, features):
        return stages.Stage(name=name, track="g", folder_name=name, parent=parent, idea="fake", target="sm_80",
                            features=tuple(features), sass={}, spill_budget={})

    return {"11_g": declared("11_g", None, ["any_length"]), "13_g": declared("13_g", "11_g", ["any_length", "causal"]),
            "14_g": declared("14_g", "13_g", ["any_length", "causal", "gqa", "alibi"]),
            "15_g": declared("15_g", "14_g", ["any_length", "causal", "gqa", "alibi"])}


def test_general_series(tmp):
    """The causal, any-length, grouped-query and ALiBi parts of docs/results.md and of the stage
    pages, from a synthetic CSV."""
    import gen_docs
    import results_tables
    decl = general_stages()
    tracks = [stages.Track("g", "G track", "")]
    path = os.path.join(tmp, "general.csv")
    write(path, general_csv())
    meta, rows = results_tables.load_results(path)
    groups = results_tables.make_groups(rows, order=list(decl))
    check([g.slug for g in groups] == ["fp16_d128", "fp16_d128_causal", "fp16_d128_any_length", "fp16_d128_kv8",
                                       "fp16_d128_alibi"],
          "one configuration per series, headline first (%s)" % [g.slug for g in groups])
    check([g.slug for g in groups if g.plotted()] == ["fp16_d128", "fp16_d128_causal", "fp16_d128_kv8"],
          "plots for the headline, causal and grouped-query configurations only")
    page = results_tables.page_body(groups, meta, path, os.path.join(tmp, "docs", "results.md"),
                                    os.path.join(tmp, "plots"), decl, tracks)
    print(page)
    headline_part = page.split("## Causal attention")[0]
    check("## G track" in headline_part and "**fp16, head_dim 128, batch 16, heads 32**" in headline_part
          and "causal" not in headline_part.lower(), "the track's headline table holds no causal rows")
    causal = page.split("**fp16, head_dim 128, causal, batch 16, heads 32**")[1].split("## Any length")[0]
    # 13_g causal at S=1024: 0.40 ms against FA2 causal's 0.44 ms = 110.0%; TFLOP/s with half the FLOPs.
    check("| `13_g` |" in causal and "0.4000 / 343.6 / 110.0% / 62.5%" in causal,
          "causal table: % of FA2 run causal (0.44 / 0.40 = 110.0%), TFLOP/s of half the FLOPs (343.6), % of cuDNN")
    check("`is_causal=True`" in page and "2 · batch · heads · S² · head_dim" in page,
          "the causal part says FA2/cuDNN ran with is_causal=True and how FLOPs are counted")
    check("Stages of this tree without results in this CSV: 15_g." in causal,
          "the causal table names the declaring stages without rows (and only those)")
    check("(../plots/fp16_d128_causal.png)" in page.split("## Causal attention")[1].split("## Any length")[0],
          "the causal table shows its plot")
    any_length = page.split("## Any length")[1].split("## Grouped-query attention")[0]
    check("S=1000 (vs 1024)" in any_length and "S=4000 (vs 4096)" in any_length,
          "any-length columns name the headline length they are compared with")
    # 11_g: 1000 in 0.80 ms = 327.7 TFLOP/s against 1024 in 0.80 ms = 343.6: 95.4%.
    check("327.7 / 343.6 = 95.4%" in any_length, "any-length cell: TFLOP/s per useful FLOP against the headline's")
    check("| FlashAttention-2 (PyTorch flash backend) | fp16, head_dim 128, batch 16, heads 32 | 327.7 / 335.2 = 97.8% | – |"
          in any_length, "the references' own any-length cost is shown where measured, '–' where not")
    gqa = page.split("## Grouped-query attention")[1].split("## ALiBi")[0]
    check("32 query heads share 8 K/V heads (query head h reads K/V head h / 4)" in gqa and "`enable_gqa=True`" in gqa,
          "the GQA part says the ratio and that FA2/cuDNN ran with enable_gqa=True")
    check("0.7000 / 392.7 / 107.1% |" in gqa and "| cuDNN (PyTorch cudnn backend) | unavailable | unavailable |" in gqa
          and "cudnn: unavailable: fake reason: no GQA kernel" in gqa,
          "GQA table: % of FA2 with enable_gqa; a reference without a kernel is shown unavailable with its reason")
    alibi = page.split("## ALiBi")[1]
    check("take no ALiBi slopes" in alibi and "0.8008 / 96.2%" in alibi,
          "ALiBi: the stage against itself without ALiBi (0.77 / 0.8008 = 96.2%), and why there is no library reference")
    check("- 14_g: 107.1% of FA2, faster than FA2 at every shape measured" in gqa.replace("`", "")
          and "- 11_g: 97.6% of FA2. " not in page.replace("`", ""), "the GQA sentences give % of FA2 with enable_gqa")
    check("- `13_g` (not a stage of this tree)" not in headline_part and "`13_g`: 105.1% of FA2" in headline_part,
          "headline sentences are over headline rows only (13_g: 0.82 / 0.78 = 105.1%)")
    check("`13_g`: 110.0% of FA2, faster than FA2 at every shape measured" in causal
          and "Against its parent `11_g`" not in causal
          and "`14_g`: 88.0% of FA2; 50.0% of cuDNN. Against its parent `13_g`: slower (time +25.0%) at every shape "
              "measured." in causal, "causal sentences: % of FA2 causal, the parent only where it has causal rows")
    check("`11_g`: 95.4-98.4% of its TFLOP/s at the headline length; lowest at fp16, head_dim 128, S = 1000." in page,
          "the any-length sentence gives the range and where it is lowest")
    check("`14_g`: 96.2% of its speed without ALiBi (time +4.0%)." in page, "the ALiBi sentence gives the cost")

    # A stage page (tools/gen_docs.py): the headline against the parent in one table; one line per
    # other series, against the parent only where the parent has rows of that series.
    stage_page = os.path.join(tmp, "docs", "stages", "g", "14_g.md")
    section_text = gen_docs.results_section(decl["14_g"], decl, (meta, groups), path, stage_page)
    print(section_text)
    # 14_g at S = 1024: 0.77 ms (357.0 TFLOP/s) against 13_g's 0.78 (-1.3%), FA2's 0.82 (106.5%), cuDNN's 0.45 (58.4%).
    check("| dtype, head_dim | S | TFLOP/s | time vs `13_g` | % of FA2 | % of cuDNN |" in section_text
          and "| fp16, 128 | 1024 | 357.0 | -1.3% | 106.5% | 58.4% |" in section_text
          and "|  | 4096 | 357.0 | -1.3% | 106.5% | 58.4% |" in section_text,
          "stage page: the headline table against the parent, with % of FA2 and cuDNN")
    check("- Causal (FA2 and cuDNN with is_causal=True): 88.0% of FA2; 50.0% of cuDNN. Against its parent `13_g`: "
          "slower (time +25.0%) at every shape measured." in section_text
          and "- ALiBi (against itself without slopes): 96.2% of its speed without ALiBi (time +4.0%)." in section_text
          and "- Grouped-query (FA2 and cuDNN with enable_gqa=True): 107.1% of FA2" in section_text
          and "Against its parent" not in section_text.split("- Grouped-query")[1],
          "stage page: a line per other series, against the parent only where the parent has such rows")
    check("Every shape and series: [docs/results.md](" in section_text and "Source: `%s` (FAKE GPU; git 0000000;" % path
          in section_text and len(section_text.splitlines()) <= 30,
          "stage page: links docs/results.md, names its CSV, GPU and revision; at most 30 lines")
    first = gen_docs.results_section(decl["11_g"], decl, (meta, groups), path, stage_page)
    check("| dtype, head_dim | S | TFLOP/s | % of FA2 | % of cuDNN |" in first and "time vs" not in first,
          "stage page of a stage without a parent: no time vs parent column")

    # The plots: rendered for the plotted configurations (the made-up stages are not in this
    # tree: one plot of them), and --check passes.
    readme = os.path.join(tmp, "general", "README.md")
    os.makedirs(os.path.dirname(readme))
    write(readme, README_EMPTY)
    out_dir = os.path.join(tmp, "general_plots")
    check(run_plot([path, "--out-dir", out_dir, "--readme", readme], quiet=True) == 0, "plot.py renders every series")
    check(pngs(out_dir) == ["fp16_d128_causal.png", "fp16_d128_kv8.png", "untracked_fp16_d128.png"],
          "PNGs for the headline, causal and grouped-query configurations (%s)" % pngs(out_dir))
    check(run_plot(["--check", "--readme", readme, "--out-dir", out_dir], quiet=True) == 0,
          "--check passes on a README with every series")


def test_timing_words(tmp):
    """The generated words follow the CSV's timing: a CSV timed in rounds says 'same rounds' where one
    timed separately (or without a timing line) says 'same run', and its any-length rows are compared
    with the headline length they shared rounds with (S = 1020 with 4096 once 1000 took 1024)."""
    import gen_docs
    import results_tables
    decl = general_stages()
    text = general_csv()
    odd = next(line for line in text.splitlines() if line.startswith("11_g,stage,any_length,fp16,128,16,32,32,0,0,1000,"))
    words = {}
    for timing, csv_text in (("separate", text), ("rounds", text.replace("# git=0000000\n", "# git=0000000\n# timing=rounds\n"))):
        path = os.path.join(tmp, "timing_%s.csv" % timing)
        write(path, csv_text + odd.replace(",1000,1000,", ",1020,1020,") + "\n")
        meta, rows = results_tables.load_results(path)
        groups = results_tables.make_groups(rows, order=list(decl))
        texts = results_tables.generated_texts(groups, meta, path, os.path.join(tmp, "README.md"),
                                               os.path.join(tmp, "plots"), decl, [stages.Track("g", "G track", "")])
        page = gen_docs.results_section(decl["14_g"], decl, (meta, groups), path,
                                        os.path.join(tmp, "docs", "stages", "g", "14_g.md"))
        words[timing] = "".join(body for _, body in texts.values()) + page
    separate, rounds = words["separate"], words["rounds"]
    check("same rounds" not in separate and "timed in rounds" not in separate and "S=1020 (vs 1024)" in separate
          and "each time the median over the timed launches" in separate and "from the same run." in separate
          and "the median of its launches" in separate and "in the same run" in separate,
          "a CSV without a timing line: 'same run', the timed launches, S = 1020 against the next length, 1024")
    check("(its headline row, same rounds)" in rounds and "pad to), same rounds." in rounds
          and "without, same rounds):" in rounds and "timed in rounds: per shape" in rounds
          and "S=1020 (vs 4096)" in rounds and "same run" not in rounds,
          "a CSV timed in rounds: 'same rounds' in the generated words, and S = 1020 against 4096 (its rounds)")
    check("each time the minimum over the timed rounds" in rounds and "from the same rounds." in rounds
          and "the minimum of shuffled rounds" in rounds,
          "a CSV timed in rounds: the stage page and the README say so")


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
    readme = os.path.join(tmp, "merge", "README.md")
    os.makedirs(os.path.dirname(readme))
    write(readme, README_EMPTY)
    page = os.path.join(tmp, "merge", "docs", "results.md")
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
    check(os.path.exists(page) and "measured in parts (part_fp16_d128, part_bf16_d128)" in read(page),
          "docs/results.md says it was run in parts")
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
    check("tracks:begin" in read(readme) and "part_bf16_d64" not in read(readme) + read(page),
          "a part leaves the README and docs/results.md alone")

# The backward benchmark's CSV as tools/backward_bench.py writes it, for the first three stages of
# the backward track ({s1}, {s2}, {s3}). FAKE numbers: {s2} fails its check at S=2048 (no time) and
# has rows of its deterministic mode ({s2}+deterministic); {s1} takes no causal mask; the README's
# case is fp16, head_dim 128, non-causal at its largest S (2048 here, not the bf16 or head_dim 64 rows'
# longer S).
FAKE_BACKWARD_CSV = """\
# gpu=FAKE BACKWARD GPU (synthetic test data)
# git=1111111
# date=2000-01-02T00:00:00Z
# timing=rounds
# statistic=minimum
impl,kind,dtype,head_dim,batch,heads,seq_q,seq_kv,causal,flops,median_ms,min_ms,tflops,pct_of_fa2,pct_of_cudnn,\
max_abs_err,max_err_over_tolerance,status
{s1},stage,fp16,128,2,4,1024,1024,0,1,2.1,2.0,11.1,40.00,20.00,1e-4,0.5,PASS
{s2},stage,fp16,128,2,4,1024,1024,0,1,1.7,1.6,13.9,50.00,25.00,1e-4,0.5,PASS
{s2}+deterministic,stage,fp16,128,2,4,1024,1024,0,1,2.1,2.0,11.1,40.00,20.00,1e-4,0.5,PASS
fa2,reference,fp16,128,2,4,1024,1024,0,1,0.9,0.8,27.8,100.00,50.00,1e-4,0.5,PASS
cudnn,reference,fp16,128,2,4,1024,1024,0,1,0.5,0.4,55.6,200.00,100.00,1e-4,0.5,PASS
{s1},stage,fp16,128,2,4,2048,2048,0,1,8.3,8.0,12.3,45.00,22.50,1e-4,0.5,PASS
{s2},stage,fp16,128,2,4,2048,2048,0,1,9.7,9.6,10.3,37.50,18.75,9.9,3.5,FAIL: dQ: 3 elements over the tolerance
{s2}+deterministic,stage,fp16,128,2,4,2048,2048,0,1,7.0,6.9,14.2,52.17,26.09,1e-4,0.5,PASS
{s3},stage,fp16,128,2,4,2048,2048,0,1,5.1,5.0,19.7,72.00,36.00,1e-4,0.5,PASS
fa2,reference,fp16,128,2,4,2048,2048,0,1,3.7,3.6,27.3,100.00,50.00,1e-4,0.5,PASS
cudnn,reference,fp16,128,2,4,2048,2048,0,1,1.9,1.8,54.7,200.00,100.00,1e-4,0.5,PASS
{s1},stage,fp16,128,2,4,2048,2048,1,1,,,,,,,,unsupported: the stage's backward does not declare the feature causal
{s2},stage,fp16,128,2,4,2048,2048,1,1,4.2,4.0,7.7,45.00,22.50,1e-4,0.5,PASS
{s2}+deterministic,stage,fp16,128,2,4,2048,2048,1,1,4.5,4.4,7.0,40.91,20.45,1e-4,0.5,PASS
fa2,reference,fp16,128,2,4,2048,2048,1,1,1.9,1.8,17.1,100.00,50.00,1e-4,0.5,PASS
{s1},stage,bf16,128,2,4,4096,4096,0,1,33.0,32.0,13.1,47.00,23.50,1e-4,0.5,PASS
{s1},stage,fp16,64,2,4,8192,8192,0,1,66.0,64.0,14.1,48.00,24.00,1e-4,0.5,PASS
"""


def test_backward_tables(tmp):
    """The backward track's numbers from the backward benchmark's CSV (FAKE_BACKWARD_CSV): the
    README's and docs/results.md's table at fp16, head_dim 128, non-causal, the largest S, with the
    note under it; a failed row and a stage without rows show no number, a deterministic mode is no
    row of its own; --check follows --backward-csv; the backward pages' results section
    (tools/gen_docs.py): one row per dtype, head_dim and S, non-causal / causal, against the parent
    where it has rows, the deterministic mode against the default."""
    import gen_docs
    import results_tables
    declared = stages.by_name()
    names = [s.name for s in stages.all_stages() if s.backward_features is not None]
    if len(names) < 3:
        check(False, "the backward track has at least three stages (%s)" % names)
        return
    s1, s2, s3 = names[:3]
    path = os.path.join(tmp, "fake_backward.csv")
    write(path, FAKE_BACKWARD_CSV.format(s1=s1, s2=s2, s3=s3))

    # tools/plot.py on the forward FAKE_CSV and this backward CSV, into a README copy.
    forward = os.path.join(tmp, "backward_forward.csv")
    write(forward, FAKE_CSV)
    readme = os.path.join(tmp, "backward", "README.md")
    os.makedirs(os.path.dirname(readme))
    write(readme, README_EMPTY)
    out_dir = os.path.join(tmp, "backward_plots")
    args = ["--out-dir", out_dir, "--readme", readme, "--backward-csv", path]
    check(run_plot([forward] + args, quiet=True) == 0, "plot.py --backward-csv exits 0")
    parts = re.split(r"^### (.+)$", section(read(readme), "tracks"), flags=re.M)
    track = next(t for t in stages.tracks() if t.name == declared[s1].track)
    body = parts[parts.index(track.title) + 1] if track.title in parts else ""
    table = [line for line in body.splitlines() if line.startswith("| [")]
    ids = [re.match(r"\| \[`(\w+)`\]", line).group(1) for line in table]
    check(ids == [s.name for s in stages.all_stages() if s.track == track.name],
          "the backward table: one row per stage of the track, in track order (%s)" % ids)
    check_backward_readme_part(track.title, body, ids, table, declared, path)

    def cells(name):
        line = next((line for line in table if line.startswith("| [`%s`]" % name)), "")
        return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip("|"))][2:]

    check(cells(s1) == ["12.3", "–", "45.0%", "22.5%"],
          "the first backward stage at fp16, head_dim 128, S = 2048 (not the bf16 S = 4096 or head_dim 64 S = 8192 "
          "rows): its TFLOP/s, no time vs its forward parent, %% of FA2 and cuDNN (%s)" % cells(s1))
    check(cells(s2) == ["**FAIL** (no time)", "–", "–", "–"] and "10.3" not in body,
          "a stage that failed its check shows no number, though its row has one (%s)" % cells(s2))
    check(declared[s3].parent != s2 or cells(s3) == ["19.7", "no time", "72.0%", "36.0%"],
          "a stage whose parent failed: its numbers, 'no time' against the parent (%s)" % cells(s3))
    check(all(cells(n) == ["no result in this CSV", "–", "–", "–"] for n in ids[3:]),
          "a stage without a row in the backward CSV: no result in this CSV")
    check("FA2 27.3 and cuDNN 54.7 TFLOP/s there" in body and "`python3 tools/backward_bench.py` on the FAKE BACKWARD "
          "GPU (synthetic test data), git 1111111" in body, "the note gives the references' TFLOP/s at the case and the command, GPU and git")
    check("(but the backward track's: see its note)" in parts[0],
          "the line above the tables says the backward track's rows are not at its shape")
    page = section(read(os.path.join(os.path.dirname(readme), "docs", "results.md")), "all-results")
    page_part = page.split("## %s" % track.title)[1].split("\n## ")[0] if "## %s" % track.title in page else ""
    check(all(line in page_part for line in table if not line.startswith("| [")) and "| 12.3 | – | 45.0% | 22.5% |"
          in page_part and "_Backward numbers from" in page_part and "No results in this CSV for" not in page_part,
          "docs/results.md's backward track: the README's table and note, no 'no results' line")

    check(run_plot(["--check"] + args, quiet=True) == 0, "--check passes with the same --backward-csv")
    edited = read(readme).replace("| 12.3 | – | 45.0%", "| 12.4 | – | 45.0%")
    check(edited != read(readme), "(the backward cell to edit is there)")
    check_readme = os.path.join(tmp, "backward_edited", "README.md")
    os.makedirs(os.path.join(os.path.dirname(check_readme), "docs"))
    write(check_readme, edited)
    write(os.path.join(os.path.dirname(check_readme), "docs", "results.md"),
          read(os.path.join(os.path.dirname(readme), "docs", "results.md")))
    check(run_plot(["--check", forward, "--out-dir", out_dir, "--readme", check_readme, "--backward-csv", path],
                   quiet=True) == 1, "--check fails when a cell of the README's backward table was edited")
    other = os.path.join(tmp, "other_backward.csv")
    write(other, FAKE_BACKWARD_CSV.format(s1=s1, s2=s2, s3=s3).replace(",8.3,8.0,12.3,", ",8.3,8.0,12.9,"))
    check(run_plot(["--check", "--out-dir", out_dir, "--readme", readme, "--backward-csv", other], quiet=True) == 1,
          "--check fails against a backward CSV with another number")

    # The backward pages' results section, with made-up stages: b1 (parent a forward stage, not in the
    # CSV), b2 (parent b1; causal too; a deterministic mode; fails at S=2048), b3 (parent b2), b4 (no rows).
    csv_text = FAKE_BACKWARD_CSV.format(s1="b1", s2="b2", s3="b3")
    fake_path = os.path.join(tmp, "fake_backward_pages.csv")
    write(fake_path, csv_text)
    backward = results_tables.load_backward(fake_path)

    def stage(name, parent):
        return stages.Stage(name=name, track="backward", folder_name=name, parent=parent, idea="idea of " + name,
                            target="sm_80", features=(), sass={}, spill_budget={}, backward_features=())

    decl = {"fwd": stages.Stage(name="fwd", track="f", folder_name="fwd", parent=None, idea="", target="sm_80",
                                features=(), sass={}, spill_budget={}),
            "b1": stage("b1", "fwd"), "b2": stage("b2", "b1"), "b3": stage("b3", "b2"), "b4": stage("b4", "b3")}
    page_path = os.path.join(tmp, "docs", "stages", "backward", "b.md")
    pages = {n: gen_docs.backward_results_section(decl[n], decl, backward, page_path) for n in ("b1", "b2", "b3", "b4")}
    print("\n\n".join(pages.values()))
    rows = read_backward_csv(fake_path)[1]
    check(all(not backward_page_problems(decl[n], pages[n], rows, decl) for n in pages),
          "the backward pages' tables are the CSV's (%s)" % "; ".join(
              p for n in pages for p in backward_page_problems(decl[n], pages[n], rows, decl))[:300])
    b1 = pages["b1"]
    check("| dtype, head_dim | S | TFLOP/s | % of FA2 | % of cuDNN |" in b1 and "time vs" not in b1
          and "| fp16, 128 | 1024 | 11.1 | 40.0% | 20.0% |\n|  | 2048 | 12.3 | 45.0% | 22.5% |\n"
              "| fp16, 64 | 8192 | 14.1 | 48.0% | 24.0% |\n| bf16, 128 | 4096 | 13.1 | 47.0% | 23.5% |" in b1,
          "a page whose parent has no backward rows: no time vs parent column; fp16 first, head_dim 128 first")
    check("Causal: unsupported (the stage's backward does not declare the feature causal)." in b1
          and "/ " not in b1.split("| fp16, 128")[1].split("\n\n")[0] and ", non-causal;" in b1,
          "a causal setting with only unsupported rows: a sentence, not a column")
    b2 = pages["b2"]
    check("| dtype, head_dim | S | TFLOP/s | time vs `b1` | % of FA2 | % of cuDNN | deterministic: time vs default |" in b2
          and "| fp16, 128 | 1024 | 13.9 / - | -20.0% / - | 50.0% / - | 25.0% / - | +25.0% / - |" in b2,
          "a stage with causal rows and a deterministic mode: non-causal / causal per cell, time vs parent, the "
          "mode's time against the default (2.0 / 1.6 ms = +25.0%)")
    check("|  | 2048 | FAIL / 7.7 | - / unsupported | - / 45.0% | - / 22.5% | - / +10.0% |" in b2
          and "10.3" not in b2 and "37.5" not in b2,
          "a failed row shows no number (its TFLOP/s says FAIL; the mode is not compared with it)")
    check("each cell non-causal / causal" in b2 and "(half for causal)" in b2 and "`b2+deterministic`" in b2
          and "Source: `" in b2 and "FAKE BACKWARD GPU (synthetic test data); git 1111111" in b2 and "results.md#backward-track" in b2,
          "the page says what a cell holds, names the mode, links docs/results.md and names the CSV, GPU, revision")
    check("| fp16, 128 | 2048 | 19.7 | FAIL | 72.0% | 36.0% |" in pages["b3"],
          "against a parent that failed: the parent's status")
    check(pages["b4"] == "The backward benchmark CSV `%s` has no rows for `b4`; run `python3 tools/backward_bench.py`."
          % fake_path, "a stage without rows: the 'no rows' sentence with the backward benchmark's command")
    check(gen_docs.backward_results_section(decl["b1"], decl, None, page_path) == gen_docs.NO_BACKWARD_RESULTS,
          "without a backward CSV the section says so")
    check(all(len(p.strip().splitlines()) <= 35 for p in pages.values()), "each backward section is at most 35 lines")
    check(not any("+deterministic" in row for row in results_tables.backward_track_table(
        ["b1", "b2", "b3", "b4"], backward, decl, tmp) if row.startswith("| `")),
          "the deterministic mode is no row of the track table")


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
    readme = os.path.join(tmp, "bench", "README.md")
    os.makedirs(os.path.dirname(readme))
    write(readme, README_EMPTY)
    page = os.path.join(tmp, "bench", "docs", "results.md")
    common = ["--build-dir", build, "--compute-capability", "80", "--seqs", "128,256", "--any-length-seqs", "100",
              "--no-reference", "--out-dir", out_dir, "--plots-dir", os.path.join(tmp, "bench_plots"), "--readme", readme]

    rc, out = run([sys.executable, BENCH, "--dry-run", "--series", "headline"] + common)
    check(rc == 0 and "dry run" in out and out.count("fa_run --stage") == 4,
          "bench.py --dry-run --series headline prints one fa_run command per (dtype, head_dim) and exits 0")
    check("--stage 01_fake,04_fake_general --dtype bf16" in out and "--stage 01_fake,02_fake,04_fake_general --dtype fp16" in out,
          "a stage is run only at the dtypes it declares")
    check(not os.path.exists(out_dir), "--dry-run writes nothing")

    rc, out = run([sys.executable, BENCH, "--dry-run", "--series", "headline", "--stages", "01_fake,04_fake"] + common)
    check(rc == 0 and "--stage 01_fake,04_fake_general --dtype fp16" in out,
          "--stages takes a stage by its id or its <track>_NN (04_fake for 04_fake_general)")
    rc, out = run([sys.executable, BENCH, "--dry-run", "--stages", "04"] + common)
    check(rc == 2 and "no stage '04'" in out, "--stages refuses a bare number")

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
    full = read(page) if os.path.exists(page) else ""
    # The CSV is named after the GPU bench.py finds (nvidia-smi: a real one on a GPU machine).
    check(re.search(r"results_[A-Za-z0-9.-]+_\d{8}-\d{6}\.csv", text) is not None
          and "In the CSV but not stages of this tree: `01_fake`, `02_fake`, `04_fake_general`." in text
          and "`02_fake` (not a stage of this tree)" in full,
          "bench.py rewrote the README's tracks and docs/results.md from its CSV")
    check("## Causal attention" in full and "## ALiBi" in full and "## Any length" in full
          and "## Grouped-query attention" in full, "docs/results.md got the causal, any-length, GQA and ALiBi parts")


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
        test_committed_readme()
        test_committed_pages(tmp)
        test_sentences_and_columns()
        test_backward_tables(tmp)
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
