"""profile.json from a simulator run (`source = "simulator"`): what the device measured, cut at the package's
profile sites and at every internal sync.

Input: a `simulator.Trace` (`Session.run(..., profile=True)`): every tile's supervisor clock at the run's start,
at each profile site (`Package.metadata["profile_sites"]`: a kernel call, an exchange routine call, an
`exchange.sync`, the layer loop's control code, the return; `ipu.backend.lower.sites`), at each internal sync's
arrival and release, and at the end. Consecutive events bound *intervals*; an interval belongs to the site last
entered, as `sync` when it runs from a sync's arrival to its release, else as the site's kind (an exchange
routine's sends are `exchange`, a kernel call `compute`). A tile's cycles in an interval are its own clock
difference (a sync interval: its wait plus the sync's cost). The interval's wall cycles follow the *frontier*:
B(e) = the latest tile's elapsed clock at event e (elapsed = clock - the tile's clock at the run's start), wall =
B(e + 1) - B(e) >= 0. The walls telescope: they sum to the slowest tile's elapsed cycles, the simulator's
`RunResult.max_cycles`, exactly.

Steps are runs of intervals of one site visit, one kind and one superstep (supersteps are counted by internal
sync releases, including the rounds inside `xch_timed`); steps whose every tile and wall are 0 are dropped.
With `merge_rounds`, an exchange routine call is one exchange step and one sync step (its rounds summed): fewer
steps for phases of many rounds (the JSON holds a dense per-tile row per step), same totals and supersteps. A
`tile.repeat` loop: the visits of its body and next-iteration sites in the first iteration are steps (`repeat` =
the loop id); iterations 2..N are summed into one `repeat-rest` step measured as they ran (not the first iteration
scaled), with their breakdown by kind and kernel. `supersteps` lists per superstep its wall cycles split into
compute / exchange / sync (a superstep cut by the end of iteration 1 keeps its iteration-1 part; the rest of the
loop is one entry with `kind = "repeat-rest"`); their `cycles` sum to `total_cycles`. `ops` sums the steps by the
lowering's operator name (the site comment's part before ": "). Each loop in `repeats` has `iterations`: per
iteration (a layer of the encoder) its start on the frontier and its wall cycles by kind, which sum to the first
iteration's steps plus the repeat-rest step. Steps of an exchange phase carry `phase_index` and a few fields of
its summary (the package's `exchange_phases`, `ipu.backend.lower.sites.phase_detail`: values, transfers, bytes,
received, senders, receivers, largest sends); `exchange_phases` lists every phase's whole summary with its
measured `visits`, `cycles` (all visits, the loop's rest too) by kind, cycles per visit and bytes per cycle.
"""

from __future__ import annotations

import json

import numpy as np

from ipu.runtime.reports.profile import Step, profile_document
from ipu.runtime.simulator import Recorder, Trace

ENTRY_SITE = {
    "kind": "compute",
    "kernel": "main",
    "what": "main: entry",
    "op": "main",
    "repeat": None,
    "role": None,
}


