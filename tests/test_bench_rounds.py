#!/usr/bin/env python3
"""CPU test of tools/bench.py's rounds protocol (--timing rounds), without a GPU or PyTorch.

  pair_lengths        each any-length value beside the shortest headline length that no shorter
                      value took (1000 -> 1024, 4000 -> 4096), or in rounds of its own
  plan_rounds         one interleaved.py process per (dtype, head_dim) for the headline shapes whose
                      rounds hold the ALiBi rows and the paired any-length rows (with FA2 and cuDNN
                      there), one each for causal and gqa; unpaired lengths, and the ALiBi rows of a
                      run without the headline series, in rounds of their own; the same results as
                      the separate protocol plans
  checked_rounds      what failed fa_run's check is not timed; a failure at one length splits the
                      rounds, and only then
  rounds_impl, RoundsTable, rounds_rows
                      interleaved.py's names (<stage>+alibi, <impl>@<length>), printed tables and
                      CSV rows as bench.py's series, rows and progress keys
  rounds_stage_row    PASS only if fa_run's and interleaved.py's checks passed; otherwise the status
                      names the one that did not; merge() takes % of FA2 from the same rounds
  choose_timing       --no-reference falls back to separate, with a line saying why
  interleaved.py      its own time_case, on a fake PyTorch and a fake library, with the options
                      bench.py passes: the names and ratios it writes, the tables it prints, and
                      bench.py reading a progress key and a planned result from each of its rows;
                      a stage named by its id or its <track>_NN
  a whole run         bench.py with a fake fa_run (tests/test_plots.py's) and a fake interleaved.py
                      that parses its options with interleaved.py's own parser: the CSV's rows,
                      statuses, ratios, timing and method, one progress line per check and per time

The numbers are FAKE. Exit codes: 0 pass, 1 fail.
"""

import contextlib
import io
import os
import sys
import tempfile
import types
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(os.path.dirname(HERE), "tools")
sys.path.insert(0, TOOLS)
sys.path.insert(0, HERE)
import bench  # noqa: E402
import interleaved  # noqa: E402
import test_plots  # noqa: E402  (its fake fa_run)
from results_csv import pair_lengths, read_results_csv  # noqa: E402

failures = []


def check(what, ok):
    if not ok:
        failures.append(what)


def stage(name, *features):
    return dict(name=name, target="sm_80", min_compute_capability=80, arch_specific=False, features=list(features),
                dtypes=["fp16", "bf16"], head_dims=[64, 128])


STAGES = [stage("01_a"), stage("02_b", "any_length", "alibi"), stage("03_c", "causal", "gqa", "any_length")]
HEADLINE = [1024, 2048, 4096, 8192]


def plan(*options):
    args = bench.parse_args(["--dtypes", "fp16", "--head-dims", "128"] + list(options))
    runs = bench.plan_runs(args, STAGES)
    return args, runs, bench.plan_rounds(args, runs)


# --- pair_lengths ---------------------------------------------------------------------------------
check("pair_lengths: 1000 -> 1024, 4000 -> 4096", pair_lengths(HEADLINE, [1000, 4000]) == {1000: 1024, 4000: 4096})
check("pair_lengths: a length takes the next headline length no shorter one took",
      pair_lengths([1024, 2048], [1020, 1000]) == {1000: 1024, 1020: 2048})
check("pair_lengths: a length without a partner has none", pair_lengths(HEADLINE, [4000, 9000]) == {4000: 4096, 9000: None})

# --- plan_rounds ----------------------------------------------------------------------------------
args, runs, rounds = plan()
R = bench.RoundsRun
check("plan_rounds: headline rounds with the ALiBi and paired any-length rows, then causal and gqa (%r)" % (rounds,),
      rounds == [R("headline", "fp16", 128, HEADLINE, ["01_a", "02_b", "03_c"], ["02_b"], [1000, 0, 4000, 0],
                   ["02_b", "03_c"], True),
                 R("causal", "fp16", 128, HEADLINE, ["03_c"], [], [0] * 4, [], True),
                 R("gqa", "fp16", 128, HEADLINE, ["03_c"], [], [0] * 4, [], True)])
