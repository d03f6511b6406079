"""The simulator's fast float16 conversions are bit-identical to numpy's."""

import numpy as np

from ipu.runtime.halfconv import f16_bits_to_f32, f32_to_f16_bits


def test_every_half_converts_to_float32_exactly():
    bits = np.arange(1 << 16, dtype=np.uint16)
    ref = bits.view(np.float16).astype(np.float32)
    got = f16_bits_to_f32(bits)
    same = (got.view(np.uint32) == ref.view(np.uint32)) | (np.isnan(got) & np.isnan(ref))
    assert same.all()


def test_float32_to_half_rounds_like_numpy_including_ties_and_specials():
    halves = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    ties = ((halves[:-1] + halves[1:]) / 2).astype(np.float32)  # exactly halfway: round to even
    near = np.nextafter(ties, np.float32(np.inf)).astype(np.float32)
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            ties,
            -ties,
            near,
            rng.standard_normal(100_000).astype(np.float32) * 300,
            np.float32(
                [0.0, -0.0, 65504, 65519.99, 65520, 1e30, -1e30, np.inf, -np.inf, 2**-14, 2**-24, 2**-26]
            ),
        ]
    )
    with np.errstate(all="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    np.testing.assert_array_equal(f32_to_f16_bits(x), ref)
    nan = f32_to_f16_bits(np.float32([np.nan, -np.nan]))
    assert np.isnan(nan.view(np.float16)).all()
