#!/usr/bin/env python3
"""CPU test of the backward benchmark (tools/backward_bench.py), without a GPU or PyTorch.

  FLOPs         backward_flops: 2.5 x the forward's 4 B H Sq Skv D, halved for causal
  CSV           the columns, written and read back with the header lines; TFLOP/s from the minimum;
                % of FA2 and cuDNN from the minima of the same case only; none for a row without time
  options       bad values exit 2 with a message naming the problem
  dry run       the cases (fp16 and bf16, head_dim 64 and 128, S = 1k..8k, non-causal and causal),
                the implementations (every stage with a backward pass, from stage.json alone), the
                causal rows of a stage whose backward does not declare causal left out, the estimate
  stage choice  backward_stages on made-up declarations: selection, a stage without a backward, an
                unknown name
  a whole run   measure() on a fake PyTorch and library: every implementation's forward runs before
                its checked backward and outside every timed region (each pair of CUDA events
                encloses exactly one backward call and nothing else); a stage that fails its check
                and an unsupported causal case get no time; the CSV's header lines and ratios
  the check     check_gradients' rule on made-up gradients (tolerance, NaN fails), with a tiny
                fake of the few tensor operations it uses

The numbers are FAKE. Exit codes: 0 pass, 1 fail.
"""

import contextlib
import io
import math
import os
import subprocess
import sys
import tempfile
import types
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TOOLS = os.path.join(REPO, "tools")
sys.path.insert(0, TOOLS)
import backward_bench  # noqa: E402
import stages  # noqa: E402

failures = []


def check(what, ok):
    if not ok:
        failures.append(what)


# --- FLOPs --------------------------------------------------------------------------------------
forward = 4.0 * 16 * 32 * 4096 * 4096 * 128
check("backward FLOPs = 2.5 x forward", backward_bench.backward_flops(16, 32, 4096, 4096, 128) == 2.5 * forward)
check("causal halves them", backward_bench.backward_flops(16, 32, 4096, 4096, 128, True) == 1.25 * forward)
check("43980.5 GFLOP at the largest d128 case (%r)" % backward_bench.backward_flops(16, 32, 8192, 8192, 128),
      round(backward_bench.backward_flops(16, 32, 8192, 8192, 128) / 1e9, 1) == 43980.5)

# --- CSV ----------------------------------------------------------------------------------------
check("the CSV's columns", backward_bench.COLUMNS == [
    "impl", "kind", "dtype", "head_dim", "batch", "heads", "seq_q", "seq_kv", "causal", "flops", "median_ms", "min_ms",
    "tflops", "pct_of_fa2", "pct_of_cudnn", "max_abs_err", "max_err_over_tolerance", "status"])
case = backward_bench.Case("fp16", 128, 16, 32, 4096, False)


def row(impl, kind, min_ms, status="PASS", c=case):
    r = backward_bench.base_row(c, impl, kind, status)
    r.update(min_ms="" if min_ms is None else "%g" % min_ms, median_ms="" if min_ms is None else "%g" % (min_ms * 1.1))
    return r


rows = [row("backward_01_base", "stage", 40.0), row("backward_02_x", "stage", None, "FAIL: made up"),
        row("fa2", "reference", 20.0), row("cudnn", "reference", 10.0),
        row("backward_01_base", "stage", 10.0, c=case._replace(causal=True))]
backward_bench.fill_metrics(rows)
flops = backward_bench.backward_flops(16, 32, 4096, 4096, 128)
check("TFLOP/s from the minimum (%r)" % rows[0]["tflops"], rows[0]["tflops"] == "%.1f" % (flops / 40e-3 / 1e12))
check("%% of FA2 and cuDNN: their minimum over the row's (%r, %r)" % (rows[0]["pct_of_fa2"], rows[0]["pct_of_cudnn"]),
      (rows[0]["pct_of_fa2"], rows[0]["pct_of_cudnn"], rows[2]["pct_of_cudnn"]) == ("50.00", "25.00", "50.00"))
