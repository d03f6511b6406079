"""Compile time and peak RSS of the layer loop against the layer count: the tiny SigLIP with 1, 2 and 8 layers
on 16 tiles and So400m with 1 and 2 layers on the 1472-tile IPU21, `tile.repeat`'s body lowered at iterations 0, 1
and the last ("after", this checkout) against a lowering that lowers it once per iteration ("before": the
`backend/lower/lowering.py` of the git revision `--before`, loaded beside this checkout's other modules; or
`--before per-iteration`: this checkout's reference path `Lowering(per_iteration=True)`). Every compile is a fresh
process (peak RSS is per process); the implementations alternate, run after run, so that the shared machine's
load hits both alike. The packages' bytes must be the same (the bench stops otherwise).

    python -m bench.bench_repeat_compile                       # all cases, 3 runs each, a BENCHMARKS.md table
    python -m bench.bench_repeat_compile --cases tiny1 tiny8 --runs 5
    python -m bench.bench_repeat_compile --before dbfb9c5      # the per-iteration lowering of that commit

Times: wall seconds of `compile_model` (frontend, pass pipeline, lowering, package), CPU seconds of the process
(the one to compare on a shared machine), and the seconds inside `Lowering.repeat` (the body lowerings) and
`Lowering._patch_tables`.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import header, peak_rss_mib

ROOT = Path(__file__).resolve().parents[1]
CASES = {
    "tiny1": ("tiny", 1),
    "tiny2": ("tiny", 2),
    "tiny8": ("tiny", 8),
    "so400m1": ("so400m-patch14-384", 1),
    "so400m2": ("so400m-patch14-384", 2),
}
BEFORE = "dbfb9c5"  # the last commit lowering the body once per iteration


def _lowering_module(impl: str):
    """The lowering module of `impl`: "after" (this checkout), "per-iteration" (this checkout's reference path)
    or a git revision's backend/lower/lowering.py."""
    from ipu.backend.lower import lowering

    if impl in ("after", "per-iteration"):
        return lowering
    src = subprocess.run(
        ["git", "show", f"{impl}:backend/lower/lowering.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    name = "ipu.backend.lower._lowering_before"
    spec = importlib.util.spec_from_loader(name, loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    exec(compile(src, f"{impl}:backend/lower/lowering.py", "exec"), mod.__dict__)
    return mod


def child(case: str, impl: str) -> dict:
    from ipu.backend.target import IPU21, Target
    from ipu.frontend.siglip import PRESETS

    mod = _lowering_module(impl)
    if impl == "per-iteration":
        init = mod.Lowering.__init__
        mod.Lowering.__init__ = lambda self, f, target, per_iteration=True: init(
            self, f, target, per_iteration
        )
    spent = {"repeat": 0.0, "patch": 0.0}

    def timed(fn, key):
        def run(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - t0

        return run

    mod.Lowering.repeat = timed(mod.Lowering.repeat, "repeat")
    mod.Lowering._patch_tables = timed(mod.Lowering._patch_tables, "patch")
    preset, layers = CASES[case]
    cfg = PRESETS[preset].with_layers(layers)
    target = Target.small(tiles=16, sram_kib=624) if preset == "tiny" else IPU21
    t0, c0 = time.perf_counter(), time.process_time()
    pkg = mod.compile_model(cfg, target)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    with tempfile.TemporaryDirectory() as d:
        digest = hashlib.sha256(pkg.save(Path(d) / "p.ipupkg").read_bytes()).hexdigest()
    return {
        "case": case,
        "impl": impl,
        "wall_s": wall,
        "cpu_s": cpu,
        "repeat_s": spent["repeat"],
        "patch_s": spent["patch"],
        "peak_rss_mib": peak_rss_mib(),
        "sha256": digest,
    }


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m bench.bench_repeat_compile", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--before", default=BEFORE, help="a git revision, or per-iteration (default: %(default)s)"
    )
    ap.add_argument("--child", nargs=2, metavar=("CASE", "IMPL"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    impls = [args.before, "after"]
    res: dict[tuple[str, str], list[dict]] = {}
    for case in args.cases:
        for _ in range(args.runs):
            for impl in impls:
                cmd = [sys.executable, "-m", "bench.bench_repeat_compile", "--child", case, impl]
                proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
                if proc.returncode:
                    sys.exit(proc.stderr)
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                res.setdefault((case, impl), []).append(r)
                print(json.dumps(r), file=sys.stderr, flush=True)
        digests = {r["sha256"] for impl in impls for r in res[(case, impl)]}
        if len(digests) != 1:
            sys.exit(f"{case}: the packages differ between {impls}: {sorted(digests)}")

    def med(case, impl, key):
        return statistics.median(r[key] for r in res[(case, impl)])

    b, a = impls
    print(f"### Layer loop compile time against the layer count ({header()})\n")
    print(
        f"Medians of {args.runs} fresh processes per cell, before ({b}: the body lowered once per iteration) and "
        "after (iterations 0, 1 and the last), alternating; the packages are byte-identical.\n"
    )
    print(
        "| model | layers | tiles | compile wall before / after (s) | ratio | compile CPU before / after (s) | ratio "
        "| in repeat + patch tables before / after (s) | peak RSS before / after (MiB) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in args.cases:
        preset, layers = CASES[case]
        tiles = 16 if preset == "tiny" else 1472
        wb, wa, cb, ca = (
            med(case, b, "wall_s"),
            med(case, a, "wall_s"),
            med(case, b, "cpu_s"),
            med(case, a, "cpu_s"),
        )
        rb = med(case, b, "repeat_s") + med(case, b, "patch_s")
        ra = med(case, a, "repeat_s") + med(case, a, "patch_s")
        print(
            f"| {preset.split('-')[0]} | {layers} | {tiles} | {wb:.2f} / {wa:.2f} | {wa / wb:.2f} | {cb:.2f} / {ca:.2f} "
            f"| {ca / cb:.2f} | {rb:.2f} / {ra:.2f} | {med(case, b, 'peak_rss_mib'):.0f} / "
            f"{med(case, a, 'peak_rss_mib'):.0f} |"
        )
    for preset in ("tiny", "so400m-patch14-384"):
        cs = [c for c in args.cases if CASES[c][0] == preset]
        if len(cs) > 1:
            lo, hi = cs[0], cs[-1]
            print(
                f"\n{preset.split('-')[0]}: {CASES[hi][1]} layers / {CASES[lo][1]} layer(s), CPU: before "
                f"{med(hi, b, 'cpu_s') / med(lo, b, 'cpu_s'):.2f}x, after {med(hi, a, 'cpu_s') / med(lo, a, 'cpu_s'):.2f}x"
                f"; wall: before {med(hi, b, 'wall_s') / med(lo, b, 'wall_s'):.2f}x, after "
                f"{med(hi, a, 'wall_s') / med(lo, a, 'wall_s'):.2f}x"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
