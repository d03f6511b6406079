"""`tile-plan`: gives every tensor a layout over the tiles and every operator a plan (nn -> tile level).

For each operator, in program order:

- `nn.linear` (rank-2 input): a GEMM over a gm x gn tile grid, chosen by the cost model among all grids that fit
  the target: estimated cycles of the busiest tile (device cast + pack of its weight block, the F16 GEMM
  kernel's own estimate per K chunk of the padded block) + cycles to receive its x row panel and w column panel
  (4 bytes/cycle), subject to the per-tile operands and result fitting the function's GEMM budget
  (`tile.gemm_budget`, bytes: by default `gemm_budget`, the SRAM less the support reservations, the kernel scratch
  elements and the resident parameters' even share per tile; `memory_fraction` of the SRAM when that option is
  given; a person's attribute is kept) and the panel-width rules
  (MIN_WIDE_PANEL, MIN_PANEL_TILES). Big GEMMs end up on (nearly) all tiles.
- `nn.attention`: materialized attention over a [query blocks, heads] grid (keys/values of a head replicated over
  its query blocks), as many query blocks as tiles allow; with few query rows (the MAP head's probe) each head's
  value columns are split over VALUE_SPLIT tiles too (grid [query blocks, heads, 3]).
- `nn.linear_partials` (`nn-split-k`'s K split): a [K chunks, column panels] grid, each tile keeping its weight
  slice; `nn.reduce_sum` stacks each output block's partials on the first chunk's tile (`#tile.map<reduce>`).
- element-wise ops (add, mul, scale, gelu, cast): in the layout of their first operand (no data movement);
  a broadcast operand (bias, position embedding) is replicated to match.
- `nn.layer_norm`, `nn.softmax` over the last axis: whole rows per block (the input's layout when it has whole
  rows, else rows spread over the tiles); weight and bias replicated to every block.
  A GEMM whose result feeds attention gets column panels of whole heads (pn a multiple of the head dimension),
  so the attention's per-head operands arrive as a few long transfers instead of one per row piece.
- host-folded ops (`#tile.map<kind = "host">`): casts, reshapes, slices, transposes, concats and patchify whose
  operands are all parameters / inputs (or such ops) are done once by the host when it uploads them, straight
  into the layout their consumer wants: FP8 weight casts, the MAP head's weight slices, the image's patchify.
- a reshape that only inserts or drops unit dimensions is a view of its input's layout (`kind = "view"`).
- anything else (reshape, transpose, slice, concat, matmul of activations, odd ranks): the whole operator on one
  tile (`#tile.single`). Correct, not fast; none of these is in the encoder's hot path.

Parameters and inputs get the layout their first consumer asks for, without replication (a parameter's resident
home, `home_of`: for a replicated operand layout, each block is split along its first dimension into up to R
pieces, one per replica tile, so every tile of a GEMM grid keeps a distinct share of the weights and the exchange
broadcasts the pieces into the operand layout);
wherever a producer's layout differs from what a consumer needs, a `tile.relayout` is inserted right before the
consumer (one per value and layout per block); a gather of many small producer blocks into a consumer block goes
through an intermediate layout (two relayouts: `gather_mid`), since every piece costs an exchange round.
`nn.repeat` becomes `tile.repeat`: the body is planned once;
carried values keep the layout they enter with, or the one `tile.carried_layouts` on the loop gives (option
`carried=auto`, the default, sets it from a trial plan: `loop_carried_layouts`), stacked parameters get their
slice's home with `stack = count`.

Existing decisions are honoured: an op that already has `tile.plan` keeps it (its result layout is derived from
the plan unless `tile.layout` is also given), and a parameter or input with a `tile.layout` keeps that layout. So a
search or a person can override any choice by editing attributes.

Simplifications (said here so nobody is surprised): batch 1 (2-D activations [tokens, width]); GEMMs never split
K (no reduction phase); attention is materialized only (`kind = "flash"` is rejected); the cost model is
`passes/cost_model.py` (GEMMs and the weights' device cast + pack use the kernels' estimators, the rest closed
forms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    IntegerAttr,
    ModuleOp,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException, VerifyException

from ipu.backend.target import IPU21, Target
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.passes import cost_model as cm
from ipu.passes.nn_split_attention_keys import partial_grid
from ipu.passes.nn_split_k import (
    DEVICE_WEIGHT_PANEL,
    FEW_ROWS,
    computed_on_device,
    group_panel,
    rows_plan_grid,
    through_views,
    x_readers,
)

ELEMENTWISE_OPS = (nn.AddOp, nn.MulOp, nn.ScaleOp, nn.GeluOp, nn.CastOp)
SOURCE_OPS = (nn.ParamOp, nn.InputOp)
# Ops the host folds when it uploads parameters / inputs (when all their operands are host values).
HOST_OPS = (nn.CastOp, nn.ReshapeOp, nn.SliceOp, nn.TransposeOp, nn.ConcatOp, nn.PatchifyOp)


def is_host_value(v: SSAValue) -> bool:
    """A parameter, an input, or a data-movement / cast op computed from those only (folded by the host)."""
    owner = v.owner
    if isinstance(owner, SOURCE_OPS):
        return True
    if isinstance(owner, HOST_OPS):
        plan = owner.attributes.get(tl.PLAN_ATTR)
        if plan is not None and not (isinstance(plan, tl.MapPlanAttr) and plan.get("kind") == "host"):
            return False
        return all(is_host_value(o) for o in owner.operands)
    return False


GEMM_BUDGET_ATTR = "tile.gemm_budget"
# On `nn.repeat`: the layouts of its carried values inside the loop (one per carried value), a decision tile-plan
# takes (option `carried`) or a person gives; the entry values are relayouted to them once, before the loop.
CARRIED_ATTR = "tile.carried_layouts"
CARRIED_CHOICES = ("auto", "entry")


def _from_params(v: SSAValue) -> bool:
    """A parameter, or a host-folded value computed from parameters only (no input): resident on the device."""
    owner = v.owner
    if isinstance(owner, nn.ParamOp):
        return True
    return isinstance(owner, HOST_OPS) and is_host_value(v) and all(_from_params(o) for o in owner.operands)


def resident_bytes(f: func.FuncOp) -> int:
    """Bytes of the resident values the device holds for `f`: parameters and host-folded values computed from
    them, counted where the host's folding ends (a value some device op reads), each member of a stacked
    sequence counted. Replicated copies are not counted (tile-plan has not laid them out yet)."""
    total = 0
    for op in f.walk():
        for r in op.results:
            if not isinstance(r.type, TensorType) or not _from_params(r):
                continue
            if any(not isinstance(u.operation, HOST_OPS) for u in r.uses):
                total += math.prod(r.type.get_shape()) * tl.element_bytes(r.type.element_type)
    return total


def gemm_budget(f: func.FuncOp, target: Target) -> int:
    """Bytes of a tile one GEMM's operands and result may use (tile-plan's default, recorded as
    `tile.gemm_budget`): the SRAM less what every tile holds besides them whatever the plan: the runtime state and
    the host descriptors, memory-plan's estimate of the code and exchange tables before `lowering-storage`
    measures them, the lowering's kernel scratch elements (C, A, aux; a GEMM's operands stay out of them), and
    the function's resident values spread evenly over the tiles (what tile-balance-homes aims at), and never less
    than a quarter of what the support and scratch leave. Other live activations are memory-plan's to fit; this
    only keeps a plan from choosing blocks that cannot fit."""
    from ipu.backend.lower.placement import scratch_elements
    from ipu.passes.memory_plan import DEFAULT_CODE_BYTES, MemoryPlanPass

    room = target.sram_bytes - (
        target.runtime_state_bytes
        + MemoryPlanPass().host_descriptor_bytes
        + DEFAULT_CODE_BYTES
        + max(0, target.sram_end - min(scratch_elements(target)))
    )
    # Floor: resident values that leave a GEMM less than a quarter of the room cannot fit beside any working set;
    # memory-plan says so with the tile and the buffers, tile-plan only keeps planning (tile-level tests, a
    # 1-tile target holding a whole model).
    return max(room - -(-resident_bytes(f) // target.num_tiles), room // 4, 0)


def view_layout(layout: tl.LayoutAttr, shape) -> tl.LayoutAttr | None:
    """The same blocks on the same tiles for a reshape that only inserts or drops unit dimensions."""
    if [d for d in layout.shape_ if d != 1] != [d for d in shape if d != 1]:
        return None
    blocks = iter([b for d, b in zip(layout.shape_, layout.block_) if d != 1])
    block = tuple(1 if d == 1 else next(blocks) for d in shape)
    return tl.LayoutAttr(
        tuple(shape), block, layout.table(), layout.dtype, layout.order.data, 0, layout.scale.data
    )


def target_for(tiles: int, sram_kib: int) -> Target:
    """The target a pass option pair names: 0 tiles = the full IPU21's; 1472 x 624 KiB is the IPU21 itself, else
    `Target.small` (ValueError naming the bad value)."""
    tiles = tiles or IPU21.num_tiles
    if tiles == IPU21.num_tiles and sram_kib * 1024 == IPU21.sram_bytes:
        return IPU21
    return Target.small(tiles=tiles, sram_kib=sram_kib)


def label(op: Operation) -> str:
    hint = op.results[0].name_hint if op.results and op.results[0].name_hint else None
    return f"{op.name}{' (%' + hint + ')' if hint else ''}"


# --------------------------------------------------------------------------------------------------------------
# Layout constructors


def whole_on(shape, dtype: Attribute, tile: int) -> tl.LayoutAttr:
    return tl.make_layout(shape, shape, np.array([[tile]], np.int32), dtype)


def spread_rows(shape, dtype: Attribute, tiles: int) -> tl.LayoutAttr:
    """Dimension 0 cut into at most `tiles` blocks, one per tile."""
    rows = shape[0]
    per = math.ceil(rows / min(rows, tiles))
    nb = math.ceil(rows / per)
    return tl.make_layout(shape, (per, *shape[1:]), np.arange(nb, dtype=np.int32)[:, None], dtype)


def feeds_layer_norm(v) -> bool:
    """v is read by a layer norm, or carried by a layer loop (into it, or yielded by its body): the residual
    stream, which the next iteration's first layer norm reads (the body's arguments are placeholders while it is
    planned, so the loop's own uses stand for theirs)."""
    for use in v.uses:
        user = use.operation
        if isinstance(user, nn.LayerNormOp | nn.YieldOp):
            return True
        if isinstance(user, nn.RepeatOp) and use.index < len(user.carried):
            return True
    return False


def with_dtype(layout: tl.LayoutAttr, dtype: Attribute, scale: int = 0) -> tl.LayoutAttr:
    if layout.dtype == dtype and layout.scale.data == scale:
        return layout
    return tl.LayoutAttr(
        layout.shape_, layout.block_, layout.table(), dtype, layout.order.data, layout.stack.data, scale
    )


def with_order(layout: tl.LayoutAttr, order: str) -> tl.LayoutAttr:
    return tl.LayoutAttr(
        layout.shape_,
        layout.block_,
        layout.table(),
        layout.dtype,
        order,
        layout.stack.data,
        layout.scale.data,
    )


def producer_panel_width(have: tl.LayoutAttr | None) -> int | None:
    """The column block width of a producer layout that column-panel gathers can follow (an unstacked row-major
    matrix), else None."""
    if have is None or have.stack.data or len(have.shape_) != 2 or have.order.data != "row_major":
        return None
    return have.block_[1]


def gathered_rows_layout(have: tl.LayoutAttr | None, want: tl.LayoutAttr) -> tl.LayoutAttr:
    """The layout in which a GEMM's A row panels (`want`, row-major [pm, K] blocks) should arrive from a producer
    in layout `have`: in column panels of the producer's block width P (`colsP`) when the producer's blocks are
    narrower than K. A tile receives from one sender per exchange round; row-major, every row of every producer
    block is its own receive (pm x K / P rounds: 679 for So400m's fc2 parts), in column panels one receive per
    overlapping producer block. The GEMM lowering gathers each K chunk's rows from the panels on the tile."""
    p, k = producer_panel_width(have), want.shape_[1]
    if (
        p is None
        or p >= k
        or want.block_[0] < 2
        or want.block_[1] != k
        or (p * tl.element_bytes(want.dtype)) % 4
    ):
        return want
    return with_order(want, f"cols{p}")


def gathered_chunk_layout(have: tl.LayoutAttr | None, want: tl.LayoutAttr) -> tl.LayoutAttr:
    """The layout in which a many-row `nn.linear_partials`' x blocks (`want`, row-major [pm, kc]) should arrive
    from a producer in column blocks of P < kc (a GEMM's, through a GELU or cast; attention's heads): column
    panels of P, one receive per overlapping producer block instead of one per row piece. P of whole 16-column K
    blocks the GEMM reads in place (row stride 2P); others (72-wide heads) the lowering gathers into row-major A
    (`nnops.linear_partials_rows`)."""
    p = producer_panel_width(have)
    if p is None or p >= want.block_[1] or p % 4 or 2 * p > cm.GEMM_MAX_A_ROW_BYTES or want.block_[0] < 2:
        return want
    return with_order(want, f"cols{p}")


def gathered_head_layout(have: tl.LayoutAttr | None, want: tl.LayoutAttr) -> tl.LayoutAttr:
    """The layout in which attention's Q, K or V head blocks (`want`: [rows, d] per head) should arrive from a
    producer whose column blocks divide the head (P | d, e.g. 24 of 72): column panels of P (`colsP`), one
    receive per producer block instead of one per row piece. The attention lowering reads the panels row by row."""
    p, d = producer_panel_width(have), want.block_[1]
    if p is None or p >= d or d % p or p % 4 or len(want.shape_) != 2:
        return want
    return with_order(want, f"cols{p}")


# Smallest piece of a spread home (bytes): a layer norm's [1152] weight replicated to every tile is cut into a few
# pieces, not 1152 one-element pieces (each piece is one exchange receive row on every tile, one round). 2 KiB
# instead of 1: So400m's patch-embedding weight rows (1176 B) go in 16 pieces per block instead of 32, one layer +
# head in 613 exchange rounds instead of 650, the plan's least SRAM headroom 50,624 B instead of 50,936 (4 KiB:
# 582 rounds, 45,200 B).
HOME_PIECE_BYTES = 2048


