"""`panels_f16` (column panels [panels][rows][P] f16 -> rows of n f16: the panels side by side, then zeros) on the
simulator: bit-exact against the numpy semantics, the estimate equal to the simulator's cycles, on the pace path and
on the safe path (a load and a store of one bundle in one bank, or a row jump too long for the pace stride fields).
Only the panels' atoms are written before the call (the simulator flags a load of never-written memory), other data
between panels (a panel step longer than the panel) must not reach the output, the output is pre-filled with NaN:
every atom of the R rows must be written and the bytes between rows (an output stride longer than the row) kept."""

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
X1, OUT1 = 0x90000, 0xA8000  # region 1 (interleaved)


def _call(k: R.Rows, out_bytes: int, gap: bool = False) -> tuple[np.ndarray, Simulator]:
    """Runs k on random panels, the out_bytes at k.out NaN before the call, its estimate checked against the
    simulator's cycles; gap: the bytes between panels hold data (-1.0) that must not be copied. The panels and
    the simulator after the call."""
    p = k.panel_width
    rs = np.random.default_rng(k.rows * 100 + k.panels * 10 + p)
    x = (rs.standard_normal((k.panels, k.rows, p)) * 4).astype(np.float16)
    mem = {}
    if gap:  # the whole source range written: the other data
        span = (k.panels - 1) * k.pstep + (k.rows - 1) * k.istride + 2 * p
        mem[k.in0] = np.full(span // 2, -1.0, np.float16)
    for j in range(k.panels):
        for i in range(k.rows):
            mem[k.in0 + j * k.pstep + i * k.istride] = x[j, i]
    mem[k.out] = np.full(out_bytes // 2, np.nan, np.float16)
    sim = Simulator(TARGET)
    cyc, _ = run_call(sim, LIB, FRAME, k.frame, k.entry, mem)
    assert R.cycles(k) == cyc, (R.cycles(k), cyc)
    return x, sim


def _run(k: R.Rows, gap: bool = False) -> None:
    """Runs k (`_call`); checks the output rows against the semantics and the bytes between them unchanged."""
    out_bytes = k.rows * k.ostride
    x, sim = _call(k, out_bytes, gap)
    got = sim.read(k.out, out_bytes, np.uint16, tiles=[0]).reshape(k.rows, k.ostride // 2)
    want = R.semantics(k, x)["out"]
    np.testing.assert_array_equal(got[:, : k.n], want.view(np.uint16))
    assert (got[:, k.n :] == np.float16(np.nan).view(np.uint16)).all()  # between the rows: untouched


# (rows, panels, P, n): the attention's K (72 = 3 x 24 of 80), rows with a remainder, fewer rows than workers (1, 4),
# two wide panels, no zero columns (72 of 72), many zero columns.
SHAPES = [
    (176, 3, 24, 80),
    (25, 3, 24, 80),
    (7, 2, 36, 80),
    (1, 3, 24, 72),
    (4, 3, 24, 80),
    (13, 1, 8, 48),
    (9, 2, 72, 160),
]


@pytest.mark.parametrize("rows,panels,p,n", SHAPES)
def test_panels(rows, panels, p, n):
    k = R.Rows("panels_f16", rows, n, in0=X, out=OUT, panels=panels, panel_width=p)
    assert k.pf_pace
    _run(k)


@pytest.mark.parametrize("rows,panels,p,n", [(25, 3, 24, 80), (5, 2, 36, 80)])
def test_panel_step_and_out_stride(rows, panels, p, n):
    """Panels of a longer sequence (the attention's key chunk: step = seq * 2P), other data between them; output rows
    inside wider rows (stride > 2n)."""
    k = R.Rows(
        "panels_f16", rows, n, in0=X + 96, out=OUT, panels=panels, panel_width=p,
        panel_step=(rows + 9) * 2 * p, out_stride=2 * n + 48,
    )  # fmt: skip
    assert k.pf_pace
    _run(k, gap=True)


def test_in_stride():
    """Panel rows further apart than 2P (the load's row jump), other data between them."""
    k = R.Rows("panels_f16", 11, 40, in0=X, out=OUT, panels=2, panel_width=16, in_stride=48, out_stride=96)
    assert k.pf_pace and k.pf_jumps() == (3, 9)
    _run(k, gap=True)


@pytest.mark.parametrize(
    "in0,out,rows,out_stride,pace",
    [
        (X, X + 0x2000, 13, None, False),  # one region-0 bank: safe path
        (X1, OUT1, 25, None, True),  # region 1, different elements
        (X1, X1 + 0x2000, 25, None, True),  # one region-1 element, loads / stores in different halves (bit 3)
        (X1, X1 + 0x2008, 25, None, False),  # ... on the same half: safe path
        (X, OUT, 3, 8192, False),  # the store's row jump does not fit a pace stride field: safe path
    ],
)
def test_banks(in0, out, rows, out_stride, pace):
    k = R.Rows("panels_f16", rows, 80, in0=in0, out=out, panels=3, panel_width=24, out_stride=out_stride)
    assert k.pf_pace == pace
    _run(k)


def test_one_call_beats_four():
    """The attention's K block (176 keys, 3 panels of 24, dpad 80): one call against today's three pad_f16 panel
    copies and the zero columns."""
    k = R.Rows(
        "panels_f16", 176, 80, in0=X, out=OUT, panels=3, panel_width=24, in_stride=48, out_stride=160,
        panel_step=176 * 48,
    )  # fmt: skip
    old = [
        R.Rows("pad_f16", 176, 24, in0=X + j * 8448, out=OUT + j * 48, in_stride=48, out_stride=160, valid=24)
        for j in range(3)
    ] + [R.Rows("pad_f16", 176, 8, out=OUT + 144, out_stride=160, valid=0)]
    assert 2.5 * R.cycles(k) < sum(R.cycles(c) for c in old)


@pytest.mark.parametrize(
    "kw,msg",
    [
        (dict(panels=0, panel_width=24), "panels >= 1"),
        (dict(panels=3, panel_width=22), "panel_width % 4"),
        (dict(panels=3, panel_width=4), "panel_width % 4"),
        (dict(panels=4, panel_width=24), "n >= panels"),
        (dict(panels=3, panel_width=24, in0=X + 4), "8-byte aligned"),
        (dict(panels=3, panel_width=24, panel_step=100), "panel_step"),
        (dict(panels=3, panel_width=24, in_stride=52), "multiples of 8"),
    ],
)
def test_invalid(kw, msg):
    with pytest.raises(ValueError, match=msg):
        R.Rows("panels_f16", 4, 80, **kw)
    with pytest.raises(ValueError, match="panels_f16 only"):
        R.Rows("pad_f16", 4, 80, panels=3)


def test_library_holds_the_rows_loops_asked_for():
    """The library carries a rows loop only for the panel widths a program uses (`pf_atoms`: code on every tile);
    a call whose width has a loop of its own but is not in the library is refused, naming it; one with the loop
    runs against that smaller library with the same cycles."""
    lib = R.library_asm(TARGET.sram_base, pf_atoms=(6,))
    assert ".Lrows_panels_f16_rows6:" in lib and ".Lrows_panels_f16_rows4:" not in lib
    assert len(lib) < len(LIB)
    k6 = R.Rows("panels_f16", 25, 80, in0=X, out=OUT, panels=3, panel_width=24)
    k4 = R.Rows("panels_f16", 25, 64, in0=X, out=OUT, panels=4, panel_width=16)
    assert k6.pf_fast and k4.pf_fast
    sim = Simulator(TARGET)
    x = np.zeros(3 * 25 * 24, np.float16)
    cyc, _ = run_call(sim, lib, FRAME, k6.frame, k6.entry, {X: x, OUT: np.zeros(25 * 80, np.float16)})
    assert cyc == R.cycles(k6)
    with pytest.raises(ValueError, match="no rows loop for panels of 4 atoms"):
        run_call(
            Simulator(TARGET), lib, FRAME, k4.frame, k4.entry, {X: x, OUT: np.zeros(25 * 64, np.float16)}
        )


def test_library_holds_the_gap_loops_asked_for():
    """`panels_gap_f16` likewise: the library carries only the rows loops a program's calls use (`pfg_loops`,
    `Rows.pfg_loop`; the lowering records them in the program's library); a call with its loop runs against that
    smaller library with the same cycles, one without it is refused, naming the loop."""
    kw = dict(in0=X, out=OUT, panels=3, panel_width=24, gap_at=16, gap=8)
    kb = R.Rows("panels_gap_f16", 16, 96, out_stride=32, block_jump=512, **kw)
    kc = R.Rows("panels_gap_f16", 16, 96, **kw)
    lib = R.library_asm(TARGET.sram_base, pfg_loops=(kb.pfg_loop[1],))
    assert (
        f".Lrows_panels_gap_f16_{kb.pfg_loop[1]}:" in lib
        and f".Lrows_panels_gap_f16_{kc.pfg_loop[1]}:" not in lib
    )
    assert len(lib) < len(LIB)
    x = np.zeros(3 * 16 * 24, np.float16)
    cyc, _ = run_call(
        Simulator(TARGET), lib, FRAME, kb.frame, kb.entry, {X: x, OUT: np.zeros(3 * 512, np.float16)}
    )
    assert cyc == R.cycles(kb)
    with pytest.raises(ValueError, match=f"no rows loop {kc.pfg_loop[1]}"):
        run_call(
            Simulator(TARGET), lib, FRAME, kc.frame, kc.entry, {X: x, OUT: np.zeros(16 * 96, np.float16)}
        )


@pytest.mark.parametrize(
    "rows,panels,p,gap_at,gap",
    [(32, 3, 24, 16, 8), (25, 3, 24, 16, 8), (4, 2, 20, 16, 12), (1, 1, 28, 16, 4), (13, 2, 28, 16, 4)],
)
def test_panels_gap(rows, panels, p, gap_at, gap):
    """`panels_gap_f16`: each panel's row split at gap_at with `gap` zeros between (the attention's Q rows for K's
    overlapping 16-column blocks): bit-exact, the estimate the simulator's cycles, fewer rows than workers too."""
    k = R.Rows("panels_gap_f16", rows, panels * (p + gap), in0=X, out=OUT, panels=panels, panel_width=p,
               gap_at=gap_at, gap=gap, out_stride=2 * panels * (p + gap) + 16)  # fmt: skip
    _run(k)


@pytest.mark.parametrize(
    "rows,panels,p,block_jump",
    [(16, 3, 24, 512), (9, 3, 24, 512), (4, 2, 20, 512), (1, 1, 28, 512), (13, 2, 28, 416), (32, 3, 24, 512),
     (25, 3, 24, 512), (40, 2, 20, 512), (96, 1, 28, 512)],
)  # fmt: skip
def test_panels_gap_into_weight_panels(rows, panels, p, block_jump):
    """`panels_gap_f16` with `block_jump`: row r's 32-byte blocks of panel j at (r // 16) * group + (r % 16) * 32
    + 2j * block_jump and block_jump further, group = 2 * panels * block_jump (Q^T's F16 AMP weight panels, in
    16-query groups): the semantics' rows in those places, bit-exact; every other byte of the range untouched;
    the estimate the simulator's cycles (one 16-row group: that of the contiguous rows' loop); no worker's rows
    span two groups."""
    gap = 32 - p
    k = R.Rows("panels_gap_f16", rows, panels * 32, in0=X, out=OUT, panels=panels, panel_width=p, gap_at=16,
               gap=gap, out_stride=32, block_jump=block_jump)  # fmt: skip
    group = 2 * panels * block_jump
    span = -(-rows // 16) * group
    x, sim = _call(k, span)
    contiguous = R.Rows("panels_gap_f16", rows, panels * 32, in0=X, out=OUT, panels=panels, panel_width=p,
                        gap_at=16, gap=gap)  # fmt: skip
    if rows <= 16:
        assert R.cycles(k) == R.cycles(contiguous)
    assert all(first // 16 == (first + cnt - 1) // 16 for first, cnt in k.pfg_split() if cnt)
    assert sum(cnt for _, cnt in k.pfg_split()) == rows
    got = sim.read(OUT, span, np.uint16, tiles=[0]).reshape(-1)
    want = R.semantics(k, x)["out"].view(np.uint16).reshape(rows, panels, 2, 16)
    expect = np.full(span // 2, np.float16(np.nan).view(np.uint16), np.uint16)
    for r in range(rows):
        for j in range(panels):
            for b in range(2):
                at = (r // 16 * group + r % 16 * 32 + (2 * j + b) * block_jump) // 2
                expect[at : at + 16] = want[r, j, b]
    np.testing.assert_array_equal(got, expect)


def test_panels_gap_shape_is_checked():
    kw = dict(in0=X, out=OUT, panels=3, panel_width=24)
    with pytest.raises(ValueError, match="panels_gap_f16 needs"):
        R.Rows("panels_gap_f16", 4, 96, gap_at=8, gap=8, **kw)  # no rows loop for (2, 2, 4) atoms
    with pytest.raises(ValueError, match="panels_gap_f16 needs"):
        R.Rows("panels_gap_f16", 4, 80, gap_at=16, gap=8, **kw)
    with pytest.raises(ValueError, match="for panels_gap_f16 only"):
        R.Rows("panels_f16", 4, 80, gap_at=16, gap=8, **kw)
    with pytest.raises(ValueError, match="block_jump = 500 needs"):
        R.Rows("panels_gap_f16", 4, 96, gap_at=16, gap=8, out_stride=32, block_jump=500, **kw)
    with pytest.raises(ValueError, match="at most 96 rows"):
        R.Rows("panels_gap_f16", 97, 96, gap_at=16, gap=8, out_stride=32, block_jump=512, **kw)
    with pytest.raises(ValueError, match="exceed the pace stride fields"):
        R.Rows("panels_gap_f16", 4, 96, gap_at=16, gap=8, out_stride=32, block_jump=8192, **kw)
