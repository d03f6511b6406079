"""`exchange-lower`: relayouts become exchange phases (tile -> exchange level).

Each maximal run of adjacent `tile.relayout` ops (tile-plan puts the relayouts an operator needs right before it)
becomes one superstep boundary: an `exchange.sync` followed by one `exchange.phase` holding all their transfers.
Transfers are computed with numpy over the elements of each tensor (`relayout_transfers`):

1. For every element: its destination block and position in that block's storage order, and its source tile and
   byte offset (a replicated source block is read from replica `destination block mod replicas`, spreading the
   sending over the replicas).
2. Sorted in destination storage order, elements form segments: maximal runs with one source tile, consecutive
   source addresses and one destination block. A segment is one send.
3. A segment goes to every replica of its destination block: one send, one receive per replica tile (multicast);
   a replica on the sending tile itself gets an on-tile copy instead.

The phase is unscheduled (cycles -1); `exchange-schedule` gives the cycles. Compute ops are left as they are
(they are the compute sets); their plans carry their cycle estimates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from ipu.dialects import exchange as ex
from ipu.dialects import tile as tl
from ipu.passes import cost_model as cm
from ipu.passes.tile_plan import target_for


def _element_places(layout: tl.LayoutAttr):
    """For every element, in row-major order of the tensor: (block id, position inside the block's storage).

    Computed per dimension and combined by broadcasting (block ids and storage positions are sums / products of
    per-dimension terms), which is several times cheaper than unravelling every flat index."""
    shape, block, grid = layout.shape_, layout.block_, layout.grid
    rank = len(shape)

    def along(d, x):  # a per-dimension array shaped to broadcast along dimension d
        return x.reshape([-1 if e == d else 1 for e in range(rank)])

    bi, w, ext = [], [], []
    for d in range(rank):
        c = np.arange(shape[d], dtype=np.int64)
        b = c // block[d]
        bi.append(along(d, b))
        w.append(along(d, c - b * block[d]))
        ext.append(along(d, np.minimum(block[d], shape[d] - b * block[d])))
    bid = np.zeros([1] * rank, np.int64)
    for d in range(rank):
        bid = bid * grid[d] + bi[d]
    if layout.order.data == "amp16":
        p = tl.AMP_PANEL_ROWS
        panel = w[0] // p
        panel_rows = np.minimum(p, ext[0] - panel * p)
        pos = panel * p * ext[1] + w[1] * panel_rows + (w[0] % p)
    elif tl.col_panel_width(layout) is not None:
        pos = tl.col_panel_positions(w[0], w[1], ext[0], ext[1], tl.col_panel_width(layout))
    else:
        pos = np.zeros([1] * rank, np.int64)
        for d in range(rank):
            pos = pos * ext[d] + w[d]
    full = tuple(shape)
    return np.broadcast_to(bid, full).reshape(-1), np.broadcast_to(pos, full).reshape(-1)


def relayout_transfers(src: tl.LayoutAttr, dst: tl.LayoutAttr, buf: int = 0):
    """Transfers moving a tensor from layout `src` to layout `dst`: (sends, recvs, copies) tables in bytes,
    columns as in the exchange dialect, cycles -1; recv send indices are local to this relayout."""
    if src.shape_ != dst.shape_ or tl.element_bytes(src.dtype) != tl.element_bytes(dst.dtype):
        raise ValueError(f"relayout between different shapes/types: {src.shape_} vs {dst.shape_}")
    eb = tl.element_bytes(dst.dtype)
    n = int(np.prod(dst.shape_))
    d_bid, d_pos = _element_places(dst)
    s_bid, s_pos = _element_places(src)
    # The source replica follows the destination block, so that the data of one destination block comes from
    # one replica (long segments) and different destination blocks spread over the replicas.
    s_rep = d_bid % src.replicas.data
    s_tile = src.table()[s_bid, s_rep].astype(np.int64)
    s_off = src.geometry().offset[s_bid, s_rep] + s_pos
    # Destination storage order.
    max_elems = int(dst.geometry().block_elems.max())
    order = np.argsort(d_bid * max_elems + d_pos, kind="stable")
    d_bid, d_pos, s_tile, s_off = d_bid[order], d_pos[order], s_tile[order], s_off[order]
    brk = np.ones(n, bool)
    brk[1:] = (d_bid[1:] != d_bid[:-1]) | (s_tile[1:] != s_tile[:-1]) | (s_off[1:] != s_off[:-1] + 1)
    starts = np.nonzero(brk)[0]
    lengths = np.diff(np.append(starts, n))
    seg_tile, seg_off, seg_bid, seg_pos = s_tile[starts], s_off[starts], d_bid[starts], d_pos[starts]
    # Multicast to every replica of the destination block.
    dtab = dst.table().astype(np.int64)
    dgeo = dst.geometry()
    nr = dtab.shape[1]
    r_tile = dtab[seg_bid].reshape(-1)  # [segments * replicas]
    r_off = (dgeo.offset[seg_bid] + seg_pos[:, None]).reshape(-1)
    r_seg = np.repeat(np.arange(len(starts)), nr)
    local = r_tile == seg_tile[r_seg]
    # Copies: the sending tile holds a replica itself.
    c_seg = r_seg[local]
    copies = np.stack(
        [
            seg_tile[c_seg],
            np.full(c_seg.size, buf),
            seg_off[c_seg] * eb,
            r_off[local] * eb,
            lengths[c_seg] * eb,
        ],
        axis=1,
    )
    remote = ~local
    has_remote = np.zeros(len(starts), bool)
    has_remote[r_seg[remote]] = True
    send_ids = np.nonzero(has_remote)[0]
    renum = np.full(len(starts), -1, np.int64)
    renum[send_ids] = np.arange(send_ids.size)
    sends = np.stack(
        [
            seg_tile[send_ids],
            np.full(send_ids.size, buf),
            seg_off[send_ids] * eb,
            lengths[send_ids] * eb,
            np.full(send_ids.size, -1),
        ],
        axis=1,
    )
    rs = r_seg[remote]
    recvs = np.stack(
        [r_tile[remote], np.full(rs.size, buf), r_off[remote] * eb, renum[rs], np.full(rs.size, -1)], axis=1
    )
    return sends.reshape(-1, 5), recvs.reshape(-1, 5), copies.reshape(-1, 5)


def phase_tables(pairs):
    """Concatenated tables for [(src layout, dst layout), ...], buffer i = pair i."""
    sends, recvs, copies = [], [], []
    base = 0
    for i, (src, dst) in enumerate(pairs):
        s, r, c = relayout_transfers(src, dst, i)
        r = r.copy()
        r[:, 3] += base
        base += len(s)
        sends.append(s)
        recvs.append(r)
        copies.append(c)
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros((0, 5), np.int64)  # noqa: E731
    return cat(sends), cat(recvs), cat(copies)


def _groups(block: Block) -> list[list[tl.RelayoutOp]]:
    groups: list[list[tl.RelayoutOp]] = []
    current: list[tl.RelayoutOp] = []
    for op in block.ops:
        if isinstance(op, tl.RelayoutOp) and not any(op.input.owner is r for r in current):
            current.append(op)
            continue
        if current:
            groups.append(current)
        current = [op] if isinstance(op, tl.RelayoutOp) else []
    if current:
        groups.append(current)
    return groups


def lower_block(block: Block, num_tiles: int, latency: int, budget: int, sync: int) -> None:
    for group in _groups(block):
        pairs = []
        for rel in group:
            src = tl.layout_of(rel.input)
            if src is None:
                raise PassFailedException("exchange-lower: tile.relayout: its operand has no layout")
            if int(src.table().max()) >= num_tiles or int(rel.layout.table().max()) >= num_tiles:
                raise PassFailedException(
                    f"exchange-lower: tile.relayout: a layout names a tile >= the target's {num_tiles} tiles"
                )
            if src.stack.data or rel.layout.stack.data:
                raise PassFailedException("exchange-lower: tile.relayout of a stacked (whole-loop) tensor")
            pairs.append((src, rel.layout))
        sends, recvs, copies = phase_tables(pairs)
        phase = ex.PhaseOp(
            [r.input for r in group],
            [r.layout for r in group],
            sends,
            recvs,
            copies,
            num_tiles,
            latency,
            budget,
        )
        Rewriter.insert_op([ex.SyncOp(sync), phase], InsertPoint.before(group[0]))
        for i, rel in enumerate(group):
            rel.result.replace_all_uses_with(phase.res[i])
            if rel.result.name_hint:
                phase.res[i].name_hint = rel.result.name_hint
            Rewriter.erase_op(rel)


@dataclass(frozen=True)
class ExchangeLowerPass(ModulePass):
    """Turns every run of adjacent `tile.relayout` ops into `exchange.sync` + one `exchange.phase`."""

    name = "exchange-lower"

    tiles: int = 0
    """Tiles of the target (0: the full IPU21)."""
    sram_kib: int = 624
    """SRAM per tile of the target, KiB."""

    def __post_init__(self) -> None:
        target_for(self.tiles, self.sram_kib)  # raises ValueError naming tiles / sram_kib

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = target_for(self.tiles, self.sram_kib)
        blocks = [b for o in op.walk() for r in o.regions for b in r.blocks]
        for b in blocks:
            lower_block(
                b,
                target.num_tiles,
                target.exchange_send_latency,
                target.exchange_table_cap_bytes,
                cm.sync_cycles(target),
            )
        _check_no_relayouts(op)


def _check_no_relayouts(op: Operation) -> None:
    for o in op.walk():
        if isinstance(o, tl.RelayoutOp):
            raise PassFailedException("exchange-lower: a tile.relayout was left behind")
