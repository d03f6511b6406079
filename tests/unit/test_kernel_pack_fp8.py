"""The fused FP8 -> F16 weight-panel kernel (`pack.fp8_to_f16_panels`, `pack_fp8_f16[_pad]`) on the simulator:
bit-exact against its numpy semantics, against gemm.pack_weights of the decoded weights and against the two-pass
path it replaces (`fp8_in_f16_panel_order` + zeroed N padding + flat `cast_fp8_f16`, also run on the simulator);
F143 and F152, several scales, N padding (n % 16 != 0), several K blocks, K slices of longer rows, idle workers;
cycle estimate exact and below the two passes."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import elementwise as E
from ipu.backend.kernels import gemm as G
from ipu.backend.kernels import pack as P
from ipu.backend.kernels.harness import run_call
from ipu.backend.target import Target
from ipu.runtime import fp8
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
PACK_LIB = P.library_asm(TARGET.sram_base)
EW_LIB = E.library_asm(TARGET.sram_base)
SRC, DST, STAGE, ZEROS, FRAME = 0x60000, 0x70000, 0x80000, 0x88000, 0x5C000
SENTINEL = 0x5A  # destination bytes before the call: every panel byte must be written


def _run(lib, call, memory: dict, out: int, nbytes: int) -> tuple[np.ndarray, int]:
    sim = Simulator(TARGET)
    cyc, _ = run_call(sim, lib, FRAME, call.frame, call.entry, memory)
    return sim.read(out, nbytes, np.uint8, tiles=[0]).reshape(-1), cyc


def _fused(n, k, rows, fmt, scale, pad=True):
    """(panels, simulator cycles, call) of the fused kernel; rows: [n, src_row] FP8 bytes."""
    npad = -(-n // 16) * 16
    call = P.fp8_to_f16_panels(n, k, SRC, DST, fmt=fmt, scale=scale, src_row=rows.shape[1], pad=pad)
    init = np.full(npad * k * 2, SENTINEL, np.uint8)
    got, cyc = _run(PACK_LIB, call, {SRC: rows, DST: init}, DST, init.size)
    sem = call.semantics(rows.reshape(-1), SRC, init, DST)
    np.testing.assert_array_equal(got, sem)  # simulator == semantics, bit for bit
    assert call.cycles() == cyc, (call.cycles(), cyc)
    return got, cyc, call


def _two_pass(n, k, rows, fmt, scale):
    """(panels, cycles) of the replaced path on the simulator: reorder (16-byte pieces), zero N padding rows of the
    FP8 area (as the lowering did), one flat cast."""
    npad, kb = -(-n // 16) * 16, k // 16
    order = P.fp8_in_f16_panel_order(n, k, SRC, STAGE, src_row=rows.shape[1])
    area = np.full(npad * k, SENTINEL, np.uint8)
    mem = {SRC: rows, STAGE: area, ZEROS: np.zeros(256, np.uint8)}
    d, cyc = _run(PACK_LIB, order, mem, STAGE, area.size)
    assert order.cycles() == cyc
    if npad > n:
        zero = P.Chunks(
            npad - n, kb, ZEROS, STAGE + (n >> 4) * kb * 256 + (n & 15) * 16, src_row=0, src_blk=0, dst_row=16,
            dst_blk=256, shift=4, dst_group=kb * 256, piece=16,
        )  # fmt: skip
        d, c = _run(PACK_LIB, zero, {STAGE: d, ZEROS: np.zeros(256, np.uint8)}, STAGE, area.size)
        assert zero.cycles() == c
        cyc += c
    cast = E.Elementwise("cast_fp8_f16", npad * k // 8, in0=STAGE, out=DST, fmt=fmt, scale=scale)
    got, c = _run(EW_LIB, cast, {STAGE: d}, DST, npad * k * 2)
    assert E.cycles(cast) == c
    return got, cyc + c


def _want(n, k, rows, fmt, scale):
    """gemm.pack_weights of the decoded B (N padded with zero columns)."""
    npad = -(-n // 16) * 16
    bt = np.zeros((npad, k), np.float16)
    with np.errstate(all="ignore"):
        bt[:n] = fp8.decode(rows[:, :k], fmt, scale).astype(np.float16)
    return G.pack_weights(np.ascontiguousarray(bt.T), "f16")


def _rows(n, src_row, seed):
    """Random FP8 bytes, every code point (NaN 0x80 and the format's extremes included)."""
    rows = np.random.default_rng(seed).integers(0, 256, (n, src_row), dtype=np.uint8)
    rows.reshape(-1)[:256] = np.arange(256, dtype=np.uint8)[: min(256, rows.size)]
    return rows


CASES = [  # n, k, src_row, fmt, scale
    (32, 240, 240, fp8.F143, -4),
    (72, 144, 144, fp8.F152, 3),
    (17, 48, 48, fp8.F143, 0),
    (6, 16, 24, fp8.F152, -7),  # one K block; fewer rows than workers; a K slice of longer rows
    (3, 32, 32, fp8.F143, 5),  # three idle workers; 13 zero rows
    (48, 64, 80, fp8.F152, -15),  # no N padding; a K slice
    (20, 96, 96, fp8.F143, 31),  # largest scale: overflows f16 for large F143 values
    (40, 32, 32, fp8.F152, -32),  # smallest scale: f16 subnormals and underflow
]


@pytest.mark.parametrize("n,k,src_row,fmt,scale", CASES)
def test_fused_matches_semantics_and_two_pass(n, k, src_row, fmt, scale):
    rows = _rows(n, src_row, n * k + scale)
    got, cyc, _ = _fused(n, k, rows, fmt, scale)
    old, old_cyc = _two_pass(n, k, rows, fmt, scale)
    np.testing.assert_array_equal(got, old)  # bit-identical to reorder + cast (NaN payloads included)
    np.testing.assert_array_equal(got, _want(n, k, rows, fmt, scale))
    assert cyc < old_cyc, (cyc, old_cyc)


@pytest.mark.parametrize("fmt", [fp8.F143, fp8.F152])
def test_fused_without_padding_rows(fmt):
    """pad=False: the N padding rows are left alone (the plain kernel, no zero-row tables)."""
    n, k = 21, 64
    rows = _rows(n, k, 7)
    got, _, call = _fused(n, k, rows, fmt, -2, pad=False)
    assert call.kernel == "pack_fp8_f16"
    want = _want(n, k, rows, fmt, -2).reshape(2, k // 16, 16, 32)  # [n blocks, k blocks, slot rows, bytes]
    got = got.reshape(want.shape)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1, :, : n - 16], want[1, :, : n - 16])
    assert (got[1, :, n - 16 :] == SENTINEL).all()


