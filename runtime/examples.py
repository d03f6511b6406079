"""Small hand-written programs for the simulator: tests, benchmarks, and examples of the asm conventions.

Conventions they show: the supervisor starts at `main` with `$lr` = 0 and returns to the host with `br $lr`;
workers are started by `runall` with a vertex-state pointer in `$mvertex_base` and end with `exitz $mzero`;
AMP weights are loaded by the supervisor through `$CCCSLOAD` with `ld64putcs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ipu.backend.asm_text import parse_program
from ipu.backend.isa import FP_CLR_ZAACC
from ipu.backend.isa_program import Program
from ipu.backend.target import Target

DOT_F32 = """
.globl main
.supervisor
main:
    setzi $m1, work
    setzi $m2, {vs_rel}
    runall $m1, $m2, 4
    sync TEXCH_SYNCZONE_LOCAL
    br $lr

.globl work
.worker
work:
    ld32 $m0, $mvertex_base, $mzero, 0      // x
    ld32 $m1, $mvertex_base, $mzero, 1      // y
    ld32 $m2, $mvertex_base, $mzero, 2      // number of f32 pairs
    ld32 $m3, $mvertex_base, $mzero, 3      // out
    setzi $m4, 0
    setzi $m5, 0
    setzi $a4, 0
    setzi $a5, 0
    rpt $m2, 3
    { ld64step $a0:1, $m0, $m4+=, 1 ; fnop }
    { ld64step $a2:3, $m1, $m5+=, 1 ; fnop }
    { nop ; f32v2mul $a0:1, $a0:1, $a2:3 }
    { nop ; f32v2add $a4:5, $a4:5, $a0:1 }
    f32add $a4, $a4, $a5
    st32 $a4, $m3, $mzero, 0
    exitz $mzero
"""


def dot_f32_program(target: Target, vertex_state: int) -> Program:
    """Each worker: out = dot(x, y) over f32 pairs (two lanes, summed at the end)."""
    return parse_program(DOT_F32.replace("{vs_rel}", str(vertex_state - target.sram_base)), target.sram_base)


AMP_WORKER = """
.globl amp_worker
.worker
amp_worker:
    setzi $a0, {zaacc}
    uput $FP_CLR, $a0                       // zero the accumulators
    ld32 $m5, $mvertex_base, $mzero, 0      // inputs (padded: a zero group before and after)
    ld32 $m6, $mvertex_base, $mzero, 1      // partials (padded: two zero groups after)
    ld32 $m7, $mvertex_base, $mzero, 2      // output buffer - 8 (stores run one bundle behind)
    ld32 $m8, $mvertex_base, $mzero, 3      // groups + 2 (warm-up and drain)
    tapack $m2:3, $m5, $m6, $m7
    ld2x64pace $a0:1, $a2:3, $m2:3+=, $mzero, 0
    rpt $m8, 3
    {{ ld2xst64pace $a0:3, $a4:5, $m2:3+=, $mzero, 0 ; {amp} $a4:5, $a0:1, $a2:3, TAMP_{fmt}_E4_P0 }}
    {{ ld2xst64pace $a0:3, $a4:5, $m2:3+=, $mzero, 0 ; {amp} $a4:5, $a0:1, $a2:3, TAMP_{fmt}_E4_P1 }}
    {{ ld2xst64pace $a0:3, $a4:5, $m2:3+=, $mzero, 0 ; {amp} $a4:5, $a0:1, $a2:3, TAMP_{fmt}_E4_P2 }}
    {{ ld2xst64pace $a0:3, $a4:5, $m2:3+=, $mzero, 0 ; {amp} $a4:5, $a0:1, $a2:3, TAMP_{fmt}_E4_P3 }}
    st64pace $a4:5, $m2:3+=, $mzero, 0
    exitz $mzero
"""

AMP_SUPERVISOR = """
.globl main
.supervisor
main:
    setzi $m0, {weights}
    put $CCCSLOAD, $m0
{loads}
{fp8_setup}
    setzi $m1, amp_worker
    setzi $m2, {vs_rel}
    runall $m1, $m2, 4
    sync TEXCH_SYNCZONE_LOCAL
    br $lr
