"""Row kernels for padded attention: softmax over the first `valid` columns of padded rows (the padded columns
written as zeros), `to_f16` (f32 rows -> scaled f16 rows with zero padding) and `to_f32` (strided f16 rows -> f32
rows). On the simulator: bit-exact against the numpy semantics, the estimate equal to the simulator's cycles, the
padded inputs (NaN, inf, large values) without influence, the padded outputs zero."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.harness import run_call
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = R.library_asm(TARGET.sram_base)
X, OUT, FRAME = 0x60000, 0x70000, 0x5C000


def _run(k: R.Rows, mem: dict, out_bytes: int, out_fill: np.ndarray) -> tuple[np.ndarray, int]:
    """Runs k; the output area is pre-filled with `out_fill` (bytes); returns (output bytes, cycles)."""
    sim = Simulator(TARGET)
    mem = dict(mem)
    mem[OUT] = out_fill
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, mem)
    got = sim.read(OUT, out_bytes, np.uint8, tiles=[0]).reshape(-1)
    assert R.cycles(k) == cyc, (R.cycles(k), cyc)
    return got, cyc


def _nan_fill(nbytes: int) -> np.ndarray:
    return np.full(nbytes // 2, np.nan, np.float16).view(np.uint8)


def _softmax64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


# (rows, n, valid): valid % 4 in {0, 1, 2, 3}, one valid element, a single atom, So400m's 729 of 736.
SOFTMAX = [
    (1, 4, 1),
    (4, 8, 5),
    (3, 16, 16),
    (7, 96, 81),
    (6, 20, 2),
    (13, 32, 31),
    (2, 736, 729),
    (5, 12, 3),
]


@pytest.mark.parametrize("rows,n,valid", SOFTMAX)
def test_softmax_valid(rows, n, valid):
    rng = np.random.default_rng(rows * 1000 + n + valid)
    x = (rng.standard_normal((rows, n)) * 4).astype(np.float16)
    # Padding: the last valid atom's other lanes may hold anything but NaN (they are min-masked to -inf); the
    # atoms after it are not read at all.
    va = 4 * -(-valid // 4)
    x[:, valid:va] = np.array([np.inf, 60000.0, -np.inf], np.float16)[: va - valid]
    x[:, va:] = np.nan
    k = R.Rows("softmax", rows, n, in0=X, out=OUT, valid=valid)
    got, _ = _run(k, {X: x}, rows * n * 2, _nan_fill(rows * n * 2))
    got = got.view(np.float16).reshape(rows, n)
    want = R.semantics(k, x)["out"]
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert (got[:, valid:].view(np.uint16) == 0).all()  # padded columns: +0
    np.testing.assert_allclose(
        got[:, :valid].astype(np.float64), _softmax64(x[:, :valid]), atol=2e-3, rtol=3e-3
    )
    # The padded input columns have no influence: other garbage, same bits.
    x2 = x.copy()
    x2[:, valid:] = np.float16(-1.0)
    np.testing.assert_array_equal(R.semantics(k, x2)["out"].view(np.uint16), want.view(np.uint16))


def test_softmax_valid_equals_unpadded():
    """valid == n is the plain softmax; a padded row gives the unpadded row's values (then zeros)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 20)) * 3).astype(np.float16)
    plain = R.semantics(R.Rows("softmax", 4, 20), x)["out"]
    xp = np.concatenate([x, np.full((4, 12), np.nan, np.float16)], 1)
    padded = R.semantics(R.Rows("softmax", 4, 32, valid=20), xp)["out"]
    np.testing.assert_array_equal(padded[:, :20].view(np.uint16), plain.view(np.uint16))


