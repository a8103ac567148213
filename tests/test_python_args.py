#!/usr/bin/env python3
"""The Python package's checks and stage choice (python/flash_stages), without PyTorch or a GPU.

    python3 tests/test_python_args.py                          # the checks and the stage choice
    python3 tests/test_python_args.py build/libfa_capi.so      # and the library's loading and errors

attention()'s argument checks (flash_stages/_checks.py) read only what a tensor says about itself,
so small stand-in objects exercise every one of them here: each bad call must raise the right
exception with a message that names the problem; so do the checks of a call that will be
differentiated. The stage choice (flash_stages/_stages.py) is checked against the declarations, for
each kind of GPU, and the choice of the backward stage against a stand-in catalogue. With the
library's path, loading it and calls the launchers reject (no GPU needed: validation comes before
any launch) are checked too; a missing or broken library must give a clear error either way. Where
PyTorch happens to be installed (it is not needed), the custom ops and their autograd formula run on
CPU tensors against a stand-in library, which records what each launch gets (deterministic=True
reaching the backward's struct). Exit 0 if all hold, 1 otherwise.
"""

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "tools"))

import flash_stages  # noqa: E402
from flash_stages import _checks, _library, _stages  # noqa: E402
import stages as tools_stages  # noqa: E402  (tools/stages.py: the project's own reader of stage.json)

failures = []


def check(condition, what):
    print("%s  %s" % ("ok  " if condition else "FAIL", what))
    if not condition:
        failures.append(what)


class Device:
    def __init__(self, type_, index=None):
        self.type, self.index = type_, index

    def __eq__(self, other):
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)


CUDA0, CUDA1, CPU = Device("cuda", 0), Device("cuda", 1), Device("cpu")


class Tensor:
    """What the checks read of a torch.Tensor, and nothing else."""

    def __init__(self, shape, dtype="torch.float16", device=CUDA0, strides=None, data_ptr=0x10000, requires_grad=False):
        self.shape, self.dtype, self.device = tuple(shape), dtype, device
        if strides is None:  # contiguous
            strides, step = [], 1
            for size in reversed(self.shape):
                strides.insert(0, step)
                step *= size
        self._strides, self._data_ptr, self.requires_grad = tuple(strides), data_ptr, requires_grad

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._data_ptr


def qkv(batch=2, seq_q=100, seq_kv=130, heads=8, kv_heads=8, head_dim=64, **kw):
    return (Tensor((batch, seq_q, heads, head_dim), **kw), Tensor((batch, seq_kv, kv_heads, head_dim), **kw),
            Tensor((batch, seq_kv, kv_heads, head_dim), **kw))


def raises(exception, needle, fn, *args, **kwargs):
    """Whether fn raises `exception` with `needle` in its message; prints the message."""
    try:
        fn(*args, **kwargs)
    except exception as e:
        print("        %s: %s" % (type(e).__name__, e))
        return needle in str(e)
    except Exception as e:  # the wrong kind
        print("        wrong exception %s: %s" % (type(e).__name__, e))
        return False
    print("        no exception")
    return False


def test_good_calls():
    q, k, v = qkv()
    call = _checks.check_attention(q, k, v)
    check((call.batch, call.seq_q, call.seq_kv, call.heads, call.kv_heads, call.head_dim) == (2, 100, 130, 8, 8, 64),
          "a plain call: its sizes")
    check(call.features == frozenset() and abs(call.softmax_scale - 0.125) < 1e-12,
          "a plain call needs no feature; the default scale is 1/sqrt(64)")
    q, k, v = qkv(heads=8, kv_heads=2, head_dim=128, dtype="torch.bfloat16")
    alibi = Tensor((8,), dtype="torch.float32")
    call = _checks.check_attention(q, k, v, causal=True, alibi_slopes=alibi, return_lse=True, softmax_scale=0.3)
    check(call.features == frozenset({"causal", "gqa", "lse", "alibi"}) and call.softmax_scale == 0.3,
          "causal, GQA, LSE, ALiBi and a scale: the features they need")
    check(call.o_shape == (2, 100, 8, 128) and call.lse_shape == (2, 8, 100), "output and LSE shapes")
    call = _checks.check_attention(*qkv(kv_heads=1))
    check(call.features == frozenset({"gqa"}), "multi-query attention (1 KV head) is GQA")

    # q sliced out of a packed [batch, seq, 3, heads, head_dim] tensor: strides (seq*3*H*D, 3*H*D, D, 1).
    b, s, h, d = 2, 77, 12, 64
    packed = (s * 3 * h * d, 3 * h * d, d, 1)
    q = Tensor((b, s, h, d), strides=packed)
    k = Tensor((b, s, h, d), strides=packed, data_ptr=0x10000 + 2 * h * d)
    v = Tensor((b, s, h, d), strides=packed, data_ptr=0x10000 + 4 * h * d)
    _checks.check_attention(q, k, v)
    _checks.check_alignment(q, k, v)
    check(True, "views into a packed qkv tensor pass")
    # K transposed from [batch, heads, seq, head_dim] (transformers' cache layout).
    k = Tensor((b, s, h, d), strides=(h * s * d, d, s * d, 1))
    _checks.check_attention(q, k, k)
    check(True, "a transposed [batch, heads, seq, head_dim] tensor passes")
    # Dimensions of size 1 may have any stride: PyTorch reports odd ones there.
    q = Tensor((1, 1, 8, 64), strides=(3, 5, 64, 1))
    call = _checks.check_attention(q, q, q)
    check(call.seq_q == 1, "size-1 dimensions with odd strides pass")
    check(_checks.kernel_strides(q) == (512, 512, 64), "kernel_strides gives them the tensor's span: %s"
          % (_checks.kernel_strides(q),))
    check(_checks.kernel_strides(Tensor((2, 5, 3, 64))) == (960, 192, 64), "kernel_strides keeps real strides")


