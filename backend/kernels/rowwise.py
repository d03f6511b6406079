"""Row kernels of the ViT: GELU, layer norm, softmax, row reductions and the online-softmax (FlashAttention) steps.

Calling convention (as for every kernel): `$m0` = frame address, `call $lr, rows_sup` (`layernorm_split`:
`rows_lns_sup`, `softmax_split`: `rows_sms_sup`, see below). The shared supervisor starts the frame's worker body on all six workers and waits.
Work is split in whole rows (GELU: 4-half units) by a quotient/remainder split; the frame holds per-worker tables
(row count, first row) and every worker derives its row pointers as base + first * stride.

Operand layouts (byte addresses, any memory; every access is one 32- or 64-bit load/store, so no bank rules):

| kernel (`op`) | inputs | outputs |
|---|---|---|
| `gelu` | x: `units * 4` f16 | y: same shape, f16 |
| `layernorm` | x: R rows of n f16; weight, bias: n f16 | y: R rows of n f16 |
| `layernorm_split` | as `layernorm` (n >= 24); st0: scratch of R * 96 bytes (8-byte aligned, partials) | as `layernorm` |
| `softmax` | x: R rows of n f16, the first `valid` (default n) meaningful | y: R rows of n f16 (may alias x): softmax of the valid columns, zeros after them |
| `softmax_split` | as `softmax` (valid >= 21); st0: scratch of R * 96 bytes (8-byte aligned, partials) | as `softmax` |
| `rowsum`, `rowmax` | x: R rows of n f16 | y: R f32 |
| `flash_stats` | s: R rows of n f16 (scores); m, l: R f32 running max / sum | p = f16(e^(s - m_new)) (may alias s); m, l updated; alpha: R f32 = e^(m_old - m_new) |
| `flash_merge` | o: R rows of n f32 (running output); pv: R rows of n f16 (P @ V); alpha: R f32 | o = o * alpha + pv |
| `flash_final` | o: R rows of n f32; l: R f32 | y: R rows of n f16 = o / l |
| `softmax_e` | x: R rows of n f16, the first `valid` (default n) meaningful (valid >= 1); st0: R (m, l) f32 pairs, st1 (default 8) bytes apart (4-byte aligned) | y: R rows of n f16 (may alias x): e = exp(x - m) unnormalized, zeros after the valid columns; (m, l) = the row max and sum of e at st0 |
| `softmax_m` | as `softmax_e`; st0: R m f32, st1 bytes apart | y: as `softmax_e` (no sum: the attention's O^T GEMM forms l from a ones row of V^T); m at st0 |
| `softmax_mt` | as `softmax_m` (R <= 32 rows, n a multiple of 16) | y: e as the O^T GEMM's weight panels P^T at out (`pt_offsets`: row r is engine r % 16 of column block r // 16, its 16-key blocks 512 bytes apart); the panels' other engines untouched; m at st0 |
| `fill_f16` | (none) | y: R rows of n f16, every element `scale` |
| `to_f32_scaled` | x: R rows of n f16; l: the f32 at byte st0 of each output row | y: R rows of n f32: f32(x) * (1 / l) (4 bundles per atom, pipelined) |
| `to_f32_scaled_l` | x: R rows of n f16, l the f16 at column n of each row (in_stride >= 2n + 4) | y: as `to_f32_scaled`, l first stored as f32 at byte st0 of the output row |
| `to_f32_scaled_t` | x: the transposed rows, n + 1 rows of at least 4 ceil(R / 4) f16 columns (in_stride bytes apart, a multiple of 8): column q is row q's n values, row n its l | y: as `to_f32_scaled_l` for rows read as columns (R rows of n f32, l as f32 at byte st0 of each), the same bits (4 ceil(R / 4) columns read) |
| `sms_stats` | x: R rows of `softmax_split`'s partials (in_stride 96) | y: R pairs (m, l) f32 (out_stride apart, 8-byte aligned): the row max and sum of e, combined as its passes combine them |
| `attn_merge2`, `attn_merge3`, `attn_merge4` | x: 2 / 3 / 4 chunks [R][n + 2] f32 (o_j, m_j, l_j per row; chunk step st0 bytes; with `heads` = hb blocks of R / hb rows, head_step bytes apart, row i is block i % hb's row i / hb) | y: R rows of n f32: sum_j c_j o_j, c_j = l_j e^(m_j - M) / sum_i l_i e^(m_i - M), M = max_j m_j |
| `to_f16` | x: R rows of `valid` (default n, a multiple of 4, may be 0) f32 | y: R rows of n f16: f16(f32(x * scale)), then zeros |
| `to_f32` | x: R rows of n f16 | y: R rows of n f32 |
| `pad_f16` | x: R rows of `valid` (default n, a multiple of 4, may be 0) f16 | y: R rows of n f16: x, then zeros |
| `cast_f16` | x: R rows of `valid` (default n, a multiple of 4, >= 4) f32 | y: R rows of n f16: f16(x), then zeros (3 bundles per atom, pipelined) |
| `panels_f16` | x: `panels` column panels of R rows of `panel_width` (P) f16 each, panel j's row i at in0 + j * `panel_step` + i * in_stride (default 2P) | y: R rows of n f16: panel 0's row, panel 1's, ..., then zeros |
| `panels_gap_f16` | as `panels_f16` | y: R rows of n = panels * (P + `gap`) f16: per panel its row's first `gap_at` halves, `gap` zeros, its other P - gap_at halves (the attention's Q rows for K's overlapping 16-column blocks, gemm.py); with `block_jump` (gap_at = 16) row r's two 32-byte blocks of panel j at out + (r // 16) * 2 * panels * block_jump + (r % 16) * out_stride + 2j * block_jump and block_jump further (Q^T's F16 AMP weight panels: out_stride 32, block_jump 512; at most 96 rows) |

Valid lengths (padded attention: the key count padded to the GEMM's 16 columns): softmax reads the atoms holding
valid elements only; the last one is masked with f16v4min against a constant (+inf on valid lanes, -inf on the
others), so its padded lanes may hold any value but NaN (the ARF has no bit operations to drop a NaN) and give
e = 0; the atoms after it are neither read nor required to be written; the output's padded columns are written
as +0. `to_f16` writes n - valid zeros after each row's converted elements (valid = 0: zero rows, nothing read).

`layernorm_split` (few rows: with one row per tile `layernorm` runs on one worker while five idle) splits every
row across the six workers: worker w owns a column slice of whole atoms (quotient/remainder split of n / 4, so
n >= 24 and n / 6 need not be a multiple of 4) of x, weight, bias and y. Its supervisor `rows_lns_sup`
(`Rows.entry`) runs three worker bodies in turn, each over all R rows, with a `sync` after each: pass 1
(`rows_lns_sum`) stores each slice's f32 sum, pass 2 (`rows_lns_var`) combines the six sums in a fixed order into
the mean (every worker the same value) and stores each slice's centered sum of squares, pass 3 (`rows_lns_norm`)
combines both and normalizes its slice. Partials: per row 96 bytes at st0 + 96 * row, the sums at byte 8 * w, the
sums of squares at 48 + 8 * w (one per 64-bit word: the simulator's poison tracking loses one of two 32-bit
stores into one 64-bit word in the same SIMT step). Inner loops load the next atom in the bundle after the
current one's conversions; the slice's last atom runs in an epilogue, so nothing outside the operands is read.
Pass 3 works in f16 (f16v4: the mean as hi + lo halves, rstd as a half, see Numerics), software-pipelined in two
stages (atom i's subtractions and * rstd beside atom i - 1's * w, + b and store): thread cycles per atom
4 + 8 + 5 (`layernorm`: 5 + 9 + 12; `layernorm_split32`, x f32 rows: 2 + 6 + 7); cost `LNS_SUP` + 6 * (the
three passes' slowest worker). eps >= 2^-30 (the f16 rstd <= 2^15).

`softmax_split` (few rows: with one row per tile `softmax` runs on one worker while five idle) splits every row
the same way, over the va = ceil(valid / 4) atoms holding valid elements (valid >= 21: an atom per worker), under
`rows_sms_sup` (the same three-pass supervisor): pass 1 (`rows_sms_max`) stores each slice's f32 max, pass 2
(`rows_sms_exp`) combines the six maxima in a fixed order (every worker the same value) and works in f16 (the
IPU's f16v2exp: two exponentials per instruction, where f32exp takes one): e = exp(x - m) (f16v4sub, f16v2exp)
stored to y, the slice's sum of e in f32 (two atoms' e added in f16 first, then converted: 11 bundles per pair of
atoms, an odd atom out 7); pass 3 (`rows_sms_scale`) combines the six sums in a fixed order and
multiplies its slice of y in place by f16(1 / sum) (f16v4mul); the last worker then writes the row's zero atoms
(va..n/4). Valid lengths as `softmax`: every
worker min-masks its slice's last atom (workers 0..4 with +inf: no change; the last worker with the tail mask), the
atoms after va are not read. Partials: per row 96 bytes at st0 + 96 * row, the maxima at byte 8 * w, the sums at
48 + 8 * w. Inner loops: the max 1 bundle per atom (the next atom loads beside it), exp 5.5 (11 per pair; the
loads and the stores in AUX bundles' MAIN slots), scale 2 (the next atom loads beside the product); thread cycles
per atom 1 + 5.5 + 2 (`softmax`, in f32: 2 + 14 + 8). Nothing outside the slices' atoms is read.

`softmax_e` (the key-split attention's scores with several rows per worker: whole rows per worker, where
`softmax_split_e` pays a three-pass row split, six partials and a slice's imbalance on every row) runs
`softmax_split`'s f16 arithmetic on whole rows: the row max (one bundle per atom, the next atom loaded beside the
max of the current one, the last atom min-masked), stored as m; then e = exp(x - m) stored to y as f16 with the
sum of e in f32 (`softmax_split`'s pass 2 bodies: atom pairs 11 bundles, an odd one out and the masked last atom
7 each) stored as l; then the row's zero atoms. Thread cycles per atom 1 + 5.5, against `softmax_split_e`'s
same 1 + 5.5 on a sixth of each row plus ~60 per row for the passes' heads, partials and `sms_stats`. Numerics:
`softmax_split`'s with one slice, the whole row (the pair sums over atoms (0, 1), (2, 3), .. of the row).

`panels_f16` (the attention's K / V / Q column panels [d / P][seq][P] into the GEMM's dpad-wide f16 rows) gathers
row i of every panel into one output row and zero-fills columns panels * P .. n, in one call (P % 4 == 0, P >= 8,
n >= panels * P). Each worker walks its rows panel by panel: a panel's rows are one software-pipelined stream of
`ldst64pace` (each bundle stores atom t and loads atom t + 1: one thread cycle per 8 bytes), the jumps from one row
to the next folded into the pace increments (the stride register's fields 0 / 1: load / store jump in atoms). For
the panel widths of `PF_FAST_ATOMS` (P = 8 .. 48, 72) the rows but the last are one `rpt` whose body is a whole row
(P / 4 - 2 plain bundles and the two jump bundles): P / 4 thread cycles per row; other widths loop over the rows
around an `rpt` of the plain bundles, P / 4 + 2 per row (the loop branch and the `rpt`). The frame's PF_LOOP
names the loop. The priming load and the last row's final store (alone: nothing past the worker's rows is read)
are per panel.
Then the zero columns, column by column: an `rpt` over the worker's rows of `st64step` with the row stride (one
cycle per zero atom, 4 per zero column). When a load and the store in one bundle would hit one memory bank (checked
on the host over the call's address streams: the simulator's bank rule) or a jump does not fit the 10-bit fields,
the call takes a safe path instead: `ld64step` + `st64step`, two cycles per atom, P / 2 + 5 per row of a panel
(`Rows.pf_pace` tells which). Source and output must not overlap.

Rows hold n = 4 * atoms elements (n % 4 == 0, n >= 4); row strides (bytes, multiples of 8) default to contiguous.
The FlashAttention state starts at m = -inf, l = 0, o = 0 (a row whose scores are all -inf gives NaN).

Numerics (the numpy `semantics` below follow the instruction sequence exactly; the simulator matches bit for bit):
- f32 statistics are accumulated in two f32 pairs (elements 4i, 4i+1 and 4i+2, 4i+3), sequentially over the row,
  then combined: (acc01 + acc23), then lane 0 + lane 1.
- layer norm: mean = sum * f32(1/n); var = sum((x - mean)^2) * f32(1/n) (biased, two passes);
  rstd = 1/sqrt(var + eps); y = f16(f16(f16((x - mean) * rstd) * w) + b).
- layernorm_split: the same formulas, with each sum taken as six slice partials p0..p5 (each accumulated as
  above over its worker's slice) summed in worker order ((((p0 + p1) + p2) + p3) + p4) + p5 (f32); so results
  may differ from `layernorm` in the last bits of mean and var, never between workers or runs. The normalize
  pass is f16 arithmetic (f16v4, every operation rounded to f16): hi = f16(mean), lo = f16(mean - f32(hi)),
  r = f16(rstd), y = f16(f16(f16(f16(f16(x - hi) - lo) * r) * w) + b). x - hi is exact where x is near the mean
  (Sterbenz) and lo restores the mean's bits below hi's, so (x - hi) - lo is x - mean within ~2 half-ulps of
  itself however large the mean; against `layernorm` ~2 more f16 roundings of the normalized value before w (a
  few f16 ulps of y: |(x - mean) * rstd| <= sqrt(n) keeps it in range).
- softmax: m = max(x); e = exp(f32(x) - m); y = f16(f32(f16(e)) * (1/sum(e))) (e is kept as f16 in y between the
  passes: one extra rounding). With a valid length, the same over the valid columns (same accumulation order).
- softmax_split: m = max(max(max(max(max(m0, m1), m2), m3), m4), m5) over the six slice maxima (each as
  `softmax`'s over its slice: the same value as the whole-row max, max being exact); e = f16 exp(f16(x - m)) (f16
  arithmetic, the exponential correctly rounded); sum = six slice partials (each accumulated as above over the
  slice's terms: f32(f16(e_2i + e_2i+1)) for the atom pairs (0, 1), (2, 3), .. of the atoms before the slice's
  last, then f32(e) of an odd one out and of the last: one more f16 rounding, ~2^-12 relative, per pair) summed
  in worker order ((((s0 + s1) + s2) + s3) + s4) + s5 (f32); y = f16(e * f16(1/sum)). Against `softmax`: the
  f16 difference x - m is exact near the max and rounds (~2^-11 |x - m| relative) further out, where e is small;
  never different between workers or runs.
- GELU (f16 throughout): t = ((x*x) * c1 + c0) * x with c0 = f16(sqrt(2/pi)), c1 = f16(c0 * 0.044715);
  y = (x * 0.5) * (tanh(t) + 1), every operation rounded to f16.
- exp / tanh / 1/x / 1/sqrt x are the simulator's correctly rounded instructions (see runtime/semantics.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from ipu.backend.kernels.codegen import WorkerCode as Code
from ipu.backend.kernels.elementwise import split
from ipu.backend.target import IPU21
from ipu.runtime.semantics import exp_f16, exp_f32, recip_f32, rsqrt_f32, tanh_f16


@lru_cache(maxsize=65536)
def _pf_bank_clash(
    in0: int, out: int, pstep: int, istride: int, ostride: int, rows: int, panels: int, width: int
) -> bool:
    """panels_f16: does any pace bundle load and store one bank (`RowsKernel.pf_pace`)? Each worker walks its
    rows of one panel atom by atom; bundle t loads atom t + 1 and stores atom t of that walk. All panels and
    workers at once (the lowering asks for every call site of every tile: memoized, the calls repeat)."""
    a = width // 4
    cols = 8 * np.arange(a, dtype=np.int64)
    r = np.arange(rows, dtype=np.int64)[:, None]
    j = np.arange(panels, dtype=np.int64)[:, None, None]
    src = (in0 + j * pstep + r * istride + cols).reshape(panels, -1)  # [panel, row-major walk over all rows]
    dst = (out + r * ostride + 2 * j * width + cols).reshape(panels, -1)
    same = IPU21.bank_of(src[:, 1:]) == IPU21.bank_of(dst[:, :-1])
    # A pair that crosses from one worker's rows to the next is not a bundle.
    starts = np.array([first for first, cnt in split(rows) if cnt and first], np.int64) * a
    keep = np.ones(same.shape[1], bool)
    keep[starts - 1] = False
    return bool((same & keep).any())


# Frame words. Per-worker tables: CNT (rows or units), FIRST (first row / unit). CONST: four 64-bit constants.
CNT, FIRST = 0, 6
IN0, IN1, IN2, OUT, ENTRY, ATOMS, ISTRIDE, OSTRIDE, ST0, ST1, ST2, F0, F1, ZATOMS = range(12, 26)
CONST = 26  # 8-byte aligned: 64-bit constants at CONST, CONST + 2, ...
K1 = CONST // 2 + 1  # the second 64-bit constant (ld64 index): softmax's tail mask, to_f16's scale pair
FRAME_WORDS = 34
# layernorm_split's frame: CNT = slice atoms - 1, FIRST = slice byte offset (per worker); ENTRY / LNS_E2 / LNS_E3 =
# the three passes' entries; LNS_ROWS = rows - 1; ST0 = the partials (LNS_PART bytes per row, 8-byte aligned).
LNS = ("sum", "var", "norm")
LNS_E2, LNS_E3, LNS_ROWS = ST1, ST2, ATOMS
LNS_PART = 96  # partial bytes per row: 6 f32 sums, then 6 f32 centered sums of squares, one per 64-bit word
LNS_MIN_N = 24  # one atom per worker at least
LNS_OPS = ("layernorm_split", "layernorm_split32")  # x f16 / f32 rows (the same frame and supervisor)
LNS_MIN_EPS = 2.0**-30  # the normalize pass's f16 rstd <= 1 / sqrt(eps) = 2^15 (f16 max 65504)
# softmax_split's frame: as layernorm_split's (CNT / FIRST over the valid atoms; SMS_E2 / SMS_E3 the passes' entries),
# ZATOMS = zero atoms after the valid ones (written by the last worker); 64-bit constants CONST: 4 x -inf (the max's
# start), K1: 4 x +inf (workers 0..4's mask: no change), K1 + 1: the tail mask (the last worker's last atom).
SMS = ("max", "exp", "scale")
SMS_E2, SMS_E3, SMS_ROWS = ST1, ST2, ATOMS
SMS_OPS = ("softmax_split", "softmax_split_e")
SMS_E = ("max", "exp", "zero")  # softmax_split_e's passes: y = e unnormalized (the caller divides by the sum)
SMS_PART = 96  # partial bytes per row: 6 f32 maxima, then 6 f32 sums of e, one per 64-bit word
SMS_MIN_VALID = 21  # six atoms holding valid elements: one per worker at least

# panels_f16's frame: ATOMS = P / 4 - 2 (pace path) or P / 4 (safe path), ZATOMS = zero atoms per row; PF_STEP = the
# panel step, PF_PANELS = panels - 1, PF_PACE = the pace stride register (field 0: load jump, field 1: store jump,
# atoms), PF_IJUMP / PF_OJUMP = the safe path's row jumps (bytes), PF_WIDTH = 2P (a panel row's bytes), PF_SAFE = 1 on
# the safe path, PF_OATOMS = the output row stride in atoms (the zero columns' st64step stride).
# softmax_mt's frame (besides softmax_m's): PT_FQ = whole 16-key blocks before the one holding the last valid key,
# PT_T = the valid atoms before the masked one in that block, PT_Z = 3 - PT_T (its zero atoms), PT_BLKM = bytes
# from one 16-query column block of the panels to the next less 512 (the row pointer's fix every 16 rows);
# ZATOMS = the 16-key blocks of zeros after it, OSTRIDE = 32 (one engine's 16 keys).
PT_FQ, PT_T, PT_BLKM, PT_Z = IN1, IN2, F0, F1
# to_f32_scaled_t's frame: CNT / FIRST = the worker's (group, column) items and its first item's column, OT_G0 + w
# = that item's group of 4 rows; IN1 = the byte offset of the l row (n * in_stride), ST1 = in_stride in atoms,
# F0 = rows - 1, ATOMS = n.
OT_G0, OT_LROW, OT_STEP, OT_LAST = CONST, IN1, ST1, F0
PF_STEP, PF_PANELS, PF_PACE, PF_IJUMP = IN1, IN2, ST0, ST1
PF_OJUMP, PF_WIDTH, PF_SAFE, PF_OATOMS = ST2, F0, F1, CONST
# panels_gap_f16's frame: panels_f16's words (ATOMS = gap_at / 4, PF_WIDTH = the output panel's bytes, P + gap
# halves) and PFG_ZERO = gap / 4, PFG_REST = (P - gap_at) / 4 atoms.
PFG_ZERO, PFG_REST = ZATOMS, ST1
# PFG_GROUP: bytes added to the output per 16 rows beyond 16 * out_stride (`block_jump`: Q^T's weight panels
# of several 16-query groups in one call; 0 otherwise).
PFG_GROUP = F1
# The (atoms before the zeros, zero atoms, atoms after them) with a rows loop in the library: Q's rows for K's two
# overlapping 16-column blocks per panel of 24 (So400m's heads), 20 or 28 halves (`nnops.k_in_place_blocks`).
PFG_SHAPES = ((4, 2, 2), (4, 3, 1), (4, 1, 3))
# PF_LOOP: the pace path's rows loop, `.L<name>_rows<a>` for a = P / 4 in PF_FAST_ATOMS, else the generic one.
# PF_FAST_ATOMS: the panel widths (atoms) with a loop body of their own, P = 8 .. 48 and 72 (a head of 72).
PF_LOOP = CONST + 1
PF_FAST_ATOMS = (2, 3, 4, 6, 8, 12, 18)
PF_MIN_P = 8  # two atoms per panel row at least: the row's load jump and store jump are in different bundles
PACE_FIELD = 1 << 9  # pace stride fields: signed 10-bit atom counts


def pf_width_ok(p: int) -> bool:
    """`panels_f16` takes column panels of p halves: whole atoms, at least PF_MIN_P."""
    return p % 4 == 0 and p >= PF_MIN_P


def pf_own_loop(p: int) -> bool:
    """Panels of p halves have a rows loop of their own (PF_FAST_ATOMS) on the pace path: the library must hold it
    for every `panels_f16` call of that width (by width alone: the pace test reads the addresses)."""
    return p // 4 in PF_FAST_ATOMS


GELU_C0 = np.float16(math.sqrt(2.0 / math.pi))
GELU_C1 = np.float16(float(GELU_C0) * 0.044715)
GELU_CONSTANTS = (GELU_C1, GELU_C0, 1.0, 0.5)  # the gelu bodies' c1, c0, 1, 0.5 (rowwise's frame, ksum's)

OPS = (
    "gelu",
    "layernorm",
    "softmax",
    "rowsum",
    "rowmax",
    "flash_stats",
    "flash_merge",
    "flash_final",
    "to_f16",
    "to_f32",
    "to_f32_scaled",
    "to_f32_scaled_l",
    "to_f32_scaled_t",
    "pad_f16",
    "cast_f16",
    "layernorm_split",
    "layernorm_split32",
    "softmax_split",
    "softmax_split_e",
    "softmax_e",
    "softmax_m",
    "softmax_mt",
    "fill_f16",
    "panels_f16",
    "panels_gap_f16",
    "sms_stats",
    "attn_merge2",
    "attn_merge3",
    "attn_merge4",
)
PADDED = (
    "softmax",
    "to_f16",
    "pad_f16",
    "cast_f16",
)  # ops with a valid length: zeros after the valid elements
# Input and output element sizes per row element (bytes).
ESIZES = {
    "gelu": (2, 2),
    "layernorm": (2, 2),
    "softmax": (2, 2),
    "rowsum": (2, 4),
    "rowmax": (2, 4),
    "flash_stats": (2, 2),
    "flash_merge": (4, 2),  # in0 = o (f32, also the output), in1 = pv (f16)
    "flash_final": (4, 2),
    "to_f16": (4, 2),
    "to_f32": (2, 4),
    "pad_f16": (2, 2),
    "cast_f16": (4, 2),
    "layernorm_split": (2, 2),
    "layernorm_split32": (4, 2),
    "softmax_split": (2, 2),
    "softmax_split_e": (2, 2),
    "softmax_e": (2, 2),
    "softmax_m": (2, 2),
    "softmax_mt": (2, 2),
    "fill_f16": (2, 2),
    "to_f32_scaled": (2, 4),
    "to_f32_scaled_l": (2, 4),
    "to_f32_scaled_t": (2, 4),
    "panels_f16": (2, 2),
    "panels_gap_f16": (2, 2),
    "sms_stats": (4, 4),  # in0 = softmax_split's partials rows (in_stride 96), out = (m, l) pairs
    "attn_merge2": (4, 4),  # in0 = [chunks][rows][n + 2] f32 partials, out = rows of n f32
    "attn_merge3": (4, 4),
    "attn_merge4": (4, 4),
}
# The same pipelined body; `_l` reads l from the input row.
TO_F32_SCALED = ("to_f32_scaled", "to_f32_scaled_l")
MERGE_CHUNKS = {"attn_merge2": 2, "attn_merge3": 3, "attn_merge4": 4}
MPART = CONST  # attn_merge's frame: per worker its part of a row (`Rows.merge_split`), 0: none
# attn_merge with `heads` (hb, a power of two) operand blocks: row i reads block i & MG_HMASK's row i >> MG_HSHIFT,
# the blocks MG_HSTEP bytes apart (hb = 1: mask 0, shift 0, the plain row pointer).
MG_HSHIFT, MG_HMASK, MG_HSTEP = IN1, IN2, ST1


def _b(main: str, aux: str = "fnop") -> tuple[str, str]:
    return (main, aux)


def _head(c: Code, idle: bool = True, ptrs=None) -> None:
    """Rows in $m5 (minus one, for brnzdec), first row in $m6; row pointers $m1 (in0), $m2 (out); atoms in $m4.
    idle=False: no idle test and $m5 the rows themselves (the caller tests them). ptrs: the row pointers'
    code (default `_row_ptrs`)."""
    c.one("get $m0, $WSR")
    c.one("shl $m7, $m0, 2")
    c.one(f"ld32 $m5, $mvertex_base, $m7, {CNT}")
    if idle:
        c.one(f"brz $m5, .L{c.name}_idle")
    c.one(f"ld32 $m6, $mvertex_base, $m7, {FIRST}")
    (ptrs or _row_ptrs)(c, "$m6")
    c.one(f"ld32 $m4, $mvertex_base, $mzero, {ATOMS}")
    if idle:
        c.one("sub $m5, $m5, 1")


def _row_ptrs(c: Code, row: str) -> None:
    """$m1 / $m2 = row `row`'s input / output pointers (in0 + row * in_stride, out + row * out_stride)."""
    for reg, base, stride in (("$m1", IN0, ISTRIDE), ("$m2", OUT, OSTRIDE)):
        c.one(f"ld32 {reg}, $mvertex_base, $mzero, {stride}")
        c.one(f"mul {reg}, {reg}, {row}")
        c.one(f"ld32 $m3, $mvertex_base, $mzero, {base}")
        c.one(f"add {reg}, {reg}, $m3")