check("a failed row has no metrics", all(rows[1][c] == "" for c in ("tflops", "pct_of_fa2", "pct_of_cudnn")))
check("no reference of another case is used", rows[4]["pct_of_fa2"] == "" and rows[4]["tflops"] != "")
check("the causal row's FLOPs are halved", float(rows[4]["flops"]) == flops / 2)
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "b.csv")
    backward_bench.write_csv(path, [("gpu", "FAKE GPU"), ("empty", ""), ("git", "abc1234")], rows)
    text = open(path).read()
    check("header lines, an empty value left out (%r)" % text[:60],
          text.startswith("# gpu=FAKE GPU\n# git=abc1234\n" + ",".join(backward_bench.COLUMNS) + "\n"))
    meta, back = backward_bench.read_csv(path)
    check("read back", meta == {"gpu": "FAKE GPU", "git": "abc1234"} and len(back) == 5
          and back[0]["pct_of_cudnn"] == "25.00")

# --- options ------------------------------------------------------------------------------------
for argv, words in ((["--head-dims", "96"], "64 and 128"), (["--dtypes", "fp8"], "--dtypes"),
                    (["--reps", "0"], "--reps"), (["--seqs", "1q"], "integers"), (["--seqs", "0"], ">= 1"),
                    (["--references", "flex"], "unknown"), (["--causal", "maybe"], "invalid choice"),
                    (["--check-slices", "0"], "--check-slices"), (["--host-gap-us", "-1"], "--host-gap-us"),
                    (["--batch", "0"], "--batch")):
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        try:
            backward_bench.parse_args(argv)
            failures.append("parse_args accepted %r" % argv)
        except SystemExit as e:
            check("parse_args %r exits 2 (%s)" % (argv, e.code), e.code == 2)
    check("parse_args %r says %r (%r)" % (argv, words, said.getvalue()[-200:]), words in said.getvalue())
said = io.StringIO()
with contextlib.redirect_stderr(said):
    status = backward_bench.main(["--dry-run", "--stages", "backward_99"])
check("an unknown stage: exit 2, named (%r)" % said.getvalue(), status == 2 and "backward_99" in said.getvalue())
with contextlib.redirect_stderr(said):
    status = backward_bench.main(["--dry-run", "--stages", "ampere_14"])
check("a stage without a backward: exit 2, said so", status == 2 and "has no backward pass" in said.getvalue())
args = backward_bench.parse_args(["--seqs", "1k,2048"])
check("seqs: k = 1024", args.seqs == [1024, 2048])
default = backward_bench.parse_args([])
check("the default grid: 2 dtypes x 2 head dims x 2 masks x 4 lengths (%d)" % len(default.cases),
      len(default.cases) == 32 and {c.seq for c in default.cases} == {1024, 2048, 4096, 8192}
      and {(c.batch, c.heads) for c in default.cases} == {(16, 32)})


# --- stage choice -------------------------------------------------------------------------------
def fake_stage(name, backward=None, target="sm_80"):
    track, _, folder = name.partition("_")
    return stages.Stage(name=name, track=track, folder_name=folder, parent=None, idea="", target=target,
                        features=("lse",), sass={}, spill_budget={}, backward_features=backward)


made_up = [fake_stage("ampere_14_lse"), fake_stage("backward_01_base", ()),
           fake_stage("backward_02_x", ("causal",)), fake_stage("backward_03_tma", ("causal",), "sm_90a")]
check("default: every stage with a backward", [s.name for s in backward_bench.backward_stages(made_up)]
      == ["backward_01_base", "backward_02_x", "backward_03_tma"])
check("compute capability 8.0 runs no sm_90a stage",
      [s.name for s in backward_bench.backward_stages(made_up, gpu_cc=80)] == ["backward_01_base", "backward_02_x"])
check("--stages by <track>_NN", [s.name for s in backward_bench.backward_stages(made_up, ["backward_02"])]
      == ["backward_02_x"])
causal_case = case._replace(causal=True)
impls = backward_bench.implementations(causal_case, made_up[1:3], ["fa2", "cudnn"])
check("causal: a stage whose backward does not declare it is unsupported, the references run (%r)" % impls,
      impls[0][2].startswith("unsupported") and impls[1][2] is None and impls[2] == ("fa2", "reference", None))

with_mode = [fake_stage("backward_01_base", ()), fake_stage("backward_02_det", ("causal", "deterministic"))]
impls = backward_bench.implementations(causal_case, with_mode, [], deterministic=True)
check("--deterministic both: a second row for the stage that declares the mode, none for the other (%r)" % impls,
      [n for n, _, _ in impls] == ["backward_01_base", "backward_02_det", "backward_02_det+deterministic"]
      and impls[2][2] is None)
check("the implementation name gives the stage and its mode",
      backward_bench.stage_and_mode("backward_02_det+deterministic") == ("backward_02_det", True)
      and backward_bench.stage_and_mode("backward_02_det") == ("backward_02_det", False))
