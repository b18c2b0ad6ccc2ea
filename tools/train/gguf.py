"""A minimal GGUF (version 3) writer: metadata key/values and F32/F16
tensors, 32-byte aligned, in the layout llama.cpp and clade read."""
import struct

import numpy as np

ALIGN = 32
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR = 4, 5, 6, 7, 8, 9
GGML_F32, GGML_F16 = 0, 1


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(v):
    if isinstance(v, bool):
        return struct.pack("<I", T_BOOL), struct.pack("<B", v)
    if isinstance(v, int):
        return struct.pack("<I", T_U32 if v >= 0 else T_I32), struct.pack("<I" if v >= 0 else "<i", v)
    if isinstance(v, float):
        return struct.pack("<I", T_F32), struct.pack("<f", v)
    if isinstance(v, str):
        return struct.pack("<I", T_STR), _str(v)
    if isinstance(v, tuple):  # ("i32" | "f32" | "str", [items])
        kind, items = v
        code, pack = {"i32": (T_I32, lambda x: struct.pack("<i", x)),
                      "f32": (T_F32, lambda x: struct.pack("<f", x)),
                      "str": (T_STR, _str)}[kind]
        body = b"".join(pack(x) for x in items)
        return struct.pack("<I", T_ARR), struct.pack("<IQ", code, len(items)) + body
    raise TypeError("unsupported metadata value %r" % (v,))


def write(path, meta, tensors):
    """meta: dict of key -> value (bool, int, float, str or a typed array
    tuple); tensors: list of (name, numpy array float32 or float16) whose
    numpy shape is [rows, cols] (GGUF dims are written innermost first)."""
    out = bytearray()
    out += b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for k, v in meta.items():
        t, body = _value(v)
        out += _str(k) + t + body
    offset = 0
    blobs = []
    for name, a in tensors:
        a = np.ascontiguousarray(a)
        kind = {np.dtype(np.float32): GGML_F32, np.dtype(np.float16): GGML_F16}[a.dtype]
        out += _str(name) + struct.pack("<I", a.ndim)
        for d in reversed(a.shape):
            out += struct.pack("<Q", d)
        out += struct.pack("<IQ", kind, offset)
        blobs.append(a.tobytes())
        offset += len(blobs[-1])
        offset += -offset % ALIGN
    out += b"\0" * (-len(out) % ALIGN)
    with open(path, "wb") as f:
        f.write(out)
        for b in blobs:
            f.write(b)
            f.write(b"\0" * (-len(b) % ALIGN))