def test_seqlens_k():
    q, k, v = qkv()
    call = _checks.check_attention(q, k, v, causal=True, seqlens_k=Tensor((2,), dtype="torch.int32"))
    check(call.features == frozenset({"causal", "seqlens_k"}) and call.seq_kv == 130,
          "an int32 [batch] seqlens_k on q's device: the call needs the feature seqlens_k, seq_kv stays the cache's")


def test_paged_kv():
    # A pool of 40 pages of 16 rows for a batch of 2 rows of at most 9 pages each: seq_kv is 9 x 16 = 144.
    q = Tensor((2, 1, 8, 64))
    pool = Tensor((40, 16, 2, 64))
    table = Tensor((2, 9), dtype="torch.int32")
    call = _checks.check_attention(q, pool, pool, causal=True, seqlens_k=Tensor((2,), dtype="torch.int32"),
                                   block_table=table)
    check(call.features == frozenset({"causal", "gqa", "seqlens_k", "paged_kv"}) and call.seq_kv == 144
          and (call.page_size, call.max_pages, call.block_table_batch_stride) == (16, 9, 9),
          "a paged call: the feature paged_kv, seq_kv = max_pages x page_size, the pool's page count not the batch")
    one = _checks.check_attention(Tensor((1, 1, 8, 64)), pool, pool, block_table=Tensor((1, 9), dtype="torch.int32",
                                                                                      strides=(5, 1)))
    check(one.block_table_batch_stride == 9, "batch 1: the table's batch stride is never stepped (max_pages given)")
    shared = _checks.check_attention(q, pool, pool, block_table=Tensor((2, 9), dtype="torch.int32", strides=(0, 1)))
    check(shared.block_table_batch_stride == 0, "a table row shared by the batch (stride 0) passes")
    check(_stages.choose(call.features, (9, 0), [s.id for s in _stages.catalogue()]).track == "decode",
          "a paged call runs on the decoding track")
    cases = [
        ("block_table int64", TypeError, "block_table has dtype torch.int64",
         lambda: _checks.check_attention(q, pool, pool, block_table=Tensor((2, 9), dtype="torch.int64"))),
        ("block_table on the CPU", ValueError, "block_table is on cpu",
         lambda: _checks.check_attention(q, pool, pool, block_table=Tensor((2, 9), dtype="torch.int32", device=CPU))),
        ("block_table of 3 rows for batch 2", ValueError, "block_table must have shape (batch, max_pages)",
         lambda: _checks.check_attention(q, pool, pool, block_table=Tensor((3, 9), dtype="torch.int32"))),
        ("block_table 1-D", ValueError, "block_table must have shape (batch, max_pages)",
         lambda: _checks.check_attention(q, pool, pool, block_table=Tensor((18,), dtype="torch.int32"))),
        ("block_table strided along max_pages", ValueError, "block_table must be contiguous along max_pages",
         lambda: _checks.check_attention(q, pool, pool, block_table=Tensor((2, 9), dtype="torch.int32",
                                                                          strides=(18, 2)))),
        ("block_table rows overlapping", ValueError, "block_table's rows overlap",
         lambda: _checks.check_attention(q, pool, pool, block_table=Tensor((2, 9), dtype="torch.int32",
                                                                          strides=(4, 1)))),
        ("pages of 24 rows", ValueError, "multiple of 16 rows, not 24",
         lambda: _checks.check_attention(q, Tensor((40, 24, 2, 64)), Tensor((40, 24, 2, 64)), block_table=table)),
        ("k pool and v pool of different shapes", ValueError, "k and v must have one shape",
         lambda: _checks.check_attention(q, pool, Tensor((41, 16, 2, 64)), block_table=table)),
        ("a pool with no batch match needed, but k's batch checked without a table", ValueError,
         "one batch size", lambda: _checks.check_attention(q, pool, pool)),
    ]
    for what, exception, needle, fn in cases:
        check(raises(exception, needle, fn), "%s -> %s" % (what, exception.__name__))


