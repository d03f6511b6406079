"""The worker-parallel copy kernel (`copy_sup` / `copy_rows`) on the simulator: memory compared byte for byte with
numpy over the whole area around the copies (bytes outside the destinations unchanged), the cycle estimate equal
to the simulator's; aligned copies on every path (region 1 with both atom parities, region 0 in one bank and in
different banks, across the regions), 4-byte misaligned copies, odd word counts, a large copy spread over the
workers, many small copies, the supervisor's own path, an empty table, several tiles with different tables; the
host side's checks and its tables' independence of the addresses (a `tile.repeat` body's tables)."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import copy as C
from ipu.backend.kernels.harness import _main_overhead, program, run_call
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

TARGET = Target.small(tiles=1, sram_kib=624)
LIB = C.library_asm(TARGET.sram_base)
TABLE = 0x58000
LO, HI = 0x60000, 0xA0000  # the area compared: region 0 from 0x60000, region 1 from 0x80000
R0, R0B, R1 = 0x60000, 0x68000, 0x90000  # region 0 (two banks 32 KiB apart), region 1


def _memory(seed: int, nbytes: int = HI - LO) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def _run(copies, tab=None, seed: int = 0, workers: bool = True) -> int:
    """Run one tile's copies (or a given table); checks memory and the estimate; returns the simulated cycles.
    workers: when the supervisor would copy the rows itself (`SELF`), also run them on the workers."""
    tab = C.table(copies) if tab is None else tab
    if workers and tab[0] & C.SELF:
        _run(copies, _on_workers(tab), seed, workers=False)
    sim = Simulator(TARGET)
    mem = _memory(seed)
    cyc, _ = run_call(sim, LIB, TABLE, lambda labels: tab, C.ENTRY, {LO: mem})
    got = sim.read(LO, HI - LO, np.uint8, tiles=[0]).reshape(-1)
    np.testing.assert_array_equal(got, C.semantics(mem, LO, copies))
    assert C.cycles(tab) == cyc, (C.cycles(tab), cyc)
    return cyc


def _on_workers(tab: np.ndarray) -> np.ndarray:
    out = tab.copy()
    out[0] &= ~np.uint32(C.SELF)
    return out


@pytest.mark.parametrize(
    "src,dst",
    [
        (R1, R1 + 0x2000),  # region 1, equal atom parity: the store one atom behind
        (R1, R1 + 0x2008),  # opposite parity: two atoms behind (odd atom count: one peeled)
        (R1 + 0x1008, R1),  # the source above the destination, opposite parity
        (R0, R0 + 0x1000),  # one region-0 bank: a load and a store per atom
        (R0, R0B + 8),  # two region-0 banks: pace
        (R0B + 8, R0),
        (R0, R1 + 8),  # across the regions
        (R1 + 8, R0),
    ],
)
@pytest.mark.parametrize("nbytes", [8, 16, 24, 32, 136, 4096])
def test_aligned(src, dst, nbytes):
    _run([(src, dst, nbytes)])


@pytest.mark.parametrize(
    "src,dst",
    [(R1 + 4, R1 + 0x2000), (R1, R1 + 0x2004), (R1 + 4, R1 + 0x2004), (R0 + 4, R0 + 0x2004), (R0, R1 + 4)],
)
@pytest.mark.parametrize("nbytes", [4, 8, 12, 40, 1000, 4100])
def test_misaligned(src, dst, nbytes):
    """Source or destination (or both) at 4 mod 8: a leading word, then 64-bit loads and 32-bit stores (or the
    aligned paths when both were at 4)."""
    _run([(src, dst, nbytes)])


@pytest.mark.parametrize("words", [1, 3, 5, 7, 33, 257])
def test_odd_word_counts(words):
    """A trailing word after the atoms (and none before, with both addresses aligned)."""
    _run([(R1, R1 + 0x4000, 4 * words), (R0, R0B, 4 * words), (R1 + 0x8000, R1 + 0x8008 + 0x1000, 4 * words)])


def test_large_copy_is_spread_over_the_workers():
    copies = [(0x80000, R1, 0x10000 - 8)]
    tab = C.table(copies)
    rows = C.worker_rows(tab)
    assert all(len(r) == 1 for r in rows)
    sizes = [r[0][2] for r in rows]
    assert max(sizes) - min(sizes) <= 16 and sum(sizes) == copies[0][2]
    spread = _run(copies, tab)
    # The same copy on worker 0 alone (a hand-made table): six times as long, nearly.
    one = np.zeros(C.HEADER_WORDS + 3, np.uint32)
    one[0], one[C.COUNT], one[C.HEADER_WORDS :] = 1, 1, copies[0]
    alone = _run(copies, one)
    assert spread < alone / 5, (spread, alone)
    # ~ 1 tile cycle per 8 bytes
    assert spread < copies[0][2] / 8 * 1.1


@pytest.mark.parametrize("nbytes", [192, 384, 520, 624, 1120])
def test_split_pieces_are_never_short(nbytes):
    """A copy of a few hundred bytes is cut into pieces of MIN_PIECE_BYTES at least, at most one per worker (a
    384-byte copy once became pieces of 64, 32 and 32 B on one worker: three rows' overhead, 701 cycles)."""
    copies = [(0x62400, 0x64000, nbytes)]
    tab = C.table(copies)
    rows = C.worker_rows(tab)
    pieces = [r[2] for w in rows for r in w]
    assert sum(pieces) == nbytes
    assert min(pieces) >= min(nbytes, C.MIN_PIECE_BYTES), pieces
    assert all(len(w) <= 1 for w in rows), rows
    _run(copies, tab)


def test_many_small_copies():
    """Random small copies of every alignment, both regions: grouped (each worker a contiguous range of whole
    copies, no split) and balanced."""
    rng = np.random.default_rng(7)
    copies, at = [], R0
    for _ in range(300):
        nbytes = 4 * int(rng.integers(1, 48))
        src = at + 4 * int(rng.integers(0, 2))
        dst = src + 0x14000 + 4 * int(rng.integers(0, 2))
        copies.append((src, dst, nbytes))
        at = src + nbytes + 8 * int(rng.integers(1, 3))
    assert at + 0x14000 + 200 < HI and copies[-1][1] < HI
    tab = C.table(copies)
    rows = C.worker_rows(tab)
    assert [r for w in rows for r in w] == copies  # contiguous ranges, in order, none split
    busy = [C.worker_thread_cycles(r) for r in rows]
    assert max(busy) < 1.15 * sum(busy) / 6, busy
    _run(copies, tab)


def test_supervisor_copies_a_few_small_rows_itself():
    copies = [(R1, R1 + 0x100, 16), (R0 + 4, R0 + 0x200, 12)]
    tab = C.table(copies)
    assert tab[0] == C.SELF | 2
    cyc = _run(copies, tab)
    assert cyc < _run(copies, _on_workers(tab)) / 2


def test_empty_table():
    tab = C.table([])
    assert tab.shape == (C.HEADER_WORDS,) and not tab.any()
    assert _run([], tab) == C.EMPTY_CYCLES


def test_several_tiles_different_tables():
    target = Target.small(tiles=4, sram_kib=624)
    per_tile = {
        0: [(R1, R1 + 0x8000, 0x3000)],
        1: [(R0 + 4, R1 + 0x100, 44), (R1 + 0x1000, R0B, 1000)],
        3: [(R1 + 8 * i, R1 + 0x4000 + 8 * i + 4 * (i % 2), 4) for i in range(0, 200, 2)],
    }
    tiles = [t for t, cs in per_tile.items() for _ in cs]
    flat = np.array([c for cs in per_tile.values() for c in cs], np.int64)
    tabs = C.tables(tiles, flat[:, 0], flat[:, 1], flat[:, 2], target.num_tiles)
    assert tabs.shape[0] == 4 and not tabs[2].any()
    sim = Simulator(target)
    prog = program(LIB, target, TABLE, C.ENTRY)
    sim.load(prog)
    mems = [_memory(t) for t in range(4)]
    for t in range(4):
        sim.write(LO, mems[t], tiles=[t])
        sim.write(TABLE, tabs[t].view(np.uint8), tiles=[t])
    res = sim.run("main", tiles=[0, 1, 2, 3])
    for t in range(4):
        got = sim.read(LO, HI - LO, np.uint8, tiles=[t]).reshape(-1)
        np.testing.assert_array_equal(got, C.semantics(mems[t], LO, per_tile.get(t, [])), err_msg=f"tile {t}")
        assert int(res.tile_cycles[t]) - _main_overhead(target) == C.cycles(tabs[t]), t


def test_tables_depend_on_sizes_only():
    """A tile.repeat body's tables must differ per iteration only by the addresses' strides: the same rows and
    splits whatever the addresses' alignment, regions or banks."""
    rng = np.random.default_rng(3)
    n = 4 * rng.integers(1, 3000, 40)
    src = R0 + np.r_[0, np.cumsum(n)[:-1]]
    dst = src + 0x80000
    tiles = rng.integers(0, 3, 40)
    a = C.tables(tiles, src, dst, n, 3).astype(np.int64)
    for ds, dd in ((4, 0), (0x4004, 8), (0x20000, 0x20004)):
        b = C.tables(tiles, src + ds, dst + dd, n, 3).astype(np.int64)
        diff = b - a
        used = np.arange(a.shape[1])[None, :] < C.HEADER_WORDS + 3 * a[:, :1]
        rows = np.where(used[:, C.HEADER_WORDS :], diff[:, C.HEADER_WORDS :], 0).reshape(3, -1, 3)
        assert not diff[:, : C.HEADER_WORDS].any()
        assert (rows[:, :, 0][used[:, C.HEADER_WORDS :: 3]] == ds).all()
        assert (rows[:, :, 1][used[:, C.HEADER_WORDS :: 3]] == dd).all()
        assert not rows[:, :, 2].any()


def test_checks():
    C.check_copies([0, 0], [R1, R1 + 64], [R1 + 0x100, R1 + 0x140], [64, 64])
    C.check_copies([0, 1], [R1, R1], [R1 + 0x100, R1 + 0x100], [64, 64])  # other tiles
    C.check_copies([0], [R1], [R1], [64])  # onto itself
    for tile, src, dst, n in (
        ([0], [R1 + 2], [R1 + 0x100], [8]),  # not word-aligned
        ([0], [R1], [R1 + 0x100], [6]),  # not whole words
        ([0, 0], [R1, R1 + 0x200], [R1 + 0x100, R1 + 0x13C], [64, 64]),  # destinations overlap
        ([0, 0], [R1, R1 + 0x200], [R1 + 0x100, R1 + 0x23C], [64, 64]),  # a destination overlaps a source
        ([0], [R1], [R1 + 32], [64]),  # overlapping itself
    ):
        with pytest.raises(ValueError):
            C.check_copies(tile, src, dst, n)