separate = set(bench.planned_results(args, runs, bench.reference_plan(args, runs)))
timed = [key for run in rounds for key in bench.rounds_results(run)]
check("plan_rounds: the same results as the separate protocol, each once",
      set(timed) == separate and len(timed) == len(separate))
check("interleaved command of the headline rounds", bench.show_command(bench.interleaved_command(args, rounds[0], "x.csv"))
      .endswith("--stages 01_a,02_b,03_c --dtype fp16 --head-dim 128 --seqs 1024,2048,4096,8192 --alibi-stages 02_b "
                "--any-length 1000,0,4000,0 --any-length-stages 02_b,03_c --any-length-references --batch 16 "
                "--heads 32 --warmup 5 --reps 20 --seed 1 --check-rows 4 --csv x.csv"))
check("the causal and gqa commands", "--causal --batch" in " ".join(bench.interleaved_command(args, rounds[1], "x"))
      and "--kv-heads 8 --batch" in " ".join(bench.interleaved_command(args, rounds[2], "x")))

args, runs, rounds = plan("--any-length-seqs", "1000,4000,9000")
check("plan_rounds: a length without a headline partner gets rounds of its own, with the references",
      R("any_length", "fp16", 128, [9000], ["02_b", "03_c"], [], [0], [], True) in rounds
      and rounds[0].any_length == [1000, 0, 4000, 0])
check("plan_rounds: still the separate protocol's results",
      set(key for run in rounds for key in bench.rounds_results(run))
      == set(bench.planned_results(args, runs, bench.reference_plan(args, runs))))
_, _, rounds = plan("--series", "alibi")
check("plan_rounds without the headline series: the ALiBi rows alone, no references (%r)" % (rounds,),
      rounds == [R("alibi", "fp16", 128, HEADLINE, [], ["02_b"], [0] * 4, [], False)]
      and "--stages '' " in bench.show_command(bench.interleaved_command(args, rounds[0], "x"))
      and "--references ''" in bench.show_command(bench.interleaved_command(args, rounds[0], "x")))
_, _, rounds = plan("--series", "any_length")
check("plan_rounds without the headline series: every any-length length in rounds of its own",
      rounds == [R("any_length", "fp16", 128, [1000, 4000], ["02_b", "03_c"], [], [0, 0], [], True)])

# --- checked_rounds -------------------------------------------------------------------------------
args, runs, rounds = plan()
headline = rounds[0]
every = set(bench.rounds_results(headline))
check("checked_rounds: all passed, one process as planned", bench.checked_rounds(headline, every) == [headline])
parts = bench.checked_rounds(headline, every - {("03_c", "headline", "fp16", 128, 4096)})
check("checked_rounds: a stage failing at 4096 is left out there only, in a second process (%r)" % (parts,),
      [(p.seqs, p.stages, p.any_length, p.any_length_stages) for p in parts]
      == [([1024, 2048, 8192], ["01_a", "02_b", "03_c"], [1000, 0, 0], ["02_b", "03_c"]),
          ([4096], ["01_a", "02_b"], [4000], ["02_b", "03_c"])])
parts = bench.checked_rounds(headline, every - {("02_b", "any_length", "fp16", 128, 1000)})
check("checked_rounds: a stage failing at S = 1000 runs beside 1024 no more, still at 1024 itself",
      [(p.seqs, p.stages, p.any_length_stages) for p in parts]
      == [([1024, 2048, 8192], ["01_a", "02_b", "03_c"], ["03_c"]), ([4096], ["01_a", "02_b", "03_c"], ["02_b", "03_c"])])

# --- interleaved.py's names, tables and rows ------------------------------------------------------
check("rounds_impl", [bench.rounds_impl(n, "causal") for n in ("ampere_15_alibi+alibi", "hopper_07_any_length@1000", "fa2@4000", "cudnn")]
      == [("ampere_15_alibi", "alibi", None), ("hopper_07_any_length", "any_length", 1000), ("fa2", "any_length", 4000),
          ("cudnn", "causal", None)])
