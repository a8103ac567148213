"""attention() and flash_attn_func() on PyTorch tensors, through PyTorch custom ops.

The ops, flash_stages::attention (the forward) and flash_stages::attention_backward (the gradients
of q, k and v), are registered with torch.library.custom_op: PyTorch's dispatcher calls them like
any built-in operator, and torch.compile sees each as one opaque node of the graph (no graph break),
learning its output shapes from the fake implementation registered beside it. They mutate none of
their inputs and allocate their outputs themselves, so they need no aliasing annotations.

The forward's autograd formula (torch.library.register_autograd) saves q, k, v, the output and the
LSE, and its backward is the second op: a backward-track stage's backward pass
(common/backward.h), which recomputes the attention probabilities from the LSE.
"""

from typing import Optional

import torch

from . import _checks, _library, _stages

# (compute capability, features, requested stage) -> Stage. Choosing reads the declarations once;
# after that a call costs a dictionary lookup.
_choices: dict = {}


def _stage_for(call: _checks.Call, device: torch.device, requested: Optional[str]) -> _stages.Stage:
    capability = torch.cuda.get_device_capability(device)
    key = (capability, call.features, requested)
    stage = _choices.get(key)
    if stage is None:
        stage = _stages.choose(call.features, capability, _library.load().stage_ids, requested)
        _choices[key] = stage
    return stage


# (compute capability, backward features needed) -> Stage, as _choices is for the forward.
_backward_choices: dict = {}


def _backward_stage_for(call: _checks.Call, device: torch.device, deterministic: bool = False) -> _stages.Stage:
    capability = torch.cuda.get_device_capability(device)
    needs = _checks.backward_needs(call, deterministic)
    key = (capability, frozenset(needs))
    stage = _backward_choices.get(key)
    if stage is None:
        stage = _stages.choose_backward(frozenset(needs), capability, _library.load().backward_stage_ids,
                                        reasons=needs)
        _backward_choices[key] = stage
    return stage


_view = _library.tensor_view  # a tensor as FaCapiTensor: its data pointer and the kernels' strides


def _kernel_layout(t: torch.Tensor) -> torch.Tensor:
    """t itself where the kernels read it as it is, else a contiguous copy (a fresh allocation, so
    16-byte aligned too)."""
    return t if _checks.fits_kernel_layout(t) else t.clone(memory_format=torch.contiguous_format)


