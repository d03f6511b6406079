"""The timed exchange (backend/lower/timed.py): the routine's row costs are the simulator's cycles, the schedule
keeps every resource to one use at a time, and scheduled phases run on the simulator's timed exchange with every
byte where it belongs (a timing model off by a cycle makes the simulator name the receive)."""

import dataclasses

import numpy as np
import pytest

from ipu.backend.kernels.harness import program
from ipu.backend.lower import exchange as lx
from ipu.backend.lower import timed as tm
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

TABLE, SRC, DST = 0x5C000, 0x60000, 0x70000


def _run(target, tables: dict[int, np.ndarray], memory=()):
    sim = Simulator(target)
    sim.load(program(lx.ROUTINES, target, TABLE, "xch_timed"))
    for t, tab in tables.items():
        sim.write(TABLE, np.asarray(tab, np.uint32).view(np.uint8), tiles=[t])
    for addr, t, data in memory:
        sim.write(addr, data, tiles=[t])
    res = sim.run("main", tiles=sorted(tables))
    return sim, res


def _send_rows(rows):
    """Table words of send rows [(wait, atoms, address)]."""
    return tm.encode_rows([(wait, -1, 0, 0, n, addr) for wait, n, addr in rows])


@pytest.mark.parametrize("seed", [0, 1])
def test_row_costs_are_the_simulators(seed):
    """One more row changes the run by exactly its wait plus `ROW.send(n)`'s cost, for every length class of a
    send (under 256 atoms, whole 256-atom blocks, both) and waits across both delay tables (up to `MAX_WAIT`)."""
    rng = np.random.default_rng(seed)
    target = Target.small(tiles=1, sram_kib=624)
    data = rng.integers(0, 256, 8 * 1100, dtype=np.uint8)
    mem = [(SRC, 0, data)]
    base = [(int(rng.integers(0, 200)), 3, SRC)]
    _, res0 = _run(target, {0: _send_rows(base)}, mem)
    for n in (1, 2, 255, 256, 257, 300, 512, 1000):
        wait = int(rng.integers(0, 300)) + (
            3700 if n in (257, 1000) else 0
        )  # up to the longest one row waits
        _, res = _run(target, {0: _send_rows(base + [(wait, n, SRC)])}, mem)
        got = int(res.tile_cycles[0] - res0.tile_cycles[0])
        assert got == wait + tm.ROW.send(n)[2], (n, wait)


def test_waits_across_the_short_and_middle_paths():
    """A wait under FINE jumps straight into the fine table, a longer one through the middle table (MID_EXTRA cycles
    more, taken off its delays): one more row costs exactly its wait plus its cost on both sides of the switch."""
    target = Target.small(tiles=1, sram_kib=624)
    mem = [(SRC, 0, np.arange(64, dtype=np.uint8))]
    _, res0 = _run(target, {0: _send_rows([(5, 3, SRC)])}, mem)
    f = tm.FINE
    waits = (0, 1, 7, f - 1, f, f + 1, f + tm.MID_EXTRA, 62, 63, 64, 65, 70, 71, 127, 128, 4094, tm.MAX_WAIT)
    for wait in waits:
        _, res = _run(target, {0: _send_rows([(5, 3, SRC), (wait, 2, SRC)])}, mem)
        assert int(res.tile_cycles[0] - res0.tile_cycles[0]) == wait + tm.ROW.send(2)[2], wait


@pytest.mark.parametrize("gap", [tm.MAX_WAIT, tm.MAX_WAIT + 1, 20_000, 3 * tm.MAX_WAIT + 500])
def test_long_waits_are_split_exactly(gap):
    """A gap longer than one row can wait becomes rows that send nothing: the run is longer by exactly the gap."""
    target = Target.small(tiles=1, sram_kib=624)
    data = np.arange(64, dtype=np.uint8)
    first, _, cost = tm.ROW.send(3)

    def cycles(second_at):
        cols = (np.zeros(2, np.int64), np.array([0, second_at]), np.array([cost, cost]), np.array([-1, -1]),
                np.zeros(2, np.int64), np.array([3, 3]))  # fmt: skip
        sched = tm.Schedule(None, 0, 2, arrays=cols)
        z = np.zeros(0, np.int64)
        tab = tm.table(sched, 1, z, z, np.array([SRC]), z)
        _, res = _run(target, {0: tab[0]}, [(SRC, 0, data)])
        return int(res.tile_cycles[0])

    assert cycles(cost + gap) - cycles(cost) == gap


