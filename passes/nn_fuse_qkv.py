"""`nn-fuse-qkv`: one GEMM for the q, k and v projections of an attention.

The three projections of an encoder layer read the same normalised hidden state. As three `nn.linear` ops they
stream that activation through the AMP three times with a [D, D] weight each; as one linear over the concatenated
[3D, D] weight they stream it once, and the GEMM is three times wider, which tiles better. The pass rewrites

    q = linear(x, Wq, bq); k = linear(x, Wk, bk); v = linear(x, Wv, bv)

into

    W = concat(Wq, Wk, Wv, axis 0); b = concat(bq, bk, bv); y = linear(x, W, b)
    q = slice(y, [0, 0]); k = slice(y, [0, Dq]); v = slice(y, [0, Dq + Dk])

Groups are fused only when every member has the same input, weight and result element types, the same bias
presence and bias type. Inputs match if they are the same value, or identical unscaled `nn.cast`s of the same
value (as `nn-quantize-weights{activations=f16}` produces). FP8 weights (after `nn-quantize-weights`) are fused
only if they are `nn.cast`s with one scale: the cast then applies once to the concatenated f32 weights.

Options:
  require-attention (default true): fuse only linears that feed the query, key and value of one `nn.attention`.
      With false, any 2+ compatible linears sharing an input are fused.
  fuse-kv (default false): in attention mode, when only key and value share their input (the SigLIP MAP head,
      whose query projects the probe while key and value project the last hidden state), fuse that k/v pair.
      By default such attentions are left alone.

Works in every block, `nn.repeat` bodies included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.passes import ModulePass

from ipu.dialects import nn
from ipu.passes.nn_utils import can_hoist_before, hoist_before


def _input_key(value: SSAValue) -> object:
    """Identity of a linear's input up to duplicated unscaled casts (cast(x) and cast(x) read the same data)."""
    if isinstance(value, OpResult) and isinstance(value.op, nn.CastOp) and value.op.scale is None:
        return ("cast", _input_key(value.op.input), value.type)
    return value


def _fp8_cast(weight: SSAValue) -> nn.CastOp | None:
    owner = weight.owner
    return owner if isinstance(owner, nn.CastOp) and owner.scale is not None else None


def _signature(linear: nn.LinearOp) -> tuple | None:
    """What must agree between linears fused into one; None if this linear cannot be fused at all."""
    if linear.groups:
        return None  # a grouped linear's columns read different rows of x
    w = linear.weight.type
    assert isinstance(w, TensorType)
    if isinstance(w.element_type, nn.FP8_TYPES):
        cast = _fp8_cast(linear.weight)
        if cast is None:
            return None  # an FP8 weight of unknown scale: concatenating it could mix scales
        fp8 = (cast.fp8_scale, cast.input.type.element_type)
    else:
        fp8 = None
    bias = None if linear.bias is None else linear.bias.type.element_type
    return (
        _input_key(linear.input),
        linear.input.type,
        w.element_type,
        w.get_shape()[1],
        fp8,
        linear.bias is not None,
        bias,
        linear.result.type.element_type,
    )


def _first_in_block(ops: Sequence[Operation]) -> Operation:
    first = ops[0]
    for op in ops[1:]:
        if op.is_before_in_block(first):
            first = op
    return first


def _concat(values: Sequence[SSAValue], anchor: Operation) -> SSAValue:
    types = [v.type for v in values]
    assert all(isinstance(t, TensorType) for t in types)
    shape = list(types[0].get_shape())
    shape[0] = sum(t.get_shape()[0] for t in types)
    op = nn.ConcatOp(values, 0, TensorType(types[0].element_type, shape))
    anchor.parent_block().insert_op_before(op, anchor)
    return op.result


