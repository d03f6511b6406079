"""`exchange-schedule`: gives every transfer of every exchange phase its cycle.

The model (IPU_FACTS 6): a tile's exchange port sends one 4-byte word per cycle and receives one word per cycle;
a transfer of b bytes holds its sender's port and every receiver's port for ceil(b / 4) cycles, the receivers
`latency` cycles after the sender. The schedule is list scheduling in one global priority order: each transfer
starts as soon as its sender and all its receivers are free, in priority order. It is computed as the least
fixpoint of "start = max(end of the previous transfer on the sender, end of the previous transfer on each
receiver)", which numpy evaluates a whole chain at a time (grouped cumulative max), alternating sender and
receiver chains until nothing moves; a plain Python loop computes the same schedule if that takes too many
rounds. Both chain orders follow the same priority order, so the precedence graph is acyclic and the fixpoint
exists and equals greedy list scheduling.

Modes (option `mode`):
- "latency" (default): whole segments; the priority is the rotation distance (first receiver - sender) mod tiles,
  so in round k every sender talks to the tile k places further on: unicast rounds are conflict-free. Where the
  sends differ in size, the same order with the largest sends first is tried too (option `largest`) and kept
  where the package's timed exchange (below) runs the phase in fewer cycles; the phase's `mode` is then
  "largest". A rotation round can leave a busy tile's large transfers to the end of the phase (So400m: the q / k
  results into the attention, 3,821 -> 3,318 cycles).
- "compact": address-ordered stream waves. Each sender sends in address order, so back-to-back sends merge into
  one encoded row; wave w holds the sends starting in words [w N, (w + 1) N) of their sender's stream
  (N = `stream_words`), waves go in order, and within a wave the senders with the most remaining words go first
  (endpoint balance). Per phase, the compact schedule is kept only if it lowers the busiest tile's encoded row
  bytes and is at most `max_slowdown` slower than latency-first; otherwise the phase stays latency-first (as
  seed 000 does: the alternative must not lose on the cap it optimises). Its `mode` property says which.

What the package runs: the lowering times every phase exactly (backend/lower/timed.py, `xch_timed`: one
internal sync, every tile's sends and receive set-ups at compiled cycles, each tile leaving at its own last receive),
taking the transfers
in this pass's priority order (grouped into rounds, `receive_rounds`) and the routine's own row costs; its span is
each phase summary's `timed_cycles` (So400m, one layer + head: 239.6 k cycles over the 54 phases, against this
pass's port-word bound of ~180 k). The timing has to be computed there: send staging (transfers that are not
whole aligned atoms) depends on the final addresses.

Reports per phase (properties): `cycles` (the phase's makespan), `row_bytes` (encoded exchange-table bytes per
tile, a [tiles, 1] table) and `max_row_bytes`; and on the module, the program's estimated cycles split into
compute, exchange and sync (`exchange.compute_cycles`, `exchange.exchange_cycles`, `exchange.sync_cycles`),
with `tile.repeat` bodies counted `count` times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.ir import Block
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from ipu.backend.lower import timed
from ipu.backend.lower.exchange import receive_rounds
from ipu.backend.target import Target
from ipu.dialects import exchange as ex
from ipu.dialects import tile as tl
from ipu.passes import cost_model as cm

MAX_ROUNDS = 200


def split_chunks(sends: np.ndarray, recvs: np.ndarray, chunk_bytes: int):
    """Cuts every send (and its receives) into pieces of at most chunk_bytes bytes."""
    if len(sends) == 0:
        return sends, recvs
    n = np.maximum(1, (sends[:, 3] + chunk_bytes - 1) // chunk_bytes)
    first = np.concatenate([[0], np.cumsum(n)[:-1]])
    k = np.arange(int(n.sum())) - np.repeat(first, n)
    src = np.repeat(np.arange(len(sends)), n)
    s = sends[src].copy()
    s[:, 2] += k * chunk_bytes
    s[:, 3] = np.minimum(chunk_bytes, sends[src, 3] - k * chunk_bytes)
    rn = n[recvs[:, 3]]
    rsrc = np.repeat(np.arange(len(recvs)), rn)
    rk = np.arange(int(rn.sum())) - np.repeat(np.concatenate([[0], np.cumsum(rn)[:-1]]), rn)
    r = recvs[rsrc].copy()
    r[:, 2] += rk * chunk_bytes
    r[:, 3] = first[recvs[rsrc, 3]] + rk
    return s, r


def _first_receiver(sends: np.ndarray, recvs: np.ndarray) -> np.ndarray:
    first = np.zeros(len(sends), np.int64)
    order = np.argsort(recvs[:, 3], kind="stable")
    idx, at = np.unique(recvs[order, 3], return_index=True)
    first[idx] = recvs[order, 0][at]
    return first


def priority(
    sends: np.ndarray, recvs: np.ndarray, num_tiles: int, mode: str, stream_words: int = 256
) -> np.ndarray:
    """A rank per send (0 = first). "latency": the rotation order; "largest": the largest sends first (then the
    rotation order); "compact": address-ordered stream waves."""
    if len(sends) == 0:
        return np.zeros(0, np.int64)
    if mode in ("latency", "largest"):
        first = _first_receiver(sends, recvs)
        rot = (first - sends[:, 0]) % num_tiles
        keys = (sends[:, 2], sends[:, 0], rot, sends[:, 1])
        order = np.lexsort(keys + ((-sends[:, 3],) if mode == "largest" else ()))
    else:
        # Address-ordered streams: each sender's sends sorted by (buffer, address); wave w holds the sends that
        # start within the stream's words [w * N, (w + 1) * N). Within a wave, senders with more remaining
        # words go first (endpoint balance), and a sender's sends stay together in address order, so they run
        # back to back and merge into one encoded send row.
        by_addr = np.lexsort((sends[:, 2], sends[:, 1], sends[:, 0]))
        t_sorted = sends[by_addr, 0]
        w_sorted = ex.words(sends[by_addr, 3])
        csum = np.cumsum(w_sorted)
        start = np.searchsorted(t_sorted, t_sorted, side="left")
        before = csum - w_sorted - (csum[start] - w_sorted[start])  # words earlier in the same stream
        total = np.bincount(t_sorted, weights=w_sorted, minlength=num_tiles)
        wave = np.empty(len(sends), np.int64)
        remaining = np.empty(len(sends), np.int64)
        wave[by_addr] = before // stream_words
        remaining[by_addr] = total[t_sorted] - (before // stream_words) * stream_words
        pos = np.empty(len(sends), np.int64)
        pos[by_addr] = np.arange(len(sends))
        order = np.lexsort((pos, sends[:, 0], -remaining, wave))
    rank = np.empty(len(sends), np.int64)
    rank[order] = np.arange(len(sends))
    return rank


def _chain_starts(group: np.ndarray, start: np.ndarray, w: np.ndarray) -> np.ndarray:
    """For transfers already sorted into chains (equal `group` = one chain, in order): the earliest starts with
    each transfer after the previous one of its chain, and not before its own `start`."""
    n = len(group)
    if n == 0:
        return start
    csum = np.cumsum(w)
    new_group = np.ones(n, bool)
    new_group[1:] = group[1:] != group[:-1]
    base = np.maximum.accumulate(np.where(new_group, csum - w, 0))
    cex = csum - w - base  # exclusive prefix sum of words within the chain
    v = start - cex
    gid = np.cumsum(new_group) - 1
    big = int(np.abs(v).max()) * 2 + 1
    acc = np.maximum.accumulate(v + gid * big) - gid * big
    return cex + acc


def schedule_starts(sends: np.ndarray, recvs: np.ndarray, rank: np.ndarray, latency: int) -> np.ndarray:
    """Send start cycles of the greedy list schedule in `rank` order (see the module docstring)."""
    n = len(sends)
    if n == 0:
        return np.zeros(0, np.int64)
    w = ex.words(sends[:, 3])
    s_order = np.lexsort((rank, sends[:, 0]))
    r_order = np.lexsort((rank[recvs[:, 3]], recvs[:, 0]))
    r_send = recvs[r_order, 3]
    r_tile = recvs[r_order, 0]
    start = np.zeros(n, np.int64)
    for _ in range(MAX_ROUNDS):
        s = np.empty(n, np.int64)
        s[s_order] = _chain_starts(sends[s_order, 0], start[s_order], w[s_order])
        req = _chain_starts(r_tile, s[r_send], w[r_send])
        new = s.copy()
        np.maximum.at(new, r_send, req)
        if np.array_equal(new, start):
            return start
        start = new
    return schedule_starts_loop(sends, recvs, rank)


def schedule_starts_loop(sends: np.ndarray, recvs: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """The same schedule, one transfer at a time (the reference the vectorised version is tested against)."""
    n = len(sends)
    w = ex.words(sends[:, 3]).tolist()
    tiles = sends[:, 0].tolist()
    by_send: list[list[int]] = [[] for _ in range(n)]
    for t, i in zip(recvs[:, 0].tolist(), recvs[:, 3].tolist()):
        by_send[i].append(t)
    send_free: dict[int, int] = {}
    recv_free: dict[int, int] = {}
    start = np.zeros(n, np.int64)
    for i in np.argsort(rank, kind="stable").tolist():
        c = send_free.get(tiles[i], 0)
        for t in by_send[i]:
            c = max(c, recv_free.get(t, 0))
        start[i] = c
        send_free[tiles[i]] = c + w[i]
        for t in by_send[i]:
            recv_free[t] = c + w[i]
    return start


def makespan(sends: np.ndarray, recvs: np.ndarray, starts: np.ndarray, latency: int) -> int:
    if len(recvs) == 0:
        return 0
    return int((starts[recvs[:, 3]] + latency + ex.words(sends[recvs[:, 3], 3])).max())


def timed_span(sends: np.ndarray, recvs: np.ndarray, starts: np.ndarray, target: Target | None = None) -> int:
    """The span of the phase as the package runs it (`backend/lower/timed.py`: the lowering takes the transfers
    in the order of their start cycles, groups them into `receive_rounds` and times every tile's rows with the
    routine `xch_timed`'s costs) for these send starts. Each send's atoms are its bytes in whole 8-byte atoms
    (the lowering's staging may add one where the data is not word-aligned: an estimate, not the package's
    figure)."""
    if len(recvs) == 0:
        return 0
    s = np.array(sends, np.int64)
    s[:, 4] = starts
    r = np.asarray(recvs, np.int64)
    rounds, _ = receive_rounds(s, r)
    atoms = (s[:, 3] + 7) // 8
    return int(timed.schedule(s[:, 0], atoms, r[:, 0], r[:, 3], rounds, target or Target.ipu21()).cycles)


def schedule_phase(
    phase: ex.PhaseOp, mode: str, stream_words: int, max_slowdown: float = 0.1, largest: bool = True
) -> None:
    """Schedules one phase. Latency-first: the rotation order, or (largest=True) the largest sends first where
    that gives the phase a shorter timed span (`timed_span`: the exchange as the package runs it; one rotation
    round can leave a heavily loaded tile's big transfers to the end). Compact mode keeps its address-ordered
    schedule only where it lowers the busiest tile's encoded rows at most `max_slowdown` slower than the
    latency-first schedule; otherwise the phase keeps the latency-first schedule (its `mode` says which one it
    got: "latency", "largest" or "compact")."""
    sends, recvs = phase.send_table(), phase.recv_table()
    n, lat = phase.tiles.value.data, phase.latency.value.data
    starts = schedule_starts(sends, recvs, priority(sends, recvs, n, "latency"), lat)
    chosen = "latency"
    if largest and len(sends) > 1 and len(np.unique(sends[:, 3])) > 1:  # equal sizes: the same order
        l_starts = schedule_starts(sends, recvs, priority(sends, recvs, n, "largest"), lat)
        if timed_span(sends, recvs, l_starts) < timed_span(sends, recvs, starts):
            starts, chosen = l_starts, "largest"
    if mode == "compact" and len(sends):
        c_starts = schedule_starts(sends, recvs, priority(sends, recvs, n, "compact", stream_words), lat)

        def rows(st):
            s, r = sends.copy(), recvs.copy()
            s[:, 4] = st
            r[:, 4] = st[r[:, 3]] + lat
            return int(ex.encoded_row_bytes(s, r, n).max())

        if rows(c_starts) < rows(starts) and makespan(sends, recvs, c_starts, lat) <= (
            1 + max_slowdown
        ) * makespan(sends, recvs, starts, lat):
            starts, chosen = c_starts, "compact"
    phase.set_schedule(starts, chosen, sends, recvs)


# A result whose sends reach this many receivers is a broadcast (So400m: a layer norm's parameters, sent to the 729
# tiles of its rows). A phase mixing broadcasts with other transfers may run as two phases, broadcasts first.
BROADCAST_RECEIVERS = 64
# The timed routine's cycles before its opening sync (the profile's short "exchange timed" step of each phase).
PHASE_ENTRY_CYCLES = 13


def _sub_tables(sends, recvs, copies, keep: np.ndarray):
    """The transfers of the results `keep` (a mask over the phase's results), renumbered (results and sends)."""
    new_buf = np.cumsum(keep) - 1
    s_keep = keep[sends[:, 1]]
    new_send = np.cumsum(s_keep) - 1
    s = sends[s_keep].copy()
    s[:, 1] = new_buf[s[:, 1]]
    r = recvs[keep[recvs[:, 1]]].copy()
    r[:, 1], r[:, 3] = new_buf[r[:, 1]], new_send[r[:, 3]]
    c = copies[keep[copies[:, 1]]].copy()
    c[:, 1] = new_buf[c[:, 1]]
    return s, r, c


def _broadcasts(phase: ex.PhaseOp) -> np.ndarray:
    """A mask over the phase's results: those with a send to at least BROADCAST_RECEIVERS tiles."""
    sends = phase.send_table()
    receivers = np.bincount(phase.recv_table()[:, 3], minlength=len(sends))
    widest = np.zeros(len(phase.res), np.int64)
    np.maximum.at(widest, sends[:, 1], receivers)
    return widest >= BROADCAST_RECEIVERS


def _span(phase: ex.PhaseOp) -> int:
    return timed_span(phase.send_table(), phase.recv_table(), phase.send_table()[:, 4])


def split_broadcasts(phase: ex.PhaseOp, schedule) -> tuple[ex.PhaseOp, ex.PhaseOp, np.ndarray] | None:
    """Two phases for one (`split_broadcasts`): the results sent to at least BROADCAST_RECEIVERS tiles, then the
    others, where their timed spans plus a barrier are shorter than the phase's (`timed_span`). A broadcast
    holds the port of every tile it reaches, so receipts scheduled among its sends wait for it or delay it
    (So400m: a layer norm's gather of its rows with its parameters, 4,004 cycles, against 1,251 + 2,177 and a
    barrier apart). `schedule` schedules a phase; the phase itself is already scheduled. Returns the two parts
    and the mask of the phase's results in the first; None: keep the phase."""
    sync = phase.prev_op
    sends, recvs, copies = phase.send_table(), phase.recv_table(), phase.copy_table()
    if not isinstance(sync, ex.SyncOp) or len(recvs) == 0:
        return None
    broadcast = _broadcasts(phase)
    if not broadcast.any() or broadcast.all():
        return None
    parts = []
    for keep in (broadcast, ~broadcast):
        idx = np.flatnonzero(keep).tolist()
        s, r, c = _sub_tables(sends, recvs, copies, keep)
        part = ex.PhaseOp(
            [phase.sources[i] for i in idx], [phase.layouts.data[i] for i in idx], s, r, c,
            phase.tiles.value.data, phase.latency.value.data, phase.row_budget.value.data,
        )  # fmt: skip
        schedule(part)
        parts.append(part)
    extra = sync.cycles.value.data + PHASE_ENTRY_CYCLES
    if _span(parts[0]) + _span(parts[1]) + extra >= _span(phase):
        return None
    return parts[0], parts[1], broadcast


def _replace_by(phase: ex.PhaseOp, first: ex.PhaseOp, second: ex.PhaseOp, in_first: np.ndarray) -> None:
    """phase -> first, a barrier (as the one before phase), second; result i taken over by first where
    in_first[i], else by second."""
    sync = phase.prev_op
    Rewriter.insert_op([first, ex.SyncOp(sync.cycles.value.data, sync.zone.data), second],
                       InsertPoint.before(phase))  # fmt: skip
    parts, counters = (first, second), [0, 0]
    for res, k in zip(phase.res, np.where(in_first, 0, 1).tolist(), strict=True):
        new = parts[k].res[counters[k]]
        counters[k] += 1
        new.name_hint = res.name_hint
        res.replace_all_uses_with(new)
    Rewriter.erase_op(phase)


def block_cycles(block: Block) -> tuple[int, int, int]:
    """(compute, exchange, sync) estimated cycles of a block, repeat bodies counted `count` times."""
    comp = exch = sync = 0
    for op in block.ops:
        if isinstance(op, ex.PhaseOp):
            exch += op.cycles.value.data
            copies = op.copy_table()
            if len(copies):
                per_tile = np.bincount(copies[:, 0], weights=copies[:, 4])
                comp += cm.copy_cycles(int(per_tile.max()))
        elif isinstance(op, ex.SyncOp):
            sync += op.cycles.value.data
        elif isinstance(op, tl.RepeatOp):
            c, e, s = block_cycles(op.body.block)
            n = op.iterations
            comp, exch, sync = comp + n * c, exch + n * e, sync + n * s
        else:
            plan = op.attributes.get(tl.PLAN_ATTR)
            if plan is not None:
                comp += tl.plan_cycles(plan)
    return comp, exch, sync


@dataclass(frozen=True)
class ExchangeSchedulePass(ModulePass):
    """Schedules every exchange phase (see the module docstring)."""

    name = "exchange-schedule"

    mode: str = "latency"
    """"latency" (default: shortest phases) or "compact" (address-ordered stream waves: fewer encoded rows)."""
    stream_words: int = 256
    """Compact mode: words per stream wave."""
    max_slowdown: float = 0.1
    """Compact mode: a phase takes the compact schedule only if it has fewer encoded row bytes on the busiest
    tile and is at most this much slower than the latency-first schedule."""
    largest: bool = True
    """Latency-first: a phase takes the largest sends first where the package's timed exchange then runs it in
    fewer cycles than the rotation order (`timed_span`)."""
    split_broadcasts: bool = True
    """A phase whose results include broadcasts (sent to at least `BROADCAST_RECEIVERS` tiles) and others runs as
    two phases, the broadcasts first, where their timed spans and the barrier between are shorter."""

    def __post_init__(self) -> None:
        if self.mode not in ("latency", "compact"):
            raise ValueError(f"{self.name}: option 'mode' must be one of latency, compact, got {self.mode!r}")
        if self.stream_words <= 0:
            raise ValueError(f"{self.name}: option 'stream_words' must be positive, got {self.stream_words}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        def schedule(p: ex.PhaseOp) -> None:
            schedule_phase(p, self.mode, self.stream_words, self.max_slowdown, self.largest)

        phases = []
        for p in [o for o in op.walk() if isinstance(o, ex.PhaseOp)]:
            schedule(p)
            split = split_broadcasts(p, schedule) if self.split_broadcasts else None
            if split is None:
                phases.append(p)
            else:
                _replace_by(p, *split)
                phases.extend(split[:2])
        for p in phases:
            per_tile = ex.encoded_row_bytes(p.send_table(), p.recv_table(), p.tiles.value.data)
            worst = int(per_tile.argmax()) if len(per_tile) else 0
            if len(per_tile) and per_tile[worst] > p.row_budget.value.data:
                raise PassFailedException(
                    f"exchange-schedule: exchange.phase: tile {worst} needs {int(per_tile[worst])} bytes of "
                    f"exchange rows in {self.mode} mode, over the budget of {p.row_budget.value.data}"
                )
        comp = exch = sync = 0
        for f in op.ops:
            for region in f.regions:
                for b in region.blocks:
                    c, e, s = block_cycles(b)
                    comp, exch, sync = comp + c, exch + e, sync + s
        for key, v in (("compute", comp), ("exchange", exch), ("sync", sync)):
            op.attributes[f"exchange.{key}_cycles"] = IntegerAttr(v, i64)
