#!/usr/bin/env python3
"""Writes tests/data/kernels/iquant_blocks.bin: random blocks of every i-quant type and MXFP4
with llama.cpp's own dequantization of them (ggml's type traits' to_float, called in
libggml-base through ctypes), the oracle of tests/kernels/iquant_blocks_test.cc.

Usage: scripts/reference/make_iquant_blocks.py LIBGGML_BASE_SO [OUT]
(scripts/reference/README.md says which llama.cpp build wrote the committed file). Deterministic.

Format (little-endian): "BIQB", u32 version 1, u32 n_types, then per type:
u32 ggml type id, u32 n_values, u32 n_bytes, the blocks' bytes, f32 values[n_values].
"""
import ctypes
import struct
import sys

import numpy as np

# ggml type id: (name, values per block, bytes per block)
TYPES = {
    16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98),
    19: ("iq1_s", 256, 50), 20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110),
    22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136), 29: ("iq1_m", 256, 56),
    39: ("mxfp4", 32, 17),
}
N_VALUES = 1024


class TypeTraits(ctypes.Structure):
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p),
                ("from_float_ref", ctypes.c_void_p)]


TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


def random_scale_bits(rng):
    """An f16 block scale of either sign between 2^-12 and 2^2, as its bits."""
    magnitude = np.float16(2.0 ** rng.uniform(-12, 2))
    value = -magnitude if rng.random() < 0.5 else magnitude
    return int(np.array(value, dtype=np.float16).view(np.uint16))


def random_blocks(type_id, n_blocks, block_bytes, rng):
    data = bytearray(rng.integers(0, 256, n_blocks * block_bytes, dtype=np.uint8).tobytes())
    for b in range(n_blocks):
        base = b * block_bytes
        if type_id == 39:  # MXFP4: E8M0 exponents, the extremes included
            data[base] = [0, 1, 2, 127, 250][b] if b < 5 else int(rng.integers(100, 150))
        elif type_id == 29:  # IQ1_M: the f16 scale in the top nibbles of four u16 scales
            d = random_scale_bits(rng)
            for k in range(4):
                off = base + 48 + 2 * k
                word = struct.unpack_from("<H", data, off)[0] & 0x0FFF
                struct.pack_into("<H", data, off, word | (((d >> (4 * k)) & 0xF) << 12))
        else:
            struct.pack_into("<H", data, base, random_scale_bits(rng))
    return bytes(data)


def main():
    lib = ctypes.CDLL(sys.argv[1])
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    out_path = sys.argv[2] if len(sys.argv) > 2 else "tests/data/kernels/iquant_blocks.bin"
    rng = np.random.default_rng(45)
    out = bytearray(b"BIQB" + struct.pack("<II", 1, len(TYPES)))
    for type_id, (name, block_size, block_bytes) in TYPES.items():
        traits = lib.ggml_get_type_traits(type_id).contents
        assert traits.type_name.decode() == name, (traits.type_name, name)
        assert traits.blck_size == block_size and traits.type_size == block_bytes, name
        n_blocks = N_VALUES // block_size
        blocks = random_blocks(type_id, n_blocks, block_bytes, rng)
        values = (ctypes.c_float * N_VALUES)()
        buf = ctypes.create_string_buffer(blocks, len(blocks))
        TO_FLOAT(traits.to_float)(ctypes.cast(buf, ctypes.c_void_p), values, N_VALUES)
        out += struct.pack("<III", type_id, N_VALUES, len(blocks)) + blocks
        out += struct.pack(f"<{N_VALUES}f", *values)
        print(f"{name}: {n_blocks} blocks, |max| {max(abs(v) for v in values):.4g}")
    open(out_path, "wb").write(out)


if __name__ == "__main__":
    main()
