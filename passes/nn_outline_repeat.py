"""`nn-outline-repeat`: folds N identical unrolled encoder layers into one `nn.repeat N` over stacked parameters.

The builder unrolls the encoder (27 layers for So400m). Every lower level wants the loop instead: one layer's code
on the device, its weights streamed per iteration. This pass recovers the loop from the unrolled IR:

1. Layer parameters are the `nn.param`s named `<prefix>.<i>.<suffix>`. Every layer must have the same suffixes with
   the same types, and the indices must be 0..N-1 with N >= min-layers.
2. Layer 0 (the template) is the set of ops that depend on a layer-0 parameter but not on a layer-1 parameter.
   It must have exactly one value used after it (the next hidden state) and, besides its own parameters and
   values computed from shared parameters only, exactly one input (the hidden state it receives).
3. Each layer i >= 1 is found by walking the template in order under a mapping (template input -> layer i's input,
   i.e. layer i-1's output; `<prefix>.0.<s>` -> `<prefix>.i.<s>`; shared values -> themselves): each template op
   must have a counterpart among the users of its mapped operands with the same name, properties, attributes,
   result types and mapped operands. Layer i's values may be used only inside layer i, except its output. This
   proves the layers structurally identical, and finds the last layer, which has no "next layer" to cut it off.
4. The rewrite: one `nn.param "<prefix>.*.<suffix>" : tensor<N x ...>` per parameter used by the template, in
   layer 0's parameter order; an `nn.repeat N` carrying the hidden state whose body is the template cloned with
   each parameter replaced by its stacked slice; the layers' ops and per-layer parameters are erased.

Ops derived from a layer's parameters (casts from `nn-quantize-weights`, concats from `nn-fuse-qkv`) belong to the
layer, so they move into the body and act on the stacked slices: the pass works before and after those passes.

If the layers are not identical the IR is left unchanged; with `strict=true` the pass fails instead, naming the
first op that differs. IR without layer parameters is never an error. One layer (N = 1) is never outlined: there is
no second layer to tell where the first one ends.

Options: prefix (default "encoder.layers"), min-layers (default 2, at least 2), strict (default false).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.dialects.func import FuncOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ipu.dialects import nn
from ipu.passes.nn_utils import ancestor_in_block, is_param_derived, op_positions


class NotOutlinable(Exception):
    """Why the layers cannot be outlined; reported only in strict mode."""


@dataclass
class _Layer:
    params: dict[str, nn.ParamOp]  # suffix -> param op
    ops: list[Operation] = field(default_factory=list)  # in block order, params excluded
    input: SSAValue | None = None
    output: SSAValue | None = None


def _describe(op: Operation) -> str:
    """A short, readable name for an op in diagnostics: its name, first result hint and types."""
    hint = next((f"%{r.name_hint} = " for r in op.results if r.name_hint), "")
    types = ", ".join(str(r.type) for r in op.results)
    return f"{hint}{op.name}{' -> ' + types if types else ''}"


def _forward_slice(roots: Iterable[Operation], block: Block) -> set[Operation]:
    """Every op of `block` that (transitively) uses a result of `roots`; uses in nested regions count for their
    ancestor in the block."""
    seen: set[Operation] = set()
    work = list(roots)
    while work:
        op = work.pop()
        for result in op.results:
            for use in result.uses:
                user = ancestor_in_block(use.operation, block)
                if user is not None and user not in seen:
                    seen.add(user)
                    work.append(user)
    return seen


def _same_op(template: Operation, candidate: Operation) -> bool:
    return (
        candidate.name == template.name
        and candidate.properties == template.properties
        and candidate.attributes == template.attributes
        and [r.type for r in candidate.results] == [r.type for r in template.results]
        and len(candidate.operands) == len(template.operands)
        and not candidate.regions
    )


class _Outliner:
    def __init__(self, block: Block, prefix: str, min_layers: int):
        self.block = block
        self.prefix = prefix
        self.min_layers = min_layers
        self.pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)\.(.+)$")

    # -- analysis ---------------------------------------------------------------------------------------------

    def collect_layers(self) -> list[_Layer] | None:
        """Layer parameters by index; None if the block has none (nothing to do)."""
        by_index: dict[int, dict[str, nn.ParamOp]] = {}
        for op in self.block.ops:
            if isinstance(op, nn.ParamOp) and (m := self.pattern.match(op.param_name)):
                params = by_index.setdefault(int(m.group(1)), {})
                if m.group(2) in params:
                    raise NotOutlinable(f"parameter {op.param_name!r} is defined twice")
                params[m.group(2)] = op
        if not by_index:
            return None
        n = len(by_index)
        if sorted(by_index) != list(range(n)):
            raise NotOutlinable(f"layer indices {sorted(by_index)} are not 0..{n - 1}")
        if n < self.min_layers:
            raise NotOutlinable(f"{n} layer(s) found, fewer than min-layers = {self.min_layers}")
        reference = {s: p.result.type for s, p in by_index[0].items()}
        for i in range(1, n):
            got = {s: p.result.type for s, p in by_index[i].items()}
            if got != reference:
                diff = sorted(set(got.items()) ^ set(reference.items()), key=str)[0]
                raise NotOutlinable(
                    f"layer {i} parameters differ from layer 0's: {self.prefix}.{i}.{diff[0]} ({diff[1]})"
                )
        return [_Layer(by_index[i]) for i in range(n)]

    def find_template(self, layers: list[_Layer]) -> None:
        """Layer 0's ops, input and output (module docstring, step 2)."""
        layer0, layer1 = layers[0], layers[1]
        core = _forward_slice(layer0.params.values(), self.block) - _forward_slice(
            layer1.params.values(), self.block
        )
        if any(isinstance(op, nn.ParamOp) for op in core) or any(op.regions for op in core):
            raise NotOutlinable("layer 0 contains parameters or ops with regions")
        positions = op_positions(self.block)
        layer0.ops = sorted(core, key=positions.__getitem__)

        own_params = {p.result for p in layer0.params.values()}
        inputs: list[SSAValue] = []
        outputs: list[SSAValue] = []
        for op in layer0.ops:
            for v in op.operands:
                external = v.owner not in core and v not in own_params
                if external and not is_param_derived(v) and v not in inputs:
                    inputs.append(v)
            for r in op.results:
                if any(ancestor_in_block(u.operation, self.block) not in core for u in r.uses):
                    outputs.append(r)
        if len(inputs) != 1:
            raise NotOutlinable(f"layer 0 has {len(inputs)} activation inputs, expected 1 (the hidden state)")
        if len(outputs) != 1:
            raise NotOutlinable(
                f"layer 0 has {len(outputs)} values used after it, expected 1 (the hidden state)"
            )
        layer0.input, layer0.output = inputs[0], outputs[0]
        for p in layer0.params.values():
            for u in p.result.uses:
                if ancestor_in_block(u.operation, self.block) not in core:
                    raise NotOutlinable(
                        f"layer 0: parameter {p.param_name!r} is used outside the layer by {_describe(u.operation)}"
                    )

    def match_layer(self, template: _Layer, layer: _Layer, index: int, layer_input: SSAValue) -> None:
        """Finds `layer`'s ops as the image of the template's (module docstring, step 3)."""
        mapping: dict[SSAValue, SSAValue] = {template.input: layer_input}
        for suffix, p in template.params.items():
            mapping[p.result] = layer.params[suffix].result
        positions = op_positions(self.block)
        taken: set[Operation] = set()

        def image(v: SSAValue) -> SSAValue:
            return mapping.get(v, v)  # values not in the template (shared ones) map to themselves

        for t in template.ops:
            wanted = [image(v) for v in t.operands]
            candidates: set[Operation] = set()
            for v in wanted:
                candidates |= {u.operation for u in v.uses}
            match = None
            for c in sorted(
                (c for c in candidates if c.parent_block() is self.block), key=positions.__getitem__
            ):
                if c not in taken and _same_op(t, c) and list(c.operands) == wanted:
                    match = c
                    break
            if match is None:
                raise NotOutlinable(f"layer {index}: no op matches layer 0's {_describe(t)}")
            taken.add(match)
            layer.ops.append(match)
            for tr, cr in zip(t.results, match.results):
                mapping[tr] = cr

        layer.input, layer.output = layer_input, mapping[template.output]
        # Only the output may escape the layer; its parameters must serve only it.
        for op in layer.ops:
            for r in op.results:
                if r is layer.output:
                    continue
                for u in r.uses:
                    if ancestor_in_block(u.operation, self.block) not in taken:
                        raise NotOutlinable(
                            f"layer {index}: {_describe(op)} is used outside the layer by {_describe(u.operation)}"
                        )
        for p in layer.params.values():
            for u in p.result.uses:
                if ancestor_in_block(u.operation, self.block) not in taken:
                    raise NotOutlinable(
                        f"layer {index}: parameter {p.param_name!r} is used outside the layer by "
                        f"{_describe(u.operation)}"
                    )

    # -- rewrite ----------------------------------------------------------------------------------------------

    def rewrite(self, layers: list[_Layer]) -> None:
        template, last = layers[0], layers[-1]
        n = len(layers)
        used = [
            s
            for s, p in sorted(template.params.items(), key=lambda sp: op_positions(self.block)[sp[1]])
            if p.result.uses
        ]
        anchor = last.output.owner  # every use of the final hidden state comes after it
        assert isinstance(anchor, Operation)

        stacked: list[SSAValue] = []
        for suffix in used:
            t = template.params[suffix].result.type
            assert isinstance(t, TensorType)
            param = nn.ParamOp(f"{self.prefix}.*.{suffix}", TensorType(t.element_type, [n, *t.get_shape()]))
            param.result.name_hint = "layers_" + re.sub(r"\W", "_", suffix.replace("self_attn.", ""))
            self.block.insert_op_before(param, anchor)
            stacked.append(param.result)

        body = Block(arg_types=[template.input.type] + [nn.RepeatOp.slice_type(v.type) for v in stacked])
        body.args[0].name_hint = "h"
        mapper: dict[SSAValue, SSAValue] = {template.input: body.args[0]}
        for suffix, arg in zip(used, body.args[1:]):
            mapper[template.params[suffix].result] = arg
            arg.name_hint = re.sub(r"\W", "_", suffix.replace("self_attn.", ""))
        for op in template.ops:
            body.add_op(op.clone(mapper, clone_name_hints=False))  # layer-0 names would mislead
        body.add_op(nn.YieldOp([mapper[template.output]]))

        repeat = nn.RepeatOp(n, [template.input], stacked, [body])
        self.block.insert_op_before(repeat, anchor)
        last.output.replace_all_uses_with(repeat.res[0])
        repeat.res[0].name_hint = last.output.name_hint

        # Every layer op now feeds only layer ops: erase them latest first, then the per-layer parameters.
        positions = op_positions(self.block)
        dead = [op for layer in layers for op in layer.ops]
        for op in sorted(dead, key=positions.__getitem__, reverse=True):
            self.block.erase_op(op)
        for layer in layers:
            for p in layer.params.values():
                if not p.result.uses:
                    self.block.erase_op(p)


