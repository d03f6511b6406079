"""`nn-fold-probe-attention`: an attention whose query is a constant (SigLIP's MAP head probe), folded exactly.

    %q = nn.linear %probe, %wq, %bq        // [1, D]: parameters only
    %k = nn.linear %x, %wk, %bk            // [T, D]
    %v = nn.linear %x, %wv, %bv            // [T, D]
    %a = nn.attention %q, %k, %v heads = H scale = s

For head h (channels [h*dh, (h+1)*dh)) the scores are s * q_h . (x_t wk_h^T + bk_h) = x_t . u_h + c_h with
u_h = s * wk_h^T q_h: c_h is the same for every key t, so the softmax drops it; and since the probabilities sum to
1, P_h (x wv_h^T + bv_h) = (P_h x) wv_h^T + bv_h. So, exactly in real arithmetic:

    %u  = nn.param "<prefix>.probe_key_scores" {derived = {recipe = "probe_key_scores", ...}}  // [H, D]
    %st = nn.linear %u, %x                  // [H, T] = U X^T: the scores of all heads, transposed
    %p  = nn.softmax %st axis = -1          // over the keys, per head
    %z  = nn.matmul %p, %x                  // [H, D] = P X
    %a  = nn.linear %z, %wv, %bv {row_groups = H}   // [1, D]: head h's columns from row h of Z

The host derives U from the parameters when it uploads them (`ipu.runtime.derived`): no key or value projection
of the T tokens, no per-head K / V on the device. At So400m size the key and value projections were
2 x 0.97 GMAC, the folded form needs 2 x 13 MMAC plus the grouped value linear's 1.3 MMAC.

Matched: `nn.attention` with one query row computed by `nn.linear` from parameters only (an `nn.param`, its
reshape, a row slice), and key and value `nn.linear`s of one input x whose weights (and biases) are parameters or
row slices of parameters, and x's width d a multiple of `k_multiple`. Anything else is left alone.

Options:
  operands_f16 (default true): the folded GEMMs' U and x operands in f16, the AMP's format (P stays f32, the
      matmul's lowering rounds it to f16). false: everything stays in the attention's f32 (for the reference
      evaluator: the device lowering needs the f16 operands).
  k_multiple (default 16, `nn_split_k.GROUPED_K_MULTIPLE`): fold only when x's width d, the grouped value linear's
      K, is a multiple of this: nn-split-k's grouped K split takes whole 16-deep K blocks of the GEMM kernel, so
      a head of another width (e.g. hidden 56 or 72) stays an ordinary attention, which the device runs at any
      width. 1: fold at any width (the IR-level rewrite alone).
  tiles (default 0: any): the target's tiles; with fewer tiles than heads the attention stays unfolded (the
      grouped value linear needs a tile per head's panel).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, TensorType, f16
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter

from ipu.dialects import nn
from ipu.passes.nn_split_k import GROUPED_K_MULTIPLE
from ipu.runtime.derived import spec_to_attr


def param_ref(v: SSAValue | None, reshaped: bool = False) -> str | None:
    """ "name" or "name[lo:hi]" for an `nn.param` or a slice of its rows (with `reshaped`, also a reshape of
    those: the recipe sees the data in row-major order), else None."""
    if v is None or not isinstance(v, OpResult):
        return None
    op = v.op
    if isinstance(op, nn.ParamOp) and op.derived is None:
        return op.param_name
    if isinstance(op, nn.ReshapeOp) and reshaped:
        return param_ref(op.input)
    if isinstance(op, nn.SliceOp) and isinstance(op.input, OpResult) and isinstance(op.input.op, nn.ParamOp):
        src, res = op.input.type.get_shape(), op.result.type.get_shape()
        offsets = list(op.static_offsets)
        if (
            op.input.op.derived is None
            and all(o == 0 for o in offsets[1:])
            and tuple(src[1:]) == tuple(res[1:])
        ):
            return f"{op.input.op.param_name}[{offsets[0]}:{offsets[0] + res[0]}]"
    return None


def _prefix(ref: str) -> str:
    """ "head.attention.in_proj_weight[0:64]" -> "head.attention"."""
    name = ref.split("[")[0]
    return name.rsplit(".", 1)[0] if "." in name else name


@dataclass(frozen=True)
class NNFoldProbeAttentionPass(ModulePass):
    name = "nn-fold-probe-attention"

    operands_f16: bool = True
    k_multiple: int = GROUPED_K_MULTIPLE
    tiles: int = 0
    """The target's tiles (0: any): fold only when there are at least as many tiles as heads (the grouped value
    linear's K split puts each head's panel on a tile of its own, `tile-plan`)."""

    def __post_init__(self) -> None:
        if self.k_multiple < 1:
            raise ValueError(f"{self.name}: option 'k_multiple' must be >= 1, got {self.k_multiple}")
        if self.tiles < 0:
            raise ValueError(f"{self.name}: option 'tiles' must be >= 0, got {self.tiles}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        taken = {o.param_name for o in op.walk() if isinstance(o, nn.ParamOp)}
        for att in [o for o in op.walk() if isinstance(o, nn.AttentionOp)]:
            self.fold(att, taken)

    def fold(self, att: nn.AttentionOp, taken: set[str]) -> bool:
        q, k, v = (x.owner for x in (att.query, att.key, att.value))
        if not all(isinstance(o, nn.LinearOp) for o in (q, k, v)) or k.input != v.input:
            return False
        if att.query.type.get_shape()[0] != 1 or len(k.input.type.get_shape()) != 2:
            return False
        query, wq, wk = param_ref(q.input, reshaped=True), param_ref(q.weight), param_ref(k.weight)
        bq = param_ref(q.bias) if q.bias is not None else ""
        if None in (query, wq, wk, bq) or param_ref(v.weight) is None:
            return False
        if v.bias is not None and param_ref(v.bias) is None:
            return False
        x = k.input
        (t, d), heads = x.type.get_shape(), att.num_heads
        # Projections of x's width d into the attention's width (the recipe's and the grouped linear's shapes).
        width = att.query.type.get_shape()[1]
        if k.weight.type.get_shape() != (width, d) or v.weight.type.get_shape() != (width, d):
            return False
        if self.tiles and heads > self.tiles:
            return False  # one tile per head's panel at least: unfolded, the attention runs on any tile count
        if d % self.k_multiple:
            # The grouped value linear's K = d: nn-split-k's grouped K split takes whole 16-deep K blocks only
            # (no K padding). Unfolded, the head runs as an ordinary attention (its linears pad K).
            return False
        f32 = att.result.type.element_type
        act = f16 if self.operands_f16 else f32
        spec = dict(
            recipe="probe_key_scores", query=query, wq=wq, wk=wk, heads=heads, scale=att.scale.value.data
        )
        if bq:
            spec["bq"] = bq
        # A name of its own (two probe attentions reading one key weight get two).
        name, i = f"{_prefix(wk)}.probe_key_scores", 1
        while name in taken:
            name, i = f"{_prefix(wk)}.probe_key_scores_{i}", i + 1
        taken.add(name)
        new: list[Operation] = []

        def add(o: Operation, hint: str | None = None) -> SSAValue:
            new.append(o)
            if hint:
                o.results[0].name_hint = hint
            return o.results[0]

        def cast(val: SSAValue) -> SSAValue:
            if val.type.element_type == act:
                return val
            return add(nn.CastOp(val, TensorType(act, val.type.get_shape())))

        u = add(nn.ParamOp(name, TensorType(f32, (heads, d)), spec_to_attr(spec)), "probe_u")
        xa = cast(x)
        st = add(nn.LinearOp(cast(u), xa, None, TensorType(f32, (heads, t))), "probe_scores_t")
        # P stays f32: f16 rows of an odd token count are not word aligned for the GEMM's A (the lowering casts
        # f32 A rows into padded f16 ones).
        p = add(nn.SoftmaxOp(st, -1, TensorType(f32, (heads, t))), "probe_p")
        z = add(nn.MatmulOp(p, xa, TensorType(f32, (heads, d))), "probe_px")
        # Head h's output columns from row h of Z only: a grouped linear (one result row).
        res = add(nn.LinearOp(z, v.weight, v.bias, TensorType(f32, (1, width)), row_groups=heads))
        Rewriter.insert_op(new, InsertPoint.before(att))
        hint = att.result.name_hint
        att.result.replace_all_uses_with(res)
        res.name_hint = hint
        # The attention, the projections and the parameter ops only they read.
        todo = [att, q, k, v]
        while todo:
            dead = todo.pop()
            if dead.parent is None or any(r.uses for r in dead.results):
                continue
            operands = [o.owner for o in dead.operands if isinstance(o, OpResult)]
            dead.detach()
            dead.erase()
            todo += [
                o for o in operands if isinstance(o, nn.ParamOp | nn.SliceOp | nn.ReshapeOp | nn.LinearOp)
            ]
        return True
