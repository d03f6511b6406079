"""`memory-plan`: places every buffer in every tile's SRAM (exchange level -> memory level).

Reads exchange-level IR (tile layouts on values, `exchange.phase` supersteps, `tile.repeat` loops) and writes the
`memory` dialect's decisions onto it (see `dialects/memory.py`); nothing is moved or rewritten.

1. Events: `number_events` numbers the program points of a function (host input = 0, one per phase and compute
   operator, a `tile.repeat` body once between its start and its `tile.yield`, host output last).
2. Buffers: one per laid-out value (an operator's result, a phase's result, a parameter, an input, a carried
   block argument of a repeat), with per-tile bytes = the value's shard on that tile (`LayoutGeometry`).
   Parameters (and host-folded values computed from parameters only) are resident and host-visible; a stacked
   parameter (`stack = L`) is a Repeat sequence of L members at a fixed stride, whose body block argument is the
   current member (no buffer of its own). Inputs live from event 0, outputs until the last event. A value used
   inside a repeat body but defined outside lives until the body's end (every iteration reads it). A "view" plan
   (unit-dim reshape) shares its operand's buffer. Values without a layout stay on the host (no buffer).
3. Constraints: GEMM results go to interleaved memory (region 1, 16-byte aligned, when the target has one) and
   must not share a memory element with the GEMM's operands (poplibs `elem(**in) != elem(**out)`); the two
   operands of `nn.add` / `nn.mul` are kept in different elements (the element-wise kernel loads both in one
   instruction there), as are an exchange phase's on-tile copy source and destination.
4. Support reservations from the target model and the options: runtime state (stacks grow down inside it) and
   host descriptors at the bottom of region 0, kernel code and tile programs (`reserve-code-bytes`) and exchange
   tables (`exchange-table-bytes`, by default the largest per-tile sum of the phases' encoded rows) together in
   whole 16 KiB elements at the top of region 0 (the code at the top, the tables below it with the rounding's
   slack), and the host aperture, reserved at the host events only (transient
   buffers may borrow it in between unless `aperture-reuse=false`).
5. `memory_alloc.allocate` places everything per tile class; the result is recorded as `memory.plan`,
   `memory.reserve` ops and `memory.buffers` / `memory.args` attributes. A buffer that does not fit fails the pass
   with the allocator's diagnostic (tile, event, request, live buffers, largest hole).

Gaps (said here so nobody is surprised): in-place operators and copy elimination are not modelled (each
operator's result is a new buffer; a repeat's carried block argument and its result are two buffers, and the
yield operand a third unless it can be computed in place into the argument's buffer, `yield_in_place`); the asm
lowering's code and the data no op owns are whole-program reservations sized by `lowering-storage`'s measurement
(`lowering.storage`), each op's frames and kernel data are resident buffers of that op packed inside those spans
(`lowering_data`: read at every inference, so resident; only the kernel scratch elements have per-op lifetimes);
access tails are not requested; only the element constraints above are declared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp
from xdsl.ir import Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.utils.exceptions import PassFailedException

from ipu.backend.target import Target
from ipu.dialects import exchange as ex
from ipu.dialects import memory as mem
from ipu.dialects import nn
from ipu.dialects import tile as tl
from ipu.passes import memory_alloc as ma
from ipu.passes.tile_plan import target_for

DEFAULT_CODE_BYTES = 48 * 1024  # the code reservation without `lowering.storage`; seed 000: ~42 KiB
NO_EVENT_OPS = (ex.SyncOp, func.ReturnOp, nn.ParamOp, nn.InputOp, nn.OutputOp, mem.PlanOp, mem.ReserveOp)
REGION_OF = {ma.REGION_ANY: "any", ma.REGION_0: "r0", ma.REGION_1: "r1"}


def _label(v: SSAValue) -> str:
    return f"%{v.name_hint}" if v.name_hint else f"#{v.index}" if isinstance(v, BlockArgument) else "%?"


def op_label(op: Operation) -> str:
    hint = op.results[0].name_hint if op.results and op.results[0].name_hint else None
    return f"{op.name}{' %' + hint if hint else ''}"


def _gemm_operand(v: SSAValue) -> bool:
    """Whether a GEMM-planned op reads v with kernel-select's coef = "ld128" (two coefficient slots per load: its
    weights in interleaved memory at 16 bytes). kernel-select records "ld64" for `ampw` weights read in place
    (any memory): a person's "ld128" is honoured here."""
    from ipu.passes.kernel_select import choices

    for u in v.uses:
        if isinstance(u.operation.attributes.get(tl.PLAN_ATTR), tl.GemmPlanAttr):
            if choices(u.operation).get("coef") == "ld128":
                return True
    return False


@dataclass
class Events:
    """Event numbering of one function: `start[op]` its event, `end[op]` its last (a repeat's yield event)."""

    start: dict[Operation, int]
    end: dict[Operation, int]
    names: list[str]

    @property
    def count(self) -> int:
        return len(self.names)


