"""`exchange-lower`: relayouts become exchange phases (tile -> exchange level).

Each maximal run of adjacent `tile.relayout` ops (tile-plan puts the relayouts an operator needs right before it)
becomes one superstep boundary: an `exchange.sync` followed by one `exchange.phase` holding all their transfers.
Transfers are computed with numpy over the elements of each tensor (`relayout_transfers`):

1. For every element: its destination block and position in that block's storage order, and its source tile and
   byte offset (a replicated source block is read from replica `destination block mod replicas`, spreading the
   sending over the replicas).
2. In destination storage order (one scatter: block start + position), elements form segments: maximal runs with
   one source tile, consecutive source addresses and one destination block. A segment is one send. Between two
   row-major layouts the same runs are found over pieces of rows (the last dimension cut at both layouts' block
   boundaries) instead of elements, many times fewer.
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


def _places(layout: tl.LayoutAttr):
    """Per element of the tensor: (block id, position inside the block's storage), as arrays that broadcast to
    the tensor's shape (the block id array has it already).

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
    if layout.order.data == "ampw":
        pos = tl.ampw_positions(w[0], w[1], ext[0], ext[1], tl.ampw_kblock(layout.dtype))
    elif layout.order.data == "amp16":
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
    return bid, pos


def _element_places(layout: tl.LayoutAttr):
    """For every element, in row-major order of the tensor: (block id, position inside the block's storage)."""
    bid, pos = _places(layout)
    full = tuple(layout.shape_)
    return np.broadcast_to(bid, full).reshape(-1), np.broadcast_to(pos, full).reshape(-1)


def _flat(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(x, shape).reshape(-1)


def _storage_order(layout: tl.LayoutAttr) -> tuple[np.ndarray, np.ndarray] | None:
    """(row-major element indices in the layout's storage order: blocks in block order, each block's elements
    in its storage order; the start of each block in that order, one more entry at the end), or None if the
    positions are not a permutation of each block's storage (then `relayout_transfers` sorts).

    One scatter over the elements instead of a sort: element e goes to block_start[block(e)] + position(e)."""
    n = int(np.prod(layout.shape_))
    elems = layout.geometry().block_elems
    start = np.zeros(len(elems) + 1, np.int64)
    np.cumsum(elems, out=start[1:])
    if int(start[-1]) != n:
        return None
    bid, pos = _places(layout)
    key = _flat(start[bid] + pos, tuple(layout.shape_))
    if n and (int(key.min()) < 0 or int(key.max()) >= n):
        return None
    order = np.full(n, -1, np.int64)
    order[key] = np.arange(n, dtype=np.int64)
    if n and int(order.min()) < 0:  # two elements at one position leave another one empty
        return None
    return order, start


def relayout_transfers(src: tl.LayoutAttr, dst: tl.LayoutAttr, buf: int = 0):
    """Transfers moving a tensor from layout `src` to layout `dst`: (sends, recvs, copies) tables in bytes,
    columns as in the exchange dialect, cycles -1; recv send indices are local to this relayout."""
    if src.shape_ != dst.shape_ or tl.element_bytes(src.dtype) != tl.element_bytes(dst.dtype):
        raise ValueError(f"relayout between different shapes/types: {src.shape_} vs {dst.shape_}")
    if src.order.data == dst.order.data == "row_major":
        out = _relayout_transfers_rows(src, dst, buf)
        if out is not None:
            return out
    placed = _storage_order(dst)
    if placed is None:
        return _relayout_transfers_sorted(src, dst, buf)
    order, bstart = placed
    n = len(order)
    full = tuple(dst.shape_)
    # The elements in destination storage order (block by block): their source tile and element offset there. The
    # source replica follows the destination block, as in `_relayout_transfers_sorted`.
    s_bid, s_pos = _places(src)
    stab, soff = src.table(), src.geometry().offset
    if src.replicas.data == 1:
        s_tile = _flat(stab[:, 0].astype(np.int64)[s_bid], full)[order]
        s_off = _flat(soff[:, 0][s_bid] + s_pos, full)[order]
    else:
        sb, sp = _flat(s_bid, full)[order], _flat(s_pos, full)[order]
        rep = np.repeat(np.arange(len(bstart) - 1, dtype=np.int64) % src.replicas.data, np.diff(bstart))
        s_tile = stab[sb, rep].astype(np.int64)
        s_off = soff[sb, rep] + sp
    brk = np.empty(n, bool)
    brk[:1] = True
    np.not_equal(s_tile[1:], s_tile[:-1], out=brk[1:])
    brk[1:] |= s_off[1:] != s_off[:-1] + 1
    brk[bstart[:-1]] = True  # a new destination block
    starts = np.nonzero(brk)[0]
    seg_bid = np.searchsorted(bstart, starts, side="right") - 1
    seg_pos = starts - bstart[seg_bid]
    return _segments_to_tables(dst, starts, n, s_tile[starts], s_off[starts], seg_bid, seg_pos, buf)


def _row_pieces(layout: tl.LayoutAttr, c0: np.ndarray):
    """(block id, position inside the block's storage) of the first element of each row piece: a row of a
    row-major layout (every index but the last) cut at the columns `c0`, as arrays broadcasting to
    [*shape[:-1], len(c0)]."""
    shape, block, grid = layout.shape_, layout.block_, layout.grid
    rank = len(shape)

    def along(d, x):
        return x.reshape([-1 if e == d else 1 for e in range(rank)])

    bid = np.zeros([1] * rank, np.int64)
    pos = np.zeros([1] * rank, np.int64)
    for d in range(rank):
        c = np.arange(shape[d], dtype=np.int64) if d < rank - 1 else c0
        b = c // block[d]
        ext = np.minimum(block[d], shape[d] - b * block[d])
        bid = bid * grid[d] + along(d, b)
        pos = pos * along(d, ext) + along(d, c - b * block[d])
    return bid, pos


def _relayout_transfers_rows(src: tl.LayoutAttr, dst: tl.LayoutAttr, buf: int):
    """`relayout_transfers` of two row-major layouts, by pieces of rows instead of elements, or None when the
    pieces are not many fewer than the elements.

    The last dimension cut at both layouts' block boundaries leaves pieces that lie in one source and one
    destination block, consecutive in both storages: each is part of one segment, so the segments are the runs
    of pieces (in destination storage order) with one destination block, one source tile and consecutive source
    offsets, the same runs as element by element."""
    shape = tuple(dst.shape_)
    cols = shape[-1]
    n = int(np.prod(shape))
    edges = np.unique(
        np.concatenate([np.arange(0, cols, src.block_[-1]), np.arange(0, cols, dst.block_[-1]), [cols]])
    ).astype(np.int64)
    c0, width = edges[:-1], np.diff(edges)
    full = (*shape[:-1], len(c0))
    if int(np.prod(full)) * 4 > n:
        return None
    elems = dst.geometry().block_elems
    bstart = np.zeros(len(elems) + 1, np.int64)
    np.cumsum(elems, out=bstart[1:])
    d_bid, d_pos = _row_pieces(dst, c0)
    key = _flat(bstart[d_bid] + d_pos, full)  # the first element's index in destination storage order
    order = np.argsort(key, kind="stable")
    key = key[order]
    d_bid, d_pos = _flat(d_bid, full)[order], _flat(d_pos, full)[order]
    width = _flat(width, full)[order]
    s_bid, s_pos = _row_pieces(src, c0)
    s_bid, s_pos = _flat(s_bid, full)[order], _flat(s_pos, full)[order]
    rep = d_bid % src.replicas.data
    s_tile = src.table()[s_bid, rep].astype(np.int64)
    s_off = src.geometry().offset[s_bid, rep] + s_pos
    brk = np.ones(len(key), bool)
    brk[1:] = (d_bid[1:] != d_bid[:-1]) | (s_tile[1:] != s_tile[:-1]) | (s_off[1:] != s_off[:-1] + width[:-1])
    at = np.nonzero(brk)[0]
    return _segments_to_tables(dst, key[at], n, s_tile[at], s_off[at], d_bid[at], d_pos[at], buf)


def _relayout_transfers_sorted(src: tl.LayoutAttr, dst: tl.LayoutAttr, buf: int = 0):
    """`relayout_transfers` by a sort of the elements into destination storage order (any positions)."""
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
    return _segments_to_tables(
        dst, starts, n, s_tile[starts], s_off[starts], d_bid[starts], d_pos[starts], buf
    )


def _segments_to_tables(dst, starts, n, seg_tile, seg_off, seg_bid, seg_pos, buf):
    """Segments (maximal runs with one source tile, consecutive source offsets and one destination block: their
    first element in destination storage order, source tile and offset, destination block and position) ->
    (sends, recvs, copies)."""
    eb = tl.element_bytes(dst.dtype)
    lengths = np.diff(np.append(starts, n))
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
