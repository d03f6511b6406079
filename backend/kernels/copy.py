"""On-tile copies by the six workers: the lowering's row copies (GEMM A rows into padded scratch, weight rows with
K padding, result rows, exchange staging and on-tile exchange copies) as one worker-parallel kernel.

Models a tile copying a list of (source, destination, bytes) pieces with its six workers instead of the
supervisor's word loop this kernel replaced (`xch_copy`: one 32-bit word per ld32step / st32step / brnzdec).
Addresses are word aligned and sizes whole words. Overlapping copies are not supported (`check_copies` rejects them): no destination
may overlap another copy's source or destination, nor its own source unless it is the same address (a no-op); the
pieces run in parallel, in no defined order.

Calling convention (as the lowering's table routines): `setzi $m0, <table>; call $lr, copy_sup`. The table is at
one address on every tile (contents per tile, `tables`); `copy_sup` returns at once when the tile has no rows,
else starts `copy_rows` on all six workers (`runall`, vertex base = the table) and waits (`sync` LOCAL).

Table (uint32 words):

| word | field |
|---|---|
| 0 | rows R on this tile (0: nothing to do), + `SELF` (bit 31) when the supervisor copies them itself |
| 1 + w, w = 0..5 | worker w's first row |
| 7 + w | worker w's row count (a contiguous range of rows) |
| 13 + 3 r .. 15 + 3 r | row r: source address, destination address, bytes (> 0, a multiple of 4) |

The host (`tables`) splits the copies into rows and balances them over the workers by a cost per row of its bytes
plus 8 x the issues of an aligned row besides its atoms (24: 192 bytes' worth), from the sizes only (so that a
`tile.repeat` body's tables stay arithmetic progressions of its iterations' addresses): the cost stream of a tile is
cut at 1/6 .. 5/6; a cut inside a copy splits it at a multiple of 8 bytes from its start (the pieces keep the copy's
alignment), unless a piece would be shorter than `MIN_PIECE_BYTES`, then the cut moves to the nearer end of the
copy. A single large copy is thus spread over all six workers; many small ones are grouped, each worker a contiguous
range of whole copies. When the supervisor's own word loop is estimated cheaper for a tile (a few small copies: ~20
cycles + 8 per word against ~30 + 6 x the busiest worker's issues), the table says so (`SELF`) and the supervisor
copies the rows itself.

Worker, per row (the path is chosen at run time from the addresses):

- source at 4 mod 8: one 32-bit word first (the source is then 8-byte aligned);
- destination 8-byte aligned too: the whole atoms with `ldst64pace` (one load and one store per bundle: one
  thread cycle per 8 bytes), software-pipelined with the store one atom (or, when source and destination atoms
  are of opposite parity, two atoms) behind the load, so that the two accesses of a bundle are never in one bank:
  in region 1 they are in different 64-bit halves of the interleaved element (bit 3), and a region-0 access is
  never in a region-1 bank. When both are in region 0 and their 16 KiB banks (elements) overlap, a load/store
  pair per atom instead (`ld64step` + `st64step`: 2 thread cycles per 8 bytes, the bank's own limit);
- destination at 4 mod 8 (misaligned against the source): `ld64step` + two `st32step` per atom (3 per 8 bytes);
- a trailing word with ld32 / st32.

A row costs 24 (aligned, in region 1 or across the regions) to ~45 thread cycles besides its atoms
(`row_thread_cycles`); `cycles` is the simulator's count exactly (tests/unit/test_copy_kernel.py). Throughput on
the simulator, large copies: ~1.9 words per tile cycle aligned, ~0.8 aligned within one region-0 bank, ~0.65 with
source and destination 4 bytes apart mod 8 (the supervisor's `xch_copy`: 0.125).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from ipu.backend.kernels.codegen import WorkerCode as Code

ENTRY = "copy_sup"
WORKER = "copy_rows"
WORKERS = 6
FIRST, COUNT = 1, 7  # header: word 0 = rows, then per-worker first rows and row counts
HEADER_WORDS = 13
ROW_WORDS = 3
MIN_PIECE_BYTES = 64  # no piece of a split copy is shorter (unless the copy is)
MAX_ROW_BYTES = 8 * 0xFFFF  # one `rpt` ($REPEAT_COUNT: 16 bits) per row

REGION1_BASE = 0x80000  # Target.region1_base (a power of two)
BANK_BYTES = 16 * 1024  # Target.region0_element_bytes (a power of two): a region-0 bank


def _b(main: str, aux: str = "fnop") -> tuple[str, str]:
    return (main, aux)


@cache
def _row_table_start(c: Code, n: str) -> None:
    """A copy worker's start: its row count and first row from the vertex header (idle without rows), then the
    row loop's head, which loads the row's source, destination and bytes into $m1 / $m2 / $m3."""
    c.one("get $m0, $WSR")
    c.one("shl $m7, $m0, 2")
    c.one(f"ld32 $m5, $mvertex_base, $m7, {COUNT}")
    c.one(f"brz $m5, .L{n}_idle")
    c.one(f"ld32 $m6, $mvertex_base, $m7, {FIRST}")
    c.one(f"mul $m6, $m6, {4 * ROW_WORDS}")
    c.one(f"add $m6, $m6, {4 * HEADER_WORDS}")
    c.one("sub $m5, $m5, 1")
    c.tag = "row"
    c.label(f".L{n}_row")
    for reg in ("$m1", "$m2", "$m3"):
        c.one(f"ld32step {reg}, $mvertex_base, $m6+=, 1")


def worker_code(region1_base: int = REGION1_BASE, bank_bytes: int = BANK_BYTES) -> Code:
    """`copy_rows`. Registers: $m1 / $m2 = source / destination, $m3 = bytes, $m4 = whole atoms, $m7 = their bytes,
    $m5 = rows left - 1, $m6 = the next row's offset in the table, $m10:11 = the pace address pair; $m0, $m8, $m9
    scratch. Tags: one per straight-line block (executed whole or not at all) and one per loop body, for
    `row_thread_cycles`. The blocks are laid out so that the aligned rows of equal atom parity (`lag1`) fall through
    to the row's end."""
    r1_shift = region1_base.bit_length() - 1
    bank_shift = bank_bytes.bit_length() - 1
    assert region1_base == 1 << r1_shift and bank_bytes == 1 << bank_shift
    c = Code(WORKER)
    n = c.name
    _row_table_start(c, n)
    c.one("or $m0, $m1, $m2")
    c.one("and $m0, $m0, 4")
    c.one(f"brnz $m0, .L{n}_odd")
    c.tag = "al"  # both 8-byte aligned
    c.label(f".L{n}_al")
    c.one("shr $m4, $m3, 3")
    c.one("shl $m7, $m4, 3")
    c.one(f"brz $m4, .L{n}_tail")
    c.tag = "sel"  # pace unless both are in region 0 ...
    c.one("max $m0, $m1, $m2")
    c.one(f"shr $m0, $m0, {r1_shift}")
    c.one(f"brnz $m0, .L{n}_pace")
    c.tag = "r0a"  # ... in overlapping banks: the source's last bank before the destination's first
    c.one("add $m8, $m1, $m7")
    c.one("sub $m8, $m8, 1")
    c.one(f"shr $m8, $m8, {bank_shift}")
    c.one(f"shr $m9, $m2, {bank_shift}")
    c.one("cmpult $m0, $m8, $m9")
    c.one(f"brnz $m0, .L{n}_pace")
    c.tag = "r0b"  # or the destination's last bank before the source's first
    c.one("add $m8, $m2, $m7")
    c.one("sub $m8, $m8, 1")
    c.one(f"shr $m8, $m8, {bank_shift}")
    c.one(f"shr $m9, $m1, {bank_shift}")
    c.one("cmpult $m0, $m8, $m9")
    c.one(f"brnz $m0, .L{n}_pace")
    c.tag = "plain"  # one bank: a load and a store per atom
    c.one("add $m8, $m1, 0")
    c.one("add $m9, $m2, 0")
    body = [_b("ld64step $a0:1, $mzero, $m8+=, 1"), _b("st64step $a0:1, $mzero, $m9+=, 1")]
    c.rpt("$m4", body, "plain_atom")
    c.one(f"bri .L{n}_tail")

    c.tag = "odd"  # the source or the destination at 4 mod 8
    c.label(f".L{n}_odd")
    c.one("and $m0, $m1, 4")
    c.one(f"brz $m0, .L{n}_mis")
    c.tag = "lead"  # the source's first word: the source is 8-byte aligned after it
    c.one("ld32step $m0, $mzero, $m1+=, 1")
    c.one("st32step $m0, $mzero, $m2+=, 1")
    c.one("sub $m3, $m3, 4")
    c.one("and $m0, $m2, 4")
    c.one(f"brz $m0, .L{n}_al")
    c.tag = "mis"  # destination at 4 mod 8 against an aligned source: one 64-bit load, two 32-bit stores
    c.label(f".L{n}_mis")
    c.one("shr $m4, $m3, 3")
    c.one("shl $m7, $m4, 3")
    c.one("add $m8, $m1, 0")
    c.one("add $m9, $m2, 0")
    body = [
        _b("ld64step $a0:1, $mzero, $m8+=, 1"),
        _b("st32step $a0, $mzero, $m9+=, 1"),
        _b("st32step $a1, $mzero, $m9+=, 1"),
    ]
    c.rpt("$m4", body, "mis_atom")
    c.one(f"bri .L{n}_tail")

    c.tag = (
        "lag2"  # opposite atom parity: the store two atoms behind, in pairs; an odd last atom first, alone
    )
    c.label(f".L{n}_lag2")
    c.one("and $m0, $m4, 1")
    c.one(f"brz $m0, .L{n}_even")
    c.tag = "peel"
    c.one("sub $m9, $m7, 8")
    c.one("ld64 $a0:1, $m1, $m9, 0")
    c.one("st64 $a0:1, $m2, $m9, 0")
    c.one("sub $m4, $m4, 1")
    c.one(f"brz $m4, .L{n}_tail")
    c.tag = "even"
    c.label(f".L{n}_even")
    c.one("ld64 $a0:1, $m1, $mzero, 0")
    c.one("ld64 $a2:3, $m1, $mzero, 1")
    c.one("add $m8, $m1, 16")
    c.one("tapack $m10:11, $m8, $mzero, $m2")
    c.one("shr $m9, $m4, 1")
    c.one("sub $m9, $m9, 1")
    body = [
        _b("ldst64pace $a0:1, $a0:1, $m10:11+=, $mzero, 0"),
        _b("ldst64pace $a2:3, $a2:3, $m10:11+=, $mzero, 0"),
    ]
    c.rpt("$m9", body, "lag2_pair")
    c.one("st64pace $a0:1, $m10:11+=, $mzero, 0")
    c.one("st64pace $a2:3, $m10:11+=, $mzero, 0")
    c.one(f"bri .L{n}_tail")

    c.tag = "pace"
    c.label(f".L{n}_pace")
    c.one("xor $m0, $m1, $m2")
    c.one("and $m0, $m0, 8")
    c.one(f"brnz $m0, .L{n}_lag2")
    c.tag = "lag1"  # equal atom parity: the store one atom behind the load
    c.one("ld64 $a0:1, $m1, $mzero, 0")
    c.one("add $m8, $m1, 8")
    c.one("tapack $m10:11, $m8, $mzero, $m2")
    c.one("sub $m9, $m4, 1")
    c.rpt("$m9", [_b("ldst64pace $a0:1, $a0:1, $m10:11+=, $mzero, 0")], "lag1_atom")
    c.one("st64pace $a0:1, $m10:11+=, $mzero, 0")

    c.tag = "tail"
    c.label(f".L{n}_tail")
    c.one("and $m0, $m3, 4")
    c.one(f"brz $m0, .L{n}_next")
    c.tag = "word"
    c.one("ld32 $m0, $m1, $m7, 0")
    c.one("st32 $m0, $m2, $m7, 0")
    c.tag = "next"
    c.label(f".L{n}_next")
    c.one(f"brnzdec $m5, .L{n}_row")
    c.exit_and_idle("end")
    return c