def test_bad_calls():
    q, k, v = qkv()
    cases = [
        ("q is a list", TypeError, "q must be a torch.Tensor", lambda: _checks.check_attention([1], k, v)),
        ("seqlens_k int64", TypeError, "seqlens_k has dtype torch.int64",
         lambda: _checks.check_attention(q, k, v, seqlens_k=Tensor((2,), dtype="torch.int64"))),
        ("seqlens_k of 3 for batch 2", ValueError, "seqlens_k must have shape (batch,) = (2,)",
         lambda: _checks.check_attention(q, k, v, seqlens_k=Tensor((3,), dtype="torch.int32"))),
        ("seqlens_k on the CPU", ValueError, "seqlens_k is on cpu",
         lambda: _checks.check_attention(q, k, v, seqlens_k=Tensor((2,), dtype="torch.int32", device=CPU))),
        ("seqlens_k strided", ValueError, "seqlens_k must be contiguous",
         lambda: _checks.check_attention(q, k, v, seqlens_k=Tensor((2,), dtype="torch.int32", strides=(2,)))),
        ("k is 3-D", ValueError, "k must be 4-D", lambda: _checks.check_attention(q, Tensor((2, 130, 64)), v)),
        ("fp32 q", TypeError, "q has dtype torch.float32",
         lambda: _checks.check_attention(*qkv(dtype="torch.float32"))),
        ("q fp16, k and v bf16", TypeError, "one dtype",
         lambda: _checks.check_attention(q, *qkv(dtype="torch.bfloat16")[1:])),
        ("CPU tensors", ValueError, "is on cpu", lambda: _checks.check_attention(*qkv(device=CPU))),
        ("q on cuda:0, k and v on cuda:1", ValueError, "one device",
         lambda: _checks.check_attention(q, *qkv(device=CUDA1)[1:])),
        ("k and v of different lengths", ValueError, "k and v must have one shape",
         lambda: _checks.check_attention(q, k, Tensor((2, 131, 8, 64)))),
        ("q batch 2, k batch 3", ValueError, "one batch size",
         lambda: _checks.check_attention(q, *qkv(batch=3)[1:])),
        ("q head_dim 64, k 128", ValueError, "one head_dim",
         lambda: _checks.check_attention(q, *qkv(head_dim=128)[1:])),
        ("seq_q 0", ValueError, "seq_q is 0", lambda: _checks.check_attention(*qkv(seq_q=0))),
        ("seq_kv 0", ValueError, "seq_kv is 0", lambda: _checks.check_attention(*qkv(seq_kv=0))),
        ("batch 0", ValueError, "batch is 0", lambda: _checks.check_attention(*qkv(batch=0))),
        ("head_dim 80", ValueError, "head_dim 80 has no kernel", lambda: _checks.check_attention(*qkv(head_dim=80))),
        ("8 heads, 3 KV heads", ValueError, "does not divide", lambda: _checks.check_attention(*qkv(kv_heads=3))),
        ("head_dim not contiguous", ValueError, "must be contiguous",
         lambda: _checks.check_attention(Tensor((2, 100, 8, 64), strides=(100 * 8 * 128, 8 * 128, 128, 2)), k, v)),
        ("seq stride 1004 (not a multiple of 8)", ValueError, "seq stride is 1004",
         lambda: _checks.check_attention(Tensor((2, 100, 8, 64), strides=(100 * 1004, 1004, 64, 1)), k, v)),
        ("negative scale", ValueError, "softmax_scale must be finite and positive",
         lambda: _checks.check_attention(q, k, v, softmax_scale=-1.0)),
        ("NaN scale", ValueError, "softmax_scale must be finite and positive",
         lambda: _checks.check_attention(q, k, v, softmax_scale=float("nan"))),
        ("fp16 ALiBi slopes", TypeError, "alibi_slopes has dtype torch.float16",
         lambda: _checks.check_attention(q, k, v, alibi_slopes=Tensor((8,)))),
        ("ALiBi slopes of 7 heads", ValueError, "alibi_slopes must have shape",
         lambda: _checks.check_attention(q, k, v, alibi_slopes=Tensor((7,), dtype="torch.float32"))),
        ("ALiBi slopes on the CPU", ValueError, "alibi_slopes is on cpu",
         lambda: _checks.check_attention(q, k, v, alibi_slopes=Tensor((8,), dtype="torch.float32", device=CPU))),
        ("ALiBi slopes with a stride", ValueError, "contiguous along heads",
         lambda: _checks.check_attention(q, k, v, alibi_slopes=Tensor((8,), dtype="torch.float32", strides=(2,)))),
        ("ALiBi [batch, heads] slopes with batch stride 0 (expanded)", ValueError, "one row of 8 slopes per batch",
         lambda: _checks.check_attention(q, k, v, alibi_slopes=Tensor((2, 8), dtype="torch.float32", strides=(0, 1)))),
        ("ALiBi beyond 2^23 keys", ValueError, "at most 2^23",
         lambda: _checks.check_attention(*qkv(batch=1, seq_kv=(1 << 23) + 1),
                                         alibi_slopes=Tensor((8,), dtype="torch.float32"))),
        ("q's data 8 bytes past alignment", ValueError, "16-byte aligned",
         lambda: _checks.check_alignment(Tensor((2, 100, 8, 64), data_ptr=0x10008), k, v)),
    ]
    for what, exception, needle, fn in cases:
        check(raises(exception, needle, fn), "%s -> %s naming it" % (what, exception.__name__))


