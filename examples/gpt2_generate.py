#!/usr/bin/env python3
"""GPT-2 (124M-parameter shape: 12 layers, 12 heads, head_dim 64) generating greedily with the kernels
as its attention, against the same model with PyTorch's sdpa. Random weights from GPT2Config: nothing
is downloaded. The default prompt is 9 tokens, batch 1.

    python3 examples/gpt2_generate.py [--prompt-tokens 9] [--new-tokens 32] [--dtype fp16|bf16]

Needs PyTorch with a CUDA GPU, transformers 5.x and build/libfa_capi.so (or FLASH_STAGES_LIB);
generation_check.py says what is compared and timed. Exit 0 passed, 1 failed, 77 skipped.
"""

import sys

from generation_check import arguments, compare, imports

# Logits tolerance, relative to the largest |logit|: fp16, bf16. The two attentions round differently
# and the difference passes through 12 layers; bf16 keeps 3 fewer mantissa bits than fp16.
TOLERANCE = (1e-2, 5e-2)


def main():
    args = arguments(__doc__.split("\n\n")[0], prompt_tokens=9, new_tokens=32, tolerance=TOLERANCE)
    torch, transformers, flash_stages = imports()
    config = transformers.GPT2Config(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=torch.float16 if args.dtype == "fp16" else torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    return compare(model, "GPT-2", args, heads=12, kv_heads=12, head_dim=64)


if __name__ == "__main__":
    sys.exit(main())