SHIFT_ENTRY = "copy_shift_sup"
SHIFT_WORKER = "copy_shift_rows"


@cache
def shift_code() -> Code:
    """`copy_shift_rows`: rows of f16 copied to a destination two bytes off the source's word phase (source at 2
    mod 4 and destination at 0 mod 4, or the reverse), one 32-bit word at a time: each destination word takes the
    high half of one source word and the low half of the next (`shr` / `shl` / `or`). Used for exchange send
    staging, where the destination is a staging slot: every destination word the row touches is written whole
    (the other half of a first or last word that the row covers only halfway gets zero), and only the source
    words that hold bytes of the row are read. Registers: $m1 / $m2 = source / destination, $m3 = bytes left,
    $m4 = words of the loop, $m5 = rows left - 1, $m6 = the next row's offset in the table, $m8 = the high half of
    the previous source word (in the low half), $m0 / $m9 scratch."""
    c = Code(SHIFT_WORKER)
    n = c.name
    _row_table_start(c, n)
    c.one("and $m0, $m2, 2")
    c.one(f"brz $m0, .L{n}_mid")
    c.tag = "lead"  # destination at 2 mod 4 (source at 0): the first word = (0, the source's first half)
    c.one("ld32step $m8, $mzero, $m1+=, 1")
    c.one("shl $m0, $m8, 16")
    c.one("sub $m2, $m2, 2")
    c.one("st32step $m0, $mzero, $m2+=, 1")
    c.one("shr $m8, $m8, 16")
    c.one("sub $m3, $m3, 2")
    c.one(f"bri .L{n}_loop0")
    c.tag = "mid"  # source at 2 mod 4: the word holding its first half
    c.label(f".L{n}_mid")
    c.one("sub $m1, $m1, 2")
    c.one("ld32step $m8, $mzero, $m1+=, 1")
    c.one("shr $m8, $m8, 16")
    c.tag = "loop0"
    c.label(f".L{n}_loop0")
    c.one("shr $m4, $m3, 2")
    c.one(f"brz $m4, .L{n}_tail")
    c.one("sub $m4, $m4, 1")
    c.tag = "word"
    c.label(f".L{n}_word")
    c.one("ld32step $m9, $mzero, $m1+=, 1")
    c.one("shl $m0, $m9, 16")
    c.one("or $m0, $m0, $m8")
    c.one("st32step $m0, $mzero, $m2+=, 1")
    c.one("shr $m8, $m9, 16")
    c.one(f"brnzdec $m4, .L{n}_word")
    c.tag = "tail"  # a last half: the word (that half, 0)
    c.label(f".L{n}_tail")
    c.one("and $m0, $m3, 2")
    c.one(f"brz $m0, .L{n}_next")
    c.tag = "half"
    c.one("st32 $m8, $m2, $mzero, 0")
    c.tag = "next"
    c.label(f".L{n}_next")
    c.one(f"brnzdec $m5, .L{n}_row")
    c.exit_and_idle("end")
    return c


