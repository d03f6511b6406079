"""profile.json from a simulator run (issue 7): the tiny SigLIP (layer loop) on 16 tiles, profiled with
`Session.run(..., profile=True)`. The measurements are checked against clocks taken independently of the
simulator's `Recorder`: a wrapper around `Simulator._step` (supervisor clocks at the profile sites' PCs) and one
around `semantics.deliver_exchange` (called at each internal sync release, after the clocks are set)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ipu.backend.lower import compile_model
from ipu.backend.target import Target
from ipu.frontend.siglip import PRESETS
from ipu.frontend.weights import random_weights
from ipu.runtime import semantics
from ipu.runtime.derived import with_package_derived
from ipu.runtime.host import Session
from ipu.runtime.reports.profile import write_profile_report
from ipu.runtime.reports.profile_sim import profile_from_run
from ipu.tools.ipu_run import main as ipu_run

TILES = 16


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    cfg = PRESETS["tiny"]
    pkg = compile_model("tiny", Target.small(tiles=TILES, sram_kib=624))
    session = Session(pkg)
    session.upload_parameters({b.name: np.asarray(w) for b, w in _weights(pkg, cfg)})
    x = np.random.default_rng(1).standard_normal((1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    session.run({"pixel_values": x})  # a first run: clocks no longer start at 0
    sim = session.device
    site_pcs = {int(s["pc"]) for s in pkg.metadata["profile_sites"]}
    visits: list[tuple[int, np.ndarray, np.ndarray]] = []  # (pc, tiles, clocks) in order
    releases: list[np.ndarray] = []
    step, deliver = sim._step, semantics.deliver_exchange

    def spy_step(g):
        if g.supervisor and g.pc in site_pcs:
            visits.append((g.pc, g.idx - sim.NW, sim.cycles[g.idx].copy()))
        return step(g)

    def spy_deliver(s, tiles, recv=False):
        if not recv:  # an internal sync's release (a RECV sync ends a phase on each tile at its own clock)
            releases.append(s.cycles[s.NW :].copy())
        return deliver(s, tiles, recv=recv)

    start = sim.cycles[sim.NW :].copy()
    sim._step = spy_step
    semantics.deliver_exchange = spy_deliver
    try:
        result = session.run({"pixel_values": x}, profile=True)
    finally:
        del sim._step
        semantics.deliver_exchange = deliver
    plain = session.run({"pixel_values": x})
    doc = profile_from_run(pkg, result)
    out = tmp_path_factory.mktemp("profile_sim")
    write_profile_report(doc, out)
    return dict(
        pkg=pkg, result=result, plain=plain, doc=doc, visits=visits, releases=releases, start=start, out=out
    )


def _weights(pkg, cfg):
    w = with_package_derived(random_weights(cfg, seed=0), pkg)  # derived parameters too
    return [(b, w[b.name]) for b in pkg.parameters]


def _clocks_at(run, pc: int, visit: int) -> np.ndarray:
    """Every tile's clock at its `visit`-th (0-based) arrival at pc, from the _step spy."""
    out = np.full(TILES, -1, np.int64)
    seen = np.zeros(TILES, np.int64)
    for p, tiles, clocks in run["visits"]:
        if p != pc:
            continue
        for t, c in zip(tiles.tolist(), clocks.tolist()):
            if seen[t] == visit:
                out[t] = c
            seen[t] += 1
    assert (out >= 0).all(), (pc, visit)
    return out


def _frontier(run, clocks: np.ndarray) -> int:
    return int((clocks - run["start"]).max())


def test_supersteps_sum_to_the_run(run):
    doc, result = run["doc"], run["result"]
    assert doc["source"] == "simulator" and doc["tiles"] == TILES
    assert doc["total_cycles"] == result.cycles == run["plain"].cycles  # profiling changes no cycle
    assert sum(s["cycles"] for s in doc["supersteps"]) == result.cycles
    assert sum(s["cycles"] for s in doc["steps"]) == result.cycles
    assert sum(doc["totals"].values()) == result.cycles
    assert doc["run"]["tile_cycles"] == result.run.tile_cycles.tolist()
    for s in doc["supersteps"]:
        assert s["compute"] + s["exchange"] + s["sync"] == s["cycles"]
    assert sum(s["cycles"] for s in doc["ops"]) == result.cycles
    assert sum(k["cycles"] for k in doc["kernels"]) == doc["totals"]["compute"]


