"""A 27-layer inference's simulator time, projected from the per-layer rate (issue 23). Not a test: run by hand,
results go to BENCHMARKS.md.

    .venv/bin/python -m bench.bench_sim_layers SO1.ipupkg SO2.ipupkg [--repeats 1] [--threads N] [--layers 27]

SO1 / SO2: So400m packages with one and two encoder layers (+ the MAP head), e.g. from
`compile_model(PRESETS["so400m-patch14-384"].with_layers(n))`. Both run in one process, their inferences
alternating (the fast path, seeded random weights and input); per layer = two layers minus one, and
N layers = one layer + (N - 1) x per layer, for wall and CPU time and simulated cycles.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from bench.common import header


def main() -> None:
    from ipu.frontend.siglip import SiglipVisionConfig
    from ipu.frontend.weights import random_weights
    from ipu.runtime import jit
    from ipu.runtime.host import Session
    from ipu.runtime.package import Package
    from ipu.runtime.simulator import Simulator

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("one")
    ap.add_argument("two")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None, help="kernel threads (default: jit's default)")
    ap.add_argument("--layers", type=int, default=27)
    args = ap.parse_args()
    if args.threads is not None:
        jit.set_threads(args.threads)
    print(f"{header()}; kernel threads {jit.threads()}; repeats {args.repeats}")
    sessions = []
    for path in (args.one, args.two):
        pkg = Package.load(path)
        cfg = SiglipVisionConfig.from_dict(pkg.metadata["config"])
        s = Session(pkg, Simulator(pkg.target))
        s.upload_parameters(random_weights(cfg, seed=0))
        x = np.random.default_rng(0).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
        sessions.append((s, x))
    wall, cpu, cycles = [[], []], [[], []], [0, 0]
    for _ in range(args.repeats):
        for k, (s, x) in enumerate(sessions):
            t0, c0 = time.perf_counter(), time.process_time()
            r = s.run({"pixel_values": x})
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
            cycles[k] = r.cycles
    w1, w2 = statistics.median(wall[0]), statistics.median(wall[1])
    c1, c2 = statistics.median(cpu[0]), statistics.median(cpu[1])
    n = args.layers
    print("| | 1 layer | 2 layers | per layer (2 - 1) | " + f"{n} layers, projected |")
    print("|---|---:|---:|---:|---:|")
    print(f"| simulated cycles | {cycles[0]:,} | {cycles[1]:,} | {cycles[1] - cycles[0]:,} "
          f"| {cycles[0] + (n - 1) * (cycles[1] - cycles[0]):,} |")  # fmt: skip
    for name, a, b in (("wall s", w1, w2), ("CPU s", c1, c2)):
        print(f"| {name} (median) | {a:.1f} | {b:.1f} | {b - a:.1f} | {a + (n - 1) * (b - a):.0f} "
              f"({(a + (n - 1) * (b - a)) / 60:.1f} min) |")  # fmt: skip


if __name__ == "__main__":
    main()
