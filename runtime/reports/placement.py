"""The memory map: `placement.json` + a self-contained `placement.html` for one function's memory plan.

Two sources feed one neutral model (`PlacementModel`): a function after `memory-plan` (`model_from_function`,
reading the `memory.plan` / `memory.reserve` ops and the `memory.buffers` / `memory.args` attributes) and an
allocator problem with its (possibly partial) placement (`model_from_problem`, used when placement fails, so the
map shows everything placed up to the failure).

The JSON keeps tile classes as classes: tiles with identical buffer sizes get one placement, so every allocation
lists its placements per class (`placed`: [class, address, bytes, padding, row]) and `tile_class` maps each tile
to its class; 1472 copies of identical tiles are never expanded. A Repeat sequence (stacked layer parameters) is
expanded into its members (`kind = "repeat-member"`, member index, stride): member i lives at
addr + i * stride, and `padding` is the stride padding after it. `row` is the map row: 0 for the first occupants
of an address range, 1.. for later allocations reusing addresses already used on that tile (reuse rows).
`occupancy[class][event]` is the live bytes (spans, padding included) of each class at each event (the liveness
plot); `fullest` lists the classes of highest peak with the allocations live at their peak event (`fullest`).
Buffers are named by their IR value (`%name`), unnamed results by their operator (`value_name`).

Kinds: "parameter" (resident: whole program, every inference), "input", "output", "transient", "repeat-member"
(of a parameter sequence), "reservation" (with `reserve` = code, exchange_tables, runtime_state,
host_descriptors, host_aperture).

Access tails (bytes a kernel may read past an allocation's payload): `memory-plan` requests none (it does not
model kernel access tails). What the plan does guarantee is shown instead: every allocation starts on a multiple
of `granule` = the smallest alignment in the plan (8 bytes), so the bytes from a payload's end to the next granule
boundary belong to no other allocation; the lowering's whole-word copies (exchange send staging, ragged
element-wise shards) read into exactly this slack. `tails` (parallel to `placed`, only when some are non-zero)
gives it per placement; `access_tails` at the top level says where the numbers come from.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from xdsl.dialects import func

from ipu.dialects import memory as mem
from ipu.dialects import nn
from ipu.passes import memory_alloc as ma
from ipu.passes.memory_plan import _label, _plan_kind, number_events, op_label, placement_reps

FORMAT_VERSION = 1
REGION_NAMES = {ma.REGION_ANY: "any", ma.REGION_0: "r0", ma.REGION_1: "r1"}


@dataclass
class Record:
    """One buffer or reservation, per tile class (addr -1 / member 0 where the class does not hold it)."""

    name: str
    owner: str
    kind: str
    reserve: str | None
    region: str
    align: int
    lifetime: tuple[int, int]
    host: bool
    seq: int
    addr: np.ndarray  # [classes] start address (first member of a sequence)
    member: np.ndarray  # [classes] bytes of one member
    stride: np.ndarray  # [classes] bytes between members (sequences)


@dataclass
class PlacementModel:
    """Everything the map shows; built from IR or from an allocator problem (see the module docstring)."""

    function: str
    tiles: int
    sram: tuple[int, int, int]  # base, region-1 base, end
    aperture: tuple[int, int]
    element_bytes: tuple[int, int]  # region 0, region 1
    events: list[str]
    host_events: tuple[int, ...]
    tile_class: np.ndarray  # [tiles]
    records: list[Record] = field(default_factory=list)
    failure: dict | None = None
    # The plan's per-tile budgets, from the function's attributes: tile-plan's GEMM budget (`tile.gemm_budget`)
    # and the resident parameter bytes after tile-balance-homes (`tile.resident_bytes`: min, median, max).
    budgets: dict | None = None


def _ints(attr) -> tuple[int, ...]:
    return tuple(x.value.data for x in attr.data)


def budgets_of(f: func.FuncOp) -> dict | None:
    """{"gemm_budget": B, "resident_bytes": {"min", "median", "max"}} from the function's attributes (the keys
    present), or None."""
    from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr

    out: dict = {}
    g = f.attributes.get("tile.gemm_budget")
    if isinstance(g, IntegerAttr):
        out["gemm_budget"] = g.value.data
    r = f.attributes.get("tile.resident_bytes")
    if isinstance(r, DictionaryAttr):
        out["resident_bytes"] = {k: v.value.data for k, v in r.data.items() if isinstance(v, IntegerAttr)}
    return out or None


def model_from_function(f: func.FuncOp) -> PlacementModel:
    """The memory map of a function after `memory-plan`, in `read_placement`'s order (records[i] is its i-th)."""
    plan = next((o for o in f.body.block.ops if isinstance(o, mem.PlanOp)), None)
    if plan is None:
        raise ValueError(f"@{f.sym_name.data} has no memory.plan (run memory-plan first)")
    nc = plan.num_classes.value.data
    names = number_events(f).names
    if len(names) != plan.events.value.data:
        raise ValueError(
            f"memory.plan has {plan.events.value.data} events, the function numbers {len(names)}"
        )
    base, r1, end = _ints(plan.sram)
    model = PlacementModel(
        function=f.sym_name.data,
        tiles=plan.tiles.value.data,
        sram=(base, r1, end),
        aperture=tuple(_ints(plan.aperture)),
        element_bytes=(16 * 1024, 32 * 1024),
        events=list(names),
        host_events=_ints(plan.host_events),
        tile_class=plan.tile_class(),
    )
    model.budgets = budgets_of(f)
    last_event = len(names) - 1

    def add(name: str, owner: str, b: mem.BufferAttr, kind: str, reserve: str | None = None) -> None:
        if kind == "auto":
            f0, f1 = b.lifetime
            if b.resident.data:
                kind = "parameter"
            elif b.host.data and f0 == 0:
                kind = "input"
            elif b.host.data and f1 == last_event:
                kind = "output"
            else:
                kind = "transient"
        model.records.append(
            Record(
                name,
                owner,
                kind,
                reserve,
                b.region.data,
                b.align.data,
                b.lifetime,
                bool(b.host.data),
                b.seq.data,
                mem.table_values(b.addr, nc),
                mem.table_values(b.bytes_, nc),
                mem.table_values(b.stride, nc),
            )
        )

    # The same walk as memory_plan.read_placement (views share their operand's buffer and are skipped, and so is
    # a yield operand computed in place into its carried argument's buffer).
    from ipu.backend.lower.sites import op_name  # the names the lowering's contents and the profile use

    carried: set[mem.BufferAttr] = set()
    for op in f.walk():
        if isinstance(op, mem.ReserveOp):
            add(op.kind.data, "support", op.buffer, "reservation", op.kind.data)
        for key, reserve in ((mem.FRAMES_ATTR, "lowering_frames"), (mem.DATA_ATTR, "lowering_data")):
            if isinstance(op.attributes.get(key), mem.BufferAttr):  # the asm lowering's storage of this op
                add(reserve, op_name(op), op.attributes[key], "reservation", reserve)
        if _plan_kind(op) == "view":
            continue
        for i, b in enumerate(mem.buffers_of(op.attributes.get(mem.ARGS_ATTR))):
            add(f"carried #{i}", op_label(op), b, "transient")
            carried.add(b)
        for r, b in zip(op.results, mem.buffers_of(op.attributes.get(mem.BUFFERS_ATTR))):
            if b not in carried:
                add(value_name(r), op_label(op), b, "input" if isinstance(op, nn.InputOp) else "auto")
    return model


