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

Options:
  tiles (default 1472): the tiles the plan may use;
  max_rows (default 8): linears with more rows are left alone (their tiles have row panels to amortize a block).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, ModuleOp, TensorType
from xdsl.passes import ModulePass

from ipu.backend.target import IPU21
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.passes import cost_model as cm

# One exchange round of the reduction's gather: the round table walk, the sends' setup and the 150-cycle internal
# sync (docs/lowering.md, "exchange rounds"), for a piece of a few dozen bytes.
ROUND_CYCLES = 300
# The split's extra compute steps: the A rows copy (~420 cycles), the cast of the partial to f32 (~130), the
# sum's add calls (~170-240 each, ceil(log2 G) + 1 for an odd count) and the bias add (~170), as simulated for
# So400m's MAP head.
SPLIT_OVERHEAD_CYCLES = 1600


def split_cost(m: int, k: int, n: int, kc: int, wbytes: int, wdt: str, tiles: int) -> int | None:
    """The busiest tile's estimate for chunks of kc (None when the G * N / 16 tiles do not exist)."""
    g, gn = -(-k // kc), -(-n // 16)
    if g * gn > tiles:
        return None
    return (
        cm.gemm_kernel_cycles(m, kc, 16, wbytes)
        + cm.weight_prep_cycles(16, kc, wdt, IPU21)
        + g * ROUND_CYCLES
        + SPLIT_OVERHEAD_CYCLES
    )


def choose_chunk(m: int, k: int, n: int, wbytes: int, wdt: str, tiles: int) -> int | None:
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
        c = split_cost(m, k, n, kc, wbytes, wdt, tiles)
        if c is not None and (best is None or c < best[0]):
            best = (c, kc)
    if best is None or best[0] >= unsplit:
        return None
    return best[1]


@dataclass(frozen=True)
class NNSplitKPass(ModulePass):
    """Splits few-row linears along K (see the module docstring)."""

    name = "nn-split-k"

    tiles: int = 1472
    max_rows: int = 8

    def __post_init__(self) -> None:
        if self.tiles < 2:
            raise ValueError(f"{self.name}: option 'tiles' must be >= 2, got {self.tiles}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for lin in [o for o in op.walk() if isinstance(o, nn.LinearOp)]:
            xs, ws = lin.input.type.get_shape(), lin.weight.type.get_shape()
            if len(xs) != 2 or xs[0] > self.max_rows or xs[1] % 16 or ws[0] % 16:
                continue
            if tl.element_bytes(lin.input.type.element_type) != 2:
                continue  # the kernels take f16 activations (run nn-quantize-weights first)
            wbytes = tl.element_bytes(lin.weight.type.element_type)
            if wbytes not in (1, 2):
                continue
            kc = choose_chunk(xs[0], xs[1], ws[0], wbytes, "f16" if wbytes == 2 else "f8", self.tiles)
            if kc is not None:
                self.split(lin, kc)

    @staticmethod
    def split(lin: nn.LinearOp, kc: int) -> None:
        (m, k), n = lin.input.type.get_shape(), lin.weight.type.get_shape()[0]
        rt = lin.results[0].type
        parts = nn.LinearPartialsOp(lin.input, lin.weight, kc, TensorType(Float32Type(), (-(-k // kc), m, n)))
        total = nn.ReduceSumOp(parts.result, TensorType(Float32Type(), (m, n)))
        new = [parts, total]
        y = total.result
        if len(lin.operands) > 2:
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
        if not isinstance(rt.element_type, Float32Type):
            cast = nn.CastOp(y, rt)
            new.append(cast)
            y = cast.result
        lin.parent_block().insert_ops_before(new, lin)
        hint = lin.results[0].name_hint
        lin.results[0].replace_all_uses_with(y)
        y.name_hint = hint
        lin.detach()
        lin.erase()
