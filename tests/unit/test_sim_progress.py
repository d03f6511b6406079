"""Issue 23: the progress line of long simulator runs (`ipu.runtime.progress`): simulated cycles, rate and, with
an expected total, an ETA, written to a terminal only."""

from __future__ import annotations

import io

import numpy as np

from ipu.backend.target import Target
from ipu.runtime import examples as ex
from ipu.runtime.progress import Progress
from ipu.runtime.simulator import Simulator

T = Target.small(tiles=2, sram_kib=624)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _sim(groups: int = 60) -> Simulator:
    rng = np.random.default_rng(0)
    lay = ex.BENCH_LAYOUT
    w = rng.standard_normal((T.num_tiles, 16, 16)).astype(np.float16)
    x = rng.standard_normal((T.num_tiles, 6, groups, 16)).astype(np.float16)
    p = rng.standard_normal((T.num_tiles, 6, groups, 16)).astype(np.float16)
    sim = Simulator(T)
    sim.load(ex.amp_program(T, lay=lay))
    ex.amp_setup(sim, groups, w.view(np.uint8).reshape(T.num_tiles, -1), x.view(np.uint8), p, lay=lay)
    return sim


def test_progress_on_a_terminal_shows_cycles_rate_and_eta():
    sim = _sim()
    plain = sim.run("main")
    term = Terminal()
    sim.progress = Progress(term, expected_cycles=plain.max_cycles, interval=0.0, label="run 2")
    again = sim.run("main")
    out = term.getvalue()
    lines = [s for s in out.split("\r\x1b[K") if s]
    assert lines, out
    assert all(s.startswith("run 2: ") and "cycles simulated in" in s and "cycles/s" in s for s in lines)
    assert all("ETA" in s and f"of {plain.max_cycles / 1e3:.2f} kcycles" in s for s in lines)
    assert out.endswith("\r\x1b[K")  # the line is cleared at the end
    np.testing.assert_array_equal(again.tile_cycles, plain.tile_cycles)  # progress changes nothing


def test_progress_without_total_has_no_eta_and_off_a_terminal_writes_nothing():
    sim = _sim()
    term = Terminal()
    sim.progress = Progress(term, interval=0.0)
    sim.run("main")
    assert "cycles simulated" in term.getvalue() and "ETA" not in term.getvalue()
    pipe = io.StringIO()
    sim.progress = Progress(pipe, interval=0.0)
    assert not sim.progress.enabled
    sim.run("main")
    assert pipe.getvalue() == ""


def test_line_format():
    p = Progress(Terminal(), expected_cycles=2_000_000)
    assert p.line(500_000, 10.0) == (
        "sim: 500.00 kcycles simulated in 10s (50.00 kcycles/s), 25% of 2.00 Mcycles, ETA 30s"
    )
