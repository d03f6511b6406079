"""Matrix products on the AMP: C[M, N] (f16) = A[M, K] @ B[K, N] (+ C), F16 or FP8 inputs, half partials.

One call computes a whole per-tile GEMM. It is three pieces of code shared by every call of a precision:

- the **supervisor** `gemm_<prec>_sup_<coef>` (one per precision and coefficient-load mode `ld128`/`ld64`): it walks
  the weight blocks (column block nb outer, inner block kb inner), loads each block into the AMP common weights,
  publishes the block's A and C addresses in the frame, starts the six workers and waits for them;
- two **worker bodies** per precision, `gemm_<prec>_init` (first inner block, zero partials) and `gemm_<prec>_acc`
  (partials read from C and the results written back in place). They serve every row count and every
  inner/column extent; row-major and panel operand orders are both expressed by the frame's strides;
- a small **frame** (vertex state, `Frame` below) written by the caller: shapes, addresses, strides and the row
  split of the six workers (quotient / remainder / active workers).

Calling convention (supervisor code): `$m0` = frame address, `call $lr, gemm_<prec>_sup_<coef>`; the supervisor
returns with `br $lr` and clobbers `$m1..$m7`. The caller keeps its own return address elsewhere.

AMP model (runtime/semantics.py): one group of 4 AMP instructions consumes one row of a K block (16 halves or 32
FP8 values, 4 atoms) and produces one row of 16 outputs (4 atoms) two groups later; partials enter one group
before their row. Weight block (kb, nb) = B[kb*KB : (kb+1)*KB, nb*16 : nb*16+16], KB = 16 (F16) or 32 (FP8).

Operand layouts (what the tile level chooses):

- A [M, K], element type f16 (F16) or FP8 bits (FP8). Row r of K block kb starts at
  `a + kb * a_block_step + r * a_row_stride`; its KB elements (32 bytes) are contiguous. Row-major A: a_row_stride =
  K * esize, a_block_step = 32. K-block panels `[K/KB][M][KB]`: a_row_stride = 32, a_block_step = 32 * M.
- C [M, N] f16, same scheme with 16-column blocks: row-major c_row_stride = 2N, c_block_step = 32; panels
  `[N/16][M][16]`: c_row_stride = 32, c_block_step = 32 * M. Row strides are multiples of 32 bytes and at most
  4112 bytes (10-bit pace strides).
- B as weight panels (`pack_weights`): for nb, for kb, the 512-byte block in common-weight slot order: slot
  s = engine * 4 + phase holds B[kb*KB + phase*(KB/4) + j, nb*16 + engine] for j < KB/4.
- Memory: C must be in interleaved memory (region 1): in the steady loop one bundle loads partials and stores
  results 11 atoms apart, i.e. in the two different banks of an element. A must be in a different memory element
  than C. ld128 weights must be in region 1; ld64 weights anywhere.
- Rows: every active worker takes at least 3 rows (the pipeline's prologue/epilogue are fixed); `row_split`
  chooses the number of active workers, so M >= 3 (the tile level pads smaller shards).

Numerics (semantics): per inner block, C = f16(f32(C) + A_blk @ B_blk) with the product accumulated in float32, as
the simulator's AMP does (the hardware accumulates in a wider fixed point: [I]). FP8: the product is scaled by
2^(scale_a + scale_b) (S1 inlineAssemblerConv.hpp [C]).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ipu.backend.isa import FP_CLR_ZAACC
from ipu.runtime import fp8

F16, FP8 = "f16", "fp8"
AMP = {F16: ("f16v4hihov4amp", "F16V4"), FP8: ("f8v8hihov4amp", "F8V8")}
KBLOCK = {F16: 16, FP8: 32}  # inner elements per weight block
ESIZE = {F16: 2, FP8: 1}
NBLOCK = 16  # columns per weight block (16 AMP engines)
MIN_ROWS = 3  # rows per active worker
PEAK_MACS = {F16: 64, FP8: 128}

# Frame words (4 bytes each). Per-worker tables (6 words each, indexed by the worker id): ROWS = rows - 2 (0 for
# an idle worker), AOFF / COFF = byte offsets of the worker's first row in A and C (from the row split q, r).
# XBLK/CBLK are written by the supervisor before each block, the rest by the caller.
ROWS, AOFF, COFF = 0, 6, 12
XBLK, CBLK, Q, R, NACT, ASTRIDE, CSTRIDE, STRIDES = range(18, 26)
WEIGHTS, A_BASE, C_BASE, KB_M1, NB_M1, ASTEP, CSTEP, FIRST, ACC, INFMT, ISCL = range(26, 37)
FRAME_WORDS = 38
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


def _setup(p: str, init: bool) -> list[str]:
    """Worker prologue: this worker's row count and first-row offsets from the frame's per-worker tables, the
    triple-packed pointer pair, strides in $m4 and the rpt count in $m5. Idle workers exit at once."""
    s = [
        "get $m0, $WSR",
        "shl $m7, $m0, 2",  # ld32 $m, $mvertex_base, $m7, T reads word T + worker of the frame
        f"ld32 $m5, $mvertex_base, $m7, {ROWS}",  # rows - 2 (0: idle)
        f"brz $m5, .L{p}_idle",
        f"ld32 $m2, $mvertex_base, $m7, {AOFF}",
        f"ld32 $m3, $mvertex_base, $mzero, {XBLK}",
        "add $m2, $m2, $m3",  # x0: first row of the A block
        f"ld32 $m1, $mvertex_base, $m7, {COFF}",
        f"ld32 $m3, $mvertex_base, $mzero, {CBLK}",
        "add $m1, $m1, $m3",  # c0: first row of the C block
        f"ld32 $m4, $mvertex_base, $mzero, {STRIDES}",
    ]
    if init:
        # The explicit loads of the first 7 input atoms use x0 and x0 + row stride; the packed stream starts
        # at the 8th (row 1, atom 3) and stores from c0. rpt count = rows - 2.
        s += [
            f"ld32 $m6, $mvertex_base, $mzero, {ASTRIDE}",
            "add $m6, $m2, $m6",
            "add $m7, $m6, 24",
            "tapack $m8:9, $m7, $m1, $m1",
            f"setzi $a0, {FP_CLR_ZAACC}",
            "uput $FP_CLR, $a0",  # the first group must start from zero accumulators
        ]
    else:
        s += ["tapack $m2:3, $m2, $m1, $m1", "sub $m5, $m5, 1"]  # rpt count = rows - 3
    return s


def _amp(prec: str, phase: int, partials: str) -> str:
    mn, fmt = AMP[prec]
    d = "$a4:5" if phase % 2 == 0 else "$a6:7"
    return f"{mn} {d}, $a0:1, {partials}, TAMP_{fmt}_E4_P{phase}"


def _dst(phase: int) -> str:
    return "$a4:5" if phase % 2 == 0 else "$a6:7"


def worker_acc_asm(prec: str) -> str:
    """Accumulate worker: rows stream through the AMP with partials read from C and results stored in place.

    Bundle b (AMP instruction b, phase b % 4) loads the input and partial atoms of instruction b + 1 and stores
    the result of instruction b - 2 (results alternate between $a4:5 and $a6:7, so they wait two bundles and the
    store lands 11 atoms behind the partial load: the other bank of the interleaved element). With R rows there
    are 4(R + 2) AMP instructions (warm-up group, R groups, drain group). Input loads are needed for bundles
    [3, 4R + 3), partial loads for [-1, 4R - 1), stores for [10, 4R + 10): a fixed prologue (the input pointer
    parked on its first atom with the zero stride field 2), a steady rpt loop, and a fixed epilogue.
    Pointer steps: inputs and partials move to the next row after atom 3 (stride fields 0 and 1), stores too.
    """
    p = f"gemm_{prec}_acc"
    lines = [f".globl {p}", ".worker", f"{p}:"] + [f"    {s}" for s in _setup(p, init=False)]
    tri = "$m2:3+="
    # Prologue: bundles -1..9 with ld2x64pace (x = addr0, selector bits 1:0; partials = addr1, bits 3:2).
    lines.append(f"    ld2x64pace $a0:1, $a2:3, {tri}, $m4, 0b0011")
    for b in range(10):
        xs = 0b11 if b <= 2 else (0b01 if b % 4 == 2 else 0)
        ps = 0b10 if b % 4 == 2 else 0
        lines.append(
            f"    {{ ld2x64pace $a0:1, $a2:3, {tri}, $m4, {xs | ps << 2} ; {_amp(prec, b % 4, '$a2:3')} }}"
        )
    lines.append("    { rpt $m5, 3 ; fnop }")
    # Steady body: phases 2, 3, 0, 1 (bundle 10 has phase 2). ld2xst64pace selectors: x 1:0, partials 3:2,
    # store 5:4. Loads step rows after phase 2, the store after phase 1.
    steady = {2: 0b001001, 3: 0, 0: 0, 1: 0b100000}
    for ph in (2, 3, 0, 1):
        lines.append(
            f"    {{ ld2xst64pace $a0:3, {_dst(ph)}, {tri}, $m4, {steady[ph]} ; {_amp(prec, ph, '$a2:3')} }}"
        )
    lines.append(f"    {{ ld2xst64pace $a0:3, $a4:5, {tri}, $m4, {steady[2]} ; {_amp(prec, 2, '$a2:3')} }}")
    # Epilogue: bundles 4R-1 .. 4R+9 (phases 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1).
    for k, ph in enumerate((3, 0, 1, 2)):  # input load + store (ldst64pace: x 1:0, store 3:2)
        sel = (0b01 if ph == 2 else 0) | ((0b10 if ph == 1 else 0) << 2)
        lines.append(f"    {{ ldst64pace $a0:1, {_dst(ph)}, {tri}, $m4, {sel} ; {_amp(prec, ph, '$a2:3')} }}")
        del k
    for ph in (3, 0, 1, 2, 3):  # store only, AMP drains
        lines.append(
            f"    {{ st64pace {_dst(ph)}, {tri}, $m4, {0b10 if ph == 1 else 0} ; {_amp(prec, ph, '$a2:3')} }}"
        )
    lines.append(f"    st64pace $a4:5, {tri}, $m4, 0")
    lines.append(f"    st64pace $a6:7, {tri}, $m4, 0")
    lines.append("    exitz $mzero")
    lines.append(f".L{p}_idle:")
    lines.append("    exitz $mzero")
    return "\n".join(lines) + "\n"


def worker_init_asm(prec: str) -> str:
    """Initialize worker: zero partials ($azeros), so no warm-up group: 4(R + 1) AMP instructions. Bundle b loads
    the input of instruction b + 1 ([-1, 4R - 1)) and stores the result of b - 2 ([6, 4R + 6)). The first seven
    input atoms are explicit ld64s (no store yet); then a steady ldst64pace loop; then stores only."""
    p = f"gemm_{prec}_init"
    lines = [f".globl {p}", ".worker", f"{p}:"] + [f"    {s}" for s in _setup(p, init=True)]
    tri = "$m8:9+="
    first = [("$m2", 0), ("$m2", 1), ("$m2", 2), ("$m2", 3), ("$m6", 0), ("$m6", 1), ("$m6", 2)]
    lines.append(f"    ld64 $a0:1, {first[0][0]}, $mzero, {first[0][1]}")
    for b in range(6):
        base, off = first[b + 1]
        lines.append(f"    {{ ld64 $a0:1, {base}, $mzero, {off} ; {_amp(prec, b % 4, '$azeros')} }}")
    lines.append("    { rpt $m5, 3 ; fnop }")
    steady = {2: 0b0001, 3: 0, 0: 0, 1: 0b1000}  # ldst64pace: x 1:0 steps after phase 2, store 3:2 after 1
    for ph in (2, 3, 0, 1):
        lines.append(
            f"    {{ ldst64pace $a0:1, {_dst(ph)}, {tri}, $m4, {steady[ph]} ; {_amp(prec, ph, '$azeros')} }}"
        )
    lines.append(f"    {{ ldst64pace $a0:1, $a4:5, {tri}, $m4, {steady[2]} ; {_amp(prec, 2, '$azeros')} }}")
    for ph in (3, 0, 1, 2, 3):  # bundles 4R-1 .. 4R+3: stores, AMP drains
        lines.append(
            f"    {{ st64pace {_dst(ph)}, {tri}, $m4, {0b10 if ph == 1 else 0} ; {_amp(prec, ph, '$azeros')} }}"
        )
    lines.append(f"    st64pace $a4:5, {tri}, $m4, 0")
    lines.append(f"    st64pace $a6:7, {tri}, $m4, 0")
    lines.append("    exitz $mzero")
    lines.append(f".L{p}_idle:")
    lines.append("    exitz $mzero")
    return "\n".join(lines) + "\n"


def supervisor_asm(prec: str, coef: str, sram_base: int) -> str:
    """The shared supervisor of a precision and coefficient-load mode (see the module docstring)."""
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
    lines = [
        f".globl {name}",
        ".supervisor",
        f"{name}:",
        f"    ld32 $m1, $m0, $mzero, {WEIGHTS}",
        "    put $CCCSLOAD, $m1",  # weight panels are consumed in order: one put per call
        *fp8_setup,
        f"    setzi $m6, {sram_base}",
        "    sub $m6, $m0, $m6",  # runall takes the vertex base relative to the SRAM base
        f"    ld32 $m2, $m0, $mzero, {NB_M1}",
        f"    ld32 $m7, $m0, $mzero, {C_BASE}",
        f".L{name}_col:",
        f"    ld32 $m4, $m0, $mzero, {A_BASE}",
        f"    ld32 $m3, $m0, $mzero, {KB_M1}",
        f"    ld32 $m5, $m0, $mzero, {FIRST}",
        f".L{name}_k:",
        *loads,
        f"    st32 $m4, $m0, $mzero, {XBLK}",
        f"    st32 $m7, $m0, $mzero, {CBLK}",
        "    runall $m5, $m6, 0",
        # Bookkeeping for the next block while the workers run (on hardware: in the slot of the first worker to
        # exit; workers with fewer rows exit >= 24 cycles earlier).
        f"    ld32 $m5, $m0, $mzero, {ACC}",
        f"    ld32 $m1, $m0, $mzero, {ASTEP}",
        "    add $m4, $m4, $m1",
        "    sync TEXCH_SYNCZONE_LOCAL",  # CWEI is shared: every worker must be done before the next load
        f"    brnzdec $m3, .L{name}_k",
        f"    ld32 $m1, $m0, $mzero, {CSTEP}",
        "    add $m7, $m7, $m1",
        f"    brnzdec $m2, .L{name}_col",
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
        for s in (self.ars, self.crs):
            if s % 32 or not 32 <= s <= 8 * 514:
                raise ValueError(f"row strides must be multiples of 32 bytes in [32, 4112], got {s}")

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
        # Pace strides (in atoms): field 0 = A row step, field 1 = C row step (after 3 atoms), field 2 = 0.
        f[Q], f[R], f[NACT] = q, r, nact
        for w in range(nact):
            first = w * q + min(w, r)
            f[ROWS + w] = q + (w < r) - 2
            f[AOFF + w], f[COFF + w] = first * self.ars, first * self.crs
        f[ASTRIDE], f[CSTRIDE] = self.ars, self.crs
        f[STRIDES] = ((self.ars // 8 - 3) & 0x3FF) | (((self.crs // 8 - 3) & 0x3FF) << 10)
        f[WEIGHTS], f[A_BASE], f[C_BASE] = self.weights, self.a, self.c
        f[KB_M1], f[NB_M1] = self.kblocks - 1, self.nblocks - 1
        f[ASTEP] = self.a_block_step if self.a_block_step is not None else 32
        f[CSTEP] = self.c_block_step if self.c_block_step is not None else 32
        f[FIRST] = labels[f"gemm_{self.prec}_{self.mode}"]
        f[ACC] = labels[f"gemm_{self.prec}_acc"]
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
            prod = af[:, i * kb : (i + 1) * kb] @ bf[i * kb : (i + 1) * kb]
            out = (out.astype(np.float32) + prod).astype(np.float16)
    return out


# Thread cycles of the worker bodies outside the per-row loop (counted from the generated code; the tests check
# them against the simulator): setup + prologue + rpt + steady extra bundle + epilogue + exit.
WORKER_FIXED = {"init": 17 + 1 + 6 + 1 + 1 + 5 + 2 + 1, "acc": 13 + 1 + 10 + 1 + 1 + 4 + 5 + 2 + 1}
WORKER_ROW_OFFSET = {"init": -2, "acc": -3}  # the rpt loop runs R + offset times, 4 bundles each
SUP_CALL = {F16: 1 + 6 + 2 + 2 + 6, FP8: 1 + 6 + 14 + 2 + 2 + 6}
SUP_COL = 3 + 1 + 1 + 6
# Per block: st32 x2, sync release, brnzdec. The workers start at the supervisor's clock when it issues `runall`,
# so runall's and sync's own issue cycles overlap the workers' time.
SUP_BLOCK_FIXED = 2 + 6 + 6
WEIGHT_LOAD = {"ld128": 32, "ld64": 64}


def worker_thread_cycles(rows: int, mode: str) -> int:
    """Issues of one worker for one weight block with `rows` rows (0 = idle)."""
    if rows == 0:
        return 5  # get, shl, ld32, brz, exitz
    return WORKER_FIXED[mode] + 4 * (rows + WORKER_ROW_OFFSET[mode])


def cycles(g: Gemm) -> int:
    """Tile cycles of the call (from the supervisor's entry to its return)."""
    q, r, _ = row_split(g.m)
    rows = q + (1 if r else 0)

    def block(mode):
        return WEIGHT_LOAD[g.coef] + SUP_BLOCK_FIXED + 6 * worker_thread_cycles(rows, mode)

    per_col = SUP_COL + block(g.mode) + (g.kblocks - 1) * block("acc")
    return SUP_CALL[g.prec] + g.nblocks * per_col


def macs(g: Gemm) -> int:
    return g.m * g.n * g.k
