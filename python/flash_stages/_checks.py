"""The argument checks of attention(), in plain Python.

Everything here reads only what a tensor says about itself (.shape, .dtype, .device, .stride(),
.data_ptr()), never its data, and imports nothing but the standard library: the same functions run
inside the custom op on real tensors, inside its fake implementation on torch.compile's fake
tensors, and in tests/test_python_args.py on small stand-in objects, without PyTorch or a GPU.

The kernels' own validation (common/params.cpp) rejects every bad call too, but it sees raw
pointers and strides: it cannot tell a CPU tensor from a GPU one, nor a dtype mismatch between k and
q. So the checks below come first, and say what is wrong in PyTorch's terms. The same holds for a
call that will be differentiated: what no backward pass computes is refused here, before the
forward is launched, rather than inside loss.backward() later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# The head dims every stage is compiled for (each kernel.cu's StageInfo: head_dims {64, 128}). The C
# library does not export them; the launcher would reject any other head_dim anyway, with a message
# in the C++ terms.
KERNEL_HEAD_DIMS = (64, 128)

# str(dtype) of the dtypes the kernels take, and their code in FaCapiParams.dtype (common/c_api.h).
DTYPE_CODES = {"torch.float16": 0, "torch.bfloat16": 1}

# ALiBi distances are computed as fp32 integers in the kernels: exact up to 2^24 (params.h).
MAX_ALIBI_SEQ = 1 << 23

# The kernels move each head_dim row in 16-byte chunks: 8 elements of 2 bytes.
ROW_ALIGN_ELEMENTS = 8
ROW_ALIGN_BYTES = 16

# The backward stages that do not declare the backward feature "any_length" take seq_q and seq_kv
# that are multiples of 64: their BackwardInfo (stages/backward/*/backward.cuh) has 64 query rows per
# iteration and keys in blocks of 64, or of 128 whose second half may lie past a multiple of 64. The
# library does not export these sizes; 64 is what every one of them takes.
BACKWARD_LENGTH_MULTIPLE = 64

# What no backward pass computes, by the name of the argument that asks for it: the backward stages
# compute the gradients of attention over whole K/V tensors (with causal masking and GQA where they
# declare them), without a bias on the scores.
NO_BACKWARD = {"alibi_slopes": "ALiBi", "seqlens_k": "per-sequence K/V lengths",
               "cache_seqlens": "per-sequence K/V lengths", "block_table": "a paged KV cache"}


@dataclass(frozen=True)
class Call:
    """One attention call, checked: the sizes the kernels get and the features it needs."""

    batch: int
    seq_q: int
    seq_kv: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: str  # "torch.float16" or "torch.bfloat16"
    causal: bool
    softmax_scale: float
    return_lse: bool
    alibi: bool
    alibi_batch_stride: int  # 0: one [heads] row of slopes shared by the batch
    seqlens_k: bool = False  # each batch row's own K/V length, from an int32 [batch] tensor
    # A paged KV cache: k and v are pools [num_pages, page_size, kv_heads, head_dim], batch row b's
    # key j in page block_table[b, j // page_size]; 0 and 0 without a block table.
    page_size: int = 0
    max_pages: int = 0
    block_table_batch_stride: int = 0

    @property
    def features(self) -> frozenset:
        """The stage.json features this call needs ("any_length" is not among them: the launcher
        checks lengths against a stage's tiles itself)."""
        needed = set()
        if self.causal:
            needed.add("causal")
        if self.kv_heads != self.heads:
            needed.add("gqa")
        if self.return_lse:
            needed.add("lse")
        if self.alibi:
            needed.add("alibi")
        if self.seqlens_k:
            needed.add("seqlens_k")
        if self.page_size:
            needed.add("paged_kv")
        return frozenset(needed)

    @property
    def o_shape(self) -> tuple:
        return (self.batch, self.seq_q, self.heads, self.head_dim)

    @property
    def lse_shape(self) -> tuple:
        return (self.batch, self.heads, self.seq_q)


def _is_tensor_like(x) -> bool:
    return all(hasattr(x, name) for name in ("shape", "dtype", "device", "stride"))


def _require_tensor(name: str, t) -> None:
    if not _is_tensor_like(t):
        raise TypeError("%s must be a torch.Tensor, not %s" % (name, type(t).__name__))


def _shape(t) -> tuple:
    # Not int(): under torch.compile with dynamic shapes the sizes are symbolic, and int() would fix
    # them to the traced values.
    return tuple(t.shape)


def _check_dtype(name: str, t) -> None:
    if str(t.dtype) not in DTYPE_CODES:
        raise TypeError("%s has dtype %s: the kernels take torch.float16 or torch.bfloat16 (convert with "
                        "%s.half() or %s.bfloat16())" % (name, t.dtype, name, name))


def _check_cuda(name: str, t) -> None:
    if getattr(t.device, "type", None) != "cuda":
        raise ValueError("%s is on %s: the kernels run on CUDA tensors (move it with %s.cuda())" % (name, t.device, name))


def _row_stride_problem(name: str, t) -> str | None:
    """head_dim contiguous, and every other stride (of a dimension with more than one index) a
    positive multiple of 8 elements, so that each head_dim row starts 16-byte aligned: None if so,
    else what is wrong."""
    shape, strides = _shape(t), tuple(t.stride())
    if strides[3] != 1 and shape[3] > 1:
        return ("%s's last dimension (head_dim) must be contiguous: its stride is %s, not 1 (make it so with "
                "%s.contiguous())" % (name, strides[3], name))
    for dim, what in enumerate(("batch", "seq", "head")):
        if shape[dim] > 1 and (strides[dim] <= 0 or strides[dim] % ROW_ALIGN_ELEMENTS != 0):
            return ("%s's %s stride is %s: the kernels need the batch, seq and head strides to be positive multiples "
                    "of %s elements, so that every head_dim row starts 16-byte aligned (strides %s; %s.contiguous() "
                    "gives such strides)" % (name, what, strides[dim], ROW_ALIGN_ELEMENTS, strides, name))
    return None


def _check_row_strides(name: str, t) -> None:
    problem = _row_stride_problem(name, t)
    if problem:
        raise ValueError(problem)


def check_attention(q, k, v, *, causal=False, softmax_scale=None, alibi_slopes=None, return_lse=False,
                    seqlens_k=None, block_table=None) -> Call:
    """Checks one call of attention() and returns it as a Call. Raises TypeError (not a tensor, a dtype
    the kernels do not take) or ValueError (anything else), before anything is launched.

    q: [batch, seq_q, heads, head_dim]; k, v: [batch, seq_kv, kv_heads, head_dim], kv_heads dividing
    heads; one dtype (fp16 or bf16) and one CUDA device; head_dim contiguous; alibi_slopes: None, or
    fp32 [heads] or [batch, heads] on the same device; seqlens_k: None, or a contiguous int32 [batch]
    tensor on the same device (batch row b's keys are rows 0 .. seqlens_k[b] - 1 of k and v);
    block_table: None, or an int32 [batch, max_pages] tensor on the same device, contiguous along its
    last dimension: k and v are then pools of pages, [num_pages, page_size, kv_heads, head_dim] with
    page_size a positive multiple of 16, batch row b's key j in row j % page_size of page
    block_table[b, j // page_size], and seq_kv is max_pages * page_size (the page indices are
    device data: not read here)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        _require_tensor(name, t)
        if len(t.shape) != 4:
            raise ValueError("%s must be 4-D, [batch, seq, heads, head_dim], but has shape %s" % (name, _shape(t)))
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_dtype(name, t)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError("q, k and v must have one dtype, not %s, %s and %s" % (q.dtype, k.dtype, v.dtype))
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_cuda(name, t)
    if not (q.device == k.device == v.device):
        raise ValueError("q, k and v must be on one device, not %s, %s and %s" % (q.device, k.device, v.device))

    batch, seq_q, heads, head_dim = _shape(q)
    kb, seq_kv, kv_heads, kd = _shape(k)
    if _shape(v) != _shape(k):
        raise ValueError("k and v must have one shape, not %s and %s" % (_shape(k), _shape(v)))
    page_size = max_pages = table_batch_stride = 0
    if block_table is not None:  # k and v are pools: [num_pages, page_size, kv_heads, head_dim]
        _require_tensor("block_table", block_table)
        if str(block_table.dtype) != "torch.int32":
            raise TypeError("block_table has dtype %s: it must be torch.int32 (as in FlashAttention)" % block_table.dtype)
        if block_table.device != q.device:
            raise ValueError("block_table is on %s, q on %s: they must be on one device" % (block_table.device, q.device))
        if len(_shape(block_table)) != 2 or _shape(block_table)[0] != batch or _shape(block_table)[1] <= 0:
            raise ValueError("block_table must have shape (batch, max_pages) = (%s, max_pages >= 1), not %s"
                             % (batch, _shape(block_table)))
        max_pages = _shape(block_table)[1]
        table_strides = tuple(block_table.stride())
        if max_pages > 1 and table_strides[1] != 1:
            raise ValueError("block_table must be contiguous along max_pages (stride %s, not 1): use "
                             "block_table.contiguous()" % table_strides[1])
        table_batch_stride = table_strides[0] if batch > 1 else max_pages
        if batch > 1 and table_batch_stride != 0 and table_batch_stride < max_pages:
            raise ValueError("block_table's rows overlap (batch stride %s < max_pages %s): use block_table.contiguous()"
                             % (table_batch_stride, max_pages))
        page_size = seq_kv
        if page_size <= 0 or page_size % 16 != 0:
            raise ValueError("a paged cache's pages must hold a multiple of 16 rows, not %s (k_cache's shape %s is "
                             "[num_pages, page_size, kv_heads, head_dim])" % (page_size, _shape(k)))
        kb, seq_kv = batch, max_pages * page_size  # the pool's page count is not the batch
    if kb != batch:
        raise ValueError("q and k must have one batch size, not %s and %s (shapes %s and %s)"
                         % (batch, kb, _shape(q), _shape(k)))
    if kd != head_dim:
        raise ValueError("q and k must have one head_dim, not %s and %s (shapes %s and %s)"
                         % (head_dim, kd, _shape(q), _shape(k)))
    for what, size in (("batch", batch), ("seq_q", seq_q), ("heads", heads), ("seq_kv", seq_kv),
                       ("kv_heads", kv_heads)):
        if size <= 0:
            raise ValueError("%s is %s: every size must be at least 1 (q %s, k %s)" % (what, size, _shape(q), _shape(k)))
    if head_dim not in KERNEL_HEAD_DIMS:
        raise ValueError("head_dim %s has no kernel: the stages are compiled for head_dim %s"
                         % (head_dim, " and ".join(str(d) for d in KERNEL_HEAD_DIMS)))
    if heads % kv_heads != 0:
        raise ValueError("k and v have %s heads, which does not divide q's %s heads (grouped-query attention needs "
                         "heads to be a multiple of kv_heads)" % (kv_heads, heads))
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_row_strides(name, t)

    if softmax_scale is None:
        scale = 1.0 / math.sqrt(int(head_dim))  # int(): one of KERNEL_HEAD_DIMS by now, also under torch.compile
    else:
        scale = float(softmax_scale)
        # Positive: the kernels take the row max of the unscaled scores (params.cpp says why).
        if not math.isfinite(scale) or scale <= 0.0:
            raise ValueError("softmax_scale must be finite and positive, not %r" % (softmax_scale,))

    alibi_batch_stride = 0
    if alibi_slopes is not None:
        _require_tensor("alibi_slopes", alibi_slopes)
        if str(alibi_slopes.dtype) != "torch.float32":
            raise TypeError("alibi_slopes has dtype %s: it must be torch.float32 (as in FlashAttention)"
                            % alibi_slopes.dtype)
        if alibi_slopes.device != q.device:
            raise ValueError("alibi_slopes is on %s, q on %s: they must be on one device" % (alibi_slopes.device, q.device))
        shape = _shape(alibi_slopes)
        if shape not in ((heads,), (batch, heads)):
            raise ValueError("alibi_slopes must have shape (heads,) = (%s,) or (batch, heads) = (%s, %s), not %s"
                             % (heads, batch, heads, shape))
        strides = tuple(alibi_slopes.stride())
        if strides[-1] != 1 and heads > 1:
            raise ValueError("alibi_slopes must be contiguous along heads (stride %s, not 1): use alibi_slopes.contiguous()"
                             % strides[-1])
        if len(shape) == 2 and batch > 1:
            alibi_batch_stride = strides[0]
            if alibi_batch_stride < heads:
                raise ValueError("alibi_slopes of shape %s needs one row of %s slopes per batch (batch stride %s): use "
                                 "alibi_slopes.contiguous()" % (shape, heads, alibi_batch_stride))
        if seq_q > MAX_ALIBI_SEQ or seq_kv > MAX_ALIBI_SEQ:
            raise ValueError("ALiBi needs seq_q and seq_kv of at most 2^23, not %s and %s (the kernels compute the "
                             "distances as fp32 integers)" % (seq_q, seq_kv))

    if seqlens_k is not None:
        _require_tensor("seqlens_k", seqlens_k)
        if str(seqlens_k.dtype) != "torch.int32":
            raise TypeError("seqlens_k has dtype %s: it must be torch.int32 (as in FlashAttention)" % seqlens_k.dtype)
        if seqlens_k.device != q.device:
            raise ValueError("seqlens_k is on %s, q on %s: they must be on one device" % (seqlens_k.device, q.device))
        if _shape(seqlens_k) != (batch,):
            raise ValueError("seqlens_k must have shape (batch,) = (%s,), not %s" % (batch, _shape(seqlens_k)))
        if batch > 1 and tuple(seqlens_k.stride()) != (1,):
            raise ValueError("seqlens_k must be contiguous (stride %s, not 1): use seqlens_k.contiguous()"
                             % (tuple(seqlens_k.stride()),))

    return Call(batch=batch, seq_q=seq_q, seq_kv=seq_kv, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                dtype=str(q.dtype), causal=bool(causal), softmax_scale=scale, return_lse=bool(return_lse),
                alibi=alibi_slopes is not None, alibi_batch_stride=alibi_batch_stride,
                seqlens_k=seqlens_k is not None, page_size=page_size, max_pages=max_pages,
                block_table_batch_stride=table_batch_stride)


def check_alignment(q, k, v) -> None:
    """Every head_dim row must start 16-byte aligned; with the strides checked above, that is the data
    pointer's alignment. Only real tensors have one (not torch.compile's fake tensors)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.data_ptr() % ROW_ALIGN_BYTES != 0:
            raise ValueError("%s's data does not start 16-byte aligned (a view that starts at an offset that is not a "
                             "multiple of 8 elements?): %s.contiguous() copies it to aligned memory" % (name, name))


