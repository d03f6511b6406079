"""`nn-fuse-sum-activation`: a K split's sum and the GELU that reads it as one op.

    %s = nn.reduce_sum %p, %b : tensor<GxMxNxf16>, tensor<Nxf16> -> tensor<MxNxf16>
    %g = nn.gelu %s "tanh" : tensor<MxNxf16> -> tensor<MxNxf16>

becomes

    %g = nn.reduce_sum %p, %b {activation = "gelu_tanh"} : tensor<GxMxNxf16>, tensor<Nxf16> -> tensor<MxNxf16>

when the GELU is the sum's only reader. The same values (the GELU of the f16 sum, rounded as the separate ops
round); the point is the device's work: the fused `ksum` kernel computes the GELU in registers before it stores the
sum (one pass over memory instead of two, and one buffer fewer), So400m's fc1 parts after `nn-split-k`. Only f16
results: the device's GELU (rowwise `gelu`) works in f16. Run it after `nn-split-k` (and
`nn-quantize-activations`), before tile-plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float16Type, ModuleOp, StringAttr, TensorType
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from ipu.dialects import nn


class FuseSumGelu(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.GeluOp, rewriter: PatternRewriter) -> None:
        total = op.input.owner
        if not isinstance(total, nn.ReduceSumOp) or total.activation is not None:
            return
        if op.approximate.data != "tanh" or len(list(total.result.uses)) != 1:
            return
        rt = total.result.type
        if rt != op.result.type or not (
            isinstance(rt, TensorType) and isinstance(rt.element_type, Float16Type)
        ):
            return
        total.properties["activation"] = StringAttr(f"gelu_{op.approximate.data}")
        if op.result.name_hint:  # the fused value is the GELU's
            total.result.name_hint = op.result.name_hint
        rewriter.replace(op, [], [total.result])
        rewriter.handle_operation_modification(total)


@dataclass(frozen=True)
class NNFuseSumActivationPass(ModulePass):
    """Fuse a K split's f16 sum with the tanh GELU that is its only reader (`nn.reduce_sum {activation}`)."""

    name = "nn-fuse-sum-activation"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(FuseSumGelu(), apply_recursively=False).rewrite_module(op)