check("without --deterministic, no second row",
      len(backward_bench.implementations(causal_case, with_mode, [])) == 2)

# --- dry run (the tree's own declarations) -------------------------------------------------------
declared = [s.name for s in stages.all_stages() if s.backward_features is not None]
out = io.StringIO()
with contextlib.redirect_stdout(out):
    status = backward_bench.main(["--dry-run"])
text = out.getvalue()
check("--dry-run exits 0", status == 0)
check("--dry-run names every stage with a backward (%s) and the references" % declared,
      bool(declared) and all(n in text.splitlines()[0] for n in declared) and "fa2 (SDPA backward)" in text
      and "cudnn (SDPA backward)" in text)
check("--dry-run: 32 cases, a line each", sum(1 for line in text.splitlines() if line.startswith(("fp16 d", "bf16 d")))
      == 32)
minutes = [line for line in text.splitlines() if "estimated time" in line]
check("--dry-run: the estimate, under the 10 minutes of one call (%r)" % minutes,
      len(minutes) == 1 and (" min " not in minutes[0]
                             or int(minutes[0].split("estimated time ")[1].split(" min")[0]) < 10))
check("--dry-run says where it would write", "backward_latest.csv" in text)


# --- a whole run on fakes -------------------------------------------------------------------------
class Log:
    entries = []
    now = 0.0


class FakeTensor:
    def __init__(self, shape, tag):
        self.shape, self.tag, self.device = shape, tag, "cuda"

    def transpose(self, a, b):
        return self

    def view(self, dtype):
        return self

    def fill_(self, value):
        return self

    def copy_(self, other):
        return self


def make_torch():
    torch = types.ModuleType("torch")
    torch.float16, torch.bfloat16, torch.float32, torch.int16 = "float16", "bfloat16", "float32", "int16"
    torch.__version__ = "0.0.0+fake"
    torch.version = types.SimpleNamespace(cuda="13.0")
    torch.randn = lambda shape, device=None, dtype=None: FakeTensor(shape, "dO")
    torch.empty_like = lambda t: FakeTensor(t.shape, "empty")
    cuda = types.SimpleNamespace()
    cuda.is_available = lambda: True
    cuda.get_device_capability = lambda: (9, 0)
    cuda.get_device_name = lambda: "FAKE GPU"
    cuda.current_stream = lambda: types.SimpleNamespace(cuda_stream=0)
    cuda.synchronize = lambda: None
    cuda.empty_cache = lambda: None
    cuda._sleep = lambda cycles: Log.entries.append("sleep")

    class Event:
        def __init__(self, enable_timing):
            self.t = None

        def record(self):
            self.t = Log.now
            Log.entries.append("record")

        def elapsed_time(self, end):
            return end.t - self.t
    cuda.Event = Event
    torch.cuda = cuda
    torch.backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=True)))
    return torch


BACKWARD_MS = {"backward_01_base": 4.0, "backward_02_x": 1.0, "fa2": 2.0, "cudnn": 1.0}


class FakeLib:
    def __init__(self, path):
        pass

    def stage_names(self):
        return ["ampere_14_lse", "backward_01_base", "backward_02_x"]


class FakeBackward:
    def __init__(self, path):
        pass

    def has_backward(self, stage):
        return stage.startswith("backward_")

    @staticmethod
    def params(*a):
        return "params"

    def launch(self, stage, params, stream=None):
        Log.now += BACKWARD_MS[stage]
        Log.entries.append("backward:" + stage)


def fake_stage_forward(torch, lib, stage, q, k, v, case, stream):
    Log.entries.append("forward:" + stage)
    return FakeTensor(q.shape, "o"), FakeTensor(q.shape, "lse")


def fake_reference_forward(torch, backend, q, k, v, case):
    Log.entries.append("forward:" + backend[0])
    return FakeTensor(q.shape, "o:" + backend[0]), ["q", "k", "v"]


def fake_reference_backward(torch, o, leaves, d_o):
    name = o.tag.split(":")[1]
    Log.now += BACKWARD_MS[name]
    Log.entries.append("backward:" + name)
    return (FakeTensor((1,), "dq:" + name), FakeTensor((1,), "dk"), FakeTensor((1,), "dv"))


def fake_check(torch, expected, dq, dk, dv):
    Log.entries.append("check")
    if Log.entries[-2] == "backward:backward_02_x":
        return False, 0.5, 7.0, "dQ of (batch 0, head 0): made up"
    return True, 1e-3, 0.25, "passed"