def value_name(v) -> str:
    """A buffer's name: its IR value (`%name`); an unnamed result by its operator as the profile names it
    (`nn.linear self_attn.q_proj`, `exchange.phase #3`, `ipu.backend.lower.sites.op_name`), with the result
    index when the operator has several."""
    label = _label(v)
    if label != "%?":
        return label
    from ipu.backend.lower.sites import op_name

    op = v.owner
    name = op_name(op)
    return f"{name} result {v.index}" if len(op.results) > 1 else name


def fullest(doc: dict, count: int = 8, holders: int = 16) -> list[dict]:
    """The tile classes of highest peak live bytes and what holds them at that peak: per class its tiles,
    peak, peak event and the allocations live there, largest first (`bytes` = payload + padding)."""
    out = []
    occ = doc["occupancy"]
    order = sorted(range(len(doc["classes"])), key=lambda c: (-doc["classes"][c]["peak_bytes"], c))
    for c in order[:count]:
        row = occ[c]
        if not row:
            continue
        event = max(range(len(row)), key=lambda e: (row[e], -e))
        live = []
        for al in doc["allocations"]:
            f, last = al["live"]
            if not f <= event <= last:
                continue
            for p in al["placed"]:
                if p[0] == c:
                    live.append({"id": al["id"], "name": al["name"], "owner": al["owner"], "kind": al["kind"],
                                 "addr": p[1], "bytes": p[2] + p[3]})  # fmt: skip
        live.sort(key=lambda x: (-x["bytes"], x["id"]))
        cls = doc["classes"][c]
        out.append({"class": c, "first_tile": cls["first_tile"], "tiles": cls["tiles"], "peak_bytes": row[event],
                    "peak_event": event, "peak_event_name": doc["events"][event], "live": len(live),
                    "holders": live[:holders]})  # fmt: skip
    return out


