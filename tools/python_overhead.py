#!/usr/bin/env python3
"""Where the host time of one flash_stages.attention call goes, against scaled_dot_product_attention.

At the examples' prefill shapes the kernel runs for microseconds, and a call's cost is the host's:
the argument checks, the custom op's dispatch, the ctypes call, the C++ launcher (validation, TMA
descriptors on Hopper, the launch itself). This times each layer of the call on its own, so that
work on the overhead starts from a measurement:

    python3 tools/python_overhead.py                 # GPT-2's and Llama's prefill shapes, causal
    python3 tools/python_overhead.py --reps 2000 --stage ampere_20_column_setup

Each row is the host time per call (time.perf_counter over --reps calls issued back to back, after
warm-up; the GPU is synchronized once after the loop, and its time is shown as 'incl. GPU'):

    sdpa                         torch.nn.functional.scaled_dot_product_attention (the reference)
    attention()                  flash_stages.attention: the whole call
    custom op                    torch.ops.flash_stages.attention (attention() minus its own checks)
    op body                      the op's Python function called directly (no dispatcher)
    checks                       _checks.check_attention + check_alignment
    stage choice                 _ops._stage_for: the stage the call runs (stage=None: the pick)
    allocations                  the op's output and (empty) LSE tensors, torch.empty on the GPU
    params + stream              FaCapiParams, torch.cuda.current_stream(), the device guard
    library launch               Library.launch on prepared params: ctypes + the C++ launcher + the launch

Needs PyTorch with a CUDA GPU and build/libfa_capi.so (or FLASH_STAGES_LIB). Exit status 0, or 2
without them (said why).
"""

import argparse
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {  # name -> (batch, seq, heads, kv_heads, head_dim)
    "gpt2": (1, 9, 12, 12, 64),
    "llama": (1, 512, 32, 8, 128),
}


def per_call_us(torch, fn, calls, warmup=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    total = time.perf_counter() - start
    return host / calls * 1e6, total / calls * 1e6


def main(argv=None):
    p = argparse.ArgumentParser(prog="tools/python_overhead.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="gpt2,llama", help="comma-separated subset of %s" % ",".join(SHAPES))
    p.add_argument("--reps", type=int, default=1000, help="calls per row (default 1000)")
    p.add_argument("--stage", default=None, help="a stage id (default: the one attention() picks)")
    p.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    args = p.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown or args.reps < 1:
        p.error("unknown shape(s) %s (known: %s)" % (", ".join(unknown), ", ".join(SHAPES)) if unknown
                else "--reps must be >= 1")
    try:
        import torch
    except ImportError:
        print("python_overhead.py: needs PyTorch (not importable here)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("python_overhead.py: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.join(REPO, "python"))
    import flash_stages
    from flash_stages import _checks, _library, _ops

    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    lib = _library.load()
    print("python_overhead.py: %s, torch %s, %s; %d calls per row; host us per call (incl. GPU: until the "
          "GPU finished, per call)" % (torch.cuda.get_device_name(), torch.__version__, lib.path, args.reps))
    for name in shapes:
        batch, seq, heads, kv_heads, d = SHAPES[name]
        q = torch.randn(batch, seq, heads, d, device="cuda", dtype=dtype)
        k = torch.randn(batch, seq, kv_heads, d, device="cuda", dtype=dtype)
        v = torch.randn_like(k)
        # sdpa's layout is [batch, heads, seq, d]; GQA through enable_gqa
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        call = _checks.check_attention(q, k, v, causal=True)
        stage = _ops._stage_for(call, q.device, args.stage)
        o = torch.empty(call.o_shape, dtype=dtype, device="cuda")
        params = _library.FaCapiParams(
            q=_ops._view(q), k=_ops._view(k), v=_ops._view(v), o=_ops._view(o), dtype=_checks.DTYPE_CODES[call.dtype],
            causal=1, batch=call.batch, heads=call.heads, kv_heads=call.kv_heads, seq_q=call.seq_q,
            seq_kv=call.seq_kv, head_dim=call.head_dim, softmax_scale=call.softmax_scale, lse=None,
            lse_batch_stride=call.heads * call.seq_q, lse_head_stride=call.seq_q)
        stream = torch.cuda.current_stream().cuda_stream

        def checks():
            c = _checks.check_attention(q, k, v, causal=True)
            _checks.check_alignment(q, k, v)
            return c

        def params_and_stream():
            _library.FaCapiParams(q=_ops._view(q), k=_ops._view(k), v=_ops._view(v), o=_ops._view(o))
            with torch.cuda.device(q.device):
                torch.cuda.current_stream().cuda_stream

        body = getattr(_ops._attention_op, "_init_fn", None)  # the function under torch.library.custom_op
        rows = [
            ("sdpa", lambda: torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True,
                                                                              enable_gqa=kv_heads != heads)),
            ("attention()", lambda: flash_stages.attention(q, k, v, causal=True, stage=args.stage)),
            ("custom op", lambda: torch.ops.flash_stages.attention(q, k, v, None, True, None, False, args.stage)),
            ("op body", (lambda: body(q, k, v, None, True, None, False, args.stage)) if body else None),
            ("checks", checks),
            ("stage choice", lambda: _ops._stage_for(call, q.device, args.stage)),
            ("allocations", lambda: (torch.empty(call.o_shape, dtype=dtype, device="cuda"),
                                     torch.empty((0,), dtype=torch.float32, device="cuda"))),
            ("params + stream", params_and_stream),
            ("library launch", lambda: lib.launch(stage.id, params, stream)),
        ]
        print("\n%s: q [%d, %d, %d, %d], K/V %d heads, causal, %s; stage %s" % (
            name, batch, seq, heads, d, kv_heads, args.dtype, stage.id))
        print("%-18s %10s %12s" % ("layer", "host us", "incl. GPU"))
        with torch.no_grad():
            for label, fn in rows:
                if fn is None:
                    print("%-18s %10s %12s" % (label, "-", "-"))
                    continue
                host, total = per_call_us(torch, fn, args.reps)
                print("%-18s %10.1f %12.1f" % (label, host, total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
