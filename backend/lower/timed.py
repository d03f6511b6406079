"""An `exchange.phase` as one statically timed exchange: every tile's sends and receive set-ups at compiled cycles.

The IPU does not sync inside an exchange phase (../shared/reference/IPU_FACTS.md section 6): after one barrier every
tile runs its part of a compiled schedule. A `send` carries no destination; a receiver points $INCOMING_MUX at the
sender and opens a receive window ($INCOMING_DCOUNT atoms at $INCOMING_BASE) in time for the first atom. The
simulator (runtime/semantics.py) executes exactly that: atom k of a send issued at clock c leaves at
c + exchange_send_latency + 2k and arrives everywhere exchange_fabric_cycles later; a window opened at clock t takes
the next DCOUNT atoms of its sender that arrive at or after t. It names any receive that finds no sender, a window
switched before its data is in, two senders on one receive bus in one cycle, a send of data received in the same
phase, a received word overwritten in the phase, and data arriving after an internal sync that closes a phase.

One barrier per phase, as on the IPU (compute -> sync -> exchange): the routine opens with the internal sync and
ends with `sync TEXCH_SYNCZONE_RECV`, which holds the tile only until its own last window is in; each tile then goes
on to its compute at its own clock (its sends are out: a send row holds the supervisor for its atoms), and the next
phase's opening sync is the next barrier.

`schedule` places every transfer in time (list scheduling in exchange-schedule's order), respecting:

- each tile's supervisor: one table row at a time (a send row blocks it for its atoms; a receive row for the
  set-up only, the data lands in the background);
- each tile's receive port: one window at a time, the next opened only after the last atom of the previous one;
- the receive bus two neighbouring tiles share (`Target.tiles_per_exchange_bus`): one sender at a time, except the
  same send multicast to both;
- a window opens after the previous atoms of its sender went by (it takes the *next* atoms of that sender).

A send's data is multicast: one send row serves every receiver listening then. Two receives of one send on one
tile (two destinations) take two transmissions.

The routine `xch_timed` walks a per-tile table at one address shared by all tiles: word 0 = rows, then 4 words
per row and a last row that jumps to the routine's end (the RECV sync). A row's first word is its jump (`_jump`: the wait and the
row's kind as two code offsets); its other three are a receive row's sender, base and atoms (three `put`s, the
next row's dispatch inline) or a send row's send-tail entry, address and 256-atom blocks less one (`send` with
an immediate count: a table of 256 entries). A tile that receives and sends in one round gets a receive row and
a send row right after it, when its send is then still early enough for its receivers. The wait is exact: a
wait under FINE = 32 cycles jumps straight into the kind's table of single-cycle `delay`s, a longer one first into
a table of 32-cycle `delay`s (longer waits are split over rows that do nothing). The fine tables are the routine's
bulk (a receive entry is 12 instructions, five kinds): 32 fine and 128 middle entries reach the same 4,095 cycles
as 64 and 64 in 2.4 KB less code, at no cycle's cost (a wait of 32 or more pays the middle table's MID_EXTRA
cycles out of its own delay). The row costs below (`ROW`) are
the routine's instruction costs (the simulator's: 1 cycle, 6 for control and system instructions, a `send`
1 + latency + 2 per atom); tests/unit/test_lower_exchange_timed.py checks them against the simulator.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from ipu.backend.target import Target

ROW_WORDS = 4
MUX_BITS = 11  # receive rows name the sender in a word of their own; kept for the lowering's tile-count check
SEND_MARK = (1 << MUX_BITS) - 1
FINE = 32  # entries of each kind's fine delay table (a power of two): 0 .. FINE - 1 cycles
MID = 128  # entries of the middle table, in steps of FINE cycles
MAX_WAIT = FINE * MID - 1  # a longer wait is split over rows that do nothing (idle rows)
# A row's kind: which fine table its wait jumps into. `recv_send`: a receive row whose next row is a send of
# under 256 atoms with no wait, which it runs itself (that row's jump word is not used).
KINDS = ("recv", "send", "send_blocks", "idle", "recv_send")
RECV, SEND, SEND_BLOCKS, IDLE, RECV_SEND = range(5)

# The next row's dispatch: its four words, then a jump to the jump word's high half (an offset from .Lxt_base:
# a fine-table entry, or a middle-table entry, which takes the fine-table entry from the low half).
_DISPATCH = [
    "ld32 $m7, $m0, $mzero, 0",
    "ld32 $m4, $m0, $mzero, 1",
    "ld32 $m5, $m0, $mzero, 2",
    "ld32 $m6, $m0, $mzero, 3",
    f"add $m0, $m0, {4 * ROW_WORDS}",
    "shr $m3, $m7, 16",
    "add $m3, $m3, $m1",
    "br $m3",
]
MID_EXTRA = 10  # the middle table's cycles besides its delay: its delay's issue, shl, shr, add, br


def _fine(kind: int, r: int) -> list[str]:
    """A fine-table entry: wait r cycles, then the row (its words in $m4, $m5, $m6)."""
    puts = ["put $INCOMING_MUX, $m4", "put $INCOMING_BASE, $m5", "put $INCOMING_DCOUNT, $m6"]
    if kind == RECV:  # mux, base, atoms: the window; then the next row (inline)
        body = puts + _DISPATCH
    elif kind == RECV_SEND:  # the window, then the next row's send without its dispatch and wait
        body = puts + [
            "ld32 $m4, $m0, $mzero, 1",
            "ld32 $m5, $m0, $mzero, 2",
            f"add $m0, $m0, {4 * ROW_WORDS}",
            "add $m4, $m4, $m1",
            "br $m4",
        ]
    elif kind == SEND:  # the send-tail entry (offset), the address: under 256 atoms
        body = ["add $m4, $m4, $m1", "br $m4"]
    elif kind == SEND_BLOCKS:  # the same, after blocks of 256 ($m6: blocks - 1)
        body = ["add $m4, $m4, $m1", "bri .Lxt_blocks"]
    else:
        body = ["bri .Lxt_row"]
    return [f"delay {r}"] + body


def _lines(lines: list[str]) -> str:
    return "".join(x + "\n" if x.endswith(":") else f"    {x}\n" for x in lines)


def _layout() -> tuple[str, dict]:
    """The routine's text and the byte offsets (from .Lxt_base) of its jump targets: `mid` [64], `fine`
    [kind][64], `tail` [256], `done`."""
    body: list[str] = [".Lxt_base:"]
    at = 0
    off: dict = {"mid": [], "fine": [[] for _ in KINDS], "tail": []}

    def emit(lines: list[str]) -> None:
        nonlocal at
        body.extend(lines)
        at += 4 * sum(1 for x in lines if not x.endswith(":"))

    for j in range(MID):
        off["mid"].append(at)
        emit([f"delay {FINE * j}", "shl $m7, $m7, 16", "shr $m7, $m7, 16", "add $m7, $m7, $m1", "br $m7"])
    for k in range(len(KINDS)):
        for r in range(FINE):
            off["fine"][k].append(at)
            emit(_fine(k, r))
    for i in range(256):  # entry i sends i atoms (the count is an immediate), entry 0 none
        off["tail"].append(at)
        emit([f"send $m5+=, {i - 1}" if i else "bri .Lxt_row", "bri .Lxt_row"])
    emit([".Lxt_blocks:", "send $m5+=, 255", "brnzdec $m6, .Lxt_blocks", "br $m4"])
    off["done"] = at
    emit([".Lxt_done:", "sync TEXCH_SYNCZONE_RECV", "br $lr"])
    if at >= 1 << 16:
        raise AssertionError("xch_timed: the jump word's 16-bit offsets do not reach")
    text = (
        "\n.globl xch_timed\n.supervisor\nxch_timed:\n    sync TEXCH_SYNCZONE_INTERNAL\n"
        "    setzi $m1, .Lxt_base\n    add $m0, $m0, 4\n" + _lines([".Lxt_row:"] + _DISPATCH) + _lines(body)
    )
    return text, off


ROUTINE, _OFF = _layout()
_MID = np.array(_OFF["mid"], np.int64)
_FINE = np.array(_OFF["fine"], np.int64)
_TAIL = np.array(_OFF["tail"], np.int64)
_DONE = int(_OFF["done"])


@dataclass(frozen=True)
class RowCosts:
    """Cycles of the routine's rows, from a row's anchor (its start plus its wait) on one tile's supervisor clock.
    Clock 0 is the first row's start (the same on every tile: the opening sync releases all at once)."""

    wait: int = 14  # the row's dispatch (4 loads, 3 ALU, br), its fine delay's issue: the row's body
    mux_put: int = 14  # the receive set-up's `put $INCOMING_MUX` (clock before it)
    open: int = 26  # `put $INCOMING_DCOUNT`: the window opens at this clock
    recv: int = 32  # a receive row, anchor to the next row's start (its dispatch inline)
    send_issue: int = 21  # a send row's first `send` (add, br into the send-tail entry or the block loop)
    joined_issue: int = 42  # a recv_send row's `send` (its puts, 2 loads, 2 adds, br)
    idle: int = 20  # a row that does neither (a part of a long wait): bri to the dispatch
    block: int = 527  # send 255 (1 + 8 + 512) + brnzdec 6
    latency: int = 8

    def joined(self, atoms):
        """`after` for a send that follows its tile's receive row with no wait (the pair's costs from the
        receive's anchor): under 256 atoms a recv_send row, else a receive row and a send row."""
        return np.where(np.asarray(atoms) < 256, self.joined_issue - self.send_issue, self.recv)

    def send(self, atoms: int, after: int = 0) -> tuple[int, int, int]:
        """(first atom's departure, last atom's departure, row cost) of a send row of `atoms` atoms; `after`
        (`joined`) for a send right after its tile's receive row with no wait, from the receive's anchor."""
        first, last, cost = send_costs(np.array([atoms]), self, after)
        return int(first[0]), int(last[0]), int(cost[0])


