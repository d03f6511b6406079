"""The memory map of the full-size So400m layer (issue 7), measured and pictured. Not a test: run by hand.

    .venv/bin/python -m bench.bench_so400m_map [--out DIR] [--repeats 3] [--screenshots docs] [--no-browser]
                                               [--fallback]

SigLIP So400m/14-384 with one encoder layer + the MAP head (729 tokens, width 1152) on the full 1472-tile IPU21,
through `pipeline_spec(IPU21)` (the pipeline `compile_model` uses, up to and including memory-plan; the asm
lowering does not get through at this size yet, so there is no package and no simulator profile). If memory-plan
fails with the default scratch reservation (`--fallback` forces it), the same spec ends with
`memory-plan{tiles=1472 sram_kib=624 reserve-scratch-bytes=114688 exchange-table-bytes=98304}`
instead (`FALLBACK_MEMORY_PLAN`); the output says which spec ran.

Then `placement.json` / `placement.html` (`write_placement_report`) into --out, and from placement.json:
per-tile peak occupancy (min / median / max over the 1472 tiles), the fullest tile's peak event and the buffers
live there, the headroom (SRAM - peak), `live_overlaps(doc, tails=True)` (must be empty). In headless Chromium
(Debian `chromium` + `chromium-driver`, selenium; the driver of tests/unit/test_reports_browser.py), 3 fresh
browsers: the load event of placement.html, and go-to-tile (tiles - 100) + hover over that tile's attention K
buffer (tooltip shown) + redraw (two animation frames), timed inside the page. With --screenshots DIR:
DIR/placement-so400m.png (whole address range at tile 0, the tooltip of the attention phase's K buffer) and
DIR/placement-so400m-heat.png (the occupancy heat map, cropped, with a tooltip at the peak event).
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import header

PRESET = "so400m-patch14-384"
FALLBACK_MEMORY_PLAN = "tiles=1472 sram_kib=624 reserve-scratch-bytes=114688 exchange-table-bytes=98304"


def build(fallback: bool) -> tuple[object, str, float]:
    """(function after memory-plan, the spec that ran, seconds)."""
    from xdsl.context import Context
    from xdsl.dialects import func
    from xdsl.passes import PassPipeline
    from xdsl.utils.exceptions import PassFailedException

    from ipu.backend.lower.lowering import pipeline_spec
    from ipu.backend.target import IPU21
    from ipu.frontend.siglip import PRESETS, build_vision_model
    from ipu.passes.registry import all_passes

    default = pipeline_spec(IPU21)
    alt = default.rsplit(",memory-plan", 1)[0] + f",memory-plan{{{FALLBACK_MEMORY_PLAN}}}"
    for spec in [alt] if fallback else [default, alt]:
        t0 = time.perf_counter()
        m = build_vision_model(PRESETS[PRESET].with_layers(1))
        try:
            PassPipeline.parse_spec(dict(all_passes()), spec).apply(Context(), m)
        except PassFailedException as e:
            print(f"spec failed: {spec}\n  {str(e).splitlines()[0][:300]}")
            continue
        return next(o for o in m.walk() if isinstance(o, func.FuncOp)), spec, time.perf_counter() - t0
    raise SystemExit("memory-plan failed with both specs")


def analyse(doc: dict, top: int = 12) -> dict:
    """The numbers of docs/reports.md's "So400m memory map", from placement.json alone."""
    occ = np.asarray(doc["occupancy"], np.int64)  # [classes][events]
    tc = np.asarray(doc["tile_class"], np.int64)
    sram = doc["sram"]["end"] - doc["sram"]["base"]
    peak = occ.max(axis=1)[tc]  # per tile
    tile = int(np.argmax(peak))
    c = int(tc[tile])
    event = int(np.argmax(occ[c]))
    live = []
    for al in doc["allocations"]:
        f, last = al["live"]
        if f <= event <= last:
            for p in al["placed"]:
                if p[0] == c:
                    live.append(
                        {
                            "name": al["name"],
                            "owner": al["owner"],
                            "kind": al["kind"] + (f" ({al['reserve']})" if al.get("reserve") else ""),
                            "bytes": p[2] + p[3],
                            "addr": p[1],
                            "live": al["live"],
                        }
                    )
    live.sort(key=lambda x: -x["bytes"])
    by_kind: dict[str, int] = {}
    for x in live:
        k = "reservation" if x["kind"].startswith("reservation") else x["kind"]
        by_kind[k] = by_kind.get(k, 0) + x["bytes"]
    res = {a["name"]: a["placed"][0][2] for a in doc["allocations"] if a["kind"] == "reservation"}
    return {
        "sram": sram,
        "classes": len(doc["classes"]),
        "events": len(doc["events"]),
        "summary": doc["summary"],
        "peak_min": int(peak.min()),
        "peak_median": float(np.median(peak)),
        "peak_max": int(peak.max()),
        "tiles_at_max": int((peak == peak.max()).sum()),
        "fullest_tile": tile,
        "fullest_class": c,
        "class_tiles": doc["classes"][c]["tiles"],
        "peak_event": event,
        "peak_event_name": doc["events"][event],
        "events_at_peak": [int(e) for e in np.nonzero(occ[c] == occ[c, event])[0]],
        "headroom_min": int(sram - peak.max()),
        "headroom_median": float(sram - np.median(peak)),
        "live_at_peak": live[:top],
        "live_count": len(live),
        "by_kind_at_peak": by_kind,
        "reservations": res,
        "planned_peak_max": int(peak.max()) - sum(v for k, v in by_kind.items() if k == "reservation"),
    }


