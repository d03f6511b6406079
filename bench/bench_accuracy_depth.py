"""Accuracy at depth (issue 20): per-operator bisection of the device-precision error against fp32, and policies.

Reference evaluator only (no simulator). The model is So400m/14-384 with `--layers` encoder layers (default 27)
and the MAP head, through the device's nn-level passes (`DEVICE_PASSES`: the probe fold, the MLP split, the layer
loop, the precision policy, the key split, the hoisted weight casts, the K splits with their f16 partials), so the
evaluated IR holds every f16 / FP8 type the device computes in. Each row switches sources of rounding on or off
(`ipu.frontend.reference.DeviceModel`: `exact` leaves a source out, `kernels` models the device's f16 kernels the
default device mode does not):

- "only ..." rows: fp32 everywhere except the one source (isolated contribution);
- "device ..." rows: the policy with the default device mode, or with every device kernel modelled ("full");
- "full - ..." rows: the full device model with one source left out (what removing it buys).

Each cell: min token cosine / pooler cosine / max rel-L2 over every embedding (each token row of
last_hidden_state and the pooled output) against the fp32 reference of the plain model on the same weights
(`random_weights(cfg, seed, perturbed=...)`; "hf" = Hugging Face's initialisation, unperturbed) and image (uniform
in [-1, 1], seed + 1).

    python -m bench.bench_accuracy_depth --layers 4 --seeds 2 --rows bisect          # rank the sources
    python -m bench.bench_accuracy_depth --layers 27 --seeds 3 --init hf --rows policies --kernels device
    python -m bench.bench_accuracy_depth --layers 27 --rows policies --policy 'nn-quantize-weights{...}'
    python -m bench.bench_accuracy_depth --layers 27 --init hf --rows policies --activations fp8 --calibrate
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.passes import PassPipeline

from ipu.frontend.reference import DEVICE_KERNELS, EXACT_SOURCES, DeviceModel, evaluate
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes.nn_quantize import DEFAULT_SPEC
from ipu.passes.registry import all_passes
from ipu.tools.ipu_run import per_embedding

# The nn-level passes of `pipeline_spec` (passes/compile_pipeline.py) around the precision policy {spec}.
DEVICE_PASSES = (
    "nn-fold-probe-attention,nn-split-mlp,nn-outline-repeat,{spec},nn-split-attention-keys{{tiles=1472}},"
    "nn-hoist-stacked,nn-split-k{{tiles=1472}}"
)
# --activations fp8: the K splits in whole FP8 blocks and their FP8 activations (pipeline_spec's activations="fp8").
FP8_ACTIVATIONS = (
    "nn-split-k{{tiles=1472}}",
    "nn-split-k{{tiles=1472 fp8_kblock=true}},nn-quantize-activations",
)
# Linear kinds by parameter-name substring (keep_f16 of nn-quantize-weights). "head" also covers the MAP head's
# fc1 / out_proj, so a kind is isolated by keeping every other kind, "head" included, in F16.
KINDS = ("patch_embedding", "q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2", "head")
BASE = "format=f143 scale={scale} activations=f16 attention_f16=true"
ALL = frozenset(EXACT_SOURCES)


def spec(fp8: tuple[str, ...] = (), scale: int = -4) -> str:
    """nn-quantize-weights with FP8 weights for the kinds `fp8`, F16 for the others."""
    keep = [k for k in KINDS if k not in fp8]
    keep_opt = f" keep_f16={','.join(keep)}" if keep else ""
    return f"nn-quantize-weights{{{BASE.format(scale=scale)}{keep_opt}}}"


@dataclass(frozen=True)
class Row:
    name: str
    spec: str
    model: DeviceModel
    max_abs_scale: bool = False  # each FP8 cast's scale from its tensor's max-abs (`max_abs_scales`)


def max_abs_scales(module, weights) -> dict[int, int]:
    """Sets the scale of every FP8 `nn.cast` of the module to the per-tensor power of two that puts the largest
    |w| of its parameter(s) just within F143's 240 (over the whole stacked tensor: one scale per cast, as the
    hoisted casts of the layer loop have), clamped to the metadata range; returns {scale: casts}."""
    from xdsl.dialects.builtin import IntegerAttr, i64

    from ipu.dialects import nn
    from ipu.passes.nn_quantize import SCALE_RANGE
    from ipu.passes.nn_utils import param_names

    count: dict[int, int] = {}
    for op in module.walk():
        if isinstance(op, nn.CastOp) and op.scale is not None:
            top = max(float(np.abs(np.asarray(weights[n], np.float32)).max()) for n in param_names(op.input))
            sc = min(max(math.ceil(math.log2(top / 240.0)), SCALE_RANGE[0]), SCALE_RANGE[1])
            op.properties["scale"] = IntegerAttr(sc, i64)
            count[sc] = count.get(sc, 0) + 1
    return count


def only(name: str, sp: str, source: str | None = None, kernel: str | None = None) -> Row:
    exact = ALL - {source} if source else ALL
    return Row(name, sp, DeviceModel(exact=exact, kernels={kernel} if kernel else set()))


FULL = frozenset(DEVICE_KERNELS)
ALL_FP8 = spec(KINDS)


def bisect_rows() -> list[Row]:
    f16_everywhere = spec(())
    rows = [only("nothing rounds (the passes' IR in fp32)", ALL_FP8)]
    rows += [only(f"only FP8 {k}", spec((k,)), "fp8") for k in KINDS]
    rows += [
        only("only FP8 every projection", ALL_FP8, "fp8"),
        only("only FP8 every projection, scale -8", spec(KINDS, -8), "fp8"),
        only("only FP8 every projection, scale -12", spec(KINDS, -12), "fp8"),
        Row(
            "only FP8 every projection, per-tensor max-abs scale",
            ALL_FP8,
            DeviceModel(exact=ALL - {"fp8"}),
            max_abs_scale=True,
        ),
        only("only F16 weights (every linear F16)", f16_everywhere, "f16_weights"),
        only("only f16 activations", f16_everywhere, "f16_activations"),
        only("only f16 partials and sums", f16_everywhere, "f16_partials"),
        only("only AMP f16 accumulation", f16_everywhere, kernel="amp_f16"),
        only("only layer norm f16 kernel (f16 residual into LN)", f16_everywhere, kernel="layer_norm_f16"),
        only("only softmax / attention f16", f16_everywhere, kernel="softmax_f16"),
        only("only GELU f16", f16_everywhere, kernel="gelu_f16"),
        Row("device, every linear F16, full kernels", f16_everywhere, DeviceModel(kernels=FULL)),
        Row("device, FP8 every projection, full kernels", ALL_FP8, DeviceModel(kernels=FULL)),
    ]
    rows += [
        Row(f"full FP8 - {s}", ALL_FP8, DeviceModel(exact={s}, kernels=FULL))
        for s in EXACT_SOURCES
        if s != "fp8"
    ]
    rows += [Row(f"full FP8 - {k}", ALL_FP8, DeviceModel(kernels=FULL - {k})) for k in DEVICE_KERNELS]
    return rows


def policy_rows(extra: list[str], kernels: str = "both") -> list[Row]:
    """Today's policy, then FP8 for more projections; each in the default device mode and / or with every device
    kernel modelled ("full")."""
    policies = [
        ("today's DEFAULT_SPEC", DEFAULT_SPEC),
        ("FP8 but patch_embedding, head", spec(KINDS[1:-1])),
        ("FP8 but patch_embedding", spec(KINDS[1:])),
        ("FP8 every projection", ALL_FP8),
        *((f"--policy {i}", sp) for i, sp in enumerate(extra)),
    ]
    models = {"device": DeviceModel(), "full": DeviceModel(kernels=FULL)}
    chosen = ("device", "full") if kernels == "both" else (kernels,)
    return [Row(f"{name}, {m}", sp, models[m]) for name, sp in policies for m in chosen]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=27)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--init", choices=("perturbed", "hf", "both"), default="both")
    p.add_argument("--rows", choices=("bisect", "policies"), default="bisect")
    p.add_argument("--only", action="append", help="run only rows whose name contains this (repeatable)")
    p.add_argument(
        "--policy", action="append", default=[], help="an nn-quantize-weights spec to add (policies)"
    )
    p.add_argument(
        "--kernels",
        choices=("device", "full", "both"),
        default="both",
        help="policies: the default device mode, every device kernel modelled, or both",
    )
    p.add_argument(
        "--activations",
        choices=("f16", "fp8"),
        default="f16",
        help="the FP8-weight K splits' activations: f16, or FP8 (nn-quantize-activations, the FP8 AMP)",
    )
    p.add_argument(
        "--calibrate",
        action="store_true",
        help="with --activations fp8: each seed's FP8 activation scales calibrated on another image "
        "(ipu.frontend.calibrate) instead of the fixed 2^-4",
    )
    p.add_argument(
        "--fp8-only",
        action="append",
        default=[],
        help="with --activations fp8: only the linears whose weight name contains this (repeatable; "
        "nn-quantize-activations' `only`)",
    )
    p.add_argument(
        "--x-scale",
        type=int,
        help="with --activations fp8: the casts' power-of-two scale (nn-quantize-activations' `scale`; default -4)",
    )
    args = p.parse_args()
    passes = DEVICE_PASSES if args.activations == "f16" else DEVICE_PASSES.replace(*FP8_ACTIVATIONS)
    quantize_x = [f"only={','.join(args.fp8_only)}"] if args.fp8_only else []
    quantize_x += [f"scale={args.x_scale}"] if args.x_scale is not None else []
    if quantize_x:
        passes = passes.replace(
            "nn-quantize-activations", f"nn-quantize-activations{{{{{' '.join(quantize_x)}}}}}"
        )
    cfg = PRESETS["so400m-patch14-384"].with_layers(args.layers)
    rows = bisect_rows() if args.rows == "bisect" else policy_rows(args.policy, args.kernels)
    if args.only:
        rows = [r for r in rows if any(o in r.name for o in args.only)]
    inits = ("perturbed", "hf") if args.init == "both" else (args.init,)
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(
        f"So400m/14-384, {args.layers} layers + MAP head, {args.activations} activations; cells: min token cos / "
        "pooler cos / max rel-L2"
    )
    modules: dict[str, object] = {}
    for init in inits:
        cols = [f"{init} seed {s}" for s in seeds]
        print(f"\n| {init} init | " + " | ".join(cols) + " |")
        print("|---|" + "---:|" * len(cols), flush=True)
        results: dict[str, list[str]] = {r.name: [] for r in rows}
        for seed in seeds:
            w = random_weights(cfg, seed, perturbed=init == "perturbed")
            x = np.random.default_rng(seed + 1).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size))
            x = x.astype(np.float32)
            t0 = time.perf_counter()
            ref = evaluate(build_vision_model(cfg), {"pixel_values": x}, w, mode="fp32").outputs
            print(f"  (fp32 reference, seed {seed}: {time.perf_counter() - t0:.0f} s)", flush=True)
            for r in rows:
                if r.spec not in modules or r.max_abs_scale:
                    m = build_vision_model(cfg)
                    PassPipeline.parse_spec(dict(all_passes()), passes.format(spec=r.spec)).apply(
                        Context(), m
                    )
                    if r.max_abs_scale:
                        print(f"  (max-abs scales {max_abs_scales(m, w)})")
                    else:
                        modules[r.spec] = m
                if args.calibrate:  # this seed's weights, another image (seed + 2)
                    from ipu.frontend.calibrate import calibrate_activations

                    xc = np.random.default_rng(seed + 2).uniform(-1, 1, x.shape).astype(np.float32)
                    got = calibrate_activations(
                        m if r.max_abs_scale else modules[r.spec], {"pixel_values": xc}, w
                    )
                    print("  (calibrated scales " + ", ".join(f"{n.split('.')[-2]} {s}" for n, (s, _) in
                          sorted(got.items())) + ")", flush=True)  # fmt: skip
                t0 = time.perf_counter()
                d = evaluate(
                    m if r.max_abs_scale else modules[r.spec],
                    {"pixel_values": x},
                    w,
                    mode="device",
                    device_model=r.model,
                ).outputs
                tok = per_embedding(d["last_hidden_state"], ref["last_hidden_state"])
                pool = per_embedding(d["pooler_output"], ref["pooler_output"])
                cell = f"{tok[0]:.5f} / {pool[0]:.5f} / {max(tok[1], pool[1]):.4f}"
                results[r.name].append(cell)
                print(f"  {r.name}, seed {seed}: {cell} ({time.perf_counter() - t0:.0f} s)", flush=True)
            del w
        for r in rows:
            print(f"| {r.name} | " + " | ".join(results[r.name]) + " |")
        print(flush=True)
    print("specs:")
    for r in rows:
        print(f"  {r.name}: `{r.spec}` exact={sorted(r.model.exact)} kernels={sorted(r.model.kernels)}")


if __name__ == "__main__":
    main()
