"""The lowering's panel lookup (`_panel_index`: every block's offset per (origin, dims, tile) in one pass) against
the per-query scan it replaced, on random layouts with replicas and clipped blocks."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import f16, f32

from ipu.backend.lower.lowering import _panel_index
from ipu.dialects import tile as tl


def _panel_offsets_scan(lay, origin, dims):
    """The per-query scan (the lowering's first version): per tile, the offset of the first matching block."""
    g = lay.geometry()
    table = lay.table()
    n = int(table.max()) + 1
    out = np.full(n, -1, np.int64)
    decided = np.zeros(n, bool)
    eb = tl.element_bytes(lay.dtype)
    rest = np.array(lay.shape_[len(dims) :])
    for b in np.nonzero((g.block_origin[:, : len(origin)] == origin).all(1))[0]:
        if tuple(g.block_dims[b][: len(dims)]) != dims:
            continue
        whole = not (g.block_dims[b][len(dims) :] != rest).any()
        for r in range(table.shape[1]):
            t = int(table[b, r])
            if not decided[t]:
                decided[t] = True
                out[t] = int(g.offset[b, r]) * eb if whole else -1
    return out


@pytest.mark.parametrize("seed", range(40))
def test_panel_index_matches_the_scan(seed):
    rng = np.random.default_rng(seed)
    tiles = int(rng.integers(1, 9))
    rank = int(rng.integers(1, 4))
    shape = tuple(int(rng.integers(1, 12)) for _ in range(rank))
    block = tuple(int(rng.integers(1, d + 1)) for d in shape)
    nb = int(np.prod([-(-s // b) for s, b in zip(shape, block)]))
    reps = int(rng.integers(1, min(2, tiles) + 1))
    table = np.stack([rng.permutation(tiles)[:reps] for _ in range(nb)]).astype(np.int32)
    lay = tl.LayoutAttr(shape, block, table, f16 if rng.random() < 0.5 else f32, "row_major")
    g = lay.geometry()
    for k in range(rank + 1):
        for j in range(rank + 1):
            index = _panel_index(lay, k, j)
            queries = {
                (tuple(g.block_origin[b][:k].tolist()), tuple(g.block_dims[b][:j].tolist()))
                for b in range(nb)
            }
            queries.add(((-1,) * k, (0,) * j))  # matches nothing
            for origin, dims in queries:
                want = _panel_offsets_scan(lay, origin, dims)
                for t in range(tiles + 1):
                    w = int(want[t]) if t < len(want) else -1
                    assert index.get((origin, dims, t), -1) == w