def test_superstep_cycles_equal_the_sync_releases(run):
    """A superstep runs from one internal sync release to the next: its cycles are the release clocks' difference
    (taken by the deliver_exchange spy), except the at most two per loop cut by the end of iteration 1 and of the
    loop (the rest of the loop is summed)."""
    doc, rel = run["doc"], run["releases"]
    assert doc["run"]["internal_syncs"] == len(rel) > 20
    for r in rel:
        assert (r == r[0]).all()  # a release sets every tile's clock
    ss = doc["supersteps"]
    rest_at = [i for i, s in enumerate(ss) if s.get("kind") == "repeat-rest"]
    assert len(rest_at) == 1
    near_rest = {rest_at[0] - 1, rest_at[0] + 1}
    checked = 0
    for i, s in enumerate(ss):
        k = s["index"]
        if k is None or k == 0 or k >= len(rel):
            continue
        want = int(rel[k][0] - rel[k - 1][0])
        if i in near_rest:
            assert s["cycles"] <= want
            continue
        assert s["cycles"] == want, (i, k)
        checked += 1
    assert checked > 20  # one internal sync per exchange phase (tiny: 26 phases)
    # Iterations 2..N summed: from the first body site's second visit to the loop's end site.
    sites = run["pkg"].metadata["profile_sites"]
    body = next(s for s in sites if s["role"] == "body")
    end = next(s for s in sites if s["role"] == "end")
    rep = doc["repeats"][0]
    rest = doc["steps"][rep["rest_step"]]
    want = _frontier(run, _clocks_at(run, end["pc"], 0)) - _frontier(run, _clocks_at(run, body["pc"], 1))
    assert rest["kind"] == "repeat-rest" and rest["cycles"] == want
    assert rest["iterations"] == rep["count"] - 1 == 1
    assert sum(rest["by_kind"].values()) == rest["cycles"]
    assert all(st["repeat"] == rep["id"] for st in doc["steps"][rep["first_step"] : rep["last_step"] + 1])


def test_compute_cycles_of_a_superstep_and_a_kernel(run):
    """The first GEMM's step: per-tile cycles from its site to the next site; its superstep's compute cycles:
    the frontier from the superstep's first compute site to its closing exchange.sync site."""
    doc, sites = run["doc"], run["pkg"].metadata["profile_sites"]
    i = next(i for i, s in enumerate(doc["steps"]) if s["name"].startswith("gemm_f16_sup_"))
    step = doc["steps"][i]
    site = step["site"]
    assert sites[site]["kernel"].startswith("gemm_f16_sup_") and sites[site]["repeat"] is None
    a, b = _clocks_at(run, sites[site]["pc"], 0), _clocks_at(run, sites[site + 1]["pc"], 0)
    assert step["tile_cycles"] == (b - a).tolist()
    assert (
        step["cycles"] == _frontier(run, b) - _frontier(run, a) > 0
    )  # (the patch embedding's split GEMM: ~900)
    k = step["superstep"]
    members = [s for s in doc["steps"] if s["superstep"] == k and s["kind"] != "repeat-rest"]
    comp = [s for s in members if s["kind"] == "compute"]
    first, last = comp[0]["site"], comp[-1]["site"]
    assert all(s["kind"] != "compute" for s in members if s["site"] > last or s["site"] < first)
    a = _clocks_at(run, sites[first]["pc"], 0)
    b = _clocks_at(run, sites[last + 1]["pc"], 0)
    (entry,) = [s for s in doc["supersteps"] if s["index"] == k]
    assert entry["compute"] == _frontier(run, b) - _frontier(run, a) == sum(s["cycles"] for s in comp)


def test_recording_is_off_by_default(run):
    assert run["plain"].trace is None
    assert run["result"].trace is not None


