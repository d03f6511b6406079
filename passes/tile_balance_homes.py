"""`tile-balance-homes`: spreads the resident parameters' home blocks evenly over the tiles (tile level).

    ipu-opt planned.mlir -p 'tile-balance-homes{tiles=1472 sram_kib=624 resident_budget_kib=400}'

tile-plan gives each parameter the home its first consumer asks for (`home_of`): the pieces of a GEMM's weight
panels sit on that GEMM's grid. A model whose GEMMs use different grids (So400m: q and k on 1152 tiles, v and the
output projection on 576, fc1 on ~810 per part) then stacks its weights unevenly: with 27 layers the homes hold
0 / 357 / 517 KB per tile (min / median / max), and the fullest tiles have no room left for the working set.

A home block is only ever read by the exchange (every use of the value is a `tile.relayout`, or, for a stacked
weight, every use of the loop body's argument is), so its tile is free to choose. This pass reassigns them: the
homes are visited from the largest block to the smallest (a block's bytes count every member of a stacked
sequence) and each one's blocks go to the currently least-loaded tiles, distinct tiles for the blocks of one value
while there are enough (its pieces are then sent in parallel, one per tile), and none on a tile that receives it
(`off_readers`: a block homed on one of its readers is copied on that tile after the exchange, a compute step all
tiles wait for; off them, it arrives with the phase's other receives); a local search then moves or swaps
blocks off the fullest tile while that lowers it, never two blocks of one value onto one tile (they are sent in
one phase, and a tile's sends and receive set-ups share its supervisor). The load balanced is resident bytes plus each tile's working
set (`transient_peak`), so tiles that hold more activations at their busiest point get fewer homes. What cannot move (a parameter read
in place by its consumer, an input) counts as the starting load. The result stays a one-replica dense-table layout
of the same blocks, so exchange-lower sees only other source tiles.

`resident_budget_kib` (0: no budget) is the per-tile limit of resident bytes after balancing: a tile over it fails
the pass with the tile, its bytes and its largest homes, before memory-plan tries to place the working set beside
them. The per-tile result is recorded on the function as `tile.resident_bytes = {min, median, max}` for reports.

Runs after tile-plan and before exchange-lower (`nn-to-exchange-pipeline` runs it between them). A layout a person
wrote (`tile.layout` already present on a parameter before tile-plan) is balanced too; `enable=false` keeps
tile-plan's homes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, ModuleOp, i64
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.passes.memory_plan import _Builder, _host_sources, number_events, shard_bytes
from ipu.passes.nn_utils import param_names
from ipu.passes.tile_plan import target_for

RESIDENT_ATTR = "tile.resident_bytes"


@dataclass
class _Home:
    """A movable resident value: its layout, where the layout is recorded, and its blocks' bytes."""

    value: SSAValue
    layout: tl.LayoutAttr
    block_bytes: np.ndarray  # [blocks], every member of a stacked sequence counted
    slots: list[tuple[tl.RepeatOp, int]]  # repeat arg_layouts entries holding the unstacked member layout
    readers: list[frozenset[int]] | None = None  # per block: the tiles its relayouts deliver that block to


def _is_resident(op: Operation) -> bool:
    """A parameter, or a value the host folds from parameters only: memory-plan's resident buffers."""
    if isinstance(op, nn.ParamOp):
        return True
    plan = op.attributes.get(tl.PLAN_ATTR)
    if not (isinstance(plan, tl.MapPlanAttr) and plan.get("kind") == "host") or not op.results:
        return False
    kinds = _host_sources(op.results[0])
    return bool(kinds) and nn.InputOp not in kinds


def _read_by_exchange_only(v: SSAValue) -> list[tuple[tl.RepeatOp, int]] | None:
    """The repeat argument slots fed by `v` if every read of v (through loop arguments) is a relayout; else None."""
    slots: list[tuple[tl.RepeatOp, int]] = []
    for use in v.uses:
        op = use.operation
        if isinstance(op, tl.RelayoutOp):
            continue
        if isinstance(op, tl.RepeatOp) and use.index >= len(op.carried):
            arg = op.body.block.args[use.index]
            if any(not isinstance(u.operation, tl.RelayoutOp) for u in arg.uses):
                return None
            slots.append((op, use.index))
            continue
        return None
    return slots


