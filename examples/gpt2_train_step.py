#!/usr/bin/env python3
"""One training step of GPT-2 (124M-parameter shape: 12 layers, 12 heads, head_dim 64) with the kernels
as its attention, forward and backward, against the same step with PyTorch's sdpa. Random weights
from GPT2Config: nothing is downloaded. A fixed batch of 4 sequences of 256 random tokens.

    python3 examples/gpt2_train_step.py [--batch 4] [--seq 256] [--dtype fp16|bf16]

The step is mixed-precision training as PyTorch users run it: fp32 weights, the forward under
torch.autocast in fp16 (or bf16), so the attention gets 16-bit q, k and v; the loss is the model's
next-token cross-entropy on the batch; backward() fills every parameter's fp32 gradient. It runs
three times on one model with the same weights: with attn_implementation="fa_stages" (the kernels'
forward and, through autograd, a backward-track stage's backward), with "sdpa" under the same
autocast, and with "sdpa" in fp32 (no autocast), the reference for how far 16-bit arithmetic moves
the step at all. Checks:

  * the kernels ran: each of the 12 layers' attention went through flash_stages, and the loss's
    autograd graph holds 12 nodes of its backward;
  * the loss: |fa_stages - sdpa| <= 3 x max(|sdpa - fp32|, u |fp32|);
  * every parameter group's gradient (the 12 layers' tensors of one name taken together):
    ||g_fa_stages - g_sdpa|| / ||g_sdpa|| <= 3 x max(||g_sdpa - g_fp32|| / ||g_fp32||, u).

Why 3: FlashAttention's rule for a kernel is that its error against the exact result is at most twice
that of the same computation by PyTorch in the 16-bit dtype; here the step in fp32 stands for the
exact one (its own rounding is at least 2^13 times smaller), and if both 16-bit steps are within
their bounds of it, the triangle inequality puts them within 2 + 1 = 3 times sdpa's error of each
other. u is the dtype's unit roundoff (2^-11 fp16, 2^-8 bf16): the floor where sdpa's own error
happens to be tiny. Twelve layers carry any difference in rounding into every gradient alike, so a
correct attention differs from sdpa's step by about sdpa's own error, inside the bound, and a wrong
gradient (a missing or misplaced dQ, dK or dV block) by far more.

Needs PyTorch with a CUDA GPU, transformers 5.x, and build/libfa_capi.so (or FLASH_STAGES_LIB) with a
backward stage that declares "causal" (GPT-2's attention is causal). Exit 0 passed, 1 failed, 77
skipped (one of these missing; the message says which).
"""

import argparse
import contextlib
import re
import sys

from generation_check import SKIPPED, imports

UNIT_ROUNDOFF = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8}
# The gradient of the loss with respect to most logits is about 1 / (vocabulary x tokens), 2e-8 at
# the default batch: below fp16's smallest normal number (6e-5), so an unscaled fp16 backward flushes
# it to zero. Scaling the loss by 2^12 first (torch.amp.GradScaler's method, with a fixed factor;
# a power of two, so unscaling is exact) keeps it, and the largest gradients, near 1 / tokens x 2^12,
# far from fp16's overflow. bf16 has fp32's range and needs none; the fp32 reference gets the same
# factor, which changes nothing there.
LOSS_SCALE = {"fp16": 2.0 ** 12, "bf16": 1.0}
BOUND_FACTOR = 3.0


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=4, help="sequences in the batch (default %(default)s)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence, at most 1024 (default %(default)s)")
    parser.add_argument("--dtype", choices=("fp16", "bf16"), default="fp16", help="autocast dtype (default fp16)")
    args = parser.parse_args()
    if args.batch < 1 or not 2 <= args.seq <= 1024:
        parser.error("--batch must be at least 1 and --seq from 2 to 1024 (GPT-2's positions)")
    return args


