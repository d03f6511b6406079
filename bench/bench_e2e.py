"""The tiny SigLIP end to end (issue 6): compile time, simulated cycles, simulation wall time, peak RSS, package
size (with package save / load times) and SRAM use, on 16 tiles and on the full 1472-tile IPU21. Each target runs
in a fresh process.

    python -m bench.bench_e2e                      # both targets, prints a BENCHMARKS.md section
    python -m bench.bench_e2e 16 --json            # one target, prints JSON
    python -m bench.bench_e2e 16 1472 --no-run     # compile + package only (no simulation)
    python -m bench.bench_e2e --phases             # exchange round packing on So400m-scale synthetic phases

Compile times are wall and CPU (process) seconds: CPU time is the one to compare on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench.common import header, peak_rss_mib


def one(tiles: int, run: bool = True, repeat: bool | None = None) -> dict:
    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target
    from ipu.frontend.siglip import PRESETS
    from ipu.frontend.weights import random_weights
    from ipu.runtime.host import Session
    from ipu.runtime.package import Package

    cfg = PRESETS["tiny"]
    target = Target.ipu21() if tiles == 1472 else Target.small(tiles=tiles, sram_kib=624)
    w = random_weights(cfg, 0)
    t0, c0 = time.perf_counter(), time.process_time()
    pkg = compile_model(cfg, target, weights=w, repeat=repeat)
    compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tiny.ipupkg")
        t0 = time.perf_counter()
        pkg.save(path)
        save_s = time.perf_counter() - t0
        size = os.path.getsize(path)
        t0 = time.perf_counter()
        back = Package.load(path)
        load_s = time.perf_counter() - t0
    same = all(
        a.address == b.address and np.array_equal(a.data, b.data) for a, b in zip(pkg.segments, back.segments)
    ) and len(back.segments) == len(pkg.segments)
    if not same:
        sys.exit("the loaded package's segments differ from the compiled ones")
    seg_bytes = sum(s.data.nbytes for s in pkg.segments)
    out = {
        "tiles": tiles,
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu_s,
        "package_bytes": size,
        "save_s": save_s,
        "load_s": load_s,
        "code_bytes": len(pkg.code),
        "segment_bytes": seg_bytes,
    }
    if run:
        session = Session(back)
        session.upload_parameters(w)
        x = np.random.default_rng(1).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
        walls, cycles = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            r = session.run({"pixel_values": x})
            walls.append(time.perf_counter() - t0)
            cycles.append(r.cycles)
        out.update(cycles=cycles, sim_s=sorted(walls)[1], walls=walls)
    out["peak_rss_mib"] = peak_rss_mib()
    return out


def phases() -> list[dict]:
    """Round packing and round tables of synthetic exchange phases at So400m scale (1472 tiles, 10^6 receives,
    random tiles and scheduled order): CPU seconds of `receive_rounds` and of `phase_tables` with the rounds
    known (cached)."""
    from ipu.backend.lower import exchange as lx

    class Phase:
        def __init__(self, sends, recvs):
            self.tables = sends, recvs, np.zeros((0, 5), np.int64)

        def send_table(self):
            return self.tables[0]

        def recv_table(self):
            return self.tables[1]

        def copy_table(self):
            return self.tables[2]

    rng = np.random.default_rng(0)
    tiles, out = 1472, []
    for nsend, fan in ((100_000, 10), (1_000_000, 1)):
        sends = np.zeros((nsend, 5), np.int64)
        sends[:, 0] = rng.integers(0, tiles, nsend)
        sends[:, 2] = 8 * rng.integers(0, 1000, nsend)
        sends[:, 3] = 8 * rng.integers(1, 8, nsend)
        sends[:, 4] = rng.integers(0, 5000, nsend)
        recvs = np.zeros((nsend * fan, 5), np.int64)
        recvs[:, 0] = rng.integers(0, tiles, len(recvs))
        recvs[:, 2] = 8 * rng.integers(0, 1000, len(recvs))
        recvs[:, 3] = np.repeat(np.arange(nsend), fan)
        lx._ROUNDS_CACHE.clear()
        c0 = time.process_time()
        _, n = lx.receive_rounds(sends, recvs)
        c1 = time.process_time()
        addr = [np.full(tiles, 0x60000, np.int64)]
        rtab = lx.phase_tables(Phase(sends, recvs), addr, addr, tiles, 0x90000, 0xA0000, 1 << 30)[0]
        c2 = time.process_time()
        out.append(
            dict(
                sends=nsend,
                receives=len(recvs),
                rounds=n,
                rounds_s=c1 - c0,
                tables_s=c2 - c1,
                table=rtab.nbytes,
            )
        )
    return out


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_e2e", description=__doc__.split("\n\n")[0])
    ap.add_argument("tiles", nargs="*", type=int, help="tile counts (default: 16 1472)")
    ap.add_argument("--json", action="store_true", help="run in this process, print one JSON line per target")
    ap.add_argument("--no-run", action="store_true", help="compile and save/load the package only")
    ap.add_argument("--unrolled", action="store_true", help="layers unrolled (compile_model(repeat=False))")
    ap.add_argument(
        "--phases", action="store_true", help="round packing of So400m-scale synthetic phases only"
    )
    args = ap.parse_args(argv)
    if args.phases:
        print(
            "| sends | receives | rounds | receive_rounds CPU (s) | phase_tables CPU, rounds cached (s) | table (MB) |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for r in phases():
            print(
                f"| {r['sends']:,} | {r['receives']:,} | {r['rounds']} | {r['rounds_s']:.2f} | {r['tables_s']:.2f} "
                f"| {r['table'] / 1e6:.0f} |"
            )
        return
    tiles = args.tiles or [16, 1472]
    repeat = False if args.unrolled else None
    if args.json:
        for t in tiles:
            print(json.dumps(one(t, run=not args.no_run, repeat=repeat)))
        return
    rows = []
    for t in tiles:
        cmd = [sys.executable, "-m", "bench.bench_e2e", str(t), "--json"]
        cmd += ["--no-run"] * args.no_run + ["--unrolled"] * args.unrolled
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(proc.stderr)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"### Tiny SigLIP end to end ({header()})\n")
    print(
        f"2 layers ({'unrolled' if args.unrolled else 'one tile.repeat loop body'}), width 64, 16 tokens, MAP "
        "head; FP8 F143 weights (run on the F16 AMP kernel, see docs/lowering.md), f16 activations"
        + ("" if args.no_run else "; three inferences after one upload")
        + ".\n"
    )
    print(
        "| tiles | compile wall (s) | compile CPU (s) | package (B) | save (s) | load (s) | data segments in memory (B) "
        "| code (B) | simulated cycles per inference | simulation wall (s, median of 3) | peak RSS (MiB) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        c = f"{r['cycles'][0]:,}" if "cycles" in r else "-"
        sim = f"{r['sim_s']:.1f}" if "sim_s" in r else "-"
        print(
            f"| {r['tiles']} | {r['compile_s']:.2f} | {r['compile_cpu_s']:.2f} | {r['package_bytes']:,} | "
            f"{r['save_s']:.3f} | {r['load_s']:.3f} | {r['segment_bytes']:,} | {r['code_bytes']:,} | {c} | {sim} | "
            f"{r['peak_rss_mib']:.0f} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
