#!/usr/bin/env python3
"""The Python package on the GPU: flash_stages.attention() against an fp64 reference and PyTorch.

    FLASH_STAGES_LIB=build/libfa_capi.so python3 tests/test_python_gpu.py

Each call's output must be as close to the fp64 reference as PyTorch's own attention in the same
dtype is, within FlashAttention's factor of 2 (common/checker.h's rule, per tensor here), and its
LSE within 1e-3 of the reference's. Covered: every feature (causal with seq_q below, equal to and
above seq_kv, GQA and MQA, the LSE, ALiBi with [heads] and [batch, heads] slopes, a non-default
scale), fp16 and bf16, head_dim 64 and 128, a decoding step (seq_q 1), inputs that are views (q, k
and v sliced from one packed qkv tensor, tensors transposed from [batch, heads, seq, head_dim], a
slice along the sequence), a non-default stream (the launch must wait for work queued before it on
that stream), torch.compile(fullgraph=True) with static and dynamic shapes, every stage of the
library by name (with every feature it declares), flash_attn_func, and the errors for bad input.

Gradients (o.backward() through the backward-track stage that flash_stages.pick_backward_stage
names): dQ, dK and dV against fp64 autograd of plain attention, each within twice the error of the
same gradient computed by PyTorch's autograd in the inputs' dtype (common/checker.h's
check_gradient rule, per tensor), for fp16 and bf16, head_dim 64 and 128, causal or not, seq_q !=
seq_kv, lengths that are not multiples of 64, GQA and MQA; the backward on a non-default stream;
torch.compile of a loss, differentiated; directional derivatives against finite differences of
the fp64 reference (test_directional_derivative says why not torch.autograd.gradcheck); and
flash_attn_func(deterministic=True): three backward runs give bitwise the same dQ, dK and dV, at a
shape with many K/V blocks adding to each query block's dQ. A case that needs a backward feature
that no stage of the library declares is reported skipped, with the reason.

Exit 0 if all hold (some may be skipped), 1 otherwise, 77 (skipped) without PyTorch or a CUDA GPU.
"""

import faulthandler
import math
import sys
from pathlib import Path

# A crash in native code (the library, PyTorch, the driver) prints the Python stack that led to it.
faulthandler.enable()

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

try:
    import torch
except ImportError:
    print("SKIPPED: PyTorch is not installed")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIPPED: no CUDA GPU (torch.cuda.is_available() is False)")
    sys.exit(77)

import torch.nn.functional as F  # noqa: E402

import flash_stages  # noqa: E402
from flash_stages import attention, flash_attn_func  # noqa: E402