def backward_nodes(loss, name):
    """How many nodes of the loss's autograd graph belong to the op `name` (its autograd formula's node
    class is named after it: GeneratedBackwardFor_flash_stages_attention_default...)."""
    seen, stack, count = set(), [loss.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        count += name in node.name()
        stack.extend(next_node for next_node, _ in node.next_functions)
    return count


def train_step(torch, model, input_ids, autocast_dtype, loss_scale):
    """The loss and {parameter name: fp32 gradient} of one forward and backward on the batch."""
    model.zero_grad(set_to_none=True)
    autocast = contextlib.nullcontext() if autocast_dtype is None else torch.autocast("cuda", dtype=autocast_dtype)
    with autocast:
        loss = model(input_ids, labels=input_ids, use_cache=False).loss
    graph_nodes = backward_nodes(loss, "flash_stages_attention")
    (loss * loss_scale).backward()
    grads = {name: p.grad.detach().float() / loss_scale for name, p in model.named_parameters()}
    return loss.item(), grads, graph_nodes


def groups(names):
    """{group: [parameter names]}: the layers' tensors of one name together (transformer.h.*.attn.c_attn.weight)."""
    out = {}
    for name in names:
        out.setdefault(re.sub(r"\.\d+\.", ".*.", name), []).append(name)
    return out


def relative_error(torch, grads, reference, names):
    diff = torch.sqrt(sum(((grads[n] - reference[n]).double() ** 2).sum() for n in names))
    norm = torch.sqrt(sum((reference[n].double() ** 2).sum() for n in names))
    return (diff / norm).item(), norm.item()


def main():
    args = arguments()
    torch, transformers, flash_stages = imports()
    low = torch.float16 if args.dtype == "fp16" else torch.bfloat16
    u = UNIT_ROUNDOFF[args.dtype]
    try:
        forward_stage = flash_stages.pick_stage(causal=True, lse=True)
        backward_stage = flash_stages.pick_backward_stage(causal=True, any_length=args.seq % 64 != 0)
    except flash_stages.LibraryError as e:  # not built: say how to build it, without a traceback
        print("FAIL: %s" % e)
        return 1
    except NotImplementedError as e:  # no backward stage for GPT-2's causal attention in this library
        print("SKIPPED: the library cannot differentiate GPT-2's (causal) attention: %s" % e)
        return SKIPPED

    # Dropout 0 everywhere: the kernels have none, and the three steps must see the same network.
    config = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257,
                                     attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    model.train()
    generator = torch.Generator(device="cuda").manual_seed(0)
    input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device="cuda", generator=generator)
    print("GPT-2 training step: %s, transformers %s, torch %s; batch %d x %d tokens, autocast %s (fp32 weights); "
          "attention by %s, its gradients by %s" % (torch.cuda.get_device_name(), transformers.__version__,
                                                    torch.__version__, args.batch, args.seq, args.dtype, forward_stage,
                                                    backward_stage))

    # The backend's attention, counted: proof that the model's layers really ran on the kernels.
    from flash_stages.transformers_backend import attention_forward

    ours = flash_stages.register_transformers()
    calls = [0]

    def counted(*call_args, **kwargs):
        calls[0] += 1
        return attention_forward(*call_args, **kwargs)

    transformers.AttentionInterface.register(ours, counted)

    runs = {}
    for label, implementation, dtype in ((ours, ours, low), ("sdpa", "sdpa", low), ("sdpa fp32", "sdpa", None)):
        model.set_attn_implementation(implementation)
        if model.config._attn_implementation != implementation:
            print("FAIL: the model did not switch to attn_implementation=%r" % implementation)
            return 1
        calls[0] = 0
        runs[label] = train_step(torch, model, input_ids, dtype, LOSS_SCALE[args.dtype] if dtype else 1.0)
        if label == ours:
            layers = config.n_layer
            print("%d attention calls went through the kernels, and the loss's graph has %d of their backward nodes "
                  "(%d layers)" % (calls[0], runs[label][2], layers))
            if calls[0] != layers or runs[label][2] != layers:
                print("FAIL: expected %d of each" % layers)
                return 1

    (loss_ours, g_ours, _), (loss_sdpa, g_sdpa, _), (loss_ref, g_ref, _) = runs[ours], runs["sdpa"], runs["sdpa fp32"]
    failed = False
    loss_bound = BOUND_FACTOR * max(abs(loss_sdpa - loss_ref), u * abs(loss_ref))
    loss_ok = abs(loss_ours - loss_sdpa) <= loss_bound
    print("loss: %s %.6f, sdpa %.6f, sdpa fp32 %.6f; |%s - sdpa| = %.2e, bound %.2e%s"
          % (ours, loss_ours, loss_sdpa, loss_ref, ours, abs(loss_ours - loss_sdpa), loss_bound,
             "" if loss_ok else "  FAIL"))
    failed |= not loss_ok

    print("%-36s %10s %12s %12s %10s" % ("parameter group", "||g sdpa||", "%s vs sdpa" % ours, "sdpa vs fp32",
                                         "bound"))
    for group, names in groups(g_sdpa).items():
        error, norm = relative_error(torch, g_ours, g_sdpa, names)
        base, _ = relative_error(torch, g_sdpa, g_ref, names)
        bound = BOUND_FACTOR * max(base, u)
        ok = error <= bound  # a NaN or an infinity in a gradient makes the error NaN or infinite: fails
        print("%-36s %10.3g %12.2e %12.2e %10.2e%s" % (group, norm, error, base, bound, "" if ok else "  FAIL"))
        failed |= not ok
    print("FAILED" if failed else "PASSED")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
