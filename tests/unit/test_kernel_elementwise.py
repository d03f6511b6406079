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
