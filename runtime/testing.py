"""Helpers to run short instruction sequences on the simulator (for unit tests of instructions and kernels).

    sim = run_worker_snippet(Target.small(tiles=2), "setzi $m0, 7\\n add $m1, $m0, 5", workers=1)
    sim.m[sim.worker_ctx(tile=0, worker=0), 1]  # -> 12

The snippet runs on worker 0 (or all six with workers=6) of every tile, started by a supervisor `main` that waits
for it (sync LOCAL) and returns to the host. Registers keep their values after the worker exits, so tests read
them from `sim.m` / `sim.a` / `sim.a64`. Memory can be written before the run with `memory={addr: array}` (the
same bytes on every tile, or a [tiles, ...] array per tile).
"""

from __future__ import annotations

import numpy as np

from ipu.backend.asm_text import parse_program
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

SNIPPET = """
.globl main
.supervisor
main:
{supervisor}
    setzi $m1, snippet
    setzi $m2, 0
    {run}
    sync TEXCH_SYNCZONE_LOCAL
    br $lr

.globl snippet
.worker
snippet:
{body}
    exitz $mzero
"""


def snippet_program(target: Target, body: str, *, workers: int = 1, supervisor: str = ""):
    run = "runall $m1, $m2, 0" if workers == 6 else "\n    ".join(["run $m1, $m2, 0"] * workers)
    text = SNIPPET.format(supervisor=supervisor, run=run, body=body)
    return parse_program(text, target.sram_base)


def run_worker_snippet(
    target: Target | Simulator,
    body: str,
    *,
    workers: int = 1,
    supervisor: str = "",
    memory: dict[int, np.ndarray] | None = None,
    m: dict[int, int | np.ndarray] | None = None,
    a: dict[int, int | np.ndarray] | None = None,
    check_poison: bool = True,
) -> Simulator:
    """Run `body` (worker asm) on `workers` workers of every tile; returns the simulator after the run.

    m / a: initial worker register values {register index: value or [tiles * 6] array}."""
    sim = target if isinstance(target, Simulator) else Simulator(target, check_poison=check_poison)
    sim.load(snippet_program(sim.target, body, workers=workers, supervisor=supervisor))
    for addr, data in (memory or {}).items():
        arr = np.asarray(data)
        per_tile = arr.ndim >= 2 and arr.shape[0] == sim.T
        sim.write(addr, arr, tiles=np.arange(sim.T) if per_tile else None)
    for r, v in (m or {}).items():
        sim.m[: sim.NW, r] = np.asarray(v, dtype=np.int64).astype(np.uint32)
    for r, v in (a or {}).items():
        sim.a[: sim.NW, r] = (
            np.asarray(v).astype(np.uint32)
            if np.asarray(v).dtype != np.float32
            else np.asarray(v).view(np.uint32)
        )
    sim.last_result = sim.run("main")
    return sim


def f32_bits(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def f16x2_bits(lo, hi) -> int:
    """One 32-bit word holding two halves (lo in bits 15:0)."""
    return int(np.array([lo, hi], dtype=np.float16).view(np.uint32)[0])
