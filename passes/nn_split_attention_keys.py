"""`nn-split-attention-keys`: splits a long attention's keys over tiles (FlashAttention's split, across tiles).

    %o = nn.attention %q, %k, %v heads = H scale = s

becomes

    %p = nn.attention_partial %q, %k, %v heads = H scale = s chunks = n   // [n, T, H * (D + 2)] f32
    %o = nn.attention_merge %p heads = H                                   // [T, H * D]

Why: a materialized attention block on a tile holds all S keys and values of its head, so every one of a head's
tiles receives the head's whole K and V (So400m: 1472 / 16 = 92 tiles per head, each receiving 729 x 72 x 2 f16
= 210 KB, ~52 k cycles at 4 bytes per cycle) and repacks them for the GEMMs (~50 k cycles). With the keys split
in n chunks, a head's tiles form (query block, key chunk) pairs: each receives 1/n of K and V and n times the
query rows, the same score count; the merge exchanges a few rows of o, m and l per tile.

The chunk count: `chunks` if given, else the cheapest n <= `max_chunks` (`chunk_cost`: a tile's padded scores and
its K / V bytes) whose query blocks stay within `max_rows` rows (the lowering's transposed-score path takes up to
32: one or two 16-column weight blocks of queries) on `tiles` tiles, with at least `min_keys` keys per chunk.
So400m takes 4 chunks of blocks of 32 rows, 23 x 16 x 4 = 1472 tiles (BENCHMARKS.md "Attention blocks of 32
query rows"): 528,138 cycles at one layer against 541,121 with 2 chunks of 16-row blocks and 559,446 with 3 of
27-row blocks on 1296 tiles. Attentions over fewer than `min_rows` query rows (the MAP head's probe) are left
alone, as are those n = 1 gives.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ipu.dialects import nn

MAX_CHUNKS = 4  # `attn_merge2` .. `attn_merge4` (the chunks' merge weights in register pairs)


def partial_grid(tokens: int, heads: int, chunks: int, tiles: int) -> tuple[int, int]:
    """(query blocks, rows per block) of an attention split in `chunks` key chunks on `tiles` tiles: each head's
    tiles hold query blocks x key chunks; blocks are a multiple of `chunks` rows (the merge splits them evenly)."""
    nq0 = max(1, (tiles // heads) // chunks)
    qb = -(-tokens // nq0)
    qb = -(-qb // chunks) * chunks
    return -(-tokens // qb), qb


# Cycles per score of a tile's attention block (the padded S^T area qn x spad: packing, both GEMMs, softmax),
# an estimate calibrated on So400m's partial attention (77.6 k cycles for 16 x 368 scores, 78 k for 32 x 192).
SCORE_CYCLES = 13


def chunk_cost(tokens: int, keys: int, heads: int, tiles: int, chunks: int, head_dim: int) -> int:
    """The busiest tile's estimate of a split in `chunks`: its block's padded scores (query rows padded to the
    16-column weight blocks of the transposed path, keys to 16) at SCORE_CYCLES, plus receiving its chunk of K and
    V (f16, 4 bytes per cycle)."""
    _, qb = partial_grid(tokens, heads, chunks, tiles)
    qn = -(-max(qb, 3) // 16) * 16
    kc = -(-keys // chunks)
    return SCORE_CYCLES * qn * (-(-kc // 16) * 16) + kc * head_dim


def auto_chunks(
    tokens: int,
    keys: int,
    heads: int,
    tiles: int,
    max_chunks: int,
    max_rows: int,
    min_keys: int,
    head_dim: int,
) -> int:
    """The cheapest split (`chunk_cost`, the larger on a tie) of 2..max_chunks chunks whose query blocks stay within
    max_rows rows with at least min_keys keys per chunk on the tiles; 1 when none does."""
    fits = [
        n
        for n in range(2, max_chunks + 1)
        if partial_grid(tokens, heads, n, tiles)[1] <= max_rows
        and keys // n >= min_keys
        and partial_grid(tokens, heads, n, tiles)[0] * heads * n <= tiles
    ]
    if not fits:
        return 1
    return min(fits, key=lambda n: (chunk_cost(tokens, keys, heads, tiles, n, head_dim), -n))


@dataclass(frozen=True)
class NNSplitAttentionKeysPass(ModulePass):
    """nn.attention -> nn.attention_partial + nn.attention_merge (see the module docstring)."""

    name = "nn-split-attention-keys"

    tiles: int = 1472
    sram_kib: int = 624  # accepted with `tiles` like the other target-sized passes; unused
    chunks: int = 0
    """Key chunks (0: chosen from the target, see the module docstring)."""
    max_chunks: int = 4
    max_rows: int = 32
    min_keys: int = 64
    min_rows: int = 16

    def __post_init__(self) -> None:
        for field in ("tiles", "max_chunks", "max_rows", "min_keys"):
            if getattr(self, field) < 1:
                raise ValueError(
                    f"{self.name}: option '{field}' must be positive, got {getattr(self, field)}"
                )
        if not 0 <= self.chunks <= MAX_CHUNKS or self.max_chunks > MAX_CHUNKS:
            raise ValueError(
                f"{self.name}: options 'chunks' ({self.chunks}) and 'max_chunks' ({self.max_chunks}) must be at most "
                f"{MAX_CHUNKS} (the merge kernels), 'chunks' >= 0 (0: automatic)"
            )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for att in [o for o in op.walk() if isinstance(o, nn.AttentionOp)]:
            t, s = att.query.type.get_shape()[0], att.key.type.get_shape()[0]
            if t < self.min_rows or len(att.operands) != 3:
                continue
            h = att.num_heads
            d = att.query.type.get_shape()[1] // h
            n = self.chunks or auto_chunks(
                t, s, h, self.tiles, self.max_chunks, self.max_rows, self.min_keys, d
            )
            if n < 2:
                continue
            if (n - 1) * -(-s // n) >= s:
                raise PassFailedException(
                    f"{self.name}: nn.attention ({att.result.name_hint or 'unnamed'}): {n} key chunks leave an "
                    f"empty chunk of {s} keys"
                )
            part = nn.AttentionPartialOp(*att.operands, h, float(att.scale.value.data), n)
            merge = nn.AttentionMergeOp(part.result, h, att.result.type)
            att.parent_block().insert_ops_before([part, merge], att)
            hint = att.result.name_hint
            att.result.replace_all_uses_with(merge.result)
            merge.result.name_hint = hint
            att.detach()
            att.erase()
