"""`nn-split-mlp`: splits a transformer MLP along its hidden dimension, so that no GEMM has a huge K.

    %h = nn.linear %x, %w1, %b1      // [T, D] x [F, D] -> [T, F]
    %g = nn.gelu %h
    %y = nn.linear %g, %w2, %b2      // [T, F] x [D, F] -> [T, D]

becomes, for parts i = 0 .. P-1 over contiguous hidden ranges [f_i, f_i + n_i):

    %h_i = nn.linear %x, slice(%w1)[f_i:f_i+n_i, :], slice(%b1)[f_i:f_i+n_i]
    %g_i = nn.gelu %h_i
    %y_i = nn.linear %g_i, slice(%w2)[:, f_i:f_i+n_i] (+ %b2 for part 0)
    %y   = %y_0 + %y_1 + ...

This is exact in real arithmetic (the GELU is element-wise; the second GEMM's sum over F is split in P partial sums
added at the end). Why: without splitting K, the second GEMM's operands on a tile are a row panel of the [T, F]
activation and a column panel of the [D, F] weight; for So400m (T = 729, F = 4304, D = 1152) on 1472 tiles their
smallest sum is ~292 KB per tile, half the SRAM. Split in two, each part needs ~146 KB. The weight slices are
slices of parameters, done once by the host (tile-plan folds them), not per inference.

Options:
  max_k (default 2304): the hidden dimension is split into the fewest parts of at most max_k each, every part but
      the last a multiple of 16 (the AMP's K block). An MLP with F <= max_k is left alone.
  min_rows (default 16): MLPs over fewer rows (tokens) are left alone: their operands are a few KB per tile, and
      their GEMMs are the few-row ones that `nn-split-k` spreads over the tiles instead (the MAP head's M = 1).
  order (default "stages"): the program order of the parts. "stages": every part's fc1, then every GELU, then
      every fc2 (`%h_0, %h_1, %g_0, %g_1, %y_0, %y_1`), so the fc1 parts' shared input %x (a row panel received
      once, replicated over the GEMM's column panels: ~80 KB per tile for So400m) is dead before the first fc2
      operand arrives. "parts": part by part (`%h_0, %g_0, %y_0, %h_1, ...`), which keeps %x live across part 0's
      fc2 and made the working set of 27-layer So400m ~187 KB per tile instead of ~107 KB (the [T, F] hidden
      activations the stages order keeps instead are ~4 KB per tile).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ipu.dialects import nn


def split_sizes(f: int, max_k: int) -> list[int]:
    """Sizes of the parts of a hidden dimension f: the fewest parts <= max_k, all but the last multiples of 16."""
    parts = -(-f // max_k)
    while parts > 1:
        size = (-(-f // parts) + 15) // 16 * 16  # ceil(f / parts), rounded up to the AMP's K block
        last = f - size * (parts - 1)
        if size <= max_k and 0 < last <= max_k:
            return [size] * (parts - 1) + [last]
        parts += 1
        if parts > f:
            break
    if f <= max_k:
        return [f]
    raise ValueError(f"cannot split {f} into parts of <= {max_k} (multiples of 16)")


ORDERS = ("stages", "parts")


def mlp_chain(fc1: nn.LinearOp) -> tuple[nn.GeluOp, nn.LinearOp] | None:
    """(gelu, fc2) if fc1 -> gelu -> fc2 is a 2-D MLP whose intermediate values have one use each."""
    h = fc1.results[0]
    if len(list(h.uses)) != 1:
        return None
    gelu = next(iter(h.uses)).operation
    if not isinstance(gelu, nn.GeluOp) or len(list(gelu.results[0].uses)) != 1:
        return None
    use = next(iter(gelu.results[0].uses))
    fc2 = use.operation
    if not isinstance(fc2, nn.LinearOp) or use.index != 0:
        return None
    if len(fc1.input.type.get_shape()) != 2 or len(fc2.results[0].type.get_shape()) != 2:
        return None
    return gelu, fc2


@dataclass(frozen=True)
class NNSplitMLPPass(ModulePass):
    """Splits fc1 -> gelu -> fc2 along the hidden dimension (see the module docstring)."""

    name = "nn-split-mlp"

    max_k: int = 2304
    min_rows: int = 16
    order: str = "stages"

    def __post_init__(self) -> None:
        if self.max_k < 16:
            raise ValueError(f"{self.name}: option 'max_k' must be >= 16, got {self.max_k}")
        if self.order not in ORDERS:
            raise ValueError(
                f"{self.name}: option 'order' must be one of {', '.join(ORDERS)}, got {self.order!r}"
            )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for fc1 in [o for o in op.walk() if isinstance(o, nn.LinearOp)]:
            chain = mlp_chain(fc1)
            if chain is None:
                continue
            gelu, fc2 = chain
            f = fc1.results[0].type.get_shape()[-1]
            rows = fc1.input.type.get_shape()[0]
            if f <= self.max_k or rows < self.min_rows:
                continue
            try:
                sizes = split_sizes(f, self.max_k)
            except ValueError as e:
                raise PassFailedException(f"{self.name}: nn.linear: {e}") from None
            self.split(fc1, gelu, fc2, sizes, self.order)

    @staticmethod
    def split(
        fc1: nn.LinearOp, gelu: nn.GeluOp, fc2: nn.LinearOp, sizes: list[int], order: str = "stages"
    ) -> None:
        block = fc2.parent_block()
        x, w1 = fc1.input, fc1.weight
        b1 = fc1.operands[2] if len(fc1.operands) > 2 else None
        w2 = fc2.weight
        b2 = fc2.operands[2] if len(fc2.operands) > 2 else None
        t = fc1.results[0].type.get_shape()[0]
        d_in = w1.type.get_shape()[1]
        d_out = w2.type.get_shape()[0]
        et1, et2 = fc1.results[0].type.element_type, fc2.results[0].type.element_type
        # Per part: its fc1 (with the weight / bias slices), its gelu, its fc2 (with the weight slice).
        parts: list[tuple[list, list, list]] = []
        partial, f0 = [], 0
        for i, n in enumerate(sizes):
            w1_i = nn.SliceOp(w1, (f0, 0), TensorType(w1.type.element_type, (n, d_in)))
            ops = [w1_i]
            b1_i = None
            if b1 is not None:
                b1_i = nn.SliceOp(b1, (f0,), TensorType(b1.type.element_type, (n,)))
                ops.append(b1_i)
            h_i = nn.LinearOp(x, w1_i.result, b1_i.result if b1_i else None, TensorType(et1, (t, n)))
            g_i = nn.GeluOp(
                h_i.results[0], gelu.approximate.data, TensorType(gelu.results[0].type.element_type, (t, n))
            )
            w2_i = nn.SliceOp(w2, (0, f0), TensorType(w2.type.element_type, (d_out, n)))
            y_i = nn.LinearOp(
                g_i.results[0], w2_i.result, b2 if i == 0 else None, TensorType(et2, (t, d_out))
            )
            parts.append(([*ops, h_i], [g_i], [w2_i, y_i]))
            partial.append(y_i.results[0])
            f0 += n
        if order == "stages":
            new = [o for stage in range(3) for part in parts for o in part[stage]]
        else:
            new = [o for part in parts for stage in part for o in stage]
        total = partial[0]
        for p in partial[1:]:
            add = nn.AddOp(total, p)
            new.append(add)
            total = add.results[0]
        block.insert_ops_before(new, fc2)
        hint = fc2.results[0].name_hint
        fc2.results[0].replace_all_uses_with(total)
        total.name_hint = hint
        for o in (fc2, gelu, fc1):
            o.detach()
            o.erase()