def fuse_linears(linears: Sequence[nn.LinearOp]) -> bool:
    """Replaces 2+ compatible linears sharing an input by one linear and slices. Returns False if not possible."""
    if len(linears) < 2 or len(set(linears)) != len(linears):
        return False
    block = linears[0].parent_block()
    if block is None or any(lin.parent_block() is not block for lin in linears):
        return False
    signatures = {_signature(lin) for lin in linears}
    if len(signatures) != 1 or None in signatures:
        return False

    # The fused ops go where the first projection was; weights and biases defined later move up (pure ops only).
    anchor = _first_in_block(linears)
    casts = [_fp8_cast(lin.weight) for lin in linears]
    quantized = all(c is not None for c in casts)
    # Quantized weights: concatenate the f32 weights, then cast once with the shared scale.
    weights = [c.input for c in casts] if quantized else [lin.weight for lin in linears]
    biases = [lin.bias for lin in linears if lin.bias is not None]
    # Each projection's weight then bias, so that hoisted parameters keep a readable order.
    operands = [v for pair in zip(weights, biases) for v in pair] if biases else weights
    if not all(can_hoist_before(v, anchor) for v in operands):
        return False
    for v in operands:
        hoist_before(v, anchor)

    if quantized:
        cat = _concat(weights, anchor)
        wt = linears[0].weight.type
        cast = nn.CastOp(cat, TensorType(wt.element_type, cat.type.get_shape()), casts[0].fp8_scale)
        block.insert_op_before(cast, anchor)
        weight = cast.result
    else:
        weight = _concat(weights, anchor)
    bias = _concat([lin.bias for lin in linears], anchor) if linears[0].bias is not None else None

    x = anchor.input  # the earliest linear's input dominates the anchor
    rows = list(x.type.get_shape()[:-1])
    out_type = linears[0].result.type.element_type
    fused = nn.LinearOp(x, weight, bias, TensorType(out_type, [*rows, weight.type.get_shape()[0]]))
    block.insert_op_before(fused, anchor)

    offset = 0
    for lin in linears:
        width = lin.weight.type.get_shape()[0]
        part = nn.SliceOp(fused.result, [0] * len(rows) + [offset], lin.result.type)
        block.insert_op_before(part, anchor)
        part.result.name_hint = lin.result.name_hint
        lin.result.replace_all_uses_with(part.result)
        offset += width
    leftovers = [lin.input.owner for lin in linears[1:]] + casts
    for lin in linears:
        block.erase_op(lin)
    # The per-projection weight casts and duplicate activation casts are now dead.
    for op in leftovers:
        if isinstance(op, nn.CastOp) and op.parent is not None and not op.result.uses:
            op.parent_block().erase_op(op)
    return True


def _projection(value: SSAValue) -> nn.LinearOp | None:
    owner = value.owner
    return owner if isinstance(owner, nn.LinearOp) else None


@dataclass(frozen=True)
class NNFuseQKVPass(ModulePass):
    """Fuses the q/k/v projections of each attention (or any linears sharing an input) into one linear."""

    name = "nn-fuse-qkv"

    require_attention: bool = True
    fuse_kv: bool = False

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.require_attention:
            self._fuse_attention_projections(op)
        else:
            self._fuse_shared_inputs(op)

    def _fuse_attention_projections(self, module: ModuleOp) -> None:
        for attention in [o for o in module.walk() if isinstance(o, nn.AttentionOp)]:
            q, k, v = (_projection(x) for x in (attention.query, attention.key, attention.value))
            if q is None or k is None or v is None:
                continue
            if not fuse_linears([q, k, v]) and self.fuse_kv:
                fuse_linears([k, v])

    def _fuse_shared_inputs(self, module: ModuleOp) -> None:
        for block in list(module.walk_blocks()):
            groups: dict[tuple, list[nn.LinearOp]] = {}
            for lin in block.ops:
                if isinstance(lin, nn.LinearOp) and (sig := _signature(lin)) is not None:
                    groups.setdefault(sig, []).append(lin)
            for group in groups.values():
                fuse_linears(group)
