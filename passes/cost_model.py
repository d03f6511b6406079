"""Cycle estimates for planning and scheduling, until the kernels bring their own (a placeholder with a narrow API).

Every estimate is for ONE tile doing its share of an operator, in tile clock cycles (all six workers busy unless
said otherwise). The numbers come from `shared/reference/IPU_FACTS.md` section 7 (poplibs' cycle estimators) and
section 6 (exchange), simplified to closed forms; where we simplify, the docstring says how. Kernels will later
replace this module function by function, so callers must only use the functions below:

    gemm_cycles(m, k, n, precision)            AMP matrix product of one tile's [m, k] x [k, n] block
    elementwise_cycles(n, kind, dtype)         n elements of an element-wise op (add, mul, scale, cast, gelu, copy)
    row_reduce_cycles(rows, cols, kind)        layer norm / softmax over `cols` for `rows` rows
    attention_cycles(q_rows, keys, dim, precision)   materialized attention of one head block
    exchange_cycles(nbytes)                    streaming `nbytes` through one tile's exchange port
    copy_cycles(nbytes)                        on-tile memcpy (local part of a relayout)
    sync_cycles()                              one all-tile barrier
    exchange_row_bytes(kind)                   encoded exchange-table bytes of one send / receive / delay row
    gemm_kernel_shape(m, k, n)                 the padded [m, k] x [k, n] the F16 AMP kernel runs for a block
    gemm_k_chunks(k, n, wbytes)                the K chunks of the device weight preparation and the GEMM calls
    weight_prep_cycles(n, k, dtype)            device cast + pack of one tile's [n, k] GEMM weight block
    a_repack_cycles(m, k, n, wbytes)           A repacked into K-block panels when its rows are too long
    weight_staging_bytes(n, k, wbytes)         the staging + weight panels that preparation needs per tile

All take an optional `target` (default: the full IPU21 machine), the single source of machine numbers.
"""

from __future__ import annotations

import math
from functools import lru_cache

from ipu.backend.target import IPU21, Target

# AMP efficiency actually reached on ViT-sized blocks. Poplibs' ConvPartial1x1Out estimate (IPU_FACTS 7) adds per
# output-group and per-worker overheads to the ideal MAC rate; for panels of a few dozen rows these cost ~25-35 %.
# We fold them into one factor instead of evaluating the worklist formula [own, from the formula's constants].
AMP_EFFICIENCY = 0.70
# MAC/cycle/tile of the AMP for fp32 operands: 4 x f32 per engine-cycle pair, a quarter of the f16 rate [I].
AMP_F32_MACS_PER_CYCLE = 16
# Fixed supervisor + worker launch cost of one vertex (IPU_FACTS 7: "Total = 50 + ..." for 1x1 convs).
VERTEX_OVERHEAD = 50
# AMP weight (coefficient) load: 32 cycles per 16x16 f16 group, per 16x32 fp8 group (IPU_FACTS 7 "Weight load").
WEIGHT_LOAD_CYCLES = 32

# Element-wise worker costs (IPU_FACTS 7, BinaryOp1D / UnaryOp1D): thread-cycle setup w0, vector width,
# cycles per vector. Transcendentals (tanh for GELU, exp for softmax) cost several cycles per vector.
_ELEMENTWISE = {
    # kind: (cycles per vector for half, cycles per vector for float)
    "add": (1, 1),
    "mul": (1, 1),
    "scale": (1, 1),
    "cast": (2, 2),
    "copy": (1, 1),
    "gelu": (6, 12),  # tanh: 12 cycles per 2 floats (IPU_FACTS 7), plus the polynomial around it
    "exp": (1, 6),  # EXP on half: 4 cycles / 4 elements; on float ~6 per 2
}
ASM_LOOP_OVERHEAD = 2  # ovh for asm codelets (IPU_FACTS 7)


def _workers(target: Target) -> int:
    return target.num_workers


