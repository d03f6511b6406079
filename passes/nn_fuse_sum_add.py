"""`nn-fuse-sum-add`: an f32 `nn.add` of a K split's sum folded into the sum as an addend.

    %s = nn.reduce_sum %p, %b : tensor<GxMxNxf16>, tensor<Nxf32> -> tensor<MxNxf32>
    %y = nn.add %a, %s : tensor<MxNxf32>, tensor<MxNxf32> -> tensor<MxNxf32>

becomes

    %y = nn.reduce_sum %p, %b addends(%a : tensor<MxNxf32>) : tensor<GxMxNxf16>, tensor<Nxf32> -> tensor<MxNxf32>

when the add is the sum's only reader, both operands have the result's shape (no broadcast) and %a is defined
before the sum. The same values: the sum is rounded to f32 as before and %a added in f32 (IEEE addition is
commutative, so `%a + %s` and `%s + %a` are the same bits); a fused sum can take the next add's addend too
(`((s + a0) + a1)`, the adds' order). The point is the device's work: the fused `ksum` kernel adds the addends
before it stores the sum (one pass over memory instead of a sum and an add per addend, and no buffer for the
plain sum), laid out as the sum's column blocks.

Option `addends` chooses which adds are folded, by the addend's producer, since tile-plan lays an addend out as
the sum's result and an addend computed elsewhere then crosses the exchange:

- "sums" (default): the addend is itself a K split's sum (an `nn.reduce_sum`, fused or not): So400m's two MLP
  parts (`nn-split-mlp`), whose sums lie in the same column blocks: nothing moves;
- "loops": as "sums", and an addend that is a value a layer loop carries (a carried block argument of an
  `nn.repeat` body: the residual stream). tile-plan (option `carried`) then keeps the carried value in the sum's
  column blocks where the sums that read and yield it lie in the same blocks, so that it moves no more than
  without the fold: So400m's residual adds (out_proj's sum + the stream, then fc2's sums + that sum) run inside
  the sums, and only the layer norms gather the stream into rows. Where the sums lie in other blocks, each fold
  moves the stream once more per layer (`ipu-compile-pipeline{sum_addends=auto}` tries this on a copy and takes
  "sums" there). In straight-line code (one layer, no loop) the stream's adds stay adds;
- "any": every such add, the residual stream's too, in or out of a loop;
- "none": the pass does nothing.

Option `max_addends` (default 2, the fused kernel's `ksum.MAX_ADDENDS`): addends per sum; the lowering adds
more, or those of sums the fused kernel does not take, with one `add_f32` call each. Run it after `nn-split-k`
and `nn-fuse-sum-activation`, before tile-plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float32Type, ModuleOp, TensorType
from xdsl.ir import BlockArgument, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from ipu.dialects import nn

ADDEND_POLICIES = ("loops", "sums", "any", "none")


def _defined_before(v: SSAValue, op: nn.ReduceSumOp) -> bool:
    """v (an operand of an add after op in op's block) is available at op: the result of an op before op in that
    block, or a block argument or a value from an enclosing block (which dominate the whole block)."""
    block = op.parent_block()
    if isinstance(v, OpResult) and v.op.parent_block() is block:
        return block.get_operation_index(v.op) < block.get_operation_index(op)
    return True


def _loop_carried(v: SSAValue) -> bool:
    """v is a value a layer loop carries: a block argument of an `nn.repeat` body for one of its carried values."""
    if not isinstance(v, BlockArgument):
        return False
    loop = v.block.parent_op()
    return isinstance(loop, nn.RepeatOp) and v.index < len(loop.carried)


@dataclass
class FuseSumAdd(RewritePattern):
    addends: str
    max_addends: int

    def _sum(self, v: SSAValue) -> nn.ReduceSumOp | None:
        """v's K-split sum, if the add may fold into it: f32, no activation, the add its only reader, room for an
        addend."""
        s = v.owner if isinstance(v, OpResult) else None
        if not isinstance(s, nn.ReduceSumOp) or s.activation is not None or len(list(v.uses)) != 1:
            return None
        if len(s.addends) >= self.max_addends:
            return None
        return s

    def _addend_ok(self, a: SSAValue, s: nn.ReduceSumOp) -> bool:
        is_sum = isinstance(getattr(a, "owner", None), nn.ReduceSumOp)
        if self.addends == "sums" and not is_sum:
            return False
        if self.addends == "loops" and not (is_sum or _loop_carried(a)):
            return False
        return _defined_before(a, s)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.AddOp, rewriter: PatternRewriter) -> None:
        rt = op.result.type
        if not (isinstance(rt, TensorType) and isinstance(rt.element_type, Float32Type)):
            return
        if op.lhs.type != rt or op.rhs.type != rt:
            return
        # The later of two sums takes the earlier as its addend (the earlier is then defined before it).
        for v, a in ((op.rhs, op.lhs), (op.lhs, op.rhs)):
            s = self._sum(v)
            if s is not None and s.result.type == rt and self._addend_ok(a, s):
                break
        else:
            return
        fused = nn.ReduceSumOp(s.input, rt, s.bias, None, [*s.addends, a])
        rewriter.insert(fused, InsertPoint.before(s))
        fused.result.name_hint = op.result.name_hint or s.result.name_hint
        rewriter.replace(op, [], [fused.result])
        rewriter.erase(s)


@dataclass(frozen=True)
class NNFuseSumAddPass(ModulePass):
    """Fold f32 adds of a K split's sum into the sum as addends (see the module docstring)."""

    name = "nn-fuse-sum-add"

    addends: str = "sums"
    max_addends: int = 2

    def __post_init__(self) -> None:
        if self.addends not in ADDEND_POLICIES:
            raise ValueError(
                f"{self.name}: option 'addends' must be one of {', '.join(ADDEND_POLICIES)}, got {self.addends!r}"
            )
        if self.max_addends < 1:
            raise ValueError(f"{self.name}: option 'max_addends' must be >= 1, got {self.max_addends}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.addends == "none":
            return
        PatternRewriteWalker(
            FuseSumAdd(self.addends, self.max_addends), apply_recursively=False
        ).rewrite_module(op)
