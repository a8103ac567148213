"""The ctypes mirrors of the C interface's structs, field by field: FaCapiTensor and FaCapiParams
(common/c_api.h), FaCapiBackwardParams (common/c_api_backward.h), and the mode the library is opened
with. The one copy: the package uses it through _library.py, and the tools (tools/fa_capi.py, and
through it tools/backward_bench.py) load this file by its path. The library reports its own sizeof of
each struct, and every loader refuses a mismatch rather than read fields at the wrong offsets.

Standard library only, and nothing imported from the package, so that a tool can load this file by
itself: no PyTorch, no flash_stages/__init__.py.
"""

import ctypes
import os

# RTLD_DEEPBIND: the library's own references resolve in it and its dependencies (the C++ runtime
# it was linked against) before the symbols the process already has. PyTorch's libraries export
# copies of some C++-runtime template code; in a process that imported torch, a refused call's
# error message (built with std::ostringstream) crashed on the GPU machine. Linux/glibc only.
DLOPEN_MODE = getattr(os, "RTLD_DEEPBIND", 0) | getattr(os, "RTLD_LOCAL", 0)


class FaCapiTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("batch_stride", ctypes.c_int64), ("seq_stride", ctypes.c_int64),
                ("head_stride", ctypes.c_int64)]


class FaCapiParams(ctypes.Structure):
    _fields_ = [("q", FaCapiTensor), ("k", FaCapiTensor), ("v", FaCapiTensor), ("o", FaCapiTensor),
                ("dtype", ctypes.c_int32), ("causal", ctypes.c_int32),
                ("batch", ctypes.c_int64), ("heads", ctypes.c_int64), ("kv_heads", ctypes.c_int64),
                ("seq_q", ctypes.c_int64), ("seq_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("softmax_scale", ctypes.c_float),
                ("lse", ctypes.c_void_p), ("lse_batch_stride", ctypes.c_int64), ("lse_head_stride", ctypes.c_int64),
                ("alibi", ctypes.c_void_p), ("alibi_batch_stride", ctypes.c_int64),
                ("num_splits", ctypes.c_int32), ("seqlens_k", ctypes.c_void_p),
                ("block_table", ctypes.c_void_p), ("block_table_batch_stride", ctypes.c_int64),
                ("max_pages", ctypes.c_int64), ("page_size", ctypes.c_int32)]


class FaCapiBackwardParams(ctypes.Structure):
    _fields_ = [("q", FaCapiTensor), ("k", FaCapiTensor), ("v", FaCapiTensor), ("o", FaCapiTensor),
                ("d_o", FaCapiTensor), ("dq", FaCapiTensor), ("dk", FaCapiTensor), ("dv", FaCapiTensor),
                ("dtype", ctypes.c_int32), ("causal", ctypes.c_int32), ("deterministic", ctypes.c_int32),
                ("batch", ctypes.c_int64), ("heads", ctypes.c_int64), ("kv_heads", ctypes.c_int64),
                ("seq_q", ctypes.c_int64), ("seq_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("softmax_scale", ctypes.c_float),
                ("lse", ctypes.c_void_p), ("lse_batch_stride", ctypes.c_int64), ("lse_head_stride", ctypes.c_int64)]
