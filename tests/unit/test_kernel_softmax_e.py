"""`softmax_e` (whole rows per worker, f16 arithmetic, e unnormalized with each row's (m, l)) on the simulator:
bit-exact against its numpy semantics, the same e as `softmax_split_e` and (m, l) as `softmax_split_e` +
`sms_stats` up to the sum's order, valid lengths (a masked last atom, garbage padding without influence, zeros
after the valid columns), strided (m, l) pairs inside result rows, in place, the estimate exact for even and odd
atom counts and idle workers; and the key-split attention's choice of it."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.harness import run_call
from ipu.backend.lower import nnops
from ipu.backend.target import IPU21, Target
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = R.library_asm(TARGET.sram_base)
X, OUT, ML, FRAME = 0x60000, 0x70000, 0x7C000, 0x5C000


def _scores(rows, n, valid, seed, scale=4.0):
    """Scores with garbage in the padding: the last valid atom's other lanes anything but NaN (min-masked to -inf),
    the atoms after it NaN (never read)."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, n)) * scale + rng.standard_normal((rows, 1)) * 8).astype(np.float16)
    va = 4 * -(-valid // 4)
    x[:, valid:va] = np.array([np.inf, 60000.0, -np.inf], np.float16)[: va - valid]
    x[:, va:] = np.nan
    return x


def _run(k: R.Rows, x: np.ndarray, out: int = OUT, out_words: int | None = None):
    """Runs k over x (at X, or in place when k.in0 == out) with the outputs pre-filled with NaN: (output f16,
    the (m, l) area as f32 [rows, stride / 4], cycles). The estimate must equal the simulator's count."""
    sim = Simulator(TARGET)
    words = out_words if out_words is not None else k.rows * k.n
    stride = k.ml_stride
    mem = {out: np.full(words, np.nan, np.float16), ML: np.full(k.rows * stride // 4, np.nan, np.float32)}
    mem[k.in0] = x
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, mem)
    assert R.cycles(k) == cyc, (R.cycles(k), cyc)
    got = sim.read(out, words * 2, np.float16, tiles=[0]).reshape(-1)
    ml = sim.read(ML, k.rows * stride, np.float32, tiles=[0]).reshape(k.rows, -1)
    return got, ml, cyc


# (rows, n, valid): So400m's key-split cells (32 and 25 query rows over 183 / 182 keys, padded to 192), one valid
# lane in the last atom, valid % 4 == 2 / 3, one atom (no max loop, no pairs), two atoms, no padding, fewer rows
# than workers (idle workers), an odd and an even count of atoms before the last.
CASES = [
    (32, 192, 183),
    (25, 192, 182),
    (7, 48, 41),
    (3, 96, 82),
    (2, 48, 47),
    (4, 16, 3),
    (6, 16, 8),
    (5, 64, 64),
    (13, 80, 77),
    (1, 736, 729),
]


@pytest.mark.parametrize("rows,n,valid", CASES)
def test_softmax_e(rows, n, valid):
    x = _scores(rows, n, valid, rows * 1000 + n + valid)
    k = R.Rows("softmax_e", rows, n, in0=X, out=OUT, st0=ML, valid=valid)
    got, ml, _ = _run(k, x)
    got = got.reshape(rows, n)
    want = R.semantics(k, x)
    np.testing.assert_array_equal(got.view(np.uint16), want["out"].view(np.uint16))
    np.testing.assert_array_equal(ml.view(np.uint32), want["ml"].view(np.uint32))
    assert (got[:, valid:].view(np.uint16) == 0).all()  # masked lanes and zero atoms: +0
    xv = x[:, :valid].astype(np.float64)
    np.testing.assert_array_equal(ml[:, 0], xv.max(1))
    e = np.exp(xv - xv.max(1, keepdims=True))
    np.testing.assert_allclose(got[:, :valid].astype(np.float64), e, atol=1e-3, rtol=2e-3)
    np.testing.assert_allclose(ml[:, 1], e.sum(1), rtol=1e-3)


@pytest.mark.parametrize("rows,n,valid", [(32, 192, 183), (8, 368, 365), (3, 32, 21)])
def test_softmax_e_against_split(rows, n, valid):
    """The same e bits as `softmax_split_e` (the same max, f16 difference and exponential); (m, l) as
    `softmax_split_e` + `sms_stats`: the same m, l within the f16 pair sums' roundings (the pairs and the order of
    the f32 sum differ: one slice instead of six)."""
    x = _scores(rows, n, valid, 5 + rows)
    mine = R.semantics(R.Rows("softmax_e", rows, n, valid=valid), x)
    split = R.semantics(R.Rows("softmax_split_e", rows, n, valid=valid), x)
    np.testing.assert_array_equal(mine["out"].view(np.uint16), split["out"].view(np.uint16))
    parts = split["partials"]
    np.testing.assert_array_equal(mine["ml"][:, 0], parts[:, :6].max(1))
    np.testing.assert_allclose(mine["ml"][:, 1], parts[:, 6:].astype(np.float64).sum(1), rtol=2e-3)


def test_softmax_e_padding_has_no_influence():
    rows, n, valid = 5, 192, 182
    x = _scores(rows, n, valid, 11)
    k = R.Rows("softmax_e", rows, n, in0=X, out=OUT, st0=ML, valid=valid)
    want = R.semantics(k, x)
    x2 = x.copy()
    x2[:, valid:] = np.float16(-1.0)
    got, ml, _ = _run(k, x2)
    np.testing.assert_array_equal(got.reshape(rows, n).view(np.uint16), want["out"].view(np.uint16))
    np.testing.assert_array_equal(ml.view(np.uint32), want["ml"].view(np.uint32))


def test_softmax_e_in_place_strided_pairs():
    """Rows inside a wider buffer, in place (the attention's S^T-transposed scores in A), the (m, l) pairs at the
    end of 74-word result rows: only the rows' n elements and the pairs change."""
    rows, n, valid, stride = 9, 96, 90, 224
    rng = np.random.default_rng(9)
    buf = (rng.standard_normal((rows, stride // 2)) * 3).astype(np.float16)
    ml_stride = 8 * 37
    k = R.Rows(
        "softmax_e", rows, n, in0=OUT, out=OUT, st0=ML + 8 * 36, st1=ml_stride, valid=valid,
        in_stride=stride, out_stride=stride,
    )  # fmt: skip
    got, ml, _ = _run(k, buf, out_words=buf.size)
    got = got.reshape(rows, stride // 2)
    want = R.semantics(R.Rows("softmax_e", rows, n, valid=valid), buf[:, :n].copy())
    np.testing.assert_array_equal(got[:, :n].view(np.uint16), want["out"].view(np.uint16))
    np.testing.assert_array_equal(got[:, n:].view(np.uint16), buf[:, n:].view(np.uint16))  # untouched
    np.testing.assert_array_equal(ml[:, 72:74].view(np.uint32), want["ml"].view(np.uint32))
    assert np.isnan(ml[:, :72]).all()  # the result rows' o columns: not written


def test_softmax_e_rejects_misaligned_pairs():
    with pytest.raises(ValueError, match="softmax_e: the \\(m, l\\) pairs"):
        R.Rows("softmax_e", 2, 16, st0=2)
    with pytest.raises(ValueError, match="stride of at least 8"):
        R.Rows("softmax_e", 2, 16, st1=4)


def test_key_split_attention_takes_softmax_e():
    """So400m's key-split cells (32 query rows over 183 keys): `softmax_e` is the cheaper choice (estimates) where
    the O GEMM cannot form the row sums (O = P V here), and the cell's program runs it in place of
    `softmax_split_e` + `sms_stats` when chosen."""
    sz = nnops.attention_sizes(32, 183, 72, IPU21.region1_element_bytes)
    assert nnops.softmax_kernel(sz, stats=True) == "softmax_e"
    split = R.cycles(R.Rows("softmax_split_e", 32, sz.spad, st0=0, valid=183)) + R.cycles(
        R.Rows("sms_stats", 32, 4, in_stride=R.SMS_PART, out_stride=296)
    )
    assert R.cycles(R.Rows("softmax_e", 32, sz.spad, st0=0, st1=296, valid=183)) < 0.7 * split
    kw = dict(qa=0, ka=0x1000, va=0x2000, m=25, out=0x3000, scale=0.125, c_area=0x80000, a_area=0x88000,
              panels=0x90000, esizes=(2, 2, 2, 4), stats=True, o_stride=74 * 4, pv_transposed=False)  # fmt: skip
    labels = [label for label, _ in nnops.attention_program(sz, **kw)]
    calls = dict(nnops.attention_program(sz, **kw))
    assert "softmax (m, l)" not in labels and calls["softmax"].op == "softmax_e"
    sm = calls["softmax"]
    assert (sm.rows, sm.st0, sm.ml_stride) == (25, 0x3000 + 72 * 4, 74 * 4)
    forced = dict(nnops.attention_program(sz, softmax="softmax_split", **kw))
    assert forced["softmax"].op == "softmax_split_e" and "softmax (m, l)" in forced
