"""`nn-quantize-weights`: FP8 weights for every GEMM whose weight is a parameter.

The IPU's AMP multiplies FP8 x F16 (or FP8 x FP8) at twice the F16 rate and FP8 weights take a quarter of the
f32 memory, so the weights of the linears are stored as FP8 with a power-of-two scale. The pass inserts

    %wq = nn.cast %w {scale = S} : tensor<OxIxf32> -> tensor<OxIxf8E4M3FNUZ>

on the weight of each `nn.linear` whose weight is f32 and computed from parameters only (an `nn.param`, a
reshape/slice/concat/transpose of parameters, or an `nn.repeat` body argument slicing a stacked parameter): the
cast is then a property of the weights, done once, not per inference. Activation-dependent operands of
`nn.matmul` (q @ k^T) are not touched.

What stays f32:
  - Biases: they are added to the accumulator, not multiplied by the AMP.
  - The linear's result type. The FP8 kernels accumulate in half-precision partials, but that is a property of
    the kernel chosen at a lower level; at the nn level the result keeps the model's logical type, so the rest
    of the graph (layer norms, residual adds) is unchanged and the reference evaluator keeps its f32 accumulation.

Options:
  format (default "f143"): "f143" casts to f8E4M3FNUZ (Graphcore F143), "f152" to f8E5M2FNUZ (F152).
  scale (default -4): the power-of-two scale of every weight cast, in the QUARTER metadata range [-32, 31].
      Logical value = decode(bits) * 2^scale, so -4 gives resolution for the small magnitudes of ViT weights.
  activations (default "f16"): "f16" also casts each rewritten linear's f32 input to f16 (the AMP's other
      operand format; one cast per input and block, shared by the linears that read it); "none" leaves inputs
      alone. An input that is gelu(linear(...)) with one use each (an MLP's hidden activation) is not cast: the
      linear and the GELU produce f16 themselves (the same values: f16 C -> f32 -> f16 is exact, and the GELU
      rounds its f32 result once either way); nor is a layer norm read only as linears' inputs (it produces f16).
      "f16" also casts every layer norm's parameter weight and bias to f16 (the row kernel's operand format: the
      lowering cast them on every tile at every inference before).
  keep_f16 (default none): parameter-name substrings (comma-separated list); a linear whose weight comes from a
      parameter whose name contains one of them gets F16 weights (`nn.cast` to f16) instead of FP8. The
      precision policy of `compile_model`/`ipu-run` (`ipu.passes.nn_quantize.KEEP_F16_DEFAULT`) keeps the patch
      embedding, the attention q/k projections and the MAP head in F16: FP8's 3 mantissa bits there cost the
      most accuracy (BENCHMARKS.md, "FP8 precision policy").
  attention_f16 (default false): also casts the f32 query, key and value operands of every `nn.attention` to f16
      (the attention's GEMMs run on the F16 AMP anyway): keys and values then travel and sit on the attention's
      tiles at half the bytes. An operand that is an `nn.linear` result read only there becomes that linear's f16
      result instead (the same values: both round the linear's f32 sum once).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import (
    Float8E4M3FNUZType,
    Float8E5M2FNUZType,
    Float32Type,
    ModuleOp,
    TensorType,
    f16,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.passes import ModulePass

from ipu.dialects import nn
from ipu.passes.nn_utils import is_param_derived, param_names, refuse_unknown_names

FP8_FORMATS: dict[str, Attribute] = {"f143": Float8E4M3FNUZType(), "f152": Float8E5M2FNUZType()}
ACTIVATION_MODES = ("f16", "none")
SCALE_RANGE = (-32, 31)
# Linears kept in F16 by the default precision policy (see the module docstring).
KEEP_F16_DEFAULT = ("patch_embedding", "q_proj", "k_proj", "head")
# The compact policy: q/k projections in FP8 too (-48.6 KB of resident weights per tile for So400m at 27 layers,
# the same accuracy to 1e-4 with Hugging Face's initialisation: BENCHMARKS "Accuracy at 27 layers"). compile_model
# falls back to it when the default policy does not fit the memory plan.
KEEP_F16_COMPACT = ("patch_embedding", "head")
# The default activation policy ("mlp"): FP8 activations into the MLP's linears (fc1: the second layer norm's
# output, fc2: the GELU output) where their weights are FP8 and they are K-split, so that they run on the FP8 AMP
# with their weights read in place and their x gathers carry half the bytes; f16 elsewhere (q / k / v, out_proj:
# attention is the most sensitive). So400m per layer 541 k -> 435 k cycles (default weights) and 477 k -> 431 k
# (compact), at under 5e-4 of token cosine with Hugging Face's initialisation at 24 and 27 layers (BENCHMARKS "FP8
# activations into the MLP by default"). Scale 2^0: F143 values up to 240 (16x the rule's 2^-4) keep room for the
# larger layer-norm and GELU outputs of trained checkpoints, at the same accuracy as 2^-4 here.
MLP_FP8_LINEARS = ("fc1", "fc2")
MLP_FP8_SCALE = 0
# The pass with the default precision policy, as used by compile_model and ipu-run.
DEFAULT_SPEC = f"nn-quantize-weights{{format=f143 scale=-4 activations=f16 keep_f16={','.join(KEEP_F16_DEFAULT)} attention_f16=true}}"  # the signed 6-bit scale field of the IPU's FP8 metadata


def _as_f16(op: Operation) -> SSAValue:
    """Replaces single-result `op` (f32 result) by the same op with an f16 result; returns that result."""
    res = op.results[0]
    new = type(op).create(
        operands=list(op.operands),
        result_types=[TensorType(f16, res.type.get_shape())],
        properties=dict(op.properties),
        attributes=dict(op.attributes),
    )
    op.parent_block().insert_op_before(new, op)
    new.results[0].name_hint = res.name_hint
    res.replace_all_uses_with(new.results[0])
    op.detach()
    op.erase()
    return new.results[0]


def _f16_gelu_of_linear(v):
    """For v = gelu(linear(...)) in f32 where each of the two results has one use (an MLP's hidden activation
    about to be cast to f16 for the next GEMM): the same two ops producing f16 instead (the linear's f16 result is
    what its f32 result held, the GELU rounds once either way), returning the f16 GELU result; else None."""
    gelu = v.owner
    if not isinstance(gelu, nn.GeluOp) or len(list(v.uses)) != 1:
        return None
    h = gelu.operands[0]
    lin = h.owner
    if not isinstance(lin, nn.LinearOp) or len(list(h.uses)) != 1:
        return None
    if not all(isinstance(t.element_type, Float32Type) for t in (h.type, v.type)):
        return None
    _as_f16(lin)
    return _as_f16(gelu)


def _f16_layer_norm(v):
    """For an f32 layer-norm result v read only as linears' inputs (q, k, v of attention; fc1): the layer norm
    producing f16 instead (it rounds its f32 result once either way), returning that result; else None."""
    ln = v.owner
    uses = list(v.uses)
    if not isinstance(ln, nn.LayerNormOp) or not uses or not isinstance(v.type.element_type, Float32Type):
        return None
    if not all(isinstance(u.operation, nn.LinearOp) and u.index == 0 for u in uses):
        return None
    return _as_f16(ln)


@dataclass(frozen=True)
class NNQuantizeWeightsPass(ModulePass):
    """Casts the parameter weights of every `nn.linear` to FP8 with a fixed power-of-two scale."""

    name = "nn-quantize-weights"

    format: str = "f143"
    scale: int = -4
    activations: str = "f16"
    keep_f16: tuple[str, ...] = ()
    attention_f16: bool = False

    def __post_init__(self) -> None:
        # Raised while the pipeline is built, so `ipu-opt` reports it as one line naming the option.
        if self.format not in FP8_FORMATS:
            raise ValueError(
                f"{self.name}: option 'format' must be one of {', '.join(FP8_FORMATS)}, got {self.format!r}"
            )
        lo, hi = SCALE_RANGE
        if not lo <= self.scale <= hi:
            raise ValueError(
                f"{self.name}: option 'scale' must be in [{lo}, {hi}] (the FP8 metadata range), got {self.scale}"
            )
        if self.activations not in ACTIVATION_MODES:
            raise ValueError(
                f"{self.name}: option 'activations' must be one of {', '.join(ACTIVATION_MODES)}, "
                f"got {self.activations!r}"
            )

    def _check_keep_f16(self, op: ModuleOp, provenance: dict) -> None:
        """Refuses a keep_f16 entry that is part of no linear's parameter name (a typo would otherwise quietly
        leave that linear in FP8). The default policy's names stand for every model (not each has a head)."""
        names = sorted(
            {
                n
                for o in op.walk()
                if isinstance(o, nn.LinearOp) and is_param_derived(o.weight, provenance)
                for n in param_names(o.weight)
            }
        )
        wanted = [k for k in self.keep_f16 if k not in KEEP_F16_DEFAULT]
        refuse_unknown_names(self.name, "keep_f16", wanted, names)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        fp8 = FP8_FORMATS[self.format]
        provenance: dict = {}  # memo for is_param_derived, shared across linears
        if self.keep_f16:
            self._check_keep_f16(op, provenance)
        # One f16 cast per activation and block: linears reading the same input (q, k and v) share it, so the
        # tile level gathers it once when their GEMMs take it in the same layout.
        act_casts: dict = {}
        for linear in [o for o in op.walk() if isinstance(o, nn.LinearOp)]:
            wt = linear.weight.type
            if not (isinstance(wt, TensorType) and isinstance(wt.element_type, Float32Type)):
                continue
            if not is_param_derived(linear.weight, provenance):
                continue
            block = linear.parent_block()
            if self.keep_f16 and any(k in name for name in param_names(linear.weight) for k in self.keep_f16):
                cast = nn.CastOp(linear.weight, TensorType(f16, wt.get_shape()))
            else:
                cast = nn.CastOp(linear.weight, TensorType(fp8, wt.get_shape()), self.scale)
            block.insert_op_before(cast, linear)
            linear.operands[1] = cast.result

            xt = linear.input.type
            if (
                self.activations == "f16"
                and isinstance(xt, TensorType)
                and isinstance(xt.element_type, Float32Type)
            ):
                key = (linear.input, id(block))
                x16 = act_casts.get(key)
                if x16 is None and (g16 := _f16_gelu_of_linear(linear.input)) is not None:
                    linear.operands[0] = g16
                    continue
                if x16 is None and (n16 := _f16_layer_norm(linear.input)) is not None:
                    linear.operands[0] = n16
                    continue
                if x16 is None:
                    x16 = act_casts[key] = nn.CastOp(linear.input, TensorType(f16, xt.get_shape()))
                    block.insert_op_before(x16, linear)
                linear.operands[0] = x16.result
        if self.activations == "f16":
            # Layer-norm weights and biases from parameters as f16 (host-folded casts): the row kernel reads
            # them as f16, so they travel and sit at half the bytes, and no cast pass runs per inference.
            ln_casts: dict = {}  # one cast per parameter and block
            for ln in [o for o in op.walk() if isinstance(o, nn.LayerNormOp)]:
                for i in (1, 2):
                    v = ln.operands[i]
                    t = v.type
                    if not (isinstance(t, TensorType) and isinstance(t.element_type, Float32Type)):
                        continue
                    if not is_param_derived(v, provenance):
                        continue
                    key = (v, id(ln.parent_block()))
                    p16 = ln_casts.get(key)
                    if p16 is None:
                        p16 = ln_casts[key] = nn.CastOp(v, TensorType(f16, t.get_shape()))
                        ln.parent_block().insert_op_before(p16, ln)
                    ln.operands[i] = p16.result
        if self.attention_f16:
            for att in [o for o in op.walk() if isinstance(o, nn.AttentionOp)]:
                for i in range(3):
                    v = att.operands[i]
                    t = v.type
                    if not (isinstance(t, TensorType) and isinstance(t.element_type, Float32Type)):
                        continue
                    owner = v.owner
                    if isinstance(owner, nn.LinearOp) and len(list(v.uses)) == 1:
                        # A linear read only here produces f16 itself: the same values as f32 then a cast (both
                        # round its f32 sum once), without the f32 result and the cast pass over it.
                        _as_f16(owner)
                        continue
                    x16 = nn.CastOp(v, TensorType(f16, t.get_shape()))
                    att.parent_block().insert_op_before(x16, att)
                    att.operands[i] = x16.result
