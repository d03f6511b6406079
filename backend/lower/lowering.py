"""The walk: a placed function (after `memory-plan`) -> one supervisor program + per-tile data -> a `Package`.

The program is one code image shared by every tile; tiles differ only by data. `main` walks the supersteps in
IR order:

- a compute op becomes one or more kernel calls: `$m0` = the call's frame address (the same on every tile; the
  frame contents differ per tile). A frame starts with an *active* word: a tile with no work for the op skips the
  call (`brz`); the kernel's own frame follows 8 bytes later;
- `exchange.sync` becomes an internal `sync`; an `exchange.phase` calls the shared exchange routines with its
  per-tile round and copy tables (`ipu.backend.lower.exchange`);
- at the end `main` returns to the host (`br` to the $lr it was started with, 0).

Host tensors become bindings (`ipu.backend.lower.bindings`): inputs and parameters at the buffers memory-plan
gave the host-planned values, outputs from replica 0 of each block of the output value.

Op lowering (what exists, see docs/lowering.md for what does not):

- `nn.linear` with a `#tile.gemm` plan: per tile and per K chunk, the weight block the exchange delivered (the
  planned operand layout: row-major [nc, K] FP8 or f16 blocks, from the parameter's spread home) is turned into
  the F16 AMP kernel's weight panels on the device (FP8: rearranged into the panels' order, then one exact
  `cast_fp8_f16`; f16: `pack.weights_from_bt`; K padded to 16 with zeros); then the F16 AMP GEMM into an f16
  scratch tile of C (interleaved memory; init, then acc per chunk), `bias_f16` in place, a cast into the result
  buffer when the result is f32. The staging (`weight_staging`) is shared by every GEMM and lives in the aux
  scratch, above memory-plan's high-water mark like the other scratch. The bias is still bound by the host in
  the kernel's format (f16, N padded) per GEMM tile. FP8-planned GEMMs run on the F16 AMP: the IR's semantics
  (f16 activations x FP8 weights) is not what the FP8 AMP computes (both operands FP8).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from itertools import chain

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import IntAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue
from xdsl.utils.exceptions import PassFailedException

from ipu.backend.kernels import copy as cp
from ipu.backend.kernels import elementwise as ew
from ipu.backend.kernels import gemm as gm
from ipu.backend.kernels import pack as pk
from ipu.backend.kernels import rowwise as rw
from ipu.backend.lower import exchange as lx
from ipu.backend.lower.bindings import device_dtype, fp8_format, layout_chunks, make_bindings
from ipu.backend.lower.nnops import ZEROS_BYTES, NnOps, n_padding_zeros, zero_copies
from ipu.backend.lower.placement import (
    Addresses,
    DataImage,
    Placed,
    StorageOverflow,
    scratch_elements,
    scratch_target_problem,
)
from ipu.backend.lower.program import (
    FRAME_HEADER,
    CallItem,
    CodeOverflow,
    PhaseMarker,
    ProgramError,
    RepeatItem,
    SyncItem,
    build_program,
    link,
    lower_calls,
    lower_repeats,
    package_of,
    program_text,
)
from ipu.backend.lower.sites import op_marker, op_name
from ipu.backend.target import IPU21, Target
from ipu.dialects import asm, nn
from ipu.dialects import exchange as ex
from ipu.dialects import memory as mem
from ipu.dialects import tile as tl
from ipu.passes import cost_model as cm
from ipu.passes.compile_pipeline import (  # noqa: F401 (re-exported: the pipeline moved to the named pass)
    IpuCompilePipelinePass,
    pipeline_spec,
)
from ipu.passes.memory_plan import number_events, op_label
from ipu.runtime.package import Binding, Package, Segment


class LoweringError(ValueError):
    pass


@dataclass
class KernelCall:
    """One call site: a frame per tile built once the program's labels are known."""

    entry: str
    addr: int
    words: int
    build: Callable[[dict[str, int]], tuple[np.ndarray, np.ndarray]]  # labels -> (active [tiles], frames)
    all_active: bool
    built: np.ndarray | None = field(default=None, repr=False, compare=False)
    what: str = field(default="", compare=False)  # the op (diagnostics)

    def data(self, labels: dict[str, int], tiles: int) -> np.ndarray:
        """uint32 [tiles, 2 + words]: the active word, padding, the kernel frame. Built once: a tile.repeat's
        patch tables read iteration 0's frames again."""
        if self.built is None:
            active, frames = self.build(labels)
            data = np.zeros((tiles, 2 + frames.shape[1]), np.uint32)
            data[:, 0] = active
            data[:, 2:] = frames
            self.built = data
        return self.built


