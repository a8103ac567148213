"""The kernels as an attention implementation of Hugging Face transformers (5.x).

    import flash_stages
    flash_stages.register_transformers()            # registers "fa_stages"
    model = AutoModelForCausalLM.from_pretrained(..., attn_implementation="fa_stages")
    model.set_attn_implementation("fa_stages")      # or switch a loaded model

transformers' attention layers call the registered function as
fn(module, query, key, value, attention_mask, dropout=..., scaling=..., **kwargs) with query, key and
value in [batch, heads, seq, head_dim] and expect (output in [batch, seq, heads, head_dim], weights or
None) back (transformers/integrations/sdpa_attention.py has the same contract). Transposing those to
[batch, seq, heads, head_dim] is a view, and the kernels take its strides as they are: no copy.

What the kernels cannot do is refused with NotImplementedError, never computed wrongly: padding
masks, sliding windows and other masks beyond causal or full attention, static (preallocated)
caches, dropout, soft-capping, attention sinks. The attention is differentiable as
flash_stages.attention() is, so a model trains through it (with attention dropout 0).
"""

import torch

from . import TRANSFORMERS_NAME
from ._ops import attention


def register(name: str = TRANSFORMERS_NAME) -> str:
    """Registers the kernels under `name` with transformers' AttentionInterface (the attention) and
    AttentionMaskInterface (the mask: without one, transformers would hand the attention no mask at
    all, and a padded batch would be computed as if unpadded). Returns the name, for
    attn_implementation=."""
    try:
        from transformers import AttentionInterface, AttentionMaskInterface
    except ImportError as e:
        raise ImportError("flash_stages.register_transformers() needs transformers 5.x (pip install transformers): %s"
                          % e) from None
    if "flash" in name:
        # transformers would take it for a FlashAttention build and try to load that.
        raise ValueError("the name %r contains 'flash', which transformers reserves for FlashAttention builds" % name)
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, attention_mask)
    return name


def attention_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None, attention_mask=None,
                   **kwargs):
    """transformers' mask function for this backend: None (no mask: the kernels mask causally
    themselves) whenever the model's pattern is plain causal or full attention without padding;
    otherwise NotImplementedError, at mask creation, before any layer runs."""
    from transformers.masking_utils import bidirectional_mask_function, causal_mask_function

    if mask_function is None or mask_function is causal_mask_function:
        # The kernels' causal mask is aligned to the bottom-right: the last query sees every key. That is
        # the model's causal mask when the keys end at the last query, as with a DynamicCache (prefill,
        # and decoding with q_length 1). A static cache's keys run on past it, to its preallocated length.
        if (isinstance(q_offset, torch.Tensor) or isinstance(kv_offset, torch.Tensor)
                or q_offset + q_length != kv_offset + kv_length):
            raise NotImplementedError(
                "fa_stages: the keys (%s from offset %s) do not end at the last query (%s from offset %s), as they do "
                "with transformers' DynamicCache; a static or sliding-window cache needs a mask the kernels do not have"
                % (kv_length, kv_offset, q_length, q_offset))
    elif mask_function is not bidirectional_mask_function:
        raise NotImplementedError(
            "fa_stages: this model needs an attention pattern beyond causal or full attention (sliding window, chunks, "
            "packed sequences, ...), which the kernels do not have")
    if attention_mask is not None and not bool(attention_mask.all()):
        raise NotImplementedError(
            "fa_stages: the attention_mask pads some sequences, and the kernels have no padding mask: pass a batch of "
            "sequences of one length, without padding")
    return None


def _is_plain_mask(mask: torch.Tensor, causal: bool, seq_q: int, seq_kv: int) -> bool:
    """Whether a 4-D mask that reached the attention anyway (one the caller built) says exactly what
    the kernels do: every key for every query, or the bottom-right causal pattern. Reads the mask
    (a synchronization), but only on this unusual path."""
    if mask.dim() != 4 or tuple(mask.shape[-2:]) != (seq_q, seq_kv):
        return False
    allowed = torch.ones(seq_q, seq_kv, dtype=torch.bool, device=mask.device)
    if causal:
        allowed = allowed.tril(seq_kv - seq_q)
    if mask.dtype == torch.bool:  # True: attend
        return bool((mask == allowed).all())
    # Additive: 0 where attended, a large negative number (transformers uses the dtype's minimum) elsewhere.
    blocked = mask.masked_fill(allowed, float("-inf"))
    return bool(((mask == 0) | ~allowed).all()) and bool((blocked <= torch.finfo(mask.dtype).min / 2).all())


def attention_forward(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kwargs):
    """The attention of one layer. query [batch, heads, seq_q, head_dim], key and value [batch,
    kv_heads, seq_kv, head_dim]; returns ([batch, seq_q, heads, head_dim], None)."""
    if dropout:
        # transformers passes the config's attention dropout in training mode (model.train()).
        raise NotImplementedError("fa_stages: attention dropout %s: the kernels have no dropout; call model.eval(), "
                                  "or, to train, build the model with attention dropout 0 (e.g. "
                                  "GPT2Config(attn_pdrop=0.0), LlamaConfig(attention_dropout=0.0))" % dropout)
    for unsupported, what in (("sliding_window", "sliding-window attention"), ("softcap", "score soft-capping"),
                              ("s_aux", "attention sinks"), ("cu_seq_lens_q", "packed (varlen) sequences")):
        if kwargs.get(unsupported) is not None:
            raise NotImplementedError("fa_stages: this layer asks for %s (%s=%r), which the kernels do not have"
                                      % (what, unsupported, kwargs[unsupported]))
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError("fa_stages: this model computes attention in %s; the kernels take float16 or bfloat16 (load "
                        "the model with dtype=torch.float16 or torch.bfloat16)" % query.dtype)
    # As transformers' sdpa backend decides it: the is_causal the model passes, else the layer's own.
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if attention_mask is not None and not _is_plain_mask(attention_mask, causal, q.shape[1], k.shape[1]):
        raise NotImplementedError("fa_stages: the layer got an attention mask beyond the %s pattern the kernels compute "
                                  "(padding, or a custom mask)" % ("causal" if causal else "full"))
    return attention(q, k, v, causal=causal, softmax_scale=scaling), None
