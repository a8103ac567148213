"""The kernels' C interface (common/c_api.h), loaded with ctypes: no compiled extension, so the package
needs no build of its own and works with any PyTorch; the library is the one CMake builds,
build/libfa_capi.so (target fa_capi).

The structs that mirror common/c_api.h and common/c_api_backward.h field by field are in
_capi_structs.py (which the tools in tools/ load too); the library reports its own sizeof of each,
and a mismatch is refused at load time rather than read at the wrong offsets.

Standard library only: loading and listing stages need no PyTorch.
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path

# FaCapiTensor and FaCapiBackwardParams too: _ops.py reaches the structs through this module.
from ._capi_structs import DLOPEN_MODE, FaCapiBackwardParams, FaCapiParams, FaCapiTensor  # noqa: F401
from . import _checks
from ._stages import REPO


class LibraryError(RuntimeError):
    """libfa_capi.so is missing, cannot be loaded, or does not match this package."""


class LaunchError(RuntimeError):
    """The kernel launch itself failed (the call had passed every check)."""


def library_path() -> Path:
    """FLASH_STAGES_LIB if set, else <repo>/build/libfa_capi.so."""
    env = os.environ.get("FLASH_STAGES_LIB")
    return Path(env) if env else REPO / "build" / "libfa_capi.so"


class Library:
    def __init__(self, path: Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise LibraryError("%s does not exist: build it in the repository with `cmake -S . -B build && cmake --build "
                               "build --target fa_capi`, or point FLASH_STAGES_LIB at a libfa_capi.so" % self.path)
        try:
            lib = ctypes.CDLL(str(self.path), mode=DLOPEN_MODE)
        except OSError as e:
            raise LibraryError("could not load %s: %s" % (self.path, e)) from None
        try:
            lib.fa_capi_params_size.restype = ctypes.c_int
            lib.fa_capi_stage_count.restype = ctypes.c_int
            lib.fa_capi_stage_name.restype = ctypes.c_char_p
            lib.fa_capi_stage_name.argtypes = [ctypes.c_int]
            lib.fa_capi_launch.restype = ctypes.c_int
            lib.fa_capi_launch.argtypes = [ctypes.c_char_p, ctypes.POINTER(FaCapiParams), ctypes.c_void_p,
                                           ctypes.c_char_p, ctypes.c_int]
            lib.fa_capi_backward_params_size.restype = ctypes.c_int
            lib.fa_capi_stage_has_backward.restype = ctypes.c_int
            lib.fa_capi_stage_has_backward.argtypes = [ctypes.c_char_p]
            lib.fa_capi_launch_backward.restype = ctypes.c_int
            lib.fa_capi_launch_backward.argtypes = [ctypes.c_char_p, ctypes.POINTER(FaCapiBackwardParams),
                                                    ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        except AttributeError as e:
            raise LibraryError("%s is not the kernels' C interface (libfa_capi.so): %s" % (self.path, e)) from None
        for struct, size, header in ((FaCapiParams, lib.fa_capi_params_size(), "common/c_api.h"),
                                     (FaCapiBackwardParams, lib.fa_capi_backward_params_size(),
                                      "common/c_api_backward.h")):
            if size != ctypes.sizeof(struct):
                raise LibraryError("%s: %s is %d bytes there and %d here: python/flash_stages/_capi_structs.py no "
                                   "longer mirrors %s" % (self.path, struct.__name__, size, ctypes.sizeof(struct),
                                                          header))
        self._lib = lib
        self.stage_ids = tuple(lib.fa_capi_stage_name(i).decode() for i in range(lib.fa_capi_stage_count()))
        # The stages whose backward pass the library has (the backward track's, whose stage.json
        # declares "backward"), asked once.
        self.backward_stage_ids = tuple(s for s in self.stage_ids if lib.fa_capi_stage_has_backward(s.encode()) == 1)

    def launch(self, stage_id: str, params: FaCapiParams, stream: int) -> None:
        """Issues the launch on `stream` (a cudaStream_t as an int; 0 is the legacy default stream).
        The launcher validates the call first and launches nothing if it fails: that is a ValueError
        (bad input that got past the Python checks, e.g. a length a stage without "any_length" does
        not take); a failed launch is a LaunchError."""
        message = ctypes.create_string_buffer(1024)
        code = self._lib.fa_capi_launch(stage_id.encode(), ctypes.byref(params), stream, message, len(message))
        if code == 0:
            return
        text = message.value.decode(errors="replace")  # starts with the stage id
        # params.cpp's launch_status() words a failed launch so; anything else is the validation's refusal.
        if code == 1 and ": kernel launch failed:" not in text:
            raise ValueError(text)
        raise LaunchError(text)

    def launch_backward(self, stage_id: str, params: FaCapiBackwardParams, stream: int) -> None:
        """Issues a stage's backward pass on `stream` (common/c_api_backward.h). Everything its launcher
        validates has been checked in Python before (the forward's checks, and the choice of a stage
        whose backward declares what the call needs), so any failure, a refusal (nothing launched) or
        a failed launch, is a LaunchError with the launcher's message."""
        message = ctypes.create_string_buffer(1024)
        code = self._lib.fa_capi_launch_backward(stage_id.encode(), ctypes.byref(params), stream, message,
                                                 len(message))
        if code != 0:
            raise LaunchError(message.value.decode(errors="replace"))  # starts with the stage id


def tensor_view(t) -> FaCapiTensor:
    """A [batch, seq, heads, head_dim] tensor as the C interface takes it: its data pointer and the
    strides the kernels step by (_checks.kernel_strides). Reads only what a tensor says about itself,
    so tests/test_python_args.py builds the structs from stand-ins."""
    batch_stride, seq_stride, head_stride = _checks.kernel_strides(t)
    return FaCapiTensor(t.data_ptr(), batch_stride, seq_stride, head_stride)


def backward_params(call, q, k, v, o, d_o, dq, dk, dv, lse, deterministic: bool = False) -> FaCapiBackwardParams:
    """The FaCapiBackwardParams of the backward of `call` (a _checks.Call, checked): the forward's q, k,
    v, o and contiguous fp32 LSE [batch, heads, seq_q], the gradient d_o, the outputs dq, dk, dv; with
    deterministic, the mode that sums dQ in a fixed order (only a backward that declares the feature
    "deterministic" accepts it)."""
    return FaCapiBackwardParams(
        q=tensor_view(q), k=tensor_view(k), v=tensor_view(v), o=tensor_view(o), d_o=tensor_view(d_o),
        dq=tensor_view(dq), dk=tensor_view(dk), dv=tensor_view(dv),
        dtype=_checks.DTYPE_CODES[call.dtype], causal=int(call.causal), deterministic=int(bool(deterministic)),
        batch=call.batch, heads=call.heads, kv_heads=call.kv_heads, seq_q=call.seq_q, seq_kv=call.seq_kv,
        head_dim=call.head_dim, softmax_scale=call.softmax_scale,
        lse=lse.data_ptr(), lse_batch_stride=call.heads * call.seq_q, lse_head_stride=call.seq_q)


_loaded = None
_lock = threading.Lock()


def load() -> Library:
    """The library, loaded on first use (not at import, so that importing the package never fails
    for want of it). A failure is not remembered: a later call tries again, e.g. after a build."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = Library(library_path())
        return _loaded