"""


@dataclass(frozen=True)
class AmpLayout:
    """Where the AMP example keeps its buffers (per worker w: base + w * stride)."""

    weights: int = 0x5C000  # 512 B, region 0
    vertex_state: int = 0x5C400  # 6 x 16 B
    inputs: int = 0x60000  # region 0, element A
    outputs: int = 0x68000  # region 0, another element (the first junk store lands in 0x64000..)
    partials: int = 0x80000  # region 1
    worker_stride: int = 0x800


# Room for ~180 groups per worker on a full-size tile (the benchmark's layout).
BENCH_LAYOUT = AmpLayout(
    weights=0x50000,
    vertex_state=0x50400,
    inputs=0x54000,
    outputs=0x68000,
    partials=0x80000,
    worker_stride=0x1800,
)


def amp_program(
    target: Target,
    fp8_formats: tuple[int, int] | None = None,
    fp8_scale: int = 0,
    lay: AmpLayout | None = None,
) -> Program:
    """16x16 AMP product per worker: Y = X W^T + P over N groups of 16 inputs (F16, or FP8 when
    fp8_formats = (input format, weight format) is given)."""
    lay = lay or AmpLayout()
    fmt, amp = ("F8V8", "f8v8hihov4amp") if fp8_formats else ("F16V4", "f16v4hihov4amp")
    worker = AMP_WORKER.format(zaacc=FP_CLR_ZAACC, amp=amp, fmt=fmt)
    fp8_setup = ""
    if fp8_formats:
        xfmt, wfmt = fp8_formats
        fp8_setup = (
            f"    setzi $m3, {(xfmt << 1) | wfmt}\n    put $FP_INFMT, $m3\n"
            f"    setzi $m3, {fp8_scale & 0x7F}\n    put $FP_ISCL, $m3"
        )
    sup = AMP_SUPERVISOR.format(
        weights=lay.weights,
        loads="\n".join(f"    ld64putcs {i}" for i in range(64)),
        fp8_setup=fp8_setup,
        vs_rel=lay.vertex_state - target.sram_base,
    )
    return parse_program(sup + worker, target.sram_base)


def amp_setup(
    sim, n_groups: int, weights: np.ndarray, x: np.ndarray, partials: np.ndarray, lay: AmpLayout | None = None
) -> None:
    """Write the AMP example's buffers. weights: [T, 512 B] raw; x: [T, 6, n_groups, 8 B * 4] raw bytes of the
    inputs per group (4 atoms), partials: [T, 6, n_groups, 16] float16."""
    lay = lay or AmpLayout()
    T, W = sim.T, sim.W
    tiles = np.arange(T)
    sim.write(lay.weights, weights.reshape(T, -1), tiles=tiles)
    vs = np.zeros((T, W, 4), np.uint32)
    for w in range(W):
        vs[:, w] = [
            lay.inputs + w * lay.worker_stride,
            lay.partials + w * lay.worker_stride,
            lay.outputs + w * lay.worker_stride - 8,
            n_groups + 2,
        ]
        xin = np.zeros((T, n_groups + 2, 32), np.uint8)
        xin[:, 1 : n_groups + 1] = x[:, w].reshape(T, n_groups, 32)
        sim.write(
            lay.inputs + w * lay.worker_stride,
            np.concatenate([xin.reshape(T, -1), np.zeros((T, 8), np.uint8)], 1),
            tiles=tiles,
        )
        pin = np.zeros((T, n_groups + 2, 16), np.float16)
        pin[:, :n_groups] = partials[:, w]
        praw = np.concatenate([pin.reshape(T, -1).view(np.uint8), np.zeros((T, 8), np.uint8)], 1)
        sim.write(lay.partials + w * lay.worker_stride, praw, tiles=tiles)
        # The output buffer gets one junk atom before it (the first store of the pipelined loop).
    sim.write(lay.vertex_state, vs.reshape(T, -1), tiles=tiles)


def amp_outputs(sim, n_groups: int, lay: AmpLayout | None = None) -> np.ndarray:
    """[T, 6, n_groups, 16] float16 results of the AMP example."""
    lay = lay or AmpLayout()
    out = np.stack(
        [sim.read(lay.outputs + w * lay.worker_stride + 64, n_groups * 32, np.float16) for w in range(sim.W)],
        1,
    )
    return out.reshape(sim.T, sim.W, n_groups, 16)
