#!/usr/bin/env python3
"""common/c_api.h through ctypes (tools/fa_capi.py), on any machine: every call below is one that the
library must refuse before touching the GPU, so no GPU is needed and none is used.

    python3 tests/test_c_api.py build/libfa_capi.so

Checks: the library lists exactly the stages of stages/*/stage.json, in order; its FaCapiParams and
FaCapiBackwardParams have the sizes of the Python mirrors; an unknown stage and a bad dtype come
back as messages (codes 2 and 1); and calls the launcher's validation rejects come back with its
message naming the values the library read from the struct (kv_heads, heads, head_dim, the sizes,
causal, num_splits), so a field at the wrong offset in either copy of the struct shows; and the
library is linked with -Bsymbolic and opened with RTLD_DEEPBIND (what keeps an imported PyTorch's
exported C++-runtime code out of it).
Exit 0 if all hold, 1 otherwise.
"""

import ctypes
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

from fa_capi import DLOPEN_MODE, FaCapi, FaCapiBackwardParams, FaCapiError, FaCapiParams, FaCapiTensor  # noqa: E402
import stages  # noqa: E402

failures = []


def check(condition, what):
    print("%s  %s" % ("ok  " if condition else "FAIL", what))
    if not condition:
        failures.append(what)


def params(**fields):
    """A call that is plausible but for the fields given; pointers are fake (never dereferenced:
    every call here is rejected by validation first)."""
    fake = FaCapiTensor(0x10000, 128 * 4 * 64, 4 * 64, 64)
    p = FaCapiParams(q=fake, k=fake, v=fake, o=fake, dtype=0, causal=0, batch=2, heads=4, kv_heads=4,
                     seq_q=128, seq_kv=128, head_dim=64, softmax_scale=0.125)
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def rejected(lib, stage, p):
    try:
        lib.launch(stage, p)
    except FaCapiError as e:
        return str(e)
    return None


DT_FLAGS, DF_SYMBOLIC = 30, 0x2


def dynamic_flags(path):
    """DT_FLAGS of a 64-bit little-endian ELF shared library (0 if it has none): read from the
    PT_DYNAMIC segment, no readelf needed."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return 0
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
        if p_type == 2:  # PT_DYNAMIC: (d_tag, d_val) pairs up to DT_NULL
            for off in range(p_offset, p_offset + p_filesz, 16):
                tag, val = struct.unpack_from("<qQ", data, off)
                if tag == 0:
                    break
                if tag == DT_FLAGS:
                    return val
    return 0


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    lib = FaCapi(sys.argv[1])  # raises if the struct sizes differ
    check(True, "FaCapiParams: %d bytes in the library and in python/flash_stages/_capi_structs.py (tools/fa_capi.py's)"
          % lib.lib.fa_capi_params_size())
    lib.lib.fa_capi_backward_params_size.restype = ctypes.c_int
    check(lib.lib.fa_capi_backward_params_size() == ctypes.sizeof(FaCapiBackwardParams),
          "FaCapiBackwardParams: %d bytes in the library, %d in python/flash_stages/_capi_structs.py" % (
              lib.lib.fa_capi_backward_params_size(), ctypes.sizeof(FaCapiBackwardParams)))
    expected = [s.name for s in stages.all_stages()]
    names = lib.stage_names()
    check(names == expected, "the library has the %d stages of stages/<track>/*/stage.json, in order" % len(expected))
    newest = names[-1]

    message = rejected(lib, "99_no_such_stage", params())
    check(message is not None and "no stage named '99_no_such_stage'" in message, "unknown stage: %r" % message)
    message = rejected(lib, newest, params(dtype=7))
    check(message is not None and "dtype must be 0 (fp16) or 1 (bf16)" in message, "bad dtype: %r" % message)
    message = rejected(lib, newest, params(kv_heads=3))
    check(message is not None and "kv_heads 3 must be at least 1 and divide heads 4" in message,
          "kv_heads and heads read from the struct: %r" % message)
    message = rejected(lib, newest, params(head_dim=96))
    check(message is not None and "head_dim 96 is not supported" in message, "head_dim read: %r" % message)
    message = rejected(lib, newest, params(batch=5, seq_q=0, seq_kv=7))
    check(message is not None and "batch 5, heads 4, seq_q 0" in message and "seq_kv 7" in message,
          "batch, seq_q, seq_kv read: %r" % message)
    message = rejected(lib, names[0], params(causal=1))
    check(message is not None and "causal masking is not supported" in message,
          "causal read (%s does not declare it): %r" % (names[0], message))
    message = rejected(lib, names[0], params(num_splits=3))
    check(message is not None and "num_splits 3" in message and "\"split_kv\"" in message,
          "num_splits read (%s does not declare split_kv): %r" % (names[0], message))
    message = rejected(lib, newest, params(num_splits=-2))
    check(message is not None and "num_splits -2 must be 0" in message, "a negative num_splits: %r" % message)

    # Loaded into a process that has PyTorch's libraries (which export copies of some C++-runtime
    # template code), a refused call's message crashed: the library binds its own definitions to
    # itself (-Bsymbolic, DT_FLAGS SYMBOLIC) and the loaders open it with RTLD_DEEPBIND.
    check(dynamic_flags(sys.argv[1]) & DF_SYMBOLIC != 0, "the library is linked with -Bsymbolic (DT_FLAGS has SYMBOLIC)")
    check(sys.platform != "linux" or DLOPEN_MODE & os.RTLD_DEEPBIND != 0,
          "tools/fa_capi.py opens it with RTLD_DEEPBIND")

    print("%d check(s) failed" % len(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