def profile_from_trace(
    trace: Trace,
    sites: list[dict],
    tiles: int,
    function: str = "main",
    sync_cycles: int | None = None,
    merge_rounds: bool = False,
    phases: list[dict] | None = None,
) -> dict:
    """profile.json (see the module docstring) from a run's trace and the package's profile sites. merge_rounds:
    one exchange step and one sync step per exchange routine call (its rounds summed, `rounds` = how many)
    instead of one per round; `supersteps` stay per superstep. phases: the package's `exchange_phases` (what
    each phase moves; its sites name it by `phase_index`)."""
    if phases is None and any("detail" in s for s in sites):
        sites, phases = _split_details(sites)
    clock = np.asarray(trace.clock, np.int64)
    E = clock.shape[0]
    if E < 2 or trace.kind[0] != Recorder.START or trace.kind[-1] != Recorder.END:
        raise ValueError("profile: the trace does not span a whole run (START ... END)")
    by_pc = {int(s["pc"]): i for i, s in enumerate(sites)}
    elapsed = clock - clock[0]
    frontier = elapsed.max(axis=1)
    dt = np.diff(clock, axis=0)  # [E - 1, tiles]
    walls = np.diff(frontier)
    kinds, pcs = trace.kind.tolist(), trace.pc.tolist()

    steps: list[Step] = []
    repeats: dict[int, dict] = {}
    rest_steps: dict[int, Step] = {}
    supersteps: list[dict] = []
    ss_index: dict = {}  # superstep number or ("rest", loop) -> entry in supersteps
    visits: dict[int, int] = {}  # site -> visits since its loop's setup
    site, visit_event, superstep = None, -1, 0
    current_key = None
    open_merged: dict[tuple, int] = {}  # (visit, kind) -> step, with merge_rounds
    ops: dict[str, dict] = {}
    site_walls: dict[int, dict] = {}  # site -> wall cycles by kind, every visit (the loop's rest too)
    site_visits: dict[int, int] = {}  # site -> visits in the whole run

    def superstep_entry(key, first_step: int) -> dict:
        ent = ss_index.get(key)
        if ent is None:
            ent = {"index": key if isinstance(key, int) else None, "cycles": 0, "compute": 0, "exchange": 0,
                   "sync": 0, "first_step": first_step, "last_step": first_step}  # fmt: skip
            if not isinstance(key, int):
                ent.update(kind="repeat-rest", repeat=key[1], supersteps=0, _seen=set())
            ss_index[key] = ent
            supersteps.append(ent)
        return ent

    for e in range(E - 1):
        k = kinds[e]
        if k == Recorder.PROBE:
            site = by_pc.get(int(pcs[e]))
            if site is None:
                raise ValueError(f"profile: a mark at pc {pcs[e]:#x} that is no profile site")
            s = sites[site]
            if s["role"] == "setup":
                if s["repeat"] not in repeats:
                    count = int(s["what"].split("tile.repeat x", 1)[1].split(":")[0])
                    repeats[s["repeat"]] = {
                        "id": s["repeat"],
                        "label": f"tile.repeat x{count}",
                        "count": count,
                    }
                for j, t in enumerate(sites):
                    if t["repeat"] == s["repeat"] and t["role"] in ("body", "next"):
                        visits[j] = 0
            visit_event = e
            visits[site] = visits.get(site, 0) + 1
            site_visits[site] = site_visits.get(site, 0) + 1
        elif k == Recorder.RELEASE:
            superstep += 1
        s = sites[site] if site is not None else ENTRY_SITE
        kind = "sync" if k == Recorder.ARRIVE else s["kind"]
        w, tc = int(walls[e]), dt[e]
        if w == 0 and not tc.any():
            continue
        loop = s["repeat"] if s["role"] in ("body", "next") else None
        in_rest = loop is not None and visits.get(site, 1) > 1
        if loop is not None:  # per iteration (layer) of the loop: its start on the frontier and its cycles
            its = repeats[loop].setdefault("iterations", [])
            n = visits.get(site, 1)
            while len(its) < n:
                its.append({"iteration": len(its) + 1, "start": int(frontier[e]), "cycles": 0, "compute": 0,
                            "exchange": 0, "sync": 0})  # fmt: skip
            its[n - 1]["cycles"] += w
            its[n - 1][kind] += w
        name = s["kernel"] if kind != "sync" else ("exchange.sync" if s["kernel"] == "sync" else "sync")
        label = s["what"] if kind != "sync" or s["kernel"] == "sync" else f"internal sync in {s['what']}"
        op = ops.setdefault(s["op"], {"name": s["op"], "steps": 0, "cycles": 0, "compute": 0, "exchange": 0,
                                      "sync": 0})  # fmt: skip
        op["cycles"] += w
        op[kind] += w
        if site is not None:
            sw = site_walls.setdefault(site, {"compute": 0, "exchange": 0, "sync": 0})
            sw[kind] += w
        if in_rest:
            rs = rest_steps.get(loop)
            if rs is None:
                info = repeats[loop]
                count = info["count"]
                rs = Step("repeat-rest", "tile.repeat", f"iterations 2..{count} of {info['label']} (measured, summed)",
                          np.zeros(tiles, np.int64), 0, loop, superstep,
                          extra={"iterations": count - 1, "by_kind": {"compute": 0, "exchange": 0, "sync": 0}},
                          parts={"walls": {"compute": 0, "exchange": 0, "sync": 0},
                                 "tiles": {"compute": np.zeros(tiles, np.int64), "exchange": np.zeros(tiles, np.int64)},
                                 "kernels": {}})  # fmt: skip
                rest_steps[loop] = rs
                steps.append(rs)
                info["rest_step"] = len(steps) - 1
            rs.tile_cycles += tc
            rs.cycles += w
            rs.parts["walls"][kind] += w
            rs.extra["by_kind"][kind] += w
            if kind in rs.parts["tiles"]:
                rs.parts["tiles"][kind] += tc
            if kind == "compute":
                kc = rs.parts["kernels"].setdefault(name, [0, 0])
                kc[0] += 1 if k == Recorder.PROBE else 0
                kc[1] += w
            ent = superstep_entry(("rest", loop), len(steps) - 1)
            if superstep not in ent["_seen"]:
                ent["_seen"].add(superstep)
                ent["supersteps"] += 1
            current_key = None
        else:
            merged = merge_rounds and s["kind"] == "exchange"
            key = (visit_event, kind) if merged else (visit_event, kind, superstep)
            at = open_merged.get(key) if merged else (len(steps) - 1 if key == current_key else None)
            if at is None:
                extra = {"kernel": s["kernel"], "op": s["op"], "site": site if site is not None else -1}
                detail = _phase_of(s, phases)
                if detail is not None:  # an exchange phase's values, bytes and endpoints (sites.phase_detail)
                    extra.update({k: detail[k] for k in STEP_PHASE_KEYS if k in detail})
                steps.append(Step(kind, name, label, np.zeros(tiles, np.int64), 0,
                                  loop, superstep, extra=extra))  # fmt: skip
                at = len(steps) - 1
                if merged:
                    open_merged[key] = at
                    steps[at].extra["rounds"] = 0
                op["steps"] += 1
                if loop is not None:
                    info = repeats[loop]
                    info.setdefault("first_step", at)
                    info["last_step"] = at
            current_key = None if merged else key
            st = steps[at]
            st.tile_cycles += tc
            st.cycles += w
            if merged and kind == "sync":
                st.extra["rounds"] += 1
            ent = superstep_entry(superstep, at)
        ent["cycles"] += w
        ent[kind] += w
        ent["last_step"] = max(ent["last_step"], len(steps) - 1 if in_rest else at)

    start = 0
    for ent in supersteps:
        ent.pop("_seen", None)
        ent["start"] = start
        start += ent["cycles"]
    rep_list = [repeats[r] for r in sorted(repeats)]
    for r in rep_list:
        r.setdefault("first_step", 0)
        r.setdefault("last_step", -1)
    run = {
        "events": int(E),
        "internal_syncs": int(sum(1 for k in kinds if k == Recorder.RELEASE)),
        "tile_cycles": elapsed[-1].astype(int).tolist(),
        "max_cycles": int(frontier[-1]),
    }
    if sync_cycles is not None:
        run["sync_cycles"] = int(sync_cycles)
    extra = {
        "supersteps": supersteps,
        "ops": sorted(ops.values(), key=lambda o: -o["cycles"]),
        "run": run,
    }
    measured = _measured_phases(phases or [], site_walls, site_visits, steps)
    if measured:
        extra["exchange_phases"] = measured
    return profile_document(steps, rep_list, tiles, "simulator", function, extra)


