"""Tile-memory allocator: addresses for every buffer on every tile (numpy + Python, no xDSL).

The problem (`Problem`) is stated per buffer, never per tile: a buffer (`Buffer`) is one operator's tensor (or a
support reservation) with its constraints, and `sizes[b, t]` gives its bytes on tile t (0: not on that tile).
Constraints of a buffer:

- alignment, and the region it must lie in: region 0 (non-interleaved, executable), region 1 (interleaved) or
  any (but never straddling the region boundary: the access instructions differ on each side);
- lifetime: first and last event, inclusive (events number the program points: supersteps and operators);
  `resident` buffers (parameters) live for the whole program, over every inference;
- Repeat sequences: `count` members of `sizes[b, t]` bytes each, contiguous with a fixed `stride` (the loop
  advances a pointer by the stride), allocated as one span;
- `host_io`: inputs, outputs and parameters may not borrow the host exchange aperture, which transient buffers
  may use between host phases (the aperture is reserved at `Problem.host_events`);
- `fixed`: a pre-placed address (support reservations: code, exchange tables, runtime state, descriptors);
- pairwise constraints `pairs[i] = (a, b)`: a and b must not share a memory element (an instruction loads one
  and stores the other in the same cycle). Only the pairs listed are separated; other buffers may share the
  elements of a constrained one (seed 000, "Pairwise element constraints").

Tiles whose columns of `sizes` are identical form a class and are allocated once (`np.unique` over columns):
at full size most tiles of an operator do the same work, so there are few classes.

Per class the allocation is chronological (linear scan over events): buffers are freed after their last event
and allocated at their first one from a sorted free list of holes; the chosen hole is the best fit (smallest
segment that fits after subtracting forbidden ranges), transient buffers at its low end and resident ones at its
high end, so that long-lived data gathers at the top and short-lived data at the bottom. Cost per class is
O(n log n + n * holes), never a scan over all pairs of allocations. Fixed reservations alive for the whole program
are carved out of the free list up front; those alive only at some events (the aperture at host events) are
forbidden ranges for requests whose lifetime overlaps them.

A class whose chronological scan fails is placed again offline, greedy by size (`run_by_size`: largest spans
first, each at the lowest address free over its lifetime), which avoids the scan's fragmentation when a big buffer
arrives late (So400m's per-head K and V at the attention), and if that fails once more with the resident buffers
at the highest free address (packed against the top, the transients' holes below kept whole); quadratic per
class, so only for classes that failed.
When a buffer does not fit, `PlacementError` names the tile (and its class), the event, the request, the live
buffers at that point with sizes and owners, the free bytes and the largest hole of the region, and carries the
partial placement (everything placed before the failure) for a memory map up to that point.
"""

from __future__ import annotations

import bisect
import heapq
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ipu.backend.target import Target

REGION_ANY, REGION_0, REGION_1 = -1, 0, 1
REGION_NAMES = {REGION_ANY: "any", REGION_0: "region 0", REGION_1: "region 1"}


# Live buffers named in a placement failure (largest first); IPU_MEMORY_LIVE_SHOWN=N shows more when debugging.
LIVE_SHOWN = int(os.environ.get("IPU_MEMORY_LIVE_SHOWN", "8"))


@dataclass(frozen=True)
class Buffer:
    """One buffer (per operator, not per tile); its per-tile bytes are a column of `Problem.sizes`."""

    name: str
    owner: str = ""
    align: int = 8
    region: int = REGION_ANY
    first: int = 0
    last: int = 0
    resident: bool = False
    host_io: bool = False
    count: int = 1
    stride: int = 0  # bytes between sequence members; 0: member bytes rounded up to `align`
    fixed: int = -1  # pre-placed address; -1: let the allocator choose
    kind: str = "tensor"  # "tensor" or a support kind ("code", "exchange_tables", ...)


