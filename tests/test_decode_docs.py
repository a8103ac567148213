#!/usr/bin/env python3
"""CPU test of the decoding track's results sections (tools/decode_docs.py, which tools/gen_docs.py
calls for every page of stages/decode/), on FAKE decoding benchmark CSVs (made up for this test, not
measured), without a GPU:

  which run     the latest CSV (by its `# date=`) with passed rows of the stage and its parent, also
                where a later CSV has the stage alone; that later one where no CSV has both (no
                "vs parent" column then); a sentence with the command where no CSV has the stage;
                a CSV with the same bytes as another (decode_latest.csv) read once, under the dated
                name; a file of the pattern that is no decoding CSV left out
  the table     the shapes at seq_kv 16k, a row per (seq_q, batch, K/V heads), seq_q then batch
                ascending and K/V heads descending; each cell the CSV's minimum and its % of the read
                bandwidth; the change against the parent from the two minima; a failed row's status
                word and no change; the references' cells; a line per other length with the ranges
                of the change and of the % of the read bandwidth; the source line (GPU, git, date)
                and the run's tree note
  the pages     every decoding-track page's results section is what the committed CSVs give now
"""

import os
import re
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))

import decode_docs  # noqa: E402
import stages  # noqa: E402

failures = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


HEADER = ("impl,kind,dtype,head_dim,batch,heads,kv_heads,seq_q,seq_kv,causal,cache,kv_copies,bytes,median_ms,min_ms,"
          "gbytes_per_s,pct_of_read_bw,pct_of_fa2,pct_of_cudnn,max_abs_err,status")


def csv_text(date, stages_rows, tree=None):
    """A FAKE decoding CSV: meta lines, then one row per (impl, kind, batch, kv_heads, seq_q, seq_kv,
    min_ms, pct, status)."""
    meta = ["# gpu=FAKE GPU", "# date=%s" % date, "# git=abc1234", "# read_bw_gbytes_per_s=3000.0",
            "# cuda=13.0"] + (["# tree=%s" % tree] if tree else [])
    rows = []
    for impl, kind, batch, kv_heads, seq_q, seq_kv, ms, pct, status in stages_rows:
        rows.append("%s,%s,fp16,128,%d,32,%d,%d,%d,0,contiguous,4,1000,%s,%s,1.0,%s,,,0.001,%s" % (
            impl, kind, batch, kv_heads, seq_q, seq_kv, ms, ms, pct, status))
    return "\n".join(meta + [HEADER] + rows) + "\n"


def shapes(impl, kind, times, seq_kv=16384, status="PASS"):
    """Rows of impl at three shapes (batch, K/V heads, seq_q): times[i] ms, pct = 10 x i + 50."""
    out = []
    for i, (batch, kv, sq) in enumerate([(1, 8, 1), (16, 32, 1), (1, 32, 8)]):
        out.append((impl, kind, batch, kv, sq, seq_kv, times[i], 50.0 + 10 * i, status))
    return out