torch_module = make_torch()
attention = types.ModuleType("torch.nn.attention")
import torch_reference  # noqa: E402
import fa_capi  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    lib = os.path.join(tmp, "libfa_capi.so")
    open(lib, "w").close()
    csv_path = os.path.join(tmp, "backward.csv")
    printed = io.StringIO()
    with mock.patch.dict(sys.modules, {"torch": torch_module}), \
            mock.patch.object(fa_capi, "FaCapi", FakeLib), \
            mock.patch.object(backward_bench, "BackwardLib", FakeBackward), \
            mock.patch.object(backward_bench.stage_declarations, "all_stages", lambda: made_up), \
            mock.patch.multiple(backward_bench, stage_forward=fake_stage_forward,
                                reference_forward=fake_reference_forward, reference_backward=fake_reference_backward,
                                check_gradients=fake_check, expected_gradients=lambda *a: {},
                                nvidia_smi_query=lambda: {"driver": "000.00", "max_sm_clock_mhz": "1980",
                                                          "sm_clock_mhz": "345"}), \
            mock.patch.multiple(torch_reference,
                                case_inputs=lambda torch, seed, batch, seq, heads, kv_heads, head_dim, dtype: (
                                    FakeTensor((batch, seq, heads, head_dim), "q"),
                                    FakeTensor((batch, seq, heads, head_dim), "k"),
                                    FakeTensor((batch, seq, heads, head_dim), "v")),
                                sdpa_backend_enums=lambda torch, names: {n: (n,) for n in names},
                                torch_header=lambda torch: ["gpu=FAKE GPU", "sm=90", "torch=0.0.0+fake", "cudnn=90100"]), \
            contextlib.redirect_stdout(printed):
        status = backward_bench.main(["--lib", lib, "--csv", csv_path, "--stages", "backward_01,backward_02",
                                      "--dtypes", "fp16", "--head-dims", "128", "--seqs", "1024", "--causal", "both",
                                      "--warmup", "1", "--reps", "3"])
    check("a stage that fails its check: exit 1 (%r)" % status, status == 1)
    meta, got = backward_bench.read_csv(csv_path)
    check("the header: GPU, driver, CUDA, torch, cuDNN, git, the command, the method (%r)" % meta,
          meta.get("gpu") == "FAKE GPU" and meta.get("driver") == "000.00" and meta.get("cuda") == "13.0"
          and meta.get("torch") == "0.0.0+fake" and meta.get("cudnn") == "90100" and meta.get("git")
          and "backward_bench.py" in meta.get("command", "") and "autograd.grad" in meta.get("method", "")
          and meta.get("statistic") == "minimum")
    names = [(r["impl"], r["causal"]) for r in got]
    check("rows: per case the stages, then FA2 and cuDNN (%r)" % names,
          names == [("backward_01_base", "0"), ("backward_02_x", "0"), ("fa2", "0"), ("cudnn", "0"),
                    ("backward_01_base", "1"), ("backward_02_x", "1"), ("fa2", "1"), ("cudnn", "1")])
    by = {(r["impl"], r["causal"]): r for r in got}
    check("the failing stage has no time and says why", by[("backward_02_x", "0")]["status"].startswith("FAIL: dQ")
          and by[("backward_02_x", "0")]["min_ms"] == "" and by[("backward_02_x", "0")]["tflops"] == "")
    check("causal, a backward without it: unsupported, no time, not run",
          by[("backward_01_base", "1")]["status"].startswith("unsupported") and by[("backward_01_base", "1")]["min_ms"] == "")
    base = by[("backward_01_base", "0")]
    check("a passing stage: its time, TFLOP/s, %% of FA2 and cuDNN (%r)" % base,
          base["status"] == "PASS" and float(base["min_ms"]) == 4.0
          and base["tflops"] == "%.1f" % (backward_bench.backward_flops(16, 32, 1024, 1024, 128) / 4e-3 / 1e12)
          and base["pct_of_fa2"] == "50.00" and base["pct_of_cudnn"] == "25.00" and base["max_err_over_tolerance"] == "0.25")
    check("the references' causal rows are timed", by[("fa2", "1")]["min_ms"] == "2" and by[("cudnn", "1")]["min_ms"] == "1")
    # The order: each implementation's forward, then its checked backward, before any timing; inside
    # every pair of CUDA events exactly one backward call and nothing else.
    entries = Log.entries
    first_record = entries.index("record")
    setup = entries[:first_record]
    check("before the timing of the first case: forward, backward, check per implementation (%r)" % setup,
          setup[:12] == ["forward:backward_01_base", "backward:backward_01_base", "check",
                         "forward:backward_02_x", "backward:backward_02_x", "check",
                         "forward:fa2", "backward:fa2", "check", "forward:cudnn", "backward:cudnn", "check"])
    windows, inside, current = [], False, []
    for e in entries:
        if e == "record":
            if inside:
                windows.append(current)
            inside, current = not inside, []
        elif inside:
            current.append(e)
    check("every timed region holds one backward call and no forward (%r)" % windows[:6],
          windows and all(len(w) == 1 and w[0].startswith("backward:") for w in windows))
    check("%d timed regions: (1 + 3) rounds x 3 implementations + (1 + 3) x 2 (%d)" % (12 + 8, len(windows)),
          len(windows) == 12 + 8)
    check("the failing stage is never timed", all(w != ["backward:backward_02_x"] for w in windows))
    check("the causal stage backward_02_x ran its forward and check in the causal case too",
          entries.count("forward:backward_02_x") == 2 and entries.count("forward:backward_01_base") == 1)
    check("a spin kernel before every timed launch", entries.count("sleep") == len(windows))
    check("a table per case", "TFLOP/s" in printed.getvalue() and "% cuDNN" in printed.getvalue())