@dataclass(frozen=True)
class NNOutlineRepeatPass(ModulePass):
    """Replaces the unrolled, structurally identical encoder layers by one `nn.repeat` over stacked parameters."""

    name = "nn-outline-repeat"

    prefix: str = "encoder.layers"
    min_layers: int = 2
    strict: bool = False

    def __post_init__(self) -> None:
        if self.min_layers < 2:
            raise ValueError(f"{self.name}: option 'min-layers' must be at least 2, got {self.min_layers}")
        if not self.prefix:
            raise ValueError(f"{self.name}: option 'prefix' must not be empty")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for func in [f for f in op.walk() if isinstance(f, FuncOp)]:
            if not func.body.blocks:
                continue
            block = func.body.block
            try:
                self._outline(block)
            except NotOutlinable as e:
                if self.strict:
                    raise PassFailedException(
                        f"{self.name}: cannot outline the layers of @{func.sym_name.data}: {e}"
                    ) from None

    def _outline(self, block: Block) -> None:
        outliner = _Outliner(block, self.prefix, self.min_layers)
        layers = outliner.collect_layers()
        if layers is None:
            return
        # All analysis happens before the first change, so a failure leaves the IR untouched.
        outliner.find_template(layers)
        for i in range(1, len(layers)):
            outliner.match_layer(layers[0], layers[i], i, layers[i - 1].output)
        outliner.rewrite(layers)