failures = []
skipped = []
DEVICE = torch.device("cuda")
CAPABILITY = torch.cuda.get_device_capability()
UNIT_ROUNDOFF = {torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def check(condition, what):
    print("%s  %s" % ("ok  " if condition else "FAIL", what), flush=True)
    if not condition:
        failures.append(what)


def skip(what, why):
    print("SKIP  %s: %s" % (what, why), flush=True)
    skipped.append(what)


def randn(*shape, dtype=torch.float16):
    return torch.randn(*shape, dtype=dtype, device=DEVICE)


def expand_kv(t, heads):
    """[b, s, kv_heads, d] -> [b, s, heads, d]: query head h reads KV head h // (heads / kv_heads)."""
    return t.repeat_interleave(heads // t.shape[2], dim=2)


def scores_bias(b, heads, seq_q, seq_kv, causal, alibi, dtype):
    """The additive bias both references use: ALiBi's -slope * |i + seq_kv - seq_q - j|, and -inf
    above the bottom-right-aligned diagonal when causal."""
    i = torch.arange(seq_q, device=DEVICE)[:, None]
    j = torch.arange(seq_kv, device=DEVICE)[None, :]
    bias = torch.zeros(1, 1, seq_q, seq_kv, dtype=dtype, device=DEVICE)
    if alibi is not None:
        slopes = alibi.to(dtype).reshape(-1 if alibi.dim() == 2 else 1, heads, 1, 1)
        bias = bias - slopes * (i + seq_kv - seq_q - j).abs().to(dtype)
    if causal:
        bias = bias.masked_fill(j > i + seq_kv - seq_q, float("-inf"))
    return bias


def reference(q, k, v, causal=False, scale=None, alibi=None):
    """fp64: o [b, seq_q, heads, d] and lse [b, heads, seq_q] (-inf and zeros where a query sees no key)."""
    b, seq_q, heads, d = q.shape
    seq_kv = k.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    qf, kf, vf = (t.double().transpose(1, 2) for t in (q, expand_kv(k, heads), expand_kv(v, heads)))
    s = qf @ kf.transpose(-1, -2) * scale + scores_bias(b, heads, seq_q, seq_kv, causal, alibi, torch.float64)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.nan_to_num(torch.exp(s - lse[..., None]), nan=0.0)
    return (p @ vf).transpose(1, 2), lse


def baseline(q, k, v, causal=False, scale=None, alibi=None):
    """PyTorch's attention in the inputs' dtype: the error a correct low-precision attention makes."""
    b, seq_q, heads, d = q.shape
    bias = scores_bias(b, heads, seq_q, k.shape[1], causal, alibi, torch.float32).to(q.dtype)
    o = F.scaled_dot_product_attention(q.transpose(1, 2), expand_kv(k, heads).transpose(1, 2),
                                       expand_kv(v, heads).transpose(1, 2), attn_mask=bias.expand(b, heads, -1, -1),
                                       scale=scale)
    return torch.nan_to_num(o.transpose(1, 2), nan=0.0)  # a row that sees no key: NaN there, zeros here


def close(what, out, q, k, v, causal=False, scale=None, alibi=None, lse=None):
    ref, ref_lse = reference(q, k, v, causal, scale, alibi)
    base = baseline(q, k, v, causal, scale, alibi)
    u = 2.0 ** -11 if q.dtype == torch.float16 else 2.0 ** -8
    scale_r = ref.abs().max().item()
    err = (out.double() - ref).abs().max().item()
    base_err = (base.double() - ref).abs().max().item()
    tol = 2 * max(base_err, u * scale_r) + 1e-5 * scale_r
    ok = out.shape == ref.shape and out.dtype == q.dtype and err <= tol
    detail = "error %.2e, PyTorch's %.2e, tolerance %.2e" % (err, base_err, tol)
    if lse is not None:
        finite = torch.isfinite(ref_lse)
        same_inf = bool((torch.isfinite(lse) == finite).all())
        lse_err = (lse.double() - ref_lse)[finite].abs().max().item() if finite.any() else 0.0
        ok = ok and lse.shape == ref_lse.shape and lse.dtype == torch.float32 and same_inf and lse_err <= 1e-3
        detail += "; LSE error %.2e%s" % (lse_err, "" if same_inf else ", -inf rows differ")
    check(ok, "%s: %s" % (what, detail))


def math_attention(q, k, v, causal, scale):
    """softmax(q k^T * scale) v by plain PyTorch operations in the inputs' dtype, differentiable by
    autograd: [b, s, h, d] in and out, causal aligned to the bottom-right (every query must see a key:
    seq_q <= seq_kv when causal)."""
    b, seq_q, heads, _ = q.shape
    qt, kt, vt = (t.transpose(1, 2) for t in (q, expand_kv(k, heads), expand_kv(v, heads)))
    s = qt @ kt.transpose(-1, -2) * scale
    if causal:
        s = s + scores_bias(b, heads, seq_q, k.shape[1], True, None, s.dtype)
    return (torch.softmax(s, dim=-1) @ vt).transpose(1, 2)


def gradients(fn, inputs, d_o, dtype=None):
    """(o, dq, dk, dv): fn on leaf copies of q, k, v (in dtype, if given), differentiated against d_o."""
    leaves = [(t if dtype is None else t.to(dtype)).detach().clone().requires_grad_() for t in inputs]
    o = fn(*leaves)
    return (o,) + torch.autograd.grad(o, leaves, d_o.to(o.dtype))


def close_gradients(what, got, q, k, v, d_o, causal=False):
    """got = (dq, dk, dv) of attention(q, k, v, causal) against d_o, each against fp64 autograd of
    math_attention, within twice the error of the same gradient by autograd in the inputs' dtype."""
    scale = 1.0 / math.sqrt(q.shape[-1])

    def math_fn(q, k, v):
        return math_attention(q, k, v, causal, scale)

    exact = gradients(math_fn, (q, k, v), d_o, torch.float64)[1:]
    low = gradients(math_fn, (q, k, v), d_o)[1:]
    ok, parts = True, []
    for name, g, ref, base in zip(("dq", "dk", "dv"), got, exact, low):
        r = ref.abs().max().item()
        err = (g.double() - ref).abs().max().item()  # NaN if g has one: it fails the comparison below
        base_err = (base.double() - ref).abs().max().item()
        tol = 2 * max(base_err, UNIT_ROUNDOFF[q.dtype] * r) + 1e-5 * r
        ok = ok and g.shape == ref.shape and g.dtype == q.dtype and err <= tol
        parts.append("%s %.2e (PyTorch's %.2e, tolerance %.2e)" % (name, err, base_err, tol))
    check(ok, "%s: %s" % (what, "; ".join(parts)))


def backward_stage(what, causal=False, gqa=False, any_length=False, deterministic=False):
    """The stage that computes the gradients of such a call, or None, reporting `what` skipped, where no
    backward stage of the library declares what it needs."""
    try:
        return flash_stages.pick_backward_stage(causal=causal, gqa=gqa, any_length=any_length,
                                                deterministic=deterministic)
    except NotImplementedError as e:
        skip(what, str(e))
        return None


def raises(exception, needle, fn):
    try:
        fn()
    except exception as e:
        print("        %s: %s" % (type(e).__name__, e))
        return needle in str(e)
    except Exception as e:
        print("        wrong exception %s: %s" % (type(e).__name__, e))
        return False
    print("        no exception")
    return False


def test_features():
    cases = [
        # what, dtype, b, seq_q, seq_kv, heads, kv_heads, d, causal, scale, alibi shape, lse
        ("fp16 d64, seq_q 100 < seq_kv 130", torch.float16, 2, 100, 130, 8, 8, 64, False, None, None, False),
        ("bf16 d128, causal, seq_q 100 < seq_kv 130", torch.bfloat16, 2, 100, 130, 8, 8, 128, True, None, None, False),
        ("fp16 d128, causal, seq_q 130 > seq_kv 100 (30 queries see no key), LSE", torch.float16, 2, 130, 100, 4, 4,
         128, True, None, None, True),
        ("fp16 d64, causal, GQA 8/2, seq 257, LSE", torch.float16, 2, 257, 257, 8, 2, 64, True, None, None, True),
        ("bf16 d128, MQA 8/1, scale 0.3", torch.bfloat16, 2, 200, 333, 8, 1, 128, False, 0.3, None, False),
        ("fp16 d128, a decoding step: seq_q 1, seq_kv 77, causal, GQA 32/8", torch.float16, 3, 1, 77, 32, 8, 128,
         True, None, None, False),
        ("fp16 d64, GPT-2's prefill: batch 1, 9 tokens, 12 heads, causal", torch.float16, 1, 9, 9, 12, 12, 64, True,
         None, None, False),
        ("fp16 d64, ALiBi [heads], causal, LSE", torch.float16, 2, 150, 150, 8, 8, 64, True, None, "heads", True),
        ("bf16 d128, ALiBi [batch, heads], GQA 8/4", torch.bfloat16, 2, 100, 180, 8, 4, 128, False, None, "batch",
         False),
    ]
    for what, dtype, b, seq_q, seq_kv, heads, kv_heads, d, causal, scale, alibi_shape, lse in cases:
        q, k, v = randn(b, seq_q, heads, d, dtype=dtype), randn(b, seq_kv, kv_heads, d, dtype=dtype), \
            randn(b, seq_kv, kv_heads, d, dtype=dtype)
        alibi = None
        if alibi_shape == "heads":
            alibi = torch.tensor([2.0 ** (-8.0 * (h + 1) / heads) for h in range(heads)], device=DEVICE)
        elif alibi_shape == "batch":
            alibi = torch.rand(b, heads, device=DEVICE) * 0.2
        stage = flash_stages.pick_stage(causal=causal, gqa=kv_heads != heads, lse=lse, alibi=alibi is not None)
        result = attention(q, k, v, causal=causal, softmax_scale=scale, alibi_slopes=alibi, return_lse=lse)
        o, lse_out = result if lse else (result, None)
        close("%s [%s]" % (what, stage), o, q, k, v, causal, scale, alibi, lse_out)


def test_views():
    b, s, h, d = 2, 190, 12, 64
    qkv = randn(b, s, 3, h, d)
    q, k, v = qkv.unbind(dim=2)  # strides (s*3*h*d, 3*h*d, d, 1): no copy
    check(not q.is_contiguous(), "q, k, v sliced from a packed [b, s, 3, h, d] tensor are views")
    close("packed qkv views, causal", attention(q, k, v, causal=True), q, k, v, causal=True)

    # transformers' layout: [b, heads, s, d] tensors, transposed (a view) to [b, s, heads, d].
    qt, kt, vt = randn(b, h, s, d), randn(b, 4, 300, d), randn(b, 4, 300, d)
    q, k, v = qt.transpose(1, 2), kt.transpose(1, 2), vt.transpose(1, 2)
    close("[b, h, s, d] tensors transposed, GQA 12/4", attention(q, k, v), q, k, v)

    big = randn(b, 400, h, 128)
    q = big[:, 10:110]  # a slice along the sequence: starts 10 rows in
    k, v = big[:, 50:350], big[:, 100:400]
    close("slices along the sequence of one tensor", attention(q, k, v, causal=True), q, k, v, causal=True)

    wide = randn(b, s, h, 72)[..., :64]  # head stride 72, a multiple of 8: fine
    close("head_dim 64 sliced from rows of 72", attention(wide, wide, wide), wide, wide, wide)


def test_stream():
    b, s, h, d = 2, 256, 8, 128
    q_old, q_new, k, v = randn(b, s, h, d), randn(b, s, h, d), randn(b, s, h, d), randn(b, s, h, d)
    q = q_old.clone()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()  # PyTorch's streams do not wait for the legacy default stream
    with torch.cuda.stream(stream):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time queued ahead of the copy on this stream
        q.copy_(q_new)
        o = attention(q, k, v)  # must run after the copy: on this stream
    stream.synchronize()
    close("on a non-default stream, ordered after the work queued before it there", o, q_new, k, v)


def test_compile():
    def block(q, k, v):
        o, lse = attention(q, k, v, causal=True, return_lse=True)
        return o * 2 + 1, lse.exp()

    compiled = torch.compile(block, fullgraph=True)
    q, k, v = randn(2, 200, 8, 64), randn(2, 300, 8, 64), randn(2, 300, 8, 64)
    eager_o, eager_l = block(q, k, v)
    comp_o, comp_l = compiled(q, k, v)
    # allclose, not equal: the compiled o * 2 + 1 rounds to fp16 once, eager twice.
    check(torch.allclose(eager_o, comp_o, rtol=1e-3, atol=1e-3) and torch.allclose(eager_l, comp_l),
          "torch.compile(fullgraph=True): no graph break, the same result as eager")

    dynamic = torch.compile(lambda q, k, v: attention(q, k, v, causal=True) + 0, fullgraph=True, dynamic=True)
    for seq in (100, 173):
        q, k, v = randn(1, seq, 4, 128), randn(1, seq, 4, 128), randn(1, seq, 4, 128)
        close("torch.compile(dynamic=True), seq %d" % seq, dynamic(q, k, v), q, k, v, causal=True)

    # Dynamo wraps what the fake implementation raises in an exception of its own: the message is ours.
    bad = torch.compile(lambda q: attention(q, q, q), fullgraph=True)
    check(raises(Exception, "head_dim 96 has no kernel", lambda: bad(randn(1, 8, 2, 96))),
          "under torch.compile, bad input fails at compile time with the same message (the fake implementation "
          "checks it)")


def test_every_stage():
    """Every stage of the library by name, once, with every feature it declares, on a shape every
    stage takes (384 rows: a multiple of each tile, for the stages without any_length)."""
    b, s, h, d = 2, 384, 8, 128
    for stage in flash_stages.stages():
        if not stage.runs_on(CAPABILITY):
            check(raises(ValueError, "runs on compute capability", lambda: attention(
                randn(b, s, h, d), randn(b, s, h, d), randn(b, s, h, d), stage=stage.id)),
                "%s (%s) is refused on this GPU" % (stage.id, stage.target))
            continue
        f = stage.features
        causal, lse = "causal" in f, "lse" in f
        kv_heads = 2 if "gqa" in f else h
        alibi = torch.rand(h, device=DEVICE) * 0.1 if "alibi" in f else None
        q, k, v = randn(b, s, h, d), randn(b, s, kv_heads, d), randn(b, s, kv_heads, d)
        result = attention(q, k, v, causal=causal, alibi_slopes=alibi, return_lse=lse, stage=stage.id)
        o, lse_out = result if lse else (result, None)
        close("stage %s (%s)" % (stage.id, ", ".join(sorted(f)) or "no features"), o, q, k, v, causal, None, alibi,
              lse_out)


def test_flash_attn_func():
    q, k, v = randn(2, 120, 8, 128), randn(2, 150, 2, 128), randn(2, 150, 2, 128)
    alibi = torch.rand(8, device=DEVICE) * 0.1
    check(torch.equal(flash_attn_func(q, k, v, causal=True), attention(q, k, v, causal=True)),
          "flash_attn_func(causal=True) is attention(causal=True)")
    check(torch.equal(flash_attn_func(q, k, v, causal=True, deterministic=True), attention(q, k, v, causal=True)),
          "flash_attn_func(deterministic=True) without gradients: accepted, the same output (the forward is "
          "deterministic anyway)")
    out = flash_attn_func(q, k, v, 0.0, 0.2, False, (-1, -1), 0.0, alibi, True, False)  # FA2's positional order
    close("flash_attn_func with FlashAttention-2's positional arguments (scale 0.2, ALiBi)", out, q, k, v, False, 0.2,
          alibi)


def test_kvcache():
    """flash_attn_with_kvcache: new tokens written into the cache at each row's length, then attention over
    each row's own keys (a row of length 0 included), against the fp64 reference row by row."""
    from flash_stages import flash_attn_with_kvcache

    if not any("seqlens_k" in s.features for s in flash_stages.stages()):
        skip("flash_attn_with_kvcache", "no stage of the library declares seqlens_k (the decoding track)")
        return
    batch, cache_len = 3, 300
    for dtype, d, heads, kv_heads, seq_q, causal in ((torch.float16, 128, 8, 2, 1, False),
                                                     (torch.bfloat16, 64, 8, 8, 4, True),
                                                     (torch.float16, 128, 32, 1, 8, True)):
        k_cache, v_cache = randn(batch, cache_len, kv_heads, d, dtype=dtype), randn(batch, cache_len, kv_heads, d, dtype=dtype)
        k_new, v_new = randn(batch, seq_q, kv_heads, d, dtype=dtype), randn(batch, seq_q, kv_heads, d, dtype=dtype)
        q = randn(batch, seq_q, heads, d, dtype=dtype)
        lengths = torch.tensor([0, 17, 250], dtype=torch.int32, device=DEVICE)
        before = k_cache.clone()
        o, lse = flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lengths, causal=causal,
                                         return_softmax_lse=True)
        what = "%s d%d, %d/%d heads, seq_q %d%s" % (str(dtype)[6:], d, heads, kv_heads, seq_q, ", causal" if causal else "")
        written = all(torch.equal(k_cache[b, n:n + seq_q], k_new[b]) and torch.equal(v_cache[b, n:n + seq_q], v_new[b])
                      for b, n in enumerate(lengths.tolist()))
        kept = torch.equal(k_cache[1, :17], before[1, :17]) and torch.equal(k_cache[2, 250 + seq_q:], before[2, 250 + seq_q:])
        check(written and kept, "flash_attn_with_kvcache, %s: the new tokens written at cache_seqlens, the rest of "
                                "the cache untouched" % what)
        for b, n in enumerate(lengths.tolist()):
            keys = n + seq_q
            close("flash_attn_with_kvcache, %s, batch row %d: %d keys" % (what, b, keys), o[b:b + 1], q[b:b + 1],
                  k_cache[b:b + 1, :keys], v_cache[b:b + 1, :keys], causal, None, None, lse[b:b + 1])
    q = randn(2, 1, 8, 64)
    k_cache, v_cache = randn(2, 256, 8, 64), randn(2, 256, 8, 64)
    close("flash_attn_with_kvcache, no new tokens, cache_seqlens an int (100)",
          flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=100), q, k_cache[:, :100], v_cache[:, :100])
    new = randn(2, 1, 8, 64)
    cases = [
        ("new tokens past the cache's end", ValueError, "must fit the cache",
         lambda: flash_attn_with_kvcache(q, k_cache, v_cache, new, new, cache_seqlens=256)),
        ("cache_seqlens int64", TypeError, "torch.int32",
         lambda: flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=torch.ones(2, dtype=torch.int64, device=DEVICE))),
        ("k without v", ValueError, "k and v go together", lambda: flash_attn_with_kvcache(q, k_cache, v_cache, new)),
        ("rotary embeddings", NotImplementedError, "rotary_cos",
         lambda: flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=1, rotary_cos=q, rotary_sin=q)),
    ]
    for what, exception, needle, fn in cases:
        check(raises(exception, needle, fn), "flash_attn_with_kvcache, %s -> %s" % (what, exception.__name__))

    # A paged cache: pools of pages of 16, 64 and 256 rows, each row's pages a random draw from the pool
    # (so a wrong page reads another row's keys), two spare pages no row uses; lengths 0, 17 and 570
    # (not multiples of any page size) before 4 new tokens, written into their pages by the call.
    batch, heads, kv_heads, d, seq_q, longest = 3, 8, 2, 128, 4, 600
    for page_size, dtype in ((16, torch.float16), (48, torch.float16), (64, torch.bfloat16), (256, torch.float16)):
        max_pages = -(-longest // page_size)
        num_pages = batch * max_pages + 2
        k_pool, v_pool = randn(num_pages, page_size, kv_heads, d, dtype=dtype), randn(num_pages, page_size, kv_heads, d, dtype=dtype)
        table = torch.randperm(num_pages, device=DEVICE)[:batch * max_pages].view(batch, max_pages).to(torch.int32)
        k_new, v_new = randn(batch, seq_q, kv_heads, d, dtype=dtype), randn(batch, seq_q, kv_heads, d, dtype=dtype)
        q = randn(batch, seq_q, heads, d, dtype=dtype)
        lengths = torch.tensor([0, 17, 570], dtype=torch.int32, device=DEVICE)
        o, lse = flash_attn_with_kvcache(q, k_pool, v_pool, k_new, v_new, cache_seqlens=lengths, block_table=table,
                                         causal=True, return_softmax_lse=True)
        for b, n in enumerate(lengths.tolist()):
            keys = n + seq_q
            pages = table[b].long()
            k_row = k_pool[pages].reshape(max_pages * page_size, kv_heads, d)[:keys]  # the row's keys, gathered
            v_row = v_pool[pages].reshape(max_pages * page_size, kv_heads, d)[:keys]
            what = "flash_attn_with_kvcache, paged (pages of %d rows, %s), batch row %d: %d keys" % (
                page_size, str(dtype)[6:], b, keys)
            check(torch.equal(k_row[n:], k_new[b]) and torch.equal(v_row[n:], v_new[b]),
                  what + ": the new tokens written into their pages")
            close(what, o[b:b + 1], q[b:b + 1], k_row[None], v_row[None], True, None, None, lse[b:b + 1])
    q, pool = randn(2, 1, 8, 64), randn(10, 16, 8, 64)
    cases = [
        ("a page index outside the pool", ValueError, "must index the pool",
         lambda: flash_attn_with_kvcache(q, pool, pool, cache_seqlens=20,
                                         block_table=torch.tensor([[0, 1], [2, 10]], dtype=torch.int32, device=DEVICE))),
        ("pages of 40 rows (not a multiple of 16)", ValueError, "multiple of 16 rows",
         lambda: flash_attn_with_kvcache(q, randn(4, 40, 8, 64), randn(4, 40, 8, 64), cache_seqlens=20,
                                         block_table=torch.tensor([[0], [1]], dtype=torch.int32, device=DEVICE))),
    ]
    for what, exception, needle, fn in cases:
        check(raises(exception, needle, fn), "flash_attn_with_kvcache, %s -> %s" % (what, exception.__name__))


def test_gradients():
    cases = [
        # what, dtype, b, seq_q, seq_kv, heads, kv_heads, d, causal
        ("fp16 d64, seq 128", torch.float16, 2, 128, 128, 8, 8, 64, False),
        ("bf16 d128, seq_q 128 < seq_kv 256", torch.bfloat16, 2, 128, 256, 4, 4, 128, False),
        ("fp16 d128, seq_q 192 > seq_kv 64", torch.float16, 2, 192, 64, 4, 4, 128, False),
        ("bf16 d64, seq_q 100, seq_kv 130 (not multiples of 64)", torch.bfloat16, 2, 100, 130, 4, 4, 64, False),
        ("fp16 d128, causal, seq 192", torch.float16, 2, 192, 192, 4, 4, 128, True),
        ("bf16 d64, causal, seq_q 64 < seq_kv 192", torch.bfloat16, 2, 64, 192, 4, 4, 64, True),
        ("fp16 d64, causal, seq_q 100 < seq_kv 257", torch.float16, 2, 100, 257, 4, 4, 64, True),
        ("fp16 d128, GQA 8/2, seq 128", torch.float16, 2, 128, 128, 8, 2, 128, False),
        ("bf16 d128, causal, MQA 8/1, seq_q 77 < seq_kv 300", torch.bfloat16, 2, 77, 300, 8, 1, 128, True),
        ("fp16 d64, causal, GQA 12/4, seq 200", torch.float16, 1, 200, 200, 12, 4, 64, True),
    ]
    for what, dtype, b, seq_q, seq_kv, heads, kv_heads, d, causal in cases:
        what = "gradients, " + what
        stage = backward_stage(what, causal=causal, gqa=kv_heads != heads, any_length=bool(seq_q % 64 or seq_kv % 64))
        if stage is None:
            continue
        q, k, v = randn(b, seq_q, heads, d, dtype=dtype), randn(b, seq_kv, kv_heads, d, dtype=dtype), \
            randn(b, seq_kv, kv_heads, d, dtype=dtype)
        d_o = randn(b, seq_q, heads, d, dtype=dtype)
        o, *grads = gradients(lambda q, k, v: attention(q, k, v, causal=causal), (q, k, v), d_o)
        close("%s: the forward" % what, o, q, k, v, causal)
        close_gradients("%s [%s]" % (what, stage), grads, q, k, v, d_o, causal)

    # transformers' layout: views of [b, heads, s, d] tensors, and the gradient of a sum (one value
    # expanded: every stride 0), which the backward copies into a layout the kernels read.
    what = "gradients of o.sum() for transposed [b, h, s, d] inputs"
    stage = backward_stage(what)
    if stage is not None:
        qt, kt, vt = randn(2, 8, 128, 64), randn(2, 8, 192, 64), randn(2, 8, 192, 64)
        inputs = (qt.transpose(1, 2), kt.transpose(1, 2), vt.transpose(1, 2))
        leaves = [t.detach().clone().requires_grad_() for t in inputs]
        attention(*leaves).sum().backward()
        close_gradients("%s [%s]" % (what, stage), [t.grad for t in leaves], *inputs,
                        torch.ones(2, 128, 8, 64, dtype=torch.float16, device=DEVICE))

    what = "with gradients, the LSE returned carries none (as in FlashAttention): o requires grad, lse does not"
    if backward_stage(what) is not None:
        q = randn(2, 128, 4, 64).requires_grad_()
        o, lse = attention(q, q, q, return_lse=True)
        check(o.requires_grad and not lse.requires_grad, what)


def test_backward_stream():
    what = "the backward on a non-default stream, ordered after the work queued before it there"
    stage = backward_stage(what)
    if stage is None:
        return
    b, s, h, d = 2, 256, 8, 128
    q, k, v, d_o_new = randn(b, s, h, d), randn(b, s, h, d), randn(b, s, h, d), randn(b, s, h, d)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    d_o = torch.zeros_like(d_o_new)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        o = attention(*leaves)  # autograd runs its backward on this stream
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time queued ahead of the copy on this stream
        d_o.copy_(d_o_new)
        grads = torch.autograd.grad(o, leaves, d_o)  # must run after the copy: on this stream
    stream.synchronize()
    close_gradients("%s [%s]" % (what, stage), grads, q, k, v, d_o_new)


def test_compile_backward():
    def loss(q, k, v, w, causal=False):
        return (attention(q, k, v, causal=causal) * w).sum()  # dL/do = w

    what = "torch.compile(fullgraph=True) of a loss through attention, differentiated"
    stage = backward_stage(what)
    if stage is not None:
        compiled = torch.compile(loss, fullgraph=True)
        q, k, v, w = randn(2, 128, 8, 64), randn(2, 192, 8, 64), randn(2, 192, 8, 64), randn(2, 128, 8, 64)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        close_gradients("%s [%s]" % (what, stage), torch.autograd.grad(compiled(*leaves, w), leaves), q, k, v, w)

    what = "torch.compile(fullgraph=True, dynamic=True) of a causal loss, differentiated, seq 100 and 173"
    stage = backward_stage(what, causal=True, any_length=True)
    if stage is not None:
        compiled = torch.compile(lambda q, k, v, w: loss(q, k, v, w, causal=True), fullgraph=True, dynamic=True)
        for seq in (100, 173):
            q, k, v, w = randn(1, seq, 4, 128), randn(1, seq, 4, 128), randn(1, seq, 4, 128), randn(1, seq, 4, 128)
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            close_gradients("%s: seq %d [%s]" % (what, seq, stage), torch.autograd.grad(compiled(*leaves, w), leaves),
                            q, k, v, w, causal=True)


def test_directional_derivative():
    """gradcheck's question, asked in a way 16-bit kernels can answer: is the gradient the derivative
    of the function the forward computes, in every direction? torch.autograd.gradcheck itself
    compares the gradient with finite differences of the same function at a step of about 1e-6 in
    fp64; the kernels take fp16 and bf16 only, where such a step is below the inputs' resolution and
    the forward's rounding (about 1e-3 of the output) drowns any difference. So here, at tiny shapes:
    the directional derivative of L = sum(attention(q, k, v) * w) along 8 random directions, from
    our gradients, against a central finite difference of the fp64 reference (which matches fp64
    autograd to about 1e-9 relative, checked too), within twice the largest error of the same
    directional derivatives from PyTorch's gradients in the inputs' dtype."""
    step = 1e-4  # fp64: truncation ~ step^2, rounding ~ 1e-16 / step, both far below 16-bit errors
    for what, dtype, seq_q, seq_kv, heads, kv_heads, d, causal in (
            ("fp16 d64, seq 64", torch.float16, 64, 64, 2, 2, 64, False),
            ("bf16 d128, causal, GQA 4/2, seq_q 40 < seq_kv 72", torch.bfloat16, 40, 72, 4, 2, 128, True)):
        what = "directional derivatives vs finite differences, " + what
        stage = backward_stage(what, causal=causal, gqa=kv_heads != heads, any_length=bool(seq_q % 64 or seq_kv % 64))
        if stage is None:
            continue
        scale = 1.0 / math.sqrt(d)
        q, k, v = randn(1, seq_q, heads, d, dtype=dtype), randn(1, seq_kv, kv_heads, d, dtype=dtype), \
            randn(1, seq_kv, kv_heads, d, dtype=dtype)
        w = randn(1, seq_q, heads, d, dtype=dtype)

        def math_fn(q, k, v):
            return math_attention(q, k, v, causal, scale)

        ours = gradients(lambda q, k, v: attention(q, k, v, causal=causal), (q, k, v), w)[1:]
        low = gradients(math_fn, (q, k, v), w)[1:]
        exact = gradients(math_fn, (q, k, v), w, torch.float64)[1:]
        x, w64 = [t.double() for t in (q, k, v)], w.double()

        def loss64(shift):
            return (math_fn(*(t + step * s for t, s in zip(x, shift))) * w64).sum().item()

        generator = torch.Generator(device=DEVICE).manual_seed(1)
        errors = {"ours": [], "low": [], "exact": []}
        largest = 0.0
        for _ in range(8):
            direction = [torch.randn(t.shape, dtype=torch.float64, device=DEVICE, generator=generator) for t in x]
            finite = (loss64(direction) - loss64([-s for s in direction])) / (2 * step)
            for name, grads in (("ours", ours), ("low", low), ("exact", exact)):
                along = sum((g.double() * s).sum().item() for g, s in zip(grads, direction))
                errors[name].append(abs(along - finite))
            largest = max(largest, abs(finite))
        check(all(e <= 1e-6 * largest for e in errors["exact"]),
              "%s: the finite differences match fp64 autograd (error %.1e of %.3g)" % (what, max(errors["exact"]),
                                                                                       largest))
        tol = 2 * max(max(errors["low"]), UNIT_ROUNDOFF[dtype] * largest) + 1e-5 * largest
        check(all(e <= tol for e in errors["ours"]),  # all(), not max(): a NaN fails
              "%s [%s]: error %.2e (PyTorch's %.2e, tolerance %.2e; largest derivative %.3g)"
              % (what, stage, max(errors["ours"]), max(errors["low"]), tol, largest))


def test_deterministic_gradients():
    """flash_attn_func(deterministic=True): a backward stage with the deterministic mode, whose dQ is
    summed over the K/V blocks in a fixed order, so that three backward runs on the same inputs give
    bitwise the same q.grad, k.grad and v.grad (torch.equal), and gradients as accurate as the default
    mode's (close_gradients). Seq 1000 with GQA 4/2 (as tests/test_gpu_backward.cpp's "backward
    deterministic" cases): 8 K/V blocks of 128 keys, the last one partial, add to every query block's
    dQ rows (without causal), where the default mode's atomics race."""
    b, seq, heads, kv_heads = 2, 1000, 4, 2
    for dtype in (torch.float16, torch.bfloat16):
        for d in (64, 128):
            for causal in (False, True):
                what = "deterministic=True, %s d%d, %sGQA %d/%d, seq %d" % (
                    "fp16" if dtype == torch.float16 else "bf16", d, "causal, " if causal else "", heads, kv_heads,
                    seq)
                stage = backward_stage(what, causal=causal, gqa=True, any_length=True, deterministic=True)
                if stage is None:
                    continue
                q, k, v = randn(b, seq, heads, d, dtype=dtype), randn(b, seq, kv_heads, d, dtype=dtype), \
                    randn(b, seq, kv_heads, d, dtype=dtype)
                d_o = randn(b, seq, heads, d, dtype=dtype)
                runs = []
                for _ in range(3):
                    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                    flash_attn_func(*leaves, causal=causal, deterministic=True).backward(d_o)
                    runs.append([t.grad for t in leaves])
                same = [all(torch.equal(runs[0][i], run[i]) for run in runs[1:]) for i in range(3)]  # dq, dk, dv
                check(all(same), "%s [%s]: three backward runs bitwise equal (dq %s, dk %s, dv %s)"
                      % ((what, stage) + tuple("same" if x else "DIFFERENT" for x in same)))
                close_gradients("%s [%s]: the gradients" % (what, stage), runs[0], q, k, v, d_o, causal)


def test_errors():
    q = randn(2, 64, 4, 64)
    # A stage of the library without causal and without any length (ampere_01_base in the whole tree).
    capability = torch.cuda.get_device_capability()
    plain = [s.id for s in flash_stages.stages()
             if not {"causal", "any_length"} & set(s.features) and s.runs_on(capability)]
    if plain:
        check(raises(ValueError, "does not support causal", lambda: attention(q, q, q, causal=True, stage=plain[0])),
              "a stage without causal, named (%s) -> ValueError" % plain[0])
        check(raises(ValueError, "not a multiple of the block size",
                     lambda: attention(randn(1, 100, 4, 64), randn(1, 128, 4, 64), randn(1, 128, 4, 64),
                                       stage=plain[0])),
              "a length a stage without any_length does not take (%s) -> ValueError" % plain[0])
    else:
        skip("a stage without causal or any_length, named", "the library has no such stage")
    cases = [
        ("CPU tensors", ValueError, "is on cpu", lambda: attention(q.cpu(), q.cpu(), q.cpu())),
        ("fp32 tensors", TypeError, "dtype torch.float32", lambda: attention(q.float(), q.float(), q.float())),
        ("q fp16, k bf16", TypeError, "one dtype", lambda: attention(q, q.bfloat16(), q.bfloat16())),
        ("a list for k", TypeError, "k must be a torch.Tensor", lambda: attention(q, [1], q)),
        ("seq 0", ValueError, "seq_q is 0", lambda: attention(q[:, :0], q, q)),
        ("head_dim 96", ValueError, "head_dim 96 has no kernel", lambda: attention(*(randn(1, 8, 2, 96),) * 3)),
        ("k with 3 heads for q's 4", ValueError, "does not divide", lambda: attention(q, q[:, :, :3], q[:, :, :3])),
        ("head_dim not contiguous", ValueError, "must be contiguous",
         lambda: attention(randn(2, 64, 4, 128)[..., ::2], q, q)),
        ("q not 16-byte aligned", ValueError, "16-byte aligned",
         lambda: attention(torch.empty(2 * 64 * 4 * 64 + 4, dtype=torch.float16, device=DEVICE)[4:].view(2, 64, 4, 64),
                           q, q)),
        ("a negative scale", ValueError, "finite and positive", lambda: attention(q, q, q, softmax_scale=-0.1)),
        ("fp16 ALiBi slopes", TypeError, "torch.float32",
         lambda: attention(q, q, q, alibi_slopes=torch.ones(4, dtype=torch.float16, device=DEVICE))),
        ("ALiBi with inputs that require grad", NotImplementedError, "alibi_slopes with inputs that require grad",
         lambda: attention(q.clone().requires_grad_(), q, q, alibi_slopes=torch.ones(4, device=DEVICE))),
        ("head_dim 96 with inputs that require grad", ValueError, "head_dim 96 has no kernel",
         lambda: attention(*(randn(1, 8, 2, 96).requires_grad_(),) * 3)),
        ("flash_attn_with_kvcache with cache_seqlens, q requiring grad", NotImplementedError,
         "cache_seqlens with inputs that require grad",
         lambda: flash_stages.flash_attn_with_kvcache(q.clone().requires_grad_(), q, q, cache_seqlens=10)),
        ("an unknown stage", ValueError, "no stage 'nope'", lambda: attention(q, q, q, stage="nope")),
        ("flash_attn_func with dropout", NotImplementedError, "no dropout", lambda: flash_attn_func(q, q, q, 0.1)),
        ("flash_attn_func with a window", NotImplementedError, "sliding-window",
         lambda: flash_attn_func(q, q, q, window_size=(64, 0))),
        ("flash_attn_func with return_attn_probs", NotImplementedError, "return_lse",
         lambda: flash_attn_func(q, q, q, return_attn_probs=True)),
    ]
    try:
        flash_stages.pick_backward_stage(causal=True, gqa=True, any_length=True)
    except NotImplementedError:  # a library without every backward feature: such a call is refused
        cases.append(("causal GQA of any length with inputs that require grad, which no backward stage of the "
                      "library computes", NotImplementedError, "needs the backward feature",
                      lambda: attention(randn(1, 100, 4, 64).requires_grad_(), randn(1, 100, 2, 64),
                                        randn(1, 100, 2, 64), causal=True)))
    try:
        flash_stages.pick_backward_stage(deterministic=True)
    except NotImplementedError:  # a library without the deterministic mode: deterministic=True with grad is refused
        cases.append(("flash_attn_func(deterministic=True) with inputs that require grad, no backward stage with "
                      "the mode", NotImplementedError, "deterministic (deterministic=True",
                      lambda: flash_attn_func(q.clone().requires_grad_(), q, q, deterministic=True)))
    for what, exception, needle, fn in cases:
        check(raises(exception, needle, fn), "%s -> %s" % (what, exception.__name__))
    with torch.no_grad():
        o = attention(q.clone().requires_grad_(), q, q, alibi_slopes=torch.ones(4, device=DEVICE))
    check(o.shape == q.shape and not o.requires_grad,
          "inputs that require grad, with ALiBi, under torch.no_grad(): accepted, as without gradients")


def main():
    print("%s, compute capability %d.%d; library %s" % (torch.cuda.get_device_name(), CAPABILITY[0], CAPABILITY[1],
                                                       flash_stages.library_path()))
    print("stage picked: plain %s; causal+GQA+LSE %s; ALiBi %s" % (
        flash_stages.pick_stage(), flash_stages.pick_stage(causal=True, gqa=True, lse=True),
        flash_stages.pick_stage(alibi=True)))
    print("backward stages in the library: %s" % ", ".join(
        "%s (%s)" % (s.id, ", ".join(sorted(s.backward_features)) or "no feature")
        for s in flash_stages.stages() if s.backward_features is not None))
    torch.manual_seed(0)
    for test in (test_features, test_views, test_stream, test_compile, test_every_stage, test_flash_attn_func,
                 test_kvcache, test_gradients, test_backward_stream, test_compile_backward, test_directional_derivative,
                 test_deterministic_gradients, test_errors):
        print("--- %s" % test.__name__, flush=True)
        try:
            test()
        except Exception as e:  # one broken part must not hide the others
            import traceback

            traceback.print_exc()
            check(False, "%s raised %s: %s" % (test.__name__, type(e).__name__, e))
    if skipped:
        print("%d skipped (a backward feature no stage of the library declares): %s"
              % (len(skipped), "; ".join(skipped)))
    print("%d check(s) failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
