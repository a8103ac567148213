"""The attention kernels of this repository, called from PyTorch (docs/python.md).

    import flash_stages
    o = flash_stages.attention(q, k, v, causal=True)        # q, k, v: [batch, seq, heads, head_dim]
    o = flash_stages.flash_attn_func(q, k, v, causal=True)   # FlashAttention-2's signature
    o = flash_stages.flash_attn_with_kvcache(q, k_cache, v_cache, k, v, cache_seqlens=lengths, causal=True)
    flash_stages.register_transformers()                     # attn_implementation="fa_stages"
    o.backward(d_o)                                          # dq, dk, dv by a backward-track stage

The kernels come from build/libfa_capi.so (CMake target fa_capi), or the library FLASH_STAGES_LIB
names, loaded with ctypes on first use.

The parts that need PyTorch (attention, flash_attn_func, flash_attn_with_kvcache, register_transformers) are imported on
first use, so that the stage table and the argument checks import without it.
"""

from ._library import LaunchError, LibraryError, library_path
from ._stages import Stage

__all__ = ["attention", "flash_attn_func", "flash_attn_with_kvcache", "register_transformers", "stages", "pick_stage",
           "pick_backward_stage", "library_path", "Stage", "LibraryError", "LaunchError", "TRANSFORMERS_NAME"]

# The name under which register_transformers() registers the backend. It must not contain "flash":
# transformers takes any attn_implementation with "flash" in its name for a FlashAttention build and
# tries to load one (transformers.utils.generic.is_flash_attention_requested).
TRANSFORMERS_NAME = "fa_stages"


def stages():
    """The stages the library has, in track order, each with its declared target and features (and
    those of its backward pass, for the backward track's)."""
    from . import _library, _stages

    built = set(_library.load().stage_ids)
    return [s for s in _stages.catalogue() if s.id in built]


def pick_stage(*, causal=False, gqa=False, lse=False, alibi=False, capability=None) -> str:
    """The id of the stage attention() runs, with stage=None, for a call with these features on a GPU of
    this compute capability ((9, 0); default: the current CUDA device's, which needs PyTorch)."""
    from . import _library, _stages

    if capability is None:
        import torch

        capability = torch.cuda.get_device_capability()
    needed = {name for name, wanted in (("causal", causal), ("gqa", gqa), ("lse", lse), ("alibi", alibi)) if wanted}
    return _stages.choose(frozenset(needed), tuple(capability), _library.load().stage_ids).id


def pick_backward_stage(*, causal=False, gqa=False, any_length=False, deterministic=False, capability=None) -> str:
    """The id of the stage whose backward pass computes the gradients of a call with these needs on a
    GPU of this compute capability (default: the current CUDA device's, which needs PyTorch):
    any_length for seq_q or seq_kv not a multiple of 64, gqa for fewer KV heads than query heads,
    deterministic for flash_attn_func(deterministic=True) (a backward with the deterministic mode).
    NotImplementedError, saying what is missing, where no backward stage of the library takes it."""
    from . import _library, _stages

    if capability is None:
        import torch

        capability = torch.cuda.get_device_capability()
    needed = {name for name, wanted in (("causal", causal), ("gqa", gqa), ("any_length", any_length),
                                        ("deterministic", deterministic)) if wanted}
    return _stages.choose_backward(frozenset(needed), tuple(capability), _library.load().backward_stage_ids).id


def __getattr__(name):
    if name in ("attention", "flash_attn_func", "flash_attn_with_kvcache"):
        from . import _ops

        return getattr(_ops, name)
    if name == "register_transformers":
        from .transformers_backend import register

        return register
    raise AttributeError("module 'flash_stages' has no attribute %r" % name)