SHIFT_SUPERVISOR = """
.globl copy_shift_sup
.supervisor
copy_shift_sup:
    ld32 $m1, $m0, $mzero, 0
    brz $m1, .Lcopy_shift_sup_done
    setzi $m1, {worker}
    setzi $m2, {sram_base}
    sub $m2, $m0, $m2
    runall $m1, $m2, 0
    sync TEXCH_SYNCZONE_LOCAL
.Lcopy_shift_sup_done:
    br $lr
"""


SUPERVISOR = """
.globl copy_sup
.supervisor
copy_sup:
    ld32 $m1, $m0, $mzero, 0
    brz $m1, .Lcopy_sup_done
    shr $m2, $m1, 31
    brnz $m2, .Lcopy_sup_self
    setzi $m1, {worker}
    setzi $m2, {sram_base}
    sub $m2, $m0, $m2
    runall $m1, $m2, 0
    sync TEXCH_SYNCZONE_LOCAL
.Lcopy_sup_done:
    br $lr
.Lcopy_sup_self:
    shl $m1, $m1, 1
    shr $m1, $m1, 1
    sub $m1, $m1, 1
    add $m3, $m0, {rows}
.Lcopy_sup_row:
    ld32 $m4, $m3, $mzero, 0
    ld32 $m5, $m3, $mzero, 1
    ld32 $m6, $m3, $mzero, 2
    shr $m6, $m6, 2
    sub $m6, $m6, 1
.Lcopy_sup_word:
    ld32step $m2, $mzero, $m4+=, 1
    st32step $m2, $mzero, $m5+=, 1
    brnzdec $m6, .Lcopy_sup_word
    add $m3, $m3, {row_bytes}
    brnzdec $m1, .Lcopy_sup_row
    br $lr
"""
# Supervisor tile cycles (the tests check them against the simulator). Workers: ld32 + brz + shr + brnz + setzi x2
# + sub before the workers start (runall overlaps them), the sync's release and br after. None: ld32, brz, br.
# Itself (`SELF`): ld32, brz, shr, brnz, 4 to set up, br; per row 6 + 6 (brnzdec); per word 8.
SUP_CYCLES = 1 + 6 + 1 + 6 + 3 + 6 + 6
EMPTY_CYCLES = 1 + 6 + 6
SELF_CYCLES, SELF_ROW, SELF_WORD = 1 + 6 + 1 + 6 + 4 + 6, 1 + 1 + 1 + 1 + 1 + 1 + 6, 1 + 1 + 6
SELF = 1 << 31  # word 0 flag: the supervisor copies the rows itself (cheaper for a few small copies)
IDLE = 5  # an idle worker's issues (get, shl, ld32, brz, exitz)