def test_send_departures_follow_the_model():
    """First and last atom departures of `ROW.send` against the row's cost: the last atom leaves within the row,
    at least one send latency after the first, 2 cycles per atom inside a block."""
    for n in (1, 7, 255, 256, 257, 511, 512, 513, 2000):
        first, last, cost = tm.ROW.send(n)
        assert first == tm.ROW.send_issue + tm.ROW.latency
        assert last - first >= 2 * (n - 1)
        assert last < cost
        if n <= 256:
            assert last - first == 2 * (n - 1)


def _random_phase(rng, tiles, nsends, fanout):
    sends = np.zeros((nsends, 5), np.int64)
    sends[:, 0] = rng.integers(0, tiles, nsends)
    sends[:, 3] = 8 * rng.integers(1, 300, nsends)
    sends[:, 4] = rng.integers(0, 3, nsends)
    rows = []
    for s in range(nsends):
        others = [t for t in range(tiles) if t != sends[s, 0]]
        k = int(rng.integers(1, min(fanout, len(others)) + 1))
        for t in rng.choice(others, k, replace=False):
            rows.append([int(t), 0, 0, s, 0])
    if rng.random() < 0.5 and rows:  # a second receive of one send on one tile: a second transmission
        rows.append(list(rows[0]))
    return sends, np.array(rows, np.int64)


def _check_schedule(sched: tm.Schedule, sends, recvs, target):
    """Per tile: rows disjoint in time; per receiver: windows one after the other, each open in time."""
    fabric = target.exchange_fabric_cycles
    arrivals = {}
    for t, rows in sched.per_tile().items():
        for (a0, c0, *_), (a1, _, *_) in zip(rows, rows[1:]):
            assert a0 + c0 <= a1, t
        for anchor, _, recv, send, n in rows:
            if send >= 0:
                after = tm.ROW.recv if recv >= 0 else 0
                arrivals.setdefault(send, []).append(anchor + tm.ROW.send(n, after)[0] + fabric)
    assert set(arrivals) == set(recvs[:, 3].tolist())  # every send with a receiver went out
    for rows in sched.per_tile().values():
        for anchor, _, recv, _, _ in rows:
            if recv >= 0:
                opened = anchor + tm.ROW.open
                assert any(af >= opened for af in arrivals[int(recvs[recv, 3])])


@pytest.mark.parametrize("seed", range(6))
def test_schedule_is_consistent(seed):
    rng = np.random.default_rng(seed)
    tiles = int(rng.integers(2, 12))
    sends, recvs = _random_phase(rng, tiles, int(rng.integers(1, 20)), 4)
    atoms = (sends[:, 3] + 7) // 8
    for shared in (False, True):
        target = dataclasses.replace(Target.small(tiles=tiles), exchange_shared_receive_bus=shared)
        rr, _ = lx.receive_rounds(sends, recvs)
        sched = tm.schedule(sends[:, 0], atoms, recvs[:, 0], recvs[:, 3], rr, target)
        rows = [r for rs in sched.per_tile().values() for r in rs]
        assert (
            sum(r[2] >= 0 for r in rows) == len(recvs) and sum(r[3] >= 0 for r in rows) == sched.transmissions
        )
        _check_schedule(sched, sends, recvs, target)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("shared", [False, True])
