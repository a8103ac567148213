"""What both examples do, with a transformers model built from its config (random weights, nothing
downloaded): greedy generation with attn_implementation="fa_stages" (the kernels, through
flash_stages.register_transformers()) and with "sdpa" (PyTorch's attention), on one model with one
prompt; then the checks and the timings.

  * Tokens: the same greedy tokens from both. The one allowed difference is a near tie: if the two
    first differ at a step where sdpa's own logits for the two tokens are closer than the logits
    tolerance, either token is a correct greedy choice (the two attentions round differently), and
    the comparison stops there, saying so.
  * Logits: at every step up to there, max |fa_stages - sdpa| <= tolerance * max |sdpa| (the
    tolerance is relative to the logits' scale; each example states its own).
  * Speed: tokens/s of generate() for each (prefill and all greedy steps, batch 1), and the time of
    one prefill attention call at the model's shape through flash_stages.attention and through
    torch.nn.functional.scaled_dot_product_attention (causal; GQA where the model has it), timed
    alone with CUDA events over back-to-back calls.

Exit codes: 0 checks passed, 1 a check failed, 77 skipped (no PyTorch, CUDA GPU or transformers 5.x).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

SKIPPED = 77


def imports():
    """torch, transformers and flash_stages, or exit 77 with a message saying which is missing."""
    try:
        import torch
    except ImportError:
        print("SKIPPED: this example needs PyTorch (with CUDA), which is not installed")
        sys.exit(SKIPPED)
    if not torch.cuda.is_available():
        print("SKIPPED: this example needs a CUDA GPU, and torch.cuda.is_available() is False")
        sys.exit(SKIPPED)
    try:
        import transformers
    except ImportError:
        print("SKIPPED: this example needs transformers 5.x (pip install transformers), which is not installed")
        sys.exit(SKIPPED)
    if not hasattr(transformers, "AttentionMaskInterface"):
        print("SKIPPED: this example needs transformers 5.x (its AttentionInterface and AttentionMaskInterface); "
              "found %s" % transformers.__version__)
        sys.exit(SKIPPED)
    try:
        import flash_stages
    except ImportError:  # not installed: use the package in this repository
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
        import flash_stages
    return torch, transformers, flash_stages


def arguments(description, prompt_tokens, new_tokens, tolerance):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--prompt-tokens", type=int, default=prompt_tokens, help="prompt length (default %(default)s)")
    parser.add_argument("--new-tokens", type=int, default=new_tokens, help="greedy tokens (default %(default)s)")
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="logits tolerance, relative to max |sdpa logits| (default %s for fp16, %s for bf16)"
                        % tolerance)
    parser.add_argument("--reps", type=int, default=3, help="timed generate() calls per implementation")
    args = parser.parse_args()
    if args.tolerance is None:
        args.tolerance = tolerance[0] if args.dtype == "fp16" else tolerance[1]
    return args


def greedy(torch, model, input_ids, new_tokens):
    with torch.inference_mode():
        out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens,
                             do_sample=False, output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, input_ids.shape[1]:].tolist()
    return tokens, torch.stack(out.logits)[:, 0].float()  # [steps, vocab]


def tokens_per_second(torch, model, input_ids, new_tokens, reps):
    with torch.inference_mode():
        kwargs = dict(attention_mask=torch.ones_like(input_ids), max_new_tokens=new_tokens, do_sample=False)
        model.generate(input_ids, **kwargs)  # warm-up
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(reps):
            model.generate(input_ids, **kwargs)
        torch.cuda.synchronize()
        return new_tokens * reps / (time.perf_counter() - start)


def time_calls(torch, fns, reps=100, rounds=7):
    """Microseconds per call of each function: CUDA events around `reps` back-to-back calls, the median
    of `rounds` rounds, the functions taking turns so that they share the GPU's state."""
    times = [[] for _ in fns]
    for fn in fns:
        for _ in range(10):
            fn()
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(reps):
                fn()
            end.record()
            end.synchronize()
            times[i].append(start.elapsed_time(end) * 1000.0 / reps)
    return [statistics.median(t) for t in times]


def prefill_attention_times(torch, flash_stages, batch, seq, heads, kv_heads, head_dim, dtype):
    import torch.nn.functional as F

    q = torch.randn(batch, seq, heads, head_dim, dtype=dtype, device="cuda")
    k = torch.randn(batch, seq, kv_heads, head_dim, dtype=dtype, device="cuda")
    v = torch.randn(batch, seq, kv_heads, head_dim, dtype=dtype, device="cuda")
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # views: what transformers passes sdpa
    gqa = heads != kv_heads
    with torch.inference_mode():
        return time_calls(torch, [lambda: flash_stages.attention(q, k, v, causal=True),
                                  lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=gqa)])


