"""Debug values: keep a copy of every device-computed `nn` op result for per-operator accuracy bisection.

`compile_model(..., debug_values=True)` tags every `nn` op of the nn-level module (after the nn passes, before
the exchange pipeline) with its position `debug.pos` in the function body, i.e. the `OpId.path` the reference
evaluator gives it on that module (`nn_module`). The lowering (`DebugLowering`) then copies each result of a
device-computed op (linear, element-wise, layer-norm, softmax, GELU, single-tile slice, attention), right
after the op, into a resident buffer above the plan's high-water mark (as outputs are kept), and lists it in
`Package.debug` (name "#<pos> <op> [%hint]", the reference's `str(OpId)`). memory-plan reuses buffers, so
without the copy most intermediate values are overwritten by the end of the run.

Not kept: host-planned values (parameter-derived, computed by the host), views (they share their operand's
buffer), values without a tile layout. The copies change the program (more calls, more memory), not the values.
"""

from __future__ import annotations

import numpy as np
from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.ir import Operation

from ipu.backend.lower.bindings import device_dtype, layout_chunks
from ipu.backend.lower.lowering import Lowering, LoweringError
from ipu.dialects import tile as tl
from ipu.runtime.package import Binding

POS_ATTR = "debug.pos"


def nn_passes(spec: str) -> tuple[str, str]:
    """Splits a `pipeline_spec` into (nn-level passes, the rest from nn-to-exchange-pipeline on)."""
    head, sep, tail = spec.partition(",nn-to-exchange-pipeline")
    if not sep:
        raise ValueError(f"no nn-to-exchange-pipeline in {spec!r}")
    return head, "nn-to-exchange-pipeline" + tail


def tag_positions(f) -> None:
    """Records each nn op's position in the function body (= the reference evaluator's OpId.path)."""
    for i, op in enumerate(f.body.block.ops):
        if op.dialect_name() == "nn":
            op.attributes[POS_ATTR] = IntegerAttr(i, i64)


def value_name(op: Operation, pos: int) -> str:
    """The reference evaluator's str(OpId) of op's first result at position pos (top level)."""
    hint = op.results[0].name_hint if op.results else None
    return f"#{pos} {op.name}" + (f" %{hint}" if hint else "")


def nn_module(config, target, passes: str | None = None):
    """The nn-level module `compile_model` lowers (nn passes applied, positions as in the debug names): evaluate
    it with `ipu.frontend.reference.evaluate(..., capture=True)` and look values up by `OpId((pos,))`. passes:
    the package's `nn_passes` metadata (its precision policy and activations); None: the default pipeline's
    (`ipu-compile-pipeline`'s defaults, its activations resolved for this model as compile_model resolves them)."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.frontend.siglip import build_vision_model
    from ipu.passes.compile_pipeline import IpuCompilePipelinePass
    from ipu.passes.registry import all_passes

    module = build_vision_model(config)
    if passes is None:
        default = IpuCompilePipelinePass(
            tiles=target.num_tiles, sram_kib=target.sram_bytes // 1024, repeat=False
        )
        passes = nn_passes(default.resolved(module).pipeline_text())[0]
    head = passes
    PassPipeline.parse_spec(dict(all_passes()), head).apply(Context(), module)
    return module


class DebugLowering(Lowering):
    """The lowering, plus a resident copy of every device-computed nn op result (see the module docstring)."""

    def __init__(self, f, target):
        super().__init__(f, target)
        self.debug: list[Binding] = []
        self.debug_positions: list[int] = []

    def keep(self, op: Operation) -> None:
        pos_attr = op.attributes.get(POS_ATTR)
        if pos_attr is None or not op.results:
            return
        v = op.results[0]
        lay = tl.layout_of(v)
        if lay is None:
            return
        pos = pos_attr.value.data
        placed = self.addrs.of(v)
        shard = lay.geometry().shard_elems.astype(np.int64)
        nbytes = np.zeros(self.n, np.int64)
        nbytes[: len(shard)] = shard * tl.element_bytes(lay.dtype)
        try:
            keep = self.image.alloc(int(nbytes.max()), 8, "high", what="debug value")
        except (ValueError, LoweringError) as e:
            raise LoweringError(f"debug_values: no room to keep {value_name(op, pos)}: {e}") from None
        # Whole words: an odd f16 shard's last half would be a read-modify-write of a word never written.
        self.copy_call(
            {t: [(int(placed.addr[t]), keep, int(nbytes[t]))] for t in range(self.n) if nbytes[t] > 0},
            f"debug copy of {value_name(op, pos)}",
            whole_words=True,
        )
        addr = np.where(nbytes > 0, keep, -1)
        chunks = layout_chunks(lay, addr, placed.stride, first_replica_only=True)
        self.debug.append(
            Binding(
                value_name(op, pos),
                tuple(v.type.get_shape()),
                device_dtype(lay.dtype),
                chunks,
                lay.scale.data,
            )
        )
        self.debug_positions.append(pos)

    # Each device-computed op: lower it, then keep its result.
    def linear(self, op, plan):
        super().linear(op, plan)
        self.keep(op)

    def elementwise(self, op):
        super().elementwise(op)
        self.keep(op)

    def layer_norm(self, op):
        super().layer_norm(op)
        self.keep(op)

    def softmax(self, op):
        super().softmax(op)
        self.keep(op)

    def gelu(self, op):
        super().gelu(op)
        self.keep(op)

    def slice_single(self, op):
        super().slice_single(op)
        self.keep(op)

    def attention(self, op, plan):
        super().attention(op, plan)
        self.keep(op)
