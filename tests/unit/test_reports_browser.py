"""The HTML reports in headless Chromium (selenium + chromedriver): hover shows the allocation and its lifetime,
drag on the map and on the ruler zooms (the shown range changes), right-click / Undo undoes a zoom, tile and
address navigation, highlighting one allocation across tiles, reset; the profile's hover, zoom, busiest-tile
navigation and reset. Skipped when selenium, chromium or chromedriver are absent (CI installs them:
`apt-get install -y chromium chromium-driver`, selenium from the test extra)."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.passes import PassPipeline

from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.passes.registry import all_passes
from ipu.runtime.derived import with_package_derived
from ipu.runtime.reports.placement import model_from_function, placement_json, write_placement_report
from ipu.runtime.reports.profile import profile_from_function, write_profile_report

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (test extra)")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs chromium and chromedriver (apt-get install chromium chromium-driver)",
)

TILES = 16
PIPE = f"nn-fuse-qkv,nn-outline-repeat,tile-plan{{tiles={TILES} sram_kib=624}},"
PIPE += f"exchange-lower{{tiles={TILES} sram_kib=624}},exchange-schedule"


def chromium_driver(width: int = 1400, height: int = 900):
    """Headless Chromium with a fresh profile and nothing talking to the network."""
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tempfile.mkdtemp(prefix='ipu-report-chromium-')}",
        f"--window-size={width},{height}",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    module = build_vision_model(PRESETS["tiny"])
    PassPipeline.parse_spec(dict(all_passes()), PIPE).apply(Context(), module)
    f = next(o for o in module.walk() if isinstance(o, func.FuncOp))
    out = tmp_path_factory.mktemp("reports")
    profile = profile_from_function(f)
    write_profile_report(profile, out)
    PassPipeline.parse_spec(
        dict(all_passes()), f"memory-plan{{tiles={TILES} sram_kib=624 reserve-code-bytes=16384}}"
    ).apply(Context(), module)
    doc = placement_json(model_from_function(f))
    write_placement_report(doc, out)
    return out, doc, profile


@pytest.fixture(scope="module")
def driver():
    d = chromium_driver()
    yield d
    d.quit()


def _load(driver, path, name):
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(path.as_uri())
    WebDriverWait(driver, 20).until(
        lambda d: d.execute_script(f"return !!(window.{name} && window.{name}.ready)")
    )
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def _at(driver, element, x, y):
    """ActionChains offsets are from the element's centre; x, y are from its top-left corner."""
    from selenium.webdriver.common.action_chains import ActionChains

    return ActionChains(driver).move_to_element_with_offset(
        element, int(x - element.size["width"] / 2), int(y - element.size["height"] / 2)
    )


def _text(driver, element_id):
    return driver.find_element("id", element_id).text


