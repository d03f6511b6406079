"""Simulator throughput and memory (issue 3). Not a test: run by hand, results go to BENCHMARKS.md.

    .venv/bin/python bench/bench_sim.py [--tiles 16 184 1472] [--repeats 5] [--groups 180] [--no-poison]

Workload: the 16x16 AMP example (runtime/examples.py) on every worker of every tile: per worker a loop of
4 (groups + 2) bundles `{ ld2xst64pace ; f16v4hihov4amp }` (two loads, one store, one AMP each), after ~12 setup
instructions, with a supervisor that loads the 512-byte weights (64 x ld64putcs) and runs the workers.
Throughput = worker context-instructions (a bundle counts as 2) / wall time of `Simulator.run`, median of the
repeats (the first run is a warm-up). Memory: bytes of the simulator's arrays and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np

from ipu.backend.target import Target
from ipu.runtime import examples as ex
from ipu.runtime.simulator import Simulator


def bench(tiles: int, groups: int, repeats: int, check_poison: bool) -> dict:
    t = Target.ipu21() if tiles == 1472 else Target.small(tiles=tiles, sram_kib=624)
    lay = ex.BENCH_LAYOUT
    rng = np.random.default_rng(0)
    w = rng.standard_normal((tiles, 16, 16)).astype(np.float16)
    x = rng.standard_normal((tiles, 6, groups, 16)).astype(np.float16)
    p = rng.standard_normal((tiles, 6, groups, 16)).astype(np.float16)
    t0 = time.perf_counter()
    sim = Simulator(t, check_poison=check_poison)
    sim.load(ex.amp_program(t, lay=lay))
    ex.amp_setup(sim, groups, w.view(np.uint8).reshape(tiles, -1), x.view(np.uint8), p, lay=lay)
    setup_s = time.perf_counter() - t0
    rates, cpu_rates = [], []
    for i in range(repeats + 1):
        before = int(sim.issued[: sim.NW].sum())
        t0, c0 = time.perf_counter(), time.process_time()
        res = sim.run("main")
        dt, cdt = time.perf_counter() - t0, time.process_time() - c0
        n = int(sim.issued[: sim.NW].sum()) - before
        if i:  # run 0 is a warm-up
            rates.append(n / dt)
            cpu_rates.append(n / cdt)
    y = ex.amp_outputs(sim, groups, lay=lay)
    ref = np.einsum("twnk,tek->twne", x.astype(np.float32), w.astype(np.float32)) + p
    assert np.allclose(y, ref, rtol=2e-2, atol=2e-2), "benchmark results are wrong"
    parts = sim.state_bytes()
    state = sum(parts.values())
    return {
        "tiles": tiles,
        "contexts": tiles * 6,
        "median_Minstr_s": statistics.median(rates) / 1e6,
        "min_Minstr_s": min(rates) / 1e6,
        "max_Minstr_s": max(rates) / 1e6,
        "cpu_Minstr_s": statistics.median(cpu_rates) / 1e6,
        "loop_share": 8 * (groups + 2) / (n / (tiles * 6)),
        "sim_cycles": int(res.max_cycles),
        "setup_s": setup_s,
        "sram_MB": parts["sram"] / 1e6,
        "state_MB": state / 1e6,
        "word_state_MB": parts["word_state"] / 1e6,
        "other_MB": parts["other"] / 1e6,
        "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, nargs="+", default=[16, 184, 1472])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--groups", type=int, default=180)
    ap.add_argument("--no-poison", action="store_true", help="disable poison tracking on loads")
    args = ap.parse_args()
    print(
        "| tiles | contexts | median M ctx-instr/s (wall) | min..max | median per CPU second | AMP-loop share "
        "| simulated cycles per run "
        "| state MB (SRAM + word state + other) | peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for tiles in args.tiles:
        r = bench(tiles, args.groups, args.repeats, not args.no_poison)
        print(
            f"| {r['tiles']} | {r['contexts']} | {r['median_Minstr_s']:.1f} | {r['min_Minstr_s']:.1f}.."
            f"{r['max_Minstr_s']:.1f} | {r['cpu_Minstr_s']:.1f} | {r['loop_share']:.2f} | {r['sim_cycles']} | {r['state_MB']:.0f} "
            f"({r['sram_MB']:.0f} + {r['word_state_MB']:.0f} + {r['other_MB']:.1f}) "
            f"| {r['peak_rss_MB']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
