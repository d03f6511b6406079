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

The chunk count: `chunks` if given, else the largest n <= `max_chunks` whose query blocks stay within `max_rows`
rows on `tiles` tiles, with at least `min_keys` keys per chunk. The lowering's transposed-score path takes blocks
of up to 32 rows and the merge up to 4 chunks, but the defaults stay at 16 rows and 3 chunks (So400m: 2 chunks of
16-row blocks): 3 chunks of 27-row blocks on 1296 tiles measured 559,446 cycles at one layer against 541,121, and
4 chunks of 32-row blocks 528,138 with NaN outputs from the attention's out_proj on (an open bug, BENCHMARKS.md
"Attention blocks of 32 query rows").
Attentions over fewer than `min_rows` query rows (the MAP head's probe) are left alone, as are those n = 1 gives.
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


def auto_chunks(
    tokens: int, keys: int, heads: int, tiles: int, max_chunks: int, max_rows: int, min_keys: int
) -> int:
    best = 1
    for n in range(2, max_chunks + 1):
        nq, qb = partial_grid(tokens, heads, n, tiles)
        if qb <= max_rows and keys // n >= min_keys and nq * heads * n <= tiles:
            best = n
    return best


@dataclass(frozen=True)
class NNSplitAttentionKeysPass(ModulePass):
    """nn.attention -> nn.attention_partial + nn.attention_merge (see the module docstring)."""

    name = "nn-split-attention-keys"

    tiles: int = 1472
    sram_kib: int = 624  # accepted with `tiles` like the other target-sized passes; unused
    chunks: int = 0
    """Key chunks (0: chosen from the target, see the module docstring)."""
    max_chunks: int = 3
    max_rows: int = 16
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
            n = self.chunks or auto_chunks(t, s, h, self.tiles, self.max_chunks, self.max_rows, self.min_keys)
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
