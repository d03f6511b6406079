"""Element-wise kernels on the simulator: bit-exact against numpy semantics, estimate within 5% (exact here),
over unit counts with remainders, idle workers (fewer units than workers) and one-unit tails."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import elementwise as E
from ipu.backend.kernels.harness import run_call
from ipu.backend.target import Target
from ipu.runtime import fp8
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = E.library_asm(TARGET.sram_base)
X, Y, OUT, FRAME = 0x60000, 0x70000, 0x80000, 0x5C000
ELEMS = {"f16": 4, "f32": 2}
IN_T = {
    "cast_f32_f16": np.float32,
    "cast_f16_f32": np.float16,
    "cast_f16_fp8": np.float16,
    "cast_fp8_f16": np.uint8,
}
PER_UNIT = {"cast_f32_f16": 4, "cast_f16_f32": 4, "cast_f16_fp8": 8, "cast_fp8_f16": 8}


def _inputs(op, units, rng, row=0):
    if op == "bias_f16":
        return rng.standard_normal(units * row).astype(np.float16), rng.standard_normal(row).astype(
            np.float16
        )
    if op in IN_T:
        n = units * PER_UNIT[op]
        if op == "cast_fp8_f16":
            x = rng.integers(0, 256, n).astype(np.uint8)
            x[x == fp8.NAN_BITS] = 0
            return x, None
        # include values that saturate FP8 and values that underflow
        return (rng.standard_normal(n) * 64).astype(IN_T[op]), None
    dt = np.float16 if op.endswith("f16") else np.float32
    n = units * ELEMS[op[-3:]]
    return (rng.standard_normal(n) * 4).astype(dt), rng.standard_normal(n).astype(dt)


def _run(e, x, y):
    sim = Simulator(TARGET)
    mem = {X: x} if y is None else {X: x, Y: y}
    cyc, _ = run_call(sim, LIB, FRAME, e.frame, e.entry, mem)
    ref = np.ascontiguousarray(E.semantics(e, x, y))
    out = sim.read(OUT, ref.nbytes, ref.dtype, tiles=[0]).reshape(ref.shape)
    np.testing.assert_array_equal(out.view(np.uint8), ref.view(np.uint8))
    est = E.cycles(e)
    assert abs(est - cyc) <= 0.05 * cyc, (est, cyc)
    assert est == cyc
    return cyc


@pytest.mark.parametrize("op", sorted(E.OPS))
@pytest.mark.parametrize("units", [1, 5, 13, 40])
def test_elementwise(op, units):
    rng = np.random.default_rng(units)
    x, y = _inputs(op, units, rng)
    _run(
        E.Elementwise(
            op, units, X, Y, OUT, scalar=-0.375, scale=-3, fmt=fp8.F152 if units == 5 else fp8.F143
        ),
        x,
        y,
    )


@pytest.mark.parametrize("rows,row", [(1, 4), (7, 16), (13, 64)])
def test_bias(rows, row):
    rng = np.random.default_rng(rows)
    x, b = _inputs("bias_f16", rows, rng, row)
    _run(E.Elementwise("bias_f16", rows, X, Y, OUT, row=row), x, b)


def test_split():
    assert E.split(13) == [(0, 3), (3, 2), (5, 2), (7, 2), (9, 2), (11, 2)]
    assert [c for _, c in E.split(2)] == [1, 1, 0, 0, 0, 0]


BINARY = sorted(op for op, (_, _, _, binary) in E.OPS.items() if binary)


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("units", [1, 5, 13, 40, 577])
def test_binary_paced(op, units):
    """x and y loaded by one `ld2x64pace` per unit (different memory elements): the same bits, 2 bundles per unit
    instead of 3 (the estimate exact)."""
    rng = np.random.default_rng(units + 7)
    x, y = _inputs(op, units, rng)
    assert E.pace_ok(X, Y, units, TARGET)
    paced = _run(E.Elementwise(op, units, X, Y, OUT, pace=True), x, y)
    plain = _run(E.Elementwise(op, units, X, Y, OUT), x, y)
    if units >= 13:
        assert paced < plain - 6 * (units // 6)


def test_pace_ok_names_bank_clashes():
    """Two streams in one region-0 element clash on every unit; in one interleaved element they clash where their
    addresses agree in bit 3 (8 bytes apart: never); crossing into another element mid-stream counts unit by
    unit. A paced call whose streams clash is a bank conflict on the simulator."""
    r1 = TARGET.region1_base
    assert not E.pace_ok(X, X + 4096, 8, TARGET)  # one 16 KiB region-0 element
    assert E.pace_ok(X, X + 16384, 8, TARGET)
    assert E.pace_ok(r1, r1 + 8, 100, TARGET) and not E.pace_ok(r1, r1 + 16, 100, TARGET)
    assert not E.pace_ok(X + 16384 - 64, X + 16384 + 4096, 16, TARGET)  # x runs into y's element
    assert not E.pace_ok(X, X + 16384, 0, TARGET)
    rng = np.random.default_rng(3)
    x, y = _inputs("add_f32", 8, rng)
    sim = Simulator(TARGET)
    with pytest.raises(Exception, match="bank"):
        run_call(sim, LIB, FRAME, E.Elementwise("add_f32", 8, X, X + 4096, OUT, pace=True).frame, "ew_sup",
                 {X: x, X + 4096: y})  # fmt: skip


def test_pace_is_for_binary_ops():
    with pytest.raises(ValueError, match="paced loads are for the binary kernels"):
        E.Elementwise("scale_f32", 4, pace=True)


CASTS = sorted(op for op in E.OPS if op.startswith("cast"))


@pytest.mark.parametrize("op", CASTS)
@pytest.mark.parametrize("units", [1, 6, 13, 40, 577])
def test_cast_loops(op, units):
    """Both loops of a cast (pipelined, 3 bundles per unit; one unit at a time, 4): the same bits, the estimates
    exact; `cast` takes the faster for the busiest worker's units (the pipelined from 5 units a worker)."""
    rng = np.random.default_rng(units + 11)
    x, _ = _inputs(op, units, rng)
    kw = dict(scale=-3, fmt=fp8.F143)
    piped = _run(E.Elementwise(op, units, X, Y, OUT, pace=True, **kw), x, None)
    plain = _run(E.Elementwise(op, units, X, Y, OUT, **kw), x, None)
    chosen = E.cast(op, units, X, OUT, **kw)
    assert chosen.pace == (piped < plain)
    assert chosen.pace == (units >= 30)