def fits_kernel_layout(t) -> bool:
    """Whether the kernels read a [batch, seq, heads, head_dim] tensor as it is: the strides of
    _check_row_strides, and data 16-byte aligned. The gradient that autograd hands the backward may
    have any layout (after loss = o.sum() it is one value expanded, every stride 0)."""
    return (len(_shape(t)) == 4 and _row_stride_problem("t", t) is None
            and t.data_ptr() % ROW_ALIGN_BYTES == 0)


def needs_grad(grad_enabled: bool, *tensors) -> bool:
    """Whether autograd will differentiate a call of these inputs (None for an absent one)."""
    return grad_enabled and any(t is not None and getattr(t, "requires_grad", False) for t in tensors)


def check_backward_arguments(**arguments) -> None:
    """A call that will be differentiated, with what no backward pass computes (NO_BACKWARD: ALiBi,
    per-sequence K/V lengths, a paged cache), is refused with NotImplementedError; arguments are given
    by the name the caller used (alibi_slopes=..., cache_seqlens=...), None when absent."""
    for name, value in arguments.items():
        if value is not None:
            raise NotImplementedError(
                "%s with inputs that require grad: no backward pass computes %s (the backward stages differentiate "
                "attention over whole K/V tensors, without a bias on the scores); compute this call without "
                "gradients (under torch.no_grad() or torch.inference_mode(), or on detached inputs)"
                % (name, NO_BACKWARD[name]))