# No device_types: the op is registered for every device, so that a CPU tensor reaches the checks
# below and gets their message, rather than the dispatcher's "no kernel for CPU".
@torch.library.custom_op("flash_stages::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, alibi_slopes: Optional[torch.Tensor],
                  causal: bool, softmax_scale: Optional[float], return_lse: bool,
                  stage: Optional[str], seqlens_k: Optional[torch.Tensor] = None,
                  block_table: Optional[torch.Tensor] = None,
                  needs_grad: bool = False, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    call = _checks.check_attention(q, k, v, causal=causal, softmax_scale=softmax_scale, alibi_slopes=alibi_slopes,
                                   return_lse=return_lse, seqlens_k=seqlens_k, block_table=block_table)
    _checks.check_alignment(q, k, v)
    if needs_grad:
        # The call will be differentiated: what no backward stage takes is refused now, before the
        # forward's launch, rather than inside loss.backward() later.
        _checks.check_backward_arguments(alibi_slopes=alibi_slopes, seqlens_k=seqlens_k, block_table=block_table)
        _backward_stage_for(call, q.device, deterministic)
    chosen = _stage_for(call, q.device, stage)
    # Allocated here, so always contiguous: [batch, seq_q, heads, head_dim] and [batch, heads, seq_q].
    o = torch.empty(call.o_shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(call.lse_shape if return_lse else (0,), dtype=torch.float32, device=q.device)
    params = _library.FaCapiParams(
        q=_view(q), k=_view(k), v=_view(v), o=_view(o),
        dtype=_checks.DTYPE_CODES[call.dtype], causal=int(call.causal),
        batch=call.batch, heads=call.heads, kv_heads=call.kv_heads, seq_q=call.seq_q, seq_kv=call.seq_kv,
        head_dim=call.head_dim, softmax_scale=call.softmax_scale,
        lse=lse.data_ptr() if return_lse else None, lse_batch_stride=call.heads * call.seq_q,
        lse_head_stride=call.seq_q,
        alibi=alibi_slopes.data_ptr() if alibi_slopes is not None else None,
        alibi_batch_stride=call.alibi_batch_stride,
        seqlens_k=seqlens_k.data_ptr() if seqlens_k is not None else None,
        block_table=block_table.data_ptr() if block_table is not None else None,
        block_table_batch_stride=call.block_table_batch_stride, max_pages=call.max_pages, page_size=call.page_size)
    # The launch goes to q's device (the current device while the launcher runs) and PyTorch's current
    # stream there, so it is ordered with the work around it like any PyTorch operator.
    with torch.cuda.device(q.device):
        _library.load().launch(chosen.id, params, torch.cuda.current_stream().cuda_stream)
    return o, lse


@_attention_op.register_fake
def _attention_fake(q, k, v, alibi_slopes, causal, softmax_scale, return_lse, stage, seqlens_k=None, block_table=None,
                    needs_grad=False, deterministic=False):
    # The same checks on torch.compile's fake tensors, so bad input fails at compile time with the same
    # message; the outputs have the shapes, dtype and (contiguous) strides of the real ones. (The
    # backward stage is chosen by the real implementation: that needs the library and the GPU.)
    call = _checks.check_attention(q, k, v, causal=causal, softmax_scale=softmax_scale, alibi_slopes=alibi_slopes,
                                   return_lse=return_lse, seqlens_k=seqlens_k, block_table=block_table)
    if needs_grad:
        _checks.check_backward_arguments(alibi_slopes=alibi_slopes, seqlens_k=seqlens_k, block_table=block_table)
    o = q.new_empty(call.o_shape)
    lse = q.new_empty(call.lse_shape if return_lse else (0,), dtype=torch.float32)
    return o, lse


@torch.library.custom_op("flash_stages::attention_backward", mutates_args=())
def _attention_backward_op(d_o: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                           lse: torch.Tensor, causal: bool, softmax_scale: Optional[float],
                           deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of o = attention(q, k, v, causal, softmax_scale), given d_o = dL/do and the forward's
    o and LSE, by the last backward-track stage that takes the call (_stages.choose_backward); with
    deterministic, by one whose backward declares "deterministic", in that mode (dQ summed in a fixed
    order: bitwise the same gradients from every run)."""
    # d_o comes from autograd in any layout; q, k, v and o are the forward's (already readable), unless
    # torch.compile's graph hands them over otherwise.
    d_o, q, k, v, o = (_kernel_layout(t) for t in (d_o, q, k, v, o))
    call = _checks.check_attention(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True)
    _checks.check_backward_tensors(call, o, d_o, lse)
    chosen = _backward_stage_for(call, q.device, deterministic)
    lse = lse.contiguous()  # the forward's buffer, [batch, heads, seq_q]: the strides backward_params gives
    # Allocated here, contiguous, in the inputs' shapes: dk and dv of a KV head sum over its query heads.
    dq, dk, dv = (torch.empty(t.shape, dtype=q.dtype, device=q.device) for t in (q, k, v))
    params = _library.backward_params(call, q, k, v, o, d_o, dq, dk, dv, lse, deterministic)
    # As the forward: on q's device and PyTorch's current stream there, which autograd sets to the
    # stream the forward ran on.
    with torch.cuda.device(q.device):
        _library.load().launch_backward(chosen.id, params, torch.cuda.current_stream().cuda_stream)
    return dq, dk, dv


@_attention_backward_op.register_fake
def _attention_backward_fake(d_o, q, k, v, o, lse, causal, softmax_scale, deterministic=False):
    call = _checks.check_attention(q, k, v, causal=causal, softmax_scale=softmax_scale, return_lse=True)
    _checks.check_backward_tensors(call, o, d_o, lse)
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _save_for_backward(ctx, inputs, output):
    (q, k, v, alibi_slopes, causal, softmax_scale, return_lse, _stage, seqlens_k, block_table, _needs_grad,
     deterministic) = inputs
    o, lse = output
    # attention() has checked all this before the launch; a caller of the op itself learns it here.
    _checks.check_backward_arguments(alibi_slopes=alibi_slopes, seqlens_k=seqlens_k, block_table=block_table)
    if not return_lse:
        raise NotImplementedError("flash_stages::attention is differentiable only with return_lse=True (its backward "
                                  "reads the LSE): call flash_stages.attention(), which asks for it")
    # No gradient flows through the LSE, as in FlashAttention: the backward stages take dL/do alone.
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.softmax_scale, ctx.deterministic = causal, softmax_scale, deterministic


def _attention_grad(ctx, grad_o, _grad_lse):
    q, k, v, o, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.flash_stages.attention_backward(grad_o, q, k, v, o, lse, ctx.causal, ctx.softmax_scale,
                                                           ctx.deterministic)
    # The op's other arguments (alibi_slopes, ..., needs_grad, deterministic) have no gradient.
    return (dq, dk, dv) + (None,) * 9


_attention_op.register_autograd(_attention_grad, setup_context=_save_for_backward)


def _attention(q, k, v, alibi_slopes, causal, softmax_scale, return_lse, stage, seqlens_k=None, block_table=None,
               deterministic=False):
    """The forward op, differentiable where autograd will need its gradients: then it also computes the
    LSE, which the backward reads, whether the caller asked for it or not, and records deterministic
    for the backward (the forward itself is deterministic either way)."""
    needs_grad = _checks.needs_grad(torch.is_grad_enabled(), q, k, v, alibi_slopes)
    return torch.ops.flash_stages.attention(q, k, v, alibi_slopes, bool(causal),
                                            None if softmax_scale is None else float(softmax_scale),
                                            bool(return_lse) or needs_grad, stage, seqlens_k, block_table, needs_grad,
                                            bool(deterministic))


def attention(q, k, v, *, causal=False, softmax_scale=None, alibi_slopes=None, return_lse=False, stage=None,
              deterministic=False):
    """Attention forward, softmax(q k^T * softmax_scale) v, by the kernels of this repository.

    q: [batch, seq_q, heads, head_dim]; k, v: [batch, seq_kv, kv_heads, head_dim] (kv_heads dividing
    heads: grouped-query attention, or multi-query with 1); fp16 or bf16 CUDA tensors of one dtype;
    head_dim 64 or 128, contiguous; any batch, seq and head strides that are multiples of 8 elements
    (views into a packed qkv tensor, transposes of [batch, heads, seq, head_dim] tensors).

    causal: query i sees keys j <= i + seq_kv - seq_q (aligned to the bottom-right, as in
    FlashAttention 2.1 and later); a query that sees no key gets zeros.
    softmax_scale: defaults to 1 / sqrt(head_dim); must be positive.
    alibi_slopes: fp32 [heads] or [batch, heads]; adds -slope * |i + seq_kv - seq_q - j| to the scores.
    return_lse: also return the log-sum-exp of each row's scores, fp32 [batch, heads, seq_q].
    stage: None picks the fastest stage this GPU runs that supports the call (flash_stages.pick_stage);
    a stage id ("hopper_17_warp_redo", or "hopper_17") runs that stage.
    deterministic: affects only the gradients (the forward is deterministic anyway): they come from a
    backward stage with the deterministic mode, which sums dQ in a fixed order, so that repeated calls
    give bitwise the same q.grad, k.grad and v.grad (without it, dQ's last bits may differ from run to
    run). Refused, for a call that will be differentiated, where no backward stage of the library
    declares "deterministic"; without gradients it changes nothing.

    Returns o, [batch, seq_q, heads, head_dim] in q's dtype (and lse if return_lse). Launches on
    torch.cuda.current_stream().

    Differentiable in q, k and v: o.backward() runs the last backward-track stage whose backward
    declares what the call needs (flash_stages.pick_backward_stage); the LSE carries no gradient. A
    call that will be differentiated (inputs that require grad, grad mode on) and that no backward
    stage takes (ALiBi, or a feature no backward stage of the library declares) is refused with
    NotImplementedError before anything is launched."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(t).__name__))
    o, lse = _attention(q, k, v, alibi_slopes, causal, softmax_scale, return_lse, stage, deterministic=deterministic)
    return (o, lse) if return_lse else o


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """FlashAttention-2's flash_attn_func, same arguments and layout, for code written against it.

    What the kernels do not do is refused with NotImplementedError, never ignored: dropout_p > 0,
    a sliding window (window_size other than (-1, -1)), softcap, return_attn_probs, and gradients that
    no backward stage computes (as attention()). deterministic=True, for a call that will be
    differentiated, takes a backward stage with the deterministic mode (dQ summed in a fixed order:
    bitwise-repeatable gradients), and is refused where the library has none; deterministic=False lets
    the backward add dQ up with fp32 atomics, whose order may change its last bits from run to run. The
    forward is deterministic, so without gradients deterministic=True changes nothing."""
    if dropout_p:
        raise NotImplementedError("dropout_p=%r: these kernels have no dropout; pass dropout_p=0.0" % (dropout_p,))
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError("window_size=%r: these kernels have no sliding-window (local) attention; pass "
                                  "(-1, -1)" % (tuple(window_size),))
    if softcap:
        raise NotImplementedError("softcap=%r: these kernels have no score soft-capping; pass softcap=0.0" % (softcap,))
    if return_attn_probs:
        raise NotImplementedError("return_attn_probs=True: these kernels never form the attention probabilities; "
                                  "flash_stages.attention(..., return_lse=True) returns the log-sum-exp")
    return attention(q, k, v, causal=causal, softmax_scale=softmax_scale, alibi_slopes=alibi_slopes,
                     deterministic=deterministic)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    """FlashAttention-2's flash_attn_with_kvcache, for contiguous and paged caches: attention of q
    against the first cache_seqlens[b] (+ the new tokens) keys of batch row b's cache.

    q: [batch, seq_q, heads, head_dim]; k_cache, v_cache: [batch, seqlen_cache, kv_heads, head_dim],
    or, with block_table (int32 [batch, max_pages]), pools of pages [num_pages, page_size, kv_heads,
    head_dim] (page_size any multiple of 16: 16, 48, 64, 256, ...), where batch row b's key j is row j % page_size of
    page block_table[b, j // page_size] and a row holds max_pages * page_size keys at most;
    k, v (optional): [batch, seqlen_new, kv_heads, head_dim], written into the caches in place at keys
    cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1 before the attention, which then sees
    cache_seqlens[b] + seqlen_new keys; cache_seqlens: an int, or an int32 [batch] tensor (None: every
    key of the cache). causal aligns each row's queries to the bottom-right of its own keys. It runs
    on the stages that declare per-sequence lengths (the decoding track, "seqlens_k"), and "paged_kv"
    with a block table.

    The lengths, and the page indices a row's keys use, are checked on the host (one copy from the
    device per call, and a graph break under torch.compile): a length past the cache would otherwise
    be clamped by the kernel or written out of bounds, and a page index outside the pool read or
    written outside it. What the kernels do not do is refused with NotImplementedError, never
    ignored: rotary embeddings, cache_batch_idx, cache_leftpad, a sliding window, softcap, a forced
    num_splits, and gradients of a call with cache_seqlens, block_table or alibi_slopes (without
    them, the call is attention() over the whole cache, differentiable as that is)."""
    for name, value, default in (("rotary_cos", rotary_cos, None), ("rotary_sin", rotary_sin, None),
                                 ("cache_batch_idx", cache_batch_idx, None), ("cache_leftpad", cache_leftpad, None)):
        if value is not default:
            raise NotImplementedError("%s: not supported by these kernels (caches without rotary embeddings "
                                      "only); pass None" % name)
    if tuple(window_size) != (-1, -1):
        raise NotImplementedError("window_size=%r: these kernels have no sliding-window (local) attention; pass "
                                  "(-1, -1)" % (tuple(window_size),))
    if softcap:
        raise NotImplementedError("softcap=%r: these kernels have no score soft-capping; pass softcap=0.0" % (softcap,))
    if num_splits:
        raise NotImplementedError("num_splits=%r: the stage chooses its split count; pass 0" % (num_splits,))
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(t).__name__))
    if _checks.needs_grad(torch.is_grad_enabled(), q, k_cache, v_cache, k, v, alibi_slopes):
        # Before the caches are written.
        _checks.check_backward_arguments(alibi_slopes=alibi_slopes, cache_seqlens=cache_seqlens,
                                         block_table=block_table)
    if (k is None) != (v is None):
        raise ValueError("k and v go together: pass both new tensors or neither")
    if q.dim() != 4 or k_cache.dim() != 4:
        raise ValueError("q and k_cache must be 4-D, [batch, seq, heads, head_dim], not %s and %s"
                         % (tuple(q.shape), tuple(k_cache.shape)))
    batch, seqlen_cache = q.shape[0], k_cache.shape[1]
    if k is not None and cache_seqlens is None:
        raise ValueError("new k and v need cache_seqlens: where in the cache they go")
    page_size = 0
    if block_table is not None:
        if not isinstance(block_table, torch.Tensor) or block_table.dtype != torch.int32 or block_table.dim() != 2:
            raise TypeError("block_table must be a 2-D torch.int32 tensor [batch, max_pages], not %s"
                            % (getattr(block_table, "dtype", None) or type(block_table).__name__))
        if block_table.shape[0] != batch or block_table.device != q.device:
            raise ValueError("block_table must have shape (batch, max_pages) with batch %d, on q's device %s, not %s on %s"
                             % (batch, q.device, tuple(block_table.shape), block_table.device))
        page_size = k_cache.shape[1]
        seqlen_cache = block_table.shape[1] * page_size  # each row's keys: max_pages pages

    seqlens_k = None
    if cache_seqlens is not None:
        if isinstance(cache_seqlens, int):
            cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=q.device)
        if not isinstance(cache_seqlens, torch.Tensor) or cache_seqlens.dtype != torch.int32:
            raise TypeError("cache_seqlens must be an int or a torch.int32 tensor, not %s"
                            % getattr(cache_seqlens, "dtype", type(cache_seqlens).__name__))
        if tuple(cache_seqlens.shape) != (batch,) or cache_seqlens.device != q.device:
            raise ValueError("cache_seqlens must have shape (batch,) = (%d,) on q's device %s, not %s on %s"
                             % (batch, q.device, tuple(cache_seqlens.shape), cache_seqlens.device))
        seqlen_new = 0
        if k is not None:
            if tuple(k.shape) != tuple(v.shape) or k.dim() != 4 or k.shape[0] != batch or k.shape[2:] != k_cache.shape[2:]:
                raise ValueError("k and v must be [batch, seqlen_new, kv_heads, head_dim] like the cache's rows, not "
                                 "%s and %s (cache %s)" % (tuple(k.shape), tuple(v.shape), tuple(k_cache.shape)))
            seqlen_new = k.shape[1]
        low, high = (int(x) for x in torch.stack([cache_seqlens.min(), cache_seqlens.max()]).tolist())
        if low < 0 or high + seqlen_new > seqlen_cache:
            raise ValueError("cache_seqlens (%d to %d) + %d new tokens must fit the cache's %d rows"
                             % (low, high, seqlen_new, seqlen_cache))
        if k is not None and block_table is None:
            # Row cache_seqlens[b] + i of batch row b takes new token i: one scatter per cache.
            rows = cache_seqlens.long()[:, None] + torch.arange(seqlen_new, device=q.device)[None, :]
            index = rows[:, :, None, None].expand(-1, -1, k.shape[2], k.shape[3])
            k_cache.scatter_(1, index, k.to(k_cache.dtype))
            v_cache.scatter_(1, index, v.to(v_cache.dtype))
        seqlens_k = (cache_seqlens + seqlen_new).to(torch.int32).contiguous()
    if block_table is not None:
        _check_pages_and_write(k_cache, v_cache, k, v, block_table, page_size, seqlens_k, cache_seqlens)

    o, lse = _attention(q, k_cache, v_cache, alibi_slopes, causal, softmax_scale, return_softmax_lse, None, seqlens_k,
                        block_table)
    return (o, lse) if return_softmax_lse else o


