"""Exchange round packing (backend/lower/exchange.py): the send-by-send bit-set packing equals the round-by-round
greedy it replaces, and the vectorised round table puts every transfer where the routine reads it."""

import numpy as np
import pytest

from ipu.backend.lower import exchange as lx


def greedy_rounds(sends: np.ndarray, recvs: np.ndarray) -> list[list[tuple[int, list[int]]]]:
    """The definition: rounds one after the other; in each, scan the sends in scheduled order; a send whose tile
    is free sends to its pending receivers whose tiles are free (one per tile), then its tile is busy."""
    order = np.lexsort((np.arange(len(sends)), sends[:, 4]))
    pending = {int(s): [int(r) for r in np.nonzero(recvs[:, 3] == s)[0]] for s in order}
    out = []
    while any(pending.values()):
        busy_send, busy_recv, this = set(), set(), []
        for s in order.tolist():
            if not pending[s] or int(sends[s, 0]) in busy_send:
                continue
            take, seen = [], set()
            for r in pending[s]:
                t = int(recvs[r, 0])
                if t not in busy_recv and t not in seen:
                    take.append(r)
                    seen.add(t)
            if not take:
                continue
            busy_send.add(int(sends[s, 0]))
            busy_recv.update(seen)
            pending[s] = [r for r in pending[s] if r not in take]
            this.append((s, take))
        out.append(this)
    return out


def random_phase(rng, tiles: int, nsends: int, max_fanout: int, orders: int):
    sends = np.zeros((nsends, 5), np.int64)
    sends[:, 0] = rng.integers(0, tiles, nsends)
    sends[:, 3] = 8 * rng.integers(1, 5, nsends)
    sends[:, 4] = rng.integers(0, orders, nsends)
    rows = []
    for s in range(nsends):
        for _ in range(int(rng.integers(0, max_fanout + 1))):  # some sends have no receiver
            rows.append([int(rng.integers(0, tiles)), 0, 8 * len(rows), s, 0])  # tiles may repeat
    recvs = np.array(rows, np.int64).reshape(-1, 5)
    recvs = recvs[rng.permutation(len(recvs))]
    return sends, recvs


@pytest.mark.parametrize("seed", range(12))
def test_receive_rounds_equal_the_round_by_round_greedy(seed):
    rng = np.random.default_rng(seed)
    tiles = int(rng.integers(2, 40))
    sends, recvs = random_phase(
        rng, tiles, int(rng.integers(1, 120)), int(rng.integers(1, 9)), 1 + seed % 4 * 7
    )
    want = greedy_rounds(sends, recvs)
    lx._ROUNDS_CACHE.clear()
    got_round, n = lx.receive_rounds(sends, recvs)
    assert n == len(want) and n > 0
    expect = np.full(len(recvs), -1)
    for k, rnd in enumerate(want):
        for _, take in rnd:
            expect[take] = k
    np.testing.assert_array_equal(got_round, expect)
    got = lx.rounds(sends, recvs)
    assert [[(s, list(r)) for s, r in rnd] for rnd in got] == want
    again, _ = lx.receive_rounds(sends, recvs)  # from the cache
    np.testing.assert_array_equal(again, expect)


def _check_rounds(sends, recvs, rr):
    """Per round, a tile receives at most once and sends at most one send (to several receivers)."""
    rt = set()
    st: dict[tuple[int, int], int] = {}
    for r, (t, s) in zip(rr.tolist(), recvs[:, [0, 3]].tolist()):
        assert (r, t) not in rt
        rt.add((r, t))
        assert st.setdefault((r, int(sends[s, 0])), s) == s


def test_unicast_phases_take_the_fewest_rounds():
    """Every send to one receiver (a bipartite multigraph of sender and receiver ports): exactly as many rounds as
    the busiest port's transfers (Konig), where the greedy may need more."""
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        tiles, n = int(rng.integers(4, 30)), int(rng.integers(50, 400))
        sends = np.zeros((n, 5), np.int64)
        sends[:, 0] = rng.integers(0, tiles, n)
        sends[:, 3] = 8
        sends[:, 4] = rng.integers(0, 5, n)
        recvs = np.zeros((n, 5), np.int64)
        recvs[:, 0] = rng.integers(0, tiles, n)
        recvs[:, 2] = 8 * np.arange(n)
        recvs[:, 3] = rng.permutation(n)
        lx._ROUNDS_CACHE.clear()
        rr, k = lx.receive_rounds(sends, recvs)
        busiest = max(np.bincount(sends[:, 0]).max(), np.bincount(recvs[:, 0]).max())
        assert k == busiest and rr.max() + 1 == k
        _check_rounds(sends, recvs, rr)
        assert len(greedy_rounds(sends, recvs)) >= k
    # Transfers 6->2, 4->4, 2->4, 2->2, 1->6 in this order: the greedy puts the first two in round 0, 2->4 in round
    # 1, then 2->2 finds round 0 taken at its receiver and round 1 at its sender: three rounds for ports of two.
    sends = np.array([[t, 0, 0, 8, i] for i, t in enumerate([6, 4, 2, 2, 1])], np.int64)
    recvs = np.array([[t, 0, 8 * i, i, 0] for i, t in enumerate([2, 4, 4, 2, 6])], np.int64)
    lx._ROUNDS_CACHE.clear()
    rr, k = lx.receive_rounds(sends, recvs)
    assert len(greedy_rounds(sends, recvs)) == 3 and k == 2
    _check_rounds(sends, recvs, rr)