@pytest.mark.parametrize("n,k", [(32, 240), (72, 144)])
def test_fused_cycles_report(n, k):
    """The two chunks of the report: fused (estimate == simulator) vs reorder + [padding] + cast."""
    rows = _rows(n, k, 1)
    _, cyc, call = _fused(n, k, rows, fp8.F143, -4)
    _, old = _two_pass(n, k, rows, fp8.F143, -4)
    assert cyc == call.cycles()
    assert cyc < 0.6 * old, (cyc, old)


PLACES = {  # name -> (src, dst, lag): the bank relations of the pace paths (`FP8ToF16.lag`)
    "r1 same element, equal bit 3": (0x90000, 0x94000, 1),
    "r1 same element, opposite bit 3": (0x90008, 0x94000, 2),
    "r1 different elements": (0x90008, 0xA0000, 1),
    "r0 -> r1": (0x60008, 0x90000, 1),
    "r1 -> r0": (0x90000, 0x60008, 1),
    "r0 -> r0 different elements": (0x60008, 0x70000, 1),
    "r0 -> r0 same element": (0x60000, 0x62000, 0),
}


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("n,k,src_row,pad", [(20, 48, 64, True), (7, 64, 80, True), (33, 80, 96, False)])
def test_fused_placements(place, n, k, src_row, pad):
    """Every bank relation of source and destination: the expected path, bit-exact (semantics and pack_weights),
    estimate exact, every panel byte written; the pace paths beat the plain loop."""
    src_at, dst_at, lag = PLACES[place]
    fmt, scale = fp8.F143, -3
    rows = _rows(n, src_row, n + k)
    npad = -(-n // 16) * 16
    call = P.fp8_to_f16_panels(n, k, src_at, dst_at, fmt=fmt, scale=scale, src_row=src_row, pad=pad)
    assert call.lag == lag
    init = np.full(npad * k * 2, SENTINEL, np.uint8)
    got, cyc = _run(PACK_LIB, call, {src_at: rows, dst_at: init}, dst_at, init.size)
    np.testing.assert_array_equal(got, call.semantics(rows.reshape(-1), src_at, init, dst_at))
    assert call.cycles() == cyc, (call.cycles(), cyc)
    want = _want(n, k, rows, fmt, scale)
    if pad:
        np.testing.assert_array_equal(got, want)
    if lag:
        plain = P.fp8_to_f16_panels(n, k, 0x60000, 0x61000, fmt=fmt, scale=scale, src_row=src_row, pad=pad)
        assert plain.lag == 0 and cyc < plain.cycles()


def test_fused_plain_loop_when_pace_is_not_cheaper():
    """One piece per row (the pace row's priming costs more), or rows whose bit-3 relation changes (a source row
    stride of 8 mod 16 in one region-1 element): the plain loop, still exact."""
    assert P.fp8_to_f16_panels(7, 16, 0x90000, 0xA0000).lag == 0
    n, k, src_row = 20, 48, 56
    call = P.fp8_to_f16_panels(n, k, 0x90000, 0x94000, src_row=src_row)
    assert call.lag == 0
    rows = _rows(n, src_row, 5)
    init = np.full(32 * k * 2, SENTINEL, np.uint8)
    got, cyc = _run(PACK_LIB, call, {0x90000: rows, 0x94000: init}, 0x94000, init.size)
    np.testing.assert_array_equal(got, _want(n, k, rows, fp8.F143, 0))
    assert call.cycles() == cyc
