"""`kernel-select`: the asm lowering's kernel and lowering choices, recorded on each compute op as attributes.

    ipu-opt planned.mlir -p 'kernel-select{tiles=16 sram_kib=624}'

tile-plan decides where each op's blocks live; this pass decides how the backend computes them, with the kernels'
own cycle estimates and fit checks, and writes every choice into the op's `kernel` attribute (a dictionary). The
asm lowering reads these attributes and nothing else: it never compares estimates itself, and it refuses a choice
that does not fit (a `LoweringError` naming the op, the tile and the sizes). A person, a test or a search over
plans changes a choice by editing the attribute in textual IR; keys already present are kept (only missing ones are
filled), so overrides survive a second run of the pass.

| op (plan) | key | values |
|---|---|---|
| `nn.layer_norm` (`rows`) | `rows` | `"layernorm"`, `"layernorm_split"` (every row split across the six workers) |
| `nn.softmax` (`rows`) | `rows` | `"softmax"`, `"softmax_split"` |
| `nn.linear`, `nn.matmul` (`gemm`) | `k_chunks` | widths of the K chunks (multiples of 16, summing to K padded to 16) |
| | `coef` | `"ld128"` (weight panels in interleaved memory: two coefficient slots per load), `"ld64"` |
| | `a_operand` | `"in_place"` (A read where the exchange put it), `"padded"` (copied into the A scratch with zero padding), `"panels"` (rows too long for the kernel: K-block panels per chunk), `"f32_rows"` (an f32 A cast to padded f16 rows), `"cols_in_place"` / `"cols_gather"` (column-panel A: chunks read in place where they can be / every chunk's rows gathered) |
| `nn.linear_partials`, `nn.matmul_partials` (`gemm`) | `coef` | as above |
| `nn.attention`, `nn.attention_partial` (`materialized`) | `key_chunk` | keys per K/V packing step at most (a multiple of 16) |
| | `score_chunk` | keys per S^T = K Q^T step at most, transposed scores only (a multiple of 16; the K rows take A's whole element, so it may exceed `key_chunk`; absent: `key_chunk`) |
| | `scores` | `"transposed"` (S^T = K Q^T: the K rows as the GEMM's A) or `"direct"` (S = Q K^T) |
| | `pv` | `"transposed"` (O^T = V^T P^T, only with transposed scores) or `"direct"` (O = P V) |
| | `softmax` | `"softmax"`, `"softmax_split"`, `"softmax_e"` or `"softmax_m"` (the key-split partial attention needs the row max and sum: `softmax_split`, or `softmax_e`, whole rows per worker on the transposed scores, or `softmax_m`, the max only, with `pv = "transposed"` and a head dimension not a multiple of 16: the O^T GEMM forms the sums from a ones row of V^T; `softmax_mt`: `softmax_m` writing P^T's weight panels itself, with one key chunk or at most 16 query rows) |
| | `q_scale` | `"sum"` (Q comes from a K-split sum that applies the scale: no "Q * scale" step) or `"program"` |
| | `k_operand` | `"in_place"` (the S^T GEMMs read K's f16 column panels where they lie: panels of one width p dividing the head, 16 < p < 32 or a multiple of 16, the same for Q; `nnops.k_in_place_blocks`) or `"rows"` (K copied into padded rows first) |
| `nn.reduce_sum` (with `q_scale = "sum"` on its attention) | `scale` | the attention's scale: the f16 sum times f16(scale), in the fused sum's registers |

The pass runs after tile-plan (it reads layouts and plans only) and before memory-plan; `nn-to-exchange-pipeline`
ends with it. Options override a choice for every op that has it (tests reach the other paths at small sizes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import (
    DenseArrayBase,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    ModuleOp,
    StringAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from ipu.backend.kernels import gemm as gm
from ipu.backend.kernels import rowwise as rw
from ipu.backend.target import Target
from ipu.dialects import exchange as ex
from ipu.dialects import nn
from ipu.dialects import tile as tl

KERNEL_ATTR = "kernel"

SCORES = ("transposed", "direct")
A_OPERANDS = ("in_place", "padded", "panels", "f32_rows", "cols_in_place", "cols_gather")
ROWS = {nn.LayerNormOp: ("layernorm", "layernorm_split"), nn.SoftmaxOp: ("softmax", "softmax_split")}


class KernelChoiceError(ValueError):
    pass


# -- reading and writing the attribute ------------------------------------------------------------------------
def _to_attr(value) -> Attribute:
    if isinstance(value, str):
        return StringAttr(value)
    if isinstance(value, bool | np.bool_):
        raise TypeError("kernel choices are strings, integers or floats")
    if isinstance(value, int | np.integer):
        return IntegerAttr(int(value), i64)
    if isinstance(value, float | np.floating):
        return FloatAttr(float(value), f64)
    return DenseArrayBase.from_list(i64, [int(v) for v in value])


def _from_attr(attr: Attribute):
    if isinstance(attr, StringAttr):
        return attr.data
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)
    if isinstance(attr, DenseArrayBase):
        return tuple(int(v) for v in attr.get_values())
    raise KernelChoiceError(f"unsupported kernel choice value {attr}")


def choices(op: Operation) -> dict[str, object]:
    """The op's recorded choices as Python values ({} when kernel-select did not run)."""
    attr = op.attributes.get(KERNEL_ATTR)
    if attr is None:
        return {}
    if not isinstance(attr, DictionaryAttr):
        raise KernelChoiceError(f"{op.name}: the '{KERNEL_ATTR}' attribute must be a dictionary, got {attr}")
    return {k: _from_attr(v) for k, v in attr.data.items()}