def number_events(f: func.FuncOp) -> Events:
    """Events of a function in program order (see the module docstring); the one definition of event numbers."""
    start: dict[Operation, int] = {}
    end: dict[Operation, int] = {}
    names = ["host input"]

    def walk(block: Block) -> None:
        for op in block.ops:
            if isinstance(op, NO_EVENT_OPS):
                continue
            start[op] = len(names)
            names.append(op_label(op))
            if isinstance(op, tl.RepeatOp):
                walk(op.body.block)
                end[op] = end[op.body.block.last_op]  # the yield's event: the body's last point
            else:
                end[op] = start[op]

    walk(f.body.block)
    names.append("host output")
    return Events(start, end, names)


def shard_bytes(layout: tl.LayoutAttr, num_tiles: int) -> np.ndarray:
    """Bytes of one slice of the layout on every tile (a stacked layout's member)."""
    g = layout.geometry().shard_elems * tl.element_bytes(layout.dtype)
    out = np.zeros(num_tiles, np.int64)
    n = min(num_tiles, len(g))
    out[:n] = g[:n]
    return out


def _host_sources(v: SSAValue) -> set[type]:
    """The kinds of sources (nn.param / nn.input) a host-folded value is computed from."""
    owner = v.owner
    if isinstance(owner, nn.ParamOp | nn.InputOp):
        return {type(owner)}
    if isinstance(owner, Operation):
        return set().union(*(_host_sources(o) for o in owner.operands)) if owner.operands else set()
    return set()


def _plan_kind(op: Operation) -> str | None:
    plan = op.attributes.get(tl.PLAN_ATTR)
    return plan.get("kind") if isinstance(plan, tl.MapPlanAttr) else None