def model_from_problem(
    problem: ma.Problem, placement: ma.Placement, function: str = "", failure: dict | None = None
) -> PlacementModel:
    """The memory map of an allocator problem and its placement (partial when placement failed)."""
    t = problem.target
    reps = placement_reps(placement)
    model = PlacementModel(
        function=function,
        tiles=t.num_tiles,
        sram=(t.sram_base, t.region1_base, t.sram_end),
        aperture=tuple(t.host_aperture),
        element_bytes=(t.region0_element_bytes, t.region1_element_bytes),
        events=[
            problem.event_names[e] if e < len(problem.event_names) else f"event {e}"
            for e in range(problem.events)
        ],
        host_events=tuple(problem.host_events),
        tile_class=np.asarray(placement.tile_class, np.int64),
        failure=failure,
    )
    nc = placement.num_classes
    for b, buf in enumerate(problem.buffers):
        member = np.asarray(problem.sizes[b], np.int64)[reps] if nc else np.zeros(0, np.int64)
        addr = np.where(member > 0, placement.class_addr[b], -1)
        stride = np.array([ma.stride_of(buf, int(m)) if m else 0 for m in member], np.int64)
        f, last = problem.lifetime(b)
        if buf.kind != "tensor":
            kind, reserve = "reservation", buf.kind
        elif buf.resident:
            kind, reserve = "parameter", None
        elif buf.host_io and f == 0:
            kind, reserve = "input", None
        elif buf.host_io:
            kind, reserve = "output", None
        else:
            kind, reserve = "transient", None
        model.records.append(
            Record(
                buf.name,
                buf.owner or "support",
                kind,
                reserve,
                REGION_NAMES[buf.region],
                buf.align,
                (f, last),
                buf.host_io,
                buf.count,
                addr,
                member,
                stride,
            )
        )
    # The host aperture is reserved at the host events (memory-plan records it as memory.reserve ops).
    ap0, ap1 = max(t.host_aperture[0], t.sram_base), min(t.host_aperture[1], t.sram_end)
    if ap0 < ap1:
        for e in problem.host_events:
            model.records.append(
                Record(
                    "host_aperture",
                    "support",
                    "reservation",
                    "host_aperture",
                    "r0",
                    8,
                    (e, e),
                    False,
                    1,
                    np.full(nc, ap0, np.int64),
                    np.full(nc, ap1 - ap0, np.int64),
                    np.zeros(nc, np.int64),
                )
            )
    return model


class _Rows:
    """Reuse rows of one tile class: each placement goes to the first row where its address range is free."""

    def __init__(self) -> None:
        self.starts: list[list[int]] = []
        self.ends: list[list[int]] = []

    def place(self, a: int, e: int) -> int:
        for r, (starts, ends) in enumerate(zip(self.starts, self.ends)):
            i = bisect.bisect_right(starts, a)
            if (i == 0 or ends[i - 1] <= a) and (i == len(starts) or starts[i] >= e):
                starts.insert(i, a)
                ends.insert(i, e)
                return r
        self.starts.append([a])
        self.ends.append([e])
        return len(self.starts) - 1