def record(op: Operation, values: dict[str, object], overwrite: bool = False) -> None:
    """Writes choices into the op's `kernel` attribute; existing keys are kept unless overwrite."""
    choices(op)  # the existing attribute must be a dictionary of choices
    old = dict(op.attributes[KERNEL_ATTR].data) if KERNEL_ATTR in op.attributes else {}
    new = {k: _to_attr(v) for k, v in values.items()}
    merged = (old | new) if overwrite else (new | old)
    op.attributes[KERNEL_ATTR] = DictionaryAttr(dict(sorted(merged.items())))


def override(module: ModuleOp, op_type: type, **values) -> int:
    """Sets choices on every op of `op_type` that has a `kernel` attribute (what a person does by editing the
    attribute); returns how many ops changed."""
    n = 0
    for op in module.walk():
        if isinstance(op, op_type) and KERNEL_ATTR in op.attributes:
            record(op, values, overwrite=True)
            n += 1
    return n


# -- the choices ------------------------------------------------------------------------------------------------
def _rows_per_tile(lay) -> dict[int, int]:
    shard = lay.geometry().shard_elems
    tiles = np.unique(lay.table())
    return dict(zip(tiles.tolist(), (shard[tiles] // lay.shape_[-1]).tolist()))


def layer_norm_rows(op: nn.LayerNormOp, target: Target) -> str:
    """`layernorm_split` when every row split across the six workers is faster on the slowest tile and its
    partials fit the aux scratch after the f16 weight and bias rows."""
    lay = op.attributes[tl.LAYOUT_ATTR]
    n = lay.shape_[-1]
    rows = _rows_per_tile(lay)
    if not layernorm_split_fits(n, rows, target.region1_element_bytes):
        return "layernorm"
    eps = float(op.eps.value.data) if hasattr(op.eps, "value") else float(op.eps)
    if not eps >= rw.LNS_MIN_EPS:  # its f16 normalize pass holds 1 / sqrt(eps) as a half
        return "layernorm"
    kw = dict(in0=0, in1=0, in2=0, out=0, eps=1e-6)
    counts = set(rows.values())
    whole = max(rw.cycles(rw.Rows("layernorm", r, n, **kw)) for r in counts)
    split = max(rw.cycles(rw.Rows("layernorm_split", r, n, st0=0, **kw)) for r in counts)
    return "layernorm_split" if split < whole else "layernorm"


def softmax_rows(op: nn.SoftmaxOp, target: Target) -> str:
    lay = op.attributes[tl.LAYOUT_ATTR]
    n = lay.shape_[-1]
    rows = _rows_per_tile(lay)
    p = -(-n // 4) * 4
    if not softmax_split_fits(n, max(rows.values()), target.region1_element_bytes):
        return "softmax"
    kw = dict(in0=0, out=0, valid=n)
    counts = set(rows.values())
    whole = max(rw.cycles(rw.Rows("softmax", r, p, **kw)) for r in counts)
    split = max(rw.cycles(rw.Rows("softmax_split", r, p, st0=0, **kw)) for r in counts)
    return "softmax_split" if split < whole else "softmax"


def gemm_coef(target: Target, op: Operation | None = None) -> str:
    """ld128 when the weight staging (the aux scratch, a region-1 element) is in interleaved memory; ld64 for
    weights read in place as AMP panels (`ampw`): memory-plan then places them anywhere, as row-major weight
    blocks (in interleaved memory, which ld128 needs, they crowd the GEMM results and scratch: So400m's 27
    layers with FP8 activations did not plan), except a many-row split's panels delivered by its exchange phase
    (q / k's f16 panels, 18 KB per tile; the MLP's FP8 panels, 12-18 KB; live from that phase to their GEMM):
    ld128, 32 cycles less per weight block (So400m's 27 layers plan with them on the default policy). An edited
    "ld128" makes memory-plan put in-place panels in region 1."""
    if op is not None and len(op.operands) > 1:
        wl = tl.layout_of(op.operands[1])
        if wl is not None and wl.order.data == "ampw":
            # A many-row split's panels received by its exchange phase (q / k's f16, the MLP's FP8: 12-18 KB per
            # tile, live from that phase to their GEMM) are small enough to take interleaved memory: ld128 saves 32
            # cycles per weight block. (Panels read where they are resident keep ld64: their homes may lie in
            # region 0.)
            plan = op.attributes.get(tl.PLAN_ATTR)
            delivered = (
                isinstance(plan, tl.GemmPlanAttr)
                and len(plan.get("grid")) == 3
                and isinstance(op.operands[1].owner, ex.PhaseOp)
            )
            if not delivered:
                return "ld64"
    return "ld128" if target.region1[1] > target.region1[0] else "ld64"


def layernorm_split_fits(n: int, rows: dict[int, int], element_bytes: int) -> bool:
    """`layernorm_split` takes rows of >= LNS_MIN_N and its partials fit the aux scratch after the f16 weight and
    bias rows (rows: tile -> rows of the shard)."""
    slot = (n * 2 + 7) // 8 * 8
    return (
        n >= rw.LNS_MIN_N
        and min(rows.values()) >= 1
        and 2 * slot + rw.LNS_PART * max(rows.values()) <= element_bytes
    )


def softmax_split_fits(n: int, most: int, element_bytes: int) -> bool:
    """`softmax_split` takes rows of >= SMS_MIN_VALID and the partials of `most` rows fit the aux scratch."""
    return n >= rw.SMS_MIN_VALID and rw.SMS_PART * most <= element_bytes


def gathered_a_chunks(
    chunks: list[int], k: int, a_cols: int, a: str, rows: int, element_bytes: int
) -> list[int]:
    """K chunk widths for a column-panel A: a chunk the GEMM cannot read in place (`cost_model.a_chunk_in_place`)
    has its `rows` gathered into the A scratch (one region-1 element), so when the widest such chunk does not fit
    there, K is cut again (`cost_model.gemm_k_chunks`) into chunks that do (more GEMM calls, the same sums).
    Otherwise `chunks`."""
    from ipu.passes import cost_model as cm

    starts = [sum(chunks[:i]) for i in range(len(chunks))]
    gathered = [
        kw
        for k0, kw in zip(starts, chunks)
        if not (a == "cols_in_place" and cm.a_chunk_in_place(k0, kw, k, a_cols))
    ]
    if not gathered or rows * max(gathered) * 2 <= element_bytes:
        return chunks
    return [kw for _, kw in cm.gemm_k_chunks(sum(chunks), max_width=element_bytes // (2 * rows))]


def gemm_choices(op: nn.LinearOp | nn.MatmulOp, target: Target) -> dict[str, object]:
    from ipu.backend.lower.bindings import device_dtype
    from ipu.passes import cost_model as cm

    k = op.operands[0].type.get_shape()[-1]
    kpad = -(-k // 16) * 16
    dims = op.attributes[tl.LAYOUT_ATTR].geometry().block_dims
    wl = tl.layout_of(op.operands[1])
    wsize = tl.element_bytes(wl.dtype) if wl is not None else 1
    chunks = [kw for _, kw in cm.gemm_k_chunks(k, int(dims[:, 1].max()), wsize)]
    if wl is not None and wl.order.data == "ampw" and kpad * 2 <= cm.GEMM_MAX_A_ROW_BYTES:
        chunks = [kpad]  # AMP weight panels read in place: no staging to bound, one GEMM call
    xl = tl.layout_of(op.operands[0])
    mr = dims[:, 0]
    a_cols = tl.col_panel_width(xl)
    if a_cols is not None:
        whole = a_cols % 16 == 0 and 2 * a_cols <= cm.GEMM_MAX_A_ROW_BYTES and (mr >= gm.MIN_ROWS).all()
        a = "cols_in_place" if whole else "cols_gather"
        chunks = gathered_a_chunks(chunks, k, a_cols, a, int(mr.max()), target.region1_element_bytes)
    elif isinstance(op, nn.MatmulOp) and device_dtype(xl.dtype) == "f32":
        a = "f32_rows"
    elif kpad * 2 > cm.GEMM_MAX_A_ROW_BYTES:
        a = "panels"
    elif kpad != k or (mr < gm.MIN_ROWS).any():
        a = "padded"
    else:
        a = "in_place"
    return {"k_chunks": chunks, "coef": gemm_coef(target, op), "a_operand": a}


def attention_choices(
    op: nn.AttentionOp | nn.AttentionPartialOp,
    target: Target,
    max_key_chunk: int = 0,
    scores: str = "",
    pv: str = "",
    max_score_chunk: int = 0,
    k_rows: bool = False,
) -> dict[str, object]:
    """Chunks as large as the scratch elements allow, S^T where its blocks fit, O^T on the S^T path, the split
    softmax where its estimate is lower (always for the key-split partials: they need its row statistics)."""
    from ipu.backend.lower.nnops import (
        attention_operand_formats,
        attention_sizes,
        k_in_place_blocks,
        softmax_kernel,
    )

    lay = op.attributes[tl.LAYOUT_ATTR]
    g = lay.geometry()
    partial = isinstance(op, nn.AttentionPartialOp)
    if partial:
        seq, hidden = op.operands[1].type.get_shape()
        d, kc = hidden // op.num_heads, op.key_chunk()
        seqs = sorted({min(kc, seq - int(j) * kc) for j in g.block_origin[:, 0]})
        mmax = int(g.block_dims[:, 1].max())
    else:
        seq, hidden = op.operands[1].type.get_shape()[-2:]
        d = hidden // op.heads.value.data
        seqs = [seq]
        mmax = int(g.block_dims[:, 0].max())
    e = target.region1_element_bytes
    v_lay = tl.layout_of(
        op.operands[2]
    )  # f16 V: O^T's V^T rows straight from it (`attention_sizes`' v_direct)
    v_f16 = tl.element_bytes(v_lay.dtype if v_lay is not None else op.operands[2].type.element_type) == 2
    want_t = {"": None, "transposed": True, "direct": False}[scores]
    try:
        sizes = [
            attention_sizes(
                mmax,
                s,
                d,
                e,
                max_chunk=max_key_chunk or None,
                transposed=want_t,
                max_score_chunk=max_score_chunk or max_key_chunk or None,
                v_direct=pv != "direct" and v_f16,
            )
            for s in seqs
        ]
    except ValueError as exc:
        raise KernelChoiceError(f"{op.name}: {exc}") from None
    transposed = all(sz.transposed for sz in sizes)
    pv_t = transposed and pv != "direct"
    panels_of, esizes = attention_operand_formats(op)
    softmax = "softmax_split"
    for sz in sizes:
        kind = softmax_kernel(sz, stats=partial, ones_row=pv_t and d % 16 != 0)
        if kind != "softmax_split":
            softmax = kind
    out = {
        "key_chunk": max(sz.chunk for sz in sizes),
        "scores": "transposed" if transposed else "direct",
        "pv": "transposed" if pv_t else "direct",
        "softmax": softmax,
        "k_operand": "rows"
        if k_rows or not all(k_in_place_blocks(sz, esizes, panels_of) for sz in sizes)
        else "in_place",
    }
    if transposed:
        out["score_chunk"] = max(sz.score_chunk for sz in sizes)
    return out


def select(op: Operation, target: Target, opts: KernelSelectPass | None = None) -> dict[str, object] | None:
    """The choices of one op, or None when the lowering has none to make for it."""
    plan = op.attributes.get(tl.PLAN_ATTR)
    kind = plan.get("kind") if isinstance(plan, tl.MapPlanAttr) else None
    if isinstance(op, nn.LayerNormOp) and kind == "rows":
        return {"rows": layer_norm_rows(op, target)}
    if isinstance(op, nn.SoftmaxOp) and kind == "rows":
        return {"rows": softmax_rows(op, target)}
    if isinstance(op, nn.LinearOp | nn.MatmulOp) and isinstance(plan, tl.GemmPlanAttr):
        return gemm_choices(op, target)
    if isinstance(op, nn.LinearPartialsOp | nn.MatmulPartialsOp) and isinstance(plan, tl.GemmPlanAttr):
        return {"coef": gemm_coef(target, op)}
    if (
        isinstance(op, nn.AttentionOp | nn.AttentionPartialOp)
        and isinstance(plan, tl.AttentionPlanAttr)
        and plan.get("kind") == "materialized"
    ):
        o = opts or KernelSelectPass()
        return attention_choices(op, target, o.max_key_chunk, o.scores, o.pv, o.max_score_chunk, o.k_rows)
    return None


def q_scale_sum(op: Operation) -> nn.ReduceSumOp | None:
    """The K-split sum that makes a materialized attention's f16 Q, when it can apply the attention's scale: Q is
    its result through exchange phases only, read by nothing else, f16, and the attention's program would scale
    f16 Q rows in place (row-major Q, or column panels `panels_f16` reads: not narrow panels through f32)."""
    plan = op.attributes.get(tl.PLAN_ATTR)
    if not (isinstance(plan, tl.AttentionPlanAttr) and plan.get("kind") == "materialized"):
        return None
    q = op.operands[0]
    lay = tl.layout_of(q)
    if lay is None or tl.dtype_name(lay.dtype) != "f16":
        return None
    qp = tl.col_panel_width(lay)
    if qp is not None and not rw.pf_width_ok(qp):
        return None
    v = q
    while isinstance(v.owner, ex.PhaseOp):
        if len(list(v.uses)) != 1:
            return None
        v = v.owner.sources[v.index]
    if not isinstance(v.owner, nn.ReduceSumOp) or len(list(v.uses)) != 1:
        return None
    rl = v.owner.attributes.get(tl.LAYOUT_ATTR)
    return v.owner if isinstance(rl, tl.LayoutAttr) and tl.dtype_name(rl.dtype) == "f16" else None


def fold_q_scales(module: ModuleOp, overwrite: bool = False) -> None:
    """`q_scale` on every materialized attention (and `scale` on the sum that then applies it)."""
    for op in module.walk():
        if not isinstance(op, nn.AttentionOp | nn.AttentionPartialOp) or KERNEL_ATTR not in op.attributes:
            continue
        site = q_scale_sum(op)
        record(op, {"q_scale": "sum" if site is not None else "program"}, overwrite)
        if choices(op)["q_scale"] == "sum":
            if site is None:
                raise KernelChoiceError(
                    f"{op.name}: kernel choice q_scale = 'sum' needs Q from an f16 K-split sum read by this "
                    "attention only"
                )
            record(site, {"scale": float(op.scale.value.data)}, overwrite)


def check(op: Operation, values: dict[str, object]) -> None:
    """Value checks of the choices a person may have edited (the lowering checks that they fit)."""
    what = f"{op.name} ({op.results[0].name_hint or 'unnamed'})" if op.results else op.name

    def one_of(key, allowed):
        if key in values and values[key] not in allowed:
            raise KernelChoiceError(
                f"{what}: kernel choice {key} = {values[key]!r}: expected one of {list(allowed)}"
            )

    for t, allowed in ROWS.items():
        if isinstance(op, t):
            one_of("rows", allowed)
    one_of("coef", ("ld128", "ld64"))
    one_of("a_operand", A_OPERANDS)
    one_of("scores", SCORES)
    one_of("pv", SCORES)
    one_of("softmax", ("softmax", "softmax_split", "softmax_e", "softmax_m", "softmax_mt"))
    one_of("q_scale", ("sum", "program"))
    one_of("k_operand", ("in_place", "rows"))
    if "scale" in values and not isinstance(values["scale"], float):
        raise KernelChoiceError(f"{what}: kernel choice scale = {values['scale']!r}: a float")
    for key in ("key_chunk", "score_chunk"):
        kc = values.get(key)
        if key in values and (not isinstance(kc, int) or kc < 16 or kc % 16):
            raise KernelChoiceError(f"{what}: kernel choice {key} = {kc!r}: a positive multiple of 16")
    if values.get("pv") == "transposed" and values.get("scores") == "direct":
        raise KernelChoiceError(f'{what}: pv = "transposed" needs scores = "transposed"')
    if "k_chunks" in values:
        ks = values["k_chunks"]
        k = op.operands[0].type.get_shape()[-1]
        kpad = -(-k // 16) * 16
        if not isinstance(ks, tuple) or not ks or any(w <= 0 or w % 16 for w in ks) or sum(ks) != kpad:
            raise KernelChoiceError(
                f"{what}: kernel choice k_chunks = {ks}: positive multiples of 16 summing to K = {kpad} (padded)"
            )


@dataclass(frozen=True)
class KernelSelectPass(ModulePass):
    """Records the backend's kernel choices on every compute op (see the module docstring)."""

    name = "kernel-select"

    tiles: int = 0
    """Tiles of the target (0: the full IPU21)."""
    sram_kib: int = 624
    """SRAM per tile of the target, KiB."""
    max_key_chunk: int = 0
    """Attention: keys per K/V packing step at most (0: as many as the scratch holds)."""
    max_score_chunk: int = 0
    """Attention on the transposed path: keys per S^T step at most (0: max_key_chunk's bound)."""
    scores: str = ""
    """Attention scores: "transposed" (where it fits), "direct", or "" (the faster that fits: transposed)."""
    pv: str = ""
    """Attention output on the S^T path: "transposed", "direct", or "" (transposed)."""
    k_rows: bool = False
    """Attention: K copied into padded rows (`k_operand = "rows"`) even where the S^T GEMMs could read its column
    panels in place."""
    overwrite: bool = False
    """Replace choices already recorded (default: keep them, so edits in the IR survive)."""

    def target(self) -> Target:
        from ipu.passes.tile_plan import target_for

        if self.tiles < 0 or self.sram_kib <= 0:
            raise PassFailedException(
                f"kernel-select: tiles >= 0 and sram_kib > 0, got {self.tiles}, {self.sram_kib}"
            )
        try:
            return target_for(self.tiles, self.sram_kib)
        except ValueError as e:
            raise PassFailedException(f"kernel-select: {e}") from None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for key in ("max_key_chunk", "max_score_chunk"):
            if getattr(self, key) < 0 or getattr(self, key) % 16:
                raise PassFailedException(
                    f"kernel-select: {key} must be 0 or a positive multiple of 16, got {getattr(self, key)}"
                )
        for key, allowed in (("scores", SCORES), ("pv", SCORES)):
            if getattr(self, key) not in ("", *allowed):
                raise PassFailedException(
                    f"kernel-select: {key} must be one of {list(allowed)}, got {getattr(self, key)!r}"
                )
        target = self.target()
        for o in op.walk():
            try:
                values = select(o, target, self)
                if values is None:
                    continue
                record(o, values, overwrite=self.overwrite)
                check(o, choices(o))
            except KernelChoiceError as e:
                raise PassFailedException(f"kernel-select: {e}") from None
            except ValueError as e:  # a shape no kernel takes (the kernel's own check), named with its op
                shapes = ", ".join(
                    str(list(v.type.get_shape())) for v in o.operands if hasattr(v.type, "get_shape")
                )
                hint = f" %{o.results[0].name_hint}" if o.results and o.results[0].name_hint else ""
                raise PassFailedException(
                    f"kernel-select: {o.name}{hint} (operands {shapes}): no kernel takes this shape: {e}"
                ) from None
        try:
            fold_q_scales(op, self.overwrite)
        except KernelChoiceError as e:
            raise PassFailedException(f"kernel-select: {e}") from None
