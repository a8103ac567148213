"""Python's side of common/c_api.h: the stages of build/libfa_capi.so, called through ctypes.

    lib = FaCapi("build/libfa_capi.so")
    lib.stage_names()                        # ["ampere_01_base", ..., "experiments_03_wide_kv"]
    params = lib.params(q, k, v, o, causal=False)   # torch tensors [B, S, H, D], o written
    lib.launch("hopper_17", params, stream)  # by id or <track>_NN; raises FaCapiError with the launcher's message

The structs that mirror common/c_api.h and common/c_api_backward.h field by field, and the dlopen mode,
are the Python package's (python/flash_stages/_capi_structs.py, loaded here by its path: no PyTorch,
and nothing else of the package); tests/test_c_api.py holds them to the library (sizes and a launch
whose error message names the field it read).
"""

import ctypes
import importlib.util
import math
import os
import sys

STRUCTS_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python", "flash_stages",
                            "_capi_structs.py")


def _load_structs():
    """python/flash_stages/_capi_structs.py as a module of its own (once per process)."""
    name = "_fa_capi_structs"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, STRUCTS_PATH)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[name] = module
    return sys.modules[name]


_structs = _load_structs()
FaCapiTensor = _structs.FaCapiTensor
FaCapiParams = _structs.FaCapiParams
FaCapiBackwardParams = _structs.FaCapiBackwardParams  # common/c_api_backward.h (tools/backward_bench.py)
# As python/flash_stages/_library.py loads it: RTLD_DEEPBIND, so that the library's references
# resolve in it and its own dependencies before the copies of C++-runtime code that an imported
# PyTorch exports (see _capi_structs.py). Linux/glibc only.
DLOPEN_MODE = _structs.DLOPEN_MODE


class FaCapiError(RuntimeError):
    pass


class FaCapi:
    def __init__(self, path):
        self.lib = ctypes.CDLL(str(path), mode=DLOPEN_MODE)
        self.lib.fa_capi_params_size.restype = ctypes.c_int
        if self.lib.fa_capi_params_size() != ctypes.sizeof(FaCapiParams):
            raise FaCapiError("%s: FaCapiParams is %d bytes there and %d here: python/flash_stages/_capi_structs.py no "
                              "longer mirrors common/c_api.h" % (path, self.lib.fa_capi_params_size(),
                                                                  ctypes.sizeof(FaCapiParams)))
        self.lib.fa_capi_stage_count.restype = ctypes.c_int
        self.lib.fa_capi_stage_name.restype = ctypes.c_char_p
        self.lib.fa_capi_stage_name.argtypes = [ctypes.c_int]
        self.lib.fa_capi_launch.restype = ctypes.c_int
        self.lib.fa_capi_launch.argtypes = [ctypes.c_char_p, ctypes.POINTER(FaCapiParams), ctypes.c_void_p,
                                            ctypes.c_char_p, ctypes.c_int]
        self._message = ctypes.create_string_buffer(1024)

    def stage_names(self):
        return [self.lib.fa_capi_stage_name(i).decode() for i in range(self.lib.fa_capi_stage_count())]

    def launch(self, stage, params, stream=None):
        """Issues the launch (asynchronous, like the kernel). Raises FaCapiError if the stage rejected
        the call (nothing was launched) or does not exist."""
        code = self.lib.fa_capi_launch(stage.encode(), ctypes.byref(params), stream, self._message,
                                       len(self._message))
        if code != 0:
            raise FaCapiError(self._message.value.decode(errors="replace"))  # it names the stage

    @staticmethod
    def tensor(t):
        """A [batch, seq, heads, head_dim] torch tensor (or a view) as FaCapiTensor."""
        return FaCapiTensor(t.data_ptr(), t.stride(0), t.stride(1), t.stride(2))

    @staticmethod
    def params(q, k, v, o, causal=False, softmax_scale=None, alibi=None, num_splits=0):
        """The call of one attention forward: q, o [B, Sq, H, D] and k, v [B, Skv, KVH, D] torch
        tensors of one dtype (fp16 or bf16) on the GPU; alibi: None or an fp32 [H] tensor on the GPU,
        one slope per head shared by the batch (the caller keeps it alive while it is used);
        num_splits: 0 (the stage chooses) or a split-KV count for a stage that declares split_kv."""
        import torch
        dtype = {torch.float16: 0, torch.bfloat16: 1}[q.dtype]
        batch, seq_q, heads, head_dim = q.shape
        return FaCapiParams(
            q=FaCapi.tensor(q), k=FaCapi.tensor(k), v=FaCapi.tensor(v), o=FaCapi.tensor(o),
            dtype=dtype, causal=1 if causal else 0, batch=batch, heads=heads, kv_heads=k.shape[2],
            seq_q=seq_q, seq_kv=k.shape[1], head_dim=head_dim,
            softmax_scale=softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(head_dim),
            lse=None, lse_batch_stride=0, lse_head_stride=0,
            alibi=None if alibi is None else alibi.data_ptr(), alibi_batch_stride=0, num_splits=num_splits)
