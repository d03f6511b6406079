"""Exchange in the profile (issue 21, item 4): every exchange phase's summary (what it moves: bytes, per tensor
by IR name, source and destination tiles, the busiest receiver and sender) is in the package once, checked here
against the placed IR's transfer tables (recomputed row by row in plain Python, not with the summary's numpy) and
the IR's printed names; `ipu-run --model siglip-tiny --tiles 16 --profile DIR` puts it in profile.json with the
phase's measured cycles, and profile.html shows it on hover and in the table of the heaviest phases (headless
Chromium when available)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from xdsl.dialects import func

from ipu.backend.lower import compile_model
from ipu.backend.lower.sites import RANGES_LIMIT, _ranges, exchange_phases
from ipu.backend.target import Target
from ipu.dialects import exchange as ex
from ipu.frontend.siglip import PRESETS, build_vision_model
from ipu.runtime.package import Package
from ipu.runtime.reports.profile_sim import _split_details
from ipu.tools.ipu_run import main as ipu_run

TILES = 16


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The tiny SigLIP compiled from its nn IR (the placed IR kept) and the same model through ipu-run --profile."""
    out = tmp_path_factory.mktemp("xch_profile")
    module = build_vision_model(PRESETS["tiny"])
    pkg = compile_model(module, Target.small(tiles=TILES, sram_kib=624))
    prof, path = out / "prof", out / "tiny.ipupkg"
    assert (
        ipu_run(["--model", "siglip-tiny", "--tiles", str(TILES), "--profile", str(prof), "-o", str(path)])
        == 0
    )
    run_pkg = Package.load(path)
    f = next(o for o in module.walk() if isinstance(o, func.FuncOp))
    return dict(
        module=module,
        f=f,
        pkg=pkg,
        run_pkg=run_pkg,
        doc=json.loads((prof / "profile.json").read_text()),
        html=(prof / "profile.html").read_text(),
        out=prof,
    )


def _phases_of(f) -> list[ex.PhaseOp]:
    return [o for o in f.walk() if isinstance(o, ex.PhaseOp)]


