"""Host tensors -> chunk tables (`ipu.runtime.package.Binding`), with host-folded ops folded in.

A layout plus a per-tile address gives, for every block replica, runs of consecutive device elements: one run per
row of a row-major block (stride 1 in the tensor's flat index), one per column of an AMP micro-panel (stride = the
row length). Host-planned ops between the device value and its `nn.param` / `nn.input` (casts, reshapes, slices,
concats: `#tile.map<kind = "host">`) only change which host element a run reads and the device element type, so
they fold into the chunk table: the host does the work at upload, as the plan says.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import Float8E4M3FNUZType, Float8E5M2FNUZType, Float16Type, Float32Type
from xdsl.ir import Attribute, Operation, SSAValue

from ipu.dialects import exchange as ex
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.runtime.package import CHUNK_COLUMNS, DEVICE_DTYPES, Binding, as_chunk_table


class BindingError(ValueError):
    pass


def device_dtype(dtype: Attribute) -> str:
    if isinstance(dtype, Float32Type):
        return "f32"
    if isinstance(dtype, Float16Type):
        return "f16"
    if isinstance(dtype, Float8E4M3FNUZType):
        return "f8e4m3fnuz"
    if isinstance(dtype, Float8E5M2FNUZType):
        return "f8e5m2fnuz"
    raise BindingError(f"no device element type for {dtype}")


def fp8_format(layout: tl.LayoutAttr) -> dict[str, int]:
    """The FP8 format (`fp8.F143` / `fp8.F152`) and scale of an FP8 layout, as the conversion kernels take them
    (`fmt=`, `scale=`)."""
    from ipu.runtime import fp8

    return dict(
        fmt=fp8.F143 if isinstance(layout.dtype, Float8E4M3FNUZType) else fp8.F152, scale=layout.scale.data
    )


def layout_chunks(
    layout: tl.LayoutAttr, addr: np.ndarray, stride: np.ndarray | None = None, first_replica_only=False
):
    """Chunk rows (tile, address, flat offset, count, flat stride) for every block replica of `layout` stored at
    `addr[tile]` (a stacked layout: layer l at addr + l * stride[tile]), in block, replica, layer order.

    Blocks of one extent share their runs (positions, counts, strides, flat offsets from the block's origin): one
    numpy construction per extent, for all its blocks, replicas and layers."""
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
    reps = 1 if first_replica_only else table.shape[1]
    if lay.num_blocks == 0:
        return np.zeros((0, len(CHUNK_COLUMNS)), np.int64)
    addr = np.asarray(addr, np.int64)
    lstride = np.asarray(stride, np.int64) if layers > 1 else None
    tiles = table[:, :reps].astype(np.int64)  # [blocks, reps]
    base = addr[tiles] + g.offset[:, :reps].astype(np.int64) * esize  # [blocks, reps]
    origin_flat = g.block_origin.astype(np.int64) @ strides  # [blocks]
    layer = np.arange(layers, dtype=np.int64)
    dims_of = [tuple(x) for x in g.block_dims.tolist()]
    groups: dict[tuple, list[int]] = {}
    for b, dims in enumerate(dims_of):
        groups.setdefault(dims, []).append(b)
    out: list[np.ndarray | None] = [None] * lay.num_blocks
    for dims, blocks in groups.items():
        pos, flat, cnt, step, inner, outer = _block_runs(lay, dims, strides)
        bs = np.array(blocks, np.int64)
        # [blocks, reps, layers, runs]
        t = tiles[bs][:, :, None, None]
        a = base[bs][:, :, None, None] + pos * esize
        if layers > 1:
            a = a + layer[None, None, :, None] * lstride[tiles[bs]][:, :, None, None]
        f = origin_flat[bs][:, None, None, None] + flat + layer[None, None, :, None] * slice_elems
        full = (len(bs), reps, layers, len(pos))
        rows = np.stack(
            [
                np.broadcast_to(t, full),
                np.broadcast_to(a, full),
                np.broadcast_to(f, full),
                np.broadcast_to(cnt, full),
                np.broadcast_to(step, full),
                np.broadcast_to(inner, full),
                np.broadcast_to(outer, full),
            ],
            axis=-1,
        ).reshape(len(bs), -1, len(CHUNK_COLUMNS))
        for i, b in enumerate(blocks):
            out[b] = rows[i]
    return np.concatenate(out).astype(np.int64)


def _block_runs(lay: tl.LayoutAttr, dims: tuple[int, ...], strides: np.ndarray):
    """The runs of one block of extent `dims`: (storage position, flat offset from the block's origin, count,
    flat stride, inner, outer) per run, as in the layout's storage order (`CHUNK_COLUMNS`: one-level runs have
    inner = count). `ampw`: one two-level run per contiguous [rows][kb] piece (a K block of a row panel, of the
    narrower last row panel, or the K tail's rows)."""
    outer = None
    if lay.order.data == "ampw":
        rows, cols, kb = int(dims[0]), int(dims[1]), tl.ampw_kblock(lay.dtype)
        rf, kf = rows // tl.AMP_PANEL_ROWS * tl.AMP_PANEL_ROWS, cols // kb * kb
        r0, h, c0, w = [], [], [], []  # pieces: first row, rows, first column, columns
        for p in range(0, rf, tl.AMP_PANEL_ROWS):
            for c in range(0, kf, kb):
                r0.append(p), h.append(tl.AMP_PANEL_ROWS), c0.append(c), w.append(kb)
        for c in range(0, kf, kb) if rf < rows else ():
            r0.append(rf), h.append(rows - rf), c0.append(c), w.append(kb)
        if kf < cols:
            r0.append(0), h.append(rows), c0.append(kf), w.append(cols - kf)
        r0, h, c0, w = (np.array(x, np.int64) for x in (r0, h, c0, w))
        pos = tl.ampw_positions(r0, c0, rows, cols, kb)
        flat = r0 * strides[0] + c0
        cnt, inner = h * w, w
        step = np.ones(len(pos), np.int64)
        outer = np.full(len(pos), strides[0])
    elif lay.order.data == "amp16":
        rows, cols = int(dims[0]), int(dims[1])
        p = np.arange(0, rows, tl.AMP_PANEL_ROWS)
        pr = np.minimum(tl.AMP_PANEL_ROWS, rows - p)
        pp, jj = np.repeat(p, cols), np.tile(np.arange(cols), len(p))
        cnt = np.repeat(pr, cols)
        pos = pp * cols + jj * cnt
        flat = pp * strides[0] + jj
        step = np.full(len(pos), strides[0])
    elif tl.col_panel_width(lay) is not None:
        rows, cols, pw = int(dims[0]), int(dims[1]), tl.col_panel_width(lay)
        c = np.arange(0, cols, pw)
        ii, cc = np.tile(np.arange(rows), len(c)), np.repeat(c, rows)
        cnt = np.minimum(pw, cols - cc)
        pos = tl.col_panel_positions(ii, cc, rows, cols, pw)
        flat = ii * strides[0] + cc
        step = np.ones(len(pos), np.int64)
    else:
        lead = dims[:-1]
        n = int(np.prod(lead)) if len(lead) else 1
        idx = (
            np.stack(np.unravel_index(np.arange(n), tuple(int(x) for x in lead)), 1)
            if len(lead)
            else np.zeros((1, 0), np.int64)
        )
        flat = (idx * strides[:-1]).sum(1)
        pos = np.arange(n) * int(dims[-1])
        cnt = np.full(n, int(dims[-1]))
        step = np.ones(n, np.int64)
    if outer is None:
        inner, outer = cnt, np.zeros(len(pos), np.int64)
    return (np.asarray(x, np.int64) for x in (pos, flat, cnt, step, inner, outer))


def _flat_shape(t) -> tuple[int, ...]:
    return tuple(t.get_shape())


def fold_host(
    v: SSAValue, chunks: np.ndarray, fp8_via: tuple[str, int] | None = None, esize: int = 0, layer: int = 0
):
    """Walks from a device value back to its nn.param / nn.input through host-folded ops and exchange phases.
    Returns [(source op, chunks in the source's flat index, via)] (several for a concat), or raises. `layer`: the
    iteration of a `tile.repeat` whose stacked block arguments are read (member `layer` of the stacked operand)."""
    chunks = as_chunk_table(chunks)
    op = v.owner
    if isinstance(op, nn.ParamOp | nn.InputOp):
        return [(op, chunks, fp8_via)]
    if isinstance(op, ex.PhaseOp):
        return fold_host(op.sources[v.index], chunks, fp8_via, esize, layer)
    if isinstance(op, tl.RelayoutOp):
        return fold_host(op.input, chunks, fp8_via, esize, layer)
    if not isinstance(op, Operation):
        # A stacked block argument of a tile.repeat: its stacked operand (the caller handles the layer offset).
        rep = op.parent_op()
        if isinstance(rep, tl.RepeatOp) and v.index >= len(rep.carried):
            chunks = chunks.copy()
            chunks[:, 2] += layer * int(np.prod(_flat_shape(v.type), dtype=np.int64))
            return fold_host(rep.stacked[v.index - len(rep.carried)], chunks, fp8_via, esize, 0)
        raise BindingError(f"block argument #{v.index} is not host-computable")
    plan = op.attributes.get(tl.PLAN_ATTR)
    host = isinstance(plan, tl.MapPlanAttr) and plan.get("kind") in ("host", "view")
    if not host and plan is not None:
        raise BindingError(f"{op.name} is computed on the device, not by the host")
    if isinstance(op, nn.CastOp):
        et = op.result.type.element_type
        if isinstance(et, Float8E4M3FNUZType | Float8E5M2FNUZType) and fp8_via is None:
            fp8_via = (device_dtype(et), op.fp8_scale)
        elif (
            isinstance(et, Float16Type)
            and fp8_via is not None
            and len(fp8_via) == 2
            and isinstance(op.operands[0].type.element_type, Float32Type)
        ):
            # f32 -> f16 -> FP8: the f16 rounding comes first (rounding f32 straight to FP8 can differ on ties)
            fp8_via = (*fp8_via, "f16")
        return fold_host(op.operands[0], chunks, fp8_via, esize, layer)
    if isinstance(op, nn.ReshapeOp):
        return fold_host(op.operands[0], chunks, fp8_via, esize, layer)
    if isinstance(op, nn.SliceOp):
        res, src = _flat_shape(op.results[0].type), _flat_shape(op.operands[0].type)
        offsets = list(op.offsets.get_values()) if hasattr(op.offsets, "get_values") else list(op.offsets)
        return fold_host(op.operands[0], _remap_into(chunks, res, src, offsets), fp8_via, esize, layer)
    if isinstance(op, nn.ConcatOp):
        axis = op.axis.value.data
        res = _flat_shape(op.results[0].type)
        chunks = _split_at_concat_bounds(
            chunks, res, axis, [_flat_shape(x.type)[axis] for x in op.operands], esize
        )
        idx = np.stack(np.unravel_index(chunks[:, 2], res), 1)
        out = []
        lo = 0
        for x in op.operands:
            shp = _flat_shape(x.type)
            sel = (idx[:, axis] >= lo) & (idx[:, axis] < lo + shp[axis])
            if sel.any():
                off = [0] * len(res)
                off[axis] = -lo
                sub = chunks[sel]
                # Remap into x: result index - lo on the axis.
                out += fold_host(x, _remap_into(sub, res, shp, off), fp8_via, esize, layer)
            lo += shp[axis]
        return out
    if isinstance(op, nn.PatchifyOp):
        return fold_host(op.operands[0], _patchify_chunks(op, chunks, esize), fp8_via, esize, layer)
    raise BindingError(f"{op.name}: a host-folded {op.name} is not supported by the lowering's bindings yet")


def _patchify_chunks(op: nn.PatchifyOp, chunks: np.ndarray, esize: int) -> np.ndarray:
    """Result [T, C*p*p] flat indices -> image [1, C, H, W] flat indices, runs of p pixels (kx)."""
    p = op.patch.value.data
    _, c, h, w = _flat_shape(op.operands[0].type)
    gw = w // p
    row = c * p * p
    pieces = []
    for t, a, off, cnt, st, inner, _ in chunks.tolist():
        if st != 1 or inner != cnt:
            raise BindingError("nn.patchify: only row-major device layouts of patches are folded")
        i = off
        while i < off + cnt:
            n = min(off + cnt - i, p - (i % p))
            pieces.append((t, a + (i - off) * esize, i, n))
            i += n
    pc = np.array(pieces, np.int64).reshape(-1, 4)
    tok, col = pc[:, 2] // row, pc[:, 2] % row
    ch, ky, kx = col // (p * p), (col // p) % p, col % p
    src = ch * h * w + ((tok // gw) * p + ky) * w + (tok % gw) * p + kx
    return as_chunk_table(np.stack([pc[:, 0], pc[:, 1], src, pc[:, 3], np.ones(len(pc), np.int64)], 1))


def _split_at_concat_bounds(chunks, res_shape, axis, sizes, esize):
    """Chunks whose run crosses from one concat operand into the next (a device block straddling the boundary,
    e.g. a [12]-element bias block over a 64 + 64 + 64 concat) become one chunk per element."""
    bounds = np.cumsum(sizes)
    first = np.unravel_index(chunks[:, 2], res_shape)[axis]
    last = np.unravel_index(_last_flat(chunks), res_shape)[axis]
    cross = np.searchsorted(bounds, first, "right") != np.searchsorted(bounds, last, "right")
    if not cross.any():
        return chunks
    pieces = [chunks[~cross]]
    for t, a, off, cnt, st, inner, outer in chunks[cross].tolist():
        i = np.arange(cnt)
        flat = off + i // inner * outer + i % inner * st
        pieces.append(
            as_chunk_table(np.stack([np.full(cnt, t), a + i * esize, flat, np.ones(cnt), np.ones(cnt)], 1))
        )
    return np.concatenate(pieces).astype(np.int64)


def _last_flat(chunks: np.ndarray) -> np.ndarray:
    """The flat index of each chunk's last element (the largest: strides are not negative)."""
    last_run = (chunks[:, 3] - 1) // chunks[:, 5]
    return (
        chunks[:, 2] + last_run * chunks[:, 6] + (np.minimum(chunks[:, 3], chunks[:, 5]) - 1) * chunks[:, 4]
    )


def _remap_into(chunks, res_shape, dst_shape, shift):
    def map_flat(f):
        idx = np.stack(np.unravel_index(f, res_shape), 1) + np.asarray(shift)[None, :]
        return np.ravel_multi_index(tuple(idx.T), dst_shape)

    out = chunks.copy()
    start = map_flat(chunks[:, 2])
    inner = np.minimum(chunks[:, 3], chunks[:, 5])  # elements of each chunk's (first) run
    last = chunks[:, 2] + (inner - 1) * chunks[:, 4]
    end = map_flat(last)
    out[:, 2] = start
    out[:, 4] = np.where(inner > 1, (end - start) // np.maximum(inner - 1, 1), 1)
    two = chunks[:, 3] > chunks[:, 5]  # two-level runs: the run step maps like the element step
    if two.any():
        out[two, 6] = map_flat(chunks[two, 2] + chunks[two, 6]) - start[two]
        # An affine map along both levels: the last element must land where the new strides put it.
        if (map_flat(_last_flat(chunks[two])) != _last_flat(out[two])).any():
            raise BindingError("a host-folded slice cuts a two-level run of a device layout unevenly")
    return out


def make_bindings(
    v: SSAValue, chunks: np.ndarray, dtype: str, scale: int = 0, layer: int = 0
) -> tuple[list[Binding], list[Binding]]:
    """(parameter bindings, input bindings) writing device value `v`'s chunks from the host sources."""
    params, inputs = [], []
    for src, ch, via in fold_host(v, chunks, None, DEVICE_DTYPES[dtype].itemsize, layer):
        if via and via[0] == dtype:  # the device value is that FP8 cast's: rounded once, or through f16 first
            via = ("f16", 0) if len(via) == 3 else None
        b = Binding(
            src.sym.data,
            _flat_shape(src.results[0].type),
            dtype,
            ch,
            scale,
            via=via[0] if via else "",
            via_scale=via[1] if via else 0,
        )
        (inputs if isinstance(src, nn.InputOp) else params).append(b)
    return params, inputs