def _block_readers(v: SSAValue, layout: tl.LayoutAttr, slots) -> list[frozenset[int]]:
    """Per home block, the tiles that receive it: the replicas of the block containing it in the layouts v's
    relayouts (or those of the loop arguments it feeds) deliver v to, where those blocks are whole multiples of
    the home's (tile-plan cuts a home into pieces of its consumer's blocks)."""
    uses = [u.operation for u in v.uses]
    for rep, index in slots:
        uses += [u.operation for u in rep.body.block.args[index].uses]
    home = layout.unstacked()
    origin = home.geometry().block_origin
    readers: list[set[int]] = [set() for _ in range(home.num_blocks)]
    for u in uses:
        if not isinstance(u, tl.RelayoutOp) or u.layout.shape_ != home.shape_:
            continue
        cblock = np.array(u.layout.block_, np.int64)
        if (cblock % np.array(home.block_, np.int64)).any():
            continue
        cidx = np.ravel_multi_index(tuple((origin // cblock).T), u.layout.grid)
        table = u.layout.table()
        for b, c in enumerate(cidx.tolist()):
            readers[b].update(table[c].tolist())
    return [frozenset(r) for r in readers]


def _name(v: SSAValue) -> str:
    """%name, or for an unnamed value the op and the parameters it comes from (`nn.cast of "w"`)."""
    if v.name_hint:
        return f"%{v.name_hint}"
    op = v.owner
    sources = [v, *op.operands] if isinstance(op, Operation) else [v]
    names = sorted({n for s in sources for n in param_names(s)})
    what = op.name if isinstance(op, Operation) else "%?"
    return f"{what} of {', '.join(repr(n) for n in names[:2])}" if names else what


def _bytes(layout: tl.LayoutAttr) -> np.ndarray:
    return layout.geometry().block_elems * tl.element_bytes(layout.dtype) * max(1, layout.stack.data)


def _tile_bytes(layout: tl.LayoutAttr, num_tiles: int) -> np.ndarray:
    """Bytes per tile, every member of a stacked sequence counted (memory-plan's buffer sizes)."""
    return shard_bytes(layout, num_tiles) * max(1, layout.stack.data)


def collect(block: Block, num_tiles: int) -> tuple[list[_Home], np.ndarray, dict[str, np.ndarray]]:
    """The movable homes of a function body, the load of what stays, and every resident value's bytes per tile."""
    homes: list[_Home] = []
    fixed = np.zeros(num_tiles, np.int64)
    per_value: dict[str, np.ndarray] = {}
    for op in block.ops:
        if not op.results or not _is_resident(op):
            continue
        v = op.results[0]
        layout = tl.layout_of(v)
        if layout is None or not v.uses:
            continue
        if int(layout.table().max()) >= num_tiles or int(layout.table().min()) < 0:
            raise PassFailedException(
                f"tile-balance-homes: layout of %{v.name_hint or '?'} ({op.name}) names a tile outside "
                f"[0, {num_tiles})"
            )
        name = _name(v)
        per_value[name] = per_value.get(name, 0) + _tile_bytes(layout, num_tiles)
        slots = _read_by_exchange_only(v) if layout.replicas.data == 1 else None
        if slots is None:
            fixed += _tile_bytes(layout, num_tiles)
        else:
            homes.append(_Home(v, layout, _bytes(layout), slots, _block_readers(v, layout, slots)))
    return homes, fixed, per_value


def transient_peak(f: func.FuncOp, target) -> np.ndarray:
    """Per tile, the most bytes of non-resident values live at one program point (memory-plan's buffers and
    lifetimes at tile level, before exchange-lower merges relayouts into phases): the working set the resident
    bytes must leave room for."""
    events = number_events(f)
    builder = _Builder(f, target, events, gemm_interleaved=False)
    builder.block(f.body.block)
    delta = np.zeros((events.count + 1, target.num_tiles), np.int64)
    for buf, sizes in zip(builder.buffers, builder.sizes):
        if not buf.resident:
            delta[buf.first] += sizes * buf.count
            delta[buf.last + 1] -= sizes * buf.count
    return np.cumsum(delta, axis=0).max(axis=0)


def balance(homes: list[_Home], load: np.ndarray, off_readers: bool = True) -> list[np.ndarray]:
    """New tiles per home block (same order as `homes`); `load` is updated in place.

    Two steps: greedy, largest blocks first (ties: program order), each value's blocks on the least-loaded
    distinct tiles (with `off_readers`, for each block the least-loaded one that does not receive it); then
    `improve` moves or swaps blocks off the fullest tile while that lowers it (never onto a block's readers). The
    greedy alone is limited by the blocks' size: So400m's 27-layer homes are 62 and 83 KB sequences, and it left the
    fullest tile 44 KB above the median; the local search halves that."""
    n = len(load)
    new: list[np.ndarray] = [np.empty(len(h.block_bytes), np.int64) for h in homes]
    order = sorted(range(len(homes)), key=lambda i: (-int(homes[i].block_bytes.max()), i))
    for i in order:
        b = homes[i].block_bytes
        readers = homes[i].readers if off_readers else None
        by_size = np.argsort(-b, kind="stable")
        for start in range(0, len(b), n):
            chunk = by_size[start : start + n]
            ranked = np.argsort(load, kind="stable").tolist()  # ties: lower tile id
            if readers is None:
                free = np.array(ranked[: len(chunk)], np.int64)  # one block each
            else:  # one block each, off the tiles that read that block (else the least-loaded free one)
                taken: set[int] = set()
                free = np.empty(len(chunk), np.int64)
                first = 0  # ranked[:first] are taken
                for k, blk in enumerate(chunk.tolist()):
                    at = first
                    while at < n and (ranked[at] in taken or ranked[at] in readers[blk]):
                        at += 1
                    t = ranked[at] if at < n else ranked[first]
                    taken.add(t)
                    free[k] = t
                    while first < n and ranked[first] in taken:
                        first += 1
            new[i][chunk] = free
            np.add.at(load, free, b[chunk])
    sizes = np.concatenate([h.block_bytes for h in homes]) if homes else np.zeros(0, np.int64)
    tiles = np.concatenate(new) if homes else np.zeros(0, np.int64)
    barred = (
        [r for h in homes for r in (h.readers or [frozenset()] * len(h.block_bytes))] if off_readers else None
    )
    # The blocks of one value are sent in one phase: two on a tile serialise there (a tile's sends and receives
    # share its supervisor), so the search keeps them apart where the greedy could (no more blocks than tiles).
    group = [i if len(h.block_bytes) <= n else -1 for i, h in enumerate(homes) for _ in h.block_bytes]
    improve(sizes.astype(np.int64), tiles, load, barred, np.array(group, np.int64))
    out, at = [], 0
    for h in homes:
        out.append(tiles[at : at + len(h.block_bytes)].astype(np.int32))
        at += len(h.block_bytes)
    return out


IMPROVE_CANDIDATES = 32  # least-loaded tiles tried as the other side of a move or swap
IMPROVE_STEPS = 20000  # bound on the local search (it stops earlier when no step lowers the fullest tile)


def improve(
    sizes: np.ndarray,
    tile_of: np.ndarray,
    load: np.ndarray,
    barred: list[frozenset[int]] | None = None,
    group: np.ndarray | None = None,
) -> None:
    """Local search on an assignment of items (`sizes`, `tile_of`) to tiles (`load`, both updated in place):
    while some move of an item from the fullest tile to one of the least-loaded tiles, or swap with a smaller
    item there, leaves both below the fullest tile's load, do the best one. `barred` (per item): tiles an item
    must not move to (the tiles that read that home block: its copy there would be an on-tile copy). `group` (per
    item, -1: none): an item never joins a tile that holds another item of its group (the blocks of one value)."""
    n = len(load)
    barred = barred or [frozenset()] * len(sizes)
    grp = [-1] * len(sizes) if group is None else [int(g) for g in group]
    on: list[list[int]] = [[] for _ in range(n)]
    groups_on: list[dict[int, int]] = [{} for _ in range(n)]  # per tile: items of each group there
    for i, t in enumerate(tile_of.tolist()):
        on[t].append(i)
        groups_on[t][grp[i]] = groups_on[t].get(grp[i], 0) + 1

    def joins(i: int, u: int, leaving: int = -1) -> bool:
        """Whether item i may join tile u (item `leaving` leaves u at the same time)."""
        g = grp[i]
        if g < 0:
            return True
        return groups_on[u].get(g, 0) - (1 if leaving >= 0 and grp[leaving] == g else 0) == 0

    k = min(IMPROVE_CANDIDATES, n - 1)
    for _ in range(IMPROVE_STEPS if k > 0 else 0):
        t = int(np.argmax(load))
        top = int(load[t])
        best, step = top, None
        # A stable sort, not argpartition: which of several equally loaded tiles argpartition returns depends on
        # numpy's SIMD dispatch (x86-simd-sort on AVX-512), so the plan would differ from machine to machine.
        cands = np.argsort(load, kind="stable")[: k + 1].tolist()
        for i in on[t]:
            bi = int(sizes[i])
            for u in cands:
                if u == t or u in barred[i]:
                    continue
                lu = int(load[u])
                if max(top - bi, lu + bi) < best and joins(i, u):
                    best, step = max(top - bi, lu + bi), (i, u, -1)
                for j in on[u]:
                    d = bi - int(sizes[j])
                    if (
                        d > 0
                        and max(top - d, lu + d) < best
                        and t not in barred[j]
                        and joins(i, u, j)
                        and joins(j, t, i)
                    ):
                        best, step = max(top - d, lu + d), (i, u, j)
        if step is None:
            return
        i, u, j = step
        on[t].remove(i)
        on[u].append(i)
        tile_of[i] = u
        groups_on[t][grp[i]] -= 1
        groups_on[u][grp[i]] = groups_on[u].get(grp[i], 0) + 1
        d = int(sizes[i])
        if j >= 0:
            on[u].remove(j)
            on[t].append(j)
            tile_of[j] = t
            groups_on[u][grp[j]] -= 1
            groups_on[t][grp[j]] = groups_on[t].get(grp[j], 0) + 1
            d -= int(sizes[j])
        load[t] -= d
        load[u] += d


def _with_tiles(layout: tl.LayoutAttr, tiles: np.ndarray) -> tl.LayoutAttr:
    return tl.LayoutAttr(
        layout.shape_, layout.block_, np.ascontiguousarray(tiles[:, None], np.int32), layout.dtype,
        layout.order.data, layout.stack.data, layout.scale.data,
    )  # fmt: skip


def _set_layout(v: SSAValue, layout: tl.LayoutAttr) -> None:
    owner = v.owner
    assert isinstance(owner, Operation)
    owner.attributes[tl.LAYOUT_ATTR] = layout


def _set_slot(rep: tl.RepeatOp, index: int, layout: tl.LayoutAttr) -> None:
    lays = list(rep.arg_layouts.data)
    lays[index] = layout.unstacked()
    rep.properties["arg_layouts"] = ArrayAttr(lays)


@dataclass(frozen=True)
class TileBalanceHomesPass(ModulePass):
    """Reassigns resident home blocks to the least-loaded tiles (see the module docstring)."""

    name = "tile-balance-homes"

    tiles: int = 0
    """Tiles of the target (0: the full IPU21, 1472 tiles)."""
    sram_kib: int = 624
    """SRAM per tile of the target, KiB."""
    resident_budget_kib: int = 0
    """Per-tile limit of resident parameter bytes after balancing, KiB (0: none)."""
    enable: bool = True
    """false: keep tile-plan's homes (the per-tile figures are still recorded and the budget checked)."""
    off_readers: bool = True
    """Keep each home block off the tiles that receive it (while other tiles are free): a block homed on one of
    its readers becomes an on-tile copy after the exchange, a compute step that every tile waits for."""

    def __post_init__(self) -> None:
        target_for(self.tiles, self.sram_kib)
        if isinstance(self.resident_budget_kib, bool) or not isinstance(self.resident_budget_kib, int):
            raise ValueError(f"{self.name}: option 'resident_budget_kib' must be an integer")
        if self.resident_budget_kib < 0:
            raise ValueError(
                f"{self.name}: option 'resident_budget_kib' must be 0 (none) or positive, got "
                f"{self.resident_budget_kib}"
            )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        n = target_for(self.tiles, self.sram_kib).num_tiles
        for f in op.walk():
            if isinstance(f, func.FuncOp):
                self.balance_function(f, n)

    def balance_function(self, f: func.FuncOp, n: int) -> None:
        homes, load, per_value = collect(f.body.block, n)
        if self.enable:
            # Balance resident + working set: tiles that hold more live values at their busiest point get fewer
            # homes, so that the per-tile peak (what memory-plan must fit) is even, not only the resident bytes.
            working = transient_peak(f, target_for(self.tiles, self.sram_kib))
            total = load + working
            for h, tiles in zip(homes, balance(homes, total, self.off_readers)):
                lay = _with_tiles(h.layout, tiles)
                _set_layout(h.value, lay)
                for rep, index in h.slots:
                    _set_slot(rep, index, lay)
                name = _name(h.value)
                per_value[name] = per_value[name] - _tile_bytes(h.layout, n) + _tile_bytes(lay, n)
            load = total - working
        else:
            for h in homes:
                load += _tile_bytes(h.layout, n)
        f.attributes[RESIDENT_ATTR] = DictionaryAttr(
            {
                "min": IntegerAttr(int(load.min()), i64),
                "median": IntegerAttr(int(np.median(load)), i64),
                "max": IntegerAttr(int(load.max()), i64),
            }
        )
        budget = self.resident_budget_kib * 1024
        if budget and load.max() > budget:
            t = int(np.argmax(load))
            top = sorted(((int(b[t]), k) for k, b in per_value.items() if b[t]), reverse=True)[:4]
            held = ", ".join(f"{k} {b} B" for b, k in top)
            over = int((load > budget).sum())
            raise PassFailedException(
                f"tile-balance-homes: @{f.sym_name.data}: tile {t} holds {int(load[t])} B of resident parameters, "
                f"over the budget of {budget} B ({over} tiles over; resident min / median / max "
                f"{int(load.min())} / {int(np.median(load))} / {int(load.max())} B); largest there: {held}. "
                "Store more weights in FP8, use a target with more tiles, or raise resident_budget_kib"
            )
