"""The `exchange` dialect: the program as bulk-synchronous supersteps.

At this level the program is a sequence of supersteps: an all-tile `exchange.sync`, then an `exchange.phase`
that moves data between tiles, then compute. Compute sets stay the planned `nn` operators of the tile level
(one op per operator, carrying `tile.plan` with its cycle estimate); consecutive compute ops with no phase
between them form one compute set. `tile.repeat` still keeps the layer loop.

An `exchange.phase` turns one or more relayouts into transfers, held in dense int32 tables (one row per
transfer, never one op per tile):

    sends  [N, 5]: tile, buf, offset, bytes, cycle    one send from `tile`'s shard of source `buf` at byte
                                                       `offset`; `cycle` is its start (-1 before scheduling)
    recvs  [M, 5]: tile, buf, offset, send, cycle     `tile` receives send #`send` into its shard of result
                                                       `buf` at byte `offset`, starting at `cycle`
    copies [C, 5]: tile, buf, src_offset, dst_offset, bytes   on-tile copies (data already on the tile)

A send with several receives is a multicast. Words are 4 bytes; a transfer of b bytes occupies its sender's
port and each receiver's port for ceil(b / 4) cycles; a receive starts `latency` cycles after its send.
`exchange-schedule` fills the cycles and reports the phase's `cycles` and encoded exchange-table size per tile
(`row_bytes`, a [tiles, 1] table, and `max_row_bytes`).

The verifier proves what BSP needs, vectorised with numpy (millions of transfers at full size): every receive has
its send (and at the right cycle), every send is received, no tile sends or receives two words in one cycle,
every destination byte is written exactly once (all data delivered), source ranges lie inside the source shards,
and every tile's encoded rows fit `row_budget` bytes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    var_operand_def,
    var_result_def,
)
from xdsl.utils.exceptions import VerifyException

from ipu.backend.target import IPU21
from ipu.dialects import tile as tl
from ipu.passes import cost_model as cm

SEND_COLS = ("tile", "buf", "offset", "bytes", "cycle")
RECV_COLS = ("tile", "buf", "offset", "send", "cycle")
COPY_COLS = ("tile", "buf", "src_offset", "dst_offset", "bytes")
WORD_BYTES = 4
SCHEDULE_MODES = ("none", "latency", "largest", "compact")


def words(nbytes: np.ndarray) -> np.ndarray:
    return (nbytes + WORD_BYTES - 1) // WORD_BYTES


@irdl_op_definition
class SyncOp(IRDLOperation):
    """An all-tile barrier (sync zone "internal"): ends a compute set, starts an exchange phase."""

    name = "exchange.sync"
    zone = prop_def(StringAttr)
    cycles = prop_def(IntegerAttr[I64])
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$zone attr-dict"

    def __init__(self, cycles: int, zone: str = "internal"):
        super().__init__(properties={"zone": StringAttr(zone), "cycles": IntegerAttr(cycles, i64)})


@irdl_op_definition
class PhaseOp(IRDLOperation):
    """One exchange phase: result i is source i in layout `layouts[i]`, moved by the transfer tables."""

    name = "exchange.phase"
    sources = var_operand_def(TensorType)
    res = var_result_def(TensorType)
    layouts = prop_def(ArrayAttr[tl.LayoutAttr])
    sends = prop_def(DenseIntOrFPElementsAttr)
    recvs = prop_def(DenseIntOrFPElementsAttr)
    copies = prop_def(DenseIntOrFPElementsAttr)
    tiles = prop_def(IntegerAttr[I64])
    latency = prop_def(IntegerAttr[I64])
    row_budget = prop_def(IntegerAttr[I64])
    mode = prop_def(StringAttr)
    cycles = prop_def(IntegerAttr[I64])
    max_row_bytes = opt_prop_def(IntegerAttr[I64])
    row_bytes = opt_prop_def(DenseIntOrFPElementsAttr)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$sources attr-dict `:` type($sources) `->` type($res)"

    def __init__(
        self,
        sources: Sequence[SSAValue],
        layouts: Sequence[tl.LayoutAttr],
        sends: np.ndarray,
        recvs: np.ndarray,
        copies: np.ndarray,
        tiles: int,
        latency: int,
        row_budget: int,
    ):
        super().__init__(
            operands=[sources],
            result_types=[[s.type for s in sources]],
            properties={
                "layouts": ArrayAttr(layouts),
                "sends": table_attr(sends, 5),
                "recvs": table_attr(recvs, 5),
                "copies": table_attr(copies, 5),
                "tiles": IntegerAttr(tiles, i64),
                "latency": IntegerAttr(latency, i64),
                "row_budget": IntegerAttr(row_budget, i64),
                "mode": StringAttr("none"),
                "cycles": IntegerAttr(0, i64),
            },
        )

    # -- numpy views ------------------------------------------------------------------------------------------
    def send_table(self) -> np.ndarray:
        return table_numpy(self.sends, 5)

    def recv_table(self) -> np.ndarray:
        return table_numpy(self.recvs, 5)

    def copy_table(self) -> np.ndarray:
        return table_numpy(self.copies, 5)

    def set_schedule(self, send_cycles: np.ndarray, mode: str, sends=None, recvs=None) -> None:
        """Stores a schedule (send start cycles; receives follow at +latency) and its reports."""
        s = (self.send_table() if sends is None else sends).copy()
        r = (self.recv_table() if recvs is None else recvs).copy()
        s[:, 4] = send_cycles
        r[:, 4] = send_cycles[r[:, 3]] + self.latency.value.data if len(r) else r[:, 4]
        self.sends = table_attr(s, 5)
        self.recvs = table_attr(r, 5)
        self.mode = StringAttr(mode)
        ends = r[:, 4] + words(s[r[:, 3], 3]) if len(r) else np.zeros(1, np.int64)
        self.cycles = IntegerAttr(int(ends.max()) if len(r) else 0, i64)
        per_tile = encoded_row_bytes(s, r, self.tiles.value.data)
        self.row_bytes = tl.dense_i32(per_tile[:, None])
        self.max_row_bytes = IntegerAttr(int(per_tile.max()) if len(per_tile) else 0, i64)

    def verify_(self) -> None:
        n = self.tiles.value.data
        if not 1 <= n <= IPU21.num_tiles:  # before any per-tile table is built (2^31 tiles: 16 GB each)
            raise VerifyException(
                f"exchange.phase: tiles = {n} is outside [1, {IPU21.num_tiles}] (the target's tiles)"
            )
        if self.mode.data not in SCHEDULE_MODES:
            raise VerifyException(f"exchange.phase: mode '{self.mode.data}' not in {SCHEDULE_MODES}")
        if len(self.layouts.data) != len(self.sources) or len(self.res) != len(self.sources):
            raise VerifyException(
                f"exchange.phase: {len(self.sources)} sources, {len(self.res)} results and "
                f"{len(self.layouts.data)} layouts must agree"
            )
        for i, (v, lay) in enumerate(zip(self.res, self.layouts.data)):
            if v.type != self.sources[i].type:
                raise VerifyException(f"exchange.phase: result #{i} type {v.type} differs from its source's")
            tl.check_layout_matches(self, v, lay)
        src_layouts = [tl.layout_of(v) for v in self.sources]
        msg = check_phase(
            self.send_table(),
            self.recv_table(),
            self.copy_table(),
            self.tiles.value.data,
            self.latency.value.data,
            self.row_budget.value.data,
            src_layouts,
            list(self.layouts.data),
        )
        if msg:
            raise VerifyException(f"exchange.phase: {msg}")


def table_attr(table: np.ndarray, cols: int) -> DenseIntOrFPElementsAttr:
    table = np.asarray(table, dtype=np.int64)
    if table.size and (table.max() > np.iinfo(np.int32).max or table.min() < np.iinfo(np.int32).min):
        raise VerifyException("exchange: a table value does not fit int32")
    return tl.dense_i32(table.reshape(-1, cols).astype(np.int32))


def table_numpy(attr: DenseIntOrFPElementsAttr, cols: int) -> np.ndarray:
    return np.frombuffer(attr.data.data, dtype=np.int32).reshape(-1, cols).astype(np.int64)


# --------------------------------------------------------------------------------------------------------------
# Encoded rows (the exchange-table model) and the BSP checks


def _runs(tile, cycle, nbytes, offset, buf, peer, num_tiles):
    """Rows of a per-tile transfer list: a new row whenever the stream is not a continuation of the previous
    transfer (same buffer and peer, next address, back-to-back cycle); delay rows for idle gaps."""
    n = len(tile)
    if n == 0:
        return np.zeros(num_tiles, np.int64), np.zeros(num_tiles, np.int64)
    order = np.lexsort((cycle, tile))
    t, c, b, o, bf, p = tile[order], cycle[order], nbytes[order], offset[order], buf[order], peer[order]
    end = c + words(b)
    same = np.zeros(n, bool)
    same[1:] = t[1:] == t[:-1]
    cont = np.zeros(n, bool)
    cont[1:] = (
        same[1:] & (c[1:] == end[:-1]) & (o[1:] == o[:-1] + b[:-1]) & (bf[1:] == bf[:-1]) & (p[1:] == p[:-1])
    )
    gap = np.zeros(n, bool)
    gap[1:] = same[1:] & (c[1:] > end[:-1])
    gap |= ~same & (c > 0)
    rows = np.bincount(t[~cont], minlength=num_tiles)
    delays = np.bincount(t[gap], minlength=num_tiles)
    return rows, delays


def encoded_row_bytes(sends: np.ndarray, recvs: np.ndarray, num_tiles: int) -> np.ndarray:
    """Encoded exchange-table bytes per tile (cost_model.exchange_row_bytes per send row, receive row and delay).

    A send row streams consecutive source addresses back to back (whoever listens); a receive row keeps the
    incoming mux on one sender and writes consecutive addresses back to back. Unscheduled phases (cycle -1) are counted as if every
    transfer followed the previous one without gaps."""
    if len(sends) == 0:
        return np.zeros(num_tiles, np.int64)
    # A send names no destination (IPU_FACTS 6: receivers select the sender with their mux), so a sender's row
    # continues across receivers; only address and time continuity matter.
    no_peer = np.zeros(len(sends), np.int64)
    s_rows, s_delays = _runs(
        sends[:, 0], sends[:, 4], sends[:, 3], sends[:, 2], sends[:, 1], no_peer, num_tiles
    )
    r_bytes = sends[recvs[:, 3], 3]
    r_peer = sends[recvs[:, 3], 0]
    r_rows, r_delays = _runs(recvs[:, 0], recvs[:, 4], r_bytes, recvs[:, 2], recvs[:, 1], r_peer, num_tiles)
    return (
        (s_rows * cm.exchange_row_bytes("send"))
        + (r_rows * cm.exchange_row_bytes("recv"))
        + (s_delays + r_delays) * cm.exchange_row_bytes("delay")
    )


def _overlap(tile, start, end) -> int | None:
    """Index (into the inputs) of an interval overlapping an earlier one of the same tile, or None."""
    if len(tile) < 2:
        return None
    order = np.lexsort((start, tile))
    t, s, e = tile[order], start[order], end[order]
    bad = np.nonzero((t[1:] == t[:-1]) & (s[1:] < e[:-1]))[0]
    return int(order[bad[0] + 1]) if bad.size else None


def shard_bytes(layout: tl.LayoutAttr, num_tiles: int) -> np.ndarray:
    g = layout.geometry().shard_elems * tl.element_bytes(layout.dtype)
    out = np.zeros(max(num_tiles, len(g)), np.int64)
    out[: len(g)] = g
    return out


def check_phase(
    sends: np.ndarray,
    recvs: np.ndarray,
    copies: np.ndarray,
    num_tiles: int,
    latency: int,
    row_budget: int,
    src_layouts: Sequence[tl.LayoutAttr | None],
    dst_layouts: Sequence[tl.LayoutAttr],
) -> str | None:
    """All BSP checks of one phase; returns the first violation as a message naming the tile, or None."""
    nbuf = len(dst_layouts)
    for name, tab in (("send", sends), ("receive", recvs), ("copy", copies)):
        if len(tab) == 0:
            continue
        bad = np.nonzero((tab[:, 0] < 0) | (tab[:, 0] >= num_tiles))[0]
        if bad.size:
            return f"{name} #{int(bad[0])} names tile {int(tab[bad[0], 0])}, outside [0, {num_tiles})"
        bad = np.nonzero((tab[:, 1] < 0) | (tab[:, 1] >= nbuf))[0]
        if bad.size:
            return f"{name} #{int(bad[0])} names buffer {int(tab[bad[0], 1])}, the phase has {nbuf}"
    if len(sends):
        bad = np.nonzero(sends[:, 3] <= 0)[0]
        if bad.size:
            return f"send #{int(bad[0])} on tile {int(sends[bad[0], 0])} moves {int(sends[bad[0], 3])} bytes"
    if len(copies):
        bad = np.nonzero(copies[:, 4] <= 0)[0]
        if bad.size:
            return (
                f"copy #{int(bad[0])} on tile {int(copies[bad[0], 0])} moves {int(copies[bad[0], 4])} bytes"
            )
    # Every receive has its send; every send is received; a tile does not receive its own send.
    if len(recvs):
        bad = np.nonzero((recvs[:, 3] < 0) | (recvs[:, 3] >= len(sends)))[0]
        if bad.size:
            j = int(bad[0])
            return f"receive #{j} on tile {int(recvs[j, 0])} has no send (send index {int(recvs[j, 3])})"
        own = np.nonzero(sends[recvs[:, 3], 0] == recvs[:, 0])[0]
        if own.size:
            return f"tile {int(recvs[own[0], 0])} receives its own send #{int(recvs[own[0], 3])}"
        wrong_buf = np.nonzero(sends[recvs[:, 3], 1] != recvs[:, 1])[0]
        if wrong_buf.size:
            j = int(wrong_buf[0])
            return f"receive #{j} on tile {int(recvs[j, 0])} is in buffer {int(recvs[j, 1])}, its send in another"
    received = (
        np.bincount(recvs[:, 3], minlength=len(sends)) if len(recvs) else np.zeros(len(sends), np.int64)
    )
    unheard = np.nonzero(received == 0)[0]
    if unheard.size:
        i = int(unheard[0])
        return f"send #{i} from tile {int(sends[i, 0])} has no receiver"
    # Source ranges inside the source shards.
    for b, lay in enumerate(src_layouts):
        if lay is None:
            continue
        sb = shard_bytes(lay, num_tiles)
        for name, tab, off, nb in (("send", sends, 2, 3), ("copy", copies, 2, 4)):
            sel = np.nonzero(tab[:, 1] == b)[0] if len(tab) else np.zeros(0, np.int64)
            if sel.size:
                over = sel[(tab[sel, off] < 0) | (tab[sel, off] + tab[sel, nb] > sb[tab[sel, 0]])]
                if over.size:
                    i = int(over[0])
                    return (
                        f"{name} #{i} reads bytes [{int(tab[i, off])}, {int(tab[i, off] + tab[i, nb])}) of buffer {b} "
                        f"on tile {int(tab[i, 0])}, whose source shard has {int(sb[tab[i, 0]])} bytes"
                    )
    # All data delivered: destination ranges (receives and copies) tile each destination shard exactly.
    r_bytes = sends[recvs[:, 3], 3] if len(recvs) else np.zeros(0, np.int64)
    d_tile = np.concatenate([recvs[:, 0], copies[:, 0]])
    d_buf = np.concatenate([recvs[:, 1], copies[:, 1]])
    d_off = np.concatenate([recvs[:, 2], copies[:, 3]])
    d_len = np.concatenate([r_bytes, copies[:, 4]])
    key = d_buf * num_tiles + d_tile
    hit = _overlap(key, d_off, d_off + d_len)
    if hit is not None:
        kind = "receive" if hit < len(recvs) else "copy"
        return f"tile {int(d_tile[hit])} writes bytes at offset {int(d_off[hit])} of buffer {int(d_buf[hit])} twice ({kind})"
    got = np.bincount(key, weights=d_len, minlength=nbuf * num_tiles).astype(np.int64)
    for b, lay in enumerate(dst_layouts):
        want = shard_bytes(lay, num_tiles)[:num_tiles]
        diff = np.nonzero(got[b * num_tiles : (b + 1) * num_tiles] != want)[0]
        if diff.size:
            t = int(diff[0])
            return (
                f"tile {t} gets {int(got[b * num_tiles + t])} bytes of buffer {b} but its shard has {int(want[t])}: "
                "data not delivered"
            )
        low = np.nonzero(d_buf == b)[0]
        if low.size and np.any(d_off[low] + d_len[low] > want[d_tile[low]]):
            i = int(low[np.argmax(d_off[low] + d_len[low] > want[d_tile[low]])])
            return f"tile {int(d_tile[i])} writes past the end of its shard of buffer {b}"
    # Timing.
    if len(sends) == 0:
        return None
    scheduled = sends[:, 4] >= 0
    if not scheduled.any():
        return None
    if not scheduled.all() or (len(recvs) and np.any(recvs[:, 4] < 0)):
        return "some transfers are scheduled and others not"
    late = np.nonzero(recvs[:, 4] != sends[recvs[:, 3], 4] + latency)[0]
    if late.size:
        j = int(late[0])
        return (
            f"receive #{j} on tile {int(recvs[j, 0])} at cycle {int(recvs[j, 4])} does not match its send at cycle "
            f"{int(sends[recvs[j, 3], 4])} + latency {latency}"
        )
    hit = _overlap(sends[:, 0], sends[:, 4], sends[:, 4] + words(sends[:, 3]))
    if hit is not None:
        return f"tile {int(sends[hit, 0])} sends two words in cycle {int(sends[hit, 4])}"
    hit = _overlap(recvs[:, 0], recvs[:, 4], recvs[:, 4] + words(r_bytes))
    if hit is not None:
        return f"tile {int(recvs[hit, 0])} receives two words in cycle {int(recvs[hit, 4])}"
    per_tile = encoded_row_bytes(sends, recvs, num_tiles)
    over = np.nonzero(per_tile > row_budget)[0]
    if over.size:
        t = int(over[0])
        return f"tile {t} needs {int(per_tile[t])} bytes of exchange rows, over the budget of {row_budget}"
    return None


EXCHANGE = Dialect("exchange", [SyncOp, PhaseOp], [])
