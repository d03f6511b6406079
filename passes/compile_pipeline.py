"""`ipu-compile-pipeline`: nn IR -> placed IR (after `memory-plan`), the pipeline `compile_model` and
`ipu-run --model` run, as one named pass.

    ipu-opt model.mlir --pass-pipeline='builtin.module(ipu-compile-pipeline{tiles=16})' -t ipu-package -o m.ipupkg
    ipu-opt model.mlir -p 'ipu-compile-pipeline{tiles=16 sram_kib=624 repeat=false split_rows=false}'

Options: `tiles` (default 1472: the full IPU21), `sram_kib` (SRAM per tile, default 624; with 1472 tiles the
IPU21 itself), `repeat` (default true: the layers outlined into one `tile.repeat` loop, `nn-outline-repeat` +
`nn-hoist-stacked`), `split_rows` (default true: many-row linears split along K too where the estimate wins),
`scratch` (default true: lowering-storage sizes and memory-plan reserves the lowering's storage; false for per-op debug builds,
whose kept values live there).

The pass applies, in order, the passes of `pipeline_spec(target, repeat, scratch, split_rows)` (spelled out by
`IpuCompilePipelinePass.pipeline_text()`); `ipu.backend.lower.lowering` re-exports `pipeline_spec` and the
constants below.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline

from ipu.backend.target import IPU21, Target

# Activation precision of the FP8-weight K splits: f16 (the F16 AMP), fp8 (the FP8 AMP, `nn-quantize-activations`),
# or mlp (the default: fp8 into the MLP's linears only, `nn_quantize.MLP_FP8_LINEARS` at 2^`MLP_FP8_SCALE`).
ACTIVATIONS = ("f16", "fp8", "mlp")


def pipeline_spec(
    target: Target,
    outline_repeat: bool = False,
    scratch: bool = True,
    split_rows: bool = True,
    keep_f16: tuple[str, ...] | None = None,
    activations: str = "f16",
    activation_scales: tuple[str, ...] = (),
    weights_order: str = "auto",
    fp8_linears: tuple[str, ...] = (),
    sum_addends: str = "sums",
) -> str:
    """The pass pipeline from nn IR to placed IR for `target` (layers outlined into one loop if outline_repeat).

    - `nn-split-mlp`: MLPs with a hidden size over 2304 run as parts (So400m's 4304: two), so that no GEMM's
      operands take half a tile, in stage order (both fc1s, both GELUs, both fc2s: the fc1s' shared input is
      dead before the fc2 operands arrive);
    - `nn-hoist-stacked` (with the loop): the per-layer weight casts and slices leave the loop body, so the host
      uploads each prepared weight as one Repeat sequence instead of the f32 parameters;
    - weights: the default precision policy (FP8, with the patch embedding, q/k projections and MAP head in F16,
      attention operands f16: `ipu.passes.nn_quantize.DEFAULT_SPEC`), or FP8 but for the linears whose parameter
      names contain one of `keep_f16` (`KEEP_F16_COMPACT`: q/k in FP8 too, what 27 So400m layers need to fit).
      Q, K and V stay separate linears:
      `nn-fuse-qkv`'s column slices of the fused result are planned as whole tensors on one tile
      (`#tile.single`), which does not fit at full size;
    - `nn-split-attention-keys`: long attentions' keys in chunks over each head's tiles, merged (So400m: two
      chunks of 365 / 364 keys; each tile receives half of its head's K and V);
    - `nn-split-k`: few-row linears (the MAP head's) as partial products over K chunks on more tiles, summed;
      with split_rows (default) many-row linears too (x from a layer norm, another split's sum or attention),
      where its estimate wins (not: `nn-split-k{many_rows=false}`);
    - activations "fp8": `nn-split-k{fp8_kblock=true}` and `nn-quantize-activations`: the FP8-weight K splits
      take FP8 activations and run on the FP8 AMP ("f16": f16 activations, the F16 AMP), each cast at
      `activation_scales`' scale for its linears ("NAME=S" entries, `nn-quantize-activations{scales}`) or 2^-4;
      `fp8_linears` (parameter-name substrings) restricts both to those linears (the others keep f16 x);
    - `nn-fuse-sum-activation`: a K split's f16 sum and the tanh GELU reading it as one op (the fused `ksum`
      computes the GELU before it stores the sum: So400m's fc1 parts);
    - `nn-fuse-sum-add{addends=sum_addends}`: f32 adds of a K split's sum folded into it as addends (the fused
      `ksum` adds them before it stores the sum: "sums", the default here, folds So400m's two fc2 parts' add;
      "loops" the residual adds in the layer loop too, whose carried stream tile-plan then keeps in the sums'
      column blocks (`tile-plan{carried}`); "any" every residual add; "none" none. `IpuCompilePipelinePass`
      chooses "loops" or "sums" per module by a trial plan, `sum_addends=auto`);
    - `nn-to-exchange-pipeline` runs tile-plan, `tile-fuse-sum-cast` (an FP8 cast folded into the planned K-split
      sum it reads, where the fused `ksum` takes the blocks), `tile-balance-homes` (the resident parameters' home blocks
      spread over the tiles, each tile's working set counted), exchange-lower, exchange-schedule, kernel-select;
    - `lowering-storage` measures the lowering's code, frames / tables and scratch (a measuring lowering of a
      placed copy) and memory-plan reserves exactly that (not with `scratch=False`: per-op debug values are kept
      above the plan; targets without the kernels' three scratch elements get no reservation); tile-plan's GEMM
      budget is derived from the target and the model's resident bytes (`tile_plan.gemm_budget`, recorded as
      `tile.gemm_budget` on the function)."""
    from ipu.backend.lower.placement import scratch_target_problem
    from ipu.passes.nn_quantize import DEFAULT_SPEC, KEEP_F16_DEFAULT

    quantize = DEFAULT_SPEC
    if keep_f16 is not None and tuple(keep_f16) != KEEP_F16_DEFAULT:
        quantize = DEFAULT_SPEC.replace(f"keep_f16={','.join(KEEP_F16_DEFAULT)} ", "")
        if keep_f16:
            quantize = quantize.replace(" attention_f16", f" keep_f16={','.join(keep_f16)} attention_f16")
    opts = f"{{tiles={target.num_tiles} sram_kib={target.sram_bytes // 1024}}}"
    rep, hoist = ("nn-outline-repeat,", "nn-hoist-stacked,") if outline_repeat else ("", "")
    mem, xopts = f"memory-plan{opts}", opts
    if scratch and scratch_target_problem(target) is None:
        # The lowering's code, tables and scratch: measured by lowering-storage, reserved by memory-plan at that
        # size (targets without the kernels' scratch elements get no reservation: the lowering refuses them).
        mem = f"lowering-storage{opts},memory-plan{opts}"
    if activations not in ("f16", "fp8"):  # `mlp`: IpuCompilePipelinePass.resolved for the module first
        raise ValueError(f"activations must be f16 or fp8, got {activations!r}")
    fp8x = activations == "fp8"
    only = ",".join(fp8_linears) if fp8x and fp8_linears else ""
    split_k = (
        f"nn-split-k{{tiles={target.num_tiles}{'' if split_rows else ' many_rows=false'}"
        f"{' fp8_kblock=true' if fp8x else ''}{f' fp8_only={only}' if only else ''}}}"
    )
    quantize_x = []
    if fp8x and activation_scales:
        quantize_x.append("scales=" + ",".join(f'"{e}"' for e in activation_scales))
    if only:
        quantize_x.append(f"only={only}")
    if fp8x:
        split_k += ",nn-quantize-activations" + (f"{{{' '.join(quantize_x)}}}" if quantize_x else "")
    # tile-plan's storage order of GEMM weight panels (default "auto": `ampw` where it fits)
    if weights_order != "auto":
        xopts = f"{xopts[:-1]} weights_order={weights_order}}}"
    keys = f"nn-split-attention-keys{{tiles={target.num_tiles}}}"
    return (
        f"nn-fold-probe-attention{{tiles={target.num_tiles}}},nn-split-mlp,{rep}{quantize},{keys},{hoist}{split_k},"
        f"nn-fuse-sum-activation,nn-fuse-sum-add{{addends={sum_addends}}},nn-to-exchange-pipeline{xopts},{mem}"
    )


def compile_target(tiles: int = IPU21.num_tiles, sram_kib: int = IPU21.sram_bytes // 1024) -> Target:
    """The target of `tiles` x `sram_kib` KiB (`tile_plan.target_for`: the IPU21 itself for 1472 x 624)."""
    from ipu.passes.tile_plan import target_for

    return target_for(tiles, sram_kib)


@dataclass(frozen=True)
class IpuCompilePipelinePass(ModulePass):
    """nn IR -> placed IR for one target (see the module docstring)."""

    name = "ipu-compile-pipeline"

    tiles: int = IPU21.num_tiles
    """Tiles of the target (default: the full IPU21's 1472)."""
    sram_kib: int = IPU21.sram_bytes // 1024
    """SRAM per tile, KiB (a multiple of 16, at most 624)."""
    repeat: bool = True
    """Outline the layers into one `tile.repeat` loop (nn-outline-repeat, nn-hoist-stacked)."""
    split_rows: bool = True
    """nn-split-k splits many-row linears too (false: `many_rows=false`)."""
    scratch: bool = True
    """memory-plan reserves the lowering's scratch (false: per-op debug builds)."""
    keep_f16: tuple[str, ...] = ("default",)
    """The precision policy: linears in F16 by parameter-name substrings, the rest FP8 (nn-quantize-weights'
    keep_f16): `default` (the patch embedding, q/k projections and MAP head: `KEEP_F16_DEFAULT`), `compact`
    (the patch embedding and MAP head: `KEEP_F16_COMPACT`), `none` (every projection FP8), or a list."""
    activations: str = "mlp"
    """The FP8-weight K splits' activations: `f16` (F16 AMP), `fp8` (`nn-quantize-activations`: the FP8 AMP) or
    `mlp` (fp8 into the linears named like the MLP's, `nn_quantize.MLP_FP8_LINEARS`, at 2^`MLP_FP8_SCALE`; f16
    elsewhere, and everywhere in a module with no such linear: `resolved`)."""
    activation_scales: tuple[str, ...] = ()
    """With activations `fp8` or `mlp`: per-cast FP8 scales, "NAME=S" (`nn-quantize-activations{scales}`; what
    `compile_model(calibration=...)` derives from a calibration input); none: the rule's 2^-4 (`mlp`: 2^0)."""
    fp8_linears: tuple[str, ...] = ()
    """With activations `fp8`: only the linears whose weight parameter names contain one of these substrings take
    FP8 activations (`nn-split-k{fp8_only}`, `nn-quantize-activations{only}`); none: every FP8-weight K split."""
    weights_order: str = "auto"
    """GEMM weight storage (tile-plan's `weights_order`): "auto" keeps the weights of FP8-activation K splits in
    the AMP panel order their GEMM reads in place (`ampw`, permuted by the host at upload; `tile_plan.ampw_fits`),
    the rest row-major; "row_major": every weight row-major, panels made on the device per inference."""
    sum_addends: str = "auto"
    """Which f32 adds of a K split's sum `nn-fuse-sum-add` folds into the sum (`addends`): "loops" (another K
    split's sum, as So400m's MLP parts, or a value the layer loop carries: the residual stream, which tile-plan
    then carries in the sums' column blocks), "sums" (another K split's sum only), "any" (every residual add, in
    or out of a loop), "none", or "auto" (default): "loops" where a trial plan of the module (its nn passes and
    tile-plan) shows every sum in the loop reading its residual addends where they lie, else "sums"
    (`residual_folds_in_place`; `resolved` spells it out)."""
    stop_after: str = ""
    """Stop after this pass of the pipeline (e.g. `nn-to-exchange-pipeline`: the IR with the kernel choices, to
    edit before `lowering-storage,memory-plan`); "" runs it all."""

    def __post_init__(self) -> None:
        # Raised while the pipeline is built: `ipu-opt` reports one line naming the option.
        for opt in ("tiles", "sram_kib"):
            value = getattr(self, opt)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{self.name}: option '{opt}' must be an integer, got {value!r}")
            if value <= 0:
                raise ValueError(f"{self.name}: option '{opt}' must be positive, got {value}")
        for opt in ("repeat", "split_rows", "scratch"):
            if not isinstance(getattr(self, opt), bool):
                raise ValueError(
                    f"{self.name}: option '{opt}' must be true or false, got {getattr(self, opt)!r}"
                )
        try:
            compile_target(self.tiles, self.sram_kib)
        except ValueError as e:
            raise ValueError(f"{self.name}: {e}") from None
        if self.activations not in ACTIVATIONS:
            raise ValueError(
                f"{self.name}: option 'activations' must be one of {', '.join(ACTIVATIONS)}, got {self.activations!r}"
            )
        if [x for x in self.fp8_linears if x != "none"] and self.activations != "fp8":
            raise ValueError(
                f"{self.name}: option 'fp8_linears' chooses the linears with FP8 activations: it needs "
                f"activations=fp8, got activations={self.activations}"
            )
        from ipu.passes.nn_fuse_sum_add import ADDEND_POLICIES
        from ipu.passes.tile_plan import WEIGHTS_ORDERS

        if self.sum_addends not in ("auto", *ADDEND_POLICIES):
            raise ValueError(
                f"{self.name}: option 'sum_addends' must be one of auto, {', '.join(ADDEND_POLICIES)}, got "
                f"{self.sum_addends!r}"
            )

        if self.weights_order not in WEIGHTS_ORDERS:
            raise ValueError(
                f"{self.name}: option 'weights_order' must be one of {', '.join(WEIGHTS_ORDERS)}, got {self.weights_order!r}"
            )
        # (the passes of `fp8`, a superset of any module's `mlp` resolution; `auto` sum_addends: the same passes)
        if not self.stop_after:
            return
        spelled = replace(
            self,
            activations="fp8" if self.activations == "mlp" else self.activations,
            sum_addends="sums" if self.sum_addends == "auto" else self.sum_addends,
            stop_after="",
        )
        names = [p.name for p in spelled.passes()]
        if self.stop_after not in names:
            raise ValueError(f"{self.name}: option 'stop_after': no pass {self.stop_after!r} in {names}")

    @property
    def target(self) -> Target:
        return compile_target(self.tiles, self.sram_kib)

    def precision(self) -> tuple[str, ...]:
        """keep_f16 with its names resolved: the substrings of the linears kept in F16."""
        from ipu.passes.nn_quantize import KEEP_F16_COMPACT, KEEP_F16_DEFAULT

        named = {"default": KEEP_F16_DEFAULT, "compact": KEEP_F16_COMPACT, "none": ()}
        keep = tuple(self.keep_f16)
        if len(keep) == 1 and keep[0] in named:
            return named[keep[0]]
        return keep

    def resolved(self, module: ModuleOp) -> IpuCompilePipelinePass:
        """This pass with activations `mlp` and sum_addends `auto` spelled out for `module`. `mlp`: `fp8`
        restricted to the MLP linear names the module has (`fp8_linears`), at 2^`MLP_FP8_SCALE` unless scales are
        given; `f16` if it has none. `auto`: "loops" where `residual_folds_in_place` says so for a trial plan of a
        copy of the module, else "sums". Other values: unchanged."""
        cp = self._activations_resolved(module)
        if cp.sum_addends != "auto":
            return cp
        if cp.repeat and residual_folds_in_place(replace(cp, sum_addends="loops"), module):
            return replace(cp, sum_addends="loops")
        return replace(cp, sum_addends="sums")

    def _activations_resolved(self, module: ModuleOp) -> IpuCompilePipelinePass:
        if self.activations != "mlp":
            return self
        from ipu.dialects import nn
        from ipu.passes.nn_quantize import MLP_FP8_LINEARS, MLP_FP8_SCALE
        from ipu.passes.nn_utils import param_names

        names = [
            n
            for o in module.walk()
            if isinstance(o, nn.LinearOp | nn.LinearPartialsOp)
            for n in param_names(o.weight, through_casts=True)
        ]
        present = tuple(k for k in MLP_FP8_LINEARS if any(k in n for n in names))
        if not present:
            return replace(self, activations="f16", activation_scales=())
        scales = tuple(self.activation_scales) or tuple(f"{k}={MLP_FP8_SCALE}" for k in present)
        return replace(self, activations="fp8", fp8_linears=present, activation_scales=scales)

    def pipeline_text(self) -> str:
        """The passes this pass applies, in xDSL's `-p` syntax (= `pipeline_spec` of its target; activations
        `mlp` and sum_addends `auto` must be `resolved` for a module first)."""
        if self.activations == "mlp":
            raise ValueError(f"{self.name}: activations=mlp depends on the module: resolve it first")
        if self.sum_addends == "auto":
            raise ValueError(f"{self.name}: sum_addends=auto depends on the module: resolve it first")
        return pipeline_spec(
            self.target,
            self.repeat,
            scratch=self.scratch,
            split_rows=self.split_rows,
            keep_f16=self.precision(),
            activations=self.activations,
            activation_scales=tuple(self.activation_scales),
            weights_order=self.weights_order,
            fp8_linears=tuple(x for x in self.fp8_linears if x != "none"),
            sum_addends=self.sum_addends,
        )

    def passes(self) -> tuple[ModulePass, ...]:
        from ipu.passes.registry import all_passes

        return PassPipeline.parse_spec(dict(all_passes()), self.pipeline_text()).passes

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.resolved(op).apply_with_progress(ctx, op)

    def apply_with_progress(self, ctx: Context, op: ModuleOp, progress=None, extra_phases: int = 0) -> None:
        """`apply`, calling `progress(pass name, passes done, total)` before each pass (total: the passes to run
        plus `extra_phases` a caller runs after them, as `compile_model`'s lowering)."""
        if self.activations == "mlp" or self.sum_addends == "auto":
            return self.resolved(op).apply_with_progress(ctx, op, progress, extra_phases)
        passes = self.passes()
        if self.stop_after:
            passes = passes[: [p.name for p in passes].index(self.stop_after) + 1]
        for i, p in enumerate(passes):
            if progress is not None:
                progress(p.name, i, len(passes) + extra_phases)
            p.apply(ctx, op)


def residual_folds_in_place(cp: IpuCompilePipelinePass, module: ModuleOp) -> bool:
    """Whether folding the layer loop's residual adds into its K-split sums (`cp`'s sum_addends, "loops") pays on
    `module`: a trial of cp's nn passes and tile-plan on a copy, in which some sum of a loop body takes a residual
    addend (a value the loop carries, or a sum that took one) and every such addend reaches its sum without a
    relayout (tile-plan's carried layouts put the stream where the sums lie: So400m). Where the sums' layouts
    differ (e.g. out_proj's and fc2's blocks on other tiles), each fold would move the stream once more per layer
    than the adds do, and the answer is no."""
    from xdsl.utils.exceptions import PassFailedException

    from ipu.dialects import nn
    from ipu.dialects import tile as tl
    from ipu.passes.registry import all_passes

    if any(o.dialect_name() not in ("builtin", "func", "nn") for o in module.walk()):
        return False  # planned already (tile level or below): the nn passes do not run on it
    trial = module.clone()
    head = cp.pipeline_text().split(",nn-to-exchange-pipeline")[0]
    plan = f"tile-plan{{tiles={cp.tiles} sram_kib={cp.sram_kib} weights_order={cp.weights_order}}}"
    try:
        PassPipeline.parse_spec(dict(all_passes()), f"{head},{plan}").apply(Context(), trial)
    except PassFailedException:
        return False  # the real pipeline reports it
    folded = False
    for loop in trial.walk():
        if not isinstance(loop, tl.RepeatOp):
            continue
        residual = set(loop.body.block.args[: len(loop.carried)])
        for op in loop.body.block.ops:
            if not isinstance(op, nn.ReduceSumOp):
                continue
            for a in op.addends:
                moved = isinstance(a.owner, tl.RelayoutOp)
                if (a.owner.input if moved else a) in residual:
                    if moved:
                        return False
                    folded = True
                    residual.add(op.result)
    return folded
