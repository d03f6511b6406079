"""Lowerings of the ViT's row, attention and slice ops (a mixin of `Lowering`).

The IR keeps activations in f32 between ops (the residual stream); the row kernels and the GEMM work on f16. So a
row op is cast f32 -> f16 into scratch, the f16 kernel, cast f16 -> f32 into the result buffer:

- `nn.layer_norm` (`#tile.map<rows>`, blocks of whole rows): weight and bias cast to f16 in the aux scratch, then
  `Rows("layernorm")` over every row of the tile's shard;
- `nn.gelu` (`#tile.map<elementwise>`): `Rows("gelu")` over the shard (units of 4 halves);
- `nn.slice` (`#tile.single`): row copies on the one tile that holds the sliced operand;
- `nn.attention` (`#tile.attention<materialized>`): per result block (query rows x one head) on its tile:
  Q * scale (f32) -> f16 A; K -> f16 -> weight panels (`weights_from_bt`); S = Q K^T (F16 GEMM, M padded to the
  GEMM's 3 rows); softmax rows (f16) -> P; V -> f16 -> weight panels (`WeightsF16`); O = P V; cast to f32.

A tile holding several blocks of a result runs the sequence once per block ("rounds": round j = each tile's j-th
block), so every call site still has one frame per tile.
"""

from __future__ import annotations

import numpy as np
from xdsl.ir import Operation

from ipu.backend.kernels import elementwise as ew
from ipu.backend.kernels import gemm as gm
from ipu.backend.kernels import pack as pk
from ipu.backend.kernels import rowwise as rw
from ipu.backend.lower.bindings import device_dtype
from ipu.dialects import nn
from ipu.dialects import tile as tl

ENTRY = {ew.Elementwise: ("ew_sup", ew.FRAME_WORDS), gm.Gemm: ("gemm_f16_sup_ld64", gm.FRAME_WORDS)}
for _k in (rw.Rows, pk.Chunks, pk.WeightsF16):
    ENTRY[_k] = ("rows_sup", rw.FRAME_WORDS)


