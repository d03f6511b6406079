"""Copy/pack kernels on the simulator: row-major <-> panels (A/C of the GEMM), AMP weight panels from B^T (F16 and
FP8, plain chunk copies) and from B (F16, an in-register transpose); bit-exact against numpy / gemm.pack_weights,
estimates exact; shapes with remainder rows, idle workers (fewer rows than workers) and single chunks."""

from __future__ import annotations

from dataclasses import replace

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


# Source / destination placements for the pace paths (`Chunks.lag`): name -> (src, dst, lag of a call whose strides
# are multiples of 16 bytes). Region 1 starts at 0x80000 (32 KiB interleaved elements, bank = bit 3 inside one);
# region 0 has 16 KiB elements.
PLACES = {
    "r1 same element, equal bit 3": (0x90000, 0x94000, 1),
    "r1 same element, opposite bit 3": (0x90000, 0x94008, 2),
    "r1 same element, opposite bit 3 (source odd)": (0x94008, 0x90000, 2),
    "r1 different elements": (0x90008, 0xA0000, 1),
    "r0 -> r1": (0x60000, 0x90008, 1),
    "r1 -> r0": (0x90008, 0x60000, 1),
    "r0 -> r0 different elements": (0x60008, 0x70000, 1),
    "r0 -> r0 same element": (0x60000, 0x62000, 0),
}