def library_asm(
    sram_base: int = 0x4C000, region1_base: int = REGION1_BASE, bank_bytes: int = BANK_BYTES
) -> str:
    """`copy_sup` and its worker `copy_rows` (region1_base / bank_bytes: the target's, for the bank rule)."""
    sup = SUPERVISOR.format(
        worker=WORKER, sram_base=sram_base, rows=4 * HEADER_WORDS, row_bytes=4 * ROW_WORDS
    )
    shift = SHIFT_SUPERVISOR.format(worker=SHIFT_WORKER, sram_base=sram_base)
    return (
        sup + "\n" + worker_code(region1_base, bank_bytes).text() + "\n" + shift + "\n" + shift_code().text()
    )


# ----------------------------------------------------------------------------------------------------------------
# Host side: tables
# ----------------------------------------------------------------------------------------------------------------


def check_copies(tile, src, dst, nbytes, sources: bool = True) -> None:
    """ValueError unless every copy is whole aligned words and no destination overlaps another copy's source or
    destination or its own source (same tile; a copy onto itself is allowed). Arrays of equal length.
    sources=False leaves out the destinations-against-sources check (a measuring lowering's provisional plan may
    place a buffer where the final plan reserves the kernel scratch)."""
    tile, src, dst, nbytes = (np.asarray(a, np.int64) for a in (tile, src, dst, nbytes))
    bad = (src % 4 != 0) | (dst % 4 != 0) | (nbytes % 4 != 0) | (nbytes < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"copy of {nbytes[i]} B at {src[i]:#x} -> {dst[i]:#x} is not whole aligned words")
    keep = nbytes > 0
    tile, src, dst, nbytes = tile[keep], src[keep], dst[keep], nbytes[keep]
    if not len(tile):
        return
    key = tile << 32
    # destinations against each other: sorted by start, each starts at or after the previous ones' ends
    o = np.lexsort((dst, tile))
    lo, hi = key[o] + dst[o], key[o] + dst[o] + nbytes[o]
    run = np.maximum.accumulate(hi)
    clash = lo[1:] < run[:-1]
    if clash.any():
        j = int(np.argmax(clash)) + 1
        raise ValueError(f"tile {tile[o][j]}: copy destinations overlap at {dst[o][j]:#x}")
    # destinations against the sources (but a copy onto itself: its pieces copy disjoint words, each in order):
    # any source starting before a destination's end and ending after its start
    if not sources:
        return
    moved = src != dst
    o = np.lexsort((src[moved], tile[moved]))
    o = np.nonzero(moved)[0][o]
    if not len(o):
        return
    s_lo, s_hi = key[o] + src[o], np.maximum.accumulate(key[o] + src[o] + nbytes[o])
    d_lo, d_hi = key + dst, key + dst + nbytes
    k = np.searchsorted(s_lo, d_hi, side="left")  # sources starting before the destination ends
    clash = (k > 0) & (s_hi[np.maximum(k - 1, 0)] > d_lo)
    if clash.any():
        j = int(np.argmax(clash))
        raise ValueError(f"tile {tile[j]}: a copy destination at {dst[j]:#x} overlaps a copy source")