def gemm_cycles(m: int, k: int, n: int, precision: str, target: Target = IPU21) -> int:
    """One tile's [m, k] x [k, n] on the AMP, precision "f16", "fp8" (FP8 x F16 or FP8 x FP8) or "f32".

    = weight loads (one per 16 output channels x 16 (f16) / 32 (fp8) inputs) + MACs at the AMP rate divided by
    AMP_EFFICIENCY + a fixed vertex overhead. Simplified from ConvPartial1x1Out: rows are assumed spread over the
    six workers, so worker imbalance is inside AMP_EFFICIENCY.
    """
    if min(m, k, n) <= 0:
        return 0
    rate = {
        "f16": target.amp_f16_macs_per_cycle,
        "fp8": target.amp_fp8_macs_per_cycle,
        "f32": AMP_F32_MACS_PER_CYCLE,
    }[precision]
    k_group = 32 if precision == "fp8" else 16
    loads = WEIGHT_LOAD_CYCLES * math.ceil(n / target.amp_engines) * math.ceil(k / k_group)
    return VERTEX_OVERHEAD + loads + math.ceil(m * k * n / (rate * AMP_EFFICIENCY))


@lru_cache(maxsize=4096)
def gemm_kernel_cycles(m: int, k: int, n: int, wbytes: int = 1, coef: str = "ld128") -> int:
    """One tile's [m, k] x [k, n] as the lowering runs it: the F16 GEMM kernel's own estimate
    (`ipu.backend.kernels.gemm.cycles`; coefficients by ld128 from the interleaved staging, ld64 where it is not)
    for each K chunk (`gemm_k_chunks`) of the padded shape. Unlike `gemm_cycles` it sees the per-block weight loads and worker setup that dominate few-row tiles
    (9 rows: ~280 cycles per 16 x 16 block, 8 MACs per cycle)."""
    from ipu.backend.kernels import gemm as G

    mk, _, npad = gemm_kernel_shape(m, k, n)
    return sum(
        G.cycles(G.Gemm(mk, kw, npad, G.F16, "init" if i == 0 else "acc", coef))
        for i, (_, kw) in enumerate(gemm_k_chunks(k, n, wbytes))
    )