def test_scheduled_phase_runs_on_the_timed_exchange(seed, shared):
    """Random phases (multicasts, tiles that send and receive, a send received twice on one tile) scheduled,
    tabled and run: every receive holds its send's bytes, and the simulator's timing checks pass."""
    rng = np.random.default_rng(100 + seed)
    tiles = int(rng.integers(2, 9))
    sends, recvs = _random_phase(rng, tiles, int(rng.integers(1, 12)), 4)
    target = dataclasses.replace(Target.small(tiles=tiles, sram_kib=624), exchange_shared_receive_bus=shared)
    atoms = (sends[:, 3] + 7) // 8
    send_addr = SRC + np.r_[0, np.cumsum(8 * atoms)[:-1]]
    # Receives one after the other on each tile.
    rbytes = 8 * atoms[recvs[:, 3]]
    order = np.argsort(recvs[:, 0], kind="stable")
    recv_addr = np.zeros(len(recvs), np.int64)
    for t in np.unique(recvs[:, 0]):
        sel = order[recvs[order, 0] == t]
        recv_addr[sel] = DST + np.r_[0, np.cumsum(rbytes[sel])[:-1]]
    rr, _ = lx.receive_rounds(sends, recvs)
    sched = tm.schedule(sends[:, 0], atoms, recvs[:, 0], recvs[:, 3], rr, target)
    tab = tm.table(sched, tiles, atoms[recvs[:, 3]], sends[recvs[:, 3], 0], send_addr, recv_addr)
    data = {t: rng.integers(0, 256, int(8 * atoms.sum()), dtype=np.uint8) for t in range(tiles)}
    mem = [(SRC, t, data[t]) for t in range(tiles)]
    mem += [(DST, t, np.zeros(int(rbytes.sum()), np.uint8)) for t in range(tiles)]
    sim, res = _run(target, {t: tab[t] for t in range(tiles)}, mem)
    for j in range(len(recvs)):
        i, t = int(recvs[j, 3]), int(recvs[j, 0])
        n = 8 * int(atoms[i])
        got = sim.read(int(recv_addr[j]), n, tiles=[t]).reshape(-1)
        want = data[int(sends[i, 0])][send_addr[i] - SRC : send_addr[i] - SRC + n]
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("early", [0, 1])
def test_receive_row_opens_at_its_modelled_cycle(early):
    """Tile 1's window opens at anchor + `ROW.open`: a send whose first atom arrives exactly then is received,
    one arriving a cycle earlier is not (the simulator names the receive)."""
    from ipu.runtime.errors import SimError

    target = Target.small(tiles=2, sram_kib=624)
    n = 5
    first, _, cost = tm.ROW.send(n)
    r_anchor = 300
    s_anchor = r_anchor + tm.ROW.open - first - target.exchange_fabric_cycles - early
    cols = (
        np.array([0, 1]), np.array([s_anchor, r_anchor]), np.array([cost, tm.ROW.recv]), np.array([-1, 0]),
        np.array([0, -1]), np.array([n, 0]),
    )  # fmt: skip
    sched = tm.Schedule(None, 0, 1, arrays=cols)
    tab = tm.table(sched, 2, np.array([n]), np.array([0]), np.array([SRC]), np.array([DST]))
    data = np.arange(8 * n, dtype=np.uint8)
    mem = [(SRC, 0, data), (DST, 1, np.zeros(8 * n, np.uint8))]
    if early:
        with pytest.raises(SimError) as e:
            _run(target, {0: tab[0], 1: tab[1]}, mem)
        assert e.value.check == "exchange-no-sender" and e.value.tile == 1
        return
    sim, res = _run(target, {0: tab[0], 1: tab[1]}, mem)
    np.testing.assert_array_equal(sim.read(DST, 8 * n, tiles=[1]).reshape(-1), data)