def _driver():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit"))
    from test_reports_browser import chromium_driver

    return chromium_driver(1400, 900)


def _wait_ready(d, report: str = "placementReport", tries: int = 400) -> None:
    """Polls (every 50 ms) until the page's `window.<report>.ready`."""
    for _ in range(tries):
        if d.execute_script(f"return !!(window.{report} && window.{report}.ready)"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"window.{report} did not become ready")


def _kv(doc: dict, tile: int) -> tuple[dict, list]:
    """The K buffer on `tile`'s class: (allocation, placed) of the largest transient the exchange phase before
    the first nn.attention receives (K and V tie; the lower id, the phase's first result, is K)."""
    c = doc["tile_class"][tile]
    att = next(i for i, e in enumerate(doc["events"]) if e == "nn.attention")
    cands = [
        (al, p)
        for al in doc["allocations"]
        if al["owner"] == "exchange.phase" and al["live"][1] == att
        for p in al["placed"]
        if p[0] == c
    ]
    return max(cands, key=lambda ap: (ap[1][2], -ap[0]["id"]))


HOVER_JS = """
const [tile, addr, row, name] = arguments, done = arguments[arguments.length - 1];
const R = window.placementReport, t0 = performance.now();
R.gotoTile(tile);
const map = document.getElementById("map"), r = map.getBoundingClientRect();
const x = r.left + R.addrX(addr), y = r.top + R.rowY(tile, row);
map.dispatchEvent(new MouseEvent("mousemove", {clientX: x, clientY: y, bubbles: true}));
requestAnimationFrame(() => requestAnimationFrame(() => {
  const tip = document.getElementById("tip");
  done([performance.now() - t0, tip.style.display === "block" && tip.textContent.includes(name), tip.textContent]);
}));
"""


def browser_times(html: Path, doc: dict, repeats: int) -> tuple[list[float], list[float], str]:
    tile = doc["tiles"] - 100
    al, p = _kv(doc, tile)
    loads, hovers, tip = [], [], ""
    for _ in range(repeats):
        d = _driver()
        try:
            d.get(html.as_uri())
            _wait_ready(d)
            errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
            assert not errors, errors
            loads.append(
                d.execute_script(
                    "const t = performance.timing; return (t.loadEventEnd || t.domContentLoadedEventEnd) - t.navigationStart"
                )
                / 1e3
            )
            ms, ok, tip = d.execute_async_script(HOVER_JS, tile, p[1] + p[2] / 2, p[4], al["name"])
            assert ok, tip
            hovers.append(ms)
        finally:
            d.quit()
    return loads, hovers, tip