class NnOps:
    """Methods of `Lowering` (uses its `call`, `scratch`, `copy_call`, `addrs`, `image`, `n`, `target`)."""

    def aux(self) -> int:
        """A third scratch area (region-1 element sized, any memory): f16 copies of small operands, weight
        panels of K and V."""
        if getattr(self, "_aux", None) is None:
            e = self.target.region1_element_bytes
            self._aux = self.image.alloc(e, 16, "high")
            # Written at upload: padded units read past staged data (the simulator poisons unwritten memory).
            self.image.put("aux scratch", self._aux, np.zeros(e, np.uint8))
        return self._aux

    def kcall(self, what: str, per_tile: dict[int, object]) -> None:
        """One call site: tile -> kernel call object (Elementwise, Rows, Gemm, pack kernels); tiles absent skip."""
        per_tile = {t: k for t, k in per_tile.items() if k is not None}
        if not per_tile:
            return
        kinds = {type(k) for k in per_tile.values()}
        if len(kinds) != 1:
            raise ValueError(f"{what}: one kernel per call site, got {kinds}")
        entry, words = ENTRY[kinds.pop()]

        def build(labels):
            active = np.zeros(self.n, np.uint32)
            frames = np.zeros((self.n, words), np.uint32)
            for t, k in per_tile.items():
                frames[t] = k.frame(labels)
                active[t] = 1
            return active, frames

        self.call(entry, words, build, all_active=len(per_tile) == self.n, what=what)

    def _same_layout(self, op: Operation, x, what: str):
        lay = op.attributes[tl.LAYOUT_ATTR]
        xl = tl.layout_of(x)
        if xl is None or xl.block_ != lay.block_ or xl.shape_ != lay.shape_ or xl.order != lay.order:
            raise self.error(f"{what}: operand layout differs from the result's")
        if not np.array_equal(xl.table(), lay.table()):
            raise self.error(f"{what}: operand blocks live on other tiles than the result's")
        if device_dtype(lay.dtype) != "f32" or device_dtype(xl.dtype) != "f32":
            raise self.error(f"{what}: f32 operand and result expected")
        return lay

    def error(self, msg: str):
        from ipu.backend.lower.lowering import LoweringError

        return LoweringError(msg)

    def _check_fits(self, nbytes: int, what: str) -> None:
        if nbytes > self.target.region1_element_bytes:
            raise self.error(f"{what}: {nbytes} B of a tile's work exceeds a scratch element")

    # -- row ops ---------------------------------------------------------------------------------------------
    def layer_norm(self, op: nn.LayerNormOp) -> None:
        x, w, b = op.operands
        what = f"nn.layer_norm ({op.results[0].name_hint or 'unnamed'})"
        lay = self._same_layout(op, x, what)
        n = lay.shape_[-1]
        if lay.block_[-1] != n or n % 4:
            raise self.error(f"{what}: blocks must be whole rows of n % 4 == 0 elements")
        shard = lay.geometry().shard_elems
        tiles = [int(t) for t in np.unique(lay.table())]
        c_area, a_area, _ = self.scratch()
        aux = self.aux()
        w16, b16 = aux, aux + (n * 2 + 7) // 8 * 8
        self._check_fits(int(shard.max()) * 2, what)
        xa, out = self.addrs.of(x).addr, self.addrs.of(op.results[0]).addr
        wa = {t: self._panel_addr(w, t, (0,), (n,), what) for t in tiles}
        ba = {t: self._panel_addr(b, t, (0,), (n,), what) for t in tiles}
        units = {t: int(shard[t]) // 4 for t in tiles}
        self.kcall(
            f"{what}: x to f16",
            {t: ew.Elementwise("cast_f32_f16", units[t], in0=int(xa[t]), out=a_area) for t in tiles},
        )
        self.kcall(
            f"{what}: weight to f16",
            {t: ew.Elementwise("cast_f32_f16", n // 4, in0=wa[t], out=w16) for t in tiles},
        )
        self.kcall(
            f"{what}: bias to f16",
            {t: ew.Elementwise("cast_f32_f16", n // 4, in0=ba[t], out=b16) for t in tiles},
        )
        eps = float(op.eps.value.data) if hasattr(op.eps, "value") else float(op.eps)
        self.kcall(
            f"{what}: rows",
            {
                t: rw.Rows(
                    "layernorm", int(shard[t]) // n, n, in0=a_area, in1=w16, in2=b16, out=c_area, eps=eps
                )
                for t in tiles
            },
        )
        self.kcall(
            f"{what}: to f32",
            {t: ew.Elementwise("cast_f16_f32", units[t], in0=c_area, out=int(out[t])) for t in tiles},
        )

    def gelu(self, op: nn.GeluOp) -> None:
        x = op.operands[0]
        what = f"nn.gelu ({op.results[0].name_hint or 'unnamed'})"
        lay = self._same_layout(op, x, what)
        shard = lay.geometry().shard_elems
        tiles = [int(t) for t in np.unique(lay.table())]
        self._check_fits(int(shard.max() + 4) * 4, what)
        c_area, a_area, _ = self.scratch()
        aux = self.aux()
        xa, out = self.addrs.of(x).addr.copy(), self.addrs.of(op.results[0]).addr.copy()
        units = {t: -(-int(shard[t]) // 4) for t in tiles}
        # Shards that are not whole 4-element units (many tiles, small tensors) are staged in the aux scratch:
        # the kernels have no tails, and must not write past the result's buffer.
        ragged = {t: (int(xa[t]), int(out[t]), int(shard[t]) * 4) for t in tiles if shard[t] % 4}
        self.copy_call(
            {t: [(src, aux, nb)] for t, (src, _, nb) in ragged.items()}, f"{what}: ragged shards in"
        )
        for t in ragged:
            xa[t] = out[t] = aux
        self.kcall(
            f"{what}: to f16",
            {t: ew.Elementwise("cast_f32_f16", units[t], in0=int(xa[t]), out=a_area) for t in tiles},
        )
        self.kcall(
            f"{what}: tanh GELU", {t: rw.Rows("gelu", units[t], in0=a_area, out=c_area) for t in tiles}
        )
        self.kcall(
            f"{what}: to f32",
            {t: ew.Elementwise("cast_f16_f32", units[t], in0=c_area, out=int(out[t])) for t in tiles},
        )
        self.copy_call(
            {t: [(aux, dst, nb)] for t, (_, dst, nb) in ragged.items()}, f"{what}: ragged shards out"
        )

    # -- slices on one tile -----------------------------------------------------------------------------------
    def slice_single(self, op: nn.SliceOp) -> None:
        x = op.operands[0]
        what = f"nn.slice ({op.results[0].name_hint or 'unnamed'})"
        lay, xl = op.attributes[tl.LAYOUT_ATTR], tl.layout_of(x)
        if len(lay.shape_) != 2 or lay.order.data != "row_major" or xl.order.data != "row_major":
            raise self.error(f"{what}: row-major matrices only")
        if xl.dtype != lay.dtype:
            raise self.error(f"{what}: element types differ")
        offsets = list(op.offsets.get_values()) if hasattr(op.offsets, "get_values") else list(op.offsets)
        esize = tl.element_bytes(lay.dtype)
        g, table = lay.geometry(), lay.table()
        out = self.addrs.of(op.results[0]).addr
        rows: dict[int, list] = {}
        for blk in range(lay.num_blocks):
            (r0, c0), (mr, nc) = (int(v) for v in g.block_origin[blk]), (int(v) for v in g.block_dims[blk])
            for rep in range(table.shape[1]):
                t = int(table[blk, rep])
                # The operand block holding the whole source window on tile t (rows and columns).
                src = self._source_block(x, t, (r0 + offsets[0], c0 + offsets[1]), (mr, nc), what)
                base, xcols = src
                dst = int(out[t]) + int(g.offset[blk, rep]) * esize
                rows.setdefault(t, []).extend(
                    (base + r * xcols * esize, dst + r * nc * esize, nc * esize) for r in range(mr)
                )
        self.copy_call(rows, f"{what}: rows")

    def _source_block(self, x, t: int, origin, dims, what: str) -> tuple[int, int]:
        """(address of element `origin` in the block of x on tile t that contains the window, block columns)."""
        xl = tl.layout_of(x)
        g, table = xl.geometry(), xl.table()
        esize = tl.element_bytes(xl.dtype)
        o, d = np.array(origin), np.array(dims)
        for b in range(xl.num_blocks):
            bo, bd = g.block_origin[b], g.block_dims[b]
            if (bo <= o).all() and (o + d <= bo + bd).all():
                reps = np.nonzero(table[b] == t)[0]
                if reps.size:
                    cols = int(bd[1])
                    off = int(g.offset[b, reps[0]]) + int(o[0] - bo[0]) * cols + int(o[1] - bo[1])
                    return int(self.addrs.of(x).addr[t]) + off * esize, cols
        raise self.error(f"{what}: tile {t} holds no operand block containing {list(origin)} x {list(dims)}")

    # -- attention ---------------------------------------------------------------------------------------------
    def attention(self, op: nn.AttentionOp, plan) -> None:
        q, k, v = op.operands[:3]
        what = f"nn.attention ({op.results[0].name_hint or 'unnamed'})"
        if plan.get("kind") != "materialized":
            raise self.error(f"{what}: only the materialized plan is lowered (got {plan.get('kind')})")
        if len(op.operands) > 3:
            raise self.error(f"{what}: masks are not lowered")
        lay = op.attributes[tl.LAYOUT_ATTR]
        for x in (q, k, v, op.results[0]):
            if device_dtype(tl.layout_of(x).dtype) != "f32" or tl.layout_of(x).order.data != "row_major":
                raise self.error(f"{what}: row-major f32 operands expected")
        heads = op.heads.value.data
        scale = float(op.scale.value.data)
        seq, hidden = k.type.get_shape()[-2:]
        d = hidden // heads
        if seq % 16 or d % 16:
            raise self.error(f"{what}: sequence ({seq}) and head size ({d}) must be multiples of 16")
        g, table = lay.geometry(), lay.table()
        out = self.addrs.of(op.results[0]).addr
        c_area, a_area, _ = self.scratch()
        aux = self.aux()
        kv_bytes = seq * d * 2
        k16, v16, wk, wv = aux, aux + kv_bytes, aux + 2 * kv_bytes, aux + 3 * kv_bytes
        q32 = aux + 4 * kv_bytes
        rounds: list[dict[int, tuple]] = []
        for blk in range(lay.num_blocks):
            (r0, c0), (mr, nc) = (int(x) for x in g.block_origin[blk]), (int(x) for x in g.block_dims[blk])
            if nc != d or c0 % d:
                raise self.error(
                    f"{what}: result blocks must be one head wide ({d} columns), got {nc} at {c0}"
                )
            for rep in range(table.shape[1]):
                t = int(table[blk, rep])
                job = (
                    self._panel_addr(q, t, (r0, c0), (mr, d), what) if True else 0,
                    self._panel_addr(k, t, (0, c0), (seq, d), what),
                    self._panel_addr(v, t, (0, c0), (seq, d), what),
                    mr,
                    int(out[t]) + int(g.offset[blk, rep]) * 4,
                )
                j = 0
                while j < len(rounds) and t in rounds[j]:
                    j += 1
                if j == len(rounds):
                    rounds.append({})
                rounds[j][t] = job
        mmax = max(max(job[3] for job in r.values()) for r in rounds)
        mpad = max(mmax, gm.MIN_ROWS)
        self._check_fits(q32 - aux + mmax * d * 4, what)
        self._check_fits(mpad * max(seq, d) * 6, what)
        for i, jobs in enumerate(rounds):
            tag = f"{what} [{i}]" if len(rounds) > 1 else what

            def each(make, jobs=jobs):
                return {t: make(*job) for t, job in jobs.items()}

            # Q * scale in f32, then f16 rows into A (rows beyond mr are left over: their results are unused).
            self.kcall(
                f"{tag}: Q * scale",
                each(
                    lambda qa, ka, va, m, o: ew.Elementwise(
                        "scale_f32", m * d // 2, in0=qa, out=q32, scalar=scale
                    )
                ),
            )
            self.kcall(
                f"{tag}: Q to f16",
                each(
                    lambda qa, ka, va, m, o: ew.Elementwise("cast_f32_f16", m * d // 4, in0=q32, out=a_area)
                ),
            )
            self.kcall(
                f"{tag}: K to f16",
                each(lambda qa, ka, va, m, o: ew.Elementwise("cast_f32_f16", seq * d // 4, in0=ka, out=k16)),
            )
            self.kcall(f"{tag}: K^T panels", each(lambda *j: pk.weights_from_bt(seq, d, "f16", k16, wk)))
            self.kcall(
                f"{tag}: S = Q K^T",
                each(
                    lambda *j: gm.Gemm(
                        mpad, d, seq, prec=gm.F16, mode="init", coef="ld64", a=a_area, weights=wk, c=c_area
                    )
                ),
            )
            self.kcall(
                f"{tag}: softmax",
                each(lambda qa, ka, va, m, o: rw.Rows("softmax", m, seq, in0=c_area, out=a_area)),
            )
            self.kcall(
                f"{tag}: V to f16",
                each(lambda qa, ka, va, m, o: ew.Elementwise("cast_f32_f16", seq * d // 4, in0=va, out=v16)),
            )
            self.kcall(f"{tag}: V panels", each(lambda *j: pk.WeightsF16(seq, d, v16, wv)))
            self.kcall(
                f"{tag}: O = P V",
                each(
                    lambda *j: gm.Gemm(
                        mpad, seq, d, prec=gm.F16, mode="init", coef="ld64", a=a_area, weights=wv, c=c_area
                    )
                ),
            )
            self.kcall(
                f"{tag}: O to f32",
                each(lambda qa, ka, va, m, o: ew.Elementwise("cast_f16_f32", m * d // 4, in0=c_area, out=o)),
            )
