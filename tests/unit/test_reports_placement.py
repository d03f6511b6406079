"""placement.json against the real placement: every placed allocation (and every Repeat member) of the tiny
SigLIP's memory plan matches the addresses `read_placement` reads back from the IR, no two live allocations
overlap, the checker catches a corrupted map, and a failing `memory-plan{report-dir=...}` writes the map up to the
failure."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import PassFailedException

from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.passes.memory_plan import MemoryPlanPass, read_placement
from ipu.passes.registry import all_passes
from ipu.runtime.reports.placement import (
    live_overlaps,
    model_from_function,
    placement_json,
    write_placement_report,
)

TILES = 16
PLAN = "nn-fuse-qkv,nn-outline-repeat,tile-plan{{tiles={t} sram_kib=624}},exchange-lower{{tiles={t} sram_kib=624}},"
PLAN += "exchange-schedule"


def _run(spec: str):
    module = build_vision_model(PRESETS["tiny"])
    PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), module)
    return module


@pytest.fixture(scope="module")
def planned():
    spec = PLAN.format(t=TILES) + f",memory-plan{{tiles={TILES} sram_kib=624 reserve-code-bytes=16384}}"
    module = _run(spec)
    f = next(o for o in module.walk() if isinstance(o, func.FuncOp))
    return f, placement_json(model_from_function(f))


def _tile_placements(doc: dict, tile: int) -> dict[int, list[tuple[int, int, int, int]]]:
    """buffer index -> [(member, addr, bytes, padding)] on one tile, from the JSON's class tables."""
    c = doc["tile_class"][tile]
    out: dict[int, list[tuple[int, int, int, int]]] = {}
    for al in doc["allocations"]:
        member = al["sequence"]["member"] if "sequence" in al else 0
        for p in al["placed"]:
            if p[0] == c:
                out.setdefault(al["buffer"], []).append((member, p[1], p[2], p[3]))
    return out


def test_every_placed_allocation_matches_the_ir(planned):
    f, doc = planned
    _, bufs = read_placement(f)
    assert len(doc["tile_class"]) == TILES and doc["tiles"] == TILES
    assert max(a["buffer"] for a in doc["allocations"]) == len(bufs) - 1
    checked = 0
    for t in range(TILES):
        on_tile = _tile_placements(doc, t)
        for b, buf in enumerate(bufs):
            got = sorted(on_tile.get(b, []))
            if buf.addr[t] < 0 or buf.span[t] == 0:
                assert not got, f"tile {t}: {buf.label} is not on the tile but the JSON places it"
                continue
            assert [m for m, *_ in got] == list(range(buf.seq)), f"tile {t}: {buf.label} members"
            assert got[0][1] == buf.addr[t], f"tile {t}: {buf.label} address"
            last_member, last_addr, last_bytes, last_pad = got[-1]
            assert last_addr + last_bytes == buf.addr[t] + buf.span[t], f"tile {t}: {buf.label} span"
            assert last_pad == 0
            stride = got[1][1] - got[0][1] if buf.seq > 1 else 0
            for m, a, nbytes, pad in got:
                assert a == buf.addr[t] + m * stride and a % buf.align == 0
                if m < buf.seq - 1:
                    assert nbytes + pad == stride, f"tile {t}: {buf.label} member {m} stride padding"
            checked += len(got)
    assert checked > 100


