"""Where things live: the memory plan read back per tile, and the lowering's own per-tile data image.

`Addresses` answers "at which address does tile t hold value v" for every laid-out SSA value of a placed
function (results of ops, phase results, `tile.repeat` block arguments; views share their operand's buffer).

`DataImage` is the storage the lowering itself adds: kernel frames, exchange tables (region 0, in the
`exchange_tables` reservation) and kernel scratch / weight staging / kernel-format biases (the "high" range: the
`lowering_scratch` reservation at the top of SRAM, or above the plan's high-water mark when memory-plan reserved
none). memory-plan sizes those reservations by `lowering-storage`'s measurement (a `DataImage(measure=True)` run).
Every allocation has one address on all tiles; its contents are per tile (one row per tile) or shared (one row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.ir import BlockArgument, Operation, SSAValue

from ipu.backend.target import Target
from ipu.dialects import memory as mem
from ipu.dialects import tile as tl
from ipu.passes.memory_alloc import align_up
from ipu.runtime.package import Segment


class PlacementError(ValueError):
    pass


class StorageOverflow(PlacementError):
    """The lowering's own storage (code, frames and tables, scratch) outgrew memory-plan's reservations:
    `lowering-storage` measured it on a provisional plan, and the final plan's addresses needed more.
    `compile_model` re-plans with the final plan's measurement (`lower_fitting`)."""


@dataclass(frozen=True)
class Placed:
    """A value's placement on every tile: start address (-1: the tile holds nothing), and for a Repeat
    sequence (stacked parameter) the byte stride between members."""

    addr: np.ndarray  # int64 [tiles]
    stride: np.ndarray  # int64 [tiles] (0 unless a sequence)
    seq: int = 1


class Addresses:
    def __init__(self, f: func.FuncOp, num_tiles: int):
        # Memo of `of` per (value, iteration) and of `_expand` per buffer attribute (the op lowerings ask for the
        # same values once per tile): the arrays are shared, so they are read-only.
        self._memo: dict[tuple[SSAValue, int], Placed] = {}
        self._expanded: dict[int, tuple[mem.BufferAttr, Placed]] = {}
        self.plan = next((o for o in f.body.block.ops if isinstance(o, mem.PlanOp)), None)
        if self.plan is None:
            raise PlacementError(f"@{f.sym_name.data}: no memory.plan: run memory-plan first")
        self.num_tiles = num_tiles
        self.tile_class = self.plan.tile_class()
        self.nc = self.plan.num_classes.value.data
        self.reserves = {
            o.kind.data: self._expand(o.buffer) for o in f.body.block.ops if isinstance(o, mem.ReserveOp)
        }
        # Bytes of each reservation (the largest member over the classes): where the lowering's data ends.
        self.reserve_bytes = {
            o.kind.data: int(mem.table_values(o.buffer.bytes_, self.nc).max(initial=0))
            for o in f.body.block.ops
            if isinstance(o, mem.ReserveOp)
        }
        self.high = int(self.plan.class_high().max(initial=0))
        self.timed_scratch = _timed_scratch(f, self.plan)
        # Lowering a tile.repeat body for one iteration: stacked block arguments give that iteration's member;
        # `override` relocates values (host-bound values inside a repeat body live in per-iteration storage).
        self.iteration = 0
        self.override: dict[SSAValue, Placed] = {}

    def _expand(self, b: mem.BufferAttr) -> Placed:
        hit = self._expanded.get(id(b))
        if hit is not None and hit[0] is b:
            return hit[1]
        p = self._expand_uncached(b)
        self._expanded[id(b)] = (b, p)  # holds b: its id is not reused while cached
        return p

    def _expand_uncached(self, b: mem.BufferAttr) -> Placed:
        addr = mem.table_values(b.addr, self.nc)[self.tile_class]
        member = mem.table_values(b.bytes_, self.nc)[self.tile_class]
        stride = mem.table_values(b.stride, self.nc)[self.tile_class] if b.seq.data > 1 else member * 0
        addr = np.where(member > 0, addr, -1)
        return _frozen(Placed(addr.astype(np.int64), stride.astype(np.int64), b.seq.data))

    def of(self, v: SSAValue) -> Placed:
        if v in self.override:
            return self.override[v]
        key = (v, self.iteration)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._memo[key] = _frozen(self._of(v))
        return hit

    def _of(self, v: SSAValue) -> Placed:
        if isinstance(v, BlockArgument):
            rep = v.owner.parent_op()
            if not isinstance(rep, tl.RepeatOp):
                raise PlacementError(f"block argument #{v.index} outside a tile.repeat has no placement")
            nc = len(rep.carried)
            if v.index < nc:
                bufs = mem.buffers_of(rep.attributes.get(mem.ARGS_ATTR))
                return self._expand(bufs[v.index])
            p = self.of(rep.stacked[v.index - nc])
            if self.iteration:
                addr = np.where(p.addr >= 0, p.addr + self.iteration * p.stride, -1)
                return Placed(addr, p.stride, p.seq)
            return p
        op = v.owner
        assert isinstance(op, Operation)
        plan = op.attributes.get(tl.PLAN_ATTR)
        if isinstance(plan, tl.MapPlanAttr) and plan.get("kind") == "view":
            return self.of(op.operands[0])
        bufs = mem.buffers_of(op.attributes.get(mem.BUFFERS_ATTR))
        if not bufs:
            raise PlacementError(f"{op.name}: result #{v.index} has no memory.buffers (not placed)")
        return self._expand(bufs[v.index])


