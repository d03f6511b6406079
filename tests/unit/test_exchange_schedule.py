"""Randomized properties of exchange lowering and scheduling: for random relayouts on random small targets,
the transfers deliver every byte to the right place, schedules have no port conflicts, and the verifier
catches broken tables."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import Float8E4M3FNUZType, TensorType, f16, f32

from ipu.dialects import exchange as ex
from ipu.dialects import tile as tl
from ipu.passes.exchange_lower import phase_tables, relayout_transfers
from ipu.passes.exchange_schedule import (
    priority,
    schedule_starts,
    schedule_starts_loop,
    split_chunks,
)
from ipu.runtime.tile_interp import Sharded, decode, encode, np_dtype

LATENCY = 8
BUDGET = 1 << 20
DTYPES = (f32, f16, Float8E4M3FNUZType())


def random_layout(rng, shape, num_tiles, dtype, order=None) -> tl.LayoutAttr:
    block = tuple(int(rng.integers(1, d + 1)) for d in shape)
    nb = int(np.prod([-(-s // b) for s, b in zip(shape, block)]))
    replicas = int(rng.integers(1, min(3, num_tiles) + 1))
    table = np.stack([rng.permutation(num_tiles)[:replicas] for _ in range(nb)]).astype(np.int32)
    if order is None:
        order = "amp16" if len(shape) == 2 and rng.random() < 0.3 else "row_major"
    return tl.LayoutAttr(shape, block, table, dtype, order)


def random_case(seed):
    rng = np.random.default_rng(seed)
    num_tiles = int(rng.integers(2, 13))
    rank = int(rng.integers(1, 3))
    shape = tuple(int(rng.integers(1, 40 if rank == 1 else 24)) for _ in range(rank))
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]
    return (
        rng,
        num_tiles,
        random_layout(rng, shape, num_tiles, dtype),
        random_layout(rng, shape, num_tiles, dtype),
    )


def move(sends, recvs, copies, src: Sharded, dst_layout: tl.LayoutAttr) -> Sharded:
    """Executes one buffer's transfers as byte copies (what the interpreter does for a phase)."""
    dt = np_dtype(dst_layout.dtype)
    g = dst_layout.geometry()
    out = {
        int(t): np.zeros(int(g.shard_elems[t]) * dt.itemsize, np.uint8) for t in np.unique(dst_layout.table())
    }
    sb = {t: b.view(np.uint8) for t, b in src.shards.items()}
    for t, off, s in recvs[:, [0, 2, 3]].tolist():
        st, so, n = sends[s, 0], sends[s, 2], sends[s, 3]
        out[t][off : off + n] = sb[st][so : so + n]
    for t, so, do, n in copies[:, [0, 2, 3, 4]].tolist():
        out[t][do : do + n] = sb[t][so : so + n]
    return Sharded(dst_layout, {t: b.view(dt) for t, b in out.items()})


@pytest.mark.parametrize("seed", range(60))
def test_random_relayout_delivers_and_schedules(seed):
    rng, num_tiles, src, dst = random_case(seed)
    sends, recvs, copies = relayout_transfers(src, dst)
    assert ex.check_phase(sends, recvs, copies, num_tiles, LATENCY, BUDGET, [src], [dst]) is None
    # Data: what arrives is the tensor in the destination layout, on every replica.
    value = rng.standard_normal(src.shape_).astype(np.float32)
    moved = move(sends, recvs, copies, encode(src, value), dst)
    expected = encode(dst, value)
    for t, buf in expected.shards.items():
        np.testing.assert_array_equal(moved.shards[t].view(np.uint8), buf.view(np.uint8), err_msg=f"tile {t}")
    np.testing.assert_array_equal(decode(moved), decode(expected))
    # Schedules of both modes are valid, and the vectorised scheduler equals the one-at-a-time reference.
    for mode in ("latency", "compact"):
        s, r = (
            (sends, recvs) if mode == "latency" else split_chunks(sends, recvs, 4 * int(rng.integers(1, 9)))
        )
        rank = priority(s, r, num_tiles, mode)
        starts = schedule_starts(s, r, rank, LATENCY)
        np.testing.assert_array_equal(starts, schedule_starts_loop(s, r, rank))
        s2, r2 = s.copy(), r.copy()
        s2[:, 4] = starts
        r2[:, 4] = starts[r2[:, 3]] + LATENCY
        assert ex.check_phase(s2, r2, copies, num_tiles, LATENCY, BUDGET, [src], [dst]) is None, mode
        # No idle sender: every transfer starts when its sender or one of its receivers becomes free.
        if len(s2):
            assert starts.min() == 0


