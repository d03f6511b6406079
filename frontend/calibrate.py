"""Calibration of the FP8 activation scales (`nn-quantize-activations`'s casts) from an input.

`nn-quantize-activations` gives every cast one power-of-two scale by rule (2^-4: values up to 240 x 2^-4 = 15 in
F143). A checkpoint whose activations are larger saturates there. `calibrate_activations` runs the nn-level
module (the nn passes applied, the casts in place) on a calibration input with the fp32 reference evaluator,
takes each cast's largest |x| over every iteration of the layer loop (one cast in the loop body serves every
layer), and sets the cast's `scale` to the smallest power of two that holds `headroom` times it:

    scale = ceil(log2(headroom * amax / max_finite(format)))      (within the FP8 metadata range [-32, 31])

The scales stay decisions in the IR (`nn.cast ... {scale = S}`): the compile records them in the package's notes,
and a person may edit them in textual IR. F143's relative rounding does not depend on the scale in its normal
range, so a larger scale only costs precision near zero (the smallest normal is 2^(scale - 7)).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from xdsl.dialects.builtin import Float16Type, IntegerAttr, ModuleOp, TensorType, i64

from ipu.dialects import nn
from ipu.passes.nn_quantize import SCALE_RANGE

DEFAULT_HEADROOM = 2.0  # one binade above the calibration input's largest activation


def activation_casts(module: ModuleOp) -> list[nn.CastOp]:
    """The casts of computed f16 activations to FP8 that feed K-split linears (what nn-quantize-activations
    inserts), in walk order."""
    out = []
    for op in module.walk():
        if not isinstance(op, nn.CastOp):
            continue
        xt, rt = op.input.type, op.result.type
        if not (isinstance(xt, TensorType) and isinstance(rt, TensorType)):
            continue
        if isinstance(xt.element_type, Float16Type) and isinstance(rt.element_type, nn.FP8_TYPES):
            if any(isinstance(u.operation, nn.LinearPartialsOp) for u in op.result.uses):
                out.append(op)
    return out


def scale_for(amax: float, element_type, headroom: float = DEFAULT_HEADROOM) -> int:
    """The smallest power-of-two scale whose range holds headroom * amax (clamped to the metadata range)."""
    import ml_dtypes

    from ipu.runtime import fp8

    lo, hi = SCALE_RANGE
    if not np.isfinite(amax) or amax <= 0:
        raise ValueError(f"calibration: the largest activation is {amax}, no scale follows from it")
    fmt = fp8.F143 if isinstance(element_type, nn.FP8_TYPES[0]) else fp8.F152
    top = float(ml_dtypes.finfo(fp8.DTYPES[fmt]).max)
    return int(min(hi, max(lo, math.ceil(math.log2(headroom * amax / top)))))


def calibrate_activations(
    module: ModuleOp,
    inputs: Mapping[str, Any],
    params: Mapping[str, Any],
    headroom: float = DEFAULT_HEADROOM,
) -> dict[str, tuple[int, float]]:
    """Sets every activation cast's scale from the inputs (see the module docstring). Returns, per weight
    parameter name of a cast's first reader, (the scale, the largest |x| seen); casts whose readers share a name
    (the parts of a split MLP) get the largest of their scales, so `nn-quantize-activations{scales}` entries
    "NAME=S" made from the result give the same casts the same scales."""
    from ipu.frontend.reference import evaluate
    from ipu.passes.nn_utils import param_names

    casts = activation_casts(module)
    if not casts:
        return {}
    amax = {id(c): 0.0 for c in casts}

    def observe(op, results) -> None:
        if id(op) in amax:
            amax[id(op)] = max(amax[id(op)], float(np.max(np.abs(results[0]))))

    evaluate(module, inputs, params, mode="fp32", observe=observe, verify=False)
    out: dict[str, tuple[int, float]] = {}
    named = []
    for c in casts:
        reader = next(u.operation for u in c.result.uses if isinstance(u.operation, nn.LinearPartialsOp))
        name = (param_names(reader.weight, through_casts=True) or [c.result.name_hint or "?"])[0]
        s = scale_for(amax[id(c)], c.result.type.element_type, headroom)
        prev = out.get(name, (s, 0.0))
        out[name] = (max(s, prev[0]), max(amax[id(c)], prev[1]))
        named.append((c, name))
    for c, name in named:
        c.properties["scale"] = IntegerAttr(out[name][0], i64)
    return out


def scale_entries(scales: Mapping[str, tuple[int, float]]) -> tuple[str, ...]:
    """`nn-quantize-activations{scales}` entries ("NAME=S") of a calibration's result."""
    return tuple(f"{name}={s}" for name, (s, _) in sorted(scales.items()))
