"""Run one kernel call on the simulator: used by the kernel tests and bench/bench_kernels.py.

A test program is the kernel library plus a `main` supervisor that points `$m0` at the call's frame, calls the
kernel's supervisor entry with `call $lr, <entry>` and returns to the host. `run_call` reports the kernel's own
tile cycles: the run's cycles minus those of the same `main` calling an empty supervisor.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ipu.backend.asm_text import parse_program
from ipu.backend.target import Target
from ipu.runtime.simulator import Simulator

MAIN = """
.globl main
.supervisor
main:
    setzi $m0, {frame}
    add $m9, $lr, 0
    call $lr, {entry}
    br $m9

.globl null_kernel
.supervisor
null_kernel:
    br $lr
"""


def program(library: str, target: Target, frame: int, entry: str):
    return parse_program(MAIN.format(frame=frame, entry=entry) + library, target.sram_base)


@cache
def _main_overhead(target: Target) -> int:
    sim = Simulator(target)
    sim.load(program("", target, target.sram_base + 0x8000, "null_kernel"))
    return int(sim.run("main", tiles=[0]).tile_cycles[0]) - 6  # the null kernel's own `br $lr`


def run_call(sim: Simulator, library: str, frame_addr: int, frame_fn, entry: str, memory: dict, tiles=(0,)):
    """Load `library` + main, write `memory` {addr: array} and the frame (frame_fn(labels) -> uint32 words),
    run on `tiles`; returns the kernel's tile cycles on the first tile."""
    prog = program(library, sim.target, frame_addr, entry)
    sim.load(prog)
    for addr, data in memory.items():
        sim.write(addr, np.ascontiguousarray(data).view(np.uint8).reshape(-1), tiles=list(tiles))
    sim.write(frame_addr, frame_fn(prog.labels).view(np.uint8), tiles=list(tiles))
    res = sim.run("main", tiles=list(tiles))
    return int(res.tile_cycles[tiles[0]]) - _main_overhead(sim.target), res


def code_bytes(library: str, target: Target) -> int:
    """Bytes of laid-out code of a kernel set."""
    p = parse_program(library, target.sram_base)
    return p.end - p.base