def _merge_ptrs(c: Code, row: str) -> None:
    """attn_merge: $m1 = in0 + (row >> MG_HSHIFT) * in_stride + (row & MG_HMASK) * MG_HSTEP (row i of a call
    over hb heads' operand blocks is row i / hb of block i % hb), $m2 = out + row * out_stride ($m3, $m7 used)."""
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {MG_HSHIFT}")
    c.one(f"shr $m3, {row}, $m3")
    c.one(f"ld32 $m1, $mvertex_base, $mzero, {ISTRIDE}")
    c.one("mul $m1, $m1, $m3")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {MG_HMASK}")
    c.one(f"and $m3, {row}, $m3")
    c.one(f"ld32 $m7, $mvertex_base, $mzero, {MG_HSTEP}")
    c.one("mul $m3, $m3, $m7")
    c.one("add $m1, $m1, $m3")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {IN0}")
    c.one("add $m1, $m1, $m3")
    c.one(f"ld32 $m2, $mvertex_base, $mzero, {OSTRIDE}")
    c.one(f"mul $m2, $m2, {row}")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {OUT}")
    c.one("add $m2, $m2, $m3")


def _state_ptr(c: Code, reg: str, word: int, size: int = 4) -> None:
    """reg = frame[word] + first row * size (per-row f32 state)."""
    c.one(f"shl $m3, $m6, {size.bit_length() - 1}")
    c.one(f"ld32 {reg}, $mvertex_base, $mzero, {word}")
    c.one(f"add {reg}, {reg}, $m3")


def _row_advance(c: Code) -> None:
    """The row pointers $m1 / $m2 on to the next row (in_stride / out_stride)."""
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {ISTRIDE}")
    c.one("add $m1, $m1, $m3")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {OSTRIDE}")
    c.one("add $m2, $m2, $m3")


def _row_end(c: Code) -> None:
    """Advance the row pointers, loop over rows, exit."""
    _row_advance(c)
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.exit_and_idle()


# --- passes over one row (pointer $m3 = row start, running) -------------------------------------------------------


def _pass_max(c: Code, tag: str, tail: bool = False) -> None:
    """$a6 = $a7 = max of the f16 row at $m1 (as f32). Accumulator $a4:5 starts at -inf (CONST + 0).
    tail: one more atom after the $m4 counted ones, its lanes past the valid length masked to -inf (`_masked`)."""
    c.one("add $m3, $m1, 0")
    c.one(f"ld64 $a4:5, $mvertex_base, $mzero, {CONST // 2}")
    c.rpt("$m4", [_b("ld64step $a0:1, $mzero, $m3+=, 1"), _b("nop", "f16v4max $a4:5, $a4:5, $a0:1")], tag)
    if tail:
        _masked(c, "$a2:3")
        c.bundle("nop", "f16v4max $a4:5, $a4:5, $a0:1")
    c.bundle("nop", "f16v2tof32 $a0:1, $a4")
    c.bundle("nop", "f16v2tof32 $a2:3, $a5")
    c.bundle("nop", "f32v2max $a0:1, $a0:1, $a2:3")
    c.bundle("nop", "f32max $a6, $a0, $a1")
    c.bundle("nop", "f32max $a7, $a0, $a1")


def _sum_tail(c: Code, dst: str) -> None:
    """dst = (acc $a4:5 + acc $a12:13) lane 0 + lane 1."""
    c.bundle("nop", "f32v2add $a4:5, $a4:5, $a12:13")
    c.bundle("nop", f"f32add {dst}, $a4, $a5")


def _zero_acc(c: Code) -> None:
    c.bundle("nop", "f32v2add $a4:5, $azeros, $azeros")
    c.bundle("nop", "f32v2add $a12:13, $azeros, $azeros")


def _masked(c: Code, tmp: str) -> None:
    """$a0:1 = the next atom at $m3 with the lanes past the valid length -inf: min(x, mask), mask (K1) = +inf for
    valid lanes and -inf for the others."""
    c.one("ld64step $a0:1, $mzero, $m3+=, 1")
    c.one(f"ld64 {tmp}, $mvertex_base, $mzero, {K1}")
    c.bundle("nop", f"f16v4min $a0:1, $a0:1, {tmp}")


# e = exp(f32(x) - max) of one atom x in $a0:1 (max in $a6:7): e in $a2:3 and $a8:9 (f32 pairs). Shared by the
# whole-row softmax and softmax_split's pass 2, which arrange the sums and stores around it differently.
EXP_ATOM = [
    _b("nop", "f16v2tof32 $a2:3, $a0"),
    _b("nop", "f16v2tof32 $a8:9, $a1"),
    _b("nop", "f32v2sub $a2:3, $a2:3, $a6:7"),
    _b("nop", "f32v2sub $a8:9, $a8:9, $a6:7"),
    _b("nop", "f32exp $a2, $a2"),
    _b("nop", "f32exp $a3, $a3"),
    _b("nop", "f32exp $a8, $a8"),
    _b("nop", "f32exp $a9, $a9"),
]


def _pass_exp(c: Code, tag: str, tail: bool = False) -> None:
    """e = exp(f32(x) - $a6:7) over the row at $m1, stored as f16 to the row at $m2; sum(e) in $a4 (f32).
    tail: one more (masked) atom after the $m4 counted ones: its -inf lanes give e = 0."""
    c.one("add $m3, $m1, 0")
    c.one("add $m7, $m2, 0")
    _zero_acc(c)
    body = [
        _b("ld64step $a0:1, $mzero, $m3+=, 1"),
        *EXP_ATOM,
        _b("nop", "f32v2add $a4:5, $a4:5, $a2:3"),
        _b("nop", "f32v2add $a12:13, $a12:13, $a8:9"),
        _b("nop", "f32v2tof16 $a10, $a2:3"),
        _b("nop", "f32v2tof16 $a11, $a8:9"),
        _b("st64step $a10:11, $mzero, $m7+=, 1"),
    ]
    c.rpt("$m4", body, tag)
    if tail:
        _masked(c, "$a8:9")
        for main, aux in body[1:]:
            c.bundle(main, aux)
    _sum_tail(c, "$a4")


def _pass_sum(c: Code, tag: str, centered: bool) -> None:
    """$a4 = sum over the f16 row at $m1 of f32(x) (centered: of (f32(x) - $a6:7)^2)."""
    c.one("add $m3, $m1, 0")
    _zero_acc(c)
    body = [
        _b("ld64step $a0:1, $mzero, $m3+=, 1"),
        _b("nop", "f16v2tof32 $a2:3, $a0"),
        _b("nop", "f16v2tof32 $a8:9, $a1"),
    ]
    if centered:
        body += [
            _b("nop", "f32v2sub $a2:3, $a2:3, $a6:7"),
            _b("nop", "f32v2sub $a8:9, $a8:9, $a6:7"),
            _b("nop", "f32v2mul $a2:3, $a2:3, $a2:3"),
            _b("nop", "f32v2mul $a8:9, $a8:9, $a8:9"),
        ]
    body += [_b("nop", "f32v2add $a4:5, $a4:5, $a2:3"), _b("nop", "f32v2add $a12:13, $a12:13, $a8:9")]
    c.rpt("$m4", body, tag)
    _sum_tail(c, "$a4")


# --- worker bodies ---------------------------------------------------------------------------------------------------


