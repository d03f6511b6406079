"""`nn-split-k`: few-row linears as partial products over K chunks plus a sum.

    %y = nn.linear %x, %w, %b              // [M, K] x [N, K] -> [M, N], M small (the MAP head's M = 1)

becomes

    %p = nn.linear_partials %x, %w k_chunk = kc   // [G, M, N], G = ceil(K / kc)
    %s = nn.reduce_sum %p                         // [M, N]
    %y = nn.add %s, %b_rows                       // with a bias: [M, N] rows of it (host-folded)

Exact in real arithmetic. Why: the AMP kernel's cost per tile is per 16 x 16 weight block, almost whatever the
number of rows (a block's coefficient loads and worker setup dominate a one-row GEMM: ~245 cycles per block for
M = 1), and a GEMM without a K split has at most N / 16 tiles (So400m's MAP head: 72 tiles of 72 K blocks each).
Split, the weight blocks spread over G times more tiles, each of which keeps its [16, kc] weight slice where it
computes (no per-inference weight exchange), at the price of a gather of G partial rows per output block (one
exchange round each) and a few element-wise adds.

kc is chosen per linear by the busiest tile's estimate: the GEMM kernel's own cycles for [M, kc] x [kc, 16]
(`cost_model.gemm_kernel_cycles`) + its weight preparation (`cost_model.weight_prep_cycles`) + ROUND_CYCLES per
partial gathered, with G * N / 16 <= tiles; the linear is split only when that beats its unsplit estimate (the
same terms over all of K, N / 16 / tiles column blocks per tile). Run after `nn-quantize-weights` (the operands
are then f16 activations and f16 / FP8 weights).

Many rows (option many_rows) whose x is a layer norm's result, another split's sum, attention's output or made
by the host from an input (`x_source`; K % 16 != 0 only for the last: the lowering pads its last chunk): f16
partials, summed with the bias (`nn.reduce_sum`'s optional operand) into the linear's type,

    %p = nn.linear_partials %x, %w k_chunk = kc   // [G, M, N] f16
    %y = nn.reduce_sum %p, %b                     // [M, N], f16 or f32

planned on a [G, gm, gn] grid (`rows_grid`): for the same MACs a tile's weight block meets G times more rows,
so the per-block cost is spread over more of them, and a tile receives less (x and weight blocks of K / G
columns). So400m's q / k / v projections: 25-28 k instead of ~51 k cycles each, their x gathers 28 k + 4 k +
23 k instead of 42 k + 21 k + 14 k, + a few k per sum (simulated).

Options:
  tiles (default 1472): the tiles the plan may use;
  max_rows (default 8): linears with more rows are split only with many_rows (default true);
  fp8_kblock (default false): many-row linears with FP8 weights split in chunks of whole 32-deep FP8 AMP K blocks,
      so that `nn-quantize-activations` can give them FP8 activations (the FP8 AMP);
  fp8_only (default none): with fp8_kblock, only the linears whose weight parameter names contain one of these
      substrings (the same `only` as nn-quantize-activations': the others are costed and cut for f16 x).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float16Type, Float32Type, ModuleOp, TensorType
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ipu.backend.target import IPU21
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.passes import cost_model as cm
from ipu.passes.nn_utils import weight_named

# One exchange round of the reduction's gather: the round table walk, the sends' setup and the 150-cycle internal
# sync (docs/lowering.md, "exchange rounds"), for a piece of a few dozen bytes.
ROUND_CYCLES = 300
# The split's extra compute steps: the A rows copy (~420 cycles), the cast of the partial to f32 (~130), the
# sum's add calls (~170-240 each, ceil(log2 G) + 1 for an odd count) and the bias add (~170), as simulated for
# So400m's MAP head.
SPLIT_OVERHEAD_CYCLES = 1600
# A grouped linear's contraction must be whole blocks of the AMP GEMM kernel's 16-deep K: the K-split lowering
# (`NnOps.linear_partials`) moves each tile's x row and [pn, kc] weight block into the kernel's operands as they are,
# with no zero padding of K (the ungrouped linears' K % 16 != 0 path re-strides whole [M, K] blocks instead).
# `nn-fold-probe-attention` leaves a probe attention of such a width unfolded.
GROUPED_K_MULTIPLE = 16


# Linears with at most this many rows split as above (x whole on every tile); more rows: a [G, gm, gn] grid.
FEW_ROWS = 8
# A few-row linear whose weight the device computes: K chunks of this many (four K blocks per tile), over
# column panels of DEVICE_WEIGHT_PANEL (the MAP head's scores: 32 tokens, 23 panels: the softmax gathers 23 pieces
# per row and P X's chunks, MATMUL_CHUNK tokens each, are the same blocks; 16 doubled the pieces and rounds).
DEVICE_WEIGHT_CHUNK = 64
DEVICE_WEIGHT_PANEL = 32
MATMUL_CHUNK = 32


def through_views(v):
    """The value v is a view of: v's source through casts, reshapes (and tile-plan's relayouts)."""
    while isinstance(getattr(v, "owner", None), nn.CastOp | nn.ReshapeOp | tl.RelayoutOp):
        v = v.owner.operands[0]
    return v


def computed_on_device(v) -> bool:
    """v is computed by the device: through casts, reshapes (and tile-plan's relayouts), the result of a layer norm,
    a linear, a sum or an element-wise op (not a parameter, an input or a block argument)."""
    return isinstance(
        getattr(through_views(v), "owner", None),
        nn.LayerNormOp | nn.LinearOp | nn.AddOp | nn.ReduceSumOp | nn.GeluOp,
    )


# 2-D matmuls with at most this many rows and at least this long a contraction: partials per 16-deep K block.
MATMUL_SPLIT_ROWS = 16
MATMUL_SPLIT_MIN_K = 256
# Many-row split (`rows_grid`): the sum's fixed cost per tile (the adds' calls, the bias, a cast) besides its data,
# and the margin the split's estimate must win by (the unsplit GEMM's plan is tile-plan's `choose_gemm`, costed a
# little differently). Calibrated when partials and sums were f32; the sum's pieces are costed as the f16 bytes and
# f16 adds the lowering now moves and runs (no So400m or tiny-model choice changed with that).
ROWS_SPLIT_FIXED_CYCLES = 1500
ROWS_SPLIT_MARGIN = 0.85
# Column panel widths of a many-row split (multiples of 16: the kernel's N block, no padding).
ROWS_SPLIT_PANELS = (16, 32, 48, 64)


def group_panel(size: int) -> int:
    """Column panels of a grouped linear's groups of `size` columns: 16, else the widest divisor of the group up
    to 32 in whole 4-column groups (So400m's heads of 72: 24; the kernel pads N to 16)."""
    if size % 16 == 0:
        return 16
    fits = [p for p in range(4, 33, 4) if size % p == 0]
    if not fits:
        raise PassFailedException(
            f"a grouped linear's groups of {size} columns are not whole 4-column groups"
        )
    return fits[-1]


def split_cost(
    m: int, k: int, n: int, kc: int, wbytes: int, wdt: str, tiles: int, pn: int = 16
) -> int | None:
    """The busiest tile's estimate for chunks of kc and column panels of pn (None when the G * N / pn tiles do not
    exist)."""
    g, gn = -(-k // kc), -(-n // pn)
    if g * gn > tiles:
        return None
    return (
        cm.gemm_kernel_cycles(m, kc, pn, wbytes)
        + cm.weight_prep_cycles(pn, kc, wdt, IPU21)
        + g * ROUND_CYCLES
        + SPLIT_OVERHEAD_CYCLES
    )


def choose_chunk(m: int, k: int, n: int, wbytes: int, wdt: str, tiles: int, pn: int = 16) -> int | None:
    """The cheapest k_chunk (a multiple of 16 that the kernels take in one weight chunk), or None when splitting
    does not beat the unsplit GEMM."""
    nb = -(-n // 16)
    per_tile = -(-nb // min(nb, tiles))  # column blocks per tile without a split
    unsplit = cm.gemm_kernel_cycles(m, k, 16 * per_tile, wbytes) + cm.weight_prep_cycles(
        16 * per_tile, k, wdt, IPU21
    )
    best = None
    for kc in range(16, k, 16):
        if 2 * kc > cm.GEMM_MAX_A_ROW_BYTES or len(cm.gemm_k_chunks(kc, 16, wbytes)) != 1:
            break
        c = split_cost(m, k, n, kc, wbytes, wdt, tiles, pn)
        if c is not None and (best is None or c < best[0]):
            best = (c, kc)
    if best is None or best[0] >= unsplit:
        return None
    return best[1]


# A GEMM-produced x (`x_source` "panels"): the producer's blocks assumed PRODUCER_ROWS x PRODUCER_PANEL (So400m's
# split fc1: [35, 32]) for the rounds of the x gather.
PRODUCER_ROWS = 32
PRODUCER_PANEL = 32


# Attention's output blocks (`x_source` "heads"): HEAD_BLOCK_ROWS query rows of one head (So400m's: 8 x 72).
HEAD_BLOCK_ROWS = 8


def x_rounds(pm: int, kc: int, k: int, source: str = "rows", width: int = PRODUCER_PANEL) -> int:
    """Exchange rounds to gather a tile's [pm, kc] x block. From a layer norm's rows (one row per tile, `source`
    "rows"): pm with whole rows (kc = k: each row one piece); a K part of the rows goes through intermediate
    [mr, kc] blocks (`tile_plan.gather_mid`), mr + pm / mr rounds. From a GEMM's column blocks ("panels", x in
    column panels of theirs) or attention's head blocks ("heads", `width` = the head): one per overlapping
    producer block."""
    if source == "panels":
        return (-(-pm // PRODUCER_ROWS) + 1) * -(-kc // PRODUCER_PANEL)
    if source == "heads":
        return (-(-pm // HEAD_BLOCK_ROWS) + 1) * -(-kc // width)
    if (
        source == "host"
    ):  # the pieces of x's spread home (`tile_plan.home_of`: at least HOME_PIECE_BYTES each)
        from ipu.passes.tile_plan import HOME_PIECE_BYTES

        return -(-pm // max(1, -(-HOME_PIECE_BYTES // (kc * 2))))
    if kc >= k:
        return pm
    from ipu.passes.tile_plan import GATHER_MID_BYTES

    two = [mr + pm // mr for mr in range(2, pm) if pm % mr == 0 and mr * kc * 2 <= GATHER_MID_BYTES]
    return min([pm, *two])


def rows_grid(
    m: int, k: int, n: int, kc: int, wbytes: int, wdt: str, tiles: int, one_chunk: bool = True,
    panels: tuple[int, ...] = ROWS_SPLIT_PANELS, source: str = "rows", width: int = PRODUCER_PANEL,
    fp8_x: bool = False, a_gathered: bool = False,
):  # fmt: skip
    """The cheapest (cycles, gm, pm, pn) of a many-row split into chunks of kc (fp8_x: FP8 x and weights, the
    FP8 AMP GEMM, the weight block only rearranged into FP8 panels, x's bytes halved): G = ceil(k / kc) chunks x gm row
    panels of pm rows (a multiple of G: the sum gives each of a block's G tiles pm / G of its rows) x gn column
    panels of pn (one of `panels`; the kernel pads it to 16), G * gm * gn <= tiles. The busiest tile: its GEMM
    (`cost_model.gemm_kernel_cycles`), weight preparation, the receipt of its x and weight blocks at the
    exchange's rate plus ROUND_CYCLES per round of the x gather (`x_rounds` from `source`), and the sum's share (G - 1 f16 pieces
    of pm / G rows, one round each, f16 adds, ROWS_SPLIT_FIXED_CYCLES). None when nothing fits. one_chunk: a chunk must be
    one weight chunk of the kernels (`cost_model.gemm_k_chunks`), as `nn.linear_partials`' lowering runs it.
    a_gathered (or source "heads"): x's [pm, kc] block is gathered into the A scratch, so it must fit one element."""
    g = -(-k // kc)
    best = None
    for pn in panels:
        gn = -(-n // pn)
        npad = -(-pn // 16) * 16
        if fp8_x:  # one FP8 GEMM call per chunk: its panels [npad, kc padded to 32] in one scratch element
            if gn * g > tiles or npad * -(-kc // 32) * 32 > IPU21.region1_element_bytes:
                continue
        elif gn * g > tiles or (one_chunk and len(cm.gemm_k_chunks(kc, npad, wbytes)) != 1):
            continue
        gm = tiles // (g * gn)
        rows = -(-m // gm)  # rows per panel, rounded up to a multiple of G below
        pm = g * -(-rows // g)
        gm = -(-m // pm)
        if m - (gm - 1) * pm < cm.GEMM_MIN_ROWS or pm < 4 * g:
            # The last row panel under the kernel's minimum (the x block is the GEMM's A in place); the sum's
            # pieces under 4 rows: with 1-row pieces the tiny SigLIP on 1472 tiles failed on the simulator
            # (`xch_half` read a never-written destination word, docs/lowering.md).
            continue
        if pm * npad * 6 > IPU21.region1_element_bytes:
            continue  # the lowering's C scratch (f16 + f32 staging)
        if (source == "heads" or a_gathered) and pm * kc * (1 if fp8_x else 2) > IPU21.region1_element_bytes:
            continue  # x's rows gathered from the head panels into the A scratch
        gemm = cm.fp8_gemm_cycles(pm, kc, pn) if fp8_x else cm.gemm_kernel_cycles(pm, kc, pn, wbytes)
        prep = cm.fp8_panel_cycles(pn, kc) if fp8_x else cm.weight_prep_cycles(pn, kc, wdt, IPU21)
        c = (
            gemm
            + prep
            + cm.exchange_cycles(pm * kc * (1 if fp8_x else 2) + pn * kc * wbytes)
            + x_rounds(pm, kc, k, source, width) * ROUND_CYCLES
        )
        if g > 1:
            c += (
                cm.exchange_cycles((g - 1) * (pm // g) * pn * 2)
                + (g - 1) * ROUND_CYCLES
                + cm.elementwise_cycles((g - 1) * (pm // g) * pn, "add", "f16")
                + ROWS_SPLIT_FIXED_CYCLES
            )
        if best is None or c < best[0]:
            best = (c, gm, pm, pn)
    return best


def x_readers(x) -> list:
    """The ops reading value x: directly, or (in tile-plan, after earlier readers were planned) through
    `tile.relayout`s of it, from the value those relayouts start at."""
    root = x
    while isinstance(root.owner, tl.RelayoutOp):
        root = root.owner.operands[0]
    readers, values = [], [root]
    while values:
        for use in values.pop().uses:
            if isinstance(o := use.operation, tl.RelayoutOp):
                values.append(o.results[0])
            else:
                readers.append(o)
    return readers


def shared_rows_panels(parts: nn.LinearPartialsOp, tiles: int, panels: tuple[int, ...]) -> tuple[int, ...]:
    """The column panel width(s) `rows_grid` may take for the many-row split `parts`: `panels`, or when other
    splits read the same x with the same shape and chunk (So400m's q, k and v projections) the one width that
    puts them all on one grid (their A is then one layout: x is gathered once, not once per linear), chosen
    by their summed estimates with x's receipt and gather counted once."""
    (m, k), n, kc = parts.input.type.get_shape(), parts.weight.type.get_shape()[0], parts.chunk
    sibs = [
        o
        for o in x_readers(parts.input)
        if isinstance(o, nn.LinearPartialsOp)
        and o.chunk == kc
        and o.weight.type.get_shape()[0] == n
        and rows_panels(o) == panels
    ]
    if len(sibs) < 2:
        return panels
    fp8_x = tl.element_bytes(parts.input.type.element_type) == 1
    weights = [
        (tl.element_bytes(o.weight.type.element_type), tl.dtype_name(o.weight.type.element_type))
        for o in sibs
    ]
    best = None
    for pn in panels:
        grids = [rows_grid(m, k, n, kc, wb, wdt, tiles, panels=(pn,), fp8_x=fp8_x) for wb, wdt in weights]
        if any(g is None for g in grids):
            continue
        pm = grids[0][2]
        x_once = cm.exchange_cycles(pm * kc * (1 if fp8_x else 2)) + x_rounds(pm, kc, k) * ROUND_CYCLES
        total = sum(g[0] for g in grids) - (len(grids) - 1) * x_once
        if best is None or total < best[0]:
            best = (total, pn)
    return panels if best is None else (best[1],)


def rows_plan_grid(parts: nn.LinearPartialsOp, tiles: int):
    """(cycles, gm, pm, pn) of the many-row split `parts` as tile-plan plans it (`rows_grid`, with the panel
    width its x siblings share: `shared_rows_panels`), or None when nothing fits."""
    (m, k), n = parts.input.type.get_shape(), parts.weight.type.get_shape()[0]
    wt = parts.weight.type.element_type
    panels = shared_rows_panels(parts, tiles, rows_panels(parts))
    fp8_x = tl.element_bytes(parts.input.type.element_type) == 1
    # x from column blocks the GEMM cannot step through (attention's heads of 72, a producer's panels that are not
    # whole K blocks): the lowering gathers each tile's rows into the A scratch, which bounds pm x kc whatever the
    # costs (they are taken as for a layer norm's rows here, as tile-plan always has).
    src = x_source(parts)
    kb = tl.ampw_kblock(parts.input.type.element_type)  # the AMP's K block: 16 f16, 32 FP8
    gathered = src is not None and (src[0] == "heads" or (src[0] == "panels" and src[1] % kb != 0))
    # In tile-plan the producer's layout is known (relayouts between may hide its op from `x_source`).
    have = tl.layout_of(parts.input)
    # x's gather as `choose_rows_chunk` costed it when it chose the chunk (a GEMM's column blocks: fewer row panels
    # of more rows mean more pieces per tile; So400m's fc2 on 64-column panels instead of 32)
    source, width = src if src is not None and src[0] in ("panels", "heads") else ("rows", 0)
    if have is not None and not have.stack.data and len(have.shape_) == 2 and have.order.data == "row_major":
        p = have.block_[1]
        if source == "heads" and p % kb == 0 and (p >= parts.chunk or parts.chunk % p == 0):
            # a merge writing blocks of the heads a chunk spans (`tile_plan.merge_block_heads`): read in place
            gathered, source, width = False, "panels", p
        gathered = gathered or (p < min(k, parts.chunk) and p % kb != 0)
    return rows_grid(
        m, k, n, parts.chunk, tl.element_bytes(wt), tl.dtype_name(wt), tiles, panels=panels, fp8_x=fp8_x,
        a_gathered=gathered, source=source, width=width or PRODUCER_PANEL,
    )  # fmt: skip


def rows_panels(lin: nn.LinearOp | nn.LinearPartialsOp) -> tuple[int, ...]:
    """Column panel widths for a many-row split of `lin`: ROWS_SPLIT_PANELS, or when its result is an attention
    operand the widths that divide the head and the head itself (the attention gathers whole heads: other widths
    cut every head row into pieces)."""
    from ipu.passes.tile_plan import attention_head_dim, head_divisors

    d = attention_head_dim(lin)
    return (*head_divisors(d), *head_multiples(d), d) if d else ROWS_SPLIT_PANELS


def head_multiples(d: int) -> tuple[int, ...]:
    """Panel widths of whole 16-column blocks that are a multiple of a head divisor P (P | d) but do not divide
    the head (So400m's 48 = 2 x 24 for heads of 72): a tile computes such a panel in one GEMM (no N padding: 24
    alone pads to 32) and its sum is stored as blocks of P (`tile_plan.panel_store_width`), which the attention
    gathers as it gathers P-wide panels."""
    from ipu.passes.tile_plan import head_divisors

    return tuple(
        w
        for w in range(16, d, 16)
        if d % w and any(w % p == 0 for p in head_divisors(d)) and w <= max(ROWS_SPLIT_PANELS)
    )


def choose_rows_chunk(
    m: int, k: int, n: int, wbytes: int, wdt: str, tiles: int, panels: tuple[int, ...] = ROWS_SPLIT_PANELS,
    source: str = "rows", width: int = PRODUCER_PANEL, kblock: int = 16,
) -> int | None:  # fmt: skip
    """k_chunk of a many-row split (G = 2..8 chunks of whole 16-blocks, each one weight chunk of the kernels and
    an in-place A row), or None when the unsplit estimate (`rows_grid` over all of K) is not beaten by
    ROWS_SPLIT_MARGIN. x from column blocks ("panels", "heads"): chunks of whole producer blocks (a multiple of
    `width` too): a chunk boundary inside a producer block would cut that block's rows into a piece each (So400m's
    fc2 in chunks of 272 of fc1's 32-column blocks: 777 k cycles of exchange instead of ~35 k). kblock: the chunks'
    K multiple (32: whole FP8 AMP blocks, for `nn-quantize-activations`)."""
    step = math.lcm(kblock, width) if source in ("panels", "heads") else kblock
    # Unsplit, the GEMM's A row panels arrive as column panels of the producer's blocks (`gathered_rows_layout`).
    unsplit = rows_grid(
        m, k, n, k, wbytes, wdt, tiles, one_chunk=False, panels=panels,
        source="panels" if source == "heads" else source,
    )  # fmt: skip
    best = None
    for g in range(2, 9):
        kc = step * -(-k // step // g)
        if -(-k // kc) != g or 2 * kc > cm.GEMM_MAX_A_ROW_BYTES:
            continue
        c = rows_grid(m, k, n, kc, wbytes, wdt, tiles, panels=panels, source=source, width=width,
                      fp8_x=kblock == 32 and wbytes == 1)  # fmt: skip
        if c is not None and (best is None or c[0] < best[0]):
            best = (c[0], kc)
    if best is None or (unsplit is not None and best[0] >= ROWS_SPLIT_MARGIN * unsplit[0]):
        return None
    return best[1]


def x_source(lin: nn.LinearOp, tiles: int = 1472) -> tuple[str, int] | None:
    """Where x comes from, for a many-row split, and the producer's block width: ("rows", 0) for a layer norm's
    result (whole rows, whose K part tile-plan gathers in two stages); ("panels", pn) for the sum of a many-row
    split's partials, through a GELU or casts (its column blocks of pn, as `rows_grid` plans them: x's [pm, kc]
    blocks receive them as column panels, which the kernel reads in place: `tile_plan.gathered_chunk_layout`);
    ("heads", d) for attention's output (head blocks of d columns, received as column panels whose rows the
    lowering gathers into the A scratch); else None (an unsplit GEMM's panel width is tile-plan's choice)."""
    v = lin.input
    while isinstance(v.owner, nn.CastOp | nn.GeluOp | tl.RelayoutOp):  # (tile-plan's relayouts: see through)
        v = v.owner.operands[0]
    owner = v.owner
    if isinstance(owner, nn.LayerNormOp):
        return "rows", 0
    parts = owner.input.owner if isinstance(owner, nn.ReduceSumOp) else None
    while isinstance(parts, tl.RelayoutOp):
        parts = parts.operands[0].owner
    if isinstance(parts, nn.LinearPartialsOp):
        if parts.input.type.get_shape()[0] <= FEW_ROWS:
            return None
        planned = parts.attributes.get(tl.PLAN_ATTR)  # in tile-plan: the producer's own plan
        if isinstance(planned, tl.GemmPlanAttr) and len(planned.get("grid")) == 3:
            return "panels", planned.get("panel")[2]
        plan = rows_plan_grid(parts, tiles)
        return ("panels", plan[3]) if plan is not None else None
    if isinstance(owner, nn.AttentionOp):
        return "heads", owner.query.type.get_shape()[1] // owner.num_heads
    if isinstance(owner, nn.AttentionMergeOp):
        return "heads", owner.result.type.get_shape()[1] // owner.num_heads
    if _from_input(v):
        return "host", 0
    return None


def _from_input(v) -> bool:
    """x computed by the host from a model input only (the patch embedding's patches: patchify, reshape, cast):
    tile-plan uploads it into a spread home of the split's x layout, from which the exchange broadcasts it."""
    owner = v.owner
    if isinstance(owner, nn.InputOp):
        return True
    if isinstance(owner, nn.PatchifyOp | nn.ReshapeOp | nn.CastOp | nn.SliceOp):
        return all(_from_input(o) for o in owner.operands)
    return False


@dataclass(frozen=True)
class NNSplitKPass(ModulePass):
    """Splits few-row linears along K (see the module docstring)."""

    name = "nn-split-k"

    tiles: int = 1472
    max_rows: int = FEW_ROWS
    many_rows: bool = True
    """Also split linears with more rows whose x is a layer norm's result, another split's sum or attention's
    output (`x_source`) when `rows_grid`'s estimate wins (f16 partials, the sum scattered over each block's G tiles
    with the bias)."""
    fp8_kblock: bool = False
    """Many-row splits of FP8-weight linears in chunks of whole 32-deep FP8 AMP blocks (`nn-quantize-activations`)."""
    fp8_only: tuple[str, ...] = ()
    """With fp8_kblock: only linears whose weight parameter names contain one of these ("none" or empty: all)."""

    def __post_init__(self) -> None:
        if self.tiles < 2:
            raise ValueError(f"{self.name}: option 'tiles' must be >= 2, got {self.tiles}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.split_matmuls(op)
        for lin in [o for o in op.walk() if isinstance(o, nn.LinearOp)]:
            xs, ws = lin.input.type.get_shape(), lin.weight.type.get_shape()
            if lin.groups:
                self.split_grouped(lin)
                continue
            if kc := self.device_weight_chunk(lin):
                self.split(lin, kc)
                continue
            few = xs[0] <= self.max_rows
            if len(xs) != 2 or not (few or self.many_rows) or ws[0] % 16:
                continue
            # K % 16 != 0: a many-row split from host-made x only (the lowering pads the ragged last chunk of
            # row-major x blocks; x from other producers arrives in column panels)
            if xs[1] % 16 and (few or x_source(lin, self.tiles) != ("host", 0)):
                continue
            if tl.element_bytes(lin.input.type.element_type) != 2:
                continue  # the kernels take f16 activations (run nn-quantize-weights first)
            wbytes = tl.element_bytes(lin.weight.type.element_type)
            if wbytes not in (1, 2):
                continue
            wdt = tl.dtype_name(lin.weight.type.element_type)
            if few:
                kc = choose_chunk(xs[0], xs[1], ws[0], wbytes, wdt, self.tiles)
                if kc is not None:
                    self.split(lin, kc)
            elif source := x_source(lin, self.tiles):
                args = (xs[0], xs[1], ws[0], wbytes, wdt, self.tiles, rows_panels(lin), *source)
                kc = None
                if self.fp8_kblock and wbytes == 1 and self._fp8_x(lin):  # FP8 blocks (the FP8 AMP); else 16
                    kc = choose_rows_chunk(*args, kblock=32)
                if kc is None:
                    kc = choose_rows_chunk(*args)
                if kc is not None:
                    self.split(lin, kc, many_rows=True)

    def _fp8_x(self, lin: nn.LinearOp) -> bool:
        """With fp8_kblock: whether `lin` is among the linears to take FP8 activations (`fp8_only`)."""
        only = tuple(s for s in self.fp8_only if s != "none")
        return not only or weight_named(lin, only)

    def device_weight_chunk(self, lin: nn.LinearOp) -> int | None:
        """k_chunk for a few-row linear whose weight the device computes (the MAP head's scores U X^T: X is the
        layer norm's result): each tile then takes all its rows and one K chunk of its weight rows
        (`tile_plan.device_weight_partials`: [pn, kc] blocks, which the P X product reads in place); None when
        that does not apply."""
        (m, k), (n, _) = lin.input.type.get_shape(), lin.weight.type.get_shape()
        if (
            len(lin.operands) > 2
            or m > MATMUL_SPLIT_ROWS
            or k % DEVICE_WEIGHT_CHUNK
            or k == DEVICE_WEIGHT_CHUNK
        ):
            return None
        if not all(isinstance(v.type.element_type, Float16Type) for v in (lin.input, lin.weight)):
            return None
        if (
            not computed_on_device(lin.weight)
            or k // DEVICE_WEIGHT_CHUNK * -(-n // DEVICE_WEIGHT_PANEL) > self.tiles
        ):
            return None
        return DEVICE_WEIGHT_CHUNK

    def split_matmuls(self, op: ModuleOp) -> None:
        """A 2-D matmul with few rows over a long contraction (the MAP head's P X, [16, 729] x [729, 1152]) as
        partial products per MATMUL_CHUNK-deep K chunk plus their sum: tile-plan puts chunk c beside the scores GEMM's tiles
        that already hold its rhs rows (`tile_plan.choose_matmul_partials`)."""
        for mm in [o for o in op.walk() if isinstance(o, nn.MatmulOp)]:
            ls, rs = mm.lhs.type.get_shape(), mm.rhs.type.get_shape()
            if mm.rhs_transposed or len(ls) != 2 or ls[0] > MATMUL_SPLIT_ROWS or ls[1] < MATMUL_SPLIT_MIN_K:
                continue
            if not isinstance(mm.rhs.type.element_type, Float16Type) or rs[1] % 4:
                continue
            g = -(-ls[1] // MATMUL_CHUNK)
            if g > self.tiles:  # a tile per chunk at least
                continue
            parts = nn.MatmulPartialsOp(
                mm.lhs, mm.rhs, MATMUL_CHUNK, TensorType(Float32Type(), (g, ls[0], rs[1]))
            )
            total = nn.ReduceSumOp(parts.result, TensorType(Float32Type(), (ls[0], rs[1])))
            new = [parts, total]
            y = total.result
            if y.type != mm.result.type:
                cast = nn.CastOp(y, mm.result.type)
                new.append(cast)
                y = cast.result
            mm.parent_block().insert_ops_before(new, mm)
            hint = mm.result.name_hint
            mm.result.replace_all_uses_with(y)
            y.name_hint = hint
            mm.detach()
            mm.erase()

    def split_grouped(self, lin: nn.LinearOp) -> None:
        """A grouped linear (one result row) is always split (tile-plan plans its partials only): the few-row
        chunk choice for one row, or one chunk when splitting would not pay."""
        (_, k), n = lin.input.type.get_shape(), lin.weight.type.get_shape()[0]
        wt = lin.weight.type.element_type
        what = f"{self.name}: grouped nn.linear ({lin.results[0].name_hint or 'unnamed'}, row_groups = {lin.groups})"
        if tl.element_bytes(lin.input.type.element_type) != 2 or tl.element_bytes(wt) not in (1, 2):
            raise PassFailedException(
                f"{what}: needs f16 x and f16 / FP8 weights (run nn-quantize-weights first), got x "
                f"{lin.input.type}, weight {lin.weight.type}"
            )
        if k % GROUPED_K_MULTIPLE:
            raise PassFailedException(
                f"{what}: its contraction K = {k} (x {lin.input.type}, weight {lin.weight.type}) is not a multiple "
                f"of {GROUPED_K_MULTIPLE}, the GEMM kernel's K block, and the grouped K split does not pad K: "
                f"nn-fold-probe-attention (with its default k_multiple={GROUPED_K_MULTIPLE}) leaves a probe "
                "attention (SigLIP's MAP head) of such a width unfolded, an ordinary attention that runs at any "
                f"width; otherwise use a width that is a multiple of {GROUPED_K_MULTIPLE}"
            )
        pn = group_panel(n // lin.groups)
        kc = choose_chunk(1, k, n, tl.element_bytes(wt), tl.dtype_name(wt), self.tiles, pn)
        self.split(lin, kc or k)

    @staticmethod
    def split(lin: nn.LinearOp, kc: int, many_rows: bool = False) -> None:
        (m, k), n = lin.input.type.get_shape(), lin.weight.type.get_shape()[0]
        groups = lin.groups
        m = 1 if groups else m  # a grouped linear's result row
        rt = lin.results[0].type
        bias = lin.operands[2] if len(lin.operands) > 2 and many_rows else None
        # Many rows: f16 partials (the AMP's C as it is: no cast pass, half the sum's exchange), summed with the
        # bias (on the sum's pm / G rows per tile, not on a whole partial block) into the linear's own type (f16
        # for attention operands and GELU inputs); few rows: f32 partials and sum, the bias added after.
        pdt = Float16Type() if many_rows else Float32Type()
        sdt = rt.element_type if many_rows and isinstance(rt.element_type, Float16Type) else Float32Type()
        parts = nn.LinearPartialsOp(lin.input, lin.weight, kc, TensorType(pdt, (-(-k // kc), m, n)), groups)
        total = nn.ReduceSumOp(parts.result, TensorType(sdt, (m, n)), bias)
        new = [parts, total]
        y = total.result
        if len(lin.operands) > 2 and not many_rows:
            # The bias as [M, N] rows (a reshape / concat of a parameter: the host does it at upload), so the add
            # is element-wise in the sum's layout.
            bias = lin.operands[2]
            row = nn.ReshapeOp(bias, TensorType(bias.type.element_type, (1, n)))
            new.append(row)
            rows = row.result
            if m > 1:
                cat = nn.ConcatOp([rows] * m, 0, TensorType(bias.type.element_type, (m, n)))
                new.append(cat)
                rows = cat.result
            add = nn.AddOp(y, rows, TensorType(Float32Type(), (m, n)))
            new.append(add)
            y = add.result
        if y.type != rt:
            cast = nn.CastOp(y, rt)
            new.append(cast)
            y = cast.result
        lin.parent_block().insert_ops_before(new, lin)
        hint = lin.results[0].name_hint
        lin.results[0].replace_all_uses_with(y)
        y.name_hint = hint
        lin.detach()
        lin.erase()
