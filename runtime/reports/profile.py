"""The cycle profile: `profile.json` + a self-contained `profile.html`.

One format for two sources. A profile is a list of steps in program order, each a compute operator (a kernel),
an exchange phase or a sync, with its cycles (the step's wall time: the busiest tile, since BSP waits for it)
and `tile_cycles`, a dense [tiles] array of each tile's own cycles in the step. `superstep` groups a sync, its
exchange and the compute that follows. A `tile.repeat` loop shows its first iteration in detail (steps with
`repeat` = the loop's id) followed by one `kind = "repeat-rest"` step summing iterations 2..N.

- Estimates (now, `profile_from_function`): the exchange level's numbers. Compute steps take the plan's `cycles`
  (the planner's estimate for the busiest tile), spread over tiles in proportion to each tile's shard of the
  result (an estimate of balance, not a measurement); exchange steps take each tile's last send/receive end from
  the phase's schedule; syncs cost their `cycles` on every tile. The repeat body is estimated once, so the rest
  is (N - 1) x the first iteration.
- Simulator runs (`ipu.runtime.reports.profile_sim`, `ipu-run --profile DIR`): the same steps filled with
  per-tile cycles measured at the package's profile sites and internal syncs, the loop's rest measured (a
  repeat-rest step with `parts`), plus `supersteps`, `ops` and `run`. `profile_document` computes the totals,
  per-kernel and busiest-tile tables from steps either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from xdsl.dialects import func
from xdsl.ir import Block, Operation

from ipu.dialects import exchange as ex
from ipu.dialects import tile as tl
from ipu.passes import cost_model as cm
from ipu.passes.memory_plan import op_label

FORMAT_VERSION = 1
KINDS = ("compute", "exchange", "sync", "repeat-rest")


@dataclass
class Step:
    kind: str
    name: str  # kernel / op name (nn.linear, exchange.phase, exchange.sync, ...)
    label: str  # op with its result name
    tile_cycles: np.ndarray  # [tiles]
    cycles: int = -1  # wall cycles; -1: the busiest tile
    repeat: int | None = None
    superstep: int = 0
    extra: dict = field(default_factory=dict)
    # A measured repeat-rest step: {"walls": {kind: cycles}, "tiles": {kind: [tiles]}, "kernels": {name: [calls,
    # cycles]}} (the estimate scales the first iteration instead). Not written to the JSON as such.
    parts: dict | None = None


MAX_LISTED_ITERATIONS = 1 << 16  # a tile.repeat's iterations are listed one by one (profile.json, the page)


def _compute_tile_cycles(op: Operation, cycles: int, tiles: int) -> np.ndarray:
    """The plan's busiest-tile cycles spread by each tile's share of the result (tiles without a shard idle)."""
    out = np.zeros(tiles, np.int64)
    layout = tl.layout_of(op.results[0]) if op.results else None
    if layout is None:
        out[0] = cycles
        return out
    g = np.asarray(layout.geometry().shard_elems, np.float64)[:tiles]
    if g.max(initial=0) <= 0:
        out[0] = cycles
        return out
    out[: len(g)] = np.ceil(cycles * g / g.max()).astype(np.int64)
    return out


def _phase_tile_cycles(op: ex.PhaseOp, tiles: int) -> np.ndarray:
    """Each tile's last send or receive end in the phase's schedule (0 for tiles not taking part)."""
    out = np.zeros(tiles, np.int64)
    s, r = op.send_table(), op.recv_table()
    if len(s):
        ends = s[:, 4] + ex.words(s[:, 3])
        np.maximum.at(out, np.clip(s[:, 0], 0, tiles - 1), ends)
    if len(r):
        ends = r[:, 4] + ex.words(s[r[:, 3], 3])
        np.maximum.at(out, np.clip(r[:, 0], 0, tiles - 1), ends)
    return np.maximum(out, 0)


def _copy_tile_cycles(op: ex.PhaseOp, tiles: int) -> np.ndarray | None:
    """On-tile copies of a phase as compute (as `exchange_schedule.block_cycles` counts them); None if none."""
    c = op.copy_table()
    if not len(c):
        return None
    per_tile = np.bincount(np.clip(c[:, 0], 0, tiles - 1), weights=c[:, 4], minlength=tiles).astype(np.int64)
    return np.array([cm.copy_cycles(int(b)) if b else 0 for b in per_tile], np.int64)


def profile_from_function(f: func.FuncOp, tiles: int | None = None) -> dict:
    """profile.json from the exchange-level estimates of one function (see the module docstring)."""
    if tiles is None:
        tiles = _tiles_of(f)
    steps: list[Step] = []
    repeats: list[dict] = []
    superstep = [0]

    def walk(block: Block, repeat: int | None) -> None:
        for op in block.ops:
            if isinstance(op, ex.SyncOp):
                superstep[0] += 1
                c = op.cycles.value.data
                steps.append(
                    Step("sync", op.name, f"exchange.sync {op.zone.data}", np.full(tiles, c), c, repeat)
                )
            elif isinstance(op, ex.PhaseOp):
                s = op.send_table()
                extra = {"transfers": int(len(s)), "bytes": int(s[:, 3].sum()) if len(s) else 0}
                if op.max_row_bytes is not None:
                    extra["max_row_bytes"] = op.max_row_bytes.value.data
                steps.append(
                    Step("exchange", op.name, op_label(op), _phase_tile_cycles(op, tiles), op.cycles.value.data,
                         repeat, extra=extra)
                )  # fmt: skip
                copies = _copy_tile_cycles(op, tiles)
                if copies is not None:
                    steps[-1].superstep = superstep[0]
                    steps.append(Step("compute", "exchange.copy", f"on-tile copies of {op_label(op)}", copies,
                                      int(copies.max()), repeat))  # fmt: skip
            elif isinstance(op, tl.RepeatOp):
                if op.count.value.data > MAX_LISTED_ITERATIONS:  # a row per iteration below
                    raise ValueError(
                        f"tile.repeat x{op.count.value.data}: more iterations than a profile lists "
                        f"({MAX_LISTED_ITERATIONS})"
                    )
                rid = len(repeats)
                first = len(steps)
                info = {
                    "id": rid,
                    "label": f"tile.repeat x{op.count.value.data}",
                    "count": op.count.value.data,
                }
                repeats.append(info)
                walk(op.body.block, rid)
                body = steps[first:]
                info["first_step"], info["last_step"] = first, len(steps) - 1
                # Every iteration is estimated as the first (the body is estimated once).
                one = {k: sum(_wall(s) for s in body if s.kind == k) for k in ("compute", "exchange", "sync")}
                info["iterations"] = [
                    {"iteration": i + 1, "cycles": sum(one.values()), **one}
                    for i in range(op.count.value.data)
                ]
                rest = op.count.value.data - 1
                if rest > 0 and body:
                    per_tile = sum(s.tile_cycles for s in body) * rest
                    wall = sum(_wall(s) for s in body) * rest
                    steps.append(
                        Step("repeat-rest", "tile.repeat", f"iterations 2..{rest + 1} of {info['label']} (summed)",
                             per_tile, wall, rid, extra={"iterations": rest})
                    )  # fmt: skip
                    info["rest_step"] = len(steps) - 1
            else:
                plan = op.attributes.get(tl.PLAN_ATTR)
                cycles = tl.plan_cycles(plan) if plan is not None else 0
                if cycles <= 0:
                    continue  # host-folded ops, views, ops without a plan: no device cycles
                steps.append(
                    Step(
                        "compute",
                        op.name,
                        op_label(op),
                        _compute_tile_cycles(op, cycles, tiles),
                        cycles,
                        repeat,
                    )
                )
            steps[-1].superstep = superstep[0]

    walk(f.body.block, None)
    return profile_document(steps, repeats, tiles, "estimate", f.sym_name.data)


def _tiles_of(f: func.FuncOp) -> int:
    for op in f.walk():
        if isinstance(op, ex.PhaseOp):
            return op.tiles.value.data
    for op in f.walk():
        for r in op.results:
            layout = tl.layout_of(r)
            if layout is not None:
                return int(layout.table().max()) + 1
    return 1


def _wall(s: Step) -> int:
    return int(s.cycles) if s.cycles >= 0 else int(s.tile_cycles.max(initial=0))


def profile_document(
    steps: list[Step],
    repeats: list[dict],
    tiles: int,
    source: str,
    function: str = "",
    extra: dict | None = None,
) -> dict:
    """The profile.json document from steps (any source): steps, repeats, totals, kernels, busiest tiles. A
    repeat-rest step with `parts` (measured) contributes its own breakdown; without, the first iteration's steps
    scaled by the iterations. `extra` (e.g. a simulator run's `supersteps`, `ops`, `run`) is added as it is."""
    total = {k: 0 for k in KINDS}
    busy = np.zeros(tiles, np.int64)
    by_kind = {k: np.zeros(tiles, np.int64) for k in ("compute", "exchange")}
    kernels: dict[str, dict] = {}
    start = 0
    out_steps = []
    for i, s in enumerate(steps):
        wall = _wall(s)
        tc = np.asarray(s.tile_cycles, np.int64)
        total[s.kind] += wall
        if s.kind in by_kind:
            by_kind[s.kind] += tc
            busy += tc
        if s.kind == "compute":
            k = kernels.setdefault(s.name, {"name": s.name, "calls": 0, "cycles": 0})
            k["calls"] += 1
            k["cycles"] += wall
        out_steps.append(
            {
                "index": i,
                "superstep": s.superstep,
                "kind": s.kind,
                "name": s.name,
                "label": s.label,
                "start": start,
                "cycles": wall,
                "active_tiles": int((tc > 0).sum()),
                "repeat": s.repeat,
                **s.extra,
                "tile_cycles": tc.astype(int).tolist(),
            }
        )
        start += wall
    # The repeat-rest steps sum whole iterations of every kind: split their per-tile cycles for the kernel table
    # by scaling the first iteration's kernels.
    for r in repeats:
        rest = r.get("rest_step")
        if rest is None:
            continue
        n = steps[rest].extra["iterations"]
        body = steps[r["first_step"] : r["last_step"] + 1]
        total["repeat-rest"] -= _wall(steps[rest])
        parts = steps[rest].parts
        if parts is not None:  # measured
            for kind, wall in parts["walls"].items():
                total[kind] += wall
            for kind, tc in parts["tiles"].items():
                if kind in by_kind:
                    by_kind[kind] += np.asarray(tc, np.int64)
                    busy += np.asarray(tc, np.int64)
            for name, (calls, cycles) in parts["kernels"].items():
                k = kernels.setdefault(name, {"name": name, "calls": 0, "cycles": 0})
                k["calls"] += calls
                k["cycles"] += cycles
            continue
        for s in body:
            total[s.kind] += _wall(s) * n
            if s.kind in by_kind:
                by_kind[s.kind] += np.asarray(s.tile_cycles, np.int64) * n
                busy += np.asarray(s.tile_cycles, np.int64) * n
            if s.kind == "compute":
                kernels[s.name]["calls"] += n
                kernels[s.name]["cycles"] += _wall(s) * n
    del total["repeat-rest"]
    order = np.argsort(-busy, kind="stable")[:32]
    doc = {
        "format": "ipu-profile",
        "version": FORMAT_VERSION,
        "source": source,
        "function": function,
        "tiles": tiles,
        "total_cycles": start,
        "totals": total,
        "repeats": repeats,
        "kernels": sorted(kernels.values(), key=lambda k: -k["cycles"]),
        "busiest_tiles": [
            {
                "tile": int(t),
                "busy": int(busy[t]),
                "compute": int(by_kind["compute"][t]),
                "exchange": int(by_kind["exchange"][t]),
                "idle": int(start - busy[t] - total["sync"]),
            }
            for t in order
        ],
        "tile_busy": busy.astype(int).tolist(),
        "steps": out_steps,
    }
    if extra:
        doc.update(extra)
    return doc


def profile_html(doc: dict) -> str:
    from ipu.runtime.reports.profile_html import TEMPLATE

    title = f"Profile: @{doc['function']}" if doc.get("function") else "Profile"
    data = json.dumps(doc, separators=(",", ":")).replace("</", "<\\/")
    return TEMPLATE.replace("__TITLE__", title).replace("__DATA__", data)


def estimate_summary(doc: dict) -> dict:
    """The part of an estimate's profile a measured one is compared with (`metadata["estimate"]` of a package):
    total cycles, cycles by kind and, per loop, each iteration's cycles."""
    return {
        "total_cycles": doc["total_cycles"],
        "totals": dict(doc["totals"]),
        "repeats": [
            {"label": r["label"], "iterations": [it["cycles"] for it in r.get("iterations", [])]}
            for r in doc["repeats"]
        ],
    }


def write_profile_report(doc: dict, out_dir: str | Path, name: str = "profile") -> tuple[Path, Path, Path]:
    """Writes `<name>.json`, `<name>.html` and the Chrome trace / Perfetto JSON `<name>.trace.json`
    (`ipu.runtime.reports.trace`) into out_dir; returns their paths."""
    from ipu.runtime.reports.trace import write_trace

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jpath, hpath = out / f"{name}.json", out / f"{name}.html"
    jpath.write_text(json.dumps(doc, separators=(",", ":")))
    hpath.write_text(profile_html(doc))
    tpath = write_trace(doc, out / f"{name}.trace.json", doc.get("clock_hz", 1.5e9))
    return jpath, hpath, tpath
