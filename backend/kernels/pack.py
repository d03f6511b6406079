"""Copy/pack kernels that reorder data within a tile: row-major <-> AMP panels (gemm.py's layouts).

Calling convention: `$m0` = frame, `call $lr, rows_sup` (the supervisor of `rowwise`; include
`rowwise.library_asm` in the program). Frames are `rowwise` frames (same per-worker row split).

Five kernels:

- `chunks` (`Chunks`, also in a 16-byte-piece variant `pack_chunks16`): moves 32-byte chunks. Source row r, chunk b is at `src + r * src_row + b * src_blk`;
  destination at `dst_row(r) + b * dst_blk` with `dst_row(r) = dst + (r >> g) * dst_group + (r & (2^g - 1)) *
  dst_row`. One chunk = 16 halves or 32 FP8 values = one K block row of A (or a 16-column block row of C), so it
  serves every precision with 64-bit loads and stores only:
    * `to_panels(m, row_bytes, ...)`: row-major [M][K] -> K-block panels [K/KB][M][KB] (g = 0);
    * `from_panels(...)`: the reverse (C panels [N/16][M][16] -> row-major);
    * `weights_from_bt(n, k, prec, ...)`: AMP weight panels (gemm.pack_weights order) from B^T [N, K] row-major
      (e.g. K for Q @ K^T): slot (engine e, phase p) of block (nb, kb) holds 8 contiguous bytes of row nb*16+e,
      so each (row, kb) is one 32-byte chunk: g = 4 (16 rows per column block), dst_group = kblocks * 512,
      dst_row = 32, dst_blk = 512. FP8 included: no byte shuffles are needed.
    * `fp8_in_f16_panel_order(n, k, ...)` (16-byte pieces): FP8 B^T rows into the F16 panels' order at one byte
      per half, so that one flat `cast_fp8_f16` yields the F16 AMP weight panels (GEMM weights kept in FP8 and
      prepared on the device).
  Per chunk: 4 ld64step + 4 st64step bundles (8 thread cycles per 32 bytes); where no bundle's load and store can
  share a bank (`Chunks.lag`, decided on the host from the addresses: different regions or elements, or region 1
  with a fixed bit-3 relation) the `_pace1` / `_pace2` variants pair them in `ldst64pace` (4 per 32 bytes).

- `fp8_f16` (`FP8ToF16`, `fp8_to_f16_panels(n, k, ...)`; kernels `pack_fp8_f16`, `pack_fp8_f16_pad`): the F16
  AMP weight panels of one K chunk straight from its row-major FP8 B^T rows [n, k] (row stride src_row),
  converting on the way: `fp8_in_f16_panel_order` + zeroed N padding + a flat `cast_fp8_f16` in one pass and
  bit-identical to them (the same instruction, f8v4tof16, under the same $FP_NFMT / $FP_SCL set from the frame's
  format and 6-bit scale, as `cast_fp8_f16` does). Reads n rows x k/16 pieces of 16 FP8 bytes, piece (row r, K
  block b) at `src + r * src_row + b * 16`; writes its 16 halves as the 32-byte slot row at `dst_row(r) + b * 512`
  (`chunks`' formula, g = 4, dst_row = 32, dst_group = kblocks * 512), then 32 zero bytes at the same places for
  the N padding rows [n, ceil(n/16)*16) (`_pad`; pad=False leaves them alone). Per piece one rpt pass of 6
  bundles, memory-bound (one load or store per bundle, the four conversions beside them): ld64step,
  {ld64step ; f8v4tof16}, 3 x {st64step ; f8v4tof16}, st64step: 6 thread cycles per 16 FP8 bytes (reorder +
  cast: 4 + 8), or 4 on the pace variants (`FP8ToF16.lag`, as `chunks`); a zero row piece: 4 `st64step $azeros`. Per row 10 issues (dst_row(r) from register-held
  constants, rpt, the source step, brnzdec), per worker 22 (`_pad`: up to 31); the frame is FP8_FRAME_WORDS
  long (rowwise's + per-worker zero-row tables: conversion rows split as `split`, zero rows in reverse order).

- `weights_f16` (`WeightsF16`): F16 AMP weight panels from row-major B [K, N] (e.g. V for P @ V), a transpose:
  per 4-column group and K block, 16 rows x 4 columns are loaded (16 ld64) and transposed in registers with
  sort4x16lo/hi (32 sorts) into 4 slots-columns of 32 bytes (16 st64), software-pipelined (`_transpose_pipeline`:
  the next quarter's loads beside this one's sorts and stores, a load or a store in every bundle): 32 thread
  cycles per 128 bytes (44 unpipelined), plus a prologue / epilogue per column group (no loads past B's rows).

- `transpose_f16` (`TransposeF16`): B^T rows from row-major B [K, N] f16 (e.g. V^T for O^T = V^T P^T): the
  same loads and sorts as `weights_f16`, the 4 columns of a group stored as 4 rows `dst_row` bytes apart (K
  halves contiguous), so the stores step by register-held strides (dst_row, back to the next 4 halves of the first
  row); 32 thread cycles per 128 bytes (the same pipeline), 8 issues per column group beyond them. Column groups
  that do not share out evenly over the six workers are cut along K too (`k_parts`: each worker a run of groups of
  one K part, its source and destination offsets frame words; the frame is T_FRAME_WORDS long).

- `weights_fp8` (`WeightsFP8`): FP8 AMP weight panels from row-major B [K, N] bytes (e.g. V for P @ V in FP8), a
  byte transpose without byte copies: per 4-column group and 4 rows, 4 ld32 (one word per row), two passes of
  sort8x8lo/hi on the MRF (8 sorts: a 4x4 byte transpose, the first pass splits even/odd bytes of row pairs, the
  second splits again) and 4 st32 into 4 engine columns; 16 thread cycles per 16 bytes (about 1 per byte; the
  MRF has no 64-bit loads, and the ARF has no byte permutation).

Constraints: addresses 8-byte aligned; chunk counts >= 1; B row stride (2N bytes) a multiple of 8.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property

import numpy as np

from ipu.backend.kernels import rowwise as R
from ipu.backend.kernels.elementwise import split
from ipu.backend.kernels.gemm import KBLOCK, NBLOCK
from ipu.backend.target import Target
from ipu.runtime import fp8

# Extra frame words (inside the rowwise frame's state words): source chunk step, destination chunk step, shift g,
# destination group step.
SRC_BLK, DST_BLK, SHIFT, DST_GROUP = R.ST0, R.ST1, R.ST2, R.F0
# `fp8_f16` only: the FP8 format (0 = F143, 1 = F152) and the 6-bit scale, for $FP_NFMT / $FP_SCL; the source
# step from the end of a row's last piece to the next row (src_row - blocks * src_blk).
FMT, SCL, SRC_NEXT = R.IN1, R.IN2, R.F1
# ... and with zero rows (`pack_fp8_f16_pad`): per-worker tables of zero-row counts and first zero rows, after the
# rowwise frame (the frame is FP8_FRAME_WORDS long).
ZCNT, ZFIRST = R.FRAME_WORDS, R.FRAME_WORDS + 6
FP8_FRAME_WORDS = R.FRAME_WORDS + 12
# `chunks` pace variants (`chunks_pace_code`): the pace stride register (field 0: the load's chunk jump, field 1: the
# store's, atoms), the source step from a row's primed position to the next row (bytes), blocks - 1.
PACE, PSTEP, PREPS = R.F1, R.IN1, R.IN2
PACE_FIELD = R.PACE_FIELD
# `transpose_f16`: per-worker source offsets (bytes, mod 2^32), added to IN0 + FIRST * 8: a worker's column groups
# lie in one column panel of the source (`TransposeF16.panel_width`), so its panel's step is one per-worker offset.
T_SRC_OFF = R.CONST
# ... and per-worker destination offsets (bytes, added to OUT + FIRST * OSTRIDE): a worker's K part (`TransposeF16`'s
# `k_parts`) starts 2 * K / parts * part bytes into each B^T row. The frame is T_FRAME_WORDS long.
T_DST_OFF = R.FRAME_WORDS
T_FRAME_WORDS = R.FRAME_WORDS + 6
# `fp8_f16` pace variants: the pace stride register, the source step from a row's primed position to the next row,
# blocks - 1.
FP8_PACE, FP8_PSTEP, FP8_PREPS = R.ST2, R.ZATOMS, R.CONST  # pace stride fields: signed 10-bit atom counts


def _dst_row(c: R.Code, out: bool = True) -> None:
    """$m2 = dst + (row >> g) * group + (row & (2^g - 1)) * dst_row, for row $m6 (out=False: without dst, added
    by the caller)."""
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {SHIFT}")
    c.one("shr $m2, $m6, $m3")
    c.one("shl $m7, $m2, $m3")
    c.one("sub $m7, $m6, $m7")  # row & (2^g - 1)
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {DST_GROUP}")
    c.one("mul $m2, $m2, $m3")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {R.OSTRIDE}")
    c.one("mul $m7, $m7, $m3")
    c.one("add $m2, $m2, $m7")
    if out:
        c.one(f"ld32 $m3, $mvertex_base, $mzero, {R.OUT}")
        c.one("add $m2, $m2, $m3")


def _common_head(c: R.Code) -> None:
    """rowwise head ($m1 = source row, $m4 = count per row, $m5 = rows - 1, $m6 = first row) + strides."""
    R._head(c)
    c.one(f"ld32 $m8, $mvertex_base, $mzero, {SRC_BLK}")
    c.one(f"ld32 $m9, $mvertex_base, $mzero, {DST_BLK}")


def chunks_code(piece: int = 32) -> R.Code:
    """`chunks`: per row, an rpt over the chunks of `piece` bytes (32: 4 ld64step + 4 st64step, `pack_chunks`;
    16: 2 + 2, `pack_chunks16`); the last load/store of a chunk steps by the source / destination chunk stride."""
    c = R.Code("pack_chunks" if piece == 32 else "pack_chunks16")
    _common_head(c)
    c.tag = "row"
    c.label(f".L{c.name}_row")
    _dst_row(c)
    c.one("add $m3, $m1, 0")
    n = piece // 8
    body = [
        R._b(f"ld64step $a{2 * i}:{2 * i + 1}, $mzero, $m3+=, {1 if i < n - 1 else '$m8'}") for i in range(n)
    ]
    body += [
        R._b(f"st64step $a{2 * i}:{2 * i + 1}, $mzero, $m2+=, {1 if i < n - 1 else '$m9'}") for i in range(n)
    ]
    c.rpt("$m4", body, "chunk")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {R.ISTRIDE}")
    c.one("add $m1, $m1, $m3")
    c.one("add $m6, $m6, 1")
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.exit_and_idle()
    return c


def _pace_sel(load_jump: bool, store_jump: bool) -> int:
    """ldst64pace selector: the load address steps by one atom or field 0, the store address by one or field 1."""
    return (1 if load_jump else 0) | ((2 << 2) if store_jump else 0)


def chunks_pace_code(piece: int = 32, lag: int = 1) -> R.Code:
    """`chunks` with one load and one store per bundle (`ldst64pace`): per row, the stream of the row's atoms
    (chunk by chunk) software-pipelined with the store `lag` atoms behind the load (1: source and destination atoms
    of equal bit 3 in region 1, or in banks that never meet; 2: opposite bit 3), chosen on the host per call
    (`Chunks.lag`). The jumps between chunks are the pace stride fields (0: load, 1: store; frame word PACE).
    Per row: `lag` priming loads (ld64step), an rpt over blocks - 1 chunks of n = piece / 8 bundles, the last chunk
    alone (its last `lag` stores without loads: nothing past the row's atoms is read). Registers: $m0 = dst,
    $m1 = the row's source (after its priming loads), $m2 = dst_row(r), $m3 = the source chunk step (atoms, for a
    priming load), $m4 = blocks - 1, $m5 = rows left - 1, $m6 = row, $m7 = shift, $m8 = the pace strides,
    $m9 = the source step from the primed row to the next row, $m10:11 = the pace address pair (scratch before)."""
    n = piece // 8
    base = "pack_chunks" if piece == 32 else "pack_chunks16"
    c = R.Code(f"{base}_pace{lag}")
    c.one("get $m0, $WSR")
    c.one("shl $m7, $m0, 2")
    c.one(f"ld32 $m5, $mvertex_base, $m7, {R.CNT}")
    c.one(f"brz $m5, .L{c.name}_idle")
    c.one(f"ld32 $m6, $mvertex_base, $m7, {R.FIRST}")
    c.one(f"ld32 $m1, $mvertex_base, $mzero, {R.ISTRIDE}")
    c.one("mul $m1, $m1, $m6")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {R.IN0}")
    c.one("add $m1, $m1, $m3")
    for reg, word in (
        ("$m3", SRC_BLK), ("$m4", PREPS), ("$m8", PACE), ("$m9", PSTEP), ("$m7", SHIFT), ("$m0", R.OUT),
    ):  # fmt: skip
        c.one(f"ld32 {reg}, $mvertex_base, $mzero, {word}")
    c.one("sub $m5, $m5, 1")
    c.tag = "row"
    c.label(f".L{c.name}_row")
    c.one("shr $m2, $m6, $m7")
    c.one("shl $m11, $m2, $m7")
    c.one("sub $m11, $m6, $m11")  # row & (2^g - 1)
    c.one(f"ld32 $m10, $mvertex_base, $mzero, {DST_GROUP}")
    c.one("mul $m2, $m2, $m10")
    c.one(f"ld32 $m10, $mvertex_base, $mzero, {R.OSTRIDE}")
    c.one("mul $m11, $m11, $m10")
    c.one("add $m2, $m2, $m11")
    c.one("add $m2, $m2, $m0")
    for j in range(lag):  # priming loads: atom j into pair j % lag
        c.one(f"ld64step $a{2 * j}:{2 * j + 1}, $mzero, $m1+=, {'$m3' if j % n == n - 1 else 1}")
    c.one("tapack $m10:11, $m1, $mzero, $m2")
    later = c.words % 2 == 0  # the row advanced here when that keeps the rpt bundle aligned without a nop
    if not later:
        c.one("add $m6, $m6, 1")

    def pace(t: int, last: bool) -> str:
        """Bundle t of a chunk: store atom t, load atom t + lag of the stream (none past the last chunk)."""
        r = f"$a{2 * (t % lag)}:{2 * (t % lag) + 1}"
        if last and t + lag >= n:
            return f"st64pace {r}, $m10:11+=, $m8, 0"
        return f"ldst64pace {r}, {r}, $m10:11+=, $m8, {_pace_sel((t + lag) % n == n - 1, t == n - 1)}"

    c.rpt("$m4", [R._b(pace(t, False)) for t in range(n)], "chunk")
    for t in range(n):
        c.one(pace(t, True))
    c.one("add $m1, $m1, $m9")
    if later:
        c.one("add $m6, $m6, 1")
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.exit_and_idle()
    return c


def fp8_f16_code(pad: bool = False, lag: int = 0) -> R.Code:
    """`fp8_f16`: as `chunks` with g = 4 (16-byte source pieces, 32-byte destination pieces) with the FP8 -> f16
    conversions (elementwise's `cast_fp8_f16`: f8v4tof16 under $FP_NFMT / $FP_SCL) in the AUX slots beside the
    loads and stores: 6 bundles per piece, no software pipelining needed (the memory slot is busy in every
    bundle). The row constants stay in registers ($m0 = dst, $m10 = dst_group, $m11 = dst_row, $m7 = the source
    step from a row's end to the next row), so a row costs `dst_row(r)` (6) + 4 issues.

    lag 1 / 2 (`pack_fp8_f16[_pad]_pace1` / `_pace2`, chosen on the host: `FP8ToF16.lag`, the rule of
    `Chunks.lag`): the two loads of a piece ride in `ldst64pace` bundles beside two of its four stores, 4 bundles
    per piece, software-pipelined over a row's pieces (a row: priming load(s) and conversion(s), an rpt over
    blocks - 1 pieces, the last piece alone; nothing past the row's pieces is read). Piece p's halves: a0:1 and
    a2:3 loaded, converted into a4:5, a6:7, a8:9, a10:11, stored S0..S3. lag 1 (load and store atoms of equal bit
    3, or banks that never meet) pairs L1(p) with S0(p) and L0(p + 1) with S1(p); lag 2 (opposite bit 3) L0(p + 1)
    with S0(p) and L1(p + 1) with S3(p). The pace pair is $m2:3, $m9 the stride fields (frame FP8_PACE), $m7 the
    source step from a row's primed position to the next row (FP8_PSTEP), $m4 = blocks - 1 (FP8_PREPS).

    pad (`pack_fp8_f16_pad`): then each worker writes its zero rows (frame tables ZCNT / ZFIRST): per row
    `dst_row(r)` and an rpt of 4 `st64step $azeros` per piece."""
    name = ("pack_fp8_f16_pad" if pad else "pack_fp8_f16") + (f"_pace{lag}" if lag else "")
    c = R.Code(name)

    def dst_row(extra: int = 0) -> bool:
        """$m2 = dst + (row >> 4) * dst_group + (row & 15) * dst_row, and the row ($m6) advanced here or (returns
        True) after the row's loop, whichever keeps the rpt bundle (`extra` words on) 8-byte aligned without a
        nop."""
        c.one("shr $m2, $m6, 4")
        c.one("and $m3, $m6, 15")
        c.one("mul $m2, $m2, $m10")
        c.one("mul $m3, $m3, $m11")
        c.one("add $m2, $m2, $m3")
        c.one("add $m2, $m2, $m0")
        if (c.words + extra) % 2:
            c.one("add $m6, $m6, 1")
            return False
        return True

    c.one("get $m0, $WSR")
    c.one("shl $m7, $m0, 2")
    c.one(f"ld32 $m5, $mvertex_base, $m7, {R.CNT}")
    if pad:  # idle only without rows of either kind
        c.one(f"ld32 $m3, $mvertex_base, $m7, {ZCNT}")
        c.one("or $m3, $m3, $m5")
        c.one(f"brz $m3, .L{name}_idle")
    else:
        c.one(f"brz $m5, .L{name}_idle")
    c.one(f"ld32 $m6, $mvertex_base, $m7, {R.FIRST}")
    c.one(f"ld32 $m1, $mvertex_base, $mzero, {R.ISTRIDE}")
    c.one("mul $m1, $m1, $m6")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {R.IN0}")
    c.one("add $m1, $m1, $m3")  # the first row's source
    if lag:
        regs = (("$m4", FP8_PREPS), ("$m8", SRC_BLK), ("$m9", FP8_PACE), ("$m0", R.OUT), ("$m10", DST_GROUP))
        regs += (("$m11", R.OSTRIDE), ("$m7", FP8_PSTEP))
    else:
        regs = (("$m4", R.ATOMS), ("$m8", SRC_BLK), ("$m9", DST_BLK), ("$m0", R.OUT), ("$m10", DST_GROUP))
        regs += (("$m11", R.OSTRIDE), ("$m7", SRC_NEXT))
    for reg, word in regs:
        c.one(f"ld32 {reg}, $mvertex_base, $mzero, {word}")
    c.one(f"ld32 $a0, $mvertex_base, $mzero, {FMT}")
    c.one("uput $FP_NFMT, $a0")
    c.one(f"ld32 $a0, $mvertex_base, $mzero, {SCL}")
    c.one("uput $FP_SCL, $a0")
    if pad:
        c.one(f"brz $m5, .L{name}_zero")
        c.tag = "rows"  # once when the worker has rows to convert
    c.one("sub $m5, $m5, 1")
    c.tag = "row"
    c.label(f".L{name}_row")
    if not lag:
        later = dst_row()
        body = [
            R._b("ld64step $a0:1, $mzero, $m1+=, 1"),
            R._b("ld64step $a2:3, $mzero, $m1+=, $m8", "f8v4tof16 $a4:5, $a0"),
            R._b("st64step $a4:5, $mzero, $m2+=, 1", "f8v4tof16 $a6:7, $a1"),
            R._b("st64step $a6:7, $mzero, $m2+=, 1", "f8v4tof16 $a4:5, $a2"),
            R._b("st64step $a4:5, $mzero, $m2+=, 1", "f8v4tof16 $a6:7, $a3"),
            R._b("st64step $a6:7, $mzero, $m2+=, $m9"),
        ]
        c.rpt("$m4", body, "chunk")
    else:
        ld = "ldst64pace {}, {}, $m2:3+=, $m9, {}"
        st = "st64pace {}, $m2:3+=, $m9, {}"
        jl, js, jboth = _pace_sel(True, False), 2, _pace_sel(True, True)  # st64pace: field 1 = selector 2
        if lag == 1:
            later = dst_row(3)
            prime = ["ld64step $a0:1, $mzero, $m1+=, 1", "f8v4tof16 $a4:5, $a0"]
            body = [
                R._b(ld.format("$a2:3", "$a4:5", jl), "f8v4tof16 $a6:7, $a1"),  # L1(p), S0(p)
                R._b(ld.format("$a0:1", "$a6:7", 0), "f8v4tof16 $a8:9, $a2"),  # L0(p + 1), S1(p)
                R._b(st.format("$a8:9", 0), "f8v4tof16 $a10:11, $a3"),  # S2(p)
                R._b(st.format("$a10:11", js), "f8v4tof16 $a4:5, $a0"),  # S3(p), C0(p + 1)
            ]
            last = [
                R._b(ld.format("$a2:3", "$a4:5", 0), "f8v4tof16 $a6:7, $a1"),
                R._b(st.format("$a6:7", 0), "f8v4tof16 $a8:9, $a2"),
                R._b(st.format("$a8:9", 0), "f8v4tof16 $a10:11, $a3"),
            ]
        else:
            later = dst_row(5)
            prime = [
                "ld64step $a0:1, $mzero, $m1+=, 1",
                "ld64step $a2:3, $mzero, $m1+=, $m8",
                "f8v4tof16 $a4:5, $a0",
                "f8v4tof16 $a6:7, $a1",
            ]
            body = [
                R._b(ld.format("$a0:1", "$a4:5", 0), "f8v4tof16 $a8:9, $a2"),  # L0(p + 1), S0(p)
                R._b(st.format("$a6:7", 0), "f8v4tof16 $a10:11, $a3"),  # S1(p)
                R._b(st.format("$a8:9", 0), "f8v4tof16 $a4:5, $a0"),  # S2(p), C0(p + 1)
                R._b(ld.format("$a2:3", "$a10:11", jboth), "f8v4tof16 $a6:7, $a1"),  # L1(p + 1), S3(p)
            ]
            last = [
                R._b(st.format("$a4:5", 0), "f8v4tof16 $a8:9, $a2"),
                R._b(st.format("$a6:7", 0), "f8v4tof16 $a10:11, $a3"),
                R._b(st.format("$a8:9", 0)),
            ]
        for text in prime:
            c.one(text)
        c.one("tapack $m2:3, $m1, $mzero, $m2")
        c.rpt("$m4", body, "chunk")
        for main, aux in last:
            c.bundle(main, aux)
        c.one(st.format("$a10:11", 0))
    c.one("add $m1, $m1, $m7")
    if later:
        c.one("add $m6, $m6, 1")
    c.one(f"brnzdec $m5, .L{name}_row")
    if pad:
        c.tag = "zero"  # once per active worker
        c.label(f".L{name}_zero")
        c.one("get $m3, $WSR")
        c.one("shl $m3, $m3, 2")
        c.one(f"ld32 $m5, $mvertex_base, $m3, {ZCNT}")
        c.one(f"brz $m5, .L{name}_exit")
        c.tag = "zeros"  # once when the worker has zero rows
        c.one(f"ld32 $m6, $mvertex_base, $m3, {ZFIRST}")
        if lag:  # the plain loop's piece count and destination step
            c.one(f"ld32 $m4, $mvertex_base, $mzero, {R.ATOMS}")
            c.one(f"ld32 $m9, $mvertex_base, $mzero, {DST_BLK}")
        c.one("sub $m5, $m5, 1")
        c.tag = "zrow"
        c.label(f".L{name}_zrow")
        later = dst_row()
        zbody = [R._b(f"st64step $azeros, $mzero, $m2+=, {'$m9' if i == 3 else 1}") for i in range(4)]
        c.rpt("$m4", zbody, "zchunk")
        if later:
            c.one("add $m6, $m6, 1")
        c.one(f"brnzdec $m5, .L{name}_zrow")
        c.label(f".L{name}_exit")
    c.exit_and_idle()
    return c


# `_transpose_pipeline`: one quarter (4 rows of B x 4 columns) at quarter-relative bundle times. Loads L0..L3
# (rows 0..3) at 0..3, sorts at 3..10 (one per bundle, AUX), stores of columns 0..3 at 6, 7, 12, 13: the memory
# slot's times mod 8 are 0..7 and the AUX slot's 3..10 mod 8 likewise, so quarters 8 bundles apart never meet.
# Registers: L0 alternates between $a0:1 (even quarters) and $a8:9 (odd ones), column 0's sorts between $a8:9 and
# $a0:1 (L0's odd half is read at 9, after the next quarter's L0 at 8; column 0 dies at 6); L1..L3 = $a2:3,
# $a4:5, $a6:7 (read until 4 / 9, 6 / 10: the next quarter reloads them at 9, 10, 11, where a bundle's AUX reads
# the old registers); columns 1 and 2 share $a10:11 (column 1 stored at 7, column 2 sorted from 7), column 3
# $a12:13. $a14 (half of $azeros) and $a15 are not touched.
_QUARTER = 8
_LOADS = (0, 1, 2, 3)
_SORTS = (  # (time, op, destination: column and half, source pair: L0/L1 rows or L2/L3 rows, source half)
    (3, "lo", 0, 0, 0, 0),
    (4, "hi", 1, 0, 0, 0),
    (5, "lo", 0, 1, 1, 0),
    (6, "hi", 1, 1, 1, 0),
    (7, "lo", 2, 0, 0, 1),
    (8, "lo", 2, 1, 1, 1),
    (9, "hi", 3, 0, 0, 1),
    (10, "hi", 3, 1, 1, 1),
)
_STORES = (6, 7, 12, 13)
_LEAD = _STORES[0]  # the prologue: the first quarter's bundles before its first store
_ROTATE = ((0, 8), (8, 0))  # (L0's pair, column 0's pair) in even / odd quarters


def _transpose_pipeline(steps) -> tuple[list, list, list]:
    """The software-pipelined transpose of a column group's K blocks (16 rows of B each, 4 quarters of 4 rows):
    rows at $m3 stepping by the B row stride $m8; quarter p (of a K block) sorted with sort4x16lo/hi into 4 columns
    of 4 halves, stored at $m2 stepping by `steps(p)` (4 atoms or registers) after each column.

    Returns (prologue, body, epilogue) bundles: the body (an rpt over K blocks - 1) stores K block b's 16 columns
    and loads K block b + 1's first quarter; the epilogue stores the last K block (no loads past it: nothing
    outside the source is read; bundles left empty are dropped). 32 bundles per K block (4 x 8: every bundle a
    load or a store), plus _LEAD (6) per group."""

    def flat(quarters: int) -> dict[int, list[str]]:
        at: dict[int, list[str]] = {}

        def put(t: int, slot: int, text: str) -> None:
            b = at.setdefault(t, ["nop", "fnop"])
            assert b[slot] in ("nop", "fnop"), (t, slot, b, text)
            b[slot] = text

        for q in range(quarters):
            t0, (l0, c0) = _QUARTER * q, _ROTATE[q % 2]
            load = (l0, 2, 4, 6)
            col = (c0, 10, 10, 12)
            for i, t in enumerate(_LOADS):
                put(t0 + t, 0, f"ld64step $a{load[i]}:{load[i] + 1}, $mzero, $m3+=, $m8")
            for t, op, c, half, rows, h in _SORTS:
                a, b = load[2 * rows] + h, load[2 * rows + 1] + h
                put(t0 + t, 1, f"sort4x16{op} $a{col[c] + half}, $a{a}, $a{b}")
            for c, t in enumerate(_STORES):
                put(t0 + t, 0, f"st64step $a{col[c]}:{col[c] + 1}, $mzero, $m2+=, {steps(q % 4)[c]}")
        return at

    blk = 4 * _QUARTER
    at = flat(8)  # two K blocks: the body is the first one's window, the epilogue the second's
    prologue = [tuple(at.get(t, ("nop", "fnop"))) for t in range(_LEAD)]
    body = [tuple(at.get(t, ("nop", "fnop"))) for t in range(_LEAD, _LEAD + blk)]
    epilogue = [tuple(at[t]) for t in range(_LEAD + blk, max(at) + 1) if t in at]
    return prologue, body, epilogue


def _emit_pipeline(c: R.Code, steps, fill: tuple[str, ...] = (), pre: tuple[str, ...] = ()) -> None:
    """Prologue, rpt over $m4 = K blocks - 1 (tag "chunk"), epilogue (`_transpose_pipeline`); `fill`: the row's
    next-row instructions, in order, in the epilogue's empty MAIN slots after its last load ($m3 is free); `pre`:
    instructions for the prologue's empty MAIN slots (before the first store)."""
    prologue, body, epilogue = _transpose_pipeline(steps)
    todo = list(pre)
    for main, aux in prologue:
        if todo and main == "nop":
            main = todo.pop(0)
        c.bundle(main, aux)
    assert not todo, todo
    c.rpt("$m4", [R._b(main, aux) for main, aux in body], "chunk")
    last_load = max(i for i, (main, _) in enumerate(epilogue) if main.startswith("ld"))
    todo = list(fill)
    for i, (main, aux) in enumerate(epilogue):
        if todo and i > last_load and main == "nop":
            main = todo.pop(0)
        c.bundle(main, aux)
    assert not todo, todo


def weights_f16_code() -> R.Code:
    """Rows = 4-column groups (N / 4); K blocks software-pipelined (`_transpose_pipeline`: prologue, rpt over K
    blocks - 1, epilogue). $m8 = B row stride in atoms (load step), $m4 = K blocks - 1."""
    c = R.Code("pack_weights_f16")
    _common_head(c)
    c.one("sub $m4, $m4, 1")
    c.tag = "row"
    c.label(f".L{c.name}_row")
    _dst_row(c, out=False)  # dst added in the prologue
    c.one("add $m3, $m1, 0")
    # The store after each slot column: the next one (4 atoms on), or from the fourth to the next K block.
    # The next group: 4 halves on in B (the frame's ISTRIDE, 8 bytes).
    _emit_pipeline(
        c,
        lambda p: ("4", "4", "4", str(64 - 15 if p == 3 else -11)),
        ("add $m1, $m1, 8", "add $m6, $m6, 1"),
        (f"ld32 $m7, $mvertex_base, $mzero, {R.OUT}", "add $m2, $m2, $m7"),
    )
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.exit_and_idle()
    return c


def transpose_f16_code() -> R.Code:
    """Rows = 4-column groups (N / 4); K blocks (16 rows of B = 32 bytes of each B^T row) software-pipelined
    (`_transpose_pipeline`). $m1 = the group's source, $m2 = its first B^T row (advanced by the K blocks' stores,
    then by $m11 to the next group's), $m4 = K blocks - 1, $m8 = B row stride (atoms, load step), $m9 = dst_row
    (atoms: the next column's row), $m10 = 1 - 3 * dst_row (atoms: from column 3 back to column 0, 8 bytes on),
    $m11 = 4 * dst_row - 2K (bytes)."""
    c = R.Code("pack_transpose_f16")
    _common_head(c)  # $m9 = DST_BLK
    c.one(f"ld32 $m10, $mvertex_base, $mzero, {SHIFT}")
    c.one(f"ld32 $m11, $mvertex_base, $mzero, {DST_GROUP}")
    c.one(f"ld32 $m3, $mvertex_base, $m7, {T_SRC_OFF}")  # this worker's source offset (its panel, its K part)
    c.one("add $m1, $m1, $m3")
    c.one(f"ld32 $m3, $mvertex_base, $m7, {T_DST_OFF}")  # ... and destination offset (its K part)
    c.one("add $m2, $m2, $m3")
    c.one("sub $m4, $m4, 1")
    c.one("add $m3, $m1, 0")
    if c.words % 2:
        c.one("nop")  # the row's bundles aligned without a nop per row
    c.tag = "row"
    c.label(f".L{c.name}_row")
    # The next group's source ($m1, and $m3 from it) in the epilogue; its rows after the last store.
    _emit_pipeline(c, lambda p: ("$m9", "$m9", "$m9", "$m10"), ("add $m1, $m1, 8", "add $m3, $m1, 0"))
    c.one("add $m2, $m2, $m11")
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.exit_and_idle()
    return c


def weights_fp8_code() -> R.Code:
    """Rows = 4-column groups (N / 4); per K block, eight 4x4 byte transposes on the MRF (see `WeightsFP8`).
    $m8 = B row stride in words (load step); $m4 counts the K blocks down."""
    c = R.Code("pack_weights_fp8")
    _common_head(c)
    c.tag = "row"
    c.label(f".L{c.name}_row")
    _dst_row(c)
    c.one("add $m3, $m1, 0")
    c.one(f"ld32 $m4, $mvertex_base, $mzero, {R.ATOMS}")
    c.one("sub $m4, $m4, 1")
    c.label(f".L{c.name}_kb")
    c.tag = "kb"
    # One 4x4 byte tile: rows r0..r3 (4 bytes each, one word) -> columns c0..c3 (one word each). Pass 1 splits
    # even/odd bytes of row pairs, pass 2 splits again: lo(lo(r0,r1), lo(r2,r3)) = column 0 and so on.
    body = [R._b(f"ld32step {r}, $mzero, $m3+=, $m8") for r in ("$m0", "$m7", "$m9", "$m10")]
    body += [
        R._b("sort8x8lo $m11, $m0, $m7"),  # r0, r1 even bytes: c0, c2 of rows 0-1
        R._b("sort8x8hi $m0, $m0, $m7"),  # odd bytes: c1, c3 of rows 0-1
        R._b("sort8x8lo $m7, $m9, $m10"),  # c0, c2 of rows 2-3
        R._b("sort8x8hi $m9, $m9, $m10"),  # c1, c3 of rows 2-3
        R._b("sort8x8lo $m10, $m11, $m7"),  # column 0
        R._b("sort8x8hi $m11, $m11, $m7"),  # column 2
        R._b("sort8x8lo $m7, $m0, $m9"),  # column 1
        R._b("sort8x8hi $m0, $m0, $m9"),  # column 3
        # column j of the tile -> engine column j of the block (32 bytes apart); then the next 4 bytes (rows)
        R._b("st32step $m10, $mzero, $m2+=, 8"),
        R._b("st32step $m7, $mzero, $m2+=, 8"),
        R._b("st32step $m11, $mzero, $m2+=, 8"),
        R._b("st32step $m0, $mzero, $m2+=, -23"),
    ]
    c.rpt("8", body, "tile")  # 8 tiles = the 32 rows of a K block
    c.one("add $m2, $m2, 480")  # the tiles advanced 32 bytes; the next K block is 512 bytes on
    c.one(f"brnzdec $m4, .L{c.name}_kb")
    c.tag = "row"
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {R.ISTRIDE}")
    c.one("add $m1, $m1, $m3")
    c.one("add $m6, $m6, 1")
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.exit_and_idle()
    return c


CODES = {
    "pack_chunks": chunks_code,
    "pack_chunks16": lambda: chunks_code(16),
    "pack_chunks_pace1": lambda: chunks_pace_code(32, 1),
    "pack_chunks_pace2": lambda: chunks_pace_code(32, 2),
    "pack_chunks16_pace1": lambda: chunks_pace_code(16, 1),
    "pack_chunks16_pace2": lambda: chunks_pace_code(16, 2),
    "pack_weights_f16": weights_f16_code,
    "pack_weights_fp8": weights_fp8_code,
    "pack_transpose_f16": transpose_f16_code,
    "pack_fp8_f16": fp8_f16_code,
    "pack_fp8_f16_pad": lambda: fp8_f16_code(pad=True),
    "pack_fp8_f16_pace1": lambda: fp8_f16_code(lag=1),
    "pack_fp8_f16_pace2": lambda: fp8_f16_code(lag=2),
    "pack_fp8_f16_pad_pace1": lambda: fp8_f16_code(pad=True, lag=1),
    "pack_fp8_f16_pad_pace2": lambda: fp8_f16_code(pad=True, lag=2),
}


@cache
def _code(name: str) -> R.Code:
    """The generated worker body `name` (for its issue counts)."""
    return CODES[name]()


def library_asm(
    sram_base: int = 0x4C000,
    pf_atoms: tuple[int, ...] = R.PF_FAST_ATOMS,
    pfg_loops: tuple[str, ...] | None = None,
) -> str:
    """The pack workers plus rowwise's supervisor and workers (the supervisor is shared; `pf_atoms`, `pfg_loops`:
    rowwise's)."""
    rows = R.library_asm(sram_base, pf_atoms=pf_atoms, pfg_loops=pfg_loops)
    return rows + "\n" + "\n".join(fn().text() for fn in CODES.values())


def _pace_lag(
    s0, d0, blocks: int, steps: tuple[int, int], pieces: tuple[int, int], jumps: tuple[int, int]
) -> int:
    """The lag of a pace path (`Chunks.lag`) for rows starting at s0 / d0 (source / destination, int64 arrays) of
    `blocks` pieces each (piece p at + p * steps[i], pieces[i] bytes long), chunk jumps `jumps` (atoms); 0: none."""
    if blocks > 1 and not all(-PACE_FIELD <= j < PACE_FIELD for j in jumps):
        return 0
    lo, hi = [], []
    for start, step, piece in ((s0, steps[0], pieces[0]), (d0, steps[1], pieces[1])):
        ext = (blocks - 1) * step
        lo.append(int(start.min()) + min(0, ext))
        hi.append(int(start.max()) + max(0, ext) + piece - 1)
    r1 = Target.region1_base
    s_r1, d_r1 = lo[0] >= r1, lo[1] >= r1
    if s_r1 != (hi[0] >= r1) or d_r1 != (hi[1] >= r1):
        return 0  # an operand across the region boundary
    if s_r1 != d_r1:
        return 1
    e = Target.region1_element_bytes if s_r1 else Target.region0_element_bytes
    if hi[0] // e < lo[1] // e or hi[1] // e < lo[0] // e:
        return 1  # no element in common
    if not s_r1 or (blocks > 1 and (steps[0] % 16 or steps[1] % 16)):
        return 0
    rel = ((s0 ^ d0) >> 3) & 1
    if (rel != rel[0]).any():
        return 0
    return 2 if rel[0] else 1


@dataclass(frozen=True)
class Chunks:
    """rows x blocks chunks of `piece` = 32 (`pack_chunks`) or 16 (`pack_chunks16`) bytes (see the module docstring
    for the address formulas)."""

    rows: int
    blocks: int
    src: int
    dst: int
    src_row: int
    src_blk: int
    dst_row: int
    dst_blk: int
    shift: int = 0
    dst_group: int = 0
    piece: int = 32

    entry = "rows_sup"

    @property
    def kernel(self) -> str:
        return "pack_chunks" if self.piece == 32 else "pack_chunks16"

    @cached_property
    def lag(self) -> int:
        """The pace variant's lag (1 or 2: `chunks_pace_code`), or 0: the plain loop (`chunks_code`). Pace when no
        bundle's load and store can hit one bank (the simulator's rule: two region-0 addresses in one 16 KiB
        element, or two region-1 addresses in one 32 KiB element with equal bit 3) and the chunk jumps fit the
        stride fields: source and destination in different regions or in disjoint elements (lag 1), or both in
        region 1 with the atoms' bit 3 in the same relation on every row (chunk steps multiples of 16 bytes):
        equal -> lag 1, opposite -> lag 2. Both in region 0 in shared elements: the plain loop."""
        r = np.arange(self.rows, dtype=np.int64)
        return _pace_lag(
            self.src + r * self.src_row, self.dst + self._dst_rows(r), self.blocks, (self.src_blk, self.dst_blk),
            (self.piece, self.piece), self._jumps(),
        )  # fmt: skip

    def _jumps(self) -> tuple[int, int]:
        """The pace jumps (atoms) from a chunk's last atom to the next chunk's first: load, store."""
        back = self.piece // 8 - 1
        return self.src_blk // 8 - back, self.dst_blk // 8 - back

    def _dst_rows(self, r: np.ndarray) -> np.ndarray:
        if self.shift:
            return (r >> self.shift) * self.dst_group + (r & ((1 << self.shift) - 1)) * self.dst_row
        return r * self.dst_row

    @property
    def code(self) -> str:
        """The worker body this call runs (its frame's ENTRY)."""
        return f"{self.kernel}_pace{self.lag}" if self.lag else self.kernel

    def frame(self, labels: dict[str, int]) -> np.ndarray:
        f = np.zeros(R.FRAME_WORDS, np.uint32)
        for w, (first, cnt) in enumerate(split(self.rows)):
            f[R.CNT + w], f[R.FIRST + w] = cnt, first
        f[R.IN0], f[R.OUT], f[R.ENTRY], f[R.ATOMS] = self.src, self.dst, labels[self.code], self.blocks
        if self.lag:
            n, lj, sj = self.piece // 8, *self._jumps()
            if self.blocks == 1:  # no jump between chunks (the last chunk's jumps precede no access)
                lj = sj = 0
            f[PACE] = (lj & 0x3FF) | ((sj & 0x3FF) << 10)
            primed = sum(8 if j % n != n - 1 else self.src_blk - 8 * (n - 1) for j in range(self.lag))
            f[PSTEP], f[PREPS] = (self.src_row - primed) & 0xFFFFFFFF, self.blocks - 1
        f[R.ISTRIDE], f[R.OSTRIDE] = self.src_row, self.dst_row
        # Step of the last access of a chunk, in atoms (the others step by one atom).
        back = self.piece // 8 - 1
        f[SRC_BLK], f[DST_BLK] = (
            (self.src_blk // 8 - back) & 0xFFFFFFFF,
            (self.dst_blk // 8 - back) & 0xFFFFFFFF,
        )
        f[SHIFT], f[DST_GROUP] = self.shift, self.dst_group if self.shift else self.dst_row
        return f

    def semantics(self, mem: np.ndarray, src_base: int, out: np.ndarray, dst_base: int) -> np.ndarray:
        """Copy on byte arrays: mem holds the source at src_base; returns out (holding dst_base) updated."""
        out = out.copy()
        for r in range(self.rows):
            if self.shift:
                d0 = (r >> self.shift) * self.dst_group + (r & ((1 << self.shift) - 1)) * self.dst_row
            else:
                d0 = r * self.dst_row
            for b in range(self.blocks):
                s = self.src - src_base + r * self.src_row + b * self.src_blk
                d = self.dst - dst_base + d0 + b * self.dst_blk
                out[d : d + self.piece] = mem[s : s + self.piece]
        return out

    def cycles(self) -> int:
        if self.lag:
            return _cycles(_code(self.code), self.rows, self.blocks - 1)
        return _cycles(_code(self.kernel), self.rows, self.blocks)


def to_panels(m: int, row_bytes: int, src: int, dst: int) -> Chunks:
    """Row-major [M][row_bytes] -> panels [row_bytes/32][M][32 bytes] (A for the GEMM's panel strides)."""
    return Chunks(m, row_bytes // 32, src, dst, src_row=row_bytes, src_blk=32, dst_row=32, dst_blk=32 * m)


def from_panels(m: int, row_bytes: int, src: int, dst: int) -> Chunks:
    """Panels [row_bytes/32][M][32 bytes] -> row-major [M][row_bytes] (C written with panel strides)."""
    return Chunks(m, row_bytes // 32, src, dst, src_row=32, src_blk=32 * m, dst_row=row_bytes, dst_blk=32)


def weights_from_bt(n: int, k: int, prec: str, src: int, dst: int, src_row: int | None = None) -> Chunks:
    """AMP weight panels of B [K, N] from B^T [N, K] row-major (F16 or FP8 bits). src_row: the source row stride
    in bytes when the K columns are a slice of longer rows (default: K elements)."""
    kb = KBLOCK[prec]
    row_bytes = k * (2 if prec == "f16" else 1)
    kblocks = k // kb
    return Chunks(
        n, kblocks, src, dst, src_row=src_row or row_bytes, src_blk=32, dst_row=32, dst_blk=512, shift=4,
        dst_group=kblocks * 512,
    )  # fmt: skip


def fp8_in_f16_panel_order(n: int, k: int, src: int, dst: int, src_row: int | None = None) -> Chunks:
    """FP8 bytes of B^T [N, K] (row stride src_row, default K) rearranged into the F16 AMP weight panels' order
    with one byte per half: the 16 values of (row, 16-deep K block) go where `weights_from_bt(n, k, "f16")` puts
    their halves, at half the offset. A flat `cast_fp8_f16` of the [ceil(n/16) * 16, k] result is then exactly
    the F16 weight panels (the cast maps byte i to half i). 16-byte pieces: needs src, src_row 8-byte aligned."""
    kblocks = k // KBLOCK["f16"]
    return Chunks(
        n, kblocks, src, dst, src_row=src_row or k, src_blk=16, dst_row=16, dst_blk=256, shift=4,
        dst_group=kblocks * 256, piece=16,
    )  # fmt: skip


@dataclass(frozen=True)
class FP8ToF16:
    """rows x blocks pieces: 16 FP8 bytes at `src + r * src_row + b * src_blk` -> 16 halves (FP8 * 2^scale) at
    `dst_row(r) + b * dst_blk` (`Chunks`' formula with g = 4); then `zero_rows` rows r in [rows, rows + zero_rows)
    of zeros at the same places. Kernel `pack_fp8_f16` (`pack_fp8_f16_pad` with zero rows); see the module
    docstring. Addresses, strides and steps: multiples of 8 bytes. The frame is FP8_FRAME_WORDS long."""

    rows: int
    blocks: int
    src: int
    dst: int
    src_row: int
    src_blk: int = 16
    dst_row: int = 32
    dst_blk: int = 512
    dst_group: int = 0
    fmt: int = fp8.F143
    scale: int = 0
    zero_rows: int = 0

    entry = "rows_sup"
    words = FP8_FRAME_WORDS

    @property
    def kernel(self) -> str:
        return "pack_fp8_f16_pad" if self.zero_rows else "pack_fp8_f16"

    @cached_property
    def lag(self) -> int:
        """The pace variant's lag (1, 2; 0: the plain loop), by `Chunks.lag`'s rule over the conversion rows; the
        plain loop when it is not slower (a row of one or two pieces: the pace row's priming costs more)."""
        r = np.arange(self.rows, dtype=np.int64)
        lag = _pace_lag(
            self.src + r * self.src_row, self.dst + (r >> 4) * self.dst_group + (r & 15) * self.dst_row,
            self.blocks, (self.src_blk, self.dst_blk), (16, 32), self._jumps(),
        )  # fmt: skip
        return lag if lag and self._cycles(lag) < self._cycles(0) else 0

    def _jumps(self) -> tuple[int, int]:
        """The pace jumps (atoms): a piece's second load to the next piece's first, its last store likewise."""
        return self.src_blk // 8 - 1, self.dst_blk // 8 - 3

    @property
    def code(self) -> str:
        """The worker body this call runs (its frame's ENTRY)."""
        return f"{self.kernel}_pace{self.lag}" if self.lag else self.kernel

    def _split(self) -> list[tuple[int, int, int, int]]:
        """(first row, rows, first zero row, zero rows) per worker: rows split as `split`, zero rows in reverse
        worker order (the workers with one row fewer take the extra zero rows)."""
        zs = split(self.zero_rows)[::-1]
        return [(f, c, self.rows + zf, zc) for (f, c), (zf, zc) in zip(split(self.rows), zs, strict=True)]

    def frame(self, labels: dict[str, int]) -> np.ndarray:
        f = np.zeros(FP8_FRAME_WORDS, np.uint32)
        for w, (first, cnt, zfirst, zcnt) in enumerate(self._split()):
            f[R.CNT + w], f[R.FIRST + w], f[ZCNT + w], f[ZFIRST + w] = cnt, first, zcnt, zfirst
        f[R.IN0], f[R.OUT], f[R.ENTRY], f[R.ATOMS] = self.src, self.dst, labels[self.code], self.blocks
        f[R.ISTRIDE], f[R.OSTRIDE] = self.src_row, self.dst_row
        if self.lag:
            lj, sj = self._jumps() if self.blocks > 1 else (0, 0)
            f[FP8_PACE] = (lj & 0x3FF) | ((sj & 0x3FF) << 10)
            primed = 8 if self.lag == 1 else self.src_blk  # the priming loads' source advance
            f[FP8_PSTEP], f[FP8_PREPS] = (self.src_row - primed) & 0xFFFFFFFF, self.blocks - 1
        # Steps of a piece's last load / store, in atoms (the others step by one atom).
        f[SRC_BLK], f[DST_BLK] = (self.src_blk // 8 - 1) & 0xFFFFFFFF, (self.dst_blk // 8 - 3) & 0xFFFFFFFF
        f[DST_GROUP] = self.dst_group
        f[FMT], f[SCL] = self.fmt, self.scale & 0x3F
        f[SRC_NEXT] = (self.src_row - self.blocks * self.src_blk) & 0xFFFFFFFF
        return f

    def semantics(self, mem: np.ndarray, src_base: int, out: np.ndarray, dst_base: int) -> np.ndarray:
        """On byte arrays: mem holds the source at src_base; returns out (holding dst_base) updated."""
        out = out.copy()
        r = np.arange(self.rows + self.zero_rows)
        d0 = (r >> 4) * self.dst_group + (r & 15) * self.dst_row
        b = np.arange(self.blocks)
        d = self.dst - dst_base + d0[:, None] + b * self.dst_blk  # [rows + zero rows, blocks]
        s = self.src - src_base + r[: self.rows, None] * self.src_row + b * self.src_blk
        bits = mem[s[..., None] + np.arange(16)]
        with np.errstate(all="ignore"):
            h = fp8.decode(bits, self.fmt, self.scale).astype(np.float16)
        out[d[: self.rows, :, None] + np.arange(32)] = h.view(np.uint8)
        out[d[self.rows :, :, None] + np.arange(32)] = 0
        return out

    def cycles(self) -> int:
        return self._cycles(self.lag)

    def _cycles(self, lag: int) -> int:
        """The estimate on the path of this lag (0: the plain loop)."""
        code = f"{self.kernel}_pace{lag}" if lag else self.kernel
        inner = self.blocks - 1 if lag else self.blocks  # rpt repetitions per conversion row
        if not self.zero_rows:
            return _cycles(_code(code), self.rows, inner)
        n = _code(code).count

        def worker(c, z):
            if c == 0 and z == 0:
                return 7  # get, shl, two ld32, or, brz, exitz
            t = n["head"] + n["zero"] + n["tail"]
            if c:
                t += n["rows"] + c * (n["row"] + inner * n["chunk"])
            if z:
                t += n["zeros"] + z * (n["zrow"] + self.blocks * n["zchunk"])
            return t

        return R.SUP + 6 * max(worker(c, z) for _, c, _, z in self._split())


def fp8_to_f16_panels(
    n: int,
    k: int,
    src: int,
    dst: int,
    fmt: int = fp8.F143,
    scale: int = 0,
    src_row: int | None = None,
    pad: bool = True,
) -> FP8ToF16:
    """The F16 AMP weight panels of B [K, N] (gemm.pack_weights(b, "f16") of the decoded B, N padded to 16 with
    zero columns) from FP8 B^T [N, K] bytes (row stride src_row, default K; src and src_row 8-byte aligned),
    format `fmt`, scale `scale`: what `fp8_in_f16_panel_order` + zeroed N padding + a flat `cast_fp8_f16` give, in
    one pass. pad=False: the N padding rows [n, ceil(n/16)*16) are not written."""
    kblocks = k // KBLOCK["f16"]
    zero = -(-n // NBLOCK) * NBLOCK - n if pad else 0
    return FP8ToF16(
        n,
        kblocks,
        src,
        dst,
        src_row=src_row or k,
        dst_group=kblocks * 512,
        fmt=fmt,
        scale=scale,
        zero_rows=zero,
    )


@dataclass(frozen=True)
class WeightsF16:
    """F16 AMP weight panels (gemm.pack_weights order) from row-major B [K, N] f16.

    Also a part of them: with `group0` (default 0) the call writes the panels' 4-column groups group0 ..
    group0 + n/4 (B's columns 4 * group0 .. 4 * group0 + n) from a source of n columns with row stride `src_row`
    bytes (default 2n; 0 repeats one row: zero groups from a zero constant). So B stored as column panels
    (`colsP`, P % 4 == 0) needs one call per panel and no row-major copy; the caller writes every group."""

    k: int
    n: int
    src: int
    dst: int
    src_row: int | None = None
    group0: int = 0

    kernel = "pack_weights_f16"
    entry = "rows_sup"

    def __post_init__(self):
        whole = self.group0 == 0 and self.src_row is None
        if self.k % KBLOCK["f16"] or self.n % (NBLOCK if whole else 4) or self.n <= 0:
            raise ValueError(
                f"weights need K % 16 == 0 and N % {NBLOCK if whole else 4} == 0, got {self.k}, {self.n}"
            )
        if self.src_row is not None and (self.src_row % 8 or self.src_row < 0):
            raise ValueError(f"B's row stride must be a multiple of 8 bytes, got {self.src_row}")
        if self.group0 < 0 or self.src < 8 * self.group0:
            raise ValueError(f"first column group {self.group0} out of range (source at {self.src})")

    def frame(self, labels: dict[str, int]) -> np.ndarray:
        kblocks = self.k // 16
        f = np.zeros(R.FRAME_WORDS, np.uint32)
        for w, (first, cnt) in enumerate(split(self.n // 4)):
            f[R.CNT + w], f[R.FIRST + w] = cnt, first + self.group0
        # A worker's source = IN0 + FIRST * 8: IN0 is moved back by group0 groups.
        f[R.IN0], f[R.OUT], f[R.ENTRY], f[R.ATOMS] = (
            self.src - 8 * self.group0,
            self.dst,
            labels[self.kernel],
            kblocks,
        )
        f[R.ISTRIDE], f[R.OSTRIDE] = 8, 128  # a column group: 4 halves on in B, 4 slot columns on in a block
        f[SRC_BLK] = (self.n * 2 if self.src_row is None else self.src_row) // 8  # B row stride in atoms
        f[SHIFT], f[DST_GROUP] = 2, kblocks * 512
        return f

    def cycles(self) -> int:
        return _cycles(_code(self.kernel), self.n // 4, self.k // 16 - 1)


@dataclass(frozen=True)
class TransposeF16:
    """B^T rows from row-major B [K, N] f16: column c = 4 * group0 + j (j < n) of B becomes the row at
    `dst + c * dst_row` (default 2K: B^T row-major), its K halves contiguous.

    The source holds n columns (4-column groups group0 .. group0 + n/4, as `WeightsF16`) with row stride `src_row`
    bytes (default 2n; 0 repeats one row: zero rows from a zero constant of 2n bytes). K % 16 == 0, n % 4 == 0;
    src, src_row, dst and dst_row multiples of 8 bytes, dst_row >= 2K (rows do not overlap). Column groups are split
    over the six workers.

    Column panels (`panel_width` P, a multiple of 4 dividing n, and `panel_step` bytes): the source is n / P panels,
    panel j's first row at src + j * panel_step (row stride src_row, default 2P), so one call transposes a block
    stored as column panels `colsP` (the attention's V: [d / P][seq][P]) where one call per panel left workers idle
    (9 groups of a 36-wide panel: 2, 2, 2, 1, 1, 1). The workers are shared out over the panels (`worker_split`:
    no worker's groups cross a panel boundary; each worker's panel offset is a frame word).

    K parts: when the column groups do not share out evenly over the six workers (So400m's S rows from S^T: 8
    groups, two workers taking two while four take one), K is cut into `k_parts` equal parts of whole K blocks and
    each worker takes groups of one part (its source and destination offsets are frame words): 8 groups x 3 parts
    = 4 (group, part) units per worker. `k_parts` (default: the count with the lowest estimate, the fewest on a
    tie) must divide K / 16 and leave at most six (part, panel) segments."""

    k: int
    n: int
    src: int
    dst: int
    src_row: int | None = None
    group0: int = 0
    dst_row: int | None = None
    panel_width: int | None = None
    panel_step: int = 0
    k_parts: int | None = None

    kernel = "pack_transpose_f16"
    entry = "rows_sup"
    words = T_FRAME_WORDS

    def __post_init__(self):
        if self.k % KBLOCK["f16"] or self.k <= 0 or self.n % 4 or self.n <= 0:
            raise ValueError(f"transpose needs K % 16 == 0 and N % 4 == 0, got {self.k}, {self.n}")
        for name in ("src", "dst", "src_row", "dst_row"):
            v = getattr(self, name)
            if v is not None and (v % 8 or v < 0):
                raise ValueError(f"{name} must be a non-negative multiple of 8 bytes, got {v}")
        if self.group0 < 0:
            raise ValueError(f"first column group {self.group0} out of range")
        if self.drow < 2 * self.k:
            raise ValueError(f"B^T rows of {2 * self.k} B overlap at a row stride of {self.drow} B")
        p = self.panel_width
        if p is not None and (p % 4 or p <= 0 or self.n % p or self.n // p > 6 or self.panel_step % 8):
            raise ValueError(
                f"column panels of {p} need a multiple of 4 dividing n = {self.n}, at most 6 panels and a panel step"
                f" of whole atoms (got {self.panel_step})"
            )
        kp = self.k_parts
        if kp is not None and (kp <= 0 or (self.k // 16) % kp or kp * self.panels > 6):
            raise ValueError(
                f"k_parts = {kp} must divide the {self.k // 16} K blocks and leave at most 6 (part, panel) segments "
                f"({self.panels} panels)"
            )

    @property
    def srow(self) -> int:
        if self.src_row is not None:
            return self.src_row
        return (self.panel_width or self.n) * 2

    @property
    def panels(self) -> int:
        return self.n // self.panel_width if self.panel_width is not None else 1

    @cached_property
    def parts(self) -> int:
        """The K parts: `k_parts`, or the count whose slowest worker is fastest (the fewest on a tie)."""
        if self.k_parts is not None:
            return self.k_parts
        kb = self.k // 16
        options = [q for q in range(1, kb + 1) if kb % q == 0 and q * self.panels <= 6]
        return min(options, key=lambda q: (self._worker_cycles(q), q))

    def _worker_cycles(self, parts: int) -> int:
        cnt = _code(self.kernel).count
        inner = self.k // 16 // parts - 1
        return max(c for _, c, _, _ in self._split(parts)) * (cnt["row"] + inner * cnt["chunk"])

    def _split(self, parts: int) -> list[tuple[int, int, int, int]]:
        gp = (self.panel_width or self.n) // 4
        segments = parts * self.panels  # (part, panel), part-major
        workers = [1] * segments
        for _ in range(6 - segments):
            j = max(range(segments), key=lambda j: (-(-gp // workers[j]), -j))
            workers[j] += 1
        kp = self.k // parts
        out = []
        for i in range(segments):
            part, j = divmod(i, self.panels)
            src = j * self.panel_step - j * gp * 8 + part * kp * self.srow
            out += [(j * gp + f, c, src, part * kp * 2) for f, c in split(gp, workers[i])]
        return out

    def worker_split(self) -> list[tuple[int, int, int, int]]:
        """(first group, groups, source offset, destination offset in bytes) per worker: the (K part, panel)
        segments each get workers (one each, then the rest one at a time to the segment whose largest share is
        largest), which `split` its groups among them."""
        return self._split(self.parts)

    @property
    def drow(self) -> int:
        return self.k * 2 if self.dst_row is None else self.dst_row

    def frame(self, labels: dict[str, int]) -> np.ndarray:
        f = np.zeros(T_FRAME_WORDS, np.uint32)
        for w, (first, cnt, off, doff) in enumerate(self.worker_split()):
            f[R.CNT + w], f[R.FIRST + w], f[T_SRC_OFF + w] = cnt, first + self.group0, off & 0xFFFFFFFF
            f[T_DST_OFF + w] = doff
        # A worker's source = IN0 + FIRST * 8 + its panel and part offset (IN0 moved back by group0 groups); its
        # first row OUT + FIRST * OSTRIDE + its part offset.
        kp = self.k // self.parts
        f[R.IN0] = (self.src - 8 * self.group0) & 0xFFFFFFFF
        f[R.OUT], f[R.ENTRY], f[R.ATOMS] = self.dst, labels[self.kernel], kp // 16
        f[R.ISTRIDE], f[R.OSTRIDE] = 8, 4 * self.drow
        s = self.drow // 8
        f[SRC_BLK], f[DST_BLK] = self.srow // 8, s
        f[SHIFT], f[DST_GROUP] = (1 - 3 * s) & 0xFFFFFFFF, (4 * self.drow - 2 * kp) & 0xFFFFFFFF
        return f

    def semantics(self, mem: np.ndarray, src_base: int, out: np.ndarray, dst_base: int) -> np.ndarray:
        """On byte arrays: mem holds the source at src_base; returns out (holding dst_base) updated."""
        out = out.copy()
        r = np.arange(self.k)
        cols = np.arange(self.n)
        p = self.panel_width or self.n
        col_at = (cols // p) * self.panel_step + 2 * (cols % p)
        s = self.src - src_base + r[:, None] * self.srow + col_at  # [k, n] byte offsets
        vals = mem[s[..., None] + np.arange(2)]  # [k, n, 2]
        c = 4 * self.group0 + np.arange(self.n)
        d = self.dst - dst_base + c[:, None] * self.drow + 2 * r  # [n, k]
        out[d[..., None] + np.arange(2)] = vals.transpose(1, 0, 2)
        return out

    def cycles(self) -> int:
        return _cycles(
            _code(self.kernel),
            self.n // 4,
            self.k // 16 // self.parts - 1,
            [c for _, c, _, _ in self.worker_split()],
        )


@dataclass(frozen=True)
class WeightsFP8:
    """FP8 AMP weight panels (gemm.pack_weights order) from row-major B [K, N] of FP8 bytes (e.g. V for P @ V)."""

    k: int
    n: int
    src: int
    dst: int

    kernel = "pack_weights_fp8"
    entry = "rows_sup"

    def __post_init__(self):
        if self.k % KBLOCK["fp8"] or self.n % NBLOCK:
            raise ValueError(f"FP8 weights need K % 32 == 0 and N % 16 == 0, got {self.k}, {self.n}")

    def frame(self, labels: dict[str, int]) -> np.ndarray:
        kblocks = self.k // 32
        f = np.zeros(R.FRAME_WORDS, np.uint32)
        for w, (first, cnt) in enumerate(split(self.n // 4)):
            f[R.CNT + w], f[R.FIRST + w] = cnt, first
        f[R.IN0], f[R.OUT], f[R.ENTRY], f[R.ATOMS] = self.src, self.dst, labels[self.kernel], kblocks
        f[R.ISTRIDE], f[R.OSTRIDE] = 4, 128  # a column group: 4 bytes on in B, 4 engine columns on in a block
        f[SRC_BLK] = self.n // 4  # B row stride in words
        f[SHIFT], f[DST_GROUP] = 2, kblocks * 512
        return f

    def semantics(self, b: np.ndarray) -> np.ndarray:
        """The panels (uint8) the kernel writes: exactly gemm.pack_weights(b, "fp8")."""
        from ipu.backend.kernels.gemm import pack_weights

        return pack_weights(np.asarray(b, np.uint8).reshape(self.k, self.n), "fp8")

    def cycles(self) -> int:
        cnt = weights_fp8_code().count
        per_kb = cnt["kb"] + 8 * cnt["tile"]

        def worker(r):
            return (
                R.IDLE if r == 0 else cnt["head"] + r * (cnt["row"] + (self.k // 32) * per_kb) + cnt["tail"]
            )

        return R.SUP + 6 * max(worker(c) for _, c in split(self.n // 4))


def _cycles(code: R.Code, rows: int, inner: int, counts: list[int] | None = None) -> int:
    """Rows split over the workers (`split`, or the workers' row counts `counts`), `inner` chunks per row."""
    cnt = code.count

    def worker(r):
        return R.IDLE if r == 0 else cnt["head"] + r * (cnt["row"] + inner * cnt["chunk"]) + cnt["tail"]

    return R.SUP + 6 * max(worker(c) for c in (counts if counts is not None else [c for _, c in split(rows)]))
