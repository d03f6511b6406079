"""The `nn` dialect: a Vision Transformer as a graph of whole-tensor operators.

This is the top of the stack. It models no hardware: tensors are abstract (ranked, static shapes) and every op is
one whole operator (a GEMM, a layer norm, an attention block), never a per-tile piece. What it does record is the
*precision* of each tensor, because that is a decision of the model, not of the machine: element types are `f32`,
`f16`, `f8E4M3FNUZ` (Graphcore F143) and `f8E5M2FNUZ` (Graphcore F152). An FP8 tensor produced by `nn.cast`
carries a power-of-two scale: logical value = decode(bits) * 2^scale, as the IPU's QUARTER metadata defines it.

Weights never sit inline in the IR: `nn.param` names a parameter and a weights file binds it. Model inputs are
`nn.input`, named outputs `nn.output`. The encoder layers can be one `nn.repeat` region run N times over stacked
per-layer parameters, which every lower level keeps as a loop.

Weight layout follows PyTorch: `nn.linear` takes `weight` as [out, in] and computes x @ weight^T + bias.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    I64,
    DenseArrayBase,
    DictionaryAttr,
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float16Type,
    Float32Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    f32,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    lazy_traits_def,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasCanonicalizationPatternsTrait, HasParent, IsTerminator, Pure, RecursiveMemoryEffect
from xdsl.utils.exceptions import VerifyException

# Element types the IPU computes in (F16 and FP8 on the AMP, f32 for accumulation state and the reference).
SUPPORTED_ELEMENT_TYPES = (Float32Type, Float16Type, Float8E4M3FNUZType, Float8E5M2FNUZType)
FP8_TYPES = (Float8E4M3FNUZType, Float8E5M2FNUZType)

GELU_APPROXIMATIONS = ("tanh", "none")
SUM_ACTIVATIONS = ("gelu_tanh",)  # `nn.reduce_sum`'s optional activation


# --------------------------------------------------------------------------------------------------------------
# Helpers shared by the verifiers: every message names the op, the operand and the shapes involved.


def shape_str(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


def tensor_of(value: SSAValue, op: Operation, what: str) -> TensorType:
    t = value.type
    if not isinstance(t, TensorType):
        raise VerifyException(f"{op.name}: {what} must be a ranked tensor, got {t}")
    if not isinstance(t.element_type, SUPPORTED_ELEMENT_TYPES):
        raise VerifyException(
            f"{op.name}: {what} has element type {t.element_type}; expected one of f32, f16, f8E4M3FNUZ, f8E5M2FNUZ"
        )
    if any(d < 0 for d in t.get_shape()):
        raise VerifyException(f"{op.name}: {what} must have a static shape, got {t}")
    return t


def shape_of(value: SSAValue, op: Operation, what: str) -> tuple[int, ...]:
    return tuple(tensor_of(value, op, what).get_shape())


def require_same_shape(op: Operation, a: SSAValue, a_name: str, b: SSAValue, b_name: str) -> None:
    sa, sb = shape_of(a, op, a_name), shape_of(b, op, b_name)
    if sa != sb:
        raise VerifyException(
            f"{op.name}: operand '{a_name}' has shape {shape_str(sa)} but '{b_name}' has shape {shape_str(sb)}"
        )


def require_result_shape(op: Operation, result: SSAValue, expected: Sequence[int]) -> None:
    got = shape_of(result, op, "result")
    if tuple(got) != tuple(expected):
        raise VerifyException(
            f"{op.name}: result has shape {shape_str(got)} but the operands imply {shape_str(expected)}"
        )


def require_compute_result(op: Operation) -> None:
    """Arithmetic produces f32 or f16: an FP8 value needs a scale, which only `nn.cast` carries."""
    t = tensor_of(op.results[0], op, "result")
    if not is_float_compute(t):
        raise VerifyException(
            f"{op.name}: result element type {t.element_type} is not allowed; arithmetic results are f32 or f16 "
            "(produce FP8 with nn.cast, which carries the scale)"
        )


def is_float_compute(t: TensorType) -> bool:
    """Activations flow in f32 or f16; FP8 only as a GEMM operand."""
    return isinstance(t.element_type, Float32Type | Float16Type)


def int_array(values: Sequence[int]) -> DenseArrayBase:
    return DenseArrayBase.from_list(i64, list(values))


def tensor(shape: Sequence[int], element_type: Attribute = f32) -> TensorType:
    return TensorType(element_type, list(shape))


class NNCanonicalizationPatterns(HasCanonicalizationPatternsTrait):
    """Lets xDSL's generic `canonicalize` apply the nn folds of `ipu.passes.nn_canonicalize`."""

    def get_patterns(self, op):
        from ipu.passes.nn_canonicalize import PATTERNS  # lazy: the patterns import this module

        return PATTERNS.get(op, ())

    @classmethod
    def get_canonicalization_patterns(cls):
        from ipu.passes.nn_canonicalize import PATTERNS

        return tuple(p for ps in PATTERNS.values() for p in ps)


# --------------------------------------------------------------------------------------------------------------
# Sources and sinks


@irdl_op_definition
class InputOp(IRDLOperation):
    """A named model input (e.g. "pixel_values"), bound at run time.

    Deliberately not `Pure`: an input is part of the model's interface, so dead-code elimination keeps it even
    when nothing reads it.
    """

    name = "nn.input"
    sym = prop_def(StringAttr, prop_name="name")
    result = result_def(TensorType)
    assembly_format = "$name attr-dict `:` type($result)"

    def __init__(self, name: str, result_type: TensorType):
        super().__init__(properties={"name": StringAttr(name)}, result_types=[result_type])

    def verify_(self) -> None:
        tensor_of(self.result, self, "result")