def test_labels_kinds_and_lifetimes(planned):
    f, doc = planned
    _, bufs = read_placement(f)
    names = doc["events"]
    for al in doc["allocations"]:
        label = bufs[al["buffer"]].label
        # Unnamed values (`%?` to the allocator) are named by their operator in the map (placement.value_name).
        assert label.endswith(al["name"]) or (label.endswith("%?") and "%?" not in al["name"] and al["name"])
        assert tuple(al["live"]) == bufs[al["buffer"]].live
        assert al["live_ops"] == [names[al["live"][0]], names[al["live"][1]]]
    kinds = {al["kind"] for al in doc["allocations"]}
    assert {"parameter", "repeat-member", "transient", "input", "output", "reservation"} <= kinds
    reserves = {al.get("reserve") for al in doc["allocations"] if al["kind"] == "reservation"}
    assert {"code", "exchange_tables", "runtime_state", "host_descriptors", "host_aperture"} <= reserves
    for al in doc["allocations"]:
        if al["kind"] == "parameter" or al.get("sequence", {}).get("of") == "parameter":
            assert al["whole_program"] and al["live"] == [0, len(names) - 1]
        if al["kind"] == "repeat-member":
            assert 0 <= al["sequence"]["member"] < al["sequence"]["count"] > 1
    # Classes are kept as classes: one placement per class, a tile -> class table.
    assert len(doc["classes"]) == max(doc["tile_class"]) + 1
    assert sum(c["tiles"] for c in doc["classes"]) == TILES


def test_no_live_allocations_overlap(planned):
    _, doc = planned
    assert live_overlaps(doc) == []


def test_overlap_checker_rejects_a_corrupted_map(planned):
    _, doc = planned
    bad = copy.deepcopy(doc)
    victims = [al for al in bad["allocations"] if al["kind"] == "transient" and al["placed"]]
    a, b = victims[0], victims[1]
    # Move b onto a on a class both occupy, and make their lifetimes overlap.
    c = a["placed"][0][0]
    pb = next((p for p in b["placed"] if p[0] == c), None)
    if pb is None:
        b["placed"].append([c, a["placed"][0][1], 8, 0, 0])
    else:
        pb[1] = a["placed"][0][1]
    b["live"] = list(a["live"])
    assert live_overlaps(bad), "a transient moved onto another live one must be reported"


def test_reuse_rows_hold_disjoint_address_ranges(planned):
    _, doc = planned
    rows: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for al in doc["allocations"]:
        for c, a, nbytes, pad, row, *_ in al["placed"]:
            rows.setdefault((c, row), []).append((a, a + nbytes + pad))
    for (c, row), spans in rows.items():
        spans.sort()
        assert all(e0 <= a1 for (_, e0), (a1, _) in zip(spans, spans[1:])), f"class {c} row {row}"
        assert row < doc["classes"][c]["rows"]
    occ = np.array(doc["occupancy"])
    assert occ.shape == (len(doc["classes"]), len(doc["events"])) and occ.min() >= 0


def test_report_files_are_self_contained(planned, tmp_path):
    _, doc = planned
    jpath, hpath = write_placement_report(doc, tmp_path)
    assert json.loads(jpath.read_text())["allocations"] == doc["allocations"]
    html = hpath.read_text()
    assert "http://" not in html and "https://" not in html and "<script src" not in html
    assert '"format":"ipu-placement"' in html


def test_failed_placement_writes_the_map_up_to_the_failure(tmp_path):
    spec = PLAN.format(t=TILES) + (
        f',memory-plan{{tiles={TILES} sram_kib=96 reserve-code-bytes=16384 report-dir="{tmp_path}"}}'
    )
    with pytest.raises(PassFailedException) as info:
        _run(spec)
    assert "memory map up to the failure" in str(info.value)
    doc = json.loads((tmp_path / "placement.json").read_text())
    fail = doc["failure"]
    assert 0 <= fail["tile"] < TILES and 0 <= fail["event"] < len(doc["events"]) and fail["request"]
    assert "largest hole" in fail["message"] and "live:" in fail["message"]
    assert (tmp_path / "placement.html").exists()
    # What was placed before the failure is a valid map (the failing request itself is not placed).
    assert live_overlaps(doc) == []
    placed = [al for al in doc["allocations"] if al["placed"]]
    assert any(al["kind"] == "reservation" for al in placed) and any(
        al["kind"] == "parameter" for al in placed
    )


