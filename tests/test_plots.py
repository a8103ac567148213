#!/usr/bin/env python3
"""CPU test of plots/plot.py: renders a small synthetic results CSV and rewrites a README copy.

The numbers below are FAKE (made up for this test, not measured). Exit codes: 0 pass, 1 fail,
77 skipped (matplotlib is not installed; CTest reports it as skipped through SKIP_RETURN_CODE).
"""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(os.path.dirname(HERE), "plots", "plot.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

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
README_AFTER = "<!-- results-table:end -->\n\nText below the table, kept as is.\n"

failures = []
passes = []


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    (passes if condition else failures).append(what)


def run_plot(args):
    done = subprocess.run([sys.executable, PLOT] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(done.stdout)
    return done.returncode


def check_png(path):
    ok = os.path.isfile(path) and os.path.getsize(path) > 1000
    if ok:
        with open(path, "rb") as f:
            ok = f.read(8) == PNG_MAGIC
    check(ok, "%s is a non-empty PNG" % os.path.basename(path))


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIPPED: matplotlib is not installed (python3 -m pip install matplotlib)")
        return 77

    with tempfile.TemporaryDirectory(prefix="test_plots_") as tmp:
        csv_path = os.path.join(tmp, "results_fake.csv")
        with open(csv_path, "w") as f:
            f.write(FAKE_CSV)
        readme = os.path.join(tmp, "README.md")
        with open(readme, "w") as f:
            f.write(README_BEFORE + README_PLACEHOLDER + README_AFTER)
        out_dir = os.path.join(tmp, "plots")

        check(run_plot([csv_path, "--out-dir", out_dir, "--readme", readme]) == 0, "plot.py exits 0")
        check_png(os.path.join(out_dir, "fp16_d128_hist.png"))
        check_png(os.path.join(out_dir, "fp16_d128_tflops.png"))

        with open(readme) as f:
            text = f.read()
        check(text.startswith(README_BEFORE), "README text above the begin marker is unchanged")
        check(text.endswith(README_AFTER), "README text from the end marker on is unchanged")
        section = text[len(README_BEFORE): len(text) - len(README_AFTER)] if len(text) > len(README_BEFORE + README_AFTER) else ""
        check(README_PLACEHOLDER.strip() not in section, "the placeholder between the markers was replaced")
        check("0.500 / " in section, "the table holds a time from the CSV (FA2 at S=256: 0.500 ms)")
        check("25.0%" in section and "50.0%" in section, "the table holds % of FA2 from the CSV")
        check("FAKE GPU" in section and "0000000" in section, "the table names the GPU and git revision of the CSV")
        check("**FAIL** (no time)" in section, "a stage that failed its check is shown without a time")
        check("results_fake.csv" in section, "the table says which CSV it came from")

        # Without a FA2 time there is no % of FA2: the plots fall back to TFLOP/s instead of failing.
        no_fa2 = os.path.join(tmp, "no_fa2.csv")
        with open(no_fa2, "w") as f:
            f.write("".join(line + "\n" for line in FAKE_CSV.splitlines() if not line.startswith("fa2,")))
        out2 = os.path.join(tmp, "plots_no_fa2")
        check(run_plot([no_fa2, "--out-dir", out2]) == 0, "plot.py exits 0 without an FA2 reference")
        check_png(os.path.join(out2, "fp16_d128_hist.png"))

        # A README without the markers is an error, and stays untouched.
        plain = os.path.join(tmp, "PLAIN.md")
        with open(plain, "w") as f:
            f.write("no markers here\n")
        check(run_plot([csv_path, "--out-dir", out_dir, "--readme", plain]) != 0, "a README without markers is refused")
        with open(plain) as f:
            check(f.read() == "no markers here\n", "a README without markers is left as it was")

    print("%d passed, %d failed" % (len(passes), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
