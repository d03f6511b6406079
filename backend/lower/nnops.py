"""Lowerings of the ViT's row, attention and slice ops (a mixin of `Lowering`).

The IR keeps activations in f32 between ops (the residual stream); the row kernels and the GEMM work on f16. So a
row op is cast f32 -> f16 into scratch, the f16 kernel, cast f16 -> f32 into the result buffer:

- `nn.layer_norm` (`#tile.map<rows>`, blocks of whole rows): weight and bias cast to f16 in the aux scratch, then
  `Rows("layernorm")` over every row of the tile's shard (x cast to f16 first), or `layernorm_split32` (few rows
  per tile: every row split across the six workers) over the f32 rows in place;
- `nn.softmax` over the last axis (`#tile.map<rows>`, blocks of whole rows), f32 or f16 operand and result:
  `Rows("softmax")` (or `softmax_split` when its estimate is lower: few rows per tile) on f16 rows of p = n
  rounded up to 4 with `valid` = n. x is read in place (f16, n % 4 == 0) or cast into A; rows of n % 4 != 0
  are restrided by word copies into rows of p with zero columns: f32 words (f16 rows of odd n start mid-word
  from the second row on, so several such rows go through f32), one f32 row per tile cast in place but for its
  last unit. f16 results are written by the kernel (n % 4 == 0, or one row per tile: its last atom ends at the
  buffer's 8-byte boundary), else cast / restrided back the same way. [16, 729] f32 -> f16 on 16 tiles:
  `softmax_split`, 4095 cycles per tile (`softmax`: 26661), ~5.2k cycles for the op; f32 -> f32 (the folded
  MAP head's probabilities, `nn-fold-probe-attention`) ~6.5k: the f32 row copied back after the cast;
- `nn.gelu` (`#tile.map<elementwise>`): `Rows("gelu")` over the shard (units of 4 halves);
- `nn.slice` (`#tile.single`): row copies on the one tile that holds the sliced operand;
- `nn.attention` (`#tile.attention<materialized>`): per result block (m query rows x one head of d) on its tile,
  for any key count seq and head size d (d % 4 == 0), padded exactly: d to dpad (a multiple of 16) and seq to spad;
  operands and result f32 or f16 (`nn-quantize-weights{attention_f16}`):
    Q * scale -> f16 rows of dpad in A, zero columns d..dpad (f32 Q: `Rows("to_f16")`; f16 Q: its rows in one
    `panels_f16` / `pad_f16` call, then `scale_f16` in place; GEMM rows padded to 3, left over);
    per key chunk: K rows -> f16 rows of dpad, zero columns (`Rows("cast_f16")` from f32, `Rows("pad_f16")` from
    f16) + zero key rows up to the chunk's multiple of 16 (`pad_f16`, valid 0; not on the S^T path), then the
    scores either
    * (blocks of <= 32 rows, S^T [spad, qn] fits C: the default) transposed: Q rows padded to qn (16 or 32: one
      or two weight blocks) with zero rows -> Q^T weight panels (`weights_from_bt`, N = qn) once; per chunk
      S^T[chunk] = K Q^T (F16 GEMM with the chunk's K rows as A: M = its keys keeps all six workers busy, no
      K^T packing), S^T's rows past them up to the chunk's multiple of 16 zero (`pad_f16`: qn halves a key
      where zero K rows would be dpad and GEMM rows); then S's qn rows row-major from S^T in one transpose
      (`TransposeF16`, K = spad, N = qn; rows m..qn zero). f16 Q and K in column panels of one width p (16 < p
      < 32, or a multiple of 16; So400m's 24 of a 72-wide head, kernel-select's `k_operand`): the GEMM reads K's panels
      where they lie (no K rows), two overlapping 16-column blocks per panel (columns [0, 16) and [p - 16, p)),
      and Q^T's weight panels follow that block order with zeros for the columns read twice, written straight
      from Q's column panels (`panels_gap_f16` with block_jump; p a multiple of 16: Q's rows, then the panels);
    * or per chunk K^T weight panels (`weights_from_bt`) -> S[:, chunk] = Q K^T (F16 GEMM into C, row stride
      2 * spad; the GEMM has only m rows: at most m / 3 workers busy);
    softmax over the seq valid columns of each row (`Rows("softmax", valid=seq)`), P in A with zero columns
    seq..spad (a padded key's logit is Q . 0 = 0, masked to -inf: it does not contribute);
    then the output, per key chunk (V rows: f16, zero columns, zero rows: 0 * 0 adds nothing), either
    * (S^T path: the default, kernel-select's `pv`) transposed: O^T [dpad, qn] (=|+=) V^T[:, chunk] P^T[chunk] (F16
      GEMM with V^T's dpad rows as A: all six workers busy however few query rows; P^T as qn / 16 column blocks
      of weight panels, `weights_from_bt` from P's qn rows, rows m..qn zero); V^T's rows by `TransposeF16`
      straight from f16 V's column panels (whole K blocks of keys, all panels in one call; zero rows d..dpad once
      per chunk size; a chunk's keys past its whole blocks through at most 16 V rows in C, `AttentionSizes.v_direct`)
      or from the V rows; at the end O's rows from O^T (`TransposeF16`) into A;
    * or O (=|+=) P[:, chunk] V[chunk] with V's weight panels (`WeightsF16`; f16 V in column panels and whole K
      blocks: each panel straight into its column groups), the GEMM over the block's mpad rows;
    the same f16 rounding per 16-key inner block either way (and as one GEMM over all keys); O's first d columns
    -> the result rows (`Rows("to_f32")`, or `pad_f16` for f16).
  Scratch: C holds S [mpad, spad] (or S^T [spad, qn]) f16, then O (or O^T) and a chunk's V rows; A holds Q and a
  chunk's K rows, then P (and P^T's panels after it; O's rows at the end); aux a chunk's weight panels or V^T
  rows (or Q^T's and S's panels). Chunks are as large as the elements allow (`attention_sizes`: So400m's 8 x 72
  blocks over 729 keys take 176 keys per chunk, S^T path); blocks that do not fit raise a LoweringError naming the
  op, the tile and the sizes. Every byte a kernel reads was written by this sequence (the padding included).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.ir import Operation

from ipu.backend.kernels import elementwise as ew
from ipu.backend.kernels import gemm as gm
from ipu.backend.kernels import ksum as ks
from ipu.backend.kernels import pack as pk
from ipu.backend.kernels import rowwise as rw
from ipu.backend.lower.bindings import device_dtype, fp8_format
from ipu.backend.target import IPU21
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.runtime import fp8

ZEROS_BYTES = 256  # a resident zero constant (K padding of GEMM operands, padding rows)


def _words(nbytes: int) -> int:
    """nbytes rounded up to whole 4-byte words."""
    return -(-nbytes // 4) * 4


def zero_copies(zeros: int, dst: int, nbytes: int) -> list[tuple[int, int, int]]:
    """Copies (source, destination, bytes) writing nbytes of zeros at dst from the zero constant at `zeros`."""
    return [(zeros, dst + off, min(ZEROS_BYTES, nbytes - off)) for off in range(0, nbytes, ZEROS_BYTES)]


def n_padding_zeros(
    pads: dict[int, tuple[int, int]], kw: int, area: int, zeros: int, piece: int = 32, kblock: int = 16
):
    """Per tile t with pads[t] = (n, npad): the chunk writing zeros into the N padding rows [n, npad) of AMP
    weight panels of kw K columns at `area` (`gemm.pack_weights` order: 16-row K blocks of `piece`-byte rows;
    kblock: the K elements of one block, 16 for F16 panels, 32 for FP8)."""
    blk = 16 * piece  # bytes of one 16-row K block of the area
    kb = kw // kblock
    return {
        t: pk.Chunks(
            npad - n,
            kb,
            zeros,
            area + (n >> 4) * kb * blk + (n & 15) * piece,
            src_row=0,
            src_blk=0,
            dst_row=piece,
            dst_blk=blk,
            shift=4,
            dst_group=kb * blk,
            piece=piece,
        )  # fmt: skip
        for t, (n, npad) in pads.items()
        if npad > n
    }


def _padded_rows(rows: int, width: int, src: int, in_stride: int, dst: int, out_width: int):
    """FP8 bytes: `rows` rows of `width` bytes at src (row stride in_stride) -> rows of out_width bytes at dst,
    zeros after width, as one `panels_f16` row kernel over byte pairs; None when the kernel cannot (pieces of
    whole 8-byte atoms, at least PF_MIN_P halves, aligned): the caller copies."""
    if width % 8 or width // 2 < rw.PF_MIN_P or src % 8 or dst % 8 or in_stride % 8 or out_width % 8:
        return None
    return rw.Rows("panels_f16", rows, out_width // 2, in0=src, out=dst, panels=1, panel_width=width // 2,
                   panel_step=rows * in_stride, in_stride=in_stride)  # fmt: skip


ENTRY = {ew.Elementwise: ("ew_sup", ew.FRAME_WORDS), gm.Gemm: ("gemm_f16_sup_ld64", gm.FRAME_WORDS)}
for _k in (rw.Rows, pk.Chunks, pk.WeightsF16):
    ENTRY[_k] = ("rows_sup", rw.FRAME_WORDS)
ENTRY[pk.FP8ToF16] = ("rows_sup", pk.FP8_FRAME_WORDS)
ENTRY[pk.TransposeF16] = ("rows_sup", pk.T_FRAME_WORDS)
ENTRY[ks.KSum] = ("ew_sup", ks.FRAME_WORDS)


def _place_in_rounds(rounds: list[dict], t: int, item) -> None:
    """Puts tile t's `item` into the first round that has none of t's yet (a new round after the last): calls
    per tile run one after the other, a round being one call per tile."""
    i = next((i for i, r in enumerate(rounds) if t not in r), len(rounds))
    if i == len(rounds):
        rounds.append({})
    rounds[i][t] = item


class NnOps:
    """Methods of `Lowering` (uses its `call`, `scratch`, `copy_call`, `addrs`, `image`, `n`, `target`)."""

    def kernel(self, cls, *args, **kw):
        """cls(*args, **kw), one object per distinct arguments (kernel calls are frozen dataclasses: the tiles of
        a class, which ask for the same call, share one; `kcall` then builds its frame once)."""
        key = (cls, args, tuple(map(type, args)), tuple(kw.items()), tuple(type(v) for v in kw.values()))
        cache = self.__dict__.setdefault("_kernels", {})
        try:
            obj = cache.get(key)
        except TypeError:  # an unhashable argument
            return cls(*args, **kw)
        if obj is None:
            obj = cache[key] = cls(*args, **kw)
        return obj

    def aux(self, mark: bool = True) -> int:
        """A third scratch area (region-1 element sized, any memory): f16 copies of small operands, weight
        panels of K and V. mark: the op being lowered uses all of it (`use_scratch`); a caller that knows its
        bytes passes False and marks them itself."""
        self._scratch_areas()
        if mark:
            self.use_scratch(aux=self.target.region1_element_bytes)
        return self._aux

    def _use_bounded(self, use: tuple[int, int, int]) -> None:
        """Marks an op's scratch use (C, A, aux bytes), at most the whole elements."""
        e = self.target.region1_element_bytes
        c, a, aux = (min(x, e) for x in use)
        self.use_scratch(c=c, a=a, aux=aux)

    def kcall(self, what: str, per_tile: dict[int, object]) -> None:
        """One call site: tile -> kernel call object (Elementwise, Rows, Gemm, pack kernels); tiles absent skip."""
        per_tile = {t: k for t, k in per_tile.items() if k is not None}
        if not per_tile:
            return
        kinds = {type(k) for k in per_tile.values()}
        if len(kinds) != 1:
            raise ValueError(f"{what}: one kernel per call site, got {kinds}")
        for k in per_tile.values():  # the rows loops the library must hold (a measuring lowering: the same)
            if isinstance(k, rw.Rows) and k.op == "panels_f16" and rw.pf_own_loop(k.panel_width):
                self.__dict__.setdefault("pf_atoms", set()).add(k.panel_width // 4)
            if isinstance(k, rw.Rows) and k.op == "panels_gap_f16":
                self.__dict__.setdefault("pfg_loops", set()).add(k.pfg_loop[1])
        entry, words = ENTRY[kinds.pop()]
        entries = {getattr(k, "entry", entry) for k in per_tile.values()}  # a GEMM's supervisor: by its coef
        if len(entries) != 1:
            raise ValueError(f"{what}: one kernel entry per call site, got {sorted(entries)}")
        entry = entries.pop()
        # A call object that says how long its frame is (`KSum` with the GELU's constants): the longest.
        words = max(getattr(k, "words", words) for k in per_tile.values())

        def build(labels):
            active = np.zeros(self.n, np.uint32)
            frames = np.zeros((self.n, words), np.uint32)
            # Tiles of one class get equal kernel objects (same addresses, sizes), often the same one: one frame
            # each, written to all its tiles at once.
            memo: dict = {}
            by_id: dict[int, int] = {}  # id(kernel object) -> its frame's group
            groups: list[tuple[np.ndarray, list[int]]] = []
            group_of: dict[int, int] = {}  # id(frame) -> group
            for t, k in per_tile.items():
                g = by_id.get(id(k))
                if g is None:
                    try:
                        frame = memo.get(k)
                        if frame is None:
                            frame = memo[k] = k.frame(labels)
                    except TypeError:  # a kernel with an unhashable field
                        frame = k.frame(labels)
                    g = group_of.get(id(frame))
                    if g is None:
                        g = group_of[id(frame)] = len(groups)
                        groups.append((frame, []))
                    by_id[id(k)] = g
                groups[g][1].append(t)
            for frame, tiles in groups:
                idx = np.array(tiles, np.int64)
                frames[idx] = frame
                active[idx] = 1
            return active, frames

        self.call(entry, words, build, all_active=len(per_tile) == self.n, what=what)

    def _same_layout(
        self,
        op: Operation,
        x,
        what: str,
        f16_too: bool = False,
        f16_result: bool = False,
        mixed: bool = False,
    ):
        """The result's layout, which the operand's must equal: f32 (f16_too: or both f16; f16_result: an f16
        result of an f32 operand; mixed: each f32 or f16)."""
        lay = op.attributes[tl.LAYOUT_ATTR]
        xl = tl.layout_of(x)
        if xl is None or xl.block_ != lay.block_ or xl.shape_ != lay.shape_ or xl.order != lay.order:
            raise self.error(f"{what}: operand layout differs from the result's")
        if not np.array_equal(xl.table(), lay.table()):
            raise self.error(f"{what}: operand blocks live on other tiles than the result's")
        dts = {device_dtype(lay.dtype), device_dtype(xl.dtype)}
        if mixed:
            if not dts <= {"f32", "f16"}:
                raise self.error(f"{what}: f32 or f16 operand and result expected")
            return lay
        f32_to_f16 = f16_result and device_dtype(lay.dtype) == "f16" and device_dtype(xl.dtype) == "f32"
        if dts != {"f32"} and not (f16_too and dts == {"f16"}) and not f32_to_f16:
            raise self.error(
                f"{what}: f32 operand and result expected" + (" (or both f16)" if f16_too else "")
            )
        return lay

    def optional_choice(self, op: Operation, key: str):
        """kernel-select's choice `key` for op, or None when it made none (e.g. a sum that applies no scale)."""
        from ipu.passes.kernel_select import choices

        return choices(op).get(key)

    def choice(self, op: Operation, key: str):
        """kernel-select's choice `key` for op (its `kernel` attribute); a LoweringError when it is missing."""
        from ipu.passes.kernel_select import KernelChoiceError, check, choices

        try:
            values = choices(op)
            check(op, values)
        except KernelChoiceError as e:
            raise self.error(str(e)) from None
        if key not in values:
            raise self.error(
                f"{op.name} ({op.results[0].name_hint or 'unnamed'}): no kernel choice '{key}': run kernel-select "
                "(the last pass of nn-to-exchange-pipeline)"
            )
        return values[key]

    def gemm_coef(self, op: Operation, panels: int) -> str:
        """The GEMM's coefficient loads (kernel-select's `coef`): ld128 needs the weight panels in interleaved
        memory at a 16-byte boundary."""
        coef = self.choice(op, "coef")
        if coef == "ld128" and not ld128_fits(panels, self.target.region1[0]):
            raise self.error(
                f"{op.name} ({op.results[0].name_hint or 'unnamed'}): kernel choice coef = 'ld128' needs the weight "
                f"panels in interleaved memory (from {self.target.region1[0]:#x}) at 16 bytes; they are at {panels:#x}"
            )
        return coef

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
        lay = self._same_layout(op, x, what, f16_result=True)
        f16_out = device_dtype(lay.dtype) == "f16"  # the kernel writes the f16 result rows itself
        n = lay.shape_[-1]
        if lay.block_[-1] != n or n % 4:
            raise self.error(f"{what}: blocks must be whole rows of n % 4 == 0 elements")
        shard = lay.geometry().shard_elems
        tiles = [int(t) for t in np.unique(lay.table())]
        c_area, a_area, _ = self.scratch()
        aux = self.aux()
        slot = (n * 2 + 7) // 8 * 8  # an f16 weight or bias row in the aux scratch
        self._check_fits(int(shard.max()) * 2, what)
        xa, out = self.addrs.of(x).addr, self.addrs.of(op.results[0]).addr
        units = {t: int(shard[t]) // 4 for t in tiles}
        split = self.choice(op, "rows") == "layernorm_split"
        if not split:  # (`layernorm_split32` reads the f32 rows itself)
            self.kcall(
                f"{what}: x to f16",
                {t: ew.cast("cast_f32_f16", units[t], in0=int(xa[t]), out=a_area) for t in tiles},
            )
        # The kernel's f16 weight and bias per tile: f16 parameters (nn-quantize-weights) where they are, f32 ones
        # cast into the aux scratch.
        f16_rows = []
        for name, v, dst in (("weight", w, aux), ("bias", b, aux + slot)):
            at = {t: self._panel_addr(v, t, (0,), (n,), what) for t in tiles}
            if device_dtype(v.type.element_type) != "f16":
                self.kcall(
                    f"{what}: {name} to f16",
                    {t: ew.cast("cast_f32_f16", n // 4, in0=at[t], out=dst) for t in tiles},
                )
                at = dict.fromkeys(tiles, dst)
            f16_rows.append(at)
        eps = float(op.eps.value.data) if hasattr(op.eps, "value") else float(op.eps)
        rows = {t: int(shard[t]) // n for t in tiles}

        def kw(t):
            return dict(
                in0=a_area, in1=f16_rows[0][t], in2=f16_rows[1][t], out=c_area, eps=eps
            ) | self._ln_out(f16_out, out, t)

        # kernel-select's row kernel: `layernorm`, or `layernorm_split` (every row split across the six workers,
        # partials in aux after the f16 bias), run as `layernorm_split32` on the f32 rows in place (no cast).
        if split:
            from ipu.passes.kernel_select import layernorm_split_fits

            if not layernorm_split_fits(n, rows, self.target.region1_element_bytes):
                raise self.error(
                    f"{what}: kernel choice rows = 'layernorm_split' needs n >= {rw.LNS_MIN_N} and the partials "
                    f"of {max(rows.values())} rows within the aux scratch"
                )
            parts = aux + 2 * slot  # after the f16 weight and bias slots
            calls = {
                t: rw.Rows("layernorm_split32", rows[t], n, st0=parts, **(kw(t) | {"in0": int(xa[t])}))
                for t in tiles
            }
        else:
            calls = {t: rw.Rows("layernorm", rows[t], n, **kw(t)) for t in tiles}
        self.kcall(f"{what}: rows", calls)
        if not f16_out:
            self.kcall(
                f"{what}: to f32",
                {t: ew.cast("cast_f16_f32", units[t], in0=c_area, out=int(out[t])) for t in tiles},
            )

    @staticmethod
    def _ln_out(f16_out: bool, out, t: int) -> dict:
        return {"out": int(out[t])} if f16_out else {}

    def softmax(self, op: nn.SoftmaxOp) -> None:
        """Softmax over the last axis (see the module docstring): f16 rows of p = n rounded up to 4 for the
        row kernel, which reads the n valid columns and writes zeros after them."""
        x = op.operands[0]
        what = f"nn.softmax ({op.results[0].name_hint or 'unnamed'})"
        lay = self._same_layout(op, x, what, mixed=True)
        n = lay.shape_[-1]
        if op.axis.value.data not in (-1, len(lay.shape_) - 1) or lay.block_[-1] != n:
            raise self.error(f"{what}: only the last axis over blocks of whole rows is lowered")
        in16, out16 = (device_dtype(tl.layout_of(v).dtype) == "f16" for v in (x, op.results[0]))
        shard = lay.geometry().shard_elems
        tiles = [int(t) for t in np.unique(lay.table())]
        rows = {t: int(shard[t]) // n for t in tiles}
        most = max(rows.values())
        p = -(-n // 4) * 4
        ragged = p != n
        # f16 rows start at whole words (as copies need) when n is even or a tile holds one row (its buffer).
        words16 = n % 2 == 0 or most == 1
        f32_rows = ragged and not (in16 and out16 and words16)  # f32 rows of p in aux: whole words for any n
        self._check_fits(most * p * (4 if f32_rows else 2), f"{what}, rows of {n} x {most} per tile")
        c_area, a_area, zeros = self.scratch()
        aux = self.aux()
        xa, out = self.addrs.of(x).addr, self.addrs.of(op.results[0]).addr
        x_at, out_at = ({t: int(a[t]) for t in tiles} for a in (xa, out))
        a_at, c_at, aux_at = (dict.fromkeys(tiles, a) for a in (a_area, c_area, aux))

        def cast(label: str, kind: str, units: dict[int, int], src: dict, dst: dict) -> None:
            self.kcall(
                f"{what}: {label}", {t: ew.cast(kind, units[t], in0=src[t], out=dst[t]) for t in tiles}
            )

        def restride(label: str, src: dict, src_row: int, dst: dict, dst_row: int, nbytes: int) -> None:
            self._row_copies(f"{what}: {label}", rows, src, src_row, dst, dst_row, nbytes)

        # The kernel's input: x itself (f16, n % 4 == 0) or f16 rows of p in A with zero columns n..p.
        src = a_at
        if not ragged:
            if in16:
                src = x_at
            else:
                cast("x to f16", "cast_f32_f16", {t: r * n // 4 for t, r in rows.items()}, x_at, a_at)
        elif in16 and words16:
            restride(f"x rows to {p}", x_at, 2 * n, a_at, 2 * p, 2 * n)
        elif not in16 and most == 1:
            # One f32 row per tile (its buffer): whole units cast in place, only the last one padded in aux.
            whole = n // 4
            restride(
                "x's last unit", {t: a + 16 * whole for t, a in x_at.items()}, 0, aux_at, 16, 4 * (n % 4)
            )
            if whole:
                cast("x to f16", "cast_f32_f16", dict.fromkeys(tiles, whole), x_at, a_at)
            last = dict.fromkeys(tiles, a_area + 8 * whole)
            cast("x's last unit to f16", "cast_f32_f16", dict.fromkeys(tiles, 1), aux_at, last)
        else:
            f32 = x_at
            if in16:  # odd n, several rows: f16 rows start mid-word, so through f32 (whole words)
                staged = {t for t in tiles if rows[t] * n % 4}  # the whole-unit cast must not read past x
                self.copy_call({t: [(x_at[t], aux, rows[t] * n * 2)] for t in staged}, f"{what}: ragged x in")
                units = {t: -(-r * n // 4) for t, r in rows.items()}
                x16 = {t: aux if t in staged else x_at[t] for t in tiles}
                cast("x to f32", "cast_f16_f32", units, x16, c_at)
                f32 = c_at
            restride(f"x rows to {p}", f32, 4 * n, aux_at, 4 * p, 4 * n)
            cast("x to f16", "cast_f32_f16", {t: r * p // 4 for t, r in rows.items()}, aux_at, a_at)
        # f16 results straight from the kernel: rows of n % 4 == 0, or one row per tile (its last atom ends at
        # the buffer's 8-byte boundary: memory-plan aligns buffers to 8).
        direct = out16 and (not ragged or most == 1)
        dst = out_at if direct else c_at
        kw = {t: dict(in0=src[t], out=dst[t], valid=n) for t in tiles}
        # kernel-select's row kernel; `softmax_split` (every row split across the six workers) keeps its partials
        # in aux: its x rows are consumed by now.
        if self.choice(op, "rows") == "softmax_split":
            from ipu.passes.kernel_select import softmax_split_fits

            if not softmax_split_fits(n, most, self.target.region1_element_bytes):
                raise self.error(
                    f"{what}: kernel choice rows = 'softmax_split' needs >= {rw.SMS_MIN_VALID} columns and its "
                    f"partials of {most} rows within the aux scratch"
                )
            calls = {t: rw.Rows("softmax_split", rows[t], p, st0=aux, **kw[t]) for t in tiles}
        else:
            calls = {t: rw.Rows("softmax", rows[t], p, **kw[t]) for t in tiles}
        self.kcall(f"{what}: rows", calls)
        if direct:
            return
        if not ragged:
            cast("to f32", "cast_f16_f32", {t: r * n // 4 for t, r in rows.items()}, c_at, out_at)
        elif out16 and n % 2 == 0:
            restride("result rows", c_at, 2 * p, out_at, 2 * n, 2 * n)
        else:
            cast("to f32", "cast_f16_f32", {t: r * p // 4 for t, r in rows.items()}, c_at, aux_at)
            if not out16:
                restride("result rows", aux_at, 4 * p, out_at, 4 * n, 4 * n)
            else:  # odd n, several rows: packed f32 rows in A, one cast (last atom up to the 8-byte boundary)
                restride("result rows", aux_at, 4 * p, a_at, 4 * n, 4 * n)
                cast("to f16", "cast_f32_f16", {t: -(-r * n // 4) for t, r in rows.items()}, a_at, out_at)

    def _row_copies(
        self, name: str, rows: dict, src: dict, src_row: int, dst: dict, dst_row: int, nbytes: int
    ):
        """Per tile t: rows[t] copies of nbytes from src[t] + i * src_row to dst[t] + i * dst_row, each row's
        bytes nbytes..dst_row zeroed (padding columns a kernel reads)."""
        _, _, zeros = self.scratch()
        copies = {}
        for t, r in rows.items():
            copies[t] = []
            for i in range(r):
                d = dst[t] + i * dst_row
                # A zero source at the destination's offset in its word: the (< 16 B) padding in word copies.
                pad = zero_copies(zeros + (d + nbytes) % 4, d + nbytes, dst_row - nbytes)
                copies[t] += [(src[t] + i * src_row, d, nbytes), *pad]
        self.copy_call(copies, name)

    def gelu(self, op: nn.GeluOp) -> None:
        x = op.operands[0]
        what = f"nn.gelu ({op.results[0].name_hint or 'unnamed'})"
        lay = self._same_layout(op, x, what, f16_too=True)
        self._gelu_shards(lay, self.addrs.of(x).addr.copy(), self.addrs.of(op.results[0]).addr.copy(), what)

    def _gelu_shards(self, lay, xa: np.ndarray, out: np.ndarray, what: str) -> None:
        """The tanh GELU of every tile's shard of `lay` at xa into out (per-tile addresses; out may be xa)."""
        shard = lay.geometry().shard_elems
        tiles = [int(t) for t in np.unique(lay.table())]
        self._check_fits(int(shard.max() + 4) * 4, what)
        c_area, a_area, zeros = self.scratch()
        aux = self.aux()
        esize = tl.element_bytes(lay.dtype)
        units = {t: -(-int(shard[t]) // 4) for t in tiles}
        # Shards that are not whole 4-element units (many tiles, small tensors) are staged in the aux scratch:
        # the kernels have no tails, and must not write past the result's buffer. The copies move whole words
        # (an odd f16 shard ends at a half word; memory-plan's buffers are 8-byte aligned, so the rest of that
        # word belongs to no other buffer): a half-word end copied by itself is a read-modify-write of a
        # destination word whose other half nothing has written (`xch_half`: a simulator poison error). The
        # staged units past the shard's words are zeroed: the kernels read whole units.
        ragged = {t: (int(xa[t]), int(out[t]), int(shard[t]) * esize) for t in tiles if shard[t] % 4}
        for t, (src, dst, _) in ragged.items():
            if src % 4 or dst % 4:
                raise self.error(
                    f"{what}: tile {t}: a ragged shard at {src:#x} -> {dst:#x} is not word aligned"
                )
        self.copy_call(
            {
                t: [(src, aux, nb), *zero_copies(zeros, aux + _words(nb), 4 * units[t] * esize - _words(nb))]
                for t, (src, _, nb) in ragged.items()
            },
            f"{what}: ragged shards in",
            whole_words=True,  # reads past a shard's end only, to its word's end
        )
        for t in ragged:
            xa[t] = out[t] = aux
        if esize == 2:  # f16 in and out: the kernel alone (a ragged shard's result through C, not in place)
            for t in ragged:
                out[t] = c_area
            self.kcall(
                f"{what}: tanh GELU",
                {t: rw.Rows("gelu", units[t], in0=int(xa[t]), out=int(out[t])) for t in tiles},
            )
        else:
            self.kcall(
                f"{what}: to f16",
                {t: ew.cast("cast_f32_f16", units[t], in0=int(xa[t]), out=a_area) for t in tiles},
            )
            self.kcall(
                f"{what}: tanh GELU", {t: rw.Rows("gelu", units[t], in0=a_area, out=c_area) for t in tiles}
            )
            self.kcall(
                f"{what}: to f32",
                {t: ew.cast("cast_f16_f32", units[t], in0=c_area, out=int(out[t])) for t in tiles},
            )
        self.copy_call(
            {t: [(int(out[t]), dst, nb)] for t, (_, dst, nb) in ragged.items()},
            f"{what}: ragged shards out",
            whole_words=True,  # writes past the shard's end only, to its word's end (the buffer's padding)
        )

    # -- K-split linears (`nn-split-k`) ------------------------------------------------------------------------
    def linear_partials(self, op: nn.LinearPartialsOp, plan: tl.GemmPlanAttr) -> None:
        """Per tile (K chunk g, column panel j; `tile_plan.partials_layouts`): the chunk's [M, kc] A rows from the
        replicated x into the A scratch, zero rows up to the kernel's minimum -> its own [pn, kc] weight block
        into F16 AMP weight panels (FP8: converted in the same pass) -> one F16 GEMM (init) into C -> the M rows
        cast to f32 into its [1, M, pn] result block."""
        if len(plan.get("grid")) == 3:
            self.linear_partials_rows(op)
            return
        xl0, wl0 = tl.layout_of(op.operands[0]), tl.layout_of(op.operands[1])
        if not op.groups and xl0.block_[1] < xl0.shape_[1] and device_dtype(wl0.dtype) == "f16":
            self.linear_partials_chunked(op)  # x in K chunks, f16 weights
            return
        x, w = op.operands
        what = f"nn.linear_partials ({op.results[0].name_hint or 'unnamed'})"
        lay = op.attributes[tl.LAYOUT_ATTR]
        g, table = lay.geometry(), lay.table()
        (m, k), kc = x.type.get_shape(), op.chunk
        xl, wl = tl.layout_of(x), tl.layout_of(w)
        wdt = device_dtype(wl.dtype)
        ampw = self._few_rows_ampw(wl, what)
        if (
            device_dtype(xl.dtype) != "f16"
            or xl.order.data != "row_major"
            or wl.order.data not in ("row_major", "ampw")
        ):
            raise self.error(
                f"{what}: x must arrive as row-major f16 and the weight as row-major blocks (or F16 AMP panels)"
            )
        if wdt not in ("f16", "f8e4m3fnuz", "f8e5m2fnuz") or device_dtype(lay.dtype) != "f32":
            raise self.error(f"{what}: f16 / FP8 weights and an f32 result only (got {wdt}, {lay.dtype})")
        if k % 16 or kc % 16 or 2 * kc > 4112:
            raise self.error(f"{what}: K = {k} and k_chunk = {kc} must be multiples of 16, k_chunk <= 2056")
        c_area, a_area, zeros = self.scratch(mark=False)  # marked below, by the bytes used
        panels = self.aux(mark=False)
        # Grouped (`row_groups`): one A row per tile, x's row of the panel's group ([1, kc] blocks of x).
        groups = op.groups
        x_chunks = not groups and xl.block_[1] < k  # x in K chunks (`tile_plan.chunked_x`), FP8 weights
        gsize = w.type.get_shape()[0] // groups if groups else 0
        ma = 1 if groups else m
        mpad = max(ma, gm.MIN_ROWS)
        res = self.addrs.of(op.results[0]).addr
        jobs = {}  # tile -> (chunk width, panel columns, x, weight block, result block)
        npad = {}  # tile -> its panel columns padded to the kernel's 16
        for b in range(lay.num_blocks):
            t = int(table[b, 0])
            (c0, _, n0), (_, _, nc) = (int(v) for v in g.block_origin[b]), (int(v) for v in g.block_dims[b])
            k0 = c0 * kc
            kw = min(kc, k - k0)
            # Panels of whole 16-column blocks, or (one row) of 4-column groups padded to 16 with zero rows.
            if nc % 16 and not (ma == 1 and nc % 4 == 0):
                raise self.error(f"{what}: tile {t}: a {nc}-column panel (the kernel needs multiples of 16)")
            # xa: row 0 of this chunk's columns of x (its rows kw apart in a chunk's block, K apart in the whole x)
            if groups:
                xa = self._panel_addr(x, t, (n0 // gsize, k0), (1, kw), what)
            elif x_chunks:  # x in K chunks (`tile_plan.chunked_x`): this chunk's [m, kw] block
                xa = self._panel_addr(x, t, (0, k0), (m, kw), what)
            else:
                xa = self._panel_addr(x, t, (0,), (m,), what) + k0 * 2
            wa = self._panel_addr(w, t, (n0, k0), (nc, kw), what)
            jobs[t] = (kw, nc, xa, wa, int(res[t]) + int(g.offset[b, 0]) * 4)
            npad[t] = -(-nc // 16) * 16
        if self.target.region1_element_bytes < max(j[0] * npad[t] * 2 for t, j in jobs.items()):
            raise self.error(f"{what}: a tile's F16 weight panels exceed the aux scratch")
        if ampw:
            self._check_ampw_blocks(what, {t: (j[1], j[0], j[3]) for t, j in jobs.items()})
        # C [mpad][npad] f16, A's [mpad][kw] rows, the [npad/16][kw/16] weight panels (none: read in place)
        self._use_bounded(
            (
                mpad * max(npad.values()) * 2,
                mpad * max(j[0] for j in jobs.values()) * 2,
                0 if ampw else max(j[0] * npad[t] * 2 for t, j in jobs.items()),
            )
        )
        rows = {}
        for t, (kw, _nc, xa, _wa, _ra) in jobs.items():
            if groups:
                rows[t] = [(xa, a_area, kw * 2)]
            else:
                xrow = kw if x_chunks else k
                rows[t] = [(xa + r * xrow * 2, a_area + r * kw * 2, kw * 2) for r in range(m)]
            rows[t] += zero_copies(
                zeros, a_area + ma * kw * 2, (mpad - ma) * kw * 2
            )  # up to the kernel's minimum
        self.copy_call(rows, f"{what}: A rows")
        if ampw:  # the weight blocks are the kernel's F16 panels: read in place
            prep = {}
        elif wdt == "f16":
            prep = {
                t: pk.weights_from_bt(j[1], j[0], "f16", j[3], panels, src_row=j[0] * 2)
                for t, j in jobs.items()
            }
        else:
            fmt = fp8_format(wl)
            prep = {
                t: pk.fp8_to_f16_panels(j[1], j[0], j[3], panels, src_row=j[0], **fmt)
                for t, j in jobs.items()
            }
        self.kcall(f"{what}: weight panels" + ("" if wdt == "f16" else f" {wdt} -> f16"), prep)
        if wdt == "f16" and not ampw:  # (the FP8 conversion zeroes the N padding rows itself)
            zero_rows = {}
            for t, j in jobs.items():  # (chunk widths differ by tile: the last chunk's may be shorter)
                zero_rows |= n_padding_zeros({t: (j[1], npad[t])}, j[0], panels, zeros)
            self.kcall(f"{what}: weight panels N padding", zero_rows)
        coef = self._ampw_coef(op, panels, {t: j[3] for t, j in jobs.items()} if ampw else None, what)
        self.kcall(
            f"{what}: GEMM",
            {
                t: gm.Gemm(
                    mpad,
                    kw,
                    npad[t],
                    prec=gm.F16,
                    mode="init",
                    coef=coef,
                    a=a_area,
                    weights=wa if ampw else panels,
                    c=c_area,
                    a_row_stride=kw * 2,
                )  # fmt: skip
                for t, (kw, _nc, _xa, wa, _ra) in jobs.items()
            },
        )
        self.kcall(
            f"{what}: to f32",
            {t: ew.cast("cast_f16_f32", ma * j[1] // 4, in0=c_area, out=j[4]) for t, j in jobs.items()},
        )

    def linear_partials_chunked(self, op: nn.LinearPartialsOp) -> None:
        """A few-row K split whose x arrives in K chunks (`tile_plan.chunked_x`, `partials_layouts`: the
        MAP head's U X^T, out_proj and MLP; f16 weights, 16-column panels), per tile (chunk c, column panel j):
        its x block [M, kw] is the GEMM's A in place (fewer than 3 rows: copied with zero rows); its [nc, kw]
        weight block -> F16 weight panels (`weights_from_bt`; N padding rows zeroed); one F16 GEMM; C cast to f32
        into the [1, M, nc] result block (a narrower panel: through the staging, row by row)."""
        x, w = op.operands
        what = f"nn.linear_partials ({op.results[0].name_hint or 'unnamed'})"
        lay = op.attributes[tl.LAYOUT_ATTR]
        xl, wl = tl.layout_of(x), tl.layout_of(w)
        ampw = self._few_rows_ampw(wl, what)
        if (
            any(device_dtype(v.dtype) != "f16" for v in (xl, wl))
            or xl.order.data != "row_major"
            or not (ampw or wl.order.data == "row_major")
        ):
            raise self.error(f"{what}: row-major f16 x and weight blocks (or F16 AMP panels) expected")
        if device_dtype(lay.dtype) != "f32":
            raise self.error(f"{what}: an f32 result expected")
        (m, k), kc = x.type.get_shape(), op.chunk
        if kc % 16 or k % 16 or 2 * kc > 4112:
            raise self.error(f"{what}: K = {k} and k_chunk = {kc} must be multiples of 16, k_chunk <= 2056")
        g, table = lay.geometry(), lay.table()
        c_area, a_area, zeros = self.scratch(mark=False)  # marked below, by the bytes used
        mpad = max(m, gm.MIN_ROWS)
        e = self.target.region1_element_bytes
        panels, stage = self.aux(mark=False), c_area + e // 2
        res = self.addrs.of(op.results[0]).addr
        jobs = {}  # tile -> (x block, weight block, rows of the panel, result block, chunk width)
        for b in range(lay.num_blocks):
            t = int(table[b, 0])
            (c, _, n0), (_, _, nc) = (int(v) for v in g.block_origin[b]), (int(v) for v in g.block_dims[b])
            if nc > 32:
                raise self.error(f"{what}: tile {t}: a {nc}-column panel (32 at most)")
            kw = min(kc, k - c * kc)
            xa = self._panel_addr(x, t, (0, c * kc), (m, kw), what)
            wa = self._panel_addr(w, t, (n0, c * kc), (nc, kw), what)
            jobs[t] = (xa, wa, nc, int(res[t]) + int(g.offset[b, 0]) * 4, kw, -(-nc // 16) * 16)
        # C [mpad][npad] f16 (a narrower panel's f32 rows staged at half the element), A's padded rows, the
        # weight panels
        narrow = any(j[2] != j[5] for j in jobs.values())
        npmax, kwmax = max(j[5] for j in jobs.values()), max(j[4] for j in jobs.values())
        if ampw:
            self._check_ampw_blocks(what, {t: (j[2], j[4], j[1]) for t, j in jobs.items()})
        self._use_bounded(
            (
                e // 2 + m * npmax * 4 if narrow else mpad * npmax * 2,
                mpad * kwmax * 2 if mpad > m else 0,
                0 if ampw else max(j[4] * j[5] * 2 for j in jobs.values()),
            )
        )
        if mpad > m:  # fewer rows than the kernel's minimum: x's block and zero rows in the A scratch
            self.copy_call(
                {t: [(j[0], a_area, m * j[4] * 2)] + zero_copies(zeros, a_area + m * j[4] * 2, (mpad - m) * j[4] * 2)
                 for t, j in jobs.items()},
                f"{what}: A rows",
            )  # fmt: skip
            jobs = {t: (a_area, *j[1:]) for t, j in jobs.items()}
        pads = {t: (j[2], j[5]) for t, j in jobs.items() if j[2] < j[5]}
        if not ampw:  # (ampw: the weight blocks are the kernel's F16 panels, read in place)
            self.kcall(
                f"{what}: weight panels",
                {
                    t: pk.weights_from_bt(j[2], j[4], "f16", j[1], panels, src_row=j[4] * 2)
                    for t, j in jobs.items()
                },
            )
            for kw in sorted({jobs[t][4] for t in pads}):
                sel = {t: p for t, p in pads.items() if jobs[t][4] == kw}
                self.kcall(f"{what}: weight panels N padding", n_padding_zeros(sel, kw, panels, zeros))
        coef = self._ampw_coef(op, panels, {t: j[1] for t, j in jobs.items()} if ampw else None, what)
        self.kcall(
            f"{what}: GEMM",
            {
                t: gm.Gemm(
                    mpad,
                    j[4],
                    j[5],
                    prec=gm.F16,
                    mode="init",
                    coef=coef,
                    a=j[0],
                    weights=j[1] if ampw else panels,
                    c=c_area,
                    a_row_stride=j[4] * 2,
                )  # fmt: skip
                for t, j in jobs.items()
            },
        )
        self.kcall(
            f"{what}: to f32",
            {
                t: ew.cast("cast_f16_f32", m * j[5] // 4, in0=c_area, out=j[3] if j[2] == j[5] else stage)
                for t, j in jobs.items()
            },
        )
        self.copy_call(
            {
                t: [
                    (stage + r * jobs[t][5] * 4, jobs[t][3] + r * jobs[t][2] * 4, jobs[t][2] * 4)
                    for r in range(m)
                ]
                for t in pads
            },
            f"{what}: narrow panel rows",
        )

    def linear_partials_rows(self, op: nn.LinearPartialsOp) -> None:
        """A many-row K split (`tile_plan.partials_rows_layouts`), per tile (chunk c, output block (i, j)): its own
        [pm, kw] x block is the GEMM's A (in place: row-major, or column panels of whole K blocks; else its rows
        gathered into the A scratch) -> its [pn, kw] weight block into F16 AMP weight panels (FP8: converted in
        the same pass; N padded to 16; f16 weights stored as F16 AMP panels, `ampw`: read in place) -> F16 GEMM
        calls (init, then acc for a narrower last x panel) into C -> C's rows into its [1, pm, pn] result block
        (f16: copied; f32: cast), or into each of the adjacent blocks the tile keeps the panel's result in
        (`_partials_jobs`)."""
        x, w = op.operands[0], op.operands[1]
        what = f"nn.linear_partials ({op.results[0].name_hint or 'unnamed'})"
        lay = op.attributes[tl.LAYOUT_ATTR]
        xl, wl = tl.layout_of(x), tl.layout_of(w)
        wdt = device_dtype(wl.dtype)
        a_cols = tl.col_panel_width(
            xl
        )  # x blocks stored as column panels of a_cols (`colsP`), else row-major
        if device_dtype(xl.dtype) in ("f8e4m3fnuz", "f8e5m2fnuz"):
            return self._linear_partials_rows_fp8(op, what, xl, wl, a_cols)
        # `ampw` f16 weights: the F16 AMP's panels, read in place (x row-major: one GEMM part per tile)
        ampw = wl.order.data == "ampw" and wdt == "f16" and a_cols is None
        if (
            device_dtype(xl.dtype) != "f16"
            or (xl.order.data != "row_major" and (a_cols is None or a_cols % 4))
            or (wl.order.data != "row_major" and not ampw)
        ):
            raise self.error(
                f"{what}: x must arrive as row-major f16 blocks (or column panels of whole atoms) and the weight as "
                "row-major blocks (or, f16 with row-major x, as F16 AMP panels: ampw)"
            )
        rdt = device_dtype(lay.dtype)
        if wdt not in ("f16", "f8e4m3fnuz", "f8e5m2fnuz") or rdt not in ("f32", "f16"):
            raise self.error(
                f"{what}: f16 / FP8 weights and an f32 or f16 result only (got {wdt}, {lay.dtype})"
            )
        rsize = 4 if rdt == "f32" else 2
        k, kc = x.type.get_shape()[1], op.chunk
        if (k % 16 and a_cols is not None) or kc % 16 or 2 * kc > 4112:
            raise self.error(
                f"{what}: k_chunk = {kc} must be a multiple of 16 (<= 2056), and K = {k} too when x arrives as "
                "column panels"
            )
        c_area, a_area, zeros = self.scratch(mark=False)  # marked below, by the bytes used
        panels = self.aux(mark=False)
        e = self.target.region1_element_bytes
        jobs = self._partials_jobs(op, x, w, k, kc, rsize, what)
        npad = {t: -(-j[4] // 16) * 16 for t, j in jobs.items()}  # the kernel's N: whole 16-column blocks
        if (
            max(j[2] * npad[t] * 2 for t, j in jobs.items()) > e
            or max(j[3] * npad[t] * 6 for t, j in jobs.items()) > e
        ):
            raise self.error(
                f"{what}: a tile's F16 weight panels or C block exceed the {e}-byte scratch elements"
            )
        # K parts of a tile's chunk: (first column, width, A address, A row stride, weight panels area). Column
        # panels: the whole panels in one GEMM call (panel jumps), a narrower last panel in a second one (its row
        # stride differs), each from its own weight panels.
        parts = {}
        gathers = {}  # column panels the kernel cannot read in place (not whole K blocks): rows into the A scratch
        panel_rows = {}  # the same by `panels_f16` (whole panels of whole atoms)
        wsrc = {}  # tile -> (weight rows, their stride): the ragged last chunk's rows re-strided with zero K padding
        padded = {}  # tile -> the row kernel calls doing that for f16 rows of whole atoms (x, weight)
        esize = tl.element_bytes(wl.dtype)
        for t, j in jobs.items():
            kw, mr, xa = j[2], j[3], j[5]
            # K % 16 != 0 (row-major x): the last chunk's A rows and weight rows padded with zeros
            if kw % 16:
                kp = kw + 16 - kw % 16
                if mr * kp * 2 > e or j[4] * kp * esize > e:
                    raise self.error(
                        f"{what}: tile {t}: a {mr} x {kp} x block exceeds the {e}-byte A scratch"
                    )
                # f16 rows of whole atoms: one worker kernel per operand, not a copy per row
                if esize == 2 and kw % 4 == 0 and kw >= 8:
                    padded[t] = [
                        rw.Rows(
                            "panels_f16",
                            rows,
                            kp,
                            in0=src,
                            out=dst,
                            panels=1,
                            panel_width=kw,
                            panel_step=rows * kw * 2,
                            out_stride=kp * 2,
                        )
                        for rows, src, dst in ((mr, xa, a_area), (j[4], j[6], c_area))
                    ]
                else:
                    gathers[t] = self._a_chunk_rows(mr, mr, xa, kw, kw, 0, kp, a_area, zeros)
                    gathers[t] += [
                        piece
                        for r in range(j[4])
                        for piece in [(j[6] + r * kw * esize, c_area + r * kp * esize, kw * esize)]
                        + zero_copies(zeros, c_area + (r * kp + kw) * esize, (kp - kw) * esize)
                    ]
                wsrc[t] = (c_area, kp)
                parts[t] = [(0, kp, a_area, kp * 2, panels)]
                continue
            if a_cols is not None and a_cols % 16:
                if mr * kw * 2 > e:
                    raise self.error(
                        f"{what}: tile {t}: a {mr} x {kw} x block exceeds the {e}-byte A scratch"
                    )
                if kw % a_cols == 0 and a_cols >= rw.PF_MIN_P and xa % 8 == 0 and a_area % 8 == 0:
                    # whole panels: one row kernel gathers them (a pipelined stream per panel), not a copy per piece
                    panel_rows[t] = rw.Rows("panels_f16", mr, kw, in0=xa, out=a_area, panels=kw // a_cols,
                                            panel_width=a_cols, panel_step=mr * a_cols * 2)  # fmt: skip
                else:
                    gathers[t] = self._a_chunk_rows(mr, mr, xa, a_cols, kw, 0, kw, a_area, zeros)
                parts[t] = [(0, kw, a_area, kw * 2, panels)]
                continue
            if a_cols is None or kw <= a_cols:
                parts[t] = [(0, kw, xa, kw * 2, panels)]
                continue
            nfull = kw // a_cols * a_cols
            parts[t] = [(0, nfull, xa, a_cols * 2, panels)]
            if kw > nfull:
                parts[t].append(
                    (nfull, kw - nfull, xa + nfull * mr * 2, (kw - nfull) * 2, panels + npad[t] * nfull * 2)
                )
        if ampw:  # the weight blocks are the GEMM's panels: read in place, nothing prepared
            self._check_ampw_blocks(what, {t: (j[4], j[2], j[6]) for t, j in jobs.items()})
            parts = {t: [(*parts[t][0][:4], jobs[t][6])] for t in jobs}
        # C [mr][npad] f16 (and the K-padded weight rows before the GEMM), A's gathered or K-padded rows, the
        # weight panels [npad/16][kw/16] (a ragged last chunk: padded to kp)
        kp = {t: -(-j[2] // 16) * 16 for t, j in jobs.items()}
        self._use_bounded(
            (
                max(
                    max(j[3] * npad[t] * 2, j[4] * kp[t] * esize if t in wsrc else 0) for t, j in jobs.items()
                ),
                max(
                    (
                        j[3] * kp[t] * 2
                        for t, j in jobs.items()
                        if t in gathers or t in panel_rows or t in padded or t in wsrc
                    ),
                    default=0,
                ),
                0 if ampw else max(kp[t] * npad[t] * 2 for t in jobs),
            )
        )
        direct = self._direct_results(jobs, npad, parts, rdt, 2)
        fmt = fp8_format(wl)
        if wsrc:  # the re-strided weight rows must be in place before the panels are made from them
            self.copy_call(gathers, f"{what}: x and weight rows with zero K padding")
            gathers = {}
            for i, name in enumerate(("x", "weight")):
                self.kcall(f"{what}: {name} rows with zero K padding", {t: c[i] for t, c in padded.items()})

        def wrows(t, j, k1):  # (address of the chunk's weight rows from column k1, their stride in elements)
            base, stride = wsrc.get(t, (j[6], j[2]))
            return base + k1 * esize, stride

        for p in range(0 if ampw else max(len(v) for v in parts.values())):
            sel = {t: (jobs[t], parts[t][p]) for t in jobs if p < len(parts[t])}
            tag = f"{what}: weight panels" + (" (last panel)" if p else "")
            if wdt == "f16":
                prep = {}
                for t, (j, (k1, w, _a, _r, area)) in sel.items():
                    src, stride = wrows(t, j, k1)
                    prep[t] = self.kernel(pk.weights_from_bt, j[4], w, "f16", src, area, src_row=stride * 2)
                self.kcall(tag, prep)
                for w, area in sorted({(q[1], q[4]) for _, q in sel.values()}):  # N padding rows: zeros
                    pads = {t: (j[4], npad[t]) for t, (j, q) in sel.items() if (q[1], q[4]) == (w, area)}
                    self.kcall(f"{tag} N padding", n_padding_zeros(pads, w, area, zeros))
            else:  # FP8: converted, N padding zeroed, in one pass
                prep = {}
                for t, (j, (k1, w, _a, _r, area)) in sel.items():
                    src, stride = wrows(t, j, k1)
                    prep[t] = self.kernel(pk.fp8_to_f16_panels, j[4], w, src, area, src_row=stride, **fmt)
                self.kcall(f"{tag} {wdt} -> f16", prep)
        self.copy_call(gathers, f"{what}: x rows from column panels")
        self.kcall(f"{what}: x rows from column panels (panels_f16)", panel_rows)
        coef = self._ampw_coef(op, panels, {t: j[6] for t, j in jobs.items()} if ampw else None, what)
        for p in range(max(len(v) for v in parts.values())):
            calls = {}
            for t, j in jobs.items():
                if p >= len(parts[t]):
                    continue
                _k1, w, a, row, area = parts[t][p]
                panel = (
                    dict(a_panel_blocks=a_cols // 16, a_panel_step=a_cols * j[3] * 2)
                    if a_cols is not None and row == 2 * a_cols and w > a_cols
                    else {}
                )
                c_at = j[7] if t in direct else c_area
                calls[t] = self.kernel(gm.Gemm, j[3], w, npad[t], prec=gm.F16, mode="init" if p == 0 else "acc",
                                       coef=coef, a=a, weights=area, c=c_at, a_row_stride=row, **panel)  # fmt: skip
            self.kcall(f"{what}: GEMM" + (" (last panel)" if p else ""), calls)
        self._rows_results(what, jobs, npad, c_area, direct, rdt)

    def _linear_partials_rows_fp8(self, op: nn.LinearPartialsOp, what: str, xl, wl, a_cols) -> None:
        """`linear_partials_rows` with FP8 x and weights (`nn-quantize-activations`): the FP8 AMP. Per tile, its
        [pm, kw] FP8 x block is the GEMM's A in place (row-major with kw % 32 == 0, or column panels of P % 32 ==
        0 columns with kw % P == 0), else its rows gathered into the A scratch with zero K padding to whole 32-deep
        blocks; the [pn, kw] FP8 weight block is rearranged into FP8 AMP weight panels (bytes moved, no
        conversion; a ragged chunk's rows re-strided with zero K padding first; N padded to 16 with zeros) -> one
        FP8 GEMM into C (scale 2^(x scale + weight scale)) -> C's rows into the [1, pm, pn] result block."""
        x, w = op.operands[0], op.operands[1]
        lay = op.attributes[tl.LAYOUT_ATTR]
        xdt, wdt, rdt = device_dtype(xl.dtype), device_dtype(wl.dtype), device_dtype(lay.dtype)
        ampw = wl.order.data == "ampw"  # weight blocks stored as the AMP panels the GEMM reads in place
        if wl.order.data not in ("row_major", "ampw") or (xl.order.data != "row_major" and a_cols is None):
            raise self.error(
                f"{what}: FP8 x must arrive as row-major blocks or column panels, the weight row-major or as AMP "
                "panels (ampw)"
            )
        if wdt not in ("f8e4m3fnuz", "f8e5m2fnuz") or rdt not in ("f32", "f16"):
            raise self.error(
                f"{what}: FP8 x needs an FP8 weight (the FP8 AMP) and an f32 or f16 result (got {wdt}, {lay.dtype})"
            )
        kb = gm.KBLOCK[gm.FP8]
        k, kc = x.type.get_shape()[1], op.chunk
        if kc % kb or kc > 4112:
            raise self.error(
                f"{what}: with FP8 x, k_chunk = {kc} must be a multiple of {kb} (whole FP8 AMP blocks, <= 4112): "
                "nn-split-k{fp8_kblock=true}"
            )
        c_area, a_area, zeros = self.scratch(mark=False)
        panels = self.aux(mark=False)
        e = self.target.region1_element_bytes
        rsize = 4 if rdt == "f32" else 2
        jobs = self._partials_jobs(op, x, w, k, kc, rsize, what)
        npad = {t: -(-j[4] // 16) * 16 for t, j in jobs.items()}
        kp = {t: -(-j[2] // kb) * kb for t, j in jobs.items()}
        # Per tile, the GEMM's K parts: (first column, K, A address, A row stride, weight panels, panel arguments,
        # weight rows, their stride, whether A is in the A scratch, whether the weight rows are in C). Flags, not
        # address comparisons: an x block in place may lie where the A / C scratch elements are (memory-plan
        # gives their room to other buffers at events that do not use them). Column panels: the whole panels in place (one call, panel jumps), the K end's
        # narrower panel (a ragged last chunk) padded into the A scratch (a second call).
        parts: dict[int, list] = {}
        x_rows, x_copies, w_rows, w_copies = {}, {}, {}, {}  # zero-padded x rows (A scratch), weight rows (C)
        for t, j in jobs.items():
            kw, mr, nc, xa, wa = j[2], j[3], j[4], j[5], j[6]
            if mr * npad[t] * 2 > e or kp[t] * npad[t] > e:
                raise self.error(
                    f"{what}: tile {t}: its {npad[t]} x {kp[t]} FP8 weight panels or its {mr} x {npad[t]} C block "
                    f"exceed the {e}-byte scratch elements"
                )
            whole_panels = (
                a_cols is not None
                and a_cols % kb == 0
                and j[1] % a_cols == 0
                and (kw % a_cols == 0 or j[1] + kw == k)  # a narrower panel only at K's end
            )
            nfull = kw // a_cols * a_cols if whole_panels else (kw if a_cols is None and kw % kb == 0 else 0)
            tparts = []
            if nfull:  # in place: row-major rows of whole blocks, or whole column panels
                row = kw if a_cols is None else a_cols
                pkw = (
                    dict(a_panel_blocks=a_cols // kb, a_panel_step=a_cols * mr)
                    if a_cols and nfull > a_cols
                    else {}
                )
                tparts.append((0, nfull, xa, row, panels, pkw, wa, kw, False, False))
            if (
                nfull < kw
            ):  # the rest padded with zeros to whole K blocks in the A scratch (and C for the weight)
                r = kw - nfull
                rp = -(-r // kb) * kb
                if mr * rp > e or nc * rp > e:
                    raise self.error(
                        f"{what}: tile {t}: its {mr} x {rp} x rows or {nc} x {rp} weight rows with zero K padding "
                        f"exceed the {e}-byte scratch elements"
                    )
                if whole_panels or a_cols is None:  # one row-major piece per row: a row kernel (or copies)
                    src = xa + nfull * mr
                    kern = _padded_rows(mr, r, src, r, a_area, rp)
                    if kern is None:
                        x_copies[t] = self._a_chunk_rows(mr, mr, src, r, r, 0, rp, a_area, zeros, esize=1)
                    else:
                        x_rows[t] = kern
                elif (  # column panels the kernel cannot step through (e.g. attention's heads of 72): gathered
                    kw % a_cols == 0
                    and a_cols % 8 == 0
                    and a_cols // 2 >= rw.PF_MIN_P
                    and xa % 8 == 0
                    and a_area % 8 == 0
                ):  # whole panels of whole atoms: one row kernel over byte pairs
                    x_rows[t] = rw.Rows("panels_f16", mr, rp // 2, in0=xa, out=a_area, panels=kw // a_cols,
                                        panel_width=a_cols // 2, panel_step=mr * a_cols)  # fmt: skip
                else:  # piece by piece
                    x_copies[t] = self._a_chunk_rows(mr, mr, xa, a_cols, kw, 0, rp, a_area, zeros, esize=1)
                if ampw:  # the weight's parts: below (`_ampw_parts`)
                    wsrc = (None, 0, False)
                elif r % kb:
                    kern = _padded_rows(nc, r, wa + nfull, kw, c_area, rp)
                    if kern is None:
                        w_copies[t] = [
                            piece
                            for q in range(nc)
                            for piece in [(wa + nfull + q * kw, c_area + q * rp, r)]
                            + zero_copies(zeros, c_area + q * rp + r, rp - r)
                        ]
                    else:
                        w_rows[t] = kern
                    wsrc = (c_area, rp, True)
                else:
                    wsrc = (wa + nfull, kw, False)
                tparts.append((nfull, rp, a_area, rp, panels + npad[t] * nfull, {}, *wsrc[:2], True, wsrc[2]))
            parts[t] = tparts
            if ampw:
                parts[t] = self._ampw_parts(
                    what, t, jobs[t], tparts, kb, c_area, panels, zeros, w_rows, w_copies
                )
        self._use_bounded(
            (
                max(
                    max([j[3] * npad[t] * 2] + [j[4] * q[1] for q in parts[t] if q[9]])
                    for t, j in jobs.items()
                ),
                max((j[3] * q[1] for t, j in jobs.items() for q in parts[t] if q[8]), default=0),
                max(
                    (
                        kp[t] * npad[t]
                        for t, v in parts.items()
                        if not ampw or any(q[6] is not None for q in v)
                    ),
                    default=0,
                ),
            )
        )
        direct = self._direct_results(jobs, npad, {t: [q[:5] for q in v] for t, v in parts.items()}, rdt, 1)
        self.kcall(f"{what}: FP8 x rows with zero K padding", x_rows)
        self.copy_call(x_copies, f"{what}: FP8 x rows with zero K padding (copies)")
        self.kcall(f"{what}: FP8 weight rows with zero K padding", w_rows)
        self.copy_call(w_copies, f"{what}: FP8 weight rows with zero K padding (copies)")
        nparts = max(len(v) for v in parts.values())
        for p in range(nparts):
            tag = f"{what}: FP8 weight panels" + (" (last panel)" if p else "")
            # (`ampw` weights read in place have no source rows: nothing to prepare)
            sel = {t: v[p] for t, v in parts.items() if p < len(v) and v[p][6] is not None}
            prep = {
                t: self.kernel(pk.weights_from_bt, jobs[t][4], q[1], gm.FP8, q[6], q[4], src_row=q[7])
                for t, q in sel.items()
            }
            self.kcall(tag, prep)
            for width, area in sorted({(q[1], q[4]) for q in sel.values()}):  # N padding rows: zeros
                pads = {t: (jobs[t][4], npad[t]) for t, q in sel.items() if (q[1], q[4]) == (width, area)}
                self.kcall(f"{tag} N padding", n_padding_zeros(pads, width, area, zeros, kblock=kb))
        coef = self.gemm_coef(op, panels)
        for t, v in parts.items() if ampw and coef == "ld128" else ():
            for q in v:
                if q[6] is None and not (q[4] >= self.target.region1[0] and q[4] % 16 == 0):
                    raise self.error(
                        f"{what}: tile {t}: kernel choice coef = 'ld128' needs the AMP weight panels read in place "
                        f"in interleaved memory at 16 bytes; they are at {q[4]:#x} (memory-plan puts an ampw GEMM "
                        "operand there; a weight read from its home is not: coef = 'ld64')"
                    )
        fmt = dict(
            in_format=fp8.F143 if xdt == "f8e4m3fnuz" else fp8.F152,
            w_format=fp8.F143 if wdt == "f8e4m3fnuz" else fp8.F152,
            in_scale=xl.scale.data,
            w_scale=wl.scale.data,
        )
        self.__dict__["fp8_gemms"] = True
        for p in range(nparts):
            calls = {}
            for t, v in parts.items():
                if p < len(v):
                    _k1, kk, a, row, area, pkw = v[p][:6]
                    c_at = jobs[t][7] if t in direct else c_area
                    calls[t] = self.kernel(gm.Gemm, jobs[t][3], kk, npad[t], prec=gm.FP8, mode="acc" if p else "init",
                                           coef=coef, a=a, weights=area, c=c_at, a_row_stride=row, **pkw, **fmt)  # fmt: skip
            self.kcall(f"{what}: FP8 GEMM" + (" (last panel)" if p else ""), calls)
        self._rows_results(what, jobs, npad, c_area, direct, rdt)

    def _few_rows_ampw(self, wl, what: str) -> bool:
        """A few-row split's weight stored as F16 AMP panels (`ampw` f16: the F16 GEMM reads its blocks in place);
        FP8 `ampw` blocks are not the F16 AMP's panels (KB 32, not 16)."""
        if wl.order.data != "ampw":
            return False
        if device_dtype(wl.dtype) != "f16":
            raise self.error(
                f"{what}: FP8 weight blocks stored as AMP panels (ampw) are the FP8 AMP's; this split runs on the "
                'F16 AMP with f16 x (plan it with worder = "row_major")'
            )
        return True

    def _check_ampw_blocks(self, what: str, blocks: dict[int, tuple[int, int, int]]) -> None:
        """Tile -> (rows, K, address) of weight blocks read in place as AMP panels: whole 16-row panels (region A
        of `tl.ampw_positions` alone; F16 K is whole 16-blocks by the split's checks)."""
        for t, (nc, kw, _a) in blocks.items():
            if nc % 16 or kw % 16:
                raise self.error(
                    f"{what}: tile {t}: a {nc} x {kw} weight block stored as AMP panels (ampw) needs whole 16-row "
                    'panels and K blocks (plan it with worder = "row_major")'
                )

    def _ampw_coef(self, op, panels: int, in_place: dict[int, int] | None, what: str) -> str:
        """`gemm_coef`, and with weights read in place (tile -> address) ld128's rule checked at each address."""
        coef = self.gemm_coef(op, panels)
        for t, a in (in_place or {}).items() if coef == "ld128" else ():
            if not (a >= self.target.region1[0] and a % 16 == 0):
                raise self.error(
                    f"{what}: tile {t}: kernel choice coef = 'ld128' needs the AMP weight panels read in place in "
                    f"interleaved memory at 16 bytes; they are at {a:#x} (coef = 'ld64' reads them anywhere)"
                )
        return coef

    def _ampw_parts(self, what, t, job, tparts, kb, c_area, panels, zeros, w_rows, w_copies) -> list:
        """The GEMM parts of a tile whose [nc, kw] FP8 weight block is stored as AMP panels (`ampw`,
        `tl.ampw_positions`): region A ([nc / 16][kf / 32][16][32], kf = kw // 32 * 32) is the kernel's weight
        panels, read in place (weights = the block's address, no preparation; a part's weights must be all of
        region A, or one 16-row panel's K blocks); the K tail (region C, [nc][kw - kf] row-major: a ragged last
        chunk) is padded with zeros to one 32-deep block in the C scratch (a row kernel, or copies) and made
        into FP8 panels in the aux, as row-major weight rows are. An x part over kf is split there (it is then
        in the A scratch, rows of whole blocks). Part tuples as `_linear_partials_rows_fp8`'s, the weight rows
        None where the weights are read in place."""
        nc, kw, wa = job[4], job[2], job[6]
        kf = kw // kb * kb
        if nc % 16:
            raise self.error(
                f"{what}: tile {t}: a {nc}-row weight block stored as AMP panels (ampw) needs whole 16-row panels "
                '(plan it with worder = "row_major")'
            )
        out = []
        for k1, kk, a, row, _area, pkw, _ws, _wst, a_scr, _wc in tparts:
            pieces = [(k1, kk, a, pkw)]
            if k1 < kf < k1 + kk:  # A scratch rows of whole blocks: the part's two K ranges from them
                pieces = [(k1, kf - k1, a, pkw), (kf, k1 + kk - kf, a + kf - k1, {})]
            for p1, pw, pa, ppkw in pieces:
                if p1 >= kf:  # the K tail: [nc][r] rows (region C) -> zero-padded rows in C -> panels (aux)
                    r, rp = kw - kf, pw
                    src = wa + nc * kf
                    kern = _padded_rows(nc, r, src, r, c_area, rp)
                    if kern is None:
                        w_copies[t] = [
                            piece
                            for q in range(nc)
                            for piece in [(src + q * r, c_area + q * rp, r)]
                            + zero_copies(zeros, c_area + q * rp + r, rp - r)
                        ]
                    else:
                        w_rows[t] = kern
                    out.append((p1, pw, pa, row, panels, ppkw, c_area, rp, a_scr, True))
                    continue
                if not ((p1 == 0 and pw == kf) or nc == 16):
                    raise self.error(
                        f"{what}: tile {t}: a GEMM part over K [{p1}, {p1 + pw}) of a {nc} x {kw} weight block stored "
                        f"as AMP panels (ampw) is not contiguous (x arrives as column panels whose narrower last one "
                        f'is {kw - kf} or more wide: plan it with worder = "row_major")'
                    )
                out.append((p1, pw, pa, row, wa + p1 // kb * 512, ppkw, None, 0, a_scr, False))
        return out

    def _partials_jobs(self, op, x, w, k: int, kc: int, rsize: int, what: str):
        """A many-row split's GEMM per tile: {tile: (chunk, first K column, chunk width, rows, panel columns, x
        block, weight block, result block)}, one result block per tile (`tile_plan.partials_rows_layouts`)."""
        lay = op.attributes[tl.LAYOUT_ATTR]
        g, table = lay.geometry(), lay.table()
        res = self.addrs.of(op.results[0]).addr
        jobs = {}
        for b in range(lay.num_blocks):
            t = int(table[b, 0])
            (c, r0, n0), (_, mr, nc) = (int(v) for v in g.block_origin[b]), (int(v) for v in g.block_dims[b])
            if nc % 4 or mr < gm.MIN_ROWS:
                raise self.error(
                    f"{what}: tile {t}: a {mr} x {nc} block (the kernel needs >= {gm.MIN_ROWS} rows; result rows "
                    "of whole 4-element atoms)"
                )
            if t in jobs:
                raise self.error(f"{what}: tile {t} holds two result blocks (one GEMM per tile is lowered)")
            k0 = c * kc
            kw = min(kc, k - k0)
            xa = self._panel_addr(x, t, (r0, k0), (mr, kw), what)
            wa = self._panel_addr(w, t, (n0, k0), (nc, kw), what)
            jobs[t] = (c, k0, kw, mr, nc, xa, wa, int(res[t]) + int(g.offset[b, 0]) * rsize)
        return jobs

    def _direct_results(self, jobs, npad, parts, rdt: str, esize: int) -> set[int]:
        """Tiles whose f16 results are C's rows (no N padding), in interleaved memory and in other elements than
        every A their GEMM calls read (parts: (k1, width, A address, row stride, panels); esize: A's element
        bytes): the GEMM writes them in place of the C scratch (no result-row copy). The C scratch stays
        recorded, so the plan does not depend on this choice. A measuring lowering (`lowering-storage`, on a
        provisional plan) takes no tile as direct: the choice depends on the addresses, and the code and tables
        it measures must cover the copies any final plan may need."""
        direct = set()
        if rdt != "f16" or self.measure:
            return direct
        el = self.target.element_of
        for t, j in jobs.items():
            lo, hi = j[7], j[7] + j[3] * j[4] * 2
            if npad[t] != j[4] or lo < self.target.region1_base or lo % 8:
                continue
            c_el = set(range(el(lo), el(hi - 1) + 1))
            a_el = set()
            for _k1, w, a, _row, _area in parts[t]:
                a_el |= set(range(el(a), el(a + j[3] * w * esize - 1) + 1))
            if not c_el & a_el:
                direct.add(t)
        return direct

    def _rows_results(self, what: str, jobs, npad, c_area: int, direct: set[int], rdt: str) -> None:
        """A many-row split's C [mr][npad] f16 -> each tile's [mr, nc] result block at jobs[t][7] (f16: copied,
        or strided past the N padding; f32: cast), except the `direct` tiles (the GEMM wrote it there)."""
        if rdt == "f16":  # C's rows are the result's: one copy, or (past C's N padding) a strided row kernel
            whole, strided, narrow = {}, {}, {}
            for t, j in jobs.items():
                if t in direct:
                    continue
                c = c_area  # C's rows
                if npad[t] == j[4]:
                    whole[t] = [(c, j[7], j[3] * j[4] * 2)]
                elif rw.pf_width_ok(j[4]) and j[7] % 8 == 0 and c % 8 == 0:
                    strided[t] = rw.Rows("panels_f16", j[3], j[4], in0=c, out=j[7], panels=1, panel_width=j[4],
                                         panel_step=j[3] * npad[t] * 2, in_stride=npad[t] * 2)  # fmt: skip
                else:  # narrow or unaligned rows: copied one by one
                    narrow[t] = [(c + r * npad[t] * 2, j[7] + r * j[4] * 2, j[4] * 2) for r in range(j[3])]
            self.copy_call(whole, f"{what}: result rows")
            self.kcall(f"{what}: result rows (strided)", strided)
            self.copy_call(narrow, f"{what}: result rows (narrow)")
            return
        # C's rows -> the result block's f32 rows: one flat cast, or row by row past C's N padding.
        flat = {t: j for t, j in jobs.items() if npad[t] == j[4]}
        self.kcall(
            f"{what}: to f32",
            {t: ew.cast("cast_f16_f32", j[3] * j[4] // 4, in0=c_area, out=j[7]) for t, j in flat.items()},
        )
        self.kcall(
            f"{what}: to f32 rows",
            {
                t: rw.Rows("to_f32", j[3], j[4], in0=c_area, out=j[7], in_stride=npad[t] * 2)
                for t, j in jobs.items()
                if t not in flat
            },
        )

    def matmul_partials(self, op: nn.MatmulPartialsOp, plan: tl.GemmPlanAttr) -> None:
        """Per tile (chunk c, column group j; `tile_plan.matmul_partials_layouts`): the chunk's lhs block [M, kw]
        (f32: padded f16 rows in the A scratch, `_a_from_f32`; f16 rows padded by copies) -> its rhs block
        [kw, pn] as F16 weight panels (`WeightsF16`; fewer than kc rows: copied with zero rows first; zero columns
        up to the next 16 from the zero constant) -> one F16 GEMM [M, kc] x [kc, npad] -> C's rows cast to f32 into
        its [1, M, pn] result block."""
        a, b = op.operands
        what = f"nn.matmul_partials ({op.results[0].name_hint or 'unnamed'})"
        lay = op.attributes[tl.LAYOUT_ATTR]
        al, bl = tl.layout_of(a), tl.layout_of(b)
        if device_dtype(bl.dtype) != "f16" or bl.order.data != "row_major" or al.order.data != "row_major":
            raise self.error(f"{what}: row-major lhs and f16 rhs blocks expected")
        if device_dtype(al.dtype) not in ("f32", "f16") or device_dtype(lay.dtype) != "f32":
            raise self.error(f"{what}: an f32 or f16 lhs and an f32 result expected")
        m, k = a.type.get_shape()
        kc = op.chunk
        if kc % 16 or kc > 64 or m > 16:
            raise self.error(
                f"{what}: chunks of whole 16-deep K blocks up to 64 and at most 16 rows are lowered (got {kc}, {m})"
            )
        g, table = lay.geometry(), lay.table()
        c_area, a_area, zeros = self.scratch()
        panels, restride = self.aux(), c_area + self.target.region1_element_bytes // 2
        res = self.addrs.of(op.results[0]).addr
        jobs = {}  # tile -> (kw, lhs block, rhs columns, pn, npad, result block)
        for blk in range(lay.num_blocks):
            t = int(table[blk, 0])
            (c, _, n0), (_, _, pn) = (
                (int(v) for v in g.block_origin[blk]),
                (int(v) for v in g.block_dims[blk]),
            )
            kw = min(kc, k - c * kc)
            if pn % 4:
                raise self.error(f"{what}: tile {t}: a {pn}-column group (whole 4-column groups only)")
            ab = self._panel_addr(a, t, (0, c * kc), (m, kw), what)
            bb = self._panel_addr(b, t, (c * kc, n0), (kw, pn), what)
            jobs[t] = (kw, ab, bb, pn, -(-pn // 16) * 16, int(res[t]) + int(g.offset[blk, 0]) * 4)
        mpad = max(m, gm.MIN_ROWS)
        if device_dtype(al.dtype) == "f32":
            for kw in sorted({j[0] for j in jobs.values()}):
                sel = {t: (0, 0, m, 0, mpad, 0, j[1]) for t, j in jobs.items() if j[0] == kw}
                self._a_from_f32(sel, kw, kc, a_area, c_area, zeros, f"{what} [{kw} deep]")
        else:
            self.copy_call(
                {
                    t: [(j[1] + r * j[0] * 2, a_area + r * kc * 2, j[0] * 2) for r in range(m)]
                    + [piece for r in range(m)
                       for piece in zero_copies(zeros, a_area + r * kc * 2 + j[0] * 2, (kc - j[0]) * 2)]
                    + zero_copies(zeros, a_area + m * kc * 2, (mpad - m) * kc * 2)
                    for t, j in jobs.items()
                },
                f"{what}: A rows padded",
            )  # fmt: skip
        # rhs rows: kc in place, fewer copied with zero rows up to kc (row stride pn).
        short = {t: j for t, j in jobs.items() if j[0] < kc}
        self.copy_call(
            {
                t: [(j[2] + r * j[3] * 2, restride + r * j[3] * 2, j[3] * 2) for r in range(j[0])]
                + zero_copies(zeros, restride + j[0] * j[3] * 2, (kc - j[0]) * j[3] * 2)
                for t, j in short.items()
            },
            f"{what}: B rows K padding",
        )
        src = {t: (restride, j[3] * 2) if t in short else (j[2], j[3] * 2) for t, j in jobs.items()}
        self.kcall(
            f"{what}: weight panels",
            {t: pk.WeightsF16(kc, j[3], src[t][0], panels, src_row=src[t][1]) for t, j in jobs.items()},
        )
        self.kcall(
            f"{what}: weight panels, zero columns",
            {
                t: pk.WeightsF16(kc, j[4] - j[3], zeros, panels, src_row=0, group0=j[3] // 4)
                for t, j in jobs.items()
                if j[4] > j[3]
            },
        )
        coef = self.gemm_coef(op, panels)
        self.kcall(
            f"{what}: GEMM",
            {
                t: gm.Gemm(
                    mpad,
                    kc,
                    j[4],
                    prec=gm.F16,
                    mode="init",
                    coef=coef,
                    a=a_area,
                    weights=panels,
                    c=c_area,
                    a_row_stride=kc * 2,
                )  # fmt: skip
                for t, j in jobs.items()
            },
        )
        self.kcall(
            f"{what}: to f32",
            {
                t: rw.Rows("to_f32", m, j[3], in0=c_area, out=j[5], in_stride=j[4] * 2)
                for t, j in jobs.items()
            },
        )

    def reduce_sum(self, op: nn.ReduceSumOp) -> None:
        """Per tile: its result block's G partial blocks (stacked by the exchange, [G, block]) summed pairwise in
        the operand's type (a tile holding several result blocks, `tile_plan.panel_store_width`: the fused `ksum`
        block by block) (f32 `add_f32` / f16 `add_f16` over half the remaining blocks per call; the aux scratch
        holds the running sums), the last call writing the result block; f16 partials with an f32 result: the last
        sum into the aux scratch, then cast."""
        x = op.operands[0]
        what = f"nn.reduce_sum ({op.results[0].name_hint or 'unnamed'})"
        lay, xl = op.attributes[tl.LAYOUT_ATTR], tl.layout_of(x)
        xdt, rdt = device_dtype(xl.dtype), device_dtype(lay.dtype)
        if rdt.startswith("f8"):  # `tile-fuse-sum-cast`: the fused kernel's FP8 store, nothing else
            rdt = "fp8"
            fmt = fp8_format(lay)
        if rdt == "fp8" and (xdt != "f16" or op.addends):
            raise self.error(f"{what}: an FP8 result is lowered for f16 partials without addends (got {xdt})")
        if xdt not in ("f32", "f16") or rdt not in ("f32", xdt, "fp8"):
            raise self.error(
                f"{what}: f32 or f16 partials summed into their type or f32 only (got {xdt} -> {rdt})"
            )
        if op.gelu is not None and (op.gelu != "tanh" or rdt not in ("f16", "fp8")):
            raise self.error(
                f"{what}: activation gelu_{op.gelu} is lowered for f16 results and the tanh GELU only (got {rdt})"
            )
        if op.gelu is not None and self.optional_choice(op, "scale") is not None:
            raise self.error(f"{what}: kernel choice scale and an activation together are not lowered")
        # `nn-fuse-sum-add`'s addends: f32, laid out as the result (as tile-plan asks)
        for i, a in enumerate(op.addends):
            self._same_layout(op, a, f"{what}: addend #{i}")
        xs, rs = tl.element_bytes(xl.dtype), tl.element_bytes(lay.dtype)
        per_unit = 8 // xs  # elements per add unit: 2 f32 / 4 f16
        add = f"add_{xdt}"
        count = x.type.get_shape()[0]
        g, table = lay.geometry(), lay.table()
        res = self.addrs.of(op.results[0]).addr
        work = self.aux(mark=False)  # marked below: the running sums' bytes
        held: dict[int, list] = {}  # tile -> [((first column, columns), (partials, result block, elements))]
        # Partial blocks wider than the result's (`tile_plan.reduce_layouts` with a width: a 48-wide q / k / v
        # panel's rows summed into two 24-wide head blocks): per result block, its columns of the partial rows.
        pw = xl.block_[-1] if len(xl.shape_) == 3 and xl.block_[-1] > lay.block_[-1] else 0
        in_rows: dict[int, int] = {}  # tile -> halves per partial row (strided tiles only)
        for b in range(lay.num_blocks):
            t = int(table[b, 0])
            n = int(g.block_dims[b].prod())
            origin, dims = [int(v) for v in g.block_origin[b]], [int(v) for v in g.block_dims[b]]
            if pw:
                c0 = origin[-1] - origin[-1] % pw
                wide = min(pw, xl.shape_[-1] - c0)
                src = self._panel_addr(x, t, (0, *origin[:-1], c0), (count, *dims[:-1], wide), what)
                src += (origin[-1] - c0) * xs
                if wide != dims[-1]:
                    in_rows[t] = wide
            else:
                src = self._panel_addr(x, t, (0, *origin), (count, *dims), what)
            held.setdefault(t, []).append(
                (
                    (int(g.block_origin[b][-1]), int(g.block_dims[b][-1])),
                    (src, int(res[t]) + int(g.offset[b, 0]) * rs, n),
                )
            )
        slots = [
            {t: v[i] for t, v in held.items() if i < len(v)}
            for i in range(max(len(v) for v in held.values()))
        ]
        if len(slots) == 2 and in_rows and (paired := self._paired_blocks(slots, in_rows, lay)) is not None:
            # Both head blocks of a tile's partial rows (q / k / v: two 24-wide blocks of 48-wide rows, stored one
            # after the other) in one strided call (`ksum` panels): one call's set-up instead of two.
            blocks, cols, panels = paired
            if self._reduce_sum_fused(op, blocks, cols, count, xdt, rdt, what, in_rows, panels):
                return
        if rdt == "fp8":  # whole pairs of units of contiguous partials (`tile_fuse_sum_cast.fusable`)
            for i, slot in enumerate(slots):
                blocks, cols = {t: q[1] for t, q in slot.items()}, {t: q[0] for t, q in slot.items()}
                label = f"{what} (block {i})" if len(slots) > 1 else what
                if in_rows or not self._reduce_sum_fused(op, blocks, cols, count, xdt, rdt, label, fp8=fmt):
                    raise self.error(
                        f"{what}: an FP8 result is lowered by the fused sum only (at most {ks.MAX_PARTS} f16 "
                        "partials of contiguous blocks, result blocks of whole 8-element pairs of units, bias "
                        "rows of a multiple of 8): tile-fuse-sum-cast fuses only such sums"
                    )
            return
        if len(slots) > 1 or in_rows:
            # Several result blocks on a tile (`tile_plan.panel_store_width`), or partial rows wider than the
            # result's: the fused sum only, block by block.
            for i, slot in enumerate(slots):
                blocks, cols = {t: q[1] for t, q in slot.items()}, {t: q[0] for t, q in slot.items()}
                label = f"{what} (block {i})" if len(slots) > 1 else what
                if not self._reduce_sum_fused(op, blocks, cols, count, xdt, rdt, label, in_rows):
                    raise self.error(
                        f"{what}: tiles holding {len(slots)} result blocks, or result blocks narrower than their "
                        f"partials' rows, are lowered by the fused sum only (f16 partials, at most {ks.MAX_PARTS} of "
                        "them, blocks of whole 4-half units apart from the partials)"
                    )
            return
        # tile -> (partials, result block, elements per block); tile -> (first column, columns): the bias's part
        blocks, cols = {t: q[1] for t, q in slots[0].items()}, {t: q[0] for t, q in slots[0].items()}
        if self._reduce_sum_fused(op, blocks, cols, count, xdt, rdt, what):
            return
        # The work area holds at most every partial block (restrided to whole units) at the wider of the two types.
        nmax = max(-(-n // per_unit) * per_unit for _s, _d, n in blocks.values())
        self._use_bounded((0, 0, count * nmax * max(xs, rs)))
        # Blocks of a partial unit (tiny models spread over many tiles: 1-element blocks): the partials restrided
        # to whole units in the work area first, summed there, the result's elements copied out.
        ragged = {t: n for t, (_s, _d, n) in blocks.items() if n % per_unit}
        if ragged:
            if rdt != xdt or count == 1:
                raise self.error(
                    f"{what}: blocks of {min(ragged.values())} {xdt}: {add} takes units of {per_unit}"
                )
            padded = {t: -(-n // per_unit) * per_unit for t, (_s, _d, n) in blocks.items()}
            self._check_fits(count * max(padded.values()) * xs, what)
            self.copy_call(
                {
                    t: [(s + i * n * xs, work + i * padded[t] * xs, n * xs) for i in range(count)]
                    for t, (s, _d, n) in blocks.items()
                },
                f"{what}: partials to whole units",
            )
            result_of = {t: (d, n) for t, (_s, d, n) in blocks.items()}
            blocks = {t: (work, work, padded[t]) for t in blocks}
        # The last sum's destination: the result block, or (f16 -> f32, ragged blocks) the work area.
        final = {t: (d if rdt == xdt and not ragged else work) for t, (_s, d, _n) in blocks.items()}
        if count == 1:
            self.copy_call({t: [(s, final[t], n * xs)] for t, (s, _d, n) in blocks.items()}, f"{what}: copy")
        # Pairwise: h = live // 2 blocks get their partner (live - h on) added; an odd one out stays at h.
        live, src_of = count, {t: s for t, (s, _, _) in blocks.items()}
        while live > 1:
            h = live // 2
            last = live - h == 1
            calls = {}
            for t, (_s, _d, n) in blocks.items():
                base = src_of[t]
                out = final[t] if last else work
                calls[t] = self.kernel(
                    ew.Elementwise, add, h * n // per_unit, in0=base, in1=base + (live - h) * n * xs, out=out
                )
            self.kcall(f"{what}: sum {live} -> {live - h}", calls)
            if (
                not last and live - h > h and src_of[next(iter(blocks))] != work
            ):  # the odd block, into the work area
                self.copy_call(
                    {
                        t: [(src_of[t] + h * n * xs, work + h * n * xs, n * xs)]
                        for t, (s, d, n) in blocks.items()
                    },
                    f"{what}: odd block",
                )
            src_of = {t: work for t in blocks}
            live -= h
        if op.bias is not None:
            # The bias (host-bound f16, `_bind_operand`) on this tile's rows of the sum, in f16.
            if xdt != "f16":
                raise self.error(f"{what}: a bias on an f32 sum is not lowered (f16 partials only)")
            if any(nc % 4 for _, nc in cols.values()):
                raise self.error(f"{what}: bias rows of whole 4-half atoms only")
            nmax = max(nc for _, nc in cols.values())
            bp = self.layer_alloc(nmax * 2, 8)
            self.image.put("bias", bp, np.zeros(nmax * 2, np.uint8))
            chunks = np.array([[t, bp, *cols[t], 1] for t in blocks], np.int64)
            self._bind_operand(op.bias, chunks, "f16", what)
            self.kcall(
                f"{what}: bias",
                {
                    t: ew.Elementwise(
                        "bias_f16", n // cols[t][1], in0=final[t], in1=bp, out=final[t], row=cols[t][1]
                    )
                    for t, (_s, _d, n) in blocks.items()
                },
            )
        scale = self.optional_choice(op, "scale")  # kernel-select: the attention's Q scale (f16 sums only)
        if scale is not None:
            if rdt != "f16":
                raise self.error(f"{what}: kernel choice scale is for f16 sums only (got {rdt})")
            self.kcall(
                f"{what}: * scale",
                {
                    t: ew.Elementwise("scale_f16", -(-n // 4), in0=final[t], out=final[t], scalar=scale)
                    for t, (_s, _d, n) in blocks.items()
                },
            )
        if ragged:
            self.copy_call({t: [(work, d, n * xs)] for t, (d, n) in result_of.items()}, f"{what}: result")
        if rdt != xdt:
            self.kcall(
                f"{what}: to f32",
                {t: ew.cast("cast_f16_f32", n // 4, in0=work, out=d) for t, (_s, d, n) in blocks.items()},
            )
        if op.gelu is not None:  # the unfused path: the GELU over the result in place, as `nn.gelu` runs it
            self._gelu_shards(lay, res.copy(), res.copy(), f"{what}: GELU")
        self._add_addends(op, result_of if ragged else {t: (d, n) for t, (_s, d, n) in blocks.items()}, what)

    def _addend_blocks(self, op: nn.ReduceSumOp, dst: dict[int, int]) -> list[dict[int, int]]:
        """Per addend: tile -> the address of its block that lies where the result block `dst[t]` does (an addend
        is laid out as the result: the same offset in its buffer)."""
        res = self.addrs.of(op.results[0]).addr
        return [
            {t: int(self.addrs.of(a).addr[t]) + d - int(res[t]) for t, d in dst.items()} for a in op.addends
        ]

    def _add_addends(self, op: nn.ReduceSumOp, blocks: dict[int, tuple[int, int]], what: str) -> None:
        """The unfused addends: one `add_f32` call per addend over each result block, in order (the `nn.add`s
        `nn-fuse-sum-add` folded in)."""
        if not op.addends:
            return
        if any(n % 2 for _d, n in blocks.values()):
            raise self.error(
                f"{what}: addends on result blocks of an odd number of f32 (add_f32 takes pairs)"
            )
        for i, addr in enumerate(self._addend_blocks(op, {t: d for t, (d, _n) in blocks.items()})):
            self.kcall(
                f"{what}: + addend {i}",
                {t: self.kernel(ew.Elementwise, "add_f32", n // 2, in0=addr[t], in1=d, out=d)
                 for t, (d, n) in blocks.items()},
            )  # fmt: skip

    @staticmethod
    def _paired_blocks(slots, in_rows, lay):
        """(blocks, bias columns, panels) per tile for one strided `ksum` call over both result blocks of every
        tile holding two: the second block's columns right after the first's, in the same partial rows (its
        partials column-adjacent) and its result right after the first's; None when a tile's two are not."""
        rs = tl.element_bytes(lay.dtype)
        blocks, cols, panels = {}, {}, {}
        for t, (cols0, (s0, d0, n0)) in slots[0].items():
            if t not in slots[1]:
                blocks[t], cols[t], panels[t] = (s0, d0, n0), cols0, 1
                continue
            (c1, w1), (s1, d1, n1) = slots[1][t]
            c0, w0 = cols0
            if not (
                t in in_rows and w1 == w0 and c1 == c0 + w0 and s1 == s0 + 2 * w0 and n1 == n0
                and d1 == d0 + n0 * rs and in_rows[t] >= 2 * w0
            ):  # fmt: skip
                return None
            blocks[t], cols[t], panels[t] = (s0, d0, 2 * n0), (c0, 2 * w0), 2
        return blocks, cols, panels

    def _reduce_sum_fused(
        self, op, blocks, cols, count, xdt, rdt, what, in_rows=None, panels=None, fp8=None
    ) -> bool:
        """The sum, the bias and the cast as one `ksum` call per tile (one pass over memory, each output element
        written once; bit-identical to the pairwise calls below), when it applies: f16 partials, at most
        `ksum.MAX_PARTS` of them, blocks of whole 4-half units (and bias rows of whole atoms), the result apart from
        the partials. No scratch: the sums stay in registers. in_rows: tile -> halves per partial row where they
        are wider than the result block's rows (the strided `ksum`); panels: tile -> result blocks in its call
        (`ksum.KSum.panels`; cols then spans them all)."""
        if xdt != "f16" or not 1 <= count <= ks.MAX_PARTS:
            return False
        if op.addends and (in_rows or rdt != "f32" or len(op.addends) > ks.MAX_ADDENDS):
            return False
        in_rows, panels = in_rows or {}, panels or {}
        bias = op.bias is not None
        scale = self.optional_choice(op, "scale")  # kernel-select: the attention's Q scale, applied here
        rs = {"f16": 2, "f32": 4, "fp8": 1}[rdt]
        gelu = op.gelu is not None  # `nn-fuse-sum-activation`: the GELU before the store
        if rdt == "fp8" and (scale is not None or in_rows or panels):
            return False

        def args(t, s, d, n, bp):
            p = panels.get(t, 1)
            width = cols[t][1] // p  # a result block's columns
            stride = dict(in_row=in_rows[t], out_row=width, panels=p) if t in in_rows else {}
            if gelu:
                stride["gelu"] = True
            if op.addends:
                stride["addends"] = tuple(a[t] for a in addend_at)
            if fp8 is not None:
                stride["fp8_fmt"], stride["fp8_scale"] = fp8["fmt"], fp8["scale"]
            return (count, n // 4, s, d, bp, width if bias else 0, rdt, scale), stride

        addend_at = self._addend_blocks(op, {t: d for t, (_s, d, _n) in blocks.items()})
        # An addend in the result's place is read before it is written: overlapping otherwise, not fused.
        for a in addend_at:
            for t, (_s, d, n) in blocks.items():
                if a[t] != d and a[t] < d + n * rs and d < a[t] + n * rs:
                    return False

        for t, (s, d, n) in blocks.items():
            width = cols[t][1] // panels.get(t, 1)
            if n % 4 or (bias and width % 4) or (t in in_rows and (width % 4 or in_rows[t] % 4)):
                return False
            if rdt == "fp8" and (n % 8 or (bias and width % 8)):
                return False
            a, kw = args(t, s, d, n, 0)
            if d < s + ks.KSum(*a, **kw).partial_bytes and s < d + n * rs:  # the result overlaps the partials
                return False
        bp = 0
        if bias:
            nmax = max(nc for _, nc in cols.values())
            bp = self.layer_alloc(nmax * 2, 8)
            self.image.put("bias", bp, np.zeros(nmax * 2, np.uint8))
            chunks = np.array([[t, bp, *cols[t], 1] for t in blocks], np.int64)
            self._bind_operand(op.bias, chunks, "f16", what)
        self.__dict__.setdefault("ksum_kinds", set())
        calls = {}
        for t, (s, d, n) in blocks.items():
            a, kw = args(t, s, d, n, bp)
            k = self.kernel(ks.KSum, *a, **kw)
            self.ksum_kinds.add(k.kind)
            calls[t] = k
        self.kcall(
            f"{what}: sum {count}"
            + (" + bias" if bias else "")
            + (" -> f32" if rdt == "f32" and xdt != "f32" else "")
            + (" * scale" if scale is not None else "")
            + (" -> tanh GELU" if gelu else "")
            + (" -> fp8" if rdt == "fp8" else "")
            + (f" + {len(op.addends)} addend{'s' * (len(op.addends) > 1)}" if op.addends else ""),
            calls,
        )
        return True

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
        """Materialized attention, padded exactly (see the module docstring)."""
        q, k, v = op.operands[:3]
        what = f"nn.attention ({op.results[0].name_hint or 'unnamed'})"
        if plan.get("kind") != "materialized":
            raise self.error(f"{what}: only the materialized plan is lowered (got {plan.get('kind')})")
        if len(op.operands) > 3:
            raise self.error(f"{what}: masks are not lowered")
        lay = op.attributes[tl.LAYOUT_ATTR]
        panels_of, esizes = self._attention_operands(op, what)
        heads = op.heads.value.data
        scale = float(op.scale.value.data)
        seq, hidden = k.type.get_shape()[-2:]
        d = hidden // heads
        g, table = lay.geometry(), lay.table()
        out = self.addrs.of(op.results[0]).addr
        rounds: list[dict[int, tuple]] = []
        dv = int(
            g.block_dims[0][1]
        )  # value columns per block: the head, or a slice of it (`AttentionPlanAttr`)
        for blk in range(lay.num_blocks):
            (r0, c0), (mr, nc) = (int(x) for x in g.block_origin[blk]), (int(x) for x in g.block_dims[blk])
            if nc != dv or d % dv or c0 % dv or dv % 4:
                raise self.error(
                    f"{what}: result blocks must be one head ({d} columns) or an equal slice of one (a multiple of "
                    f"4), got {nc} at {c0}"
                )
            h0 = c0 // d * d  # the head's first column: Q and K blocks are whole heads
            for rep in range(table.shape[1]):
                t = int(table[blk, rep])
                job = (
                    self._panel_addr(q, t, (r0, h0), (mr, d), what),
                    self._panel_addr(k, t, (0, h0), (seq, d), what),
                    self._panel_addr(v, t, (0, c0), (seq, dv), what),
                    mr,
                    int(out[t]) + int(g.offset[blk, rep]) * esizes[3],
                )
                _place_in_rounds(rounds, t, job)
        mmax, tmax = max((job[3], t) for r in rounds for t, job in r.items())
        sizes, choice, k_chosen = self._attention_choices(op, what, mmax, [seq], tmax)
        sz = sizes[seq]
        c_area, a_area, zeros = self.scratch(mark=False)
        areas = (c_area, a_area, self.aux(mark=False))
        pv_t = sz.transposed if choice["pv_transposed"] is None else choice["pv_transposed"]
        self._use_bounded(attention_scratch(sz, dv or sz.d, pv_t))
        for i, jobs in enumerate(rounds):
            kin = self._k_in_place(k_chosen, jobs, lambda job: sz, esizes, panels_of, areas, what)
            try:
                progs = {
                    t: attention_program(
                        sz,
                        *job,
                        scale,
                        *areas,
                        esizes,
                        panels_of,
                        zeros,
                        self.target.region1[0],
                        dv=dv,
                        k_in_place=kin,
                        **choice,
                    )
                    for t, job in jobs.items()
                }
            except ValueError as exc:
                raise self.error(f"{what}: {exc}") from None
            self._program_calls(f"{what} [{i}]" if len(rounds) > 1 else what, progs)

    def _attention_choices(self, op, what: str, mmax: int, seqs, tile: int):
        """kernel-select's attention choices: the padded sizes per key count (its key chunk and scores path,
        checked to fit) and attention_program's keywords (pv, softmax)."""
        d = op.operands[1].type.get_shape()[-1] // (
            op.num_heads if isinstance(op, nn.AttentionPartialOp) else op.heads.value.data
        )
        key_chunk, scores = self.choice(op, "key_chunk"), self.choice(op, "scores")
        pv, softmax = self.choice(op, "pv"), self.choice(op, "softmax")
        from ipu.passes.kernel_select import choices

        score_chunk = choices(op).get("score_chunk")  # absent (IR from before it): key_chunk bounds both
        v_f16 = tl.element_bytes(tl.layout_of(op.operands[2]).dtype) == 2
        sizes = {}
        for s in seqs:
            try:
                sizes[s] = attention_sizes(
                    mmax,
                    s,
                    d,
                    self.target.region1_element_bytes,
                    max_chunk=key_chunk,
                    transposed=scores == "transposed",
                    max_score_chunk=score_chunk,
                    v_direct=pv == "transposed" and v_f16,
                )
            except ValueError as exc:
                raise self.error(
                    f"{what}: tile {tile}: {exc} (kernel choices key_chunk = {key_chunk}, score_chunk = "
                    f"{score_chunk}, scores = {scores!r})"
                ) from None
        q_scaled = choices(op).get("q_scale") == "sum"  # Q's K-split sum applied the scale
        k_in_place = choices(op).get("k_operand") == "in_place"  # absent (IR from before it): K rows
        return sizes, dict(pv_transposed=pv == "transposed", softmax=softmax, q_scaled=q_scaled), k_in_place

    def _attention_operands(self, op, what: str):
        """(Q's, K's and V's column panel widths or None, element sizes of Q, K, V and the result), checking that
        they are f32 or f16, row-major or (operands) in column panels dividing the head (`colsP`, see tile-plan)."""
        for x in (*op.operands[:3], op.results[0]):
            xl = tl.layout_of(x)
            cols_ok = x is not op.results[0] and tl.col_panel_width(xl) is not None
            if device_dtype(xl.dtype) not in ("f32", "f16") or (xl.order.data != "row_major" and not cols_ok):
                raise self.error(f"{what}: row-major f32 or f16 operands and result expected")
        return attention_operand_formats(op)

    def _k_in_place(
        self, chosen: bool, jobs: dict[int, tuple], size_of, esizes, panels_of, areas, what: str
    ) -> bool:
        """kernel-select's `k_operand = "in_place"` (chosen) checked for a call site: every block's shape takes
        it (`k_in_place_blocks`), and, on the final plan, K's and Q's panels share no memory element with the
        scratch written beside their loads (the S^T GEMMs' scores; Q^T's panels or Q's rows: memory-plan's
        `kernel_scratch` pairs keep an op's operands out of its scratch elements)."""
        if not chosen:
            return False
        c_area, a_area = areas[0], areas[1]
        el = self.target.element_of

        def elements(lo, hi):
            return set(range(int(el(lo)), int(el(hi - 1)) + 1))

        for t, job in jobs.items():
            sz = size_of(job)
            qk = k_in_place_blocks(sz, esizes, panels_of)
            if qk is None:
                raise self.error(
                    f"{what}: tile {t}: kernel choice k_operand = 'in_place' needs f16 Q and K in column panels of "
                    f"one width p dividing the head (16 < p < 32 or a multiple of 16) and score chunks of at least "
                    f"{gm.MIN_ROWS} keys on the transposed scores; got panels {panels_of[:2]}, element sizes "
                    f"{esizes[:2]}, head {sz.d}"
                )
            if self.measure:  # addresses of a measuring lowering are not the plan's
                continue
            qa, ka, m = job[0], job[1], job[3]
            # K beside the scores in C (the S^T GEMMs); Q beside what the pace bundles that read it write: Q^T's
            # panels in aux (`panels_gap_f16`), or its rows in A (`panels_f16`)
            q_out = areas[2] if qk.gap else a_area
            for name, lo, hi, area, a_hi in (
                ("K's panels", ka, ka + sz.d * sz.seq * 2, c_area, c_area + sz.spad * 2 * sz.qn),
                ("Q's panels", qa, qa + sz.d * m * 2, q_out, q_out + sz.qn * 2 * qk.width),
            ):
                if elements(lo, hi) & elements(area, a_hi):
                    raise self.error(
                        f"{what}: tile {t}: {name} [{lo:#x}, {hi:#x}) share a memory element with the scratch "
                        f"[{area:#x}, {a_hi:#x}) the kernels write beside them (memory-plan keeps an op's operands out "
                        "of its scratch elements)"
                    )
        return True

    def _program_calls(self, tag: str, progs: dict[int, list]) -> None:
        """One call site per step of per-tile programs of the same shape (the same kernels in the same order; the
        labels of the longest program's first tile: they may differ in key counts)."""
        first = max(progs.values(), key=len)

        def steps(prog):  # a step's kernel: its call type and, for row kernels, the worker op
            return [(type(k), getattr(k, "op", None)) for _, k in prog]

        shape = steps(first)
        for t, prog in progs.items():
            if steps(prog) != shape:
                raise self.error(
                    f"{tag}: tile {t}'s program differs in its steps from the others' (one call per step)"
                )
        for j, (label, _) in enumerate(first):
            # A row kernel of no rows on a tile (So400m's Q zero rows but on the last query block) is skipped
            # there: its call would cost its supervisor's ~340 cycles for nothing.
            calls = {t: prog[j][1] for t, prog in progs.items()}
            self.kcall(f"{tag}: {label}", {t: k for t, k in calls.items() if not _no_rows(k)})

    def attention_partial(self, op: nn.AttentionPartialOp, plan) -> None:
        """Key-split attention: per result block (chunk j, a query block, head h) the materialized program over
        the chunk's keys, writing the block's rows [o | m | l] (f32; m and l from the softmax's partials)."""
        q, k, v = op.operands
        what = f"nn.attention_partial ({op.results[0].name_hint or 'unnamed'})"
        lay = op.attributes[tl.LAYOUT_ATTR]
        panels_of, esizes = self._attention_operands(op, what)
        if esizes[3] != 4:
            raise self.error(f"{what}: an f32 result expected")
        heads, scale = op.num_heads, float(op.scale.value.data)
        seq, hidden = k.type.get_shape()
        d, kc = hidden // heads, op.key_chunk()
        g, table = lay.geometry(), lay.table()
        out = self.addrs.of(op.results[0]).addr
        rounds: list[dict[int, tuple]] = []
        for blk in range(lay.num_blocks):
            (j, r0, c0), (_, mr, w) = (
                (int(x) for x in g.block_origin[blk]),
                (int(x) for x in g.block_dims[blk]),
            )
            if w != d + 2 or c0 % (d + 2):
                raise self.error(f"{what}: result blocks must be one head's {d + 2} columns, got {w} at {c0}")
            h0, k0 = c0 // (d + 2) * d, j * kc
            sj = min(kc, seq - k0)
            for rep in range(table.shape[1]):
                t = int(table[blk, rep])
                job = (
                    self._panel_addr(q, t, (r0, h0), (mr, d), what),
                    self._panel_addr(k, t, (k0, h0), (sj, d), what),
                    self._panel_addr(v, t, (k0, h0), (sj, d), what),
                    mr,
                    int(out[t]) + int(g.offset[blk, rep]) * 4,
                    sj,
                )
                _place_in_rounds(rounds, t, job)
        mmax, tmax = max((job[3], t) for r in rounds for t, job in r.items())
        seqs = sorted({job[5] for r in rounds for job in r.values()})
        sizes, choice, k_chosen = self._attention_choices(op, what, mmax, seqs, tmax)
        c_area, a_area, zeros = self.scratch(mark=False)
        areas = (c_area, a_area, self.aux(mark=False))
        for sz in sizes.values():
            pv_t = sz.transposed if choice["pv_transposed"] is None else choice["pv_transposed"]
            self._use_bounded(attention_scratch(sz, sz.d, pv_t))
        programs: dict[tuple, list] = {}  # job -> its program: tiles of one class share one
        for i, jobs in enumerate(rounds):
            kin = self._k_in_place(k_chosen, jobs, lambda job: sizes[job[5]], esizes, panels_of, areas, what)
            try:
                progs = {}
                for t, job in jobs.items():
                    prog = programs.get((job, kin))
                    if prog is None:
                        prog = programs[job, kin] = attention_program(
                            sizes[job[5]],
                            *job[:5],
                            scale,
                            *areas,
                            esizes,
                            panels_of,
                            zeros,
                            self.target.region1[0],
                            o_stride=(d + 2) * 4,
                            stats=True,
                            k_in_place=kin,
                            **choice,
                        )  # fmt: skip
                    progs[t] = prog
            except ValueError as exc:
                raise self.error(f"{what}: {exc}") from None
            self._program_calls(f"{what} [{i}]" if len(rounds) > 1 else what, progs)

    def attention_merge(self, op: nn.AttentionMergeOp, plan) -> None:
        """Per result block (rows of hb heads side by side, tile-plan's `merge_heads`) on its tile: one
        `attn_merge<chunks>` over its heads' operand blocks [chunks, rows, D + 2] (every chunk's o, m and l of
        those rows; `heads` = hb, their rows interleaved) into the block's f32 rows."""
        what = f"nn.attention_merge ({op.results[0].name_hint or 'unnamed'})"
        lay, pl = op.attributes[tl.LAYOUT_ATTR], tl.layout_of(op.partials)
        if (
            device_dtype(lay.dtype) != "f32"
            or device_dtype(pl.dtype) != "f32"
            or lay.order.data != "row_major"
        ):
            raise self.error(f"{what}: f32 row-major operand and result expected")
        n, _, w = op.partials.type.get_shape()
        d = w // op.num_heads - 2
        if f"attn_merge{n}" not in rw.MERGE_CHUNKS:
            raise self.error(f"{what}: {n} chunks; the merge kernel takes {sorted(rw.MERGE_CHUNKS.values())}")
        g, table = lay.geometry(), lay.table()
        out = self.addrs.of(op.results[0]).addr
        rounds: list[dict[int, rw.Rows]] = []
        for blk in range(lay.num_blocks):
            (r0, c0), (mr, nc) = (int(x) for x in g.block_origin[blk]), (int(x) for x in g.block_dims[blk])
            hb = nc // d
            if nc % d or c0 % d or hb & (hb - 1):
                raise self.error(
                    f"{what}: result blocks must be a power of two of whole heads of {d} columns, got {nc} at {c0}"
                )
            for rep in range(table.shape[1]):
                t = int(table[blk, rep])
                pa = [
                    self._panel_addr(op.partials, t, (0, r0, (c0 // d + j) * (d + 2)), (n, mr, d + 2), what)
                    for j in range(hb)
                ]
                step = pa[1] - pa[0] if hb > 1 else 0
                if any(b - a != step for a, b in zip(pa, pa[1:])) or step < 0:
                    raise self.error(
                        f"{what}: tile {t}: the heads' operand blocks are not evenly spaced: {pa}"
                    )
                call = rw.Rows(
                    f"attn_merge{n}", mr * hb, d, in0=pa[0], out=int(out[t]) + int(g.offset[blk, rep]) * 4,
                    in_stride=(d + 2) * 4, st0=mr * (d + 2) * 4, heads=hb, head_step=step,
                )  # fmt: skip
                _place_in_rounds(rounds, t, call)
        for i, calls in enumerate(rounds):
            self.kcall(f"{what} [{i}]" if len(rounds) > 1 else what, calls)


@dataclass(frozen=True)
class AttentionSizes:
    """Padded sizes and scratch use of one tile's materialized attention blocks (bytes, elements)."""

    mpad: int  # query rows (GEMM rows, >= 3)
    d: int
    dpad: int  # head size padded to 16 (S's inner dimension, O's columns)
    seq: int
    spad: int  # keys padded to 16 (S's columns, O's inner dimension)
    chunk: int  # keys per K/V packing step (a multiple of 16)
    qo: int  # offset of the V rows in C (after O) and, on the direct path, of the K rows in A (after Q)
    transposed: bool = False  # S^T = K Q^T (K rows as the GEMM's A), else S = Q K^T (K^T weight panels)
    score_chunk: int = 0  # keys per S^T = K Q^T step (transposed path; 0: `chunk`): K rows at A's start
    # O^T = V^T P^T with f16 V (`attention_sizes`' v_direct): a chunk's V^T rows straight from V, only its last
    # keys past a whole 16 through V rows in C (16 of them at most), so the chunk is not bounded by V rows in C
    v_direct: bool = False

    @property
    def score_chunks(self) -> list[tuple[int, int]]:
        """(first key, keys) of the score steps: S^T's K chunks on the transposed path, else `chunks`."""
        kc = self.score_chunk or self.chunk
        return [(k0, min(kc, self.seq - k0)) for k0 in range(0, self.seq, kc)]

    @property
    def qn(self) -> int:
        """S^T's and O^T's columns (transposed path): the query rows padded to whole 16-column weight blocks."""
        return query_columns(self.mpad)

    @property
    def chunks(self) -> list[tuple[int, int]]:
        return [(k0, min(self.chunk, self.seq - k0)) for k0 in range(0, self.seq, self.chunk)]


MAX_T_ROWS = 32  # query rows of the transposed path's blocks: S^T, Q^T and P^T of two 16-column weight blocks


def zero_fill(halves: int, out: int) -> rw.Rows:
    """Zeros over `halves` contiguous f16 (a multiple of 4) at out: `pad_f16` rows of no valid element, cut into
    the row count (dividing it in whole atoms) with the lowest estimate (the rows share out over the workers)."""
    cuts = [r for r in range(1, halves // 4 + 1) if halves % (4 * r) == 0 and r <= 6 * 8]
    calls = [rw.Rows("pad_f16", r, halves // r, out=out, valid=0) for r in cuts]
    return min(calls, key=rw.cycles)


def query_columns(mpad: int) -> int:
    """S^T's, Q^T's and P^T's query columns for blocks of mpad rows: whole 16-column weight blocks."""
    return -(-mpad // 16) * 16


def attention_sizes(
    m: int, seq: int, d: int, element_bytes: int, max_chunk: int | None = None, transposed: bool | None = None,
    max_score_chunk: int | None = None, v_direct: bool = False,
) -> AttentionSizes:  # fmt: skip
    """The padded sizes for blocks of at most m query rows x head size d over seq keys, or ValueError naming the
    sizes when they do not fit the scratch elements (C: S [mpad, spad] f16, then O [mpad, dpad] and a chunk's V
    rows; A: Q [mpad, dpad] and a chunk's K rows, then P [mpad, spad]; aux: a chunk's weight panels).
    transposed (default: when it fits; True: required): S^T [spad, qn] in C (qn: the query rows padded to 16 or
    32, one or two weight blocks), Q^T and S's panels in aux; a chunk's P^T weight panels (2 qn B per key) in A
    after P's qn rows, its V^T rows (the O^T GEMM's A, row stride 2 * chunk <= 4112 B) in aux; the S^T steps'
    K rows from A's start (Q's rows are dead once Q^T's panels are made), so their chunks (`score_chunk`) may be
    longer than the V steps' (V rows after O^T in C). max_chunk: keys per chunk at most (kernel-select's
    `key_chunk`); max_score_chunk: keys per S^T step at most (kernel-select's `score_chunk`; default max_chunk).
    v_direct (O^T = V^T P^T with f16 V, transposed path): a chunk's V^T rows come from V directly but for its last
    keys past a whole 16 (V rows in C, 16 at most), so chunks are bounded by V^T's rows in aux and P^T's panels in
    A only (So400m's key-split blocks: one chunk of 183 keys instead of 160 + 23)."""
    e = element_bytes
    if d % 4:
        raise ValueError(f"head size {d} is not a multiple of 4 (f32 rows are read in 4-element atoms)")
    mpad, dpad, spad = max(m, gm.MIN_ROWS), -(-d // 16) * 16, -(-seq // 16) * 16
    # S^T has qn columns (one or two weight blocks of queries): blocks of at most MAX_T_ROWS query rows.
    qn = query_columns(mpad)
    fits_t = mpad <= MAX_T_ROWS and spad * 2 * qn <= e and (dpad + spad) * 2 * qn <= e
    if transposed is None:
        transposed = fits_t
    elif transposed and not fits_t:
        raise ValueError(
            f"transposed scores S^T [{spad}, {qn}] need blocks of <= {MAX_T_ROWS} query rows (got {mpad}) and S^T with Q^T's "
            f"panels within a {e}-byte scratch element"
        )
    qo = -(-(qn if transposed else mpad) * dpad * 2 // 64) * 64
    v_direct = v_direct and transposed and qo + 16 * dpad * 2 <= e
    kc = e // (2 * dpad) if v_direct else min((e - qo) // (2 * dpad), e // (2 * dpad))
    # O^T = V^T P^T: P^T's weight panels after P's qn rows in A; V^T rows (the GEMM's A) of <= 4112 B
    if transposed:
        kc = min(kc, (e - p_rows_bytes(qn, spad)) // (2 * qn), 8 * 514 // 2)
    kc = kc // 16 * 16
    if max_chunk is not None:
        kc = min(kc, max_chunk)
    kc = min(kc, spad)
    sizes = (
        f"block of {m} query rows x head size {d} (padded {mpad} x {dpad}) over {seq} keys (padded {spad}): "
        f"S and P {mpad * spad * 2} B each, Q and O {mpad * dpad * 2} B, 16 keys of K or V {16 * dpad * 2} B "
        f"(f16 rows or weight panels), scratch elements of {e} B"
    )
    if mpad * spad * 2 > e or mpad * d * 4 > e or kc < 16:
        raise ValueError(f"the block does not fit: {sizes}")
    if spad * 2 > 8 * 514:
        raise ValueError(f"S rows of {spad * 2} B exceed the GEMM's 4112-byte row stride: {sizes}")
    sc = 0
    if transposed:
        limit = max_score_chunk if max_score_chunk is not None else max_chunk
        sc = min(e // (2 * dpad) // 16 * 16, spad, *(() if limit is None else (limit,)))
        if sc < 16:
            raise ValueError(f"the block does not fit: {sizes} (score chunk {sc})")
    return AttentionSizes(mpad, d, dpad, seq, spad, kc, qo, transposed, sc, v_direct)


def p_rows_bytes(rows: int, spad: int) -> int:
    """Bytes of P's f16 rows in A, to a 64-byte boundary (P^T's weight panels follow them)."""
    return -(-rows * spad * 2 // 64) * 64


def attention_scratch(sz: AttentionSizes, dv: int, pv_transposed: bool) -> tuple[int, int, int]:
    """Bytes of the C, A and aux elements that `attention_program` uses for blocks of these sizes (an upper
    bound over its steps, plus a 256-B margin each for the row kernels' padded units): C holds S (or S^T), Q as
    f32, the V rows at qo and O (or O^T); A holds Q, the K rows at qo, then P, and P^T's panels after P; aux the
    weight panels (Q^T and S's, K^T's, V's or V^T's rows) and the split softmax's partials."""
    kc, dpad, spad, mpad, qn = sz.chunk, sz.dpad, sz.spad, sz.mpad, sz.qn
    dvpad = -(-dv // 16) * 16
    wide = max(dpad, dvpad)
    p_bytes = p_rows_bytes(qn if sz.transposed else mpad, spad)
    c = max(
        mpad * spad * 2,
        spad * 2 * qn,
        qn * sz.d * 4,
        mpad * sz.d * 4,
        sz.qo + (16 if sz.v_direct else kc) * wide * 2,
        qn * dvpad * 2,
        mpad * dvpad * 2,
    )
    k_rows = sz.score_chunk * dpad * 2 if sz.transposed else sz.qo + kc * dpad * 2
    a = max(qn * dpad * 2, k_rows, p_bytes + (kc * 2 * qn if pv_transposed else 0), qn * dvpad * 2)
    aux = max((dpad + spad) * 2 * qn if sz.transposed else 0, kc * wide * 2, rw.SMS_PART * mpad)
    return tuple(x + 256 for x in (c, a, aux))


def softmax_split_fits(sz: AttentionSizes) -> bool:
    """The split softmax's partials (96 B per row) fit the aux bytes a chunk's weight panels use."""
    return sz.seq >= rw.SMS_MIN_VALID and rw.SMS_PART * sz.mpad <= sz.chunk * sz.dpad * 2


def softmax_kernel(sz: AttentionSizes, stats: bool = False, ones_row: bool = False) -> str:
    """The row kernel of a block's scores: `softmax_split` when it fits and its estimate for the block's mpad rows
    is lower (mpad, not m: the same choice on every tile of a call site), else `softmax`. The key-split partials
    (stats: they need the row max and sum) on the S^T path take `softmax_e` (whole rows per worker, (m, l)
    written by the kernel) where its estimate is below `softmax_split_e` + `sms_stats`'s, else `softmax_split`;
    ones_row (O^T = V^T P^T with a spare V^T row: dv % 16 != 0) lets the O^T GEMM form the row sums l from a ones
    row of V^T, and the sum-free `softmax_m` is taken where it is cheaper than `softmax_e`; as `softmax_mt`
    (P^T's weight panels written by the softmax itself, `pt_direct`) where that is cheaper than `softmax_m` and
    the P^T panels packed from its rows."""
    if stats and sz.transposed:
        kw = dict(in0=0, out=0, valid=sz.seq)
        rows_e = rw.cycles(rw.Rows("softmax_e", sz.mpad, sz.spad, st0=0, **kw))
        if ones_row:
            fill = rw.cycles(rw.Rows("fill_f16", sz.spad // 16, 16, out=0))  # at most once per key chunk
            rows_m = rw.cycles(rw.Rows("softmax_m", sz.mpad, sz.spad, st0=0, **kw))
            if rows_m + fill < rows_e:
                if pt_direct(sz):
                    packs = sum(
                        pk.weights_from_bt(
                            sz.qn, -(-nk // 16) * 16, "f16", 0, 0, src_row=sz.spad * 2
                        ).cycles()
                        for _, nk in sz.chunks
                    )
                    rows_mt = rw.cycles(rw.Rows("softmax_mt", sz.mpad, sz.spad, st0=0, **kw))
                    if rows_mt + rw.cycles(pt_zero_columns(sz, sz.mpad, 0)) < rows_m + packs:
                        return "softmax_mt"
                return "softmax_m"
        if not softmax_split_fits(sz):
            return "softmax_e"
        split = rw.cycles(rw.Rows("softmax_split_e", sz.mpad, sz.spad, st0=0, **kw))
        split += rw.cycles(rw.Rows("sms_stats", sz.mpad, 4, in_stride=rw.SMS_PART))
        return "softmax_e" if rows_e < split else "softmax_split"
    if not softmax_split_fits(sz):
        if stats:
            raise ValueError(
                f"the key-split softmax needs >= {rw.SMS_MIN_VALID} keys per chunk and its partials within the "
                f"scratch, got {sz.seq} keys"
            )
        return "softmax"
    if stats:
        return "softmax_split"
    kw = dict(in0=0, out=0, valid=sz.seq)
    whole = rw.cycles(rw.Rows("softmax", sz.mpad, sz.spad, **kw))
    split = rw.cycles(rw.Rows("softmax_split", sz.mpad, sz.spad, st0=0, **kw))
    return "softmax_split" if split < whole else "softmax"


# O / l to f32 rows read straight from O^T (`to_f32_scaled_t`); False: O's rows first (the tests compare the two)
FUSED_OT = True


def pt_direct(sz: AttentionSizes) -> bool:
    """`softmax_mt` can write P^T's weight panels for the O^T GEMMs: its layout (every 16-query column block over
    all spad keys) is each key chunk's weights when there is one chunk, or one column block (qn = 16)."""
    return sz.transposed and (len(sz.chunks) == 1 or sz.qn == 16)


def pt_zero_columns(sz: AttentionSizes, m: int, pt: int) -> rw.Rows:
    """Zeros for P^T's query columns m..qn (engines past the block's rows in its last column block), which
    `softmax_mt` does not write: per 16-key block (512 bytes apart) their 32 bytes each; O^T's columns there are
    dropped, but the GEMM reads them. A call of no rows when m fills the column blocks."""
    lo = m % 16 if m < sz.qn else 16
    return rw.Rows("pad_f16", sz.spad // 16 if lo < 16 else 0, max(16 * (16 - lo), 4),
                   out=pt + (sz.qn // 16 - 1) * (sz.spad // 16) * 512 + lo % 16 * 32, out_stride=512, valid=0)  # fmt: skip


def attention_operand_formats(op: Operation) -> tuple[tuple[int | None, ...], tuple[int, ...]]:
    """An attention's (Q's, K's and V's column panel widths, None where row-major or without a layout) and the
    element sizes of Q, K, V and the result, from their tile-plan layouts (else their types)."""

    def fmt(x):
        lay = tl.layout_of(x)
        if lay is None:
            return None, tl.element_bytes(x.type.element_type)
        return tl.col_panel_width(lay), tl.element_bytes(lay.dtype)

    formats = [fmt(x) for x in (*op.operands[:3], op.results[0])]
    return tuple(p for p, _ in formats[:3]), tuple(e for _, e in formats)


@dataclass(frozen=True)
class KBlocks:
    """How the S^T GEMMs read K's column panels of p halves in place: panel_blocks 16-column blocks per panel,
    block_step bytes apart (16 < p < 32: columns [0, 16) and [p - 16, p), overlapping), Q's rows `width` halves in
    that block order, with `gap` zeros after each panel's first 16 columns (the columns read twice)."""

    p: int
    panel_blocks: int
    block_step: int
    width: int
    gap: int


def k_in_place_blocks(sz: AttentionSizes, esizes, panels_of) -> KBlocks | None:
    """The K blocks of the S^T GEMMs when they can read K's panels in place (`attention_program`'s k_in_place):
    the transposed scores, f16 Q and K in column panels of one width p (16 < p < 32, or a multiple of 16)
    dividing the head, every score chunk of at least the GEMM's MIN_ROWS keys; else None."""
    p, qp = panels_of[1], panels_of[0]
    if not sz.transposed or esizes[0] != 2 or esizes[1] != 2 or p is None or qp != p or sz.d % p:
        return None
    if p % 16 == 0:
        blocks = KBlocks(p, p // 16, 32, sz.d, 0)
    elif 16 < p < 32 and p % 4 == 0:
        blocks = KBlocks(p, 2, 2 * (p - 16), sz.d // p * 32, 32 - p)
    else:
        return None
    if (
        min(nk for _, nk in sz.score_chunks) < gm.MIN_ROWS
        or sz.qn * blocks.width * 2 > sz.score_chunk * sz.dpad * 2
    ):
        return None  # (Q's rows take the K rows' room in A)
    return blocks


def attention_program(
    sz: AttentionSizes, qa: int, ka: int, va: int, m: int, out: int, scale: float, c_area: int, a_area: int,
    panels: int, esizes: tuple[int, int, int, int] = (4, 4, 4, 4),
    panels_of: tuple[int | None, int | None, int | None] = (None, None, None), zeros: int | None = None,
    region1: int = IPU21.region1[0], dv: int | None = None, o_stride: int | None = None, stats: bool = False,
    pv_transposed: bool | None = None, softmax: str | None = None, q_scaled: bool = False,
    k_in_place: bool = False,
) -> list[tuple[str, object]]:  # fmt: skip
    """The kernel calls of one block (m query rows of one head; Q, K, V rows at qa / ka / va, the result rows at
    out; element sizes `esizes` of Q, K, V and the result: 4 = f32, 2 = f16): (label, call) in order. Scratch: C
    and A elements, `panels` (aux). panels_of: Q's, K's and V's column panel widths when they are stored as
    column panels of their head blocks (`colsP`: [d / P][rows][P]), else None. zeros: the address of at least
    2 * (dpad - d) zero bytes (f16 V in column panels: the weight panels' zero columns come from there).
    region1: the target's first interleaved address (weight panels there load two slots per instruction).
    dv: V's and the result's columns when the block computes a slice of the head's value columns (default d; V's
    rows at va are then dv wide, or its column panels cover those dv columns).
    o_stride: bytes between the result rows (default dv elements). stats (`nn.attention_partial`): the softmax's
    row max and sum of e (f32) after each result row's dv columns (`softmax_split_e`: P = e unnormalized, no scale
    pass; then `sms_stats`); O's rows are divided by the sum on the way to f32 (`to_f32_scaled`).
    pv_transposed (kernel-select's `pv`; None: with the transposed scores): O^T = V^T P^T, else O = P V. softmax (kernel-select's
    `softmax`; None: `softmax_kernel`'s choice): the row kernel of the scores. q_scaled (kernel-select's
    `q_scale = "sum"`): f16 Q arrives scaled (its K-split sum applied the scale), so no "Q * scale" step.
    k_in_place (kernel-select's `k_operand = "in_place"`, checked by `NnOps._k_in_place`): the S^T GEMMs read K's column
    panels where they lie (`k_in_place_blocks`), no K rows."""
    d, dpad, spad, mpad = sz.d, sz.dpad, sz.spad, sz.mpad
    dv = d if dv is None else dv
    dvpad = -(-dv // 16) * 16
    krows, vrows = a_area + (0 if sz.transposed else sz.qo), c_area + sz.qo
    if pv_transposed and not sz.transposed:
        raise ValueError("O^T = V^T P^T (pv = 'transposed') needs the transposed scores")
    pv_t = sz.transposed if pv_transposed is None else pv_transposed  # O^T = V^T P^T (else O = P V)
    several = len(sz.chunks) > 1
    prog: list[tuple[str, object]] = []

    def panel_rows(
        label, kind, rows, p, src, block_rows, first, esize, dst, out_esize, out_stride, w=d, **kw
    ):
        # A head block (w columns) stored as column panels [w / p][block_rows][p]: rows first.. of each panel
        # into its columns of the rows at dst (one `Rows` per panel).
        for j in range(w // p):
            in0 = src + (j * p * block_rows + first * p) * esize
            call = rw.Rows(
                kind,
                rows,
                p,
                in0=in0,
                out=dst + j * p * out_esize,
                in_stride=p * esize,
                out_stride=out_stride,
                **kw,
            )
            prog.append((f"{label}, columns {j * p}..{j * p + p}", call))

    def zero_columns(label, rows, dst, w=d, wpad=dpad):  # columns w..wpad of wpad-wide f16 rows
        if wpad > w:
            prog.append(
                (label, rw.Rows("pad_f16", rows, wpad - w, out=dst + w * 2, out_stride=wpad * 2, valid=0))
            )

    qp = panels_of[0]
    q_via_c = False  # f16 Q in narrow panels: made f32 rows in C first (a flag: Q's own buffer may lie at C)

    def scale_q(area: int, halves: int) -> None:
        # f16 Q scaled in place (`scale_f16`: f16(q * f16(scale)), zeros stay zeros), unless its K-split sum did
        if not q_scaled:
            prog.append(
                ("Q * scale", ew.Elementwise("scale_f16", halves // 4, in0=area, out=area, scalar=scale))
            )

    qk = k_in_place_blocks(sz, esizes, panels_of) if k_in_place else None
    kin = qk is not None
    qt_direct = kin and qk.gap > 0  # Q^T's weight panels written straight from Q's column panels
    if qt_direct:
        # Q^T's F16 weight panels ([qn / 16][K blocks][16 queries][16 halves]) in the order of the K blocks the
        # S^T GEMMs read from K's panels: per panel its first 16 columns, then zeros for the columns the second,
        # overlapping block reads again, then the rest (`panels_gap_f16` with block_jump: no worker's queries
        # span two 16-query groups); the queries m..qn zero.
        group = qk.width // 16 * 512
        # The last group's queries m..qn zero: a row of (qn - m) * 16 halves per 16-deep block, 512 bytes apart
        # (the same step on every tile of a call site: no rows where m = qn).
        zrows, z0 = (qk.width // 16, m) if m < sz.qn else (0, sz.qn - 1)
        call = rw.Rows("pad_f16", zrows, (sz.qn - z0) * 16, out=panels + (sz.qn // 16 - 1) * group
                       + (z0 % 16) * 32, out_stride=512, valid=0)  # fmt: skip
        prog.append(("Q^T zero query columns", call))
        call = rw.Rows("panels_gap_f16", m, qk.width, in0=qa, out=panels, panels=d // qp, panel_width=qp,
                       panel_step=m * qp * 2, gap_at=16, gap=qk.gap, out_stride=32, block_jump=512)  # fmt: skip
        prog.append(("Q^T panels from Q's column panels", call))
        scale_q(panels, sz.qn * qk.width)
    elif kin:
        # Q's rows in the order of the K blocks the S^T GEMMs read from K's panels (p a multiple of 16: Q's
        # panels side by side); Q^T's panels are made from these rows.
        call = rw.Rows("panels_f16", m, qk.width, in0=qa, out=a_area, panels=d // qp, panel_width=qp,
                       panel_step=m * qp * 2)  # fmt: skip
        prog.append(("Q rows in K's block order", call))
        scale_q(a_area, m * qk.width)
    elif esizes[0] == 2:
        # f16 Q: its rows of dpad in A in one pass (`panels_f16` from column panels, `pad_f16` from rows; zero
        # columns d..dpad), then scaled in place in f16 (`scale_f16`: f16(q * f16(scale)), zeros stay zeros).
        if qp is not None and rw.pf_width_ok(qp):
            call = rw.Rows("panels_f16", m, dpad, in0=qa, out=a_area, panels=d // qp, panel_width=qp,
                           panel_step=m * qp * 2, out_stride=dpad * 2)  # fmt: skip
            prog.append(("Q rows from column panels", call))
        elif qp is None:
            prog.append(("Q rows", rw.Rows("pad_f16", m, dpad, in0=qa, out=a_area, valid=d)))
        else:  # narrow panels: through f32 rows in C, as f32 Q
            panel_rows("Q to f32", "to_f32", m, qp, qa, m, 0, 2, c_area, 4, d * 4)
            qa, qp, q_via_c = c_area, None, True
        if not q_via_c:
            scale_q(a_area, m * dpad)
    if q_scaled and (esizes[0] != 2 or q_via_c):
        raise ValueError(
            "kernel choice q_scale = 'sum' needs f16 Q scaled in place (row-major, or column panels of a multiple of "
            f"4 >= {rw.PF_MIN_P}); got {esizes[0]}-byte elements"
            + (f" in narrow panels of {panels_of[0]}" if panels_of[0] is not None else "")
        )
    # Q * scale -> f16 rows of dpad (zero columns d..dpad) in A, then zero rows up to 16 (S^T: Q^T's 16 columns)
    # or mpad (the GEMM's rows): the rows past m give finite scores (0) and results that are not used.
    if kin or (esizes[0] == 2 and not q_via_c):
        pass  # done above
    elif qp is None:
        prog.append(
            ("Q * scale to f16", rw.Rows("to_f16", m, dpad, in0=qa, out=a_area, valid=d, scale=scale))
        )
    else:  # f32 Q in column panels: each panel into its columns, then the zero columns
        panel_rows(
            "Q * scale to f16", "to_f16", m, qp, qa, m, 0, 4, a_area, 2, dpad * 2, valid=qp, scale=scale
        )
        zero_columns("Q zero columns", m, a_area)
    qn = sz.qn
    qrows = qn if sz.transposed else mpad
    qw = qk.width if kin else dpad  # Q's row width in A
    if not qt_direct:
        prog.append(("Q zero rows", rw.Rows("pad_f16", qrows - m, qw, out=a_area + m * qw * 2, valid=0)))

    def rows_of(name, src, esize, k0, nk, dst, p=None, first=None, w=d, wpad=dpad, zero_rows=True):
        # f16 rows of wpad (zero columns w..wpad; w = d, or V's dv), then zero rows up to the chunk's multiple of
        # 16 (zero keys: finite logits, masked by the softmax; zero values: no contribution). zero_rows=False: the
        # caller knows the rows past nk hold finite values this program wrote, which only meet zero weights.
        pre = f"keys {k0}..{k0 + nk}: " if nk < sz.seq else ""
        kind, verb = ("cast_f16", "to f16") if esize == 4 else ("pad_f16", "rows")
        if p is None:
            prog.append(
                (f"{pre}{name} {verb}", rw.Rows(kind, nk, wpad, in0=src + k0 * w * esize, out=dst, valid=w))
            )
        elif esize == 2:
            # f16 column panels [w / p][seq][p]: one call copies every panel's rows into their columns of the
            # wpad-wide rows and zeroes the columns w..wpad.
            call = rw.Rows(
                "panels_f16", nk, wpad, in0=src + k0 * p * 2, out=dst, panels=w // p, panel_width=p,
                panel_step=sz.seq * p * 2, out_stride=wpad * 2,
            )  # fmt: skip
            prog.append((f"{pre}{name} rows from {w // p} column panels", call))
        else:
            # Column panels [w / p][seq][p]: each panel's rows into its columns of the wpad-wide rows; the zero
            # columns w..wpad once, by the first chunk copied (chunks after it are no larger and rewrite columns < w
            # only).
            panel_rows(
                f"{pre}{name} {verb}", kind, nk, p, src, sz.seq, k0, esize, dst, 2, wpad * 2, w=w, valid=p
            )
            if (k0 == 0) if first is None else first:
                zero_columns(f"{pre}{name} zero columns", nk, dst, w, wpad)
        nkp = -(-nk // 16) * 16
        if nkp > nk and zero_rows:
            prog.append(
                (
                    f"{pre}{name} zero rows",
                    rw.Rows("pad_f16", nkp - nk, wpad, out=dst + nk * wpad * 2, valid=0),
                )
            )
        return pre, nkp

    def coef_of(weights: int) -> str:
        return "ld128" if ld128_fits(weights, region1) else "ld64"

    if sz.transposed:
        # S^T = K Q^T: the K rows are the GEMM's A (M = keys: all six workers busy), Q^T weight panels from qn Q
        # rows (rows m..qn zero); S^T [spad, qn] in C -> S's qn rows row-major in A in one transpose
        # (`TransposeF16`: S^T's columns as rows; rows m..qn are zeros from Q's zero rows; P^T's panels follow
        # them).
        if not qt_direct:
            prog.append(("Q^T panels", pk.weights_from_bt(qn, qw, "f16", a_area, panels)))
        for k0, nk in sz.score_chunks if kin else ():  # K's panels in place: no K rows
            st_gemm = gm.Gemm(
                nk, qw, qn, prec=gm.F16, mode="init", coef=coef_of(panels), a=ka + k0 * qk.p * 2,
                weights=panels, c=c_area + k0 * 2 * qn, a_row_stride=qk.p * 2, a_block_step=qk.block_step,
                a_panel_blocks=qk.panel_blocks, a_panel_step=sz.seq * qk.p * 2,
            )  # fmt: skip
            pre = f"keys {k0}..{k0 + nk}: " if nk < sz.seq else ""
            prog.append((f"{pre}S^T = K Q^T (K's panels in place)", st_gemm))
            nkp = -(-nk // 16) * 16
            if nkp > nk:
                prog.append((f"{pre}S^T zero rows", zero_fill((nkp - nk) * qn, c_area + (k0 + nk) * 2 * qn)))
        for k0, nk in () if kin else sz.score_chunks:  # K rows over Q's (dead once Q^T's panels are made)
            # The GEMM takes the chunk's nk keys only (any M >= 3); S^T's rows up to the chunk's multiple of 16
            # are then zeros of their own (the transpose reads whole 16-key blocks; the softmax never reads those
            # columns of S): qn halves a row where zero K rows would be dpad, and no GEMM rows for them.
            short = nk >= gm.MIN_ROWS
            pre, nkp = rows_of("K", ka, esizes[1], k0, nk, krows, panels_of[1], zero_rows=not short)
            st_gemm = gm.Gemm(
                nk if short else nkp, dpad, qn, prec=gm.F16, mode="init", coef=coef_of(panels), a=krows,
                weights=panels, c=c_area + k0 * 2 * qn,
            )  # fmt: skip
            prog.append((f"{pre}S^T = K Q^T", st_gemm))
            if short and nkp > nk:
                prog.append((f"{pre}S^T zero rows", zero_fill((nkp - nk) * qn, c_area + (k0 + nk) * 2 * qn)))
        prog.append(("S rows from S^T", pk.TransposeF16(spad, qn, c_area, a_area)))
        s_rows = a_area
    else:
        for k0, nk in sz.chunks:
            pre, nkp = rows_of("K", ka, esizes[1], k0, nk, krows, panels_of[1])
            prog.append((f"{pre}K^T panels", pk.weights_from_bt(nkp, dpad, "f16", krows, panels)))
            s_gemm = gm.Gemm(
                mpad, dpad, nkp, prec=gm.F16, mode="init", coef="ld64", a=a_area, weights=panels,
                c=c_area + k0 * 2, c_row_stride=spad * 2,
            )  # fmt: skip
            prog.append((f"{pre}S = Q K^T", s_gemm))
        s_rows = c_area
    # Softmax over the seq valid columns of S; P's padded columns are zeros. P's rows m..mpad (the O GEMM's rows):
    # S^T: S's zero rows, copied; else the softmax of S's zero rows (m < 3 only: blocks of <= 16 rows take S^T).
    rows = m if sz.transposed else mpad
    kw = dict(in0=s_rows, out=a_area, valid=sz.seq)
    # `softmax_split` (every row split across the six workers) keeps its partials (rows * 96 B) in `panels` (aux):
    # nothing there is live during the softmax (Q^T's panels, or the last chunk's K^T panels, were
    # consumed by the S GEMMs before it; the first V panels or V^T rows are written after it),
    # and the softmax itself touches only S (A or C) and P (A).
    ones_row = pv_t and dvpad > dv  # O^T's row dv can be the row sums l (V^T's row dv all ones)
    softmax_op = softmax_kernel(sz, stats, ones_row) if softmax is None else softmax
    l_row = softmax_op in ("softmax_m", "softmax_mt")  # O^T's row dv gives l
    pt_written = softmax_op == "softmax_mt"  # the softmax writes P^T's weight panels itself
    if pt_written and not pt_direct(sz):
        raise ValueError(
            f"kernel choice softmax = 'softmax_mt' writes P^T's panels over all {sz.spad} keys per 16-query column "
            f"block: it needs one key chunk or one column block, got {len(sz.chunks)} chunks and {sz.qn} queries"
        )
    if softmax_op in ("softmax_e", "softmax_m", "softmax_mt"):
        # Whole rows per worker; m (and l: softmax_e) written by the kernel after each result row's dv columns (no
        # partials, no `sms_stats`). Only for the key-split partials (P stays unnormalized) on m rows: the S^T
        # path. softmax_m leaves l to the O^T GEMM: V^T's row dv is ones, so O^T's row dv is sum_k P^T[k, q].
        if not (stats and sz.transposed):
            raise ValueError(
                f"kernel choice softmax = {softmax_op!r} is for the key-split partial attention on the transposed "
                "scores (P unnormalized, the (m, l) of the block's rows)"
            )
        if l_row and not ones_row:
            raise ValueError(
                f"kernel choice softmax = {softmax_op!r} needs O^T = V^T P^T (pv = 'transposed') and value columns "
                f"that leave a spare V^T row for the row sums (dv % 16 != 0), got dv = {dv}"
            )
        o_step = o_stride if o_stride is not None else dv * esizes[3]
        call = rw.Rows(
            softmax_op, rows, spad, in0=s_rows, out=a_area + p_rows_bytes(qn, spad) if pt_written else a_area,
            valid=sz.seq, st0=out + dv * 4, st1=o_step,
        )  # fmt: skip
        prog.append(("softmax", call))
        if pt_written:
            prog.append(("P^T zero query columns", pt_zero_columns(sz, m, call.out)))
    elif softmax_op == "softmax_split":
        if not (softmax_split_fits(sz) and panels % 8 == 0):
            raise ValueError(
                f"kernel choice softmax = 'softmax_split' needs >= {rw.SMS_MIN_VALID} keys ({sz.seq}) and its partials of {mpad} rows within "
                f"the {sz.chunk * dpad * 2} bytes of the aux panels at an 8-byte boundary ({panels:#x})"
            )
        kw = dict(kw, st0=panels)
    elif stats:
        raise ValueError("the key-split attention needs softmax_split or softmax_e (its row max and sum)")
    if stats and softmax_op == "softmax_split":
        # The key-split attention's P stays unnormalized (`softmax_split_e`: no scale pass over P): O's rows are
        # divided by the row sum l at the end ("O / l to f32"), dv columns per row instead of spad.
        softmax_op = "softmax_split_e"
    if softmax_op not in ("softmax_e", "softmax_m", "softmax_mt"):
        prog.append(("softmax", rw.Rows(softmax_op, rows, spad, **kw)))
    if (
        softmax_op == "softmax_split_e"
    ):  # the block's (m, l) from the partials, before V's rows overwrite them
        o_step = o_stride if o_stride is not None else dv * esizes[3]
        call = rw.Rows(
            "sms_stats", m, 4, in0=panels, out=out + dv * 4, in_stride=rw.SMS_PART, out_stride=o_step
        )
        prog.append(("softmax (m, l)", call))
    vp = panels_of[2]
    if pv_t:
        # O^T [dpad, qn] = V^T P^T per key chunk: V^T's rows [dpad][nkp] (`panels`, aux) are the GEMM's A (M =
        # dv or dv + 1 of them, `ot_rows`: all six workers busy), P^T [keys, qn queries] its weights (one or two column blocks), accumulated
        # in C (row stride 2 qn); per 16 keys the same products into the same f16 partials as O = P V. P^T's
        # panels are packed from P's qn rows: rows m..qn are S's zero rows (the softmax runs over m rows only), so
        # the weights' query columns m..qn (O^T's dropped columns) come out zero on every tile alike
        # (`softmax_mt` writes the panels itself and "P^T zero query columns" those columns).
        pt = a_area + p_rows_bytes(qn, spad)  # P^T's weight panels, after P's rows
        zeroed = None  # the chunk size whose V^T zero rows dv..dvpad are in place (direct chunks)
        # O^T's rows: dv (and the ones row), not dvpad: V^T's rows past them are neither read nor written (no zero
        # rows call) and O^T's rows past them keep what C held (S^T's scores: finite, written by this program, as
        # long as S^T covers them), which land in O's unused columns.
        ot_rows = dv + l_row if dv + l_row >= gm.MIN_ROWS and spad >= dvpad else dvpad

        def ones(nk):  # V^T's row dv (nk keys, a multiple of 16) set to 1.0, as rows of 16 over the workers
            return rw.Rows("fill_f16", nk // 16, 16, out=panels + dv * nk * 2, scale=1.0)

        vt = vp if vp is not None else dv  # V's panel width for the direct V^T rows
        v_rows_copied = False  # a chunk went through f16 V rows (whose zero columns are then in place)
        for c, (k0, nk) in enumerate(sz.chunks):
            # A chunk past whole K blocks (`AttentionSizes.v_direct`): its whole blocks direct, its last keys
            # through V rows in C, all into one V^T of nkp columns (one P^T and one O^T GEMM for the chunk).
            ragged = sz.v_direct and vt is not None and esizes[2] == 2 and nk % 16 != 0 and nk > 16
            if vt is not None and esizes[2] == 2 and (nk % 16 == 0 or ragged):
                # f16 V in column panels (a row-major block: one panel of dv), whole K blocks: each panel's rows
                # straight into its V^T rows; the zero rows dv..dvpad once per chunk size (nothing else writes
                # them between such chunks).
                pre = f"keys {k0}..{k0 + nk}: " if several else ""
                nkp, nkd = -(-nk // 16) * 16, nk // 16 * 16
                drow = dict(dst_row=nkp * 2) if ragged else {}
                if 1 < dv // vt <= 6:
                    # One call over every panel: the workers shared out over the panels (one call per panel left
                    # half of them idle for part of it: 9 groups of a 36-wide panel over six workers).
                    call = pk.TransposeF16(nkd, dv, va + k0 * vt * 2, panels, src_row=vt * 2, panel_width=vt,
                                           panel_step=vt * sz.seq * 2, **drow)  # fmt: skip
                    prog.append((f"{pre}V^T rows from {dv // vt} V column panels", call))
                for j in range(dv // vt if not 1 < dv // vt <= 6 else 0):
                    src = va + (j * vt * sz.seq + k0 * vt) * 2
                    call = pk.TransposeF16(nkd, vt, src, panels, src_row=vt * 2, group0=j * vt // 4, **drow)
                    prog.append((f"{pre}V^T rows from V columns {j * vt}..{j * vt + vt}", call))
                if ragged:
                    # The last nk - nkd keys: V rows (zero columns) -> V^T's last block. Its rows past them need no
                    # zeros where they lie in S^T's scores (written above, finite as the scores are): they become
                    # V^T's columns of the padded keys, whose P^T rows are exact zeros (the softmax's mask and zero
                    # atoms).
                    in_st = vrows + 16 * dvpad * 2 <= c_area + spad * qn * 2
                    tail, _ = rows_of("V", va, 2, k0 + nkd, nk - nkd, vrows, vp, True, dv, dvpad, not in_st)
                    call = pk.TransposeF16(16, dvpad, vrows, panels + nkd * 2, dst_row=nkp * 2)
                    prog.append((f"{tail}V^T rows", call))
                    zeroed = None  # its rows dv..dvpad took V's zero columns: the ones row again
                if dvpad > dv and zeroed != nkp:
                    if l_row:
                        prog.append((f"{pre}V^T ones row", ones(nkp)))
                    if ot_rows > dv + l_row:
                        call = rw.Rows(
                            "pad_f16", dvpad - dv - l_row, nkp, out=panels + (dv + l_row) * nkp * 2, valid=0
                        )
                        prog.append((f"{pre}V^T zero rows", call))
                    zeroed = None if ragged else nkp
            else:
                pre, nkp = rows_of("V", va, esizes[2], k0, nk, vrows, vp, not v_rows_copied, dv, dvpad)
                prog.append((f"{pre}V^T rows", pk.TransposeF16(nkp, dvpad, vrows, panels)))
                if l_row:  # over the transposed zero column
                    prog.append((f"{pre}V^T ones row", ones(nkp)))
                zeroed, v_rows_copied = None, True
            if not pt_written:
                prog.append(
                    (
                        f"{pre}P^T panels",
                        pk.weights_from_bt(qn, nkp, "f16", a_area + k0 * 2, pt, src_row=spad * 2),
                    )
                )
            # softmax_mt's panels: one chunk, or one column block whose chunk starts k0 / 16 blocks in
            w_at = pt + k0 // 16 * 512 if pt_written else pt
            o_gemm = gm.Gemm(
                ot_rows, nkp, qn, prec=gm.F16, mode="init" if c == 0 else "acc", coef=coef_of(w_at), a=panels,
                a_row_stride=nkp * 2, weights=w_at, c=c_area,
            )  # fmt: skip
            prog.append((f"{pre}O^T {'=' if c == 0 else '+='} V^T P^T", o_gemm))
        # O's m rows (dvpad halves apart) from O^T into A (P is dead), then as O's rows below; with l in O^T's row
        # dv (the ones row) and the key-split partials, one pass reads O^T's columns as the f32 rows instead.
        o_rows = None if stats and l_row and FUSED_OT else a_area
        if o_rows is not None:
            call = pk.TransposeF16(dvpad, -(-m // 4) * 4, c_area, a_area, src_row=2 * qn)
            prog.append(("O rows from O^T", call))
    else:
        zeroed_kblocks = None  # K blocks of the V panels whose zero columns are in place (direct chunks)
        v_rows_copied = False  # a chunk went through f16 V rows (whose zero columns are then in place)
        for c, (k0, nk) in enumerate(sz.chunks):
            if vp is not None and esizes[2] == 2 and nk % 16 == 0 and zeros is not None:
                # f16 V in column panels, whole K blocks: each panel's rows straight into its column groups of the
                # weight panels (no row-major copy); the zero columns dv..dvpad once per chunk size (nothing else
                # writes those slots between chunks of one size).
                pre = f"keys {k0}..{k0 + nk}: " if several else ""
                nkp = nk
                for j in range(dv // vp):
                    src = va + (j * vp * sz.seq + k0 * vp) * 2
                    call = pk.WeightsF16(nk, vp, src, panels, src_row=vp * 2, group0=j * vp // 4)
                    prog.append((f"{pre}V panels, columns {j * vp}..{j * vp + vp}", call))
                if dvpad > dv and zeroed_kblocks != nk // 16:
                    call = pk.WeightsF16(nk, dvpad - dv, zeros, panels, src_row=0, group0=dv // 4)
                    prog.append((f"{pre}V panels, zero columns", call))
                    zeroed_kblocks = nk // 16
            else:
                pre, nkp = rows_of("V", va, esizes[2], k0, nk, vrows, vp, not v_rows_copied, dv, dvpad)
                prog.append((f"{pre}V panels", pk.WeightsF16(nkp, dvpad, vrows, panels)))
                zeroed_kblocks, v_rows_copied = None, True
            o_gemm = gm.Gemm(
                mpad, nkp, dvpad, prec=gm.F16, mode="init" if c == 0 else "acc", coef="ld64", a=a_area + k0 * 2,
                a_row_stride=spad * 2, weights=panels, c=c_area,
            )  # fmt: skip
            prog.append((f"{pre}O {'=' if c == 0 else '+='} P V", o_gemm))
        o_rows = c_area
    step = dict(in_stride=dvpad * 2, out_stride=o_stride)
    if o_rows is None:  # O = (e V) / l from O^T's columns, l its row dv, written beside the row as f32
        call = rw.Rows("to_f32_scaled_t", m, dv, in0=c_area, out=out, in_stride=2 * qn, out_stride=o_stride,
                       st0=dv * 4 + 4)  # fmt: skip
        prog.append(("O / l to f32 from O^T", call))
    elif stats:  # O = (e V) / l, l written beside the row by "softmax (m, l)" (or `softmax_e` itself)
        # softmax_m: l is O's column dv (the ones row's products), written beside the row here.
        kind = "to_f32_scaled_l" if l_row else "to_f32_scaled"
        prog.append(("O / l to f32", rw.Rows(kind, m, dv, in0=o_rows, out=out, st0=dv * 4 + 4, **step)))
    elif esizes[3] == 4:
        prog.append(("O to f32", rw.Rows("to_f32", m, dv, in0=o_rows, out=out, **step)))
    else:  # f16 result: O's first dv columns
        prog.append(("O rows", rw.Rows("pad_f16", m, dv, in0=o_rows, out=out, **step)))
    return prog


def ld128_fits(panels: int, region1: int) -> bool:
    """GEMM weight panels at `panels` can load with ld128 (two slots per instruction): in interleaved memory (from
    `region1`) at a 16-byte boundary."""
    return panels >= region1 and panels % 16 == 0


def _no_rows(k) -> bool:
    """A row kernel call over no rows (writes nothing)."""
    return isinstance(k, rw.Rows) and k.rows == 0


def kernel_cycles(k) -> int:
    """The kernel estimate of one call (tile cycles, supervisor entry to return)."""
    if isinstance(k, rw.Rows):
        return rw.cycles(k)
    if isinstance(k, gm.Gemm):
        return gm.cycles(k)
    return k.cycles()