def screenshots(html: Path, doc: dict, out: Path, tile: int, fullest: int) -> list[Path]:
    from selenium.webdriver.common.action_chains import ActionChains

    def at(el, x, y):
        return ActionChains(d).move_to_element_with_offset(
            el, int(x - el.size["width"] / 2), int(y - el.size["height"] / 2)
        )

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "placement-so400m.png", out / "placement-so400m-heat.png"]
    d = _driver()
    try:
        d.get(html.as_uri())
        _wait_ready(d)
        d.execute_script("window.placementReport.gotoTile(arguments[0])", tile)
        al, p = _kv(doc, tile)
        canvas = d.find_element("id", "map")
        x = d.execute_script("return window.placementReport.addrX(arguments[0])", p[1] + p[2] / 2)
        y = d.execute_script("return window.placementReport.rowY(arguments[0], arguments[1])", tile, p[4])
        at(canvas, x, y).perform()
        assert al["name"] in d.find_element("id", "tip").text
        d.save_screenshot(str(paths[0]))
        # The heat map (cropped to it): hover the fullest tile's peak event a third of the way down the tiles
        # (one pixel row of the heat map covers ~13 tiles, so the fullest tile's own row is not hit exactly).
        heat = d.find_element("id", "heat")
        c = doc["tile_class"][fullest]
        e = int(np.argmax(doc["occupancy"][c]))
        at(heat, (e + 0.5) / len(doc["events"]) * heat.size["width"], heat.size["height"] / 3).perform()
        assert f"event {e}: " in d.find_element("id", "tip").text
        r = d.execute_script(
            "const r = document.getElementById('heatwrap').getBoundingClientRect();"
            "return [r.left, r.top, r.width, Math.min(r.height, window.innerHeight - r.top)]"
        )
        shot = d.execute_cdp_cmd(
            "Page.captureScreenshot",
            {"format": "png", "clip": {"x": r[0], "y": r[1], "width": r[2], "height": r[3], "scale": 1}},
        )
        paths[1].write_bytes(base64.b64decode(shot["data"]))
    finally:
        d.quit()
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="directory for placement.json/html (default: a temp dir)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--screenshots", default=None, metavar="DIR", help="write the PNGs into DIR (e.g. docs)")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--fallback", action="store_true", help=f"memory-plan{{{FALLBACK_MEMORY_PLAN}}}")
    args = ap.parse_args()
    from ipu.runtime.reports.placement import (
        live_overlaps,
        model_from_function,
        placement_json,
        write_placement_report,
    )

    print(header())
    f, spec, t_pipe = build(args.fallback)
    print(f"spec: {spec}\npipeline (build + passes) {t_pipe:.1f} s")
    t0 = time.perf_counter()
    doc = placement_json(model_from_function(f))
    t1 = time.perf_counter()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="so400m-map-"))
    jpath, hpath = write_placement_report(doc, out)
    t2 = time.perf_counter()
    bad = live_overlaps(doc, tails=True)
    assert not bad, bad
    a = analyse(doc)
    print(
        f"placement_json {t1 - t0:.2f} s, write {t2 - t1:.2f} s; placement.json {jpath.stat().st_size / 1e6:.2f} MB, "
        f"placement.html {hpath.stat().st_size / 1e6:.2f} MB ({hpath}); live_overlaps(tails=True): none"
    )
    print(
        f"{doc['tiles']} tiles in {a['classes']} classes, {a['events']} events, {a['summary']['allocations']} "
        f"allocations, {a['summary']['placements']} placements {a['summary']['kinds']}"
    )
    print(
        f"per-tile peak: min {a['peak_min']} median {a['peak_median']:.0f} max {a['peak_max']} B of {a['sram']} "
        f"({a['tiles_at_max']} tile(s) at the max); headroom min {a['headroom_min']} B, median "
        f"{a['headroom_median']:.0f} B"
    )
    print(
        f"fullest tile {a['fullest_tile']} (class {a['fullest_class']}, {a['class_tiles']} tiles): peak at event "
        f"{a['peak_event']} ({a['peak_event_name']}), events at the peak {a['events_at_peak']}; "
        f"{a['live_count']} buffers live; by kind {a['by_kind_at_peak']}; without reservations "
        f"{a['planned_peak_max']} B"
    )
    for x in a["live_at_peak"]:
        print(
            f"  {x['bytes']:>7} B  {x['name']:<34} {x['owner']:<36} {x['kind']:<26} at {x['addr']:#x} live {x['live']}"
        )
    print("reservations:", json.dumps(a["reservations"]))
    if not args.no_browser:
        loads, hovers, tip = browser_times(hpath, doc, args.repeats)
        print(
            f"headless Chromium ({args.repeats} fresh browsers): load {', '.join(f'{x:.2f}' for x in loads)} s "
            f"(median {statistics.median(loads):.2f}); go-to-tile {doc['tiles'] - 100} + hover K buffer + redraw "
            f"{', '.join(f'{x:.0f}' for x in hovers)} ms (median {statistics.median(hovers):.0f})"
        )
        print("tooltip:", tip.replace("\n", " | "))
        if args.screenshots:
            for p in screenshots(hpath, doc, Path(args.screenshots), 0, a["fullest_tile"]):
                print("screenshot", p)


if __name__ == "__main__":
    main()
