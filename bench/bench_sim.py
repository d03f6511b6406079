"""Simulator throughput and memory (issue 3), reference path against fast path (issue 23). Not a test: run by
hand, results go to BENCHMARKS.md.

    .venv/bin/python -m bench.bench_sim [--tiles 16 184 1472] [--repeats 5] [--groups 180] [--no-poison]
    .venv/bin/python -m bench.bench_sim --packages tiny [PKG.ipupkg ...] [--repeats 3] [--warmup 1]

`--packages`: whole inferences of compiled packages ("tiny": the tiny SigLIP compiled here for --package-tiles,
default 16), each through `Simulator(reference=True)` (the original scheduling and numpy semantics: "before") and
the default fast path ("after") in one process, the runs of the two paths alternating so that a shared machine's
load falls on both; outputs, cycles and instructions are checked identical. Reported: medians (and min..max) of
wall and CPU seconds per inference, their ratios, group steps (`Simulator._step` calls, counted in the first
run), context-instructions per wall second, simulated cycles, and the process's peak RSS.

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

from bench.common import header
from ipu.backend.target import Target
from ipu.runtime import examples as ex
from ipu.runtime.simulator import Simulator


def bench(tiles: int, groups: int, repeats: int, check_poison: bool, reference: bool = False) -> dict:
    t = Target.ipu21() if tiles == 1472 else Target.small(tiles=tiles, sram_kib=624)
    lay = ex.BENCH_LAYOUT
    rng = np.random.default_rng(0)
    w = rng.standard_normal((tiles, 16, 16)).astype(np.float16)
    x = rng.standard_normal((tiles, 6, groups, 16)).astype(np.float16)
    p = rng.standard_normal((tiles, 6, groups, 16)).astype(np.float16)
    t0 = time.perf_counter()
    sim = Simulator(t, check_poison=check_poison, reference=reference)
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
        "path": "reference" if reference else "fast",
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


def _package(spec: str, tiles: int):
    from ipu.runtime.package import Package

    if spec == "tiny":
        from ipu.backend.lower import compile_model

        return f"tiny ({tiles} tiles)", compile_model("tiny", Target.small(tiles=tiles, sram_kib=624))
    return spec, Package.load(spec)


def bench_package(
    spec: str, tiles: int, repeats: int, warmup: int, threads=(None,), reference=True, unfused_fp8=False
) -> dict:
    """Inferences of one package through the reference and the fast path, alternating (see the docstring).
    `threads`: the fast path once per entry with that many kernel threads (jit.set_threads; None: the default),
    each its own session, as "fast" (one entry) or "fast, N thread(s)". unfused_fp8: first a fast path whose
    FP8 AMP rpt loops are stepped (the fast path before jit.AUX_AMP_F8), the ratios' base."""
    from ipu.frontend.siglip import SiglipVisionConfig
    from ipu.frontend.weights import random_weights
    from ipu.runtime import jit
    from ipu.runtime.host import Session

    name, pkg = _package(spec, tiles)
    cfg = SiglipVisionConfig.from_dict(pkg.metadata["config"])
    weights = random_weights(cfg, seed=0)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    sessions, steps, first, nthreads = {}, {}, {}, {}
    paths = (["reference"] if reference else []) + [
        "fast" if len(threads) == 1 else f"fast, {n} thread{'s' if n != 1 else ''}" for n in threads
    ]
    for path, n in zip(paths, ([None] if reference else []) + list(threads)):
        s = Session(pkg, Simulator(pkg.target, reference=path == "reference"))
        s.upload_parameters(weights)
        sessions[path] = s
        nthreads[path] = n
    if (
        unfused_fp8
    ):  # the fast path as before FP8 AMP rpt loops were fused: those loops stepped bundle by bundle
        sim = Simulator(pkg.target)
        row = sim._fused_row

        def unfused(a, row=row):
            r = row(a)
            return None if r is not None and r[0][jit.B_AMP] == jit.AUX_AMP_F8 else r

        sim._fused_row = unfused
        s = Session(pkg, sim)
        s.upload_parameters(weights)
        sessions = {"fast, FP8 AMP loops stepped": s, **sessions}
        nthreads["fast, FP8 AMP loops stepped"] = None
        paths = ["fast, FP8 AMP loops stepped", *paths]
    wall = {p: [] for p in sessions}
    cpu = {p: [] for p in sessions}
    for i in range(warmup + repeats):
        for path, s in sessions.items():
            sim = s.device
            default = jit.threads()
            if nthreads[path] is not None:
                jit.set_threads(nthreads[path])
            counter = [0]
            if i == 0:  # count the group steps once (the counting wrapper costs a little time)
                step = sim._step

                def count(g, step=step, counter=counter):
                    counter[0] += 1
                    return step(g)

                sim._step = count
            t0, c0 = time.perf_counter(), time.process_time()
            r = s.run({"pixel_values": x})
            dt, cdt = time.perf_counter() - t0, time.process_time() - c0
            jit.set_threads(default)
            if i == 0:
                del sim._step
                steps[path] = counter[0]
                first[path] = r
            if i >= warmup:
                wall[path].append(dt)
                cpu[path].append(cdt)
    ref = first[paths[0]]
    for path in paths[1:]:
        fast = first[path]
        for k in ref.outputs:
            assert np.array_equal(ref.outputs[k], fast.outputs[k], equal_nan=True), (
                f"{name}: {k} differs ({path})"
            )
        assert np.array_equal(ref.run.tile_cycles, fast.run.tile_cycles), f"{name}: cycles differ ({path})"
        assert np.array_equal(ref.run.context_cycles, fast.run.context_cycles), (
            f"{name}: context cycles ({path})"
        )
        assert np.array_equal(ref.run.instructions, fast.run.instructions), f"{name}: instructions ({path})"
    med = {p: (statistics.median(wall[p]), statistics.median(cpu[p])) for p in sessions}
    return {
        "name": name,
        "runs": repeats,
        "cycles": ref.cycles,
        "instructions": int(ref.run.instructions.sum()),
        "steps": steps,
        "wall": wall,
        "cpu": cpu,
        "median": med,
        "paths": paths,
        "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
    }


