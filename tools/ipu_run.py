"""`ipu-run`: compile a ViT and run it.

Today only the front of the pipeline exists: `ipu-run --model NAME` builds the model (or imports `--weights`),
applies the `nn`-level passes, prints an IR summary and runs the numpy reference evaluator in fp32 and in device
precision (FP8 weights, F16 activations), reporting per-output cosine and relative L2 between the two. Running a
package on the simulator is NOT implemented yet: the command says so on every run.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np

PLACEHOLDER = (
    "ipu-run: NOTE: the IPU backend (tile/exchange/memory/asm lowering, packages, simulator execution) is not "
    "implemented yet; this run only builds the model and evaluates it with the numpy reference evaluator."
)


def _summary(module) -> str:
    counts = Counter(op.name for op in module.walk() if op.dialect_name() == "nn")
    width = max(len(k) for k in counts)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in sorted(counts.items()))


def _metrics(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    cos = float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))
    rel = float(np.linalg.norm(a64 - b64) / np.linalg.norm(b64))
    return cos, rel


def main(argv: Sequence[str] | None = None) -> int:
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.frontend.reference import evaluate
    from ipu.frontend.siglip import build_vision_model, get_config
    from ipu.frontend.weights import CheckpointError, load_checkpoint, random_weights
    from ipu.passes.registry import all_passes

    p = argparse.ArgumentParser(prog="ipu-run", description=__doc__.splitlines()[0])
    p.add_argument(
        "--model", default="siglip-tiny", help="a preset (siglip-tiny, so400m-patch14-384) or config.json"
    )
    p.add_argument(
        "--weights", help="a safetensors checkpoint (file or directory); default: seeded random weights"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights and input")
    p.add_argument("--layers", type=int, help="override the number of encoder layers")
    p.add_argument(
        "--pipeline",
        default="nn-fuse-qkv,nn-outline-repeat,nn-quantize-weights{format=f143 scale=-4 activations=f16}",
        help="nn-level passes, xDSL syntax",
    )
    p.add_argument(
        "--input", help="pixel values as a .npy file [1, C, H, W]; default: seeded uniform in [-1, 1]"
    )
    args = p.parse_args(argv)
    print(PLACEHOLDER, file=sys.stderr)

    try:
        if args.weights:
            params, cfg = load_checkpoint(args.weights)
        else:
            cfg = get_config(args.model)
        if args.layers is not None:
            cfg = cfg.with_layers(args.layers)
        if not args.weights:
            params = random_weights(cfg, seed=args.seed)
    except (CheckpointError, ValueError) as e:
        print(f"ipu-run: error: {e}", file=sys.stderr)
        return 1

    t0 = time.perf_counter()
    module = build_vision_model(cfg)
    reference_module = module.clone()
    available = dict(all_passes())
    try:
        pipeline = PassPipeline.parse_spec(available, args.pipeline) if args.pipeline else None
    except (ValueError, BaseException) as e:  # ArgSpecParseError derives from BaseException
        if isinstance(e, KeyboardInterrupt | SystemExit):
            raise
        print(f"ipu-run: error: bad --pipeline: {e}", file=sys.stderr)
        return 1
    if pipeline is not None:
        pipeline.apply(Context(), module)
    module.verify()
    compile_s = time.perf_counter() - t0
    print(
        f"model: SigLIP vision, {cfg.num_hidden_layers} layers, width {cfg.hidden_size}, "
        f"{cfg.num_patches} tokens; passes: {args.pipeline or '(none)'} ({compile_s:.2f} s)"
    )
    print(_summary(module))

    if args.input:
        x = np.load(args.input).astype(np.float32)
    else:
        rng = np.random.default_rng(args.seed)
        x = rng.uniform(-1, 1, (1, cfg.num_channels, cfg.image_size, cfg.image_size)).astype(np.float32)
    inputs = {"pixel_values": x}
    t0 = time.perf_counter()
    ref = evaluate(reference_module, inputs, params, mode="fp32").outputs
    dev = evaluate(module, inputs, params, mode="device").outputs
    eval_s = time.perf_counter() - t0
    print(f"reference evaluator: fp32 and device precision in {eval_s:.2f} s")
    for name in ref:
        cos, rel = _metrics(dev[name], ref[name])
        print(
            f"  {name:<18} shape {list(ref[name].shape)}  device vs fp32: cosine {cos:.6f}  rel-L2 {rel:.3e}"
        )
    return 0


def cli() -> None:
    sys.exit(main())


if __name__ == "__main__":
    cli()