def check_shifted(tile, src, dst, nbytes) -> None:
    """ValueError unless every copy is whole f16 halves with the source and destination two bytes apart mod 4
    (`copy_shift_rows`), and no two destinations share a word (each row writes every word it touches whole)."""
    tile, src, dst, nbytes = (np.asarray(a, np.int64) for a in (tile, src, dst, nbytes))
    bad = (src % 2 != 0) | (dst % 2 != 0) | (nbytes % 2 != 0) | (nbytes < 0) | ((src ^ dst) & 2 == 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"copy of {nbytes[i]} B at {src[i]:#x} -> {dst[i]:#x} is not a half-word shifted copy"
        )
    keep = nbytes > 0
    lo = dst[keep] & ~3
    hi = (dst[keep] + nbytes[keep] + 3) & ~3
    check_copies(tile[keep], lo, lo, hi - lo)  # the words written, against each other


def shift_rows(tile, src, dst, nbytes):
    """Half-word shifted copies -> rows of `copy_shift_rows` whose destinations are word aligned but for rows of
    one half (a destination at 2 mod 4 gives its first half a row of its own: the rest then starts at a word, so
    that the pieces of a row split over the workers write disjoint words)."""
    tile, src, dst, n = (np.asarray(a, np.int64).reshape(-1) for a in (tile, src, dst, nbytes))
    lead = (dst % 4 == 2) & (n > 2)
    idx = np.r_[np.arange(len(n)), np.nonzero(lead)[0]]
    first = np.r_[
        np.zeros(len(n), bool), np.ones(int(lead.sum()), bool)
    ]  # the lead halves, kept before the rest
    o = np.lexsort((~first, idx))
    idx, first = idx[o], first[o]
    t, s, d, m = tile[idx], src[idx], dst[idx], n[idx]
    rest = lead[idx] & ~first
    return t, np.where(rest, s + 2, s), np.where(rest, d + 2, d), np.where(rest, m - 2, np.where(first, 2, m))