def test_gradient_checks():
    """What decides whether a call is differentiated, and what such a call may not have."""
    q, k, v = qkv()
    grad_q = Tensor(q.shape, requires_grad=True)
    check(_checks.needs_grad(True, grad_q, k, v, None), "an input that requires grad, grad mode on: differentiated")
    check(not _checks.needs_grad(False, grad_q, k, v, None),
          "under torch.no_grad() (grad mode off): not differentiated")
    check(not _checks.needs_grad(True, q, k, v, None), "no input requires grad: not differentiated")
    check(_checks.needs_grad(True, q, k, v, Tensor((8,), dtype="torch.float32", requires_grad=True)),
          "ALiBi slopes that require grad: differentiated (and then refused)")

    slopes, lengths = Tensor((8,), dtype="torch.float32"), Tensor((2,), dtype="torch.int32")
    cases = [
        ("ALiBi", "alibi_slopes with inputs that require grad: no backward pass computes ALiBi",
         dict(alibi_slopes=slopes, seqlens_k=None, block_table=None)),
        ("per-sequence lengths", "seqlens_k with inputs that require grad: no backward pass computes per-sequence",
         dict(alibi_slopes=None, seqlens_k=lengths, block_table=None)),
        ("flash_attn_with_kvcache's cache_seqlens", "cache_seqlens with inputs that require grad",
         dict(alibi_slopes=None, cache_seqlens=3, block_table=None)),
        ("a paged cache", "block_table with inputs that require grad: no backward pass computes a paged KV cache",
         dict(alibi_slopes=None, seqlens_k=None, block_table=Tensor((2, 9), dtype="torch.int32"))),
    ]
    for what, needle, arguments in cases:
        check(raises(NotImplementedError, needle, lambda: _checks.check_backward_arguments(**arguments)),
              "%s with gradients -> NotImplementedError naming it" % what)
    try:
        _checks.check_backward_arguments(alibi_slopes=None, seqlens_k=None, block_table=None)
        check(True, "a plain call with gradients passes the argument check")
    except Exception as e:
        check(False, "a plain call with gradients passes the argument check (%s)" % e)

    needs = _checks.backward_needs(_checks.check_attention(*qkv(seq_q=128, seq_kv=192)))
    check(needs == {}, "seq_q 128, seq_kv 192 (multiples of 64), not causal, MHA: the backward needs no feature")
    needs = _checks.backward_needs(_checks.check_attention(*qkv(seq_q=100, seq_kv=130, kv_heads=2), causal=True))
    check(set(needs) == {"any_length", "causal", "gqa"}
          and needs["any_length"] == "seq_q 100 and seq_kv 130 are not both multiples of 64"
          and needs["gqa"] == "kv_heads 2 < heads 8",
          "seq 100/130, causal, GQA 8/2: any_length, causal and gqa, each with its reason: %s" % needs)
    needs = _checks.backward_needs(_checks.check_attention(*qkv(seq_q=64, seq_kv=100)))
    check(set(needs) == {"any_length"}, "seq_kv 100 alone not a multiple of 64: any_length")
    needs = _checks.backward_needs(_checks.check_attention(*qkv(seq_q=128, seq_kv=192)), deterministic=True)
    check(set(needs) == {"deterministic"} and needs["deterministic"].startswith("deterministic=True"),
          "deterministic=True: the backward needs the feature deterministic, with its reason: %s" % needs)
    needs = _checks.backward_needs(_checks.check_attention(*qkv(kv_heads=2), causal=True), deterministic=True)
    check(set(needs) == {"any_length", "causal", "gqa", "deterministic"},
          "deterministic=True beside the others: %s" % sorted(needs))

    # The backward's struct, from stand-ins: what the C interface gets, deterministic included.
    call = _checks.check_attention(*qkv(kv_heads=2), causal=True, return_lse=True)
    grads = [Tensor(t.shape, data_ptr=0x40000 + 0x1000 * i) for i, t in enumerate(qkv(kv_heads=2))]
    parts = list(qkv(kv_heads=2)) + [Tensor(call.o_shape), Tensor(call.o_shape)] + grads
    lse = Tensor(call.lse_shape, dtype="torch.float32", data_ptr=0x30000)
    params = _library.backward_params(call, *parts, lse, deterministic=True)
    check(params.deterministic == 1 and params.causal == 1 and (params.heads, params.kv_heads) == (8, 2)
          and params.lse == 0x30000 and params.dk.data == 0x41000 and params.lse_head_stride == 100,
          "backward_params(deterministic=True): FaCapiBackwardParams.deterministic 1, the other fields the call's")
    check(_library.backward_params(call, *parts, lse).deterministic == 0, "backward_params by default: deterministic 0")

    # The gradient autograd hands over: read as it is where the kernels can, else copied.
    b, s, h, d = 2, 77, 12, 64
    check(_checks.fits_kernel_layout(Tensor((b, s, h, d))), "a contiguous gradient is read as it is")
    check(_checks.fits_kernel_layout(Tensor((b, s, h, d), strides=(h * s * d, d, s * d, 1))),
          "a transposed [batch, heads, seq, head_dim] one too")
    check(not _checks.fits_kernel_layout(Tensor((b, s, h, d), strides=(0, 0, 0, 0))),
          "the gradient of o.sum() (one value expanded, strides 0) is copied")
    check(not _checks.fits_kernel_layout(Tensor((b, s, h, d), data_ptr=0x10008)), "a misaligned one is copied")
    check(not _checks.fits_kernel_layout(Tensor((b, s * h * d))), "a tensor that is not 4-D is copied (then refused)")

    call = _checks.check_attention(q, k, v)
    o, lse = Tensor(call.o_shape), Tensor(call.lse_shape, dtype="torch.float32")
    bad = [
        ("d_o of another shape", ValueError, "d_o must have shape (2, 100, 8, 64)",
         lambda: _checks.check_backward_tensors(call, o, Tensor((2, 100, 8, 128)), lse)),
        ("d_o in bf16 for fp16 inputs", TypeError, "d_o has dtype torch.bfloat16",
         lambda: _checks.check_backward_tensors(call, o, Tensor(call.o_shape, dtype="torch.bfloat16"), lse)),
        ("an fp16 LSE", TypeError, "lse has dtype torch.float16",
         lambda: _checks.check_backward_tensors(call, o, o, Tensor(call.lse_shape))),
        ("o on the CPU", ValueError, "o is on cpu",
         lambda: _checks.check_backward_tensors(call, Tensor(call.o_shape, device=CPU), o, lse)),
    ]
    for what, exception, needle, fn in bad:
        check(raises(exception, needle, fn), "the backward's inputs: %s -> %s" % (what, exception.__name__))