def scratch_elements(target: Target) -> tuple[int, int, int]:
    """Addresses of the C, A and aux scratch elements: the top three region-1 elements of SRAM, C the highest
    (the lowering's `DataImage` takes them from the top in that order; memory-plan reserves them per op).
    With fewer than three whole elements (`scratch_target_problem`) the lower ones lie in region 0: memory-plan
    still plans such targets; the lowering refuses them."""
    e = target.region1_element_bytes
    top = target.region1_base + (target.sram_end - target.region1_base) // e * e
    return (top - e, top - 2 * e, top - 3 * e)


def scratch_target_problem(target: Target) -> str | None:
    """Why the lowering cannot use this target, or None: its kernels' C, A and aux scratch are three whole
    interleaved (region-1) elements (a GEMM reads A and writes C in different elements), so the SRAM must
    reach three elements past the region's start."""
    e = target.region1_element_bytes
    have = max(0, (target.sram_end - target.region1_base) // e)
    if have >= 3:
        return None
    need_kib = (target.region1_base + 3 * e - target.sram_base) // 1024
    return (
        f"target {target.name}: its {target.sram_bytes // 1024} KiB of SRAM per tile hold {have} whole interleaved "
        f"(region-1) element(s) of {e // 1024} KiB above {target.region1_base:#x}; the kernels' C, A and aux "
        f"scratch need 3: a target with at least {need_kib} KiB per tile (sram_kib={need_kib})"
    )


def _timed_scratch(f: func.FuncOp, plan: mem.PlanOp) -> dict[int, list[int]] | None:
    """event -> bytes of the C, A and aux elements memory-plan reserved there (`memory.reserve "kernel_scratch"`,
    one per area and span of events), or None when the plan reserves the scratch for the whole program."""
    ops = [o for o in f.body.block.ops if isinstance(o, mem.ReserveOp) and o.kind.data == "kernel_scratch"]
    if not ops:
        return None
    base, r1, end = (x.value.data for x in plan.sram.data)
    from ipu.passes.tile_plan import target_for

    areas = scratch_elements(target_for(plan.tiles.value.data, (end - base) // 1024))
    nc = plan.num_classes.value.data
    out: dict[int, list[int]] = {}
    for o in ops:
        b = o.buffer
        addr = int(mem.table_values(b.addr, nc).max())
        nbytes = int(mem.table_values(b.bytes_, nc).max())
        if addr not in areas:
            raise PlacementError(
                f'memory.reserve "kernel_scratch" at {addr:#x}: not a scratch element {areas}'
            )
        first, last = (x.data for x in b.live.data)
        for e in range(first, last + 1):
            use = out.setdefault(e, [0, 0, 0])
            use[areas.index(addr)] = max(use[areas.index(addr)], nbytes)
    return out


def _frozen(p: Placed) -> Placed:
    for a in (p.addr, p.stride):
        a.flags.writeable = False
    return p


class DataImage:
    """The lowering's per-tile storage: bump allocation in address ranges, contents as segments.

    "low" (frames and tables) grows up from the start of its range and spills into "high" when full. "high" holds
    small data growing up from its start and whole region-1 elements (the C / A / aux scratch) taken from the top
    of SRAM down, so that its bytes are `elements * element + small` with no alignment gap between the two.

    With `measure`, nothing fails: an allocation past its range gets an address inside it again (the contents are
    discarded), and `need()` gives the bytes each range would have needed (the `lowering-storage` pass sizes
    memory-plan's reservations by it)."""

    def __init__(
        self,
        target: Target,
        low_ranges: list[tuple[int, int]],
        high_start: int,
        measure: bool = False,
        high_end: int | None = None,
    ):
        self.target = target
        self.measure = measure
        high_start = -(-high_start // 16) * 16  # the small data's alignment never depends on the plan's mark
        # high_end: the end of memory-plan's lowering_scratch reservation, which need not be at the top of SRAM
        # (memory-plan may put it below the exchange tables in region 0); the elements still come from the top.
        end = target.sram_end if high_end is None else min(int(high_end), target.sram_end)
        self.ranges = {
            "low": [list(r) for r in low_ranges if r[1] > r[0]],
            "high": [[high_start, end]] if end > high_start else [],
        }
        if measure:
            # A window for each range even when the provisional plan left none: its cursor counts the need.
            for kind, window in (
                ("low", [target.region0[1] - 4096, target.region0[1]]),
                ("high", [target.sram_end - 4096, target.sram_end]),
            ):
                if not self.ranges[kind]:
                    self.ranges[kind] = [window]
        self.start = {k: [r[0] for r in v] for k, v in self.ranges.items()}
        self.high_start = high_start if end > high_start else end
        self.top = target.sram_end  # the lowest element taken from the top
        self.segments: list[Segment] = []
        self.used = {"low": 0, "high": 0}
        # What each allocation holds, for the memory map (`contents`): the operator being lowered (`owner`, set
        # by the walk) and the allocation's kind.
        self.owner = ""
        self.log: list[tuple[str, str, int, int]] = []  # (owner, what, address, bytes)
        # Op scopes (`enter` / `leave`): the data of the op being lowered goes into that op's own buffers, which
        # memory-plan placed from `lowering-storage`'s per-op measurement (`memory.lowering_frames` / `_data`).
        # Measuring, each op's need is counted on its own cursor from 0 (`op_need`), and the function-level
        # data's (no scope: the zero constant, loop patch tables) on `fn_need`.
        self.scope: int | None = None  # the op's key (its event number)
        self.scope_ranges: dict[str, list[int] | None] = {"low": None, "high": None}
        self.scope_used = {"low": 0, "high": 0}
        self.op_need: dict[int, list[int]] = {}  # key -> [low, high] bytes
        self.fn_need = {"low": 0, "high": 0}

    def enter(
        self, key: int | None, frames: tuple[int, int] | None = None, data: tuple[int, int] | None = None
    ):
        """Opens the scope of op `key` (None: function-level data): its allocations go into [start, end) of its
        frames ("low") and data ("high") buffers, from their starts, and spill into the function's ranges when a
        buffer is full or absent (then the map's contents show them there). Returns what `leave` restores."""
        saved = (self.scope, self.scope_ranges, self.scope_used)
        self.scope = key
        self.scope_ranges = {"low": list(frames) if frames else None, "high": list(data) if data else None}
        self.scope_used = {"low": 0, "high": 0}
        return saved

    def leave(self, saved) -> None:
        self.scope, self.scope_ranges, self.scope_used = saved

    def _count(self, nbytes: int, align: int, where: str) -> None:
        """Measuring: the need of the current scope (an op's, or the function's)."""
        if self.scope is None:
            self.fn_need[where] = align_up(self.fn_need[where], align) + nbytes
            return
        used = self.scope_used[where] = align_up(self.scope_used[where], align) + nbytes
        need = self.op_need.setdefault(self.scope, [0, 0])
        i = 0 if where == "low" else 1
        # An op lowered more than once (a loop's sampled iterations): the largest.
        need[i] = max(need[i], used)

    def _element_floor(self, a: int) -> int:
        t = self.target
        e = t.region1_element_bytes
        return t.region1_base + (a - t.region1_base) // e * e

    def alloc(
        self,
        nbytes: int,
        align: int = 8,
        where: str = "low",
        region1: bool = False,
        what: str = "data",
        element: bool = False,
    ) -> int:
        """An address (the same on every tile) for nbytes; "low" spills into "high" when full. `element`: whole
        region-1 elements (the kernels' scratch) from the top of SRAM down (element aligned), outside every
        scope. `what` names the contents for the memory map (with the walk's current `owner`)."""
        n = max(int(nbytes), 1)
        if element and (where != "high" or n % self.target.region1_element_bytes):
            raise ValueError(f"{what}: {n} B in {where!r} is not whole scratch elements")
        if self.measure and not element:
            self._count(n, align, where)
        r = self.scope_ranges[where] if self.scope is not None and not element else None
        a = align_up(r[0], align) if r else -1
        if r and a + n <= r[1] and not self.measure:
            r[0] = a + n
            self.used[where] += n
        else:
            a = self._alloc(n, align, where, region1, element)
        self.log.append((self.owner, what, a, n))
        return a

    def contents(self) -> list[dict]:
        """The allocations grouped by (owner, what): count, bytes and the address range they span."""
        groups: dict[tuple[str, str], list[int]] = {}
        for owner, what, a, n in self.log:
            g = groups.setdefault((owner, what), [0, 0, a, a + n])
            g[0] += 1
            g[1] += n
            g[2], g[3] = min(g[2], a), max(g[3], a + n)
        return [
            {"owner": o, "what": w, "count": c, "bytes": b, "lo": lo, "hi": hi}
            for (o, w), (c, b, lo, hi) in groups.items()
        ]

    def _alloc(self, nbytes: int, align: int, where: str, region1: bool, element: bool) -> int:
        t = self.target
        if element and t.region1[1] > t.region1[0]:
            a = self._element_floor(self.top - nbytes)
            # Down to the small data's cursor (or the start of its empty range: a lowering_scratch reservation of 0
            # bytes when the ops' own buffers hold all of it).
            floor = max(
                t.region1_base, self.ranges["high"][-1][0] if self.ranges["high"] else self.high_start
            )
            if a >= floor or self.measure:
                self.top = a
                if self.ranges["high"]:
                    self.ranges["high"][-1][1] = min(self.ranges["high"][-1][1], a)
                self.used["high"] += nbytes
                return a if a >= t.region1_base else self._element_floor(t.sram_end - nbytes)
            self._fail(nbytes, where)
        for kind in [where, "high"] if where == "low" and not self.measure else [where]:
            for r in self.ranges[kind]:
                a = (r[0] + align - 1) // align * align
                if region1:
                    a = max(a, t.region1_base)
                if a + nbytes <= r[1]:
                    r[0] = a + nbytes
                    self.used[kind] += nbytes
                    return a
        if not self.measure:
            self._fail(nbytes, where)
        # Measuring: the cursor runs on past the range (need() counts it); an address inside the range (or at the
        # top of SRAM) keeps the lowering's own checks meaningful.
        r = self.ranges[where][-1]
        a = (r[0] + align - 1) // align * align
        r[0] = a + nbytes
        self.used[where] += nbytes
        lo = self.start[where][-1]
        hi = r[1] if r[1] > lo else t.sram_end
        return lo + (a - lo) % max(hi - lo - nbytes, align) // align * align

    def need(self) -> dict[str, int]:
        """Bytes each range needs (measure mode): low from its start, high's small data, high's elements."""
        low = sum(r[0] - s for r, s in zip(self.ranges["low"], self.start["low"]))
        small = sum(r[0] - s for r, s in zip(self.ranges["high"], self.start["high"]))
        return {
            "low": int(low),
            "high_small": int(small),
            "high_elements": int(self.target.sram_end - self.top),
        }

    def _fail(self, nbytes: int, where: str):
        raise StorageOverflow(
            f"the lowering's data ({nbytes} more bytes, {where}) does not fit: {self.used} bytes used above the "
            "memory plan; the lowering-storage pass sizes memory-plan's reservations (run it after any edit of the "
            "kernel choices), or give the target more SRAM"
        )

    def put(self, name: str, addr: int, rows: np.ndarray, tiles: np.ndarray | None = None) -> None:
        """Contents at addr: rows uint8-viewable [1 or tiles, bytes] (one row: every tile)."""
        data = np.ascontiguousarray(rows)
        if data.ndim == 1:
            data = data.reshape(1, -1)
        data = data.view(np.uint8).reshape(data.shape[0], -1)
        self.segments.append(Segment(name, int(addr), data, tiles))