@irdl_op_definition
class ParamOp(IRDLOperation):
    """A named parameter (e.g. "encoder.layers.q_proj.weight"), bound by a weights file.

    Parameters are resident for the whole program: uploaded once, used by every inference.
    """

    name = "nn.param"
    sym = prop_def(StringAttr, prop_name="name")
    # A parameter the host computes from others when it uploads them (`ipu.runtime.derived`): the recipe and its
    # arguments, e.g. {recipe = "probe_key_scores", query = "head.probe", ...}. Absent: a weights-file tensor.
    derived = opt_prop_def(DictionaryAttr, prop_name="derived")
    result = result_def(TensorType)
    assembly_format = "$name attr-dict `:` type($result)"
    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())

    def __init__(self, name: str, result_type: TensorType, derived: DictionaryAttr | None = None):
        props: dict[str, Attribute] = {"name": StringAttr(name)}
        if derived is not None:
            props["derived"] = derived
        super().__init__(properties=props, result_types=[result_type])

    @property
    def param_name(self) -> str:
        return self.sym.data

    def verify_(self) -> None:
        tensor_of(self.result, self, "result")
        if not self.sym.data:
            raise VerifyException("nn.param: the parameter name must not be empty")
        if self.derived is not None:
            _verify_derived(self)


def _verify_derived(op: ParamOp) -> None:
    """A derived parameter's spec (`ipu.runtime.derived`): a known recipe with plausible arguments."""
    import math

    from ipu.runtime.derived import RECIPES

    spec = op.derived.data
    what = f"nn.param {op.sym.data!r}: derived"
    recipe = spec.get("recipe")
    if not isinstance(recipe, StringAttr) or recipe.data not in RECIPES:
        raise VerifyException(f"{what}: 'recipe' must be one of {', '.join(RECIPES)}")
    if recipe.data == "probe_key_scores":
        heads, scale = spec.get("heads"), spec.get("scale")
        if not isinstance(heads, IntegerAttr) or heads.value.data < 1:
            raise VerifyException(f"{what}: 'heads' must be a positive integer, got {heads}")
        if not isinstance(scale, FloatAttr) or not math.isfinite(scale.value.data) or scale.value.data == 0:
            raise VerifyException(f"{what}: 'scale' must be a finite non-zero number, got {scale}")
        for key in ("query", "wq", "wk"):
            if not isinstance(spec.get(key), StringAttr):
                raise VerifyException(f"{what}: '{key}' must name a parameter")
        shape = shape_of(op.result, op, "result")
        if len(shape) != 2 or shape[0] != heads.value.data:
            raise VerifyException(
                f"{what}: the result must be [heads = {heads.value.data}, width], got {shape_str(shape)}"
            )


@irdl_op_definition
class OutputOp(IRDLOperation):
    """Marks a value as a named model output (e.g. "last_hidden_state")."""

    name = "nn.output"
    sym = prop_def(StringAttr, prop_name="name")
    value = operand_def(TensorType)
    assembly_format = "$name $value attr-dict `:` type($value)"

    def __init__(self, name: str, value: SSAValue):
        super().__init__(properties={"name": StringAttr(name)}, operands=[value])

    def verify_(self) -> None:
        tensor_of(self.value, self, "operand 'value'")


# --------------------------------------------------------------------------------------------------------------
# GEMMs


@irdl_op_definition
class LinearOp(IRDLOperation):
    """y = x @ weight^T + bias, weight in PyTorch [out, in] layout, over the last dimension of x.

    The weight may be FP8 (an `nn.cast` result) while x is f16: the GEMM multiplies in the operands' precisions and
    accumulates in the result's.
    """

    name = "nn.linear"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    # Grouped (H = row_groups): x [H, K], result [1, N]; output column n reads x's row n // (N / H) (the MAP
    # head's value linear after `nn-fold-probe-attention`: head h's columns from P_h x).
    row_groups = opt_prop_def(IntegerAttr[I64], prop_name="row_groups")
    result = result_def(TensorType)
    assembly_format = "$input `,` $weight (`,` $bias^)? attr-dict `:` type(operands) `->` type($result)"
    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())

    def __init__(
        self,
        x: SSAValue,
        weight: SSAValue,
        bias: SSAValue | None,
        result_type: TensorType,
        row_groups: int | None = None,
    ):
        props = {"row_groups": IntegerAttr(row_groups, i64)} if row_groups else {}
        super().__init__(
            operands=[x, weight, [bias] if bias is not None else []],
            result_types=[result_type],
            properties=props,
        )

    @property
    def groups(self) -> int:
        """The row groups H of a grouped linear, 0 for a plain one."""
        return self.row_groups.value.data if self.row_groups is not None else 0

    def verify_(self) -> None:
        xs = shape_of(self.input, self, "operand 'input'")
        ws = shape_of(self.weight, self, "operand 'weight'")
        if len(xs) < 1:
            raise VerifyException("nn.linear: operand 'input' must have rank >= 1")
        if len(ws) != 2:
            raise VerifyException(f"nn.linear: operand 'weight' must be [out, in], got shape {shape_str(ws)}")
        if self.groups:
            _verify_groups("nn.linear", self.groups, xs, ws)
        if ws[1] != xs[-1]:
            raise VerifyException(
                f"nn.linear: operand 'weight' has shape {shape_str(ws)} but operand 'input' has shape "
                f"{shape_str(xs)}: weight's in-dimension {ws[1]} must equal input's last dimension {xs[-1]}"
            )
        if self.bias is not None:
            bs = shape_of(self.bias, self, "operand 'bias'")
            if bs != (ws[0],):
                raise VerifyException(
                    f"nn.linear: operand 'bias' has shape {shape_str(bs)} but operand 'weight' has shape "
                    f"{shape_str(ws)}: expected bias shape {ws[0]}"
                )
        require_result_shape(self, self.result, (1, ws[0]) if self.groups else (*xs[:-1], ws[0]))
        if not is_float_compute(tensor_of(self.result, self, "result")):
            raise VerifyException("nn.linear: the result must be f32 or f16 (FP8 is an operand format only)")