def standin_stage(stage_id, backward_features, target="sm_80"):
    return _stages.Stage(id=stage_id, track=stage_id.split("_")[0], target=target,
                         features=frozenset({"any_length", "causal", "lse"}), parent=None,
                         backward_features=None if backward_features is None else frozenset(backward_features))


def test_backward_choice():
    """The backward stage, from a stand-in catalogue: the last backward-track stage whose backward
    declares what the call needs, is in the library with its backward, and runs on the GPU."""
    catalogue = [
        standin_stage("ampere_14_lse", None),
        standin_stage("backward_01_base", []),
        standin_stage("backward_02_wide_kv_block", []),
        standin_stage("backward_03_double_buffer", []),
        standin_stage("backward_04_any_length", ["any_length"]),
        standin_stage("backward_05_causal", ["any_length", "causal"]),
        standin_stage("backward_06_gqa", ["any_length", "causal", "gqa"]),
        standin_stage("backward_07_wgmma", ["any_length", "causal", "gqa"], target="sm_90a"),
        standin_stage("experiments_09_backward", ["any_length", "causal", "gqa"]),
    ]
    every = [s.id for s in catalogue]
    first_three = every[:4]  # the forward stage and backward_01..03: no backward feature

    def pick(needed, capability=(8, 0), built=every, reasons=None):
        return _stages.choose_backward(frozenset(needed), capability, built, stages=catalogue, reasons=reasons).id

    check(pick([]) == "backward_06_gqa", "8.0, no feature needed: backward_06_gqa, the last sm_80 backward stage "
                                         "(not the experiment after it, nor the forward stage)")
    check(pick([], capability=(9, 0)) == "backward_07_wgmma", "9.0: backward_07_wgmma, the sm_90a one after it")
    check(pick(["gqa", "causal"], capability=(8, 6)) == "backward_06_gqa", "8.6, causal and GQA: backward_06_gqa")
    check(pick([], built=first_three) == "backward_03_double_buffer",
          "a library with backward_01..03: backward_03 (the last one), for lengths that are multiples of 64")
    check(pick(["any_length", "causal"], built=every[:6]) == "backward_05_causal",
          "any length and causal, a library up to backward_05: backward_05_causal")
    check(pick(["any_length"], built=every[:5] + ["backward_06_gqa"]) == "backward_06_gqa",
          "the last one that declares what is needed wins")
    check(pick([], built=every[:3] + every[4:6]) == "backward_05_causal",
          "a stage the library lacks (backward_03) is not needed: the last one built is taken")
    check(raises(NotImplementedError, "needs the backward feature any_length (seq_q 100 and seq_kv 130 are not both "
                                      "multiples of 64)", pick, ["any_length"], built=first_three,
                 reasons={"any_length": "seq_q 100 and seq_kv 130 are not both multiples of 64"}),
          "any length with backward_01..03 only: refused, the feature and its reason named")
    check(raises(NotImplementedError, "backward_05_causal: any_length, causal", pick, ["causal", "gqa"],
                 built=every[:6]),
          "GQA without backward_06: refused, with what each backward stage declares")
    check(raises(NotImplementedError, "needs the backward features causal, gqa", pick, ["causal", "gqa"],
                 built=first_three), "several features missing: all named")
    check(raises(NotImplementedError, "compute capability 7.5", pick, [], capability=(7, 5)),
          "7.5: no backward stage runs there, refused")
    check(raises(NotImplementedError, "no backward-track stage", pick, [], built=["ampere_14_lse"]),
          "a library without backward stages: refused")
    check(raises(NotImplementedError, "torch.no_grad()", pick, ["causal"], built=first_three),
          "a refusal says how to go without gradients")

    real = _stages.catalogue()
    by_tools = {t.name: t.backward_features for t in tools_stages.all_stages()}
    check(all((s.backward_features is None) == (by_tools[s.id] is None)
              and (s.backward_features is None or s.backward_features == frozenset(by_tools[s.id])) for s in real),
          "the package reads each stage's backward features as tools/stages.py does")
    backward = [s for s in real if s.backward_features is not None]
    check(bool(backward) and all(s.track == "backward" for s in backward),
          "the backward track's stages, and only they, declare a backward: %s" % [s.id for s in backward])
    got = _stages.choose_backward(frozenset(), (8, 0), [s.id for s in real]).id
    portable = [s for s in backward if s.target == "sm_80"]
    check(got == portable[-1].id,
          "the real catalogue on 8.0, lengths multiples of 64: %s, the last backward stage built for sm_80" % got)
    got = _stages.choose_backward(frozenset(), (9, 0), [s.id for s in real]).id
    check(got == backward[-1].id, "the real catalogue on 9.0: %s, the last backward stage" % got)

    # The deterministic mode: a backward feature like the others, which only a stage that declares it has.
    with_mode = catalogue + [standin_stage("backward_08_deterministic", ["any_length", "causal", "gqa",
                                                                         "deterministic"])]
    every = [s.id for s in with_mode]

    def pick_det(needed, capability=(8, 0), built=every, stages=with_mode):
        return _stages.choose_backward(frozenset(needed), capability, built, stages=stages,
                                       reasons={"deterministic": "deterministic=True: dQ summed in a fixed order"}).id

    check(pick_det(["deterministic"]) == "backward_08_deterministic",
          "deterministic: the stage that declares it (backward_08_deterministic)")
    check(pick_det(["deterministic", "causal", "gqa", "any_length"], capability=(9, 0)) == "backward_08_deterministic",
          "deterministic, causal, GQA, any length on 9.0: the stage that declares them all")
    check(pick_det([]) == "backward_08_deterministic",
          "no feature needed: the last backward stage, which declares deterministic too (run without the mode)")
    check(pick_det(["deterministic"], built=every[:-1] + ["backward_08_deterministic"]) == "backward_08_deterministic",
          "the stage with the mode is taken wherever it is built")
    check(raises(NotImplementedError, "needs the backward feature deterministic (deterministic=True: dQ summed in "
                                      "a fixed order)", pick_det, ["deterministic"], stages=catalogue,
                 built=[s.id for s in catalogue]),
          "deterministic, no stage declares it: refused, the feature and its reason named")
    check(raises(NotImplementedError, "pass deterministic=False", pick_det, ["deterministic", "causal"],
                 stages=catalogue, built=[s.id for s in catalogue]),
          "the refusal says deterministic=False would do")
    check(raises(NotImplementedError, "backward_06_gqa: any_length, causal, gqa", pick_det, ["deterministic"],
                 built=every[:-1]),
          "a library built without the deterministic stage: refused, with what each backward stage declares")

    # pick_backward_stage(deterministic=...), against a stand-in library (capability given: no PyTorch).
    real_ids = tuple(s.id for s in real)
    with_det = [s.id for s in backward if "deterministic" in s.backward_features and s.runs_on((8, 0))]
    saved_load = _library.load
    try:
        _library.load = lambda: Standin(real_ids, [s.id for s in backward])
        if with_det:
            got = flash_stages.pick_backward_stage(deterministic=True, causal=True, gqa=True, any_length=True,
                                                   capability=(8, 0))
            check(got == with_det[-1], "pick_backward_stage(deterministic=True) on 8.0: %s, the last stage that "
                                       "declares it" % got)
        else:
            print("(no stage of the catalogue declares the backward feature deterministic)")
        without = [s.id for s in backward if "deterministic" not in s.backward_features]
        _library.load = lambda: Standin(real_ids, without)
        check(raises(NotImplementedError, "needs the backward feature deterministic",
                     flash_stages.pick_backward_stage, deterministic=True, capability=(8, 0)),
              "pick_backward_stage(deterministic=True), a library without such a stage: refused, naming it")
    finally:
        _library.load = saved_load


