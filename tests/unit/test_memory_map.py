"""The memory map in time: what is live on each tile at each program step, the fullest tiles, buffers named by
their IR values; `ipu-run --memory-map`, `ipu-report placement PACKAGE`, and IR without placement refused."""

import json

import pytest
from xdsl.context import Context

import ipu
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.passes.compile_pipeline import IpuCompilePipelinePass
from ipu.runtime.reports.placement import live_overlaps
from ipu.tools.ipu_report import main as ipu_report
from ipu.tools.ipu_run import main as ipu_run


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    path = tmp_path_factory.mktemp("mm") / "tiny.ipupkg"
    ipu.compile("siglip-tiny", tiles=16).save(path)
    return path


def _live(doc, c, e):
    return [
        (al, p)
        for al in doc["allocations"]
        if al["live"][0] <= e <= al["live"][1]
        for p in al["placed"]
        if p[0] == c
    ]


def test_package_memory_map_in_time(package, tmp_path, capsys):
    assert ipu_report(["placement", str(package), "-o", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "placement.json").read_text())
    assert "Live at a program step" in (tmp_path / "placement.html").read_text()
    assert doc["tiles"] == 16 and not live_overlaps(doc)
    kinds = doc["summary"]["kinds"]
    assert kinds.get("transient", 0) > 0 and kinds.get("parameter", 0) + kinds.get("repeat-member", 0) > 0
    # Every buffer is named by its IR value or its operator, none `%?`.
    assert all(al["name"] and "%?" not in al["name"] for al in doc["allocations"])
    # Liveness: the occupancy of each class at each step is the sum of what is live there.
    for c in range(len(doc["classes"])):
        for e in range(0, len(doc["events"]), 7):
            assert doc["occupancy"][c][e] == sum(p[2] + p[3] for _, p in _live(doc, c, e))
    # The fullest tiles: highest peaks first, each with what holds it at its peak.
    fullest = doc["fullest"]
    peaks = [c["peak_bytes"] for c in doc["classes"]]
    assert fullest[0]["peak_bytes"] == max(peaks) == max(max(row) for row in doc["occupancy"])
    assert [f["peak_bytes"] for f in fullest] == sorted((f["peak_bytes"] for f in fullest), reverse=True)
    for f in fullest:
        live = _live(doc, f["class"], f["peak_event"])
        assert f["live"] == len(live) and sum(p[2] + p[3] for _, p in live) == f["peak_bytes"]
        sizes = [h["bytes"] for h in f["holders"]]
        assert sizes == sorted(sizes, reverse=True) and sizes[0] == max(p[2] + p[3] for _, p in live)
        assert doc["tile_class"][f["first_tile"]] == f["class"]


def test_placed_ir_gives_the_packages_map(package, tmp_path):
    module = build_vision_model(PRESETS["tiny"])
    IpuCompilePipelinePass(tiles=16).apply(Context(), module)
    placed = tmp_path / "placed.mlir"
    placed.write_text(str(module))
    assert ipu_report(["placement", str(placed), "-o", str(tmp_path / "ir")]) == 0
    assert ipu_report(["placement", str(package), "-o", str(tmp_path / "pkg")]) == 0
    from_ir = json.loads((tmp_path / "ir" / "placement.json").read_text())
    from_pkg = json.loads((tmp_path / "pkg" / "placement.json").read_text())
    # The package's map adds what the lowering put inside the reservations (the IR does not know it).
    assert from_pkg.pop("contents") and from_ir == from_pkg


def test_ir_without_placement_is_an_error(tmp_path, capsys):
    nn_ir = tmp_path / "model.mlir"
    nn_ir.write_text(str(build_vision_model(PRESETS["tiny"])))
    assert ipu_report(["placement", str(nn_ir), "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "has no placement: it is not exchange-level IR" in err and "ipu-compile-pipeline" in err
    assert not (tmp_path / "out" / "placement.html").exists()


def test_ipu_run_memory_map(package, tmp_path, capsys):
    assert ipu_run([str(package), "--memory-map", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "placement.json").read_text())
    top = doc["fullest"][0]
    assert f"fullest: tile {top['first_tile']}" in out and f"{top['peak_bytes']} B live" in out