def _verify_groups(name: str, h: int, xs, ws) -> None:
    if h <= 0 or len(xs) != 2 or xs[0] != h or ws[0] % h:
        raise VerifyException(
            f"{name}: row_groups = {h} needs an input of {h} rows and a weight whose {ws[0]} rows split into "
            f"{h} groups, got input {shape_str(xs)}"
        )


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """Batched matrix product over the last two dimensions: [..., M, K] x [..., K, N] -> [..., M, N].

    With `transpose_rhs`, rhs is [..., N, K] (as for q @ k^T).
    """

    name = "nn.matmul"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    transpose_rhs = opt_prop_def(IntegerAttr, prop_name="transpose_rhs")
    result = result_def(TensorType)
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"
    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue, result_type: TensorType, transpose_rhs: bool = False):
        props = {"transpose_rhs": IntegerAttr(1, 1)} if transpose_rhs else {}
        super().__init__(operands=[lhs, rhs], result_types=[result_type], properties=props)

    @property
    def rhs_transposed(self) -> bool:
        return self.transpose_rhs is not None and self.transpose_rhs.value.data != 0

    def verify_(self) -> None:
        require_compute_result(self)
        ls = shape_of(self.lhs, self, "operand 'lhs'")
        rs = shape_of(self.rhs, self, "operand 'rhs'")
        if len(ls) < 2 or len(rs) != len(ls):
            raise VerifyException(
                f"nn.matmul: operands must have equal rank >= 2, got 'lhs' {shape_str(ls)} and 'rhs' {shape_str(rs)}"
            )
        if ls[:-2] != rs[:-2]:
            raise VerifyException(
                f"nn.matmul: batch dimensions differ: 'lhs' {shape_str(ls)} and 'rhs' {shape_str(rs)}"
            )
        k_rhs, n = (rs[-1], rs[-2]) if self.rhs_transposed else (rs[-2], rs[-1])
        if ls[-1] != k_rhs:
            raise VerifyException(
                f"nn.matmul: contraction mismatch: 'lhs' has shape {shape_str(ls)} and 'rhs' has shape "
                f"{shape_str(rs)}{' (transposed)' if self.rhs_transposed else ''}: {ls[-1]} != {k_rhs}"
            )
        require_result_shape(self, self.result, (*ls[:-1], n))