class Standin:
    """What the package reads of the library (_library.Library): its stages, and those whose
    backward it has; the launches are recorded, not made."""

    def __init__(self, stage_ids, backward_stage_ids):
        self.stage_ids, self.backward_stage_ids = tuple(stage_ids), tuple(backward_stage_ids)
        self.launches, self.backward_launches = [], []

    def launch(self, stage_id, params, stream):
        self.launches.append(stage_id)

    def launch_backward(self, stage_id, params, stream):
        # A copy of what matters here: the struct lives in the caller's frame.
        self.backward_launches.append(dict(stage=stage_id, deterministic=params.deterministic, causal=params.causal,
                                           heads=params.heads, kv_heads=params.kv_heads, seq_q=params.seq_q))


def test_stage_choice():
    catalogue = _stages.catalogue()
    expected = [s.name for s in tools_stages.all_stages()]
    check([s.id for s in catalogue] == expected, "the package reads the %d stages tools/stages.py reads, in order"
          % len(expected))
    for s, t in zip(catalogue, tools_stages.all_stages()):
        if (s.target, s.features, s.track) != (t.target, frozenset(t.features), t.track):
            check(False, "%s: target and features as tools/stages.py reads them" % s.id)
    built = [s.id for s in catalogue]

    def last_of(track, needed):
        fitting = [s.id for s in catalogue if s.track == track and needed | {"any_length"} <= s.features]
        return fitting[-1]

    all_but_alibi = frozenset({"causal", "gqa", "lse"})
    for needed in (frozenset(), frozenset({"causal"}), frozenset({"gqa"}), all_but_alibi):
        got = _stages.choose(needed, (9, 0), built).id
        check(got == last_of("hopper", needed), "H100/H200 (9.0), %s: %s, the Hopper track's last stage with them"
              % (sorted(needed) or "no feature", got))
    got = _stages.choose(frozenset({"alibi", "causal"}), (9, 0), built).id
    check(got == last_of("ampere", {"alibi", "causal"}), "9.0 with ALiBi: %s (only the Ampere track has it)" % got)
    for cc in ((8, 0), (8, 6), (8, 9), (10, 0), (12, 0)):
        got = _stages.choose(all_but_alibi, cc, built).id
        check(got == last_of("ampere", all_but_alibi), "%d.%d: %s (sm_90a code runs on 9.0 only)" % (cc + (got,)))
    check(not any(_stages.choose(n, (9, 0), built).track in ("experiments", "backward")
                  for n in (frozenset(), all_but_alibi)), "the experiments and the backward track are never picked")
    with_lengths = frozenset({"seqlens_k", "causal", "gqa", "lse"})
    for cc in ((9, 0), (8, 0)):
        got = _stages.choose(with_lengths, cc, built).id
        check(got == last_of("decode", with_lengths), "%d.%d with per-sequence lengths: %s (only the decoding track "
                                                       "has them)" % (cc + (got,)))
    check(raises(ValueError, "no stage in the library", _stages.choose, frozenset({"seqlens_k", "alibi"}), (9, 0),
                 built), "per-sequence lengths with ALiBi: no stage has both, refused")
    without_last = [i for i in built if i != last_of("hopper", frozenset())]
    got = _stages.choose(frozenset(), (9, 0), without_last).id
    check(got != last_of("hopper", frozenset()) and got.startswith("hopper_"),
          "a stage the library lacks is not picked (next best: %s)" % got)
    check(raises(ValueError, "8.0 or newer", _stages.choose, frozenset(), (7, 5), built), "7.5: refused")

    hopper_first = next(s.id for s in catalogue if s.track == "hopper")
    ampere_first = next(s.id for s in catalogue if s.track == "ampere")
    check(_stages.choose(frozenset(), (9, 0), built, requested=hopper_first).id == hopper_first,
          "a named stage runs: %s" % hopper_first)
    short = "_".join(hopper_first.split("_")[:2])
    check(_stages.choose(frozenset(), (9, 0), built, requested=short).id == hopper_first,
          "a stage named by track and number: %s" % short)
    check(raises(ValueError, "does not support causal", _stages.choose, frozenset({"causal"}), (9, 0), built,
                 requested=ampere_first), "a named stage without a feature the call needs: refused")
    check(raises(ValueError, "runs on compute capability 9.0 only", _stages.choose, frozenset(), (8, 0), built,
                 requested=hopper_first), "an sm_90a stage named on 8.0: refused")
    check(raises(ValueError, "no stage 'hopper_99'", _stages.choose, frozenset(), (9, 0), built,
                 requested="hopper_99"), "an unknown stage: refused")
    check(raises(ValueError, "built without stage", _stages.choose, frozenset(), (9, 0), without_last,
                 requested=last_of("hopper", frozenset())), "a stage the library lacks, named: refused")