def main_packages(args) -> None:
    print(f"{header()}; repeats {args.repeats} per path after {args.warmup} warm-up")
    print(
        "| package | simulated cycles | path | group steps | wall s per inference, median (min..max) | CPU s, median "
        "| M ctx-instr/s (wall) | wall ratio | CPU ratio | peak RSS MB (process) |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for spec in args.packages:
        r = bench_package(
            spec,
            args.package_tiles,
            args.repeats,
            args.warmup,
            tuple(args.threads or [None]),
            not args.no_reference,
            args.unfused_fp8,
        )
        rw, rc = r["median"][r["paths"][0]]
        for path in r["paths"]:
            w, c = r["median"][path]
            ratio = (f"{rw / w:.2f}x", f"{rc / c:.2f}x") if path != r["paths"][0] else ("", "")
            print(
                f"| {r['name']} | {r['cycles']:,} | {path} | {r['steps'][path]:,} | {w:.2f} ({min(r['wall'][path]):.2f}.."
                f"{max(r['wall'][path]):.2f}) | {c:.2f} | {r['instructions'] / w / 1e6:.2f} | {ratio[0]} | {ratio[1]} "
                f"| {r['peak_rss_MB']:.0f} |",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, nargs="+", default=[16, 184, 1472])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--groups", type=int, default=180)
    ap.add_argument("--no-poison", action="store_true", help="disable poison tracking on loads")
    ap.add_argument(
        "--packages",
        nargs="+",
        metavar="PKG",
        help='inferences of packages ("tiny" or .ipupkg paths), both paths',
    )
    ap.add_argument("--package-tiles", type=int, default=16, help='tiles of the "tiny" package')
    ap.add_argument("--warmup", type=int, default=1, help="--packages: unmeasured runs per path first")
    ap.add_argument(
        "--threads", type=int, nargs="+", help="--packages: the fast path once per count of kernel threads"
    )
    ap.add_argument(
        "--no-reference", action="store_true", help="--packages: fast path(s) only (ratios to the first)"
    )
    ap.add_argument(
        "--unfused-fp8",
        action="store_true",
        help="--packages: first the fast path with FP8 AMP rpt loops stepped (before they were fused)",
    )
    args = ap.parse_args()
    if args.packages:
        main_packages(args)
        return
    print(header())
    print(
        "| tiles | contexts | path | median M ctx-instr/s (wall) | min..max | median per CPU second | AMP-loop share "
        "| simulated cycles per run "
        "| state MB (SRAM + word state + other) | peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tiles, reference in ((t, ref) for t in args.tiles for ref in (True, False)):
        r = bench(tiles, args.groups, args.repeats, not args.no_poison, reference)
        print(
            f"| {r['tiles']} | {r['contexts']} | {r['path']} | {r['median_Minstr_s']:.1f} | {r['min_Minstr_s']:.1f}.."
            f"{r['max_Minstr_s']:.1f} | {r['cpu_Minstr_s']:.1f} | {r['loop_share']:.2f} | {r['sim_cycles']} | {r['state_MB']:.0f} "
            f"({r['sram_MB']:.0f} + {r['word_state_MB']:.0f} + {r['other_MB']:.1f}) "
            f"| {r['peak_rss_MB']:.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
