"""An interpreter for the `tile` and `exchange` levels: numpy shards per tile, transfers as byte copies.

`run(module, inputs, params)` executes a planned module (after `tile-plan`, or after `exchange-lower` /
`exchange-schedule`) and returns its `nn.output` values, so the same model can be compared with the reference
evaluator (`ipu.frontend.reference.evaluate`, mode "device") after every lowering.

State: every tensor value is a `Sharded`: its layout and, per tile, one flat numpy buffer of the layout's dtype
holding the tile's blocks in block order and storage order (exactly the bytes the layout describes; FP8 buffers
hold the scaled bits). Execution:

- `nn.input` / `nn.param`: the host writes each block into every tile holding it (a stacked parameter: the L
  layer slices one after the other in each tile's buffer).
- A planned compute op runs on each tile of its result layout from that tile's buffers only: the operands are
  decoded into full-shape arrays that are NaN wherever the tile holds nothing, the operator's reference numpy
  function (`ipu.frontend.reference.OPS`, device-mode rounding) computes, and the tile keeps the result blocks it
  owns. A NaN in an owned block means the plan or a relayout left the tile without data it needs: an error that
  names the op and the tile. (Computing the whole operator per tile is quadratic in tiles; this interpreter is
  for small models and targets, as a correctness oracle.)
- `tile.relayout`: an ideal copy (each destination block read from a tile holding it).
- `exchange.phase`: the transfer tables, executed as byte copies from the sending tile's source buffer to each
  receiving tile's destination buffer, plus the on-tile copies; every destination byte must be written.
- `tile.repeat`: the body runs `count` times; iteration i sees slice i of each stacked buffer.

GEMM plans with a precision narrower than the operand type (e.g. "f16" on f32 tensors, a "late" cast chosen
by a person or a search) round the operands to that precision before multiplying.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import Float8E4M3FNUZType, Float8E5M2FNUZType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue

from ipu.dialects import exchange as ex
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.runtime.derived import with_derived


class TileInterpError(Exception):
    pass


def np_dtype(dtype) -> np.dtype:
    if isinstance(dtype, Float8E4M3FNUZType):
        return np.dtype(ml_dtypes.float8_e4m3fnuz)
    if isinstance(dtype, Float8E5M2FNUZType):
        return np.dtype(ml_dtypes.float8_e5m2fnuz)
    return np.dtype({4: np.float32, 2: np.float16}[tl.element_bytes(dtype)])


def _block_slices(layout: tl.LayoutAttr, b: int) -> tuple[slice, ...]:
    g = layout.geometry()
    return tuple(slice(int(o), int(o + d)) for o, d in zip(g.block_origin[b], g.block_dims[b]))


def _ampw_positions(layout: tl.LayoutAttr, dims) -> np.ndarray:
    rows, cols = (int(d) for d in dims)
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return tl.ampw_positions(i, j, rows, cols, tl.ampw_kblock(layout.dtype))


def _to_storage(layout: tl.LayoutAttr, block: np.ndarray) -> np.ndarray:
    if layout.order.data == "ampw":
        out = np.empty(block.size, block.dtype)
        out[_ampw_positions(layout, block.shape).reshape(-1)] = block.reshape(-1)
        return out
    if layout.order.data == "amp16":
        rows = block.shape[0]
        return np.concatenate(
            [block[p : p + tl.AMP_PANEL_ROWS].T.reshape(-1) for p in range(0, rows, tl.AMP_PANEL_ROWS)]
        )
    p = tl.col_panel_width(layout)
    if p is not None:
        return np.concatenate([block[:, c : c + p].reshape(-1) for c in range(0, block.shape[1], p)])
    return block.reshape(-1)


def _from_storage(layout: tl.LayoutAttr, flat: np.ndarray, dims) -> np.ndarray:
    if layout.order.data == "ampw":
        return flat[_ampw_positions(layout, dims)]
    if layout.order.data == "amp16":
        rows, cols = dims
        out = np.empty(dims, flat.dtype)
        pos = 0
        for p in range(0, rows, tl.AMP_PANEL_ROWS):
            pr = min(tl.AMP_PANEL_ROWS, rows - p)
            out[p : p + pr] = flat[pos : pos + pr * cols].reshape(cols, pr).T
            pos += pr * cols
        return out
    p = tl.col_panel_width(layout)
    if p is not None:
        rows, cols = dims
        out = np.empty(dims, flat.dtype)
        for c in range(0, cols, p):
            w = min(p, cols - c)
            out[:, c : c + w] = flat[c * rows : (c + w) * rows].reshape(rows, w)
        return out
    return flat.reshape(dims)


@dataclass
class Sharded:
    """A tensor on the tiles: per-tile flat buffers in `layout` (for a stacked layout: all layers' slices)."""

    layout: tl.LayoutAttr
    shards: dict[int, np.ndarray]

    def slice_layer(self, i: int) -> Sharded:
        lay = self.layout.unstacked()
        g = lay.geometry()
        out = {}
        for t, buf in self.shards.items():
            n = int(g.shard_elems[t])
            out[t] = buf[i * n : (i + 1) * n]
        return Sharded(lay, out)


def encode(layout: tl.LayoutAttr, value: np.ndarray) -> Sharded:
    """The host's view: writes logical `value` (float array, full shape) into every tile holding each block."""
    dt = np_dtype(layout.dtype)
    scale = 2.0 ** (-layout.scale.data)
    layers = layout.stack.data
    lay = layout.unstacked() if layers else layout
    g = lay.geometry()
    table = lay.table()
    slices = [value[i] for i in range(layers)] if layers else [value]
    shards: dict[int, np.ndarray] = {}
    per = {int(t): int(g.shard_elems[t]) for t in np.unique(table)}
    for t, n in per.items():
        shards[t] = np.empty(n * len(slices), dt)
    for li, v in enumerate(slices):
        v = np.asarray(v, np.float32) * np.float32(scale) if layout.scale.data else np.asarray(v, np.float32)
        for b in range(lay.num_blocks):
            data = _to_storage(lay, v[_block_slices(lay, b)]).astype(dt)
            for r in range(table.shape[1]):
                t = int(table[b, r])
                o = li * per[t] + int(g.offset[b, r])
                shards[t][o : o + data.size] = data
    return Sharded(layout, shards)


def _decode_block(sh: Sharded, b: int, r: int) -> np.ndarray:
    lay = sh.layout
    g = lay.geometry()
    t = int(lay.table()[b, r])
    o = int(g.offset[b, r])
    n = int(g.block_elems[b])
    flat = sh.shards[t][o : o + n].astype(np.float32)
    if lay.scale.data:
        flat = flat * np.float32(2.0**lay.scale.data)
    return _from_storage(lay, flat, tuple(int(d) for d in g.block_dims[b]))


def decode(sh: Sharded, tile: int | None = None) -> np.ndarray:
    """Full-shape float32 value: from replica 0 of every block (tile None), or only what `tile` holds (NaN
    elsewhere)."""
    lay = sh.layout
    out = np.full(lay.shape_, np.nan, np.float32)
    table = lay.table()
    for b in range(lay.num_blocks):
        if tile is None:
            out[_block_slices(lay, b)] = _decode_block(sh, b, 0)
        else:
            rs = np.nonzero(table[b] == tile)[0]
            if rs.size:
                out[_block_slices(lay, b)] = _decode_block(sh, b, int(rs[0]))
    return out


def _reference():
    from ipu.frontend import reference  # lazy: the reference evaluator is only needed when running

    return reference


def _round_to(x: np.ndarray, precision: str) -> np.ndarray:
    if precision == "f16":
        return x.astype(np.float16).astype(np.float32)
    return x


class Interpreter:
    def __init__(self, inputs: Mapping[str, Any], params: Mapping[str, Any]):
        self.inputs = inputs
        self.params = params
        self.values: dict[SSAValue, Sharded] = {}
        self.outputs: dict[str, np.ndarray] = {}
        self.ref = _reference()

    # -- sources ------------------------------------------------------------------------------------------------
    def source(self, op: nn.InputOp | nn.ParamOp) -> Sharded | np.ndarray:
        lay = op.attributes.get(tl.LAYOUT_ATTR)
        table = self.inputs if isinstance(op, nn.InputOp) else self.params
        if op.sym.data not in table:
            raise TileInterpError(f"{op.name}: missing '{op.sym.data}'")
        raw = np.asarray(table[op.sym.data], np.float32)
        t = op.results[0].type
        if isinstance(t.element_type, Float8E4M3FNUZType | Float8E5M2FNUZType):
            raw = self.ref.quantize_fp8(raw, type(t.element_type), 0)
        if not isinstance(lay, tl.LayoutAttr):
            return raw  # a host value (only host-folded ops read it)
        return encode(lay, raw)

    # -- compute ------------------------------------------------------------------------------------------------
    def host(self, op: Operation) -> Sharded | np.ndarray:
        """A host-folded op: computed once on whole arrays, uploaded into its layout (if it has one)."""
        args = [decode(v) if isinstance(v, Sharded) else v for v in (self.values[o] for o in op.operands)]
        y = np.asarray(self.ref.evaluate_op(op, *args, mode="device"), np.float32)
        lay = op.attributes.get(tl.LAYOUT_ATTR)
        return encode(lay, y) if isinstance(lay, tl.LayoutAttr) else y

    def compute(self, op: Operation) -> Sharded | np.ndarray:
        plan = op.attributes.get(tl.PLAN_ATTR)
        lay = op.attributes.get(tl.LAYOUT_ATTR)
        if isinstance(plan, tl.MapPlanAttr) and plan.get("kind") == "host":
            return self.host(op)
        if plan is None or not isinstance(lay, tl.LayoutAttr):
            raise TileInterpError(f"{op.name}: no tile.plan / tile.layout: run tile-plan first")
        fn = self.ref.OPS.get(type(op))
        if fn is None:
            raise TileInterpError(f"{op.name}: no reference implementation")
        operands = [self.values[v] for v in op.operands]
        for i, v in enumerate(operands):
            if not isinstance(v, Sharded):
                raise TileInterpError(f"{op.name}: operand #{i} is a host value without a tile layout")
        table = lay.table()
        g = lay.geometry()
        dt = np_dtype(lay.dtype)
        shards = {int(t): np.empty(int(g.shard_elems[t]), dt) for t in np.unique(table)}
        prec = plan.get("precision") if isinstance(plan, tl.GemmPlanAttr | tl.AttentionPlanAttr) else None
        for t in shards:
            args = [decode(s, t) for s in operands]
            if prec == "f16":
                args = [_round_to(a, "f16") for a in args]
            with np.errstate(invalid="ignore"):
                y = np.asarray(self.ref.evaluate_op(op, *args, mode="device"), np.float32)
            for b, r in zip(*np.nonzero(table == t)):
                blk = y[_block_slices(lay, int(b))]
                if np.isnan(blk).any():
                    raise TileInterpError(
                        f"{op.name}: tile {t} lacks operand data for result block {int(b)} (NaN): the plan's "
                        "operand layouts do not give it what it needs"
                    )
                data = blk * np.float32(2.0 ** (-lay.scale.data)) if lay.scale.data else blk
                o = int(g.offset[b, r])
                shards[t][o : o + blk.size] = _to_storage(lay, data).astype(dt)
        return Sharded(lay, shards)

    # -- data movement ------------------------------------------------------------------------------------------
    def relayout(self, op: tl.RelayoutOp) -> Sharded:
        return encode(op.layout, decode(self.values[op.input]))

    def phase(self, op: ex.PhaseOp) -> list[Sharded]:
        sends, recvs, copies = op.send_table(), op.recv_table(), op.copy_table()
        results = []
        for b, (src_v, lay) in enumerate(zip(op.sources, op.layouts.data)):
            src = self.values[src_v]
            g = lay.geometry()
            dt = np_dtype(lay.dtype)
            dst = {
                int(t): np.zeros(int(g.shard_elems[t]) * dt.itemsize, np.uint8)
                for t in np.unique(lay.table())
            }
            written = {t: np.zeros(len(buf), bool) for t, buf in dst.items()}
            src_bytes = {t: buf.view(np.uint8) for t, buf in src.shards.items()}
            for i in np.nonzero(recvs[:, 1] == b)[0]:
                tile, off, s = int(recvs[i, 0]), int(recvs[i, 2]), int(recvs[i, 3])
                st, so, n = int(sends[s, 0]), int(sends[s, 2]), int(sends[s, 3])
                dst[tile][off : off + n] = src_bytes[st][so : so + n]
                written[tile][off : off + n] = True
            for i in np.nonzero(copies[:, 1] == b)[0]:
                tile, so, do, n = (int(x) for x in copies[i, [0, 2, 3, 4]])
                dst[tile][do : do + n] = src_bytes[tile][so : so + n]
                written[tile][do : do + n] = True
            for t, w in written.items():
                if not w.all():
                    raise TileInterpError(
                        f"exchange.phase: tile {t} never receives byte {int(np.argmin(w))} of result #{b}"
                    )
            results.append(Sharded(lay, {t: buf.view(dt) for t, buf in dst.items()}))
        return results

    # -- blocks ---------------------------------------------------------------------------------------------------
    def run_block(self, block: Block) -> list[Sharded] | None:
        for op in block.ops:
            if isinstance(op, nn.InputOp | nn.ParamOp):
                self.values[op.results[0]] = self.source(op)
            elif isinstance(op, nn.OutputOp):
                v = self.values[op.value]
                self.outputs[op.sym.data] = decode(v) if isinstance(v, Sharded) else v
            elif isinstance(op, tl.RelayoutOp):
                self.values[op.result] = self.relayout(op)
            elif isinstance(op, ex.PhaseOp):
                for r, v in zip(op.res, self.phase(op)):
                    self.values[r] = v
            elif isinstance(op, ex.SyncOp | func.ReturnOp):
                pass
            elif isinstance(op, tl.YieldOp):
                return [self.values[v] for v in op.values]
            elif isinstance(op, tl.RepeatOp):
                self.repeat(op)
            else:
                self.values[op.results[0]] = self.compute(op)
        return None

    def repeat(self, op: tl.RepeatOp) -> None:
        carried = [self.values[v] for v in op.carried]
        stacked = [self.values[v] for v in op.stacked]
        args = op.body.block.args
        nc = len(carried)
        for i in range(op.iterations):
            for a, v in zip(args[:nc], carried):
                self.values[a] = v
            for a, s in zip(args[nc:], stacked):
                self.values[a] = s.slice_layer(i) if isinstance(s, Sharded) else s[i]
            carried = self.run_block(op.body.block)
        for r, v in zip(op.res, carried):
            self.values[r] = v


def run(module: ModuleOp, inputs: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Runs the module's single function at tile or exchange level; returns the outputs (float32 arrays)."""
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp)]
    if len(funcs) != 1:
        raise TileInterpError(f"expected one func.func, found {len(funcs)}")
    it = Interpreter(inputs, with_derived(params, funcs[0]))  # derived parameters as the host derives them
    it.run_block(funcs[0].body.block)
    return it.outputs