# What an exchange step carries of its phase (the whole summary is once per phase in `exchange_phases`).
STEP_PHASE_KEYS = ("phase_index", "phase", "values", "transfers", "bytes", "received", "senders", "receivers",
                   "largest")  # fmt: skip


def _phase_of(site: dict, phases: list[dict] | None) -> dict | None:
    """A site's exchange phase (`phases[site["phase_index"]]`), with its index."""
    k = site.get("phase_index")
    if k is None or not phases or not 0 <= k < len(phases):
        return None
    return {**phases[k], "phase_index": k}


def _split_details(sites: list[dict]) -> tuple[list[dict], list[dict]]:
    """Sites of an older package (each site of a phase with its own `detail`) as the lowering now writes them:
    copies naming their phase by `phase_index`, and the phases once each (as `sites.exchange_phases`)."""
    out, phases, seen = [], [], {}
    for i, s in enumerate(sites):
        s = dict(s)
        d = s.pop("detail", None)
        if d is not None:
            key = json.dumps(d, sort_keys=True)
            if key not in seen or phases[seen[key]]["sites"][-1] != i - 1:  # the next phase moving the same
                seen[key] = len(phases)
                phases.append({"index": len(phases), **d, "sites": []})
            phases[seen[key]]["sites"].append(i)
            s["phase_index"] = seen[key]
        out.append(s)
    return out, phases


