"""Issue 21 item 3: what the busiest receivers of each exchange phase receive, without simulating.

Compiles a model (no simulation) and prints, per exchange phase (heaviest first): the timed schedule's span
(`timed_cycles`, what the package runs), the busiest receiver's port words (its bytes / 4: a lower bound), the
per-tile bound "words received + words sent" on the busiest tile of that sum (a send row holds the tile's
supervisor, so a tile's next receive set-up waits for its sends: the timed schedules come within a few per cent of
this bound), the busiest receiver's bytes and windows, and each tensor's replication (bytes received / bytes).

    python -m bench.bench_exchange_phases --model so400m-patch14-384 --layers 2 --activations fp8
    python -m bench.bench_exchange_phases --model siglip-tiny --tiles 16 --top 8
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.common import header


def _bound(sends: np.ndarray, recvs: np.ndarray, atoms: np.ndarray) -> tuple[int, int, int, int]:
    """(tile, words received, words sent, their sum) of the tile with the largest sum."""
    n = int(max(sends[:, 0].max(initial=0), recvs[:, 0].max(initial=0))) + 1
    rw = np.bincount(recvs[:, 0], weights=atoms[recvs[:, 3]] * 2, minlength=n).astype(np.int64)
    sw = np.bincount(sends[:, 0], weights=atoms * 2, minlength=n).astype(np.int64)
    t = int(np.argmax(rw + sw))
    return t, int(rw[t]), int(sw[t]), int(rw[t] + sw[t])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="so400m-patch14-384")
    p.add_argument("--layers", type=int, default=1)
    p.add_argument("--tiles", type=int, default=0, help="0: the full IPU21")
    p.add_argument("--activations", default="fp8", choices=("f16", "fp8", "mlp"))
    p.add_argument("--top", type=int, default=12)
    args = p.parse_args()

    import ipu.api as api
    from ipu.backend.lower import exchange as lx
    from ipu.backend.lower.lowering import compile_model
    from ipu.frontend.siglip import get_config

    bounds: dict[int, tuple[int, int, int, int]] = {}
    timed = lx.timed_schedule

    def recording(sends, recvs, atoms, target):  # the phases' transfers, keyed by their span
        sched = timed(sends, recvs, atoms, target)
        if len(sends):
            bounds.setdefault(int(sched.cycles), _bound(sends, recvs, np.asarray(atoms, np.int64)))
        return sched

    lx.timed_schedule = recording
    cfg = get_config(args.model)
    cfg = cfg.with_layers(args.layers) if args.layers else cfg
    t0 = time.perf_counter()
    pkg = compile_model(cfg, api.target(args.tiles or None), activations=args.activations)
    lx.timed_schedule = timed
    phases = pkg.metadata["exchange_phases"]
    print(f"{header()}; {args.model}, {args.layers} layers, {args.activations} activations, "
          f"compiled in {time.perf_counter() - t0:.0f} s")  # fmt: skip
    total = sum(q.get("timed_cycles", 0) for q in phases)
    print(f"{len(phases)} phases, timed cycles {total}, port words {sum(q['port_words'] for q in phases)}")
    print("| phase | timed | port words | recv + send (tile: r + s) | busiest receiver (tile, bytes, windows) | "
          "tensors: received / bytes |")  # fmt: skip
    print("|---|---:|---:|---:|---|---|")
    for q in sorted(phases, key=lambda q: -q.get("timed_cycles", 0))[: args.top]:
        b = bounds.get(q.get("timed_cycles", -1))
        bs = f"{b[3]} ({b[0]}: {b[1]} + {b[2]})" if b else "-"
        reps = "; ".join(
            f"{t['name']} ({t['of'].split(' via')[0]}) {t['received'] / max(1, t['bytes']):.0f}x"
            for t in q["tensors"]
        )
        print(
            f"| {q['phase']} | {q.get('timed_cycles')} | {q['port_words']} | {bs} | {q['busiest_receiver']} | {reps} |"
        )


if __name__ == "__main__":
    main()