def compare(model, title, args, heads, kv_heads, head_dim):
    """The whole example on a model built with attn_implementation="sdpa". Returns the exit code."""
    torch, transformers, flash_stages = imports()
    dtype = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    ours = flash_stages.register_transformers()
    model.generation_config.eos_token_id = None  # generate exactly --new-tokens tokens, whatever they are
    model.generation_config.pad_token_id = None
    generator = torch.Generator(device="cuda").manual_seed(0)
    input_ids = torch.randint(0, model.config.vocab_size, (1, args.prompt_tokens), device="cuda", generator=generator)
    try:
        stage = flash_stages.pick_stage(causal=True, gqa=heads != kv_heads)
    except flash_stages.LibraryError as e:  # not built: say how to build it, without a traceback
        print("FAIL: %s" % e)
        return 1
    print("%s: %s, transformers %s, torch %s, %s; prompt %d tokens, %d greedy tokens; attention by %s"
          % (title, torch.cuda.get_device_name(), transformers.__version__, torch.__version__, args.dtype,
             args.prompt_tokens, args.new_tokens, stage))

    # The backend's attention, counted: proof that the model's layers really ran on the kernels.
    from flash_stages.transformers_backend import attention_forward

    calls = [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return attention_forward(*args, **kwargs)

    transformers.AttentionInterface.register(ours, counted)

    runs = {}
    for name in (ours, "sdpa"):
        model.set_attn_implementation(name)
        if model.config._attn_implementation != name:
            print("FAIL: the model did not switch to attn_implementation=%r" % name)
            return 1
        calls[0] = 0
        tokens, logits = greedy(torch, model, input_ids, args.new_tokens)
        if name == ours:
            layers = model.config.num_hidden_layers
            print("%d attention calls went through the kernels (%d layers x %d forward passes)"
                  % (calls[0], layers, args.new_tokens))
            if calls[0] != layers * args.new_tokens:
                print("FAIL: expected %d" % (layers * args.new_tokens))
                return 1
        rate = tokens_per_second(torch, model, input_ids, args.new_tokens, args.reps)
        runs[name] = (tokens, logits, rate)
    (t_ours, l_ours, r_ours), (t_sdpa, l_sdpa, r_sdpa) = runs[ours], runs["sdpa"]

    failed = False
    steps = len(t_sdpa)
    first_difference = next((i for i in range(steps) if t_ours[i] != t_sdpa[i]), None)
    compared = steps if first_difference is None else first_difference + 1
    scale = l_sdpa[:compared].abs().max().item()
    worst = (l_ours[:compared] - l_sdpa[:compared]).abs().max().item()
    tolerance = args.tolerance * scale
    print("logits, %d step(s): max |%s - sdpa| = %.4g, %.2e of max |logit| %.3g (tolerance %.0e)"
          % (compared, ours, worst, worst / scale, scale, args.tolerance))
    if worst > tolerance:
        print("FAIL: the logits differ by more than the tolerance")
        failed = True
    if first_difference is None:
        print("tokens: the same %d greedy tokens: %s" % (steps, t_sdpa))
    else:
        i = first_difference
        gap = (l_sdpa[i, t_sdpa[i]] - l_sdpa[i, t_ours[i]]).item()
        print("tokens: the same up to step %d; there %s picks %d and sdpa %d, whose logits (sdpa's) differ by %.4g"
              % (i, ours, t_ours[i], t_sdpa[i], gap))
        if gap <= tolerance:
            print("  a near tie (within the logits tolerance %.4g): either token is a correct greedy choice" % tolerance)
        else:
            print("FAIL: the tokens differ where the logits are not tied")
            failed = True
    print("generate() throughput, batch 1, prefill and %d tokens: %s %.1f tokens/s, sdpa %.1f tokens/s"
          % (args.new_tokens, ours, r_ours, r_sdpa))
    t_ours_us, t_sdpa_us = prefill_attention_times(torch, flash_stages, 1, args.prompt_tokens, heads, kv_heads,
                                                   head_dim, dtype)
    print("prefill attention, one call, q [1, %d, %d, %d], K/V %d heads, causal: flash_stages.attention %.1f us, "
          "scaled_dot_product_attention %.1f us" % (args.prompt_tokens, heads, head_dim, kv_heads, t_ours_us, t_sdpa_us))
    print("FAILED" if failed else "PASSED")
    return 1 if failed else 0
