"""Per-layer breakdown of a simulator profile of a layer loop (issues 21 and 22). Not a test: run by hand, results
go to BENCHMARKS.md.

    .venv/bin/python -m bench.bench_layer_breakdown PROFILE.json [BEFORE.json] [--top 30]

PROFILE.json: `ipu-run --model so400m-patch14-384 --layers 2 --inferences 1 --profile DIR` writes DIR/profile.json.
The loop's second iteration (the first one's steps may include set-up) is one layer:

- its cycles, split into compute, exchange and sync (`repeats[0].iterations[1]`);
- its compute steps (the steps of the loop body, `repeat == 0`), by kind: GEMM kernels (`gemm_*`), the exchange
  phases' on-tile copies (`copy_sup` steps labelled "exchange copies") and the other kernels;
- the `--top` costliest steps of the body (cycles on the critical path, and the slowest tile's).

With BEFORE.json too, every figure side by side with its change, and the body's steps matched by position
when the two loop bodies have the same steps (else only the totals are compared).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def breakdown(profile: dict) -> dict:
    """The loop iteration's figures and its body's steps of one profile (see the module docstring)."""
    repeats = profile.get("repeats") or []
    if not repeats or len(repeats[0].get("iterations", [])) < 2:
        raise SystemExit("the profile has no layer loop of two or more iterations (run two layers or more)")
    it = repeats[0]["iterations"][1]
    # the first iteration's steps (the later ones are summed into one "repeat-rest" step)
    steps = [s for s in profile["steps"] if s.get("repeat") == 0 and s["kind"] != "repeat-rest"]
    compute = [s for s in steps if s["kind"] == "compute"]

    def kernel(s) -> str:
        return s.get("kernel") or s["name"]

    gemm = sum(s["cycles"] for s in compute if kernel(s).startswith("gemm"))
    copies = sum(
        s["cycles"]
        for s in compute
        if kernel(s) == "copy_sup" and s.get("label", "").startswith("exchange copies")
    )
    total = sum(s["cycles"] for s in compute)
    return {
        "iteration": it["cycles"],
        "compute": it["compute"],
        "exchange": it["exchange"],
        "sync": it["sync"],
        "gemm": gemm,
        "copies": copies,
        "other": total - gemm - copies,
        "steps": [
            (
                s["kind"],
                kernel(s),
                s.get("label", ""),
                s["cycles"],
                max(s.get("tile_cycles") or [s["cycles"]]),
            )
            for s in steps
        ],
    }


ROWS = [
    ("loop iteration", "iteration"),
    ("... compute", "compute"),
    ("... exchange", "exchange"),
    ("... sync", "sync"),
    ("GEMM kernels", "gemm"),
    ("other kernels", "other"),
    ("exchange copies", "copies"),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("before", type=Path, nargs="?")
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    now = breakdown(json.loads(args.profile.read_text()))
    was = breakdown(json.loads(args.before.read_text())) if args.before else None
    if was:
        print("| per layer | before | now | change |\n|---|---:|---:|---:|")
        for name, key in ROWS:
            print(f"| {name} | {was[key]:,} | {now[key]:,} | {now[key] - was[key]:+,} |")
    else:
        print("| per layer | cycles |\n|---|---:|")
        for name, key in ROWS:
            print(f"| {name} | {now[key]:,} |")
    same = was is not None and [s[:3] for s in was["steps"]] == [s[:3] for s in now["steps"]]
    order = sorted(range(len(now["steps"])), key=lambda i: -now["steps"][i][3])[: args.top]
    print(
        f"\nThe {len(order)} costliest steps of the loop body (cycles on the critical path / the slowest tile's):"
    )
    for i in order:
        kind, kern, label, cyc, most = now["steps"][i]
        delta = f"  ({cyc - was['steps'][i][3]:+,})" if same else ""
        print(f"{cyc:8,} {most:8,}  {kind:8s} {kern[:22]:22s} {label[:90]}{delta}")


if __name__ == "__main__":
    main()
