#!/usr/bin/env python3
"""CPU test of tools/interleaved.py's launch order and options (no GPU, no PyTorch needed).

Rotating one list every round keeps who follows whom (cuDNN launched right after FA2 in three
rounds of four), and a launch starts at the clock its predecessor left under the power cap. This test holds the order to what the protocol promises: every round launches every
implementation once; over many rounds each implementation follows each other one about equally
often; the order is reproducible for a seed; --order series keeps each implementation's launches
together, warm-up first. It also checks the options (--any-length needs one length per --seqs
value, 0 for none; --alibi-stages, --any-length-stages and --any-length-references, which
tools/bench.py's rounds use; --alibi and --alibi-stages not both), the summary of NVML readings, and
that tools/nvml.py fails with NvmlError, not a crash, where there is no driver. Exit codes: 0 pass,
1 fail.
"""
import collections
import contextlib
import io
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import interleaved  # noqa: E402
import nvml  # noqa: E402

failures = []


def check(what, ok):
    if not ok:
        failures.append(what)


names = ["ampere_15_alibi", "ampere_16_skip_padding", "fa2", "cudnn"]
warmup, reps = 3, 600
plan = interleaved.launch_plan(names, warmup, reps, "rounds", seed=1)
check("rounds: %d launches" % ((warmup + reps) * len(names)), len(plan) == (warmup + reps) * len(names))
for r in range(warmup + reps):
    chunk = plan[r * len(names):(r + 1) * len(names)]
    if sorted(n for n, _ in chunk) != sorted(names) or any(t != (r >= warmup) for _, t in chunk):
        failures.append("round %d launches %r" % (r, chunk))
        break
timed = collections.Counter(n for n, t in plan if t)
check("rounds: %d timed launches each, got %r" % (reps, dict(timed)), all(timed[n] == reps for n in names))

# Who follows whom: each of the 12 ordered pairs of distinct implementations within 25% of their mean
# count. Rotation gives cudnn after fa2 in 3 rounds of 4 (453 times here, against a mean of 200) and
# four of the pairs never (fa2 after cudnn, for one).
order = [n for n, _ in plan]
pairs = collections.Counter((a, b) for a, b in zip(order, order[1:]) if a != b)
mean = sum(pairs.values()) / (len(names) * (len(names) - 1))
for a in names:
    for b in names:
        if a != b and not 0.75 * mean <= pairs[(a, b)] <= 1.25 * mean:
            failures.append("rounds: %s follows %s %d times, mean %.0f" % (b, a, pairs[(a, b)], mean))
check("rounds: the same seed gives the same order", plan == interleaved.launch_plan(names, warmup, reps, "rounds", 1))
check("rounds: another seed another order", plan != interleaved.launch_plan(names, warmup, reps, "rounds", 2))

series = interleaved.launch_plan(names, 2, 5, "series")
want = [(n, i >= 2) for n in names for i in range(7)]
check("series: each implementation's 2 warm-up and 5 timed launches in a row, got %r" % series[:8], series == want)

with contextlib.redirect_stderr(io.StringIO()):
    for argv in (["--stages", "ampere_15", "--seqs", "1024,4096", "--any-length", "1000"],
                 ["--stages", "ampere_15", "--order", "sideways"], ["--stages", "ampere_15", "--dtype", "fp8"],
                 ["--stages", "ampere_15", "--alibi", "--alibi-stages", "ampere_15"],
                 ["--stages", "ampere_15", "--seqs", "1024,4096", "--any-length", "1000,-4000"]):
        try:
            interleaved.parse_args(argv)
            failures.append("parse_args accepted %r" % argv)
        except SystemExit as e:
            check("parse_args %r exits 2" % argv, e.code == 2)
args = interleaved.parse_args(["--stages", "ampere_15", "--seqs", "1024,4096", "--any-length", "1000,4000",
                               "--order", "series", "--readings"])
check("parse_args: --any-length pairs", dict(zip(args.seqs, args.any_length)) == {1024: 1000, 4096: 4000})
check("method text names the order and the readings",
      "series" in interleaved.method_text(args) and "NVML" in interleaved.method_text(args))
every = interleaved.parse_args(["--stages", "ampere_15,hopper_07", "--alibi"])
check("--alibi and no --any-length-stages: every stage with ALiBi and at the paired length, as before",
      every.alibi_list == every.any_length_list == ["ampere_15", "hopper_07"] and not every.any_length_references)
args = interleaved.parse_args(["--stages", "ampere_15,hopper_07", "--alibi-stages", "ampere_15", "--seqs", "1024,2048,4096",
                               "--any-length", "1000,0,4000", "--any-length-stages", "hopper_07", "--any-length-references"])
check("bench.py's rounds: ALiBi for some stages, some stages at the paired lengths, 0 for no pair, references there",
      (args.stage_list, args.alibi_list, args.any_length_list, args.any_length, args.any_length_references)
      == (["ampere_15", "hopper_07"], ["ampere_15"], ["hopper_07"], [1000, 0, 4000], True))
args = interleaved.parse_args(["--stages", "", "--alibi-stages", "ampere_15", "--references", ""])
check("--stages '': only the ALiBi variants", (args.stage_list, args.alibi_list) == ([], ["ampere_15"]))

summary = interleaved.readings_summary([(1800, 650.0, 60, "sw_power_cap"), (1500, 700.0, 62, "sw_power_cap"),
                                        (1980, 100.0, 40, "none")])
check("readings_summary: medians and the most frequent reasons, got %r" % (summary,),
      summary == (1800, 650.0, 60, "sw_power_cap"))

try:
    nvml.Nvml().reading()  # a machine with a driver: a reading, whatever it says
except nvml.NvmlError:
    pass  # no driver (CI): the clear error interleaved.py turns into its message and exit code 3

if failures:
    print("test_interleaved: %d failure(s)" % len(failures))
    for f in failures:
        print("  " + f)
    sys.exit(1)
print("test_interleaved: launch order, options, readings summary: all checks passed")