def test_multi_buffer_phase_tables():
    rng = np.random.default_rng(7)
    pairs = [(random_layout(rng, (9, 13), 6, f32), random_layout(rng, (9, 13), 6, f32)) for _ in range(3)]
    sends, recvs, copies = phase_tables(pairs)
    msg = ex.check_phase(
        sends, recvs, copies, 6, LATENCY, BUDGET, [p[0] for p in pairs], [p[1] for p in pairs]
    )
    assert msg is None
    assert set(np.unique(sends[:, 1])) <= {0, 1, 2}


def scheduled_case():
    rng = np.random.default_rng(3)
    src = tl.LayoutAttr((8, 8), (2, 8), np.arange(4, dtype=np.int32)[:, None], f32)
    dst = tl.LayoutAttr((8, 8), (8, 2), (np.arange(4, dtype=np.int32)[:, None] + 1) % 4, f32)
    s, r, c = relayout_transfers(src, dst)
    rank = priority(s, r, 4, "latency")
    starts = schedule_starts(s, r, rank, LATENCY)
    s[:, 4] = starts
    r[:, 4] = starts[r[:, 3]] + LATENCY
    del rng
    return s, r, c, src, dst


def test_verifier_accepts_the_schedule():
    s, r, c, src, dst = scheduled_case()
    assert ex.check_phase(s, r, c, 4, LATENCY, BUDGET, [src], [dst]) is None


def test_verifier_rejects_receive_conflict():
    s, r, c, src, dst = scheduled_case()
    # Two receives on one tile in the same cycle: move every send to cycle 0.
    s[:, 4] = 0
    r[:, 4] = LATENCY
    msg = ex.check_phase(s, r, c, 4, LATENCY, BUDGET, [src], [dst])
    assert msg is not None and "two words in cycle" in msg


def test_verifier_rejects_receive_without_send_and_late_receive():
    s, r, c, src, dst = scheduled_case()
    r2 = r.copy()
    r2[0, 3] = len(s)
    assert "has no send" in ex.check_phase(s, r2, c, 4, LATENCY, BUDGET, [src], [dst])
    r3 = r.copy()
    r3[0, 4] += 1
    assert "does not match its send" in ex.check_phase(s, r3, c, 4, LATENCY, BUDGET, [src], [dst])


def test_verifier_rejects_undelivered_and_double_written_data():
    s, r, c, src, dst = scheduled_case()
    # Drop one receive: its send may become unheard, or its bytes are not delivered.
    msg = ex.check_phase(s, r[1:], c, 4, LATENCY, BUDGET, [src], [dst])
    assert msg is not None and ("not delivered" in msg or "no receiver" in msg)
    r2 = r.copy()
    r2[1, 2] = r2[0, 2]
    r2[1, 0] = r2[0, 0]
    msg = ex.check_phase(s, r2, c, 4, LATENCY, BUDGET, [src], [dst])
    assert msg is not None and ("twice" in msg or "two words" in msg)


def test_verifier_rejects_row_budget():
    s, r, c, src, dst = scheduled_case()
    assert "over the budget" in ex.check_phase(s, r, c, 4, LATENCY, 8, [src], [dst])


def test_compact_mode_keeps_address_order_per_sender():
    rng = np.random.default_rng(11)
    src = random_layout(rng, (64, 48), 8, f16, "row_major")
    dst = random_layout(rng, (64, 48), 8, f16, "row_major")
    s, r, _ = relayout_transfers(src, dst)
    s, r = split_chunks(s, r, 64)
    starts = schedule_starts(s, r, priority(s, r, 8, "compact"), LATENCY)
    for t in np.unique(s[:, 0]):
        sel = np.nonzero(s[:, 0] == t)[0]
        for b in np.unique(s[sel, 1]):
            sb = sel[s[sel, 1] == b]
            by_time = sb[np.argsort(starts[sb])]
            assert np.all(np.diff(s[by_time, 2]) > 0), f"tile {t} sends out of address order"


@pytest.mark.parametrize("seed", range(20))
def test_compact_mode_never_loses_on_its_cap(seed):
    """Compact mode keeps a phase's compact schedule only with fewer row bytes on the busiest tile and at most
    max_slowdown more cycles; otherwise the phase is exactly the latency-first schedule."""
    from ipu.dialects import nn
    from ipu.passes.exchange_schedule import schedule_phase

    _, num_tiles, src, dst = random_case(1000 + seed)
    sends, recvs, copies = relayout_transfers(src, dst)

    def phase():
        x = nn.InputOp("x", TensorType(src.dtype, list(src.shape_)))
        x.attributes[tl.LAYOUT_ATTR] = src
        return ex.PhaseOp([x.result], [dst], sends, recvs, copies, num_tiles, LATENCY, BUDGET)

    lat, cmp_ = phase(), phase()
    schedule_phase(lat, "latency", 4)
    schedule_phase(cmp_, "compact", 4, max_slowdown=0.1)
    for p in (lat, cmp_):
        p.verify_()
    if cmp_.mode.data == "compact":
        assert cmp_.max_row_bytes.value.data < lat.max_row_bytes.value.data
        assert cmp_.cycles.value.data <= 1.1 * lat.cycles.value.data
    else:
        np.testing.assert_array_equal(cmp_.send_table(), lat.send_table())


