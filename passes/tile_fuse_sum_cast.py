"""`tile-fuse-sum-cast`: a planned K split's f16 sum and the FP8 cast that is its only reader as one op.

    %s = nn.reduce_sum %p, %b {activation = "gelu_tanh", tile.plan = ..., tile.layout = L16} : ... -> f16
    %c = nn.cast %s {scale = 0, tile.plan = #tile.map<elementwise>, tile.layout = L8} : f16 -> f8E4M3FNUZ

becomes

    %c = nn.reduce_sum %p, %b {activation = "gelu_tanh", scale = 0, tile.plan = ..., tile.layout = L8} : ... -> f8E4M3FNUZ

The same values (the f16 sum, after its GELU, cast at the cast's scale: `nn.reduce_sum`'s FP8 result); the fused
`ksum` converts two units at a time with one `f16v8tof8` and stores FP8 (So400m's GELU sums of fc1 read by fc2's
FP8 GEMMs: the separate cast's pass over memory and its f16 buffer go). It runs after tile-plan because whether
the kernel takes a sum depends on its layout: the cast must read the sum where it lies (no relayout between
them), and every result block must be whole pairs of units (a multiple of 8 elements; with a bias, rows of a
multiple of 8 too), of contiguous partial blocks (not the strided q / k / v panels), at most `ksum.MAX_PARTS` of
them; other sums keep their cast. Option `enable` (default true).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import Float16Type, ModuleOp, TensorType
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from ipu.dialects import nn
from ipu.dialects import tile as tl


def fusable(s: nn.ReduceSumOp, cast: nn.CastOp) -> bool:
    """Whether the fused `ksum` takes the planned sum s with its FP8 cast (see the module docstring)."""
    from ipu.backend.kernels import ksum as ks

    rt, ct = s.result.type, cast.result.type
    if not (isinstance(rt, TensorType) and isinstance(rt.element_type, Float16Type)):
        return False
    if not isinstance(ct.element_type, nn.FP8_TYPES) or s.addends or len(list(s.result.uses)) != 1:
        return False
    if not isinstance(s.input.type.element_type, Float16Type):
        return False
    lay, clay = s.attributes.get(tl.LAYOUT_ATTR), cast.attributes.get(tl.LAYOUT_ATTR)
    xl = tl.layout_of(s.input)
    if not isinstance(lay, tl.LayoutAttr) or not isinstance(clay, tl.LayoutAttr) or xl is None:
        return False
    if not isinstance(s.attributes.get(tl.PLAN_ATTR), tl.MapPlanAttr):
        return False
    if (lay.shape_, lay.block_, lay.order) != (clay.shape_, clay.block_, clay.order):
        return False
    if not np.array_equal(lay.table(), clay.table()) or lay.table().shape[1] != 1:
        return False
    if not 1 <= s.input.type.get_shape()[0] <= ks.MAX_PARTS:
        return False
    if len(xl.shape_) == 3 and xl.block_[-1] > lay.block_[-1]:  # strided partial rows (q / k / v panels)
        return False
    g = lay.geometry()
    elems = g.block_dims.prod(axis=1)
    if (elems % 8).any():
        return False
    return not (s.bias is not None and (g.block_dims[:, -1] % 8).any())


@dataclass(frozen=True)
class TileFuseSumCastPass(ModulePass):
    """Fold an FP8 cast into the planned K-split sum it reads (see the module docstring)."""

    name = "tile-fuse-sum-cast"

    enable: bool = True

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not self.enable:
            return
        for cast in [o for o in op.walk() if isinstance(o, nn.CastOp)]:
            s = cast.input.owner
            if not isinstance(s, nn.ReduceSumOp) or not fusable(s, cast):
                continue
            act = s.activation.data if s.activation is not None else None
            fused = nn.ReduceSumOp(s.input, cast.result.type, s.bias, act, (), cast.fp8_scale)
            for name, value in s.attributes.items():
                fused.attributes[name] = value
            fused.attributes[tl.LAYOUT_ATTR] = cast.attributes[tl.LAYOUT_ATTR]
            Rewriter.insert_op(fused, InsertPoint.before(s))
            fused.result.name_hint = cast.result.name_hint or s.result.name_hint
            cast.result.replace_all_uses_with(fused.result)
            Rewriter.erase_op(cast)
            Rewriter.erase_op(s)
