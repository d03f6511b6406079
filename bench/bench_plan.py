"""Planning and exchange scheduling of a full-size SigLIP So400m layer on 1472 tiles (issue 5).

    .venv/bin/python bench/bench_plan.py [--runs 3] [--mode latency|compact|both] [--markdown]

The model is So400m/14-384 with 2 encoder layers, FP8 weights (nn-quantize-weights) and the layers outlined
(nn-outline-repeat), so the `tile.repeat` body is exactly one layer: planned and scheduled once, as it will be for
27 layers. Each run is a fresh process (peak RSS is per process) that times tile-plan + exchange-lower +
exchange-schedule + one verification of the result. Reported:

- wall time per pass and in total, peak RSS (medians over runs);
- per exchange phase of the layer body: its scheduled cycles against the bound "bytes moved by the busiest tile
  (max of sent and received) / 4 bytes per cycle", and its encoded exchange-table rows (max bytes per tile);
- the layer's estimated cycles split into compute, exchange and sync, and the exchange share.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time


def one_run(mode: str) -> dict:
    import numpy as np
    from xdsl.context import Context

    from ipu.dialects import exchange as ex
    from ipu.dialects import tile as tl
    from ipu.frontend.siglip import PRESETS, build_vision_model
    from ipu.passes.exchange_lower import ExchangeLowerPass
    from ipu.passes.exchange_schedule import ExchangeSchedulePass, block_cycles
    from ipu.passes.nn_outline_repeat import NNOutlineRepeatPass
    from ipu.passes.nn_quantize import NNQuantizeWeightsPass
    from ipu.passes.tile_plan import TilePlanPass

    m = build_vision_model(PRESETS["so400m-patch14-384"].with_layers(2))
    NNQuantizeWeightsPass().apply(Context(), m)
    NNOutlineRepeatPass().apply(Context(), m)
    ctx = Context()
    times = {}
    for p in (TilePlanPass(), ExchangeLowerPass(), ExchangeSchedulePass(mode=mode)):
        t0 = time.perf_counter()
        p.apply(ctx, m)
        times[p.name] = time.perf_counter() - t0
    t0 = time.perf_counter()
    m.verify()
    times["verify"] = time.perf_counter() - t0
    rep = next(o for o in m.walk() if isinstance(o, tl.RepeatOp))
    phases = []
    for op in rep.body.block.ops:
        if not isinstance(op, ex.PhaseOp):
            continue
        s, r = op.send_table(), op.recv_table()
        n = op.tiles.value.data
        sent = np.bincount(s[:, 0], weights=s[:, 3], minlength=n) if len(s) else np.zeros(n)
        got = np.bincount(r[:, 0], weights=s[r[:, 3], 3], minlength=n) if len(r) else np.zeros(n)
        busiest = float(max(sent.max(), got.max()))
        names = ", ".join(
            "x".join(map(str, v.type.get_shape())) + " " + str(v.type.element_type) for v in op.res
        )
        phases.append(
            {
                "results": names,
                "sends": int(len(s)),
                "recvs": int(len(r)),
                "cycles": op.cycles.value.data,
                "bound": int(np.ceil(busiest / 4)),
                "max_row_bytes": op.max_row_bytes.value.data,
            }
        )
    comp, exch, sync = block_cycles(rep.body.block)
    return {
        "mode": mode,
        "times": times,
        "total": sum(times.values()),
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "phases": phases,
        "layer": {"compute": comp, "exchange": exch, "sync": sync},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mode", default="both")
    ap.add_argument("--child", default=None)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_run(args.child)))
        return
    modes = ["latency", "compact"] if args.mode == "both" else [args.mode]
    results = {}
    for mode in modes:
        runs = []
        for _ in range(args.runs):
            out = subprocess.run(
                [sys.executable, __file__, "--child", mode], check=True, capture_output=True, text=True
            )
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        results[mode] = runs
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    print(
        f"date {time.strftime('%Y-%m-%d')}, commit {commit}, {platform.processor() or platform.machine()}, "
        f"{len(__import__('os').sched_getaffinity(0))} cores, python {platform.python_version()}"
    )
    for mode, runs in results.items():
        med = lambda f, runs=runs: statistics.median(f(r) for r in runs)  # noqa: E731
        print(f"\n## mode {mode}: {len(runs)} runs (medians)")
        for key in runs[0]["times"]:
            print(f"  {key:18s} {med(lambda r, key=key: r['times'][key]):7.2f} s")
        print(
            f"  {'total':18s} {med(lambda r: r['total']):7.2f} s   peak RSS {med(lambda r: r['rss_mib']):.0f} MiB"
        )
        lay = runs[0]["layer"]
        tot = sum(lay.values())
        print(
            f"  layer estimate: compute {lay['compute']}, exchange {lay['exchange']}, sync {lay['sync']} cycles; "
            f"exchange share {lay['exchange'] / tot:.1%}"
        )
        print("  | phase (results) | sends | receives | cycles | bound | cycles/bound | max row bytes/tile |")
        print("  |---|---:|---:|---:|---:|---:|---:|")
        for p in runs[0]["phases"]:
            ratio = p["cycles"] / p["bound"] if p["bound"] else float("nan")
            print(
                f"  | {p['results']} | {p['sends']} | {p['recvs']} | {p['cycles']} | {p['bound']} | "
                f"{ratio:.2f} | {p['max_row_bytes']} |"
            )


if __name__ == "__main__":
    main()
