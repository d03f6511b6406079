"""The tiny SigLIP end to end (issue 6): compile time, simulated cycles, simulation wall time, peak RSS, package
size and SRAM use, on 16 tiles and on the full 1472-tile IPU21. Each target runs in a fresh process.

    python -m bench.bench_e2e            # both targets, prints a BENCHMARKS.md section
    python -m bench.bench_e2e 16         # one target, prints JSON
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.common import header, peak_rss_mib


def one(tiles: int) -> dict:
    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target
    from ipu.frontend.siglip import PRESETS
    from ipu.frontend.weights import random_weights
    from ipu.runtime.host import Session

    cfg = PRESETS["tiny"]
    target = Target.ipu21() if tiles == 1472 else Target.small(tiles=tiles, sram_kib=624)
    w = random_weights(cfg, 0)
    t0 = time.perf_counter()
    pkg = compile_model(cfg, target, weights=w)
    compile_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as d:
        size = os.path.getsize(pkg.save(os.path.join(d, "tiny.ipupkg")))
    session = Session(pkg)
    session.upload_parameters(w)
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    walls, cycles = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        r = session.run({"pixel_values": x})
        walls.append(time.perf_counter() - t0)
        cycles.append(r.cycles)
    seg_bytes = sum(s.data.nbytes for s in pkg.segments)
    return {
        "tiles": tiles,
        "compile_s": compile_s,
        "cycles": cycles,
        "sim_s": sorted(walls)[1],
        "walls": walls,
        "package_bytes": size,
        "code_bytes": len(pkg.code),
        "segment_bytes": seg_bytes,
        "peak_rss_mib": peak_rss_mib(),
    }


def main(argv: list[str]) -> None:
    if argv:
        print(json.dumps(one(int(argv[0]))))
        return
    rows = []
    for tiles in (16, 1472):
        proc = subprocess.run(
            [sys.executable, "-m", "bench.bench_e2e", str(tiles)], capture_output=True, text=True
        )
        if proc.returncode:
            sys.exit(proc.stderr)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"### Tiny SigLIP end to end ({header()})\n")
    print(
        "2 layers (unrolled), width 64, 16 tokens, MAP head; FP8 F143 weights (run on the F16 AMP kernel, see "
        "docs/lowering.md), f16 activations; three inferences after one upload.\n"
    )
    print(
        "| tiles | compile (s) | simulated cycles per inference | ms at 1.5 GHz | simulation wall (s, median of 3) "
        "| package (B) | code (B) | data segments (B) | peak RSS (MiB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c = r["cycles"][0]
        print(
            f"| {r['tiles']} | {r['compile_s']:.2f} | {c:,} | {c / 1.5e6:.3f} | {r['sim_s']:.1f} | "
            f"{r['package_bytes']:,} | {r['code_bytes']:,} | {r['segment_bytes']:,} | {r['peak_rss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