@pytest.mark.parametrize("shift", [1, 3])
def test_ring_sends_share_rows_with_receives(shift):
    """Every tile sends to the tile `shift` further on, in rounds: each tile receives and sends in one row (the
    combined row's timing against the simulator), and every receive holds its sender's bytes."""
    tiles = 6
    sends = np.zeros((2 * tiles, 5), np.int64)
    sends[:, 0] = np.tile(np.arange(tiles), 2)
    sends[:, 3] = 8 * np.r_[np.full(tiles, 3), np.full(tiles, 40)]
    recvs = np.zeros((2 * tiles, 5), np.int64)
    recvs[:, 0] = (sends[:, 0] + shift) % tiles
    recvs[:, 3] = np.arange(2 * tiles)
    target = Target.small(tiles=tiles, sram_kib=624)
    atoms = (sends[:, 3] + 7) // 8
    rr, _ = lx.receive_rounds(sends, recvs)
    sched = tm.schedule(sends[:, 0], atoms, recvs[:, 0], recvs[:, 3], rr, target)
    rows = [r for rs in sched.per_tile().values() for r in rs]
    assert sum(r[2] >= 0 and r[3] >= 0 for r in rows) >= tiles  # receive and send in one row
    send_addr = SRC + 8 * np.r_[0, np.cumsum(atoms)[:-1]]
    recv_addr = DST + 8 * np.r_[0, np.cumsum(atoms)[:-1]]
    tab = tm.table(sched, tiles, atoms, sends[:, 0], send_addr, recv_addr)
    data = {
        t: np.random.default_rng(t).integers(0, 256, int(8 * atoms.sum()), dtype=np.uint8)
        for t in range(tiles)
    }
    mem = [(SRC, t, data[t]) for t in range(tiles)] + [
        (DST, t, np.zeros(int(8 * atoms.sum()), np.uint8)) for t in range(tiles)
    ]
    sim, _ = _run(target, {t: tab[t] for t in range(tiles)}, mem)
    for j in range(len(recvs)):
        n, off = 8 * int(atoms[j]), int(send_addr[j] - SRC)
        got = sim.read(int(recv_addr[j]), n, tiles=[int(recvs[j, 0])]).reshape(-1)
        np.testing.assert_array_equal(got, data[int(sends[j, 0])][off : off + n])


@pytest.mark.parametrize("m", [0, 1, 7, 255, 256, 300])
def test_receive_then_send_costs_are_the_simulators(m):
    """Tile 1 receives tile 0's send and then (no wait) sends m atoms itself: under 256 atoms one recv_send row
    runs both, from 256 a receive row and a send row. Its run is longer than the receive alone by exactly the
    modelled pair's cost less the receive row's, and the window still opens at `ROW.open` (a cycle early fails
    in `test_receive_row_opens_at_its_modelled_cycle`; here the first atom arrives exactly at the opening)."""
    target = Target.small(tiles=2, sram_kib=624)
    n = 5
    first, _, cost = tm.ROW.send(n)
    r_anchor = 300
    s_anchor = r_anchor + tm.ROW.open - first - target.exchange_fabric_cycles

    def run(m):
        after = tm.ROW.joined(m) if m else 0
        c1 = tm.ROW.send(m, int(after))[2] if m else tm.ROW.recv
        cols = (
            np.array([0, 1]), np.array([s_anchor, r_anchor]), np.array([cost, c1]), np.array([-1, 0]),
            np.array([0, 1 if m else -1]), np.array([n, m]),
        )  # fmt: skip
        sched = tm.Schedule(None, 0, 1, arrays=cols)
        tab = tm.table(sched, 2, np.array([n]), np.array([0]), np.array([SRC, SRC]), np.array([DST]))
        kinds = [k for k, *_ in tm._decoded(tab, 1)]
        assert kinds == (
            [tm.RECV_SEND, tm.SEND] if 0 < m < 256 else [tm.RECV] + [tm.SEND_BLOCKS] * (m >= 256)
        )
        data = np.arange(8 * max(n, m, 1), dtype=np.uint8)
        mem = [(SRC, 0, data), (SRC, 1, data), (DST, 1, np.zeros(8 * n, np.uint8))]
        sim, res = _run(target, {0: tab[0], 1: tab[1]}, mem)
        np.testing.assert_array_equal(sim.read(DST, 8 * n, tiles=[1]).reshape(-1), data[: 8 * n])
        return int(res.tile_cycles[1]), c1

    base, _ = run(0)
    got, c1 = run(m)
    assert got - base == c1 - tm.ROW.recv