def write(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    tmp = tempfile.mkdtemp(prefix="decode_docs_")
    refs = shapes("fa2", "reference", [0.05, 1.5, 0.2]) + shapes("cudnn", "reference", [0.04, 1.4, 0.3])
    # Run A: parent P and stage S, at 16k and 64k; S fails one shape at 16k.
    run_a = (shapes("P", "stage", [0.1, 2.0, 0.4]) + shapes("S", "stage", [0.08, 2.1, 0.4], status="PASS")[:2]
             + [("S", "stage", 1, 32, 8, 16384, "", "", "FAIL: max error 3")]
             + shapes("P", "stage", [0.3, 6.0, 1.2], seq_kv=65536) + shapes("S", "stage", [0.27, 6.3, 1.2], seq_kv=65536)
             + refs)
    # Run B, later: S alone with T (whose parent S is there too), no P.
    run_b = shapes("S", "stage", [0.09, 2.2, 0.5]) + shapes("T", "stage", [0.07, 2.2, 0.5]) + refs
    write(os.path.join(tmp, "decode_a_h100.csv"), csv_text("2026-01-01T00:00:00Z", run_a))
    write(os.path.join(tmp, "decode_latest.csv"), csv_text("2026-01-01T00:00:00Z", run_a))  # a copy
    write(os.path.join(tmp, "decode_b_h100.csv"),
          csv_text("2026-02-01T00:00:00Z", run_b, tree="git abc1234 plus T's folder"))
    write(os.path.join(tmp, "decode_notes.csv"), "# not a decoding CSV\na,b\n1,2\n")
    runs = decode_docs.load_runs(os.path.join(tmp, "decode_*.csv"))
    names = sorted(os.path.basename(r.path) for r in runs)
    check(names == ["decode_a_h100.csv", "decode_b_h100.csv"],
          "the same bytes read once, under the dated name; a non-decoding CSV left out (%s)" % names)

    run, both = decode_docs.choose_run(runs, "S", "P")
    check(both and os.path.basename(run.path) == "decode_a_h100.csv",
          "S against P: run A, which has both, though run B is later and has S")
    run, both = decode_docs.choose_run(runs, "T", "S")
    check(both and os.path.basename(run.path) == "decode_b_h100.csv", "T against S: run B")
    run, both = decode_docs.choose_run(runs, "U", "T")
    check(run is None, "a stage in no CSV: no run")
    run, both = decode_docs.choose_run(runs, "T", "Q")
    check(run is not None and not both, "a parent in no CSV: the stage's latest run alone")

    text = decode_docs.results_section("S", "P", runs)
    lines = text.splitlines()
    table = [l for l in lines if l.startswith("| ") and not l.startswith("| seq_q")]
    check(lines[2] == "fp16, head_dim 128, 32 query heads, non-causal, contiguous cache, seq_kv 16k:",
          "the configuration line (%r)" % lines[2])
    check("| seq_q | batch | K/V heads | `P` | this stage | vs parent | FA2 | cuDNN |" in lines, "the header names the parent")
    order = [tuple(int(x) for x in l.strip("| ").split(" | ")[:3]) for l in table]
    check(order == [(1, 1, 8), (1, 16, 32), (8, 1, 32)],
          "rows at 16k only, seq_q then batch ascending, K/V heads descending (%s)" % order)
    row = [l for l in table if l.startswith("| 1 | 1 | 8 |")]
    check(row == ["| 1 | 1 | 8 | 100.0 us, 50.0% | 80.0 us, 50.0% | -20.0% | 50.0 us, 50.0% | 40.0 us, 50.0% |"],
          "a cell: the minimum and its %% of the read bandwidth; the change from the minima (%s)" % row)
    row = [l for l in table if l.startswith("| 1 | 16 | 32 |")]
    check(row == ["| 1 | 16 | 32 | 2.00 ms, 60.0% | 2.10 ms, 60.0% | +5.0% | 1.50 ms, 60.0% | 1.40 ms, 60.0% |"],
          "milliseconds from 1 ms on; a slower stage's change positive (%s)" % row)
    row = [l for l in table if l.startswith("| 8 | 1 | 32 |")]
    check(row == ["| 8 | 1 | 32 | 400.0 us, 70.0% | FAIL | - | 200.0 us, 70.0% | 300.0 us, 70.0% |"],
          "a failed row: its status word, no change (%s)" % row)
    check("- seq_kv 64k: 3 shapes; time against the parent -10.0%..+5.0%; 50.0%..70.0% of the read bandwidth." in lines,
          "the other length's line: the ranges")
    check(any(l.startswith("Source: `") and "FAKE GPU; git abc1234; date 2026-01-01T00:00:00Z; CUDA 13.0" in l
              for l in lines), "the source line")
    check("3000.0 GB/s" in lines[0], "the read bandwidth of the run in the first line")

    text = decode_docs.results_section("T", "Q", runs)
    check("vs parent" not in text and "this stage |" in text and "The run's tree: git abc1234 plus T's folder." in text,
          "the stage alone: no parent column; the tree note")
    text = decode_docs.results_section("U", "T", runs)
    check(text.startswith("No committed decoding benchmark CSV has rows of `U`")
          and "python3 tools/decode_bench.py --stages U,T" in text, "no CSV: the command that measures it")

    # The committed pages: each decoding page's section is what the committed CSVs give.
    committed = decode_docs.load_runs()
    for st in stages.all_stages():
        if st.track != "decode":
            continue
        with open(os.path.join(REPO, st.page), encoding="utf-8") as f:
            page = f.read()
        m = re.search(r"<!-- results:begin -->\n(.*?)\n<!-- results:end -->", page, re.S)
        check(m is not None and m.group(1) == decode_docs.results_section(st.name, st.parent, committed),
              "%s: its results section is the committed decoding CSVs'" % st.page)

    if failures:
        print("test_decode_docs: %d check(s) failed" % len(failures))
        return 1
    print("test_decode_docs: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