row_format = "%-34s %10s %10s %8s %6s/%-6s %6s/%-6s  %s"  # interleaved.py's table row
lines = ["# gpu=FAKE; method=interleaved: 5 warm-up and 20 timed rounds", "",
         "fp16, head_dim 128, [16, 1024, 32, 128]",
         "%-34s %10s %10s %8s %13s %13s  %s" % ("impl", "median_ms", "min_ms", "TFLOP/s", "% FA2 med/min",
                                               "% cuDNN m/m", "status"),
         row_format % ("02_b", "0.9", "0.8", "300.0", "90.0", "91.0", "50.0", "51.0", "PASS"),
         row_format % ("02_b+alibi", "-", "-", "-", "-", "-", "-", "-", "FAIL: 4 rows x 32 heads x 16 batches"),
         row_format % ("fa2@1000", "0.8", "0.8", "300.0", "100.0", "100.0", "55.0", "55.0", "PASS"),
         "%-34s ALiBi costs +1.0%% (medians), +1.1%% (minima)" % "02_b",
         "%-34s S = 1000 runs at 97.0%% (medians), 96.0%% (minima) of the TFLOP/s at S = 1024" % "02_b"]
table = bench.RoundsTable("headline")
keys = [table(line) for line in lines]
check("RoundsTable: a progress key per implementation row, none for titles and summary lines (%r)" % (keys,),
      keys == [None] * 4 + [("02_b", "headline", "fp16", 128, 1024), ("02_b", "alibi", "fp16", 128, 1024),
                            ("fa2", "any_length", "fp16", 128, 1000), None, None])

csv_rows = [dict(impl=name, kind=kind, dtype="fp16", head_dim="128", batch="16", heads="32", kv_heads="32",
                 causal="0", alibi=alibi, seq_q=seq, seq_kv=seq, median_ms=ms, min_ms=ms, tflops="1", max_abs_err="1e-4",
                 status=status)
            for name, kind, alibi, seq, ms, status in (
                ("02_b", "stage", "0", "1024", "0.9", "PASS"), ("02_b+alibi", "stage", "1", "1024", "", "FAIL: rows"),
                ("02_b@1000", "stage", "0", "1000", "0.85", "PASS"), ("fa2", "reference", "0", "1024", "0.81", "PASS"),
                ("fa2@1000", "reference", "0", "1000", "0.8", "PASS"))]
part = headline._replace(seqs=[1024], any_length=[1000])
timed = bench.rounds_rows(args, part, csv_rows, "ERROR: not run: interleaved.py exited with code 1 (boom)")
check("rounds_rows: every result of the rounds, keyed as bench.py's", set(timed) == set(bench.rounds_results(part)))
alibi = timed[("02_b", "alibi", "fp16", 128, 1024)]
odd = timed[("02_b", "any_length", "fp16", 128, 1000)]
check("rounds_rows: <stage>+alibi is an alibi row, <stage>@<length> an any_length row",
      (alibi["impl"], alibi["series"], alibi["alibi"]) == ("02_b", "alibi", "1")
      and (odd["impl"], odd["series"], odd["seq_q"]) == ("02_b", "any_length", "1000")
      and timed[("fa2", "any_length", "fp16", 128, 1000)]["kind"] == "reference")
missing = timed[("cudnn", "any_length", "fp16", 128, 1000)]
check("rounds_rows: a result the process did not write says why",
      missing["status"] == "ERROR: not run: interleaved.py exited with code 1 (boom)" and missing["kind"] == "reference")

check_row = dict(impl="02_b", series="headline", dtype="fp16", head_dim=128, batch=16, heads=32, kv_heads="32",
                 causal="0", alibi="0", seq_q="1024", seq_kv="1024", median_ms="", min_ms="", tflops="",
                 max_abs_err="2e-4", rel_l2_err="3e-4", status="PASS")
both = bench.rounds_stage_row(check_row, timed[("02_b", "headline", "fp16", 128, 1024)])
check("rounds_stage_row: both checks passed: the rounds' time, fa_run's errors",
      (both["status"], both["median_ms"], both["max_abs_err"], both["rel_l2_err"]) == ("PASS", "0.9", "2e-4", "3e-4"))