@pytest.mark.parametrize("seed", range(80))
def test_relayout_transfers_scatter_matches_sort(seed):
    """relayout_transfers (elements put into destination storage order by one scatter) gives exactly the tables
    of the sort it replaced (`_relayout_transfers_sorted`): row-major, AMP and column-panel orders, replicas,
    ranks 1-3."""
    from ipu.passes.exchange_lower import _relayout_transfers_sorted

    rng = np.random.default_rng(1000 + seed)
    num_tiles = int(rng.integers(2, 13))
    rank = int(rng.integers(1, 4))
    shape = tuple(int(rng.integers(1, 40 if rank == 1 else 20)) for _ in range(rank))
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]

    def order():
        if rank != 2:
            return "row_major"
        return str(rng.choice(["row_major", "amp16", f"cols{int(rng.integers(1, 9))}"]))

    src = random_layout(rng, shape, num_tiles, dtype, order())
    dst = random_layout(rng, shape, num_tiles, dtype, order())
    buf = int(rng.integers(0, 3))
    for got, want in zip(relayout_transfers(src, dst, buf), _relayout_transfers_sorted(src, dst, buf)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("seed", range(60))
def test_relayout_transfers_row_pieces_match_sort(seed):
    """Two row-major layouts with long rows: relayout_transfers works on pieces of rows
    (`_relayout_transfers_rows`) and gives exactly the tables of the element sort."""
    from ipu.passes.exchange_lower import _relayout_transfers_rows, _relayout_transfers_sorted

    rng = np.random.default_rng(2000 + seed)
    num_tiles = int(rng.integers(2, 13))
    rank = int(rng.integers(1, 4))
    shape = (*(int(rng.integers(1, 7)) for _ in range(rank - 1)), int(rng.integers(8, 90)))
    dtype = DTYPES[int(rng.integers(len(DTYPES)))]

    def layout():
        lay = random_layout(rng, shape, num_tiles, dtype, "row_major")
        if rng.random() < 0.5:  # long last-dimension blocks: few pieces per row
            block = (*lay.block_[:-1], int(rng.integers(max(1, shape[-1] // 3), shape[-1] + 1)))
            nb = int(np.prod([-(-s // b) for s, b in zip(shape, block)]))
            reps = lay.replicas.data
            table = np.stack([rng.permutation(num_tiles)[:reps] for _ in range(nb)]).astype(np.int32)
            lay = tl.LayoutAttr(shape, block, table, dtype, "row_major")
        return lay

    src, dst = layout(), layout()
    buf = int(rng.integers(0, 3))
    got = _relayout_transfers_rows(src, dst, buf)
    want = _relayout_transfers_sorted(src, dst, buf)
    if got is None:
        got = relayout_transfers(src, dst, buf)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_largest_first_only_where_the_timed_exchange_is_shorter():
    """Latency-first mode takes the largest sends first only where the package's timed exchange (`timed_span`)
    then runs the phase in fewer cycles, and otherwise keeps exactly the rotation order's schedule; over these
    relayouts both outcomes occur."""
    from ipu.dialects import nn
    from ipu.passes.exchange_schedule import schedule_phase, timed_span

    chosen = set()
    for seed in range(40):
        _, num_tiles, src, dst = random_case(2000 + seed)
        tables = relayout_transfers(src, dst)

        def phase(src=src, dst=dst, tables=tables, num_tiles=num_tiles):
            x = nn.InputOp("x", TensorType(src.dtype, list(src.shape_)))
            x.attributes[tl.LAYOUT_ATTR] = src
            return ex.PhaseOp([x.result], [dst], *tables, num_tiles, LATENCY, BUDGET)

        rot, best = phase(), phase()
        schedule_phase(rot, "latency", 4, largest=False)
        schedule_phase(best, "latency", 4)
        best.verify_()
        assert rot.mode.data == "latency"
        chosen.add(best.mode.data)

        def span(p):
            return timed_span(p.send_table(), p.recv_table(), p.send_table()[:, 4])

        if best.mode.data == "largest":
            assert span(best) < span(rot)
        else:
            assert best.mode.data == "latency"
            np.testing.assert_array_equal(best.send_table(), rot.send_table())
    assert chosen == {"latency", "largest"}


def _broadcast_and_gather(bcast_elems: int, rows: int, seed: int, cols: int = 576):
    """A module whose one phase moves a parameter of `bcast_elems` f16 from tile 95 to `rows` tiles (one send, a
    broadcast) and gathers an f32 [rows, cols] tensor from [rows / 8, 32] blocks into one row per tile (a layer
    norm's parameters and rows)."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import ModuleOp

    from ipu.dialects import nn

    rng = np.random.default_rng(seed)
    n = 96
    p_src = tl.LayoutAttr((bcast_elems,), (bcast_elems,), np.array([[95]], np.int32), f16)
    p_dst = tl.LayoutAttr((bcast_elems,), (bcast_elems,), np.arange(rows, dtype=np.int32)[None, :], f16)
    blocks = 8 * (cols // 32)
    g_src = tl.LayoutAttr(
        (rows, cols), (-(-rows // 8), 32), (rng.permutation(blocks) % n)[:, None].astype(np.int32), f32
    )
    g_dst = tl.LayoutAttr((rows, cols), (1, cols), rng.permutation(rows)[:, None].astype(np.int32), f32)
    srcs = []
    for name, lay in (("p", p_src), ("g", g_src)):
        x = nn.InputOp(name, TensorType(lay.dtype, list(lay.shape_)))
        x.attributes[tl.LAYOUT_ATTR] = lay
        srcs.append(x)
    tables = phase_tables([(p_src, p_dst), (g_src, g_dst)])
    phase = ex.PhaseOp([s.result for s in srcs], [p_dst, g_dst], *tables, n, LATENCY, BUDGET)
    ret = func.ReturnOp(*phase.res)
    f = func.FuncOp("f", ([], [r.type for r in phase.res]))
    f.body.block.add_ops([*srcs, ex.SyncOp(150), phase, ret])
    return ModuleOp([f]), ret


def test_broadcasts_split_off_where_two_phases_are_shorter():
    """exchange-schedule runs a phase's broadcasts (results sent to >= BROADCAST_RECEIVERS tiles) as a phase of
    their own before the rest exactly where the two timed spans and the barrier between are shorter than the
    phase's: then the parts are valid phases (every byte delivered once, no port conflicts), a barrier as the one
    before lies between them, and each result is read from its part; otherwise (and with split_broadcasts=false)
    the phase stays whole. Over these cases both happen."""
    from ipu.passes.exchange_schedule import (
        BROADCAST_RECEIVERS,
        PHASE_ENTRY_CYCLES,
        ExchangeSchedulePass,
        schedule_phase,
        timed_span,
    )

    def span(p):
        return timed_span(p.send_table(), p.recv_table(), p.send_table()[:, 4])

    outcomes = set()
    cases = ((1152, 80, 0), (2304, 72, 1), (4, 80, 2), (8, 64, 3), (2304, 40, 4), (512, 96, 5))
    for bcast, rows, seed in cases:
        mod, ret = _broadcast_and_gather(bcast, rows, seed)
        whole_mod, _ = _broadcast_and_gather(bcast, rows, seed)
        whole = next(o for o in whole_mod.walk() if isinstance(o, ex.PhaseOp))
        schedule_phase(whole, "latency", 256)
        kept_mod, _ = _broadcast_and_gather(bcast, rows, seed)
        ExchangeSchedulePass(split_broadcasts=False).apply(None, kept_mod)
        assert len([o for o in kept_mod.walk() if isinstance(o, ex.PhaseOp)]) == 1
        ExchangeSchedulePass().apply(None, mod)
        phases = [o for o in mod.walk() if isinstance(o, ex.PhaseOp)]
        if len(phases) == 1:
            outcomes.add("kept")
            if rows >= BROADCAST_RECEIVERS:  # a broadcast was there: splitting it off would not have paid
                assert span(phases[0]) <= span(whole)
            continue
        outcomes.add("split")
        first, second = phases
        assert rows >= BROADCAST_RECEIVERS
        assert isinstance(second.prev_op, ex.SyncOp) and second.prev_op.cycles.value.data == 150
        assert isinstance(first.prev_op, ex.SyncOp)
        for p in phases:
            p.verify_()
        assert [r.owner for r in ret.operands] == [first, second]  # the broadcast first, then the gather
        assert span(first) + span(second) + 150 + PHASE_ENTRY_CYCLES < span(whole)
    assert outcomes == {"kept", "split"}, outcomes