@dataclass
class Problem:
    target: Target
    buffers: list[Buffer]
    sizes: np.ndarray  # [buffers, tiles] member bytes, 0 where the tile does not hold the buffer
    events: int
    pairs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))  # [P, 2] buffer indices
    host_events: tuple[int, ...] = ()  # events at which the host aperture carries host traffic
    event_names: Sequence[str] = ()  # optional labels for diagnostics

    def lifetime(self, b: int) -> tuple[int, int]:
        buf = self.buffers[b]
        return (0, self.events - 1) if buf.resident else (buf.first, buf.last)

    def event_label(self, e: int) -> str:
        return f"event {e}" + (f" ({self.event_names[e]})" if e < len(self.event_names) else "")


@dataclass
class Placement:
    """Addresses per buffer and tile class; `addresses()` expands to [buffers, tiles] (-1: absent/unplaced)."""

    tile_class: np.ndarray  # [tiles] class index of each tile
    class_addr: np.ndarray  # [buffers, classes] start address (of the first member for sequences)
    class_span: np.ndarray  # [buffers, classes] bytes occupied (whole sequence span), 0 where absent
    class_high: np.ndarray  # [classes] one past the highest address any buffer uses

    @property
    def num_classes(self) -> int:
        return self.class_addr.shape[1]

    def addresses(self) -> np.ndarray:
        return self.class_addr[:, self.tile_class]

    def spans(self) -> np.ndarray:
        return self.class_span[:, self.tile_class]


class PlacementError(Exception):
    """A buffer does not fit; `placement` holds every address assigned before the failure."""

    def __init__(
        self,
        message: str,
        tile: int,
        event: int,
        buffer: int,
        placement: Placement,
        request: int = 0,
        free: int = 0,
    ):
        super().__init__(message)
        self.tile, self.event, self.buffer, self.placement = tile, event, buffer, placement
        self.request, self.free = request, free  # bytes asked for, usable free bytes of its region then


def align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def align_down(x: int, a: int) -> int:
    return x // a * a


def stride_of(buf: Buffer, member: int) -> int:
    return buf.stride or align_up(member, buf.align)


def span_of(buf: Buffer, member: int) -> int:
    """Bytes a buffer occupies: all members of a sequence at the fixed stride."""
    return stride_of(buf, member) * (buf.count - 1) + member if member else 0


