"""Fast, exact float16 <-> float32 conversions for the simulator's hot paths.

numpy converts to and from float16 in software, element by element (~2.5 ns an element on this machine), which is
the largest cost of simulating the AMP. Here: float16 -> float32 is a table lookup (64 K entries, 256 KiB), and
float32 -> float16 rounds to nearest-even with integer operations on the bit patterns for the normal range,
falling back to numpy for zeros, subnormals and NaNs. Both give bit-identical results to numpy's `astype`
(tests check every float16 value and rounding ties).
"""

from __future__ import annotations

import numpy as np

F16_TO_F32 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)

_MIN_NORMAL_F16_AS_F32 = np.uint32(0x38800000)  # 2^-14
_F32_INF = np.uint32(0x7F800000)
_REBIAS = np.uint32((127 - 15) << 10)


def f16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """uint16 bit patterns (any shape) -> float32 values."""
    return np.take(F16_TO_F32, bits)


def f32_to_f16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values (any shape) -> uint16 bit patterns of float16, round to nearest even (as numpy)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    b = x.view(np.uint32)
    mag = b & np.uint32(0x7FFFFFFF)
    # drop 13 mantissa bits with round-to-nearest-even, rebias the exponent; carries into the exponent are right
    r = (mag + np.uint32(0xFFF) + ((mag >> np.uint32(13)) & np.uint32(1))) >> np.uint32(13)
    h = np.minimum(r - _REBIAS, np.uint32(0x7C00))  # overflow -> infinity (values >= 65520 round up to it)
    h |= (b >> np.uint32(16)) & np.uint32(0x8000)
    out = h.astype(np.uint16)
    special = (mag < _MIN_NORMAL_F16_AS_F32) | (mag > _F32_INF)  # zero, subnormal results, NaN
    if special.any():
        out[special] = x[special].astype(np.float16).view(np.uint16)
    return out