def _measured_phases(
    phases: list[dict],
    walls: dict[int, dict],
    visits: dict[int, int],
    steps: list[Step],
) -> list[dict]:
    """Per exchange phase its summary and what it measured: `visits` (how often it ran: once per layer in the
    loop), `cycles` in all of them (the wall cycles of its sites: staging and copies as `compute`, the rounds'
    sends as `exchange`, their internal syncs as `sync`), `cycles_per_visit`, `bytes_per_cycle` (bytes sent per
    wall cycle), `received_per_cycle` (bytes received, a multicast once per receiver), `first_step` and `steps` (its steps in the profile's list; -1, 0 when none)."""
    first: dict[int, int] = {}
    count: dict[int, int] = {}
    for i, st in enumerate(steps):
        k = st.extra.get("phase_index")
        if k is not None:
            first.setdefault(k, i)
            count[k] = count.get(k, 0) + 1
    out = []
    for p in phases:
        by = {"compute": 0, "exchange": 0, "sync": 0}
        for i in p["sites"]:
            for kind, w in walls.get(i, {}).items():
                by[kind] += w
        n = max((visits.get(i, 0) for i in p["sites"]), default=0)
        cycles = sum(by.values())
        k = p["index"]
        out.append(
            {
                **p,
                "visits": n,
                "cycles": cycles,
                **by,
                "cycles_per_visit": round(cycles / n, 1) if n else 0,
                "bytes_per_cycle": round(p["bytes"] * n / cycles, 3) if cycles else 0,
                "received_per_cycle": round(p.get("received", p["bytes"]) * n / cycles, 3) if cycles else 0,
                "first_step": first.get(k, -1),
                "steps": count.get(k, 0),
            }
        )
    return out


def profile_from_run(package, result, merge_rounds: bool = False) -> dict:
    """profile.json from a `Session.run(..., profile=True)` result on `package` (merge_rounds: see
    `profile_from_trace`)."""
    if result.trace is None:
        raise ValueError("profile: the run recorded no trace (Session.run(..., profile=True))")
    sites = package.metadata.get("profile_sites")
    if not sites:
        raise ValueError("profile: the package names no profile sites")
    doc = profile_from_trace(
        result.trace,
        sites,
        package.target.num_tiles,
        package.entry,
        package.target.sync_internal_cycles,
        merge_rounds,
        package.metadata.get("exchange_phases"),
    )
    doc["clock_hz"] = package.target.clock_hz
    if package.metadata.get("estimate"):  # the planner's estimate of the same program (lower_to_package)
        doc["estimate"] = package.metadata["estimate"]
    return doc