def test_gather_to_one_tile_takes_one_round_per_sender():
    sends = np.array([[t, 0, 0, 8, 10 - t, 0] for t in range(1, 6)], np.int64)[:, :5]
    recvs = np.array([[0, 0, 8 * s, s, 0] for s in range(5)], np.int64)
    lx._ROUNDS_CACHE.clear()
    rr, n = lx.receive_rounds(sends, recvs)
    assert n == 5
    np.testing.assert_array_equal(rr, [4, 3, 2, 1, 0])  # latest scheduled first


class _Phase:
    def __init__(self, sends, recvs, copies):
        self.tables = sends, recvs, copies

    def send_table(self):
        return self.tables[0]

    def recv_table(self):
        return self.tables[1]

    def copy_table(self):
        return self.tables[2]


def test_phase_tables_words_and_staging():
    """The timed table holds every transfer where the routine reads it: each receive as a receive row of its
    sender's atoms into the receive staging, each send (once per transmission) from its staging slot."""
    from ipu.backend.lower import timed as tm

    tiles = 6
    rng = np.random.default_rng(3)
    sends, recvs = random_phase(rng, tiles, 30, 4, 5)
    sends[:, 2] = 16 * np.arange(len(sends))  # distinct source offsets
    sends[::3, 3] = 12  # not whole atoms: staged
    copies = np.array([[1, 0, 0, 64, 16], [1, 0, 8, 72, 4]], np.int64)
    src = [np.arange(tiles, dtype=np.int64) * 0 + 0x60000]
    dst = [np.arange(tiles, dtype=np.int64) * 0 + 0x70000 + 4]  # misaligned: every receive staged
    lx._ROUNDS_CACHE.clear()
    rtab, pre, post, n = lx.phase_tables(
        _Phase(sends, recvs, copies), src, dst, tiles, 0x90000, 0xA0000, 4096
    )
    atoms = (sends[:, 3] + 7) // 8
    staged = {}
    for t, rows in pre.items():
        offs = 0
        for src_a, stage, nbytes in rows:
            assert stage == 0x90000 + offs
            offs += 8 * -(-nbytes // 8)
            staged[(t, src_a)] = stage
    want_sends, want_recvs = {}, {}
    for s in range(len(sends)):
        st = int(sends[s, 0])
        addr = staged.get((st, 0x60000 + int(sends[s, 2])), 0x60000 + int(sends[s, 2]))
        if (recvs[:, 3] == s).any():
            want_sends.setdefault(st, set()).add((int(atoms[s]), addr))
    for r in range(len(recvs)):
        s = int(recvs[r, 3])
        want_recvs.setdefault(int(recvs[r, 0]), []).append((int(sends[s, 0]), int(atoms[s])))
    got_tx = 0
    for t in range(tiles):
        rows = tm.table_rows(rtab, t)
        got_sends = {(sn, sa) for _, _, _, _, sn, sa in rows if sn}
        got_tx += sum(bool(sn) for _, _, _, _, sn, _ in rows)
        assert got_sends == want_sends.get(t, set())
        got_recvs = [(m, rn) for _, m, rn, _, _, _ in rows if rn]
        assert sorted(got_recvs) == sorted(want_recvs.get(t, []))
        assert all(0xA0000 <= ra < 0xA0000 + 4096 for _, _, rn, ra, _, _ in rows if rn)
    assert n == len(greedy_rounds(sends, recvs))  # the transmissions' grouping
    assert got_tx >= sum(len(v) for v in want_sends.values())
    # Every receive is copied from its staging slot into place; the phase's own copies come after, on tile 1.
    assert sum(len(v) for v in post.values()) == len(recvs) + len(copies)
    assert post[1][-2:] == [(0x60000, 0x70000 + 4 + 64, 16), (0x60000 + 8, 0x70000 + 4 + 72, 4)]


def test_rounds_cache_is_bounded_and_exact(monkeypatch):
    monkeypatch.setattr(lx, "_ROUNDS_CACHE_RECEIVES", 150)
    lx._ROUNDS_CACHE.clear()
    rng = np.random.default_rng(7)
    phases = [random_phase(rng, 16, 40, 3, 5) for _ in range(4)]
    first = [lx.receive_rounds(s, r)[0] for s, r in phases]
    assert sum(len(v[0]) for v in lx._ROUNDS_CACHE.values()) <= max(150, max(len(r) for _, r in phases))
    assert len(lx._ROUNDS_CACHE) < len(phases)  # the oldest were evicted
    for (s, r), want in zip(phases, first):  # cached or recomputed: the same rounds, int64
        got, _ = lx.receive_rounds(s, r)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