class _Builder:
    """Collects the buffers of one function as allocator requests."""

    def __init__(self, f: func.FuncOp, target: Target, events: Events, gemm_interleaved: bool):
        self.f, self.target, self.events = f, target, events
        self.gemm_interleaved = gemm_interleaved and target.region1[0] < target.region1[1]
        self.buffers: list[ma.Buffer] = []
        self.sizes: list[np.ndarray] = []
        self.value_buffer: dict[SSAValue, int] = {}
        self.pairs: list[tuple[int, int]] = []

    def add(self, buf: ma.Buffer, sizes: np.ndarray) -> int:
        self.buffers.append(buf)
        self.sizes.append(sizes)
        return len(self.buffers) - 1

    def last_use(self, v: SSAValue, def_block: Block) -> int:
        """The event of v's last use, a use inside a nested repeat counting as the repeat's end."""
        last = -1
        for use in v.uses:
            op = use.operation
            while op.parent_block() is not def_block and op.parent_op() is not None:
                op = op.parent_op()
            if isinstance(op, nn.OutputOp):
                return self.events.count - 1
            if isinstance(op, tl.RepeatOp) and use.operation is op and use.index < len(op.carried):
                last = max(last, self.events.start[op])  # copied into the carried argument at the start
                continue
            if isinstance(op, tl.YieldOp):
                last = max(last, self.events.end[op.parent_op()])
            elif op in self.events.end:
                last = max(last, self.events.end[op])
        return last

    def value(self, v: SSAValue, first: int, block: Block, owner_label: str) -> None:
        layout = tl.layout_of(v)
        if layout is None:
            return
        op = v.owner
        n = self.target.num_tiles
        if int(layout.table().max()) >= n:
            raise PassFailedException(
                f"memory-plan: {owner_label}: layout of {_label(v)} names tile {int(layout.table().max())}, "
                f"the target has {n}"
            )
        if isinstance(op, Operation) and _plan_kind(op) == "view":
            self.value_buffer[v] = self.value_buffer[op.operands[0]]  # same storage as its operand
            return
        sizes = shard_bytes(layout, n)
        count = max(1, layout.stack.data)
        last = max(first, self.last_use(v, block))
        # Host-written values: parameters, inputs, and what the host folds from them (plan kind "host").
        kind: set[type] = set()
        if isinstance(op, nn.ParamOp | nn.InputOp) or (
            isinstance(op, Operation) and _plan_kind(op) == "host"
        ):
            kind = _host_sources(v)
        resident = bool(kind) and nn.InputOp not in kind
        region, align = ma.REGION_ANY, 8
        if isinstance(op, Operation) and isinstance(op.attributes.get(tl.PLAN_ATTR), tl.GemmPlanAttr):
            if self.gemm_interleaved:
                region, align = ma.REGION_1, 16
        if layout.order.data == "ampw" and self.gemm_interleaved and _gemm_operand(v):
            # AMP weight panels a GEMM reads in place with two coefficient slots per load (ld128): interleaved
            # memory at 16 bytes.
            region, align = ma.REGION_1, 16
        host = bool(kind) or last == self.events.count - 1
        b = self.add(
            ma.Buffer(
                name=_label(v),
                owner=owner_label,
                align=align,
                region=region,
                first=0 if kind else first,
                last=last,
                resident=resident,
                host_io=host,
                count=count,
            ),
            sizes,
        )
        self.value_buffer[v] = b

    def yield_in_place(self, rep: tl.RepeatOp, arg: BlockArgument, y: SSAValue) -> None:
        """The yield operand y computed straight into its carried block argument's buffer, when that is safe: no
        copy y -> argument per iteration (the lowering skips a copy whose source and destination coincide). Safe
        when y is a result of an op of the body whose layout is the argument's and every read of the argument
        (and of views of it) in this iteration comes before that op; the argument's buffer then also takes y's
        placement constraints. Otherwise y keeps a buffer of its own and the copy stays."""
        body = arg.block
        b_arg, b_y = self.value_buffer.get(arg), self.value_buffer.get(y)
        producer = y.owner
        if (
            b_arg is None
            or b_y is None
            or b_arg == b_y
            or not isinstance(producer, Operation)
            or producer.parent_block() is not body
            or tl.layout_of(y) != tl.layout_of(arg)
            or not np.array_equal(self.sizes[b_y], self.sizes[b_arg])
            or sum(1 for b in self.value_buffer.values() if b == b_y) != 1
        ):
            return
        ya, aa = self.buffers[b_y], self.buffers[b_arg]
        if ya.count != aa.count or (
            ya.region != ma.REGION_ANY and aa.region not in (ma.REGION_ANY, ya.region)
        ):
            return
        start = self.events.start[producer]
        for v in [v for v, b in self.value_buffer.items() if b == b_arg]:
            for use in v.uses:
                op = _top_level(use.operation, body)
                if op is body.last_op or op.parent_block() is not body:
                    continue  # the yield (y is the argument's next value), or a use outside the loop
                if self.events.end.get(op, start) >= start:
                    return
        region = ya.region if ya.region != ma.REGION_ANY else aa.region
        self.buffers[b_arg] = _replace(aa, region=region, align=max(aa.align, ya.align))
        self.sizes[b_y] = np.zeros_like(self.sizes[b_y])  # y's own buffer: no bytes on any tile
        self.value_buffer[y] = b_arg
        self.pairs = [(b_arg if a == b_y else a, b_arg if b == b_y else b) for a, b in self.pairs]

    def block(self, block: Block) -> None:
        for op in block.ops:
            if isinstance(op, tl.RepeatOp):
                first = self.events.start[op]
                body = op.body.block
                for i, arg in enumerate(body.args[: len(op.carried)]):
                    self.value(arg, first, body, f"tile.repeat carried argument #{i}")
                    if self.value_buffer.get(arg) is not None:
                        b = self.value_buffer[arg]
                        self.buffers[b] = _replace(self.buffers[b], last=self.events.end[op])
                for arg, operand in zip(body.args[len(op.carried) :], op.stacked):
                    if operand in self.value_buffer:  # the current member of the operand's sequence
                        self.value_buffer[arg] = self.value_buffer[operand]
                self.block(body)
                for arg, y in zip(body.args[: len(op.carried)], body.last_op.operands):
                    self.yield_in_place(op, arg, y)
                for r in op.results:
                    self.value(r, self.events.end[op], block, op_label(op))
                continue
            first = self.events.start.get(op, 0)
            for r in op.results:
                self.value(r, first, block, op_label(op))
            if isinstance(op, ex.PhaseOp):
                # On-tile copies of a phase (operand -> result on one tile) run at the copy kernel's full rate
                # only when the two are not in one region-0 bank (backend/kernels/copy.py): keep them apart.
                copied = np.unique(op.copy_table()[:, 1]) if op.copies is not None else ()
                for i in copied:
                    src, dst = op.operands[int(i)], op.results[int(i)]
                    if src in self.value_buffer and dst in self.value_buffer:
                        self.pairs.append((self.value_buffer[src], self.value_buffer[dst]))
            plan = op.attributes.get(tl.PLAN_ATTR)
            if isinstance(plan, tl.GemmPlanAttr) and op.results and op.results[0] in self.value_buffer:
                out = self.value_buffer[op.results[0]]
                for x in op.operands[:2]:
                    if x in self.value_buffer:
                        self.pairs.append((self.value_buffer[x], out))
            if isinstance(op, (nn.AddOp, nn.MulOp)) and len(op.operands) == 2:
                # The element-wise kernels load both operands with one instruction when they are in different
                # memory elements (backend/kernels/elementwise.py `pace_ok`): 2 bundles per unit instead of 3.
                x, y = op.operands
                if x in self.value_buffer and y in self.value_buffer and x is not y:
                    self.pairs.append((self.value_buffer[x], self.value_buffer[y]))


def _top_level(op: Operation, block: Block) -> Operation:
    while op.parent_block() is not block and op.parent_op() is not None:
        op = op.parent_op()
    return op


def _replace(buf: ma.Buffer, **kw) -> ma.Buffer:
    from dataclasses import replace

    return replace(buf, **kw)