failed_here = bench.rounds_stage_row(dict(check_row, status="FAIL: 3 bad elements"), odd)
failed_there = bench.rounds_stage_row(dict(check_row, series="alibi", alibi="1"), alibi)
not_run = bench.rounds_stage_row(check_row, missing)
check("rounds_stage_row: the status names the check that failed, and there is no time (%r, %r, %r)"
      % (failed_here["status"], failed_there["status"], not_run["status"]),
      failed_here["status"] == "FAIL: fa_run's check: 3 bad elements" and failed_here["median_ms"] == ""
      and failed_there["status"] == "FAIL: interleaved.py's check: rows" and failed_there["median_ms"] == ""
      and not_run["status"] == missing["status"])
merged = bench.merge([both, bench.rounds_stage_row(dict(check_row, series="any_length", seq_q="1000", seq_kv="1000"),
                                                   odd)],
                     [row for row in timed.values() if row["kind"] == "reference"])
pct = {(r["impl"], r["series"], r["seq_q"]): r["pct_of_fa2"] for r in merged}
check("merge: %% of FA2 from FA2 in the same rounds, at the same length and series (%r)" % (pct,),
      pct[("02_b", "headline", "1024")] == "90.00" and pct[("02_b", "any_length", "1000")] == "94.12")

# --- method and fallback --------------------------------------------------------------------------
args, _, _ = plan()
check("method: rounds, the shared rounds and the pairing, both checks",
      all(words in bench.method_text(args) for words in (
          "timed rounds", "shuffled afresh each round", "alibi rows", "S = 1000 beside 1024, S = 4000 beside 4096",
          "fa_run against fp64", "4 sampled rows", "from the same rounds")))
args.timing = "separate"
check("method: separate, as the CSVs before rounds say it",
      bench.method_text(args).startswith("each result checked against fp64 attention first (no time if it fails); "
                                         "then 5 warm-up and 20 timed launches, each between its own CUDA events"))
args = bench.parse_args(["--no-reference"])
with contextlib.redirect_stdout(io.StringIO()) as said:
    bench.choose_timing(args)
check("choose_timing: --no-reference times separately and says why (%r)" % said.getvalue(),
      args.timing == "separate" and "not in rounds: --no-reference" in said.getvalue())

# --- interleaved.py's own time_case on a fake PyTorch and library, run with bench.py's command ------
class FakeTensor:
    def __init__(self, shape):
        self.shape, self.device = shape, "cuda"

    def transpose(self, *dims):
        return self


class FakeTorch:
    """What interleaved.time_case calls of PyTorch. A launch moves a clock that the events read: a
    stage takes 1 ms per 1000 of length (ALiBi 2% more), FA2 twice that, cuDNN half."""
    float16 = bfloat16 = float32 = "a dtype"
    clock, backend = [0.0], [None]

    @staticmethod
    def tensor(values, dtype, device):
        return values

    @staticmethod
    def empty_like(t):
        return FakeTensor(t.shape)

    class cuda:
        @staticmethod
        def current_stream():
            return types.SimpleNamespace(cuda_stream=None)

        @staticmethod
        def synchronize():
            pass

        class Event:
            def __init__(self, enable_timing):
                self.t = None

            def record(self):
                self.t = FakeTorch.clock[0]

            def elapsed_time(self, end):
                return end.t - self.t

    class nn:
        class functional:
            @staticmethod
            def scaled_dot_product_attention(q, k, v, **options):
                FakeTorch.clock[0] += q.shape[1] / 1000.0 * {"fa2": 2.0, "cudnn": 0.5}[FakeTorch.backend[0][0]]


class FakeLib:
    def stage_names(self):
        return ["ampere_15_alibi", "hopper_07_any_length"]

    def params(self, q, k, v, o, causal=False, alibi=None):
        return q.shape[1], alibi is not None

    def launch(self, stage, params, stream):
        FakeTorch.clock[0] += params[0] / 1000.0 * (1.02 if params[1] else 1.0)


@contextlib.contextmanager
def sdpa_kernel(backend):
    FakeTorch.backend[0] = backend
    yield


