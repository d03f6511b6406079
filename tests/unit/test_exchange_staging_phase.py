"""`staged_phase_tables` on random phases of f16 transfers at any half-word offsets and lengths: the staging
copies, the half-word shifted staging, the rounds and the receivers' copies, applied in numpy to per-tile memory,
deliver every transfer's bytes and touch no destination byte outside the words of the transfers; a receiver whose
destination is at the first receiver's word phase copies at most a half at each end by itself."""

from __future__ import annotations

import numpy as np
import pytest

from ipu.backend.kernels import copy as C
from ipu.backend.lower import exchange as lx
from ipu.backend.lower import timed as tm
from ipu.backend.lower.lowering import _split_halves_of
from ipu.backend.target import Target

BASE, SIZE = 0x60000, 0x50000
SRC, DST, SEND_STAGE, RECV_STAGE, STAGE = 0x60000, 0x70000, 0x90000, 0xA0000, 0x8000


class _Phase:
    def __init__(self, sends, recvs, copies):
        self.tables = sends, recvs, copies

    def send_table(self):
        return self.tables[0]

    def recv_table(self):
        return self.tables[1]

    def copy_table(self):
        return self.tables[2]


def _random_phase(rng, tiles: int, nsends: int, same_phase: bool):
    """Sends of 2..200 bytes at even source offsets, each to 1..3 other tiles at even, disjoint destinations."""
    sends, recvs = [], []
    dst_next = np.zeros(tiles, np.int64)
    src_next = np.zeros(tiles, np.int64)
    for s in range(nsends):
        t = int(rng.integers(tiles))
        n = 2 * int(rng.integers(1, 100))
        src_next[t] += 2 * int(rng.integers(0, 4))
        sends.append([t, 0, src_next[t], n, s])
        phase = int(rng.integers(0, 4)) * 2
        others = [u for u in range(tiles) if u != t]
        for u in rng.choice(others, size=int(rng.integers(1, 4)), replace=False).tolist():
            gap = (phase - dst_next[u]) % 8 if same_phase else 2 * int(rng.integers(0, 4))
            dst_next[u] += gap
            recvs.append([u, 0, dst_next[u], s, s])
            dst_next[u] += n
        src_next[t] += n
    return np.array(sends, np.int64), np.array(recvs, np.int64)


def _apply(mem, rows):
    for t, rs in rows.items():
        snap = mem[t].copy()
        for s, d, n in rs:
            mem[t, d - BASE : d - BASE + n] = snap[s - BASE : s - BASE + n]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("same_phase", [True, False])
def test_staged_phase_delivers(seed, same_phase):
    rng = np.random.default_rng(seed)
    tiles = 5
    sends, recvs = _random_phase(rng, tiles, 40, same_phase)
    copies = np.zeros((0, 5), np.int64)
    addr = [np.full(tiles, SRC, np.int64)]
    daddr = [np.full(tiles, DST, np.int64)]
    lx._ROUNDS_CACHE.clear()
    rtab, pre, stab, post, _ = lx.staged_phase_tables(
        _Phase(sends, recvs, copies), addr, daddr, tiles, SEND_STAGE, RECV_STAGE, STAGE
    )
    mem = rng.integers(0, 256, (tiles, SIZE), dtype=np.uint8)
    before = mem.copy()
    # Send staging: whole source words; no copy reads or writes past the words of its transfer.
    for rs in pre.values():
        for s, d, n in rs:
            assert s % 4 == 0 and d % 4 == 0 and n % 4 == 0
    _apply(mem, pre)
    if stab is not None:
        for t in range(tiles):
            mem[t] = C.shift_semantics(mem[t], BASE, [r for w in C.worker_rows(stab[t]) for r in w])
    # The timed exchange: each window takes the atoms its sender sends next (by the routine's timing).
    snap = mem.copy()
    if rtab is not None:
        for t, base, mux, at, count in tm.replay(rtab, Target.small(tiles=tiles)):
            assert base % 8 == 0 and at % 8 == 0
            mem[t, base - BASE : base - BASE + 8 * count] = snap[mux, at - BASE : at - BASE + 8 * count]
    halves = 0
    for rs in post.values():
        for r in rs:
            halves += len(_split_halves_of([r])[1])
    _apply(mem, post)
    want = before[:, DST - BASE : SEND_STAGE - BASE].copy()
    free = np.zeros(want.shape, bool)  # bytes of no transfer in a word of one: they may change
    for t, _, off, s, _ in recvs.tolist():
        free[t, off & ~3 : (off + sends[s, 3] + 3) & ~3] = True
    for t, _, off, s, _ in recvs.tolist():
        st, _, so, n, _ = sends[s].tolist()
        want[t, off : off + n] = before[st, SRC - BASE + so : SRC - BASE + so + n]
        free[t, off : off + n] = False
    got = mem[:, DST - BASE : SEND_STAGE - BASE]
    np.testing.assert_array_equal(np.where(free, 0, got), np.where(free, 0, want))
    np.testing.assert_array_equal(mem[:, : DST - BASE], before[:, : DST - BASE])  # sources untouched
    if same_phase:  # every receiver at the first receiver's phase: at most a half at each end alone
        assert halves <= 2 * len(recvs)
