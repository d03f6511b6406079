"""`nn-quantize-activations`: FP8 activations into the K-split linears whose weights are FP8 (the FP8 AMP).

The IPU21's AMP multiplies FP8 x FP8 at 128 MACs per cycle and tile, twice its F16 rate, but only when both
operands are FP8: an FP8 weight against an f16 activation runs on the F16 AMP after the weight is widened to f16
panels on the device at every inference. This pass gives such linears an FP8 activation:

    %xq = nn.cast %x {scale = S} : tensor<MxKxf16> -> tensor<MxKxf8E4M3FNUZ>
    %p  = nn.linear_partials %xq, %w k_chunk = kc : (tensor<MxKxf8E4M3FNUZ>, tensor<NxKxf8E4M3FNUZ>) -> ...

for every many-row `nn.linear_partials` (more than `nn_split_k.FEW_ROWS` rows: the [G, gm, gn] grids whose
lowering takes FP8 x) with an FP8 weight, an f16 x and chunks of whole 32-deep FP8 K blocks
(`nn-split-k{fp8_kblock=true}` chooses such chunks). Linears reading the same x share one cast (before the first
of them), so the exchange carries the FP8 bytes (half of f16's) to the GEMM tiles. The lowering only rearranges
the FP8 weights into the FP8 AMP's panels (no conversion to f16 panels).

Scale (the rule, documented here and in docs/lowering.md): one power of two per cast, option `scale` (default -4:
F143's largest finite 240 x 2^-4 = 15, smallest normal 2^-11; the activations entering So400m's projections with
Hugging Face's initialisation peak at 2^-5 x 240 = 7.5, so nothing saturates and F143's relative rounding does not
depend on the scale in its normal range). The scale is a decision in the IR: a per-cast scale (say, from a
calibration input) is set by editing that cast's `scale` in textual IR; the lowering reads it from there.

Options:
  format (default "f143"): the activation format (f143 = F143 / E4M3, f152 = F152 / E5M2);
  scale (default -4): the power-of-two scale of every cast, in the FP8 metadata range [-32, 31];
  only (default none): parameter-name substrings: only linears whose weight parameter name contains one of them
      (for bisecting the accuracy; "none" casts every eligible linear's x);
  scales (default none): per-cast scales, entries "NAME=S": a cast whose readers' weight parameter names contain
      NAME gets scale S (the largest of several matches), the others `scale`. `ipu.frontend.calibrate` derives
      them from a calibration input (`compile_model(calibration=...)`, `ipu-run --calibrate`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import Float16Type, IntegerAttr, ModuleOp, TensorType, i64
from xdsl.passes import ModulePass

from ipu.dialects import nn
from ipu.passes.nn_quantize import FP8_FORMATS, SCALE_RANGE
from ipu.passes.nn_utils import param_names, refuse_unknown_names, weight_named

FP8_KBLOCK = 32  # inner elements of one FP8 AMP weight block (gemm.KBLOCK["fp8"])
FP8_TYPES = tuple(type(t) for t in FP8_FORMATS.values())


def fp8_x_eligible(op: nn.LinearPartialsOp) -> bool:
    """A many-row, ungrouped K split with an FP8 weight, an f16 x and chunks of whole FP8 K blocks."""
    from ipu.passes.nn_split_k import FEW_ROWS

    xt, wt = op.input.type, op.weight.type
    if not (isinstance(xt, TensorType) and isinstance(wt, TensorType)) or op.groups:
        return False
    shape = xt.get_shape()
    return (
        len(shape) == 2
        and shape[0] > FEW_ROWS
        and isinstance(xt.element_type, Float16Type)
        and isinstance(wt.element_type, FP8_TYPES)
        and op.chunk % FP8_KBLOCK == 0
    )


@dataclass(frozen=True)
class NNQuantizeActivationsPass(ModulePass):
    """Casts the f16 input of every eligible FP8-weight K split to FP8 (see the module docstring)."""

    name = "nn-quantize-activations"

    format: str = "f143"
    scale: int = -4
    only: tuple[str, ...] = ()
    scales: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.format not in FP8_FORMATS:
            raise ValueError(
                f"{self.name}: option 'format' must be one of {', '.join(FP8_FORMATS)}, got {self.format!r}"
            )
        lo, hi = SCALE_RANGE
        if isinstance(self.scale, bool) or not isinstance(self.scale, int) or not lo <= self.scale <= hi:
            raise ValueError(
                f"{self.name}: option 'scale' must be an integer in [{lo}, {hi}] (the FP8 metadata range), "
                f"got {self.scale!r}"
            )
        for entry in self.scales:
            self._parse_scale(entry)

    def _parse_scale(self, entry: str) -> tuple[str, int]:
        name, sep, value = entry.rpartition("=")
        lo, hi = SCALE_RANGE
        try:
            s = int(value)
        except ValueError:
            s = None
        if not sep or not name or s is None or not lo <= s <= hi:
            raise ValueError(
                f"{self.name}: option 'scales': entries are \"NAME=S\" (a parameter-name substring, an integer "
                f"scale in [{lo}, {hi}]), got {entry!r}"
            )
        return name, s

    def scale_of(self, readers: list, entries: list[tuple[str, int]]) -> int:
        """The cast's scale: the largest of `entries` (the parsed `scales`) matching one of its readers' weights,
        else `scale`."""
        names = [n for lin in readers for n in param_names(lin.weight, through_casts=True)]
        matched = [s for key, s in entries if any(key in n for n in names)]
        return max(matched) if matched else self.scale

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fp8 = FP8_FORMATS[self.format]
        casts: dict = {}  # x -> its FP8 cast (shared by the linears reading it)
        readers: dict = {}  # cast -> the linears reading it
        only = tuple(s for s in self.only if s != "none")
        if (
            only
        ):  # a substring of no linear's weight name is a typo, not a choice (a linear not split is fine)
            names = [
                n
                for o in op.walk()
                if isinstance(o, nn.LinearOp | nn.LinearPartialsOp)
                for n in param_names(o.weight, through_casts=True)
            ]
            refuse_unknown_names(self.name, "only", only, names)
        for lin in [o for o in op.walk() if isinstance(o, nn.LinearPartialsOp)]:
            if not fp8_x_eligible(lin):
                continue
            if only and not weight_named(lin, only):
                continue
            x = lin.input
            key = (x, id(lin.parent_block()))
            cast = casts.get(key)
            if cast is None:
                # Before the first reader (walk order): it dominates the block's other readers, which share it.
                cast = casts[key] = nn.CastOp(x, TensorType(fp8, x.type.get_shape()), self.scale)
                if x.name_hint:
                    cast.results[0].name_hint = f"{x.name_hint}_fp8"
                lin.parent_block().insert_op_before(cast, lin)
            lin.operands[0] = cast.result
            readers.setdefault(cast, []).append(lin)
        entries = [self._parse_scale(e) for e in self.scales]
        for cast, lins in readers.items():
            s = self.scale_of(lins, entries)
            if s != self.scale:
                cast.properties["scale"] = IntegerAttr(s, i64)