def fp8_gemm_cycles(m: int, k: int, n: int, coef: str = "ld128") -> int:
    """One tile's [m, k] x [k, n] on the FP8 AMP (FP8 x and weights, `nn-quantize-activations`): one FP8 GEMM call
    over K padded to 32 and N to 16 (rows padded to the kernel's minimum), the kernel's own estimate."""
    from ipu.backend.kernels import gemm as G

    return G.cycles(G.Gemm(max(m, G.MIN_ROWS), -(-k // 32) * 32, -(-n // 16) * 16, G.FP8, "init", coef))


def fp8_panel_cycles(n: int, k: int) -> int:
    """A row-major [n, k] FP8 weight block rearranged into FP8 AMP panels (K padded to 32, the N padding rows
    zeroed): the pack kernels' own estimates."""
    from ipu.backend.kernels import pack as pk

    kp, npad = -(-k // 32) * 32, -(-n // 16) * 16
    total = pk.weights_from_bt(n, kp, "fp8", 0, 0).cycles()
    if npad != n:
        total += pk.Chunks(npad - n, kp // 32, 0, 0, 0, 0, 32, 512, piece=32).cycles()
    return total


def elementwise_cycles(n: int, kind: str, dtype: str = "f32", target: Target = IPU21) -> int:
    """n elements of an element-wise op, spread over the six workers (BinaryOp1D, IPU_FACTS 7):
    6 * (w0 + ceil(ceil(n/6) / vw) * (cpl + ovh)) + 11, w0 = 26 (half) / 29 (float), vw = 4 (half) / 2 (float).
    dtype "f8" is costed as half (it is unpacked to half first)."""
    if n <= 0:
        return 0
    half = dtype in ("f16", "f8")
    w0 = 26 if half else 29
    vw = target.f16_vector_width if half else target.f32_vector_width
    cpl = _ELEMENTWISE[kind][0 if half else 1]
    w = _workers(target)
    return w * (w0 + math.ceil(math.ceil(n / w) / vw) * (cpl + ASM_LOOP_OVERHEAD)) + 11


def row_reduce_cycles(rows: int, cols: int, kind: str, dtype: str = "f32", target: Target = IPU21) -> int:
    """Layer norm ("layer_norm") or softmax ("softmax") of `rows` rows of `cols` elements on one tile.

    Layer norm = mean, variance (two reductions) and the affine normalisation (two element-wise passes); softmax
    = max, exp, sum and the division. Modelled as that many element-wise passes plus 20 cycles per row for each
    reduction's tail [own estimate; poplibs' reduce estimator is not transcribed]."""
    n = rows * cols
    if n <= 0:
        return 0
    if kind == "layer_norm":
        return 4 * elementwise_cycles(n, "add", dtype, target) + 2 * 20 * rows
    if kind == "softmax":
        return (
            2 * elementwise_cycles(n, "add", dtype, target)
            + elementwise_cycles(n, "exp", dtype, target)
            + elementwise_cycles(n, "mul", dtype, target)
            + 2 * 20 * rows
        )
    raise ValueError(f"row_reduce_cycles: unknown kind {kind!r}")


def attention_cycles(q_rows: int, keys: int, dim: int, precision: str, target: Target = IPU21) -> int:
    """Materialized attention for one head and `q_rows` queries: scores = q k^T (AMP), softmax in f32,
    probs v (AMP). FlashAttention would add an online-softmax merge per 64-key block (not modelled)."""
    return (
        gemm_cycles(q_rows, dim, keys, precision, target)
        + row_reduce_cycles(q_rows, keys, "softmax", "f32", target)
        + gemm_cycles(q_rows, keys, dim, precision, target)
    )


def exchange_cycles(nbytes: int, target: Target = IPU21) -> int:
    """Cycles to stream `nbytes` through one tile's exchange port (4 bytes/cycle/tile, IPU_FACTS 6)."""
    return math.ceil(nbytes / target.exchange_bytes_per_cycle)


def copy_cycles(nbytes: int, target: Target = IPU21) -> int:
    """On-tile copy of `nbytes`: one 64-bit load+store per cycle per worker pair, six workers share the issue
    slots, so ~8 bytes per cycle with a vertex overhead (a Copy vertex) [own estimate]."""
    if nbytes <= 0:
        return 0
    return VERTEX_OVERHEAD + math.ceil(nbytes / target.atom_bytes)


def sync_cycles(target: Target = IPU21) -> int:
    """One all-tile (internal) barrier."""
    return target.sync_internal_cycles


# Encoded exchange-table sizes [own model until the asm level encodes rows]: a send row is a `send` instruction
# plus its address/count setup (2 words); a receive row switches the incoming mux and sets the destination
# (2 words); an idle gap on a tile's timeline needs a `delay` (1 word).
_ROW_BYTES = {"send": 8, "recv": 8, "delay": 4}


def exchange_row_bytes(kind: str) -> int:
    return _ROW_BYTES[kind]


# --------------------------------------------------------------------------------------------------------------
# GEMM weights prepared on the device (backend/lower/lowering.py `Lowering.linear`): the weight block arrives as
# row-major [n, k] FP8 or f16 rows; per K chunk (`gemm_k_chunks`: at most 576 wide, staging under 24 KiB) FP8
# rows become the F16 AMP weight panels in one pass (`pack.fp8_to_f16_panels`: converted and reordered, N padding
# zeroed; f16 rows: packed by `pack.weights_from_bt`); the GEMM runs per chunk (init,
# then acc). K % 16 != 0: each chunk's rows are first re-strided with zero K padding (word copies). N padding rows
# are zeroed. K > 2056 (A row stride over the kernel's 4112-byte limit): each A chunk is repacked into K-block
# panels (`pack.to_panels`-like chunks) in scratch.

GEMM_MIN_ROWS = 3  # the AMP kernel's minimum rows per call (gemm.MIN_ROWS)
GEMM_K_CHUNK = 576  # most K per chunk of the device weight preparation (36 blocks of 16)
WEIGHT_STAGING_BYTES = (
    24 * 1024
)  # the staging of one K chunk stays under this (narrower chunks for wide panels)
GEMM_MAX_A_ROW_BYTES = 4112  # the AMP kernel's largest row stride


def gemm_kernel_shape(m: int, k: int, n: int) -> tuple[int, int, int]:
    """The [m, k] x [k, n] the F16 AMP kernel runs for a tile's block: M >= 3, K and N padded to 16."""
    return max(m, GEMM_MIN_ROWS), -(-k // 16) * 16, -(-n // 16) * 16


def gemm_k_chunks(
    k: int, n: int = 16, wbytes: int = 1, max_width: int | None = None
) -> list[tuple[int, int]]:
    """(first column, padded width) of each K chunk of a GEMM whose tiles hold [n, k] weight blocks of wbytes
    per element: the padded K in nearly equal multiples of 16, each at most GEMM_K_CHUNK wide (and max_width, in
    whole 16-blocks, at least one) and with its staging (`chunk_staging_bytes`) under WEIGHT_STAGING_BYTES."""
    blocks = -(-k // 16)
    per_block = chunk_staging_bytes(n, 16, wbytes, k % 16 != 0)
    most = max(1, min(GEMM_K_CHUNK // 16, WEIGHT_STAGING_BYTES // per_block))
    if max_width is not None:
        most = max(1, min(most, max_width // 16))
    chunks = -(-blocks // most)
    per = -(-blocks // chunks)
    return [(16 * b, 16 * min(per, blocks - b)) for b in range(0, blocks, per)]


def a_chunk_in_place(k0: int, kw: int, k: int, a_cols: int) -> bool:
    """Whether the GEMM reads the K chunk [k0, k0 + kw) of a column-panel A (panels of a_cols, K = k) in place:
    whole 16-column blocks, inside whole panels (else its rows are gathered into the A scratch)."""
    return k0 % 16 == 0 and kw % 16 == 0 and ((k0 + kw - 1) // a_cols + 1) * a_cols <= k


def chunk_staging_areas(n: int, kc: int, wbytes: int = 1, restride: bool = False) -> tuple[int, int]:
    """Bytes of the staging of one K chunk of an [n, kc] weight block: (the F16 weight panels, N padded to 16;
    the chunk's rows re-strided with zero K padding, only when K % 16 != 0), each a multiple of 16 bytes. FP8 rows
    become the panels in one pass (`pack.fp8_to_f16_panels`): no area of their own."""
    npad = -(-n // 16) * 16
    r = -(-n * kc * wbytes // 16) * 16 if restride else 0
    return npad * kc * 2, r


def chunk_staging_bytes(n: int, kc: int, wbytes: int = 1, restride: bool = False) -> int:
    return sum(chunk_staging_areas(n, kc, wbytes, restride))


@lru_cache(maxsize=4096)
def weight_prep_cycles(n: int, k: int, dtype: str = "f8", target: Target = IPU21) -> int:
    """Cycles to turn one tile's row-major [n, k] weight block (dtype "f8" or "f16") into F16 AMP weight panels,
    over all K chunks: the kernels' own estimators (FP8: `pack.fp8_to_f16_panels`, one pass with the N padding;
    f16: `weights_from_bt` and the zeroing of the N padding rows) plus `copy_cycles` of the K-padding re-stride
    when k % 16 != 0."""
    from ipu.backend.kernels import pack as pk

    if n <= 0 or k <= 0:
        return 0
    _, kpad, npad = gemm_kernel_shape(1, k, n)
    esize = {"f8": 1, "f16": 2, "f32": 4}[dtype]
    total = 0
    for _, kw in gemm_k_chunks(k, n, esize):
        if kpad != k:
            total += copy_cycles(n * kw * esize, target)
        if dtype == "f16":
            if npad != n:  # N padding rows zeroed
                total += pk.Chunks(npad - n, kw // 16, 0, 0, 0, 0, 16, 256, piece=32).cycles()
            total += pk.weights_from_bt(n, kw, "f16", 0, 0).cycles()
        else:  # one pass, N padding rows zeroed in the same kernel
            total += pk.fp8_to_f16_panels(n, kw, 0, 0).cycles()
    return total


@lru_cache(maxsize=4096)
def a_repack_cycles(m: int, k: int, n: int = 16, wbytes: int = 1) -> int:
    """Cycles to repack a tile's [m, k] f16 A block into K-block panels chunk by chunk (only when the row stride
    2k exceeds the kernel's limit; else 0); n, wbytes: the weight block's, which set the chunks."""
    from ipu.backend.kernels import pack as pk

    _, kpad, _ = gemm_kernel_shape(m, k, 16)
    if kpad * 2 <= GEMM_MAX_A_ROW_BYTES:
        return 0
    return sum(pk.to_panels(m, kw * 2, 0, 0).cycles() for _, kw in gemm_k_chunks(k, n, wbytes))


def weight_staging_bytes(n: int, k: int, wbytes: int = 1) -> int:
    """Per-tile bytes of the device-side weight preparation of an [n, k] block (wbytes per weight): one K chunk's
    FP8 bytes in panel order (FP8 only), F16 panels and re-strided rows (k % 16 != 0): at most
    WEIGHT_STAGING_BYTES (the lowering keeps them in its 32-KiB aux scratch)."""
    kc = max(kw for _, kw in gemm_k_chunks(k, n, wbytes))
    return chunk_staging_bytes(n, kc, wbytes, k % 16 != 0)