def target_of(plan: mem.PlanOp) -> Target:
    from ipu.passes.tile_plan import target_for

    base, _, end = (x.value.data for x in plan.sram.data)
    return target_for(plan.tiles.value.data, (end - base) // 1024)


def _panel_index(lay: tl.LayoutAttr, k: int, j: int) -> dict[tuple, int]:
    """(origin[:k], dims[:j], tile) -> the byte offset inside the tile's shard of the block of `lay` that starts at
    `origin` and spans exactly `dims` in its first j dimensions and the whole tensor in the rest, -1 where that
    block does not span the rest. For each (origin, dims) the first matching block in block order counts on each
    of its tiles, and its first replica there. One pass over the layout for every panel of every tile."""
    g = lay.geometry()
    table = lay.table()
    eb = tl.element_bytes(lay.dtype)
    rest = np.array(lay.shape_[j:])
    whole = ~(g.block_dims[:, j:] != rest).any(1)
    origins = [tuple(x) for x in g.block_origin[:, :k].tolist()]
    dims = [tuple(x) for x in g.block_dims[:, :j].tolist()]
    offs = (g.offset * eb).tolist()
    out: dict[tuple, int] = {}
    for o, d, w, tiles, off in zip(origins, dims, whole.tolist(), table.tolist(), offs):
        for t, x in zip(tiles, off):
            out.setdefault((o, d, t), x if w else -1)
    return out


class Lowering(NnOps):
    def __init__(self, f: func.FuncOp, target: Target, measure: bool = False, per_iteration: bool = False):
        """measure: size the lowering's own storage instead of placing it (`DataImage(measure=True)`; the code
        may exceed its reservation): `storage_need()` after `run()`; the package is not meant to run.
        per_iteration: lower a tile.repeat body once per iteration (the reference path of `repeat`) instead of
        at `repeat_samples`."""
        self.f = f
        self.per_iteration = per_iteration
        self.target = target
        self.measure = measure
        self.n = target.num_tiles
        self.addrs = Addresses(f, self.n)
        code = self.addrs.reserves.get("code")
        xtab = self.addrs.reserves.get("exchange_tables")
        if code is None:
            raise LoweringError('memory-plan reserved no code storage (memory.reserve "code")')
        self.code_addr = int(code.addr[0])
        self.code_end = self.code_addr + int(
            mem.table_values(self._reserve("code").buffer.bytes_, self.addrs.nc).max()
        )
        low = []
        if xtab is not None and (xtab.addr >= 0).any():
            # The exchange_tables reservation: below the code, or below the ops' own frames when memory-plan gave
            # them buffers at the span's end (`memory.lowering_frames`).
            start = int(xtab.addr.max())
            low.append((start, min(self.code_addr, start + self.addrs.reserve_bytes["exchange_tables"])))
        self.low = low
        self.calls: list[KernelCall] = []
        self.items: list = []  # main's program items (`ipu.backend.lower.program`): calls, syncs, loops, markers
        self.params: list[Binding] = []
        self.inputs: list[Binding] = []
        self.outputs: list[Binding] = []
        self.notes: list[str] = []
        self.cycles_estimate = 0
        self.image: DataImage | None = None
        self._scratch: tuple[int, int, int] | None = None
        self._aux: int | None = None
        self.events = number_events(f)
        self._event: int | None = None  # the event of the op being lowered
        self.scratch_use: dict[int, list[int]] = {}  # event -> bytes of C, A, aux used (`use_scratch`)
        self.layer: int | None = None  # the iteration being lowered inside a tile.repeat body
        self.layers = 1
        self.layer_ranges: list[tuple[int, int]] = []  # per-iteration storage: [start, end)
        self.repeats: list[dict] = []
        self._panels: dict[tuple, tuple] = {}  # (id(layout), k, j) -> (layout, _panel_index)

    def storage_need(self) -> dict[str, int]:
        """After a measuring run: bytes of code, of low data (frames, tables) and of high data (small data and whole
        scratch elements)."""
        return {"code": int(self.code_bytes), **self.image.need()}

    def _reserve(self, kind: str) -> mem.ReserveOp | None:
        return next(
            (o for o in self.f.body.block.ops if isinstance(o, mem.ReserveOp) and o.kind.data == kind), None
        )

    # -- emission helpers -----------------------------------------------------------------------------------
    def call(self, entry: str, words: int, build, all_active: bool = False, what: str = "") -> None:
        addr = self.image.alloc(FRAME_HEADER + 4 * words, 8, "low", what="kernel frame")
        self.calls.append(KernelCall(entry, addr, words, build, all_active, what=what))
        self.items.append(CallItem(entry, addr, True, all_active, what))

    def table_call(self, routine: str, table: np.ndarray, name: str) -> None:
        addr = self.image.alloc(table.shape[1] * 4, 8, "low", what="table")
        self.image.put(name, addr, np.asarray(table, np.uint32))  # no copy of a uint32 table
        self.items.append(CallItem(routine, addr, False, True, name))

    # -- the walk ---------------------------------------------------------------------------------------------
    def run(self) -> Package:
        """The walk, then its program lowered and printed as the package (`finish`)."""
        self.walk()
        return self.finish()

    def walk(self) -> None:
        # Code size is only known after emission; reserve the low arena after a generous code estimate and
        # check at the end.
        # The lowering's "high" data lives in memory-plan's lowering_scratch reservation when there is one (sized
        # by `lowering-storage`), else above the plan's high-water mark.
        scratch = self._reserve("lowering_scratch")
        high_end = None
        if scratch is not None:  # (its bytes may be 0: the ops' own lowering_data buffers hold all the data)
            high = int(mem.table_values(scratch.buffer.addr, self.addrs.nc).max())
            high_end = high + self.addrs.reserve_bytes["lowering_scratch"]
        else:
            high = max(self.addrs.high, self.target.region0[1])
        self.image = DataImage(self.target, self.low, high, measure=self.measure, high_end=high_end)
        self.block(self.f.body.block)

    def block(self, block: Block) -> None:
        for op in block.ops:
            self.items += op_marker(op)  # names the profile sites that follow (ipu.backend.lower.sites)
            self.image.owner = op_name(op)
            self._event = self.events.start.get(op)
            scope = self.op_scope(op)
            self.lower_op(op)
            self.image.leave(scope)

    def op_scope(self, op: Operation):
        """Opens op's storage scope in the data image: its frames and tables go into its `memory.lowering_frames`
        buffer, its kernel data into `memory.lowering_data` (memory-plan placed both); an op without them (no
        event, or a plan without per-op storage) allocates in the function's ranges. Returns `leave`'s token."""
        spans = []
        for key in (mem.FRAMES_ATTR, mem.DATA_ATTR):
            b = op.attributes.get(key)
            if b is None:
                spans.append(None)
                continue
            if (
                not isinstance(b, mem.BufferAttr)
                or not isinstance(b.addr, IntAttr)
                or not isinstance(b.bytes_, IntAttr)
            ):
                raise LoweringError(
                    f"{op_name(op)}: '{key}' must be one #memory.buffer with one address and size on every tile, "
                    f"got {b}"
                )
            spans.append((b.addr.data, b.addr.data + b.bytes_.data))
        return self.image.enter(self.events.start.get(op), *spans)

    def lower_op(self, op: Operation) -> None:
        """One op of a block lowered (its storage scope opened by `block`)."""
        if isinstance(op, mem.PlanOp | mem.ReserveOp | func.ReturnOp):
            return
        if isinstance(op, nn.ParamOp | nn.InputOp):
            if tl.LAYOUT_ATTR in op.attributes:
                self.bind_host_value(op.results[0])
            return
        if isinstance(op, nn.OutputOp):
            self.bind_output(op)
            return
        if isinstance(op, ex.SyncOp):
            nxt = op.next_op
            if isinstance(nxt, ex.PhaseOp) and len(nxt.send_table()) and len(nxt.recv_table()):
                return  # the phase's timed exchange opens with this sync, after its send staging
            self.items.append(SyncItem("exchange.sync"))
            return
        if isinstance(op, ex.PhaseOp):
            self.phase(op)
            return
        if isinstance(op, tl.RepeatOp):
            self.repeat(op)
            return
        if isinstance(op, tl.YieldOp):
            return  # handled by repeat()
        plan = op.attributes.get(tl.PLAN_ATTR)
        kind = plan.get("kind") if isinstance(plan, tl.MapPlanAttr) else None
        if kind == "host":
            if tl.LAYOUT_ATTR in op.attributes and mem.BUFFERS_ATTR in op.attributes:
                self.bind_host_value(op.results[0])
            return
        if kind == "view":
            return
        if isinstance(op, nn.LinearOp | nn.MatmulOp) and isinstance(plan, tl.GemmPlanAttr):
            self.linear(op, plan)
        elif isinstance(op, nn.LinearPartialsOp) and isinstance(plan, tl.GemmPlanAttr):
            self.linear_partials(op, plan)
        elif isinstance(op, nn.MatmulPartialsOp) and isinstance(plan, tl.GemmPlanAttr):
            self.matmul_partials(op, plan)
        elif isinstance(op, nn.ReduceSumOp) and kind == "reduce":
            self.reduce_sum(op)
        elif isinstance(op, nn.CastOp | nn.AddOp | nn.MulOp) and kind == "elementwise":
            self.elementwise(op)
        elif isinstance(op, nn.LayerNormOp) and kind == "rows":
            self.layer_norm(op)
        elif isinstance(op, nn.SoftmaxOp) and kind == "rows":
            self.softmax(op)
        elif isinstance(op, nn.GeluOp) and kind == "elementwise":
            self.gelu(op)
        elif isinstance(op, nn.SliceOp) and isinstance(plan, tl.SinglePlanAttr):
            self.slice_single(op)
        elif isinstance(op, nn.AttentionOp) and isinstance(plan, tl.AttentionPlanAttr):
            self.attention(op, plan)
        elif isinstance(op, nn.AttentionPartialOp) and isinstance(plan, tl.AttentionPlanAttr):
            self.attention_partial(op, plan)
        elif isinstance(op, nn.AttentionMergeOp) and isinstance(plan, tl.AttentionPlanAttr):
            self.attention_merge(op, plan)
        else:
            raise LoweringError(
                f"{op.name} with plan {plan}: no kernel lowering yet (see docs/lowering.md for the missing kernels)"
            )

    # -- the layer loop ----------------------------------------------------------------------------------------
    def layer_alloc(self, nbytes: int, align: int = 8) -> int:
        """Resident storage that differs per repeat iteration (kernel-format weights, host-bound values): one
        member per iteration at a fixed stride, the address of the iteration being lowered."""
        if self.layer is None:
            return self.image.alloc(nbytes, align, "high", what="resident data")
        size = -(-max(int(nbytes), 1) // align) * align
        base = self.image.alloc(size * self.layers, align, "high", what="per-iteration data")
        self.layer_ranges.append((base, base + size * self.layers))
        return base + self.layer * size

    def _carried_copy(self, src: SSAValue, dst: SSAValue, what: str) -> None:
        lay = tl.layout_of(dst)
        shard = lay.geometry().shard_elems.astype(np.int64) * tl.element_bytes(lay.dtype)
        a, b = self.addrs.of(src).addr, self.addrs.of(dst).addr
        rows = {
            t: [(int(a[t]), int(b[t]), int(shard[t]))]
            for t in range(min(self.n, len(shard)))
            if shard[t] > 0 and a[t] != b[t]
        }
        self.copy_call(rows, what)

    def repeat(self, op: tl.RepeatOp) -> None:
        """`tile.repeat` as a supervisor loop over one copy of the body's code, lowered at a fixed number of
        iterations whatever the count (`repeat_samples`: 0, 1 and the last; every iteration with
        `per_iteration`, the reference path). A sampled iteration i is lowered with the stacked block arguments at
        member i (`Addresses.iteration`) and the per-iteration storage at member i (`layer_alloc`). A measuring
        lowering (`measure`) lowers iterations 0 and 1 only: they decide every size; the last iteration's check is
        the real lowering's.

        Derived (from iterations 0 and 1, every iteration by the arithmetic progression w_i = w_0 + i (w_1 - w_0)):
        - every frame / table word: the words that change get a per-tile patch table (address, stride) that
          `rep_patch` applies before each further iteration, and a reset table (-(count - 1) * stride) applied after
          the last, so the next run starts again at iteration 0 (`_patch_tables`); iteration 0's data is kept;
        - the body's host bindings (`Binding.chunks`: per-iteration storage addresses, the stacked parameter's flat
          offsets) and the data of the per-iteration storage (segments at `layer_alloc` addresses: same bytes,
          address by the progression), for every iteration, in iteration order.
        Checked: every sampled iteration lowers to the same code and allocations as iteration 0, and each one past
        1 (the last) equals the progression in every word, binding chunk and per-iteration segment; a word that
        varies otherwise (not an arithmetic progression at the sampled points) is a `LoweringError` naming the
        word's address, the tile and the frame or table. Words are only compared at the sampled iterations: an
        iteration between 1 and the last is assumed to follow the progression (addresses of stacked values and
        per-iteration storage are base + i * stride by construction)."""
        if self.layer is not None:
            raise LoweringError("tile.repeat nested in a tile.repeat is not lowered")
        count = op.iterations
        what = f"tile.repeat x{count}"
        block = op.body.block
        nc = len(op.carried)
        self._scratch_areas()  # allocated before the body: every iteration sees the same storage
        for v, arg in zip(op.carried, block.args[:nc]):
            self._carried_copy(v, arg, "tile.repeat: carried values in")
        rec = self.image.alloc(16, 8, "low", what="loop record")  # counter, forward table, reset table
        r = len(self.repeats)
        image = self.image
        state = (
            [list(x) for x in image.ranges["low"]],
            [list(x) for x in image.ranges["high"]],
            dict(image.used),
        )
        n_calls, n_lines, n_segs, n_lr, n_par, n_log = (
            len(self.calls),
            len(self.items),
            len(image.segments),
            len(self.layer_ranges),
            len(self.params),
            len(image.log),
        )
        runs = []
        self.layers = count
        samples = repeat_samples(count, self.per_iteration)
        if self.measure and not self.per_iteration:
            # Measuring: iterations 0 and 1 give every size (the code and allocations are iteration 0's, the patch
            # tables hold the words that differ between 0 and 1); the last iteration only checks the progression,
            # which the real lowering does.
            samples = [i for i in samples if i < 2]
        for i in samples:
            image.ranges["low"], image.ranges["high"] = (
                [list(x) for x in state[0]],
                [list(x) for x in state[1]],
            )
            image.used = dict(state[2])
            del self.calls[n_calls:], self.items[n_lines:], self.layer_ranges[n_lr:], self.params[n_par:]
            del image.segments[n_segs:], image.log[n_log:]  # kept per run below
            self.layer = self.addrs.iteration = i
            n_in, n_out = len(self.inputs), len(self.outputs)
            self.block(block)
            # The yield's copies: in the yield's own storage, the same every iteration.
            scope = self.op_scope(block.last_op)
            for y, arg in zip(block.last_op.operands, block.args[:nc]):
                self._carried_copy(y, arg, "tile.repeat: yield -> block arguments")
            self.image.leave(scope)
            if i and (len(self.inputs) != n_in or len(self.outputs) != n_out):
                raise LoweringError("tile.repeat: a body binding model inputs or outputs is not lowered")
            after = ([list(x) for x in image.ranges["low"]], [list(x) for x in image.ranges["high"]])
            runs.append(
                dict(
                    i=i,
                    lines=self.items[n_lines:],
                    calls=self.calls[n_calls:],
                    segs=image.segments[n_segs:],
                    ranges=after,
                    used=dict(image.used),
                    layer_ranges=self.layer_ranges[n_lr:],
                    params=self.params[n_par:],
                    log=image.log[n_log:],
                )
            )
            run, first = runs[-1], runs[0]
            if run["lines"] != first["lines"]:
                k = next((j for j, (a, b) in enumerate(zip(run["lines"], first["lines"])) if a != b), None)
                at = f": line {k} is {run['lines'][k]!r}, not {first['lines'][k]!r}" if k is not None else ""
                raise LoweringError(
                    f"{what}: iteration {i} does not lower to the same code as iteration 0{at}"
                )
            if after != first["ranges"] or run["layer_ranges"] != first["layer_ranges"]:
                raise LoweringError(f"{what}: iteration {i} allocates other storage than iteration 0")
        self.layer, self.addrs.iteration, self.layers = None, 0, 1
        self.image.owner = op_name(op)  # the copies out are the loop's, not its body's last op's
        # Keep iteration 0's code, frames and tables; every iteration's per-iteration storage and bindings.
        first = runs[0]
        image.ranges["low"], image.ranges["high"] = first["ranges"]
        image.used = first["used"]
        del self.calls[n_calls:], self.items[n_lines:], image.segments[n_segs:]
        del self.layer_ranges[n_lr:], self.params[n_par:]
        image.log[n_log:] = first["log"]
        self.items.append(RepeatItem(r, count, rec, what, first["lines"]))
        self.calls += first["calls"]
        lr = first["layer_ranges"]
        self.layer_ranges += lr

        def in_layer(seg):
            return any(a <= seg.address < b for a, b in lr)

        image.segments += first["segs"]
        for run in runs:
            run["layer_segs"] = [sg for sg in run["segs"] if in_layer(sg)]
            run["segs"] = [sg for sg in run["segs"] if not in_layer(sg)]
        layer_segs = _progression(runs, count, "layer_segs", what)
        params = _progression(runs, count, "params", what)
        for i in range(1, count):
            image.segments += layer_segs[i]
        for i in range(count):
            self.params += params[i]
        self.repeats.append(
            dict(
                rec=rec, count=count, runs=[(run["i"], run["calls"], run["segs"]) for run in runs], what=what
            )
        )
        for res, arg in zip(op.res, block.args[:nc]):
            self._carried_copy(arg, res, "tile.repeat: carried values out")

    def _patch_descriptors(self, rep: dict, labels: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """The frame / table words of a repeat's sampled iterations -> its patch descriptors (the addresses of the
        words that change per iteration [P], their per-tile strides [tiles, P] modulo 2^32): the stride of each
        word from iterations 0 and 1, every further sampled iteration checked against it (see `repeat`)."""
        n, what = self.n, rep["what"]
        base = delta = None
        for i, calls, segs in rep["runs"]:
            w = _Words(calls, segs, labels, n, virtual=self.measure)
            if base is None:
                base = w
                continue
            if not (
                np.array_equal(w.addr, base.addr)
                and np.array_equal(w.skip, base.skip)
                and w.raw.keys() == base.raw.keys()
            ):
                raise LoweringError(f"{what}: iteration {i} has other frames/tables than iteration 0")
            for a, v0 in base.raw.items():
                if not np.array_equal(w.raw[a], v0):
                    raise LoweringError(f"{what}: unaligned data at {a:#x} differs per iteration")
            if delta is None:  # iteration 1: the strides (uint32 arithmetic: modulo 2^32)
                delta = w.vals - base.vals
                delta[:, base.skip] = 0
                continue
            want = base.vals + np.uint32(i) * delta
            bad = w.vals != want
            bad[:, base.skip] = False
            if bad.any():
                t, j = (int(x[0]) for x in np.nonzero(bad))
                raise LoweringError(
                    f"{what}: the word at {int(base.addr[j]):#x} on tile {t} ({base.label(j)}) is not an arithmetic "
                    f"progression over iterations: {int(base.vals[t, j]):#x} at iteration 0, "
                    f"{int(base.vals[t, j] + delta[t, j]):#x} at 1, {int(w.vals[t, j]):#x} at {i} "
                    f"({int(want[t, j]):#x} expected)"
                )
        rep["runs"] = None  # the sampled iterations' frames are not needed any more
        if delta is None:
            return np.zeros(0, np.int64), np.zeros((n, 0), np.uint32)
        var = delta.any(0)
        return base.addr[var], delta[:, var]

    # -- host values -------------------------------------------------------------------------------------------
    def bind_host_value(self, v: SSAValue) -> None:
        lay = tl.layout_of(v)
        placed = self.addrs.of(v)
        if self.layer is not None and not lay.stack.data:
            # A host-computed value inside a repeat body differs per iteration: per-iteration resident storage.
            shard = lay.geometry().shard_elems.astype(np.int64)
            nbytes = int(shard.max(initial=0)) * tl.element_bytes(lay.dtype)
            base = self.layer_alloc(nbytes, 8)
            has = np.zeros(self.n, bool)
            has[: len(shard)] = shard > 0
            placed = Placed(np.where(has, base, -1).astype(np.int64), placed.stride * 0, 1)
            self.addrs.override[v] = placed
        chunks = layout_chunks(lay, placed.addr, placed.stride)
        p, i = make_bindings(v, chunks, device_dtype(lay.dtype), lay.scale.data, layer=self.layer or 0)
        self.params += p
        self.inputs += i

    def bind_output(self, op: nn.OutputOp) -> None:
        v = op.value
        lay = tl.layout_of(v)
        if lay is None:
            raise LoweringError(f"nn.output {op.sym.data!r}: the value has no tile layout")
        placed = self.addrs.of(v)
        # memory-plan ends the value's life at the nn.output (the host reads it then) and may reuse its buffer
        # afterwards, but Session reads outputs after the run: keep a copy in a resident lowering buffer.
        if self._live_end(v) >= self.addrs.plan.events.value.data - 1:
            chunks = layout_chunks(lay, placed.addr, placed.stride, first_replica_only=True)
            self.outputs.append(
                Binding(
                    op.sym.data, tuple(v.type.get_shape()), device_dtype(lay.dtype), chunks, lay.scale.data
                )
            )
            return
        shard = lay.geometry().shard_elems.astype(np.int64)
        nbytes = np.zeros(self.n, np.int64)
        nbytes[: len(shard)] = shard * tl.element_bytes(lay.dtype)  # shard_elems stops at the last used tile
        keep = self.image.alloc(int(nbytes.max()), 8, "high", what="output kept for the host")
        self.copy_call(
            {t: [(int(placed.addr[t]), keep, int(nbytes[t]))] for t in range(self.n) if nbytes[t] > 0},
            f"nn.output {op.sym.data!r}: kept for the host",
        )
        addr = np.where(nbytes > 0, keep, -1)
        chunks = layout_chunks(lay, addr, placed.stride, first_replica_only=True)
        self.outputs.append(
            Binding(op.sym.data, tuple(v.type.get_shape()), device_dtype(lay.dtype), chunks, lay.scale.data)
        )

    def _live_end(self, v: SSAValue) -> int:
        """The last event of v's buffer (views: their operand's)."""
        op = v.owner
        while isinstance(op, Operation) and mem.BUFFERS_ATTR in op.attributes:
            plan = op.attributes.get(tl.PLAN_ATTR)
            if isinstance(plan, tl.MapPlanAttr) and plan.get("kind") == "view":
                v, op = op.operands[0], op.operands[0].owner
                continue
            return mem.buffers_of(op.attributes[mem.BUFFERS_ATTR])[v.index].live.data[1].data
        return -1

    # -- exchange ----------------------------------------------------------------------------------------------
    def phase(self, op: ex.PhaseOp) -> None:
        src = [self.addrs.of(s).addr for s in op.sources]
        dst = [self.addrs.of(r).addr for r in op.res]
        c_area, a_area, _ = self.scratch(mark=False)  # free between ops: the exchange's staging areas
        e = self.target.region1_element_bytes
        try:
            rtab, pre, shifted, post, sched = lx.staged_phase_tables(
                op, src, dst, self.n, c_area, a_area, e, self.target
            )
        except lx.ExchangeLoweringError as err:  # which values the phase moves: their makers and readers

            def _of(v):
                return op_name(v.owner) if isinstance(v.owner, Operation) else "an argument"

            def _for(v):
                users = [u.operation for u in v.uses]
                return op_name(users[0]) if users else "nothing"

            names = "; ".join(f"{_of(a)} for {_for(r)}" for a, r in zip(op.sources, op.res))
            raise lx.ExchangeLoweringError(
                str(err).replace("exchange.phase:", f"exchange.phase (moving {names}):", 1)
            ) from None
        # The staging's bytes: pre holds only send staging (the half-word shifted sends: the whole C element);
        # post per tile the receive staging, then the phase's on-tile copies (whose sources may lie in the A
        # element between the ops that use it).
        copies = np.asarray(op.copy_table(), np.int64).reshape(-1, 5) if op.copies is not None else None
        ncopy = np.bincount(copies[:, 0], minlength=self.n) if copies is not None else np.zeros(self.n, int)
        staged = {t: rows[: len(rows) - int(ncopy[t])] for t, rows in post.items()}
        c_use = e if shifted is not None else _stage_extent(pre, 1, c_area, e)
        self.use_scratch(c=c_use, a=_stage_extent(staged, 0, a_area, e))
        self.copy_call(pre, "exchange send staging")  # whole words into 8-byte staging slots
        if shifted is not None:  # f16 moved by a half word into their slots
            self.table_call(cp.SHIFT_ENTRY, shifted, "exchange send staging (half-word shifted)")
        if (
            rtab is not None
        ):  # opens with the phase's sync; each tile leaves at its own last receive (sync RECV)
            self._phase_timing(sched, rtab)
            self.table_call("xch_timed", rtab, f"exchange timed ({sched.rounds} rounds)")
        self.copy_call(post, "exchange copies")

    def _phase_timing(self, sched, rtab: np.ndarray) -> None:
        """The timed schedule's figures in the phase's summary (the marker line `op_marker` wrote for it): its span,
        transmissions and the table's bytes per tile (as wide on every tile: its busiest tile's rows)."""
        marker = next((x for x in reversed(self.items) if isinstance(x, PhaseMarker)), None)
        if marker is not None:
            marker.detail.update(
                timed_cycles=int(sched.cycles),
                transmissions=int(sched.transmissions),
                table_bytes=int(rtab.shape[1] * 4),
            )

    # -- operators ---------------------------------------------------------------------------------------------
    def _panel_addr(
        self, v: SSAValue, t: int, origin: tuple[int, ...], dims: tuple[int, ...], what: str
    ) -> int:
        """Address on tile t of the block of v's layout that starts at `origin` and spans exactly `dims` in its
        first dimensions and the whole tensor in the rest (a GEMM row panel, a bias slice)."""
        lay = tl.layout_of(v)
        key = (id(lay), len(origin), len(dims))
        index = self._panels.get(key)
        if index is None:  # the layout is kept with its index: its id stays its own
            index = self._panels[key] = (lay, _panel_index(lay, len(origin), len(dims)))
        off = index[1].get((tuple(int(x) for x in origin), tuple(int(x) for x in dims), int(t)), -1)
        if off >= 0:
            return int(self.addrs.of(v).addr[t]) + off
        raise LoweringError(
            f"{what}: tile {t} holds no block of its operand at {list(origin)} x {list(dims)}"
        )

    def _scratch_areas(self) -> None:
        """Allocates the scratch elements once, in a fixed order: C at the top of SRAM, A below it, aux below A
        (`placement.scratch_elements`, where memory-plan reserves them per op), and the zero constant."""
        if self._scratch is not None:
            return
        problem = scratch_target_problem(self.target)
        if problem:  # also when measuring: its stand-in addresses would make the kernels' own checks fail
            raise LoweringError(problem)
        e = self.target.region1_element_bytes
        owner, self.image.owner = self.image.owner, "kernels"
        scope = self.image.enter(None)  # function-level, whichever op first needs them
        c = self.image.alloc(e, e, "high", region1=True, what="C scratch element", element=True)
        a = self.image.alloc(e, e, "high", region1=True, what="A scratch element", element=True)
        x = self.image.alloc(e, 16, "high", what="aux scratch element", element=True)
        z = self.image.alloc(ZEROS_BYTES, 8, "low", what="zero constant")
        self.image.leave(scope)
        self.image.owner = owner
        for addr, n in ((c, e), (a, e), (z, ZEROS_BYTES)):
            self.image.put("zeros", addr, np.zeros(n, np.uint8))
        # Written at upload: padded units read past staged data (the simulator poisons unwritten memory).
        self.image.put("aux scratch", x, np.zeros(e, np.uint8))
        self._scratch, self._aux = (c, a, z), x

    def scratch(self, mark: bool = True) -> tuple[int, int, int]:
        """(C area, A area, zeros): shared by every GEMM (live only during one op). C and A are whole region-1
        elements (the GEMM reads A from another element than C); zeros is a resident zero constant. mark: the op
        being lowered uses all of C and A (`use_scratch`); a caller that knows its bytes passes False and marks
        them itself."""
        self._scratch_areas()
        if mark:
            e = self.target.region1_element_bytes
            self.use_scratch(c=e, a=e)
        return self._scratch

    def use_scratch(self, c: int = 0, a: int = 0, aux: int = 0) -> None:
        """Records that the op being lowered uses the first c / a / aux bytes of the C, A and aux scratch
        elements. Per event, these are what memory-plan reserves there (`lowering.scratch`); other buffers may
        use the rest, and the whole elements at events no op uses them."""
        event = self._event if self._event is not None else -1  # -1: outside any op (the whole program)
        use = self.scratch_use.setdefault(event, [0, 0, 0])
        for i, nbytes in enumerate((c, a, aux)):
            use[i] = max(use[i], -(-int(nbytes) // 64) * 64)
        if not self.measure:  # at once: the op's kernels would otherwise run into buffers placed in that room
            self._check_scratch(only=event)

    def _check_scratch(self, only: int | None = None) -> None:
        """With per-op scratch reservations (memory-plan's `kernel_scratch`), every use must lie inside the
        reservation of its event (only: that event's): else the plan is stale (StorageOverflow: planned again by
        `lower_fitting`)."""
        reserved = self.addrs.timed_scratch
        if reserved is None:
            return
        expected = scratch_elements(self.target)
        if (self._scratch is not None) and (self._scratch[0], self._scratch[1], self._aux) != expected:
            raise LoweringError(
                f"the scratch elements are at {self._scratch[:2] + (self._aux,)}, memory-plan reserved them at "
                f"{expected}"
            )
        uses = self.scratch_use.items() if only is None else [(only, self.scratch_use.get(only, [0, 0, 0]))]
        for event, use in sorted(uses):
            have = reserved.get(event, (0, 0, 0))
            for area, u, h in zip(("C", "A", "aux"), use, have):
                if u > h:
                    names = {e: op_label(o) for o, e in self.events.start.items()}
                    where = (
                        f"event {event} ({names.get(event, 'outside any op')})"
                        if event >= 0
                        else "outside any op"
                    )
                    raise StorageOverflow(
                        f"{where} uses {u} B of the {area} scratch, memory-plan reserved {h} B there "
                        "(lowering.scratch; run lowering-storage after any edit of the kernel choices)"
                    )

    def copy_call(
        self, rows: dict[int, list[tuple[int, int, int]]], name: str, whole_words: bool = False
    ) -> None:
        """On-tile copies (source, destination, bytes) per tile, through the shared copy routine. whole_words:
        round sizes up to words (only for a copy to the end of a shard: memory-plan's buffers are 8-byte aligned,
        so the bytes up to the next word belong to no other buffer)."""
        if not whole_words:
            rows, halves = _split_halves(rows)
        else:
            halves = {}
        if halves:
            self._half_call(halves, name)
        counts = [len(r) for r in rows.values()]
        if not sum(counts):
            return
        c = np.array(list(chain.from_iterable(rows.values())), np.int64).reshape(-1, 3)
        nbytes = -(-c[:, 2] // 4) * 4 if whole_words else c[:, 2]
        try:  # the worker-parallel copy kernel (`ipu.backend.kernels.copy`)
            # measuring: the provisional plan reserves no kernel scratch, so a buffer may sit where a copy's
            # scratch destination is (the final plan keeps them apart, and its lowering checks it)
            tab = cp.tables(np.repeat(list(rows), counts), c[:, 0], c[:, 1], nbytes, self.n,
                            check_sources=not self.measure)  # fmt: skip
        except ValueError as e:
            raise LoweringError(f"{name}: {e}") from None
        if tab[:, 0].any():
            self.table_call(cp.ENTRY, tab, name)

    def _half_call(self, halves: dict[int, list[tuple[int, int]]], name: str) -> None:
        """Single f16 copies (source, destination) by read-modify-write of the destination word. A word whose
        two halves both come from this call is zeroed first: its first read-modify-write would otherwise read a
        word that nothing has written yet (the simulator's poison check; the kept half is garbage either way)."""
        _, _, zeros = self.scratch(mark=False)
        pairs = {}
        for t, rs in halves.items():
            words, counts = np.unique([dst & ~3 for _, dst in rs], return_counts=True)
            if (counts > 1).any():
                pairs[t] = [(zeros, int(w), 4) for w in words[counts > 1]]
        if pairs:
            self.copy_call(pairs, f"{name} (words of two halves)")
        most = max(len(r) for r in halves.values())
        tab = np.zeros((self.n, 1 + lx.HALF_WORDS * most), np.uint32)
        for t, rs in halves.items():
            tab[t, 0] = len(rs)
            for i, (src, dst) in enumerate(rs):
                keep = 0xFFFF0000 if dst % 4 == 0 else 0x0000FFFF
                row = [src & ~3, 8 * (src % 4), dst & ~3, keep, 8 * (dst % 4)]
                tab[t, 1 + lx.HALF_WORDS * i : 1 + lx.HALF_WORDS * (i + 1)] = row
        self.table_call("xch_half", tab, f"{name} (halves)")

    def weight_staging(self, op: nn.LinearOp | None = None) -> tuple[int, int]:
        """(F16 weight panels, re-strided rows): the device-side weight preparation areas of one K chunk of `op`,
        laid out for that GEMM inside the aux scratch (`NnOps.aux`, a region-1-element-sized area that no other op
        uses during a GEMM; tile-plan's GEMM choice counts the staging: `cost_model.weight_staging_bytes`, at most
        `cost_model.WEIGHT_STAGING_BYTES`): the F16 AMP weight panels [npad/16][kc/16][512 B] (their N padding rows
        zeroed per chunk: the GEMM reads them), and for K % 16 != 0 the chunk's rows re-strided with zero K padding
        [nc, kc]. Without `op`: only makes sure the aux exists."""
        aux = self.aux(mark=op is None)
        if op is None:
            return (aux, aux)
        sizes, t = self._staging_bytes(op)
        self.use_scratch(aux=int(sum(sizes)))
        room = self.target.region1_element_bytes
        if sum(sizes) > room:
            raise LoweringError(
                f"nn.linear ({op.results[0].name_hint or 'unnamed'}): tile {t} needs {sizes[0]} + {sizes[1]} B of "
                f"weight staging per K chunk (F16 panels + re-strided rows), more than the {room}-B aux scratch"
            )
        if sum(sizes) > getattr(self, "_wstage_max", -1):  # one note: the largest staging of any GEMM
            note = f"GEMM weight staging per tile: up to {int(sum(sizes))} B ({' + '.join(map(str, sizes))}) in the aux scratch"
            if getattr(self, "_wstage_max", -1) >= 0:
                self.notes[self._wstage_note] = note
            else:
                self._wstage_note = len(self.notes)
                self.notes.append(note)
            self._wstage_max = int(sum(sizes))
        return (aux, aux + int(sizes[0]))

    def _staging_bytes(self, op: nn.LinearOp) -> tuple[tuple[int, int], int]:
        """((F16 panels, re-strided rows) bytes of one K chunk, a tile holding the widest weight block) of one
        GEMM."""
        lay = op.attributes[tl.LAYOUT_ATTR]
        g = lay.geometry()
        k = op.operands[0].type.get_shape()[-1]
        wl = tl.layout_of(op.operands[1])
        wsize = tl.element_bytes(wl.dtype) if wl is not None else 1
        nc = g.block_dims[:, 1].astype(np.int64)
        n = int(nc.max())
        kc = max(kw for _, kw in self.k_chunks(op))
        return cm.chunk_staging_areas(n, kc, wsize, k % 16 != 0), int(lay.table()[int(np.argmax(nc)), 0])

    def k_chunks(self, op: nn.LinearOp | nn.MatmulOp) -> list[tuple[int, int]]:
        """(first column, width) of each K chunk: kernel-select's `k_chunks`."""
        widths = self.choice(op, "k_chunks")
        starts = np.concatenate([[0], np.cumsum(widths)[:-1]])
        return [(int(a), int(w)) for a, w in zip(starts, widths)]

    def linear(self, op: nn.LinearOp, plan: tl.GemmPlanAttr) -> None:
        """Per tile: [pad A] and per K chunk (`cost_model.gemm_k_chunks`, the same for every tile): the chunk of
        the planned weight block (row-major [nc, K] FP8 or f16 from the exchange; rows re-strided to the padded K
        with zero tails first when K % 16 != 0) -> FP8: rearranged into the F16 panels' order + one flat `cast_fp8_f16` (exact) = the F16 AMP
        weight panels; f16: `weights_from_bt` -> [A chunk into K-block panels when A's rows are longer than the
        kernel's row stride limit; column-panel A: the chunk read in place, or its rows gathered where it cannot
        be] -> F16 GEMM into the C scratch (init, then acc: the same per-block f16
        rounding as one call) -> bias -> [cast to f32] -> [rows into the result]."""
        x, w = op.operands[0], op.operands[1]
        # A 2-D `nn.matmul` is the same GEMM with B given as [K, N] rows (tile-plan: [K, pn] column blocks): its
        # weight panels come from `WeightsF16` (a transpose in registers) instead of `weights_from_bt`.
        b_kn = isinstance(op, nn.MatmulOp)
        if not b_kn and op.groups:
            raise LoweringError(
                f"nn.linear ({op.results[0].name_hint or 'unnamed'}): grouped: run nn-split-k"
            )
        bias = op.operands[2] if len(op.operands) > 2 else None
        lay = op.attributes[tl.LAYOUT_ATTR]
        g = lay.geometry()
        table = lay.table()
        k = x.type.get_shape()[-1]
        kpad = -(-k // 16) * 16
        what = f"{op.name} ({op.results[0].name_hint or 'unnamed'})"
        if lay.order.data != "row_major" or len(lay.shape_) != 2:
            raise LoweringError(f"{what}: result layout must be a row-major matrix")
        xl = tl.layout_of(x)
        a_cols = tl.col_panel_width(xl)  # A row panels stored as column panels of a_cols (`colsP`)
        # A matmul's f32 A (the MAP head's probabilities: f16 rows of 729 would not be word aligned) is cast to
        # padded f16 rows on the device.
        a_f32 = b_kn and device_dtype(xl.dtype) == "f32" and xl.order.data == "row_major"
        if (device_dtype(xl.dtype) != "f16" and not a_f32) or (
            xl.order.data != "row_major" and a_cols is None
        ):
            raise LoweringError(
                f"{what}: the activation must arrive as row-major or column-panel f16 (got {xl.dtype}, "
                f"{xl.order.data})"
            )
        wl = tl.layout_of(w)
        wdt = device_dtype(wl.dtype)
        # `ampw`: the weight blocks are the F16 AMP's panels, read in place (the host permuted them at upload)
        ampw = wl.order.data == "ampw" and not b_kn
        if wl.order.data != "row_major" and not ampw:
            raise LoweringError(
                f"{what}: the weight operand must arrive as row-major [N, K] blocks or F16 AMP panels (got "
                f"{wl.order.data})"
            )
        if ampw and (wdt != "f16" or k % 16):
            raise LoweringError(
                f"{what}: weight blocks stored as AMP panels (ampw) are read in place by the F16 GEMM: f16 and K a "
                f'multiple of 16 (got {wdt}, K = {k}; plan it with worder = "row_major")'
            )
        if wdt == "f32":
            raise LoweringError(
                f"{what}: f32 weights are not prepared on the device (run nn-quantize-weights)"
            )
        if b_kn and wdt != "f16":
            raise LoweringError(f"{what}: the [K, N] operand must be f16 (got {wdt})")
        wsize = tl.element_bytes(wl.dtype)
        chunks = self.k_chunks(op)
        if kpad != k and (k * wsize) % 4 and not b_kn:  # a [K, N] B is padded by whole rows
            raise LoweringError(f"{what}: K = {k} {wdt} rows are not whole words (K padding copies words)")
        if kpad == k and (k * wsize) % 8 and not b_kn:
            raise LoweringError(
                f"{what}: K = {k} {wdt} rows are not whole 8-byte atoms (the packs need them)"
            )
        rdt = device_dtype(lay.dtype)
        if rdt not in ("f16", "f32"):
            raise LoweringError(f"{what}: result type {rdt} is not produced by the GEMM epilogue")
        esize = tl.element_bytes(lay.dtype)
        c_area, a_area, zeros = self.scratch(mark=False)  # marked below, by the bytes this GEMM uses
        panels, restride = self.weight_staging(None if ampw else op)
        if ampw:  # no staging: only the aux's address (unused)
            self.use_scratch(aux=0)
        e = self.target.region1_element_bytes
        res = self.addrs.of(op.results[0]).addr
        jobs = {}
        for b in range(lay.num_blocks):
            t = int(table[b, 0])
            (r0, c0), (mr, nc) = (int(v) for v in g.block_origin[b]), (int(v) for v in g.block_dims[b])
            a = self._panel_addr(x, t, (r0,), (mr,), what)
            if b_kn:
                if nc % 4:
                    raise LoweringError(
                        f"{what}: a [K, {nc}] B block: its columns must be whole 4-column groups"
                    )
                wsrc = self._panel_addr(w, t, (0, c0), (k, nc), what)  # the whole [K, nc] block
            else:
                wsrc = self._panel_addr(w, t, (c0,), (nc,), what)
            mpad, npad = max(mr, gm.MIN_ROWS), -(-nc // 16) * 16
            jobs[t] = (r0, c0, mr, nc, mpad, npad, a, res[t] + int(g.offset[b, 0]) * esize, wsrc)
        nmax = max(j[5] for j in jobs.values())
        mmax = max(j[4] for j in jobs.values())
        # Column-panel A: the GEMM reads a K chunk in place (row stride 2P, a jump to the next panel every P/16
        # blocks) when the chunk is whole 16-blocks of full-width panels of a multiple of 16 and no tile pads its
        # rows; else the chunk's rows are gathered (with zero padding) into the A scratch (`A chunk rows`).
        pad_a = {t for t, j in jobs.items() if j[4] != j[2] or kpad != k} if a_cols is None else set()
        if a_f32:
            pad_a = set(jobs)  # staged into the A scratch as padded f16 rows on every tile
        a_panels = kpad * 2 > cm.GEMM_MAX_A_ROW_BYTES and a_cols is None  # rows too long: chunks into panels
        # kernel-select's A-operand mode: what the layouts force must match it; "padded" may also be asked for an
        # A that could be read in place, and "cols_gather" for column panels that could be.
        a_mode = self.choice(op, "a_operand")
        forced = (
            ("cols_in_place", "cols_gather")
            if a_cols is not None
            else ("f32_rows",)
            if a_f32
            else ("panels",)
            if a_panels
            else ("padded",)
            if pad_a
            else ("in_place", "padded")
        )
        if a_mode not in forced:
            raise LoweringError(
                f"{what}: kernel choice a_operand = {a_mode!r} does not fit this A ({xl.order.data} {xl.dtype}, "
                f"K = {k}, rows {sorted({j[2] for j in jobs.values()})}): expected one of {list(forced)}"
            )
        if a_mode == "padded":
            pad_a = set(jobs)
        if a_f32 and a_panels:
            raise LoweringError(
                f"{what}: f32 A rows of {k} exceed the kernel's {cm.GEMM_MAX_A_ROW_BYTES}-byte row stride once cast "
                "to f16 (K-block panels of an f32 A are not lowered)"
            )
        in_place = set()
        if a_mode == "cols_in_place":
            if not (
                a_cols % 16 == 0
                and 2 * a_cols <= cm.GEMM_MAX_A_ROW_BYTES
                and all(j[4] == j[2] for j in jobs.values())
            ):
                raise LoweringError(
                    f"{what}: kernel choice a_operand = 'cols_in_place' needs column panels of a multiple of 16 "
                    f"(<= {cm.GEMM_MAX_A_ROW_BYTES // 2}) and >= {gm.MIN_ROWS} rows on every tile (panels of "
                    f"{a_cols}, rows {sorted({j[2] for j in jobs.values()})}): use 'cols_gather'"
                )
            in_place = {k0 for k0, kw in chunks if cm.a_chunk_in_place(k0, kw, k, a_cols)}
        gathered = [kw for k0, kw in chunks if k0 not in in_place]
        if a_cols is not None and gathered and mmax * max(gathered) * 2 > e:
            raise LoweringError(
                f"{what}: a {mmax}-row K chunk of the column-panel A exceeds the {e}-byte scratch element"
            )
        if pad_a and mmax * kpad * 2 > e or mmax * nmax * 6 > e:
            raise LoweringError(
                f"{what}: a tile's GEMM block ({mmax} x {kpad} A, {mmax} x {nmax} C) exceeds the {e}-byte scratch "
                "elements"
            )
        # A rows too long for the kernel are repacked into K-block panels per chunk; rows padded up to the
        # kernel's minimum then become zero rows of those panels (K itself must not need padding there).
        pad_rows_only = a_panels and kpad == k
        if a_panels and ((pad_a and not pad_rows_only) or mmax * max(kw for _, kw in chunks) * 2 > e):
            raise LoweringError(
                f"{what}: A rows of {k} halves need K-block panels per chunk: padded A or a {mmax}-row chunk over "
                f"the {e}-byte scratch is not lowered"
            )
        if (kpad - k) * max(2, wsize) > ZEROS_BYTES:
            raise LoweringError(f"{what}: K padding exceeds the zero constant")
        # The scratch this GEMM uses (memory-plan reserves these bytes at its event): C [mpad][npad] f16 (and the
        # f32 cast's stage at half the element), A's padded rows, gathered chunk rows or K-block panels; the f32 A
        # is cast through the C element.
        kmax = max(kw for _, kw in chunks)
        c_use = mmax * nmax * 2
        if rdt == "f32":
            c_use = e // 2 + mmax * nmax * 4
        a_use = 0
        if pad_a and not pad_rows_only:
            a_use = mmax * kpad * 2
        if a_cols is not None and gathered:
            a_use = max(a_use, mmax * max(gathered) * 2)
        if a_panels:
            a_use = max(a_use, mmax * kmax * 2)
        if a_f32:
            c_use, a_use = e, e
        self.use_scratch(c=c_use, a=a_use)
        bp = 0
        if bias is not None:
            # The bias stays host-bound in the kernel's format (f16, N padded): [npad] halves per tile.
            bp = self.layer_alloc(nmax * 2, 8)
            self.image.put("bias padding", bp, np.zeros(nmax * 2, np.uint8))
        bchunks, a_copies, out_copies = [], {}, {}
        f32_stage = c_area + e // 2  # cast output when rows must be gathered (C is at most e / 6 bytes)
        for t, (_r0, c0, mr, nc, mpad, npad, a, out, _wsrc) in jobs.items():
            bchunks.append([t, bp, c0, nc, 1])
            if t in pad_a and not pad_rows_only and not a_f32:
                rows = []
                for r in range(mr):
                    rows.append((a + r * k * 2, a_area + r * kpad * 2, k * 2))
                    if kpad != k:
                        rows.append((zeros, a_area + r * kpad * 2 + k * 2, (kpad - k) * 2))
                # Rows up to the kernel's minimum: zeros (their results are dropped, but leftovers in the scratch
                # can be Inf/NaN patterns).
                rows += zero_copies(zeros, a_area + mr * kpad * 2, (mpad - mr) * kpad * 2)
                a_copies[t] = rows
            if (mpad, npad) != (mr, nc):
                src, sz = (f32_stage, 4) if rdt == "f32" else (c_area, 2)
                rows = [(src + r * npad * sz, out + r * nc * sz, nc * sz) for r in range(mr)]
                if (
                    mr * nc * sz % 4
                ):  # the block ends at a half word, whose other half is padding (one block per
                    rows[-1] = (
                        *rows[-1][:2],
                        nc * sz + 2,
                    )  # tile): the C row's pad column, not `xch_half`'s RMW
                out_copies[t] = rows
        if bias is not None:
            self._bind_operand(bias, np.array(bchunks, np.int64), "f16", what)

        def frames(make):
            def build(labels):
                active = np.zeros(self.n, np.uint32)
                out = None
                for t, job in jobs.items():
                    words = make(t, *job).frame(labels)
                    if out is None:
                        out = np.zeros((self.n, len(words)), np.uint32)
                    out[t] = words
                    active[t] = 1
                return active, out

            return build

        if a_f32:
            self._a_from_f32(jobs, k, kpad, a_area, c_area, zeros, what)
            a_copies = dict.fromkeys(jobs)
        else:
            self.copy_call(a_copies, f"{what}: A padding")
        # A rows (halves) as the chunks read them.
        a_rows = {t: (a_area, kpad) if t in a_copies else (j[6], k) for t, j in jobs.items()}
        fmt = fp8_format(wl)
        ragged = {t: j for t, j in jobs.items() if j[3] % 16}  # tiles whose panels have N padding rows

        # Weight panels in interleaved memory load two coefficient slots per instruction (32 loads per block
        # instead of 64).
        if ampw:
            for t, j in jobs.items():
                if j[3] % 16 or (len(chunks) > 1 and j[3] != 16):
                    raise LoweringError(
                        f"{what}: tile {t}: a {j[3]} x {k} weight block stored as AMP panels (ampw) needs whole "
                        f"16-row panels, and one K chunk unless it is one panel (k_chunks = {[w for _, w in chunks]};"
                        ' plan it with worder = "row_major")'
                    )
            coef = self._ampw_coef(op, panels, {t: j[8] for t, j in jobs.items()}, what)
        else:
            coef = self.gemm_coef(op, panels)
        padded_kw = None  # the chunk size whose F16 panels have zero N padding rows
        self_panels = panels
        for i, (k0, kw) in enumerate(chunks):
            tag = f"{what} [K {k0}:{k0 + kw}]" if len(chunks) > 1 else what
            if ampw:
                w_at = {}  # (read in place)
            elif b_kn:
                # B's rows k0 .. k0 + kw are contiguous [kw][nc] in the block; the chunk holding the K padding is
                # copied with zero rows after the last real one (the kernel reads whole 16-row blocks).
                kr = min(kw, k - k0)
                if kr < kw:
                    self.copy_call(
                        {
                            t: [(j[8] + k0 * j[3] * 2, restride, kr * j[3] * 2)]
                            + zero_copies(zeros, restride + kr * j[3] * 2, (kw - kr) * j[3] * 2)
                            for t, j in jobs.items()
                        },
                        f"{tag}: B rows K padding",
                    )
                    w_at = {t: (restride, j[3] * 2) for t, j in jobs.items()}
                else:
                    w_at = {t: (j[8] + k0 * j[3] * 2, j[3] * 2) for t, j in jobs.items()}
            elif kpad != k:
                # The chunk's weight rows re-strided to kw with zero K padding (word copies).
                kr = min(kw, k - k0)
                rows = {}
                for t, j in jobs.items():
                    rows[t] = []
                    for r in range(j[3]):
                        rows[t].append((j[8] + (r * k + k0) * wsize, restride + r * kw * wsize, kr * wsize))
                        if kr < kw:
                            rows[t].append((zeros, restride + (r * kw + kr) * wsize, (kw - kr) * wsize))
                self.copy_call(rows, f"{tag}: weight rows K padding")
                w_at = {t: (restride, kw * wsize) for t in jobs}
            else:
                w_at = {t: (j[8] + k0 * wsize, k * wsize) for t, j in jobs.items()}
            if ampw:
                pass  # the chunk's panels: the block's own, at k0 / 16 blocks of 512 B (one row panel, or K whole)
            elif wdt == "f16":

                def pack(t, r0, c0, mr, nc, mpad, npad, a, out, wsrc, kw=kw, w_at=w_at):
                    src, row = w_at[t]
                    if b_kn:
                        return pk.WeightsF16(kw, nc, src, panels, src_row=row)
                    return pk.weights_from_bt(nc, kw, "f16", src, panels, src_row=row)

                self.call("rows_sup", rw.FRAME_WORDS, frames(pack), what=f"{tag}: weight panels")
                if kw != padded_kw:  # the N padding rows sit at the same places for chunks of one size
                    pads = {t: (j[3], j[5]) for t, j in ragged.items()}
                    self.kcall(f"{tag}: weight panels N padding", n_padding_zeros(pads, kw, panels, zeros))
                    padded_kw = kw
            else:
                # One pass: FP8 rows -> F16 AMP weight panels (converted as `cast_fp8_f16`), N padding rows zeroed.
                def fp8_panels(t, r0, c0, mr, nc, mpad, npad, a, out, wsrc, kw=kw, w_at=w_at):
                    src, row = w_at[t]
                    return pk.fp8_to_f16_panels(nc, kw, src, panels, src_row=row, **fmt)

                what_w = f"{tag}: weight panels {wdt} -> f16"
                self.call("rows_sup", pk.FP8_FRAME_WORDS, frames(fp8_panels), what=what_w)
            if a_cols is not None and k0 not in in_place:
                self.copy_call(
                    {
                        t: self._a_chunk_rows(j[2], j[4], j[6], a_cols, k, k0, kw, a_area, zeros)
                        for t, j in jobs.items()
                    },
                    f"{tag}: A chunk rows",
                )
            if a_panels:

                def a_pack(t, r0, c0, mr, nc, mpad, npad, a, out, wsrc, k0=k0, kw=kw):
                    src, row = a_rows[t]
                    return pk.Chunks(
                        mr, kw // 16, src + k0 * 2, a_area, src_row=row * 2, src_blk=32, dst_row=32,
                        dst_blk=32 * mpad,
                    )  # fmt: skip

                self.call("rows_sup", rw.FRAME_WORDS, frames(a_pack), what=f"{tag}: A chunk panels")
                # Rows [mr, mpad) of every K block: zeros (results dropped, but leftovers can be Inf/NaN).
                self.kcall(
                    f"{tag}: A chunk panels, padding rows",
                    {
                        t: pk.Chunks(
                            j[4] - j[2],
                            kw // 16,
                            zeros,
                            a_area + j[2] * 32,
                            src_row=0,
                            src_blk=0,
                            dst_row=32,
                            dst_blk=32 * j[4],
                        )  # fmt: skip
                        for t, j in jobs.items()
                        if j[4] > j[2]
                    },
                )

            def gemm(t, r0, c0, mr, nc, mpad, npad, a, out, wsrc, k0=k0, kw=kw, i=i):
                mode = "init" if i == 0 else "acc"
                panels = wsrc + k0 // 16 * 512 if ampw else self_panels
                if a_panels:
                    return gm.Gemm(
                        mpad, kw, npad, prec=gm.F16, mode=mode, coef=coef, a=a_area, weights=panels, c=c_area,
                        a_row_stride=32, a_block_step=32 * mpad,
                    )  # fmt: skip
                if a_cols is not None and k0 in in_place:  # mpad == mr: the panels' height
                    p = a_cols
                    return gm.Gemm(
                        mpad, kw, npad, prec=gm.F16, mode=mode, coef=coef, a=a + (k0 // p * p * mr + k0 % p) * 2,
                        weights=panels, c=c_area, a_row_stride=2 * p, a_panel_blocks=p // 16,
                        a_panel_step=p * mr * 2, a_first_block=k0 % p // 16,
                    )  # fmt: skip
                if a_cols is not None:
                    return gm.Gemm(
                        mpad, kw, npad, prec=gm.F16, mode=mode, coef=coef, a=a_area, weights=panels, c=c_area,
                        a_row_stride=kw * 2,
                    )  # fmt: skip
                src, row = a_rows[t]
                return gm.Gemm(
                    mpad, kw, npad, prec=gm.F16, mode=mode, coef=coef, a=src + k0 * 2, weights=panels,
                    c=c_area, a_row_stride=row * 2,
                )  # fmt: skip

            self.call(f"gemm_f16_sup_{coef}", gm.FRAME_WORDS, frames(gemm), what=f"{tag}: GEMM")
        direct_f16 = rdt == "f16"
        if bias is not None:

            def add_bias(t, r0, c0, mr, nc, mpad, npad, a, out, wsrc):
                dst = out if direct_f16 and t not in out_copies else c_area
                return ew.Elementwise("bias_f16", mpad, in0=c_area, in1=bp, out=dst, row=npad)

            self.call("ew_sup", ew.FRAME_WORDS, frames(add_bias), what=f"{what}: bias")
        if rdt == "f32":

            def cast(t, r0, c0, mr, nc, mpad, npad, a, out, wsrc):
                dst = f32_stage if t in out_copies else out
                return ew.cast("cast_f16_f32", mpad * npad // 4, in0=c_area, out=dst)

            self.call("ew_sup", ew.FRAME_WORDS, frames(cast), what=f"{what}: cast to f32")
        elif bias is None and len(out_copies) < len(jobs):
            raise LoweringError(f"{what}: an f16 result without bias needs a copy kernel (not lowered yet)")
        self.copy_call(out_copies, f"{what}: result rows")

    def _a_from_f32(
        self, jobs: dict, k: int, kpad: int, a_area: int, stage: int, zeros: int, what: str
    ) -> None:
        """A's f32 rows [mr][k] -> f16 rows [mpad][kpad] at a_area, zero padded: in groups of rows that fit the
        staging element (the C area, free before the GEMM), word copies into f32 rows of kpad (zero tails, zero
        rows up to mpad), then one flat cast to f16."""
        e = self.target.region1_element_bytes
        per = e // (kpad * 4)
        if per == 0 or (kpad - k) * 4 > ZEROS_BYTES:
            raise LoweringError(f"{what}: f32 A rows of {k} do not fit the {e}-byte staging")
        for g0 in range(0, max(j[4] for j in jobs.values()), per):
            rows, casts = {}, {}
            for t, j in jobs.items():
                mr, mpad, a = j[2], j[4], j[6]
                g1 = min(g0 + per, mpad)
                if g1 <= g0:
                    continue
                rows[t] = []
                for r in range(g0, g1):
                    dst = stage + (r - g0) * kpad * 4
                    if r < mr:
                        rows[t].append((a + r * k * 4, dst, k * 4))
                        rows[t] += zero_copies(zeros, dst + k * 4, (kpad - k) * 4)
                    else:
                        rows[t] += zero_copies(zeros, dst, kpad * 4)
                casts[t] = ew.cast(
                    "cast_f32_f16", (g1 - g0) * kpad // 4, in0=stage, out=a_area + g0 * kpad * 2
                )
            self.copy_call(rows, f"{what}: f32 A rows {g0}.. padded")
            self.kcall(f"{what}: f32 A rows {g0}.. to f16", casts)

    @staticmethod
    def _a_chunk_rows(
        mr: int, mpad: int, a: int, p: int, k: int, k0: int, kw: int, dst: int, zeros: int, esize: int = 2
    ) -> list[tuple[int, int, int]]:
        """Copies gathering K chunk [k0, k0 + kw) of a tile's mr A rows of k columns at `a`, stored as column
        panels of p (`colsP`), into row-major [mpad, kw] at `dst`: per row one piece per overlapping panel, zeros
        for the K padding (columns >= k) and for the rows up to the kernel's minimum (leftovers can be Inf/NaN
        patterns). A new list each call (callers extend it); tiles of one class ask for the same copies."""
        return list(_a_chunk_copies(mr, mpad, a, p, k, k0, kw, dst, zeros, esize))

    def elementwise(self, op: Operation) -> None:
        """A tile-local element-wise op over whole shards: every operand in the result's layout (same blocks on
        the same tiles, same order), so the shards are flat vectors processed in units by the element-wise
        kernels."""
        lay = op.attributes[tl.LAYOUT_ATTR]
        what = f"{op.name} ({op.results[0].name_hint or 'unnamed'})"
        rdt = device_dtype(lay.dtype)
        for x in op.operands:
            xl = tl.layout_of(x)
            if xl is None or xl.block_ != lay.block_ or xl.order != lay.order or xl.shape_ != lay.shape_:
                raise LoweringError(
                    f"{what}: operand layout differs from the result's (broadcasts not lowered)"
                )
            if not np.array_equal(xl.table(), lay.table()):
                raise LoweringError(f"{what}: operand blocks live on other tiles than the result's")
        if isinstance(op, nn.CastOp):
            src = device_dtype(tl.layout_of(op.operands[0]).dtype)
            kname = f"cast_{src}_{rdt}".replace("f8e4m3fnuz", "fp8").replace("f8e5m2fnuz", "fp8")
            per_unit = 8 if "fp8" in kname else 4
        else:
            kname = f"{'add' if isinstance(op, nn.AddOp) else 'mul'}_{rdt}"
            per_unit = 4 if rdt == "f16" else 2
        if kname not in ew.OPS:
            raise LoweringError(f"{what}: no element-wise kernel {kname!r}")
        shard = lay.geometry().shard_elems
        ins = [self.addrs.of(x).addr for x in op.operands]
        out = self.addrs.of(op.results[0]).addr
        tiles = [int(t) for t in np.unique(lay.table())]
        # Tiles whose shard is not whole units work on padded copies in the scratch elements (the kernels
        # have no tails): operands copied in, the result copied back.
        ragged = [t for t in tiles if shard[t] % per_unit]
        if ragged:
            c_area, a_area, _ = self.scratch()
            e = self.target.region1_element_bytes
            isz = [tl.element_bytes(tl.layout_of(x).dtype) for x in op.operands]
            osz = tl.element_bytes(lay.dtype)
            slot = e // max(1, len(ins))
            if max(int(shard[t]) + per_unit for t in ragged) * max(isz + [osz]) > slot:
                raise LoweringError(f"{what}: a ragged shard exceeds the scratch")
            self.copy_call(
                {
                    t: [(int(ins[i][t]), a_area + i * slot, int(shard[t]) * isz[i]) for i in range(len(ins))]
                    for t in ragged
                },
                f"{what}: ragged shards in",
                whole_words=True,  # reads past a shard's end only
            )
            ins = [a.copy() for a in ins]
            out_real = out
            out = out.copy()
            for t in ragged:
                for i in range(len(ins)):
                    ins[i][t] = a_area + i * slot
                out[t] = c_area
        fmt_scale = {}
        if "fp8" in kname:
            fp8_side = lay if rdt.startswith("f8") else tl.layout_of(op.operands[0])
            fmt_scale = fp8_format(fp8_side)

        binary = ew.OPS[kname][3]

        def build(labels):
            active = np.zeros(self.n, np.uint32)
            frames = np.zeros((self.n, ew.FRAME_WORDS), np.uint32)
            for t in tiles:
                units = -(-int(shard[t]) // per_unit)
                x, y = int(ins[0][t]), int(ins[1][t]) if len(ins) > 1 else 0
                call = ew.Elementwise(
                    kname,
                    units,
                    in0=x,
                    in1=y,
                    out=int(out[t]),
                    # x and y loaded together where they never share a bank (memory-plan keeps the operands
                    # of nn.add / nn.mul in different elements); casts on their faster loop for these units
                    pace=ew.pace_ok(x, y, units, self.target) if binary else ew.cast_pipelined(kname, units),
                    **fmt_scale,
                )
                frames[t] = call.frame(labels)
                active[t] = 1
            return active, frames

        self.call("ew_sup", ew.FRAME_WORDS, build, all_active=len(tiles) == self.n, what=f"{what}: {kname}")
        if ragged:
            self.copy_call(
                {t: [(c_area, int(out_real[t]), int(shard[t]) * osz)] for t in ragged},
                f"{what}: ragged shards out",
                whole_words=True,
            )

    def _bind_operand(self, v: SSAValue, chunks: np.ndarray, dtype: str, what: str) -> None:
        """Host binding of a GEMM bias in the kernel's format (f16) at lowering-owned resident storage."""
        try:
            p, i = make_bindings(v, chunks, dtype, layer=self.layer or 0)
        except ValueError as e:
            raise LoweringError(f"{what}: the bias operand must be host-computable: {e}") from None
        if i:
            raise LoweringError(f"{what}: a GEMM bias computed from a model input is not supported")
        self.params += p

    # -- the program and the package ---------------------------------------------------------------------------
    def build(self, extra_metadata: dict | None = None) -> asm.ProgramOp:
        """After the walk: its result as an `asm.program` (`program.build_program`), before the backend's passes;
        extra_metadata: more of the package's metadata (`package_extras`)."""
        if not self.measure:
            self._check_scratch()
        meta = {"derived_parameters": derived_parameters(self.f), **(extra_metadata or {})}
        try:
            return build_program(self, self._patch_descriptors, meta)
        except ProgramError as e:
            raise LoweringError(str(e)) from None

    def finish(self) -> Package:
        """The program lowered by the backend's passes (loops, calls, link) and printed as the package."""
        program = self.build()
        try:
            lower_repeats(program)
            lower_calls(program)
            laid = link(program, self.target, check=not self.measure, materialize=not self.measure)
        except CodeOverflow as e:
            raise StorageOverflow(str(e)) from None
        except ProgramError as e:
            raise LoweringError(str(e)) from None
        self.program = program
        self.code_bytes = laid.end - laid.base
        return package_of(program, self.target, laid)

    @property
    def text(self) -> str:
        """The assembly of the linked code image (main with its comments, then the routines)."""
        return program_text(self.program)

    @property
    def main_text(self) -> str:
        """The assembly of `main`, each instruction with its comment."""
        return asm.kernel_text(self.program.main())


def repeat_samples(count: int, per_iteration: bool = False) -> list[int]:
    """The iterations of a `tile.repeat` body that `Lowering.repeat` lowers: 0, 1 and the last (at most three,
    whatever the count); every one with per_iteration."""
    if per_iteration:
        return list(range(count))
    return sorted({i for i in (0, 1, count - 1) if 0 <= i < count})


def _progression(runs: list[dict], count: int, key: str, what: str) -> list[list]:
    """Per iteration 0 .. count - 1: the items `key` of a repeat body (host bindings or per-iteration segments),
    those of the sampled iteration or else the arithmetic progression of iterations 0 and 1. Each sampled
    iteration past 1 must equal the progression (`LoweringError` otherwise)."""
    at, diff = _PROGRESSIONS[key]
    items = {"params": "host bindings", "layer_segs": "per-iteration segments"}[key]
    by_i = {run["i"]: run[key] for run in runs}
    if count == 1:
        return [by_i[0]]
    r0, r1 = by_i[0], by_i[1]
    if len(r0) != len(r1):
        raise LoweringError(f"{what}: iteration 1 has {len(r1)} {items}, iteration 0 {len(r0)}")
    out = []
    for i in range(count):
        if i < 2:
            out.append(by_i[i])
            continue
        ext = [at(a, b, i, what) for a, b in zip(r0, r1)]
        if i in by_i:
            act = by_i[i]
            if len(act) != len(ext):
                raise LoweringError(f"{what}: iteration {i} has {len(act)} {items}, iteration 0 {len(ext)}")
            for k, (x, y) in enumerate(zip(ext, act)):
                bad = diff(x, y)
                if bad:
                    raise LoweringError(
                        f"{what}: iteration {i}'s {items} #{k} is not the progression of iterations 0 and 1: {bad}"
                    )
            out.append(act)
        else:
            out.append(ext)
    return out


def _binding_at(b0: Binding, b1: Binding, i: int, what: str) -> Binding:
    """Iteration i's binding from iterations 0 and 1's: the chunks (addresses, flat offsets) by the progression."""
    same = (b0.name, b0.shape, b0.dtype, b0.scale, b0.via, b0.via_scale) == (
        b1.name,
        b1.shape,
        b1.dtype,
        b1.scale,
        b1.via,
        b1.via_scale,
    )
    if not same or b0.chunks.shape != b1.chunks.shape:
        raise LoweringError(
            f"{what}: the binding of {b0.name!r} in iteration 1 ({b1.name!r}, {b1.dtype}, {len(b1.chunks)} chunks) "
            f"differs from iteration 0's ({b0.dtype}, {len(b0.chunks)} chunks) by more than its chunk positions"
        )
    c0 = np.asarray(b0.chunks, np.int64)
    return replace(b0, chunks=c0 + i * (np.asarray(b1.chunks, np.int64) - c0))


def _binding_diff(ext: Binding, act: Binding) -> str | None:
    if (ext.name, ext.shape, ext.dtype, ext.scale, ext.via, ext.via_scale) != (
        act.name,
        act.shape,
        act.dtype,
        act.scale,
        act.via,
        act.via_scale,
    ) or ext.chunks.shape != act.chunks.shape:
        return f"binding of {act.name!r} ({act.dtype}, {len(act.chunks)} chunks), expected {ext.name!r}"
    rows = np.nonzero((np.asarray(ext.chunks) != np.asarray(act.chunks)).any(1))[0]
    if len(rows):
        k = int(rows[0])
        return (
            f"binding of {act.name!r}: chunk {k} (tile, address, offset, count, stride) is "
            f"{act.chunks[k].tolist()}, the progression gives {ext.chunks[k].tolist()}"
        )
    return None


def _segment_at(s0: Segment, s1: Segment, i: int, what: str) -> Segment:
    """Iteration i's data in per-iteration storage: iteration 0's bytes at the progression's address."""
    same_tiles = (s0.tiles is None and s1.tiles is None) or (
        s0.tiles is not None and s1.tiles is not None and np.array_equal(s0.tiles, s1.tiles)
    )
    if s0.name != s1.name or not same_tiles or not np.array_equal(s0.data, s1.data):
        raise LoweringError(
            f"{what}: the per-iteration data {s1.name!r} at {s1.address:#x} in iteration 1 is not iteration 0's "
            f"{s0.name!r} (at {s0.address:#x}) moved by the storage's stride"
        )
    return Segment(s0.name, s0.address + i * (s1.address - s0.address), s0.data, s0.tiles)


def _segment_diff(ext: Segment, act: Segment) -> str | None:
    try:
        _segment_at(ext, act, 0, "")
    except LoweringError:
        return f"per-iteration data {act.name!r} at {act.address:#x} differs from {ext.name!r}'s bytes"
    if act.address != ext.address:
        return f"per-iteration data {act.name!r} at {act.address:#x}, the progression gives {ext.address:#x}"
    return None


_PROGRESSIONS = {"params": (_binding_at, _binding_diff), "layer_segs": (_segment_at, _segment_diff)}


class _Words:
    """The frame and table words of one iteration of a repeat body: per word address (sorted, one entry per
    address: the last write wins) the uint32 value on every tile; unaligned / per-tile-row segments (`skip`) are
    compared bytewise (`raw`)."""

    def __init__(
        self,
        calls: list[KernelCall],
        segs: list[Segment],
        labels: dict[str, int],
        n: int,
        virtual: bool = False,
    ):
        """virtual (a measuring lowering, whose addresses past its provisional plan's reservations wrap onto each
        other): every frame and segment at an address of its own, one after the other, so that no word hides
        another and the patch tables it sizes are at least the real lowering's."""
        addrs, vals, skips, self.names, self.raw = [], [], [], [], {}
        at = 0

        def where(address: int, nbytes: int) -> int:
            nonlocal at
            if not virtual:
                return address
            at = -(-at // 8) * 8
            out, at = at, at + max(nbytes, 4)
            return out

        for c in calls:
            d = c.data(labels, n)
            addrs.append(where(c.addr, 4 * d.shape[1]) + 4 * np.arange(d.shape[1], dtype=np.int64))
            vals.append(d)
            skips.append(np.zeros(d.shape[1], bool))
            self.names.append(f"frame of {c.entry}" + (f": {c.what}" if c.what else ""))
        for sg in segs:
            d = np.asarray(sg.data, np.uint8)
            self.names.append(f"{sg.name!r}")
            base = where(sg.address, d.shape[1])
            if d.shape[1] % 4 or sg.address % 4 or sg.tiles is not None:
                addrs.append(np.array([base], np.int64))
                vals.append(np.zeros((n, 1), np.uint32))
                skips.append(np.ones(1, bool))
                self.raw[base] = d
                continue
            d32 = np.broadcast_to(d.view("<u4"), (n, d.shape[1] // 4))
            addrs.append(base + 4 * np.arange(d32.shape[1], dtype=np.int64))
            vals.append(d32)
            skips.append(np.zeros(d32.shape[1], bool))
        if not addrs:
            self.addr, self.vals = np.zeros(0, np.int64), np.zeros((n, 0), np.uint32)
            self.skip, self.block = np.zeros(0, bool), np.zeros(0, np.int64)
            return
        a = np.concatenate(addrs)
        block = np.repeat(np.arange(len(addrs)), [len(x) for x in addrs])
        self.addr, first = np.unique(a[::-1], return_index=True)
        keep = len(a) - 1 - first  # each address's last write
        self.vals = np.concatenate(vals, axis=1)[:, keep]
        self.skip = np.concatenate(skips)[keep]
        self.block = block[keep]

    def label(self, j: int) -> str:
        return self.names[int(self.block[j])]


@lru_cache(maxsize=8192)
def _a_chunk_copies(
    mr: int, mpad: int, a: int, p: int, k: int, k0: int, kw: int, dst: int, zeros: int, esize: int = 2
) -> tuple[tuple[int, int, int], ...]:
    """`Lowering._a_chunk_rows`'s copies (a tuple: shared by the tiles that ask for the same ones); esize: the
    element bytes (2: f16, 1: FP8)."""
    rows = []
    hi = min(k0 + kw, k)
    for r in range(mr):
        c = k0
        while c < hi:
            panel = c // p
            width = min(p, k - panel * p)
            end = min(hi, panel * p + p)
            src = a + (panel * p * mr + r * width + c - panel * p) * esize
            rows.append((src, dst + (r * kw + c - k0) * esize, (end - c) * esize))
            c = end
        rows += zero_copies(zeros, dst + (r * kw + hi - k0) * esize, (kw - hi + k0) * esize)
    rows += zero_copies(zeros, dst + mr * kw * esize, (mpad - mr) * kw * esize)
    return tuple(rows)


def _split_halves(rows: dict[int, list[tuple[int, int, int]]]):
    """Copies -> (whole-word copies, single-half copies) for copies of f16 pieces that are not whole aligned
    words (e.g. one f16 element per tile gathered into a row)."""
    words: dict[int, list] = {}
    halves: dict[int, list] = {}
    memo: dict[tuple, tuple[list, list]] = {}  # tiles of one class: the same copies
    for t, rs in rows.items():
        key = tuple(rs)
        try:
            hit = memo.get(key)
        except TypeError:  # unhashable copies (lists): not shared
            key, hit = None, None
        if hit is not None:
            if hit[0]:
                words[t] = list(hit[0])
            if hit[1]:
                halves[t] = list(hit[1])
            continue
        w, h = _split_halves_of(rs)
        if key is not None:
            memo[key] = (w, h)
        if w:
            words[t] = list(w)
        if h:
            halves[t] = list(h)
    return words, halves


def _split_halves_of(rs: list[tuple[int, int, int]]) -> tuple[list, list]:
    """One tile's copies -> (whole-word copies, single-half copies) (`_split_halves`)."""
    words: list = []
    halves: list = []
    for src, dst, nbytes in rs:
        if not (src % 4 or dst % 4 or nbytes % 4):
            words.append((src, dst, nbytes))
            continue
        if src % 2 or dst % 2 or nbytes % 2:
            raise LoweringError(f"copy of {nbytes} B at {src:#x} -> {dst:#x} is not whole halves")
        if src % 4 != dst % 4:
            halves.extend((src + i, dst + i) for i in range(0, nbytes, 2))
            continue
        if dst % 4:
            halves.append((src, dst))
            src, dst, nbytes = src + 2, dst + 2, nbytes - 2
        if nbytes % 4:
            halves.append((src + nbytes - 2, dst + nbytes - 2))
            nbytes -= 2
        if nbytes:
            words.append((src, dst, nbytes))
    return words, halves


def _stage_extent(copies: dict, side: int, area: int, nbytes: int) -> int:
    """Bytes of a staging area [area, area + nbytes) that a phase's copies use (side 1: their destinations, the
    send staging; 0: their sources, the receive staging), in whole 8-byte slots."""
    end = area
    for rows in copies.values():
        for row in rows:
            if area <= row[side] < area + nbytes:
                end = max(end, row[side] + -(-row[2] // 8) * 8)
    return end - area


def _single_func(module: ModuleOp | func.FuncOp) -> func.FuncOp:
    if isinstance(module, func.FuncOp):
        return module
    fs = [o for o in module.ops if isinstance(o, func.FuncOp)]
    if len(fs) != 1:
        raise LoweringError(f"expected one func.func, found {len(fs)}")
    return fs[0]


def _placed_target(f: func.FuncOp, target: Target | None) -> Target:
    plan = next((o for o in f.body.block.ops if isinstance(o, mem.PlanOp)), None)
    if plan is None:
        raise LoweringError(f"@{f.sym_name.data}: no memory.plan: run memory-plan first")
    target = target or target_of(plan)
    if target.num_tiles != plan.tiles.value.data:
        raise LoweringError(f"target has {target.num_tiles} tiles, the memory plan {plan.tiles.value.data}")
    return target


def package_extras(
    module: ModuleOp | func.FuncOp,
    f: func.FuncOp,
    target: Target,
    debug_values: bool,
    contents: list[dict] | None = None,
) -> dict:
    """The package metadata that comes from the placed function rather than the lowering: the model's config,
    the planner's estimate (which a measured profile is compared with) and the memory map (placement.json), with
    the lowering's own allocations inside its reservations (`contents`, `DataImage.contents`)."""
    extras = {}
    config = model_config(module)
    if config is not None:
        extras["config"] = config  # lets a package runner make random weights for it
    if not debug_values:
        from ipu.runtime.reports.profile import estimate_summary, profile_from_function

        extras["estimate"] = estimate_summary(profile_from_function(f, target.num_tiles))
    # The memory map travels with the package: `ipu-run --memory-map`, `ipu-report placement`.
    from ipu.runtime.reports.placement import model_from_function, placement_json, with_contents

    extras["memory_map"] = placement_json(model_from_function(f))
    if contents is not None:
        with_contents(extras["memory_map"], contents)
    return extras


def lower_to_program(module: ModuleOp | func.FuncOp, target: Target | None = None) -> asm.ProgramOp:
    """The placed module (after memory-plan) as an `asm.program` before the backend's passes (`asm-lower`), with
    the package's metadata."""
    f = _single_func(module)
    target = _placed_target(f, target)
    low = Lowering(f, target)
    low.walk()
    return low.build(package_extras(module, f, target, False))  # the contents: at the end of build_program


def lower_to_package(
    module: ModuleOp | func.FuncOp,
    target: Target | None = None,
    debug_values: bool = False,
    per_iteration: bool = False,
) -> Package:
    """The placed module (after memory-plan) as a package. debug_values: keep nn op results tagged with
    `debug.pos` (ipu.backend.lower.debug) in `Package.debug`. per_iteration: a tile.repeat body lowered once per
    iteration (the reference path of `Lowering.repeat`; the same package)."""
    f = _single_func(module)
    target = _placed_target(f, target)
    if debug_values:
        from ipu.backend.lower.debug import DebugLowering

        low = DebugLowering(f, target)
    else:
        low = Lowering(f, target, per_iteration=per_iteration)
    pkg = low.run()
    pkg.metadata.update(package_extras(module, f, target, debug_values, low.image.contents()))
    pkg.validate()
    return pkg


def lower_fitting(module: ModuleOp, target: Target, plan_pass, attempts: int = 3) -> Package:
    """`lower_to_package`, planned again when the lowering's storage outgrew memory-plan's reservations.

    `lowering-storage` measures the lowering's code, tables and scratch on a provisional plan; the final plan's
    addresses can need a little more (copies split at other alignments, say). Then the final plan is measured
    (a measuring lowering of it), `lowering.storage` becomes the larger of the two, and `plan_pass` (the
    pipeline's memory-plan) places the function again. The package says so in a note."""
    from xdsl.context import Context

    from ipu.passes.lowering_storage import record_storage, storage_of
    from ipu.passes.memory_plan import strip_memory_plan

    notes = []
    for attempt in range(attempts):
        try:
            pkg = lower_to_package(module, target)
            pkg.metadata.setdefault("notes", []).extend(notes)
            return pkg
        except StorageOverflow as err:
            if attempt == attempts - 1:
                raise
            f = _single_func(module)
            old = storage_of(f) or {}
            probe = Lowering(f, target, measure=True)
            probe.run()
            sizes = record_storage(f, probe, merge=True)
            notes.append(f"memory planned again: {err} (lowering.storage {old} -> {sizes})")
            strip_memory_plan(f)
            plan_pass.apply(Context(), module)
    raise AssertionError("unreachable")


def model_config(module) -> dict | None:
    """The builder's config (frontend.siglip.MODEL_CONFIG_ATTR) of a module, checked; None without one."""

    from ipu.frontend.siglip import SiglipVisionConfig

    config = module.attributes.get("ipu.model_config") if isinstance(module, ModuleOp) else None
    if not isinstance(config, StringAttr):
        return None
    try:
        d = json.loads(config.data)
        SiglipVisionConfig.from_dict(d)
    except ValueError as e:
        raise LoweringError(f"module attribute 'ipu.model_config': {e}") from None
    return d


def derived_parameters(f: func.FuncOp) -> dict[str, dict]:
    """{name: {"spec": recipe and arguments, "shape": [..]}} of the `nn.param`s the host derives at upload
    (`ipu.runtime.derived`)."""
    from ipu.runtime.derived import DerivationError, derived_specs

    try:
        specs = derived_specs(f)
    except DerivationError as e:
        raise LoweringError(str(e)) from None
    return {name: {"spec": spec, "shape": list(shape)} for name, (spec, shape) in specs.items()}


def compile_model(
    module_or_config,
    target: Target | None = None,
    weights=None,
    debug_values: bool = False,
    repeat: bool | None = None,
    split_rows: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
    keep_f16: tuple[str, ...] | None = None,
    activations: str | None = None,
    calibration: Mapping[str, np.ndarray] | None = None,
    weights_order: str = "auto",
    fp8_linears: tuple[str, ...] = (),
) -> Package:
    """nn-level module, a SiglipVisionConfig or a preset name -> a runnable Package for `target` (default: the
    full IPU21). A module that already has a memory plan is lowered as it is. `weights` (name -> array), when
    given, are checked against the package's parameters (they are uploaded by `Session.upload_parameters`; a layer
    loop's stacked parameters are named `encoder.layers.*.<suffix>`: give a `WeightStore`, which resolves them).
    `repeat` (default: on unless debug_values): outline the layers into one `tile.repeat` (`nn-outline-repeat`),
    lowered as a loop over one copy of the layer's code; False: layers unrolled. `split_rows` (default): many-row
    linears split along K too (`pipeline_spec`). `progress(phase, done, total)`, when given, is called before each
    pass of the pipeline and the lowering, and once at the end with done == total (`ipu.progress`). `keep_f16`:
    the precision policy (`IpuCompilePipelinePass.keep_f16`); None: the default policy, and if memory-plan cannot
    place it, the compact one (q/k in FP8 too, `KEEP_F16_COMPACT`), with a package note saying so. `activations`:
    "fp8" gives the FP8-weight K splits FP8 activations (the FP8 AMP, `IpuCompilePipelinePass.activations`),
    only those whose weight names contain one of `fp8_linears` if given; "f16": none; "mlp" (None: the
    default): the MLP's linears only (`nn_quantize.MLP_FP8_LINEARS`, at 2^`MLP_FP8_SCALE`).
    `calibration` (with "fp8"; needs `weights`): model inputs (name -> array) whose fp32 activations set each FP8
    cast's scale (`ipu.frontend.calibrate`), recorded as the pipeline's `activation_scales` and in a package note;
    without it the casts take the rule's 2^-4. `weights_order`: tile-plan's GEMM weight storage
    (`IpuCompilePipelinePass.weights_order`: "auto" keeps FP8-activation K splits' weights as AMP panels read in
    place, "row_major" makes every weight's panels on the device)."""
    from xdsl.context import Context
    from xdsl.passes import PassPipeline

    from ipu.frontend.siglip import PRESETS, SiglipVisionConfig, build_vision_model
    from ipu.passes.registry import all_passes

    target = target or IPU21
    if repeat is None:  # the layer loop (tile.repeat), unless per-op debug values are kept (one per op)
        repeat = not debug_values
    if isinstance(module_or_config, str):
        module_or_config = PRESETS[module_or_config]
    config = module_or_config if isinstance(module_or_config, SiglipVisionConfig) else None
    if config is not None:
        module = build_vision_model(config)
    else:
        module = module_or_config
    f = _single_func(module)
    from ipu.passes.nn_quantize import KEEP_F16_COMPACT

    activations = activations or "mlp"

    def pipeline(keep: tuple[str, ...]) -> IpuCompilePipelinePass:
        return IpuCompilePipelinePass(  # the named pass `ipu-opt` runs (ipu.passes.compile_pipeline)
            tiles=target.num_tiles,
            sram_kib=target.sram_bytes // 1024,
            repeat=repeat,
            split_rows=split_rows,
            scratch=not debug_values,
            keep_f16=keep,
            activations=activations,
            weights_order=weights_order,
            fp8_linears=tuple(fp8_linears),
        ).resolved(module)

    compile_pass = pipeline(("default",) if keep_f16 is None else tuple(keep_f16) or ("none",))
    policy_notes = []
    calibrating = calibration is not None and compile_pass.activations == "fp8"
    if calibrating and weights is None:
        raise ValueError("compile_model: calibration of the FP8 activation scales needs the weights")
    # The calibration of the pipeline run that made the package (the compact fallback's replaces the first's).
    calibration_notes: list[str] = []

    def run_pipeline(cp: IpuCompilePipelinePass, tag: bool = False) -> IpuCompilePipelinePass:
        """Applies cp to the module; with a calibration input or `tag` (per-op debug positions) in two parts:
        the nn passes, then the FP8 casts' scales from the calibration input and / or the nn ops' positions,
        then the rest. Returns cp with the calibrated scales recorded (`activation_scales`)."""
        if not (calibrating or tag):
            cp.apply_with_progress(Context(), module, progress, extra_phases=1)
            return cp
        from ipu.backend.lower.debug import nn_passes, tag_positions

        head, tail = (PassPipeline.parse_spec(dict(all_passes()), s) for s in nn_passes(cp.pipeline_text()))
        total = len(head.passes) + len(tail.passes) + 1
        if progress is not None:
            progress(head.passes[0].name, 0, total)
        head.apply(Context(), module)
        if calibrating:
            from ipu.frontend.calibrate import calibrate_activations, scale_entries

            scales = calibrate_activations(module, calibration, weights)
            shown = ", ".join(f"{n} {s} (|x| <= {a:.3g})" for n, (s, a) in sorted(scales.items()))
            calibration_notes[:] = [
                f"FP8 activation scales calibrated on the calibration input: {shown or 'no casts'}"
            ]
            cp = replace(cp, activation_scales=scale_entries(scales))
        if tag:
            tag_positions(_single_func(module))
        if progress is not None:
            progress(tail.passes[0].name, len(head.passes), total)
        tail.apply(Context(), module)
        return cp

    nn_head = None
    if debug_values:  # tag nn ops with their nn-level positions (per-op comparison with the reference)
        from ipu.backend.lower.debug import nn_passes

        compile_pass = run_pipeline(compile_pass, tag=True)
        nn_head = nn_passes(compile_pass.pipeline_text())[0]  # with the calibrated scales, if any
    fell_back = None  # why the default policy did not fit, when compile_model fell back to the compact one
    planned_here = not any(isinstance(o, mem.PlanOp) for o in f.body.block.ops)
    if planned_here and not debug_values:
        fallback = module.clone() if keep_f16 is None else None
        try:
            compile_pass = run_pipeline(compile_pass)
        except PassFailedException as err:
            if fallback is None or not str(err).startswith(
                ("memory-plan:", "lowering-storage: the function does not fit")
            ):
                raise
            # The default policy does not fit: the compact one (q/k FP8 too) frees ~15 % of the resident weights.
            module = fallback
            compile_pass = pipeline(("compact",))
            f = _single_func(module)
            compile_pass = run_pipeline(compile_pass)
            fell_back = str(err)[:300]
    total = len(compile_pass.passes()) + 1
    if progress is not None:
        progress("asm lowering", total - 1, total)
    from ipu.passes.memory_plan import MemoryPlanPass

    plan_pass = compile_pass.passes()[-1]
    if debug_values or not planned_here or not isinstance(plan_pass, MemoryPlanPass):
        pkg = lower_to_package(module, target, debug_values)
    else:
        pkg = lower_fitting(module, target, plan_pass)
    if fell_back is not None:
        policy_notes.append(
            f"precision policy: keep_f16={','.join(KEEP_F16_COMPACT)} (q/k projections in FP8): the default policy "
            f"does not fit the memory plan ({fell_back} ...)"
        )
    pkg.metadata.setdefault("notes", []).extend(policy_notes + calibration_notes)
    if nn_head is not None:  # the nn passes the debug positions refer to (`debug.nn_module`)
        pkg.metadata["nn_passes"] = nn_head
    if progress is not None:
        progress("done", total, total)
    if config is not None:
        pkg.metadata["config"] = config.to_dict()  # lets a package runner make random weights for it
    if weights is not None:
        from ipu.runtime.derived import DerivationError, with_package_derived

        weights = with_package_derived(weights, pkg)
        for name in pkg.metadata.get("derived_parameters") or {}:
            try:
                weights[name]  # small (the MAP head's U): derived now so that missing sources show here
            except DerivationError as e:
                raise LoweringError(f"weights: {e}") from None
        missing = sorted({b.name for b in pkg.parameters if b.name not in weights})
        if missing:
            raise LoweringError(f"weights lack parameters {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    return pkg