def exchange_table_bytes(f: func.FuncOp, num_tiles: int) -> int:
    """The largest per-tile sum of encoded exchange rows over all phases of the function."""
    total = np.zeros(num_tiles, np.int64)
    for op in f.walk():
        if isinstance(op, ex.PhaseOp):
            if op.row_bytes is not None:
                rows = tl.dense_to_numpy(op.row_bytes).reshape(-1).astype(np.int64)
            else:
                rows = ex.encoded_row_bytes(op.send_table(), op.recv_table(), num_tiles)
            m = min(num_tiles, len(rows))
            total[:m] += rows[:m]
    return int(total.max(initial=0))


SCRATCH_AT = ("auto", "top", "region0")


@dataclass(frozen=True)
class MemoryPlanPass(ModulePass):
    """Places every buffer of every tile (exchange level -> memory level)."""

    name = "memory-plan"

    tiles: int = 0
    """Tiles of the target (0: the full IPU21)."""
    sram_kib: int = 624
    """SRAM per tile of the target, KiB."""
    reserve_code_bytes: int = -1
    """Kernel code and tile programs (region 0, 16-byte aligned at the top; with the tables in whole 16 KiB
    elements); -1: the function's
    `lowering.storage` code bytes (`lowering-storage`), else 48 KiB."""
    exchange_table_bytes: int = -1
    """The lowering's frames and exchange tables per tile (below the code, up to the next element boundary of the
    two); -1: `lowering.storage`'s
    tables bytes, else the largest per-tile sum of the phases' rows."""
    host_descriptor_bytes: int = 256
    """Host transfer descriptors, placed after the runtime state."""
    aperture_reuse: bool = True
    """Let transient buffers borrow the host aperture between host phases."""
    gemm_interleaved: bool = True
    """Put GEMM results in interleaved memory (region 1) when the target has it."""
    report_dir: str = ""
    """When placement fails, write the memory map up to the failure (placement.json/.html) into this directory."""
    reserve_scratch_bytes: int = -1
    """The asm lowering's own storage (kernel scratch, weight staging, kernel-format biases, kept outputs), kept
    free at the top of SRAM for the whole program (the lowering_scratch reservation); -1: `lowering.storage`'s
    scratch bytes, else none (the lowering's data then goes above the plan's high-water mark)."""
    lowering_scratch_at: str = "auto"
    """Where the lowering_scratch reservation (the lowering's small data beside per-op scratch elements) lies:
    "top" (just below the scratch elements, at the top of region 1), "region0" (just below the exchange tables),
    or "auto": "top", and "region0" when the placement fails there. Tiles whose resident sequences fill region 1
    to within a few hundred bytes (So400m at 27 layers: five 62,208-B sequences beside the reservation) fit only
    with it in region 0; others only with it at the top."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if self.host_descriptor_bytes < 0:
            raise PassFailedException("memory-plan: host-descriptor-bytes must be >= 0")
        if self.lowering_scratch_at not in SCRATCH_AT:
            raise PassFailedException(
                f"memory-plan: lowering-scratch-at must be one of {', '.join(SCRATCH_AT)}, got "
                f"{self.lowering_scratch_at!r}"
            )
        for key in ("reserve_code_bytes", "exchange_table_bytes", "reserve_scratch_bytes"):
            if getattr(self, key) < -1:
                raise PassFailedException(
                    f"memory-plan: {key.replace('_', '-')} must be >= 0 (or -1: from lowering.storage)"
                )
        try:
            target = target_for(self.tiles, self.sram_kib)
        except ValueError as e:
            raise PassFailedException(f"memory-plan: {e}") from None
        for f in [o for o in op.walk() if isinstance(o, func.FuncOp)]:
            if any(isinstance(o, mem.PlanOp) for o in f.body.block.ops):
                raise PassFailedException(f"memory-plan: @{f.sym_name.data} already has a memory.plan")
            self.plan_function(f, target)

    def timed_elements(self, f: func.FuncOp) -> int:
        """Bytes of the kernel scratch elements that are reserved per op (`lowering.storage` elements with the ops'
        `lowering.scratch`), 0 when the scratch is one whole-program reservation (or the options size it)."""
        from ipu.passes.lowering_storage import storage_of

        if self.reserve_scratch_bytes >= 0:
            return 0
        return (storage_of(f) or {}).get("elements", 0)

    def sizes(self, f: func.FuncOp, target: Target) -> tuple[int, int, int]:
        """(code, exchange tables, scratch) bytes: the options, or the function's `lowering.storage`."""
        from ipu.passes.lowering_storage import storage_of

        measured = storage_of(f) or {}
        code = self.reserve_code_bytes
        if code < 0:
            code = measured.get("code", DEFAULT_CODE_BYTES)
        xbytes = self.exchange_table_bytes
        if xbytes < 0:
            xbytes = measured["tables"] if "tables" in measured else exchange_table_bytes(f, target.num_tiles)
        scratch = self.reserve_scratch_bytes
        if scratch < 0:
            scratch = measured.get("scratch", 0)
        return code, xbytes, scratch

    def support(self, f: func.FuncOp, target: Target) -> list[tuple[str, ma.Buffer, int]]:
        """(kind, fixed buffer, bytes) of the support reservations, from the target model and the options."""
        code_bytes, xbytes, scratch_bytes = self.sizes(f, target)
        e0 = target.region0_element_bytes
        r0_lo, r0_hi = target.region0
        runtime = target.runtime_state_bytes
        out = [("runtime_state", r0_lo, runtime, 8)]
        desc_at = ma.align_up(r0_lo + runtime, 8)
        if self.host_descriptor_bytes:
            out.append(("host_descriptors", desc_at, self.host_descriptor_bytes, 8))
        # Code and tables share whole 16 KiB elements at the top of region 0: the code at the top (16-byte
        # aligned, as measured), the tables below it up to the block's element boundary, so the rounding slack
        # goes to the tables (whose measured size comes from a provisional plan) and no element is half empty
        # twice. Without tables the code keeps the whole block.
        block = ma.align_up(ma.align_up(code_bytes, 16) + xbytes, e0)
        code = ma.align_up(code_bytes, 16) if xbytes else block
        xtab = block - code
        top = ma.align_down(r0_hi, e0)
        floor = max(ma.align_up(desc_at + self.host_descriptor_bytes, e0), target.host_aperture[1])
        if top - block < floor:
            raise PassFailedException(
                f"memory-plan: code ({code_bytes} B) and exchange tables ({xbytes} B) need {block} B of whole "
                f"16 KiB elements in region 0 above {floor:#x}, the target has {max(0, top - floor)} B there"
            )
        elements = 0
        if self.timed_elements(f):  # the small data below the elements, reserved per op (`kernel_scratch`)
            from ipu.backend.lower.placement import scratch_elements

            elements = target.sram_end - scratch_elements(target)[2]
            scratch_bytes = max(scratch_bytes, 16)
        s0, s1 = self.scratch_span(target, scratch_bytes, below=elements)
        if elements and s1 > s0 and self.lowering_scratch_at == "region0":
            at = self.scratch_region0(f, target)
            if at < 0:
                raise PassFailedException(
                    f"memory-plan: lowering-scratch-at=region0: {s1 - s0} B do not fit below the exchange tables "
                    f"(at {top - block:#x}) above {floor:#x}"
                )
            s0, s1 = at, at + (s1 - s0)
        if s1 > s0:  # the lowering's DataImage "high" range starts here (backend/lower/placement.py)
            out.append(("lowering_scratch", s0, s1 - s0, 8))
        if code:
            out.append(("code", top - code, code, 16))
        if xtab:
            out.append(("exchange_tables", top - block, xtab, e0))
        return [
            (
                kind,
                ma.Buffer(
                    kind,
                    owner="support",
                    kind=kind,
                    align=align,
                    region=ma.REGION_ANY if kind == "lowering_scratch" else ma.REGION_0,
                    fixed=addr,
                    resident=True,
                ),
                size,
            )
            for kind, addr, size, align in out
        ]

    def scratch_region0(self, f: func.FuncOp, target: Target) -> int:
        """The lowering_scratch reservation's address just below the exchange tables (region 0, 16-byte aligned),
        or -1 when it does not fit there above the host aperture or without per-op scratch elements."""
        if not self.timed_elements(f):
            return -1
        code_bytes, xbytes, scratch_bytes = self.sizes(f, target)
        e0 = target.region0_element_bytes
        block = ma.align_up(ma.align_up(code_bytes, 16) + xbytes, e0)
        desc_at = ma.align_up(target.region0[0] + target.runtime_state_bytes, 8)
        floor = max(ma.align_up(desc_at + self.host_descriptor_bytes, e0), target.host_aperture[1])
        from ipu.backend.lower.placement import scratch_elements

        s0, s1 = self.scratch_span(
            target, max(scratch_bytes, 16), below=target.sram_end - scratch_elements(target)[2]
        )
        at = ma.align_down(target.region0[1], e0) - block - (s1 - s0)
        return at if at >= floor else -1

    def scratch_span(self, target: Target, nbytes: int, below: int = 0) -> tuple[int, int]:
        """[start, end) of the lowering's scratch reservation at the top of SRAM, or just below the `below` bytes
        of per-op scratch elements there (empty when not asked for): 16-byte aligned, as the lowering's small
        data there."""
        end = target.sram_end - below
        if not nbytes:
            return (end, end)
        start = ma.align_down(end - nbytes, 16)
        if start <= target.sram_base:
            raise PassFailedException(
                f"memory-plan: the lowering's scratch ({nbytes} B) exceeds the tile's SRAM"
            )
        return (start, end)

    def kernel_scratch(self, f: func.FuncOp, target: Target, events: Events) -> list[tuple[ma.Buffer, int]]:
        """The per-op reservations of the scratch elements: for each op with `lowering.scratch`, the bytes it uses
        of C, A and aux at the bottom of each element (`placement.scratch_elements`), live at its event only
        (one reservation per op and element: the op's operands and results are kept out of its elements, as the
        kernels read or write them in the bundles that use the scratch); and the whole elements at the host
        events, so that no resident or host-visible buffer lies where the package's image writes the elements'
        initial zeros."""
        from ipu.backend.lower.placement import scratch_elements
        from ipu.passes.lowering_storage import scratch_of

        if not self.timed_elements(f):
            return []
        areas = scratch_elements(target)
        elements = target.sram_end - areas[2]  # the three elements (and the target's slack above them)
        use = np.zeros((events.count, 3), np.int64)
        for op, e in events.start.items():
            b = scratch_of(op)
            if b is not None:
                use[e] = np.maximum(use[e], b)
        e_bytes = target.region1_element_bytes
        if (use > e_bytes).any():
            e, i = (int(x) for x in np.argwhere(use > e_bytes)[0])
            raise PassFailedException(
                f"memory-plan: {events.names[e]}: lowering.scratch {['C', 'A', 'aux'][i]} = {int(use[e, i])} B exceeds "
                f"the {e_bytes}-B scratch element"
            )
        out = []
        for e, i in np.argwhere(use > 0).tolist():
            buf = ma.Buffer(
                "kernel_scratch", "support", 16, ma.REGION_ANY, e, e, fixed=areas[i], kind="kernel_scratch"
            )
            out.append((buf, int(use[e, i])))
        for e in sorted({0, events.count - 1}):
            buf = ma.Buffer(
                "kernel_scratch_upload",
                "support",
                16,
                ma.REGION_ANY,
                e,
                e,
                fixed=areas[2],
                kind="kernel_scratch_upload",
            )
            out.append((buf, elements))
        return out

    def plan_function(self, f: func.FuncOp, target: Target) -> None:
        events = number_events(f)
        n = target.num_tiles
        builder = _Builder(f, target, events, self.gemm_interleaved)
        builder.block(f.body.block)  # first: checks every layout against the target
        support = [
            (kind, builder.add(buf, np.full(n, size, np.int64)))
            for kind, buf, size in self.support(f, target)
        ]
        from ipu.backend.lower.placement import scratch_elements

        at_event = {e: op for op, e in events.start.items()}
        AREAS = dict(zip(scratch_elements(target), ("C", "A", "aux")))
        for buf, size in self.kernel_scratch(f, target, events):
            b = builder.add(buf, np.full(n, size, np.int64))
            support.append((buf.kind, b))
            op = at_event.get(buf.first) if buf.kind == "kernel_scratch" else None
            if op is None:
                continue
            # Operands are read beside every scratch area, results written from any (a GEMM's only from C: its A
            # and aux hold operand rows and weight panels, never a result row).
            gemm = isinstance(op.attributes.get(tl.PLAN_ATTR), tl.GemmPlanAttr)
            results = () if gemm and AREAS[buf.fixed] != "C" else op.results
            for v in (*op.operands, *results):
                if v in builder.value_buffer:
                    builder.pairs.append((b, builder.value_buffer[v]))
        # The aperture carries host traffic at the host events; without reuse it is reserved at every event.
        host_events = (0, events.count - 1) if self.aperture_reuse else tuple(range(events.count))
        problem = ma.Problem(
            target,
            builder.buffers,
            np.array(builder.sizes, np.int64).reshape(len(builder.buffers), n),
            events.count,
            np.array(builder.pairs, np.int64).reshape(-1, 2),
            host_events=host_events,
            event_names=events.names,
        )
        try:
            placement = self.allocate(f, problem, support)
        except ma.PlacementError as err:
            where = ""
            if self.report_dir:
                from ipu.runtime.reports.placement import write_failure_report

                _, html = write_failure_report(self.report_dir, problem, err, f.sym_name.data)
                where = f" (memory map up to the failure: {html})"
            raise PassFailedException(
                f"memory-plan: @{f.sym_name.data}: {err}{where}; {self.fit_hint(f, target, err)}"
            ) from None
        self.record(f, target, problem, placement, events, support, builder)

    def allocate(self, f: func.FuncOp, problem: ma.Problem, support) -> ma.Placement:
        """`memory_alloc.allocate`; with lowering-scratch-at=auto, once more with the lowering_scratch reservation
        below the exchange tables if the placement fails with it at the top (the first failure is reported when
        both fail)."""
        b = next((b for kind, b in support if kind == "lowering_scratch"), None)
        at = self.scratch_region0(f, problem.target) if b is not None else -1
        if self.lowering_scratch_at != "auto" or at < 0:
            return ma.allocate(problem)
        try:
            # Fullest classes first: when the reservation at the top does not fit, that shows early (27 So400m
            # layers: the tail tiles, the last classes in tile order), not after nearly every class is placed.
            return ma.allocate(problem, fullest_first=True)
        except ma.PlacementError:
            top = problem.buffers[b]
            problem.buffers[b] = _replace(top, fixed=at)
            try:
                return ma.allocate(problem)
            except ma.PlacementError:
                problem.buffers[b] = top
        return ma.allocate(problem)  # fails again: the failure in class order, as without the second try

    def fit_hint(self, f: func.FuncOp, target: Target, err: ma.PlacementError) -> str:
        """What the failure means and what would help, for a person reading the diagnostic."""
        code, tables, scratch = self.sizes(f, target)
        if err.free >= err.request > 0:
            why = f"the region has the {err.request} B free but in pieces (fragmentation)"
        else:
            why = f"the region is {err.request - err.free} B short"
        return (
            f"{why}. What would help: fewer resident parameter bytes per tile (FP8 for more linears: "
            "ipu-compile-pipeline{keep_f16=compact} or ipu-run --precision compact, nn-quantize-weights "
            "keep_f16=...), fewer layers or more tiles, or less of the "
            f"lowering's own storage, reserved on every tile for the whole program (code {code} B, tables "
            f"{tables} B, scratch {scratch} B: lowering.storage)"
        )

    @staticmethod
    def plan_high(placement, support) -> np.ndarray:
        """Each class's high-water address, not counting the lowering_scratch reservation: the lowering's data
        goes from there up (through the reservation, which only guarantees room)."""
        scratch = [
            b
            for kind, b in support
            if kind in ("lowering_scratch", "kernel_scratch", "kernel_scratch_upload")
        ]
        if not scratch:
            return placement.class_high
        keep = np.ones(placement.class_addr.shape[0], bool)
        keep[scratch] = False
        addr, span = placement.class_addr[keep], placement.class_span[keep]
        ends = np.where(addr >= 0, addr + span, 0)
        return ends.max(axis=0, initial=0)

    def record(self, f, target, problem, placement, events, support, builder) -> None:
        def attr(b: int) -> mem.BufferAttr:
            buf = problem.buffers[b]
            addr = placement.class_addr[b]
            member = problem.sizes[b][placement_reps(placement)]
            present = addr >= 0
            stride = np.where(present, [ma.stride_of(buf, int(m)) if m else -1 for m in member], -1)
            return mem.BufferAttr(
                mem.class_table(addr),
                mem.class_table(np.where(present, member, -1), absent=0),
                problem.lifetime(b),
                REGION_OF[buf.region],
                buf.align,
                buf.count,
                mem.class_table(stride, absent=0) if buf.count > 1 else 0,
                buf.resident,
                buf.host_io,
            )

        ops = [
            mem.PlanOp(
                target.num_tiles,
                events.count,
                problem.host_events,
                (target.sram_base, target.region1_base, target.sram_end),
                target.host_aperture,
                placement.tile_class,
                self.plan_high(placement, support),
            )
        ]
        owned = self.lowering_data(f, events, problem, placement, support)
        for kind, b in support:
            a = attr(b)
            if kind in owned:  # the span less the ops' own buffers at its end: the data no op owns
                a = mem.BufferAttr(
                    owned[kind][0], owned[kind][1], a.lifetime, a.region.data, 8, resident=True
                )
            ops.append(mem.ReserveOp(kind, a))
        ap0, ap1 = target.host_aperture
        if ap0 < target.sram_end:
            spans = [(e, e) for e in problem.host_events] if self.aperture_reuse else [(0, events.count - 1)]
            for span in spans:
                size = min(ap1, target.sram_end) - ap0
                ops.append(mem.ReserveOp("host_aperture", mem.BufferAttr(ap0, size, span, "r0")))
        Rewriter.insert_op(ops, InsertPoint.at_start(f.body.block))
        for op in f.walk():
            if isinstance(op, tl.RepeatOp):
                args = [builder.value_buffer.get(a) for a in op.body.block.args[: len(op.carried)]]
                if all(b is not None for b in args) and args:
                    op.attributes[mem.ARGS_ATTR] = ArrayAttr([attr(b) for b in args])
            bufs = [builder.value_buffer.get(r) for r in op.results]
            if bufs and all(b is not None for b in bufs):
                op.attributes[mem.BUFFERS_ATTR] = ArrayAttr([attr(b) for b in bufs])

    def lowering_data(self, f, events: Events, problem, placement, support) -> dict[str, tuple[int, int]]:
        """Gives every op with `lowering.data` its own resident buffers, packed in event order at the end of the
        span `lowering-storage` sized for them: its frames and tables (`memory.lowering_frames`, in the
        exchange_tables span) and its kernel data (`memory.lowering_data`, in the lowering_scratch span). The
        span's start (element-aligned for the tables) stays with the data no op owns: the zero constant the
        kernels' padding copies read runs at the copy's full rate there. Only for the spans sized by
        `lowering.storage` (not by options). Returns {kind: (start, bytes) of the data no op owns}."""
        from ipu.passes.lowering_storage import DATA_ALIGN, FRAMES_ALIGN, data_of

        spans = {}
        for kind, b in support:
            sized_by_storage = (
                self.exchange_table_bytes < 0 if kind == "exchange_tables" else self.reserve_scratch_bytes < 0
            )
            if kind in ("exchange_tables", "lowering_scratch") and sized_by_storage:
                addr = placement.class_addr[b]
                spans[kind] = (int(addr.max()), int(problem.sizes[b].max()))
        keys = (
            ("exchange_tables", mem.FRAMES_ATTR, FRAMES_ALIGN, "r0", "frames and tables"),
            ("lowering_scratch", mem.DATA_ATTR, DATA_ALIGN, "any", "kernel data"),
        )
        need = {}
        for op in events.start:  # in event order (number_events walks the program in order)
            op.attributes.pop(mem.FRAMES_ATTR, None)
            op.attributes.pop(mem.DATA_ATTR, None)
            if (d := data_of(op)) is not None:
                need[op] = d
        owned = {}
        for i, (kind, key, align, region, what) in enumerate(keys):
            if kind not in spans:
                continue
            start, size = spans[kind]
            total = sum(ma.align_up(d[i], align) for d in need.values())
            if total > size:
                raise PassFailedException(
                    f"memory-plan: @{f.sym_name.data}: the ops' own {what} (lowering.data: {total} B) exceed the "
                    f"{kind} span of {size} B (lowering.storage); run lowering-storage again after editing either"
                )
            if not total:
                continue  # the reservation as before: all of the span
            at = start + size - total  # the span's end is aligned (the code above it; the top, or the tables)
            owned[kind] = (start, size - total)
            for op, d in need.items():
                if d[i]:
                    op.attributes[key] = mem.BufferAttr(
                        at, d[i], (0, events.count - 1), region, align, resident=True
                    )
                    at += ma.align_up(d[i], align)
        return owned