def tile_classes(sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(class of each tile, a representative tile of each class): tiles with identical size columns."""
    if sizes.shape[1] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    _, first, inverse = np.unique(sizes.T, axis=0, return_index=True, return_inverse=True)
    # Number classes by their lowest tile, so that class 0 holds tile 0 and failures name low tiles first.
    order = np.argsort(first, kind="stable")
    relabel = np.empty_like(order)
    relabel[order] = np.arange(len(order))
    return relabel[inverse.reshape(-1)].astype(np.int64), first[order].astype(np.int64)


class _Elements:
    """Memory-element boundaries of a target: 16 KiB elements in region 0, 32 KiB (bank pairs) in region 1."""

    def __init__(self, target: Target):
        self.base, self.r1, self.end = target.sram_base, target.region1_base, target.sram_end
        self.e0, self.e1 = target.region0_element_bytes, target.region1_element_bytes

    def floor(self, a: int) -> int:
        if a < self.r1:
            return self.base + align_down(a - self.base, self.e0)
        return self.r1 + align_down(a - self.r1, self.e1)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """[first element start, last element end) covering [start, end)."""
        last = self.floor(end - 1)
        return self.floor(start), last + (self.e0 if last < self.r1 else self.e1)


def _subtract(lo: int, hi: int, forbidden: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """[lo, hi) minus the sorted, possibly overlapping ranges in `forbidden`."""
    out, cur = [], lo
    for f0, f1 in forbidden:
        if f1 <= cur:
            continue
        if f0 >= hi:
            break
        if f0 > cur:
            out.append((cur, f0))
        cur = max(cur, f1)
    if cur < hi:
        out.append((cur, hi))
    return out


class _FreeList:
    """Sorted disjoint holes [start, end); holes never straddle the region boundary."""

    def __init__(self, lo: int, hi: int, boundary: int):
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.boundary = boundary
        for a, b in ((lo, min(hi, boundary)), (max(lo, boundary), hi)):
            if a < b:
                self.starts.append(a)
                self.ends.append(b)

    def take(self, start: int, end: int) -> None:
        i = bisect.bisect_right(self.starts, start) - 1
        h0, h1 = self.starts[i], self.ends[i]
        assert h0 <= start and end <= h1, "allocation outside a hole"
        pieces = [(a, b) for a, b in ((h0, start), (end, h1)) if a < b]
        self.starts[i : i + 1] = [a for a, _ in pieces]
        self.ends[i : i + 1] = [b for _, b in pieces]

    def carve(self, start: int, end: int) -> None:
        """Removes [start, end) wherever it is free (fixed reservations may cover several holes)."""
        i = max(0, bisect.bisect_right(self.starts, start) - 1)
        while i < len(self.starts) and self.starts[i] < end:
            a, b = max(self.starts[i], start), min(self.ends[i], end)
            if a < b:
                self.take(a, b)
                i = max(0, bisect.bisect_right(self.starts, start) - 1)
                continue
            i += 1

    def give(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        if i > 0 and self.ends[i - 1] == start and start != self.boundary:
            i -= 1
            start = self.starts[i]
            del self.starts[i], self.ends[i]
        if i < len(self.starts) and self.starts[i] == end and end != self.boundary:
            end = self.ends[i]
            del self.starts[i], self.ends[i]
        self.starts.insert(i, start)
        self.ends.insert(i, end)

    def holes_in(self, lo: int, hi: int):
        i = max(0, bisect.bisect_right(self.starts, lo) - 1)
        while i < len(self.starts) and self.starts[i] < hi:
            a, b = max(self.starts[i], lo), min(self.ends[i], hi)
            if a < b:
                yield a, b
            i += 1


def region_range(target: Target, region: int) -> tuple[int, int]:
    if region == REGION_0:
        return target.region0
    if region == REGION_1:
        return target.region1
    return (target.sram_base, target.sram_end)


def _fmt_bytes(n: int) -> str:
    return f"{n} B"


class _ClassAllocator:
    """Allocation of one tile class (all buffers of its representative tile)."""

    def __init__(self, problem: Problem, tile: int, members: np.ndarray, partners: dict[int, list[int]]):
        self.p, self.tile, self.partners = problem, tile, partners
        t = problem.target
        self.elements = _Elements(t)
        self.free = _FreeList(t.sram_base, t.sram_end, t.region1_base)
        self.member = problem.sizes[:, tile].astype(np.int64)
        self.fixed_ok = False  # set once the fixed reservations are in: later failures are about room
        self.addr = np.full(len(problem.buffers), -1, np.int64)
        self.span = np.zeros(len(problem.buffers), np.int64)
        self.members = members
        # Reservations alive at some events only: (first, last, start, end).
        self.timed: list[tuple[int, int, int, int]] = []
        ap0, ap1 = t.host_aperture
        self.aperture = (max(ap0, t.sram_base), min(ap1, t.sram_end))
        if self.aperture[0] < self.aperture[1]:
            for e in problem.host_events:
                self.timed.append((e, e, *self.aperture))

    # -- failure -----------------------------------------------------------------------------------------------
    def fail(self, b: int, event: int, why: str, region: tuple[int, int], placement: Placement, n_tiles: int):
        p, buf = self.p, self.p.buffers[b]
        f, last = p.lifetime(b)
        placed = np.nonzero(self.addr >= 0)[0]
        live = [int(x) for x in placed if p.lifetime(int(x))[0] <= event <= p.lifetime(int(x))[1]]
        live.sort(key=lambda x: -int(self.span[x]))
        shown = ", ".join(
            f"{p.buffers[x].name} ({p.buffers[x].owner or p.buffers[x].kind}, {int(self.span[x])} B "
            f"at {int(self.addr[x]):#x})"
            for x in live[:LIVE_SHOWN]
        )
        more = f" and {len(live) - LIVE_SHOWN} more" if len(live) > LIVE_SHOWN else ""
        # Free space this request could use: holes of its region minus its forbidden ranges (aperture at host
        # events, elements of live pairwise partners).
        forbidden = self.forbidden(b, f, last)
        holes = [seg for h0, h1 in self.free.holes_in(*region) for seg in _subtract(h0, h1, forbidden)]
        free = sum(h1 - h0 for h0, h1 in holes)
        big = max(holes, key=lambda h: h[1] - h[0], default=(region[0], region[0]))
        seq = f", sequence of {buf.count} x {int(self.member[b])} B stride {stride_of(buf, int(self.member[b]))}"
        msg = (
            f"tile {self.tile}"
            + (f" (and {n_tiles - 1} other tiles of its class)" if n_tiles > 1 else "")
            + f", {p.event_label(event)}: cannot place '{buf.name}'"
            + (f" of {buf.owner}" if buf.owner else "")
            + f" ({int(self.span[b]) or span_of(buf, int(self.member[b]))} B, align {buf.align}, "
            + f"{REGION_NAMES[buf.region]}, live [{f}, {last}]{seq if buf.count > 1 else ''}"
            + (", resident" if buf.resident else "")
            + f"): {why}; live: {shown or 'nothing'}{more} ({sum(int(self.span[x]) for x in live)} B); "
            + f"usable free in [{region[0]:#x}, {region[1]:#x}): {free} B, largest hole {big[1] - big[0]} B at {big[0]:#x}"
        )
        request = int(self.span[b]) or span_of(buf, int(self.member[b]))
        return PlacementError(msg, self.tile, event, b, placement, request, free)

    # -- allocation --------------------------------------------------------------------------------------------
    def forbidden(self, b: int, f: int, last: int) -> list[tuple[int, int]]:
        out = [(s, e) for (tf, tlast, s, e) in self.timed if tf <= last and f <= tlast]
        buf = self.p.buffers[b]
        if buf.host_io or buf.resident:
            out.append(self.aperture)
        for q in self.partners.get(b, ()):
            if self.addr[q] >= 0:
                qf, ql = self.p.lifetime(q)
                if qf <= last and f <= ql:
                    out.append(self.elements.span(int(self.addr[q]), int(self.addr[q] + self.span[q])))
        out.sort()
        return out

    def choose(self, b: int, span: int, f: int, last: int, lo: int, hi: int) -> int:
        """Best fit: the smallest allowed segment that holds the aligned span; -1 if none."""
        buf = self.p.buffers[b]
        forbidden = self.forbidden(b, f, last)
        best, best_len = -1, None
        for h0, h1 in self.free.holes_in(lo, hi):
            for s0, s1 in _subtract(h0, h1, forbidden) if forbidden else ((h0, h1),):
                if buf.resident:
                    a = align_down(s1 - span, buf.align)
                    ok = a >= s0
                else:
                    a = align_up(s0, buf.align)
                    ok = a + span <= s1
                if ok and (best_len is None or s1 - s0 < best_len):
                    best, best_len = a, s1 - s0
        return best

    def run(self, placement_of_failure) -> None:
        p = self.p
        t = p.target
        order = []
        for b in self.members:
            b = int(b)
            buf = p.buffers[b]
            self.span[b] = span_of(buf, int(self.member[b]))
            f, _ = p.lifetime(b)
            # Fixed first, then at each event: resident, sequences, larger spans first.
            order.append((f, 0 if buf.fixed >= 0 else 1, 0 if buf.resident else 1, -int(self.span[b]), b))
        order.sort()
        # Fixed reservations: whole-program ones leave the free list, the others are timed forbidden ranges.
        for _, not_fixed, _, _, b in order:
            if not_fixed:
                continue
            buf, a, s = p.buffers[b], p.buffers[b].fixed, int(self.span[b])
            f, last = p.lifetime(b)
            if not t.in_sram(a, s):
                raise self.fail(
                    b, f, f"fixed address {a:#x} is outside the SRAM", t.region0, placement_of_failure(), 1
                )
            for q in np.nonzero(self.addr >= 0)[0]:
                qf, ql = p.lifetime(int(q))
                if qf <= last and f <= ql and self.addr[q] < a + s and a < self.addr[q] + self.span[q]:
                    raise self.fail(
                        b,
                        f,
                        f"fixed range overlaps '{p.buffers[int(q)].name}'",
                        (a, a + s),
                        placement_of_failure(),
                        1,
                    )
            self.addr[b] = a
            if f == 0 and last == p.events - 1:
                self.free.carve(a, a + s)
            else:
                self.timed.append((f, last, a, a + s))
        self.fixed_ok = True  # a failure from here on is about room, which `run_by_size` may still find
        ends: list[tuple[int, int]] = []  # heap of (last event, buffer) of placed, freeable buffers
        for f, not_fixed, _, _, b in order:
            if not not_fixed:
                continue
            while ends and ends[0][0] < f:
                _, q = heapq.heappop(ends)
                self.free.give(int(self.addr[q]), int(self.addr[q] + self.span[q]))
            buf = p.buffers[b]
            _, last = p.lifetime(b)
            lo, hi = region_range(t, buf.region)
            a = -1
            if buf.resident and buf.region == REGION_ANY:
                # Resident data prefers the non-interleaved region: interleaved memory is what the buffers that
                # need ld128 (region 1 requests) compete for.
                a = self.choose(b, int(self.span[b]), f, last, *t.region0)
            if a < 0 and lo < hi:
                a = self.choose(b, int(self.span[b]), f, last, lo, hi)
            if a < 0:
                why = "no hole fits" if lo < hi else "the target has no such region"
                raise self.fail(b, f, why, (lo, hi), placement_of_failure(), 1)
            self.addr[b] = a
            self.free.take(a, a + int(self.span[b]))
            heapq.heappush(ends, (last, b))

    def run_by_size(self, residents_high: bool = False) -> bool:
        """The fallback when the chronological scan fails: offline greedy by size. Largest spans first (fixed
        reservations as given), each at the lowest aligned address of its region that no buffer placed so far
        occupies during its lifetime, outside its forbidden ranges (aperture, partners' elements). A big late
        buffer then gets its span before the small buffers of earlier events fragment it. residents_high: resident
        buffers at the highest such address instead, so that they pack against the top of SRAM and the reservations
        there and the transients keep the low holes whole (So400m at 27 layers: the attention's K and V of 52 KB
        each beside five resident sequences of 62 KB). Returns False if some buffer still does not fit. O(n^2)
        numpy work per class, and only for classes that failed."""
        p, t = self.p, self.p.target
        members = [int(b) for b in self.members]
        pa, pe, pf, pl = (np.zeros(len(members), np.int64) for _ in range(4))  # placed: span, lifetime
        k = 0
        self.addr[:] = -1
        order = []
        for b in members:
            buf = p.buffers[b]
            self.span[b] = span_of(buf, int(self.member[b]))
            if buf.fixed >= 0:
                self.addr[b] = buf.fixed
                pa[k], pe[k] = buf.fixed, buf.fixed + int(self.span[b])
                pf[k], pl[k] = p.lifetime(b)
                k += 1
            else:
                order.append((-int(self.span[b]), p.lifetime(b)[0], b))
        order.sort()
        r0, r1 = region_range(t, REGION_0), region_range(t, REGION_1)
        for _, f, b in order:
            buf = p.buffers[b]
            _, last = p.lifetime(b)
            span = int(self.span[b])
            live = (pf[:k] <= last) & (f <= pl[:k])
            starts, ends = list(pa[:k][live]), list(pe[:k][live])
            for q0, q1 in self.forbidden(b, f, last):
                starts.append(q0)
                ends.append(q1)
            ranges = {REGION_0: [r0], REGION_1: [r1]}.get(buf.region, [r0, r1])
            a = _lowest_gap(
                np.array(starts, np.int64), np.array(ends, np.int64), ranges, span, buf.align,
                highest=residents_high and buf.resident,
            )  # fmt: skip
            if a < 0:
                return False
            self.addr[b] = a
            pa[k], pe[k], pf[k], pl[k] = a, a + span, f, last
            k += 1
        return True


def _lowest_gap(
    starts: np.ndarray, ends: np.ndarray, ranges, span: int, align: int, highest: bool = False
) -> int:
    """The lowest address a (a multiple of align) inside one of `ranges` with [a, a + span) clear of every
    [starts[i], ends[i]); with highest, the highest such address (ranges tried from the last); -1 if there is
    none."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    covered = np.maximum.accumulate(e) if len(e) else e  # end of everything up to interval i
    for lo, hi in reversed(ranges) if highest else ranges:
        if hi - lo < span:
            continue
        gap_lo = np.maximum(np.concatenate(([lo], covered)), lo)
        gap_hi = np.minimum(np.concatenate((s, [hi])), hi)
        if highest:
            a = (gap_hi - span) // align * align
            ok = np.nonzero((a >= gap_lo) & (a + span <= gap_hi))[0]
            if len(ok):
                return int(a[ok].max())
            continue
        a = (gap_lo + align - 1) // align * align
        ok = np.nonzero(a + span <= gap_hi)[0]
        if len(ok):
            return int(a[ok[0]])
    return -1


def allocate(problem: Problem, fullest_first: bool = False) -> Placement:
    """Addresses for every buffer on every tile; raises PlacementError when a buffer does not fit.

    Tile classes are independent problems, placed in class order; with `fullest_first` in order of decreasing
    resident bytes (what no transient can reuse), so that a problem that does not fit fails early, usually on
    one of its fullest classes. The placement is the same either way; a failure may name another class."""
    sizes = np.asarray(problem.sizes, dtype=np.int64)
    nb = len(problem.buffers)
    if sizes.shape[0] != nb:
        raise ValueError(f"sizes has {sizes.shape[0]} rows for {nb} buffers")
    for i, buf in enumerate(problem.buffers):
        if buf.align <= 0 or buf.align & (buf.align - 1):
            raise ValueError(f"buffer '{buf.name}': alignment {buf.align} is not a power of two")
        if buf.count < 1 or (buf.stride and buf.stride < int(sizes[i].max(initial=0))):
            raise ValueError(f"buffer '{buf.name}': sequence stride {buf.stride} below its member size")
        f, last = problem.lifetime(i)
        if not (0 <= f <= last < problem.events):
            raise ValueError(
                f"buffer '{buf.name}': lifetime [{f}, {last}] outside events [0, {problem.events})"
            )
    tile_class, reps = tile_classes(sizes)
    nc = len(reps)
    partners: dict[int, list[int]] = {}
    for a, b in np.asarray(problem.pairs, np.int64).reshape(-1, 2):
        if a != b:
            partners.setdefault(int(a), []).append(int(b))
            partners.setdefault(int(b), []).append(int(a))
    placement = Placement(
        tile_class, np.full((nb, nc), -1, np.int64), np.zeros((nb, nc), np.int64), np.zeros(nc, np.int64)
    )
    class_sizes = np.bincount(tile_class, minlength=nc)
    order = range(nc)
    if fullest_first:
        resident = np.asarray([b.count if b.resident else 0 for b in problem.buffers], np.int64)
        rep_bytes = sizes[:, reps] * resident[:, None]
        order = np.argsort(-rep_bytes.sum(axis=0), kind="stable").tolist()
    for c in order:
        rep = int(reps[c])
        members = np.nonzero(sizes[:, rep] > 0)[0]
        alloc = _ClassAllocator(problem, rep, members, partners)

        def partial(alloc=alloc, c=c) -> Placement:
            placement.class_addr[:, c] = alloc.addr
            placement.class_span[:, c] = np.where(alloc.addr >= 0, alloc.span, 0)
            return placement

        try:
            try:
                alloc.run(partial)
            except PlacementError as first_err:
                if not alloc.fixed_ok:
                    raise
                # Offline by size: transients and residents from the bottom, else residents from the top.
                for residents_high in (False, True):
                    alloc = _ClassAllocator(problem, rep, members, partners)
                    if alloc.run_by_size(residents_high):
                        break
                else:
                    raise first_err from None
        except PlacementError as err:
            # Re-word with the class size now that it is known.
            n = int(class_sizes[c])
            if n > 1:
                msg = str(err).replace(
                    f"tile {rep},", f"tile {rep} (and {n - 1} other tiles of its class),", 1
                )
                raise PlacementError(
                    msg, err.tile, err.event, err.buffer, err.placement, err.request, err.free
                ) from None
            raise
        placement.class_addr[:, c] = alloc.addr
        placement.class_span[:, c] = np.where(alloc.addr >= 0, alloc.span, 0)
        ends = alloc.addr + alloc.span
        placement.class_high[c] = int(ends[alloc.addr >= 0].max(initial=problem.target.sram_base))
    return placement
