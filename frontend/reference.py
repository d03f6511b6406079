"""NumPy reference evaluator for `nn` IR: the numerical oracle of the end-to-end tests.

`evaluate(module_or_func, inputs, params, mode=..., capture=...)` walks the body of one `func.func` op by op with a
dispatch table (op class -> NumPy function); `nn.repeat` runs its body `count` times, binding the carried values and
iteration i's slice of every stacked operand to the block arguments. It does not use xDSL's interpreter.

Every value is held as a float32 array (modes "fp32" and "device") or a float64 array (mode "fp64"), whatever its
IR element type: an f16 or FP8 value in device mode is a float32 array whose elements are exactly representable in
that format (times 2^scale for FP8). Captured values and outputs have the same representation.

Modes
-----
"fp32"   The pure model in float32: every op computes in float32; `nn.cast` is the identity (it does not round,
         not even to FP8) and f16/FP8 element types are ignored. Parameters and inputs are converted to float32
         where they are used (no copy when they already are float32, e.g. a float32 memmap).
"fp64"   The same in float64. Attributes (`nn.scale` factor, layer-norm eps, attention scale) are f32 attributes
         in the dialect, so fp64 mode uses their float32-rounded values (72^-0.5 becomes 0.1178511307): a
         relative difference of ~1e-8 from a pure float64 model, far below any tolerance in use.
"device" Rounds where the IPU will, and computes everything else in float32:
         - `nn.cast` to f16: round to nearest even in float16 (IEEE: overflow gives +-inf).
         - `nn.cast` to FP8 (f8E4M3FNUZ = Graphcore F143, f8E5M2FNUZ = F152) with scale s: q = x * 2^-s, clamped
           to the format's largest finite value (240, resp. 57344; the IPU's saturating mode, never NaN on
           overflow), rounded to nearest even in the format (ml_dtypes, one rounding from float32); the value is
           then the logical value decode(q) * 2^s. NaN inputs stay NaN.
         - `nn.cast` to f32, and from FP8 (whose value already is the logical value): no rounding, except to the
           result type if that is f16 or FP8.
         - Any op whose result type is f16 computes in float32 from its (already rounded) operands and rounds
           the result once to float16. This covers `nn.input` and `nn.param` typed f16 (rounded where used).
         - `nn.linear` / `nn.matmul` / `nn.linear_partials`: operands hold exactly their f16/FP8 values, so the float32 products are
           exact; the sum is accumulated in float32 (BLAS sgemm), the bias added in float32, and the result
           rounded to the result type. (The IPU's FP8 AMP accumulates in half partials; this model does not.)
         - `nn.softmax`, `nn.layer_norm`, `nn.gelu`, `nn.attention` compute entirely in float32 (for attention:
           scores, softmax and the probabilities-times-values product) and round only their result.
         - Data-movement ops (reshape, transpose, slice, concat, patchify) move values without rounding.
         - An `nn.input` or `nn.param` typed FP8 is quantized with scale 0 (the IR has no scale for it).
         - Only these ops may produce an FP8 result: `nn.cast`, data movement, `nn.param`, `nn.input`;
           anything else is an error (an FP8 result needs a scale, which only `nn.cast` carries).

Device-model options (device mode only; `evaluate(..., device_model=DeviceModel(...))`)
-------------------------------------------------------------------------------------
The default `DeviceModel()` is device mode exactly as described above. For per-operator accuracy bisection
(`bench/bench_accuracy_depth.py`) it can switch single sources of rounding off, or model more of the device:

`exact` (sources device mode leaves out, computing those values in float32 as fp32 mode does):
  "fp8"              `nn.cast` to FP8 is the identity (the FP8 weights' rounding and scale).
  "f16_weights"      `nn.cast` to f16 of a parameter-derived value (F16 weights, layer-norm parameters) does not
                     round.
  "f16_activations"  no other f16 result rounds (casts of computed values, layer norm, GELU, attention, sums
                     typed f16: the activations the device stores as f16), except the partials below.
  "f16_partials"     `nn.linear_partials` / `nn.matmul_partials` f16 results do not round and `nn.reduce_sum`
                     adds f16 partials in float32 (its result still rounds to its type, under "f16_activations").

`kernels` (device behaviour the default leaves out, each as the lowering's kernels compute; off by default):
  "amp_f16"          every GEMM (linear, partials, the attention's Q K^T and P V) accumulates as the AMP with half
                     partials does (backend/kernels/gemm.py "Numerics"): C = f16(f32(C) + A_blk @ B_blk) per
                     inner block of 16, from C = 0 (per K chunk for partials); an f32 A operand is rounded to f16
                     first (the AMP reads f16).
  "layer_norm_f16"   the row kernel `layernorm` (backend/kernels/rowwise.py "Numerics"): x cast to f16, mean and
                     variance in float32, y = f16(f16(f16((x - mean) * rstd) * w) + b).
  "softmax_f16"      `nn.softmax` and the attention's softmax as `softmax_split`: e = f16(exp(f16(x - m))),
                     sum of e in float32 after f16 sums of atom pairs per worker slice, y = f16(e * f16(1 / sum));
                     the attention's Q scaled and rounded to f16 before Q K^T, its scores S rounded to f16 (the
                     GEMM's f16 C), its output O rounded to f16.
  "gelu_f16"         tanh GELU as the row kernel `gelu`: every operation rounded to f16.
The device could keep any of the `exact` sources in float32 instead (f32 partials are what the few-row splits use;
f32 casts and adds exist), at the cost of memory and exchange bytes; FP8 weights in float32 would not fit.

Operator semantics are those of the op docstrings in `ipu.dialects.nn`. `nn.gelu "none"` (exact erf GELU)
evaluates erf in float64 from a piecewise Chebyshev fit of libm's erf/erfc, accurate to ~1 ulp in float64,
then continues in the mode's precision; `"tanh"` is PyTorch's gelu_pytorch_tanh evaluated in the mode's
precision.

Capture
-------
With `capture=True`, `Result.values` maps an `OpId` to every op result except `nn.param`'s (those are the
caller's arrays), in execution order: top-level ops, and for ops inside an `nn.repeat` body one entry per
iteration. An `OpId` is stable for a given module (position of the op,
iteration, result index), so two runs of the same module (e.g. "fp64" vs "device") can be compared key by key;
`str(op_id)` names the operator for reports. `Result.get(ssa_value, *iterations)` looks a value up by SSA value.
Without capture, values are freed after their last use so a 27-layer model needs little more than its weights.
"""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import ml_dtypes
import numpy as np
from numpy.polynomial import chebyshev
from xdsl.dialects.builtin import (
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float16Type,
    ModuleOp,
    TensorType,
)
from xdsl.dialects.func import FuncOp, ReturnOp
from xdsl.ir import Attribute, Block, Operation, SSAValue

