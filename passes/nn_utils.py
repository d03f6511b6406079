"""Helpers shared by the `nn`-level passes: parameter provenance, op ordering and hoisting within a block."""

from __future__ import annotations

import re

from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.traits import Pure
from xdsl.utils.exceptions import PassFailedException

from ipu.dialects import nn

# Ops that only move or reinterpret data: a value they compute from parameters is itself a parameter (it can be
# prepared once, off the inference path).
DATA_MOVEMENT_OPS = (nn.ReshapeOp, nn.SliceOp, nn.ConcatOp, nn.TransposeOp)


def is_param_derived(value: SSAValue, _seen: dict[SSAValue, bool] | None = None) -> bool:
    """True if `value` is computed only from parameters.

    That is: an `nn.param`; a reshape/slice/concat/transpose whose operands all are; or an `nn.repeat` body
    argument that is iteration i's slice of a stacked operand that is.
    """
    seen = {} if _seen is None else _seen
    if value in seen:
        return seen[value]
    result = False
    if isinstance(value, OpResult):
        op = value.op
        if isinstance(op, nn.ParamOp):
            result = True
        elif isinstance(op, DATA_MOVEMENT_OPS):
            result = all(is_param_derived(v, seen) for v in op.operands)
    elif isinstance(value, BlockArgument):
        repeat = value.block.parent_op()
        if isinstance(repeat, nn.RepeatOp) and value.index >= len(repeat.carried):
            result = is_param_derived(repeat.stacked[value.index - len(repeat.carried)], seen)
    seen[value] = result
    return result


def param_names(value: SSAValue, through_casts: bool = False) -> list[str]:
    """Names of the `nn.param`s a parameter-derived value is computed from (through data movement and the
    stacked operands of `nn.repeat` body arguments; with through_casts, through `nn.cast` too: a quantized
    weight's parameter)."""
    names, todo, seen = [], [value], set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, OpResult):
            if isinstance(v.op, nn.ParamOp):
                names.append(v.op.param_name)
            elif isinstance(v.op, DATA_MOVEMENT_OPS) or (through_casts and isinstance(v.op, nn.CastOp)):
                todo.extend(v.op.operands)
        elif isinstance(v, BlockArgument):
            repeat = v.block.parent_op()
            if isinstance(repeat, nn.RepeatOp) and v.index >= len(repeat.carried):
                todo.append(repeat.stacked[v.index - len(repeat.carried)])
    return names


def op_positions(block: Block) -> dict[Operation, int]:
    """Each op of the block -> its index, for ordering ops without repeated linear scans."""
    return {op: i for i, op in enumerate(block.ops)}


def ancestor_in_block(op: Operation, block: Block) -> Operation | None:
    """The op of `block` that is `op` or contains it, or None if `op` is not nested in `block`."""
    current: Operation | None = op
    while current is not None and current.parent_block() is not block:
        current = current.parent_op()
    return current


def hoist_before(value: SSAValue, anchor: Operation) -> bool:
    """Moves the pure ops computing `value` above `anchor` (same block) so that `value` dominates it.

    Values defined outside anchor's block, block arguments and ops already above the anchor need nothing.
    Returns False (having moved nothing that matters for correctness: moving a pure op earlier past ops that do
    not use it is always legal) if an impure op or one with regions stands in the way.
    """
    block = anchor.parent_block()
    if not isinstance(value, OpResult) or value.op.parent_block() is not block or block is None:
        return True
    op = value.op
    if op.is_before_in_block(anchor):
        return True
    if not op.has_trait(Pure) or op.regions:
        return False
    if not all(hoist_before(v, anchor) for v in op.operands):
        return False
    op.detach()
    block.insert_op_before(op, anchor)
    return True


def can_hoist_before(value: SSAValue, anchor: Operation) -> bool:
    """Whether `hoist_before(value, anchor)` would succeed, without moving anything."""
    block = anchor.parent_block()
    if not isinstance(value, OpResult) or value.op.parent_block() is not block or block is None:
        return True
    op = value.op
    if op is anchor:
        return False
    if op.is_before_in_block(anchor):
        return True
    if not op.has_trait(Pure) or op.regions:
        return False
    return all(can_hoist_before(v, anchor) for v in op.operands)


def weight_named(lin: Operation, substrings) -> bool:
    """Whether the weight of linear `lin` comes from a parameter (through casts) whose name contains one of
    `substrings` (the `keep_f16` / `only` / `fp8_only` options' matching)."""
    return any(s in n for n in param_names(lin.weight, through_casts=True) for s in substrings)


def refuse_unknown_names(where: str, option: str, wanted, names) -> None:
    """PassFailedException naming the entries of `wanted` that are part of none of the weight parameter `names`
    (a typo would otherwise quietly leave its linear as it was), with the module's weight names."""
    unknown = [k for k in wanted if not any(k in n for n in names)]
    if unknown:
        known = sorted({re.sub(r"\.\d+\.", ".*.", n) for n in names})
        raise PassFailedException(
            f"{where}: option '{option}': {', '.join(repr(k) for k in unknown)} "
            f"{'is' if len(unknown) == 1 else 'are'} part of no linear's weight parameter name; the linear "
            f"weights of this module: {', '.join(known) if known else '(none)'}"
        )
