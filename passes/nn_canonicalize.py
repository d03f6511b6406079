"""`nn-canonicalize`: local simplifications of `nn` IR, then dead-code elimination.

Passes and the builder leave identity data movement behind (a reshape to the same shape, a slice of everything,
a transpose of a transpose); later levels would otherwise lower each one to a copy. The patterns:

  reshape x : T -> T                       => x
  reshape (reshape x : A -> B) : B -> C     => reshape x : A -> C   (=> x if A == C)
  transpose x perm = identity              => x
  transpose (transpose x p) q              => transpose x (p[q[i]])   (=> x if that is the identity)
  cast x : T -> T                          => x    (an FP8 -> same FP8 cast repeats the operand's scale)
  slice x offsets = 0 : T -> T             => x
  scale x by 1.0 : T -> T                  => x

Then every pure op whose results are unused is erased, except `nn.input`: a model input stays part of the
model's interface even if nothing reads it. (xDSL's `canonicalize` would erase it.)

The same patterns are available to xDSL's generic `canonicalize` pass through `NNCanonicalizationPatterns`, an op
trait the dialect can attach (see its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)
from xdsl.traits import HasCanonicalizationPatternsTrait, Pure

from ipu.dialects import nn


class FoldIdentityReshape(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ReshapeOp, rewriter: PatternRewriter) -> None:
        if op.input.type == op.result.type:
            rewriter.replace_op(op, [], [op.input])


class ComposeReshapes(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ReshapeOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if not isinstance(inner, nn.ReshapeOp):
            return
        if inner.input.type == op.result.type:
            rewriter.replace_op(op, [], [inner.input])
        else:
            rewriter.replace_op(op, nn.ReshapeOp(inner.input, op.result.type))


class FoldIdentityTranspose(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.TransposeOp, rewriter: PatternRewriter) -> None:
        if op.permutation == tuple(range(len(op.permutation))):
            rewriter.replace_op(op, [], [op.input])


class ComposeTransposes(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.TransposeOp, rewriter: PatternRewriter) -> None:
        inner = op.input.owner
        if not isinstance(inner, nn.TransposeOp):
            return
        # result[i] = inner_result[q[i]] = x[p[q[i]]]
        p, q = inner.permutation, op.permutation
        perm = tuple(p[i] for i in q)
        if perm == tuple(range(len(perm))):
            rewriter.replace_op(op, [], [inner.input])
        else:
            rewriter.replace_op(op, nn.TransposeOp(inner.input, perm, op.result.type))


class FoldIdentityCast(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.CastOp, rewriter: PatternRewriter) -> None:
        if op.input.type == op.result.type:
            rewriter.replace_op(op, [], [op.input])


class FoldFullSlice(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.SliceOp, rewriter: PatternRewriter) -> None:
        if op.input.type == op.result.type and not any(op.static_offsets):
            rewriter.replace_op(op, [], [op.input])


class FoldUnitScale(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: nn.ScaleOp, rewriter: PatternRewriter) -> None:
        if op.factor.value.data == 1.0 and op.input.type == op.result.type:
            rewriter.replace_op(op, [], [op.input])


PATTERNS: dict[type[Operation], tuple[RewritePattern, ...]] = {
    nn.ReshapeOp: (FoldIdentityReshape(), ComposeReshapes()),
    nn.TransposeOp: (FoldIdentityTranspose(), ComposeTransposes()),
    nn.CastOp: (FoldIdentityCast(),),
    nn.SliceOp: (FoldFullSlice(),),
    nn.ScaleOp: (FoldUnitScale(),),
}


class NNCanonicalizationPatterns(HasCanonicalizationPatternsTrait):
    """Makes xDSL's `canonicalize` apply this module's patterns to an nn op.

    To enable it, add `NNCanonicalizationPatterns()` to the `traits_def(...)` of ReshapeOp, TransposeOp, CastOp,
    SliceOp and ScaleOp in `ipu.dialects.nn` (imported lazily there to avoid an import cycle, e.g. via
    `lazy_traits_def`).
    """

    def get_patterns(self, op: type[Operation]) -> tuple[RewritePattern, ...]:
        return PATTERNS.get(op, ())

    @classmethod
    def get_canonicalization_patterns(cls) -> tuple[RewritePattern, ...]:
        return tuple(p for ps in PATTERNS.values() for p in ps)


def erase_dead_ops(module: ModuleOp) -> None:
    """Erases unused pure ops (nn.input excepted), innermost and latest first, until none is left."""
    changed = True
    while changed:
        changed = False
        for op in list(module.walk(reverse=True)):
            if (
                op.has_trait(Pure)
                and not isinstance(op, nn.InputOp)
                and not op.regions
                and op.parent is not None
                and all(not r.uses for r in op.results)
                and op.results
            ):
                op.parent_block().erase_op(op)
                changed = True


@dataclass(frozen=True)
class NNCanonicalizePass(ModulePass):
    """Folds identity reshapes/transposes/casts/slices/scales, composes chains of them, and erases dead ops."""

    name = "nn-canonicalize"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns = [p for ps in PATTERNS.values() for p in ps]
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns, dce_enabled=False)).rewrite_module(op)
        erase_dead_ops(op)