@irdl_op_definition
class MatmulPartialsOp(IRDLOperation):
    """The partial products of a 2-D matmul whose contraction is split into chunks: lhs [M, K], rhs [K, N] ->
    [G, M, N] with result[g] = lhs[:, Kg] @ rhs[Kg, :] over Kg = [g * k_chunk, min(K, (g + 1) * k_chunk)),
    G = ceil(K / k_chunk); `nn.reduce_sum` of the result is lhs @ rhs (`nn-split-k`: the MAP head's P X, each
    chunk's [k_chunk, N] rows where the scores linear already holds them)."""

    name = "nn.matmul_partials"
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    k_chunk = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = (
        "$lhs `,` $rhs `k_chunk` `` `=` `` $k_chunk attr-dict `:` type(operands) `->` type($result)"
    )
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue, k_chunk: int, result_type: TensorType):
        super().__init__(
            operands=[lhs, rhs], properties={"k_chunk": IntegerAttr(k_chunk, i64)}, result_types=[result_type]
        )

    @property
    def chunk(self) -> int:
        return self.k_chunk.value.data

    def verify_(self) -> None:
        require_compute_result(self)
        ls = shape_of(self.lhs, self, "operand 'lhs'")
        rs = shape_of(self.rhs, self, "operand 'rhs'")
        if len(ls) != 2 or len(rs) != 2 or ls[1] != rs[0]:
            raise VerifyException(
                f"{self.name}: operands must be [M, K] and [K, N], got {shape_str(ls)} and {shape_str(rs)}"
            )
        kc = self.chunk
        if kc <= 0:
            raise VerifyException(f"{self.name}: k_chunk must be positive, got {kc}")
        require_result_shape(self, self.result, (-(-ls[1] // kc), ls[0], rs[1]))


@irdl_op_definition
class LinearPartialsOp(IRDLOperation):
    """The partial products of a linear whose contraction is split into chunks: x [M, K], weight [N, K] ->
    [G, M, N] with result[g] = x[:, Kg] @ weight[:, Kg]^T over Kg = [g * k_chunk, min(K, (g + 1) * k_chunk)),
    G = ceil(K / k_chunk). `nn.reduce_sum` of the result is x @ weight^T (the bias goes on the sum).

    Why: the AMP kernel costs its tile per 16 x 16 weight block almost whatever the rows; with K split, a tile's
    block has G times more rows or columns for the same MACs (few-row linears: the blocks spread over G times
    more tiles, each keeping its weight slice where it computes; many-row linears: more rows per weight block)
    (`nn-split-k`)."""

    name = "nn.linear_partials"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    k_chunk = prop_def(IntegerAttr[I64])
    # As `nn.linear`'s: x [H, K], result [G, 1, N], output column n from x's row n // (N / H).
    row_groups = opt_prop_def(IntegerAttr[I64], prop_name="row_groups")
    result = result_def(TensorType)
    assembly_format = (
        "$input `,` $weight `k_chunk` `` `=` `` $k_chunk attr-dict `:` type(operands) `->` type($result)"
    )
    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure())

    def __init__(
        self,
        x: SSAValue,
        weight: SSAValue,
        k_chunk: int,
        result_type: TensorType,
        row_groups: int | None = None,
    ):
        props = {"k_chunk": IntegerAttr(k_chunk, i64)}
        if row_groups:
            props["row_groups"] = IntegerAttr(row_groups, i64)
        super().__init__(operands=[x, weight], properties=props, result_types=[result_type])

    @property
    def chunk(self) -> int:
        return self.k_chunk.value.data

    @property
    def groups(self) -> int:
        return self.row_groups.value.data if self.row_groups is not None else 0

    def verify_(self) -> None:
        xs = shape_of(self.input, self, "operand 'input'")
        ws = shape_of(self.weight, self, "operand 'weight'")
        if len(xs) != 2 or len(ws) != 2:
            raise VerifyException(
                f"nn.linear_partials: operands must be [M, K] and [N, K], got {shape_str(xs)} and {shape_str(ws)}"
            )
        if ws[1] != xs[1]:
            raise VerifyException(
                f"nn.linear_partials: operand 'weight' has shape {shape_str(ws)} but operand 'input' has shape "
                f"{shape_str(xs)}: their K differ"
            )
        kc = self.chunk
        if kc <= 0:
            raise VerifyException(f"nn.linear_partials: k_chunk must be positive, got {kc}")
        if self.groups:
            _verify_groups("nn.linear_partials", self.groups, xs, ws)
        require_result_shape(self, self.result, (-(-xs[1] // kc), 1 if self.groups else xs[0], ws[0]))
        require_compute_result(self)


@irdl_op_definition
class ReduceSumOp(IRDLOperation):
    """Sum over the leading dimension: [G, ...] -> [...] (the partial products of `nn.linear_partials`), plus an
    optional bias over the last dimension (a linear's, added once to the sum), then an optional activation
    (`activation = "gelu_tanh"`: `nn.gelu "tanh"` of the sum in the result's type, `nn-fuse-sum-activation`),
    then optional addends: f32 tensors of the result's shape added to the f32 result in order, each sum rounded
    to f32 (`((sum + a0) + a1)`: the `nn.add`s `nn-fuse-sum-add` folds in, a residual stream's or the other MLP
    part's sum). An FP8 result (f16 partials; `scale` as `nn.cast`'s) is the f16 result (after the activation)
    cast to FP8: the `nn.cast` `tile-fuse-sum-cast` folds in."""

    name = "nn.reduce_sum"
    input = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    addends = var_operand_def(TensorType)
    activation = opt_prop_def(StringAttr)
    scale = opt_prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = (
        "$input (`,` $bias^)? (`addends` `(` $addends^ `:` type($addends) `)`)? attr-dict `:` type($input) "
        "(`,` type($bias)^)? `->` type($result)"
    )
    irdl_options = (ParsePropInAttrDict(), AttrSizedOperandSegments(as_property=True))
    traits = traits_def(Pure())

    def __init__(
        self,
        x: SSAValue,
        result_type: TensorType,
        bias: SSAValue | None = None,
        activation: str | None = None,
        addends: Sequence[SSAValue] = (),
        scale: int | None = None,
    ):
        props = {"activation": StringAttr(activation)} if activation else {}
        if scale is not None:
            props["scale"] = IntegerAttr(scale, i64)
        super().__init__(
            operands=[x, [bias] if bias is not None else [], list(addends)],
            result_types=[result_type],
            properties=props,
        )

    @property
    def gelu(self) -> str | None:
        """The GELU's approximation ("tanh") when the sum is followed by one, else None."""
        act = self.activation.data if self.activation is not None else None
        return act.removeprefix("gelu_") if act and act.startswith("gelu_") else None

    def verify_(self) -> None:
        xs = shape_of(self.input, self, "operand 'input'")
        if len(xs) < 2:
            raise VerifyException(f"nn.reduce_sum: operand 'input' must have rank >= 2, got {shape_str(xs)}")
        if self.bias is not None and (bs := shape_of(self.bias, self, "operand 'bias'")) != xs[-1:]:
            raise VerifyException(
                f"nn.reduce_sum: operand 'bias' has shape {shape_str(bs)}, expected [{xs[-1]}] (the last dimension)"
            )
        if self.activation is not None and self.activation.data not in SUM_ACTIVATIONS:
            raise VerifyException(
                f'nn.reduce_sum: activation must be one of {", ".join(SUM_ACTIVATIONS)}, got "{self.activation.data}"'
            )
        require_result_shape(self, self.result, xs[1:])
        rt = self.result.type
        fp8 = isinstance(rt, TensorType) and isinstance(rt.element_type, FP8_TYPES)
        if not fp8:
            require_compute_result(self)  # (an FP8 result carries its scale: below)
        for i, a in enumerate(self.addends):
            if not isinstance(rt, TensorType) or not isinstance(rt.element_type, Float32Type):
                raise VerifyException("nn.reduce_sum: addends need an f32 result")
            if a.type != rt:
                raise VerifyException(
                    f"nn.reduce_sum: addend #{i} has type {a.type}, expected the result's {rt}"
                )
        if self.addends and self.activation is not None:
            raise VerifyException("nn.reduce_sum: addends and an activation together are not defined")
        if self.scale is not None and not fp8:
            raise VerifyException(f"nn.reduce_sum: scale is only meaningful for an FP8 result, got {rt}")
        if fp8:
            xt = self.input.type
            if not isinstance(xt, TensorType) or not isinstance(xt.element_type, Float16Type) or self.addends:
                raise VerifyException("nn.reduce_sum: an FP8 result needs f16 partials and no addends")
            if not -32 <= self.fp8_scale <= 31:
                raise VerifyException(
                    f"nn.reduce_sum: FP8 scale {self.fp8_scale} is outside the metadata range [-32, 31]"
                )

    @property
    def fp8_scale(self) -> int:
        return 0 if self.scale is None else self.scale.value.data


# --------------------------------------------------------------------------------------------------------------
# Element-wise and normalisation


class _BinaryElementwise(IRDLOperation):
    """lhs and rhs of the same shape, or rhs broadcast along the leading dimensions of lhs (e.g. a bias row)."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue, result_type: Attribute | None = None):
        super().__init__(operands=[lhs, rhs], result_types=[result_type or lhs.type])

    def verify_(self) -> None:
        ls = shape_of(self.lhs, self, "operand 'lhs'")
        rs = shape_of(self.rhs, self, "operand 'rhs'")
        if len(rs) > len(ls) or ls[len(ls) - len(rs) :] != rs:
            raise VerifyException(
                f"{self.name}: operand 'rhs' has shape {shape_str(rs)}, which does not broadcast to "
                f"operand 'lhs' shape {shape_str(ls)} (rhs must equal lhs's trailing dimensions)"
            )
        require_result_shape(self, self.result, ls)
        require_compute_result(self)


@irdl_op_definition
class AddOp(_BinaryElementwise):
    """Element-wise sum (residual add, bias add, position embedding)."""

    name = "nn.add"


@irdl_op_definition
class MulOp(_BinaryElementwise):
    """Element-wise product."""

    name = "nn.mul"


@irdl_op_definition
class ScaleOp(IRDLOperation):
    """x * factor, with a compile-time scalar factor (e.g. the attention scale 72^-0.5)."""

    name = "nn.scale"
    input = operand_def(TensorType)
    factor = prop_def(FloatAttr[Float32Type])
    result = result_def(TensorType)
    assembly_format = "$input `by` $factor attr-dict `:` type($input) `->` type($result)"
    traits = traits_def(Pure(), NNCanonicalizationPatterns())

    def __init__(self, x: SSAValue, factor: float, result_type: Attribute | None = None):
        super().__init__(
            operands=[x], properties={"factor": FloatAttr(factor, f32)}, result_types=[result_type or x.type]
        )

    def verify_(self) -> None:
        require_compute_result(self)
        require_result_shape(self, self.result, shape_of(self.input, self, "operand 'input'"))


@irdl_op_definition
class LayerNormOp(IRDLOperation):
    """Layer norm over the last dimension: biased variance, eps inside the square root, affine weight and bias."""

    name = "nn.layer_norm"
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = operand_def(TensorType)
    eps = prop_def(FloatAttr[Float32Type])
    result = result_def(TensorType)
    assembly_format = (
        "$input `,` $weight `,` $bias `eps` `` `=` `` $eps attr-dict `:` type($input) `,` type($weight) `,` "
        "type($bias) `->` type($result)"
    )
    traits = traits_def(Pure())

    def __init__(
        self, x: SSAValue, weight: SSAValue, bias: SSAValue, eps: float, result_type: Attribute | None = None
    ):
        super().__init__(
            operands=[x, weight, bias],
            properties={"eps": FloatAttr(eps, f32)},
            result_types=[result_type or x.type],
        )

    def verify_(self) -> None:
        require_compute_result(self)
        xs = shape_of(self.input, self, "operand 'input'")
        for name, v in (("weight", self.weight), ("bias", self.bias)):
            s = shape_of(v, self, f"operand '{name}'")
            if s != (xs[-1],):
                raise VerifyException(
                    f"nn.layer_norm: operand '{name}' has shape {shape_str(s)} but operand 'input' has shape "
                    f"{shape_str(xs)}: expected {xs[-1]}"
                )
        eps = self.eps.value.data
        if not 0 < eps <= 3.4028234663852886e38:  # NaN fails too
            raise VerifyException(f"nn.layer_norm: eps must be a positive finite f32, got {eps}")
        require_result_shape(self, self.result, xs)


@irdl_op_definition
class GeluOp(IRDLOperation):
    """GELU; `approximate = "tanh"` is PyTorch's gelu_pytorch_tanh (SigLIP), `"none"` the exact erf form."""

    name = "nn.gelu"
    input = operand_def(TensorType)
    approximate = prop_def(StringAttr)
    result = result_def(TensorType)
    assembly_format = "$input $approximate attr-dict `:` type($input) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, approximate: str = "tanh", result_type: Attribute | None = None):
        super().__init__(
            operands=[x],
            properties={"approximate": StringAttr(approximate)},
            result_types=[result_type or x.type],
        )

    def verify_(self) -> None:
        require_compute_result(self)
        if self.approximate.data not in GELU_APPROXIMATIONS:
            raise VerifyException(
                f'nn.gelu: approximate must be "tanh" or "none", got "{self.approximate.data}"'
            )
        require_result_shape(self, self.result, shape_of(self.input, self, "operand 'input'"))


@irdl_op_definition
class SoftmaxOp(IRDLOperation):
    """Softmax over one axis (default the last), computed in at least f32 precision."""

    name = "nn.softmax"
    input = operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = "$input `axis` `` `=` `` $axis attr-dict `:` type($input) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, axis: int = -1, result_type: Attribute | None = None):
        super().__init__(
            operands=[x], properties={"axis": IntegerAttr(axis, i64)}, result_types=[result_type or x.type]
        )

    def verify_(self) -> None:
        require_compute_result(self)
        xs = shape_of(self.input, self, "operand 'input'")
        a = self.axis.value.data
        if not -len(xs) <= a < len(xs):
            raise VerifyException(
                f"nn.softmax: axis {a} is out of range for operand 'input' shape {shape_str(xs)}"
            )
        require_result_shape(self, self.result, xs)


@irdl_op_definition
class AttentionOp(IRDLOperation):
    """Multi-head attention without mask: per head h, softmax(scale * q_h k_h^T) v_h, heads concatenated.

    q is [T, H*D], k and v are [S, H*D]; head h owns channels [h*D, (h+1)*D). No projections: those are
    `nn.linear` ops around it. The scale multiplies the scores q_h k_h^T (HF's MAP head scales q before the
    product instead; the two differ only in the last ulp).
    """

    name = "nn.attention"
    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    heads = prop_def(IntegerAttr[I64])
    scale = prop_def(FloatAttr[Float32Type])
    result = result_def(TensorType)
    assembly_format = (
        "$query `,` $key `,` $value `heads` `` `=` `` $heads `scale` `` `=` `` $scale attr-dict `:` "
        "type($query) `,` type($key) `,` type($value) `->` type($result)"
    )
    traits = traits_def(Pure())

    def __init__(
        self,
        q: SSAValue,
        k: SSAValue,
        v: SSAValue,
        heads: int,
        scale: float,
        result_type: Attribute | None = None,
    ):
        super().__init__(
            operands=[q, k, v],
            properties={"heads": IntegerAttr(heads, i64), "scale": FloatAttr(scale, f32)},
            result_types=[result_type or q.type],
        )

    @property
    def num_heads(self) -> int:
        return self.heads.value.data

    def verify_(self) -> None:
        require_compute_result(self)
        qs = shape_of(self.query, self, "operand 'query'")
        ks = shape_of(self.key, self, "operand 'key'")
        vs = shape_of(self.value, self, "operand 'value'")
        for name, s in (("query", qs), ("key", ks), ("value", vs)):
            if len(s) != 2:
                raise VerifyException(
                    f"nn.attention: operand '{name}' must be [tokens, heads*dim], got {shape_str(s)}"
                )
        if ks != vs:
            raise VerifyException(
                f"nn.attention: operand 'key' has shape {shape_str(ks)} but 'value' has shape {shape_str(vs)}"
            )
        if qs[1] != ks[1]:
            raise VerifyException(
                f"nn.attention: operand 'query' has shape {shape_str(qs)} but 'key' has shape {shape_str(ks)}: "
                f"channel counts {qs[1]} and {ks[1]} differ"
            )
        h = self.num_heads
        if h <= 0 or qs[1] % h:
            raise VerifyException(
                f"nn.attention: heads = {h} does not divide the {qs[1]} channels of 'query'"
            )
        _verify_scale(self)
        require_result_shape(self, self.result, qs)


def _verify_scale(op) -> None:
    import math

    v = op.scale.value.data
    if not math.isfinite(v) or v == 0 or abs(v) > 3.4028234663852886e38:
        raise VerifyException(f"{op.name}: scale must be a finite non-zero f32, got {v}")


def _verify_qkv(
    op: Operation, name: str, q: SSAValue, k: SSAValue, v: SSAValue, h: int
) -> tuple[int, int, int]:
    """(tokens, keys, head size) of attention operands q [T, H*D], k and v [S, H*D]."""
    qs = shape_of(q, op, "operand 'query'")
    ks = shape_of(k, op, "operand 'key'")
    vs = shape_of(v, op, "operand 'value'")
    for what, s in (("query", qs), ("key", ks), ("value", vs)):
        if len(s) != 2:
            raise VerifyException(f"{name}: operand '{what}' must be [tokens, heads*dim], got {shape_str(s)}")
    if ks != vs or qs[1] != ks[1]:
        raise VerifyException(
            f"{name}: operands 'query' {shape_str(qs)}, 'key' {shape_str(ks)} and 'value' {shape_str(vs)} do not "
            "agree (keys and values [S, H*D], queries [T, H*D])"
        )
    if h <= 0 or qs[1] % h:
        raise VerifyException(f"{name}: heads = {h} does not divide the {qs[1]} channels of 'query'")
    return qs[0], ks[0], qs[1] // h


@irdl_op_definition
class AttentionPartialOp(IRDLOperation):
    """`nn.attention` over `chunks` contiguous key ranges separately (FlashAttention's split, across tiles): for
    key chunk j (keys [j * c, min((j + 1) * c, S)), c = ceil(S / chunks)) and head h, with s = scale * q_h k^T:
    m = max_k s, l = sum_k exp(s - m), o = (exp(s - m) / l) v (the chunk's own softmax).

    Result [chunks, T, H * (D + 2)], f32: per head h the D columns of o, then m, then l (columns h * (D + 2) ..).
    `nn.attention_merge` combines the chunks into the attention's result. `nn-split-attention-keys` creates it.
    """

    name = "nn.attention_partial"
    query = operand_def(TensorType)
    key = operand_def(TensorType)
    value = operand_def(TensorType)
    heads = prop_def(IntegerAttr[I64])
    scale = prop_def(FloatAttr[Float32Type])
    chunks = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = (
        "$query `,` $key `,` $value `heads` `` `=` `` $heads `scale` `` `=` `` $scale `chunks` `` `=` `` $chunks "
        "attr-dict `:` type($query) `,` type($key) `,` type($value) `->` type($result)"
    )
    traits = traits_def(Pure())

    def __init__(self, q: SSAValue, k: SSAValue, v: SSAValue, heads: int, scale: float, chunks: int):
        t, c = q.type.get_shape()
        d = c // heads
        super().__init__(
            operands=[q, k, v],
            properties={
                "heads": IntegerAttr(heads, i64),
                "scale": FloatAttr(scale, f32),
                "chunks": IntegerAttr(chunks, i64),
            },
            result_types=[TensorType(f32, (chunks, t, heads * (d + 2)))],
        )

    @property
    def num_heads(self) -> int:
        return self.heads.value.data

    @property
    def num_chunks(self) -> int:
        return self.chunks.value.data

    def key_chunk(self) -> int:
        """Keys per chunk (the last may have fewer)."""
        return -(-self.key.type.get_shape()[0] // self.num_chunks)

    def verify_(self) -> None:
        t, s, d = _verify_qkv(self, self.name, self.query, self.key, self.value, self.num_heads)
        _verify_scale(self)
        n = self.num_chunks
        if n < 1 or n > s or (n - 1) * -(-s // n) >= s:
            raise VerifyException(f"{self.name}: chunks = {n} does not split {s} keys into non-empty ranges")
        rt = tensor_of(self.result, self, "result")
        if not isinstance(rt.element_type, Float32Type):
            raise VerifyException(f"{self.name}: the result must be f32, got {rt.element_type}")
        require_result_shape(self, self.result, (n, t, self.num_heads * (d + 2)))


@irdl_op_definition
class AttentionMergeOp(IRDLOperation):
    """Combines `nn.attention_partial`'s chunks into the attention's result [T, H*D]: per row and head, with
    M = max_j m_j and w_j = l_j exp(m_j - M), out = sum_j (w_j / sum_i w_i) o_j (the softmax over all keys)."""

    name = "nn.attention_merge"
    partials = operand_def(TensorType)
    heads = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = "$partials `heads` `` `=` `` $heads attr-dict `:` type($partials) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, partials: SSAValue, heads: int, result_type: Attribute):
        super().__init__(
            operands=[partials], properties={"heads": IntegerAttr(heads, i64)}, result_types=[result_type]
        )

    @property
    def num_heads(self) -> int:
        return self.heads.value.data

    def verify_(self) -> None:
        require_compute_result(self)
        ps = shape_of(self.partials, self, "operand 'partials'")
        h = self.num_heads
        if len(ps) != 3 or h <= 0 or ps[2] % h or ps[2] // h < 3:
            raise VerifyException(
                f"{self.name}: operand 'partials' must be [chunks, tokens, heads * (dim + 2)] with heads = {h}, "
                f"got {shape_str(ps)}"
            )
        require_result_shape(self, self.result, (ps[1], h * (ps[2] // h - 2)))


# --------------------------------------------------------------------------------------------------------------
# Shape and precision


@irdl_op_definition
class PatchifyOp(IRDLOperation):
    """Cuts an image batch [B, C, H, W] into patches: [B * (H//p) * (W//p), C*p*p].

    Token t = row * (W//p) + col; the patch vector is ordered (channel, ky, kx), matching a Conv2d weight
    [out, C, p, p] reshaped to [out, C*p*p]. Pixels beyond the last whole patch are ignored, as a "valid" conv does.
    """

    name = "nn.patchify"
    input = operand_def(TensorType)
    patch = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = "$input `patch` `` `=` `` $patch attr-dict `:` type($input) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, x: SSAValue, patch: int, result_type: TensorType):
        super().__init__(
            operands=[x], properties={"patch": IntegerAttr(patch, i64)}, result_types=[result_type]
        )

    @staticmethod
    def result_shape(input_shape: Sequence[int], patch: int) -> tuple[int, int]:
        b, c, h, w = input_shape
        return (b * (h // patch) * (w // patch), c * patch * patch)

    def verify_(self) -> None:
        xs = shape_of(self.input, self, "operand 'input'")
        p = self.patch.value.data
        if len(xs) != 4:
            raise VerifyException(f"nn.patchify: operand 'input' must be [B, C, H, W], got {shape_str(xs)}")
        if p <= 0 or p > min(xs[2], xs[3]):
            raise VerifyException(
                f"nn.patchify: patch {p} does not fit operand 'input' shape {shape_str(xs)}"
            )
        require_result_shape(self, self.result, self.result_shape(xs, p))


@irdl_op_definition
class ReshapeOp(IRDLOperation):
    """Reinterprets the shape, row-major order, same element count."""

    name = "nn.reshape"
    input = operand_def(TensorType)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"
    traits = traits_def(Pure(), NNCanonicalizationPatterns())

    def __init__(self, x: SSAValue, result_type: TensorType):
        super().__init__(operands=[x], result_types=[result_type])

    def verify_(self) -> None:
        import math

        xs = shape_of(self.input, self, "operand 'input'")
        rs = shape_of(self.result, self, "result")
        if math.prod(xs) != math.prod(rs):
            raise VerifyException(
                f"nn.reshape: operand 'input' shape {shape_str(xs)} and result shape {shape_str(rs)} "
                "have different element counts"
            )


@irdl_op_definition
class TransposeOp(IRDLOperation):
    """Permutes dimensions: result.shape[i] = input.shape[perm[i]]."""

    name = "nn.transpose"
    input = operand_def(TensorType)
    perm = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    assembly_format = "$input `perm` `` `=` `` $perm attr-dict `:` type($input) `->` type($result)"
    traits = traits_def(Pure(), NNCanonicalizationPatterns())

    def __init__(self, x: SSAValue, perm: Sequence[int], result_type: TensorType):
        super().__init__(operands=[x], properties={"perm": int_array(perm)}, result_types=[result_type])

    @property
    def permutation(self) -> tuple[int, ...]:
        return tuple(self.perm.get_values())

    def verify_(self) -> None:
        xs = shape_of(self.input, self, "operand 'input'")
        p = self.permutation
        if sorted(p) != list(range(len(xs))):
            raise VerifyException(
                f"nn.transpose: perm {list(p)} is not a permutation of the {len(xs)} dimensions"
            )
        require_result_shape(self, self.result, tuple(xs[i] for i in p))


@irdl_op_definition
class SliceOp(IRDLOperation):
    """A static box: result = input[offsets[i] : offsets[i] + result.shape[i]] per dimension."""

    name = "nn.slice"
    input = operand_def(TensorType)
    offsets = prop_def(DenseArrayBase[I64])
    result = result_def(TensorType)
    assembly_format = "$input `offsets` `` `=` `` $offsets attr-dict `:` type($input) `->` type($result)"
    traits = traits_def(Pure(), NNCanonicalizationPatterns())

    def __init__(self, x: SSAValue, offsets: Sequence[int], result_type: TensorType):
        super().__init__(operands=[x], properties={"offsets": int_array(offsets)}, result_types=[result_type])

    @property
    def static_offsets(self) -> tuple[int, ...]:
        return tuple(self.offsets.get_values())

    def verify_(self) -> None:
        xs = shape_of(self.input, self, "operand 'input'")
        rs = shape_of(self.result, self, "result")
        off = self.static_offsets
        if len(off) != len(xs) or len(rs) != len(xs):
            raise VerifyException(
                f"nn.slice: offsets {list(off)}, operand 'input' shape {shape_str(xs)} and result shape "
                f"{shape_str(rs)} must have the same rank"
            )
        for d, (o, r, x) in enumerate(zip(off, rs, xs)):
            if o < 0 or o + r > x:
                raise VerifyException(
                    f"nn.slice: dimension {d}: [{o}, {o + r}) is outside operand 'input' shape {shape_str(xs)}"
                )


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Joins tensors along one axis."""

    name = "nn.concat"
    inputs = var_operand_def(TensorType)
    axis = prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = "$inputs `axis` `` `=` `` $axis attr-dict `:` type($inputs) `->` type($result)"
    traits = traits_def(Pure())

    def __init__(self, inputs: Sequence[SSAValue], axis: int, result_type: TensorType):
        super().__init__(
            operands=[inputs], properties={"axis": IntegerAttr(axis, i64)}, result_types=[result_type]
        )

    def verify_(self) -> None:
        if not self.inputs:
            raise VerifyException("nn.concat: needs at least one input")
        shapes = [shape_of(v, self, f"operand #{i}") for i, v in enumerate(self.inputs)]
        rank = len(shapes[0])
        a = self.axis.value.data
        if not 0 <= a < rank:
            raise VerifyException(f"nn.concat: axis {a} is out of range for rank {rank}")
        for i, s in enumerate(shapes):
            if len(s) != rank or s[:a] + s[a + 1 :] != shapes[0][:a] + shapes[0][a + 1 :]:
                raise VerifyException(
                    f"nn.concat: operand #{i} has shape {shape_str(s)}, which does not match operand #0 shape "
                    f"{shape_str(shapes[0])} outside axis {a}"
                )
        expected = list(shapes[0])
        expected[a] = sum(s[a] for s in shapes)
        require_result_shape(self, self.result, expected)


@irdl_op_definition
class CastOp(IRDLOperation):
    """Changes the element type: f32 <-> f16, and to/from FP8 with a power-of-two scale.

    For an FP8 result, the stored byte is round(x * 2^-scale) in the FP8 format, saturating at the format's largest
    finite value (the IPU's $FP_CTL.NANOO = 0 behaviour), so the logical value decode(bits) * 2^scale approximates
    x. For an FP8 operand, `scale` must repeat the operand's scale. Non-FP8 casts take no scale.
    """

    name = "nn.cast"
    input = operand_def(TensorType)
    scale = opt_prop_def(IntegerAttr[I64])
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"
    irdl_options = (ParsePropInAttrDict(),)
    traits = traits_def(Pure(), NNCanonicalizationPatterns())

    def __init__(self, x: SSAValue, result_type: TensorType, scale: int | None = None):
        props = {"scale": IntegerAttr(scale, i64)} if scale is not None else {}
        super().__init__(operands=[x], result_types=[result_type], properties=props)

    @property
    def fp8_scale(self) -> int:
        return 0 if self.scale is None else self.scale.value.data

    def verify_(self) -> None:
        xt = tensor_of(self.input, self, "operand 'input'")
        rt = tensor_of(self.result, self, "result")
        require_result_shape(self, self.result, tuple(xt.get_shape()))
        fp8 = isinstance(rt.element_type, FP8_TYPES) or isinstance(xt.element_type, FP8_TYPES)
        if self.scale is not None:
            if not fp8:
                raise VerifyException(
                    f"nn.cast: scale is only meaningful for FP8, but the cast is {xt.element_type} -> {rt.element_type}"
                )
            # QUARTER metadata keeps the scale as a signed 6-bit field.
            if not -32 <= self.fp8_scale <= 31:
                raise VerifyException(
                    f"nn.cast: FP8 scale {self.fp8_scale} is outside the metadata range [-32, 31]"
                )


@irdl_op_definition
class YieldOp(IRDLOperation):
    """Terminates an `nn.repeat` body with the values carried into the next iteration."""

    name = "nn.yield"
    values = var_operand_def(TensorType)
    assembly_format = "$values attr-dict `:` type($values)"
    traits = lazy_traits_def(lambda: (IsTerminator(), HasParent(RepeatOp), Pure()))

    def __init__(self, values: Sequence[SSAValue]):
        super().__init__(operands=[values])


@irdl_op_definition
class RepeatOp(IRDLOperation):
    """Runs its body `count` times; the encoder layer loop.

    Operands are the `carried` values (the hidden state) and `stacked` per-layer parameters with a leading
    dimension of `count`. The body's block arguments are the carried values followed by iteration i's slice of each
    stacked operand; `nn.yield` gives the carried values of the next iteration, the last of which are the results.
    """

    name = "nn.repeat"
    carried = var_operand_def(TensorType)
    stacked = var_operand_def(TensorType)
    count = prop_def(IntegerAttr[I64])
    res = var_result_def(TensorType)
    body = region_def("single_block")
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$count `carried` `(` $carried `:` type($carried) `)` `stacked` `(` $stacked `:` type($stacked) `)` "
        "attr-dict-with-keyword `->` type($res) $body"
    )
    traits = traits_def(RecursiveMemoryEffect())

    def __init__(
        self,
        count: int,
        carried: Sequence[SSAValue],
        stacked: Sequence[SSAValue],
        body,
    ):
        super().__init__(
            operands=[carried, stacked],
            properties={"count": IntegerAttr(count, i64)},
            result_types=[[v.type for v in carried]],
            regions=[body],
        )

    @property
    def iterations(self) -> int:
        return self.count.value.data

    @staticmethod
    def slice_type(stacked_type: TensorType) -> TensorType:
        return TensorType(stacked_type.element_type, list(stacked_type.get_shape())[1:])

    def verify_(self) -> None:
        n = self.iterations
        if n <= 0:
            raise VerifyException(f"nn.repeat: count must be positive, got {n}")
        block = self.body.block
        expected = [v.type for v in self.carried] + [
            self.slice_type(tensor_of(v, self, f"stacked operand #{i}")) for i, v in enumerate(self.stacked)
        ]
        for i, v in enumerate(self.stacked):
            s = shape_of(v, self, f"stacked operand #{i}")
            if not s or s[0] != n:
                raise VerifyException(
                    f"nn.repeat: stacked operand #{i} has shape {shape_str(s)}; its leading dimension must be the "
                    f"count {n}"
                )
        got = [a.type for a in block.args]
        if got != expected:
            raise VerifyException(
                f"nn.repeat: body arguments are ({', '.join(map(str, got))}) but carried values and stacked slices "
                f"imply ({', '.join(map(str, expected))})"
            )
        if [r.type for r in self.res] != [v.type for v in self.carried]:
            raise VerifyException("nn.repeat: result types must equal the carried operand types")
        term = block.last_op
        if not isinstance(term, YieldOp):
            raise VerifyException("nn.repeat: body must end with nn.yield")
        yielded = [v.type for v in term.values]
        if yielded != [v.type for v in self.carried]:
            raise VerifyException(
                f"nn.repeat: nn.yield gives ({', '.join(map(str, yielded))}) but the carried values are "
                f"({', '.join(str(v.type) for v in self.carried)})"
            )


NN = Dialect(
    "nn",
    [
        InputOp,
        ParamOp,
        OutputOp,
        LinearOp,
        LinearPartialsOp,
        ReduceSumOp,
        MatmulOp,
        AddOp,
        MulOp,
        ScaleOp,
        LayerNormOp,
        GeluOp,
        SoftmaxOp,
        AttentionOp,
        AttentionPartialOp,
        MatmulPartialsOp,
        AttentionMergeOp,
        PatchifyOp,
        ReshapeOp,
        TransposeOp,
        SliceOp,
        ConcatOp,
        CastOp,
        YieldOp,
        RepeatOp,
    ],
    [],
)