from ipu.dialects import nn
from ipu.runtime.derived import DerivationError, with_derived

Mode = Literal["fp32", "fp64", "device"]
MODES = ("fp32", "fp64", "device")

# FP8 element type -> (ml_dtypes format, largest finite value).
FP8_FORMATS: dict[type[Attribute], tuple[Any, float]] = {
    Float8E4M3FNUZType: (ml_dtypes.float8_e4m3fnuz, float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fnuz).max)),
    Float8E5M2FNUZType: (ml_dtypes.float8_e5m2fnuz, float(ml_dtypes.finfo(ml_dtypes.float8_e5m2fnuz).max)),
}


class EvaluationError(Exception):
    """A model cannot be evaluated: a missing or mis-shaped input or parameter, or an unsupported construct."""


EXACT_SOURCES = ("fp8", "f16_weights", "f16_activations", "f16_partials")
DEVICE_KERNELS = ("amp_f16", "layer_norm_f16", "softmax_f16", "gelu_f16")
AMP_BLOCK = 16  # inner elements per AMP weight block (F16; FP8 weights become F16 panels first)


@dataclass(frozen=True)
class DeviceModel:
    """What device mode rounds beyond / short of its default (see the module docstring, "Device-model options")."""

    exact: frozenset[str] = frozenset()
    kernels: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "exact", frozenset(self.exact))
        object.__setattr__(self, "kernels", frozenset(self.kernels))
        for what, given, known in (
            ("exact", self.exact, EXACT_SOURCES),
            ("kernels", self.kernels, DEVICE_KERNELS),
        ):
            unknown = sorted(given - set(known))
            if unknown:
                raise ValueError(
                    f"DeviceModel: unknown {what} {', '.join(unknown)} (known: {', '.join(known)})"
                )


# --------------------------------------------------------------------------------------------------------------
# Results and value identities


@dataclass(frozen=True)
class OpId:
    """Identifies one op result in one execution.

    `path` is the op's position: (i,) for op i of the function body, (i, j) for op j of the body of the
    `nn.repeat` at position i, and so on. `iterations` holds the enclosing repeats' iteration numbers (one per
    level, so len(iterations) == len(path) - 1). `result` is the result index (only `nn.repeat` has several).
    `op_name` and `hint` (the SSA name, e.g. "h") are for display and do not take part in equality.
    """

    path: tuple[int, ...]
    iterations: tuple[int, ...] = ()
    result: int = 0
    op_name: str = field(default="", compare=False)
    hint: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        where = "#" + ".".join(map(str, self.path))
        if self.iterations:
            where += " (iteration " + ".".join(map(str, self.iterations)) + ")"
        value = f" %{self.hint}" if self.hint else ""
        if self.result:
            value += f" result {self.result}"
        return f"{where} {self.op_name}{value}"


@dataclass
class Result:
    """What `evaluate` returns.

    outputs: by `nn.output` name.
    values:  with capture, every op result by `OpId`, in execution order (empty otherwise).
    """

    outputs: dict[str, np.ndarray]
    values: dict[OpId, np.ndarray] = field(default_factory=dict)
    # SSA value -> (path, result index) of its defining op, filled in capture mode.
    _positions: dict[SSAValue, tuple[tuple[int, ...], int]] = field(default_factory=dict, repr=False)

    def op_id(self, value: SSAValue, *iterations: int) -> OpId:
        """The `OpId` of an SSA value; give the iteration number(s) for a value inside an `nn.repeat` body."""
        if value not in self._positions:
            raise KeyError(f"{value} is not an op result of the evaluated function (or capture was off)")
        path, result = self._positions[value]
        return OpId(path, tuple(iterations), result)

    def get(self, value: SSAValue, *iterations: int) -> np.ndarray:
        """The captured array of an SSA value (with iteration numbers for values inside `nn.repeat`)."""
        return self.values[self.op_id(value, *iterations)]


# --------------------------------------------------------------------------------------------------------------
# Precision helpers


def _shape_str(shape) -> str:
    return "x".join(str(d) for d in shape) if len(shape) else "scalar"


def _type_str(t: TensorType) -> str:
    return f"{_shape_str(t.get_shape())} ({t.element_type})"


def quantize_fp8(x: np.ndarray, fmt_type: type[Attribute], scale: int) -> np.ndarray:
    """The logical value of x cast to FP8: decode(rne(clamp(x * 2^-scale))) * 2^scale, in x's float dtype."""
    fmt, max_finite = FP8_FORMATS[fmt_type]
    # Multiplying by a power of two is exact (barring float32 under/overflow, impossible for |scale| <= 32 and
    # model-sized values), so the only rounding is the one into the format.
    q = np.ldexp(x, -scale) if scale else np.array(x, copy=True)
    np.clip(q, -max_finite, max_finite, out=q)  # saturate: fnuz formats would give NaN on overflow
    codes = q.astype(fmt).view(np.uint8)
    q = _fp8_decode_table(fmt, x.dtype)[codes]  # a 256-entry table: faster than ml_dtypes' cast back
    return np.ldexp(q, scale) if scale else q