def _row_kernel(op: str) -> Code:
    c = Code(f"rows_{op}")
    _head(c)
    if op in PADDED:
        c.one(f"ld32 $m0, $mvertex_base, $mzero, {ZATOMS}")
    if op == "softmax":
        c.one("add $m8, $m4, 1")
    if op in ("softmax_e", "softmax_m"):
        # $m4 = valid atoms - 1 (the max loop), $m9 / $m11 = the exp pass's atom pairs before the masked last
        # atom and one more if odd, $m0 = zero atoms, $m8 = the first row's (m, l), $m10 = their stride.
        c.one(f"ld32 $m0, $mvertex_base, $mzero, {ZATOMS}")
        c.one("shr $m9, $m4, 1")
        c.one("and $m11, $m4, 1")
        c.one(f"ld32 $m10, $mvertex_base, $mzero, {ST1}")
        c.one("mul $m8, $m10, $m6")
        c.one(f"ld32 $m3, $mvertex_base, $mzero, {ST0}")
        c.one("add $m8, $m8, $m3")
        if op == "softmax_m":
            c.one("sub $m6, $m9, 1")  # the pairs after the first (unused without pairs)
    if op == "softmax_mt":
        # $m4 = valid atoms - 1 (the max loop), $m0 = zero key blocks, $m8 = the first row's m (the stride is
        # reloaded per row); $m2 = the first row's panel slot: out + 32 r (the head) + (r >> 4) (PT_BLKM),
        # $m10 = rows until the next 16-row crossing (15 - r % 16); $m9 = whole key blocks, $m6 = those after
        # the first, $m11 = the valid atoms before the masked one in the last block.
        c.one(f"ld32 $m0, $mvertex_base, $mzero, {ZATOMS}")
        c.one(f"ld32 $m10, $mvertex_base, $mzero, {ST1}")
        c.one("mul $m8, $m10, $m6")
        c.one(f"ld32 $m3, $mvertex_base, $mzero, {ST0}")
        c.one("add $m8, $m8, $m3")
        c.one("shr $m3, $m6, 4")
        c.one(f"ld32 $m7, $mvertex_base, $mzero, {PT_BLKM}")
        c.one("mul $m3, $m3, $m7")
        c.one("add $m2, $m2, $m3")
        c.one("and $m10, $m6, 15")
        c.one("xor $m10, $m10, 15")
        c.one(f"ld32 $m9, $mvertex_base, $mzero, {PT_FQ}")
        c.one("sub $m6, $m9, 1")
        c.one(f"ld32 $m11, $mvertex_base, $mzero, {PT_T}")
    if op == "to_f16":
        c.one(f"ld64 $a6:7, $mvertex_base, $mzero, {K1}")  # the scale, twice
    if op == "fill_f16":
        c.one(f"ld64 $a0:1, $mvertex_base, $mzero, {CONST // 2}")  # the value, four times
    if op == "flash_stats":
        _state_ptr(c, "$m0", ST0)  # m
        _state_ptr(c, "$m8", ST1)  # l
        _state_ptr(c, "$m9", ST2)  # alpha
    if op in MERGE_CHUNKS:
        c.one("shl $m0, $m4, 4")  # the stats' byte offset in a row (4 n)
        c.one("shl $m4, $m4, 1")  # pairs of columns less the peeled first
        c.one("sub $m4, $m4, 1")
        c.one(f"ld32 $m9, $mvertex_base, $mzero, {ST0}")  # bytes from chunk j's rows to chunk j + 1's
    if op in ("flash_merge", "flash_final"):
        _state_ptr(c, "$m0", ST0)  # alpha (merge) / l (final)
        c.one(f"ld32 $m8, $mvertex_base, $mzero, {IN1}")  # pv rows (merge)
        c.one(f"ld32 $m9, $mvertex_base, $mzero, {ATOMS}")
        c.one("shl $m9, $m9, 3")  # pv row stride: 8 bytes per atom
        c.one("mul $m9, $m9, $m6")
        c.one("add $m8, $m8, $m9")
    c.tag = "row"
    c.label(f".L{c.name}_row")
    if op in ("rowsum", "rowmax"):
        if op == "rowsum":
            _pass_sum(c, "atom0", centered=False)
        else:
            _pass_max(c, "atom0")
        c.one(f"st32 {'$a4' if op == 'rowsum' else '$a6'}, $m2, $mzero, 0")
    elif op == "softmax":
        # $m4 = whole valid atoms before the masked last one, $m8 = valid atoms, $m0 = zero atoms after them.
        _pass_max(c, "atom0", tail=True)
        _pass_exp(c, "atom1", tail=True)
        c.bundle("add $m7, $m2, 0", "f32oox $a6, $a4")
        c.bundle("nop", "f32oox $a7, $a4")
        _scale_pass(c, "atom2", "$m8")
        _zero_pass(c)
    elif op == "softmax_e":
        _softmax_e_row(c)
    elif op == "softmax_m":
        _softmax_m_row(c)
    elif op == "softmax_mt":
        _softmax_mt_row(c)
    elif op == "to_f16":
        c.one("add $m3, $m1, 0")
        c.one("add $m7, $m2, 0")
        body = [
            _b("ld64step $a0:1, $mzero, $m3+=, 1"),
            _b("ld64step $a2:3, $mzero, $m3+=, 1", "f32v2mul $a0:1, $a0:1, $a6:7"),
            _b("nop", "f32v2mul $a2:3, $a2:3, $a6:7"),
            _b("nop", "f32v2tof16 $a4, $a0:1"),
            _b("nop", "f32v2tof16 $a5, $a2:3"),
            _b("st64step $a4:5, $mzero, $m7+=, 1"),
        ]
        c.rpt("$m4", body, "atom0")
        _zero_pass(c)
    elif op == "pad_f16":
        c.one("add $m3, $m1, 0")
        c.one("add $m7, $m2, 0")
        body = [_b("ld64step $a0:1, $mzero, $m3+=, 1"), _b("st64step $a0:1, $mzero, $m7+=, 1")]
        c.rpt("$m4", body, "atom0")
        _zero_pass(c)
    elif op == "cast_f16":
        # Software-pipelined (3 bundles per atom): the loads of atom i + 1 share bundles with the conversions of
        # atom i (a bundle's AUX instruction reads the registers before its MAIN load writes them).
        c.one("add $m3, $m1, 0")
        c.one("add $m7, $m2, 0")
        c.bundle("ld64step $a0:1, $mzero, $m3+=, 1")
        c.bundle("ld64step $a2:3, $mzero, $m3+=, 1")
        body = [
            _b("ld64step $a0:1, $mzero, $m3+=, 1", "f32v2tof16 $a4, $a0:1"),
            _b("ld64step $a2:3, $mzero, $m3+=, 1", "f32v2tof16 $a5, $a2:3"),
            _b("st64step $a4:5, $mzero, $m7+=, 1"),
        ]
        c.rpt("$m4", body, "atom0")
        c.bundle("nop", "f32v2tof16 $a4, $a0:1")
        c.bundle("nop", "f32v2tof16 $a5, $a2:3")
        c.bundle("st64step $a4:5, $mzero, $m7+=, 1")
        _zero_pass(c)
    elif op == "to_f32":
        c.one("add $m3, $m1, 0")
        c.one("add $m7, $m2, 0")
        body = [
            _b("ld64step $a0:1, $mzero, $m3+=, 1"),
            _b("nop", "f16v2tof32 $a2:3, $a0"),
            _b("st64step $a2:3, $mzero, $m7+=, 1", "f16v2tof32 $a4:5, $a1"),
            _b("st64step $a4:5, $mzero, $m7+=, 1"),
        ]
        c.rpt("$m4", body, "atom0")
    elif op in TO_F32_SCALED:
        _to_f32_scaled_row(c, l_in_row=op == "to_f32_scaled_l")
    elif op == "fill_f16":
        c.one("add $m7, $m2, 0")
        c.rpt("$m4", [_b("st64step $a0:1, $mzero, $m7+=, 1")], "atom0")
    elif op == "layernorm":
        _pass_sum(c, "atom0", centered=False)
        c.one(f"ld32 $a0, $mvertex_base, $mzero, {F0}")  # f32(1/n)
        c.bundle("nop", "f32mul $a6, $a4, $a0")
        c.bundle("nop", "f32mul $a7, $a4, $a0")
        _pass_sum(c, "atom1", centered=True)
        c.one(f"ld32 $a0, $mvertex_base, $mzero, {F0}")
        c.bundle(f"ld32 $a1, $mvertex_base, $mzero, {F1}", "f32mul $a4, $a4, $a0")  # var = sumsq / n; eps
        c.bundle("nop", "f32add $a4, $a4, $a1")
        c.bundle("nop", "f32oorx $a10, $a4")
        c.bundle("nop", "f32oorx $a11, $a4")
        c.one("add $m3, $m1, 0")
        c.one("add $m7, $m2, 0")
        c.one(f"ld32 $m0, $mvertex_base, $mzero, {IN1}")  # weight
        c.one(f"ld32 $m8, $mvertex_base, $mzero, {IN2}")  # bias
        body = [
            _b("ld64step $a0:1, $mzero, $m3+=, 1"),
            _b("ld64step $a12:13, $mzero, $m0+=, 1", "f16v2tof32 $a2:3, $a0"),
            _b("ld64step $a4:5, $mzero, $m8+=, 1", "f16v2tof32 $a8:9, $a1"),
            _b("nop", "f32v2sub $a2:3, $a2:3, $a6:7"),
            _b("nop", "f32v2sub $a8:9, $a8:9, $a6:7"),
            _b("nop", "f32v2mul $a2:3, $a2:3, $a10:11"),
            _b("nop", "f32v2mul $a8:9, $a8:9, $a10:11"),
            _b("nop", "f32v2tof16 $a0, $a2:3"),
            _b("nop", "f32v2tof16 $a1, $a8:9"),
            _b("nop", "f16v4mul $a0:1, $a0:1, $a12:13"),
            _b("nop", "f16v4add $a0:1, $a0:1, $a4:5"),
            _b("st64step $a0:1, $mzero, $m7+=, 1"),
        ]
        c.rpt("$m4", body, "atom2")
    elif op == "flash_stats":
        _pass_max(c, "atom0")  # $a6 = row max
        c.one("ld32 $a8, $m0, $mzero, 0")  # m_old
        c.bundle("nop", "f32max $a7, $a8, $a6")  # m_new, twice: the pair $a6:7 for f32v2sub
        c.bundle("nop", "f32max $a6, $a8, $a6")
        c.bundle("st32step $a6, $mzero, $m0+=, 1", "f32sub $a8, $a8, $a6")
        c.bundle("nop", "f32exp $a8, $a8")  # alpha
        c.bundle("st32step $a8, $mzero, $m9+=, 1")
        c.one("ld32 $a9, $m8, $mzero, 0")  # l_old
        c.bundle("nop", "f32mul $a9, $a9, $a8")
        _pass_exp_keep(c, "atom1")
        c.bundle("nop", "f32add $a4, $a9, $a4")
        c.bundle("st32step $a4, $mzero, $m8+=, 1")
    elif op == "flash_merge":
        c.one("ld32 $a6, $m0, $mzero, 0")
        c.one("ld32step $a7, $mzero, $m0+=, 1")
        c.one("add $m3, $m1, 0")
        c.one("add $m7, $m1, 0")
        body = [
            _b("ld64step $a0:1, $mzero, $m8+=, 1"),
            _b("ld64step $a2:3, $mzero, $m3+=, 1", "f16v2tof32 $a4:5, $a0"),
            _b("ld64step $a8:9, $mzero, $m3+=, 1", "f16v2tof32 $a10:11, $a1"),
            _b("nop", "f32v2mul $a2:3, $a2:3, $a6:7"),
            _b("nop", "f32v2mul $a8:9, $a8:9, $a6:7"),
            _b("nop", "f32v2add $a2:3, $a2:3, $a4:5"),
            _b("st64step $a2:3, $mzero, $m7+=, 1", "f32v2add $a8:9, $a8:9, $a10:11"),
            _b("st64step $a8:9, $mzero, $m7+=, 1"),
        ]
        c.rpt("$m4", body, "atom0")
    elif op == "flash_final":
        c.one("ld32step $a4, $mzero, $m0+=, 1")
        c.bundle("add $m3, $m1, 0", "f32oox $a6, $a4")
        c.bundle("add $m7, $m2, 0", "f32oox $a7, $a4")
        body = [
            _b("ld64step $a2:3, $mzero, $m3+=, 1"),
            _b("ld64step $a8:9, $mzero, $m3+=, 1", "f32v2mul $a2:3, $a2:3, $a6:7"),
            _b("nop", "f32v2mul $a8:9, $a8:9, $a6:7"),
            _b("nop", "f32v2tof16 $a0, $a2:3"),
            _b("nop", "f32v2tof16 $a1, $a8:9"),
            _b("st64step $a0:1, $mzero, $m7+=, 1"),
        ]
        c.rpt("$m4", body, "atom0")
    elif op == "sms_stats":
        # (m, l) of each row from softmax_split's partials (`_lns_chain`: the same orders as its passes 2 and 3).
        c.one("add $m8, $m1, 0")
        _lns_chain(c, 0, "$a6", ("fnop", "fnop"), "nop", op="f32max")
        _lns_chain(c, SMS_PART // 8, "$a7", ("fnop", "fnop"), "nop")
        c.one("st64 $a6:7, $m2, $mzero, 0")
    elif op in MERGE_CHUNKS:
        _merge_row(c, MERGE_CHUNKS[op])
    if op == "softmax_mt":
        _pt_row_end(c)
    else:
        _row_end(c)
    if op in TO_F32_SCALED:  # rows of one atom (not pipelined), then back to the row's end
        c.tag = "single"
        c.label(f".L{c.name}_one")
        c.bundle("nop", "f16v2tof32 $a2:3, $a0")
        c.bundle("nop", "f16v2tof32 $a8:9, $a1")
        c.bundle("nop", "f32v2mul $a2:3, $a2:3, $a6:7")
        c.bundle("st64step $a2:3, $mzero, $m7+=, 1", "f32v2mul $a8:9, $a8:9, $a6:7")
        c.bundle("st64step $a8:9, $mzero, $m7+=, 1")
        c.one(f"bri .L{c.name}_next")
    return c


def _to_f32_scaled_row(c: Code, l_in_row: bool = False) -> None:
    """to_f32_scaled: y = f32(x) * (1 / l), l the f32 at byte st0 of the output row (the attention's [o | m | l]
    rows). Software-pipelined, 4 bundles per atom: atom i's conversions and products beside atom i - 1's two
    stores, atom i + 1's load beside atom i's low conversion (which reads $a0 first); atoms 0 (no stores before it)
    and n - 1 (no load after it) outside the rpt. Rows of one atom branch to `.L<name>_one` ($m4 = atoms - 2 is
    then unused; F1 = 1). l_in_row (`to_f32_scaled_l`): l is the f16 at byte ST1 (2n) of the input row, stored as
    f32 at byte st0 of the output row first."""
    load = "ld64step $a0:1, $mzero, $m3+=, 1"
    if l_in_row:
        c.one(f"ld32 $m0, $mvertex_base, $mzero, {ST1}")
        c.one("ld32 $a6, $m1, $m0, 0")  # (l, the next half)
        c.bundle(f"ld32 $m0, $mvertex_base, $mzero, {ST0}", "f16v2tof32 $a8:9, $a6")
        c.bundle("st32 $a8, $m2, $m0, 0", "f32oox $a7, $a8")
        c.bundle("add $m3, $m1, 0", "f32oox $a6, $a8")
        c.one("add $m7, $m2, 0")
    else:
        c.one(f"ld32 $m0, $mvertex_base, $mzero, {ST0}")
        c.one("ld32 $a6, $m2, $m0, 0")
        c.bundle("add $m3, $m1, 0", "f32oox $a7, $a6")
        c.bundle("add $m7, $m2, 0", "f32oox $a6, $a6")
    c.bundle(load)
    c.one(f"ld32 $m0, $mvertex_base, $mzero, {F1}")
    c.one(f"brnz $m0, .L{c.name}_one")
    c.tag = "pipe"
    c.bundle("nop", "f16v2tof32 $a8:9, $a1")
    c.bundle(load, "f16v2tof32 $a2:3, $a0")
    c.bundle("nop", "f32v2mul $a2:3, $a2:3, $a6:7")
    c.bundle("nop", "f32v2mul $a10:11, $a8:9, $a6:7")
    body = [
        _b("st64step $a2:3, $mzero, $m7+=, 1", "f16v2tof32 $a8:9, $a1"),
        _b(load, "f16v2tof32 $a2:3, $a0"),
        _b("st64step $a10:11, $mzero, $m7+=, 1", "f32v2mul $a2:3, $a2:3, $a6:7"),
        _b("nop", "f32v2mul $a10:11, $a8:9, $a6:7"),
    ]
    c.rpt("$m4", body, "atom0")
    c.bundle("st64step $a2:3, $mzero, $m7+=, 1", "f16v2tof32 $a8:9, $a1")
    c.bundle("nop", "f16v2tof32 $a2:3, $a0")
    c.bundle("st64step $a10:11, $mzero, $m7+=, 1", "f32v2mul $a2:3, $a2:3, $a6:7")
    c.bundle("st64step $a2:3, $mzero, $m7+=, 1", "f32v2mul $a10:11, $a8:9, $a6:7")
    c.bundle("st64step $a10:11, $mzero, $m7+=, 1")
    c.tag = "row"
    c.label(f".L{c.name}_next")


def _row_max_f16(c: Code) -> None:
    """softmax_e / softmax_m, one row at $m1: its max m over the valid atoms (the last min-masked), stored at $m8,
    as four halves in $a8:9; $m3 = atom 1 of the row (atom 0 in $a0:1), $m7 = the row's e ($m2)."""
    c.one("add $m3, $m1, 0")
    c.one(f"ld64 $a4:5, $mvertex_base, $mzero, {CONST // 2}")  # 4 x -inf
    c.bundle(SMS_LOAD)
    c.rpt("$m4", [_b(SMS_LOAD, "f16v4max $a4:5, $a4:5, $a0:1")], "atom0")  # atom i's max, atom i + 1 loads
    c.one(f"ld64 $a10:11, $mvertex_base, $mzero, {K1}")  # the tail mask
    c.bundle("nop", "f16v4min $a0:1, $a0:1, $a10:11")
    c.bundle("nop", "f16v4max $a4:5, $a4:5, $a0:1")
    c.bundle("nop", "f16v2tof32 $a0:1, $a4")
    c.bundle("add $m3, $m1, 0", "f16v2tof32 $a2:3, $a5")
    c.bundle("add $m7, $m2, 0", "f32v2max $a0:1, $a0:1, $a2:3")
    c.bundle("nop", "f32max $a6, $a0, $a1")
    c.bundle(SMS_LOAD, "f32max $a7, $a0, $a1")  # atom 0 again, for the exponentials
    c.bundle("st32 $a6, $m8, $mzero, 0", "f32v2tof16 $a8, $a6:7")  # m; as four halves (exact: an f16 value)
    c.bundle("nop", "f32v2tof16 $a9, $a6:7")


def _softmax_e_row(c: Code) -> None:
    """softmax_e: one row at $m1 -> e at $m2, (m, l) at $m8 (then advanced by $m10)."""
    _row_max_f16(c)
    _zero_acc(c)
    c.rpt("$m9", SMS_EXP_PAIR, "pair")
    c.one(f"brz $m11, .L{c.name}_even")
    c.tag = "single"  # (with the alignment nop after the branch)
    for i, (m, a) in enumerate(SMS_EXP_BODY):
        c.bundle(SMS_LOAD if i == 1 else m, a)
    c.tag = "row"
    c.label(f".L{c.name}_even")
    c.bundle(f"ld64 $a10:11, $mvertex_base, $mzero, {K1}")
    c.bundle("nop", "f16v4min $a0:1, $a0:1, $a10:11")
    _sms_epilogue(c, SMS_EXP_BODY, {}, {})
    _sum_tail(c, "$a4")
    c.one("st32 $a4, $m8, $mzero, 1")  # l
    c.one("add $m8, $m8, $m10")
    _zero_pass(c)


SMS_LOAD = "ld64step $a0:1, $mzero, $m3+=, 1"  # the next atom of the row at $m3

# softmax_m's exponentials of an atom pair (x_2j in $a0:1, the max as four halves in $a8:9): e_2j in $a2:3, stored
# in bundle 4; e_2j+1 in $a6:7, stored in the next pair's bundle 1 (the rpt's first pair is peeled: nothing to
# store before it); the loads of x_2j+1 and x_2j+2 beside the subtractions, which read $a0:1 first.
SMM_PAIR = [
    _b(SMS_LOAD, "f16v4sub $a2:3, $a0:1, $a8:9"),
    _b("st64step $a6:7, $mzero, $m7+=, 1", "f16v2exp $a2, $a2"),
    _b("nop", "f16v2exp $a3, $a3"),
    _b(SMS_LOAD, "f16v4sub $a6:7, $a0:1, $a8:9"),
    _b("st64step $a2:3, $mzero, $m7+=, 1", "f16v2exp $a6, $a6"),
    _b("nop", "f16v2exp $a7, $a7"),
]


def _exp_atom(c: Code, main: str = "nop") -> None:
    """softmax_m: e = exp(x - m) of the atom in $a0:1 (the max as four halves in $a8:9), stored at $m7; `main`
    beside the subtraction (the next atom's load: it reads $a0:1 first)."""
    c.bundle(main, "f16v4sub $a2:3, $a0:1, $a8:9")
    c.bundle("nop", "f16v2exp $a2, $a2")
    c.bundle("nop", "f16v2exp $a3, $a3")
    c.bundle("st64step $a2:3, $mzero, $m7+=, 1")


def _softmax_m_row(c: Code) -> None:
    """softmax_m: one row at $m1 -> e at $m2, m at $m8 (then advanced by $m10); no sum (the attention's O^T GEMM
    forms it). $m9 = atom pairs before the masked last atom, $m6 = pairs - 1, $m11 = one more if odd."""
    _row_max_f16(c)
    c.one(f"brz $m9, .L{c.name}_pairs")
    c.tag = "pair1"  # the first pair (with the alignment nop after the branch), then the rest, then its last store
    for i, (m, a) in enumerate(SMM_PAIR):
        c.bundle("nop" if i == 1 else m, a)
    c.rpt("$m6", SMM_PAIR, "pair")
    c.bundle("st64step $a6:7, $mzero, $m7+=, 1")
    c.tag = "row"
    c.label(f".L{c.name}_pairs")
    c.one(f"brz $m11, .L{c.name}_even")
    c.tag = "single"
    _exp_atom(c, SMS_LOAD)
    c.tag = "row"
    c.label(f".L{c.name}_even")
    c.bundle(f"ld64 $a10:11, $mvertex_base, $mzero, {K1}")
    c.bundle("nop", "f16v4min $a0:1, $a0:1, $a10:11")
    _exp_atom(c)  # the masked last atom
    c.one("add $m8, $m8, $m10")
    _zero_pass(c)


def _pt_quad(first: bool) -> list[tuple[str, str]]:
    """softmax_mt: two `SMM_PAIR`s over one 16-key block (atoms 4q .. 4q + 3). Their stores are the previous
    block's last atom (then 61 atoms on: the next 512-byte block of the panels, the row's own 32 bytes of it)
    and this block's first three (one atom on each); `first`: no previous block (its store a nop)."""
    strides = iter(("61", "1", "1", "1"))
    body = []
    for _ in range(2):
        for main, aux in SMM_PAIR:
            if main.startswith("st64step"):
                main = main[: main.rindex(",")] + f", {next(strides)}"
            body.append((main, aux))
    if first:
        body[1] = ("nop", body[1][1])
    return body


PT_ZERO_BLOCK = [_b("st64step $azeros, $mzero, $m7+=, 1")] * 3 + [_b("st64step $azeros, $mzero, $m7+=, 61")]


def _softmax_mt_row(c: Code) -> None:
    """softmax_mt: one row at $m1 -> e into its 32 bytes of every 16-key block of the panels from $m2, m at $m8
    (then advanced by ST1). `softmax_m`'s arithmetic, whole key blocks at a time: the blocks before the one
    holding the masked last atom pipelined (`_pt_quad`), that block's valid atoms one by one, the masked atom,
    its zero atoms, then the zero blocks."""
    _row_max_f16(c)
    c.one(f"brz $m9, .L{c.name}_blocks")
    c.tag = (
        "quad1"  # the first block (with the alignment nop after the branch), the rest, the last one's store
    )
    for m, a in _pt_quad(first=True):
        c.bundle(m, a)
    c.rpt("$m6", _pt_quad(first=False), "quad")
    c.bundle("st64step $a6:7, $mzero, $m7+=, 61")
    c.tag = "row"
    c.label(f".L{c.name}_blocks")
    c.rpt("$m11", [_b(SMS_LOAD, "f16v4sub $a2:3, $a0:1, $a8:9"), _b("nop", "f16v2exp $a2, $a2"),
                   _b("nop", "f16v2exp $a3, $a3"), _b("st64step $a2:3, $mzero, $m7+=, 1")], "single")  # fmt: skip
    c.bundle(f"ld64 $a10:11, $mvertex_base, $mzero, {K1}")
    c.bundle("nop", "f16v4min $a0:1, $a0:1, $a10:11")
    _exp_atom(c)  # the masked last atom
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {PT_Z}")
    c.rpt("$m3", [_b("st64step $azeros, $mzero, $m7+=, 1")], "zero")
    c.one("add $m7, $m7, 480")
    c.rpt("$m0", PT_ZERO_BLOCK, "zquad")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {ST1}")
    c.one("add $m8, $m8, $m3")


def _pt_row_end(c: Code) -> None:
    """softmax_mt: the next row's pointers (its panel slot 32 bytes on; after every 16th row the next column block
    of the panels: PT_BLKM more), loop over rows, exit."""
    _row_advance(c)
    c.one(f"brnzdec $m10, .L{c.name}_slot")
    c.tag = "fix"
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {PT_BLKM}")
    c.one("add $m2, $m2, $m3")
    c.one("add $m10, $mzero, 15")
    c.tag = "row"
    c.label(f".L{c.name}_slot")
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.exit_and_idle()


def _merge_pair_body(nc: int, ptrs: list[str], coef: list[str]) -> list[tuple[str, str]]:
    """attn_merge's software-pipelined pair of f32 columns: 2 nc - 1 bundles, AUX-bound (nc products, nc - 1
    sums). Chunk j's pair is loaded into $a0:1 (j even) or $a2:3 (j odd) and multiplied in place (chunk 0's
    product straight into the sum $a4:5); bundle 0 stores the previous pair's sum (a bundle reads the old
    registers, so its product may overwrite $a4:5 beside the store). Each load sits beside or after the last
    reader of its register's previous value and before its own product: chunks 2.. of this pair, then chunks 0
    and 1 of the next (they read the row's (m, l) pair after its last columns: inside the operand)."""
    reg = ["$a0:1", "$a2:3"]
    aux = [f"f32v2mul $a4:5, $a0:1, {coef[0]}"]
    for j in range(1, nc):
        aux += [f"f32v2mul {reg[j % 2]}, {reg[j % 2]}, {coef[j]}", f"f32v2add $a4:5, $a4:5, {reg[j % 2]}"]
    last_read = {j: 2 * j for j in range(nc)}  # chunk -> bundle of its last reader (its product, or its sum)
    mains = ["st64step $a4:5, $mzero, $m7+=, 1"] + ["nop"] * (len(aux) - 1)

    def place(load: str, after: int, before: int) -> None:
        slot = next(b for b in range(max(after, 1), before) if mains[b] == "nop")
        mains[slot] = load

    def load(j: int) -> str:
        return f"ld64step {reg[j % 2]}, $mzero, {ptrs[j]}+=, 1"

    for j in range(2, nc):  # before its product at bundle 2 j - 1
        place(load(j), last_read[j - 2], 2 * j - 1)
    for j in (0, 1):  # the next pair's: after the last reader of its register, before the body ends
        last = max(i for i in range(nc) if i % 2 == j)
        place(load(j), last_read[last], len(aux))
    return list(zip(mains, aux))


def _merge_row(c: Code, nc: int, offset: str = "0", tag: str = "pair") -> None:
    """attn_merge: one row. Chunk j's row at $m1 + j * step ($m9): n f32 of o_j, then m_j, l_j (at byte $m0 =
    4 n). M = max m_j; w_j = l_j exp(m_j - M); c_j = w_j * (1 / sum w) in both halves of a pair ($a8:9,
    $a10:11, $a12:13; the fourth chunk's in $a6:7, free once M and 1 / sum are used: $a14 is half of $azeros and
    $a15 the zero register, neither is written); out = (c_0 o_0 + c_1 o_1) + ..., a pair of columns per
    `_merge_pair_body` ($m4 = pairs - 1 repetitions after the first pair, peeled: no sum before it to store).
    offset: the columns from byte `offset` (a register: a part of the row, `Rows.merge_split`) on; tag: the
    pair loop's."""
    # w_j in the low half of its pair; the fourth w in $a6 (M's register: M is dead once the last w is computed).
    w = [f"$a{8 + 2 * j}" for j in range(min(nc, 3))] + ["$a6"] * (nc > 3)
    coef = [f"$a{8 + 2 * j}:{9 + 2 * j}" for j in range(min(nc, 3))] + ["$a6:7"] * (nc > 3)
    c.one("add $m3, $m1, 0")
    c.one("ld32 $a6, $m3, $m0, 0")
    for _ in range(1, nc):
        c.one("add $m3, $m3, $m9")
        c.one("ld32 $a0, $m3, $m0, 0")
        c.bundle("nop", "f32max $a6, $a6, $a0")
    c.one("add $m3, $m1, 0")
    for j in range(nc):
        c.one("ld32 $a0, $m3, $m0, 0")
        c.one("ld32 $a1, $m3, $m0, 1")
        c.bundle("nop", "f32sub $a0, $a0, $a6")
        c.bundle("nop", "f32exp $a0, $a0")
        c.bundle("add $m3, $m3, $m9" if j < nc - 1 else "nop", f"f32mul {w[j]}, $a1, $a0")
    c.bundle("nop", f"f32add $a7, {w[0]}, {w[1]}")
    for j in range(2, nc):
        c.bundle("nop", f"f32add $a7, $a7, {w[j]}")
    c.bundle("nop", "f32oox $a7, $a7")
    for j in range(min(nc, 3)):  # the high half first: the low one is w_j's register
        c.bundle("nop", f"f32mul $a{9 + 2 * j}, {w[j]}, $a7")
        c.bundle("nop", f"f32mul {w[j]}, {w[j]}, $a7")
    if nc > 3:  # $a6 = w_3 / sum, then $a7 = $a6 + 0 (1 / sum is no longer needed)
        c.bundle("nop", "f32mul $a6, $a6, $a7")
        c.bundle("nop", "f32add $a7, $a6, $a15")
    ptrs = ["$m3", "$m8", "$m10", "$m11"][:nc]
    c.one(f"add $m7, $m2, {offset}")
    c.one(f"add $m3, $m1, {offset}")
    for j in range(1, nc):
        c.one(f"add {ptrs[j]}, {ptrs[j - 1]}, $m9")
    c.bundle(f"ld64step $a0:1, $mzero, {ptrs[0]}+=, 1")
    c.bundle(f"ld64step $a2:3, $mzero, {ptrs[1]}+=, 1")
    body = _merge_pair_body(nc, ptrs, coef)
    c.bundle("nop", body[0][1])  # the first pair: no sum to store before it
    for m, a in body[1:]:
        c.bundle(m, a)
    c.rpt("$m4", body, tag)
    c.bundle("st64step $a4:5, $mzero, $m7+=, 1")


def _merge_kernel(op: str) -> Code:
    """attn_merge: the worker's whole rows (CNT / FIRST, as every row kernel), then its part of a row (frame word
    MPART + w: row << 24 | first pair << 12 | pairs, 0: none; `Rows.merge_split`), with that row's coefficients
    computed again by every worker that takes a part of it (the same operations: the same values)."""
    nc = MERGE_CHUNKS[op]
    c = Code(f"rows_{op}")
    _head(c, idle=False, ptrs=_merge_ptrs)
    c.one("shl $m0, $m4, 4")  # the stats' byte offset in a row (4 n)
    c.one("shl $m4, $m4, 1")  # pairs of columns less the peeled first
    c.one("sub $m4, $m4, 1")
    c.one(f"ld32 $m9, $mvertex_base, $mzero, {ST0}")  # bytes from chunk j's rows to chunk j + 1's
    c.one(f"brz $m5, .L{c.name}_part")
    c.tag = "rows"
    c.one("sub $m5, $m5, 1")
    c.tag = "row"
    c.label(f".L{c.name}_row")
    _merge_row(c, nc)
    c.one("add $m6, $m6, 1")
    _merge_ptrs(c, "$m6")
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.tag = "head"
    c.label(f".L{c.name}_part")
    c.one("get $m3, $WSR")
    c.one("shl $m3, $m3, 2")
    c.one(f"ld32 $m5, $mvertex_base, $m3, {MPART}")
    c.one(f"brz $m5, .L{c.name}_done")
    c.tag = "part"
    c.one("shr $m6, $m5, 24")  # the row
    _merge_ptrs(c, "$m6")
    c.one("and $m4, $m5, 4095")
    c.one("sub $m4, $m4, 1")  # its pairs less the peeled first
    c.one("shr $m6, $m5, 12")
    c.one("and $m6, $m6, 4095")
    c.one("shl $m6, $m6, 3")  # its first pair's byte offset
    _merge_row(c, nc, "$m6", "ppair")
    c.label(f".L{c.name}_done")
    c.exit_and_idle()
    return c


def _pass_exp_keep(c: Code, tag: str) -> None:
    """flash_stats' exp pass: as softmax's, with $a8:9 (alpha, l_old * alpha) kept: e uses $a2:3 / $a10:11."""
    c.one("add $m3, $m1, 0")
    c.one("add $m7, $m2, 0")
    _zero_acc(c)
    body = [
        _b("ld64step $a0:1, $mzero, $m3+=, 1"),
        _b("nop", "f16v2tof32 $a2:3, $a0"),
        _b("nop", "f16v2tof32 $a10:11, $a1"),
        _b("nop", "f32v2sub $a2:3, $a2:3, $a6:7"),
        _b("nop", "f32v2sub $a10:11, $a10:11, $a6:7"),
        _b("nop", "f32exp $a2, $a2"),
        _b("nop", "f32exp $a3, $a3"),
        _b("nop", "f32exp $a10, $a10"),
        _b("nop", "f32exp $a11, $a11"),
        _b("nop", "f32v2add $a4:5, $a4:5, $a2:3"),
        _b("nop", "f32v2add $a12:13, $a12:13, $a10:11"),
        _b("nop", "f32v2tof16 $a0, $a2:3"),
        _b("nop", "f32v2tof16 $a1, $a10:11"),
        _b("st64step $a0:1, $mzero, $m7+=, 1"),
    ]
    c.rpt("$m4", body, tag)
    _sum_tail(c, "$a4")


def _zero_pass(c: Code) -> None:
    """$m0 zero atoms stored from $m7 on (the row's padding)."""
    c.rpt("$m0", [_b("st64step $azeros, $mzero, $m7+=, 1")], "zero")


def _scale_pass(c: Code, tag: str, count: str = "$m4") -> None:
    """y = f16(f32(y) * $a6:7) over `count` atoms of the f16 row at $m2 ($m7 = running pointer, reads and
    writes)."""
    c.one("add $m3, $m2, 0")
    body = [
        _b("ld64step $a0:1, $mzero, $m3+=, 1"),
        _b("nop", "f16v2tof32 $a2:3, $a0"),
        _b("nop", "f16v2tof32 $a8:9, $a1"),
        _b("nop", "f32v2mul $a2:3, $a2:3, $a6:7"),
        _b("nop", "f32v2mul $a8:9, $a8:9, $a6:7"),
        _b("nop", "f32v2tof16 $a0, $a2:3"),
        _b("nop", "f32v2tof16 $a1, $a8:9"),
        _b("st64step $a0:1, $mzero, $m7+=, 1"),
    ]
    c.rpt(count, body, tag)


def _gelu_kernel() -> Code:
    """Software-pipelined: per unit 9 bundles (8 AUX operations; the load of the next unit and the store of the
    previous result in MAIN slots beside them). The loop body is b1..b8 of unit i (the next unit's load beside
    x * 0.5, which reads x first) and b0 of unit i + 1 (x * x beside the store of unit i's result); the first b0
    runs before it, the last unit's b1..b8 (no load) and its store after it: nothing past the unit range is read."""
    c = Code("rows_gelu")
    _head(c)
    for i, reg in enumerate(("$a4:5", "$a6:7", "$a8:9", "$a10:11")):  # c1, c0, 1, 0.5 (4 x f16 each)
        c.one(f"ld64 {reg}, $mvertex_base, $mzero, {CONST // 2 + i}")
    load, store = "ld64step $a0:1, $mzero, $m1+=, 1", "st64step $a12:13, $mzero, $m2+=, 1"
    square = "f16v4mul $a2:3, $a0:1, $a0:1"
    rest = [  # b1..b8 of a unit: t = ((x*x) * c1 + c0) * x, h = x * 0.5, y = (tanh(t) + 1) * h in $a12:13
        _b("nop", "f16v4mul $a2:3, $a2:3, $a4:5"),
        _b("nop", "f16v4add $a2:3, $a2:3, $a6:7"),
        _b("nop", "f16v4mul $a2:3, $a2:3, $a0:1"),
        _b("nop", "f16v4mul $a12:13, $a0:1, $a10:11"),
        _b("nop", "f16v2tanh $a2, $a2"),
        _b("nop", "f16v2tanh $a3, $a3"),
        _b("nop", "f16v4add $a2:3, $a2:3, $a8:9"),
        _b("nop", "f16v4mul $a12:13, $a2:3, $a12:13"),
    ]
    c.bundle(load)
    c.bundle("nop", square)
    body = [(load, a) if i == 3 else (m, a) for i, (m, a) in enumerate(rest)] + [_b(store, square)]
    c.rpt("$m5", body, "unit")  # units - 1 times
    c.tag = "tail"
    for m, a in rest:
        c.bundle(m, a)
    c.bundle(store)
    c.exit_and_idle()
    return c


# --- column panels into padded rows (`panels_f16`) -------------------------------------------------------------------


def _pf_pad(c: Code) -> None:
    """A `nop` after an unconditional branch up to the next 8-byte boundary (never executed: not counted)."""
    if c.words % 2:
        c.lines.append("    nop")
        c.words += 1


def _pf_kernel(fast: tuple[int, ...] = PF_FAST_ATOMS) -> Code:
    """`panels_f16`. $m1 / $m2 = the worker's first row in the current panel / its columns in the output, $m4 = rpt
    count (ATOMS), $m5 = rows - 1, $m6 = rows, $m8 = the pace stride register, $m9 = panels left - 1, $m10:11 = the
    pace address pair (safe path: the row jumps); $m0 = the row counter, $m3 / $m7 scratch. Tags: once per worker
    (head, zcheck, zhead, tail; phead; shead, sdone), per panel (panel, multi: rows >= 2, plast, pnext; spanel, snext), per row of
    a panel (prow: all rows but the last, srow), per rpt repetition (patom, latom: the last row's, satom), per zero column (zcol, zatom x
    rows)."""
    c = Code("rows_panels_f16")
    n = c.name
    _head(c)
    c.one("add $m6, $m5, 1")  # rows
    c.one(f"ld32 $m9, $mvertex_base, $mzero, {PF_PANELS}")
    c.one(f"ld32 $m0, $mvertex_base, $mzero, {PF_SAFE}")
    c.one(f"brnz $m0, .L{n}_safe")
    c.tag = "phead"
    c.one(f"ld32 $m8, $mvertex_base, $mzero, {PF_PACE}")
    # Pace path: bundle t of a panel's stream stores atom t and loads atom t + 1 (primed by a plain load).
    pace = "ldst64pace $a0:1, $a0:1, $m10:11+=, $m8, {}"
    c.tag = "panel"
    c.label(f".L{n}_panel")
    c.one("ld64 $a0:1, $m1, $mzero, 0")
    c.one("add $m3, $m1, 8")
    c.one("tapack $m10:11, $m3, $mzero, $m2")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {PF_LOOP}")  # the rows' loop: the panel width's, or generic
    c.one("br $m3")
    for a in fast:  # every row but the last as one rpt body of a bundles: no per-row loop overhead
        _pf_pad(c)  # each loop starts 8-byte aligned: its counts do not depend on the loops before it
        c.tag = f"fast{a}"
        c.label(f".L{n}_rows{a}")
        row = [_b(pace.format(0))] * (a - 2) + [_b(pace.format(0b0001)), _b(pace.format(0b1000))]
        c.rpt("$m5", row, f"frow{a}")
        c.one(f"bri .L{n}_last")
    _pf_pad(c)
    c.tag = "generic"
    c.label(f".L{n}_rows")
    c.one("add $m0, $m5, 0")
    c.one(f"brz $m0, .L{n}_last")
    c.tag = "multi"
    c.one("sub $m0, $m0, 1")
    c.tag = "prow"
    c.label(f".L{n}_row")
    c.rpt("$m4", [_b(pace.format(0))], "patom")
    c.bundle(pace.format(0b0001))  # loads the row's last atom, then the load address jumps to the next row
    c.bundle(pace.format(0b1000))  # stores the row's last atom, then the store address jumps to the next row
    c.one(f"brnzdec $m0, .L{n}_row")
    c.tag = "plast"  # the worker's last row: its last atom stored alone (no load past the rows)
    c.label(f".L{n}_last")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {PF_STEP}")  # for the next panel (in the rpt's alignment slot)
    c.rpt("$m4", [_b(pace.format(0))], "latom")
    c.bundle(pace.format(0))
    c.one("st64pace $a0:1, $m10:11+=, $m8, 0")
    c.tag = "pnext"
    c.one("add $m1, $m1, $m3")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {PF_WIDTH}")
    c.one("add $m2, $m2, $m3")
    c.one(f"brnzdec $m9, .L{n}_panel")
    c.tag = "zcheck"
    c.label(f".L{n}_zero")
    c.one(f"ld32 $m0, $mvertex_base, $mzero, {ZATOMS}")
    c.one(f"brz $m0, .L{n}_done")
    c.tag = "zhead"
    c.one(f"ld32 $m9, $mvertex_base, $mzero, {PF_OATOMS}")
    c.one("sub $m0, $m0, 1")
    c.tag = "zcol"
    c.label(f".L{n}_zcol")
    c.one("add $m7, $m2, 0")
    c.rpt("$m6", [_b("st64step $azeros, $mzero, $m7+=, $m9")], "zatom")
    c.one("add $m2, $m2, 8")
    c.one(f"brnzdec $m0, .L{n}_zcol")
    c.label(f".L{n}_done")
    c.exit_and_idle()
    # Safe path (a load and a store in one bundle would share a bank): ld64step + st64step per atom.
    c.tag = "shead"
    c.label(f".L{n}_safe")
    c.one(f"ld32 $m10, $mvertex_base, $mzero, {PF_IJUMP}")
    c.one(f"ld32 $m11, $mvertex_base, $mzero, {PF_OJUMP}")
    c.tag = "spanel"
    c.label(f".L{n}_spanel")
    c.one("add $m3, $m1, 0")
    c.one("add $m7, $m2, 0")
    c.one("add $m0, $m5, 0")
    c.tag = "srow"
    c.label(f".L{n}_srow")
    c.rpt("$m4", [_b("ld64step $a0:1, $mzero, $m3+=, 1"), _b("st64step $a0:1, $mzero, $m7+=, 1")], "satom")
    c.one("add $m3, $m3, $m10")
    c.one("add $m7, $m7, $m11")
    c.one(f"brnzdec $m0, .L{n}_srow")
    c.tag = "snext"
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {PF_STEP}")
    c.one("add $m1, $m1, $m3")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {PF_WIDTH}")
    c.one("add $m2, $m2, $m3")
    c.one(f"brnzdec $m9, .L{n}_spanel")
    c.tag = "sdone"
    c.one(f"bri .L{n}_zero")
    return c


def _pfg_names(g: int, z: int, rest: int, blocks: bool) -> tuple[str, str]:
    """One panels_gap_f16 rows loop's names: the tag suffix its estimate counts, the label suffix its frame jumps
    to (atoms before the zeros, zero atoms, atoms after them; `blocks`: the `block_jump` loop)."""
    b = "b" if blocks else ""
    return f"{g}z{z}r{rest}{b}", f"{g}_{z}_{rest}{b}"


def _pfg_kernel(loops: tuple[str, ...] | None = None) -> Code:
    """`panels_gap_f16` (with the rows loops whose label suffixes are `loops`, `Rows.pfg_loop`; None: all): per panel, the worker's rows as one pace stream (as `panels_f16`'s pace path: bundle t
    stores atom t and loads atom t + 1, the load and store addresses jumping to the next row by the stride
    fields 0 and 1), with zero stores after the row's first G atoms: every row but the last in one rpt, the last
    one without the load past its end; one rows loop per (G, zeros, rest) of PFG_SHAPES. $m1 / $m2 = the
    worker's first row in the current panel / its output columns, $m9 = panels left - 1, $m8 = the pace strides,
    $m10:11 = the pace address pair, $m0 = the rows loop. The caller keeps the panels and the output in
    different memory elements (no bundle's load and store in one bank)."""
    c = Code("rows_panels_gap_f16")
    n = c.name
    _head(c)
    # The worker's rows lie in one 16-row group (`Rows.pfg_split`): its output moves by the group's extra bytes.
    c.one("shr $m3, $m6, 4")
    c.one(f"ld32 $m7, $mvertex_base, $mzero, {PFG_GROUP}")
    c.one("mul $m3, $m3, $m7")
    c.one("add $m2, $m2, $m3")
    c.one(f"ld32 $m9, $mvertex_base, $mzero, {PF_PANELS}")
    c.one(f"ld32 $m8, $mvertex_base, $mzero, {PF_PACE}")
    c.one(f"ld32 $m0, $mvertex_base, $mzero, {PF_LOOP}")
    pace = "ldst64pace $a0:1, $a0:1, $m10:11+=, $m8, {}"
    zero = _b("st64pace $azeros, $m10:11+=, $m8, 0")
    c.tag = "panel"
    c.label(f".L{n}_panel")
    c.one("ld64 $a0:1, $m1, $mzero, 0")
    c.one("add $m3, $m1, 8")
    c.one("tapack $m10:11, $m3, $mzero, $m2")
    c.one("br $m0")
    for (g, z, rest), blocks in ((s, b) for b in (False, True) for s in PFG_SHAPES):
        a = g + rest
        # ldst64pace's selectors: load (bits 0-1) field 0 to the next row; store (bits 2-3) field 1 to the next
        # row, and with `blocks` field 2 from the row's first 16-column block to its second (`block_jump`).
        split = 0b1100 if blocks else 0
        full = [
            _b(
                pace.format(
                    (0b0001 if t == a - 2 else 0) | (0b1000 if t == a - 1 else split if t == g - 1 else 0)
                )
            )
            for t in range(a)
        ]
        last = [_b(pace.format(split if t == g - 1 else 0)) for t in range(a - 1)]
        last.append(_b("st64pace $a0:1, $m10:11+=, $m8, 0"))
        shape, loop = _pfg_names(g, z, rest, blocks)
        if loops is not None and loop not in loops:
            continue
        _pf_pad(c)
        c.tag = f"g{shape}"
        c.label(f".L{n}_{loop}")
        c.rpt("$m5", full[:g] + [zero] * z + full[g:], f"row{shape}")
        c.tag = f"last{shape}"
        for m, aux in last[:g] + [zero] * z + last[g:]:
            c.bundle(m, aux)
        c.one(f"bri .L{n}_next")
    _pf_pad(c)
    c.tag = "pnext"
    c.label(f".L{n}_next")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {PF_STEP}")
    c.one("add $m1, $m1, $m3")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {PF_WIDTH}")
    c.one("add $m2, $m2, $m3")
    c.one(f"brnzdec $m9, .L{n}_panel")
    c.exit_and_idle()
    return c


# --- layer norm with every row split across the six workers (`layernorm_split`) -------------------------------------


def _lns_head(c: Code, part: int | None, x32: bool = False) -> None:
    """Slice atoms - 1 in $m4, slice byte offset in $m6 (of the f16 rows), the x slice of row 0 in $m1 (x32: f32
    rows, twice the offset), rows - 1 in $m5, the input row stride in $m9, the partials of row 0 in $m8; part: $m2
    = this worker's partial (byte `part` of a row's)."""
    c.one("get $m0, $WSR")
    c.one("shl $m7, $m0, 2")
    c.one(f"ld32 $m4, $mvertex_base, $m7, {CNT}")
    c.one(f"ld32 $m6, $mvertex_base, $m7, {FIRST}")
    c.one(f"ld32 $m1, $mvertex_base, $mzero, {IN0}")
    c.one("add $m1, $m1, $m6")
    if x32:
        c.one("add $m1, $m1, $m6")
    c.one(f"ld32 $m5, $mvertex_base, $mzero, {LNS_ROWS}")
    c.one(f"ld32 $m9, $mvertex_base, $mzero, {ISTRIDE}")
    c.one(f"ld32 $m8, $mvertex_base, $mzero, {ST0}")
    if part is not None:  # partial w at byte 8 * w: the workers' 32-bit stores never share a 64-bit word
        c.one(f"add $m2, $m8, {part}")
        c.one("add $m2, $m2, $m7")
        c.one("add $m2, $m2, $m7")


def _lns_loop(c: Code, body: list[tuple[str, str]], load_at: int) -> None:
    """`rpt $m4` over `body` with the next atom's load (x at $m3 into $a0:1) as the MAIN of bundle `load_at`, then
    `body` once without it (the slice's last atom): nothing past the slice is read. The caller loads atom 0."""
    ld = "ld64step $a0:1, $mzero, $m3+=, 1"
    c.rpt("$m4", [(ld if i == load_at else m, a) for i, (m, a) in enumerate(body)], "atom")
    for m, a in body:
        c.bundle(m, a)


def _lns_chain(c: Code, word: int, dst: str, first: tuple[str, str], last: str, op: str = "f32add") -> None:
    """dst = ((((p0 + p1) + p2) + p3) + p4) + p5 (op: f32add, or f32max): the six f32 partials at
    $m8 + 4 * (word + 2 * i) (one 64-bit word each), p0..p4 combined in $a0, p5 left in $a1. `first`: AUX of the
    first two loads' bundles; `last`: MAIN of the final op's bundle."""
    c.bundle(f"ld32 $a0, $m8, $mzero, {word}", first[0])
    c.bundle(f"ld32 $a1, $m8, $mzero, {word + 2}", first[1])
    for i in range(2, 6):
        c.bundle(f"ld32 $a{2 - i % 2}, $m8, $mzero, {word + 2 * i}", f"{op} $a0, $a0, $a{1 + i % 2}")
    c.bundle(last, f"{op} {dst}, $a0, $a1")


def _lns_sum_body(centered: bool) -> list[tuple[str, str]]:
    """One atom ($a0:1) into the pair accumulators $a4:5, $a12:13: f32(x) (centered: (f32(x) - $a6:7)^2)."""
    body = [_b("nop", "f16v2tof32 $a2:3, $a0"), _b("nop", "f16v2tof32 $a8:9, $a1")]
    if centered:
        body += [
            _b("nop", "f32v2sub $a2:3, $a2:3, $a6:7"),
            _b("nop", "f32v2sub $a8:9, $a8:9, $a6:7"),
            _b("nop", "f32v2mul $a2:3, $a2:3, $a2:3"),
            _b("nop", "f32v2mul $a8:9, $a8:9, $a8:9"),
        ]
    return body + [_b("nop", "f32v2add $a4:5, $a4:5, $a2:3"), _b("nop", "f32v2add $a12:13, $a12:13, $a8:9")]


def _lns_loop32(c: Code, body: list[tuple[str, str]], loads: tuple[int, ...]) -> None:
    """`layernorm_split32`: `rpt $m4` over `body`, then `body` once with the MAINs at `loads` (the next atom's
    loads) left out: nothing past the slice is read."""
    c.rpt("$m4", body, "atom")
    for i, (m, a) in enumerate(body):
        c.bundle("nop" if i in loads else m, a)


def _lns32_row(c: Code, phase: str, zero: tuple[str, str]) -> None:
    """One row of `layernorm_split32` pass `phase`: x f32, atom = two f32 pairs ($a0:1, $a2:3)."""
    lo, hi = "ld64step $a0:1, $mzero, $m3+=, 1", "ld64step $a2:3, $mzero, $m3+=, 1"
    if phase == "sum":
        c.bundle("add $m3, $m1, 0", zero[0])
        c.bundle(lo, zero[1])
        c.bundle(hi)
        body = [_b(lo, "f32v2add $a4:5, $a4:5, $a0:1"), _b(hi, "f32v2add $a12:13, $a12:13, $a2:3")]
        _lns_loop32(c, body, (0, 1))
    else:  # var
        _lns_chain(c, 0, "$a6", zero, "add $m3, $m1, 0")  # the sum
        c.bundle(lo, "f32mul $a7, $a6, $a10")  # mean = sum * f32(1/n), twice
        c.bundle(hi, "f32mul $a6, $a6, $a10")
        body = [
            _b("nop", "f32v2sub $a8:9, $a0:1, $a6:7"),
            _b(lo, "f32v2sub $a2:3, $a2:3, $a6:7"),
            _b("nop", "f32v2mul $a8:9, $a8:9, $a8:9"),
            _b("nop", "f32v2mul $a2:3, $a2:3, $a2:3"),
            _b("nop", "f32v2add $a4:5, $a4:5, $a8:9"),
            _b(hi, "f32v2add $a12:13, $a12:13, $a2:3"),
        ]
        _lns_loop32(c, body, (1, 5))
    _sum_tail(c, "$a4")
    c.one(f"st32step $a4, $mzero, $m2+=, {LNS_PART // 4}")  # the next row's partial


def _lns_kernel(phase: str, x32: bool = False) -> Code:
    """Pass `phase` of `layernorm_split` (see LNS): sum -> partials[0:6], var -> partials[6:12], norm -> y.
    x32: of `layernorm_split32` (x f32 rows)."""
    c = Code(f"rows_lns{'32' if x32 else ''}_{phase}")
    if phase == "sum":
        _lns_head(c, 0, x32)
    elif phase == "var":
        _lns_head(c, LNS_PART // 2, x32)
        c.one(f"ld32 $a10, $mvertex_base, $mzero, {F0}")  # f32(1/n)
    else:
        _lns_head(c, None, x32)
        c.one(f"ld32 $m2, $mvertex_base, $mzero, {OUT}")
        c.one("add $m2, $m2, $m6")
        for reg, word in (("$m10", IN1), ("$m11", IN2)):  # the weight / bias slices
            c.one(f"ld32 {reg}, $mvertex_base, $mzero, {word}")
            c.one(f"add {reg}, {reg}, $m6")
        c.one("sub $m11, $m11, 8")  # the bias one atom back (see the norm loop)
        c.one(f"ld32 $m6, $mvertex_base, $mzero, {OSTRIDE}")
    c.tag = "row"
    c.label(f".L{c.name}_row")
    zero = ("f32v2add $a4:5, $azeros, $azeros", "f32v2add $a12:13, $azeros, $azeros")
    if x32 and phase != "norm":
        _lns32_row(c, phase, zero)
    elif phase == "sum":
        c.bundle("add $m3, $m1, 0", zero[0])
        c.bundle("ld64step $a0:1, $mzero, $m3+=, 1", zero[1])
    elif phase == "var":
        _lns_chain(c, 0, "$a6", zero, "add $m3, $m1, 0")  # the sum
        c.bundle("ld64step $a0:1, $mzero, $m3+=, 1", "f32mul $a7, $a6, $a10")  # mean = sum * f32(1/n), twice
        c.bundle("nop", "f32mul $a6, $a6, $a10")
    if x32 and phase != "norm":
        pass
    elif phase in ("sum", "var"):
        _lns_loop(c, _lns_sum_body(phase == "var"), 2)
        _sum_tail(c, "$a4")
        c.one(f"st32step $a4, $mzero, $m2+=, {LNS_PART // 4}")  # the next row's partial
    else:
        # mean in $a6:7, rstd = 1 / sqrt(sumsq * f32(1/n) + eps) in $a10:11.
        _lns_chain(c, 0, "$a6", ("fnop", "fnop"), f"ld32 $a12, $mvertex_base, $mzero, {F0}")  # the sum; 1/n
        mean = ("f32mul $a7, $a6, $a12", "f32mul $a6, $a6, $a12")
        _lns_chain(c, 12, "$a8", mean, f"ld32 $a13, $mvertex_base, $mzero, {F1}")  # the sum of squares; eps
        c.bundle("add $m3, $m1, 0", "f32mul $a8, $a8, $a12")  # var
        c.bundle("add $m7, $m2, 0", "f32add $a8, $a8, $a13")
        c.bundle("ld64step $a0:1, $mzero, $m3+=, 1", "f32oorx $a10, $a8")
        c.bundle("setzi $m0, 0", "f32oorx $a11, $a8")  # the weight / bias offset
        # The row's constants as four halves each: r = f16(rstd) in $a12:13, hi = f16(mean) in $a10:11, lo =
        # f16(mean - hi) in $a8:9 (mean - hi is exact in f32).
        c.bundle("nop", "f32v2tof16 $a12, $a10:11")
        c.bundle("nop", "f32v2tof16 $a13, $a10:11")
        c.bundle("nop", "f32v2tof16 $a10, $a6:7")
        c.bundle("nop", "f32v2tof16 $a11, $a6:7")
        c.bundle("nop", "f16v2tof32 $a2:3, $a10")
        c.bundle("nop", "f32v2sub $a2:3, $a6:7, $a2:3")
        c.bundle("nop", "f32v2tof16 $a8, $a2:3")
        c.bundle("nop", "f32v2tof16 $a9, $a2:3")
        # One atom in f16: y = ((((x - hi) - lo) * r) * w) + b, software-pipelined in two stages: stage 0 of
        # atom i (x -> f16 for x32, the subtractions, * r into $a4:5, the load of w(i)) beside stage 1 of atom
        # i - 1 (* w, the load of b into w's register, + b, the store): `rpt $m4` over atoms 1.., stage 0 of atom
        # 0 before it, stage 1 of the last after it (nothing past the slice is read). The bias pointer $m11 is
        # one atom back: the offset $m0 has already stepped past atom i - 1 when its bias loads.
        load_x = "ld64step $a0:1, $mzero, $m3+=, 1"
        stage1 = {  # bundle -> (MAIN, AUX) of atom i - 1's stage 1 in the loop body
            "mul_w": "f16v4mul $a4:5, $a4:5, $a6:7",
            "load_b": "ld64 $a6:7, $m11, $m0, 0",
            "add_b": "f16v4add $a4:5, $a4:5, $a6:7",
            "store": "st64step $a4:5, $mzero, $m7+=, 1",
        }
        load_w = "ld64step $a6:7, $m10, $m0+=, 1"
        sub_hi, sub_lo = "f16v4sub $a2:3, $a0:1, $a10:11", "f16v4sub $a2:3, $a2:3, $a8:9"
        mul_r = "f16v4mul $a4:5, $a2:3, $a12:13"
        if x32:  # the atom's f32 pairs: $a0:1 (loaded first), $a2:3
            load_hi = "ld64step $a2:3, $mzero, $m3+=, 1"
            lo16, hi16 = "f32v2tof16 $a0, $a0:1", "f32v2tof16 $a1, $a2:3"
            prologue = [_b(load_hi, lo16), _b(load_w, hi16), _b("nop", sub_hi), _b("nop", sub_lo)]
            body = [
                _b(load_x, stage1["mul_w"]),
                _b(stage1["load_b"], lo16),
                _b(load_hi, stage1["add_b"]),
                _b(stage1["store"], hi16),
                _b(load_w, sub_hi),
                _b("nop", sub_lo),
                _b("nop", mul_r),
            ]
        else:
            prologue = [_b(load_w, sub_hi), _b("nop", sub_lo)]
            body = [
                _b(load_x, stage1["mul_w"]),
                _b(stage1["load_b"], sub_hi),
                _b("nop", stage1["add_b"]),
                _b(stage1["store"], sub_lo),
                _b(load_w, mul_r),
            ]
        for m, a in prologue + [_b("nop", mul_r)]:  # stage 0 of atom 0 (x loaded above)
            c.bundle(m, a)
        c.rpt("$m4", body, "atom")
        c.bundle("nop", stage1["mul_w"])  # stage 1 of the last atom
        c.bundle(stage1["load_b"])
        c.bundle("nop", stage1["add_b"])
        c.bundle(stage1["store"])
        c.one("add $m2, $m2, $m6")
    c.one("add $m1, $m1, $m9")
    if phase != "sum":
        c.one(f"add $m8, $m8, {LNS_PART}")
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.tag = "tail"
    c.one("exitz $mzero")
    return c


# --- softmax with every row split across the six workers (`softmax_split`) -----------------------------------------


def _sms_head(c: Code, part: int | None) -> None:
    """Slice atoms - 1 in $m4, slice byte offset in $m6, rows - 1 in $m5, the partials of row 0 in $m8; $m0 = the
    mask's byte offset from K1 (8 on the last worker, whose slice ends with the masked atom: K1 + 1 = the tail
    mask; 0 on the others: K1 = +inf, min(x, +inf) = x); part: $m2 = this worker's partial (byte `part` of a
    row's)."""
    c.one("get $m0, $WSR")
    c.one("shl $m7, $m0, 2")
    c.one(f"ld32 $m4, $mvertex_base, $m7, {CNT}")
    c.one(f"ld32 $m6, $mvertex_base, $m7, {FIRST}")
    c.one(f"ld32 $m5, $mvertex_base, $mzero, {SMS_ROWS}")
    c.one(f"ld32 $m8, $mvertex_base, $mzero, {ST0}")
    if part is not None:  # partial w at byte 8 * w: the workers' 32-bit stores never share a 64-bit word
        c.one(f"add $m2, $m8, {part}")
        c.one("add $m2, $m2, $m7")
        c.one("add $m2, $m2, $m7")
    c.one("add $m0, $m0, 3")
    c.one("and $m0, $m0, 8")  # worker 5: 8, workers 0..4: 0


def _sms_ptr(c: Code, reg: str, word: int) -> None:
    """reg = frame[word] + the slice's byte offset ($m6)."""
    c.one(f"ld32 {reg}, $mvertex_base, $mzero, {word}")
    c.one(f"add {reg}, {reg}, $m6")


# One atom of pass 2 (x in $a0:1, the max as 4 halves in $a8:9), in f16: d = x - max, e = exp(d) stored (bundle
# 3) and summed in f32 pairs ($a4:5 / $a12:13); the next atom's load goes into bundle 1 (after the subtraction read
# $a0:1).
SMS_EXP_BODY = [
    _b("nop", "f16v4sub $a2:3, $a0:1, $a8:9"),
    _b("nop", "f16v2exp $a2, $a2"),
    _b("nop", "f16v2exp $a3, $a3"),
    _b("st64step $a2:3, $mzero, $m7+=, 1", "f16v2tof32 $a10:11, $a2"),
    _b("nop", "f16v2tof32 $a6:7, $a3"),
    _b("nop", "f32v2add $a4:5, $a4:5, $a10:11"),
    _b("nop", "f32v2add $a12:13, $a12:13, $a6:7"),
]
# Two atoms of pass 2 (the first in $a0:1; the second loads beside the first's subtraction, the next pair's first
# beside the second's first exponential): both e stored, their f16 sum (f16v4add) converted and summed in the f32
# pairs, so 11 bundles per two atoms instead of 14.
SMS_EXP_PAIR = [
    _b("ld64step $a0:1, $mzero, $m3+=, 1", "f16v4sub $a2:3, $a0:1, $a8:9"),
    _b("nop", "f16v2exp $a2, $a2"),
    _b("nop", "f16v2exp $a3, $a3"),
    _b("st64step $a2:3, $mzero, $m7+=, 1", "f16v4sub $a6:7, $a0:1, $a8:9"),
    _b("ld64step $a0:1, $mzero, $m3+=, 1", "f16v2exp $a6, $a6"),
    _b("nop", "f16v2exp $a7, $a7"),
    _b("st64step $a6:7, $mzero, $m7+=, 1", "f16v4add $a10:11, $a2:3, $a6:7"),
    _b("nop", "f16v2tof32 $a2:3, $a10"),
    _b("nop", "f16v2tof32 $a6:7, $a11"),
    _b("nop", "f32v2add $a4:5, $a4:5, $a2:3"),
    _b("nop", "f32v2add $a12:13, $a12:13, $a6:7"),
]
# One atom of pass 3 (e in $a0:1, f16(1/sum) as 4 halves in $a8:9): y = e * (1/sum) in f16; the next atom loads
# beside the product (which reads $a0:1 first).
SMS_SCALE_BODY = [
    _b("nop", "f16v4mul $a2:3, $a0:1, $a8:9"),
    _b("st64step $a2:3, $mzero, $m7+=, 1"),
]


def _sms_epilogue(c: Code, body: list[tuple[str, str]], mains: dict[int, str], aux: dict[int, str]) -> None:
    """`body` once more for the slice's last atom (no load after it), MAINs / AUXes of some bundles replaced."""
    for i, (m, a) in enumerate(body):
        c.bundle(mains.get(i, m), aux.get(i, a))


def _sms_zero_kernel() -> Code:
    """`softmax_split_e`'s third pass: the last worker writes each row's zero atoms (va..n/4, at byte F0 of the
    row); the others exit (so does the last one when there are none). Tags: head, none (no zeros), zhead, row,
    zero (per atom), tail."""
    c = Code("rows_sms_zero")
    c.one("get $m0, $WSR")
    c.one("add $m0, $m0, 3")
    c.one("and $m0, $m0, 8")  # worker 5: 8, workers 0..4: 0
    c.one(f"ld32 $m9, $mvertex_base, $mzero, {ZATOMS}")
    c.one("mul $m9, $m9, $m0")  # zero atoms x 8 on the last worker, else 0
    c.tag = "none"
    c.one(f"brz $m9, .L{c.name}_idle")
    c.tag = "zhead"
    c.one("shr $m9, $m9, 3")
    c.one(f"ld32 $m5, $mvertex_base, $mzero, {SMS_ROWS}")
    c.one(f"ld32 $m2, $mvertex_base, $mzero, {OUT}")
    c.one(f"ld32 $m3, $mvertex_base, $mzero, {F0}")
    c.one("add $m2, $m2, $m3")
    c.one(f"ld32 $m6, $mvertex_base, $mzero, {OSTRIDE}")
    c.tag = "row"
    c.label(f".L{c.name}_row")
    c.one("add $m7, $m2, 0")
    c.rpt("$m9", [_b("st64step $azeros, $mzero, $m7+=, 1")], "zero")
    c.one("add $m2, $m2, $m6")
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.exit_and_idle()
    return c


def _sms_kernel(phase: str) -> Code:
    """Pass `phase` of `softmax_split` (see SMS): max -> partials[0:6], exp -> e in y and partials[6:12], scale ->
    y; zero: `softmax_split_e`'s zero atoms."""
    if phase == "zero":
        return _sms_zero_kernel()
    c = Code(f"rows_sms_{phase}")
    loop = "rpt $m4, {}"
    if phase == "max":
        _sms_head(c, 0)
        _sms_ptr(c, "$m1", IN0)
        c.one(f"ld32 $m9, $mvertex_base, $mzero, {ISTRIDE}")
        c.one(f"ld64 $a10:11, $mvertex_base, $m0, {K1}")  # the last atom's mask
        c.one(f"ld64 $a12:13, $mvertex_base, $mzero, {CONST // 2}")  # 4 x -inf
        c.tag = "row"
        c.label(f".L{c.name}_row")
        c.bundle("add $m3, $m1, 0", "f16v4max $a4:5, $a12:13, $a12:13")  # the f16 max: -inf
        c.bundle(SMS_LOAD)
        c.bundle(loop.format(0))  # the max of atom i while atom i + 1 is loaded
        c.tag = "atom"
        c.bundle(SMS_LOAD, "f16v4max $a4:5, $a4:5, $a0:1")
        c.tag = "row"
        c.bundle("nop", "f16v4min $a0:1, $a0:1, $a10:11")  # the last atom, masked
        c.bundle("nop", "f16v4max $a4:5, $a4:5, $a0:1")
        c.bundle("nop", "f16v2tof32 $a0:1, $a4")
        c.bundle("nop", "f16v2tof32 $a2:3, $a5")
        c.bundle("add $m1, $m1, $m9", "f32v2max $a0:1, $a0:1, $a2:3")
        c.bundle("nop", "f32max $a0, $a0, $a1")
        c.one(f"st32step $a0, $mzero, $m2+=, {SMS_PART // 4}")  # the next row's partial
    elif phase == "exp":
        _sms_head(c, SMS_PART // 2)
        _sms_ptr(c, "$m1", IN0)
        _sms_ptr(c, "$m10", OUT)
        c.one(f"ld32 $m9, $mvertex_base, $mzero, {ISTRIDE}")
        c.one(f"ld32 $m6, $mvertex_base, $mzero, {OSTRIDE}")
        c.one("and $m11, $m4, 1")  # the slice's atoms before the masked last one: pairs, and one more if odd
        c.one("shr $m4, $m4, 1")
        c.tag = "row"
        c.label(f".L{c.name}_row")
        c.one("add $m7, $m10, 0")
        zero = ("f32v2add $a4:5, $azeros, $azeros", "f32v2add $a12:13, $azeros, $azeros")
        _lns_chain(c, 0, "$a6", zero, "add $m3, $m1, 0", op="f32max")  # the row max, twice
        c.bundle(SMS_LOAD, "f32max $a7, $a0, $a1")
        c.bundle("nop", "f32v2tof16 $a8, $a6:7")  # as four halves (exact: the max of f16 values)
        c.bundle("nop", "f32v2tof16 $a9, $a6:7")
        c.bundle(loop.format(len(SMS_EXP_PAIR) - 1))
        c.tag = "pair"
        for m, a in SMS_EXP_PAIR:
            c.bundle(m, a)
        c.tag = "row"
        c.one(f"brz $m11, .L{c.name}_even")
        c.tag = "single"  # (with the alignment nop after the branch)
        for i, (m, a) in enumerate(SMS_EXP_BODY):
            c.bundle(SMS_LOAD if i == 1 else m, a)
        c.tag = "row"
        c.label(f".L{c.name}_even")
        c.bundle(f"ld64 $a10:11, $mvertex_base, $m0, {K1}")  # the last atom's mask
        c.bundle("nop", "f16v4min $a0:1, $a0:1, $a10:11")
        mains = {1: "add $m1, $m1, $m9", 2: "add $m10, $m10, $m6", 4: f"add $m8, $m8, {SMS_PART}"}
        _sms_epilogue(c, SMS_EXP_BODY, mains, {})
        _sum_tail(c, "$a4")
        c.one(f"st32step $a4, $mzero, $m2+=, {SMS_PART // 4}")
    else:
        _sms_head(c, None)
        _sms_ptr(c, "$m2", OUT)
        c.one(f"ld32 $m6, $mvertex_base, $mzero, {OSTRIDE}")
        c.one(f"ld32 $m9, $mvertex_base, $mzero, {ZATOMS}")  # the row's zero atoms: the last worker's
        c.one("shr $m0, $m0, 3")
        c.one("mul $m9, $m9, $m0")
        c.tag = "row"
        c.label(f".L{c.name}_row")
        _lns_chain(c, SMS_PART // 8, "$a4", ("fnop", "fnop"), "add $m3, $m2, 0")  # the sum
        c.bundle("add $m7, $m2, 0", "f32oox $a6, $a4")
        c.bundle(SMS_LOAD, "f32oox $a7, $a4")
        c.bundle("nop", "f32v2tof16 $a8, $a6:7")  # f16(1/sum), four times
        c.bundle("nop", "f32v2tof16 $a9, $a6:7")
        c.bundle(loop.format(len(SMS_SCALE_BODY) - 1))
        c.tag = "atom"
        for i, (m, a) in enumerate(SMS_SCALE_BODY):
            c.bundle(SMS_LOAD if i == 0 else m, a)
        c.tag = "row"
        _sms_epilogue(c, SMS_SCALE_BODY, {0: "add $m2, $m2, $m6"}, {})
        c.one(f"add $m8, $m8, {SMS_PART}")
        c.rpt("$m9", [_b("st64step $azeros, $mzero, $m7+=, 1")], "zero")
    c.one(f"brnzdec $m5, .L{c.name}_row")
    c.tag = "tail"
    c.one("exitz $mzero")
    return c


LNS_SUPERVISOR = """
.globl rows_lns_sup
.supervisor
rows_lns_sup:
    ld32 $m1, $m0, $mzero, {entry}
    setzi $m2, {sram_base}
    sub $m2, $m0, $m2
    runall $m1, $m2, 0
    ld32 $m3, $m0, $mzero, {e2}
    ld32 $m4, $m0, $mzero, {e3}
    sync TEXCH_SYNCZONE_LOCAL
    runall $m3, $m2, 0
    sync TEXCH_SYNCZONE_LOCAL
    runall $m4, $m2, 0
    sync TEXCH_SYNCZONE_LOCAL
    br $lr
"""


SUPERVISOR = """
.globl rows_sup
.supervisor
rows_sup:
    ld32 $m1, $m0, $mzero, {entry}
    setzi $m2, {sram_base}
    sub $m2, $m0, $m2
    runall $m1, $m2, 0
    sync TEXCH_SYNCZONE_LOCAL
    br $lr
"""
SUP = 1 + 2 + 6 + 6  # ld32, setzi + sub, sync release, br (runall overlaps the workers)
LNS_SUP = 1 + 2 + 6 + 6 + 6 + 6  # as SUP with two more sync releases (the entry loads overlap pass 1)
SMS_SUPERVISOR = LNS_SUPERVISOR.replace("rows_lns_sup", "rows_sms_sup")  # the same three-pass supervisor
IDLE = 5  # get, shl, ld32, brz, exitz


def _ot_kernel() -> Code:
    """to_f32_scaled_t: y[q, d] = f32(x[d, q]) * (1 / f32(x[n, q])), l = f32(x[n, q]) at byte st0 of row q.

    The work is R / 4 groups of four rows (one f16 atom of every input row) x n columns, cut into six contiguous
    ranges in group-major order: a worker walks segments (one group, consecutive columns). Per segment: the four
    output rows' pointers (rows past R point at the group's last row, and the four stores of a column go from the
    highest row down, so that row's own value is the one left), the group's l atom as two f32 pairs (stored where a
    segment starts the group's columns), their reciprocals (`f32oox`, as `to_f32_scaled_l`), then per column one
    atom load, two conversions, two products and four `st32` (5 bundles, software pipelined)."""
    c = Code("rows_to_f32_scaled_t")
    c.one("get $m0, $WSR")
    c.one("shl $m11, $m0, 2")
    c.one(f"ld32 $m7, $mvertex_base, $m11, {CNT}")
    c.one(f"brz $m7, .L{c.name}_idle")
    c.one(f"ld32 $m9, $mvertex_base, $m11, {FIRST}")
    c.one(f"ld32 $m8, $mvertex_base, $m11, {OT_G0}")
    c.label(f".L{c.name}_seg")
    c.tag = "seg"
    c.one(f"ld32 $m10, $mvertex_base, $mzero, {ATOMS}")
    c.one("sub $m10, $m10, $m9")
    c.one("min $m10, $m10, $m7")  # the segment's columns
    c.one("sub $m7, $m7, $m10")
    c.one(f"ld32 $m11, $mvertex_base, $mzero, {OSTRIDE}")
    c.one("shl $m0, $m8, 2")
    c.one("mul $m3, $m0, $m11")
    c.one(f"ld32 $m1, $mvertex_base, $mzero, {OUT}")
    c.one("add $m3, $m3, $m1")  # row 4g
    c.one(f"ld32 $m1, $mvertex_base, $mzero, {OT_LAST}")
    c.one("sub $m0, $m1, $m0")  # the group's last row - 4g
    for i, reg in ((1, "$m4"), (2, "$m5"), (3, "$m6")):
        c.one(f"min {reg}, $m0, {i}")
        c.one(f"mul {reg}, {reg}, $m11")
        c.one(f"add {reg}, {reg}, $m3")
    c.one("shl $m0, $m8, 3")
    c.one(f"ld32 $m1, $mvertex_base, $mzero, {IN0}")
    c.one("add $m0, $m0, $m1")  # the group's first atom of row 0
    c.one(f"ld32 $m1, $mvertex_base, $mzero, {OT_LROW}")
    c.one("ld64 $a0:1, $m0, $m1, 0")  # the group's l atom
    c.one(f"ld32 $m11, $mvertex_base, $mzero, {ISTRIDE}")
    c.one("mul $m1, $m9, $m11")
    c.one("add $m1, $m1, $m0")  # the segment's first atom
    c.one("shl $m2, $m9, 2")  # its column's byte offset in the output rows
    c.one(f"ld32 $m11, $mvertex_base, $mzero, {OT_STEP}")
    c.bundle("nop", "f16v2tof32 $a4:5, $a0")
    c.bundle("nop", "f16v2tof32 $a6:7, $a1")
    c.one(f"brnz $m9, .L{c.name}_recip")
    c.tag = "lstore"  # the segment that starts the group's columns stores its l (the highest row first)
    c.one(f"ld32 $m0, $mvertex_base, $mzero, {ST0}")
    for a, reg in (("$a7", "$m6"), ("$a6", "$m5"), ("$a5", "$m4"), ("$a4", "$m3")):
        c.one(f"st32 {a}, {reg}, $m0, 0")
    c.tag = "seg"
    c.label(f".L{c.name}_recip")
    for a in ("$a4", "$a5", "$a6", "$a7"):
        c.bundle("nop", f"f32oox {a}, {a}")
    c.one("sub $m10, $m10, 1")
    c.bundle("ld64step $a0:1, $mzero, $m1+=, $m11")
    c.bundle("nop", "f16v2tof32 $a12:13, $a1")
    c.bundle("nop", "f32v2mul $a12:13, $a12:13, $a6:7")
    c.bundle("nop", "f16v2tof32 $a10:11, $a0")
    body = [  # column i's load and conversions beside column i - 1's stores (a bundle reads the old registers)
        _b("ld64step $a0:1, $mzero, $m1+=, $m11", "f32v2mul $a10:11, $a10:11, $a4:5"),
        _b("st32 $a13, $m6, $m2, 0"),
        _b("st32 $a12, $m5, $m2, 0", "f16v2tof32 $a12:13, $a1"),
        _b("st32 $a11, $m4, $m2, 0", "f32v2mul $a12:13, $a12:13, $a6:7"),
        _b("st32step $a10, $m3, $m2+=, 1", "f16v2tof32 $a10:11, $a0"),
    ]
    c.rpt("$m10", body, "item")
    c.bundle("nop", "f32v2mul $a10:11, $a10:11, $a4:5")
    c.bundle("st32 $a13, $m6, $m2, 0")
    c.bundle("st32 $a12, $m5, $m2, 0")
    c.bundle("st32 $a11, $m4, $m2, 0")
    c.bundle("st32 $a10, $m3, $m2, 0")
    c.one(f"brz $m7, .L{c.name}_done")
    c.tag = "next"
    c.one("add $m8, $m8, 1")
    c.one("add $m9, $mzero, 0")
    c.one(f"bri .L{c.name}_seg")
    c.label(f".L{c.name}_done")
    c.exit_and_idle()
    return c


def ot_segments(k: Rows, first: int, count: int) -> list[tuple[int, int, int]]:
    """to_f32_scaled_t: a worker's segments (group, first column, columns) for its items first .. first + count."""
    out, n = [], k.n
    while count:
        g, d = divmod(first, n)
        cols = min(n - d, count)
        out.append((g, d, cols))
        first, count = first + cols, count - cols
    return out


def worker_code(op: str, phase: str = "norm") -> Code:
    """The worker body of `op` (layernorm_split / softmax_split: the body of pass `phase`, one of LNS / SMS)."""
    if op in ("layernorm_split", "layernorm_split32"):
        return _lns_kernel(phase, op == "layernorm_split32")
    if op in SMS_OPS:
        return _sms_kernel(phase if op == "softmax_split" or phase != "scale" else "zero")
    if op == "panels_f16":
        return _pf_kernel()
    if op == "panels_gap_f16":
        return _pfg_kernel()
    if op == "to_f32_scaled_t":
        return _ot_kernel()
    if op in MERGE_CHUNKS:
        return _merge_kernel(op)
    return _gelu_kernel() if op == "gelu" else _row_kernel(op)


def library_asm(
    sram_base: int = 0x4C000,
    ops=OPS,
    pf_atoms: tuple[int, ...] = PF_FAST_ATOMS,
    pfg_loops: tuple[str, ...] | None = None,
) -> str:
    """The supervisors and worker bodies of `ops`; `panels_f16` with the rows loops of the panel widths `pf_atoms`
    (atoms, from PF_FAST_ATOMS: the ones a program's calls use, `Rows.pf_fast`) only, `panels_gap_f16` with the
    rows loops `pfg_loops` (`Rows.pfg_loop`'s label suffixes; None: all) only: code on every tile."""
    parts = [SUPERVISOR.format(entry=ENTRY, sram_base=sram_base)]
    lns_sup = False
    for op in ops:
        if op in ("layernorm_split", "layernorm_split32"):
            if not lns_sup:
                parts.append(LNS_SUPERVISOR.format(entry=ENTRY, e2=LNS_E2, e3=LNS_E3, sram_base=sram_base))
                lns_sup = True
            parts += [_lns_kernel(phase, op == "layernorm_split32").text() for phase in LNS]
        elif op == "softmax_split":
            parts.append(SMS_SUPERVISOR.format(entry=ENTRY, e2=SMS_E2, e3=SMS_E3, sram_base=sram_base))
            parts += [_sms_kernel(phase).text() for phase in SMS]
        elif op == "softmax_split_e":  # its passes max and exp are softmax_split's (listed before it)
            parts.append(_sms_kernel("zero").text())
        elif op == "panels_f16":
            parts.append(_pf_kernel(tuple(a for a in PF_FAST_ATOMS if a in pf_atoms)).text())
        elif op == "panels_gap_f16":
            parts.append(_pfg_kernel(pfg_loops).text())
        else:
            parts.append(worker_code(op).text())
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------------------------------
# Call descriptor
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rows:
    """One call. `rows` rows of `n` elements (gelu: `rows` = 4-half units, n unused). Addresses in bytes:
    in0 / in1 / in2 / out as in the module table; st0..st2 = per-row f32 state (flash: m, l, alpha; merge: alpha;
    final: l). Strides default to contiguous rows."""

    op: str
    rows: int
    n: int = 4
    in0: int = 0
    in1: int = 0
    in2: int = 0
    out: int = 0
    st0: int = 0
    st1: int = 0
    st2: int = 0
    eps: float = 1e-6
    in_stride: int | None = None
    out_stride: int | None = None
    valid: int | None = None  # softmax / to_f16: elements read per row (default n); the rest written as zeros
    scale: float = 1.0  # to_f16
    panels: int = 0  # panels_f16: column panels (each `panel_width` halves wide)
    panel_width: int = 0  # panels_f16: P
    panel_step: int | None = None  # panels_f16: bytes from panel j to panel j + 1 (default rows * in_stride)
    gap_at: int = 0  # panels_gap_f16: halves of each panel row before its zeros
    gap: int = 0  # panels_gap_f16: zero halves after them
    # panels_gap_f16 with gap_at = 16: bytes from a row's first 16-column block of a panel to its second, and
    # 2 * block_jump from panel to panel (F16 AMP weight panels: 512); 0: each row's columns contiguous.
    block_jump: int = 0
    # attn_merge over `heads` operand blocks (a power of two; their rows interleaved: row i is row i / heads of
    # block i % heads, blocks head_step bytes apart), whose rows land side by side in the output rows
    heads: int = 1
    head_step: int = 0

    def __post_init__(self):
        if self.op not in OPS:
            raise ValueError(f"unknown row op {self.op!r}")
        if self.heads != 1 or self.head_step:
            if self.op not in MERGE_CHUNKS:
                raise ValueError(f"{self.op}: heads / head_step are for attn_merge only")
            if (
                self.heads < 1
                or self.heads & (self.heads - 1)
                or self.rows % self.heads
                or self.head_step < 0
            ):
                raise ValueError(
                    f"{self.op}: heads = {self.heads} must be a power of two dividing the {self.rows} rows, and "
                    f"head_step ({self.head_step}) a byte count"
                )
        if self.op in ("panels_f16", "panels_gap_f16"):
            self._check_panels()
        elif self.panels or self.panel_width or self.panel_step is not None:
            raise ValueError(f"{self.op}: panels / panel_width / panel_step are for panels_f16 only")
        if self.op == "panels_gap_f16":
            p, g, z = self.panel_width, self.gap_at, self.gap
            shape = (g // 4, z // 4, (p - g) // 4)
            if shape not in PFG_SHAPES or g % 4 or z % 4 or self.n != self.panels * (p + z):
                raise ValueError(
                    f"panels_gap_f16 needs (gap_at, gap, P - gap_at) / 4 atoms in {PFG_SHAPES} (got {g}, {z}, {p - g} "
                    f"halves) and n = panels * (P + gap) = {self.panels * (p + z)}, got n = {self.n}"
                )
            if self.block_jump and (g != 16 or self.block_jump % 8 or self.block_jump < 32):
                raise ValueError(
                    f"panels_gap_f16: block_jump = {self.block_jump} needs gap_at = 16 (got {g}) and a multiple of 8 "
                    "bytes past the first block"
                )
            if self.block_jump and self.rows > 96:
                raise ValueError(
                    f"panels_gap_f16 with block_jump: at most 96 rows (a 16-row group per worker), got {self.rows}"
                )
            if any(not -PACE_FIELD <= j < PACE_FIELD for j in self.pfg_jumps()):
                raise ValueError(
                    f"panels_gap_f16: row jumps {self.pfg_jumps()} (atoms) exceed the pace stride fields"
                )
        elif self.gap_at or self.gap or self.block_jump:
            raise ValueError(f"{self.op}: gap_at / gap / block_jump are for panels_gap_f16 only")
        if self.op != "gelu" and (self.n % 4 or self.n < 4):
            raise ValueError(f"rows need n % 4 == 0 and n >= 4, got n={self.n}")
        if self.op in LNS_OPS:
            if self.n < LNS_MIN_N:
                raise ValueError(
                    f"layernorm_split needs n >= {LNS_MIN_N} (an atom per worker), got n={self.n}"
                )
            if self.rows < 1:
                raise ValueError("layernorm_split needs rows >= 1")
            if self.st0 % 8:
                raise ValueError(
                    f"layernorm_split: the partials (st0 = {self.st0:#x}) must be 8-byte aligned"
                )
            if not self.eps >= LNS_MIN_EPS:
                raise ValueError(
                    f"layernorm_split: eps {self.eps} < {LNS_MIN_EPS}: 1 / sqrt(eps) would not fit the f16 rstd"
                )
        if self.op in SMS_OPS:
            if self.nvalid < SMS_MIN_VALID:
                raise ValueError(
                    f"softmax_split needs >= {SMS_MIN_VALID} valid elements (an atom per worker), "
                    f"got {self.nvalid}"
                )
            if self.rows < 1:
                raise ValueError("softmax_split needs rows >= 1")
            if self.st0 % 8:
                raise ValueError(f"softmax_split: the partials (st0 = {self.st0:#x}) must be 8-byte aligned")
        if self.op == "softmax_mt" and (self.n % 16 or self.out % 8):
            raise ValueError(
                f"softmax_mt writes whole 16-key weight blocks: n = {self.n} must be a multiple of 16 and the "
                f"panels (out = {self.out:#x}) 8-byte aligned"
            )
        if self.op in ("softmax_e", "softmax_m", "softmax_mt") and (
            self.st0 % 4 or self.ml_stride % 4 or self.ml_stride < 8
        ):
            raise ValueError(
                f"{self.op}: the (m, l) pairs (st0 = {self.st0:#x}, stride {self.ml_stride}) need 4-byte alignment "
                "and a stride of at least 8 bytes"
            )
        if self.op == "to_f32_scaled_t" and (
            self.istride < 8 * -(-self.rows // 4) or self.st0 % 4 or self.ostride % 4 or self.rows < 1
        ):
            raise ValueError(
                f"to_f32_scaled_t: the input rows ({self.istride} bytes apart) hold the output rows as columns: at "
                f"least {8 * -(-self.rows // 4)} bytes for {self.rows} rows (whole atoms), l's offset st0 "
                f"({self.st0}) and the output stride ({self.ostride}) whole words"
            )
        if self.op == "to_f32_scaled_l" and self.istride < 2 * self.n + 4:
            raise ValueError(
                f"to_f32_scaled_l: l is read as the f16 pair after an input row's {self.n} columns: the input "
                f"rows need a stride of at least {2 * self.n + 4} bytes, got {self.istride}"
            )
        if self.valid is not None:
            softmaxes = (
                "softmax",
                "softmax_split",
                "softmax_split_e",
                "softmax_e",
                "softmax_m",
                "softmax_mt",
            )
            if self.op not in PADDED + softmaxes:
                raise ValueError(f"{self.op}: a valid length is for {', '.join(PADDED + softmaxes[1:])} only")
            lo = 4 if self.op == "cast_f16" else 1 if self.op in softmaxes else 0
            if not lo <= self.valid <= self.n or (self.op not in softmaxes and self.valid % 4):
                raise ValueError(
                    f"{self.op}: valid length {self.valid} must be in [{lo}, n={self.n}]"
                    + (" and a multiple of 4" if self.op not in softmaxes else "")
                )
        for s in (self.istride, self.ostride if self.op not in ("rowsum", "rowmax") else 8):
            if s % 8:
                raise ValueError(f"row strides must be multiples of 8 bytes, got {s}")

    def _check_panels(self) -> None:
        p, k = self.panel_width, self.panels
        if k < 1:
            raise ValueError(f"panels_f16 needs panels >= 1, got {k}")
        if not pf_width_ok(p):
            raise ValueError(f"panels_f16 needs panel_width % 4 == 0 and >= {PF_MIN_P}, got {p}")
        if self.n % 4 or self.n < k * p:
            raise ValueError(f"panels_f16 needs n % 4 == 0 and n >= panels * P = {k * p}, got {self.n}")
        if self.rows < 0:
            raise ValueError(f"panels_f16 needs rows >= 0, got {self.rows}")
        for name in ("in0", "out"):
            if getattr(self, name) % 8:
                raise ValueError(f"panels_f16: {name} = {getattr(self, name):#x} must be 8-byte aligned")
        if self.pstep % 8:
            raise ValueError(f"panels_f16: panel_step must be a multiple of 8 bytes, got {self.pstep}")

    @property
    def pstep(self) -> int:
        """panels_f16: the panel step in bytes."""
        return self.rows * self.istride if self.panel_step is None else self.panel_step

    def pf_jumps(self) -> tuple[int, int]:
        """panels_f16's pace jumps (atoms): the load address from a row's last atom to the next row's first, the
        same for the store address."""
        a = self.panel_width // 4
        return self.istride // 8 - a + 1, self.ostride // 8 - a + 1

    @property
    def pf_fast(self) -> bool:
        """panels_f16 on the pace path with a rows loop of its own for its panel width (PF_FAST_ATOMS)."""
        return self.op == "panels_f16" and pf_own_loop(self.panel_width) and self.pf_pace

    @property
    def pf_pace(self) -> bool:
        """panels_f16 takes the pace path: the jumps fit the stride fields and no bundle's load and store hit one
        bank (the simulator's rule: region 0, one 16 KiB element; region 1, one 32 KiB element and the same bit 3)."""
        if any(not -PACE_FIELD <= j < PACE_FIELD for j in self.pf_jumps()):
            return False
        return not _pf_bank_clash(
            self.in0,
            self.out,
            self.pstep,
            self.istride,
            self.ostride,
            self.rows,
            self.panels,
            self.panel_width,
        )

    @property
    def ml_stride(self) -> int:
        """softmax_e: bytes between the rows' (m, l) pairs (st1; 0: contiguous pairs)."""
        return self.st1 or 8

    @property
    def nvalid(self) -> int:
        return self.n if self.valid is None else self.valid

    def reps(self) -> dict[str, int]:
        """Repetitions per row of each counted loop body (tag -> count): the cycle estimate's multipliers."""
        atoms = self.n // 4
        if self.op == "softmax":
            va = -(-self.nvalid // 4)  # atoms holding valid elements; the last one is masked
            return {"atom0": va - 1, "atom1": va - 1, "atom2": va, "zero": atoms - va}
        if self.op == "softmax_m":
            va = -(-self.nvalid // 4)
            p = (va - 1) // 2
            return {"atom0": va - 1, "pair1": int(p > 0), "pair": max(p - 1, 0), "single": (va - 1) % 2,
                    "zero": atoms - va}  # fmt: skip
        if self.op == "softmax_mt":
            va = -(-self.nvalid // 4)
            fq, t = divmod(va - 1, 4)
            return {"atom0": va - 1, "quad1": int(fq > 0), "quad": max(fq - 1, 0), "single": t, "zero": 3 - t,
                    "zquad": self.n // 16 - fq - 1}  # fmt: skip
        if self.op == "fill_f16":
            return {"atom0": atoms}
        if self.op in MERGE_CHUNKS:  # the first pair of columns is peeled
            return {"pair": 2 * atoms - 1}
        if self.op in TO_F32_SCALED:  # pipelined from two atoms on; one atom: `single`
            return {"atom0": max(atoms - 2, 0), "pipe": int(atoms > 1), "single": int(atoms == 1)}
        if self.op == "softmax_e":
            va = -(-self.nvalid // 4)
            return {"atom0": va - 1, "pair": (va - 1) // 2, "single": (va - 1) % 2, "zero": atoms - va}
        if self.op in ("to_f16", "pad_f16"):
            return {"atom0": self.nvalid // 4, "zero": atoms - self.nvalid // 4}
        if self.op == "cast_f16":  # the first atom's loads and the last atom's conversion are per row
            return {"atom0": self.nvalid // 4 - 1, "zero": atoms - self.nvalid // 4}
        return {"atom0": atoms, "atom1": atoms, "atom2": atoms}

    @property
    def istride(self) -> int:
        if self.op == "gelu":
            return 8
        if self.in_stride is not None:
            return self.in_stride
        if self.op in ("panels_f16", "panels_gap_f16"):
            return 2 * self.panel_width
        if self.op == "to_f32_scaled_t":  # the rows as columns: whole atoms of them
            return 8 * -(-self.rows // 4)
        return (self.nvalid if self.op in PADDED[1:] else self.n) * ESIZES[self.op][0]

    @property
    def ostride(self) -> int:
        if self.op == "gelu":
            return 8
        if self.op in ("rowsum", "rowmax"):
            return 4
        if self.op == "flash_merge":
            return self.istride  # o is updated in place
        return self.out_stride if self.out_stride is not None else self.n * ESIZES[self.op][1]

    def merge_split(self) -> list[tuple[int, int, tuple[int, int, int] | None]]:
        """attn_merge's work per worker: (first whole row, whole rows, its part of a row: (row, first pair of
        columns, pairs) or None). Whole rows by the quotient/remainder split, unless R % 6 divides 6: then each
        worker takes R // 6 whole rows and a 1 / (6 / (R % 6)) part of one of the R % 6 rows left over (So400m's
        8-row blocks: one row and a third each, not two rows on two workers), when that estimate is lower."""
        pairs = self.n // 2
        q, rem = divmod(self.rows, 6)
        whole = [(first, cnt, None) for first, cnt in split(self.rows)]
        if not rem or 6 % rem or pairs // (6 // rem) < 2 or self.rows >= 1 << 8 or pairs >= 1 << 12:
            return whole
        k = 6 // rem  # parts per leftover row
        cut = [j * pairs // k for j in range(k + 1)]
        parts = [(w * q, q, (6 * q + w // k, cut[w % k], cut[w % k + 1] - cut[w % k])) for w in range(6)]
        cost = lambda split_: max(merge_thread_cycles(self, c, p) for _, c, p in split_)  # noqa: E731
        return parts if cost(parts) < cost(whole) else whole

    def frame(self, labels: dict[str, int]) -> np.ndarray:
        if self.op in LNS_OPS:
            return self._lns_frame(labels)
        if self.op in SMS_OPS:
            return self._sms_frame(labels)
        if self.op == "panels_f16":
            return self._pf_frame(labels)
        if self.op == "panels_gap_f16":
            return self._pfg_frame(labels)
        if self.op == "to_f32_scaled_t":
            return self._ot_frame(labels)
        f = np.zeros(FRAME_WORDS, np.uint32)
        work = self.merge_split() if self.op in MERGE_CHUNKS else [(a, c, None) for a, c in split(self.rows)]
        for w, (first, cnt, _) in enumerate(work):
            f[CNT + w], f[FIRST + w] = cnt, first
        out = self.in0 if self.op == "flash_merge" else self.out
        f[IN0], f[IN1], f[IN2], f[OUT] = self.in0, self.in1, self.in2, out
        f[ENTRY] = labels[f"rows_{self.op}"]
        f[ATOMS], f[ISTRIDE], f[OSTRIDE] = self.n // 4, self.istride, self.ostride
        if self.op in PADDED:
            f[ATOMS], f[ZATOMS] = self.reps()["atom0"], self.reps()["zero"]
        f[ST0], f[ST1], f[ST2] = self.st0, self.st1, self.st2
        f[F0] = np.float32(1.0 / self.n).view(np.uint32)
        f[F1] = np.float32(self.eps).view(np.uint32)
        if self.op == "gelu":
            consts = list(GELU_CONSTANTS)
        else:
            consts = [-np.inf, 0, 0, 0]
        f[CONST : CONST + 8] = np.repeat(np.array(consts, np.float16), 4).view(np.uint32)
        if self.op in ("softmax", "softmax_e", "softmax_m", "softmax_mt"):
            f[2 * K1 : 2 * K1 + 2] = self.tail_mask().view(np.uint32)
        if self.op in MERGE_CHUNKS:  # after the constants: MPART shares their words
            for w, (_, _, part) in enumerate(work):
                f[MPART + w] = 0 if part is None else part[0] << 24 | part[1] << 12 | part[2]
            f[MG_HSHIFT], f[MG_HMASK], f[MG_HSTEP] = (
                self.heads.bit_length() - 1,
                self.heads - 1,
                self.head_step,
            )
        if self.op in TO_F32_SCALED:
            f[ATOMS], f[F1] = max(self.n // 4 - 2, 0), self.n == 4
        if self.op == "to_f32_scaled_l":
            f[ST1] = 2 * self.n  # l's byte in an input row
        if self.op == "fill_f16":
            f[CONST : CONST + 2] = np.full(4, self.scale, np.float16).view(np.uint32)
        if self.op in ("softmax_e", "softmax_m"):
            reps = self.reps()
            f[ATOMS], f[ZATOMS], f[ST1] = reps["atom0"], reps["zero"], self.ml_stride
        if self.op == "softmax_mt":
            reps = self.reps()
            f[ATOMS], f[ZATOMS], f[ST1], f[OSTRIDE] = reps["atom0"], reps["zquad"], self.ml_stride, 32
            f[PT_FQ], f[PT_T], f[PT_Z] = reps["quad1"] + reps["quad"], reps["single"], reps["zero"]
            f[PT_BLKM] = 512 * (self.n // 16 - 1)
        if self.op == "to_f16":
            f[2 * K1 : 2 * K1 + 2] = np.float32(self.scale).view(np.uint32)
        return f

    def tail_mask(self) -> np.ndarray:
        """softmax: the last valid atom's mask (4 f16): +inf for lanes holding valid elements, -inf past them."""
        lanes = self.nvalid - 4 * (-(-self.nvalid // 4) - 1)
        return np.where(np.arange(4) < lanes, np.inf, -np.inf).astype(np.float16)

    def _lns_frame(self, labels: dict[str, int]) -> np.ndarray:
        f = np.zeros(FRAME_WORDS, np.uint32)
        for w, (first, cnt) in enumerate(split(self.n // 4)):
            f[CNT + w], f[FIRST + w] = cnt - 1, 8 * first
        f[IN0], f[IN1], f[IN2], f[OUT] = self.in0, self.in1, self.in2, self.out
        x32 = "32" if self.op == "layernorm_split32" else ""
        f[ENTRY], f[LNS_E2], f[LNS_E3] = (labels[f"rows_lns{x32}_{phase}"] for phase in LNS)
        f[LNS_ROWS], f[ISTRIDE], f[OSTRIDE], f[ST0] = self.rows - 1, self.istride, self.ostride, self.st0
        f[F0] = np.float32(1.0 / self.n).view(np.uint32)
        f[F1] = np.float32(self.eps).view(np.uint32)
        return f

    def _sms_frame(self, labels: dict[str, int]) -> np.ndarray:
        f = np.zeros(FRAME_WORDS, np.uint32)
        va = -(-self.nvalid // 4)
        for w, (first, cnt) in enumerate(split(va)):
            f[CNT + w], f[FIRST + w] = cnt - 1, 8 * first
        f[IN0], f[OUT] = self.in0, self.out
        phases = SMS if self.op == "softmax_split" else SMS_E
        f[ENTRY], f[SMS_E2], f[SMS_E3] = (labels[f"rows_sms_{phase}"] for phase in phases)
        f[F0] = 8 * va  # the zero atoms' byte offset in a row (`softmax_split_e`'s zero pass)
        f[SMS_ROWS], f[ISTRIDE], f[OSTRIDE], f[ST0] = self.rows - 1, self.istride, self.ostride, self.st0
        f[ZATOMS] = self.n // 4 - va
        f[CONST : CONST + 2] = np.full(4, -np.inf, np.float16).view(np.uint32)
        f[2 * K1 : 2 * K1 + 2] = np.full(4, np.inf, np.float16).view(np.uint32)
        f[2 * K1 + 2 : 2 * K1 + 4] = self.tail_mask().view(np.uint32)
        return f

    def _ot_frame(self, labels: dict[str, int]) -> np.ndarray:
        f = np.zeros(FRAME_WORDS, np.uint32)
        for w, (first, cnt) in enumerate(split(-(-self.rows // 4) * self.n)):
            f[CNT + w], f[FIRST + w], f[OT_G0 + w] = cnt, first % self.n, first // self.n
        f[IN0], f[OUT], f[ENTRY] = self.in0, self.out, labels["rows_to_f32_scaled_t"]
        f[ATOMS], f[ISTRIDE], f[OSTRIDE], f[ST0] = self.n, self.istride, self.ostride, self.st0
        f[OT_LROW], f[OT_STEP], f[OT_LAST] = self.n * self.istride, self.istride // 8, self.rows - 1
        return f

    def _pfg_frame(self, labels: dict[str, int]) -> np.ndarray:
        f = np.zeros(FRAME_WORDS, np.uint32)
        for w, (first, cnt) in enumerate(self.pfg_split()):
            f[CNT + w], f[FIRST + w] = cnt, first
        f[IN0], f[OUT], f[ENTRY] = self.in0, self.out, labels["rows_panels_gap_f16"]
        f[PFG_GROUP] = self.group_bytes - 16 * self.ostride if self.block_jump else 0
        f[ISTRIDE], f[OSTRIDE] = self.istride, self.ostride
        a, g, z = self.panel_width // 4, self.gap_at // 4, self.gap // 4
        f[ATOMS], f[PFG_ZERO], f[PFG_REST] = g, z, a - g
        bj = self.block_jump
        f[PF_STEP], f[PF_PANELS], f[PF_WIDTH] = self.pstep, self.panels - 1, 2 * bj if bj else 8 * (a + z)
        jl, js, jb = self.pfg_jumps()
        f[PF_PACE] = (jl & 0x3FF) | (js & 0x3FF) << 10 | (jb & 0x3FF) << 20
        try:
            f[PF_LOOP] = labels[f".Lrows_panels_gap_f16_{self.pfg_loop[1]}"]
        except KeyError:
            raise ValueError(
                f"panels_gap_f16: the library has no rows loop {self.pfg_loop[1]} (`pfg_loops`)"
            ) from None
        return f

    @property
    def pfg_loop(self) -> tuple[str, str]:
        """panels_gap_f16: its rows loop's (estimate tag suffix, label suffix), `_pfg_names`."""
        g, z = self.gap_at // 4, self.gap // 4
        return _pfg_names(g, z, self.panel_width // 4 - g, bool(self.block_jump))

    @property
    def group_bytes(self) -> int:
        """panels_gap_f16 with block_jump: bytes from one 16-row group's output to the next (F16 weight panels:
        a 512-byte block per 16-column block)."""
        return self.panels * 2 * self.block_jump

    def pfg_split(self) -> list[tuple[int, int]]:
        """panels_gap_f16's (first row, rows) per worker: the quotient/remainder split, or with block_jump over
        several 16-row groups, workers given to the groups so that none spans two (each next worker to the
        group with the most rows per worker), at most six groups."""
        if not self.block_jump or self.rows <= 16:
            return split(self.rows)
        sizes = [min(16, self.rows - g0) for g0 in range(0, self.rows, 16)]  # at most six (__post_init__)
        workers = [1] * len(sizes)
        for _ in range(6 - len(sizes)):
            g = max(range(len(sizes)), key=lambda i: -(-sizes[i] // workers[i]))
            workers[g] += 1
        out = []
        for g, (size, w) in enumerate(zip(sizes, workers, strict=True)):
            out += [(16 * g + first, cnt) for first, cnt in split(size, w)]
        return out

    def pfg_jumps(self) -> tuple[int, int, int]:
        """panels_gap_f16's pace jumps (atoms): from a row's last atom to the next row's first, load and store;
        with `block_jump`, from the last store of a row's first block to its second block's first (else 0)."""
        a, z, g = self.panel_width // 4, self.gap // 4, self.gap_at // 4
        if not self.block_jump:
            return self.istride // 8 - a + 1, self.ostride // 8 - a - z + 1, 0
        bj = self.block_jump // 8
        return self.istride // 8 - a + 1, self.ostride // 8 - bj - (a + z - g) + 1, bj - g + 1

    def _pf_frame(self, labels: dict[str, int]) -> np.ndarray:
        f = np.zeros(FRAME_WORDS, np.uint32)
        for w, (first, cnt) in enumerate(split(self.rows)):
            f[CNT + w], f[FIRST + w] = cnt, first
        f[IN0], f[OUT], f[ENTRY] = self.in0, self.out, labels["rows_panels_f16"]
        f[ISTRIDE], f[OSTRIDE] = self.istride, self.ostride
        pace, a = self.pf_pace, self.panel_width // 4
        f[ATOMS], f[ZATOMS] = (a - 2 if pace else a), self.n // 4 - self.panels * a
        f[PF_STEP], f[PF_PANELS], f[PF_WIDTH], f[PF_SAFE] = self.pstep, self.panels - 1, 8 * a, not pace
        if pace:
            jl, js = self.pf_jumps()
            f[PF_PACE] = (jl & 0x3FF) | (js & 0x3FF) << 10
        f[PF_IJUMP] = np.int64(self.istride - 8 * a).astype(np.uint32)
        f[PF_OJUMP] = np.int64(self.ostride - 8 * a).astype(np.uint32)
        f[PF_OATOMS] = self.ostride // 8
        n = ".Lrows_panels_f16"
        try:
            f[PF_LOOP] = labels[f"{n}_rows{a}" if self.pf_fast else f"{n}_rows"]
        except KeyError:
            raise ValueError(
                f"panels_f16: the library has no rows loop for panels of {a} atoms (`pf_atoms`)"
            ) from None
        return f

    @property
    def entry(self) -> str:
        if self.op in LNS_OPS:
            return "rows_lns_sup"
        return "rows_sms_sup" if self.op in SMS_OPS else "rows_sup"


# ----------------------------------------------------------------------------------------------------------------
# Semantics (numpy, bit-exact) and cycle estimate
# ----------------------------------------------------------------------------------------------------------------


def _acc_sum(v: np.ndarray) -> np.ndarray:
    """v: f32 [R, n] -> f32 [R]: the kernels' accumulation order (two f32 pairs, sequential over atoms)."""
    r, n = v.shape
    v = v.reshape(r, n // 4, 2, 2)
    acc = np.zeros((r, 2, 2), np.float32)
    for i in range(n // 4):
        acc = acc + v[:, i]
    t = acc[:, 0] + acc[:, 1]
    return t[:, 0] + t[:, 1]


def _row_max(x: np.ndarray) -> np.ndarray:
    r, n = x.shape
    acc = np.full((r, 4), -np.inf, np.float16)
    for i in range(n // 4):
        acc = np.maximum(acc, x[:, 4 * i : 4 * i + 4])
    a = acc.astype(np.float32)
    m = np.maximum(a[:, 0:2], a[:, 2:4])
    return np.maximum(m[:, 0], m[:, 1])


def _exp_rows(x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(f16(e), sum(e)) with e = exp(f32(x) - m[row])."""
    e = exp_f32(x.astype(np.float32) - m[:, None])
    return e.astype(np.float16), _acc_sum(e)


def _lns_parts(v: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """layernorm_split's sums of v f32 [R, n]: (the six slice partials [R, 6] (`_acc_sum` per worker slice), the
    totals [R] summed in worker order ((((p0 + p1) + p2) + p3) + p4) + p5)."""
    parts = np.stack([_acc_sum(v[:, 4 * a : 4 * (a + c)]) for a, c in split(n // 4)], axis=1)
    total = parts[:, 0]
    for w in range(1, 6):
        total = total + parts[:, w]
    return parts, total


def _lns_semantics(k: Rows, x, w, b) -> dict[str, np.ndarray]:
    inv_n = np.float32(1.0 / k.n)
    xf = x.astype(np.float32)
    p_sum, total = _lns_parts(xf, k.n)
    mean = total * inv_n
    d = xf - mean[:, None]
    p_sq, total = _lns_parts(d * d, k.n)
    rstd = rsqrt_f32(total * inv_n + np.float32(k.eps))
    hi = mean.astype(np.float16)
    lo = (mean - hi.astype(np.float32)).astype(np.float16)
    zh = ((x.astype(np.float16) - hi[:, None]) - lo[:, None]) * rstd.astype(np.float16)[
        :, None
    ]  # f16 arithmetic
    return {
        "out": zh * w.astype(np.float16) + b.astype(np.float16),
        "partials": np.concatenate([p_sum, p_sq], 1),
    }


def _sms_exp_terms(e: np.ndarray) -> np.ndarray:
    """softmax_split pass 2's summands of one worker's slice e f16 [R, 4c] as f32 atoms, in order: the f16 sums
    of atom pairs (0, 1), (2, 3), ... over the c - 1 unmasked atoms, then the odd one out if any, then the masked
    last atom."""
    r, n = e.shape
    a = e.reshape(r, n // 4, 4)
    u = n // 4 - 1
    p = u // 2
    pairs = (a[:, 0 : 2 * p : 2] + a[:, 1 : 2 * p : 2]).reshape(r, -1)  # f16 arithmetic
    return np.concatenate([pairs, e[:, 8 * p :]], axis=1).astype(np.float32)


def _sms_semantics(k: Rows, x) -> dict[str, np.ndarray]:
    va = -(-k.nvalid // 4)
    xs = x[:, : 4 * va].astype(np.float16)  # a copy; workers 0..4 min their last atom with +inf: no change
    xs[:, -4:] = np.minimum(xs[:, -4:], k.tail_mask())
    slices = [(4 * a, 4 * (a + c)) for a, c in split(va)]
    p_max = np.stack([_row_max(xs[:, a:b]) for a, b in slices], axis=1)
    m = p_max[:, 0]
    for w in range(1, 6):
        m = np.maximum(m, p_max[:, w])
    e = exp_f16(xs - m.astype(np.float16)[:, None])  # f16 arithmetic (the max is an f16 value)
    p_sum = np.stack([_acc_sum(_sms_exp_terms(e[:, a:b])) for a, b in slices], axis=1)
    total = p_sum[:, 0]
    for w in range(1, 6):
        total = total + p_sum[:, w]
    out = np.zeros((k.rows, k.n), np.float16)
    out[:, : 4 * va] = e * recip_f32(total).astype(np.float16)[:, None] if k.op == "softmax_split" else e
    return {"out": out, "partials": np.concatenate([p_max, p_sum], 1)}


def semantics(k: Rows, x, y=None, z=None, state=None) -> dict[str, np.ndarray]:
    """Outputs of the call as a dict name -> array. x = in0 ([rows, n]: f16, or f32 for flash_merge/final),
    y / z = in1 / in2 (layernorm weight / bias [n] f16; flash_merge pv [rows, n] f16), state = dict of f32 [rows]
    (flash_stats: m, l; flash_merge: alpha; flash_final: l). layernorm_split also gives "partials" [rows, 12] f32:
    the words it leaves at st0 + 96 * row + 8 * i (the slices' sums, then their centered sums of squares);
    softmax_split likewise (the slices' maxima, then their sums of e). panels_f16: x = the panels [panels, rows, P]."""
    with np.errstate(all="ignore"):
        if k.op == "gelu":
            h = x.astype(np.float16)
            t = h * h
            t = t * GELU_C1
            t = t + GELU_C0
            t = t * h
            half = h * np.float16(0.5)
            th = tanh_f16(t) + np.float16(1.0)
            return {"out": half * th}
        if k.op == "panels_gap_f16":
            p, g, w = k.panel_width, k.gap_at, k.panel_width + k.gap
            xs = np.asarray(x, np.float16).reshape(k.panels, k.rows, p)
            out = np.zeros((k.rows, k.panels, w), np.float16)
            out[:, :, :g] = xs[:, :, :g].transpose(1, 0, 2)
            out[:, :, g + k.gap :] = xs[:, :, g:].transpose(1, 0, 2)
            return {"out": out.reshape(k.rows, k.n)}
        if k.op == "panels_f16":
            out = np.zeros((k.rows, k.n), np.float16)
            p = k.panel_width
            xs = np.asarray(x).reshape(k.panels, k.rows, p)
            for j in range(k.panels):
                out[:, j * p : j * p + p] = xs[j]
            return {"out": out}
        if k.op == "sms_stats":
            p = np.asarray(x, np.float32).reshape(k.rows, -1)
            m, lsum = p[:, 0], p[:, SMS_PART // 8]
            for w in range(1, 6):
                m = np.maximum(m, p[:, 2 * w])
                lsum = lsum + p[:, SMS_PART // 8 + 2 * w]
            return {"out": np.stack([m, lsum], 1)}
        if k.op == "fill_f16":
            return {"out": np.full((k.rows, k.n), k.scale, np.float16)}
        if k.op == "to_f32_scaled_t":  # to_f32_scaled_l of the columns: x = [n + 1, >= rows] f16, row n = l
            cols = np.asarray(x, np.float16).reshape(k.n + 1, -1)[:, : k.rows].T
            return semantics(
                replace(k, op="to_f32_scaled_l", in_stride=2 * k.n + 8), np.ascontiguousarray(cols)
            )
        if k.op == "to_f32_scaled_l":  # l: the f16 at column n of each input row, also stored (f32) at st0
            rows = x.reshape(k.rows, -1).astype(np.float16)
            lsum = rows[:, k.n].astype(np.float32)
            return {"out": rows[:, : k.n].astype(np.float32) * recip_f32(lsum)[:, None], "l": lsum}
        if k.op in MERGE_CHUNKS:
            return {"out": _merge_semantics(np.asarray(x, np.float32), k.n)}
        x = x.reshape(k.rows, k.nvalid if k.op in PADDED[1:] else k.n)
        if k.op == "rowsum":
            return {"out": _acc_sum(x.astype(np.float32))}
        if k.op == "rowmax":
            return {"out": _row_max(x)}
        if k.op == "softmax":
            va = 4 * -(-k.nvalid // 4)
            xs = x[:, :va].astype(np.float16)  # a copy
            xs[:, va - 4 :] = np.minimum(xs[:, va - 4 :], k.tail_mask())
            e16, s = _exp_rows(xs, _row_max(xs))
            inv = recip_f32(s)
            out = np.zeros((k.rows, k.n), np.float16)
            out[:, :va] = (e16.astype(np.float32) * inv[:, None]).astype(np.float16)
            return {"out": out}
        if k.op == "softmax_mt":  # softmax_m's rows, written as weight panels (`pt_offsets`)
            got = semantics(replace(k, op="softmax_m"), x)
            return {"out": got["out"], "m": got["m"]}
        if k.op == "softmax_m":  # softmax_e without the sum
            got = semantics(replace(k, op="softmax_e"), x)
            return {"out": got["out"], "m": got["ml"][:, 0]}
        if k.op == "softmax_e":  # softmax_split's arithmetic with one slice: the whole row
            va = -(-k.nvalid // 4)
            xs = x[:, : 4 * va].astype(np.float16)  # a copy
            xs[:, -4:] = np.minimum(xs[:, -4:], k.tail_mask())
            m = _row_max(xs)
            e = exp_f16(xs - m.astype(np.float16)[:, None])  # f16 arithmetic (the max is an f16 value)
            out = np.zeros((k.rows, k.n), np.float16)
            out[:, : 4 * va] = e
            return {"out": out, "ml": np.stack([m, _acc_sum(_sms_exp_terms(e))], 1)}
        if k.op in ("to_f16", "cast_f16"):
            out = np.zeros((k.rows, k.n), np.float16)
            xv = x.reshape(k.rows, -1)[:, : k.nvalid].astype(np.float32)
            out[:, : k.nvalid] = (xv * np.float32(k.scale)).astype(np.float16)
            return {"out": out}
        if k.op == "pad_f16":
            out = np.zeros((k.rows, k.n), np.float16)
            out[:, : k.nvalid] = x.astype(np.float16)
            return {"out": out}
        if k.op == "to_f32":
            return {"out": x.reshape(k.rows, k.n).astype(np.float16).astype(np.float32)}
        if k.op == "to_f32_scaled":  # state["l"]: the f32 at byte st0 of each output row
            r = recip_f32(np.asarray(state["l"], np.float32))
            return {"out": x.reshape(k.rows, k.n).astype(np.float16).astype(np.float32) * r[:, None]}
        if k.op == "layernorm":
            inv_n = np.float32(1.0 / k.n)
            xf = x.astype(np.float32)
            mean = _acc_sum(xf) * inv_n
            d = xf - mean[:, None]
            var = _acc_sum(d * d) * inv_n
            rstd = rsqrt_f32(var + np.float32(k.eps))
            zh = (d * rstd[:, None]).astype(np.float16)
            return {"out": zh * y.astype(np.float16) + z.astype(np.float16)}
        if k.op in LNS_OPS:  # layernorm_split32: x f32 (its sums in f32, its normalize pass on f16(x))
            return _lns_semantics(k, x, y, z)
        if k.op in SMS_OPS:
            return _sms_semantics(k, x)
        if k.op == "flash_stats":
            m_old, l_old = state["m"], state["l"]
            m_new = np.maximum(m_old, _row_max(x))
            alpha = exp_f32(m_old - m_new)
            p16, s = _exp_rows(x, m_new)
            return {"out": p16, "m": m_new, "l": l_old * alpha + s, "alpha": alpha}
        if k.op == "flash_merge":
            o = x.astype(np.float32) * state["alpha"][:, None]
            return {"out": o + y.reshape(k.rows, k.n).astype(np.float32)}
        if k.op == "flash_final":
            return {"out": (x.astype(np.float32) * recip_f32(state["l"])[:, None]).astype(np.float16)}
    raise ValueError(k.op)


def _merge_semantics(parts: np.ndarray, n: int) -> np.ndarray:
    """attn_merge: parts [chunks, rows, n + 2] f32 (o, m, l) -> [rows, n] f32, in the kernel's operation order."""
    o, m, lsum = parts[:, :, :n], parts[:, :, n], parts[:, :, n + 1]
    big = m[0]
    for j in range(1, len(parts)):
        big = np.maximum(big, m[j])
    w = [lsum[j] * exp_f32(m[j] - big) for j in range(len(parts))]
    total = w[0] + w[1]
    for j in range(2, len(parts)):
        total = total + w[j]
    inv = recip_f32(total)
    acc = o[0] * (w[0] * inv)[:, None]
    for j in range(1, len(parts)):
        acc = acc + o[j] * (w[j] * inv)[:, None]
    return acc


def worker_thread_cycles(k: Rows, rows: int) -> int:
    """Issues of one worker with `rows` rows (units), read off the generated code's per-tag counts."""
    if rows == 0:
        return IDLE
    cnt = worker_code(k.op).count
    if k.op == "panels_f16":
        return pf_thread_cycles(k, rows)
    if k.op == "panels_gap_f16":
        shape = k.pfg_loop[0]
        per_panel = cnt["panel"] + cnt[f"g{shape}"] + (rows - 1) * cnt[f"row{shape}"] + cnt[f"last{shape}"]
        return cnt["head"] + cnt["tail"] + k.panels * (per_panel + cnt["pnext"])
    if k.op == "gelu":
        return cnt["head"] + cnt["unit"] * (rows - 1) + cnt["tail"]
    per_row = cnt["row"] + sum(reps * cnt[tag] for tag, reps in k.reps().items())
    return cnt["head"] + rows * per_row + cnt["tail"]


def merge_thread_cycles(k: Rows, rows: int, part: tuple[int, int, int] | None) -> int:
    """attn_merge: issues of one worker with `rows` whole rows and a part of a row (`Rows.merge_split`)."""
    cnt = worker_code(k.op).count
    t = (
        cnt["head"]
        + cnt["tail"]
        + (rows > 0) * cnt["rows"]
        + rows * (cnt["row"] + (k.n // 2 - 1) * cnt["pair"])
    )
    if part is not None:
        t += cnt["part"] + (part[2] - 1) * cnt["ppair"]
    return t


def pf_thread_cycles(k: Rows, rows: int) -> int:
    """panels_f16: issues of one worker with `rows` (>= 1) rows (see `_pf_kernel`'s tags)."""
    cnt = worker_code(k.op).count
    a, z = k.panel_width // 4, k.n // 4 - k.panels * (k.panel_width // 4)
    t = cnt["head"] + cnt["zcheck"] + cnt["tail"]
    if z:
        t += cnt["zhead"] + z * (cnt["zcol"] + rows * cnt["zatom"])
    if k.pf_pace:
        per_panel = cnt["panel"] + cnt["plast"] + cnt["pnext"] + (a - 2) * cnt["latom"]
        if k.pf_fast:
            per_panel += cnt[f"fast{a}"] + (rows - 1) * cnt[f"frow{a}"]
        else:
            per_panel += cnt["generic"] + (rows > 1) * cnt["multi"]
            per_panel += (rows - 1) * (cnt["prow"] + (a - 2) * cnt["patom"])
        return t + cnt["phead"] + k.panels * per_panel
    per_panel = cnt["spanel"] + cnt["snext"] + rows * (cnt["srow"] + a * cnt["satom"])
    return t + cnt["shead"] + cnt["sdone"] + k.panels * per_panel


def lns_thread_cycles(k: Rows, phase: str) -> int:
    """layernorm_split: issues of the slowest worker (the largest slice) in pass `phase`."""
    cnt = _lns_kernel(phase, k.op == "layernorm_split32").count
    atoms = max(c for _, c in split(k.n // 4))
    return cnt["head"] + k.rows * (cnt["row"] + (atoms - 1) * cnt["atom"]) + cnt["tail"]


def sms_thread_cycles(k: Rows, phase: str) -> int:
    """softmax_split: issues of the slowest worker in pass `phase` (the last worker also writes the zero atoms)."""
    cnt = _sms_kernel(phase).count
    va = -(-k.nvalid // 4)
    zeros = [0] * 5 + [k.n // 4 - va]
    if phase == "zero":  # the last worker's zero atoms (the others exit at once)
        z = zeros[-1]
        if not z:
            return cnt["head"] + cnt["none"] + 1  # the idle exit
        return (
            cnt["head"] + cnt["none"] + cnt["zhead"] + k.rows * (cnt["row"] + z * cnt["zero"]) + cnt["tail"]
        )
    if phase == "exp":  # the unmasked atoms c - 1 in pairs, then one more if odd
        per_row = [
            cnt["row"] + (c - 1) // 2 * cnt["pair"] + (c - 1) % 2 * cnt["single"] for _, c in split(va)
        ]
    else:
        per_row = [
            cnt["row"] + (c - 1) * cnt["atom"] + z * cnt["zero"] for (_, c), z in zip(split(va), zeros)
        ]
    return cnt["head"] + k.rows * max(per_row) + cnt["tail"]


def cycles(k: Rows) -> int:
    """Tile cycles of the call (supervisor entry to return)."""
    if k.op in LNS_OPS:
        return LNS_SUP + 6 * sum(lns_thread_cycles(k, phase) for phase in LNS)
    if k.op in SMS_OPS:
        return LNS_SUP + 6 * sum(
            sms_thread_cycles(k, phase) for phase in (SMS if k.op == "softmax_split" else SMS_E)
        )
    if k.op == "to_f32_scaled_t":
        cnt = worker_code(k.op).count

        def worker(first, count):
            if not count:
                return IDLE
            segs = ot_segments(k, first, count)
            t = cnt["head"] + cnt["tail"] + (len(segs) - 1) * cnt["next"]
            return t + sum(cnt["seg"] + (d == 0) * cnt["lstore"] + (c - 1) * cnt["item"] for _, d, c in segs)

        return SUP + 6 * max(worker(first, c) for first, c in split(-(-k.rows // 4) * k.n))
    if k.op in MERGE_CHUNKS:
        return SUP + 6 * max(merge_thread_cycles(k, c, p) for _, c, p in k.merge_split())
    if k.op == "softmax_mt":  # the row pointer's fix after every 16th row: per worker, by its rows
        cnt = worker_code(k.op).count
        return SUP + 6 * max(
            worker_thread_cycles(k, c) + cnt["fix"] * ((first + c) // 16 - first // 16) if c else IDLE
            for first, c in split(k.rows)
        )
    if k.op == "panels_gap_f16":
        return SUP + 6 * max(worker_thread_cycles(k, c) for _, c in k.pfg_split())
    return SUP + 6 * max(worker_thread_cycles(k, c) for _, c in split(k.rows))


def pt_offsets(rows: int, n: int) -> np.ndarray:
    """softmax_mt: the byte offset from `out` of every atom of its output rows ([rows, n / 4]): row r is engine
    r % 16 of the panels' column block r // 16 (n / 16 blocks of 512 bytes each), its atom i in key block i // 4
    at slot 4 (r % 16) + i % 4 (`gemm.pack_weights`' order for B = P^T)."""
    r = np.arange(rows)[:, None]
    i = np.arange(n // 4)[None, :]
    return (r // 16) * (n // 16) * 512 + (i // 4) * 512 + (r % 16) * 32 + (i % 4) * 8