ROW = RowCosts()


class _Timeline:
    """One tile's supervisor: its rows as sorted, disjoint [anchor, anchor + cost) intervals."""

    __slots__ = ("starts", "ends", "rows")

    def __init__(self):
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.rows: list[tuple] = []

    def fit(self, lo: int, cost: int) -> int:
        """The earliest anchor >= lo where a row of `cost` cycles fits between the rows there."""
        st, en = self.starts, self.ends
        i = bisect_right(st, lo)
        if i and en[i - 1] > lo:
            lo = en[i - 1]
        while i < len(st) and st[i] < lo + cost:
            lo = max(lo, en[i])
            i += 1
        return lo

    def insert(self, anchor: int, cost: int, row: tuple) -> None:
        i = bisect_right(self.starts, anchor)
        self.starts.insert(i, anchor)
        self.ends.insert(i, anchor + cost)
        self.rows.insert(i, row)


@dataclass
class Schedule:
    """Per tile: rows (anchor, cost, kind, a, b) in time order; kind 0 = receive (a = sender, b = receive index),
    1 = send (a = atoms, b = send index); and the phase's span in cycles (the last row's end on any tile, and
    the last arrival)."""

    rows: dict[int, list[tuple]] | None
    cycles: int
    transmissions: int
    rounds: int = 0  # the groups the transmissions were taken in (`receive_rounds`)
    # The same rows as arrays (`row_arrays`), sorted by tile then anchor (`schedule`).
    arrays: tuple | None = None

    def row_arrays(self) -> tuple:
        """(tile, anchor, cost, receive index or -1, send index or -1, atoms sent), by tile then anchor."""
        if self.arrays is not None:
            return self.arrays
        flat = [(t,) + row for t, rows in sorted(self.rows.items()) for row in rows]
        cols = np.array(flat, np.int64).reshape(-1, 6)
        t, at, cost, kind, a, b = (cols[:, k] for k in range(6))
        recv = np.where(kind == 0, b, -1)
        send = np.where(kind == 1, b, -1)
        return t, at, cost, recv, send, np.where(kind == 1, a, 0)

    def per_tile(self) -> dict[int, list[tuple]]:
        """{tile: [(anchor, cost, receive index or -1, send index or -1, atoms sent)]} in time order."""
        t, *cols = self.row_arrays()
        out: dict[int, list[tuple]] = {}
        for row in zip(t.tolist(), *(c.tolist() for c in cols)):
            out.setdefault(row[0], []).append(row[1:])
        return out


