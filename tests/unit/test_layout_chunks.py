"""The binding chunk tables (`layout_chunks`, built per block extent with numpy) against the per block, replica
and layer construction they replaced, on random layouts: row-major (ranks 1-3), AMP panels, column panels,
replicas, stacked layers."""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects.builtin import f16, f32

from ipu.backend.lower.bindings import layout_chunks
from ipu.dialects import tile as tl


def _layout_chunks_loop(layout, addr, stride=None, first_replica_only=False):
    lay = layout.unstacked() if layout.stack.data else layout
    layers = max(1, layout.stack.data)
    g = lay.geometry()
    table = lay.table()
    esize = tl.element_bytes(lay.dtype)
    shape = np.array(lay.shape_, np.int64)
    strides = np.ones(len(shape), np.int64)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    slice_elems = int(shape.prod())
    out = []
    for b in range(lay.num_blocks):
        origin, dims = g.block_origin[b], g.block_dims[b]
        if lay.order.data == "amp16":
            rows, cols = int(dims[0]), int(dims[1])
            p = np.arange(0, rows, tl.AMP_PANEL_ROWS)
            pr = np.minimum(tl.AMP_PANEL_ROWS, rows - p)
            pp, jj = np.repeat(p, cols), np.tile(np.arange(cols), len(p))
            cnt = np.repeat(pr, cols)
            pos = pp * cols + jj * cnt
            flat = (origin[0] + pp) * strides[0] + origin[1] + jj
            step = np.full(len(pos), strides[0])
        elif tl.col_panel_width(lay) is not None:
            rows, cols, pw = int(dims[0]), int(dims[1]), tl.col_panel_width(lay)
            c = np.arange(0, cols, pw)
            ii, cc = np.tile(np.arange(rows), len(c)), np.repeat(c, rows)
            cnt = np.minimum(pw, cols - cc)
            pos = tl.col_panel_positions(ii, cc, rows, cols, pw)
            flat = (origin[0] + ii) * strides[0] + origin[1] + cc
            step = np.ones(len(pos), np.int64)
        else:
            lead = dims[:-1]
            n = int(np.prod(lead)) if len(lead) else 1
            idx = (
                np.stack(np.unravel_index(np.arange(n), tuple(int(x) for x in lead)), 1)
                if len(lead)
                else np.zeros((1, 0), np.int64)
            )
            flat = ((origin[:-1] + idx) * strides[:-1]).sum(1) + origin[-1]
            pos = np.arange(n) * int(dims[-1])
            cnt = np.full(n, int(dims[-1]))
            step = np.ones(n, np.int64)
        for r in range(1 if first_replica_only else table.shape[1]):
            t = int(table[b, r])
            base = int(addr[t]) + int(g.offset[b, r]) * esize
            for layer in range(layers):
                lbase = base + (layer * int(stride[t]) if layers > 1 else 0)
                out.append(
                    np.stack(
                        [np.full(len(pos), t), lbase + pos * esize, flat + layer * slice_elems, cnt, step], 1
                    )
                )
    return np.concatenate(out).astype(np.int64) if out else np.zeros((0, 5), np.int64)


@pytest.mark.parametrize("seed", range(50))
def test_layout_chunks_match_the_loop(seed):
    rng = np.random.default_rng(seed)
    tiles = int(rng.integers(1, 9))
    rank = int(rng.integers(1, 4))
    shape = tuple(int(rng.integers(1, 40)) for _ in range(rank))
    order = "row_major"
    if rank == 2:
        order = str(rng.choice(["row_major", "amp16", f"cols{int(rng.integers(1, 9))}"]))
    block = tuple(int(rng.integers(1, d + 1)) for d in shape)
    nb = int(np.prod([-(-s // b) for s, b in zip(shape, block)]))
    reps = int(rng.integers(1, min(2, tiles) + 1))
    table = np.stack([rng.permutation(tiles)[:reps] for _ in range(nb)]).astype(np.int32)
    lay = tl.LayoutAttr(shape, block, table, f16 if rng.random() < 0.5 else f32, order)
    layers = int(rng.integers(0, 4))
    if layers > 1:
        lay = lay.stacked(layers)
    addr = rng.integers(0, 1 << 18, tiles) * 8
    stride = rng.integers(1, 1 << 12, tiles) * 8
    first = bool(rng.random() < 0.3)
    got = layout_chunks(lay, addr, stride, first_replica_only=first)
    want = _layout_chunks_loop(lay, addr, stride, first_replica_only=first)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got[:, :5], want)
    # One-level runs (`ampw`'s two-level ones: tests/unit/test_ampw_weights.py): inner = count, outer = 0.
    np.testing.assert_array_equal(got[:, 5], got[:, 3])
    assert not got[:, 6].any()