def backward_needs(call: Call, deterministic: bool = False) -> dict:
    """The backward features (stage.json's "backward": {"features": [...]}) that the gradient of this
    call needs, each with the reason: {"any_length": "seq_q 100 and seq_kv 130 are not both
    multiples of 64", ...}. deterministic: the caller asked for bitwise-repeatable gradients
    (flash_attn_func's deterministic=True), which only a backward with the deterministic mode gives:
    the others add dQ up with fp32 atomics in whatever order the thread blocks get there."""
    needs = {}
    if call.seq_q % BACKWARD_LENGTH_MULTIPLE or call.seq_kv % BACKWARD_LENGTH_MULTIPLE:
        needs["any_length"] = "seq_q %s and seq_kv %s are not both multiples of %d" % (
            call.seq_q, call.seq_kv, BACKWARD_LENGTH_MULTIPLE)
    if call.causal:
        needs["causal"] = "causal=True"
    if call.kv_heads != call.heads:
        needs["gqa"] = "kv_heads %s < heads %s" % (call.kv_heads, call.heads)
    if deterministic:
        needs["deterministic"] = "deterministic=True: dQ summed in a fixed order"
    return needs


def check_backward_tensors(call: Call, o, d_o, lse) -> None:
    """The backward's other inputs, beside q, k and v (checked by check_attention): the forward's
    output o and the gradient d_o, [batch, seq_q, heads, head_dim] in q's dtype on q's device, and
    the forward's LSE, fp32 [batch, heads, seq_q]."""
    for name, t in (("o", o), ("d_o", d_o), ("lse", lse)):
        _require_tensor(name, t)
        expected_shape, expected_dtype = (call.lse_shape, "torch.float32") if name == "lse" else (call.o_shape,
                                                                                                  call.dtype)
        if _shape(t) != expected_shape:
            raise ValueError("%s must have shape %s, not %s" % (name, expected_shape, _shape(t)))
        if str(t.dtype) != expected_dtype:
            raise TypeError("%s has dtype %s, not %s" % (name, t.dtype, expected_dtype))
        _check_cuda(name, t)


def kernel_strides(t) -> tuple:
    """(batch, seq, head) strides for FaCapiTensor. A dimension of size 1 is never stepped along, so
    its stride is free; PyTorch may report any value there (0, or an odd one after a slice), which the
    launcher's checks would refuse. It gets the tensor's span instead, rounded up to a multiple of 8:
    what a contiguous tensor with one more index there would have."""
    shape, strides = _shape(t), tuple(t.stride())
    span = 1
    for dim in range(4):
        if shape[dim] > 1:
            span = max(span, strides[dim] * shape[dim])
    span = max(ROW_ALIGN_ELEMENTS, -(-span // ROW_ALIGN_ELEMENTS) * ROW_ALIGN_ELEMENTS)
    return tuple(strides[dim] if shape[dim] > 1 else span for dim in range(3))