def strip_memory_plan(f: func.FuncOp) -> None:
    """Removes what memory-plan recorded on f (the plan, the reservations, the buffer attributes), so that it can
    be planned again (with other `lowering.storage` sizes, say)."""
    for op in list(f.body.block.ops):
        if isinstance(op, mem.PlanOp | mem.ReserveOp):
            op.detach()
            op.erase()
    for op in f.walk():
        for key in (mem.BUFFERS_ATTR, mem.ARGS_ATTR, mem.FRAMES_ATTR, mem.DATA_ATTR):
            op.attributes.pop(key, None)


def placement_reps(placement: ma.Placement) -> np.ndarray:
    """A representative tile of each class."""
    reps = np.zeros(placement.num_classes, np.int64)
    reps[placement.tile_class[::-1]] = np.arange(len(placement.tile_class))[::-1]
    return reps


@dataclass
class PlacedBuffer:
    """One placed buffer read back from memory-level IR, expanded to tiles (-1 where a tile does not hold it)."""

    label: str
    addr: np.ndarray  # [tiles] start address
    span: np.ndarray  # [tiles] bytes occupied (whole sequence span)
    live: tuple[int, int]
    region: str
    align: int
    resident: bool
    host: bool
    seq: int


def read_placement(f: func.FuncOp) -> tuple[mem.PlanOp, list[PlacedBuffer]]:
    """Every buffer and reservation of a function's memory plan, per tile (for maps, checks and later passes).

    View ops share their operand's buffer and are listed once (under the operand)."""
    plan = next((o for o in f.body.block.ops if isinstance(o, mem.PlanOp)), None)
    if plan is None:
        raise ValueError(f"@{f.sym_name.data} has no memory.plan")
    tile_class = plan.tile_class()
    nc = plan.num_classes.value.data
    out: list[PlacedBuffer] = []

    def add(label: str, b: mem.BufferAttr) -> None:
        addr = mem.table_values(b.addr, nc)
        member = mem.table_values(b.bytes_, nc)
        stride = mem.table_values(b.stride, nc)
        present = (addr >= 0) & (member > 0)
        span = np.where(present, stride * (b.seq.data - 1) + member, 0)
        out.append(
            PlacedBuffer(
                label,
                np.where(present, addr, -1)[tile_class],
                span[tile_class],
                b.lifetime,
                b.region.data,
                b.align.data,
                bool(b.resident.data),
                bool(b.host.data),
                b.seq.data,
            )
        )

    carried: set[mem.BufferAttr] = set()
    for op in f.walk():
        if isinstance(op, mem.ReserveOp):
            add(f"reserve {op.kind.data}", op.buffer)
        for key, what in ((mem.FRAMES_ATTR, "frames and tables"), (mem.DATA_ATTR, "kernel data")):
            if isinstance(op.attributes.get(key), mem.BufferAttr):
                add(f"{op_label(op)} {what}", op.attributes[key])
        if _plan_kind(op) == "view":
            continue
        for i, b in enumerate(mem.buffers_of(op.attributes.get(mem.ARGS_ATTR))):
            add(f"{op_label(op)} carried #{i}", b)
            carried.add(b)
        for r, b in zip(op.results, mem.buffers_of(op.attributes.get(mem.BUFFERS_ATTR))):
            if b not in carried:  # a yield operand computed in place is its argument's buffer, listed once
                add(f"{op_label(op)} {_label(r)}", b)
    return plan, out
