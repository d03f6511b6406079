"""Row kernels (GELU, layer norm, softmax, row sum/max, FlashAttention steps) on the simulator: bit-exact against
the numpy semantics, estimate exact (within 5% required), over row counts with remainders (13), idle workers
(fewer rows than workers: 1, 4), one-atom rows (n = 4) and odd atom counts."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.harness import run_call
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = R.library_asm(TARGET.sram_base)
X, Y, Z, OUT, S0, S1, S2, FRAME = 0x60000, 0x68000, 0x6A000, 0x70000, 0x7C000, 0x7D000, 0x7E000, 0x5C000
SHAPES = [(1, 4), (4, 12), (7, 8), (13, 20)]


def _run(k: R.Rows, mem: dict, outs: dict):
    """outs: name -> (addr, dtype, count)."""
    sim = Simulator(TARGET)
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, mem)
    got = {
        name: sim.read(a, n * np.dtype(dt).itemsize, dt, tiles=[0]).reshape(-1)
        for name, (a, dt, n) in outs.items()
    }
    est = R.cycles(k)
    assert abs(est - cyc) <= 0.05 * cyc, (est, cyc)
    assert est == cyc, (est, cyc)
    return got, cyc


def _same(got, want):
    want = np.ascontiguousarray(want).reshape(-1)
    np.testing.assert_array_equal(np.ascontiguousarray(got).reshape(-1).view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("units", [1, 5, 13, 40])
def test_gelu(units):
    rng = np.random.default_rng(units)
    x = (rng.standard_normal(4 * units) * 3).astype(np.float16)
    x[:4] = [0.0, -300.0, 300.0, -0.0] if units > 1 else x[:4]  # x*x overflows f16 for |x| > 256
    k = R.Rows("gelu", units, in0=X, out=OUT)
    got, _ = _run(k, {X: x}, {"out": (OUT, np.float16, x.size)})
    want = R.semantics(k, x)["out"]
    _same(got["out"], want)
    ref = (
        0.5
        * x.astype(np.float64)
        * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x.astype(np.float64) ** 3)))
    )
    np.testing.assert_allclose(want.astype(np.float64), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("rows,n", SHAPES)
@pytest.mark.parametrize("op", ["rowsum", "rowmax"])
def test_reduce(op, rows, n):
    rng = np.random.default_rng(rows * n)
    x = (rng.standard_normal((rows, n)) * 8).astype(np.float16)
    k = R.Rows(op, rows, n, in0=X, out=OUT)
    got, _ = _run(k, {X: x}, {"out": (OUT, np.float32, rows)})
    want = R.semantics(k, x)["out"]
    _same(got["out"], want)
    ref = x.astype(np.float64).sum(1) if op == "rowsum" else x.max(1)
    np.testing.assert_allclose(want, ref, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("rows,n", SHAPES)
def test_softmax(rows, n):
    rng = np.random.default_rng(rows + n)
    x = (rng.standard_normal((rows, n)) * 4).astype(np.float16)
    k = R.Rows("softmax", rows, n, in0=X, out=OUT)
    got, _ = _run(k, {X: x}, {"out": (OUT, np.float16, x.size)})
    want = R.semantics(k, x)["out"]
    _same(got["out"], want)
    e = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    np.testing.assert_allclose(want.astype(np.float64), e / e.sum(1, keepdims=True), atol=2e-3, rtol=3e-3)


def test_softmax_in_place():
    x = np.random.default_rng(0).standard_normal((6, 16)).astype(np.float16)
    k = R.Rows("softmax", 6, 16, in0=X, out=X)
    got, _ = _run(k, {X: x}, {"out": (X, np.float16, x.size)})
    _same(got["out"], R.semantics(k, x)["out"])


@pytest.mark.parametrize("rows,n", SHAPES)
def test_layernorm(rows, n):
    rng = np.random.default_rng(rows * 7 + n)
    x = (rng.standard_normal((rows, n)) * 3 + 1.5).astype(np.float16)
    w = rng.standard_normal(n).astype(np.float16)
    b = rng.standard_normal(n).astype(np.float16)
    k = R.Rows("layernorm", rows, n, in0=X, in1=Y, in2=Z, out=OUT, eps=1e-5)
    got, _ = _run(k, {X: x, Y: w, Z: b}, {"out": (OUT, np.float16, x.size)})
    want = R.semantics(k, x, w, b)["out"]
    _same(got["out"], want)
    xd = x.astype(np.float64)
    ref = (xd - xd.mean(1, keepdims=True)) / np.sqrt(xd.var(1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(want.astype(np.float64), ref, atol=2e-2, rtol=1e-2)


@pytest.mark.parametrize("rows,n", SHAPES)
def test_flash_attention_steps(rows, n):
    """Two key blocks through stats + merge, then final: equals softmax(S) @ V (within f16 rounding)."""
    rng = np.random.default_rng(rows * 3 + n)
    d = 8
    s_blocks = [(rng.standard_normal((rows, n)) * 3).astype(np.float16) for _ in range(2)]
    v_blocks = [rng.standard_normal((n, d)).astype(np.float16) for _ in range(2)]
    m = np.full(rows, -np.inf, np.float32)
    l_ = np.zeros(rows, np.float32)
    o = np.zeros((rows, d), np.float32)
    for s, v in zip(s_blocks, v_blocks):
        k = R.Rows("flash_stats", rows, n, in0=X, out=OUT, st0=S0, st1=S1, st2=S2)
        got, _ = _run(
            k,
            {X: s, S0: m, S1: l_},
            {
                "out": (OUT, np.float16, s.size),
                "m": (S0, np.float32, rows),
                "l": (S1, np.float32, rows),
                "alpha": (S2, np.float32, rows),
            },
        )
        want = R.semantics(k, s, state={"m": m, "l": l_})
        for name in got:
            _same(got[name], want[name])
        m, l_, alpha, p = want["m"], want["l"], want["alpha"], want["out"]
        pv = (p.astype(np.float32) @ v.astype(np.float32)).astype(np.float16)  # the GEMM's part
        k = R.Rows("flash_merge", rows, d, in0=X, in1=Y, st0=S2)
        got, _ = _run(k, {X: o, Y: pv, S2: alpha}, {"out": (X, np.float32, o.size)})
        want = R.semantics(k, o, pv, state={"alpha": alpha})
        _same(got["out"], want["out"])
        o = want["out"]
    k = R.Rows("flash_final", rows, d, in0=X, out=OUT, st0=S1)
    got, _ = _run(k, {X: o, S1: l_}, {"out": (OUT, np.float16, o.size)})
    want = R.semantics(k, o, state={"l": l_})["out"]
    _same(got["out"], want)
    sc = np.concatenate(s_blocks, 1).astype(np.float64)
    p = np.exp(sc - sc.max(1, keepdims=True))
    ref = (p / p.sum(1, keepdims=True)) @ np.concatenate(v_blocks, 0).astype(np.float64)
    np.testing.assert_allclose(want.astype(np.float64), ref, atol=2e-2, rtol=2e-2)


def test_strided_rows():
    """Rows inside a wider buffer (row stride > row bytes): only the row elements are read and written."""
    x = np.random.default_rng(1).standard_normal((5, 16)).astype(np.float16)
    k = R.Rows("softmax", 5, 8, in0=X, out=OUT, in_stride=32, out_stride=32)
    got, _ = _run(k, {X: x, OUT: np.zeros((5, 16), np.float16)}, {"out": (OUT, np.float16, x.size)})
    out = got["out"].reshape(5, 16)
    _same(out[:, :8], R.semantics(R.Rows("softmax", 5, 8), x[:, :8].copy())["out"])
    assert (out[:, 8:] == 0).all()