def placement_json(model: PlacementModel) -> dict:
    """The placement.json document (see the module docstring and docs/reports.md)."""
    nc = int(model.tile_class.max()) + 1 if model.tile_class.size else 0
    n_events = len(model.events)
    last_event = n_events - 1
    allocations: list[dict] = []
    # Every placement, in allocation order: (class, first event, address, end) and its `placed` entry.
    pc, pf, pa, pe, pend_p = [], [], [], [], []
    occupancy = np.zeros((nc, n_events + 1), np.int64)
    for index, r in enumerate(model.records):
        present = np.nonzero((r.addr >= 0) & (r.member > 0))[0]
        f, last = r.lifetime
        whole = r.kind in ("parameter", "reservation") and f == 0 and last == last_event
        base = {
            "buffer": index,
            "name": r.name,
            "owner": r.owner,
            "kind": r.kind,
            "region": r.region,
            "align": r.align,
            "live": [f, last],
            "live_ops": [model.events[f], model.events[last]],
            "whole_program": whole,
            "host": r.host,
        }
        if r.reserve:
            base["reserve"] = r.reserve
        stride = np.asarray(r.stride, np.int64)[present]
        member = np.asarray(r.member, np.int64)[present]
        span = stride * (r.seq - 1) + member
        occupancy[present, f] += span
        occupancy[present, last + 1] -= span
        # [members, classes, columns]: class, address, bytes, padding, row (set below), stride (sequences)
        m = np.arange(r.seq, dtype=np.int64)[:, None]
        cols = [
            np.broadcast_to(present, (r.seq, len(present))),
            np.asarray(r.addr, np.int64)[present] + m * stride,
            np.broadcast_to(member, (r.seq, len(present))),
            np.where(m < r.seq - 1, stride - member, 0),
            np.zeros((r.seq, len(present)), np.int64),
        ]
        if r.seq > 1:
            cols.append(np.broadcast_to(stride, (r.seq, len(present))))
        table = np.stack(cols, axis=2)
        placed = table.tolist()
        if len(present):
            pc.append(table[:, :, 0].reshape(-1))
            pf.append(np.full(table.shape[0] * table.shape[1], f, np.int64))
            pa.append(table[:, :, 1].reshape(-1))
            pe.append((table[:, :, 1] + table[:, :, 2] + table[:, :, 3]).reshape(-1))
        for k in range(r.seq):
            entry = dict(base, id=len(allocations), placed=placed[k])
            if r.seq > 1:
                entry["kind"] = "repeat-member"
                entry["sequence"] = {"count": r.seq, "member": k, "of": r.kind}
            pend_p.extend(placed[k])
            allocations.append(entry)
    # Access tails: the alignment slack after each payload (memory-plan requests no explicit tails).
    granule = min((r.align for r in model.records), default=8)
    for al in allocations:
        tails = [(-(p[1] + p[2])) % granule for p in al["placed"]]
        if any(tails):
            al["tails"] = tails
    # Reuse rows per class: in order of first event, then address (ties: allocation order).
    rows = [_Rows() for _ in range(nc)]
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64)  # noqa: E731
    pc, pf, pa, pe = cat(pc), cat(pf), cat(pa), cat(pe)
    order = np.lexsort((pa, pf, pc))
    for j, c, a, e in zip(order.tolist(), pc[order].tolist(), pa[order].tolist(), pe[order].tolist()):
        pend_p[j][4] = rows[c].place(a, e)
    n_placements = len(pend_p)
    occupancy = np.cumsum(occupancy, axis=1)[:, :n_events]
    class_tiles = np.bincount(model.tile_class, minlength=nc)
    first_tile = np.full(nc, -1, np.int64)
    first_tile[model.tile_class[::-1]] = np.arange(len(model.tile_class))[::-1]
    kinds: dict[str, int] = {}
    for a in allocations:
        kinds[a["kind"]] = kinds.get(a["kind"], 0) + 1
    doc = {
        "format": "ipu-placement",
        "version": FORMAT_VERSION,
        "function": model.function,
        "tiles": model.tiles,
        "sram": {
            "base": model.sram[0],
            "region1": model.sram[1],
            "end": model.sram[2],
            "element_bytes": list(model.element_bytes),
        },
        "aperture": list(model.aperture),
        "access_tails": {
            "source": "alignment",
            "granule": int(granule),
            "note": "memory-plan requests no kernel access tails; shown: the slack from each payload's end to the "
            f"next {granule}-byte boundary, where no other allocation can start (the lowering's whole-word copies "
            "read into it)",
        },
        "events": model.events,
        "host_events": list(model.host_events),
        "tile_class": model.tile_class.astype(int).tolist(),
        "classes": [
            {
                "tiles": int(class_tiles[c]),
                "first_tile": int(first_tile[c]),
                "rows": len(rows[c].starts) or 1,
                "peak_bytes": int(occupancy[c].max(initial=0)),
            }
            for c in range(nc)
        ],
        "occupancy": occupancy.astype(int).tolist(),
        "allocations": allocations,
        "summary": {"allocations": len(allocations), "placements": n_placements, "kinds": kinds},
        "failure": model.failure,
    }
    if model.budgets:
        doc["budgets"] = model.budgets
    doc["fullest"] = fullest(doc)
    return doc