def test_softmax_valid_strided_in_place():
    """Rows inside wider buffers (the S / P scratch of attention), in place."""
    rows, n, valid, stride = 5, 24, 22, 64
    rng = np.random.default_rng(9)
    buf = (rng.standard_normal((rows, stride // 2)) * 2).astype(np.float16)
    k = R.Rows("softmax", rows, n, in0=OUT, out=OUT, valid=valid, in_stride=stride, out_stride=stride)
    got, _ = _run(k, {}, buf.nbytes, buf.view(np.uint8).reshape(-1))
    got = got.view(np.float16).reshape(rows, stride // 2)
    want = R.semantics(R.Rows("softmax", rows, n, valid=valid), buf[:, :n].copy())["out"]
    np.testing.assert_array_equal(got[:, :n].view(np.uint16), want.view(np.uint16))
    np.testing.assert_array_equal(got[:, n:].view(np.uint16), buf[:, n:].view(np.uint16))  # untouched


@pytest.mark.parametrize(
    "rows,n,valid,scale",
    [(1, 8, 4, 1.0), (7, 32, 24, 0.2041), (13, 80, 72, 0.1178), (4, 16, 16, -3.0), (6, 32, 0, 1.0)],
)
def test_to_f16(rows, n, valid, scale):
    rng = np.random.default_rng(rows + n + valid)
    x = (rng.standard_normal((rows, valid)) * 5).astype(np.float32)
    if valid:
        x[0, 0] = 1e6  # overflows f16
    k = R.Rows("to_f16", rows, n, in0=X, out=OUT, valid=valid, scale=scale)
    mem = {X: x} if valid else {}
    got, _ = _run(k, mem, rows * n * 2, _nan_fill(rows * n * 2))
    got = got.view(np.float16).reshape(rows, n)
    want = R.semantics(k, x)["out"]
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(want[:, :valid], (x * np.float32(scale)).astype(np.float16))
    assert (got[:, valid:].view(np.uint16) == 0).all()


def test_to_f16_strided():
    """Input rows inside a wider f32 buffer, output rows inside a wider f16 buffer (the rest untouched)."""
    rows, n, valid = 5, 16, 12
    rng = np.random.default_rng(3)
    x = rng.standard_normal((rows, 20)).astype(np.float32)  # rows of 80 bytes, 48 read
    k = R.Rows("to_f16", rows, n, in0=X, out=OUT, valid=valid, in_stride=80, out_stride=48)
    fill = np.full((rows, 24), 7.0, np.float16)
    got, _ = _run(k, {X: x}, fill.nbytes, fill.view(np.uint8).reshape(-1))
    got = got.view(np.float16).reshape(rows, 24)
    np.testing.assert_array_equal(got[:, :valid], x[:, :valid].astype(np.float16))
    assert (got[:, valid:n] == 0).all() and (got[:, n:] == 7.0).all()


@pytest.mark.parametrize("rows,n,in_stride", [(1, 4, 8), (3, 24, 64), (13, 72, 160), (8, 72, 160)])
def test_to_f32(rows, n, in_stride):
    rng = np.random.default_rng(rows * n)
    buf = (rng.standard_normal((rows, in_stride // 2)) * 100).astype(np.float16)
    buf[:, n:] = np.nan  # padding: not read into the result
    k = R.Rows("to_f32", rows, n, in0=X, out=OUT, in_stride=in_stride)
    got, _ = _run(k, {X: buf}, rows * n * 4, np.zeros(rows * n * 4, np.uint8))
    got = got.view(np.float32).reshape(rows, n)
    np.testing.assert_array_equal(got, buf[:, :n].astype(np.float32))
    np.testing.assert_array_equal(got, R.semantics(k, buf[:, :n].copy())["out"])


def test_valid_length_checks():
    with pytest.raises(ValueError):
        R.Rows("softmax", 2, 8, valid=0)
    with pytest.raises(ValueError):
        R.Rows("softmax", 2, 8, valid=9)
    with pytest.raises(ValueError):
        R.Rows("to_f16", 2, 16, valid=6)
    with pytest.raises(ValueError):
        R.Rows("layernorm", 2, 16, valid=8)


def test_estimate_grows_with_valid_atoms_only():
    """The estimate counts the masked and zero atoms: more valid atoms cost more than zero ones."""
    a = R.cycles(R.Rows("softmax", 8, 736, valid=729))
    b = R.cycles(R.Rows("softmax", 8, 736, valid=129))
    assert a > b > R.cycles(R.Rows("softmax", 8, 132, valid=129))


@pytest.mark.parametrize(
    "rows,n,valid,in_stride", [(1, 8, 4, None), (7, 32, 24, None), (13, 80, 72, 160), (5, 16, 0, None)]
)
def test_pad_f16(rows, n, valid, in_stride):
    """f16 rows (any bits, NaN included) copied into rows of n, zeros after the valid elements."""
    rng = np.random.default_rng(rows + n + valid)
    width = (in_stride or valid * 2) // 2
    x = (rng.standard_normal((rows, max(width, 1))) * 5).astype(np.float16)
    if valid:
        x[0, 0] = np.nan
    k = R.Rows("pad_f16", rows, n, in0=X, out=OUT, valid=valid, in_stride=in_stride)
    got, _ = _run(k, {X: x} if valid else {}, rows * n * 2, _nan_fill(rows * n * 2))
    got = got.view(np.uint16).reshape(rows, n)
    np.testing.assert_array_equal(got[:, :valid], x[:, :valid].view(np.uint16))
    assert (got[:, valid:] == 0).all()
    want = R.semantics(k, x[:, :valid].copy())["out"]
    np.testing.assert_array_equal(got, want.view(np.uint16))


@pytest.mark.parametrize(
    "rows,n,valid,in_stride",
    [(1, 4, 4, None), (1, 8, 4, None), (7, 32, 24, None), (13, 80, 72, 320), (6, 16, 8, None)],
)
def test_cast_f16(rows, n, valid, in_stride):
    """The pipelined f32 -> f16 row cast equals to_f16 without scale (one atom per row included)."""
    rng = np.random.default_rng(rows * n + valid)
    width = (in_stride or valid * 4) // 4
    x = (rng.standard_normal((rows, width)) * 1000).astype(np.float32)
    x[0, 0] = 1e6  # overflows f16
    k = R.Rows("cast_f16", rows, n, in0=X, out=OUT, valid=valid, in_stride=in_stride)
    got, _ = _run(k, {X: x}, rows * n * 2, _nan_fill(rows * n * 2))
    got = got.view(np.uint16).reshape(rows, n)
    want = R.semantics(R.Rows("to_f16", rows, n, valid=valid), x[:, :valid].copy())["out"]
    np.testing.assert_array_equal(got, want.view(np.uint16))
    np.testing.assert_array_equal(got, R.semantics(k, x[:, :valid].copy())["out"].view(np.uint16))
    assert (got[:, valid:] == 0).all()
    assert R.cycles(k) < R.cycles(R.Rows("to_f16", rows, n, valid=valid)) or valid == 4


def test_cast_f16_needs_an_atom():
    with pytest.raises(ValueError):
        R.Rows("cast_f16", 2, 8, valid=0)