attention = types.ModuleType("torch.nn.attention")
attention.sdpa_kernel = sdpa_kernel
args, _, _ = plan()
run = R("headline", "fp16", 128, [1024, 2048], ["ampere_15_alibi", "hopper_07_any_length"], ["ampere_15_alibi"], [1000, 0], ["hopper_07_any_length"], True)
options = interleaved.parse_args(bench.interleaved_command(args, run, "x.csv")[2:])
printed, timed_rows = io.StringIO(), []
with mock.patch.dict(sys.modules, {"torch": types.ModuleType("torch"), "torch.nn": types.ModuleType("torch.nn"),
                                   "torch.nn.attention": attention}), \
        mock.patch.multiple(interleaved.ref, check_output=lambda *a, **k: (True, 1e-4, 0.0, 0.0, "ok"),
                            case_inputs=lambda torch, seed, batch, seq, heads, kv_heads, head_dim, dtype: [
                                FakeTensor((batch, seq, heads, head_dim))] * 3,
                            sdpa_backend_enums=lambda torch, names: {n: (n,) for n in names},
                            first_call=lambda torch, backend, operands, options: (FakeTensor(()), None)), \
        contextlib.redirect_stdout(printed):
    for seq in options.seqs:
        timed_rows += interleaved.time_case(FakeTorch, FakeLib(), options, "fp16", 128, seq)[0]
    short = interleaved.parse_args(["--stages", "hopper_07,ampere_15_alibi", "--alibi-stages", "ampere_15",
                                    "--seqs", "1024", "--references", ""])
    with contextlib.redirect_stdout(io.StringIO()):  # its tables are not the ones bench.py reads below
        short_rows = interleaved.time_case(FakeTorch, FakeLib(), short, "fp16", 128, 1024)[0]
check("interleaved.py: a stage named by its id or its <track>_NN, its rows by its id (%r)"
      % [r["impl"] for r in short_rows],
      [r["impl"] for r in short_rows] == ["hopper_07_any_length", "ampere_15_alibi", "ampere_15_alibi+alibi"])
names = [r["impl"] for r in timed_rows]
check("interleaved.py with bench.py's options: the stages, their ALiBi variants, the references; at 1024 also "
      "the any-length stage and the references at 1000 (%r)" % names,
      names == ["ampere_15_alibi", "ampere_15_alibi+alibi", "hopper_07_any_length", "fa2", "cudnn", "hopper_07_any_length@1000", "fa2@1000", "cudnn@1000",
                "ampere_15_alibi", "ampere_15_alibi+alibi", "hopper_07_any_length", "fa2", "cudnn"])
odd = timed_rows[names.index("hopper_07_any_length@1000")]
check("interleaved.py: a stage at the paired length against FA2 and cuDNN at that length, same rounds",
      (odd["seq_q"], odd["pct_of_fa2"], odd["pct_of_cudnn"]) == (1000, "200.00", "50.00"))
table = bench.RoundsTable("headline")
keys = [key for key in map(table, printed.getvalue().splitlines()) if key]
check("bench.py reads a progress key of every row from interleaved.py's printed tables, each once",
      sorted(keys) == sorted(bench.rounds_results(run)))
timed = bench.rounds_rows(args, run, timed_rows, "missing")
check("bench.py maps every row interleaved.py writes to the result it planned",
      set(timed) == set(bench.rounds_results(run)) and all(r["status"] == "PASS" for r in timed.values()))
check("interleaved.py says the ALiBi cost and the any-length ratio of the same rounds",
      "%-34s ALiBi costs +2.0%% (medians)" % "ampere_15_alibi" in printed.getvalue()
      and "%-34s S = 1000 runs at 97.7%% (medians)" % "hopper_07_any_length" in printed.getvalue())

