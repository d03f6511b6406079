"""Matrix products on the AMP: C[M, N] (f16) = A[M, K] @ B[K, N] (+ C), F16 or FP8 inputs, half partials.

One call computes a whole per-tile GEMM. It is three pieces of code shared by every call of a precision:

- the **supervisor** `gemm_<prec>_sup_<coef>` (one per precision and coefficient-load mode `ld128`/`ld64`): it walks
  the weight blocks (column block nb outer, inner block kb inner); per block it waits for the workers (`sync`),
  loads the block into the AMP common weights and starts the six workers with the A block's address as their
  vertex base (`runall`), then does the next block's bookkeeping while they run (as poplibs does);
- two **worker bodies** per precision and mode, `gemm_<prec>_init` (first inner block, zero partials) and
  `gemm_<prec>_acc` (partials read from C and the results written back in place), each in two entries: `_all`
  (all six workers active) and the plain name (may run on an idle worker: tests for it first). They serve every
  row count and every inner/column extent; row-major and panel operand orders are both expressed by the strides;
- a small **frame** written by the caller: shapes, addresses and one record per worker (rpt counts, first-row
  offset in A, first-row address in the current C block, pace strides). The supervisor points `$WORKERw_BASE` at
  worker w's record once per call, so a worker reads its record through `$mworker_base` with no index arithmetic
  (poplibs' precomputed per-worker worklists play the same role), and adds its A offset to `$mvertex_base`. The
  supervisor writes the records' C row for each column block (18 cycles per column block).

Calling convention (supervisor code): `$m0` = frame address, `call $lr, gemm_<prec>_sup_<coef>`; the supervisor
returns with `br $lr` and clobbers `$m1..$m8` and the `$WORKER0..5_BASE` CSRs (no other kernel uses them). The
caller keeps its own return address elsewhere. The frame can be reused across calls (the supervisor rewrites the
records' C rows itself).

Worker cost per block (thread cycles, R rows): init 4R + 17, acc 4R + 19 (6 setup issues; the AMP pipeline's
warm-up (acc) and drain groups, 8 issues; one lone load, rpt, two trailing stores, exit). Supervisor per block: the
32 (ld128) / 64 (ld64) coefficient loads and the 6-cycle sync release; the rest overlaps the workers.

AMP model (runtime/semantics.py): one group of 4 AMP instructions consumes one row of a K block (16 halves or 32
FP8 values, 4 atoms) and produces one row of 16 outputs (4 atoms) two groups later; partials enter one group
before their row. Weight block (kb, nb) = B[kb*KB : (kb+1)*KB, nb*16 : nb*16+16], KB = 16 (F16) or 32 (FP8).

Operand layouts (what the tile level chooses):

- A [M, K], element type f16 (F16) or FP8 bits (FP8). Row r of K block kb starts at
  `a + kb * a_block_step + r * a_row_stride`; its KB elements (32 bytes) are contiguous. Row-major A: a_row_stride =
  K * esize, a_block_step = 32. K-block panels `[K/KB][M][KB]`: a_row_stride = 32, a_block_step = 32 * M.
  Column panels of P elements (`[K/P][M][P]`, P a multiple of KB): a_row_stride = P * esize, a_block_step = 32,
  a_panel_blocks = q = P / KB, a_panel_step = bytes from one panel's start to the next; `a` is the call's first
  block, block a_first_block of its panel (calls may start and end inside panels). After a panel's last block the
  supervisor adds a_panel_step - q * a_block_step more, landing on the next panel's start. Panels of 16 < P < 32
  f16 (the attention's 24-wide K head blocks) are read as two overlapping blocks per panel, columns [0, 16) and
  [P - 16, P) (a_block_step = 2 (P - 16), q = 2): B's rows for the columns read twice are zero in one of them
  (the caller's layout of B). A's row stride: a multiple of 8 bytes, at most 4112.
- C [M, N] f16, same scheme with 16-column blocks: row-major c_row_stride = 2N, c_block_step = 32; panels
  `[N/16][M][16]`: c_row_stride = 32, c_block_step = 32 * M. C's row strides are multiples of 32 bytes and at
  most 4112 bytes (10-bit pace strides).
- B as weight panels (`pack_weights`): for nb, for kb, the 512-byte block in common-weight slot order: slot
  s = engine * 4 + phase holds B[kb*KB + phase*(KB/4) + j, nb*16 + engine] for j < KB/4.
- Memory: C must be in interleaved memory (region 1): in the steady loop one bundle loads partials and stores
  results 11 atoms apart, i.e. in the two different banks of an element. A must be in a different memory element
  than C. ld128 weights must be in region 1; ld64 weights anywhere.
- Rows: every active worker takes at least 3 rows (the pipeline's prologue/epilogue are fixed); `row_split`
  chooses the number of active workers, so M >= 3 (the tile level pads smaller shards).

Numerics (semantics): per inner block, C = f16(f32(C) + A_blk @ B_blk) with the product summed in float64 and
rounded once to float32, as the simulator's AMP does (the hardware accumulates in a wider fixed point: [I]). FP8: the product is scaled by
2^(scale_a + scale_b) (S1 inlineAssemblerConv.hpp [C]).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ipu.backend.isa import FP_CLR_ZAACC
from ipu.backend.kernels.codegen import WorkerCode as _Body
from ipu.runtime import fp8

F16, FP8 = "f16", "fp8"
AMP = {F16: ("f16v4hihov4amp", "F16V4"), FP8: ("f8v8hihov4amp", "F8V8")}
KBLOCK = {F16: 16, FP8: 32}  # inner elements per weight block
ESIZE = {F16: 2, FP8: 1}
NBLOCK = 16  # columns per weight block (16 AMP engines)
MIN_ROWS = 3  # rows per active worker
PEAK_MACS = {F16: 64, FP8: 128}

# Frame words (4 bytes each), written by the caller, read by the supervisor; then one 6-word record per worker
# (REC + w * REC_WORDS), read by worker w through $mworker_base (the supervisor points $WORKERw_BASE at it):
# CNT_INIT = rows - 2 (0: idle worker), CNT_ACC = rows - 3 (rpt counts), AOFF = byte offset of the worker's first
# row in an A block, COFF = in a C block, C0 = its first row of the current C block (written by the supervisor per
# column block: C0 = COFF + C block), STRIDES = the pace stride fields. FIRST/ACC = worker entries (the
# `_all` bodies when all six workers are active).
# A in column panels: PCNT = the countdown's value at each column block's start (blocks of the first panel after
# the call's first one; off: 2^32 - 1), PQ_M1 = its reload (blocks per panel - 1), PJUMP = bytes added to the A
# block address after a panel's last block, on top of ASTEP (to the next panel's start).
WEIGHTS, A_BASE, C_BASE, KB_M1, NB_M1, ASTEP, CSTEP, FIRST, ACC, INFMT, ISCL, Q, R, NACT = range(14)
PCNT, PQ_M1, PJUMP = range(14, 17)
REC, REC_WORDS = 17, 6
CNT_INIT, CNT_ACC, AOFF, C0, STRIDES, COFF = range(6)
FRAME_WORDS = REC + 6 * REC_WORDS
FRAME_BYTES = 4 * FRAME_WORDS


def row_split(m: int, workers: int = 6) -> tuple[int, int, int]:
    """(quotient, remainder, active workers): worker w < active takes q + (w < r) rows, starting at
    w * q + min(w, r). Fewer workers are used when six would get fewer than MIN_ROWS rows each."""
    if m < MIN_ROWS:
        raise ValueError(f"GEMM needs at least {MIN_ROWS} rows per tile, got M={m} (pad the shard)")
    nact = max(1, min(workers, m // MIN_ROWS))
    return m // nact, m % nact, nact


# ----------------------------------------------------------------------------------------------------------------
# Code generation
# ----------------------------------------------------------------------------------------------------------------


def _setup(b: _Body, init: bool) -> None:
    """Worker prologue: rpt count in $m5, strides in $m4, the tripacked pointers in $m2:3 (x0 = this worker's
    first A row = its record's offset + $mvertex_base, which the supervisor points at the A block; c0 from the
    record)."""
    b.one(f"ld32 $m5, $mworker_base, $mzero, {CNT_INIT if init else CNT_ACC}")  # rows - 2 / rows - 3
    b.label(f"{b.name}_common")  # where the idle-testing entry joins
    b.one(f"ld32 $m2, $mworker_base, $mzero, {AOFF}")
    b.one("add $m2, $m2, $mvertex_base")  # x0: first row of the A block
    b.one(f"ld32 $m1, $mworker_base, $mzero, {C0}")  # c0: first row of the C block
    b.one(f"ld32 $m4, $mworker_base, $mzero, {STRIDES}")
    b.one("tapack $m2:3, $m2, $m1, $m1")  # inputs, partials (acc only), stores
    if init:
        b.one(f"setzi $a0, {FP_CLR_ZAACC}")
        b.one("uput $FP_CLR, $a0")  # the first group must start from zero accumulators


# The entry that may run on an idle worker: ld32, brz, (acc: sub), bri; it replaces the `_all` body's first
# instruction.
IDLE_TEST = {"init": 3 - 1, "acc": 4 - 1}


def _amp(prec: str, phase: int, partials: str) -> str:
    mn, fmt = AMP[prec]
    d = "$a4:5" if phase % 2 == 0 else "$a6:7"
    return f"{mn} {d}, $a0:1, {partials}, TAMP_{fmt}_E4_P{phase}"


def _dst(phase: int) -> str:
    return "$a4:5" if phase % 2 == 0 else "$a6:7"


def _tail(b: _Body, tri: str) -> None:
    b.one(f"st64pace $a4:5, {tri}, $m4, 0")
    b.one(f"st64pace $a6:7, {tri}, $m4, 0")
    b.one("exitz $mzero")


def _acc_body(prec: str, name: str) -> _Body:
    b = _Body(name)
    _setup(b, init=False)
    tri = "$m2:3+="
    # Prologue: bundles -1..9 with ld2x64pace (x = addr0, selector bits 1:0; partials = addr1, bits 3:2).
    b.bundle(f"ld2x64pace $a0:1, $a2:3, {tri}, $m4, 0b0011")  # a bundle: no alignment nop after 6 singles
    for k in range(10):
        xs = 0b11 if k <= 2 else (0b01 if k % 4 == 2 else 0)
        ps = 0b10 if k % 4 == 2 else 0
        b.bundle(f"ld2x64pace $a0:1, $a2:3, {tri}, $m4, {xs | ps << 2}", _amp(prec, k % 4, "$a2:3"))
    b.bundle("rpt $m5, 3")
    # Steady body: phases 2, 3, 0, 1 (bundle 10 has phase 2). ld2xst64pace selectors: x 1:0, partials 3:2,
    # store 5:4. Loads step rows after phase 2, the store after phase 1.
    steady = {2: 0b001001, 3: 0, 0: 0, 1: 0b100000}
    b.tag = "row"
    for ph in (2, 3, 0, 1):
        b.bundle(f"ld2xst64pace $a0:3, {_dst(ph)}, {tri}, $m4, {steady[ph]}", _amp(prec, ph, "$a2:3"))
    b.tag = "tail"
    b.bundle(f"ld2xst64pace $a0:3, $a4:5, {tri}, $m4, {steady[2]}", _amp(prec, 2, "$a2:3"))
    # Epilogue: bundles 4R-1 .. 4R+9 (phases 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1).
    for ph in (3, 0, 1, 2):  # input load + store (ldst64pace: x 1:0, store 3:2)
        sel = (0b01 if ph == 2 else 0) | ((0b10 if ph == 1 else 0) << 2)
        b.bundle(f"ldst64pace $a0:1, {_dst(ph)}, {tri}, $m4, {sel}", _amp(prec, ph, "$a2:3"))
    for ph in (3, 0, 1, 2, 3):  # store only, AMP drains
        b.bundle(f"st64pace {_dst(ph)}, {tri}, $m4, {0b10 if ph == 1 else 0}", _amp(prec, ph, "$a2:3"))
    _tail(b, tri)
    return b


def _init_body(prec: str, name: str) -> _Body:
    b = _Body(name)
    _setup(b, init=True)
    tri = "$m2:3+="
    # Bundles -1..5 load the first seven input atoms (row 0, row 1 atoms 0-2). No results exist yet (they leave
    # one group late), but the single-load pace form also stores: it writes zeros to c0 with the store pointer
    # parked (selector 0b11), which the row-0 result overwrites later (A and C are in different elements, so no
    # bank conflict; a second load from a parked address could hit A's bank).
    b.bundle(f"ldst64pace $a0:1, $azeros, {tri}, $m4, 0b1100")  # a bundle: no alignment nop after 8 singles
    for k in range(6):
        xs = 0b01 if k == 2 else 0  # after atom 3 of row 0: field 0 (A row step)
        b.bundle(f"ldst64pace $a0:1, $azeros, {tri}, $m4, {xs | 0b1100}", _amp(prec, k % 4, "$azeros"))
    b.bundle("rpt $m5, 3")
    steady = {2: 0b0001, 3: 0, 0: 0, 1: 0b1000}  # ldst64pace: x 1:0 steps after phase 2, store 3:2 after 1
    b.tag = "row"
    for ph in (2, 3, 0, 1):
        b.bundle(f"ldst64pace $a0:1, {_dst(ph)}, {tri}, $m4, {steady[ph]}", _amp(prec, ph, "$azeros"))
    b.tag = "tail"
    b.bundle(f"ldst64pace $a0:1, $a4:5, {tri}, $m4, {steady[2]}", _amp(prec, 2, "$azeros"))
    for ph in (3, 0, 1, 2, 3):  # bundles 4R-1 .. 4R+3: stores, AMP drains
        b.bundle(f"st64pace {_dst(ph)}, {tri}, $m4, {0b10 if ph == 1 else 0}", _amp(prec, ph, "$azeros"))
    _tail(b, tri)
    return b


def _body(prec: str, mode: str) -> _Body:
    """The `_all` body (every worker active) and the entry `gemm_<prec>_<mode>` for calls with idle workers (fewer
    than six active: M < 18): it sends an idle worker (ROWS = 0) to its exit, derives the rpt count from ROWS and
    joins the `_all` body after its count load."""
    name = f"gemm_{prec}_{mode}"
    b = (_init_body if mode == "init" else _acc_body)(prec, f"{name}_all")
    b.lines += [
        f".globl {name}",
        ".worker",
        f"{name}:",
        f"    ld32 $m5, $mworker_base, $mzero, {CNT_INIT}",  # rows - 2 (0: idle)
        f"    brz $m5, .L{name}_idle",
        *(["    sub $m5, $m5, 1"] if mode == "acc" else []),  # rpt count rows - 3
        f"    bri {name}_all_common",
        f".L{name}_idle:",
        "    exitz $mzero",
    ]
    return b


def worker_acc_asm(prec: str) -> str:
    """Accumulate workers (`gemm_<prec>_acc` and `gemm_<prec>_acc_all`): rows stream through the AMP with partials
    read from C and results stored in place.

    Bundle b (AMP instruction b, phase b % 4) loads the input and partial atoms of instruction b + 1 and stores
    the result of instruction b - 2 (results alternate between $a4:5 and $a6:7, so they wait two bundles and the
    store lands 11 atoms behind the partial load: the other bank of the interleaved element). With R rows there
    are 4(R + 2) AMP instructions (warm-up group, R groups, drain group). Input loads are needed for bundles
    [3, 4R + 3), partial loads for [-1, 4R - 1), stores for [10, 4R + 10): a fixed prologue (the input pointer
    parked on its first atom with the zero stride field 2), a steady rpt loop, and a fixed epilogue.
    Pointer steps: inputs and partials move to the next row after atom 3 (stride fields 0 and 1), stores too.
    """
    return _body(prec, "acc").text()


def worker_init_asm(prec: str) -> str:
    """Initialize workers (`gemm_<prec>_init`, `gemm_<prec>_init_all`): zero partials ($azeros), so no warm-up
    group: 4(R + 1) AMP instructions. Bundle b loads the input of instruction b + 1 ([-1, 4R - 1)) and stores the
    result of b - 2 ([6, 4R + 6)): seven input loads, then a steady ldst64pace loop, then stores only."""
    return _body(prec, "init").text()


def supervisor_asm(prec: str, coef: str, sram_base: int) -> str:
    """The shared supervisor of a precision and coefficient-load mode (see the module docstring).

    Once per call: $WORKER0..5_BASE = the workers' records in the frame (clobbered: no other kernel uses them).
    Per block: `sync` (the previous block's workers must be done: CWEI is shared, S1 conv_partial_1x1_supervisor
    [C]), the 32 (ld128) or 64 (ld64) coefficient loads, `runall` with the A block as the vertex base; then, while
    the workers run, the bookkeeping for the next block and the loop branches (as poplibs does after its runall).
    Per column block (the first one at entry): the six records' C0 = COFF + C block (18 cycles + bri; after the
    sync: the workers read C0 at setup), so the frame can be reused."""
    name = f"gemm_{prec}_sup_{coef}"
    if coef == "ld128":
        loads = [f"    ld128putcs {i}" for i in range(0, 64, 2)]
    elif coef == "ld64":
        loads = [f"    ld64putcs {i}" for i in range(64)]
    else:
        raise ValueError(f"coefficient-load mode must be ld128 or ld64, got {coef!r}")
    fp8_setup = []
    if prec == FP8:
        fp8_setup = [
            f"    ld32 $m1, $m0, $mzero, {INFMT}",
            "    put $FP_INFMT, $m1",
            f"    ld32 $m1, $m0, $mzero, {ISCL}",
            "    put $FP_ISCL, $m1",
        ]
    bases = []
    for w in range(6):  # $WORKERw_BASE = worker w's record (absolute address)
        bases += [f"    add $m1, $m0, {4 * (REC + w * REC_WORDS)}", f"    put $WORKER{w}_BASE, $m1"]
    c0_rows = []  # C0 = COFF + C block ($m7), per worker
    for w in range(6):
        rec = REC + w * REC_WORDS
        c0_rows += [f"    ld32 $m1, $m0, $mzero, {rec + COFF}", "    add $m1, $m1, $m7"]
        c0_rows += [f"    st32 $m1, $m0, $mzero, {rec + C0}"]
    lines = [
        f".globl {name}",
        ".supervisor",
        f"{name}:",
        f"    ld32 $m1, $m0, $mzero, {WEIGHTS}",
        "    put $CCCSLOAD, $m1",  # weight panels are consumed in order: one put per call
        *fp8_setup,
        *bases,
        f"    ld32 $m1, $m0, $mzero, {A_BASE}",
        f"    setzi $m6, {sram_base}",
        "    sub $m8, $m1, $m6",  # runall takes the vertex base relative to the SRAM base: A - SRAM base
        f"    ld32 $m4, $m0, $mzero, {PCNT}",  # blocks left in A's current panel after this one
        f"    ld32 $m7, $m0, $mzero, {C_BASE}",
        f"    ld32 $m2, $m0, $mzero, {NB_M1}",
        "    add $m6, $m8, 0",
        f"    ld32 $m3, $m0, $mzero, {KB_M1}",
        f"    ld32 $m5, $m0, $mzero, {FIRST}",
        f"    bri .L{name}_c0",  # no worker has run yet: no sync
        f".L{name}_col:",
        "    sync TEXCH_SYNCZONE_LOCAL",  # the workers read their C0 at setup: rewrite it once they are done
        f".L{name}_c0:",
        *c0_rows,
        f"    bri .L{name}_go",
        f".L{name}_k:",
        "    sync TEXCH_SYNCZONE_LOCAL",  # CWEI is shared: every worker must be done before the next load
        f".L{name}_go:",
        *loads,
        # The workers' vertex base is the A block ($mvertex_base = $m6 + SRAM base): no per-block frame writes.
        "    runall $m5, $m6, 0",
        # Bookkeeping and branches for the next block while the workers run (on hardware: in the slot of the
        # first worker to exit, as poplibs' estimator assumes: min worker + 14 cycles).
        f"    ld32 $m5, $m0, $mzero, {ACC}",
        f"    ld32 $m1, $m0, $mzero, {ASTEP}",
        "    add $m6, $m6, $m1",
        # A in column panels: after the panel's last block, on to the next panel's start (off: the countdown
        # never reaches zero).
        f"    brnzdec $m4, .L{name}_same",
        f"    ld32 $m4, $m0, $mzero, {PQ_M1}",
        f"    ld32 $m1, $m0, $mzero, {PJUMP}",
        "    add $m6, $m6, $m1",
        f".L{name}_same:",
        f"    brnzdec $m3, .L{name}_k",
        f"    ld32 $m3, $m0, $mzero, {KB_M1}",
        f"    ld32 $m5, $m0, $mzero, {FIRST}",
        "    add $m6, $m8, 0",
        f"    ld32 $m4, $m0, $mzero, {PCNT}",
        f"    ld32 $m1, $m0, $mzero, {CSTEP}",
        "    add $m7, $m7, $m1",
        f"    brnzdec $m2, .L{name}_col",
        "    sync TEXCH_SYNCZONE_LOCAL",
        "    br $lr",
    ]
    return "\n".join(lines) + "\n"


def library_asm(sram_base: int, precisions=(F16, FP8), coefs=("ld128", "ld64")) -> str:
    """The whole GEMM kernel set: supervisors and shared worker bodies."""
    parts = []
    for prec in precisions:
        parts += [supervisor_asm(prec, c, sram_base) for c in coefs]
        parts += [worker_init_asm(prec), worker_acc_asm(prec)]
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------------------------------
# Frame and operand packing
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gemm:
    """One per-tile GEMM call: shapes, precision, mode and operand placement (byte addresses)."""

    m: int
    k: int
    n: int
    prec: str = F16
    mode: str = "init"  # "init": C = A @ B; "acc": C += A @ B
    coef: str = "ld128"
    a: int = 0
    weights: int = 0
    c: int = 0
    a_row_stride: int | None = None  # default: row-major
    a_block_step: int | None = None
    c_row_stride: int | None = None
    c_block_step: int | None = None
    a_panel_blocks: int | None = None  # A in column panels: K blocks per panel (None: no panel jumps)
    a_panel_step: int = 0  # bytes from one A panel's start to the next
    a_first_block: int = 0  # the call's first K block within its panel (`a` points at that block)
    in_format: int = fp8.F143  # FP8 only
    w_format: int = fp8.F143
    in_scale: int = 0
    w_scale: int = 0

    def __post_init__(self):
        kb = KBLOCK[self.prec]
        if self.k % kb or self.n % NBLOCK:
            raise ValueError(
                f"{self.prec} GEMM needs K % {kb} == 0 and N % 16 == 0, got K={self.k} N={self.n}"
            )
        if self.mode not in ("init", "acc"):
            raise ValueError(f"mode must be init or acc, got {self.mode!r}")
        # A's rows are read atom by atom (any 8-byte stride: column panels of 24 halves read in place); C's rows
        # are loaded and stored 11 atoms apart in one bundle (whole 32-byte rows keep them in the two banks).
        if self.ars % 8 or not 32 <= self.ars <= 8 * 514:
            raise ValueError(f"A's row stride must be a multiple of 8 bytes in [32, 4112], got {self.ars}")
        if self.crs % 32 or not 32 <= self.crs <= 8 * 514:
            raise ValueError(f"C's row stride must be a multiple of 32 bytes in [32, 4112], got {self.crs}")
        q = self.a_panel_blocks
        if q is None:
            if self.a_panel_step or self.a_first_block:
                raise ValueError("a_panel_step and a_first_block need a_panel_blocks (A in column panels)")
        else:
            if not isinstance(q, int) or q < 1:
                raise ValueError(f"a_panel_blocks must be a positive number of K blocks, got {q!r}")
            if not 0 <= self.a_first_block < q:
                raise ValueError(
                    f"a_first_block must be in [0, a_panel_blocks={q}), got {self.a_first_block}"
                )
            if self.a_panel_step <= 0 or self.a_panel_step % 8:
                raise ValueError(
                    f"a_panel_step must be a positive multiple of 8 bytes, got {self.a_panel_step}"
                )

    @property
    def ars(self) -> int:
        return self.a_row_stride if self.a_row_stride is not None else self.k * ESIZE[self.prec]

    @property
    def crs(self) -> int:
        return self.c_row_stride if self.c_row_stride is not None else self.n * 2

    @property
    def kblocks(self) -> int:
        return self.k // KBLOCK[self.prec]

    @property
    def nblocks(self) -> int:
        return self.n // NBLOCK

    def frame(self, labels: dict[str, int]) -> np.ndarray:
        """The frame words (uint32) for this call; `labels` = the loaded program's labels (worker entries)."""
        q, r, nact = row_split(self.m)
        f = np.zeros(FRAME_WORDS, np.uint32)
        f[Q], f[R], f[NACT] = q, r, nact
        # Pace strides (in atoms): field 0 = A row step, field 1 = C row step (after 3 atoms), field 2 = 0.
        strides = ((self.ars // 8 - 3) & 0x3FF) | (((self.crs // 8 - 3) & 0x3FF) << 10)
        for w in range(6):
            rec = REC + w * REC_WORDS
            f[rec + STRIDES] = strides
            if w < nact:
                first, rows = w * q + min(w, r), q + (w < r)
                f[rec + CNT_INIT], f[rec + CNT_ACC] = rows - 2, rows - 3
                f[rec + AOFF], f[rec + COFF] = first * self.ars, first * self.crs
        f[WEIGHTS], f[A_BASE], f[C_BASE] = self.weights, self.a, self.c
        f[KB_M1], f[NB_M1] = self.kblocks - 1, self.nblocks - 1
        f[ASTEP] = astep = self.a_block_step if self.a_block_step is not None else 32
        if self.a_panel_blocks is None:
            f[PCNT] = 0xFFFFFFFF  # never reaches zero: no panel jumps
        else:
            q = self.a_panel_blocks
            f[PCNT], f[PQ_M1] = q - 1 - self.a_first_block, q - 1
            f[PJUMP] = (self.a_panel_step - q * astep) & 0xFFFFFFFF
        f[CSTEP] = self.c_block_step if self.c_block_step is not None else 32
        body = "_all" if nact == 6 else ""  # no idle worker: the bodies without the idle test
        f[FIRST] = labels[f"gemm_{self.prec}_{self.mode}{body}"]
        f[ACC] = labels[f"gemm_{self.prec}_acc{body}"]
        f[INFMT] = (self.in_format << 1) | self.w_format
        f[ISCL] = (self.in_scale + self.w_scale) & 0x7F
        return f

    @property
    def entry(self) -> str:
        return f"gemm_{self.prec}_sup_{self.coef}"


def pack_weights(b: np.ndarray, prec: str) -> np.ndarray:
    """B [K, N] (float16, or uint8 FP8 bits) -> the weight panels (uint8), in the order the supervisor loads them:
    for nb, for kb, 64 slots of 8 bytes, slot engine * 4 + phase = B[kb*KB + phase*KB/4 + j, nb*16 + engine]."""
    kb = KBLOCK[prec]
    k, n = b.shape
    raw = np.ascontiguousarray(b).view(np.uint8).reshape(k, n, ESIZE[prec])
    # [kb_i, phase, j, nb_i, engine, byte] -> [nb_i, kb_i, engine, phase, j, byte]
    t = raw.reshape(k // kb, 4, kb // 4, n // NBLOCK, NBLOCK, ESIZE[prec]).transpose(3, 0, 4, 1, 2, 5)
    return np.ascontiguousarray(t).reshape(-1)


# ----------------------------------------------------------------------------------------------------------------
# Semantics and cycle estimate
# ----------------------------------------------------------------------------------------------------------------


def semantics(g: Gemm, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
    """C (float16 [M, N]) after the call. a, b: float16, or uint8 FP8 bits (formats and scales from g)."""
    kb = KBLOCK[g.prec]
    if g.prec == FP8:
        af = fp8.DECODE[g.in_format][a] * np.float32(2.0 ** (g.in_scale + g.w_scale))
        bf = fp8.DECODE[g.w_format][b]
    else:
        af, bf = a.astype(np.float32), b.astype(np.float32)
    out = np.zeros((g.m, g.n), np.float16) if g.mode == "init" else c.astype(np.float16).copy()
    with np.errstate(all="ignore"):
        for i in range(g.kblocks):
            # Products summed in float64, rounded once to float32 (as the simulator's AMP: order-independent).
            prod = (af[:, i * kb : (i + 1) * kb].astype(np.float64) @ bf[i * kb : (i + 1) * kb]).astype(
                np.float32
            )
            out = (out.astype(np.float32) + prod).astype(np.float16)
    return out


@cache
def _counts(prec: str, mode: str) -> dict[str, int]:
    """Issues per section of a generated `_all` body: head (setup, prologue, rpt), row (one rpt pass), tail."""
    return _body(prec, mode).count


RPT_OFFSET = {"init": -2, "acc": -3}  # the rpt loop runs R + offset times (4 bundles each)
IDLE = 3  # ld32, brz, exitz
# Supervisor: entry (ld32 + put $CCCSLOAD; FP8: two ld32 + put; six add + put $WORKERw_BASE;
# nine ALU/loads; bri) and the return. Per block: the weight loads and the sync that follows the workers (released 6 cycles after
# the last worker's exit); the workers start at the supervisor's clock when it issues `runall`, and the
# bookkeeping and branches after it overlap their run. Per column block: the records' C0 writes + bri.
SUP_CALL = {F16: 1 + 6 + 6 * 7 + 9 + 6 + 6, FP8: 1 + 6 + 14 + 6 * 7 + 9 + 6 + 6}
SUP_BLOCK_FIXED = 6
SUP_COL = 6 * 3 + 6
WEIGHT_LOAD = {"ld128": 32, "ld64": 64}


def worker_thread_cycles(rows: int, mode: str, prec: str = F16, all_active: bool = True) -> int:
    """Issues of one worker for one weight block with `rows` rows (0 = idle)."""
    if rows == 0:
        return IDLE
    c = _counts(prec, mode)
    return (
        (0 if all_active else IDLE_TEST[mode]) + c["head"] + c["tail"] + c["row"] * (rows + RPT_OFFSET[mode])
    )


def cycles(g: Gemm) -> int:
    """Tile cycles of the call (from the supervisor's entry to its return)."""
    q, r, nact = row_split(g.m)
    rows = q + (1 if r else 0)

    def block(mode):
        return WEIGHT_LOAD[g.coef] + SUP_BLOCK_FIXED + 6 * worker_thread_cycles(rows, mode, g.prec, nact == 6)

    per_col = block(g.mode) + (g.kblocks - 1) * block("acc")
    return SUP_CALL[g.prec] + g.nblocks * (per_col + SUP_COL)


def macs(g: Gemm) -> int:
    return g.m * g.n * g.k