def _expected(op: ex.PhaseOp) -> dict:
    """A phase's summary recomputed from its tables, row by row."""
    sends = op.send_table().tolist()
    recvs = op.recv_table().tolist()
    copies = op.copy_table().tolist()
    sent: dict[int, int] = {}
    got: dict[int, int] = {}
    n_sent: dict[int, int] = {}
    n_got: dict[int, int] = {}
    w_out: dict[int, int] = {}
    w_in: dict[int, int] = {}
    buf = [dict(bytes=0, received=0, copied=0, sends=0) for _ in op.operands]
    for tile, b, _, nbytes, _ in sends:
        sent[tile] = sent.get(tile, 0) + nbytes
        n_sent[tile] = n_sent.get(tile, 0) + 1
        w_out[tile] = w_out.get(tile, 0) + -(-nbytes // 4)
        buf[b]["bytes"] += nbytes
        buf[b]["sends"] += 1
    for tile, b, _, send, _ in recvs:
        nbytes = sends[send][3]
        got[tile] = got.get(tile, 0) + nbytes
        n_got[tile] = n_got.get(tile, 0) + 1
        w_in[tile] = w_in.get(tile, 0) + -(-nbytes // 4)
        buf[b]["received"] += nbytes
    for _tile, b, _, _, nbytes in copies:
        buf[b]["copied"] += nbytes

    def busiest(by: dict[int, int], n: dict[int, int]):
        if not by:
            return None
        t = min(by, key=lambda k: (-by[k], k))
        return [t, by[t], n[t]]

    return dict(
        bytes=sum(r[3] for r in sends),
        received=sum(sends[r[3]][3] for r in recvs),
        copied=sum(r[4] for r in copies),
        transfers=len(sends),
        receives=len(recvs),
        copies=len(copies),
        src_tiles=len(sent),
        dst_tiles=len(got),
        busiest_receiver=busiest(got, n_got),
        busiest_sender=busiest(sent, n_sent),
        port_words=max([0, *w_out.values(), *w_in.values()]),
        schedule_cycles=op.cycles.value.data,
        buffers=buf,
    )


def test_the_run_lowers_the_same_program(tiny):
    """ipu-run's package is the one compiled here from the IR (so the IR below is the profiled program's)."""
    a, b = tiny["pkg"], tiny["run_pkg"]
    assert np.array_equal(np.asarray(a.code), np.asarray(b.code))
    assert a.metadata["exchange_phases"] == b.metadata["exchange_phases"]


def test_phase_summaries_match_the_ir(tiny):
    """Every phase with code has one summary; its bytes are the sum of its transfers, per tensor too; its tile
    counts and busiest receiver and sender are those of its tables."""
    phases, ops = tiny["pkg"].metadata["exchange_phases"], _phases_of(tiny["f"])
    with_code = [k for k, op in enumerate(ops) if len(op.send_table()) or len(op.copy_table())]
    assert sorted(p["ir"] for p in phases) == with_code and len(phases) > 10
    assert [p["index"] for p in phases] == list(range(len(phases)))
    checked_multicast = 0
    for p in phases:
        want = _expected(ops[p["ir"]])
        per = want.pop("buffers")
        assert {k: p[k] for k in want} == want, p["phase"]
        assert [{k: t[k] for k in ("bytes", "received", "copied", "sends")} for t in p["tensors"]] == per
        assert sum(t["bytes"] for t in p["tensors"]) == p["bytes"]
        assert sum(t["received"] for t in p["tensors"]) == p["received"] >= p["bytes"]
        checked_multicast += p["received"] > p["bytes"]
        # The rounds are the lowering's: its site says how many.
        rounds = [
            s["what"] for s in tiny["pkg"].metadata["profile_sites"] if s.get("phase_index") == p["index"]
        ]
        assert any(w == f"exchange timed ({p['rounds']} rounds)" for w in rounds) or p["rounds"] == 0
    assert checked_multicast  # the tiny model has multicasts (received > sent)


def test_tensor_names_are_the_printed_irs(tiny):
    """The tensors' names are those xDSL prints for the placed IR: the k-th `exchange.phase` line of the printed
    module defines the phase's results from its sources by exactly these names."""
    text = str(tiny["module"])
    pat = re.compile(r"^\s*(%[\w.$-]+(?:, %[\w.$-]+)*) = exchange\.phase ((?:%[\w.$-]+(?:, )?)+)")
    printed = [m.groups() for m in map(pat.match, text.splitlines()) if m]
    assert len(printed) == len(_phases_of(tiny["f"]))
    for p in tiny["pkg"].metadata["exchange_phases"]:
        results, sources = printed[p["ir"]]
        assert [t["to"] for t in p["tensors"]] == results.split(", "), p["phase"]
        assert [t["name"] for t in p["tensors"]] == sources.rstrip(", ").split(", "), p["phase"]
        assert p["phase"] == "exchange.phase " + results.split(", ")[0]
        assert p["values"] == [f"{t['name']} -> {t['to']}" for t in p["tensors"]]
    assert any(
        t["of"].startswith("layer nn.linear")
        for p in tiny["pkg"].metadata["exchange_phases"]
        for t in p["tensors"]
    )


def test_tensors_name_their_producer_and_consumer(tiny):
    """`of` names the operator that defines the tensor and `for` the first that reads the result, as the printed
    IR says (through other phases: `... via exchange`)."""
    lines = str(tiny["module"]).splitlines()

    def op_at(line: str) -> str:
        body = line.split(" = ", 1)[1] if re.match(r"^\s*%[^=]* = ", line) else line
        return body.split()[0].strip('"')

    def ref(name: str) -> re.Pattern:
        return re.compile(re.escape(name) + r"(?![\w$.-])")

    checked = 0
    for p in tiny["pkg"].metadata["exchange_phases"]:
        for t in p["tensors"]:
            define = next((i for i, line in enumerate(lines) if re.match(r"^\s*(%[^=]*) = ", line)
                           and ref(t["to"]).search(line.split(" = ", 1)[0])), None)  # fmt: skip
            assert define is not None, t
            user = next(
                i for i in range(define + 1, len(lines)) if ref(t["to"]).search(lines[i].split(" = ", 1)[-1])
            )
            op = op_at(lines[user])
            if op == "exchange.phase":
                assert t["for"].endswith(" via exchange"), t
            else:
                assert op in t["for"] and not t["for"].endswith(" via exchange"), (t, lines[user][:120])
                checked += 1
            src = next((line for line in lines if re.match(r"^\s*(%[^=]*) = ", line)
                        and ref(t["name"]).search(line.split(" = ", 1)[0])), None)  # fmt: skip
            if src is None:  # a block argument (the function's, the layer loop's)
                assert t["of"].startswith("an argument of "), t
            elif op_at(src) == "exchange.phase":
                assert t["of"].endswith(" via exchange"), t
            else:
                assert op_at(src) in t["of"], (t, src[:120])
    assert checked > 20


def test_the_package_holds_each_phase_once_and_small(tiny):
    meta = tiny["pkg"].metadata
    sites, phases = meta["profile_sites"], meta["exchange_phases"]
    assert not any("detail" in s for s in sites)
    for k, p in enumerate(phases):
        assert p["sites"] and all(sites[i]["phase_index"] == k for i in p["sites"])
        assert all(sites[i]["op"] == "exchange.phase" for i in p["sites"])
        assert len(p["senders"]) <= RANGES_LIMIT + 20 and len(p["receivers"]) <= RANGES_LIMIT + 20
        assert len(json.dumps(p)) < 400 + 200 * len(p["tensors"]) + 3 * 3 * RANGES_LIMIT
    assert {i for s in sites if s["op"] == "exchange.phase" for i in [sites.index(s)]} == {
        i for p in phases for i in p["sites"]
    }


def test_ranges_stay_short_at_full_size():
    every_other = range(0, 1472, 2)
    text = _ranges(every_other, RANGES_LIMIT)
    assert len(text) <= RANGES_LIMIT + 20 and text.endswith(",... (736 tiles)") and text.startswith("0,2,4,")
    assert _ranges(range(1472), RANGES_LIMIT) == "0-1471"
    assert _ranges([3, 1, 2, 7], RANGES_LIMIT) == "1-3,7"


def test_exchange_phases_dedupes_sites_of_one_phase():
    a, b = {"phase": "exchange.phase %1", "bytes": 8}, {"phase": "exchange.phase %1", "bytes": 8}
    sites = [{"op": "exchange.phase", "detail": a}, {"op": "exchange.phase", "detail": a}, {"op": "x"},
             {"op": "exchange.phase", "detail": b}]  # fmt: skip
    phases = exchange_phases(sites)
    assert [p["sites"] for p in phases] == [[0, 1], [3]] and [p["index"] for p in phases] == [0, 1]
    assert [s.get("phase_index") for s in sites] == [0, 0, None, 1] and not any("detail" in s for s in sites)
    # An older package's sites (a detail per site): read as the same phases.
    old = [{"op": "exchange.phase", "detail": dict(a)}, {"op": "exchange.phase", "detail": dict(a)}, {"op": "x"},
           {"op": "exchange.phase", "detail": dict(b)}]  # fmt: skip
    new_sites, new_phases = _split_details(old)
    assert new_phases == phases and [s.get("phase_index") for s in new_sites] == [0, 0, None, 1]


def test_profile_measures_each_phase(tiny):
    """profile.json's exchange_phases: the package's summary with the phase's measured cycles. A phase outside
    the layer loop runs once: its cycles are its steps'; one in the loop runs once per layer; all phases
    together are the run's `exchange.phase` operator cycles."""
    doc, phases = tiny["doc"], tiny["run_pkg"].metadata["exchange_phases"]
    got = doc["exchange_phases"]
    measured = ("visits", "cycles", "compute", "exchange", "sync", "cycles_per_visit", "bytes_per_cycle",
                "received_per_cycle", "first_step", "steps")  # fmt: skip
    assert [{k: v for k, v in p.items() if k not in measured} for p in got] == phases
    loop = doc["repeats"][0]["count"]
    steps = doc["steps"]
    for p in got:
        mine = [s for s in steps if s.get("phase_index") == p["index"]]
        assert p["steps"] == len(mine) > 0 and steps[p["first_step"]] is mine[0]
        assert p["compute"] + p["exchange"] + p["sync"] == p["cycles"] > 0
        assert all(s["bytes"] == p["bytes"] and s["phase"] == p["phase"] for s in mine)
        if mine[0]["repeat"] is None:
            assert p["visits"] == 1 and p["cycles"] == sum(s["cycles"] for s in mine)
        else:
            assert p["visits"] == loop and p["cycles"] > sum(s["cycles"] for s in mine)
        assert p["bytes_per_cycle"] == pytest.approx(p["bytes"] * p["visits"] / p["cycles"], abs=1e-3)
        assert p["cycles_per_visit"] == pytest.approx(p["cycles"] / p["visits"], abs=0.1)
        if p["rounds"]:
            assert p["exchange"] > 0 and p["sync"] > 0  # the rounds' sends and their internal syncs
    (op,) = [o for o in doc["ops"] if o["name"] == "exchange.phase"]
    assert sum(p["cycles"] for p in got) == op["cycles"]
    for kind in ("compute", "exchange", "sync"):
        assert sum(p[kind] for p in got) == op[kind]
    # profiling and the summaries change no cycle: an unprofiled run of the same package takes as many
    from ipu.frontend.siglip import PRESETS
    from ipu.frontend.weights import random_weights
    from ipu.runtime.host import Session

    cfg = PRESETS["tiny"]
    s = Session(tiny["run_pkg"])
    s.upload_parameters(random_weights(cfg, 0))
    x = np.random.default_rng(1).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    assert doc["total_cycles"] == s.run({"pixel_values": x}).cycles


def test_trace_slices_carry_the_phase(tiny):
    trace = json.loads((tiny["out"] / "profile.trace.json").read_text())
    got = {p["index"]: p for p in tiny["doc"]["exchange_phases"]}
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X" and "phase_index" in e.get("args", {})]
    assert xs
    for e in xs:
        p, a = got[e["args"]["phase_index"]], e["args"]["exchange_phase"]
        assert a["tensors"] == p["tensors"] and a["busiest_receiver"] == p["busiest_receiver"]
        assert a["bytes_per_cycle"] == p["bytes_per_cycle"]


def test_html_holds_the_summaries(tiny):
    """profile.html embeds the measured summaries (the page builds its tooltips and table from them)."""
    html = tiny["html"]
    start = html.index('<script id="data" type="application/json">') + len(
        '<script id="data" type="application/json">'
    )
    data = json.loads(html[start : html.index("</script>", start)])
    assert data["exchange_phases"] == tiny["doc"]["exchange_phases"]
    assert 'id="xphases"' in html and "function phaseLines(p)" in html


# -- in the browser ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver():
    browser = pytest.importorskip("test_reports_browser", reason="the browser tests' helpers")
    if not (browser.CHROMIUM and browser.CHROMEDRIVER):
        pytest.skip("needs chromium and chromedriver (apt-get install chromium chromium-driver)")
    d = browser.chromium_driver()
    yield d
    d.quit()


def _js(x) -> str:
    """A JSON number as JavaScript prints it (4706.0 -> 4706, 1.265 -> 1.265)."""
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _phase_text(p: dict) -> list[str]:
    """Lines the page must show for a phase (as a person reads them)."""
    br, bs = p["busiest_receiver"], p["busiest_sender"]
    lines = [
        f"{p['phase']} (exchange phase {p['index']} of ",
        f"moves {p['bytes']} B sent, {p['received']} B received",
        f"{p['src_tiles']} source tiles -> {p['dst_tiles']} destination tiles",
        f"measured: {p['cycles']} cycles in {p['visits']} visit",
        f"{_js(p['bytes_per_cycle'])} B/cycle sent",
    ]
    if br:
        lines.append(f"busiest receiver tile {br[0]}: {br[1]} B in {br[2]} receives")
    if bs:
        lines.append(f"busiest sender tile {bs[0]}: {bs[1]} B in {bs[2]} sends")
    for t in p["tensors"]:
        lines.append(
            f"{t['name']} -> {t['to']} ({t['of']}, for {t['for']}): {t['bytes']} B sent, {t['received']} B received"
        )
    return lines


def test_html_table_and_hover_show_the_phases(tiny, driver):
    """The table of the heaviest exchange phases (by measured cycles) with bytes, cycles per visit, bytes per
    cycle and tensors, each row's title the phase's summary; a click zooms to the phase and hovering its bar on
    the timeline shows the summary in the tooltip; the step list's rows carry it as their title."""
    from test_reports_browser import _at, _load, _text

    doc = tiny["doc"]
    _load(driver, tiny["out"] / "profile.html", "profileReport")
    heavy = sorted(doc["exchange_phases"], key=lambda p: (-p["cycles"], -p["bytes"]))[:20]
    rows = driver.find_elements("css selector", "#xphases tr.click")
    assert len(rows) == len(heavy)
    for row, p in zip(rows, heavy, strict=True):
        cells = [c.text for c in row.find_elements("tag name", "td")]
        assert cells[:8] == [p["phase"], " ".join(t["name"] for t in p["tensors"]), str(p["visits"]), str(p["bytes"]),
                             str(p["received"]), _js(p["cycles_per_visit"]), _js(p["bytes_per_cycle"]),
                             str(p["rounds"])]  # fmt: skip
        title = row.get_attribute("title")
        for line in _phase_text(p):
            assert line in title, (line, title)
    # Click the heaviest: the view zooms to its first step; hover that step's bar.
    p = heavy[0]
    rows[0].click()
    assert driver.execute_script("return window.profileReport.state()")["selStep"] == p["first_step"]
    x = driver.execute_script("return window.profileReport.stepX(arguments[0])", p["first_step"])
    _at(driver, driver.find_element("id", "timeline"), x, 53).perform()
    tip = _text(driver, "tip")
    for line in _phase_text(p):
        assert line in tip, (line, tip)
    # The step list: the phase's first step's row names the phase in its title.
    driver.find_element("id", "reset").click()
    driver.execute_script(
        "document.getElementById('steplist').scrollTop = arguments[0] * 18", max(0, p["first_step"] - 2)
    )
    from selenium.webdriver.support.ui import WebDriverWait

    def shown(d):
        titles = d.execute_script("return [...document.querySelectorAll('#steplist .row')].map(r => r.title)")
        return any(all(line in t for line in _phase_text(p)) for t in titles)

    WebDriverWait(driver, 10).until(shown)  # the list renders its rows on the scroll event
