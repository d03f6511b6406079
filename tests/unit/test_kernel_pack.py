"""Copy/pack kernels on the simulator: row-major <-> panels (A/C of the GEMM), AMP weight panels from B^T (F16 and
FP8, plain chunk copies) and from B (F16, an in-register transpose); bit-exact against numpy / gemm.pack_weights,
estimates exact; shapes with remainder rows, idle workers (fewer rows than workers) and single chunks."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import gemm as G
from ipu.backend.kernels import pack as P
from ipu.backend.kernels.harness import run_call
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = P.library_asm(TARGET.sram_base)
SRC, DST, FRAME = 0x60000, 0x70000, 0x5C000


def _run(call, src: np.ndarray, nbytes: int) -> np.ndarray:
    sim = Simulator(TARGET)
    mem = {SRC: src, DST: np.zeros(nbytes, np.uint8)}
    cyc, _ = run_call(sim, LIB, FRAME, call.frame, call.entry, mem)
    est = call.cycles()
    assert abs(est - cyc) <= 0.05 * cyc, (est, cyc)
    assert est == cyc, (est, cyc)
    return sim.read(DST, nbytes, np.uint8, tiles=[0]).reshape(-1)


@pytest.mark.parametrize("m,kbytes", [(1, 32), (5, 64), (13, 96), (24, 256)])
def test_panels_round_trip(m, kbytes):
    rng = np.random.default_rng(m)
    a = rng.integers(0, 256, (m, kbytes), dtype=np.uint8)
    call = P.to_panels(m, kbytes, SRC, DST)
    got = _run(call, a, a.size)
    want = a.reshape(m, kbytes // 32, 32).transpose(1, 0, 2).reshape(-1)  # [K/KB][M][KB]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(call.semantics(a.reshape(-1), SRC, np.zeros(a.size, np.uint8), DST), want)
    back = _run(P.from_panels(m, kbytes, SRC, DST), want, a.size)
    np.testing.assert_array_equal(back, a.reshape(-1))


@pytest.mark.parametrize("prec", ["f16", "fp8"])
@pytest.mark.parametrize("k,n", [(32, 16), (64, 48), (96, 32)])
def test_weights_from_bt(prec, k, n):
    rng = np.random.default_rng(k + n)
    if prec == "f16":
        b = rng.standard_normal((k, n)).astype(np.float16)
    else:
        b = rng.integers(0, 256, (k, n), dtype=np.uint8)
    bt = np.ascontiguousarray(b.T)
    want = G.pack_weights(b, prec)
    got = _run(P.weights_from_bt(n, k, prec, SRC, DST), bt.view(np.uint8), want.size)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("k,n", [(16, 16), (32, 48), (48, 16), (16, 112)])
def test_weights_f16_transpose(k, n):
    b = np.random.default_rng(k * n).standard_normal((k, n)).astype(np.float16)
    want = G.pack_weights(b, "f16")
    got = _run(P.WeightsF16(k, n, SRC, DST), b, want.size)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "k,p,d,dpad", [(16, 24, 72, 80), (48, 24, 72, 80), (32, 36, 72, 80), (16, 16, 32, 48)]
)
def test_weights_f16_from_column_panels(k, p, d, dpad):
    """B [k, d] stored as column panels [d/p][rows][p] (rows >= k, here k + 5: the panels hold more rows than one
    call reads): one call per panel (`group0`, `src_row`) plus the zero groups d..dpad from a zero row (`src_row`
    0) give gemm.pack_weights of B padded with zero columns, as one call over row-major B does."""
    rows = k + 5
    rng = np.random.default_rng(k + p + d)
    b = rng.standard_normal((rows, d)).astype(np.float16)
    store = np.concatenate([b[:, j : j + p].reshape(-1) for j in range(0, d, p)])
    zeros_at = store.size * 2 + 64  # 8 zero bytes per zero group after the panels (and a gap)
    src = np.zeros(zeros_at + 8 * (dpad - d) // 4, np.uint8)
    src[: store.size * 2] = store.view(np.uint8)
    want = G.pack_weights(np.pad(b[:k], ((0, 0), (0, dpad - d))), "f16")
    calls = [
        P.WeightsF16(k, p, SRC + j * rows * p * 2, DST, src_row=2 * p, group0=j * p // 4)
        for j in range(d // p)
    ]
    calls.append(P.WeightsF16(k, dpad - d, SRC + zeros_at, DST, src_row=0, group0=d // 4))
    sim = Simulator(TARGET)
    mem = {SRC: src, DST: np.full(want.size, 0xFF, np.uint8)}  # NaN bytes: every byte must be written
    for call in calls:
        cyc, _ = run_call(sim, LIB, FRAME, call.frame, call.entry, mem)
        assert cyc == call.cycles()
        mem = {}
    got = sim.read(DST, want.size, np.uint8, tiles=[0]).reshape(-1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("k,n", [(32, 16), (64, 48), (96, 32), (32, 112)])
def test_weights_fp8_transpose(k, n):
    """FP8 weight panels from row-major B (the V of P @ V): an in-register 4x4 byte transpose (sort8x8lo/hi)."""
    b = np.random.default_rng(k * n + 1).integers(0, 256, (k, n), dtype=np.uint8)
    call = P.WeightsFP8(k, n, SRC, DST)
    want = G.pack_weights(b, "fp8")
    np.testing.assert_array_equal(call.semantics(b), want)
    got = _run(call, b, want.size)
    np.testing.assert_array_equal(got, want)


def test_weights_fp8_rejects_partial_blocks():
    with pytest.raises(ValueError):
        P.WeightsFP8(48, 16, SRC, DST)