def test_placement_report_interactions(reports, driver):
    from selenium.webdriver.common.action_chains import ActionChains

    out, doc, _ = reports
    _load(driver, out / "placement.html", "placementReport")
    state = lambda: driver.execute_script("return window.placementReport.state()")  # noqa: E731
    full = (doc["sram"]["base"], doc["sram"]["end"])
    assert (state()["lo"], state()["hi"]) == full
    assert "range 0x4c000" in _text(driver, "range")

    # A transient on tile 0 (main row or a reuse row), and a parameter there.
    c0 = doc["tile_class"][0]
    transient = max(
        (
            (al, p)
            for al in doc["allocations"]
            if al["kind"] == "transient"
            for p in al["placed"]
            if p[0] == c0
        ),
        key=lambda ap: ap[1][2],
    )
    al, (c, addr, nbytes, pad, row, *_) = transient

    # Zoom: drag on the map around the allocation; the ruler range follows.
    canvas = driver.find_element("id", "map")

    def x(a):
        return driver.execute_script("return window.placementReport.addrX(arguments[0])", a)

    def y(t, r):
        return driver.execute_script("return window.placementReport.rowY(arguments[0], arguments[1])", t, r)

    lo, hi = addr - 4 * nbytes, addr + 5 * nbytes
    _at(driver, canvas, x(lo), y(0, row)).click_and_hold().move_by_offset(
        int(x(hi) - x(lo)), 0
    ).release().perform()
    s = state()
    assert s["zoomDepth"] == 1 and s["lo"] <= addr and s["hi"] >= addr + nbytes
    assert s["hi"] - s["lo"] < (full[1] - full[0]) / 4
    assert _text(driver, "range").startswith(f"range {hex(int(s['lo']))}")

    # Hover: the tooltip names the allocation, its address and lifetime.
    _at(driver, canvas, x(addr + nbytes / 2), y(0, row)).perform()
    tip = _text(driver, "tip")
    assert al["name"] in tip and al["owner"] in tip and f"{hex(addr)}" in tip
    assert f"live events {al['live'][0]}\u2013{al['live'][1]}" in tip and al["live_ops"][0] in tip

    # Click pins and highlights the allocation across tiles.
    _at(driver, canvas, x(addr + nbytes / 2), y(0, row)).click().perform()
    assert state()["pinned"] == al["id"]
    n_tiles = sum(doc["classes"][p[0]]["tiles"] for p in al["placed"])
    assert f"highlighted {al['name']}" in _text(driver, "highlight-info")
    assert f"on {n_tiles} tiles" in _text(driver, "highlight-info")

    # Ruler drag zooms further; right-click undoes one zoom, the Undo button the other.
    ruler = driver.find_element("id", "ruler")
    before = state()
    _at(driver, ruler, x(addr), 13).click_and_hold().move_by_offset(
        int(x(addr + nbytes) - x(addr)), 0
    ).release().perform()
    s = state()
    assert s["zoomDepth"] == 2 and s["hi"] - s["lo"] < before["hi"] - before["lo"]
    ActionChains(driver).context_click(canvas).perform()
    assert state()["zoomDepth"] == 1 and state()["lo"] == before["lo"]
    driver.find_element("id", "undo").click()
    assert (state()["lo"], state()["hi"]) == full

    # Escape cancels a drag: no zoom.
    chain = _at(driver, canvas, x(full[0] + 4096), y(0, 0)).click_and_hold().move_by_offset(200, 0)
    chain.perform()
    ActionChains(driver).send_keys("\ue00c").perform()  # Escape
    ActionChains(driver).release().perform()
    assert state()["zoomDepth"] == 0

    # Navigation: tile and address.
    box = driver.find_element("id", "tile-input")
    box.clear()
    box.send_keys(str(TILES - 3))
    driver.find_element("id", "tile-go").click()
    assert state()["firstTile"] == TILES - 3
    assert f"tile {TILES - 3}" in _text(driver, "status")
    box = driver.find_element("id", "addr-input")
    box.clear()
    box.send_keys("0x70000")
    driver.find_element("id", "addr-go").click()
    s = state()
    assert s["marker"] == 0x70000 and s["lo"] <= 0x70000 < s["hi"]

    # A parameter's lifetime reads "whole program".
    param = next(
        a for a in doc["allocations"] if a["kind"] == "parameter" and any(p[0] == c0 for p in a["placed"])
    )
    p = next(p for p in param["placed"] if p[0] == c0)
    driver.execute_script("window.placementReport.gotoTile(0)")
    _at(driver, canvas, x(p[1] + p[2] / 2), y(0, p[4])).perform()
    assert "whole program" in _text(driver, "tip") and param["name"] in _text(driver, "tip")

    # Reset: full range, no zoom history, no highlight, back at tile 0.
    driver.find_element("id", "reset").click()
    s = state()
    assert (s["lo"], s["hi"], s["zoomDepth"], s["pinned"], s["firstTile"]) == (*full, 0, -1, 0)
    assert _text(driver, "highlight-info") == ""


def test_profile_report_interactions(reports, driver):
    from selenium.webdriver.common.action_chains import ActionChains

    out, _, profile = reports
    _load(driver, out / "profile.html", "profileReport")
    state = lambda: driver.execute_script("return window.profileReport.state()")  # noqa: E731
    total = profile["total_cycles"]
    assert (state()["lo"], state()["hi"]) == (0, total)
    timeline = driver.find_element("id", "timeline")
    # Hover the longest step: the tooltip shows its label and cycles.
    i = max(range(len(profile["steps"])), key=lambda k: profile["steps"][k]["cycles"])
    step = profile["steps"][i]
    sx = driver.execute_script("return window.profileReport.stepX(arguments[0])", i)
    _at(driver, timeline, sx, 53).perform()
    tip = _text(driver, "tip")
    assert f"step {i} " in tip and step["label"] in tip and f"cycles {step['cycles']}" in tip
    # Drag zoom on the timeline; the range text follows; right-click undoes.
    _at(driver, timeline, 100, 53).click_and_hold().move_by_offset(150, 0).release().perform()
    s = state()
    assert s["zoomDepth"] == 1 and 0 < s["hi"] - s["lo"] < total
    assert _text(driver, "range").startswith(f"cycles {round(s['lo'])} ")
    ActionChains(driver).context_click(timeline).perform()
    assert state()["zoomDepth"] == 0 and state()["hi"] == total
    # Busiest tile: click navigates the per-tile view there.
    top = profile["busiest_tiles"][0]["tile"]
    driver.find_element("css selector", f'#busiest tr[data-tile="{top}"]').click()
    assert state()["flashTile"] == top and f"tile {top}: busy" in _text(driver, "status")
    # Per-tile hover names the tile and a step.
    tiles = driver.find_element("id", "tiles")
    ty = driver.execute_script("return window.profileReport.tileY(arguments[0])", top)
    _at(driver, tiles, sx, ty).perform()
    assert f"tile {top}" in _text(driver, "tip")
    # A step in the virtualised list zooms the timeline to it.
    row = driver.find_elements("css selector", "#steplist .row")[1]
    row.click()
    s = state()
    assert s["selStep"] == 1 and s["zoomDepth"] == 1
    driver.find_element("id", "reset").click()
    s = state()
    assert (s["lo"], s["hi"], s["zoomDepth"], s["flashTile"]) == (0, total, 0, -1)


