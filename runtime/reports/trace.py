"""A Chrome trace / Perfetto JSON (`trace.json`) of a profile: open it in https://ui.perfetto.dev or
chrome://tracing.

From a profile document (`profile.json`, either source) `chrome_trace` builds the Trace Event Format's JSON object
(`traceEvents`, complete "X" events, times in microseconds at the target's clock; every event's `args` also
carry its `start` and `cycles` in device cycles):

- process 1, "program": thread "steps", every step of the profile on the wall-clock axis (the slowest tile, as
  the profile's steps), named by its label, category its kind, with operator, kernel, superstep, layer
  (iteration of the layer loop, 1 for the first iteration's steps) and, for exchange phases, the values moved,
  transfers, bytes, sending and receiving tiles and largest sends, and `exchange_phase`: the phase's summary of
  the profile's `exchange_phases` (bytes per tensor, tile counts, busiest receiver and sender, rounds, the
  measured cycles and bytes per cycle); the loop's summed rest is one slice
  "iterations 2..N" with its breakdown. Thread "layers": one slice per iteration of each `tile.repeat` loop
  (each layer of the encoder, measured on the simulator or, in an estimate, the first iteration's estimate),
  and thread "supersteps" (simulator runs).
- process 2, "tiles": one thread per tile (up to `MAX_TILE_TRACKS` tiles), or else per tile class (tiles with
  the same cycles in every step are one track, the classes of most busy cycles first, each named by its first
  tile and how many tiles it stands for). A tile's slices follow its own clock: step i starts when the tile's
  cycles in the steps before it are spent, and lasts the tile's own cycles in it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

MAX_TILE_TRACKS = 64
DETAIL_KEYS = ("op", "kernel", "phase", "values", "transfers", "bytes", "senders", "receivers", "largest",
               "rounds", "max_row_bytes", "active_tiles", "superstep", "received", "phase_index")  # fmt: skip
# Of a step's exchange phase (the profile's `exchange_phases`), in its slice's args as `exchange_phase`.
PHASE_KEYS = ("tensors", "received", "copied", "src_tiles", "dst_tiles", "busiest_receiver", "busiest_sender",
              "port_words", "rounds", "schedule_cycles", "visits", "cycles", "cycles_per_visit", "bytes_per_cycle",
              "received_per_cycle")  # fmt: skip
PROGRAM, TILES = 1, 2
STEPS_TID, LAYERS_TID, SUPERSTEPS_TID = 1, 2, 3


def _meta(pid: int, tid: int | None, name: str, sort: int | None = None) -> list[dict]:
    kind = "process_name" if tid is None else "thread_name"
    out = [{"ph": "M", "pid": pid, "tid": tid or 0, "name": kind, "args": {"name": name}}]
    if sort is not None:
        key = "process_sort_index" if tid is None else "thread_sort_index"
        out.append({"ph": "M", "pid": pid, "tid": tid or 0, "name": key, "args": {"sort_index": sort}})
    return out


def tile_classes(tile_cycles: np.ndarray, limit: int = MAX_TILE_TRACKS) -> list[list[int]]:
    """Tracks of the tiles view: each tile if there are at most `limit`, else groups of tiles whose cycles are
    equal in every step (columns of `tile_cycles` [steps, tiles]), the busiest `limit` classes."""
    tiles = tile_cycles.shape[1]
    if tiles <= limit:
        return [[t] for t in range(tiles)]
    _, inverse = np.unique(tile_cycles.T, axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    busy = tile_cycles.sum(axis=0)
    classes: dict[int, list[int]] = {}
    for t, c in enumerate(inverse.tolist()):
        classes.setdefault(c, []).append(t)
    ordered = sorted(classes.values(), key=lambda ts: (-int(busy[ts[0]]), ts[0]))
    return ordered[:limit]


def chrome_trace(doc: dict, clock_hz: float = 1.5e9) -> dict:
    """The Trace Event Format object of a profile document (see the module docstring)."""
    per_us = clock_hz / 1e6
    us = lambda c: c / per_us  # noqa: E731
    steps, repeats = doc["steps"], doc["repeats"]
    ev: list[dict] = []
    ev += _meta(PROGRAM, None, f"program @{doc.get('function', '')} ({doc['source']}: wall clock)", 0)
    ev += _meta(PROGRAM, STEPS_TID, "steps", 0)
    ev += _meta(PROGRAM, LAYERS_TID, "layers (tile.repeat iterations)", 1)
    in_loop = {}
    for r in repeats:
        for i in range(r.get("first_step", 0), r.get("last_step", -1) + 1):
            in_loop[i] = r
    phases = doc.get("exchange_phases") or []
    for s in steps:
        args = {"start": s["start"], "cycles": s["cycles"], "kind": s["kind"]}
        args.update({k: s[k] for k in DETAIL_KEYS if k in s})
        k = s.get("phase_index")
        if k is not None and 0 <= k < len(phases):
            args["exchange_phase"] = {key: phases[k][key] for key in PHASE_KEYS if key in phases[k]}
        if s["kind"] == "repeat-rest":
            args["iterations"] = s.get("iterations")
            if "by_kind" in s:
                args["by_kind"] = s["by_kind"]
        elif s["index"] in in_loop:
            args["layer"] = 1
            args["loop"] = in_loop[s["index"]]["label"]
        ev.append({"ph": "X", "pid": PROGRAM, "tid": STEPS_TID, "name": s["label"], "cat": s["kind"],
                   "ts": us(s["start"]), "dur": us(s["cycles"]), "args": args})  # fmt: skip
    for r in repeats:
        its = r.get("iterations") or []
        first = steps[r["first_step"]]["start"] if r.get("first_step", 0) < len(steps) else 0
        at = first
        for it in its:
            start = it.get("start", at)
            at = start + it["cycles"]
            args = {"start": start, "cycles": it["cycles"], "loop": r["label"], "layer": it["iteration"]}
            args.update({k: it[k] for k in ("compute", "exchange", "sync") if k in it})
            ev.append({"ph": "X", "pid": PROGRAM, "tid": LAYERS_TID, "name": f"layer {it['iteration']}",
                       "cat": "layer", "ts": us(start), "dur": us(it["cycles"]), "args": args})  # fmt: skip
    if doc.get("supersteps"):
        ev += _meta(PROGRAM, SUPERSTEPS_TID, "supersteps", 2)
        for ss in doc["supersteps"]:
            name = (
                "iterations 2.. (summed)" if ss.get("kind") == "repeat-rest" else f"superstep {ss['index']}"
            )
            args = {k: ss[k] for k in ("start", "cycles", "compute", "exchange", "sync") if k in ss}
            ev.append({"ph": "X", "pid": PROGRAM, "tid": SUPERSTEPS_TID, "name": name, "cat": "superstep",
                       "ts": us(ss["start"]), "dur": us(ss["cycles"]), "args": args})  # fmt: skip
    # The tiles: each tile's own clock.
    tc = np.array([s["tile_cycles"] for s in steps], np.int64).reshape(len(steps), doc["tiles"])
    starts = np.cumsum(tc, axis=0) - tc  # [steps, tiles]: a tile's cycles before each step
    classes = tile_classes(tc)
    ev += _meta(TILES, None, f"tiles ({'each tile' if len(classes) == doc['tiles'] else 'tile classes'})", 1)
    for k, members in enumerate(classes):
        t = members[0]
        name = f"tile {t}" if len(members) == 1 else f"tile {t} (+{len(members) - 1} alike)"
        ev += _meta(TILES, k + 1, name, k)
        for i in np.nonzero(tc[:, t])[0].tolist():
            s = steps[i]
            args = {"start": int(starts[i, t]), "cycles": int(tc[i, t]), "step": i, "kind": s["kind"],
                    "tiles": len(members)}  # fmt: skip
            ev.append({"ph": "X", "pid": TILES, "tid": k + 1, "name": s["label"], "cat": s["kind"],
                       "ts": us(int(starts[i, t])), "dur": us(int(tc[i, t])), "args": args})  # fmt: skip
    return {
        "traceEvents": ev,
        "displayTimeUnit": "ns",
        "otherData": {
            "format": "ipu-trace",
            "source": doc["source"],
            "function": doc.get("function", ""),
            "tiles": doc["tiles"],
            "total_cycles": doc["total_cycles"],
            "cycles_per_us": per_us,
            "tile_tracks": [m for m in classes],
        },  # fmt: skip
    }


def write_trace(doc: dict, path: str | Path, clock_hz: float = 1.5e9) -> Path:
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(doc, clock_hz), separators=(",", ":")))
    return path