def test_access_tails_are_the_alignment_slack():
    """memory-plan requests no access tails: the map shows the slack from each payload's end to the next 8-byte
    boundary (where no other allocation can start), per placement, and it overlaps nothing live."""
    from ipu.backend.target import Target
    from ipu.passes import memory_alloc as ma
    from ipu.runtime.reports.placement import model_from_problem

    target = Target.small(tiles=2, sram_kib=96)
    bufs = [
        ma.Buffer("a", "op1", first=0, last=2),  # 6 B on tile 0, 16 B on tile 1
        ma.Buffer("b", "op2", first=1, last=3),  # 13 B / 3 B, live with a: placed after it
        ma.Buffer("w", "param", resident=True, count=3),  # a 3-member sequence of 10 B members: stride 16
    ]
    sizes = np.array([[6, 16], [13, 3], [10, 10]], np.int64)
    problem = ma.Problem(target, bufs, sizes, events=4)
    doc = placement_json(model_from_problem(problem, ma.allocate(problem)))
    assert doc["access_tails"]["source"] == "alignment" and doc["access_tails"]["granule"] == 8
    by_name: dict[str, list] = {}
    for al in doc["allocations"]:
        by_name.setdefault(al["name"], []).append(al)
    (a,) = by_name["a"]
    tails = {p[2]: t for p, t in zip(a["placed"], a["tails"])}
    assert tails == {6: 2, 16: 0}
    (b,) = by_name["b"]
    assert sorted(b["tails"]) == [3, 5]
    members = by_name["w"]
    assert len(members) == 3 and all(m["tails"] == [6] * len(m["placed"]) for m in members)
    assert all(p[3] == 6 for m in members[:2] for p in m["placed"])  # stride padding of members 0, 1
    for al in doc["allocations"]:
        for p, t in zip(al["placed"], al.get("tails", [0] * len(al["placed"]))):
            assert (p[1] + p[2] + t) % 8 == 0
    assert live_overlaps(doc, tails=True) == []


def test_tails_of_the_real_plan_overlap_nothing(planned):
    _, doc = planned
    assert doc["access_tails"]["granule"] == 8
    assert live_overlaps(doc, tails=True) == []
    bad = copy.deepcopy(doc)  # a tail reaching into the next live allocation is caught
    al = next(a for a in bad["allocations"] if a["kind"] == "transient" and a["placed"])
    p = al["placed"][0]
    nxt = min(
        (q[1] for o in bad["allocations"] for q in o["placed"] if q[0] == p[0] and q[1] >= p[1] + p[2] and o is not al
         and o["live"][0] <= al["live"][1] and al["live"][0] <= o["live"][1]),
        default=None,
    )  # fmt: skip
    assert nxt is not None
    al["tails"] = [nxt - (p[1] + p[2]) + 8] + [0] * (len(al["placed"]) - 1)
    assert live_overlaps(bad, tails=True) and not live_overlaps(bad)


