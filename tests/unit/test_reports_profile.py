"""profile.json from exchange-level estimates (tiny SigLIP on 16 tiles): dense per-tile cycles per step, the
Repeat loop's first iteration in detail plus the rest summed, totals equal to exchange-schedule's module
totals; and the `ipu-report` tool writes both reports (and the map up to a placement failure)."""

from __future__ import annotations

import json

import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.passes import PassPipeline
from xdsl.printer import Printer

from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.passes.registry import all_passes
from ipu.runtime.reports.profile import profile_from_function
from ipu.tools.ipu_report import main

TILES = 16
PIPE = f"nn-fuse-qkv,nn-outline-repeat,tile-plan{{tiles={TILES} sram_kib=624}},"
PIPE += f"exchange-lower{{tiles={TILES} sram_kib=624}},exchange-schedule"


@pytest.fixture(scope="module")
def exchange_level():
    module = build_vision_model(PRESETS["tiny"])
    PassPipeline.parse_spec(dict(all_passes()), PIPE).apply(Context(), module)
    return module


def test_profile_steps_and_totals(exchange_level):
    f = next(o for o in exchange_level.walk() if isinstance(o, func.FuncOp))
    doc = profile_from_function(f)
    assert doc["tiles"] == TILES and doc["source"] == "estimate"
    attrs = exchange_level.attributes
    for kind in ("compute", "exchange", "sync"):
        assert doc["totals"][kind] == attrs[f"exchange.{kind}_cycles"].value.data, kind
    start = 0
    for s in doc["steps"]:
        assert len(s["tile_cycles"]) == TILES and s["start"] == start
        assert max(s["tile_cycles"]) <= s["cycles"] or s["kind"] == "compute"
        start += s["cycles"]
    assert doc["total_cycles"] == start == sum(doc["totals"].values())
    (rep,) = doc["repeats"]
    rest = doc["steps"][rep["rest_step"]]
    body = doc["steps"][rep["first_step"] : rep["last_step"] + 1]
    assert rest["kind"] == "repeat-rest" and rest["iterations"] == rep["count"] - 1
    assert rest["cycles"] == sum(s["cycles"] for s in body) * (rep["count"] - 1)
    assert all(s["repeat"] == rep["id"] for s in body)
    assert sum(k["cycles"] for k in doc["kernels"]) == doc["totals"]["compute"]
    busiest = doc["busiest_tiles"]
    assert busiest[0]["busy"] == max(doc["tile_busy"]) and busiest[0]["busy"] >= busiest[-1]["busy"]


def test_ipu_report_cli(exchange_level, tmp_path):
    src = tmp_path / "model.mlir"
    with src.open("w") as fh:
        Printer(stream=fh).print_op(exchange_level)
    out = tmp_path / "out"
    mp = f"tiles={TILES} sram_kib=624 reserve-code-bytes=16384"
    assert main(["placement", str(src), "-o", str(out), "--memory-plan", mp]) == 0
    assert main(["profile", str(src), "-o", str(out)]) == 0
    for name in ("placement.json", "placement.html", "profile.json", "profile.html"):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "placement.json").read_text())["failure"] is None
    bad = tmp_path / "bad"
    mp = f"tiles={TILES} sram_kib=80 reserve-code-bytes=16384"
    assert main(["placement", str(src), "-o", str(bad), "--memory-plan", mp]) == 1
    assert json.loads((bad / "placement.json").read_text())["failure"]["tile"] >= 0
