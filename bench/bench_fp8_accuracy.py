"""FP8 accuracy in device precision against fp32 (issues 6 and 8): per seed, the minimum cosine and maximum
relative L2 over every embedding (each token row of last_hidden_state and the pooled output), for FP8 scales and
precision policies. Reference evaluator only (the simulator matches device precision to cosine 0.99999).

    python -m bench.bench_fp8_accuracy                 # the tiny SigLIP, four seeds
    python -m bench.bench_fp8_accuracy --so400m-layers 1 --seeds 2   # So400m/14-384, one layer + MAP head
    python -m bench.bench_fp8_accuracy --so400m-layers 2 --spec 'nn-quantize-weights{...}'   # given policies
    python -m bench.bench_fp8_accuracy --so400m-layers 2 --hf-init   # Hugging Face's init, not perturbed
"""

import argparse

import numpy as np
from xdsl.context import Context
from xdsl.passes import PassPipeline

from ipu.frontend.reference import evaluate
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.frontend.weights import random_weights
from ipu.passes.nn_quantize import DEFAULT_SPEC
from ipu.passes.registry import all_passes
from ipu.tools.ipu_run import per_embedding


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--so400m-layers", type=int, default=0, help="So400m with this many layers (0: tiny)")
    p.add_argument("--seeds", type=int, default=4)
    p.add_argument(
        "--hf-init", action="store_true", help="unperturbed weights (Hugging Face's init; default: perturbed)"
    )
    p.add_argument(
        "--spec", action="append", help="nn-quantize-weights spec to compare (repeatable; default: a set)"
    )
    args = p.parse_args()
    cfg = (
        PRESETS["so400m-patch14-384"].with_layers(args.so400m_layers)
        if args.so400m_layers
        else PRESETS["tiny"]
    )
    specs = [
        "nn-quantize-weights{format=f143 scale=-4 activations=f16}",
        "nn-quantize-weights{format=f143 scale=-6 activations=f16}",
        "nn-quantize-weights{format=f143 scale=-2 activations=f16}",
        "nn-quantize-weights{format=f143 scale=-4 activations=f16 keep_f16=patch_embedding}",
        DEFAULT_SPEC,
    ]
    specs = args.spec or specs
    seeds = range(args.seeds)
    model = f"so400m x{args.so400m_layers} layers" if args.so400m_layers else "tiny"
    print(f"model: {model}, weights: {'hf init' if args.hf_init else 'perturbed'} (random_weights)")
    print("| nn-quantize-weights | " + " | ".join(f"seed {s}: min cos / max rel-L2" for s in seeds) + " |")
    print("|---|" + "---:|" * len(seeds))
    refs = {}
    for spec in specs:
        cells = []
        for seed in seeds:
            w = random_weights(cfg, seed, perturbed=not args.hf_init)
            x = np.random.default_rng(seed + 1).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size))
            x = x.astype(np.float32)
            if seed not in refs:
                refs[seed] = evaluate(build_vision_model(cfg), {"pixel_values": x}, w, mode="fp32").outputs
            m = build_vision_model(cfg)
            PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), m)
            d = evaluate(m, {"pixel_values": x}, w, mode="device").outputs
            rows = [per_embedding(d[k], refs[seed][k]) for k in d]
            cells.append(f"{min(r[0] for r in rows):.4f} / {max(r[1] for r in rows):.4f}")
        print(f"| `{spec}` | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