def test_ipu_run_profile_writes_the_reports(tmp_path, capsys):
    out, pkg = tmp_path / "prof", tmp_path / "tiny.ipupkg"
    assert ipu_run(["--model", "siglip-tiny", "--tiles", "16", "--profile", str(out), "-o", str(pkg)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((out / "profile.json").read_text())
    cycles = int(printed.split("inference 1: ")[1].split(" cycles")[0])
    assert doc["source"] == "simulator" and doc["total_cycles"] == cycles
    assert sum(s["cycles"] for s in doc["supersteps"]) == cycles
    html = (out / "profile.html").read_text()
    assert '"source":"simulator"' in html and "<script" in html
    # A saved package keeps its profile sites: profiling it gives the same profile.
    assert ipu_run([str(pkg), "--profile", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "profile.json").read_text())
    assert again["steps"] == doc["steps"] and again["supersteps"] == doc["supersteps"]


def test_label_sites_names_every_site_of_main():
    from ipu.backend.lower.sites import label_sites

    lines = [
        "    sync TEXCH_SYNCZONE_INTERNAL  // exchange.sync",
        "    setzi $m0, 0x70000  // exchange rounds (3)",
        "    call $lr, xch_timed",
        "    setzi $m0, 0x70068  // nn.linear (x): GEMM",
        "    ld32 $m1, $m0, $mzero, 0",
        "    brz $m1, .Lskip0",
        "    add $m0, $m0, 8",
        "    call $lr, gemm_f16_sup_ld64",
        ".Lskip0:",
        "    setzi $m0, 0x70318  // tile.repeat x4",
        "    setzi $m1, 3",
        "    st32 $m1, $m0, $mzero, 0",
        ".Lrep0:",
        "    setzi $m0, 0x70408  // nn.gelu (g): rows",
        "    add $m0, $m0, 8",
        "    call $lr, rows_sup",
        "    setzi $m0, 0x70318  // tile.repeat: next iteration",
        "    ld32 $m1, $m0, $mzero, 0",
        "    brz $m1, .Lrep0_end",
        "    call $lr, rep_patch",
        "    bri .Lrep0",
        ".Lrep0_end:",
        "    ld32 $m0, $m0, $mzero, 2",
        "    call $lr, rep_patch  // back to iteration 0 for the next run",
    ]
    sites = label_sites(lines)
    got = [(s["kind"], s["kernel"], s["op"], s["repeat"], s["role"]) for s in sites]
    assert got == [
        ("sync", "sync", "exchange.sync", None, None),
        ("exchange", "xch_timed", "exchange.phase", None, None),
        ("compute", "gemm_f16_sup_ld64", "nn.linear (x)", None, None),
        ("compute", "main", "tile.repeat", 0, "setup"),
        ("compute", "rows_sup", "nn.gelu (g)", 0, "body"),
        ("compute", "rep_patch", "tile.repeat", 0, "next"),
        ("compute", "rep_patch", "tile.repeat", 0, "end"),
        ("compute", "main", "main", None, None),
    ]
    labels = [line[:-1] for line in lines if line.startswith(".Lsite")]
    assert labels == [s["label"] for s in sites]
    # each label sits right before its site's first line (the end site's after .Lrep0_end:)
    assert lines[lines.index(".Lsite3:") + 1].endswith("// tile.repeat x4")
    assert lines[lines.index(".Lsite6:") - 1] == ".Lrep0_end:" and lines[-1] == ".Lsite7:"


def test_recorder_rejects_tiles_that_pass_different_marks():
    from ipu.runtime.errors import SimError
    from ipu.runtime.simulator import Recorder

    rec = Recorder(3, [0x100, 0x200, 0x300])
    t = np.arange(3)
    rec.mark(t, -1, Recorder.START, np.array([0, 0, 0]))
    rec.mark(t, 0x100, Recorder.PROBE, np.array([5, 6, 7]))
    rec.mark(t[:2], 0x200, Recorder.PROBE, np.array([9, 9]))
    rec.mark(t[2:], 0x200, Recorder.PROBE, np.array([11]))
    rec.mark(t, -1, Recorder.END, np.array([20, 21, 22]))
    tr = rec.trace()
    assert tr.clock.tolist() == [[0, 0, 0], [5, 6, 7], [9, 9, 11], [20, 21, 22]]
    assert tr.pc.tolist() == [-1, 0x100, 0x200, -1] and tr.kind.tolist() == [0, 1, 1, 4]
    rec.reset()
    rec.mark(t, -1, Recorder.START, np.array([0, 0, 0]))
    rec.mark(t[:2], 0x200, Recorder.PROBE, np.array([9, 9]))
    rec.mark(t[2:], 0x300, Recorder.PROBE, np.array([11]))  # tile 2 took another path
    with pytest.raises(SimError, match="different profile marks at event 1"):
        rec.trace()
    rec.reset()
    rec.mark(t, -1, Recorder.START, np.array([0, 0, 0]))
    rec.mark(t[:2], 0x200, Recorder.PROBE, np.array([9, 9]))  # tile 2 never gets there
    with pytest.raises(SimError, match="different numbers of events"):
        rec.trace()


def test_sites_name_the_operators(run):
    """Call sites carry the operator they lower: linears and layer norms by their weight parameter, `layer ` for
    the loop body's; exchange sites are `exchange.phase`."""
    sites, doc = run["pkg"].metadata["profile_sites"], run["doc"]
    by_op = {}
    for s in sites:
        by_op.setdefault(s["op"], []).append(s)
    for name in ("layer nn.linear q_proj", "layer nn.linear mlp_fc2", "layer nn.layer_norm layer_norm1"):
        assert all(s["repeat"] == 0 and s["role"] == "body" for s in by_op[name]), name
    assert any(s["kernel"].startswith("gemm_f16_sup_") for s in by_op["layer nn.linear q_proj"])
    assert any(
        s["kernel"].startswith("gemm_f16_sup_")
        for s in by_op["nn.linear_partials embeddings.patch_embedding"]
    )
    assert all(s["repeat"] is None for s in by_op["nn.linear_partials embeddings.patch_embedding"])
    assert {s["kernel"] for s in by_op["exchange.phase"]} >= {"xch_timed", "copy_sup"}
    # An exchange.sync before a phase is the timed exchange's opening sync: counted in the exchange.phase.
    assert {o["name"] for o in doc["ops"]} >= {"layer nn.linear q_proj", "exchange.phase"}


def test_merged_rounds_keep_totals_and_supersteps(run):
    doc = run["doc"]
    merged = profile_from_run(run["pkg"], run["result"], merge_rounds=True)
    assert merged["total_cycles"] == doc["total_cycles"] and merged["totals"] == doc["totals"]
    assert merged["supersteps"] == [
        {k: v for k, v in s.items() if k not in ("first_step", "last_step")} | {k: merged_s[k] for k in ("first_step", "last_step")}
        for s, merged_s in zip(doc["supersteps"], merged["supersteps"])
    ]  # fmt: skip

    # Only the exchange routine's steps merge (each call: one exchange and one sync step), and they were many.
    def xch(steps):
        return sum(1 for s in steps if s.get("kernel") == "xch_timed")

    assert len(merged["steps"]) - xch(merged["steps"]) == len(doc["steps"]) - xch(doc["steps"])
    # a call: its entry, the opening sync, the rows (to each tile's RECV sync) -> one exchange and one sync step
    assert (
        xch(merged["steps"])
        == 2 * sum(1 for s in doc["steps"] if s.get("kernel") == "xch_timed" and s["kind"] == "sync")
        < xch(doc["steps"])
    )
    xs = [s for s in merged["steps"] if s.get("kernel") == "xch_timed" and s["kind"] == "sync"]
    n_rounds = sum(s["rounds"] for s in xs)
    assert n_rounds == sum(1 for s in doc["steps"] if s.get("kernel") == "xch_timed" and s["kind"] == "sync")
    assert sum(s["cycles"] for s in merged["steps"]) == doc["total_cycles"]
    assert merged["tile_busy"] == doc["tile_busy"]


def test_trace_json_matches_the_profile(run):
    """profile.trace.json (Chrome trace / Perfetto) beside profile.html: its slices against the profile and the
    simulator's own end clocks."""
    doc, trace = run["doc"], json.loads((run["out"] / "profile.trace.json").read_text())
    per_us = trace["otherData"]["cycles_per_us"]
    assert per_us == run["pkg"].target.clock_hz / 1e6
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    names = {
        (e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"
    }
    track = {v: k for k, v in names.items()}
    steps = [e for e in slices if (e["pid"], e["tid"]) == track["steps"]]
    assert len(steps) == len(doc["steps"])
    total = doc["total_cycles"]
    assert sum(e["args"]["cycles"] for e in steps) == total == run["result"].cycles
    end = 0
    for e, s in zip(steps, doc["steps"], strict=True):
        assert e["args"]["start"] == s["start"] == end and e["name"] == s["label"] and e["cat"] == s["kind"]
        assert e["ts"] * per_us == pytest.approx(s["start"]) and e["dur"] * per_us == pytest.approx(
            s["cycles"]
        )
        end += s["cycles"]
    # Exchange steps name what they move.
    xch = [e for e in steps if e["args"].get("kernel") == "xch_timed"]
    assert xch and all(
        e["args"]["bytes"] > 0 and e["args"]["senders"] and e["args"]["receivers"] for e in xch
    )
    assert all(max(b for _, _, b in e["args"]["largest"]) <= e["args"]["bytes"] for e in xch)
    # Layers: one slice per iteration; the first is the first iteration's steps, the rest the measured rest.
    (loop,) = doc["repeats"]
    layers = [e for e in slices if (e["pid"], e["tid"]) == track["layers (tile.repeat iterations)"]]
    assert [e["args"]["layer"] for e in layers] == list(range(1, loop["count"] + 1))
    body = doc["steps"][loop["first_step"] : loop["last_step"] + 1]
    rest = doc["steps"][loop["rest_step"]]
    assert layers[0]["args"]["cycles"] == sum(s["cycles"] for s in body)
    assert layers[0]["args"]["start"] == body[0]["start"]
    assert sum(e["args"]["cycles"] for e in layers[1:]) == rest["cycles"]
    assert layers[1]["args"]["start"] == rest["start"]
    assert all(e["args"].get("layer") == 1 for e in steps[loop["first_step"] : loop["last_step"] + 1])
    # Tiles: one track each (16 <= MAX_TILE_TRACKS); a tile's slices follow its own clock without overlapping
    # and end at its elapsed cycles as the simulator counted them.
    elapsed = run["result"].run.tile_cycles
    for t in range(TILES):
        mine = sorted(
            (e for e in slices if (e["pid"], e["tid"]) == track[f"tile {t}"]), key=lambda e: e["ts"]
        )
        at = 0
        for e in mine:
            assert e["args"]["start"] == at
            at += e["args"]["cycles"]
        assert at == elapsed[t] <= total


def test_profile_compares_with_the_estimate(run):
    doc = run["doc"]
    est = doc["estimate"]
    assert est == run["pkg"].metadata["estimate"]
    assert est["total_cycles"] > 0 and sum(est["totals"].values()) == est["total_cycles"]
    assert len(est["repeats"][0]["iterations"]) == doc["repeats"][0]["count"]
    html = (run["out"] / "profile.html").read_text()
    assert 'id="estbox"' in html and 'id="layers"' in html and "x the estimate" in html


def test_tile_classes_group_equal_tiles():
    from ipu.runtime.reports.trace import tile_classes

    tc = np.zeros((3, 100), np.int64)
    tc[0, :50] = 5  # tiles 0..49 alike, 50..99 alike but idle; tile 7 the busiest
    tc[1, 7] = 9
    classes = tile_classes(tc, limit=64)
    assert classes[0] == [7] and classes[1] == [t for t in range(50) if t != 7]
    assert classes[2] == list(range(50, 100)) and len(classes) == 3
    assert tile_classes(tc[:, :10], limit=64) == [[t] for t in range(10)]
    assert len(tile_classes(np.arange(300).reshape(3, 100), limit=8)) == 8