@pytest.fixture(scope="module")
def sim_profile(tmp_path_factory):
    """profile.json/html of a real run: the tiny SigLIP (layer loop) on 16 simulated tiles."""
    import numpy as np

    from ipu.backend.lower import compile_model
    from ipu.backend.target import Target
    from ipu.frontend.weights import random_weights
    from ipu.runtime.host import Session
    from ipu.runtime.reports.profile_sim import profile_from_run

    cfg = PRESETS["tiny"]
    pkg = compile_model("tiny", Target.small(tiles=TILES, sram_kib=624))
    w = random_weights(cfg, seed=0)
    session = Session(pkg)
    w = with_package_derived(w, pkg)  # the package's derived parameters too
    session.upload_parameters({b.name: np.asarray(w[b.name]) for b in pkg.parameters})
    x = np.random.default_rng(1).standard_normal((1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    result = session.run({"pixel_values": x}, profile=True)
    doc = profile_from_run(pkg, result)
    out = tmp_path_factory.mktemp("sim_profile")
    write_profile_report(doc, out)
    write_placement_report(pkg.metadata["memory_map"], out)  # the map the package carries
    return out, doc, result.cycles


def test_simulator_profile_report(sim_profile, driver):
    """The profile of a real simulator run loads; its summary, superstep lane, operator table and the measured
    rest of the layer loop show the run's numbers."""
    out, doc, cycles = sim_profile
    _load(driver, out / "profile.html", "profileReport")
    state = lambda: driver.execute_script("return window.profileReport.state()")  # noqa: E731
    assert (state()["lo"], state()["hi"]) == (0, cycles)
    summary = _text(driver, "summary")
    assert "source: simulator (measured" in summary and f"; {cycles} cycles" in summary
    assert f"{doc['run']['internal_syncs']} internal syncs" in summary
    ops = driver.find_element("id", "ops").text
    assert doc["ops"][0]["name"] in ops and str(doc["ops"][0]["cycles"]) in ops
    timeline = driver.find_element("id", "timeline")
    # The superstep lane: hover the longest detailed superstep.
    ss = doc["supersteps"]
    j = max((k for k in range(len(ss)) if ss[k]["index"] is not None), key=lambda k: ss[k]["cycles"])
    x = driver.execute_script("return window.profileReport.ssX(arguments[0])", j)
    _at(driver, timeline, x, 80).perform()
    tip = _text(driver, "tip")
    assert f"superstep {ss[j]['index']}" in tip and f"cycles {ss[j]['cycles']} " in tip
    assert f"compute {ss[j]['compute']}, exchange {ss[j]['exchange']}, sync {ss[j]['sync']}" in tip
    # The measured rest of the loop.
    rest = doc["repeats"][0]["rest_step"]
    x = driver.execute_script("return window.profileReport.stepX(arguments[0])", rest)
    _at(driver, timeline, x, 53).perform()
    tip = _text(driver, "tip")
    by = doc["steps"][rest]["by_kind"]
    assert (
        "(measured, summed)" in tip and f"measured: compute {by['compute']}, exchange {by['exchange']}" in tip
    )


def test_placement_access_tail_hover(driver, tmp_path):
    """A payload with an alignment tail: the map draws it and the hover names it (memory-plan requests no tails;
    the map shows the alignment slack)."""
    import numpy as np

    from ipu.backend.target import Target
    from ipu.passes import memory_alloc as ma
    from ipu.runtime.reports.placement import model_from_problem

    target = Target.small(tiles=2, sram_kib=96)
    bufs = [ma.Buffer("a", "op1", first=0, last=2), ma.Buffer("b", "op2", first=1, last=3)]
    problem = ma.Problem(target, bufs, np.array([[6, 16], [13, 3]], np.int64), events=4)
    doc = placement_json(model_from_problem(problem, ma.allocate(problem)))
    write_placement_report(doc, tmp_path)
    _load(driver, tmp_path / "placement.html", "placementReport")
    a = next(al for al in doc["allocations"] if al["name"] == "a")
    k = next(k for k, p in enumerate(a["placed"]) if p[0] == doc["tile_class"][0])
    _, addr, nbytes, _, row = a["placed"][k][:5]
    assert a["tails"][k] == 2
    driver.execute_script("window.placementReport.zoomTo(arguments[0], arguments[1])", addr - 8, addr + 24)
    canvas = driver.find_element("id", "map")
    x = driver.execute_script("return window.placementReport.addrX(arguments[0])", addr + nbytes + 1)
    y = driver.execute_script("return window.placementReport.rowY(0, arguments[0])", row)
    _at(driver, canvas, x, y).perform()
    tip = _text(driver, "tip")
    assert "a  op1" in tip and "access tail 2 B (alignment slack to 8 B" in tip
    assert "(pointer is on the access tail)" in tip


def test_simulator_profile_layers_exchange_and_estimate(sim_profile, driver):
    """The per-layer table (each iteration measured, the estimate beside it; a click zooms to the layer), the
    estimate-vs-measurement box, and an exchange step's tooltip naming its bytes and endpoints."""
    out, doc, cycles = sim_profile
    _load(driver, out / "profile.html", "profileReport")
    state = lambda: driver.execute_script("return window.profileReport.state()")  # noqa: E731
    loop = doc["repeats"][0]
    its, est = loop["iterations"], doc["estimate"]
    rows = driver.find_elements("css selector", "#layers tr.click")
    assert len(rows) == loop["count"] == len(its)
    for row, it, e in zip(rows, its, est["repeats"][0]["iterations"], strict=True):
        cells = [c.text for c in row.find_elements("tag name", "td")]
        assert cells[1] == str(it["cycles"]) and cells[6] == str(e) and cells[7] == f"{it['cycles'] / e:.2f}x"
    rows[1].click()
    s = state()
    assert s["zoomDepth"] == 1 and (s["lo"], s["hi"]) == (its[1]["start"], its[1]["start"] + its[1]["cycles"])
    text = _text(driver, "estimate")
    assert f"estimate (ipu-report profile) is {est['total_cycles']} cycles; measured {cycles}" in text
    assert f"{cycles / est['total_cycles']:.2f}x the estimate" in text
    driver.find_element("id", "reset").click()
    # The longest exchange step: zoom to it, hover it.
    i = max((s["index"] for s in doc["steps"] if "senders" in s), key=lambda k: doc["steps"][k]["cycles"])
    step = doc["steps"][i]
    driver.execute_script("window.profileReport.gotoTile(0)")
    x = driver.execute_script("return window.profileReport.stepX(arguments[0])", i)
    _at(driver, driver.find_element("id", "timeline"), x, 53).perform()
    tip = _text(driver, "tip")
    assert f"{step['bytes']} B" in tip and f"tiles {step['senders']} -> {step['receivers']}" in tip
    assert f"send tile {step['largest'][0][0]} -> {step['largest'][0][1]}: {step['largest'][0][2]} B" in tip


def test_memory_map_live_at_a_step(sim_profile, driver):
    """placement.html's "Live at a program step": opens on the fullest tile at its peak; a row of the fullest
    table and a click on the liveness plot pick a tile and a step; the live table lists what the JSON says is
    live there."""
    out, _, _ = sim_profile
    import json

    doc = json.loads((out / "placement.json").read_text())
    _load(driver, out / "placement.html", "placementReport")
    live = lambda: driver.execute_script("return window.placementReport.live.state()")  # noqa: E731

    def expected(tile, event):
        c = doc["tile_class"][tile]
        return sum(1 for al in doc["allocations"] if al["live"][0] <= event <= al["live"][1] for p in al["placed"]
                   if p[0] == c)  # fmt: skip

    top = doc["fullest"][0]
    assert live() == {"tile": top["first_tile"], "event": top["peak_event"], "live": top["live"]}
    assert f"{top['peak_bytes']} B live in {top['live']} allocations" in _text(driver, "live-info")
    rows = driver.find_elements("css selector", "#fullest tr.click")
    assert len(rows) == len(doc["fullest"])
    rows[-1].click()
    f = doc["fullest"][-1]
    assert live() == {"tile": f["first_tile"], "event": f["peak_event"], "live": f["live"]}
    table = driver.find_elements("css selector", "#live-table tr")
    assert len(table) - 1 == min(200, f["live"]) and f["holders"][0]["name"] in table[1].text
    # Click a third of the way along the liveness plot: that step.
    plot = driver.find_element("id", "liveplot")
    _at(driver, plot, plot.size["width"] / 3, plot.size["height"] / 2).click().perform()
    state = live()
    n = len(doc["events"])
    assert abs(state["event"] - n // 3) <= 1 and state["tile"] == f["first_tile"]
    assert state["live"] == expected(state["tile"], state["event"])
    occupancy = doc["occupancy"][doc["tile_class"][state["tile"]]][state["event"]]
    assert f"{occupancy} B live" in _text(driver, "live-info")
