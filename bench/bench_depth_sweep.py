"""Every depth compiles (issue 20): So400m/14-384 + MAP head at each given number of layers through
`compile_model` (plan, memory plan, lowering, package; no simulation), one process per depth.

Prints one row per depth: whether it compiled, the precision policy it ended with (the default, or the compact
fallback when the default does not fit the memory plan), the package's code bytes (every tile runs one copy), compile wall / CPU
seconds and peak RSS; for a depth that fails, the diagnostic's first line. The model is the builder's seeded
random weights (`random_weights(cfg, seed)`: the weights only feed the upload checks, the plan does not read them).

    .venv/bin/python -m bench.bench_depth_sweep --layers 1,2,3,4,5,6,8,12,16,20,26,27
    .venv/bin/python -m bench.bench_depth_sweep --layers 3,27 --activations fp8 --fp8-linears fc2
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from bench.common import header


def one(layers: int, activations: str, fp8_linears: str) -> dict:
    """Compiles one depth in this process and returns its row (called in a child: peak RSS is per depth)."""
    import resource

    from ipu.backend.lower.lowering import compile_model
    from ipu.backend.target import IPU21
    from ipu.frontend.siglip import PRESETS
    from ipu.frontend.weights import random_weights

    cfg = PRESETS["so400m-patch14-384"].with_layers(layers)
    t0, c0 = time.perf_counter(), time.process_time()
    row: dict = {"layers": layers}
    try:
        pkg = compile_model(
            cfg,
            IPU21,
            weights=random_weights(cfg, 0),
            activations=activations,
            fp8_linears=tuple(n for n in fp8_linears.split(",") if n),
        )
    except Exception as e:  # noqa: BLE001 - a failing depth is a result of the sweep
        row.update(ok=False, error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    else:
        notes = pkg.metadata.get("notes", [])
        row.update(
            ok=True,
            policy="compact" if any("precision policy" in n for n in notes) else "default",
            code_bytes=len(pkg.code),
        )
    row.update(
        wall_s=round(time.perf_counter() - t0, 1),
        cpu_s=round(time.process_time() - c0, 1),
        rss_mib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    )
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", default="1,2,3,4,5,6,8,12,16,20,26,27", help="comma-separated depths")
    p.add_argument("--activations", default="mlp", choices=("f16", "fp8", "mlp"))
    p.add_argument("--fp8-linears", default="", help="with --activations fp8: ipu-run's --fp8-linears")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child is not None:
        print(json.dumps(one(args.child, args.activations, args.fp8_linears)))
        return
    print(f"{header()}; So400m + MAP head, {args.activations} activations {args.fp8_linears or ''}".rstrip())
    print("| layers | compiled | policy | code B | wall s | CPU s | peak RSS MiB | diagnostic |")
    print("|---:|---|---|---:|---:|---:|---:|---|")
    failed = 0
    for d in (int(x) for x in args.layers.split(",")):
        cmd = [
            sys.executable,
            "-m",
            "bench.bench_depth_sweep",
            "--child",
            str(d),
            "--activations",
            args.activations,
        ]
        cmd += ["--fp8-linears", args.fp8_linears]
        out = subprocess.run(cmd, capture_output=True, text=True)
        try:
            r = json.loads(out.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            r = {"layers": d, "ok": False, "error": (out.stderr.strip().splitlines() or ["no output"])[-1]}
        failed += not r["ok"]
        print(
            f"| {d} | {'yes' if r['ok'] else '**no**'} | {r.get('policy', '')} | {r.get('code_bytes', '')} | {r.get('wall_s', '')} | "
            f"{r.get('cpu_s', '')} | {r.get('rss_mib', '')} | {r.get('error', '')} |",
            flush=True,
        )
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
