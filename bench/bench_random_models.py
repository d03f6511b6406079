"""Random SigLIP-shaped models through the whole pipeline, many of them (`ipu.tools.random_models`): which shapes
compile, run and agree with the device-precision reference, and which end in a diagnostic.

    .venv/bin/python -m bench.bench_random_models --cases 40 --seed 0
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.common import header
from ipu.tools.random_models import draw, run_case


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tiles", type=int, help="every case on this many tiles (default: drawn, 4 .. 256)")
    args = p.parse_args()
    print(f"{header()}; {args.cases} random models from seed {args.seed}")
    counts: dict[str, int] = {}
    for i in range(args.cases):
        rng = np.random.default_rng([args.seed, i])
        cfg, tiles, kib = draw(rng)
        tiles = args.tiles or tiles
        t0 = time.perf_counter()
        outcome, detail = run_case(cfg, tiles, kib, args.seed * 1000 + i)
        counts[outcome] = counts.get(outcome, 0) + 1
        shape = (
            f"width {cfg.hidden_size} ({cfg.num_attention_heads} heads), mlp {cfg.intermediate_size}, "
            f"{cfg.num_hidden_layers} layers, image {cfg.image_size} / patch {cfg.patch_size}, "
            f"head {'MAP' if cfg.vision_use_head else 'none'}, {tiles} tiles"
        )
        print(f"case {i}: {outcome:10s} {time.perf_counter() - t0:5.1f} s  {shape}: {detail}", flush=True)
    print("outcomes:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