@functools.cache
def _fp8_decode_table(fmt: Any, dtype: np.dtype) -> np.ndarray:
    return np.arange(256, dtype=np.uint8).view(fmt).astype(dtype)


def _round_f16(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # overflow to +-inf is what an f16 result does; not worth a warning
        return x.astype(np.float16).astype(x.dtype)


# --------------------------------------------------------------------------------------------------------------
# erf, for the exact GELU (NumPy has none and scipy is not a dependency).
# |x| < 2:      erf(x) = x * g(x^2), g(u) = erf(sqrt(u)) / sqrt(u), a Chebyshev series in u over [0, 4]
#               (keeps full relative accuracy near 0, where erf(x) ~ 2x/sqrt(pi)).
# 2 <= |x| < 6: erf(x) = 1 - exp(-x^2) * h(x), h(x) = erfc(x) * exp(x^2) smooth and slowly varying on [2, 6].
# |x| >= 6:     erf(x) = +-1 exactly in float64 (erfc(6) = 2e-17 < half an ulp of 1).
# The series are interpolated from libm's erf/erfc at import time; both are accurate to ~1 ulp in float64.


def _erf_small_g(t: np.ndarray) -> np.ndarray:
    u = (t + 1.0) * 2.0  # t in [-1, 1] -> u in [0, 4]; Chebyshev nodes never hit u = 0
    return np.array([math.erf(math.sqrt(v)) / math.sqrt(v) for v in u])


def _erf_large_h(t: np.ndarray) -> np.ndarray:
    x = (t + 1.0) * 2.0 + 2.0  # t in [-1, 1] -> x in [2, 6]
    return np.array([math.erfc(v) * math.exp(v * v) for v in x])


_ERF_G = chebyshev.chebinterpolate(_erf_small_g, 18)
_ERF_H = chebyshev.chebinterpolate(_erf_large_h, 20)


def erf(x: np.ndarray) -> np.ndarray:
    """Vectorised erf in float64 (accurate to a few ulp); NaN propagates."""
    x = np.asarray(x, dtype=np.float64)
    a = np.abs(x)
    out = np.empty_like(x)
    small = a < 2.0
    xs = x[small]
    out[small] = xs * chebyshev.chebval(xs * xs * 0.5 - 1.0, _ERF_G)
    large = ~small
    al = a[large]
    r = np.ones_like(al)
    mid = al < 6.0
    am = al[mid]
    r[mid] = 1.0 - np.exp(-am * am) * chebyshev.chebval((am - 4.0) * 0.5, _ERF_H)
    r[np.isnan(al)] = np.nan
    out[large] = np.copysign(r, x[large])
    return out


# --------------------------------------------------------------------------------------------------------------
# Operators. Each takes the evaluator (for the compute dtype), the op and its operand arrays, and returns a fresh
# array (or a view of an operand: nothing mutates an operand in place).


def _dot(ev: _Evaluator, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b; in device mode accumulated in float64 and rounded once to the evaluator's type: the products of
    f16 / FP8 operands are exact there, so the result does not depend on BLAS's summation order (which changes
    with the shapes: a fused q/k/v linear would otherwise differ from three separate ones in the last f32 bit,
    and a later f16 rounding can turn that into a visible difference)."""
    if not ev.device:
        return np.matmul(a, b)
    if ev.amp_f16:
        return _amp_dot(a, b)
    return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(ev.dtype)


def _amp_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a [.., M, K] @ b [.., K, N] as the AMP with half partials: C = f16(C + a_blk @ b_blk) per inner block of
    AMP_BLOCK (the block's products are exact in float32: f16 x f16; their float32 sum differs from the device's
    once-rounded one far below the f16 rounding that follows)."""
    a = _round_f16(np.asarray(a, np.float32))  # the AMP reads f16 (an f32 operand is cast first)
    b = np.asarray(b, np.float32)
    k = a.shape[-1]
    c = None
    for k0 in range(0, k, AMP_BLOCK):
        p = np.matmul(a[..., k0 : k0 + AMP_BLOCK], b[..., k0 : k0 + AMP_BLOCK, :])
        if c is None:
            c = p
        else:
            c += p
        _round_f16_inplace(c)
    return c


_F16_MIN_NORMAL = np.float32(2.0**-14)


def _round_f16_inplace(x: np.ndarray) -> np.ndarray:
    """x (float32, C-contiguous) rounded to float16 values in place; the same values as `_round_f16`, faster
    (integer round-to-nearest-even of the 13 dropped mantissa bits; subnormals to multiples of 2^-24)."""
    a = np.abs(x)
    if not np.isfinite(a).all() or a.max() >= 65504.0:
        x[...] = _round_f16(x)  # inf / NaN / overflow: the plain conversion
        return x
    small = a < _F16_MIN_NORMAL
    has_small = bool(small.any())
    xs = np.ldexp(np.rint(np.ldexp(x[small], 24)), -24) if has_small else None
    u = x.view(np.uint32)
    t = np.right_shift(u, 13)
    t &= 1
    t += 0x0FFF
    u += t
    u &= np.uint32(0xFFFFE000)
    if has_small:
        x[small] = xs
    return x


def _grouped_dot(ev: _Evaluator, h: int, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """[1, N]: column n = x[n // (N / h)] . w[n] (a grouped linear's product)."""
    gs = w.shape[0] // h
    return np.concatenate([_dot(ev, x[i : i + 1], w[i * gs : (i + 1) * gs].T) for i in range(h)], axis=1)


def _linear(ev: _Evaluator, op: nn.LinearOp, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None):
    k = x.shape[-1]
    if op.groups:
        y = _grouped_dot(ev, op.groups, x, w)
        return y + b if b is not None else y
    y = _dot(ev, x.reshape(-1, k), w.T)  # w.T is a transposed view: BLAS reads it without a copy
    if b is not None:
        y += b
    return y.reshape(*x.shape[:-1], w.shape[0])


def _linear_partials(ev: _Evaluator, op: nn.LinearPartialsOp, x: np.ndarray, w: np.ndarray):
    kc = op.chunk
    if op.groups:
        return np.stack(
            [
                _grouped_dot(ev, op.groups, x[:, k0 : k0 + kc], w[:, k0 : k0 + kc])
                for k0 in range(0, x.shape[1], kc)
            ]
        )
    return np.stack([_dot(ev, x[:, k0 : k0 + kc], w[:, k0 : k0 + kc].T) for k0 in range(0, x.shape[1], kc)])


def _matmul_partials(ev: _Evaluator, op: nn.MatmulPartialsOp, a: np.ndarray, b: np.ndarray):
    kc = op.chunk
    return np.stack([_dot(ev, a[:, k0 : k0 + kc], b[k0 : k0 + kc]) for k0 in range(0, a.shape[1], kc)])


def _reduce_sum(ev: _Evaluator, op: nn.ReduceSumOp, x: np.ndarray, *rest: np.ndarray):
    b = rest[0] if op.bias is not None else None
    addends = rest[1:] if op.bias is not None else rest
    y = _reduce_sum_value(ev, op, x, b)
    fp8 = FP8_FORMATS.get(type(op.result.type.element_type))
    if fp8 is not None:  # `tile-fuse-sum-cast`: the f16 result, then the cast (as the two ops compute it)
        if not ev.device:
            return y
        if "f16_activations" not in ev.exact:
            y = _round_f16(y)
        return y if "fp8" in ev.exact else quantize_fp8(y, type(op.result.type.element_type), op.fp8_scale)
    if addends:  # `nn-fuse-sum-add`: the f32 sum, then each addend added in f32 (as the nn.adds it replaces)
        y = ev.to_type(y, op.result.type, op.name)
        for a in addends:
            y = y + a
    return y


def _reduce_sum_value(ev: _Evaluator, op: nn.ReduceSumOp, x: np.ndarray, b: np.ndarray | None):
    if ev.device and isinstance(op.input.type.element_type, Float16Type) and "f16_partials" not in ev.exact:
        # f16 partials: summed as the device does, pairwise in f16 (while more than one is left, the first half
        # gets the last half added, an odd one out staying), then the f16 bias added in f16.
        parts = list(x)
        live = len(parts)
        while live > 1:
            h = live // 2
            for i in range(h):
                parts[i] = _round_f16(parts[i] + parts[i + live - h])
            live -= h
        y = parts[0]
        y = y if b is None else _round_f16(y + _round_f16(b))
    else:
        y = x.sum(axis=0, dtype=x.dtype)
        y = y if b is None else y + b
    # `activation = "gelu_tanh"` (nn-fuse-sum-activation): the GELU of the sum, as `nn.gelu` computes it
    return y if op.gelu is None else _gelu_values(ev, op.gelu, y)


def _matmul(ev: _Evaluator, op: nn.MatmulOp, lhs: np.ndarray, rhs: np.ndarray):
    return np.matmul(lhs, np.swapaxes(rhs, -1, -2) if op.rhs_transposed else rhs)


def _add(ev: _Evaluator, op: nn.AddOp, lhs: np.ndarray, rhs: np.ndarray):
    return lhs + rhs  # rhs matches lhs's trailing dimensions: NumPy broadcasting


def _mul(ev: _Evaluator, op: nn.MulOp, lhs: np.ndarray, rhs: np.ndarray):
    return lhs * rhs


def _scale(ev: _Evaluator, op: nn.ScaleOp, x: np.ndarray):
    return x * ev.dtype.type(op.factor.value.data)


def _layer_norm(ev: _Evaluator, op: nn.LayerNormOp, x: np.ndarray, w: np.ndarray, b: np.ndarray):
    eps = ev.dtype.type(op.eps.value.data)
    if ev.device and "layer_norm_f16" in ev.kernels:
        # The row kernel: f16 x, float32 statistics, three f16 roundings (rowwise.py "Numerics").
        x = _round_f16(np.asarray(x, np.float32))
        inv_n = np.float32(1.0 / x.shape[-1])
        d = x - x.sum(axis=-1, keepdims=True, dtype=np.float32) * inv_n
        var = (d * d).sum(axis=-1, keepdims=True, dtype=np.float32) * inv_n
        rstd = np.float32(1.0) / np.sqrt(var + eps)
        y = _round_f16(_round_f16(_round_f16(d * rstd) * _round_f16(w)) + _round_f16(b))
        return y
    mean = x.mean(axis=-1, keepdims=True)
    d = x - mean
    var = np.mean(d * d, axis=-1, keepdims=True)  # biased variance
    var += eps  # eps inside the square root
    np.sqrt(var, out=var)
    d /= var
    d *= w
    d += b
    return d


def _gelu(ev: _Evaluator, op: nn.GeluOp, x: np.ndarray):
    return _gelu_values(ev, op.approximate.data, x)


def _gelu_values(ev: _Evaluator, approximate: str, x: np.ndarray):
    if ev.device and "gelu_f16" in ev.kernels and approximate == "tanh":
        # The row kernel `gelu`: every operation rounded to f16 (rowwise.py "Numerics").
        r = _round_f16
        x = r(np.asarray(x, np.float32))
        c0 = np.float32(np.float16(math.sqrt(2.0 / math.pi)))
        c1 = np.float32(np.float16(c0 * 0.044715))
        t = r(r(r(r(x * x) * c1) + c0) * x)
        th = r(np.tanh(t.astype(np.float64)).astype(np.float32))  # correctly rounded, as the simulator's
        return r(r(x * np.float32(0.5)) * r(th + np.float32(1.0)))
    if approximate == "tanh":
        # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with Python-float constants so float32 stays float32.
        t = x * x
        t *= 0.044715
        t += 1.0
        t *= x
        t *= math.sqrt(2.0 / math.pi)
        np.tanh(t, out=t)
    else:
        t = erf(x * (1.0 / math.sqrt(2.0))).astype(ev.dtype)  # 0.5 x (1 + erf(x / sqrt 2))
    t += 1.0
    t *= x
    t *= 0.5
    return t


def _softmax_inplace(s: np.ndarray, axis: int) -> np.ndarray:
    s -= s.max(axis=axis, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=axis, keepdims=True)
    return s


def _softmax_f16(s: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`softmax_split`'s numerics on f16 rows: (y, m, l) with e = f16(exp(f16(x - m))), l = the float32 sum of e,
    y = f16(e * f16(1 / l))."""
    s = _round_f16(np.asarray(s, np.float32))
    m = s.max(axis=axis, keepdims=True)
    e = _round_f16(np.exp(_round_f16(s - m).astype(np.float64)).astype(np.float32))  # correctly rounded
    lsum = np.expand_dims(_sum_e_as_split_rows(np.moveaxis(e, axis, -1)), axis)
    return _round_f16(e * _round_f16(np.float32(1.0) / lsum)), m, lsum


def _sum_e_as_split_rows(e: np.ndarray, workers: int = 6) -> np.ndarray:
    """The row sums of e (f16 values in float32, [..., n]) as `softmax_split` forms them: the row's 4-element
    atoms are split over the workers (quotient / remainder); each worker adds its atoms but the last in pairs in
    f16 (atom 2i + atom 2i+1, element by element), then sums those pair sums, an odd atom and its last atom in
    float32. The extra f16 rounding per pair (~2^-12 relative) moves f16(1 / sum) often enough to matter."""
    n = e.shape[-1]
    atoms = -(-n // 4)
    padded = np.zeros((*e.shape[:-1], 4 * atoms), np.float32)
    padded[..., :n] = e  # the masked tail contributes exp(-inf) = 0
    a = padded.reshape(*e.shape[:-1], atoms, 4)
    q, r = divmod(atoms, workers)
    total = np.zeros(e.shape[:-1], np.float32)
    for w in range(workers):
        first, count = w * q + min(w, r), q + (w < r)
        if count == 0:
            continue
        pairs = (count - 1) // 2
        body = a[..., first : first + 2 * pairs, :]
        paired = _round_f16(body[..., 0::2, :] + body[..., 1::2, :])
        rest = a[..., first + 2 * pairs : first + count, :]
        total += paired.sum(axis=(-2, -1), dtype=np.float32) + rest.sum(axis=(-2, -1), dtype=np.float32)
    return total


def _softmax(ev: _Evaluator, op: nn.SoftmaxOp, x: np.ndarray):
    if ev.device and "softmax_f16" in ev.kernels:
        return _softmax_f16(x, op.axis.value.data)[0]
    return _softmax_inplace(np.array(x, copy=True), op.axis.value.data)


def _attention(ev: _Evaluator, op: nn.AttentionOp, q: np.ndarray, k: np.ndarray, v: np.ndarray):
    heads = op.num_heads
    t, channels = q.shape
    s = k.shape[0]
    d = channels // heads
    # Head h owns channels [h*D, (h+1)*D). Contiguous per-head layouts make the batched GEMMs run on BLAS.
    qh = np.ascontiguousarray(q.reshape(t, heads, d).transpose(1, 0, 2))  # [H, T, D]
    kh = np.ascontiguousarray(k.reshape(s, heads, d).transpose(1, 2, 0))  # [H, D, S]
    vh = np.ascontiguousarray(v.reshape(s, heads, d).transpose(1, 0, 2))  # [H, S, D]
    if ev.device and "softmax_f16" in ev.kernels:
        out = _attention_f16(ev, qh, kh, vh, op.scale.value.data)[0]
        return out.transpose(1, 0, 2).reshape(t, channels)
    scores = np.matmul(qh, kh)  # [H, T, S]
    scores *= ev.dtype.type(op.scale.value.data)  # the scale multiplies q k^T, as the op docstring says
    probs = _softmax_inplace(scores, -1)
    out = np.matmul(probs, vh)  # [H, T, D]
    return out.transpose(1, 0, 2).reshape(t, channels)


def _attention_f16(ev: _Evaluator, qh: np.ndarray, kh: np.ndarray, vh: np.ndarray, scale: float):
    """One block of keys as the device's attention ("softmax_f16"): f16(Q * scale), S = Q K^T in f16 (the GEMM's
    f16 C; per inner block with "amp_f16"), `softmax_split` on S, O = P V in f16. Returns (O, m, l) per head."""
    qs = _round_f16(qh * np.float32(scale))
    mm = _amp_dot if ev.amp_f16 else np.matmul
    scores = _round_f16(mm(qs, kh))  # [H, T, S]
    probs, m, lsum = _softmax_f16(scores, -1)
    return _round_f16(mm(probs, vh)), m, lsum


def _attention_partial(
    ev: _Evaluator, op: nn.AttentionPartialOp, q: np.ndarray, k: np.ndarray, v: np.ndarray
):
    heads, n = op.num_heads, op.num_chunks
    t, channels = q.shape
    s, d, c = k.shape[0], channels // heads, op.key_chunk()
    out = np.zeros((n, t, heads, d + 2), ev.dtype)
    qh = np.ascontiguousarray(q.reshape(t, heads, d).transpose(1, 0, 2))  # [H, T, D]
    for j in range(n):
        kj, vj = k[j * c : min(s, (j + 1) * c)], v[j * c : min(s, (j + 1) * c)]
        kh = np.ascontiguousarray(kj.reshape(-1, heads, d).transpose(1, 2, 0))  # [H, D, c]
        vh = np.ascontiguousarray(vj.reshape(-1, heads, d).transpose(1, 0, 2))  # [H, c, D]
        if ev.device and "softmax_f16" in ev.kernels:
            o, m, lsum = _attention_f16(ev, qh, kh, vh, op.scale.value.data)
            out[j, :, :, :d] = o.transpose(1, 0, 2)
            out[j, :, :, d] = m[..., 0].T
            out[j, :, :, d + 1] = lsum[..., 0].T
            continue
        scores = np.matmul(qh, kh) * ev.dtype.type(op.scale.value.data)  # [H, T, c]
        m = scores.max(axis=-1, keepdims=True)
        e = np.exp(scores - m)
        lsum = e.sum(axis=-1, keepdims=True)
        out[j, :, :, :d] = np.matmul(e / lsum, vh).transpose(1, 0, 2)
        out[j, :, :, d] = m[..., 0].T
        out[j, :, :, d + 1] = lsum[..., 0].T
    return out.reshape(n, t, heads * (d + 2))


def _attention_merge(ev: _Evaluator, op: nn.AttentionMergeOp, p: np.ndarray):
    n, t, w = p.shape
    heads = op.num_heads
    parts = p.reshape(n, t, heads, w // heads)
    d = w // heads - 2
    m, lsum = parts[..., d], parts[..., d + 1]  # [n, T, H]
    wts = lsum * np.exp(m - m.max(axis=0, keepdims=True))
    wts = wts / wts.sum(axis=0, keepdims=True)
    return (wts[..., None] * parts[..., :d]).sum(axis=0).reshape(t, heads * d)


def _patchify(ev: _Evaluator, op: nn.PatchifyOp, x: np.ndarray):
    p = op.patch.value.data
    b, c, h, w = x.shape
    gh, gw = h // p, w // p
    # Drop the pixels beyond the last whole patch ("valid" conv), then order tokens (row, col) and each patch
    # vector (channel, ky, kx).
    x = x[:, :, : gh * p, : gw * p].reshape(b, c, gh, p, gw, p)
    return x.transpose(0, 2, 4, 1, 3, 5).reshape(b * gh * gw, c * p * p)


def _reshape(ev: _Evaluator, op: nn.ReshapeOp, x: np.ndarray):
    return x.reshape(op.result.type.get_shape())


def _transpose(ev: _Evaluator, op: nn.TransposeOp, x: np.ndarray):
    return x.transpose(op.permutation)


def _slice(ev: _Evaluator, op: nn.SliceOp, x: np.ndarray):
    shape = op.result.type.get_shape()
    return x[tuple(slice(o, o + n) for o, n in zip(op.static_offsets, shape))]


def _concat(ev: _Evaluator, op: nn.ConcatOp, *xs: np.ndarray):
    return np.concatenate(xs, axis=op.axis.value.data)


def _cast(ev: _Evaluator, op: nn.CastOp, x: np.ndarray):
    if not ev.device:
        return x  # the pure-model modes ignore precision
    fp8 = FP8_FORMATS.get(type(op.result.type.element_type))
    if fp8 is not None:
        if "fp8" in ev.exact:
            return x
        return quantize_fp8(x, type(op.result.type.element_type), op.fp8_scale)
    return x  # to f32 (exact), or to f16: rounded by the evaluator like every f16 result


OpFunction = Callable[..., np.ndarray]

# op class -> NumPy implementation. nn.input, nn.param, nn.output, nn.repeat and nn.yield need the bindings or
# the environment and are handled by the evaluator itself.
OPS: dict[type[Operation], OpFunction] = {
    nn.LinearOp: _linear,
    nn.LinearPartialsOp: _linear_partials,
    nn.MatmulPartialsOp: _matmul_partials,
    nn.ReduceSumOp: _reduce_sum,
    nn.MatmulOp: _matmul,
    nn.AddOp: _add,
    nn.MulOp: _mul,
    nn.ScaleOp: _scale,
    nn.LayerNormOp: _layer_norm,
    nn.GeluOp: _gelu,
    nn.SoftmaxOp: _softmax,
    nn.AttentionOp: _attention,
    nn.AttentionPartialOp: _attention_partial,
    nn.AttentionMergeOp: _attention_merge,
    nn.PatchifyOp: _patchify,
    nn.ReshapeOp: _reshape,
    nn.TransposeOp: _transpose,
    nn.SliceOp: _slice,
    nn.ConcatOp: _concat,
    nn.CastOp: _cast,
}

# Ops that may carry an FP8 result in device mode without rounding: they only move already-quantized values.
_FP8_PASS_THROUGH = (nn.ReshapeOp, nn.TransposeOp, nn.SliceOp, nn.ConcatOp, nn.PatchifyOp)


# --------------------------------------------------------------------------------------------------------------
# The evaluator


@dataclass
class _Param:
    """A parameter as the caller gave it (possibly a memmap or a stacked slice of one), converted where used so
    that a lazily loaded or half-precision checkpoint is never converted as a whole."""

    raw: Any
    type: TensorType


class _Scope:
    """Values of one block; lookups fall back to the enclosing block (an nn.repeat body may use outer values)."""

    def __init__(self, parent: _Scope | None = None):
        self.values: dict[SSAValue, Any] = {}
        self.parent = parent

    def lookup(self, v: SSAValue) -> Any:
        scope = self
        while scope is not None:
            if v in scope.values:
                return scope.values[v]
            scope = scope.parent
        raise EvaluationError(f"internal: {v} used before it was computed")


def _frees(block: Block) -> dict[int, list[SSAValue]]:
    """Op index i -> the values defined in `block` that are dead once op i of `block` has run: their last user
    (directly or from a nested region) is op i, or op i defines them and nothing uses them."""
    index = {id(op): i for i, op in enumerate(block.ops)}
    frees: dict[int, list[SSAValue]] = {}
    for i, op in enumerate(block.ops):
        for v in op.results:
            last = i
            for use in v.uses:
                user: Operation | None = use.operation
                while user is not None and id(user) not in index:
                    user = user.parent_op()
                if user is not None:
                    last = max(last, index[id(user)])
            frees.setdefault(last, []).append(v)
    return frees


class _Evaluator:
    def __init__(
        self,
        inputs: Mapping[str, Any],
        params: Mapping[str, Any],
        mode: str,
        capture: bool,
        device_model: DeviceModel | None = None,
        observe: Callable[[Operation, list[np.ndarray]], None] | None = None,
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        dm = device_model or DeviceModel()
        if dm != DeviceModel() and mode != "device":
            raise ValueError(f"device_model applies to mode 'device' only, not {mode!r}")
        self.exact, self.kernels = dm.exact, dm.kernels
        self.amp_f16 = "amp_f16" in dm.kernels
        self._param_memo: dict = {}
        self.inputs = inputs
        self.params = params
        self.device = mode == "device"
        self.dtype = np.dtype(np.float64 if mode == "fp64" else np.float32)
        self.capture = capture
        self.observe = observe
        self.outputs: dict[str, np.ndarray] = {}
        self.values: dict[OpId, np.ndarray] = {}
        self.positions: dict[SSAValue, tuple[tuple[int, ...], int]] = {}
        self._frees_cache: dict[int, dict[int, list[SSAValue]]] = {}

    # -- value conversion ------------------------------------------------------------------------------------

    def to_type(self, x: np.ndarray, t: TensorType, what: str) -> np.ndarray:
        """Rounds a freshly computed value to its IR type (device mode only)."""
        if not self.device:
            return x
        et = t.element_type
        if isinstance(et, Float16Type):
            return _round_f16(x)
        if type(et) in FP8_FORMATS:
            raise EvaluationError(
                f"{what}: device mode cannot produce an FP8 result here: only nn.cast carries an FP8 scale"
            )
        return x

    def resolve(self, v: Any) -> np.ndarray:
        if isinstance(v, _Param):
            x = np.asarray(v.raw, dtype=self.dtype)  # no copy when the caller's array already is that dtype
            if self.device:
                et = v.type.element_type
                if isinstance(et, Float16Type):
                    x = _round_f16(x)
                elif type(et) in FP8_FORMATS:
                    x = quantize_fp8(x, type(et), 0)
            return x
        return v

    # -- sources and sinks ----------------------------------------------------------------------------------

    def eval_input(self, op: nn.InputOp, label: str) -> np.ndarray:
        name, t = op.sym.data, op.result.type
        if name not in self.inputs:
            given = ", ".join(sorted(self.inputs)) or "none"
            raise EvaluationError(
                f"{label}: missing input '{name}': expected an array of shape {_type_str(t)}; inputs given: {given}"
            )
        x = np.asarray(self.inputs[name])
        if tuple(x.shape) != tuple(t.get_shape()):
            raise EvaluationError(
                f"{label}: input '{name}' has shape {_shape_str(x.shape)} but the IR expects {_type_str(t)}"
            )
        return self.resolve(_Param(x, t))

    def eval_param(self, op: nn.ParamOp, label: str) -> _Param:
        name, t = op.param_name, op.result.type
        try:
            raw = self.params[name]  # a derived parameter is computed here (`evaluate` wraps the params)
        except DerivationError as e:
            raise EvaluationError(f"{label}: {e}") from None
        except KeyError:
            close = ""
            try:
                matches = difflib.get_close_matches(name, list(self.params.keys()), n=3)
                close = f"; similar names: {', '.join(matches)}" if matches else ""
            except Exception:  # a lazy mapping may not list its keys; the message is still clear without them
                pass
            raise EvaluationError(
                f"{label}: missing parameter '{name}': expected shape {_type_str(t)}{close}"
            ) from None
        shape = tuple(getattr(raw, "shape", np.shape(raw)))
        if shape != tuple(t.get_shape()):
            raise EvaluationError(
                f"{label}: parameter '{name}' has shape {_shape_str(shape)} but the IR expects {_type_str(t)}"
            )
        return _Param(raw, t)

    # -- blocks -----------------------------------------------------------------------------------------------

    def run_block(
        self,
        block: Block,
        scope: _Scope,
        path: tuple[int, ...],
        iterations: tuple[int, ...],
    ) -> list[Any] | None:
        """Runs the ops of `block`; returns the yielded values for an nn.repeat body."""
        frees = self._frees_cache.get(id(block))
        if frees is None:
            frees = self._frees_cache[id(block)] = _frees(block)
        yielded = None
        for i, op in enumerate(block.ops):
            op_path = (*path, i)
            label = str(
                OpId(op_path, iterations, 0, op.name, op.results[0].name_hint if op.results else None)
            )
            if isinstance(op, nn.YieldOp):
                yielded = [scope.lookup(v) for v in op.values]
            elif isinstance(op, nn.OutputOp):
                name = op.sym.data
                if name in self.outputs:
                    raise EvaluationError(f"{label}: output '{name}' is defined twice")
                self.outputs[name] = self.resolve(scope.lookup(op.value))
            elif isinstance(op, ReturnOp):
                pass  # outputs are the nn.output ops
            else:
                results = self.eval_op(op, scope, op_path, iterations, label)
                if self.observe is not None and not isinstance(op, nn.ParamOp):
                    self.observe(op, [self.resolve(v) for v in results])
                for r, value in zip(op.results, results):
                    scope.values[r] = value
                    # Parameters are the caller's arrays, not computed values: capturing them could only mean
                    # copying a lazily stacked or half-precision checkpoint.
                    if self.capture and not isinstance(op, nn.ParamOp):
                        self.positions[r] = (op_path, r.index)
                        self.values[OpId(op_path, iterations, r.index, op.name, r.name_hint)] = self.resolve(
                            value
                        )
            if not self.capture:
                for v in frees.get(i, ()):
                    scope.values.pop(v, None)  # free activations after their last use
        return yielded

    def eval_op(
        self, op: Operation, scope: _Scope, path: tuple[int, ...], iterations: tuple[int, ...], label: str
    ) -> list[Any]:
        if isinstance(op, nn.InputOp):
            return [self.eval_input(op, label)]
        if isinstance(op, nn.ParamOp):
            return [self.eval_param(op, label)]
        if isinstance(op, nn.RepeatOp):
            return self.eval_repeat(op, scope, path, iterations, label)
        fn = OPS.get(type(op))
        if fn is None:
            raise EvaluationError(f"{label}: the reference evaluator does not implement {op.name}")
        args = [self.resolve(scope.lookup(v)) for v in op.operands]
        try:
            y = fn(self, op, *args)
        except EvaluationError:
            raise
        except Exception as e:  # a NumPy error: say which op
            raise EvaluationError(f"{label}: {type(e).__name__}: {e}") from e
        t = op.results[0].type
        if tuple(y.shape) != tuple(t.get_shape()):
            raise EvaluationError(
                f"{label}: internal: computed shape {_shape_str(y.shape)}, IR says {_type_str(t)}"
            )
        if (
            self.device
            and type(t.element_type) in FP8_FORMATS
            and isinstance(op, (nn.CastOp, nn.ReduceSumOp, *_FP8_PASS_THROUGH))
        ):
            return [y]  # already quantized (by the cast, or upstream for data movement)
        if self.exact and self.device and isinstance(t.element_type, Float16Type) and self._exact_f16(op):
            return [y]
        return [self.to_type(y, t, label)]

    def _exact_f16(self, op: Operation) -> bool:
        """The f16 result of op is left unrounded by DeviceModel.exact (see the module docstring)."""
        if isinstance(op, nn.LinearPartialsOp | nn.MatmulPartialsOp):
            return "f16_partials" in self.exact
        if isinstance(op, nn.CastOp):
            from ipu.passes.nn_utils import is_param_derived

            source = "f16_weights" if is_param_derived(op.input, self._param_memo) else "f16_activations"
            return source in self.exact
        return "f16_activations" in self.exact

    def eval_repeat(
        self, op: nn.RepeatOp, scope: _Scope, path: tuple[int, ...], iterations: tuple[int, ...], label: str
    ) -> list[Any]:
        carried = [scope.lookup(v) for v in op.carried]
        stacked = [scope.lookup(v) for v in op.stacked]
        block = op.body.block
        n_carried = len(carried)
        for it in range(op.iterations):
            body = _Scope(scope)
            for arg, value in zip(block.args[:n_carried], carried):
                body.values[arg] = value
            for arg, value in zip(block.args[n_carried:], stacked):
                # Iteration it's slice: a view, converted where used (never the whole stack at once).
                body.values[arg] = _Param(value.raw[it], arg.type) if isinstance(value, _Param) else value[it]
            carried = self.run_block(block, body, path, (*iterations, it))
            if carried is None:
                raise EvaluationError(f"{label}: body has no nn.yield")
        return carried


def _single_func(module_or_func: ModuleOp | FuncOp) -> FuncOp:
    if isinstance(module_or_func, FuncOp):
        return module_or_func
    if isinstance(module_or_func, ModuleOp):
        funcs = [op for op in module_or_func.ops if isinstance(op, FuncOp)]
        if len(funcs) != 1:
            raise EvaluationError(f"expected a module holding exactly one func.func, found {len(funcs)}")
        return funcs[0]
    raise TypeError(f"expected a builtin.module or func.func, got {type(module_or_func).__name__}")


def evaluate_op(op: Operation, *operands: np.ndarray, mode: str = "device") -> np.ndarray:
    """One nn op on numpy operands with this module's semantics (for interpreters of lower levels).

    In device mode the operands are taken as already rounded to their IR types, and the result is rounded to its
    type (FP8 results come out quantized by the op itself, as `nn.cast` and data movement do)."""
    fn = OPS.get(type(op))
    if fn is None:
        raise EvaluationError(f"{op.name}: no reference implementation")
    ev = _Evaluator({}, {}, mode, False)
    y = fn(ev, op, *operands)
    rtype = op.results[0].type
    if isinstance(rtype, TensorType) and not isinstance(rtype.element_type, nn.FP8_TYPES):
        y = ev.to_type(y, rtype, op.name)
    return y


def evaluate(
    module_or_func: ModuleOp | FuncOp,
    inputs: Mapping[str, Any],
    params: Mapping[str, Any],
    *,
    mode: Mode = "fp32",
    capture: bool = False,
    verify: bool = True,
    device_model: DeviceModel | None = None,
    observe: Callable[[Operation, list[np.ndarray]], None] | None = None,
) -> Result:
    """Evaluates the function with NumPy and returns its `nn.output` values (see the module docstring).

    inputs: `nn.input` name -> array. params: `nn.param` name -> array; any mapping, read only for the names the
    IR uses (a lazy mapping of memmaps works and is not copied). mode: "fp32", "fp64" or "device".
    capture: also return every op result (Result.values). verify: run the IR verifier first.
    device_model: with mode "device", sources to leave out or device kernels to model (`DeviceModel`; default:
    device mode as documented). observe: called as observe(op, results) after every op but `nn.param` (every
    iteration of an `nn.repeat` body), with the results as `Result.values` holds them (calibration,
    `ipu.frontend.calibrate`).
    """
    func = _single_func(module_or_func)
    if verify:
        func.verify()
    try:
        params = with_derived(params, func)  # parameters the host derives at upload, derived alike
    except DerivationError as e:
        raise EvaluationError(str(e)) from None
    ev = _Evaluator(inputs, params, mode, capture, device_model, observe)
    ev.run_block(func.body.block, _Scope(), (), ())
    return Result(ev.outputs, ev.values, ev.positions)