def schedule_gaps(
    sender: np.ndarray,
    atoms: np.ndarray,
    recv_tile: np.ndarray,
    recv_send: np.ndarray,
    recv_group: np.ndarray,
    target: Target,
    costs: RowCosts = ROW,
) -> Schedule:
    """Times every transfer: sends i (sender[i], atoms[i]), each to its receives (recv_tile[j], recv_send[j] == i);
    the receives of one send with the same recv_group[j] go in one transmission (a multicast), taken in the
    order of their groups (then of their sends). Greedy list scheduling: a transmission starts at the earliest
    cycle at which its sender's supervisor is free after its previous send, and every receiver can open its
    window in time (its port free: the previous window's last atom in; its supervisor free for the set-up; the
    sender's previous atoms gone by) and, with `Target.exchange_shared_receive_bus`, every receive bus is free.

    `receive_rounds` (backend/lower/exchange.py) gives the groups: its rounds pack each tile's receives so that
    one multicast serves the receivers free in a round; here a round's transmissions start as soon as their own
    tiles are free (no sync between rounds)."""
    fabric = target.exchange_fabric_cycles
    shared = target.exchange_shared_receive_bus
    bus_of = max(1, int(target.tiles_per_exchange_bus)) if shared else 1
    sender = np.asarray(sender, np.int64)
    atoms = np.asarray(atoms, np.int64)
    recv_tile = np.asarray(recv_tile, np.int64)
    recv_send = np.asarray(recv_send, np.int64)
    recv_group = np.asarray(recv_group, np.int64)
    by = np.lexsort((np.arange(len(recv_tile)), recv_send, recv_group))
    rs, rg = recv_send[by], recv_group[by]
    cut = (np.nonzero((rs[1:] != rs[:-1]) | (rg[1:] != rg[:-1]))[0] + 1).tolist()
    lo_idx, hi_idx = [0] + cut, cut + [len(by)]
    if not len(by):
        lo_idx, hi_idx = [], []
    lines: dict[int, _Timeline] = {}

    def line(t: int) -> _Timeline:
        tl = lines.get(t)
        if tl is None:
            tl = lines[t] = _Timeline()
        return tl

    send_end: dict[int, int] = {}  # per sender: end of its last send row
    prev_last: dict[int, int] = {}  # per sender: arrival of its last atom so far
    port_end: dict[int, int] = {}
    bus_end: dict[int, int] = {}
    bus_tx: dict[int, int] = {}
    cost_of: dict[int, tuple[int, int, int]] = {}
    span = 0
    rt_l, by_l, rs_l = recv_tile[by].tolist(), by.tolist(), rs.tolist()
    sender_l, atoms_l = sender.tolist(), atoms.tolist()
    rg_l = rg.tolist()
    k = 0
    while k < len(lo_idx):
        # One group (a round): first every receiver's window set-up, as early as its port and the sender's
        # previous atoms allow (a tile that also sends in the group opens its window before its own send row
        # blocks its supervisor), then every send, as early as its sender and all its receivers' windows allow.
        g_end = k
        while g_end < len(lo_idx) and rg_l[lo_idx[g_end]] == rg_l[lo_idx[k]]:
            g_end += 1
        opened = []
        for tx in range(k, g_end):
            a, b = lo_idx[tx], hi_idx[tx]
            i = rs_l[a]
            s = sender_l[i]
            open_lo = prev_last.get(s, -(1 << 40)) + 1 - costs.open  # after the sender's previous atoms
            ars = []
            for r, j in zip(rt_l[a:b], by_l[a:b]):
                rl = line(r)
                ar = rl.fit(max(port_end.get(r, 0) - costs.mux_put, open_lo, 0), costs.recv)
                rl.insert(ar, costs.recv, (0, s, j))
                ars.append(ar)
            opened.append(ars)
        for tx in range(k, g_end):
            a, b = lo_idx[tx], hi_idx[tx]
            i = rs_l[a]
            s, n = sender_l[i], atoms_l[i]
            if n not in cost_of:
                cost_of[n] = costs.send(n)
            first, last, cost = cost_of[n]
            receivers = rt_l[a:b]
            sline = line(s)
            lo = max(send_end.get(s, 0), max(opened[tx - k]) + costs.open - first - fabric)
            while True:
                anchor = sline.fit(lo, cost)
                af = anchor + first + fabric
                bump = 0
                if bus_of > 1:
                    for r in receivers:
                        p = r // bus_of
                        be = bus_end.get(p, 0)
                        if be > af and bus_tx.get(p) != tx:
                            bump = max(bump, be - af)
                if bump <= 0:
                    break
                lo = anchor + bump
            al = anchor + last + fabric
            sline.insert(anchor, cost, (1, n, i))
            send_end[s] = anchor + cost
            prev_last[s] = al
            for r in receivers:
                port_end[r] = al + 2
                if bus_of > 1:
                    p = r // bus_of
                    bus_end[p] = max(bus_end.get(p, 0), al + 2)
                    bus_tx[p] = tx
            span = max(span, al + 2, anchor + cost)
        k = g_end
    rows = {
        t: [(st, en - st) + row for st, en, row in zip(tl.starts, tl.ends, tl.rows)]
        for t, tl in lines.items()
    }
    for tl in rows.values():
        span = max(span, tl[-1][0] + tl[-1][1])
    return Schedule(rows, span, len(lo_idx), int(recv_group.max()) + 1 if len(recv_group) else 0)


