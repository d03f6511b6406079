"""FP8 ("quarter") numerics of the IPU21, through ml_dtypes.

Formats (S1 QuarterMetadata, S17): F143 = float8_e4m3fnuz (bias 8, max 240), F152 = float8_e5m2fnuz (bias 16,
max 57344). Both have no infinities, no negative zero and a single NaN encoding 0x80 (the FNUZ definition; for
the IPU itself the NaN encoding is an inference, IPU_FACTS section 5).

Scaling (S1 inlineAssemblerCast.hpp [C]): a value is decode(bits) * 2^scale, so fp8 -> f16 multiplies by 2^scale
and f16 -> fp8 multiplies by 2^-scale before rounding. The scale is a signed 6-bit number.

Overflow (S1 tests "Saturate" / "Nanoo" [C]): when $FP_CTL.NANOO is set, a value beyond the format's range
becomes NaN; otherwise it saturates to +-max. Infinities follow the same rule; NaN stays NaN.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

F143 = 0
F152 = 1
DTYPES = {F143: np.dtype(ml_dtypes.float8_e4m3fnuz), F152: np.dtype(ml_dtypes.float8_e5m2fnuz)}
MAX = {F143: 240.0, F152: 57344.0}
NAN_BITS = 0x80

# Decode tables: fp8 bits -> float32 value (unscaled), one per format.
DECODE = {f: np.arange(256, dtype=np.uint8).view(dt).astype(np.float32) for f, dt in DTYPES.items()}


def scale_from_csr(value: int) -> int:
    """A signed 6-bit scale held in the low bits of a CSR."""
    v = int(value) & 0x3F
    return v - 64 if v & 0x20 else v


def decode(bits: np.ndarray, fmt: int, scale: int = 0) -> np.ndarray:
    """fp8 bits (uint8) -> float32 values times 2^scale."""
    return DECODE[fmt][bits] * np.float32(2.0**scale)


def encode(values: np.ndarray, fmt: int, scale: int = 0, nan_on_overflow: bool = False) -> np.ndarray:
    """float values -> fp8 bits (uint8) of values * 2^-scale, round to nearest even."""
    v = np.asarray(values, dtype=np.float32) * np.float32(2.0 ** (-scale))
    if nan_on_overflow:
        return v.astype(DTYPES[fmt]).view(np.uint8)  # ml_dtypes: beyond the range (after rounding) -> 0x80
    mx = np.float32(MAX[fmt])
    return np.clip(v, -mx, mx).astype(DTYPES[fmt]).view(np.uint8)  # NaN stays NaN (0x80)