# --- a whole run with a fake fa_run and a fake interleaved.py ---------------------------------------
FAKE_INTERLEAVED = r'''
# A stand-in for tools/interleaved.py (made-up numbers): interleaved.py's own option parser, then per
# case its title, a row per implementation as it prints them, and its CSV. Stages take 1 ms per 1000
# of length (ALiBi 2%% more), FA2 twice that, cuDNN half. FAKE_INTERLEAVED_FAIL=<name>@<seq>,...
# fails those checks.
import csv, os, sys
sys.path.insert(0, %(tools)r)
import interleaved
args = interleaved.parse_args(sys.argv[1:])
failing = os.environ.get("FAKE_INTERLEAVED_FAIL", "").split(",")
references = [r for r in args.references.split(",") if r]
factor = {"fa2": 2.0, "cudnn": 0.5}
rows = []
for dtype in args.dtypes:
    for head_dim in args.head_dim:
        for seq, other in zip(args.seqs, args.any_length or [0] * len(args.seqs)):
            impls = [(n, seq, 1.0) for n in args.stage_list] + [(n + "+alibi", seq, 1.02) for n in args.alibi_list]
            impls += [(r, seq, factor[r]) for r in references]
            if other:
                impls += [(n + "@%%d" %% other, other, 1.0) for n in args.any_length_list]
                impls += [(r + "@%%d" %% other, other, factor[r]) for r in references if args.any_length_references]
            print("\n%%s, head_dim %%d, [%%d, %%d, %%d, %%d]" %% (dtype, head_dim, args.batch, seq, args.heads, head_dim))
            for name, length, f in impls:
                status = "FAIL: fake sampled rows" if "%%s@%%d" %% (name, seq) in failing else "PASS"
                ms = "%%g" %% (0.001 * length * f) if status == "PASS" else ""
                print("%%-34s %%10s %%10s  %%s" %% (name, ms or "-", ms or "-", status))
                rows.append(dict(impl=name, kind="reference" if name.split("@")[0] in factor else "stage", dtype=dtype,
                                 head_dim=head_dim, batch=args.batch, heads=args.heads, kv_heads=args.kv_heads,
                                 causal=int(args.causal), alibi=int("+alibi" in name), seq_q=length, seq_kv=length,
                                 median_ms=ms, min_ms=ms, tflops="1" if ms else "", max_abs_err="9e-4", status=status))
with open(args.csv, "w", newline="") as f:
    f.write("# gpu=FAKE GPU\n# torch=0.0.0+fake\n# torch_cuda=0.0\n# cudnn=1\n# flash_impl=fake\n")
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
sys.exit(1 if any(r["status"] != "PASS" for r in rows) else 0)
'''