def tables(
    tile, src, dst, nbytes, num_tiles: int, shift: bool = False, check_sources: bool = True
) -> np.ndarray:
    """uint32 [num_tiles, HEADER_WORDS + 3 * most rows]: the tables of one call from its copies (per copy: tile,
    source, destination, bytes; word-aligned, whole words; zero-byte copies are dropped), in the copies' order per
    tile. Vectorised over all tiles (the lowering's calls hold up to millions of copies at full size).
    shift: the copies are half-word shifted ones (`check_shifted`) for `copy_shift_sup`: never `SELF`, balanced
    by their `copy_shift_rows` issues. check_sources: `check_copies`' sources."""
    tile, src, dst, n = (np.asarray(a, np.int64).reshape(-1) for a in (tile, src, dst, nbytes))
    if shift:
        check_shifted(tile, src, dst, n)
        tile, src, dst, n = shift_rows(tile, src, dst, n)
    else:
        check_copies(tile, src, dst, n, sources=check_sources)
    keep = n > 0
    o = np.argsort(tile[keep], kind="stable")
    t, s, d, n = (a[keep][o] for a in (tile, src, dst, n))
    if not len(t):
        return np.zeros((num_tiles, HEADER_WORDS), np.uint32)
    if t.min() < 0 or t.max() >= num_tiles:
        raise ValueError(f"copy on tile {int(t.max())} of {num_tiles}")
    nr = len(t)
    # Tiles and their row ranges [lo, hi).
    starts = np.r_[True, t[1:] != t[:-1]]
    lo = np.nonzero(starts)[0]
    hi = np.r_[lo[1:], nr]
    ut = t[lo]
    # Cost stream: cuts at k/6 of each tile's total.
    per_row = _shift_row_cycles() if shift else _aligned_row_cycles()
    per_byte = 2 * SHIFT_WORD if shift else 1  # a shifted word: SHIFT_WORD issues (8 bytes each) per 4 bytes
    row_cost = 8 * per_row  # a row's own issues in bytes of `ldst64pace` copy (8 per issue)
    w = row_cost + per_byte * n
    g = np.cumsum(w)
    g0 = g - w
    base, total = g0[lo], g[hi - 1] - g0[lo]
    k = np.arange(1, WORKERS)

    def cut(pos):
        pos = np.clip(pos, base[:, None], (base + total - 1)[:, None])  # inside the tile's stream
        row = np.searchsorted(g, pos, side="right")  # g0[row] <= pos < g[row]
        off = ((pos - g0[row] - row_cost) // per_byte + 4) // 8 * 8
        return row, off, (off >= MIN_PIECE_BYTES) & (off <= n[row] - MIN_PIECE_BYTES)

    # Again with each inner cut's new piece costing a row more (before the cuts after it), until the cuts that are
    # inner stay the same (at most a few times).
    row, off, inner = cut(base[:, None] + (total[:, None] * k) // WORKERS)  # [tiles, 5]
    for _ in range(4):
        extra = row_cost * inner.sum(1)
        before = row_cost * (np.cumsum(inner, 1) - inner)
        was = inner
        row, off, inner = cut(base[:, None] + ((total + extra)[:, None] * k) // WORKERS - before)
        if np.array_equal(was, inner):
            break
    # Two inner cuts of one copy at least MIN_PIECE_BYTES apart (each cut keeps that from the copy's ends only): a
    # cut too close to the one kept before it moves onto it (the worker between them then has no rows).
    kept_row, kept_off = np.full(len(row), -1), np.zeros(len(row), np.int64)
    for j in range(row.shape[1]):
        close = inner[:, j] & (row[:, j] == kept_row) & (off[:, j] - kept_off < MIN_PIECE_BYTES)
        off[:, j] = np.where(close, kept_off, off[:, j])
        kept_row = np.where(inner[:, j], row[:, j], kept_row)
        kept_off = np.where(inner[:, j], off[:, j], kept_off)
    nrow = n[row]
    after = ~inner & (2 * off >= nrow)  # snapped to the copy's end = the next copy's start
    row = np.where(after, row + 1, row)
    off = np.where(inner, off, 0)
    # Pieces: every copy from 0, and from each distinct inner cut.
    cut_rows, cut_offs = row[inner], off[inner]
    if len(cut_rows):
        cuts = np.unique(np.stack([cut_rows, cut_offs], 1), axis=0)
        cut_rows, cut_offs = cuts[:, 0], cuts[:, 1]
    p_row = np.r_[np.arange(nr), cut_rows]
    p_off = np.r_[np.zeros(nr, np.int64), cut_offs]
    order = np.lexsort((p_off, p_row))
    p_row, p_off = p_row[order], p_off[order]
    np_ = len(p_row)
    last = np.r_[p_row[1:] != p_row[:-1], True]
    p_end = np.where(last, n[p_row], np.r_[p_off[1:], 0])
    p_len = p_end - p_off
    if p_len.max() > MAX_ROW_BYTES:
        raise ValueError(f"a copy piece of {int(p_len.max())} B exceeds {MAX_ROW_BYTES} B")
    first_piece = np.searchsorted(p_row, np.arange(nr + 1), side="left")  # [nr + 1]: row -> its first piece
    # Worker starts: a cut at (row, 0) is the row's first piece; an inner cut is its own piece.
    at = np.where(inner, np.searchsorted(p_row * (1 << 32) + p_off, row * (1 << 32) + off), first_piece[row])
    tile_first = first_piece[lo]
    bounds = np.concatenate([tile_first[:, None], at, first_piece[hi][:, None]], 1)  # [tiles, 7]
    bounds = np.maximum.accumulate(bounds, axis=1)
    rows_per_tile = bounds[:, -1] - bounds[:, 0]
    most = int(rows_per_tile.max())
    tab = np.zeros((num_tiles, HEADER_WORDS + ROW_WORDS * most), np.uint32)
    tab[ut, 0] = rows_per_tile
    tab[ut, FIRST : FIRST + WORKERS] = bounds[:, :-1] - bounds[:, :1]
    tab[ut, COUNT : COUNT + WORKERS] = np.diff(bounds, axis=1)
    p_tile = t[p_row]
    j = np.arange(np_) - np.repeat(tile_first, rows_per_tile)
    col = HEADER_WORDS + ROW_WORDS * j
    tab[p_tile, col] = s[p_row] + p_off
    tab[p_tile, col + 1] = d[p_row] + p_off
    tab[p_tile, col + 2] = p_len
    if shift:
        return tab
    # The supervisor copies a tile's rows itself when that is estimated cheaper (sizes only; the workers' rows taken
    # as aligned `ldst64pace` rows).
    cnt = worker_code().count
    ti = np.repeat(np.arange(len(ut)), rows_per_tile)
    wk = (bounds[ti, 1:WORKERS] <= np.arange(np_)[:, None]).sum(1)
    busy = np.bincount(ti * WORKERS + wk, per_row + p_len // 8, len(ut) * WORKERS).reshape(-1, WORKERS)
    workers = SUP_CYCLES + WORKERS * (cnt["head"] + cnt["end"] + busy.max(1))
    itself = SELF_CYCLES + np.bincount(ti, SELF_ROW + SELF_WORD * (p_len // 4), len(ut))
    tab[ut[itself < workers], 0] |= np.uint32(SELF)
    return tab


def _aligned_row_cycles() -> int:
    """A worker's issues for a row of aligned atoms in region 1 (`lag1`), besides the atoms."""
    cnt = worker_code().count
    return sum(cnt[k] for k in ("row", "al", "sel", "pace", "lag1", "tail", "next"))


def _shift_row_cycles() -> int:
    """A worker's issues for a row of `copy_shift_rows` from a source at 2 mod 4, besides its words."""
    cnt = shift_code().count
    return sum(cnt[k] for k in ("row", "mid", "loop0", "tail", "next"))


SHIFT_WORD = 6  # issues per word of `copy_shift_rows` (ld32step, shl, or, st32step, shr, brnzdec)


def table(copies, shift: bool = False) -> np.ndarray:
    """One tile's table (uint32) from [(source, destination, bytes)]."""
    c = np.asarray(list(copies), np.int64).reshape(-1, 3)
    return tables(np.zeros(len(c), np.int64), c[:, 0], c[:, 1], c[:, 2], 1, shift=shift)[0]


def worker_rows(tab: np.ndarray) -> list[list[tuple[int, int, int]]]:
    """One tile's table -> per worker its rows (source, destination, bytes)."""
    tab = np.asarray(tab, np.int64)
    if tab[0] == 0 or tab[0] & SELF:
        return [[] for _ in range(WORKERS)]
    out = []
    for w in range(WORKERS):
        f, c = int(tab[FIRST + w]), int(tab[COUNT + w])
        rows = tab[HEADER_WORDS + ROW_WORDS * f : HEADER_WORDS + ROW_WORDS * (f + c)].reshape(-1, 3)
        out.append([tuple(int(x) for x in r) for r in rows])
    return out


def semantics(mem: np.ndarray, base: int, copies) -> np.ndarray:
    """The copies applied to a byte array `mem` holding addresses base.. (a copy; sequential order, which equals
    any order for copies that `check_copies` accepts)."""
    out = np.array(mem, np.uint8, copy=True)
    for s, d, nb in copies:
        out[d - base : d - base + nb] = mem[s - base : s - base + nb]
    return out


# ----------------------------------------------------------------------------------------------------------------
# Cycle estimate (the simulator's count: the same paths, counts read off the code)
# ----------------------------------------------------------------------------------------------------------------


def row_thread_cycles(
    src: int, dst: int, nbytes: int, region1_base: int = REGION1_BASE, bank_bytes: int = BANK_BYTES
) -> int:
    """Issues of one worker for one row (the path `copy_rows` takes for these addresses)."""
    cnt = worker_code(region1_base, bank_bytes).count
    c = cnt["row"] + cnt["next"]
    if (src | dst) % 8:
        c += cnt["odd"]
        if src % 8:
            c += cnt["lead"]
            src, dst, nbytes = src + 4, dst + 4, nbytes - 4
    m = nbytes // 8
    c += cnt["tail"] + (cnt["word"] if nbytes % 8 else 0)
    if dst % 8:
        return c + cnt["mis"] + m * cnt["mis_atom"]
    c += cnt["al"]
    if m == 0:
        return c
    c += cnt["sel"]
    pace = max(src, dst) >= region1_base
    if not pace:
        c += cnt["r0a"]
        pace = (src + 8 * m - 1) // bank_bytes < dst // bank_bytes
        if not pace:
            c += cnt["r0b"]
            pace = (dst + 8 * m - 1) // bank_bytes < src // bank_bytes
    if not pace:
        return c + cnt["plain"] + m * cnt["plain_atom"]
    c += cnt["pace"]
    if not (src ^ dst) & 8:
        return c + cnt["lag1"] + (m - 1) * cnt["lag1_atom"]
    c += cnt["lag2"]
    if m % 2:
        c += cnt["peel"]
        m -= 1
        if m == 0:
            return c
    return c + cnt["even"] + (m // 2 - 1) * cnt["lag2_pair"]


def worker_thread_cycles(rows, **kw) -> int:
    if not rows:
        return IDLE
    head = worker_code(**kw).count
    return head["head"] + sum(row_thread_cycles(*r, **kw) for r in rows) + head["end"]


def cycles(tab: np.ndarray, **kw) -> int:
    """Tile cycles of a call with this tile's table (supervisor entry to return). kw: region1_base, bank_bytes."""
    if int(tab[0]) == 0:
        return EMPTY_CYCLES
    if int(tab[0]) & SELF:
        rows = np.asarray(tab[HEADER_WORDS:], np.int64).reshape(-1, ROW_WORDS)[: int(tab[0]) & ~SELF]
        return SELF_CYCLES + int((SELF_ROW + SELF_WORD * (rows[:, 2] // 4)).sum())
    return SUP_CYCLES + WORKERS * max(worker_thread_cycles(r, **kw) for r in worker_rows(tab))


SHIFT_SUP_CYCLES = 1 + 6 + 3 + 6 + 6  # ld32, brz, setzi x2 + sub, the sync's release, br (runall overlaps)


def shift_row_thread_cycles(src: int, dst: int, nbytes: int) -> int:
    """Issues of one worker for one row of `copy_shift_rows`."""
    cnt = shift_code().count
    c = cnt["row"] + cnt["next"] + cnt["loop0"] + cnt["tail"]
    if dst % 4:
        c += cnt["lead"]
        nbytes -= 2
    else:
        c += cnt["mid"]
    words = nbytes // 4
    c += words * cnt["word"] - (0 if words else 1)  # no words: `sub` skipped
    return c + (cnt["half"] if nbytes % 4 else 0)


def shift_semantics(mem: np.ndarray, base: int, copies) -> np.ndarray:
    """`copy_shift_rows` on a byte array holding addresses base..: the copied bytes, and zero in the other half of
    a destination word the copy covers only halfway."""
    out = np.array(mem, np.uint8, copy=True)
    for s, d, nb in copies:
        lo, hi = d & ~3, (d + nb + 3) & ~3
        out[lo - base : hi - base] = 0
        out[d - base : d - base + nb] = mem[s - base : s - base + nb]
    return out


def shift_cycles(tab: np.ndarray) -> int:
    """Tile cycles of a `copy_shift_sup` call with this tile's table."""
    if int(tab[0]) == 0:
        return EMPTY_CYCLES
    head = shift_code().count
    busy = max(
        (head["head"] + sum(shift_row_thread_cycles(*r) for r in rows) + head["end"]) if rows else IDLE
        for rows in worker_rows(tab)
    )
    return SHIFT_SUP_CYCLES + WORKERS * busy