def _check_pages_and_write(k_cache, v_cache, k, v, block_table, page_size, seqlens_k, cache_seqlens):
    """A paged cache: the page indices that each row's keys use (its first ceil(length / page_size)
    entries; every entry without cache_seqlens) must lie in the pool, checked on the host in one copy
    (the kernels cannot: they read wherever an index points); then the new tokens go to their pages.
    Key n = cache_seqlens[b] + i of batch row b (new token i) is row n % page_size of page
    block_table[b, n // page_size]: one gather of the page indices, then one index_put_ per cache,
    k_cache[pages, rows] = k, with pages and rows [batch, seqlen_new] (two sequences that share a page
    and write the same row of it race, as two writes to one row would anywhere)."""
    num_pages, max_pages = k_cache.shape[0], block_table.shape[1]
    slots = torch.arange(max_pages, device=block_table.device)[None, :]
    if seqlens_k is None:
        used = block_table
    else:
        used = block_table[slots < (seqlens_k.long()[:, None] + page_size - 1) // page_size]
    if used.numel():
        low, high = (int(x) for x in torch.stack([used.min(), used.max()]).tolist())
        if low < 0 or high >= num_pages:
            raise ValueError("block_table's pages in use (%d to %d) must index the pool's %d pages (k_cache's first "
                             "dimension)" % (low, high, num_pages))
    if k is None:
        return
    keys = cache_seqlens.long()[:, None] + torch.arange(k.shape[1], device=k.device)[None, :]
    pages = block_table.long().gather(1, keys // page_size)
    rows = keys % page_size
    k_cache[pages, rows] = k.to(k_cache.dtype)
    v_cache[pages, rows] = v.to(v_cache.dtype)