with tempfile.TemporaryDirectory(prefix="test_bench_rounds_") as tmp:
    build = test_plots.fake_build(tmp)
    fake = os.path.join(tmp, "fake_interleaved.py")
    with open(fake, "w") as f:
        f.write(FAKE_INTERLEAVED % {"tools": TOOLS})
    bench.INTERLEAVED = fake
    bench.rounds_unavailable = lambda args: None  # no PyTorch or libfa_capi.so needed: the fake times
    os.environ.update(FAKE_FA_RUN_FAIL="02_fake@128", FAKE_INTERLEAVED_FAIL="04_fake_general@256")
    out_dir = os.path.join(tmp, "out")
    with contextlib.redirect_stdout(io.StringIO()) as said:
        rc = bench.main(["--build-dir", build, "--compute-capability", "80", "--dtypes", "fp16", "--head-dims", "64",
                         "--seqs", "128,256", "--any-length-seqs", "100", "--out-dir", out_dir, "--no-readme",
                         "--no-plots", "--no-docs"])
    output = said.getvalue()
    meta, rows = read_results_csv(os.path.join(out_dir, "latest.csv"))
    row = {(r["impl"], r["series"], r["seq_q"]): r for r in rows}
    check("a whole run: exit 1 (two checks failed), timing=rounds, PyTorch's versions from interleaved.py's header",
          rc == 1 and meta.get("timing") == "rounds" and meta.get("torch") == "0.0.0+fake" and meta.get("cudnn") == "1"
          and "interleaved" in meta and "torch_reference" not in meta and "shuffled" in meta.get("method", ""))
    check("a whole run: fa_run checks only, once per series; no torch_reference.py; the headline and causal rounds "
          "split in two by the failed checks, gqa in one", output.count("fa_run --stage") == output.count("--no-time") == 5
          and "torch_reference.py" not in output and output.count("fake_interleaved.py --lib") == 5)
    first = row[("01_fake", "headline", "128")]
    check("a whole run: a stage's time from the rounds, its errors from fa_run, % of FA2 and cuDNN from the rounds",
          (first["status"], first["median_ms"], first["max_abs_err"], first["pct_of_fa2"], first["pct_of_cudnn"])
          == ("PASS", "0.128", "1e-4", "200.00", "50.00") and row[("fa2", "headline", "128")]["max_abs_err"] == "9e-4")
    check("a whole run: fa_run's failed check, no time",
          row[("02_fake", "headline", "128")]["status"] == "FAIL: fa_run's check: fake bad element"
          and row[("02_fake", "causal", "128")]["median_ms"] == "")
    check("a whole run: interleaved.py's failed check, no time",
          row[("04_fake_general", "headline", "256")]["status"] == "FAIL: interleaved.py's check: fake sampled rows"
          and row[("04_fake_general", "headline", "256")]["median_ms"] == "")
    alibi = row[("04_fake_general", "alibi", "128")]
    odd = row[("02_fake", "any_length", "100")]
    check("a whole run: ALiBi rows from the headline rounds, alibi 1, no % of FA2",
          (alibi["alibi"], alibi["median_ms"], alibi["pct_of_fa2"]) == ("1", "0.13056", ""))
    check("a whole run: any-length rows with FA2 and cuDNN at that length, from the same rounds",
          (odd["status"], odd["median_ms"], odd["pct_of_fa2"]) == ("PASS", "0.1", "200.00")
          and row[("cudnn", "any_length", "100")]["status"] == "PASS")
    check("a whole run: causal and gqa rows with their shapes",
          row[("04_fake_general", "causal", "256")]["causal"] == "1" and row[("fa2", "gqa", "128")]["kv_heads"] == "8")
    progress = [line for line in output.splitlines() if line.startswith("[") and " left]" in line]
    checks, timed = 16, 30  # fa_run: headline 6, causal 4, any_length 2, gqa 2, alibi 2; rounds: 16 + 8 + 6
    check("a whole run: a progress line per check and per time, %d of %d (the not timed finish silently; %d)"
          % (checks + timed - 2, checks + timed, len(progress)),
          len(progress) == checks + timed - 2 and progress[-1].startswith("[%d/%d" % (checks + timed, checks + timed)))

# The statistic (results_csv.STATISTIC): in rounds, TFLOP/s and every ratio come from min_ms, also
# when a part written with medians is merged; timed separately, from median_ms.
from results_csv import attention_flops, derive_from_time  # noqa: E402


def statistic_rows():
    shape = {"dtype": "fp16", "head_dim": "128", "batch": "16", "heads": "32", "kv_heads": "32", "causal": "0",
             "alibi": "0", "seq_q": "1024", "seq_kv": "1024", "series": "headline", "part": "p", "status": "PASS"}
    stage = dict(shape, impl="30_x", kind="stage", median_ms="1.2", min_ms="1.0", tflops="1", pct_of_fa2="7",
                 pct_of_cudnn="")
    fa2 = dict(shape, impl="fa2", kind="reference", median_ms="1.5", min_ms="1.4", tflops="1", pct_of_fa2="",
               pct_of_cudnn="")
    return [stage, fa2]


rounds_rows = derive_from_time(statistic_rows(), "rounds")
flops = attention_flops(16, 32, 1024, 1024, 128)
check("rounds: % of FA2 = FA2's minimum / the stage's, TFLOP/s from the minimum, whatever the part wrote",
      rounds_rows[0]["pct_of_fa2"] == "140.00" and abs(float(rounds_rows[0]["tflops"]) - flops / 1e-3 / 1e12) < 1e-3)
separate_rows = derive_from_time(statistic_rows(), "separate")
check("separate: % of FA2 = FA2's median / the stage's",
      separate_rows[0]["pct_of_fa2"] == "125.00" and abs(float(separate_rows[0]["tflops"]) - flops / 1.2e-3 / 1e12) < 1e-3)

if failures:
    print("test_bench_rounds: %d failure(s)" % len(failures))
    for f in failures:
        print("  " + f)
    sys.exit(1)
print("test_bench_rounds: pairing, plan, checks, names, statuses, ratios, the statistic, fallback and a whole run: all checks passed")