# --- the check's rule, on a tiny fake of the tensor operations ----------------------------------
class Vec:
    """A 1-D stand-in for the tensors check_gradients indexes as [b, :, h]."""

    def __init__(self, values):
        self.values = list(values)

    def __getitem__(self, index):
        return self

    def double(self):
        return self

    def __sub__(self, other):
        return Vec(a - b for a, b in zip(self.values, other.values))

    def abs(self):
        return Vec(abs(a) for a in self.values)

    def __le__(self, tol):
        return Vec(a <= tol for a in self.values)

    def __invert__(self):
        return Vec(not a for a in self.values)

    def any(self):
        return Scalar(any(self.values))

    def sum(self):
        return Scalar(sum(self.values))

    def max(self):
        return Scalar(max(self.values))

    def numel(self):
        return len(self.values)


class Scalar:
    def __init__(self, value):
        self.value = value

    def item(self):
        return self.value


fake_math = types.SimpleNamespace(isfinite=lambda v: Vec(math.isfinite(a) for a in v.values))
fake_math_index = lambda v, mask: Vec(a for a, m in zip(v.values, mask.values) if m)  # noqa: E731
Vec.__getitem__ = lambda self, index: fake_math_index(self, index) if isinstance(index, Vec) else self
ref = Vec([1.0, -2.0, 0.5])
expected = {(0, 0): [("dQ", ref, 0.01), ("dK", ref, 0.01), ("dV", ref, 0.01)]}
good = Vec([1.005, -2.0, 0.5])
ok, err, ratio, summary = backward_bench.check_gradients(fake_math, expected, good, good, good)
check("within the tolerance: passes (%r)" % summary, ok and abs(err - 0.005) < 1e-12 and abs(ratio - 0.5) < 1e-9)
ok, err, ratio, summary = backward_bench.check_gradients(fake_math, expected, good, Vec([1.0, -2.02, 0.5]), good)
check("over it: fails, names the gradient (%r)" % summary, not ok and summary.startswith("dK of (batch 0, head 0)"))
ok, err, ratio, summary = backward_bench.check_gradients(fake_math, expected, good, good, Vec([1.0, float("nan"), 0.5]))
check("NaN fails (%r)" % summary, not ok and "dV" in summary and err == math.inf)

# --- --help -------------------------------------------------------------------------------------
done = subprocess.run([sys.executable, os.path.join(TOOLS, "backward_bench.py"), "--help"], stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT, text=True)
check("backward_bench.py --help names the run its estimate assumes", done.returncode == 0 and "--dry-run" in done.stdout
      and "backward_h100-80gb-hbm3_20261207-145212.csv" in done.stdout)

if failures:
    print("test_backward_bench: %d check(s) failed:" % len(failures))
    for f in failures:
        print("  FAIL: " + f)
    sys.exit(1)
print("test_backward_bench: FLOPs, CSV, options, dry run, stage choice, a whole run on fakes (the forward outside "
      "every timed region, no time for a failed check) and the check's rule: all checks passed")
