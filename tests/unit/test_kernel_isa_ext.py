"""Instructions added for the kernel library (issue 4): f32exp, f32oorx, f32oox, f16v2tanh, sort4x16lo/hi,
sort8x8lo/hi. Each runs on the simulator over corner cases (zeros, signs, infinities, NaN, overflow, underflow,
subnormals) against independently computed values (Python's math in double precision, rounded once)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipu.backend.asm_text import parse_program
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
SRC, DST = 0x60000, 0x61000

PROGRAM = """
.globl main
.supervisor
main:
    setzi $m1, worker
    runall $m1, $mzero, 0
    sync TEXCH_SYNCZONE_LOCAL
    br $lr

.globl worker
.worker
worker:
    get $m0, $WSR
    shl $m0, $m0, 3
    setzi $m1, {src}
    setzi $m2, {dst}
{body}
    exitz $mzero
"""


def run_words(body: str, words: np.ndarray) -> np.ndarray:
    """Each worker w reads words [2w, 2w+1] of SRC into $a0:1 (and MRF $m4/$m5), runs `body`, stores $a2:3
    (and $m6/$m7) to DST words [2w, 2w+1]. Returns the 12 result words."""
    sim = Simulator(TARGET)
    sim.load(parse_program(PROGRAM.format(src=SRC, dst=DST, body=body), TARGET.sram_base))
    w = np.zeros(12, np.uint32)
    w[: len(words)] = words
    sim.write(SRC, w.view(np.uint8), tiles=[0])
    sim.write(DST, np.zeros(48, np.uint8), tiles=[0])
    sim.run("main", tiles=[0])
    return sim.read(DST, 48, np.uint32, tiles=[0]).reshape(-1)


def _arf_op(op: str, x: np.ndarray) -> np.ndarray:
    """op $a2, $a0 ; op $a3, $a1 over 32-bit words x (up to 12)."""
    body = f"""    ld64 $a0:1, $m1, $m0, 0
    {op} $a2, $a0
    {op} $a3, $a1
    st64 $a2:3, $m2, $m0, 0"""
    return run_words(body, x)[: len(x)]


def _f32(vals):
    return np.array(vals, np.float32)


def _check_f32(op, fn, vals):
    x = _f32(vals)
    got = _arf_op(op, x.view(np.uint32)).view(np.float32)
    with np.errstate(over="ignore"):
        want = np.array([fn(float(v)) for v in x], np.float64).astype(np.float32)
    nan = np.isnan(want)  # NaN payload/sign bits are not specified
    assert (np.isnan(got) == nan).all(), (op, x, got)
    np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32), err_msg=f"{op} {x}")
    return got


def _exp(v):
    if math.isnan(v):
        return math.nan
    try:
        return math.exp(v)
    except OverflowError:
        return math.inf


def _rsqrt(v):
    if math.isnan(v) or v < 0:
        return math.nan
    if v == 0:
        return math.copysign(math.inf, v)
    return 0.0 if math.isinf(v) else 1.0 / math.sqrt(v)


def _recip(v):
    if math.isnan(v):
        return math.nan
    if v == 0:
        return math.copysign(math.inf, v)
    return 1.0 / v


def test_f32exp():
    got = _check_f32(
        "f32exp", _exp, [0.0, -0.0, 1.0, -1.0, 88.5, 89.0, -87.0, -100.0, -104.0, np.inf, -np.inf, np.nan]
    )
    assert got[0] == 1.0 and got[1] == 1.0 and got[5] == np.inf and got[10] == 0.0  # exact cases
    assert 0 < got[7] < np.finfo(np.float32).tiny  # subnormal result
    assert np.isnan(got[11])


def test_f32oorx():
    got = _check_f32(
        "f32oorx", _rsqrt, [4.0, 0.25, 2.0, 0.0, -0.0, -1.0, np.inf, 1e-45, 3e38, 1e-6, 7.0, np.nan]
    )
    assert got[0] == 0.5 and got[1] == 2.0 and got[3] == np.inf and got[4] == -np.inf and np.isnan(got[5])


def test_f32oox():
    got = _check_f32(
        "f32oox", _recip, [2.0, -4.0, 3.0, 0.0, -0.0, np.inf, -np.inf, 1e-45, 3e38, 7.0, 1e-40, np.nan]
    )
    assert got[0] == 0.5 and got[1] == -0.25 and got[4] == -np.inf and got[8] > 0 and got[10] == np.inf


def test_f16v2tanh():
    h = np.array(
        [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.0,
            -3.0,
            10.0,
            -10.0,
            np.inf,
            -np.inf,
            np.nan,
            6e-8,
            1e-3,
            2.0,
            0.1,
            -65504.0,
            0.75,
            -0.3,
            4.0,
            5.5,
            -1e-4,
            3.0,
            0.2,
            -2.5,
        ],
        np.float16,
    )
    got = _arf_op("f16v2tanh", h.view(np.uint32)).view(np.float16)
    want = np.array([math.tanh(float(v)) if not math.isnan(v) else math.nan for v in h]).astype(np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert got[6] == 1.0 and got[7] == -1.0 and got[1].tobytes() == np.float16(-0.0).tobytes()
    assert got[11] == h[11]  # tanh(x) = x at the smallest subnormal


@pytest.mark.parametrize("hi", [0, 1])
def test_sort4x16(hi):
    rng = np.random.default_rng(hi)
    x = rng.integers(0, 2**32, 12, dtype=np.uint64).astype(np.uint32)
    op = f"sort4x16{'hi' if hi else 'lo'}"
    body = f"""    ld64 $a0:1, $m1, $m0, 0
    {op} $a2, $a0, $a1
    {op} $a3, $a1, $a0
    st64 $a2:3, $m2, $m0, 0"""
    got = run_words(body, x).view(np.uint16).reshape(6, 2, 2)  # [worker, register, half]
    h = x.view(np.uint16).reshape(6, 2, 2)
    np.testing.assert_array_equal(got[:, 0], h[:, :, hi])
    np.testing.assert_array_equal(got[:, 1], h[:, ::-1, hi])


@pytest.mark.parametrize("hi", [0, 1])
def test_sort8x8(hi):
    x = np.arange(48, dtype=np.uint8).view(np.uint32)  # byte i holds i: the permutation is visible
    op = f"sort8x8{'hi' if hi else 'lo'}"
    body = f"""    ld32 $m4, $m1, $m0, 0
    ld32 $m5, $m1, $m0, 1
    {op} $m6, $m4, $m5
    {op} $m7, $m5, $m4
    st32 $m6, $m2, $m0, 0
    st32 $m7, $m2, $m0, 1"""
    got = run_words(body, x).view(np.uint8).reshape(6, 2, 4)
    for w in range(6):
        b = 8 * w
        assert list(got[w, 0]) == [b + hi, b + 2 + hi, b + 4 + hi, b + 6 + hi]
        assert list(got[w, 1]) == [b + 4 + hi, b + 6 + hi, b + hi, b + 2 + hi]


def test_f16v2exp():
    """Correctly rounded f16 exponentials (the precision of the IPU's is not public: the simulator's choice)."""
    h = np.array([0.0, -0.0, 1.0, -1.0, -0.5, 2.0, -10.0, -17.0, 11.0, 12.0, -np.inf, np.inf, np.nan, -1e-3,
                  -3.25, -0.0078], np.float16)  # fmt: skip
    got = _arf_op("f16v2exp", h.view(np.uint32)).view(np.float16)
    with np.errstate(over="ignore"):  # e^12 overflows f16: inf, as the instruction gives
        want = np.array([math.exp(float(v)) if not math.isnan(v) else math.nan for v in h]).astype(np.float16)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    assert got[0] == 1.0 and got[9] == np.inf and got[10] == 0.0  # e^12 overflows f16; e^-inf = 0