def home_of(layout: tl.LayoutAttr, salt: int = 0, num_tiles: int = 0) -> tl.LayoutAttr:
    """A resident home for a replicated layout (parameters, host-folded casts, inputs): every block is split
    along its first dimension into (up to R) pieces, one per replica tile, so that each tile of a GEMM grid holds
    a distinct share of the operand and the exchange broadcasts the pieces to the block's replicas. The piece
    height is ceil(block0 / R) (at least HOME_PIECE_BYTES), rounded up to a divisor of block0 when one is near (pieces then never straddle two
    blocks; a straddling piece is still a valid layout: it is exchanged to both blocks' tiles). Piece i of block
    b goes to replica (i + b + salt) mod R, so the shares of different blocks do not all start on replica 0, and
    with a different `salt` per operand (the planner counts homes) different GEMMs on the same grid do not put
    their first pieces on the same tiles. The result is a dense-table layout with one replica per block.
    A one-replica layout with blocks of SPREAD_BLOCK_BYTES or more (given `num_tiles`) is split the same way,
    its pieces spread evenly over all tiles."""
    r = layout.replicas.data
    shape, block = layout.shape_, layout.block_
    b0 = block[0]
    row_bytes = math.prod(block[1:]) * tl.element_bytes(layout.dtype)
    spread = 0  # one replica, big blocks: pieces over other tiles too (see below)
    if r == 1:
        if not num_tiles or b0 * row_bytes < SPREAD_BLOCK_BYTES or layout.num_blocks >= num_tiles:
            return layout
        # One replica (a GEMM with one row panel, e.g. the MAP head's M = 1 GEMMs): the blocks would sit whole on
        # the grid's few tiles; split them into pieces spread evenly over all tiles instead.
        spread = min(b0, -(-num_tiles // layout.num_blocks))
        r = spread
    p = min(b0, max(-(-b0 // r), -(-HOME_PIECE_BYTES // row_bytes)))
    for q in range(p, min(b0, 2 * p) + 1):
        if b0 % q == 0:
            p = q
            break
    if layout.order.data == "ampw" and len(shape) == 2:
        return _ampw_home(layout, p, r, spread, salt, num_tiles)
    t = layout.table()
    grid = layout.grid
    rest = math.prod(grid[1:])
    h0 = -(-shape[0] // p)
    j0 = np.arange(h0)
    i0 = j0 * p // b0  # the original block row holding each piece's first row
    piece = j0 - (i0 * b0 + p - 1) // p  # pieces that start earlier inside the same block row
    orig = (i0[:, None] * rest + np.arange(rest)[None, :]).reshape(-1)  # original flat block per new block
    pc = np.repeat(piece, rest)
    if spread:
        tiles = ((np.arange(len(orig)) * num_tiles) // len(orig) + salt) % num_tiles
        tiles = tiles.astype(np.int32)[:, None]
    else:
        tiles = t[orig, (pc + orig + salt) % r][:, None]
    return tl.LayoutAttr(
        shape, (p, *block[1:]), np.ascontiguousarray(tiles, np.int32), layout.dtype, layout.order.data, 0,
        layout.scale.data,
    )  # fmt: skip


def _ampw_home(
    layout: tl.LayoutAttr, p: int, r: int, spread: int, salt: int, num_tiles: int
) -> tl.LayoutAttr:
    """`home_of` for an `ampw` block grid: pieces of as many elements as row-major pieces of p rows would have,
    but cut so that each is one contiguous range of its block (two with a K tail; `tl.ampw_positions`): whole
    16-row AMP panels (the whole block's rows when they are not whole panels) by a run of whole K blocks (a
    divisor of the block's columns; the whole width unless a piece is one panel). Pieces of 16 full-width rows instead would double the granularity where
    the row-major pieces have 8 rows, and 27 stacked layers of those no longer balance over the tiles."""
    shape, (b0, b1) = layout.shape_, layout.block_
    kb = tl.ampw_kblock(layout.dtype)
    q = tl.AMP_PANEL_ROWS
    pr = p if p % q == 0 else (q if b0 % q == 0 else b0)
    c = b1
    # A run of K blocks is contiguous inside one row panel only (or inside region B, a block of fewer rows).
    if pr > p and b1 % kb == 0 and (pr == q or pr == b0 < q):
        fits = [m for m in range(kb, b1 + 1, kb) if b1 % m == 0 and pr * m <= p * b1]
        c = max(fits) if fits else kb
    rows, cols = -(-shape[0] // pr), -(-shape[1] // c)
    ri, ci = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    ri, ci = ri.reshape(-1), ci.reshape(-1)
    bi, bj = ri * pr // b0, ci * c // b1  # the original block of each piece
    orig = bi * layout.grid[1] + bj
    # the piece's index inside its original block (pieces that start earlier in it, row-major over the pieces)
    per_row = -(-b1 // c)
    piece = (ri - (bi * b0 + pr - 1) // pr) * per_row + (ci - (bj * b1 + c - 1) // c)
    if spread:
        tiles = (((np.arange(len(orig)) * num_tiles) // len(orig) + salt) % num_tiles).astype(np.int32)
    else:
        tiles = layout.table()[orig, (piece + orig + salt) % r]
    return tl.LayoutAttr(
        shape,
        (pr, c),
        np.ascontiguousarray(tiles[:, None], np.int32),
        layout.dtype,
        "ampw",
        0,
        layout.scale.data,
    )


# Two-stage gathers: an exchange round costs a few hundred cycles (the round table walk, the sends' setup, the
# 150-cycle internal sync) besides its data, and a tile hears one sender per round. A consumer block assembled from many
# small producer blocks (attention K/V from 25 x 24 GEMM blocks: 90 pieces; a M = 1 row from 135 16-column blocks)
# pays one round per piece. Through an intermediate layout (`gather_mid`) it pays the pieces of one intermediate
# block in the first phase (all intermediate blocks in parallel) and one round per intermediate block in the second.
GATHER_MIN_PIECES = 16  # direct pieces per consumer block below which the gather stays direct
GATHER_GAIN = 2  # ... and the two stages must need at most 1 / GATHER_GAIN of its rounds
GATHER_MID_BYTES = 16 * 1024  # intermediate blocks shorter than the consumer's: at most this many bytes
# Since the exchange is one timed phase (no rounds), the two stages pay off only for multicast gathers (`want`
# replicated: a multicast waits for its slowest receiver, and with many small pieces those waits dominate; So400m's
# q gather direct: 33.3 k cycles against 19.8 k in two stages). A gather whose pieces have one receiver each (one
# replica: the residual stream's rows from a K split's sum blocks) streams its pieces back to back; a second stage
# only adds a phase and moves every byte again (So400m, 2 layers: 54 -> 48 phases, their timed spans 176.7 k ->
# 175.4 k cycles). Such gathers stay direct.


def gather_mid(
    have: tl.LayoutAttr, want: tl.LayoutAttr, num_tiles: int, salt: int = 0
) -> tl.LayoutAttr | None:
    """The intermediate layout of a two-stage gather from `have` to `want`, or None if a direct relayout is as
    good (see GATHER_MIN_PIECES; a `want` of one replica always: see above) or the shapes are not of the kind
    handled.

    Handled: 2-D, same dtype, unstacked; `have` row-major with one replica and blocks (hr, hc); `want` with
    blocks (wr, wc), wc a multiple of hc, stored as column panels of hc (`cols{hc}`) or row-major single rows
    (wr = 1). The intermediate has blocks (mr, g * hc) of g producer column blocks, in `want`'s storage order,
    so that every transfer of both stages is one contiguous range on both sides: a producer block's rows into
    one panel (or one row), whole intermediate panels (or a row range) into `want`; mr = wr, or with g = 1 a
    part of wr (intermediate blocks of at most GATHER_MID_BYTES: less memory beside the consumer's blocks, and
    fewer first-stage pieces). (mr, g) minimise the rounds of both stages, n_r(mr) * g + ceil(wr / mr) *
    ceil(n_c / g), against n_r(wr) * n_c direct (n_r(h): producer row blocks meeting h rows; n_c = wc / hc).
    The intermediate blocks are spread evenly over the tiles (rotated by `salt`, so that gathers planned one
    after the other use different tiles): on a tile of `want` they would live beside the block they feed."""
    if len(have.shape_) != 2 or have.shape_ != want.shape_ or have.dtype != want.dtype:
        return None
    if want.replicas.data == 1:
        return None
    if have.stack.data or want.stack.data or have.order.data != "row_major" or have.replicas.data != 1:
        return None
    (rows, cols), (hr, hc), (wr, wc) = have.shape_, have.block_, want.block_
    panels = tl.col_panel_width(want)
    if want.order.data == "row_major" and wr > 1 and wc < hc and hc % wc == 0:
        return _column_part_mid(have, want, num_tiles, salt)
    if (wc % hc and wc < cols) or not (panels == hc or (want.order.data == "row_major" and wr == 1)):
        return None  # (a block over all columns may end in a narrower producer block)

    def producer_rows(mr: int) -> int:  # most producer row blocks meeting one block of mr rows
        starts = np.arange(0, rows, mr)
        return int((((np.minimum(starts + mr, rows) - 1) // hr) - starts // hr + 1).max())

    n_c = -(-min(wc, cols) // hc)
    direct = producer_rows(wr) * n_c
    if direct < GATHER_MIN_PIECES:
        return None
    esize = tl.element_bytes(want.dtype)
    best = None  # (rounds of both stages, bytes of an intermediate block, rows, g)
    for g in range(1, n_c + 1):
        # Fewer rows than a `want` block only with one panel per block (a row range of several panels is not
        # contiguous), and dividing the `want` rows so that no intermediate block feeds two `want` row blocks.
        heights = {wr}
        if g == 1 and wr > hr:
            heights |= {-(-wr // s) for s in range(2, wr // hr + 1)}
        for mr in heights:
            if mr < wr and wr < rows and wr % mr:
                continue
            nbytes = mr * g * hc * esize
            if mr < wr and nbytes > GATHER_MID_BYTES:
                continue
            rounds = producer_rows(mr) * g + -(-wr // mr) * -(-n_c // g)
            if best is None or (rounds, nbytes) < best[:2]:
                best = (rounds, nbytes, mr, g)
    if best is None or GATHER_GAIN * best[0] > direct:
        return None
    _, _, mr, g = best
    mc = g * hc
    tiles = mid_tiles(have, want, (mr, mc), num_tiles, salt)
    return tl.make_layout((rows, cols), (mr, mc), tiles, want.dtype, want.order.data, want.scale.data)


def mid_tiles(
    have: tl.LayoutAttr, want: tl.LayoutAttr, block: tuple[int, int], num_tiles: int, salt: int
) -> np.ndarray:
    """int32 [blocks, 1]: the tile of each intermediate block (blocks of `block` over the shape, row-major order),
    spread evenly over the tiles (rotated by `salt`), each moved on to the next tile that neither produces nor
    reads any of its elements (a tile of `have` or of `want` overlapping it) when one is free: on such a tile
    the stage would be an on-tile copy, which the compute step after the exchange waits for (So400m's x gathers:
    ~550 cycles on the few tiles that had one, on the critical path of every GEMM step), while a transfer only
    evens its receipts out with the other readers'. Each tile takes one intermediate block while free tiles last."""
    (rows, cols), (mr, mc) = have.shape_, block
    nr, nc = -(-rows // mr), -(-cols // mc)
    n = nr * nc
    spread = (np.arange(n) * num_tiles // n + salt * 97) % num_tiles
    o = np.stack(np.meshgrid(np.arange(nr) * mr, np.arange(nc) * mc, indexing="ij"), -1).reshape(n, 2)
    e = np.minimum(o + (mr, mc), (rows, cols))
    near = np.zeros((n, num_tiles), bool)  # [block, tile]: the tile holds an overlapping have / want block
    for lay in (have, want):
        geo = lay.geometry()
        lo, hi = np.asarray(geo.block_origin), np.asarray(geo.block_origin) + np.asarray(geo.block_dims)
        hit = ((lo[None] < e[:, None]) & (o[:, None] < hi[None])).all(-1)  # [mid block, layout block]
        table = np.asarray(lay.table())
        b, lb = np.nonzero(hit)
        for rep in range(table.shape[1]):
            near[b, table[lb, rep] % num_tiles] = True
    taken = np.zeros(num_tiles, bool)
    out = spread.copy()
    for i in range(n):
        free = ~near[i] & ~taken
        if not free.any():
            free = ~near[i]
        if free.any() and not free[spread[i]]:
            nxt = np.nonzero(np.roll(free, -spread[i]))[0]
            out[i] = (spread[i] + nxt[0]) % num_tiles
        taken[out[i]] = True
    return out.astype(np.int32)[:, None]


def _column_part_mid(
    have: tl.LayoutAttr, want: tl.LayoutAttr, num_tiles: int, salt: int
) -> tl.LayoutAttr | None:
    """`gather_mid` for row-major `want` blocks (wr, wc) that are a column part of the producer's wider blocks
    (wc < hc, e.g. a K chunk of a layer norm's whole rows for `nn.linear_partials`): every row of a `want` block
    is its own piece (a producer block's rows are not contiguous in that column part), wr rounds direct. Through
    (mr, wc) intermediate blocks, mr dividing wr: mr pieces in the first stage, wr / mr contiguous row ranges in
    the second."""
    (rows, cols), (wr, wc) = have.shape_, want.block_
    if wr < GATHER_MIN_PIECES:
        return None
    esize = tl.element_bytes(want.dtype)
    best = None  # (rounds of both stages, rows of an intermediate block)
    for mr in range(2, wr):
        if wr % mr or mr * wc * esize > GATHER_MID_BYTES:
            continue
        rounds = mr + wr // mr
        if best is None or rounds < best[0]:
            best = (rounds, mr)
    if best is None or GATHER_GAIN * best[0] > wr:
        return None
    mr = best[1]
    tiles = mid_tiles(have, want, (mr, wc), num_tiles, salt)
    return tl.make_layout((rows, cols), (mr, wc), tiles, want.dtype, "row_major", want.scale.data)


def one_replica(layout: tl.LayoutAttr) -> tl.LayoutAttr:
    """One copy of a replicated layout: block b on replica b mod R (the result layout of a map op whose first
    operand is replicated)."""
    if layout.replicas.data == 1:
        return layout
    t = layout.table()
    pick = np.arange(t.shape[0]) % t.shape[1]
    return tl.LayoutAttr(
        layout.shape_, layout.block_, t[np.arange(t.shape[0]), pick][:, None], layout.dtype, layout.order.data,
        0, layout.scale.data,
    )  # fmt: skip


def broadcast_to(layout: tl.LayoutAttr, shape, dtype: Attribute) -> tl.LayoutAttr:
    """The layout of a trailing-dims operand (e.g. a bias [D] or [T, D] added to [T, D]) such that every tile of
    `layout` holds the part of the operand its blocks need: blocks of the trailing dims, replicated over the
    leading grid dimensions."""
    rank, brank = len(layout.shape_), len(shape)
    if tuple(shape) == layout.shape_:
        return with_dtype(layout, dtype)
    grid = layout.grid
    t = layout.table()[:, 0].reshape(grid)
    lead = math.prod(grid[: rank - brank])
    table = t.reshape(lead, -1).T  # [trailing blocks, lead replicas]
    if lead > 1 and any(len(set(row)) < lead for row in table.tolist()):
        # Two leading blocks on one tile: keep one replica per distinct tile.
        rows = [list(dict.fromkeys(row)) for row in table.tolist()]
        width = min(len(r) for r in rows)
        table = np.array([r[:width] for r in rows], np.int32)
    return tl.LayoutAttr(tuple(shape), layout.block_[rank - brank :], np.ascontiguousarray(table), dtype)


def replicate_rows_param(layout: tl.LayoutAttr, n: int, dtype: Attribute) -> tl.LayoutAttr:
    """A [n] vector (layer-norm weight/bias) whole on every distinct tile of `layout`."""
    tiles = np.unique(layout.table())
    return tl.LayoutAttr((n,), (n,), tiles[None, :].astype(np.int32), dtype)


# --------------------------------------------------------------------------------------------------------------
# Plans -> operand and result layouts


def gemm_operands(op: nn.LinearOp | nn.MatmulOp) -> tuple[SSAValue, SSAValue, int]:
    """(A, B, N) of a GEMM-planned op: a linear's x and [N, K] weight, or a 2-D matmul's lhs and [K, N] rhs."""
    if isinstance(op, nn.MatmulOp):
        return op.lhs, op.rhs, op.rhs.type.get_shape()[1]
    return op.input, op.weight, op.weight.type.get_shape()[0]


def is_gemm_matmul(op: Operation) -> bool:
    """An `nn.matmul` planned as one GEMM: 2-D, rhs as [K, N] rows (its column panels are the B blocks)."""
    return isinstance(op, nn.MatmulOp) and len(op.lhs.type.get_shape()) == 2 and not op.rhs_transposed


def gemm_layouts(op: nn.LinearOp | nn.MatmulOp, plan: tl.GemmPlanAttr, num_tiles: int):
    """(operand layouts, result layout) of a linear (or a 2-D matmul: its rhs [K, N] in [K, pn] column blocks)
    under a GEMM plan."""
    gm, gn = plan.get("grid")
    pm, k, pn = plan.get("panel")
    base = plan.get("base")
    m, n = op.result.type.get_shape()
    if gm * gn > num_tiles or math.ceil(m / pm) != gm or math.ceil(n / pn) != gn:
        raise PassFailedException(
            f"tile-plan: {label(op)}: GEMM plan grid {gm}x{gn} with panels [{pm}, {pn}] does not cover the "
            f"[{m}, {n}] result on {num_tiles} tiles"
        )
    xv, wv, _ = gemm_operands(op)
    xt, wt = xv.type, wv.type
    x_tab = tl.AffineTilesAttr(base, gn, 1).table(gm, gn)
    w_tab = tl.AffineTilesAttr(base, 1, gn).table(gn, gm)
    x = tl.make_layout(xt.get_shape(), (pm, k), x_tab, xt.element_type)
    if isinstance(op, nn.MatmulOp):
        w = tl.make_layout(wt.get_shape(), (k, pn), w_tab, wt.element_type)
    else:
        w = tl.make_layout(wt.get_shape(), (pn, k), w_tab, wt.element_type, order=plan.get("worder"))
    operands = [x, w]
    if isinstance(op, nn.LinearOp) and op.bias is not None:
        operands.append(tl.make_layout(op.bias.type.get_shape(), (pn,), w_tab, op.bias.type.element_type))
    res = tl.make_layout(
        (m, n), (pm, pn), tl.AffineTilesAttr(base, 1, 0).table(gm * gn, 1), op.result.type.element_type
    )
    return operands, res


def partials_layouts(op: nn.LinearPartialsOp, plan: tl.GemmPlanAttr, num_tiles: int):
    """(operand layouts, result layout) of `nn.linear_partials` under a GEMM plan whose grid is [G K chunks, gn
    column panels] and panel [M, kc, pn]: tile base + g * gn + j computes partial g of column panel j from its
    own [pn, kc] weight block (one replica: the weights stay where they are used) and the whole x (one block,
    replicated on every tile: one multicast instead of a piece per chunk)."""
    if len(plan.get("grid")) == 3:
        return partials_rows_layouts(op, plan, num_tiles)
    g, gn = plan.get("grid")
    m, kc, pn = plan.get("panel")
    base = plan.get("base")
    (mx, k), n = op.input.type.get_shape(), op.weight.type.get_shape()[0]
    h = op.groups
    if h and ((n // h) % pn or m != 1):
        raise PassFailedException(
            f"tile-plan: {label(op)}: a grouped partials plan needs one row and panels dividing the {n // h}-column "
            f"groups, got panel [{m}, {kc}, {pn}]"
        )
    if (
        g * gn > num_tiles
        or -(-k // kc) != g
        or -(-n // pn) != gn
        or m != (1 if h else mx)
        or base + g * gn > num_tiles
    ):
        raise PassFailedException(
            f"tile-plan: {label(op)}: partials plan grid {g}x{gn} with panels [{m}, {kc}, {pn}] at base {base} does "
            f"not cover [{mx}, {k}] x [{n}, {k}] on {num_tiles} tiles"
        )
    tiles = base + np.arange(g * gn, dtype=np.int32)  # tile of (chunk c, panel j) at c * gn + j
    if h:
        # Grouped: tile (c, j) receives only block (group of panel j, c) of x, [1, kc]: blocks in (row, chunk)
        # order, each on the tiles of its group's panels in that chunk.
        per = n // h // pn
        cells = tiles.reshape(g, h, per).transpose(1, 0, 2).reshape(h * g, per)
        x = tl.make_layout((mx, k), (1, kc), np.ascontiguousarray(cells), op.input.type.element_type)
    else:
        x = tl.make_layout((m, k), (m, k), tiles[None, :], op.input.type.element_type)
        if chunked_x(op):  # x in K chunks: tile (c, j) receives chunk c only (replicated over the panels)
            x = tl.make_layout(
                (m, k), (m, kc), np.ascontiguousarray(tiles.reshape(g, gn)), op.input.type.element_type
            )
    w_tab = tiles.reshape(g, gn).T.reshape(-1, 1)  # weight blocks in (panel j, chunk c) order
    w = tl.make_layout((n, k), (pn, kc), np.ascontiguousarray(w_tab), op.weight.type.element_type,
                       order=plan.get("worder"))  # fmt: skip
    res = tl.make_layout((g, m, n), (1, m, pn), tiles[:, None], op.result.type.element_type)
    return [x, w], res


def chunked_x(op: nn.LinearPartialsOp) -> bool:
    """A few-row K split whose x comes in small blocks (a sum of partials, through an add, a GELU or casts: the
    MAP head's MLP and out_proj): each tile takes only its chunk's [M, kc] part of x (kc / 16 pieces) instead of
    the whole of it (K / 16 pieces; a whole row from one tile, the layer norm's, stays one multicast). So does
    a K split of a device-computed weight (`device_weight_partials`)."""
    if device_weight_partials(op):
        return True
    v = through_views(op.input)
    return not op.groups and isinstance(getattr(v, "owner", None), nn.ReduceSumOp | nn.AddOp | nn.GeluOp)


def device_weight_partials(op: nn.LinearPartialsOp) -> bool:
    """A few-row K split whose weight the device computes (`nn_split_k.device_weight_chunk`: the MAP head's
    scores U X^T): its grid is planned by `choose_device_weight_partials`, its x comes in K chunks and its
    [pn, kc] weight blocks are the ones `nn.matmul_partials` of the same weight reads in place."""
    return not op.groups and computed_on_device(op.weight)


def device_weight_sum_layout(parts: nn.LinearPartialsOp, dtype: Attribute, num_tiles: int) -> tl.LayoutAttr:
    """The sum of a device-weight K split's partials (`device_weight_partials`) in blocks of one row of a column
    panel ([1, pn]: one contiguous piece per chunk), row r of panel c on the tile of (chunk r, panel c) (rows
    past G on the tiles after the grid, one block per tile)."""
    plan = parts.attributes[tl.PLAN_ATTR]
    g, gn = plan.get("grid")
    m, _, pn = plan.get("panel")
    r, c = np.meshgrid(np.arange(m), np.arange(gn), indexing="ij")
    # row r of panel c beside chunk r's partial of it (more rows than chunks: a tile per block all the same)
    tab = ((plan.get("base") + r * gn + c) % num_tiles).astype(np.int32).reshape(-1, 1)
    return tl.make_layout((m, parts.weight.type.get_shape()[0]), (1, pn), np.ascontiguousarray(tab), dtype)


def choose_device_weight_partials(op: nn.LinearPartialsOp, target: Target, base: int) -> tl.GemmPlanAttr:
    (m, k), n = op.input.type.get_shape(), op.weight.type.get_shape()[0]
    kc, pn = op.chunk, DEVICE_WEIGHT_PANEL
    g, gn = -(-k // kc), -(-n // pn)
    if g * gn > target.num_tiles:
        raise PassFailedException(
            f"tile-plan: {label(op)}: {g} chunks x {gn} panels exceed {target.num_tiles} tiles"
        )
    base = base % (target.num_tiles - g * gn + 1)
    cycles = cm.gemm_kernel_cycles(m, kc, pn, 2) + cm.weight_prep_cycles(pn, kc, "f16", target)
    return gemm_plan(g, gn, m, kc, pn, base, "f16", "early", "row_major", cycles)


def matmul_partials_cells(plan: tl.GemmPlanAttr, num_tiles: int) -> np.ndarray:
    """Tiles of a `nn.matmul_partials` grid [G chunks, gn column groups]: (c, j) on base + j * G + c (column
    group j's chunks on consecutive tiles: the layout of a [pm = 1] GEMM's weight blocks over G column panels,
    see `choose_matmul_partials`)."""
    g, gn = plan.get("grid")
    c, j = np.meshgrid(np.arange(g), np.arange(gn), indexing="ij")
    return ((plan.get("base") + j * g + c) % num_tiles).astype(np.int32)


def matmul_partials_layouts(op: nn.MatmulPartialsOp, plan: tl.GemmPlanAttr, num_tiles: int):
    """Tile (c, j) (`matmul_partials_cells`) holds chunk c's lhs block [M, kc] (replicated over the gn column
    groups) and its own rhs block [kc, pn] and computes the result block (c, j): [1, M, pn]."""
    g, gn = plan.get("grid")
    m, kc, pn = plan.get("panel")
    (_, k), n = op.lhs.type.get_shape(), op.rhs.type.get_shape()[1]
    cells = matmul_partials_cells(plan, num_tiles)
    a = tl.make_layout((m, k), (m, kc), np.ascontiguousarray(cells), op.lhs.type.element_type)
    b = tl.make_layout((k, n), (kc, pn), np.ascontiguousarray(cells.reshape(-1, 1)), op.rhs.type.element_type)
    res = tl.make_layout((g, m, n), (1, m, pn), cells.reshape(-1, 1), op.result.type.element_type)
    return [a, b], res


def matmul_partials_sum_layout(parts: nn.MatmulPartialsOp, dtype: Attribute, num_tiles: int) -> tl.LayoutAttr:
    """The sum of `nn.matmul_partials` in blocks of one row of a column group ([1, pn]): each receives one piece
    per chunk (a row of a partial block, contiguous), row r of group j on cell (r, j) (r < G; else on consecutive
    tiles from the grid's base, one block per tile)."""
    plan = parts.attributes[tl.PLAN_ATTR]
    g, gn = plan.get("grid")
    m, _, pn = plan.get("panel")
    cells = matmul_partials_cells(plan, num_tiles)
    r, j = np.meshgrid(np.arange(m), np.arange(gn), indexing="ij")
    if m <= g:  # row r of group j beside chunk r's partial of it
        tab = np.ascontiguousarray(cells[r, j].reshape(-1, 1))
    else:  # more rows than chunks: a tile per block all the same
        tab = ((plan.get("base") + r * gn + j) % num_tiles).astype(np.int32).reshape(-1, 1)
    return tl.make_layout((m, parts.rhs.type.get_shape()[1]), (1, pn), tab, dtype)


def choose_matmul_partials(op: nn.MatmulPartialsOp, target: Target) -> tl.GemmPlanAttr:
    """G = K / kc chunks x gn column groups. When a K split with chunked weight blocks (the MAP head's scores
    U X^T, `device_weight_partials`) reads the rhs as its weight in [kc, kc_s] blocks over G panels and G_s
    chunks, the grid mirrors it (gn = G_s column groups of kc_s, base its base): cell (c, j)'s rhs block is the
    scores' weight block on the same tile, no exchange brings it."""
    (m, k), n = op.lhs.type.get_shape(), op.rhs.type.get_shape()[1]
    kc = op.chunk
    g = -(-k // kc)
    for use in x_readers(op.rhs):
        plan = use.attributes.get(tl.PLAN_ATTR) if isinstance(use, nn.LinearPartialsOp) else None
        if (
            not isinstance(plan, tl.GemmPlanAttr)
            or len(plan.get("grid")) != 2
            or not device_weight_partials(use)
        ):
            continue
        # [G_s chunks, gn panels], (c, j) on base + c * gn + j, [pn, kc_s] blocks
        groups, panels = plan.get("grid")
        _, kc_s, pn_s = plan.get("panel")
        if pn_s == kc and panels == g and kc_s * groups == n and kc_s % 4 == 0:
            cycles = cm.gemm_kernel_cycles(m, kc, kc_s, 2)
            return gemm_plan(g, groups, m, kc, kc_s, plan.get("base"), "f16", "early", "row_major", cycles)
    gn = max(1, min(target.num_tiles // g, n // 16))
    while n % gn or (n // gn) % 4:
        gn -= 1
    if g * gn > target.num_tiles:
        raise PassFailedException(f"tile-plan: {label(op)}: {g} chunks do not fit {target.num_tiles} tiles")
    return gemm_plan(
        g, gn, m, kc, n // gn, 0, "f16", "early", "row_major", cm.gemm_kernel_cycles(m, kc, n // gn, 2)
    )


def x_replicas(op: nn.LinearPartialsOp, gm: int, pm: int, pn: int, gn: int, num_tiles: int) -> int:
    """How many column-panel tiles x's [pm, kc] blocks of the many-row split `op` are replicated over: its gn, or
    the largest gn of the splits of the same x on the same rows and chunks (gm, pm, pn; So400m's MLP parts of
    2160 and 2144 columns: 68 and 67 panels of 32). The grid's tiles are numbered panel-major
    (`partials_rows_layouts`), so those splits' tiles of panel j are the same, and with one replica count their x
    layouts are one: x is gathered once for all of them."""
    most = gn
    for o in x_readers(op.input):
        if o is op or not isinstance(o, nn.LinearPartialsOp) or o.chunk != op.chunk:
            continue
        grid = rows_plan_grid(o, num_tiles)
        if grid is not None and tuple(grid[1:]) == (gm, pm, pn):
            most = max(most, -(-o.weight.type.get_shape()[0] // pn))
    return most


def partials_rows_layouts(op: nn.LinearPartialsOp, plan: tl.GemmPlanAttr, num_tiles: int):
    """`nn.linear_partials` of many rows: grid [G K chunks, gm row panels, gn column panels], panel [pm, kc, pn];
    tile base + (j * G + c) * gm + i (panel-major) computes partial c of output block (i, j) from x's [pm, kc]
    block (i, c) (replicated over the tiles of (c, i): `x_replicas` column panels) and the weight's [pn, kc] block
    (j, c) (replicated over the gm tiles of (c, j)); its result is one [1, pm, pn] block (an attention operand's
    panel wider than the head divisor P it is stored in too: its sum splits it, `panel_store_width`)."""
    g, gm, gn = plan.get("grid")
    pm, kc, pn = plan.get("panel")
    base = plan.get("base")
    (m, k), n = op.input.type.get_shape(), op.weight.type.get_shape()[0]
    gx = x_replicas(op, gm, pm, pn, gn, num_tiles) if base == 0 else gn
    if base + g * gm * gx > num_tiles or -(-k // kc) != g or -(-m // pm) != gm or -(-n // pn) != gn:
        raise PassFailedException(
            f"tile-plan: {label(op)}: partials plan grid {g}x{gm}x{gn} with panels [{pm}, {kc}, {pn}] at base "
            f"{base} does not cover [{m}, {k}] x [{n}, {k}] on {num_tiles} tiles"
        )
    cells = base + np.arange(gx * g * gm, dtype=np.int32).reshape(gx, g, gm).transpose(1, 2, 0)  # [c, i, j]
    t = np.ascontiguousarray(cells[:, :, :gn])
    x_tab = cells.transpose(1, 0, 2).reshape(gm * g, gx)  # x block (i, c) -> the tiles of (c, i)
    w_tab = t.transpose(2, 0, 1).reshape(gn * g, gm)  # weight block (j, c) -> the gm tiles of (c, j)
    x = tl.make_layout((m, k), (pm, kc), np.ascontiguousarray(x_tab), op.input.type.element_type)
    w = tl.make_layout((n, k), (pn, kc), np.ascontiguousarray(w_tab), op.weight.type.element_type,
                       order=plan.get("worder"))  # fmt: skip
    res = tl.make_layout(
        (g, m, n), (1, pm, pn), np.ascontiguousarray(t).reshape(-1, 1), op.result.type.element_type
    )
    return [x, w], res


def panel_store_width(op: nn.LinearPartialsOp, pn: int) -> int:
    """The column blocks a many-row split's sum is stored in for panels of pn: pn, or for an attention operand
    whose panel is a multiple of a head divisor P but does not divide the head (`nn_split_k.head_multiples`: 48
    for heads of 72) the largest such P, so that the attention gathers whole P-wide blocks, as it gathers the
    panels of P (a 48-wide row-major block would cut every row of a head into a piece of its own). The partials
    stay whole [pm, pn] blocks (one GEMM writes them, the exchange moves [pm / G, pn] row ranges of them); each
    sum tile holds pn / P adjacent result blocks, which `ksum` writes from every P columns of the pn-wide partial
    rows (`nnops.reduce_sum`)."""
    d = attention_head_dim(op)
    if not d or d % pn == 0:
        return pn
    fits = [p for p in head_divisors(d) if pn % p == 0]
    return max(fits) if fits else pn


def partials_of(op: nn.ReduceSumOp) -> Operation:
    """The op whose partials `op` sums (through the relayouts tile-plan put between them)."""
    v = op.operands[0]
    while isinstance(v.owner, tl.RelayoutOp):
        v = v.owner.operands[0]
    return v.owner


def partials_store_panel(op: nn.ReduceSumOp) -> int:
    """pn when `op` sums a planned many-row `nn.linear_partials` whose [pm, pn] blocks its result stores in
    narrower column blocks (`panel_store_width`: its operand then keeps pn-wide rows, `reduce_layouts`); else 0."""
    parts = partials_of(op)
    plan = parts.attributes.get(tl.PLAN_ATTR) if isinstance(parts, nn.LinearPartialsOp) else None
    if not isinstance(plan, tl.GemmPlanAttr) or len(plan.get("grid")) != 3:
        return 0
    pn = plan.get("panel")[2]
    return pn if panel_store_width(parts, pn) != pn else 0


def reduce_layouts(result: tl.LayoutAttr, count: int, width: int = 0) -> tl.LayoutAttr:
    """The operand layout `nn.reduce_sum` needs for `result`: each result block's `count` partial blocks
    stacked on its tile. width (a multiple of the result's column blocks, 2-D results): the partials in blocks
    of that many columns, each holding width / w adjacent result blocks of one tile (`panel_store_width`)."""
    w = result.block_[-1]
    if width and width != w and len(result.shape_) == 2 and width % w == 0:
        gr, gc = result.grid
        table = result.table()[:, 0].reshape(gr, gc)
        k = width // w
        merged = table[:, ::k]
        for j in range(1, k):  # every result block of a partial block on that block's tile
            part = table[:, j::k]
            if (part != merged[:, : part.shape[1]]).any():
                raise PassFailedException(
                    f"tile-plan: a sum's result blocks of {w} columns are not grouped by {width} on one tile"
                )
        return tl.LayoutAttr(
            (count, *result.shape_), (count, result.block_[0], width),
            np.ascontiguousarray(merged.reshape(-1, 1)), result.dtype, "row_major", 0, 0,
        )  # fmt: skip
    return tl.LayoutAttr(
        (count, *result.shape_), (count, *result.block_), result.table(), result.dtype, "row_major", 0, 0
    )


def reduce_result_layout(
    have: tl.LayoutAttr, dtype: Attribute, width: int = 0, num_tiles: int = 0
) -> tl.LayoutAttr:
    """`nn.reduce_sum`'s result from its operand's layout: the blocks of the first leading index, on their tiles
    (there one of the partial blocks is already local). Partials of a 2-D result whose blocks' rows are a
    multiple of G (a many-row `nn.linear_partials`): each block's rows are scattered over its G tiles instead,
    pm / G rows each, so that every tile receives G - 1 small pieces rather than one tile G - 1 whole blocks;
    width (a divisor of the partials' block columns, `panel_store_width`): each such piece stored as blocks of
    that many columns, side by side on its tile. num_tiles (the target's): which of its G tiles sums a piece is
    chosen (`piece_tiles`) so that no piece lies on a tile that holds one of its rows in the residual stream's
    whole-row layout (`spread_rows`), where a sum is gathered into whole rows: such a piece would be an on-tile
    copy that the add after the gather waits for."""
    count = have.shape_[0]
    if len(have.shape_) == 3 and have.block_[0] == 1 and have.block_[1] > 1 and have.block_[1] % count == 0:
        _, gm, gn = have.grid
        pr = have.block_[1] // count
        m, n, pn = have.shape_[1], have.shape_[2], have.block_[2]
        sw = width if width and pn % width == 0 else pn
        t = have.table()[:, 0].reshape(count, gm, gn)
        if num_tiles:
            t = piece_tiles(t, pr, m, num_tiles)
        r = np.arange(-(-m // pr))
        cols = np.arange(-(-n // sw)) * sw // pn  # each result column block's partial block
        table = t[r % count, r // count, :][:, cols].reshape(-1, 1)
        return tl.LayoutAttr(have.shape_[1:], (pr, sw), np.ascontiguousarray(table), dtype,
                             "row_major", 0, 0)  # fmt: skip
    rest = math.prod(have.grid[1:])
    table = np.ascontiguousarray(have.table()[:rest, :1])
    return tl.LayoutAttr(have.shape_[1:], have.block_[1:], table, dtype, "row_major", 0, 0)


def piece_tiles(t: np.ndarray, pr: int, m: int, num_tiles: int) -> np.ndarray:
    """[G, gm, gn] tiles (t[g, i, j]: the GEMM tile of chunk g, row panel i, column panel j) reordered per (i, j)
    so that entry p, the tile that sums piece p (rows i * G * pr + p * pr ..), holds none of those rows in the
    `spread_rows` layout of the m rows over num_tiles, where one is free: a greedy matching of pieces to the
    group's tiles, in piece order."""
    g, gm, gn = t.shape
    per = math.ceil(m / min(m, num_tiles))  # spread_rows: row r on tile r // per
    out = t.copy()
    for i in range(gm):
        readers = []  # the row tiles of each piece's rows (none past m)
        for p in range(g):
            r0 = (i * g + p) * pr
            readers.append(set(range(r0 // per, (min(m, r0 + pr) - 1) // per + 1)) if r0 < m else set())
        for j in range(gn):
            free = list(t[:, i, j])
            for p in range(g):
                pick = next((k for k, tile in enumerate(free) if int(tile) not in readers[p]), 0)
                out[p, i, j] = free.pop(pick)
    return out


def attention_layouts(op: nn.AttentionOp, plan: tl.AttentionPlanAttr, num_tiles: int):
    """Tile base + (i * heads + h) * vs + j (mod the tiles) computes value columns j * D / vs.. of head h for query
    block i: it holds that block of Q's head h, all of K's head h and V's column slice j of it (vs = 1 unless the
    grid has a third entry)."""
    nq, h, *rest = plan.get("grid")
    vs = rest[0] if rest else 1
    qb, base = plan.get("qblock"), plan.get("base")
    t, c = op.query.type.get_shape()
    s = op.key.type.get_shape()[0]
    d = c // h
    cells = base + np.arange(nq * h * vs, dtype=np.int64).reshape(nq, h, vs)  # (query block, head, slice)
    q_tab = cells.reshape(nq * h, vs) % num_tiles
    k_tab = cells.transpose(1, 0, 2).reshape(h, nq * vs) % num_tiles
    v_tab = cells.transpose(1, 2, 0).reshape(h * vs, nq) % num_tiles
    q = tl.make_layout((t, c), (qb, d), q_tab.astype(np.int32), op.query.type.element_type)
    k = tl.make_layout((s, c), (s, d), k_tab.astype(np.int32), op.key.type.element_type)
    v = tl.make_layout((s, c), (s, d // vs), v_tab.astype(np.int32), op.value.type.element_type)
    res = tl.make_layout(
        (t, c),
        (qb, d // vs),
        (cells.reshape(-1, 1) % num_tiles).astype(np.int32),
        op.result.type.element_type,
    )
    return [q, k, v], res


def partial_cells(plan: tl.AttentionPlanAttr, num_tiles: int) -> np.ndarray:
    """Tiles of a key-split attention's grid [nq, heads, chunks]: cell (i, h, j) = base + (i * heads + h) *
    chunks + j (mod the tiles) holds query block i of head h against key chunk j."""
    nq, h, n = plan.get("grid")
    return (plan.get("base") + np.arange(nq * h * n, dtype=np.int64).reshape(nq, h, n)) % num_tiles


def attention_partial_layouts(op: nn.AttentionPartialOp, plan: tl.AttentionPlanAttr, num_tiles: int):
    """Cell (i, h, j) (`partial_cells`) holds Q's block i of head h ([qblock, D], replicated over the chunks), K's
    and V's chunk j of head h ([ceil(S / chunks), D], replicated over the query blocks) and computes the result
    block (j, i, h): [1, qblock, D + 2]."""
    nq, h, n = plan.get("grid")
    qb = plan.get("qblock")
    t, c = op.query.type.get_shape()
    s, d, kc = op.key.type.get_shape()[0], c // h, op.key_chunk()
    cells = partial_cells(plan, num_tiles).astype(np.int32)
    q = tl.make_layout((t, c), (qb, d), cells.reshape(nq * h, n), op.query.type.element_type)
    kv = np.ascontiguousarray(cells.transpose(2, 1, 0).reshape(n * h, nq))
    k = tl.make_layout((s, c), (kc, d), kv, op.key.type.element_type)
    v = tl.make_layout((s, c), (kc, d), kv, op.value.type.element_type)
    res_tab = np.ascontiguousarray(cells.transpose(2, 0, 1).reshape(-1, 1))
    res = tl.make_layout((n, t, h * (d + 2)), (1, qb, d + 2), res_tab, op.result.type.element_type)
    return [q, k, v], res


def merge_heads(plan: tl.AttentionPlanAttr) -> int:
    """Heads per result block of a key-split attention's merge: its plan's `kblock` (0: one)."""
    return max(1, plan.get("kblock"))


def attention_merge_layouts(op: nn.AttentionMergeOp, plan: tl.AttentionPlanAttr, num_tiles: int):
    """The merge of a key-split attention (plan: its partial's grid; `merge_heads` hb heads per result block):
    each query block's rows of hb heads split evenly over those heads' chunks' tiles, rb = qblock / (chunks hb)
    rows each: the s-th row block of query block i and head group g merges on cell (i, hb g + s // chunks,
    s % chunks). Its operand blocks are hb blocks [chunks, rb, D + 2] (one per head: every chunk's o, m, l of
    those rows), its result block [rb, hb D] (hb heads side by side: a consumer reading K chunks of hb heads gets
    row-major blocks, not column panels of one head)."""
    nq, h, n = plan.get("grid")
    hb = merge_heads(plan)
    qb = plan.get("qblock")
    _, t, w = op.partials.type.get_shape()
    d = w // h - 2
    if h % hb or qb % (n * hb):
        raise PassFailedException(
            f"tile-plan: {label(op)}: merge blocks of {hb} heads (plan kblock) need a divisor of the {h} heads "
            f"whose row blocks split the {qb}-row query blocks over {n} chunks each"
        )
    rb = qb // (n * hb)
    r = np.arange(-(-t // rb))
    i, s = r // (n * hb), r % (n * hb)
    cells = partial_cells(plan, num_tiles)
    g = np.arange(h // hb)
    # [row blocks, head groups]: the tile of each result block
    res_tab = cells[i[:, None], hb * g[None, :] + (s // n)[:, None], (s % n)[:, None]].astype(np.int32)
    part_tab = np.repeat(res_tab, hb, axis=1)  # [row blocks, heads]: every head of a group on its tile
    parts = tl.make_layout(
        (n, t, w),
        (n, rb, d + 2),
        np.ascontiguousarray(part_tab.reshape(-1, 1)),
        op.partials.type.element_type,
    )
    res = tl.make_layout(
        (t, h * d), (rb, hb * d), np.ascontiguousarray(res_tab.reshape(-1, 1)), op.result.type.element_type
    )
    return [parts], res


def any_attention_layouts(op: Operation, plan: tl.AttentionPlanAttr, num_tiles: int):
    if isinstance(op, nn.AttentionPartialOp):
        return attention_partial_layouts(op, plan, num_tiles)
    if isinstance(op, nn.AttentionMergeOp):
        return attention_merge_layouts(op, plan, num_tiles)
    return attention_layouts(op, plan, num_tiles)


def required_layouts(op: Operation, plan: Attribute, result: tl.LayoutAttr, num_tiles: int):
    """Operand layouts an op's plan needs, given its result layout (None: no requirement)."""
    if isinstance(plan, tl.GemmPlanAttr) and isinstance(op, nn.MatmulPartialsOp):
        return matmul_partials_layouts(op, plan, num_tiles)[0]
    if isinstance(plan, tl.GemmPlanAttr) and isinstance(op, nn.LinearPartialsOp):
        return partials_layouts(op, plan, num_tiles)[0]
    if isinstance(plan, tl.GemmPlanAttr):
        return gemm_layouts(op, plan, num_tiles)[0]
    if isinstance(plan, tl.AttentionPlanAttr):
        return any_attention_layouts(op, plan, num_tiles)[0]
    if isinstance(plan, tl.SinglePlanAttr):
        t = plan.get("tile")
        return [whole_on(v.type.get_shape(), v.type.element_type, t) for v in op.operands]
    if isinstance(plan, tl.MapPlanAttr):
        if plan.get("kind") == "host":
            return [None] * len(op.operands)
        if plan.get("kind") == "view":
            return [view_layout(result, op.operands[0].type.get_shape())]
        if plan.get("kind") == "reduce":
            count = op.operands[0].type.get_shape()[0]
            stacked = with_dtype(reduce_layouts(result, count, partials_store_panel(op)),
                                 op.operands[0].type.element_type)  # fmt: skip
            return [stacked] + [
                broadcast_to(result, v.type.get_shape(), v.type.element_type) for v in op.operands[1:]
            ]
        if plan.get("kind") == "rows":
            x = op.operands[0]
            rest = [
                replicate_rows_param(result, v.type.get_shape()[0], v.type.element_type)
                for v in op.operands[1:]
            ]
            return [with_dtype(result, x.type.element_type), *rest]
        return [broadcast_to(result, v.type.get_shape(), v.type.element_type) for v in op.operands]
    raise PassFailedException(f"tile-plan: {label(op)}: unknown plan {plan}")


def result_layout_of_plan(op: Operation, plan: Attribute, num_tiles: int) -> tl.LayoutAttr | None:
    if isinstance(plan, tl.GemmPlanAttr) and isinstance(op, nn.MatmulPartialsOp):
        return matmul_partials_layouts(op, plan, num_tiles)[1]
    if isinstance(plan, tl.GemmPlanAttr) and isinstance(op, nn.LinearPartialsOp):
        return partials_layouts(op, plan, num_tiles)[1]
    if isinstance(plan, tl.GemmPlanAttr):
        return gemm_layouts(op, plan, num_tiles)[1]
    if isinstance(plan, tl.AttentionPlanAttr):
        return any_attention_layouts(op, plan, num_tiles)[1]
    if isinstance(plan, tl.SinglePlanAttr):
        r = op.results[0].type
        return whole_on(r.get_shape(), r.element_type, plan.get("tile"))
    return None


# --------------------------------------------------------------------------------------------------------------
# Choices (the cost model)


def precision_of(x: TensorType, w: TensorType) -> str:
    fp8 = (Float8E4M3FNUZType, Float8E5M2FNUZType)
    if isinstance(w.element_type, fp8) or isinstance(x.element_type, fp8):
        return "fp8"
    if tl.element_bytes(x.element_type) == 2 or tl.element_bytes(w.element_type) == 2:
        return "f16"
    return "f32"


# Head-aligned panels win unless their AMP + receive estimate (without the device weight preparation, see
# `choose_gemm`) is over ALIGN_SLACK times the best unaligned grid's: unaligned panels make the attention's relayout
# deliver every head row (all 729 key/value rows at So400m size) in several pieces, which the cost does not see
# (with the weight preparation in the comparison, So400m's q/k/v lost their head-aligned panels: ~200 KB of
# exchange tables per tile for one layer, memory-plan failed). At 1.5 the tiny SigLIP on 1472 tiles gets 1-column
# q/k/v panels whose f16 attention operands arrive by single-half copies, and `xch_half` reads its never-written
# destination word (a simulator poison error in tests/unit/test_e2e_tiny.py); at 8 the aligned panels are kept
# there too (but tests/unit/test_memory_plan.py's 256-KiB tiles then run out of region 1 on tile 0).
ALIGN_SLACK = 8.0


# A GEMM with N >= WIDE_N and M >= WIDE_M gets column panels of at least MIN_WIDE_PANEL columns: a consumer that
# needs whole rows (the next GEMM's row panels, a layer norm) receives each row as N / pn pieces, one exchange
# receive row each. For So400m's fc1 parts (N = 2160) 16-column panels gave ~40 KB of exchange tables per tile in
# the fc2 phase alone (and 93 KB in all with every GEMM at 16: the lowering's data no longer fit). At 64 the GEMMs
# kept 9 rows per tile, where the kernel spends ~280 cycles per 16 x 16 weight block for 8 MACs per cycle; at 32
# they get ~19 rows (So400m fc2 part on the simulator: 409k -> 261k cycles, exchange tables 13 -> 31 KB per tile).
# Few rows (the MAP head's one probe row) keep narrow panels: their weights must spread over as many tiles as
# possible, and only the few tiles holding the rows pay the receive rows.
WIDE_N = 1024
WIDE_M = 64
# Any GEMM with N >= 16 * MIN_PANEL_TILES gets panels of >= 16 columns: narrower ones cost the same AMP work (N is
# padded to 16) and their gather to a consumer's whole rows takes one exchange round per panel (the MAP head's
# 1-column panels: 1151 rounds, 23 KB of round tables on every tile).
MIN_PANEL_TILES = 16
# One-replica home blocks of at least this many bytes are spread over all tiles (`home_of`).
SPREAD_BLOCK_BYTES = 16 * 1024
MIN_WIDE_PANEL = 32
# (A next GEMM gathering whole rows of the result, fc1 -> fc2, used to need >= 64: row-major, each of its tiles
# received pm rows x N / pn pieces, one exchange round each, 1305 rounds per fc2 part at 32. It now receives them
# in column panels, `gathered_rows_layout`: 168 rounds at 32, and fc1's own plan is 76k instead of 135k cycles.)


def whole_atom_panel(n: int, pn: int, gn: int) -> int:
    """pn rounded up to whole 4-element atoms when the panel count gn stays: the kernel pads N to 16 either way,
    but a 75-column f16 panel (150-byte rows) puts every other row of the result and of the next op's gather at a
    half word, copied half by half (`xch_half`: a 600-wide fc1 on 8 tiles needed 36 KB of copy table per tile and
    did not fit region 0) or staged (an fc2 x on 12 tiles overflowed its staging area)."""
    if pn % 4 and math.ceil(n / (pn + 4 - pn % 4)) == gn:
        return pn + 4 - pn % 4
    return pn


def choose_gemm(op: nn.LinearOp | nn.MatmulOp, target: Target, budget: int, worder: str) -> tl.GemmPlanAttr:
    """The cheapest gm x gn grid: the busiest tile's work as the lowering does it (device cast + pack of its
    weight block, `cm.weight_prep_cycles`; the F16 GEMM kernel's own estimate per K chunk on the padded block,
    `cm.gemm_kernel_cycles`: M >= 3, K and N padded to 16) + cycles to receive its x and w panels. The per-tile
    operands and result (x and w panels, result, bias; the weight staging is in the lowering's scratch) must fit
    `budget` bytes (`gemm_budget`), and the padded block the lowering's 32-KiB C / A scratch elements. Candidate
    panel widths: the widest and half-widest grids, whole heads when feeding attention, and every multiple of 16
    columns (the kernel pads N to 16, so those waste nothing)."""
    xv, wv, n = gemm_operands(op)
    m, k = xv.type.get_shape()
    if isinstance(op, nn.MatmulOp) and n % 4:
        raise PassFailedException(
            f"tile-plan: {label(op)}: N = {n}: a [K, N] right-hand side is packed in 4-column groups (N % 4 == 0)"
        )
    bx = tl.element_bytes(xv.type.element_type)
    bw = tl.element_bytes(wv.type.element_type)
    by = tl.element_bytes(op.result.type.element_type)
    prec = precision_of(xv.type, wv.type)
    wdt = tl.dtype_name(wv.type.element_type)
    scratch = target.region1_element_bytes
    a_chunks = 2 * k > cm.GEMM_MAX_A_ROW_BYTES  # A repacked into K-block panels per chunk (scratch)
    # A matmul's f32 A is cast into padded f16 rows in the A scratch on every tile (no K-block panels of it).
    a_f32 = isinstance(op, nn.MatmulOp) and tl.element_bytes(xv.type.element_type) == 4
    tiles = target.num_tiles
    # Head alignment pays for many rows; one row (the MAP probe) has one transfer per head either way, and 72-wide
    # blocks of a one-replica weight home would sit whole on 16 tiles.
    align = attention_head_dim(op) if m > 1 and isinstance(op, nn.LinearOp) else 0
    best = best_aligned = None
    over_scratch, over_budget = [], []  # the grids rejected, for the diagnostic
    for gm0 in range(1, min(m, tiles) + 1):
        pm = math.ceil(m / gm0)
        gm = math.ceil(m / pm)
        if gm != gm0:
            continue  # the same panel height as a smaller gm
        gns = {min(n, tiles // gm), min(n, max(1, tiles // gm // 2))}
        gns |= {
            g for g in (math.ceil(n / (16 * j)) for j in range(1, math.ceil(n / 16) + 1)) if g * gm <= tiles
        }
        if align:
            # Feeding attention: also try column panels of whole heads, so that each row of a panel is one
            # contiguous head row at the attention's tiles (one long transfer per panel, not one per row piece),
            # and panels dividing the head (24 of 72): the attention gathers them in column panels
            # (`gathered_head_layout`), one transfer per producer block.
            gns |= {
                g for g in (math.ceil(n / (align * h)) for h in range(1, n // align + 1)) if g * gm <= tiles
            }
            gns |= {math.ceil(n / p) for p in head_divisors(align) if math.ceil(n / p) * gm <= tiles}
        for gn0 in gns:
            pn = math.ceil(n / gn0)
            gn = math.ceil(n / pn)
            pn = whole_atom_panel(n, pn, gn)
            divides_head = align and pn in head_divisors(align) and n % pn == 0
            if n >= WIDE_N and m >= WIDE_M and pn < MIN_WIDE_PANEL and not divides_head:
                continue  # narrow panels: consumers needing whole rows get one receive row per panel per row
            if n >= 16 * MIN_PANEL_TILES and pn < 16:
                continue  # the kernel pads N to 16 anyway; 1-column panels make a 1152-message gather
            if isinstance(op, nn.MatmulOp) and pn % 4:
                continue  # a [K, N] B is packed in 4-column groups (`WeightsF16`)
            mk, kpad, npad = cm.gemm_kernel_shape(pm, k, pn)
            kc = max(kw for _, kw in cm.gemm_k_chunks(k, pn, bw)) if a_chunks else 0
            if (
                mk * npad * 6 > scratch
                or ((a_padded(pm, k) or a_f32) and mk * kpad * 2 > scratch)
                or (a_f32 and a_chunks)
                or mk * kc * 2 > scratch
            ):
                over_scratch.append((pm, pn))
                continue  # the lowering's C (f16 + f32 staging) / padded A / A chunk panels scratch
            # Operands and result; the weight staging is in the lowering's scratch (`gemm_k_chunks` bounds it).
            mem = pm * k * bx + pn * k * bw + pm * pn * by + pn * 4
            if mem > budget:
                over_budget.append((mem, pm, pn))
                continue
            cycles = (
                cm.gemm_kernel_cycles(pm, k, pn, bw)
                + cm.weight_prep_cycles(pn, k, wdt, target)
                + cm.a_repack_cycles(mk, k, pn, bw)
            )
            recv = cm.exchange_cycles(pm * k * bx + pn * k * bw, target)
            key = (cycles + recv, -gm * gn)
            amp = cm.gemm_cycles(pm, k, pn, prec, target) + recv  # for the alignment decision
            if best is None or key < best[0]:
                best = (key, gm, gn, pm, pn, cycles, amp)
            aligned = align and (pn % align == 0 or divides_head)
            if aligned and (best_aligned is None or key < best_aligned[0]):
                best_aligned = (key, gm, gn, pm, pn, cycles, amp)
    if best is None:
        why = []
        if over_budget:
            mem, pm, pn = min(over_budget)
            why.append(
                f"{len(over_budget)} over the GEMM budget of {budget} B per tile ({GEMM_BUDGET_ATTR} on the "
                f"function; the least: {mem} B for [{pm}, {k}] x [{k}, {pn}] blocks)"
            )
        if over_scratch:
            pm, pn = min(over_scratch, key=lambda b: b[0] * b[1])
            why.append(
                f"{len(over_scratch)} over the lowering's {scratch}-byte C / A scratch elements (the least: a "
                f"[{pm}, {pn}] block, whose C takes 6 B per padded element)"
            )
        raise PassFailedException(
            f"tile-plan: {label(op)}: no GEMM grid for [{m}, {k}] x [{k}, {n}] fits on {tiles} tiles: "
            + ("; ".join(why) or "no candidate panel width")
        )
    # Head-aligned panels win unless they cost over ALIGN_SLACK more (the unaligned transfers' fragmentation
    # is not in this cost, so alignment gets that much credit: see ALIGN_SLACK).
    if best_aligned is not None and best_aligned[6] <= ALIGN_SLACK * best[6]:
        best = best_aligned
    _, gm, gn, pm, pn, cycles, _ = best
    cast = "early" if isinstance(xv.owner, nn.CastOp) else "late"
    return gemm_plan(gm, gn, pm, k, pn, 0, prec, cast, worder, cycles)


# Storage orders of GEMM weight panels (option `weights_order`): "auto" = `ampw` where `ampw_fits`, else row-major.
WEIGHTS_ORDERS = ("auto", "row_major", "amp16", "ampw")
FP8_TYPES = (Float8E4M3FNUZType, Float8E5M2FNUZType)


def ampw_fits(op: nn.LinearPartialsOp, pn: int, kc: int) -> bool:
    """Whether a K split's [pn, kc] weight blocks are stored as the AMP weight panels its GEMM reads in place
    (`ampw`, prepared by the host at upload) rather than row-major (rearranged into panels on the device at
    every inference): FP8 x and FP8 weights (the FP8 AMP, 32-deep K blocks), or, for a few-row split (the MAP
    head's), f16 x and an f16 parameter weight (the F16 AMP, 16-deep blocks; FP8 weights with f16 x are converted
    to F16 panels on the device either way); column panels of whole 16-row AMP panels (the last, narrower column
    panel too) and K chunks of whole K blocks (a ragged last chunk of a many-row split keeps its K tail row-major,
    `tl.ampw_positions`' region C, padded on the device). Home pieces are whole AMP panels (`home_of`)."""
    x, w = op.input.type.element_type, op.weight.type.element_type
    n = op.weight.type.get_shape()[0]
    f16_few = (
        tl.element_bytes(x) == tl.element_bytes(w) == 2
        and op.input.type.get_shape()[0] <= FEW_ROWS
        and not op.groups
        and not device_weight_partials(op)
    )
    # Many rows, f16 x and an f16 weight (So400m's q / k in 48-wide panels): the F16 AMP's panels read in place
    # when every chunk is whole 16-deep blocks and x arrives row-major (`nnops.linear_partials_rows`; the plan
    # checks x's storage, `TilePlanPass.choose`).
    f16_rows = (
        tl.element_bytes(x) == tl.element_bytes(w) == 2
        and op.input.type.get_shape()[0] > FEW_ROWS
        and not op.groups
        and op.input.type.get_shape()[1] % 16 == 0
    )
    if not (isinstance(x, FP8_TYPES) and isinstance(w, FP8_TYPES)) and not f16_few and not f16_rows:
        return False
    last = n - (-(-n // pn) - 1) * pn
    kb = tl.ampw_kblock(w)
    # A last chunk narrower than one K block is all K tail: its tiles prepare their panels as before, and the
    # other tiles' GEMMs load in-place weights with ld64 (32 cycles a block more than ld128 from the staging).
    tail_only = 0 < op.input.type.get_shape()[1] % kc < kb
    return pn % tl.AMP_PANEL_ROWS == 0 and last % tl.AMP_PANEL_ROWS == 0 and kc % kb == 0 and not tail_only


def ampw_fits_gemm(op: nn.LinearOp, plan: tl.GemmPlanAttr) -> bool:
    """Whether an unsplit linear's [pn, K] weight blocks are stored as the F16 AMP panels its GEMM reads in place
    (`ampw`): f16 x and an f16 weight (FP8 weights are converted to F16 panels on the device either way), column
    panels of whole 16-row panels, K of whole 16-blocks in one K chunk (A rows within the kernel's row stride:
    kernel-select then takes one chunk, there being no staging to bound)."""
    x, w = op.input.type.element_type, op.weight.type.element_type
    if not tl.element_bytes(x) == tl.element_bytes(w) == 2:
        return False
    n, k = op.weight.type.get_shape()
    pn = plan.get("panel")[2]
    last = n - (-(-n // pn) - 1) * pn
    return pn % 16 == 0 and last % 16 == 0 and k % 16 == 0 and 2 * k <= cm.GEMM_MAX_A_ROW_BYTES


def ampw_x_fits(k: int, kc: int, a_cols: int | None, kb: int) -> bool:
    """Whether every chunk's GEMM parts (`nnops._ampw_parts`) read `ampw` weights as whole panels: x in column
    panels of a_cols (a multiple of kb, read in place) whose narrower last panel at K's end is narrower than one
    K block, so that the in-place part covers all of the chunk's whole K blocks (its weights one contiguous
    range); other x layouts give one part, or a part split at the whole blocks' end."""
    if a_cols is None or a_cols % kb:
        return True
    for k0 in range(0, k, kc):
        kw = min(kc, k - k0)
        whole_panels = k0 % a_cols == 0 and (kw % a_cols == 0 or k0 + kw == k)
        if whole_panels and kw // a_cols * a_cols < kw // kb * kb:
            return False
    return True


def few_rows_panel(n: int, groups: int, chunks: int, tiles: int) -> int:
    """Column panel width of a few-row K split of n output columns in `chunks` K chunks: 16 (a grouped linear's:
    `group_panel` of its groups), widened when its chunks x panels cells would not fit the tiles (a small target):
    to the narrowest width that fits, a divisor of the group in whole 4-column groups (a panel stays in one group:
    its x row) or a multiple of 16. The narrowest otherwise (the caller reports the cells it needs)."""
    base = group_panel(n // groups) if groups else 16
    if chunks * -(-n // base) <= tiles:
        return base
    size = n // groups if groups else n
    wider = (
        [p for p in range(base + 4, size + 1, 4) if size % p == 0]
        if groups
        else list(range(32, -(-n // 16) * 16 + 1, 16))
    )
    return next((p for p in wider if chunks * -(-n // p) <= tiles), base)


def head_divisors(d: int) -> list[int]:
    """Column panel widths that divide a head of d columns and that the attention gathers in column panels:
    proper divisors that are multiples of 4 (its row kernels read 4-element atoms) and at least 16 (the GEMM pads
    N to 16)."""
    return [p for p in range(16, d // 2 + 1) if d % p == 0 and p % 4 == 0]


def a_padded(m: int, k: int) -> bool:
    """The lowering copies a tile's A block into scratch with zero K padding / rows up to the kernel's minimum."""
    return m < cm.GEMM_MIN_ROWS or k % 16 != 0


def attention_head_dim(op: nn.LinearOp | nn.LinearPartialsOp) -> int:
    """The head dimension if the linear's result (possibly through casts, relayouts and the sum of K-split
    partials) is an attention operand, else 0."""
    frontier = [op.result]
    while frontier:
        v = frontier.pop()
        for use in v.uses:
            user = use.operation
            if isinstance(user, nn.AttentionOp | nn.AttentionPartialOp):
                return user.query.type.get_shape()[1] // user.num_heads
            if isinstance(user, nn.CastOp | tl.RelayoutOp | nn.ReduceSumOp):
                frontier.append(user.results[0])
    return 0


def gemm_plan(gm, gn, pm, k, pn, base, prec, cast, worder, cycles) -> tl.GemmPlanAttr:
    return tl.GemmPlanAttr(
        tl._int_array((gm, gn)),
        tl._int_array((pm, k, pn)),
        tl.IntAttr(base),
        tl.StringAttr(prec),
        tl.StringAttr(cast),
        tl.StringAttr(worder),
        tl.IntAttr(cycles),
    )


# Value-column slices per head of an attention with few query rows (see `choose_attention`): 3 gives So400m's
# 72-wide heads 24-column slices (the V producer's panels).
VALUE_SPLIT = 3


def choose_attention(op: nn.AttentionOp, target: Target, kind: str) -> tl.AttentionPlanAttr:
    h = op.num_heads
    t, c = op.query.type.get_shape()
    s = op.key.type.get_shape()[0]
    d = c // h
    nq0 = max(1, min(t, target.num_tiles // h))
    qb = math.ceil(t / nq0)
    nq = math.ceil(t / qb)
    prec = precision_of(op.query.type, op.key.type)
    cycles = cm.attention_cycles(qb, s, d, prec, target) * max(1, math.ceil(h / target.num_tiles))
    # Few query rows (the MAP head's one probe row: 16 tiles busy of 1472): each head's value columns split over
    # VALUE_SPLIT tiles, so that each receives and transposes a third of V (Q and K stay whole on each).
    vs = (
        VALUE_SPLIT
        if qb <= 16 and nq * h * VALUE_SPLIT <= target.num_tiles and d % (8 * VALUE_SPLIT) == 0
        else 1
    )
    return tl.AttentionPlanAttr(
        tl.StringAttr(kind),
        tl._int_array((nq, h, vs) if vs > 1 else (nq, h)),
        tl.IntAttr(qb),
        tl.IntAttr(64 if kind == "flash" else 0),
        tl.IntAttr(0),
        tl.StringAttr(prec),
        tl.IntAttr(cycles),
    )


def choose_attention_partial(op: nn.AttentionPartialOp, target: Target) -> tl.AttentionPlanAttr:
    """A key-split attention's grid [query blocks, heads, chunks] (`nn_split_attention_keys.partial_grid`)."""
    h, n = op.num_heads, op.num_chunks
    t, c = op.query.type.get_shape()
    nq, qb = partial_grid(t, h, n, target.num_tiles)
    prec = precision_of(op.query.type, op.key.type)
    rounds = max(1, math.ceil(nq * h * n / target.num_tiles))
    cycles = cm.attention_cycles(qb, op.key_chunk(), c // h, prec, target) * rounds
    return tl.AttentionPlanAttr(
        tl.StringAttr("materialized"), tl._int_array((nq, h, n)), tl.IntAttr(qb), tl.IntAttr(0), tl.IntAttr(0),
        tl.StringAttr(prec), tl.IntAttr(cycles),
    )  # fmt: skip


def choose_attention_merge(op: nn.AttentionMergeOp, target: Target) -> tl.AttentionPlanAttr:
    """The merge runs where its partial's grid put the chunks (the same plan, kind "merge")."""
    part = op.partials.owner
    plan = part.attributes.get(tl.PLAN_ATTR) if isinstance(part, nn.AttentionPartialOp) else None
    if not isinstance(plan, tl.AttentionPlanAttr):
        raise PassFailedException(
            f"tile-plan: {label(op)}: its operand is not a planned nn.attention_partial"
        )
    nq, h, n = plan.get("grid")
    d = op.partials.type.get_shape()[2] // h - 2
    hb = merge_block_heads(op, h, d, plan.get("qblock"), n)
    cycles = cm.elementwise_cycles(plan.get("qblock") // n * d * n * 2, "mul", "f32", target)
    return tl.AttentionPlanAttr(
        tl.StringAttr("merge"), plan.grid, plan.qblock, tl.IntAttr(hb if hb > 1 else 0), plan.base,
        tl.StringAttr("f32"), tl.IntAttr(cycles),
    )  # fmt: skip


def merge_block_heads(op: nn.AttentionMergeOp, h: int, d: int, qblock: int, chunks: int) -> int:
    """Heads per merge result block (`merge_heads`): the fewest hb whose blocks [rows, hb d] are whole K blocks
    of the AMP (16 f16 / 32 FP8 columns) tiling the K chunks of every `nn.linear_partials` reading the merge as
    x (through casts), so that its GEMMs read x's blocks in place instead of gathering rows from column panels of
    one head (So400m: d = 72, out_proj's chunks of 144: hb = 2). One head when d is already whole blocks, when a
    consumer is anything else, or when no hb divides the heads and the query blocks' rows (qblock / (chunks hb)
    rows per cell). Each merge tile then receives chunks x hb operand pieces instead of chunks."""
    readers, todo = [], [op.result]
    while todo:
        v = todo.pop()
        for use in v.uses:
            user = use.operation
            if isinstance(user, nn.CastOp):
                todo.append(user.results[0])
            elif isinstance(user, nn.LinearPartialsOp) and use.index == 0:
                readers.append(user)
            else:
                return 1
    if not readers:
        return 1
    for hb in range(1, h + 1):
        if h % hb or qblock % (chunks * hb):
            continue
        width = hb * d
        if all(
            lp.chunk % width == 0
            and width % tl.ampw_kblock(lp.input.type.element_type) == 0  # whole AMP K blocks
            for lp in readers
        ):
            return hb
    return 1


def map_plan(kind: str, cycles: int) -> tl.MapPlanAttr:
    return tl.MapPlanAttr(tl.StringAttr(kind), tl.IntAttr(cycles))


def single_plan(tile: int, cycles: int) -> tl.SinglePlanAttr:
    return tl.SinglePlanAttr(tl.IntAttr(tile), tl.IntAttr(cycles))


def busiest_elems(layout: tl.LayoutAttr) -> int:
    return int(layout.geometry().shard_elems.max())


def estimate_cycles(op: Operation, plan: Attribute, result: tl.LayoutAttr, target: Target) -> int:
    """The busiest tile's compute estimate for plans whose cost depends on the result layout."""
    n = busiest_elems(result)
    dt = tl.dtype_name(result.dtype)
    if isinstance(op, nn.LayerNormOp | nn.SoftmaxOp):
        rows = math.ceil(n / result.shape_[-1])
        kind = "layer_norm" if isinstance(op, nn.LayerNormOp) else "softmax"
        return cm.row_reduce_cycles(rows, result.shape_[-1], kind, dt, target)
    kind = {nn.AddOp: "add", nn.MulOp: "mul", nn.ScaleOp: "scale", nn.GeluOp: "gelu", nn.CastOp: "cast"}.get(
        type(op), "copy"
    )
    return cm.elementwise_cycles(n, kind, dt, target)


# --------------------------------------------------------------------------------------------------------------
# The pass


@dataclass
class _Planner:
    target: Target
    gemm_budget: int  # bytes per tile for one GEMM's operands and result (`gemm_budget`)
    attention: str
    weights_order: str
    relayouts: dict = field(default_factory=dict)
    single_count: int = 0
    gemm_base: int = 0
    home_count: int = 0  # homes given so far: rotates each new home's pieces over the replicas (`home_of`)
    gathers: int = 0  # two-stage gathers planned so far: rotates their intermediate blocks (`gather_mid`)
    last_gemm: tuple = (None, None, None, 0)  # (input, grid, panel, base) of the last GEMM planned
    # FP8 scale of the stacked operand behind a repeat body's placeholder source (a host-folded FP8 cast)
    source_scale: dict = field(default_factory=dict)

    def plan_block(self, block: Block) -> None:
        for op in list(block.ops):
            self.plan_op(op)

    def fixed_order(self) -> str:
        """The weight order of GEMMs `ampw_fits` does not cover: the option's, row-major for "auto"."""
        return "row_major" if self.weights_order == "auto" else self.weights_order

    def home(self, want: tl.LayoutAttr) -> tl.LayoutAttr:
        self.home_count += 1
        return home_of(want, self.home_count - 1, self.target.num_tiles)

    def set_layout(self, op: Operation, layout: tl.LayoutAttr) -> None:
        op.attributes[tl.LAYOUT_ATTR] = layout

    def require(self, op: Operation, index: int, want: tl.LayoutAttr) -> None:
        """Makes operand `index` of `op` arrive in layout `want`, inserting a relayout if needed."""
        v = op.operands[index]
        have = tl.layout_of(v)
        if have is not None and have.scale.data != want.scale.data:
            want = with_dtype(want, want.dtype, have.scale.data)  # FP8 bits keep their producer's scale
        if have is None:
            owner = v.owner
            if isinstance(owner, HOST_OPS) and is_host_value(v):
                # Folded by the host and uploaded straight into the consumer's (home) layout.
                scale = owner.fp8_scale if isinstance(owner, nn.CastOp) else 0
                have = with_dtype(self.home(want), want.dtype, scale)
                want = with_dtype(want, want.dtype, scale)
                owner.attributes[tl.PLAN_ATTR] = map_plan("host", 0)
                self.set_layout(owner, have)
            elif isinstance(owner, SOURCE_OPS):
                scale = self.source_scale.get(owner, 0)
                have = with_dtype(self.home(want), want.dtype, scale) if scale else self.home(want)
                want = with_dtype(want, want.dtype, scale) if scale else want
                self.set_layout(owner, have)
            else:
                raise PassFailedException(f"tile-plan: {label(op)}: operand #{index} has no layout")
        if have == want:
            return
        key = (v, want, id(op.parent_block()))
        r = self.relayouts.get(key)
        if r is None:
            src = v
            mid = gather_mid(have, want, self.target.num_tiles, self.gathers) if have is not None else None
            if mid is not None:  # a two-stage gather (see GATHER_MIN_PIECES)
                self.gathers += 1
                mkey = (v, mid, id(op.parent_block()))
                src = self.relayouts.get(mkey)
                if src is None:
                    rel = tl.RelayoutOp(v, mid)
                    Rewriter.insert_op(rel, InsertPoint.before(op))
                    src = self.relayouts[mkey] = rel.result
            rel = tl.RelayoutOp(src, want)
            Rewriter.insert_op(rel, InsertPoint.before(op))
            r = self.relayouts[key] = rel.result
        op.operands[index] = r

    def plan_op(self, op: Operation) -> None:
        if isinstance(op, (*SOURCE_OPS, nn.OutputOp, func.ReturnOp, tl.RelayoutOp)):
            return
        if isinstance(op, nn.RepeatOp):
            self.plan_repeat(op)
            return
        if isinstance(op, nn.YieldOp):
            return
        if (
            isinstance(op, HOST_OPS)
            and tl.PLAN_ATTR not in op.attributes
            and all(map(is_host_value, op.operands))
        ):
            op.attributes[tl.PLAN_ATTR] = map_plan("host", 0)
            return  # its layout is chosen when a device consumer asks for it (see `require`)
        if op.dialect_name() != "nn":
            raise PassFailedException(
                f"tile-plan: {label(op)}: cannot plan an op of dialect '{op.dialect_name()}'"
            )
        n_tiles = self.target.num_tiles
        plan = op.attributes.get(tl.PLAN_ATTR)
        result = op.attributes.get(tl.LAYOUT_ATTR)
        if plan is None:
            plan, result = self.choose(op)
        elif result is None:
            result = result_layout_of_plan(op, plan, n_tiles)
            if result is None:  # a map plan: the first operand's layout decides
                result = self.map_result_layout(op)
        merge = isinstance(op, nn.AttentionMergeOp)
        if isinstance(plan, tl.AttentionPlanAttr) and plan.get("kind") != (
            "merge" if merge else "materialized"
        ):
            raise PassFailedException(
                f"tile-plan: {label(op)}: attention kind '{plan.get('kind')}' is not implemented (materialized only)"
            )
        if isinstance(op, nn.CastOp) and op.fp8_scale:
            result = with_dtype(result, result.dtype, op.fp8_scale)
        tl.check_layout_matches(op, op.results[0], result)
        for i, want in enumerate(required_layouts(op, plan, result, n_tiles)):
            if isinstance(op, nn.LinearOp | nn.MatmulOp) and i == 0 and want is not None:
                want = gathered_rows_layout(tl.layout_of(op.operands[0]), want)
            if isinstance(op, nn.LinearPartialsOp) and i == 0 and len(plan.get("grid")) == 3:
                want = gathered_chunk_layout(tl.layout_of(op.operands[0]), want)
            if isinstance(op, nn.AttentionOp | nn.AttentionPartialOp) and want is not None:
                want = gathered_head_layout(tl.layout_of(op.operands[i]), want)
            if want is not None:
                self.require(op, i, want)
        if isinstance(plan, tl.MapPlanAttr) and plan.get("cycles") == 0:
            plan = map_plan(plan.get("kind"), estimate_cycles(op, plan, result, self.target))
        op.attributes[tl.PLAN_ATTR] = plan
        self.set_layout(op, result)

    def map_result_layout(self, op: Operation) -> tl.LayoutAttr:
        x = op.operands[0]
        shape, dtype = op.results[0].type.get_shape(), op.results[0].type.element_type
        have = tl.layout_of(x)
        rows = isinstance(op, nn.LayerNormOp | nn.SoftmaxOp)
        if isinstance(op, ELEMENTWISE_OPS) and (into := carried_into(op.results[0])) is not None:
            # made in the layout its loop carries it in: no relayout between it and the loop
            return with_dtype(into, dtype)
        if (
            isinstance(op, nn.AddOp)
            and len(shape) == 2
            and shape[0] > FEW_ROWS
            and feeds_layer_norm(op.results[0])
        ):
            # The residual stream: whole rows, as its layer norms read them (the sums of K-split linears arrive
            # in column blocks; gathered here once instead of once into the add's and again into the norm's).
            return spread_rows(shape, dtype, self.target.num_tiles)
        if have is not None and have.stack.data == 0:
            have = one_replica(have)
            if not rows or have.block_[-1] == shape[-1]:
                return with_dtype(have, dtype)
        return spread_rows(shape, dtype, self.target.num_tiles)

    def choose(self, op: Operation) -> tuple[Attribute, tl.LayoutAttr]:
        t = self.target
        if isinstance(op, nn.LinearOp) and op.groups:
            raise PassFailedException(
                f"tile-plan: {label(op)}: a grouped linear (row_groups = {op.groups}) is planned as its K-split "
                "partials: run nn-split-k first"
            )
        if (isinstance(op, nn.LinearOp) and len(op.input.type.get_shape()) == 2) or is_gemm_matmul(op):
            # A matmul's B blocks are [K, pn] row-major (no amp16 micro-panels).
            worder = "row_major" if isinstance(op, nn.MatmulOp) else self.fixed_order()
            plan = choose_gemm(op, t, self.gemm_budget, worder)
            if self.weights_order == "auto" and isinstance(op, nn.LinearOp) and ampw_fits_gemm(op, plan):
                plan = gemm_plan(*plan.get("grid"), *plan.get("panel"), plan.get("base"), plan.get("precision"),
                                 plan.get("cast"), "ampw", plan.get("cycles"))  # fmt: skip
            (gm, gn), used = plan.get("grid"), plan.get("grid")[0] * plan.get("grid")[1]
            a_operand = gemm_operands(op)[0]
            same_a = (a_operand, plan.get("grid"), plan.get("panel")) == self.last_gemm[:3]
            if used < t.num_tiles:
                # GEMMs on part of the machine (the MAP head's, M = 1) start where the previous one ended, so
                # that their weight blocks (homes with one replica) do not all begin on tile 0; but GEMMs of one
                # input on one grid (q, k and v) keep one base: their A operand is then one layout, gathered once.
                base = self.last_gemm[3] if same_a else self.gemm_base % (t.num_tiles - used + 1)
                self.gemm_base += used
                pm, k, pn = plan.get("panel")
                plan = gemm_plan(
                    gm,
                    gn,
                    pm,
                    k,
                    pn,
                    base,
                    plan.get("precision"),
                    plan.get("cast"),
                    plan.get("worder"),
                    plan.get("cycles"),
                )
            self.last_gemm = (a_operand, plan.get("grid"), plan.get("panel"), plan.get("base"))
            return plan, gemm_layouts(op, plan, t.num_tiles)[1]
        if isinstance(op, nn.LinearPartialsOp) and device_weight_partials(op):
            plan = choose_device_weight_partials(op, t, self.gemm_base)
            self.gemm_base += math.prod(plan.get("grid"))
            return plan, partials_layouts(op, plan, t.num_tiles)[1]
        if isinstance(op, nn.LinearPartialsOp) and op.input.type.get_shape()[0] > FEW_ROWS and not op.groups:
            n = op.weight.type.get_shape()[0]
            g, kc = op.result.type.get_shape()[0], op.chunk
            best = rows_plan_grid(op, t.num_tiles)
            if best is None:
                raise PassFailedException(
                    f"tile-plan: {label(op)}: no [K chunks, row panels, column panels] grid of {g} chunks fits "
                    f"{t.num_tiles} tiles"
                )
            cycles, gm, pm, pn = best
            prec = precision_of(op.input.type, op.weight.type)
            worder = self.weights_order
            if worder == "auto":
                worder = "ampw" if ampw_fits(op, pn, kc) else "row_major"

            def rows_plan(worder):
                return tl.GemmPlanAttr(
                    tl._int_array((g, gm, -(-n // pn))), tl._int_array((pm, kc, pn)), tl.IntAttr(0),
                    tl.StringAttr(prec), tl.StringAttr("early"), tl.StringAttr(worder), tl.IntAttr(cycles),
                )  # fmt: skip

            plan = rows_plan(worder)
            if worder == "ampw" and self.weights_order == "auto":
                # x's storage as plan_op will ask for it: column panels it reads in place must leave the weight
                # parts whole (`ampw_x_fits`)
                xw = partials_layouts(op, plan, t.num_tiles)[0][0]
                a_cols = tl.col_panel_width(gathered_chunk_layout(tl.layout_of(op.input), xw))
                kb = tl.ampw_kblock(op.weight.type.element_type)
                f16_x = tl.element_bytes(op.input.type.element_type) == 2
                if (f16_x and a_cols is not None) or not ampw_x_fits(
                    op.input.type.get_shape()[1], kc, a_cols, kb
                ):
                    plan = rows_plan("row_major")
            return plan, partials_layouts(op, plan, t.num_tiles)[1]
        if isinstance(op, nn.LinearPartialsOp):
            (m, k), n = op.input.type.get_shape(), op.weight.type.get_shape()[0]
            g, kc = op.result.type.get_shape()[0], op.chunk
            pn = few_rows_panel(n, op.groups, g, t.num_tiles)
            m = 1 if op.groups else m
            gn = -(-n // pn)
            used = g * gn
            if used > t.num_tiles:
                least = g * (op.groups or 1)  # the widest panels: one per group (a panel reads one x row)
                raise PassFailedException(
                    f"tile-plan: {label(op)}: {g} K chunks x {gn} column panels need {used} tiles, the target has "
                    f"{t.num_tiles} (with the widest panels still {least}: one per K chunk"
                    + (f" and head of its {op.groups} heads" if op.groups else "")
                    + "; fewer K chunks (nn-split-k) or a target with more tiles would help)"
                )
            # Like the few-row GEMMs: start where the previous one ended, so the weight slices spread.
            base = self.gemm_base % (t.num_tiles - used + 1)
            self.gemm_base += used
            wdt = tl.dtype_name(op.weight.type.element_type)
            wbytes = tl.element_bytes(op.weight.type.element_type)
            cycles = cm.gemm_kernel_cycles(m, kc, pn, wbytes) + cm.weight_prep_cycles(pn, kc, wdt, t)
            prec = precision_of(op.input.type, op.weight.type)
            worder = self.fixed_order()
            if self.weights_order == "auto" and ampw_fits(op, pn, kc) and kc % 16 == 0 and k % 16 == 0:
                worder = "ampw"
            plan = gemm_plan(g, gn, m, kc, pn, base, prec, "early", worder, cycles)
            return plan, partials_layouts(op, plan, t.num_tiles)[1]
        if isinstance(op, nn.MatmulPartialsOp):
            plan = choose_matmul_partials(op, t)
            return plan, matmul_partials_layouts(op, plan, t.num_tiles)[1]
        if isinstance(op, nn.ReduceSumOp):
            have = tl.layout_of(op.input)
            if have is None or have.stack.data:
                raise PassFailedException(f"tile-plan: {label(op)}: its operand has no (unstacked) layout")
            pn = partials_store_panel(op)
            width = panel_store_width(partials_of(op), pn) if pn else 0
            res = reduce_result_layout(have, op.result.type.element_type, width, t.num_tiles)
            if isinstance(op.input.owner, nn.MatmulPartialsOp):
                res = matmul_partials_sum_layout(op.input.owner, op.result.type.element_type, t.num_tiles)
            elif isinstance(op.input.owner, nn.LinearPartialsOp) and device_weight_partials(op.input.owner):
                res = device_weight_sum_layout(op.input.owner, op.result.type.element_type, t.num_tiles)
            count = op.input.type.get_shape()[0]
            n = busiest_elems(res) * max(count - 1, 1)
            cycles = cm.elementwise_cycles(n, "add", tl.dtype_name(res.dtype), t)
            if op.gelu is not None:  # the fused GELU (`nn-fuse-sum-activation`): its element-wise cost
                cycles += cm.elementwise_cycles(busiest_elems(res), "gelu", tl.dtype_name(res.dtype), t)
            for _ in op.addends:  # `nn-fuse-sum-add`: an f32 add per addend
                cycles += cm.elementwise_cycles(busiest_elems(res), "add", "f32", t)
            return map_plan("reduce", cycles), res
        if isinstance(op, nn.AttentionPartialOp):
            plan = choose_attention_partial(op, t)
            return plan, attention_partial_layouts(op, plan, t.num_tiles)[1]
        if isinstance(op, nn.AttentionMergeOp):
            plan = choose_attention_merge(op, t)
            return plan, attention_merge_layouts(op, plan, t.num_tiles)[1]
        if isinstance(op, nn.AttentionOp):
            plan = choose_attention(op, t, self.attention)
            if plan.get("kind") != "materialized":
                return plan, None  # rejected by the caller with a message
            return plan, attention_layouts(op, plan, t.num_tiles)[1]
        if isinstance(op, nn.ReshapeOp) and (have := tl.layout_of(op.input)) is not None:
            res = view_layout(have, op.result.type.get_shape()) if have.stack.data == 0 else None
            if res is not None:
                return map_plan("view", 0), res
        if isinstance(op, ELEMENTWISE_OPS):
            res = self.map_result_layout(op)
            return map_plan("elementwise", estimate_cycles(op, None, res, t)), res
        if isinstance(op, nn.LayerNormOp) or (
            isinstance(op, nn.SoftmaxOp) and op.axis.value.data in (-1, len(op.input.type.get_shape()) - 1)
        ):
            res = self.map_result_layout(op)
            return map_plan("rows", estimate_cycles(op, None, res, t)), res
        r = op.results[0].type
        n = math.prod(r.get_shape())
        # Whole operators go round-robin over the tiles, so that they do not all pile up on tile 0.
        tile = self.single_count % t.num_tiles
        self.single_count += 1
        plan = single_plan(tile, cm.elementwise_cycles(n, "copy", tl.dtype_name(r.element_type), t))
        return plan, whole_on(r.get_shape(), r.element_type, tile)

    def plan_repeat(self, op: nn.RepeatOp) -> None:
        """nn.repeat -> tile.repeat. Carried values keep their incoming layout, or `tile.carried_layouts`' (the
        entry values relayouted to it once, before the loop); the yield is relayouted back to it. Stacked
        parameters: the body is planned first, so each stacked slice gets the home its first consumer asks for;
        the stacked operand outside gets that layout with `stack = count`."""
        block = op.body.block
        nc = len(op.carried)
        chosen = carried_choice(op)
        carried_layouts = []
        for i, v in enumerate(op.carried):
            lay = tl.layout_of(v)
            if lay is None:
                t = v.type
                lay = spread_rows(t.get_shape(), t.element_type, self.target.num_tiles)
                self.set_layout(v.owner, lay)
            if chosen is not None and chosen[i] != lay:
                self.require(op, i, chosen[i])  # once, before the loop
                lay = chosen[i]
            carried_layouts.append(lay)
        # Plan the body with block arguments as layout-less sources: give them temporary `_ArgSource`s.
        new_block = Block(arg_types=[a.type for a in block.args])
        for a, na in zip(block.args, new_block.args):
            na.name_hint = a.name_hint
        arg_layouts: list[tl.LayoutAttr | None] = [*carried_layouts, *([None] * len(op.stacked))]
        # Placeholder sources so `require` can assign homes to stacked slices.
        placeholders = []
        for i, a in enumerate(block.args):
            ph = nn.ParamOp(f"__tile_plan_arg{i}", a.type)
            if i < nc:
                ph.attributes[tl.LAYOUT_ATTR] = carried_layouts[i]
            elif isinstance(op.stacked[i - nc].owner, nn.CastOp):  # FP8 bits keep the host cast's scale
                self.source_scale[ph] = op.stacked[i - nc].owner.fp8_scale
            placeholders.append(ph)
            new_block.add_op(ph)
            a.replace_all_uses_with(ph.result)
        for body_op in list(block.ops):
            body_op.detach()
            new_block.add_op(body_op)
        self.plan_block(new_block)
        term = new_block.last_op
        assert isinstance(term, nn.YieldOp)
        for i in range(nc):
            self.require(term, i, carried_layouts[i])
        for i, ph in enumerate(placeholders):
            lay = ph.attributes.get(tl.LAYOUT_ATTR)
            if lay is None:  # unused stacked slice
                lay = spread_rows(
                    ph.result.type.get_shape(), ph.result.type.element_type, self.target.num_tiles
                )
            arg_layouts[i] = lay
            ph.result.replace_all_uses_with(new_block.args[i])
            ph.detach()
            ph.erase()
        yield_op = tl.YieldOp(list(term.values))
        Rewriter.replace_op(term, yield_op)
        for i, v in enumerate(op.stacked):
            stacked_lay = arg_layouts[nc + i].stacked(op.iterations)
            have = tl.layout_of(v)
            if have is None and isinstance(v.owner, SOURCE_OPS):
                self.set_layout(v.owner, stacked_lay)
            elif have is None and isinstance(v.owner, HOST_OPS) and is_host_value(v):
                # Per-layer weights prepared by the host (`nn-hoist-stacked`): uploaded as one Repeat sequence.
                v.owner.attributes[tl.PLAN_ATTR] = map_plan("host", 0)
                self.set_layout(v.owner, stacked_lay)
            elif have != stacked_lay:
                raise PassFailedException(
                    f"tile-plan: {label(op)}: stacked operand #{i} has layout {have}, the body needs {stacked_lay}"
                )
        new = tl.RepeatOp(op.iterations, list(op.carried), list(op.stacked), arg_layouts, Region(new_block))
        Rewriter.replace_op(op, new)


def carried_choice(op: nn.RepeatOp) -> list[tl.LayoutAttr] | None:
    """The carried layouts `CARRIED_ATTR` gives `op` (None: none given), checked against the carried values."""
    attr = op.attributes.get(CARRIED_ATTR)
    if attr is None:
        return None
    lays = list(attr.data) if isinstance(attr, ArrayAttr) else None
    if lays is None or len(lays) != len(op.carried) or not all(isinstance(x, tl.LayoutAttr) for x in lays):
        raise PassFailedException(
            f"tile-plan: {label(op)}: {CARRIED_ATTR} must be an array of {len(op.carried)} #tile.layout "
            f"(one per carried value), got {attr}"
        )
    for v, lay in zip(op.carried, lays, strict=True):
        try:
            tl.check_layout_matches(op, v, lay)
        except VerifyException as e:  # a layout of another shape or element type
            raise PassFailedException(f"tile-plan: {label(op)}: {CARRIED_ATTR}: {e}") from None
    return lays


def carried_into(v: SSAValue) -> tl.LayoutAttr | None:
    """The layout a loop's `CARRIED_ATTR` gives v where v enters it as a carried value (None: none given)."""
    for use in v.uses:
        user = use.operation
        if isinstance(user, nn.RepeatOp) and use.index < len(user.carried):
            chosen = carried_choice(user)
            if chosen is not None:
                return chosen[use.index]
    return None


def loop_carried_layouts(rep: tl.RepeatOp) -> list[tl.LayoutAttr]:
    """The carried layouts a planned loop would rather have: where the body yields carried value i in a layout Y
    other than its entry layout (a relayout back to the entry layout every iteration) and a consumer in the body
    relayouts the carried value i to that same Y (another, the other way), Y: then neither runs (at most one
    relayout of another consumer's takes their place); else the entry layout. So400m: the residual stream, yielded
    by fc2's K-split sum and read by the next out_proj sum as an addend in the same column blocks, stays in them,
    and only the layer norm gathers it into rows."""

    def reaches(user: Operation, y: tl.LayoutAttr) -> bool:  # a relayout to y, directly or via `gather_mid`
        if not isinstance(user, tl.RelayoutOp):
            return False
        return user.layout == y or any(
            isinstance(u.operation, tl.RelayoutOp) and u.operation.layout == y for u in user.result.uses
        )

    block = rep.body.block
    term = block.last_op
    chosen = []
    for i, v in enumerate(term.operands):
        entry = rep.arg_layouts.data[i]
        src = v.owner.input if isinstance(v.owner, tl.RelayoutOp) else v
        y = tl.layout_of(src)
        wanted = y is not None and any(reaches(u.operation, y) for u in block.args[i].uses)
        chosen.append(y if wanted and y != entry else entry)
    return chosen


@dataclass(frozen=True)
class TilePlanPass(ModulePass):
    """Chooses a layout for every tensor and a plan for every operator (see the module docstring)."""

    name = "tile-plan"

    tiles: int = 0
    """Tiles of the target (0: the full IPU21, 1472 tiles)."""
    sram_kib: int = 624
    """SRAM per tile of the target, KiB."""
    memory_fraction: float = 0.0
    """Share of a tile's SRAM one GEMM's operands and result may use; 0 (default): derived from the target and the
    function's resident parameters (`gemm_budget`). Either way the bytes are recorded as `tile.gemm_budget` on
    the function, and a `tile.gemm_budget` already there (a person's) is kept."""
    attention: str = "materialized"
    """Attention implementation: "materialized" (only this one is lowered further) or "flash"."""
    weights_order: str = "auto"
    """Storage order of GEMM weight panels: "auto" (`ampw` where the GEMM kernel reads the weight blocks in place
    as AMP panels, `ampw_fits`: FP8-activation K splits; row-major elsewhere), "row_major", "amp16" (AMP
    micro-panels) or "ampw" (every GEMM's). The choice is the plan's `worder`; a plan given before tile-plan
    keeps its own."""
    carried: str = "auto"
    """Layouts of a loop's carried values: "auto" (those `loop_carried_layouts` prefers after a trial plan:
    the layout the body yields them in, where a consumer in the body wants that layout too) or "entry" (the
    layout each enters the loop with). A `tile.carried_layouts` already on the loop is kept."""

    def __post_init__(self) -> None:
        # Raised while the pipeline is built: `ipu-opt` reports one line naming the option.
        if self.weights_order not in WEIGHTS_ORDERS:
            raise ValueError(
                f"{self.name}: option 'weights_order' must be one of {', '.join(WEIGHTS_ORDERS)}, "
                f"got {self.weights_order!r}"
            )
        if self.attention not in tl.ATTENTION_KINDS:
            raise ValueError(
                f"{self.name}: option 'attention' must be one of {', '.join(tl.ATTENTION_KINDS)}, got {self.attention!r}"
            )
        if self.carried not in CARRIED_CHOICES:
            raise ValueError(
                f"{self.name}: option 'carried' must be one of {', '.join(CARRIED_CHOICES)}, got {self.carried!r}"
            )
        if not 0 <= self.memory_fraction <= 1:
            raise ValueError(
                f"{self.name}: option 'memory_fraction' must be in [0, 1] (0: derived), got {self.memory_fraction}"
            )
        target_for(self.tiles, self.sram_kib)  # raises ValueError naming tiles / sram_kib

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        loops = [o for o in op.walk() if isinstance(o, nn.RepeatOp)]
        if self.carried == "auto" and any(CARRIED_ATTR not in o.attributes for o in loops):
            # A trial plan of a copy shows each loop's yielded layouts; the real plan then keeps the carried values
            # in the layouts `loop_carried_layouts` prefers (recorded on the loop: a person's choice is kept).
            trial = op.clone()
            self._plan(trial)
            planned = [o for o in trial.walk() if isinstance(o, tl.RepeatOp)]
            for loop, rep in zip(loops, planned, strict=True):
                if CARRIED_ATTR not in loop.attributes:
                    loop.attributes[CARRIED_ATTR] = ArrayAttr(loop_carried_layouts(rep))
        self._plan(op)

    def _plan(self, op: ModuleOp) -> None:
        target = target_for(self.tiles, self.sram_kib)
        planner = _Planner(target, 0, self.attention, self.weights_order)
        for f in op.walk():
            if isinstance(f, func.FuncOp):
                budget = f.attributes.get(GEMM_BUDGET_ATTR)
                if budget is None:
                    frac = self.memory_fraction
                    budget = int(frac * target.sram_bytes) if frac else gemm_budget(f, target)
                    f.attributes[GEMM_BUDGET_ATTR] = IntegerAttr(budget, i64)
                elif not isinstance(budget, IntegerAttr) or budget.value.data <= 0:
                    raise PassFailedException(
                        f"tile-plan: @{f.sym_name.data}: {GEMM_BUDGET_ATTR} = {budget}: a positive byte count expected"
                    )
                else:
                    budget = budget.value.data
                planner.gemm_budget = budget
                planner.plan_block(f.body.block)
                # Sources read only by the host stay on the host; other unused ones: whole on tile 0.
                for src in f.body.block.ops:
                    host_only = (
                        isinstance(src, SOURCE_OPS)
                        and bool(src.results[0].uses)
                        and all(
                            isinstance(u.operation, HOST_OPS) and is_host_value(u.operation.results[0])
                            for u in src.results[0].uses
                        )
                    )
                    if isinstance(src, SOURCE_OPS) and tl.LAYOUT_ATTR not in src.attributes and not host_only:
                        t = src.results[0].type
                        src.attributes[tl.LAYOUT_ATTR] = whole_on(t.get_shape(), t.element_type, 0)
        for o in op.walk():
            if isinstance(o, tl.RepeatOp):
                for a, lay in zip(o.body.block.args, o.arg_layouts.data):
                    tl.check_layout_matches(o, a, lay)
