"""`nn-hoist-stacked`: moves per-layer parameter preparation out of `nn.repeat` bodies onto the stacked operands.

After `nn-outline-repeat`, ops that derive a layer's weights from its parameters (the FP8/F16 casts of
`nn-quantize-weights`, the weight slices of `nn-split-mlp`) sit inside the loop body and act on iteration i's slice
of a stacked parameter. They are the same for every inference and the host folds them at upload, but inside the
body each iteration's result is a distinct value with no stacked form, and the stacked f32 parameter itself has no
device consumer. Hoisting gives each such value a stacked form that the planner places as one Repeat sequence:

    %r = nn.repeat 2 carried(%h) stacked(%w : tensor<2x1152x1152xf32>) {
    ^bb0(%x, %wi : tensor<1152x1152xf32>):
      %c = nn.cast %wi {scale = -4} : tensor<1152x1152xf32> -> tensor<1152x1152xf8E4M3FNUZ>
      ... nn.linear %x, %c ...

becomes

    %wc = nn.cast %w {scale = -4} : tensor<2x1152x1152xf32> -> tensor<2x1152x1152xf8E4M3FNUZ>
    %r = nn.repeat 2 carried(%h) stacked(%wc : tensor<2x1152x1152xf8E4M3FNUZ>) {
    ^bb0(%x, %ci : tensor<1152x1152xf8E4M3FNUZ>):
      ... nn.linear %x, %ci ...

Hoisted: `nn.cast` and `nn.slice` (offset 0 on the new leading dimension) whose operand is a stacked block
argument, repeatedly (a cast of a slice hoists too). A stacked operand left without uses in the body is dropped.
This is exact: a cast is element-wise and a slice of every member is the members' slices.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import BlockArgument, Operation
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from ipu.dialects import nn


def _stacked_form(op: Operation, stacked, count: int) -> Operation | None:
    """The op applied to the whole stacked operand, or None if it is not hoistable."""
    rt = op.results[0].type
    new_t = TensorType(rt.element_type, [count, *rt.get_shape()])
    if isinstance(op, nn.CastOp):
        return nn.CastOp(stacked, new_t, op.scale.value.data if op.scale is not None else None)
    if isinstance(op, nn.SliceOp):
        return nn.SliceOp(stacked, (0, *op.static_offsets), new_t)
    return None


def hoist(rep: nn.RepeatOp) -> nn.RepeatOp:
    """Hoists what can be hoisted from one repeat; returns the (possibly new) repeat op."""
    while True:
        block = rep.body.block
        nc = len(rep.carried)
        found = None
        for op in block.ops:
            x = op.operands[0] if op.operands else None
            if isinstance(x, BlockArgument) and x.block is block and x.index >= nc:
                new = _stacked_form(op, rep.stacked[x.index - nc], rep.iterations)
                if new is not None:
                    found = (op, new)
                    break
        if found is None:
            return rep
        op, new = found
        Rewriter.insert_op(new, InsertPoint.before(rep))
        # The hoisted value keeps a name (the op's, else the stacked argument's: `q_proj_weight`), which the
        # profile uses to name the operators that read it.
        hint = op.results[0].name_hint or op.operands[0].name_hint
        new.results[0].name_hint = hint
        arg = block.insert_arg(nn.RepeatOp.slice_type(new.results[0].type), len(block.args))
        arg.name_hint = hint
        op.results[0].replace_all_uses_with(arg)
        op.detach()
        op.erase()
        stacked = [*rep.stacked, new.results[0]]
        # Stacked slices without uses left: drop them with their operands.
        for a in [a for a in block.args[nc:] if not a.uses]:
            del stacked[a.index - nc]
            block.erase_arg(a)
        rebuilt = nn.RepeatOp(rep.iterations, list(rep.carried), stacked, rep.detach_region(rep.body))
        rebuilt.attributes.update(rep.attributes)
        for old_r, new_r in zip(rep.results, rebuilt.results):
            new_r.name_hint = old_r.name_hint
        Rewriter.replace_op(rep, rebuilt)
        rep = rebuilt


@dataclass(frozen=True)
class NNHoistStackedPass(ModulePass):
    """Moves casts and slices of stacked parameters out of `nn.repeat` bodies (see the module docstring)."""

    name = "nn-hoist-stacked"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for rep in [o for o in op.walk() if isinstance(o, nn.RepeatOp)]:
            hoist(rep)
