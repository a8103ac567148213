#!/usr/bin/env python3
"""A Llama-shaped model (Llama-3-8B's layers: hidden 4096, 32 query and 8 key/value heads of head_dim 128,
MLP 14336; 4 of its 32 layers, a 32000-token vocabulary) generating greedily with the kernels as its
attention, against the same model with PyTorch's sdpa. Random weights from LlamaConfig: nothing is
downloaded. The default prompt is 512 tokens, batch 1.

    python3 examples/llama_generate.py [--prompt-tokens 512] [--new-tokens 32] [--dtype fp16|bf16]

Needs PyTorch with a CUDA GPU, transformers 5.x and build/libfa_capi.so (or FLASH_STAGES_LIB);
generation_check.py says what is compared and timed. Exit 0 passed, 1 failed, 77 skipped.
"""

import sys

from generation_check import arguments, compare, imports

# Logits tolerance, relative to the largest |logit|: fp16, bf16 (see gpt2_generate.py).
TOLERANCE = (1e-2, 5e-2)


def main():
    args = arguments(__doc__.split("\n\n")[0], prompt_tokens=512, new_tokens=32, tolerance=TOLERANCE)
    torch, transformers, flash_stages = imports()
    config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=4,
                                      num_attention_heads=32, num_key_value_heads=8, head_dim=128, vocab_size=32000,
                                      max_position_embeddings=4096)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=torch.float16 if args.dtype == "fp16" else torch.bfloat16, attn_implementation="sdpa")
    model.eval()
    return compare(model, "Llama (4 layers of Llama-3-8B's shape)", args, heads=32, kv_heads=8, head_dim=128)


if __name__ == "__main__":
    sys.exit(main())