def _run_at(call, src_at: int, dst_at: int, src: np.ndarray, nbytes: int) -> np.ndarray:
    """Run `call` with `src` at src_at and a sentinel destination of nbytes at dst_at; checks the simulator against
    `semantics` (every written byte, nothing else) and the estimate; returns the destination bytes."""
    sim = Simulator(TARGET)
    init = np.full(nbytes, 0xA5, np.uint8)
    cyc, _ = run_call(sim, LIB, FRAME, call.frame, call.entry, {src_at: src, dst_at: init})
    got = sim.read(dst_at, nbytes, np.uint8, tiles=[0]).reshape(-1)
    np.testing.assert_array_equal(got, call.semantics(src.view(np.uint8).reshape(-1), src_at, init, dst_at))
    assert call.cycles() == cyc, (call.cycles(), cyc)
    return got


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("prec,k,n", [("f16", 96, 24), ("fp8", 64, 7), ("f16", 16, 13)])
def test_weights_from_bt_placements(place, prec, k, n):
    """weights_from_bt (a K slice of longer rows) in every bank relation: bit-exact, estimate exact, the expected
    path; the pace paths take fewer cycles than the plain loop."""
    src_at, dst_at, lag = PLACES[place]
    rng = np.random.default_rng(k + n)
    esz = 2 if prec == "f16" else 1
    row = k * esz + 32  # K columns of rows 32 bytes longer
    bt = rng.integers(0, 256, (n, row), dtype=np.uint8)
    b = np.ascontiguousarray(bt[:, : k * esz]).view(np.float16 if prec == "f16" else np.uint8).T
    want = G.pack_weights(np.pad(b, ((0, 0), (0, -n % 16))), prec)
    call = P.weights_from_bt(n, k, prec, src_at, dst_at, src_row=row)
    assert call.lag == lag
    got = _run_at(call, src_at, dst_at, bt, want.size)
    written = np.arange(want.size).reshape(-1, k // G.KBLOCK[prec], 16, 32)  # [nb][kb][slot row][bytes]
    mask = np.zeros(want.size, bool)
    for r in range(n):
        mask[written[r // 16, :, r % 16].reshape(-1)] = True
    np.testing.assert_array_equal(got[mask], want[mask])
    assert (got[~mask] == 0xA5).all()
    if lag:
        plain = replace(call, src=0x60000, dst=0x61000)
        assert plain.lag == 0 and call.cycles() < plain.cycles()


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("m,kbytes", [(1, 32), (7, 96), (13, 160)])
def test_panels_placements(place, m, kbytes):
    """to_panels / from_panels in every bank relation."""
    src_at, dst_at, lag = PLACES[place]
    a = np.random.default_rng(m * kbytes).integers(0, 256, (m, kbytes), dtype=np.uint8)
    call = P.to_panels(m, kbytes, src_at, dst_at)
    assert call.lag == lag
    want = a.reshape(m, kbytes // 32, 32).transpose(1, 0, 2).reshape(-1)
    np.testing.assert_array_equal(_run_at(call, src_at, dst_at, a, a.size), want)
    back = P.from_panels(m, kbytes, src_at, dst_at)
    assert back.lag == lag
    np.testing.assert_array_equal(_run_at(back, src_at, dst_at, want, a.size), a.reshape(-1))


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("piece", [32, 16])
def test_chunks_placements(place, piece):
    """Both piece sizes with panel-order strides (g = 4, a K slice of longer rows) and zero fills (src_row =
    src_blk = 0) in every bank relation."""
    src_at, dst_at, lag = PLACES[place]
    rows, blocks = 21, 5
    src = np.random.default_rng(piece).integers(0, 256, rows * (blocks * piece + 16), dtype=np.uint8)
    blk = 16 * piece
    call = P.Chunks(
        rows, blocks, src_at, dst_at, src_row=blocks * piece + 16, src_blk=piece, dst_row=piece, dst_blk=blk,
        shift=4, dst_group=blocks * blk, piece=piece,
    )  # fmt: skip
    assert call.lag == lag
    _run_at(call, src_at, dst_at, src, 2 * blocks * blk)
    zero = P.Chunks(
        rows - 3, blocks, src_at, dst_at + 3 * piece, src_row=0, src_blk=0, dst_row=piece, dst_blk=blk, shift=4,
        dst_group=blocks * blk, piece=piece,
    )  # fmt: skip
    assert zero.lag == lag
    _run_at(zero, src_at, dst_at, src[:piece], 2 * blocks * blk)


def test_chunks_mixed_row_parity_takes_plain_loop():
    """Rows whose source and destination bit-3 relation changes from row to row (a source row stride of 8 mod 16)
    in one region-1 element: the plain loop."""
    call = P.weights_from_bt(13, 32, "f16", 0x90000, 0x94000, src_row=72)
    assert call.lag == 0
    src = np.random.default_rng(3).integers(0, 256, 13 * 72, dtype=np.uint8)
    _run_at(call, 0x90000, 0x94000, src, 16 * 2 * 512)


def _run_transposes(calls, mem: dict, dst_at: int, nbytes: int, frame_of=None) -> np.ndarray:
    """Run `calls` in turn on one simulator (mem staged before the first; a 0xA5 sentinel destination of nbytes at
    dst_at); each estimate exact. frame_of: a replacement frame function (mutation checks). Returns the bytes."""
    sim = Simulator(TARGET)
    mem = {**mem, dst_at: np.full(nbytes, 0xA5, np.uint8)}
    for call in calls:
        cyc, _ = run_call(sim, LIB, FRAME, frame_of(call) if frame_of else call.frame, call.entry, mem)
        assert cyc == call.cycles(), (cyc, call.cycles())
        mem = {}
    return sim.read(dst_at, nbytes, np.uint8, tiles=[0]).reshape(-1)


# (k, n, group0, src_row, dst_row): B^T row-major (defaults); a slice of longer source rows into a longer-strided
# destination from group 2 on; one group; dst_row not a multiple of 16 bytes; 7 groups (one worker
# takes two); the So400m shapes (O^T [80][16] -> O rows; a 176-key V panel of 24 columns into V^T rows of 176).
TRANSPOSES = [
    (16, 4, 0, None, None),
    (32, 16, 0, None, None),
    (48, 12, 2, 40, 112),
    (16, 4, 5, 8, 32),
    (64, 16, 0, 32, 144),
    (32, 28, 0, None, 72),
    (80, 8, 0, 32, 160),
    (176, 24, 6, 48, 352),
]


@pytest.mark.parametrize("k,n,group0,src_row,dst_row", TRANSPOSES)
def test_transpose_f16(k, n, group0, src_row, dst_row):
    """TransposeF16: column 4 * group0 + j of B [k, n] (source row stride src_row) -> the row at dst + (4 * group0
    + j) * dst_row; bit-exact against numpy, nothing else written, estimate exact."""
    srow = src_row or 2 * n
    src = np.random.default_rng(k + n + group0).integers(0, 256, (k, srow), dtype=np.uint8)
    src[:, : 2 * n] = np.random.default_rng(k).standard_normal((k, n)).astype(np.float16).view(np.uint8)
    call = P.TransposeF16(k, n, SRC, DST, src_row=src_row, group0=group0, dst_row=dst_row)
    drow = dst_row or 2 * k
    nbytes = (4 * group0 + n) * drow + 64
    got = _run_transposes([call], {SRC: src}, DST, nbytes)
    bt = np.ascontiguousarray(np.ascontiguousarray(src[:, : 2 * n]).view(np.float16).T)  # [n, k]
    want = np.full(nbytes, 0xA5, np.uint8)
    for j in range(n):
        at = (4 * group0 + j) * drow
        want[at : at + 2 * k] = bt[j].view(np.uint8)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        call.semantics(src.reshape(-1), SRC, np.full(nbytes, 0xA5, np.uint8), DST), want
    )


@pytest.mark.parametrize(
    "k,p,d,dpad", [(16, 24, 72, 80), (176, 24, 72, 80), (32, 36, 72, 80), (48, 16, 32, 48)]
)
def test_transpose_f16_from_column_panels(k, p, d, dpad):
    """B [k, d] stored as column panels [d/p][rows][p] (rows = k + 5 > k: a key slice of longer panels, from row 3):
    one call per panel plus the zero rows d..dpad from a zero constant (src_row 0) give B^T padded with zero rows
    [dpad][k] (the attention's V^T chunk), every byte written."""
    rows, first = k + 5, 3
    b = np.random.default_rng(k + p + d).standard_normal((rows, d)).astype(np.float16)
    store = np.concatenate([b[:, j : j + p].reshape(-1) for j in range(0, d, p)])
    zeros_at = store.size * 2 + 64
    src = np.zeros(zeros_at + 2 * (dpad - d), np.uint8)
    src[: store.size * 2] = store.view(np.uint8)
    calls = [
        P.TransposeF16(k, p, SRC + (j * rows + first) * p * 2, DST, src_row=2 * p, group0=j * p // 4)
        for j in range(d // p)
    ]
    calls.append(P.TransposeF16(k, dpad - d, SRC + zeros_at, DST, src_row=0, group0=d // 4))
    want = np.pad(b[first : first + k], ((0, 0), (0, dpad - d))).T.copy().view(np.uint8).reshape(-1)
    got = _run_transposes(calls, {SRC: src}, DST, want.size)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "k,p,d,dpad", [(176, 36, 72, 80), (16, 24, 72, 80), (32, 8, 48, 48), (48, 4, 8, 16), (16, 16, 16, 16)]
)
def test_transpose_f16_panels_in_one_call(k, p, d, dpad):
    """B [k, d] stored as column panels [d/p][rows][p] (a key slice from row 3): one call with panel_width p (the
    workers shared out over the panels, none crossing a panel boundary) gives the same B^T rows as one call per
    panel; estimate exact, and no slower than the per-panel calls together (the So400m V chunk: 176 keys x 2
    panels of 36)."""
    rows, first = k + 5, 3
    b = np.random.default_rng(k + p + d).standard_normal((rows, d)).astype(np.float16)
    store = np.concatenate([b[:, j : j + p].reshape(-1) for j in range(0, d, p)])
    src = store.view(np.uint8)
    one = P.TransposeF16(
        k, d, SRC + first * p * 2, DST, src_row=2 * p, panel_width=p, panel_step=rows * p * 2
    )
    assert all(f // (p // 4) == (f + c - 1) // (p // 4) for f, c, _, _ in one.worker_split() if c)
    want = b[first : first + k].T.copy().view(np.uint8).reshape(-1)
    got = _run_transposes([one], {SRC: src}, DST, want.size)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(one.semantics(src, SRC, np.zeros(want.size, np.uint8), DST), want)
    per_panel = [
        P.TransposeF16(k, p, SRC + (j * rows + first) * p * 2, DST, src_row=2 * p, group0=j * p // 4)
        for j in range(d // p)
    ]
    assert one.cycles() <= sum(c.cycles() for c in per_panel)
    if (k, p, d) == (176, 36, 72):
        assert one.cycles() < 0.8 * sum(c.cycles() for c in per_panel)


@pytest.mark.parametrize(
    "k,n,parts,panel",
    [(192, 32, None, None), (192, 32, 2, None), (192, 32, 6, None), (80, 32, None, None), (48, 28, 3, None),
     (32, 80, None, None), (64, 48, 2, 24), (160, 72, None, 24)],
)  # fmt: skip
def test_transpose_f16_k_parts(k, n, parts, panel):
    """K cut into parts (each worker a run of groups of one part: its source and destination offsets): the same
    B^T as numpy, estimate exact; the automatic count is never slower than one part, and the So400m S rows (K =
    192 keys, 8 query groups) take three (4 units per worker instead of two workers taking two whole groups)."""
    rows = k + 3 if panel else k
    b = np.random.default_rng(k * n).standard_normal((rows, n)).astype(np.float16)
    if panel:
        src = np.concatenate([b[:, j : j + panel].reshape(-1) for j in range(0, n, panel)]).view(np.uint8)
        kw = dict(src_row=2 * panel, panel_width=panel, panel_step=rows * panel * 2)
    else:
        src, kw = b.view(np.uint8).reshape(-1), {}
    call = P.TransposeF16(k, n, SRC, DST, k_parts=parts, **kw)
    want = b[:k].T.copy().view(np.uint8).reshape(-1)
    np.testing.assert_array_equal(_run_transposes([call], {SRC: src}, DST, want.size), want)
    np.testing.assert_array_equal(call.semantics(src, SRC, np.zeros(want.size, np.uint8), DST), want)
    one = P.TransposeF16(k, n, SRC, DST, k_parts=1, **kw)
    if parts is None:
        assert call.cycles() <= one.cycles()
    if (k, n, parts) == (192, 32, None):
        assert call.parts == 3 and call.cycles() < 0.75 * one.cycles()


def test_transpose_f16_k_parts_are_checked():
    with pytest.raises(ValueError, match="must divide the 12 K blocks"):
        P.TransposeF16(192, 32, SRC, DST, k_parts=5)
    with pytest.raises(ValueError, match="at most 6"):
        P.TransposeF16(64, 48, SRC, DST, src_row=48, panel_width=24, panel_step=4096, k_parts=4)


@pytest.mark.parametrize("word", ["row step", "back step", "group step", "first group"])
def test_transpose_f16_mutations_are_caught(word):
    """The comparison is not vacuous: each frame word that places the stores, off by one atom (the B^T row stride
    $m9, the step from column 3 back to column 0 $m10, the step to the next group's rows $m11) or the workers'
    first groups without group0 (a read before the source: the simulator's poison check), writes other bytes than
    numpy's transpose or fails. 7 groups: worker 0 takes two (the group step is used)."""
    from ipu.backend.kernels import rowwise as R
    from ipu.runtime.errors import SimError

    k, n, group0, drow = 48, 28, 1, 112
    src = np.random.default_rng(7).standard_normal((k, n)).astype(np.float16)
    call = P.TransposeF16(k, n, SRC, DST, group0=group0, dst_row=drow)
    nbytes = (4 * group0 + n) * drow + 64
    want = call.semantics(src.view(np.uint8).reshape(-1), SRC, np.full(nbytes, 0xA5, np.uint8), DST)
    np.testing.assert_array_equal(_run_transposes([call], {SRC: src}, DST, nbytes), want)

    def mutated(c):
        def frame(labels):
            f = c.frame(labels)
            if word == "first group":
                f[R.FIRST : R.FIRST + 6] -= group0
            else:
                at = {"row step": P.DST_BLK, "back step": P.SHIFT, "group step": P.DST_GROUP}[word]
                f[at] += 8 if word == "group step" else 1
            return f

        return frame

    try:
        got = _run_transposes([call], {SRC: src}, DST, nbytes, frame_of=mutated)
    except SimError:
        assert word == "first group"
        return
    assert not np.array_equal(got, want)


def test_transpose_pipeline_issues():
    """The software-pipelined transposes: one K block (16 rows x 4 columns: 16 loads, 32 sorts, 16 stores) is 32
    issues of the rpt body (a load or a store in every bundle; 44 unpipelined), read off the codes' tag counts."""
    for name in ("pack_weights_f16", "pack_transpose_f16"):
        n = P._code(name).count
        assert n["chunk"] == 32 < 44, (name, dict(n))


@pytest.mark.parametrize("mutation", ["no rotation", "one more body pass"])
def test_transpose_pipeline_mutations_are_caught(monkeypatch, mutation):
    """The pipeline's checks are not vacuous: without the rotation of L0 / column 0 between $a0:1 and $a8:9 (the
    next quarter's first load overwrites columns 2-3's source halves before their last sorts) the bytes differ;
    with one more pass of the rpt body (K blocks instead of K blocks - 1: loads one K block past B's last row) the
    simulator flags the read of never-written memory (or other bytes are written)."""
    from ipu.backend.kernels import rowwise as R
    from ipu.runtime.errors import SimError

    k, n = 48, 28
    src = np.random.default_rng(11).standard_normal((k, n)).astype(np.float16)
    call = P.TransposeF16(k, n, SRC, DST)
    nbytes = n * 2 * k + 64
    want = call.semantics(src.view(np.uint8).reshape(-1), SRC, np.full(nbytes, 0xA5, np.uint8), DST)
    frame = call.frame
    if mutation == "no rotation":
        monkeypatch.setattr(P, "_ROTATE", ((0, 8), (0, 8)))
    else:

        def frame(labels):
            f = call.frame(labels)
            f[R.ATOMS] += 1
            return f

    sim = Simulator(TARGET)
    mem = {SRC: src, DST: np.full(nbytes, 0xA5, np.uint8)}
    try:
        run_call(sim, P.library_asm(TARGET.sram_base), FRAME, frame, call.entry, mem)
    except SimError:
        assert mutation == "one more body pass"
        return
    assert not np.array_equal(sim.read(DST, nbytes, np.uint8, tiles=[0]).reshape(-1), want)