def test_ops_with_standin_library():
    """With PyTorch installed (optional: the rest of this file needs none), the custom ops and their
    autograd formula on CPU tensors, with the CUDA queries and the library replaced by stand-ins: that
    flash_attn_func(deterministic=True) reaches FaCapiBackwardParams.deterministic through the
    forward op, the autograd context and the backward op, and picks a stage that declares the mode;
    that a library without one refuses it before the forward's launch; and that without gradients it
    is accepted and changes nothing."""
    try:
        import contextlib
        import types

        import torch
    except ImportError:
        print("(no PyTorch: the custom ops' arguments are not checked with a stand-in library)")
        return
    from flash_stages import _ops

    real = _stages.catalogue()
    backward = [s for s in real if s.backward_features is not None and s.runs_on((8, 0))]
    with_det = [s.id for s in backward if "deterministic" in s.backward_features]
    ids = [s.id for s in real]
    patches = [(_checks, "_check_cuda", lambda name, t: None),  # CPU tensors stand in for CUDA ones
               (torch.cuda, "get_device_capability", lambda *a, **k: (8, 0)),
               (torch.cuda, "device", lambda *a, **k: contextlib.nullcontext()),
               (torch.cuda, "current_stream", lambda *a, **k: types.SimpleNamespace(cuda_stream=0))]
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches] + [(_library, "load", _library.load)]

    def use(library):
        _library.load = lambda: library
        _ops._choices.clear()  # keyed by capability and features, not by library
        _ops._backward_choices.clear()
        return library

    def inputs(requires_grad):
        q = torch.randn(2, 100, 4, 64, dtype=torch.float16)
        k, v = torch.randn(2, 100, 2, 64, dtype=torch.float16), torch.randn(2, 100, 2, 64, dtype=torch.float16)
        return [t.requires_grad_(requires_grad) for t in (q, k, v)]

    try:
        for module, name, value in patches:
            setattr(module, name, value)
        if with_det:
            lib = use(Standin(ids, [s.id for s in backward]))
            leaves = inputs(True)
            o = flash_stages.flash_attn_func(*leaves, causal=True, deterministic=True)
            torch.autograd.grad(o, leaves, torch.ones_like(o))
            got = lib.backward_launches[-1] if lib.backward_launches else {}
            check(got.get("deterministic") == 1 and got.get("stage") == with_det[-1] and got.get("causal") == 1
                  and (got.get("heads"), got.get("kv_heads"), got.get("seq_q")) == (4, 2, 100),
                  "flash_attn_func(deterministic=True), differentiated: the backward of %s with deterministic=1 "
                  "(%s)" % (with_det[-1], got))
            o = flash_stages.attention(*leaves, causal=True)
            torch.autograd.grad(o, leaves, torch.ones_like(o))
            check(lib.backward_launches[-1]["deterministic"] == 0, "attention() by default: deterministic=0")
            o = flash_stages.attention(*leaves, causal=True, deterministic=True)
            torch.autograd.grad(o, leaves, torch.ones_like(o))
            check(lib.backward_launches[-1]["deterministic"] == 1, "attention(deterministic=True): deterministic=1")
        else:
            print("(no stage of the catalogue declares the backward feature deterministic)")

        lib = use(Standin(ids, [s.id for s in backward if "deterministic" not in s.backward_features]))
        check(raises(NotImplementedError, "deterministic (deterministic=True: dQ summed in a fixed order)",
                     lambda: flash_stages.flash_attn_func(*inputs(True), causal=True, deterministic=True))
              and not lib.launches,
              "flash_attn_func(deterministic=True) with grad, no backward stage with the mode: NotImplementedError "
              "naming it, before the forward's launch")
        o = flash_stages.flash_attn_func(*inputs(False), causal=True, deterministic=True)
        check(tuple(o.shape) == (2, 100, 4, 64) and len(lib.launches) == 1 and not lib.backward_launches,
              "flash_attn_func(deterministic=True) without grad: accepted, the forward alone, as before")
        with torch.no_grad():
            flash_stages.flash_attn_func(*inputs(True), causal=True, deterministic=True)
        check(len(lib.launches) == 2, "deterministic=True on inputs that require grad, under torch.no_grad(): accepted")
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        _ops._choices.clear()
        _ops._backward_choices.clear()


