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


def test_line_with_the_compilers_estimate():
    p = Progress(Terminal(), expected_cycles=2_000_000, estimated=True)
    assert p.line(500_000, 10.0) == (
        "sim: 500.00 kcycles simulated in 10s (50.00 kcycles/s), ~25% of the compiler's estimate of "
        "2.00 Mcycles, ETA ~30s"
    )
    assert p.line(2_500_000, 10.0) == (
        "sim: 2.50 Mcycles simulated in 10s (250.00 kcycles/s), past the compiler's estimate of 2.00 Mcycles"
    )


def test_session_eta_from_the_estimate_then_the_previous_inference(monkeypatch):
    """A Session's first inference takes its total from the package's estimate (metadata "estimate"), the next
    from the first's cycles; off a terminal nothing is written, and without progress no Progress is set."""
    from ipu.backend.lower import compile_model
    from ipu.frontend.siglip import PRESETS
    from ipu.frontend.weights import random_weights
    from ipu.runtime import progress as progress_mod
    from ipu.runtime.host import Session

    cfg = PRESETS["tiny"].with_layers(1)
    pkg = compile_model(cfg, Target.small(tiles=8, sram_kib=624))
    estimate = pkg.metadata["estimate"]["total_cycles"]
    made = []

    class Recording(Progress):
        def __init__(self, *args, **kwargs):
            super().__init__(Terminal(), *args, **kwargs)
            made.append(self)

    monkeypatch.setattr(progress_mod, "Progress", Recording)
    session = Session(pkg, progress=True)
    session.upload_parameters(random_weights(cfg, seed=0))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, cfg.image_size, cfg.image_size)).astype(np.float32)
    first = session.run({"pixel_values": x})
    session.run({"pixel_values": x})
    assert [(p.expected_cycles, p.estimated) for p in made] == [
        (estimate, True),
        (first.run.max_cycles, False),
    ]
    assert session.device.progress is None
    quiet = Session(pkg)  # ipu-run --quiet
    quiet.upload_parameters(random_weights(cfg, seed=0))
    quiet.run({"pixel_values": x})
    assert len(made) == 2
