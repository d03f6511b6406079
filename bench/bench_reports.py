"""Simulator-run profile at full-chip scale (issue 7). Not a test: run by hand, results go to BENCHMARKS.md.

    .venv/bin/python bench/bench_reports.py [--tiles 1472] [--layers 27] [--phases 10] [--rounds 40] [--kernels 27]
                                            [--merge-rounds]

A synthetic `simulator.Trace` shaped like a So400m run on the simulator (which does not compile at full size
yet): a prologue, a `tile.repeat` loop of `--layers` iterations, each with `--kernels` kernel call sites and
`--phases` exchange phases of `--rounds` rounds (an internal sync per round: every tile's clock set to the slowest
arrival + the sync cost), and an epilogue; per-tile kernel and send times are random. Measured: the Python side
(`profile_from_trace`, writing profile.json/html), the file sizes, and in headless Chromium (Debian `chromium` +
`chromium-driver`, selenium) the load event of profile.html and a go-to-tile + redraw (two animation frames).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from ipu.runtime.reports.profile import write_profile_report
from ipu.runtime.reports.profile_sim import profile_from_trace
from ipu.runtime.simulator import Recorder, Trace

SYNC = 150


def synthetic(tiles: int, layers: int, phases: int, rounds: int, kernels: int, seed: int = 0):
    """(trace, sites) of a BSP program shaped like the lowering's main (see the module docstring)."""
    rng = np.random.default_rng(seed)
    sites: list[dict] = []

    def site(kind, kernel, what, repeat=None, role=None):
        sites.append(dict(label=f".Lsite{len(sites)}", pc=0x4000 + 16 * len(sites), kind=kind, kernel=kernel,
                          what=what, op=what.split(": ")[0], repeat=repeat, role=role))  # fmt: skip
        return len(sites) - 1

    def block(repeat, role, tag):
        out = []
        for p in range(phases):
            out.append(("sync", site("sync", "sync", "exchange.sync", repeat, role)))
            out.append(
                ("xch", site("exchange", "xch_timed", f"exchange timed ({rounds} rounds)", repeat, role))
            )
            for k in range(kernels // phases + (p < kernels % phases)):
                kern = ("gemm_f16_sup_ld64", "ew_sup", "rows_sup", "copy_sup")[k % 4]
                out.append(("k", site("compute", kern, f"nn.op{tag}{p}_{k}: {kern}", repeat, role)))
        return out

    pro = block(None, None, "pre")
    setup = site("compute", "main", f"tile.repeat x{layers}: setup", 0, "setup")
    body = block(0, "body", "layer")
    nxt = site("compute", "rep_patch", "tile.repeat: next iteration", 0, "next")
    end = site("compute", "rep_patch", "tile.repeat: reset to iteration 0", 0, "end")
    epi = block(None, None, "post")
    ret = site("compute", "main", "main: return to the host")
    program = pro + [("c", setup)] + (body + [("c", nxt)]) * layers + [("c", end)] + epi + [("c", ret)]

    clock = np.zeros(tiles, np.int64)
    rows, pcs, kinds = [clock.copy()], [-1], [Recorder.START]
    kernel_cost = {s: rng.integers(200, 4000) for s in range(len(sites))}

    def ev(pc, kind):
        rows.append(clock.copy())
        pcs.append(pc)
        kinds.append(kind)

    for what, s in program:
        pc = sites[s]["pc"]
        ev(pc, Recorder.PROBE)
        if what == "sync":
            clock += 6
            ev(pc, Recorder.ARRIVE)
            clock[:] = clock.max() + SYNC
            ev(pc, Recorder.RELEASE)
        elif what == "xch":
            for _ in range(rounds):
                clock += rng.integers(20, 400, tiles)
                ev(pc + 8, Recorder.ARRIVE)
                clock[:] = clock.max() + SYNC
                ev(pc + 8, Recorder.RELEASE)
            clock += 12
        elif what == "k":
            busy = rng.random(tiles) < 0.8
            clock += np.where(busy, (kernel_cost[s] * rng.uniform(0.7, 1.0, tiles)).astype(np.int64), 4)
        else:
            clock += 30
    ev(-1, Recorder.END)
    return Trace(np.array(rows), np.array(pcs, np.int64), np.array(kinds, np.int8)), sites


def browser_times(html: Path, tiles: int, repeats: int) -> tuple[list[float], list[float]]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
    from test_reports_browser import chromium_driver

    loads, gotos = [], []
    for _ in range(repeats):
        d = chromium_driver()
        try:
            d.get(html.as_uri())
            for _ in range(200):
                if d.execute_script("return !!(window.profileReport && window.profileReport.ready)"):
                    break
                time.sleep(0.05)
            loads.append(
                d.execute_script(
                    "const t = performance.timing; return (t.loadEventEnd || t.domContentLoadedEventEnd) - t.navigationStart"
                )
                / 1e3
            )
            gotos.append(
                d.execute_async_script(
                    "const done = arguments[arguments.length - 1], t0 = performance.now();"
                    "window.profileReport.gotoTile(arguments[0]);"
                    "requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - t0)));",
                    tiles - 100,
                )
            )
        finally:
            d.quit()
    return loads, gotos


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiles", type=int, default=1472)
    ap.add_argument("--layers", type=int, default=27)
    ap.add_argument("--phases", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--kernels", type=int, default=27)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--merge-rounds", action="store_true", help="profile_from_trace(merge_rounds=True)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    trace, sites = synthetic(args.tiles, args.layers, args.phases, args.rounds, args.kernels)
    t1 = time.perf_counter()
    doc = profile_from_trace(trace, sites, args.tiles, "synthetic", SYNC, args.merge_rounds)
    t2 = time.perf_counter()
    out = Path(tempfile.mkdtemp(prefix="bench-reports-"))
    jpath, hpath, _ = write_profile_report(doc, out)
    t3 = time.perf_counter()
    assert doc["total_cycles"] == int((trace.clock[-1] - trace.clock[0]).max())
    assert sum(s["cycles"] for s in doc["supersteps"]) == doc["total_cycles"]
    print(
        f"trace: {trace.clock.shape[0]} events x {args.tiles} tiles ({trace.clock.nbytes / 2**20:.0f} MiB clocks), "
        f"built in {t1 - t0:.2f} s; {doc['total_cycles']} cycles, {doc['run']['internal_syncs']} internal syncs"
    )
    print(
        f"profile_from_trace {t2 - t1:.2f} s; write {t3 - t2:.2f} s; {len(doc['steps'])} steps, "
        f"{len(doc['supersteps'])} superstep entries; profile.json {jpath.stat().st_size / 2**20:.1f} MiB, "
        f"profile.html {hpath.stat().st_size / 2**20:.1f} MiB ({hpath})"
    )
    loads, gotos = browser_times(hpath, args.tiles, args.repeats)
    print(
        f"headless Chromium: load {min(loads):.2f}..{max(loads):.2f} s (median {statistics.median(loads):.2f}), "
        f"go-to-tile + redraw {min(gotos):.0f}..{max(gotos):.0f} ms (median {statistics.median(gotos):.0f})"
    )


if __name__ == "__main__":
    main()