def test_library(path):
    with tempfile.TemporaryDirectory() as tmp:
        missing = Path(tmp) / "libfa_capi.so"
        check(raises(_library.LibraryError, "cmake --build build --target fa_capi", _library.Library, missing),
              "a missing library: the error says how to build it")
        missing.write_text("not a shared library\n")
        check(raises(_library.LibraryError, "could not load", _library.Library, missing),
              "a file that is no shared library: a clear error")
    check(flash_stages.library_path().name == "libfa_capi.so", "the default library path: %s"
          % flash_stages.library_path())
    if path is None:
        print("(no library given: its loading and launch errors are not checked)")
        return
    lib = _library.Library(path)
    check(list(lib.stage_ids) == [s.id for s in _stages.catalogue()], "the library has every declared stage")
    params = _library.FaCapiParams(dtype=0, causal=0, batch=2, heads=4, kv_heads=3, seq_q=128, seq_kv=128,
                                   head_dim=64, softmax_scale=0.125)
    for name in ("q", "k", "v", "o"):
        setattr(params, name, _library.FaCapiTensor(0x10000, 128 * 4 * 64, 4 * 64, 64))
    check(raises(ValueError, "kv_heads 3 must be at least 1 and divide heads 4", lib.launch, lib.stage_ids[-1],
                 params, 0), "a call the launcher rejects: ValueError with its message")
    params.kv_heads = 4
    params.block_table, params.block_table_batch_stride, params.max_pages, params.page_size = 0x20000, 3, 3, 40
    paged = [s.id for s in _stages.catalogue() if "paged_kv" in s.features]
    check(bool(paged) and raises(ValueError, "page_size 40 must be a positive multiple of 16", lib.launch,
                                 paged[-1], params, 0),
          "a page size that is not a multiple of 16 (40): the launcher's ValueError")
    params.page_size = 64
    check(raises(ValueError, "\"paged_kv\"", lib.launch, lib.stage_ids[0], params, 0),
          "a block table for a stage without paged_kv: the launcher's ValueError")

    declared = [s.id for s in _stages.catalogue() if s.backward_features is not None and s.id in lib.stage_ids]
    check(list(lib.backward_stage_ids) == declared,
          "the library has the backward of every stage that declares one: %s" % (list(lib.backward_stage_ids),))
    if not lib.backward_stage_ids:
        return
    backward = _library.FaCapiBackwardParams(dtype=0, causal=0, batch=2, heads=4, kv_heads=3, seq_q=128,
                                             seq_kv=128, head_dim=64, softmax_scale=0.125, lse=0x30000,
                                             lse_batch_stride=4 * 128, lse_head_stride=128)
    for name in ("q", "k", "v", "o", "d_o", "dq", "dk", "dv"):
        setattr(backward, name, _library.FaCapiTensor(0x10000, 128 * 4 * 64, 4 * 64, 64))
    check(raises(_library.LaunchError, "kv_heads 3 must be at least 1 and divide heads 4", lib.launch_backward,
                 lib.backward_stage_ids[-1], backward, 0),
          "a backward call the launcher rejects: LaunchError with its message, nothing launched")
    check(raises(_library.LaunchError, "has no backward pass", lib.launch_backward, lib.stage_ids[0], backward, 0),
          "the backward of a stage without one: LaunchError")

    # deterministic = 1 reaches the launcher's validation (the field at its offset): a backward that
    # does not declare the mode refuses it; one that does goes on to the next check, here a null LSE,
    # so that nothing is launched either way.
    by_id = {s.id: s for s in _stages.catalogue()}
    with_mode = [i for i in lib.backward_stage_ids if "deterministic" in by_id[i].backward_features]
    without_mode = [i for i in lib.backward_stage_ids if "deterministic" not in by_id[i].backward_features]
    backward.kv_heads, backward.deterministic = 4, 1
    if without_mode:
        check(raises(_library.LaunchError, "does not declare the backward feature \"deterministic\"",
                     lib.launch_backward, without_mode[-1], backward, 0),
              "deterministic=1 for %s, whose backward does not declare it: the launcher's LaunchError"
              % without_mode[-1])
    if with_mode:
        backward.lse = None
        check(raises(_library.LaunchError, "lse is a null pointer", lib.launch_backward, with_mode[-1], backward, 0),
              "deterministic=1 for %s, which declares it: accepted, validation goes on (to the null LSE)"
              % with_mode[-1])
    else:
        print("(the library has no backward stage with the feature deterministic)")


def main():
    test_good_calls()
    test_seqlens_k()
    test_paged_kv()
    test_bad_calls()
    test_gradient_checks()
    test_backward_choice()
    test_stage_choice()
    test_ops_with_standin_library()
    test_library(Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    print("%d check(s) failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