def with_contents(doc: dict, contents: list[dict]) -> dict:
    """The lowering's own allocations (`DataImage.contents`: owner, what, count, bytes, lo, hi; the same address
    on every tile) as `doc["contents"]`, each with the support reservation ("code", "exchange_tables",
    "lowering_scratch", ...) or the op's own buffer ("lowering_frames of OP", "lowering_data of OP") whose span
    holds it, or "" when none does (then `outside` counts the bytes: the
    package's image check fails on such a byte before this shows)."""
    spans = []
    for al in doc["allocations"]:
        if al["kind"] == "reservation" and al["placed"]:
            lo = min(p[1] for p in al["placed"])
            hi = max(p[1] + p[2] for p in al["placed"])
            name = al.get("reserve") or al["name"]
            if al.get("owner", "support") != "support":  # an op's own lowering_frames / lowering_data
                name = f"{name} of {al['owner']}"
            spans.append((lo, hi, name))
    out = []
    for c in sorted(contents, key=lambda c: (c["lo"], c["owner"], c["what"])):
        where = next((name for lo, hi, name in spans if lo <= c["lo"] and c["hi"] <= hi), "")
        out.append(dict(c, reservation=where))
    doc["contents"] = out
    return doc


def _embed(doc: dict) -> str:
    """JSON text safe inside a <script> element."""
    return json.dumps(doc, separators=(",", ":")).replace("</", "<\\/")


def placement_html(doc: dict) -> str:
    from ipu.runtime.reports.placement_html import TEMPLATE

    title = f"Memory map: @{doc['function']}" if doc.get("function") else "Memory map"
    return TEMPLATE.replace("__TITLE__", title).replace("__DATA__", _embed(doc))


def write_placement_report(
    model: PlacementModel | dict, out_dir: str | Path, name: str = "placement"
) -> tuple[Path, Path]:
    """Writes `<name>.json` and `<name>.html` into out_dir; returns their paths."""
    doc = model if isinstance(model, dict) else placement_json(model)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jpath, hpath = out / f"{name}.json", out / f"{name}.html"
    jpath.write_text(json.dumps(doc, separators=(",", ":")))
    hpath.write_text(placement_html(doc))
    return jpath, hpath


def write_failure_report(
    out_dir: str | Path, problem: ma.Problem, err: ma.PlacementError, function: str = ""
) -> tuple[Path, Path]:
    """The memory map up to a placement failure (fit diagnostics): everything placed before it, plus the
    failure (tile, event, request, the allocator's message naming live buffers and the largest hole)."""
    buf = problem.buffers[err.buffer]
    failure = {
        "tile": int(err.tile),
        "event": int(err.event),
        "event_name": problem.event_label(err.event),
        "request": buf.name,
        "owner": buf.owner,
        "message": str(err),
    }
    model = model_from_problem(problem, err.placement, function, failure)
    return write_placement_report(model, out_dir)


def live_overlaps(doc: dict, limit: int = 20, tails: bool = False) -> list[str]:
    """Pairs of placements in placement.json that share addresses on a tile class while both are live (an
    invalid map); empty when the map is consistent. Sweeps each class's placements in address order. tails: count
    each placement's access tail (`tails`) as part of it."""
    per_class: dict[int, list[tuple[int, int, int, int, int]]] = {}
    for al in doc["allocations"]:
        f, last = al["live"]
        extra = al.get("tails") if tails else None
        for k, p in enumerate(al["placed"]):
            end = p[1] + p[2] + (extra[k] if extra else 0)
            per_class.setdefault(p[0], []).append((p[1], end, f, last, al["id"]))
    bad: list[str] = []
    names = {al["id"]: f"{al['name']} ({al['owner']})" for al in doc["allocations"]}
    for c, items in sorted(per_class.items()):
        items.sort()
        open_: list[tuple[int, int, int, int, int]] = []  # placements whose end is past the current start
        for a, e, f, last, i in items:
            open_ = [x for x in open_ if x[1] > a]
            for x in open_:
                if x[2] <= last and f <= x[3]:
                    bad.append(
                        f"class {c}: {names[x[4]]} [{x[0]:#x}, {x[1]:#x}) and {names[i]} [{a:#x}, {e:#x}) overlap while live"
                    )
                    if len(bad) >= limit:
                        return bad
            open_.append((a, e, f, last, i))
    return bad