def send_costs(
    atoms: np.ndarray, costs: RowCosts = ROW, after: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`RowCosts.send` of every element of atoms (int64 arrays: first and last departures, row cost). Under 256
    atoms: the send-tail entry's `send` at `send_issue`, then bri (6). From 256: q blocks from `send_issue` (527
    each), br into the tail entry (6), its send (if any atoms are left), bri (6)."""
    n = np.asarray(atoms, np.int64)
    q, r = n >> 8, n & 255
    c0, lat = costs.send_issue, costs.latency
    tail = np.where(q > 0, c0 + costs.block * q + 6, c0)  # the tail entry's clock
    first = c0 + lat + np.zeros_like(n)
    last = np.where(r > 0, tail + lat + 2 * (r - 1), c0 + costs.block * (q - 1) + lat + 510)
    cost = np.where(r > 0, tail + 1 + lat + 2 * r + 6, tail + 6)
    return first + after, last + after, cost + after


def schedule(
    sender: np.ndarray,
    atoms: np.ndarray,
    recv_tile: np.ndarray,
    recv_send: np.ndarray,
    recv_group: np.ndarray,
    target: Target,
    costs: RowCosts = ROW,
) -> Schedule:
    """Times every transfer, round by round (recv_group: `receive_rounds`; in a round a tile receives at most
    once and sends at most once), with array operations per round: first every receiver's window set-up, as
    early as its port (the previous window's last atom in), its supervisor and its sender's previous atoms
    allow, then every transmission of the round, as early as its sender's supervisor and all its receivers'
    windows allow. A tile's rows are appended in time (a set-up never goes into a gap before an earlier row;
    `schedule_gaps` does that, one Python step per row, and also respects a shared receive bus, which this one
    leaves to it)."""
    if target.exchange_shared_receive_bus and target.tiles_per_exchange_bus > 1:
        return schedule_gaps(sender, atoms, recv_tile, recv_send, recv_group, target, costs)
    fabric = target.exchange_fabric_cycles
    sender = np.asarray(sender, np.int64)
    atoms = np.asarray(atoms, np.int64)
    recv_tile = np.asarray(recv_tile, np.int64)
    recv_send = np.asarray(recv_send, np.int64)
    recv_group = np.asarray(recv_group, np.int64)
    nr = len(recv_tile)
    if nr == 0:
        return Schedule({}, 0, 0, 0)
    tiles = int(max(sender.max(initial=0), recv_tile.max())) + 1
    first_s, last_s, cost_s = send_costs(atoms, costs)
    first_c, last_c, cost_c = send_costs(atoms, costs, costs.joined(atoms))  # right after the receive row
    # Transmissions: (round, send) pairs, in round order then send index.
    tx_key = recv_group * len(sender) + recv_send
    tx_keys, tx_of = np.unique(tx_key, return_inverse=True)
    tx_round, tx_send = tx_keys // len(sender), tx_keys % len(sender)
    ntx = len(tx_keys)
    sup_free = np.zeros(tiles, np.int64)
    port_end = np.zeros(tiles, np.int64)
    prev_last = np.full(tiles, -(1 << 40), np.int64)
    recv_here = np.full(tiles, -1, np.int64)  # this round's receive on each tile
    r_anchor = np.zeros(nr, np.int64)
    r_joined = np.zeros(nr, bool)  # the receive's set-up shares its row with its tile's send
    t_anchor = np.zeros(ntx, np.int64)
    t_cost = np.zeros(ntx, np.int64)
    t_al = np.zeros(ntx, np.int64)
    t_recv = np.full(ntx, -1, np.int64)  # the receive whose row the send joins
    order = np.argsort(tx_of, kind="stable")  # receives by transmission (so by round)
    tx_bounds = np.searchsorted(tx_round, np.arange(int(tx_round.max()) + 2))
    rx_bounds = np.r_[0, np.cumsum(np.bincount(tx_of, minlength=ntx))]
    for k in range(len(tx_bounds) - 1):
        t0, t1 = tx_bounds[k], tx_bounds[k + 1]
        if t0 == t1:
            continue
        rx = order[rx_bounds[t0] : rx_bounds[t1]]  # this round's receives (each tile at most once)
        rt = recv_tile[rx]
        snd = sender[recv_send[rx]]
        ar = np.maximum.reduce([port_end[rt] - costs.mux_put, prev_last[snd] + 1 - costs.open, sup_free[rt]])
        ar = np.maximum(ar, 0)
        r_anchor[rx] = ar
        sup_free[rt] = ar + costs.recv
        recv_here[rt] = rx
        txs = np.arange(t0, t1)
        s = tx_send[txs]
        st = sender[s]
        need = np.full(len(txs), -(1 << 40), np.int64)  # the latest window of each transmission
        np.maximum.at(need, tx_of[rx] - t0, ar + costs.open)
        # A sender that also receives in this round sends in the same row when that is early enough.
        mine = recv_here[st]
        joined = mine >= 0
        joined[joined] &= r_anchor[mine[joined]] + first_c[s[joined]] + fabric >= need[joined]
        anchor = np.maximum(sup_free[st], need - first_s[s] - fabric)
        anchor = np.where(joined, r_anchor[np.maximum(mine, 0)], np.maximum(anchor, 0))
        al = anchor + np.where(joined, last_c[s], last_s[s]) + fabric
        cost = np.where(joined, cost_c[s], cost_s[s])
        t_anchor[txs], t_al[txs], t_cost[txs] = anchor, al, cost
        t_recv[txs] = np.where(joined, mine, -1)
        r_joined[mine[joined]] = True
        sup_free[st] = anchor + cost
        prev_last[st] = al
        port_end[rt] = al[tx_of[rx] - t0] + 2
        recv_here[rt] = -1
    # Rows per tile in time order: receives alone, sends alone, and receives with a send.
    alone = ~r_joined
    r_tile = np.r_[recv_tile[alone], sender[tx_send]]
    r_at = np.r_[r_anchor[alone], t_anchor]
    r_cost = np.r_[np.full(int(alone.sum()), costs.recv, np.int64), t_cost]
    r_recv = np.r_[np.nonzero(alone)[0], t_recv]
    r_send = np.r_[np.full(int(alone.sum()), -1, np.int64), tx_send]
    r_atoms = np.r_[np.zeros(int(alone.sum()), np.int64), atoms[tx_send]]
    o = np.lexsort((r_at, r_tile))
    cycles = int(max((r_at + r_cost).max(), (t_al + 2).max()))
    return Schedule(
        rows=None,
        cycles=cycles,
        transmissions=ntx,
        rounds=int(recv_group.max()) + 1,
        arrays=(r_tile[o], r_at[o], r_cost[o], r_recv[o], r_send[o], r_atoms[o]),
    )


def _jump(kind: np.ndarray, wait: np.ndarray) -> np.ndarray:
    """A row's jump word: a wait under FINE jumps straight into its kind's fine table (entry `wait`); a longer
    one through the middle table (FINE j cycles and MID_EXTRA more) into fine entry r, FINE j + r = wait -
    MID_EXTRA.
    High half: the first target; low half: the fine-table entry."""
    kind, wait = np.asarray(kind, np.int64), np.asarray(wait, np.int64)
    short = wait < FINE
    h = np.maximum(wait - MID_EXTRA, 0)
    fine = _FINE[kind, np.where(short, wait, h % FINE)]
    first = np.where(short, fine, _MID[np.minimum(h // FINE, MID - 1)])
    return (first << 16) | fine


def table(
    sched: Schedule, num_tiles: int, recv_atoms: np.ndarray, recv_mux: np.ndarray, send_addr, recv_addr
) -> np.ndarray:
    """The routine's table [tiles, 1 + 4 * (rows + 1)] (uint32): per tile the row count, then its rows in time
    order, each with its jump word (`_jump`: the wait, the gap since the previous row's end (the first row's since
    clock 0), and the row's kind) and three words: a receive row's sender, base and atoms; a send row's send-tail
    entry (offset from .Lxt_base), address and blocks of 256 atoms less one. A schedule row that receives and
    sends is a receive row, then a send row with no wait. A last row jumps to the routine's end (the RECV sync)."""
    t, at, cost, recv, send, satoms = sched.row_arrays()
    if not len(t):
        tab = np.zeros((num_tiles, 1 + ROW_WORDS), np.uint32)
        tab[:, 1] = _DONE | (_DONE << 16)
        return tab
    first_row = np.r_[True, t[1:] != t[:-1]]
    wait = at - np.where(first_row, 0, np.r_[0, (at + cost)[:-1]])
    if (wait < 0).any():
        raise AssertionError("timed exchange: overlapping rows in the schedule")
    both = (recv >= 0) & (send >= 0)
    reps = 1 + both.astype(np.int64)
    idx = np.repeat(np.arange(len(t)), reps)
    second = np.zeros(len(idx), bool)
    second[(np.cumsum(reps) - 1)[both]] = True
    is_r = (recv[idx] >= 0) & ~second
    is_s = (send[idx] >= 0) & ~is_r
    t, wait, sn = t[idx], np.where(second, 0, wait[idx]), np.where(is_s, satoms[idx], 0)
    r_atoms = np.r_[np.asarray(recv_atoms, np.int64), 0]  # one pad entry: index -1
    r_mux = np.r_[np.asarray(recv_mux, np.int64), 0]
    r_addr = np.r_[np.asarray(recv_addr, np.int64), 0]
    s_addr = np.r_[np.asarray(send_addr, np.int64), 0]
    ri, sa = recv[idx], s_addr[send[idx]]
    bad = is_s & ((sa % 8 != 0) | (sn < 1))
    if bad.any():
        i = int(np.nonzero(bad)[0][0])
        raise ValueError(
            f"tile {int(t[i])} sends {int(sn[i])} atoms from {int(sa[i]):#x}: not 8-byte aligned"
        )
    pair = is_r & both[idx] & (satoms[idx] < 256)  # a receive row that runs the next row's send
    kind = np.where(is_r, np.where(pair, RECV_SEND, RECV), np.where(sn >= 256, SEND_BLOCKS, SEND))
    w1 = np.where(is_r, r_mux[ri], np.where(is_s, _TAIL[sn & 255], 0))
    w2 = np.where(is_r, r_addr[ri], np.where(is_s, sa, 0))
    w3 = np.where(is_r, r_atoms[ri], np.where(sn >= 256, (sn >> 8) - 1, 0))
    long = np.nonzero(wait > MAX_WAIT)[0]
    if len(long):  # rows that do nothing before them, each waiting at most MAX_WAIT
        idle = ROW.idle
        extra = -(-(wait[long] - MAX_WAIT) // (MAX_WAIT + idle))
        spread = wait[long] - extra * idle  # over extra + 1 waits
        reps = np.ones(len(t), np.int64)
        reps[long] += extra
        t, kind, w1, w2, w3 = (np.repeat(x, reps) for x in (t, kind, w1, w2, w3))
        new_wait = np.repeat(wait, reps)
        at_row = np.cumsum(reps) - 1  # where each original row lands
        for i, k, total in zip(long.tolist(), extra.tolist(), spread.tolist()):
            pos = at_row[i] - k
            part = total // (k + 1)
            new_wait[pos : pos + k] = part
            new_wait[pos + k] = total - k * part
            kind[pos : pos + k] = IDLE
            w1[pos : pos + k] = w2[pos : pos + k] = w3[pos : pos + k] = 0
        wait = new_wait
    count = np.bincount(t, minlength=num_tiles)
    start = np.cumsum(count) - count
    k = np.arange(len(t)) - start[t]  # row index within its tile
    tab = np.zeros((num_tiles, 1 + ROW_WORDS * (int(count.max()) + 1)), np.uint32)
    tab[:, 0] = count
    col = 1 + ROW_WORDS * k
    for j, w in enumerate((_jump(kind, wait), w1, w2, w3)):
        tab[t, col + j] = w
    tab[np.arange(num_tiles), 1 + ROW_WORDS * count] = _DONE | (_DONE << 16)
    return tab


def encode_rows(rows: list[tuple[int, int, int, int, int, int]]) -> np.ndarray:
    """One tile's table from rows (wait, sender or -1, atoms to receive, receive address, atoms to send, send
    address): a row receives, sends, both (a receive row and a send row with no wait) or, with neither, waits."""
    words = [0]
    for wait, mux, rn, raddr, sn, saddr in rows:
        parts = []
        if rn:
            parts.append((RECV_SEND if 0 < sn < 256 else RECV, wait, [mux, raddr, rn]))
        if sn:
            kind = SEND_BLOCKS if sn >= 256 else SEND
            parts.append((kind, 0 if rn else wait, [int(_TAIL[sn & 255]), saddr, max((sn >> 8) - 1, 0)]))
        if not parts:
            parts.append((IDLE, wait, [0, 0, 0]))
        for kind, w, ws in parts:
            words += [int(_jump(np.array([kind]), np.array([w]))[0])] + ws
            words[0] += 1
    return np.array(words + [_DONE | (_DONE << 16), 0, 0, 0], np.uint32)


def _decoded(tab: np.ndarray, tile: int) -> list[tuple[int, ...]]:
    """Tile's table rows as (kind, wait, sender or -1, atoms to receive, receive address, atoms to send, send
    address)."""
    fine = {int(o): (k, r) for k in range(len(KINDS)) for r, o in enumerate(_FINE[k])}
    mid = {int(o): j for j, o in enumerate(_MID)}
    tail = {int(o): i for i, o in enumerate(_TAIL)}
    out = []
    for k in range(int(tab[tile, 0])):
        jw, w1, w2, w3 = (int(x) for x in tab[tile, 1 + ROW_WORDS * k : 1 + ROW_WORDS * (k + 1)])
        kind, r = fine[jw & 0xFFFF]
        wait = r if (jw & 0xFFFF) == jw >> 16 else FINE * mid[jw >> 16] + r + MID_EXTRA
        if kind in (RECV, RECV_SEND):
            out.append((kind, wait, w1, w3, w2, 0, 0))
        elif kind in (SEND, SEND_BLOCKS):
            sn = tail[w1] + (256 * (w3 + 1) if kind == SEND_BLOCKS else 0)
            out.append((kind, wait, -1, 0, 0, sn, w2))
        else:
            out.append((kind, wait, -1, 0, 0, 0, 0))
    return out


def table_rows(tab: np.ndarray, tile: int) -> list[tuple[int, int, int, int, int, int]]:
    """Tile's rows of a table as (wait, sender tile or -1, atoms to receive, receive address, atoms to send,
    send address); a receive and a send in one schedule row are two rows here (the send's wait 0)."""
    return [row[1:] for row in _decoded(tab, tile)]


def replay(tab: np.ndarray, target: Target, costs: RowCosts = ROW) -> list[tuple[int, int, int, int, int]]:
    """What the table delivers by the timing rule alone (a model of the simulator's timed exchange for tests):
    every receive window as (receiving tile, receive address, sender, the sender's send address, atoms) -- the
    window takes the next atoms of its sender arriving at or after it opens; it raises AssertionError for a
    window that finds no such send or a send shorter than the window."""
    fabric = target.exchange_fabric_cycles
    sends: dict[int, list[tuple[int, int, int]]] = {}  # tile -> (first arrival, address, atoms) in time order
    windows = []
    for t in range(tab.shape[0]):
        clock, after = 0, None
        for kind, wait, mux, rn, raddr, sn, saddr in _decoded(tab, t):
            anchor = clock + wait
            if after is not None:  # the send a recv_send row runs: from that row's anchor
                anchor = clock
            if rn:
                windows.append((t, anchor + costs.open, mux, rn, raddr))
                cost = costs.recv
            elif sn:
                first, _, cost = costs.send(sn, after or 0)
                sends.setdefault(t, []).append((anchor + first + fabric, saddr, sn))
            else:
                cost = costs.idle
            if kind == RECV_SEND:
                clock, after = anchor, int(costs.joined(256 - 1))
            else:
                clock, after = anchor + cost, None
    out = []
    for t, opened, mux, n, addr in windows:
        nxt = [s for s in sends.get(mux, []) if s[0] >= opened]
        assert nxt, f"tile {t}: a window opened at {opened} on tile {mux}, which sends nothing after it"
        _, at, k = nxt[0]
        assert k >= n, f"tile {t}: a window of {n} atoms takes a send of {k} from tile {mux}"
        out.append((t, addr, mux, at, n))
    return out