def _placement_json_scalar(model) -> dict:
    """placement_json as it was written first (one Python step per placement): the reference of the vectorised
    one. Returns the allocations, occupancy and summary it built."""
    import bisect

    nc = int(model.tile_class.max()) + 1 if model.tile_class.size else 0
    n_events = len(model.events)
    allocations, pending = [], []
    occupancy = np.zeros((nc, n_events + 1), np.int64)
    for index, r in enumerate(model.records):
        present = np.nonzero((r.addr >= 0) & (r.member > 0))[0]
        f, last = r.lifetime
        whole = r.kind in ("parameter", "reservation") and f == 0 and last == n_events - 1
        base = {"buffer": index, "name": r.name, "owner": r.owner, "kind": r.kind, "region": r.region,
                "align": r.align, "live": [f, last], "live_ops": [model.events[f], model.events[last]],
                "whole_program": whole, "host": r.host}  # fmt: skip
        if r.reserve:
            base["reserve"] = r.reserve
        for c in present:
            span = int(r.stride[c]) * (r.seq - 1) + int(r.member[c])
            occupancy[c, f] += span
            occupancy[c, last + 1] -= span
        for m in range(r.seq):
            entry = dict(base, id=len(allocations), placed=[])
            if r.seq > 1:
                entry["kind"] = "repeat-member"
                entry["sequence"] = {"count": r.seq, "member": m, "of": r.kind}
            for c in present:
                stride, member = int(r.stride[c]), int(r.member[c])
                a = int(r.addr[c]) + m * stride
                pad = stride - member if m < r.seq - 1 else 0
                p = [int(c), a, member, pad, 0] + ([stride] if r.seq > 1 else [])
                entry["placed"].append(p)
                pending.append((int(c), f, a, a + member + pad, p))
            allocations.append(entry)
    granule = min((r.align for r in model.records), default=8)
    for al in allocations:
        tails = [(-(p[1] + p[2])) % granule for p in al["placed"]]
        if any(tails):
            al["tails"] = tails
    starts = [[] for _ in range(nc)]
    ends = [[] for _ in range(nc)]
    for c, _, a, e, p in sorted(pending, key=lambda x: (x[0], x[1], x[2])):
        for r, (s, t) in enumerate(zip(starts[c], ends[c])):
            i = bisect.bisect_right(s, a)
            if (i == 0 or t[i - 1] <= a) and (i == len(s) or s[i] >= e):
                s.insert(i, a)
                t.insert(i, e)
                p[4] = r
                break
        else:
            starts[c].append([a])
            ends[c].append([e])
            p[4] = len(starts[c]) - 1
    occupancy = np.cumsum(occupancy, axis=1)[:, :n_events]
    return {
        "allocations": allocations,
        "occupancy": occupancy.astype(int).tolist(),
        "placements": len(pending),
    }


@pytest.mark.parametrize("seed", range(6))
def test_placement_json_matches_the_scalar_construction(planned, seed):
    """The vectorised placement_json builds exactly the allocations (placements, reuse rows, tails), occupancy
    and counts of the per-placement construction, on the tiny plan and on random sequences over classes."""
    f, _ = planned
    model = model_from_function(f)
    if seed:
        rng = np.random.default_rng(seed)
        nc = int(model.tile_class.max()) + 1
        for r in model.records:
            if rng.random() < 0.4:
                r.seq = int(rng.integers(2, 6))
                r.member = np.where(rng.random(nc) < 0.8, rng.integers(1, 300, nc), 0).astype(np.int64)
                r.stride = -(-r.member // 8) * 8 + 8 * rng.integers(0, 3, nc)
                r.addr = np.where(r.member > 0, 8 * rng.integers(0, 5000, nc), -1).astype(np.int64)
    doc = placement_json(model)
    want = _placement_json_scalar(model)
    assert json.dumps(doc["allocations"]) == json.dumps(want["allocations"])
    assert doc["occupancy"] == want["occupancy"]
    assert doc["summary"]["placements"] == want["placements"]


def test_budgets_come_from_the_plan_and_show_in_the_html(planned, tmp_path):
    """tile-plan's GEMM budget and the per-tile resident bytes: in placement.json as the function records them
    (tile-balance-homes is not in the fixture's pipeline: the budget only), and in the HTML's header."""
    f, doc = planned
    assert doc["budgets"] == {"gemm_budget": f.attributes["tile.gemm_budget"].value.data}
    assert 0 < doc["budgets"]["gemm_budget"] < doc["sram"]["end"] - doc["sram"]["base"]
    balanced = PLAN.format(t=TILES).replace(
        ",exchange-lower", f",tile-balance-homes{{tiles={TILES}}},exchange-lower"
    )
    module = _run(balanced)
    MemoryPlanPass(tiles=TILES, reserve_code_bytes=16384).apply(Context(), module)
    g = next(o for o in module.walk() if isinstance(o, func.FuncOp))
    d = placement_json(model_from_function(g))
    r = d["budgets"]["resident_bytes"]
    assert r == {k: v.value.data for k, v in g.attributes["tile.resident_bytes"].data.items()}
    assert 0 < r["min"] <= r["median"] <= r["max"]
    _, hpath = write_placement_report(d, tmp_path)
    html = hpath.read_text()
    assert '"gemm_budget":' in html and "resident parameters per tile" in html
